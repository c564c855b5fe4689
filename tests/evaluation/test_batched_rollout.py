"""Batched, scanned, jitted rollouts against the plain-Python reference, env by env.

The property tests step one environment at a time; training runs the step under
``jit(scan(vmap(...)))``, where the kernel's environment-minor layout is pinned. This test
checks that path, and the auto-reset wrapper inside it, against ``cube_jax/testing/reference.py``.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cube_jax
from cube_jax.wrappers import AutoResetWrapper
from cube_jax.testing import reference as ref

ENVS, STEPS = 24, 40


def reference_world(lay, env):
    return ref.World(
        K=env.grid_size,
        agents=list(lay["agents"]),
        blocks=[[r, c, w, a] for r, c, w, a in lay["blocks"]],
        max_steps=env.max_steps,
        t=lay["t"],
    )


@pytest.mark.parametrize("scenario", ["hard", "n4", "n8"])
def test_scanned_vmapped_rollout_matches_reference(scenario):
    if scenario == "hard":
        env = cube_jax.make("hard", max_steps=25)
    else:  # n = 8: 11 blocks, beyond the random worlds of the property tests
        env = cube_jax.make(n=int(scenario[1:]), pool_size=16)
    n = env.num_agents
    states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(3), ENVS))
    # pushes into neighbouring blocks are frequent: bias actions towards RIGHT
    actions = jax.random.choice(
        jax.random.PRNGKey(4), jnp.arange(6) - 0, (STEPS, ENVS, n), p=jnp.array([0.1, 0.15, 0.15, 0.1, 0.45, 0.05])
    )
    actions = jnp.where(actions == 5, 9, actions)  # some out-of-range actions

    @jax.jit
    def rollout(states, actions):
        def body(s, a):
            s, ts = jax.vmap(env.step)(s, a)
            return s, (s.agent_pos, s.block_pos, s.block_alive, ts.reward, ts.terminated, ts.truncated)

        return jax.lax.scan(body, states, actions)[1]

    agent_pos, block_pos, alive, reward, terminated, truncated = map(np.asarray, rollout(states, actions))
    for e in range(ENVS):
        world = reference_world(cube_jax.layout(jax.tree.map(lambda x: x[e], states)), env)
        for t in range(STEPS):
            world, rewards, term, trunc, _ = ref.step(world, [int(a) for a in actions[t, e]])
            where = f"env {e} step {t}"
            assert [tuple(p) for p in agent_pos[t, e]] == world.agents, where
            for j, (r, c, w, a) in enumerate(world.blocks):
                assert bool(alive[t, e, j]) == a, where
                if a:
                    assert tuple(block_pos[t, e, j]) == (r, c), where
            np.testing.assert_allclose(reward[t, e], rewards, atol=1e-6, err_msg=where)
            assert (bool(terminated[t, e]), bool(truncated[t, e])) == (term, trunc), where
            if term or trunc:
                break


def test_auto_reset_rollout_matches_reference():
    env = cube_jax.make("hard", max_steps=6)
    wrapped = AutoResetWrapper(env)
    states, _ = jax.vmap(wrapped.reset)(jax.random.split(jax.random.PRNGKey(5), 8))
    actions = jax.random.randint(jax.random.PRNGKey(6), (20, 8, 3), 0, 5)

    @jax.jit
    def rollout(states, actions):
        def body(s, a):
            s, ts = jax.vmap(wrapped.step)(s, a)
            return s, (s.agent_pos, ts.truncated | ts.terminated)

        return jax.lax.scan(body, states, actions)[1]

    agent_pos, done = map(np.asarray, rollout(states, actions))
    start = cube_jax.layout(env.reset(jax.random.PRNGKey(0))[0])
    for e in range(8):
        world = reference_world(start, env)
        for t in range(20):
            world, _, term, trunc, _ = ref.step(world, [int(a) for a in actions[t, e]])
            assert bool(done[t, e]) == (term or trunc)
            if term or trunc:
                world = reference_world(start, env)  # "hard" has one layout: reset is exact
            assert [tuple(p) for p in agent_pos[t, e]] == world.agents, f"env {e} step {t}"
