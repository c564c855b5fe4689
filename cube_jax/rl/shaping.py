"""Optional shaped reward built from the symbolic concepts (``cube_jax.symbolic.concepts``).

Potential-based (Ng, Harada & Russell 1999), so it leaves the optimal policies of the
papers' reward unchanged: the shaping term of a step ``s -> s'`` is
``gamma * phi(s') - phi(s)`` with

    phi(s) = progress(s) + align_weight * alignment(s) + reach_weight * reach(s)

* ``progress(s) = - sum_b alive_b * w_b * dist_b / (K * sum_b w_b)`` in [-1, 0], where
  ``dist_b`` is how many columns block ``b`` still has to travel to the goal column
  (the concept ``block_progress``). A delivered block counts as finished.
* ``alignment(s) = sum_b w_b * q_b / sum_b w_b`` in [0, 1], where for an alive block
  ``q_b = min(a_b, F_b) / F_b`` with ``a_b`` the agents aligned with its left face
  (``count_aligned_agents``: they would push it towards the goal) and ``F_b`` the force
  that face needs (``required_force``: the block's weight plus the blocks it would push
  ahead of it); a delivered block has ``q_b = 1``. It rewards gathering a quorum behind a
  heavy block before it can move at all, which the progress term cannot see.
* ``reach(s) = - sum_b alive_b * w_b * m_b / (2K * sum_b w_b)`` in [-1, 0], where ``m_b``
  is the mean Manhattan distance (the concept ``distance_to_face``) from the block's left
  face to the ``min(F_b, N)`` agents nearest to it. It draws agents back to blocks nobody
  is working on, for example the last block of "easy" once the others are delivered.
  With ``reach="nearest"`` it is instead ``- mean_i min_b m_ib / (2K)`` over the agents,
  where ``m_ib`` is agent ``i``'s distance to alive block ``b``'s left face: each agent is
  drawn to the block nearest to it. Summed over blocks (the default, ``"quorum"``), the
  distances of random layouts on a large grid pull every agent towards a point between
  the blocks, where moving towards any one of them costs as much as it gains; the
  n-curriculum's agents were seen hovering there for whole episodes. With
  ``reach="focus"`` one block claims its quorum first: the focus block is the heaviest
  alive block (the lowest index among equals), its ``min(w_f, N)`` agents nearest to its
  left face count their distance to that face, and every other agent its distance to its
  nearest alive block's left face (the ``"nearest"`` form); the term is minus the mean over
  the agents, over 2K. A block of weight 3 needs three agents on its left face in the same
  step, which the nearest form asks of no one: each agent is drawn to whichever block is
  nearest to it.

Being potential-based, that term changes no advantage once the critic has learned the
shaped values: ``Q'(s, a) = Q(s, a) - phi(s)``. A seed whose policy never delivers the
last block therefore gets no lasting signal from it to walk back (the stall at two blocks
of three on "easy"). The second, dense term is a per-step reward ``phi(s') -
align_weight`` (``<= 0``, and 0 exactly once every block is delivered): a distance penalty
that ends when the task does, so walking towards a forgotten block pays for the rest of
the episode whatever the policy does later. It shifts the optimum only towards finishing
with less distance left over time, and evaluation never sees it.

The environment's own reward is untouched; the terms are returned in
``extras["shaping"]`` and ``extras["potential"]``, and the trainer adds
``coef * shaping + dense_coef * potential`` when shaping is switched on.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from cube_jax.core.batching import env_first, env_last, vmap_as_batch
from cube_jax.core.types import ACTION_DELTAS, State
from cube_jax.symbolic.concepts import (blocks_in_front, chain_closure_weights, chain_weights, distance_to_face,
                                        face_aligned_counts, push_action)
from cube_jax.symbolic.vocabulary import LEFT_FACE, goal_distance


def block_progress_potential(state: State) -> jax.Array:
    """float32[]: minus the weighted remaining distance of alive blocks, in [-1, 0]."""
    return _progress_term(state.grid_size, state.block_pos[:, 1], state.block_weight, state.block_alive)


def _progress_term(k: int, col, weight, alive) -> jax.Array:
    """float32[*T]: the progress term from the blocks' columns, weights and alive flags
    ``[B, *T]`` (``T``: trailing batch axes, none for one state)."""
    w = weight.astype(jnp.float32)
    dist = goal_distance(k, col, weight, alive).astype(jnp.float32)  # columns still to go, 0 once delivered
    return -jnp.sum(w * dist, axis=0) / (k * jnp.sum(w, axis=0))


def _left_face_force(state: State) -> jax.Array:
    """float32[B]: force each block's left face needs (``required_force`` of every alive block), at least 1."""
    return jnp.maximum(chain_weights(state, LEFT_FACE), 1).astype(jnp.float32)


def _alignment(state: State, force: jax.Array) -> jax.Array:
    w = state.block_weight.astype(jnp.float32)
    aligned = face_aligned_counts(state, LEFT_FACE).astype(jnp.float32)  # [B]
    share = jnp.where(state.block_alive, jnp.minimum(aligned, force) / force, 1.0)
    return jnp.sum(w * share) / jnp.sum(w)


