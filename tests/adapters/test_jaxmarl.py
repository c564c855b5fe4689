"""The JaxMARL adapter: JaxMARL's interface (dicts, ``__all__``, spaces, auto-reset in
``step``), transitions equal to the core's step bit for bit, the training layouts of a
task, JaxMARL's own ``LogWrapper`` under ``jit``/``vmap``, and the JaxMARL-shaped IPPO of
``baselines/jaxmarl_ippo.py`` for two updates.

Worlds are kept to a few compiled shapes: "easy", the n2 task with the trainer's pool, and
one one-agent scenario delivered in a single push; an episode's last step is reached by
setting the step counter of a state.
"""
from __future__ import annotations

import doctest
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("jaxmarl")  # the jaxmarl extra (in dev) installs it

from jaxmarl.environments import spaces  # noqa: E402
from jaxmarl.environments.multi_agent_env import MultiAgentEnv  # noqa: E402
from jaxmarl.wrappers.baselines import LogWrapper  # noqa: E402

import cube_jax  # noqa: E402
import cube_jax.adapters.jaxmarl as adapter  # noqa: E402
from cube_jax.adapters.jaxmarl import CubeJaxMARL, make_jaxmarl  # noqa: E402
from cube_jax.core import suite  # noqa: E402
from cube_jax.core.layouts import CurriculumLayouts, PoolLayouts  # noqa: E402
from cube_jax.core.testsets import test_layouts_in  # noqa: E402
from cube_jax.core.types import RIGHT, STAY  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
INFO_KEYS = {"terminated", "truncated", "engaged", "moved", "blocks_delivered", "delivered_weight"}
# One agent behind one weight-1 block next to the goal column: RIGHT delivers it.
ONE_PUSH = cube_jax.Scenario(grid_size=8, agents=[(3, 5)], blocks=[(3, 6, 1)], max_steps=20, name="one-push")


@pytest.fixture(scope="module")
def easy() -> CubeJaxMARL:
    return make_jaxmarl("easy")


@pytest.fixture(scope="module")
def n2() -> CubeJaxMARL:
    return make_jaxmarl("n2")


def same(a, b) -> bool:
    """Every leaf of two pytrees equal, bit for bit (and of one dtype)."""
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    return tree_a == tree_b and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(leaves_a, leaves_b))


def stay(env) -> dict:
    return {a: jnp.int32(STAY) for a in env.agents}


# --- the interface ---------------------------------------------------------------------------------


def test_a_task_is_a_jaxmarl_env_with_its_agents_spaces_and_name(easy):
    assert isinstance(easy, MultiAgentEnv)
    assert easy.agents == ["agent_0", "agent_1"] and easy.num_agents == 2
    assert easy.name == "cube-v1-easy" and easy.task is suite.task("easy") and easy.max_steps == 100
    obs_space, act_space = easy.observation_space("agent_0"), easy.action_space("agent_1")
    assert isinstance(obs_space, spaces.Box) and obs_space.shape == (24,) and obs_space.dtype == jnp.float32
    assert isinstance(act_space, spaces.Discrete) and act_space.n == 5
    assert easy.observation_space("agent_1") is obs_space and easy.action_space("agent_0") is act_space
    assert easy.agent_classes == {"agent": ["agent_0", "agent_1"]}


def test_reset_and_step_return_jaxmarls_dicts(easy):
    obs, state = easy.reset(jax.random.PRNGKey(0))
    assert set(obs) == {"agent_0", "agent_1"}
    for a in easy.agents:
        assert obs[a].shape == (24,) and obs[a].dtype == jnp.float32
        assert bool(easy.observation_space(a).contains(obs[a]))
    actions = {"agent_0": jnp.int32(RIGHT), "agent_1": jnp.int32(STAY)}
    obs, state, rewards, dones, infos = easy.step(jax.random.PRNGKey(1), state, actions)
    assert set(obs) == set(rewards) == {"agent_0", "agent_1"}
    assert set(dones) == {"agent_0", "agent_1", "__all__"}
    for a in easy.agents:
        assert rewards[a].shape == () and rewards[a].dtype == jnp.float32
        assert float(rewards[a]) == pytest.approx(-0.01)  # the step cost, nothing delivered
    assert all(d.shape == () and d.dtype == jnp.bool_ and not bool(d) for d in dones.values())
    assert set(infos) == INFO_KEYS
    assert all(v.shape == (2,) for v in infos.values())
    assert infos["moved"].tolist() == [True, False]  # agent_0 stepped right, agent_1 stayed
    assert int(state.t) == 1
    avail = easy.get_avail_actions(state)
    assert set(avail) == {"agent_0", "agent_1"} and avail["agent_0"].tolist() == [True] * 5


