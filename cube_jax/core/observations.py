"""Observations: the papers' five-channel grid and per-agent forms for learning.

Per-agent forms (``make(..., observation=...)``), every one ``float32`` with the agent
axis first, and all but one telling an agent which one it is:

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
``"egocentric_noid"`` ``float32[N, 4 (2r+1)^2 + 3]``: the egocentric form without the
    one-hot id, the one form that does not tell an agent which one it is. Its size depends
    on neither N nor K, so a policy trained with one team size plays any other.
``"grid"`` ``float32[N, K, K, 6]``: the five channels plus a sixth marking the agent's
    own cell. Size grows with K*K per agent; meant for small grids and CNNs.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.core.batching import env_first, env_last, region, vmap_as_batch
from cube_jax.core.types import EnvConfig, State

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


def _vector_kernel(cfg: EnvConfig, ar, ac, br, bc, w, alive, t) -> jax.Array:
    """float32[N, D - N, E] on environment-last arrays ([N, E], [B, E], [E]): the vector form
    without its leading one-hot agent id (see the module doc)."""
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
        (ar / scale)[:, None],
        (ac / scale)[:, None],
        jnp.broadcast_to((t.astype(f32) / cfg.max_steps)[None, None], (n, 1, e)),
    ]
    return jnp.concatenate(own + [block_features.reshape(n, 5 * b, e), agent_features.reshape(n, 2 * n, e)], axis=1)


def _run_env_last(kernel, cfg: EnvConfig, state: State) -> jax.Array:
    """``kernel(cfg, ar, ac, br, bc, w, alive, t)`` on the state's arrays moved environment-last;
    its ``[N, D, E]`` result comes back as ``[*lead, N, D]``."""
    lead = state.t.shape
    pos, bpos = env_last(state.agent_pos, lead, 2), env_last(state.block_pos, lead, 2)
    obs = kernel(
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


def vector_observation(cfg: EnvConfig, state: State) -> jax.Array:
    """The "vector" form for one state or a batch with any leading axes."""
    ids = _one_hot_ids(cfg.num_agents, state.t.shape)
    return jnp.concatenate([ids, _run_env_last(_vector_kernel, cfg, state)], axis=-1)


def _one_hot_ids(n: int, lead: tuple) -> jax.Array:
    """float32[*lead, N, N]: the one-hot agent ids, the same in every environment, so they
    are written straight into the output instead of going through the environment-last kernel."""
    return jnp.broadcast_to(jnp.eye(n, dtype=jnp.float32), lead + (n, n))


# Up to this many agents the agent channel of the egocentric view compares every agent with
# every window row (a fold over agents); above it, agents are written into an occupancy grid
# once and every window is read from it.
EGO_FOLD_MAX_AGENTS = 32


def _ego_agent_rows(cfg: EnvConfig, ar, ac, rows, cols) -> jax.Array:
    """uint32[N, S, E]: bit j of row i set where window cell (i, j) holds an agent
    (rows/cols: int32[N, S, E] the window's grid rows and columns)."""
    n, e = ar.shape
    size = rows.shape[1]
    bits = jnp.left_shift(jnp.uint32(1), jnp.arange(size, dtype=jnp.uint32))[None, None, :, None]
    if n > EGO_FOLD_MAX_AGENTS:
        k, r = cfg.grid_size, cfg.view_radius
        env = jnp.arange(e)
        grid = jnp.zeros((k + 2 * r, k + 2 * r, e), jnp.uint8).at[ar + r, ac + r, env[None]].set(1)
        window = grid[(rows + r)[:, :, None], (cols + r)[:, None, :], env[None, None, None]]  # [N, S, S, E]
        return jnp.sum(jnp.where(window > 0, bits, jnp.uint32(0)), axis=2, dtype=jnp.uint32)
    left = cols[:, :1]  # [N, 1, E] the window's first column
    row_bits = jnp.zeros(rows.shape, jnp.uint32)
    for m in range(n):
        offset = ac[m][None, None] - left
        seen = (rows == ar[m]) & (offset >= 0) & (offset < size)
        row_bits = row_bits | jnp.where(seen, jnp.left_shift(jnp.uint32(1), offset.astype(jnp.uint32)), 0)
    return row_bits


def _ego_block_spans(rows, cols, br, bc, w, alive) -> tuple:
    """(bool[N, B, S, E] window row i crosses alive block b, bool[N, B, S, E] window column j
    crosses block b)."""
    in_rows = (rows[:, None] >= br[None, :, None]) & (rows[:, None] < (br + w)[None, :, None]) & alive[None, :, None]
    in_cols = (cols[:, None] >= bc[None, :, None]) & (cols[:, None] < (bc + w)[None, :, None])
    return in_rows, in_cols


def _ego_weight_channel(in_rows, in_cols, w) -> jax.Array:
    """float32[N, S, S, E]: weight of the alive block covering each window cell, else 0,
    from the spans of :func:`_ego_block_spans`, one pass per block."""
    n, b, size, e = in_rows.shape
    wf = w.astype(jnp.float32)
    weight = jnp.zeros((n, size, size, e), jnp.float32)
    for j in range(b):  # blocks never overlap: at most one term is non-zero
        weight = weight + jnp.where(in_rows[:, j, :, None] & in_cols[:, j, None, :], wf[j], 0.0)
    return weight


def _ego_window(cfg: EnvConfig, ar, ac) -> tuple:
    """int32[N, S, E] grid rows and int32[N, S, E] grid columns of every agent's window."""
    r = cfg.view_radius
    offsets = jnp.arange(-r, r + 1, dtype=jnp.int32)[None, :, None]
    return ar[:, None] + offsets, ac[:, None] + offsets


def _egocentric_kernel(cfg: EnvConfig, ar, ac, br, bc, w, alive, t) -> jax.Array:
    """float32[N, D - N, E] on environment-last arrays ([N, E], [B, E], [E]): the egocentric
    form without its one-hot agent id (see the module doc)."""
    n, k, r = cfg.num_agents, cfg.grid_size, cfg.view_radius
    e = t.shape[-1]
    f32 = jnp.float32
    rows, cols = _ego_window(cfg, ar, ac)  # int32[N, S, E]
    row_inside, col_inside = (rows >= 0) & (rows < k), (cols >= 0) & (cols < k)
    # Each channel in a region of its own: fused into the concatenation below, every output
    # element would evaluate its channel's fold through a chain of index tests.
    keep = jnp.any((t | 1) != 0)  # always True: the region predicate
    agent_rows = region(keep, functools.partial(_ego_agent_rows, cfg), ar, ac, rows, cols)
    shifts = jnp.arange(2 * r + 1, dtype=jnp.uint32)[None, None, :, None]
    agent = ((agent_rows[:, :, None] >> shifts) & 1).astype(f32)
    spans = region(keep, _ego_block_spans, rows, cols, br, bc, w, alive)
    weight = region(keep, _ego_weight_channel, *spans, w)
    weight = weight / jnp.max(w, axis=0).astype(f32)
    inside = row_inside[:, :, None] & col_inside[:, None, :]
    wall = (~inside).astype(f32)
    goal = (row_inside[:, :, None] & (cols == k - 1)[:, None, :]).astype(f32)
    window = jnp.stack([agent, weight, wall, goal], axis=3)  # [N, S, S, 4, E]
    scale = f32(max(k - 1, 1))
    own = [
        (ar.astype(f32) / scale)[:, None],
        (ac.astype(f32) / scale)[:, None],
        jnp.broadcast_to((t.astype(f32) / cfg.max_steps)[None, None], (n, 1, e)),
    ]
    return jnp.concatenate([window.reshape(n, -1, e)] + own, axis=1)


def egocentric_observation(cfg: EnvConfig, state: State) -> jax.Array:
    """The "egocentric" form for one state or a batch with any leading axes."""
    ids = _one_hot_ids(cfg.num_agents, state.t.shape)
    return jnp.concatenate([_run_env_last(_egocentric_kernel, cfg, state), ids], axis=-1)


def egocentric_noid_observation(cfg: EnvConfig, state: State) -> jax.Array:
    """The "egocentric_noid" form (no agent id) for one state or a batch with any leading axes."""
    return _run_env_last(_egocentric_kernel, cfg, state)


def agent_grid_observation(cfg: EnvConfig, state: State) -> jax.Array:
    grid = grid_observation(state)
    n, k = cfg.num_agents, cfg.grid_size
    own = jnp.zeros((n, k, k), jnp.float32).at[jnp.arange(n), state.agent_pos[:, 0], state.agent_pos[:, 1]].set(1.0)
    return jnp.concatenate([jnp.broadcast_to(grid, (n, k, k, 5)), own[..., None]], axis=-1)


# --- the declaration every consumer reads ----------------------------------------------------
Bounds = Tuple[np.ndarray, np.ndarray]


@dataclasses.dataclass(frozen=True)
class ObservationForm:
    """One per-agent observation form: its name, its shape and value bounds, how it is computed.

    ``make(observation=...)``, the RL config, checkpoints and the PettingZoo spaces all read
    these declarations; a new form is one more entry in :data:`OBSERVATION_FORMS`.
    """

    name: str
    summary: str
    features: Callable[[EnvConfig], Tuple[int, ...]]  # one agent's shape, [*F]
    limits: Callable[[EnvConfig, int], Bounds]  # (low, high) float32[*F] for a heaviest weight
    compute: Callable[[EnvConfig, State], jax.Array]  # one state or a batch -> float32[..., N, *F]

    def shape(self, cfg: EnvConfig) -> Tuple[int, ...]:
        """``(N, *F)``: the shape of one environment's observation."""
        return (cfg.num_agents,) + tuple(self.features(cfg))

    def bounds(self, cfg: EnvConfig, max_weight: Optional[int] = None) -> Bounds:
        """``(low, high)``, float32 arrays of one agent's shape ``F``, that hold every value the
        form can take. ``max_weight`` is the heaviest block the world can hold (only the
        "grid" form depends on it); ``None`` takes the largest that fits the grid, K - 1."""
        weight = cfg.grid_size - 1 if max_weight is None else max_weight
        low, high = self.limits(cfg, max(int(weight), 1))
        shape = tuple(self.features(cfg))
        return (np.broadcast_to(np.asarray(low, np.float32), shape).copy(),
                np.broadcast_to(np.asarray(high, np.float32), shape).copy())


def _vector_features(cfg: EnvConfig) -> Tuple[int, ...]:
    n, b = cfg.num_agents, cfg.num_blocks
    return (n + 3 + 5 * b + 2 * n,)


def _vector_limits(cfg: EnvConfig, max_weight: int) -> Bounds:
    # one-hot id and own row, col, t/max_steps in [0, 1]; per block two offsets in [-1, 1] (a
    # difference of two cells over K) and three values in [0, 1]; per agent two offsets.
    n, b = cfg.num_agents, cfg.num_blocks
    low = np.concatenate([np.zeros(n + 3), np.tile([-1.0, -1.0, 0.0, 0.0, 0.0], b), -np.ones(2 * n)])
    return low, np.ones_like(low)


def _egocentric_features(cfg: EnvConfig) -> Tuple[int, ...]:
    return (EGO_CHANNELS * (2 * cfg.view_radius + 1) ** 2 + 3 + cfg.num_agents,)


def _egocentric_noid_features(cfg: EnvConfig) -> Tuple[int, ...]:
    return (EGO_CHANNELS * (2 * cfg.view_radius + 1) ** 2 + 3,)


def _egocentric_limits(cfg: EnvConfig, max_weight: int) -> Bounds:
    return 0.0, 1.0  # 0/1 channels, weight over the heaviest weight, positions over K - 1, one-hot


def _grid_channel_maxima(cfg: EnvConfig, max_weight: int) -> np.ndarray:
    """The maxima of :func:`grid_observation`'s five channels (all are at least 0)."""
    return np.asarray([1, max_weight, 1, cfg.num_agents, cfg.num_blocks], np.float32)


def grid_bounds(cfg: EnvConfig, max_weight: int) -> Bounds:
    """``(low, high)`` float32[K, K, 5] of :func:`grid_observation` (the papers' channels)."""
    k = cfg.grid_size
    high = np.broadcast_to(_grid_channel_maxima(cfg, max_weight), (k, k, 5)).copy()
    return np.zeros_like(high), high


def _agent_grid_features(cfg: EnvConfig) -> Tuple[int, ...]:
    return (cfg.grid_size, cfg.grid_size, 6)


def _agent_grid_limits(cfg: EnvConfig, max_weight: int) -> Bounds:
    return 0.0, np.append(_grid_channel_maxima(cfg, max_weight), 1.0)


OBSERVATION_FORMS: Tuple[ObservationForm, ...] = (
    ObservationForm(
        "vector",
        "own id, position and time, every block and agent relative to the agent; size grows with N and B",
        _vector_features,
        _vector_limits,
        lambda cfg, state: _batched_form(cfg, vector_observation)(state),
    ),
    ObservationForm(
        "egocentric",
        "a (2r+1) x (2r+1) window of four channels around the agent, position, time and id; size fixed by r",
        _egocentric_features,
        _egocentric_limits,
        lambda cfg, state: _batched_form(cfg, egocentric_observation)(state),
    ),
    ObservationForm(
        "egocentric_noid",
        "the egocentric window, position and time without the agent's id; size fixed by r whatever n is",
        _egocentric_noid_features,
        _egocentric_limits,
        lambda cfg, state: _batched_form(cfg, egocentric_noid_observation)(state),
    ),
    ObservationForm(
        "grid",
        "the papers' five K x K channels plus the agent's own cell; size grows with K * K",
        _agent_grid_features,
        _agent_grid_limits,
        agent_grid_observation,
    ),
)
OBSERVATION_FORM_NAMES: Tuple[str, ...] = tuple(form.name for form in OBSERVATION_FORMS)
_BY_NAME = {form.name: form for form in OBSERVATION_FORMS}


def observation_form(name: str) -> ObservationForm:
    """The declaration of the form called ``name``; ValueError for an unknown name."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"observation: unknown form {name!r}; expected one of {OBSERVATION_FORM_NAMES}") from None


def observe(cfg: EnvConfig, state: State) -> jax.Array:
    """The per-agent observation selected by ``cfg.observation``."""
    return observation_form(cfg.observation).compute(cfg, state)


@functools.lru_cache(maxsize=None)
def _batched_form(cfg: EnvConfig, form):
    """``form(cfg, state)`` whose ``jax.vmap`` computes the whole batch in one environment-last kernel."""
    return vmap_as_batch(functools.partial(form, cfg))


def observation_shape(cfg: EnvConfig) -> tuple:
    """``(N, *F)`` of ``cfg.observation``."""
    return observation_form(cfg.observation).shape(cfg)