REACH_MODES = ("quorum", "nearest", "focus")


def _face_distances(state: State) -> jax.Array:
    """float32[B, N]: every agent's distance to every block's left face."""

    def face_distances(block):  # float32[N]: every agent's distance to the block's left face line
        return jax.vmap(lambda pos: distance_to_face(state, pos, block, LEFT_FACE))(state.agent_pos)

    return jax.vmap(face_distances)(jnp.arange(state.block_pos.shape[0])).astype(jnp.float32)


def _reach_per_agent(state: State, mode: str) -> jax.Array:
    """float32[]: the "nearest" or "focus" reach term of one state."""
    return _reach_term(state.grid_size, _face_distances(state), state.block_weight, state.block_alive, mode)


def _reach_term(k: int, face, weight, alive, mode: str, force=None) -> jax.Array:
    """float32[*T]: the reach term from every agent's distance to every block's left face
    ``face`` float32[B, N, *T] and the blocks' weights and alive flags ``[B, *T]``; the
    quorum form also takes the left faces' ``force`` [B, *T]."""
    if mode != "quorum":
        nearest = jnp.min(jnp.where(alive[:, None], face, jnp.inf), axis=0)  # [N, *T]; inf once all delivered
        if mode == "focus":
            b = face.shape[0]
            # the heaviest alive block, the lowest index among equals: a score no other block ties
            order = jnp.arange(b, dtype=jnp.int32).reshape((b,) + (1,) * (weight.ndim - 1))
            score = jnp.where(alive, weight.astype(jnp.int32) * b + (b - 1 - order), -1)
            focus = alive & (score == jnp.max(score, axis=0))  # [B, *T], one block (none once all are delivered)
            to_focus = jnp.sum(jnp.where(focus[:, None], face, 0.0), axis=0)  # [N, *T]
            quorum = jnp.minimum(jnp.sum(jnp.where(focus, weight, 0), axis=0), face.shape[1])  # [*T]
            claimed = _rank(to_focus, axis=0) < quorum  # the quorum agents nearest to the focus block
            nearest = jnp.where(claimed, to_focus, nearest)
        return -jnp.mean(jnp.where(jnp.isfinite(nearest), nearest, 0.0), axis=0) / (2 * k)
    w = weight.astype(jnp.float32)
    quorum = jnp.minimum(force, face.shape[1])  # [B, *T]
    counted = _rank(face, axis=1) < quorum[:, None]  # the quorum nearest agents of each block
    mean = jnp.sum(jnp.where(counted, face, 0.0), axis=1) / quorum
    return -jnp.sum(jnp.where(alive, w * mean, 0.0), axis=0) / (2 * k * jnp.sum(w, axis=0))


SORT_MIN_AGENTS = 32


def _rank(dist: jax.Array, axis: int = -1) -> jax.Array:
    """int32[B, N, ...]: each agent's place among the agents (along ``axis`` of ``dist``) by
    distance to each block, nearest first (ties by agent id). Up to SORT_MIN_AGENTS agents
    by counting who comes first (elementwise; XLA sorts a small axis on CPU as slowly as a
    large one), above by a sort."""
    axis = axis % dist.ndim
    n = dist.shape[axis]
    if n > SORT_MIN_AGENTS:
        return jnp.argsort(jnp.argsort(dist, axis=axis, stable=True), axis=axis).astype(jnp.int32)
    mine, theirs = jnp.expand_dims(dist, axis + 1), jnp.expand_dims(dist, axis)  # [.., i, 1, ..], [.., 1, j, ..]
    shape = [1] * (dist.ndim + 1)
    shape[axis + 1] = n
    ids_j = jnp.arange(n).reshape(shape)
    ids_i = jnp.swapaxes(ids_j, axis, axis + 1)
    before = (theirs < mine) | ((theirs == mine) & (ids_j < ids_i))  # j before i
    return jnp.sum(before, axis=axis + 1, dtype=jnp.int32)


def _reach(state: State, force: jax.Array) -> jax.Array:
    return _reach_term(state.grid_size, _face_distances(state), state.block_weight, state.block_alive, "quorum", force)


def alignment_potential(state: State) -> jax.Array:
    """float32[]: weight-averaged share of each block's quorum aligned on its left face, in [0, 1]."""
    return _alignment(state, _left_face_force(state))


def reach_potential(state: State, mode: str = "quorum") -> jax.Array:
    """float32[]: in [-1, 0]; ``"quorum"``: minus the weighted distance from each alive block's left
    face to its nearest quorum; ``"nearest"``: minus each agent's distance to the nearest left face;
    ``"focus"``: the nearest form, except that the heaviest alive block's quorum of nearest agents
    count their distance to its left face."""
    _check_reach_mode(mode)
    return _reach(state, _left_face_force(state)) if mode == "quorum" else _reach_per_agent(state, mode)