def test_a_missing_agent_in_the_actions_is_named(easy):
    _, state = easy.reset(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"no entry for \['agent_1'\]"):
        easy.step(jax.random.PRNGKey(1), state, {"agent_0": jnp.int32(0)})


def test_the_module_doctest_runs():
    assert doctest.testmod(adapter).failed == 0


@pytest.mark.parametrize("name", suite.TASK_NAMES)
def test_every_task_of_the_suite_builds_with_its_team_and_episode_length(name):
    t = suite.task(name)
    env = make_jaxmarl(name, pool_size=None if t.fixed_layout else 0)  # no pool here: see the n2 tests
    assert env.num_agents == t.num_agents and env.agents == [f"agent_{i}" for i in range(t.num_agents)]
    assert env.max_steps == t.max_steps and env.name == f"cube-v1-{name}"
    assert env.observation_space("agent_0").shape == env.world.observation_shape[1:]


# --- the training layouts of a task -----------------------------------------------------------------


def test_a_drawn_task_resets_from_the_rl_trainers_pool_and_never_to_a_test_layout(n2):
    from cube_jax.bench.training import world_overrides
    from cube_jax.rl.config import build, env_kwargs

    trainer_world = cube_jax.make(**env_kwargs(build("ippo", overrides=world_overrides(suite.task("n2")))))
    pool = n2.world.generator
    assert isinstance(pool, PoolLayouts) and pool.size == adapter.TRAINING_POOL_SIZE == 4096
    assert same(pool.layouts, trainer_world.generator.layouts)
    assert test_layouts_in(pool.grid_size, pool.num_agents, pool.weights, pool.layouts) == []
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        assert same(n2.reset(key)[1], trainer_world.reset(key)[0])


def test_pool_size_zero_draws_fresh_layouts():
    env = make_jaxmarl("n2", pool_size=0)
    assert isinstance(env.world.generator, CurriculumLayouts)


def test_the_defaults_are_the_rl_trainers():
    from cube_jax.rl.config import build

    config = build("ippo")  # the IPPO preset
    assert config.env.observation == adapter.DEFAULT_OBSERVATION == "vector"
    assert config.env.pool_size == adapter.TRAINING_POOL_SIZE


# --- transitions ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["easy", "n2"])
def test_transitions_equal_the_core_step_bit_for_bit(fixture, request):
    env = request.getfixturevalue(fixture)
    world = env.world
    key = jax.random.PRNGKey(3)
    _, state = env.reset(key)
    native, _ = world.reset(key)
    assert same(state, native)
    for i, a in enumerate(jax.random.randint(jax.random.PRNGKey(7), (20, env.num_agents), 0, 5)):
        obs, state, rewards, dones, _ = env.step(jax.random.PRNGKey(i), state, dict(zip(env.agents, a)))
        native, ts = world.step(native, a)
        assert same(state, native)
        assert same(jnp.stack([obs[name] for name in env.agents]), ts.observation)
        assert same(jnp.stack([rewards[name] for name in env.agents]), ts.reward)
        assert bool(dones["__all__"]) == bool(ts.terminated | ts.truncated) == False  # noqa: E712
    assert int(state.t) == 20


def test_a_typed_key_gives_the_state_of_its_raw_key(easy):
    assert same(easy.reset(jax.random.key(5))[1], easy.reset(jax.random.PRNGKey(5))[1])


# --- dones and auto-reset ---------------------------------------------------------------------------


