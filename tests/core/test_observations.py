"""The egocentric view against a plain NumPy rendering of its documented definition.

The jitted view is computed from entities without any K x K grid (agents as window-row
bits for small teams, an occupancy grid for large ones; blocks as a fold over blocks), so
it is checked cell by cell against the definition in ``cube_jax.core.observations``.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cube_jax
from cube_jax.core import observations


def egocentric_reference(state, k: int, radius: int, max_steps: int) -> np.ndarray:
    """float32[N, 4 (2r+1)^2 + 3 + N] for one state, straight from the module docstring."""
    lay = cube_jax.layout(state)
    agents = lay["agents"]
    n = len(agents)
    heaviest = max(w for _, _, w, _ in lay["blocks"])
    cells = {}
    for r, c, w, alive in lay["blocks"]:
        if alive:
            for i in range(r, r + w):
                for j in range(c, c + w):
                    cells[(i, j)] = w / heaviest
    size = 2 * radius + 1
    out = np.zeros((n, 4 * size * size + 3 + n), np.float32)
    for a, (ar, ac) in enumerate(agents):
        window = np.zeros((size, size, 4), np.float32)
        for di in range(size):
            for dj in range(size):
                i, j = ar - radius + di, ac - radius + dj
                if not (0 <= i < k and 0 <= j < k):
                    window[di, dj, 2] = 1.0  # wall
                    continue
                window[di, dj, 0] = float((i, j) in agents)
                window[di, dj, 1] = cells.get((i, j), 0.0)
                window[di, dj, 3] = float(j == k - 1)
        out[a, : 4 * size * size] = window.reshape(-1)
        out[a, 4 * size * size :][:3] = [ar / (k - 1), ac / (k - 1), lay["t"] / max_steps]
        out[a, 4 * size * size + 3 + a] = 1.0
    return out


def visited_states(env, seed: int, envs: int, steps: int):
    """A batch of states after random steps (blocks pushed and delivered on the way)."""
    states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(seed), envs))
    step = jax.jit(jax.vmap(env.step))
    actions = jax.random.randint(jax.random.PRNGKey(seed + 1), (steps, envs, env.num_agents), 0, 5)
    for t in range(steps):
        states, _ = step(states, actions[t])
    return states


@pytest.mark.parametrize("n, radius, grid_path", [(4, 3, False), (6, 2, False), (5, 3, True)])
def test_egocentric_view_matches_its_definition(monkeypatch, n, radius, grid_path):
    if grid_path:  # the occupancy-grid path of large teams, on a small team
        monkeypatch.setattr(observations, "EGO_FOLD_MAX_AGENTS", 0)
    env = cube_jax.make(n=n, observation="egocentric", view_radius=radius, max_steps=200)
    states = visited_states(env, seed=n, envs=6, steps=25)
    batched = np.asarray(jax.jit(jax.vmap(env.observe))(states))
    alone = jax.jit(env.observe)
    assert batched.shape == (6,) + env.observation_shape
    for e in range(6):
        state = jax.tree.map(lambda x, e=e: x[e], states)
        expected = egocentric_reference(state, env.grid_size, radius, env.max_steps)
        np.testing.assert_allclose(batched[e], expected, atol=1e-6, err_msg=f"env {e}")
        np.testing.assert_allclose(np.asarray(alone(state)), expected, atol=1e-6, err_msg=f"env {e} alone")
    # the form without ids is the same but for the one-hot id at the end, and its size does not depend on n
    noid = cube_jax.make(n=n, observation="egocentric_noid", view_radius=radius, max_steps=200)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(noid.observe))(states)), batched[..., :-n])
    assert noid.observation_shape == (n, 4 * (2 * radius + 1) ** 2 + 3)


def test_egocentric_view_sees_a_delivered_block_vanish():
    # A0 pushes the weight-1 block at (1, 3) into the goal column; block 1 (weight 2) stays
    sc = cube_jax.Scenario(grid_size=5, agents=[(1, 2), (4, 0)], blocks=[(1, 3, 1), (3, 1, 2)], max_steps=10)
    env = cube_jax.make(scenario=sc, observation="egocentric", view_radius=1)
    state, ts = env.reset(jax.random.PRNGKey(0))
    window = np.asarray(ts.observation)[0, :36].reshape(3, 3, 4)
    assert window[1, 2, 1] == pytest.approx(0.5)  # weight 1 of heaviest 2, right of the agent
    state, ts = env.step(state, jnp.array([cube_jax.RIGHT, cube_jax.STAY]))
    window = np.asarray(ts.observation)[0, :36].reshape(3, 3, 4)
    assert cube_jax.layout(state)["agents"][0] == (1, 3)
    np.testing.assert_array_equal(window[:, :, 1], 0.0)  # the block is delivered: no weight left
    np.testing.assert_array_equal(window[:, 2, 3], [1.0, 1.0, 1.0])  # goal column to the right
