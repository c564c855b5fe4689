"""What the step kernel's phases pass each other: small structs of environment-last arrays,
and the cell geometry they share.

A step is a chain of phases over these structs (see :mod:`cube_jax.core.dynamics`): every push
phase takes the :class:`Orders`, the :class:`Bodies` and the :class:`Marks` so far and returns
a :class:`Pushed`; the movement phase takes the bodies after the pushes and moves the agents.
Every array's last axis runs over environments (``E``).
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from flax import struct

from cube_jax.core.checks import MAX_GRID_SIZE
from cube_jax.core.types import ACTION_DELTAS, DOWN, LEFT, RIGHT, UP


@struct.dataclass
class Bodies:
    """Where the agents and blocks stand, and the blocks' weights and whether they are alive."""

    agent_row: jax.Array  # int32[N, E]
    agent_col: jax.Array  # int32[N, E]
    block_row: jax.Array  # int32[B, E] top row of each block
    block_col: jax.Array  # int32[B, E] left column of each block
    weight: jax.Array  # int32[B, E] weight, which is also the block's side
    alive: jax.Array  # bool[B, E] not delivered yet

    def shifted(self, d: int, agent_moves: jax.Array, block_moves: jax.Array) -> "Bodies":
        """The agents of ``agent_moves`` (bool[N, E]) and the blocks of ``block_moves``
        (bool[B, E]) one cell further in direction d."""
        dr, dc = ACTION_DELTAS[d]
        step_b, step_a = block_moves.astype(jnp.int32), agent_moves.astype(jnp.int32)
        return self.replace(agent_row=self.agent_row + dr * step_a, agent_col=self.agent_col + dc * step_a,
                            block_row=self.block_row + dr * step_b, block_col=self.block_col + dc * step_b)


@struct.dataclass
class Orders:
    """What the agents were told to do in this step."""

    actions: jax.Array  # int32[N, E] 0 STAY, 1 UP, 2 DOWN, 3 LEFT, 4 RIGHT (out of range mapped to STAY)
    # int32[N, E] 1 + the count of pushers in line ahead of each agent in its own direction,
    # when the step counts them once for all four push phases (more than 32 agents); else None
    run: Optional[jax.Array] = None


@struct.dataclass
class Marks:
    """Who has pushed and what has moved in the push phases so far."""

    engaged: jax.Array  # bool[N, E] agents in a chain on a block in some push phase
    moved: jax.Array  # bool[B, E] blocks moved in some push phase

    @classmethod
    def none(cls, agents_shape: tuple, blocks_shape: tuple) -> "Marks":
        return cls(engaged=jnp.zeros(agents_shape, bool), moved=jnp.zeros(blocks_shape, bool))


@struct.dataclass
class Pushed:
    """What one push phase returns."""

    bodies: Bodies  # after the phase's moves
    marks: Marks  # the marks so far, this phase's included
    force: jax.Array  # int32[B, E] F_j: the agents in chains on each block in this phase


# Cells as one int32 key, so that "same cell" is one comparison in the folds over agents:
# with a stride above every column index plus one, two keys of cells within one cell of the
# grid (targets included) are equal only for equal cells.
CELL_KEY_STRIDE = 8192
assert CELL_KEY_STRIDE > MAX_GRID_SIZE + 1 and (MAX_GRID_SIZE + 1) * CELL_KEY_STRIDE < 2**31
NO_CELL = jnp.iinfo(jnp.int32).min  # a key no cell has


def cell_key(r, c) -> jax.Array:
    """int32: one key per cell (see CELL_KEY_STRIDE)."""
    return r * CELL_KEY_STRIDE + c


def action_targets(ar, ac, actions):
    """The cell each agent's action points at (its own cell for STAY)."""
    tr = ar + jnp.where(actions == UP, -1, jnp.where(actions == DOWN, 1, 0))
    tc = ac + jnp.where(actions == LEFT, -1, jnp.where(actions == RIGHT, 1, 0))
    return tr, tc


def alive_side(w, alive) -> jax.Array:
    """uint32[B, E]: each block's side, 0 for a delivered block (which covers no cell)."""
    return jnp.where(alive, w, 0).astype(jnp.uint32)


def in_square(r, c, top, left, side) -> jax.Array:
    """bool: cell (r, c) lies in the square of ``side`` (uint32) cells from (top, left). One
    unsigned comparison per axis covers both of its bounds (a cell before the square wraps
    round to a large number)."""
    return ((r - top).astype(jnp.uint32) < side) & ((c - left).astype(jnp.uint32) < side)