def test_truncation_ends_every_agent_and_step_starts_the_next_episode(easy):
    _, state = easy.reset(jax.random.PRNGKey(0))
    state = state.replace(t=jnp.int32(98))
    _, state, _, dones, _ = easy.step(jax.random.PRNGKey(12), state, stay(easy))
    assert int(state.t) == 99 and not bool(dones["__all__"])
    key = jax.random.PRNGKey(13)
    obs, state, rewards, dones, infos = easy.step(key, state, stay(easy))
    assert {k: bool(v) for k, v in dones.items()} == {"agent_0": True, "agent_1": True, "__all__": True}
    assert infos["truncated"].tolist() == [True, True] and infos["terminated"].tolist() == [False, False]
    assert float(rewards["agent_0"]) == pytest.approx(-0.01)  # the ending step's reward is kept
    fresh_obs, fresh = easy.reset(jax.random.split(key)[1])  # JaxMARL's reset key
    assert int(state.t) == 0 and same(state, fresh) and same(obs, fresh_obs)
    assert same(easy.get_obs(fresh), fresh_obs)  # what step returns after a given reset_state


def test_delivering_every_block_terminates():
    env = make_jaxmarl(ONE_PUSH)
    assert env.name == "cube-one-push"
    _, state = env.reset(jax.random.PRNGKey(0))
    _, state, rewards, dones, infos = env.step(jax.random.PRNGKey(1), state, {"agent_0": jnp.int32(RIGHT)})
    assert bool(dones["__all__"]) and bool(dones["agent_0"])
    assert infos["terminated"].tolist() == [True] and infos["truncated"].tolist() == [False]
    assert infos["blocks_delivered"].tolist() == [1] and infos["delivered_weight"].tolist() == [1]
    assert float(rewards["agent_0"]) == pytest.approx(0.99)  # delivered weight 1, less the step cost
    assert int(state.t) == 0 and same(state.block_alive, jnp.array([True]))  # auto-reset


def test_a_pool_task_resets_to_a_pool_layout_when_its_episode_ends(n2):
    _, state = n2.reset(jax.random.PRNGKey(0))
    state = state.replace(t=jnp.int32(n2.max_steps - 1))
    key = jax.random.PRNGKey(21)
    obs, after, _, dones, infos = n2.step(key, state, stay(n2))
    assert bool(dones["__all__"]) and infos["truncated"].tolist() == [True, True]
    fresh_obs, fresh = n2.reset(jax.random.split(key)[1])
    assert same(after, fresh) and same(obs, fresh_obs)
    pool = n2.world.generator.layouts
    match = (np.asarray(pool.agent_pos) == np.asarray(after.agent_pos)).all((1, 2)) & \
            (np.asarray(pool.block_pos) == np.asarray(after.block_pos)).all((1, 2))
    assert match.any()


# --- JaxMARL's LogWrapper ------------------------------------------------------------------------------


def test_jaxmarls_log_wrapper_logs_episodes_under_jit_and_vmap(easy):
    env = LogWrapper(easy)
    num_envs, steps = 3, 102

    @jax.jit
    def rollout(key):
        obs, state = jax.vmap(env.reset)(jax.random.split(key, num_envs))

        def one(state, key):
            actions = {a: jnp.full((num_envs,), STAY, jnp.int32) for a in env.agents}
            obs, state, rewards, dones, infos = jax.vmap(env.step)(jax.random.split(key, num_envs), state, actions)
            return state, (dones["__all__"], infos)

        return jax.lax.scan(one, state, jax.random.split(key, steps))[1]

    done, infos = rollout(jax.random.PRNGKey(0))
    assert INFO_KEYS | {"returned_episode", "returned_episode_returns", "returned_episode_lengths"} == set(infos)
    assert infos["returned_episode"].shape == (steps, num_envs, 2)
    ends = np.flatnonzero(np.asarray(infos["returned_episode"])[:, 0, 0])
    assert ends.tolist() == [99]  # the 100th step ends the first episode
    assert np.asarray(done).sum(0).tolist() == [1] * num_envs  # every environment, at step 99 only
    assert np.asarray(infos["returned_episode"])[99].all()
    np.testing.assert_allclose(np.asarray(infos["returned_episode_returns"])[99], -1.0, rtol=1e-5)  # 100 x -0.01
    np.testing.assert_allclose(np.asarray(infos["returned_episode_returns"])[98], 0.0)  # none finished yet
    assert (np.asarray(infos["returned_episode_lengths"])[99:] == 100).all()


