"""Observations: the papers' five-channel grid and per-agent forms for learning.

Per-agent forms (``make(..., observation=...)``), every one ``float32`` with the agent
axis first, and every one telling an agent which one it is:

``"vector"`` (default) ``float32[N, N + 3 + 5B + 2N]``, per agent ``i``:
    ``[one_hot(i) (N), own row/(K-1), own col/(K-1), t/max_steps,
    per block b (B x 5): (row_b - row_i)/K, (col_b - col_i)/K, w_b/(heaviest block weight), alive_b,
    (K-1 - right column of b)/K,  per agent j (N x 2): (row_j - row_i)/K, (col_j - col_i)/K]``.
    Delivered blocks have all five block features set to 0. Size grows with N and B,
    not with K.
``"egocentric"`` ``float32[N, 4 (2r+1)^2 + 3 + N]`` with ``r = view_radius``: a
    ``(2r+1) x (2r+1)`` window centred on the agent with 4 channels (agent, block
    weight / heaviest block weight, wall (outside the grid), goal column), flattened row-major as
    ``[row, col, channel]``, then own row/(K-1), own col/(K-1), t/max_steps and
    ``one_hot(i)``. Size does not grow with K; this is the form for large n.
``"grid"`` ``float32[N, K, K, 6]``: the five channels plus a sixth marking the agent's
    own cell. Size grows with K*K per agent; meant for small grids and CNNs.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from cube_jax.core.dynamics import env_first, env_last, vmap_as_batch
from cube_jax.core.types import EnvConfig, State

OBSERVATION_FORMS = ("vector", "egocentric", "grid")
EGO_CHANNELS = 4


def _block_cover(state: State, k: int):
    """float32[K, B] row and column masks of alive blocks (a block covers rows x cols)."""
    idx = jnp.arange(k)[:, None]
    r, c, w = state.block_pos[:, 0], state.block_pos[:, 1], state.block_weight
    rows = ((idx >= r) & (idx < r + w) & state.block_alive).astype(jnp.float32)
    cols = ((idx >= c) & (idx < c + w)).astype(jnp.float32)
    return rows, cols


@jax.jit
def grid_observation(state: State) -> jax.Array:
    """float32[K, K, 5]: the papers' five channels (DYNAMICS.md), zero elsewhere.

    0: 1.0 at agent cells; 1: block weight at block cells; 2: 1.0 on the goal column;
    3: agent id + 1 at agent cells; 4: block id + 1 at block cells. Works on one state;
    ``jax.vmap`` it for a batch.
    """
    k = state.grid_size
    n, b = state.agent_pos.shape[0], state.block_pos.shape[0]
    rows, cols = _block_cover(state, k)
    weight = jnp.einsum("rb,cb,b->rc", rows, cols, state.block_weight.astype(jnp.float32))
    block_id = jnp.einsum("rb,cb,b->rc", rows, cols, jnp.arange(1, b + 1, dtype=jnp.float32))
    r, c = state.agent_pos[:, 0], state.agent_pos[:, 1]
    agent = jnp.zeros((k, k), jnp.float32).at[r, c].set(1.0)
    agent_id = jnp.zeros((k, k), jnp.float32).at[r, c].set(jnp.arange(1, n + 1, dtype=jnp.float32))
    goal = jnp.zeros((k, k), jnp.float32).at[:, k - 1].set(1.0)
    return jnp.stack([agent, weight, goal, agent_id, block_id], axis=-1)


def _own_features(cfg: EnvConfig, state: State) -> jax.Array:
    """float32[N, 3 + N]: own row, own col, time fraction and the one-hot agent id."""
    n = cfg.num_agents
    scale = jnp.float32(max(cfg.grid_size - 1, 1))
    pos = state.agent_pos.astype(jnp.float32) / scale
    t = jnp.broadcast_to(state.t.astype(jnp.float32) / cfg.max_steps, (n, 1))
    return jnp.concatenate([pos, t, jnp.eye(n, dtype=jnp.float32)], axis=1)


def _vector_kernel(cfg: EnvConfig, ar, ac, br, bc, w, alive, t) -> jax.Array:
    """float32[N, D, E] on environment-last arrays ([N, E], [B, E], [E]); see the module doc."""
    n, b, k = cfg.num_agents, cfg.num_blocks, cfg.grid_size
    e = t.shape[-1]
    f32 = jnp.float32
    ar, ac, br, bc, w = (x.astype(f32) for x in (ar, ac, br, bc, w))
    live = alive.astype(f32)[None]  # [1, B, E]
    scale = f32(max(k - 1, 1))
    block_features = jnp.stack(
        [
            (br[None] - ar[:, None]) / k,
            (bc[None] - ac[:, None]) / k,
            jnp.broadcast_to((w / jnp.max(w, axis=0))[None], (n, b, e)),
            jnp.ones((n, b, e), f32),
            jnp.broadcast_to(((k - 1 - (bc + w - 1)) / k)[None], (n, b, e)),
        ],
        axis=2,
    ) * live[:, :, None]  # [N, B, 5, E]
    agent_features = jnp.stack([(ar[None] - ar[:, None]) / k, (ac[None] - ac[:, None]) / k], axis=2)  # [N, N, 2, E]
    own = [
        jnp.broadcast_to(jnp.eye(n, dtype=f32)[:, :, None], (n, n, e)),
        (ar / scale)[:, None],
        (ac / scale)[:, None],
        jnp.broadcast_to((t.astype(f32) / cfg.max_steps)[None, None], (n, 1, e)),
    ]
    return jnp.concatenate(own + [block_features.reshape(n, 5 * b, e), agent_features.reshape(n, 2 * n, e)], axis=1)


def vector_observation(cfg: EnvConfig, state: State) -> jax.Array:
    """The "vector" form for one state or a batch with any leading axes."""
    lead = state.t.shape
    pos, bpos = env_last(state.agent_pos, lead, 2), env_last(state.block_pos, lead, 2)
    obs = _vector_kernel(
        cfg,
        pos[:, 0],
        pos[:, 1],
        bpos[:, 0],
        bpos[:, 1],
        env_last(state.block_weight, lead, 1),
        env_last(state.block_alive, lead, 1),
        env_last(state.t, lead, 0),
    )
    return env_first(obs, lead)


def egocentric_observation(cfg: EnvConfig, state: State) -> jax.Array:
    k, r = cfg.grid_size, cfg.view_radius
    rows, cols = _block_cover(state, k)
    w = state.block_weight.astype(jnp.float32)
    weight = jnp.einsum("rb,cb,b->rc", rows, cols, w) / jnp.max(w)
    ar, ac = state.agent_pos[:, 0], state.agent_pos[:, 1]
    agent = jnp.zeros((k, k), jnp.float32).at[ar, ac].set(1.0)
    goal = jnp.zeros((k, k), jnp.float32).at[:, k - 1].set(1.0)
    inside = jnp.zeros((k, k), jnp.float32)
    planes = jnp.stack([agent, weight, inside, goal], axis=-1)
    # Pad by r on every side; the padding is wall (channel 2 = 1).
    pad_value = jnp.array([0.0, 0.0, 1.0, 0.0], jnp.float32)
    padded = jnp.broadcast_to(pad_value, (k + 2 * r, k + 2 * r, EGO_CHANNELS))
    padded = jax.lax.dynamic_update_slice(padded, planes, (r, r, 0))
    size = 2 * r + 1

    def window(pos):
        return jax.lax.dynamic_slice(padded, (pos[0], pos[1], 0), (size, size, EGO_CHANNELS))

    views = jax.vmap(window)(state.agent_pos).reshape(cfg.num_agents, -1)
    return jnp.concatenate([views, _own_features(cfg, state)], axis=1)


def agent_grid_observation(cfg: EnvConfig, state: State) -> jax.Array:
    grid = grid_observation(state)
    n, k = cfg.num_agents, cfg.grid_size
    own = jnp.zeros((n, k, k), jnp.float32).at[jnp.arange(n), state.agent_pos[:, 0], state.agent_pos[:, 1]].set(1.0)
    return jnp.concatenate([jnp.broadcast_to(grid, (n, k, k, 5)), own[..., None]], axis=-1)


def observe(cfg: EnvConfig, state: State) -> jax.Array:
    """The per-agent observation selected by ``cfg.observation``."""
    if cfg.observation == "vector":
        return _batched_vector_observation(cfg)(state)
    if cfg.observation == "egocentric":
        return egocentric_observation(cfg, state)
    if cfg.observation == "grid":
        return agent_grid_observation(cfg, state)
    raise ValueError(f"observation: unknown form {cfg.observation!r}; expected one of {OBSERVATION_FORMS}")


@functools.lru_cache(maxsize=None)
def _batched_vector_observation(cfg: EnvConfig):
    return vmap_as_batch(functools.partial(vector_observation, cfg))


def observation_shape(cfg: EnvConfig) -> tuple:
    n, b, k = cfg.num_agents, cfg.num_blocks, cfg.grid_size
    if cfg.observation == "vector":
        return (n, n + 3 + 5 * b + 2 * n)
    if cfg.observation == "egocentric":
        return (n, EGO_CHANNELS * (2 * cfg.view_radius + 1) ** 2 + 3 + n)
    if cfg.observation == "grid":
        return (n, k, k, 6)
    raise ValueError(f"observation: unknown form {cfg.observation!r}; expected one of {OBSERVATION_FORMS}")
