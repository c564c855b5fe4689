"""Optional shaped reward built from the symbolic concept "block progress toward the goal".

Potential-based (Ng, Harada & Russell 1999), so it leaves the optimal policies of the
papers' reward unchanged: with the potential

    phi(s) = - sum_b alive_b * w_b * dist_b / (K * sum_b w_b),

where ``dist_b`` is how many columns block ``b`` still has to travel to the goal column,
the shaping term of a step ``s -> s'`` is ``gamma * phi(s') - phi(s)``. A delivered block
has potential 0, so delivering a block also counts as finishing its progress. The
environment's own reward is untouched; the term is returned in
``extras["shaping"]`` and the trainer adds ``coef * shaping`` when it is switched on.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from cube_jax.types import State


def block_progress_potential(state: State) -> jax.Array:
    """float32[]: minus the weighted remaining distance of alive blocks, in [-1, 0]."""
    k = state.grid_size
    w = state.block_weight.astype(jnp.float32)  # [B]
    right_col = state.block_pos[:, 1] + state.block_weight - 1  # [B]
    dist = (k - 1 - right_col).astype(jnp.float32)  # [B] columns still to go
    remaining = jnp.sum(jnp.where(state.block_alive, w * dist, 0.0))
    return -remaining / (k * jnp.sum(w))


class ShapingWrapper:
    """Adds ``extras["shaping"]`` float32[] = gamma * phi(s') - phi(s) to every step.

    Put it innermost (under the auto-reset) so that ``s'`` is the pre-reset state.
    """

    def __init__(self, env, gamma: float):
        self._env = env
        self.gamma = float(gamma)

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, key):
        state, ts = self._env.reset(key)
        return state, ts.replace(extras=dict(ts.extras, shaping=jnp.float32(0.0)))

    def step(self, state: State, actions):
        before = block_progress_potential(state)
        state, ts = self._env.step(state, actions)
        shaping = self.gamma * block_progress_potential(state) - before
        return state, ts.replace(extras=dict(ts.extras, shaping=shaping))
