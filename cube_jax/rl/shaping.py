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

from cube_jax.core.types import State
from cube_jax.symbolic.concepts import chain_weights, distance_to_face, face_aligned_counts
from cube_jax.symbolic.vocabulary import LEFT_FACE, goal_distance


def block_progress_potential(state: State) -> jax.Array:
    """float32[]: minus the weighted remaining distance of alive blocks, in [-1, 0]."""
    k = state.grid_size
    w = state.block_weight.astype(jnp.float32)  # [B]
    # [B] columns still to go, 0 for delivered blocks
    dist = goal_distance(k, state.block_pos[:, 1], state.block_weight, state.block_alive).astype(jnp.float32)
    remaining = jnp.sum(w * dist)
    return -remaining / (k * jnp.sum(w))


def _left_face_force(state: State) -> jax.Array:
    """float32[B]: force each block's left face needs (``required_force`` of every alive block), at least 1."""
    return jnp.maximum(chain_weights(state, LEFT_FACE), 1).astype(jnp.float32)


def _alignment(state: State, force: jax.Array) -> jax.Array:
    w = state.block_weight.astype(jnp.float32)
    aligned = face_aligned_counts(state, LEFT_FACE).astype(jnp.float32)  # [B]
    share = jnp.where(state.block_alive, jnp.minimum(aligned, force) / force, 1.0)
    return jnp.sum(w * share) / jnp.sum(w)


def _reach(state: State, force: jax.Array) -> jax.Array:
    k = state.grid_size
    n, b = state.agent_pos.shape[0], state.block_pos.shape[0]
    w = state.block_weight.astype(jnp.float32)

    def face_distances(block):  # float32[N]: every agent's distance to the block's left face line
        return jax.vmap(lambda pos: distance_to_face(state, pos, block, LEFT_FACE))(state.agent_pos)

    dist = jnp.sort(jax.vmap(face_distances)(jnp.arange(b)).astype(jnp.float32), axis=1)  # [B, N], nearest first
    quorum = jnp.minimum(force, n)  # [B]
    counted = jnp.arange(n)[None, :] < quorum[:, None]
    mean = jnp.sum(jnp.where(counted, dist, 0.0), axis=1) / quorum
    return -jnp.sum(jnp.where(state.block_alive, w * mean, 0.0)) / (2 * k * jnp.sum(w))


def alignment_potential(state: State) -> jax.Array:
    """float32[]: weight-averaged share of each block's quorum aligned on its left face, in [0, 1]."""
    return _alignment(state, _left_face_force(state))


def reach_potential(state: State) -> jax.Array:
    """float32[]: minus the weighted distance from each alive block's left face to its nearest quorum, in [-1, 0]."""
    return _reach(state, _left_face_force(state))


def shaping_potential(state: State, align_weight: float = 0.0, reach_weight: float = 0.0) -> jax.Array:
    """float32[]: ``progress + align_weight * alignment + reach_weight * reach`` (see the module doc)."""
    phi = block_progress_potential(state)
    if align_weight or reach_weight:
        force = _left_face_force(state)  # shared by both terms
        if align_weight:
            phi = phi + align_weight * _alignment(state, force)
        if reach_weight:
            phi = phi + reach_weight * _reach(state, force)
    return phi


class ShapingWrapper:
    """Adds ``extras["shaping"]`` float32[] = gamma * phi(s') - phi(s) and
    ``extras["potential"]`` float32[] = phi(s') - align_weight to every step.

    Put it innermost (under the auto-reset) so that ``s'`` is the pre-reset state.
    """

    def __init__(self, env, gamma: float, align_weight: float = 0.0, reach_weight: float = 0.0):
        self._env = env
        self.gamma = float(gamma)
        self.align_weight = float(align_weight)
        self.reach_weight = float(reach_weight)

    def __getattr__(self, name):
        return getattr(self._env, name)

    def potential(self, state: State) -> jax.Array:
        return shaping_potential(state, self.align_weight, self.reach_weight)

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
