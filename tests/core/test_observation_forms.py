"""Observation forms are declared once (name, shape, bounds) and every consumer reads that.

Random worlds are stepped with random actions and every observation value must lie inside
the declared bounds, which must also be tight enough to mean something (the one-hot id
reaches 1, relative offsets are negative somewhere).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typing

import cube_jax
from cube_jax.core import observations
from cube_jax.rl import config as rl_config

FORMS = observations.OBSERVATION_FORM_NAMES
ENVS, STEPS = 16, 40


def test_one_declaration_feeds_make_the_rl_config_and_the_errors():
    assert FORMS == tuple(form.name for form in cube_jax.OBSERVATION_FORMS) == ("vector", "egocentric", "egocentric_noid", "grid")
    assert set(typing.get_args(rl_config.ObservationForm)) == set(FORMS)
    with pytest.raises(ValueError, match=r"observation: .*'pixels'.*vector"):
        cube_jax.make("easy", observation="pixels")
    with pytest.raises(ValueError, match="observation: unknown form 'pixels'"):
        observations.observation_form("pixels")


def _random_rollout(env):
    def one(key):
        state, ts = env.reset(key)

        def body(state, key):
            actions = jax.random.randint(key, (env.num_agents,), 0, 5)
            state, ts = env.step(state, actions)
            return state, ts.observation

        _, obs = jax.lax.scan(body, state, jax.random.split(key, STEPS))
        return jnp.concatenate([ts.observation[None], obs])

    return np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(7), ENVS)))


@pytest.mark.parametrize("form", FORMS)
def test_observations_stay_inside_their_declared_bounds(form):
    # "easy" (3 agents) is the world the other suites compile most; n = 2 draws fresh layouts
    for env in (cube_jax.make("easy", observation=form), cube_jax.make(n=2, observation=form)):
        low, high = env.observation_bounds
        assert low.dtype == high.dtype == np.float32
        assert low.shape == high.shape == tuple(env.observation_shape[1:]) == env.observation_form.features(env.cfg)
        assert np.all(low <= high)
        obs = _random_rollout(env)  # [E, T, N, *F]
        assert obs.shape[2:] == tuple(env.observation_shape)
        below, above = obs < low, obs > high
        assert not below.any() and not above.any(), (
            f"{form}: {int(below.sum())} values below and {int(above.sum())} above the bounds; "
            f"first at {np.argwhere(below | above)[0].tolist()}")
        assert (obs == high).any(), f"{form}: no value reaches an upper bound"


def test_vector_bounds_are_tight_where_they_say():
    env = cube_jax.make(n=2)
    low, high = env.observation_bounds
    obs = _random_rollout(env).reshape(-1, low.shape[0])
    relative = low < 0
    assert relative.sum() == 2 * env.num_blocks + 2 * env.num_agents
    assert (obs[:, relative] < 0).any(axis=0).all(), "some relative offset is never negative"


def test_grid_bounds_follow_the_heaviest_block():
    sc = cube_jax.Scenario(grid_size=8, agents=[(1, 1), (5, 1)], blocks=[(1, 2, 3), (5, 2, 1)])
    env = cube_jax.make(scenario=sc, observation="grid")
    low, high = env.observation_bounds
    assert high.shape == (8, 8, 6)
    np.testing.assert_array_equal(high[0, 0], [1, 3, 1, 2, 2, 1])
    assert not low.any()
    # without a world's heaviest weight the bound is the largest a block can be on the grid
    _, widest = env.observation_form.bounds(env.cfg)
    assert widest[0, 0, 1] == 7


@pytest.mark.parametrize("form", FORMS)
def test_pettingzoo_spaces_carry_the_declared_bounds(form):
    env = cube_jax.parallel_env("easy", observation=form)
    low, high = env.world.observation_bounds
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(12):
        for agent, value in obs.items():
            space = env.observation_space(agent)
            np.testing.assert_array_equal(space.low, low)
            np.testing.assert_array_equal(space.high, high)
            assert np.isfinite(space.high).all()
            assert space.contains(value), f"{form}: {agent}'s observation is outside its space"
        obs, *_ = env.step({agent: int(rng.integers(0, 5)) for agent in env.agents})
    state = env.state()
    assert env.state_space.contains(state)
