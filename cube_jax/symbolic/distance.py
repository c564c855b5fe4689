"""Breadth-first distance fields on the K x K grid, computed by array relaxation.

A distance field holds, for every cell, the number of moves along free cells to the
nearest goal cell. Instead of a queue, every cell repeatedly takes ``1 + min`` over its
four neighbours (Bellman-Ford on a unit-weight grid); after ``i`` rounds every cell
within ``i`` moves of a goal holds its exact BFS distance, so the loop stops at the
first round that changes nothing. That is one round more than the longest shortest
path, which is below ``K * K``; ``lax.while_loop`` carries the "changed" flag, so the
cost follows the real path lengths rather than the worst case, and under ``vmap`` the
batch runs until its slowest member settles (the others stay fixed, which is harmless).

Cells that are not passable, and passable cells with no path to a goal, hold
``unreachable(K) = K * K``, larger than any real distance.

>>> import jax.numpy as jnp
>>> free = jnp.ones((4, 4), bool).at[1, 0:3].set(False)   # a wall with a gap on the right
>>> goal = jnp.zeros((4, 4), bool).at[0, 0].set(True)
>>> field = distance_field(free, goal)
>>> [int(x) for x in field[2]]
[8, 7, 6, 5]
>>> int(next_action(field, jnp.array([2, 0])))   # RIGHT, along the wall to the gap
4
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax

from cube_jax.core.types import ACTION_DELTAS, STAY

# Neighbour order used for ties: UP, DOWN, LEFT, RIGHT (the action ids 1..4).
STEP_ACTIONS = (1, 2, 3, 4)


def unreachable(k: int) -> int:
    """The value of cells with no path to a goal: K*K, more than any path on the grid."""
    return k * k


def neighbour_values(field: jax.Array, fill) -> jax.Array:
    """int32[4, K, K]: ``[a, p]`` = field at the cell one step from p by action a+1 (fill off-grid)."""
    k = field.shape[0]
    padded = jnp.pad(field, 1, constant_values=fill)
    views = []
    for action in STEP_ACTIONS:
        dr, dc = ACTION_DELTAS[action]
        views.append(lax.slice(padded, (1 + dr, 1 + dc), (1 + dr + k, 1 + dc + k)))
    return jnp.stack(views)


def distance_field(passable: jax.Array, goals: jax.Array, stop_at: Optional[jax.Array] = None) -> jax.Array:
    """int32[K, K] moves from each cell to the nearest goal, through passable cells only.

    ``passable`` bool[K, K]: cells a path may use. ``goals`` bool[K, K]: target cells; a
    goal that is not passable is ignored. Impassable or cut-off cells hold ``K * K``.

    With ``stop_at`` (int32[2]) the relaxation ends as soon as that cell has a finite
    distance: rounds settle cells in order of distance, so every cell at most that far is
    then final (all a step choice from ``stop_at`` reads); farther cells may still hold
    upper bounds.
    """
    k = passable.shape[0]
    far = unreachable(k)
    start = jnp.where(goals & passable, 0, far).astype(jnp.int32)

    def unsettled(carry):
        field, changed = carry
        if stop_at is None:
            return changed
        return changed & (field[stop_at[0], stop_at[1]] >= far)

    def relax(carry):
        field, _ = carry
        best = neighbour_values(field, far).min(0) + 1
        new = jnp.where(passable, jnp.minimum(field, best), far)
        return new, jnp.any(new != field)

    field, _ = lax.while_loop(unsettled, relax, (start, jnp.array(True)))
    return field


def next_action(field: jax.Array, pos: jax.Array) -> jax.Array:
    """int32[]: the action that steps from ``pos`` (int32[2]) down ``field``, or STAY.

    The agent moves to the neighbour with the smallest distance when that is finite and
    smaller than the distance of its own cell (its own cell may be impassable, e.g. when
    agents are obstacles, and then holds K*K). Ties go to the first of UP, DOWN, LEFT,
    RIGHT. At a goal (distance 0) or with no way closer, it stays.
    """
    k = field.shape[0]
    far = unreachable(k)
    around = neighbour_values(field, far)[:, pos[0], pos[1]]  # int32[4]
    best = jnp.argmin(around)
    here = field[pos[0], pos[1]]
    go = (around[best] < far) & (around[best] < here)
    return jnp.where(go, jnp.asarray(STEP_ACTIONS, jnp.int32)[best], STAY).astype(jnp.int32)


__all__ = ["STEP_ACTIONS", "distance_field", "neighbour_values", "next_action", "unreachable"]