def _check_reach_mode(mode: str) -> None:
    if mode not in REACH_MODES:
        raise ValueError(f"reach mode must be one of {', '.join(REACH_MODES)}, got {mode!r}")


def shaping_potential(state: State, align_weight: float = 0.0, reach_weight: float = 0.0,
                      reach: str = "quorum") -> jax.Array:
    """float32[*lead]: ``progress + align_weight * alignment + reach_weight * reach`` (see the
    module doc) of a state or of a batch of states with any leading axes.

    Computed on the blocks' and agents' arrays laid out environments last (as the step rules
    and the observations are), also under ``jax.vmap``, which hands it the whole batch: the
    arrays of one environment are a few blocks and agents long, too short for the CPU's
    vector units, and the potential is computed twice in every step of a shaped rollout.
    The same values as :func:`potential_of_one_state` (tested).
    """
    _check_reach_mode(reach)
    return vmap_as_batch(lambda s: _potential_env_last(s, float(align_weight), float(reach_weight), reach))(state)


def _potential_env_last(state: State, align_weight: float, reach_weight: float, reach: str) -> jax.Array:
    lead = state.t.shape
    k = state.grid_size
    f32 = jnp.float32
    pos, bpos = env_last(state.agent_pos, lead, 2), env_last(state.block_pos, lead, 2)
    ar, ac = pos[:, 0], pos[:, 1]  # [N, E]
    br, bc = bpos[:, 0], bpos[:, 1]  # [B, E]
    w, alive = env_last(state.block_weight, lead, 1), env_last(state.block_alive, lead, 1)
    phi = _progress_term(k, bc, w, alive)
    quorum_reach = reach_weight and reach == "quorum"
    force = None
    if align_weight or quorum_reach:  # the left face's force, shared by both terms
        front = blocks_in_front(br, bc, w, alive, jnp.asarray(ACTION_DELTAS, jnp.int32)[push_action(LEFT_FACE)])
        force = jnp.maximum(chain_closure_weights(front, w), 1).astype(f32)  # [B, E]
    if align_weight:
        # the alignment term, state by state (chains of agents through a grid)
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[len(lead):]), state)
        share = jax.vmap(_alignment)(flat, jnp.moveaxis(force, -1, 0))  # [E]
        phi = phi + align_weight * share
    if reach_weight:
        # every agent's distance to every block's left face line (DYNAMICS.md cells; walls ignored)
        rows = jnp.maximum(br[:, None] - ar[None], 0) + jnp.maximum(ar[None] - (br + w - 1)[:, None], 0)
        face = (rows + jnp.abs(ac[None] - (bc - 1)[:, None])).astype(f32)  # [B, N, E]
        phi = phi + reach_weight * _reach_term(k, face, w, alive, reach, force)
    return env_first(phi, lead)


def potential_of_one_state(state: State, align_weight: float = 0.0, reach_weight: float = 0.0,
                           reach: str = "quorum") -> jax.Array:
    """float32[]: :func:`shaping_potential` of one state, term by term through the symbolic
    concepts (the definition the batched form is tested against)."""
    _check_reach_mode(reach)
    phi = block_progress_potential(state)
    quorum_reach = reach_weight and reach == "quorum"
    force = _left_face_force(state) if align_weight or quorum_reach else None  # shared by both terms
    if align_weight:
        phi = phi + align_weight * _alignment(state, force)
    if reach_weight:
        phi = phi + reach_weight * (_reach(state, force) if quorum_reach else _reach_per_agent(state, reach))
    return phi


class ShapingWrapper:
    """Adds ``extras["shaping"]`` float32[] = gamma * phi(s') - phi(s) and
    ``extras["potential"]`` float32[] = phi(s') - align_weight to every step.

    Put it innermost (under the auto-reset) so that ``s'`` is the pre-reset state.
    """

    def __init__(self, env, gamma: float, align_weight: float = 0.0, reach_weight: float = 0.0,
                 reach: str = "quorum"):
        _check_reach_mode(reach)
        self._env = env
        self.gamma = float(gamma)
        self.align_weight = float(align_weight)
        self.reach_weight = float(reach_weight)
        self.reach = reach

    def __getattr__(self, name):
        return getattr(self._env, name)

    def potential(self, state: State) -> jax.Array:
        return shaping_potential(state, self.align_weight, self.reach_weight, self.reach)

    def reset(self, key):
        state, ts = self._env.reset(key)
        return state, ts.replace(extras=dict(ts.extras, shaping=jnp.float32(0.0), potential=jnp.float32(0.0)))

    def step(self, state: State, actions):
        before = self.potential(state)
        state, ts = self._env.step(state, actions)
        after = self.potential(state)
        shaping = self.gamma * after - before
        # phi(s') shifted so that it is <= 0 and 0 exactly once every block is delivered.
        dense = after - self.align_weight
        return state, ts.replace(extras=dict(ts.extras, shaping=shaping, potential=dense))
