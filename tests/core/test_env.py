"""The public environment contract: shapes, purity under jit/vmap, observations, events, wrappers."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cube_jax
from cube_jax.wrappers import AutoResetWrapper, LogWrapper

RIGHT, STAY = cube_jax.RIGHT, cube_jax.STAY


@pytest.fixture(scope="module")
def hard():
    return cube_jax.make("hard")


@pytest.fixture(scope="module")
def batch(hard):
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    states, _ = jax.vmap(hard.reset)(keys)
    actions = jax.random.randint(jax.random.PRNGKey(1), (12, 5, hard.num_agents), 0, 5)
    return states, actions


def test_reset_and_step_shapes(hard):
    state, ts = hard.reset(jax.random.PRNGKey(0))
    assert ts.observation.shape == hard.observation_shape == (3, 3 + 3 + 5 * 3 + 6)
    state, ts = hard.step(state, jnp.array([RIGHT, RIGHT, STAY]))
    assert ts.reward.shape == (3,) and ts.reward.dtype == jnp.float32
    assert ts.terminated.shape == () and ts.terminated.dtype == bool
    assert ts.truncated.shape == () and ts.truncated.dtype == bool
    assert cube_jax.grid_observation(state).shape == (8, 8, 5)
    assert cube_jax.layout(state)["t"] == 1


def test_batched_equals_one_by_one_and_jit_equals_eager(hard, batch):
    states, actions = batch
    step = jax.jit(jax.vmap(hard.step))
    singles = [jax.tree.map(lambda x, i=i: x[i], states) for i in range(5)]
    for t in range(actions.shape[0]):
        states, ts = step(states, actions[t])
        for i in range(5):
            singles[i], one = hard.step(singles[i], actions[t, i])
            assert cube_jax.layout(jax.tree.map(lambda x: x[i], states)) == cube_jax.layout(singles[i])
            np.testing.assert_array_equal(ts.observation[i], one.observation)
            np.testing.assert_array_equal(ts.reward[i], one.reward)
    with jax.disable_jit():
        eager, _ = hard.step(singles[0], actions[0, 0])
    jitted, _ = jax.jit(hard.step)(singles[0], actions[0, 0])
    assert cube_jax.layout(eager) == cube_jax.layout(jitted)


def test_nested_vmap(hard, batch):
    states, actions = batch
    stacked = jax.tree.map(lambda x: jnp.stack([x, x]), states)
    out, _ = jax.vmap(jax.vmap(hard.step))(stacked, jnp.stack([actions[0], actions[1]]))
    once, _ = jax.vmap(hard.step)(states, actions[1])
    np.testing.assert_array_equal(out.agent_pos[1], once.agent_pos)


def test_partially_batched_actions(hard, batch):
    states, _ = batch
    same = jnp.array([RIGHT, RIGHT, RIGHT])
    out, _ = jax.vmap(hard.step, in_axes=(0, None))(states, same)
    ref, _ = jax.vmap(hard.step)(states, jnp.broadcast_to(same, (5, 3)))
    np.testing.assert_array_equal(out.agent_pos, ref.agent_pos)


def test_layout_rejects_batched_state(batch):
    with pytest.raises(ValueError, match="one environment's state"):
        cube_jax.layout(batch[0])


def test_events_of_a_push():
    # three agents stacked behind a weight-3 block push it right
    sc = cube_jax.Scenario(grid_size=8, agents=[(1, 1), (2, 1), (3, 1)], blocks=[(1, 2, 3), (6, 2, 1)])
    env = cube_jax.make(scenario=sc)
    state, _ = env.reset(jax.random.PRNGKey(0))
    state, ts = env.step(state, jnp.array([RIGHT, RIGHT, RIGHT]))
    assert cube_jax.layout(state)["blocks"][0] == (1, 3, 3, True)
    np.testing.assert_array_equal(ts.events.push_force[3], [3, 0])
    np.testing.assert_array_equal(ts.events.push_force[:3], 0)
    np.testing.assert_array_equal(ts.events.block_moved, [True, False])
    np.testing.assert_array_equal(ts.events.engaged, [True, True, True])
    np.testing.assert_array_equal(ts.events.agent_moved, [True, True, True])
    for _ in range(2):
        state, ts = env.step(state, jnp.array([RIGHT, RIGHT, RIGHT]))
    np.testing.assert_array_equal(ts.events.block_delivered, [True, False])
    assert int(ts.events.delivered_weight) == 3
    np.testing.assert_allclose(ts.reward, -0.01 + 3 / 3)


def test_observation_forms():
    sc = cube_jax.Scenario(grid_size=6, agents=[(2, 0), (4, 3)], blocks=[(2, 2, 2)], max_steps=10)
    vec = cube_jax.make(scenario=sc)
    ego = cube_jax.make(scenario=sc, observation="egocentric", view_radius=1)
    grid = cube_jax.make(scenario=sc, observation="grid")
    key = jax.random.PRNGKey(0)
    v = np.asarray(vec.reset(key)[1].observation)
    # one-hot id, own row/col scaled by K-1, time, then block 0 relative to the agent
    np.testing.assert_allclose(v[0, :5], [1, 0, 2 / 5, 0, 0])
    np.testing.assert_allclose(v[1, :5], [0, 1, 4 / 5, 3 / 5, 0])
    np.testing.assert_allclose(v[0, 5:10], [0, 2 / 6, 1, 1, (5 - 3) / 6])
    e = np.asarray(ego.reset(key)[1].observation)
    assert e.shape == (2, 4 * 9 + 3 + 2)
    window = e[0, :36].reshape(3, 3, 4)
    np.testing.assert_array_equal(window[:, 0, 2], [1, 1, 1])  # column -1 is wall
    assert window[1, 1, 0] == 1  # the agent itself
    window1 = e[1, :36].reshape(3, 3, 4)
    assert window1[0, 0, 1] == 1  # block cell (3, 2) up-left of agent 1
    np.testing.assert_array_equal(e[:, -2:], np.eye(2))
    g = np.asarray(grid.reset(key)[1].observation)
    assert g.shape == (2, 6, 6, 6)
    assert g[0, 2, 0, 5] == 1 and g[0, 4, 3, 5] == 0 and g[1, 4, 3, 5] == 1
    np.testing.assert_array_equal(g[0, ..., :5], cube_jax.grid_observation(vec.reset(key)[0]))


def test_five_channel_grid():
    sc = cube_jax.Scenario(grid_size=5, agents=[(0, 0), (4, 4)], blocks=[(1, 1, 2)])
    env = cube_jax.make(scenario=sc)
    g = np.asarray(cube_jax.grid_observation(env.reset(jax.random.PRNGKey(0))[0]))
    assert g[0, 0, 0] == 1 and g[4, 4, 0] == 1 and g[..., 0].sum() == 2
    assert g[0, 0, 3] == 1 and g[4, 4, 3] == 2
    np.testing.assert_array_equal(g[1:3, 1:3, 1], 2)
    np.testing.assert_array_equal(g[1:3, 1:3, 4], 1)
    assert g[..., 1].sum() == 8
    np.testing.assert_array_equal(g[:, 4, 2], 1)
    assert g[..., 2].sum() == 5


def test_auto_reset_keeps_terminated_and_truncated_apart():
    sc = cube_jax.Scenario(grid_size=5, agents=[(1, 2)], blocks=[(1, 3, 1)], max_steps=3)
    env = LogWrapper(AutoResetWrapper(cube_jax.make(scenario=sc)))
    state, ts = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    # RIGHT delivers at once: terminated, not truncated; the next observation is a fresh start
    first_obs = ts.observation
    state, ts = step(state, jnp.array([RIGHT]))
    assert bool(ts.terminated) and not bool(ts.truncated)
    np.testing.assert_array_equal(ts.observation, first_obs)
    assert not np.array_equal(ts.extras["final_observation"], first_obs)
    assert bool(ts.extras["returned_episode"]) and bool(ts.extras["success"])
    assert int(ts.extras["episode_length"]) == 1 and int(ts.extras["blocks_delivered"]) == 1
    np.testing.assert_allclose(ts.extras["episode_return"], -0.01 + 1.0)
    assert int(state.env_state.t) == 0
    # STAY three times: truncated, not terminated
    for t in range(3):
        state, ts = step(state, jnp.array([STAY]))
    assert bool(ts.truncated) and not bool(ts.terminated)
    assert int(ts.extras["episode_length"]) == 3 and not bool(ts.extras["success"])
    np.testing.assert_allclose(ts.extras["episode_return"], -0.03, rtol=1e-5)
    state, ts = step(state, jnp.array([STAY]))
    assert not bool(ts.extras["returned_episode"])


def test_step_events_are_a_struct_with_batched_shapes():
    env = cube_jax.make("easy")
    states, ts = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 3))
    assert isinstance(ts.events, cube_jax.StepEvents) and ts.extras == {}
    n, b = env.num_agents, env.num_blocks
    expected = {"block_moved": (3, b), "block_delivered": (3, b), "push_force": (3, 4, b), "engaged": (3, n),
                "agent_moved": (3, n), "delivered_weight": (3,)}
    for events in (ts.events, jax.vmap(env.step)(states, jnp.full((3, n), RIGHT))[1].events):
        assert {f: getattr(events, f).shape for f in expected} == expected
    assert not any(np.asarray(leaf).any() for leaf in jax.tree.leaves(ts.events))  # a reset: nothing happened