# --- the package boundary ------------------------------------------------------------------------------


def test_the_adapters_do_not_import_jaxmarl_and_a_missing_jaxmarl_names_the_extra():
    check = (
        "import sys\n"
        "import cube_jax, cube_jax.adapters, cube_jax.adapters.pettingzoo, cube_jax.adapters.render\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'jaxmarl'], 'jaxmarl imported eagerly'\n"
        "sys.modules['jaxmarl'] = None  # as if it were not installed\n"
        "try:\n"
        "    import cube_jax.adapters.jaxmarl\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("cube_jax.adapters.jaxmarl needs the jaxmarl package (no module named 'jaxmarl'): "
                                   "pip install 'cube_jax[jaxmarl]'")


def test_make_jaxmarl_takes_make_specs_and_refuses_what_a_task_fixes():
    assert make_jaxmarl("hard").name == "cube-v1-hard"
    assert make_jaxmarl({"scenario": "hard", "max_steps": 9}).max_steps == 9
    coop = make_jaxmarl("coop2", num_agents=3, pool_size=0)
    assert coop.name == "cube-coop2-3" and coop.task is None and coop.num_agents == 3
    assert make_jaxmarl(scenario="easy", observation="grid").observation_space("agent_0").shape == (8, 8, 6)
    world = cube_jax.make("easy", observation="egocentric")
    assert make_jaxmarl(world).world is world
    with pytest.raises(ValueError, match="fixed by the task"):
        make_jaxmarl("n2", max_steps=5)
    with pytest.raises(ValueError, match="one fixed layout"):
        make_jaxmarl("easy", pool_size=8)
    with pytest.raises(ValueError, match="cannot change a built CubeEnv"):
        make_jaxmarl(world, observation="vector")
    with pytest.raises(ValueError, match="both in the spec and as keyword arguments"):
        make_jaxmarl({"scenario": "easy", "observation": "grid"}, observation="vector")


def test_an_observation_form_is_a_constructor_choice(easy):
    env = make_jaxmarl("easy", observation="egocentric", view_radius=2)
    assert env.observation_space("agent_0").shape == (4 * 5 * 5 + 3 + 2,) == env.world.observation_shape[1:]
    obs, _ = env.reset(jax.random.PRNGKey(0))
    assert obs["agent_1"].shape == (105,) and bool(env.observation_space("agent_1").contains(obs["agent_1"]))


# --- the JaxMARL-shaped IPPO ------------------------------------------------------------------------------


def load_ippo():
    spec = importlib.util.spec_from_file_location("jaxmarl_ippo", ROOT / "baselines" / "jaxmarl_ippo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # flax's modules are dataclasses, which look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_jaxmarl_ippo_script_trains_two_updates_with_finite_losses(capsys):
    ippo = load_ippo()
    out = ippo.main(["--task", "easy", "--total-timesteps", "64", "--num-envs", "4", "--num-steps", "8",
                     "--report-every", "1"])
    metrics = jax.tree.map(np.asarray, out["metrics"])
    assert metrics["total_loss"].shape == (1, 2)  # one seed, two updates
    for name in ("total_loss", "actor_loss", "critic_loss", "entropy"):
        assert np.isfinite(metrics[name]).all(), name
    printed = capsys.readouterr().out
    assert "update 1 (32 env steps per seed): no episode finished" in printed
    assert "update 2 (64 env steps per seed)" in printed
    assert "easy: 64 env steps in" in printed
    assert printed.rstrip().endswith("of the updates, per seed: no episode finished")  # 100-step episodes


def test_the_ippo_scripts_only_cube_specific_line_builds_the_env():
    code = [line for line in (ROOT / "baselines" / "jaxmarl_ippo.py").read_text().splitlines()
            if "cube_jax" in line or "make_jaxmarl" in line]
    assert [line.strip().split("  #")[0] for line in code] == [
        "``cube_jax.adapters.jaxmarl`` (docs/jaxmarl.md).",  # the docstring
        "from cube_jax.adapters.jaxmarl import make_jaxmarl",
        '"ENV_NAME": "easy",',  # the config's default task
        'env = make_jaxmarl(config["ENV_NAME"], **config["ENV_KWARGS"])',
    ]
