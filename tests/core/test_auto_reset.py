"""Auto-reset under vmap: only finished environments reset, each exactly as alone.

The batched step resets the environments that finished, a few at a time
(``resets_per_step``); the result must not depend on that: every environment of the
batch follows exactly the trajectory it follows when stepped alone.
"""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cube_jax
from cube_jax.wrappers import AutoResetWrapper, LogWrapper

ENVS, STEPS, MAX_STEPS = 12, 14, 4


@pytest.fixture(scope="module")
def fresh_env():
    return cube_jax.make(n=4, max_steps=MAX_STEPS)


@pytest.fixture(scope="module")
def start(fresh_env):
    states, ts = jax.vmap(AutoResetWrapper(fresh_env).reset)(jax.random.split(jax.random.PRNGKey(0), ENVS))
    # staggered clocks: 1, 3, 5 or 7 environments finish together on different steps
    t0 = jnp.array([0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3], jnp.int32)
    actions = jax.random.randint(jax.random.PRNGKey(1), (STEPS, ENVS, 4), 0, 5)
    return states.replace(t=t0), ts.observation, actions


def batched_rollout(env, states, actions):
    @jax.jit
    def run(states, actions):
        def body(s, a):
            s, ts = jax.vmap(env.step)(s, a)
            return s, (s.agent_pos, s.block_pos, s.key, ts.observation, ts.extras["final_observation"], ts.truncated)

        return jax.lax.scan(body, states, actions)[1]

    return [np.asarray(x) for x in run(states, actions)]


@pytest.mark.parametrize("resets_per_step, patch_observations", [(1, False), (2, False), (None, False), (2, True)])
def test_batched_auto_reset_equals_each_env_alone(fresh_env, start, resets_per_step, patch_observations):
    states, _, actions = start
    env = AutoResetWrapper(fresh_env, resets_per_step=resets_per_step, patch_observations=patch_observations)
    batched = batched_rollout(env, states, actions)
    one_step = jax.jit(env.step)
    finished_together = batched[5].sum(1)
    assert finished_together.max() >= 5, "some steps must finish more environments than resets_per_step"
    for e in range(ENVS):
        s = jax.tree.map(lambda x, e=e: x[e], states)
        for t in range(STEPS):
            s, ts = one_step(s, actions[t, e])
            where = f"env {e} step {t}"
            np.testing.assert_array_equal(batched[0][t, e], s.agent_pos, where)
            np.testing.assert_array_equal(batched[1][t, e], s.block_pos, where)
            np.testing.assert_array_equal(batched[2][t, e], s.key, where)
            np.testing.assert_array_equal(batched[3][t, e], ts.observation, where)
            np.testing.assert_array_equal(batched[4][t, e], ts.extras["final_observation"], where)


def test_every_episode_gets_a_fresh_layout(fresh_env, start):
    states, _, actions = start
    agent_pos, block_pos, keys, _, _, truncated = batched_rollout(AutoResetWrapper(fresh_env), states, actions)
    layouts = set()
    for e in range(ENVS):
        for t in np.flatnonzero(truncated[:, e]):
            layouts.add((agent_pos[t, e].tobytes(), block_pos[t, e].tobytes()))
            assert not np.array_equal(keys[t, e], keys[t - 1, e]), "a new episode starts from a new key"
    assert int(truncated.sum()) == len(layouts), "no two new episodes share a layout"


def test_reset_observation_is_the_new_episodes_first(fresh_env, start):
    states, _, actions = start
    env = AutoResetWrapper(fresh_env, resets_per_step=2)
    agent_pos, block_pos, keys, obs, final_obs, truncated = batched_rollout(env, states, actions)
    t, e = np.argwhere(truncated)[0]
    # the new episode's state comes from reset(key of the episode that ended)
    ended_key = keys[t - 1, e] if t else np.asarray(states.key[e])
    new_state, new_ts = fresh_env.reset(jnp.asarray(ended_key))
    np.testing.assert_array_equal(block_pos[t, e], new_state.block_pos)
    np.testing.assert_array_equal(obs[t, e], new_ts.observation)
    assert not np.array_equal(final_obs[t, e], obs[t, e])


def test_nested_vmap_matches_the_flat_batch(fresh_env, start):
    states, _, actions = start
    env = LogWrapper(AutoResetWrapper(fresh_env, resets_per_step=2))
    log_states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), ENVS))
    log_states = log_states.replace(env_state=states)
    flat = jax.jit(jax.vmap(env.step))
    nested = jax.jit(jax.vmap(jax.vmap(env.step)))
    halves = jax.tree.map(lambda x: x.reshape((2, ENVS // 2) + x.shape[1:]), log_states)
    for t in range(6):
        log_states, ts = flat(log_states, actions[t])
        halves, nts = nested(halves, actions[t].reshape(2, ENVS // 2, 4))
        chex.assert_trees_all_equal(jax.tree.map(lambda x: x.reshape((ENVS,) + x.shape[2:]), (halves, nts)),
                                    (log_states, ts))


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4"])
def test_resets_per_step_is_checked(fresh_env, bad):
    with pytest.raises(ValueError, match="resets_per_step must be an integer >= 1"):
        AutoResetWrapper(fresh_env, resets_per_step=bad)


@pytest.mark.parametrize("bad", [0, 1, None, "yes"])
def test_patch_observations_is_checked(fresh_env, bad):
    with pytest.raises(ValueError, match="patch_observations must be True or False"):
        AutoResetWrapper(fresh_env, patch_observations=bad)
