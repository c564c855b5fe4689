"""The push phases of DYNAMICS.md: agent chains, forces, composites, and what moves.

A push phase in direction d runs in four steps, each a small function over entity arrays:

1. agent chains: the first cell past the line of pushers ahead of each pusher must be a cell
   of block j (:func:`chain_targets`), and F_j counts the agents in chains on j
   (:func:`forces`);
2. V, the pushed blocks plus everything downstream of them through "in front of";
3. composites: the connected components of the contact graph inside V. Inside V, two blocks
   that touch along d are always in the same composite (the one in front is downstream of
   whatever pushed block reaches the one behind), and two pushed blocks whose C sets share a
   block are joined through that block;
4. a composite moves when its force is at least its weight and none of its blocks is stuck
   (:func:`stuck`); the agents in chains on it move with it.

Two kernels compute this. :func:`push_phase_folded` (up to 64 blocks) keeps block relations
as ``uint32`` bit rows and every relation as an unrolled fold; :func:`push_phase` (more
blocks) keeps them as boolean ``[B, B, E]`` relations composed by folds. Values read more than
once come out of regions (:func:`cube_jax.core.batching.region`), so that XLA does not
recompute them (pointer jumping included) in every consumer.
"""
from __future__ import annotations

import functools
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from cube_jax.core.batching import region
from cube_jax.core.bodies import NO_CELL, Bodies, Marks, Orders, Pushed, action_targets, alive_side, cell_key, in_square
from cube_jax.core.folds import (ceil_log2, compose_rows, fold_bits, fold_over, has_bit, has_bit_at, no_bits, row_bits,
                                 select_match, until_stable)
from cube_jax.core.types import ACTION_DELTAS, DOWN, RIGHT, UP, EnvConfig

# Lines of pushers are counted with one uint32 bit row per agent up to this many agents.
BITSET_MAX_AGENTS = 32


# --- lines of pushers --------------------------------------------------------------------------


def _ahead_count(bits: jax.Array) -> jax.Array:
    """int32: the run of ones from bit 0 of ``bits`` (count trailing ones)."""
    gaps = ~bits
    return lax.population_count((gaps & (jnp.uint32(0) - gaps)) - jnp.uint32(1)).astype(jnp.int32)


def pushers_ahead(ar, ac, pusher, d: int) -> jax.Array:
    """int32[N, E]: how many consecutive cells ahead of each agent, in d, hold pushers."""
    n = ar.shape[0]
    dr, dc = ACTION_DELTAS[d]
    if n <= BITSET_MAX_AGENTS:
        if dr:
            same_line, dist = ac[None] == ac[:, None], (ar[None] - ar[:, None]) * dr
        else:
            same_line, dist = ar[None] == ar[:, None], (ac[None] - ac[:, None]) * dc
        # Bit (dist-1) is set for every pusher at that distance ahead; the run of ones from
        # bit 0 is the line of pushers in front of the agent.
        ahead = same_line & pusher[None] & (dist >= 1) & (dist <= 32)
        shift = jnp.clip(dist - 1, 0, 31).astype(jnp.uint32)
        bits = jnp.where(ahead, jnp.left_shift(jnp.uint32(1), shift), jnp.uint32(0)).sum(1, dtype=jnp.uint32)
        return _ahead_count(bits)
    # Pointer jumping (more than 32 agents): the count of every push phase at once, see
    # :func:`pushers_ahead_all`.
    return pushers_ahead_all(ar, ac, jnp.where(pusher, d, 0))


def pushers_ahead_folded(ar, ac, pusher, d: int) -> jax.Array:
    """:func:`pushers_ahead` as a fold over the agents standing ahead."""
    dr, dc = ACTION_DELTAS[d]
    bits = jnp.zeros(ar.shape, jnp.uint32)
    for m in range(ar.shape[0]):
        if dr:
            same_line, dist = ac[m][None] == ac, (ar[m][None] - ar) * dr
        else:
            same_line, dist = ar[m][None] == ar, (ac[m][None] - ac) * dc
        ahead = same_line & pusher[m][None] & (dist >= 1) & (dist <= 32)
        bits = bits | jnp.where(ahead, jnp.left_shift(jnp.uint32(1), jnp.clip(dist - 1, 0, 31).astype(jnp.uint32)), 0)
    return _ahead_count(bits)


def pushers_ahead_all(ar, ac, actions) -> jax.Array:
    """int32[N, E]: for each agent with a move action d (1-4), how many consecutive cells ahead
    of it, in d, hold agents whose action is d too; 0 for STAY.

    In push phase d only the agents whose action is d move, so those agents stand where the
    step started until their own phase: the counts of all four phases come from the starting
    positions, in one pass over agent pairs instead of four. Pointer jumping: each agent points
    at the agent with its action on the next cell ahead (or at itself) and counts hops;
    ceil(log2 N) rounds of ptr = ptr[ptr] reach the end of every line.
    """
    n = ar.shape[0]
    tr, tc = action_targets(ar, ac, actions)
    # keys of (cell, action): a STAY agent's query matches no one (every key held has action 1-4)
    query = cell_key(tr, tc) * 8 + actions
    held = jnp.where(actions > 0, cell_key(ar, ac) * 8 + actions, NO_CELL)

    def right_ahead(j):  # agents with agent j, of the same action, on the next cell ahead get j + 1
        return held[j][None] == query, j + 1

    # one cell holds one agent at most, so a select keeps the only match (one op fewer than a max)
    ahead = fold_over(n, right_ahead, select_match, jnp.zeros(ar.shape, jnp.int32))  # 1 + index, or 0
    has = ahead > 0
    # hops and pointer packed in one int32 (hops << 16 | ptr; N <= 4096), so that a round is one gather
    ptr = jnp.where(has, ahead - 1, jnp.arange(n, dtype=jnp.int32)[:, None])
    packed = jnp.left_shift(has.astype(jnp.int32), 16) | ptr

    def jump(packed):
        further = jnp.take_along_axis(packed, packed & 0xFFFF, axis=0)
        return (packed & ~0xFFFF) + (further & ~0xFFFF) | (further & 0xFFFF)

    # Lines have no cycles, so the pointers settle at the ends of the lines: a batch takes
    # about log2 of its longest line in rounds (one, when no line is longer than two), and
    # never more than ceil(log2 N).
    return jnp.right_shift(until_stable(jump, packed, ceil_log2(n)), 16)


# --- agent chains and forces (both kernels) ----------------------------------------------------


def chain_targets(d: int, ar, ac, run, pusher, br, bc, w, alive) -> jax.Array:
    """int32[N, E]: 1 + the block holding the cell ``run`` cells ahead of each pusher, or 0."""
    dr, dc = ACTION_DELTAS[d]
    tr, tc = ar + dr * run, ac + dc * run
    side = alive_side(w, alive)
    target = jnp.zeros(ar.shape, jnp.int32)
    for j in range(br.shape[0]):
        target = jnp.where(in_square(tr, tc, br[j], bc[j], side[j]), j + 1, target)
    return jnp.where(pusher, target, 0)


def forces(target: jax.Array, b: int) -> jax.Array:
    """int32[B, E]: F_j, the number of agents in chains on block j."""
    ids = jnp.arange(1, b + 1, dtype=jnp.int32)[:, None]
    return fold_over(target.shape[0], lambda n: (target[n][None] == ids).astype(jnp.int32), jnp.add,
                     jnp.zeros((b,) + target.shape[1:], jnp.int32))


def stuck(d: int, k: int, ar, ac, br, bc, w, moved) -> jax.Array:
    """bool[B, E]: block j cannot move (moved already, would leave the grid, agent ahead)."""
    dr, dc = ACTION_DELTAS[d]
    tr, tc = br + dr, bc + dc

    side = w.astype(jnp.uint32)

    def ahead(n):
        return in_square(ar[n], ac[n], tr, tc, side)

    agent_ahead = fold_over(ar.shape[0], ahead, jnp.logical_or, jnp.zeros(br.shape, bool))
    outside = (tr < 0) | (tc < 0) | (tr + w > k) | (tc + w > k)
    return moved | outside | agent_ahead


# --- the large kernel (more than 64 blocks) ----------------------------------------------------


def block_in_front(br, bc, w, alive, d: int) -> jax.Array:
    """bool[B, B, E]: ``[j, k]`` when alive block k is in front of alive block j in direction d.

    Blocks never overlap, so "some cell of k is a cell of j shifted by d" means k's near
    face lies on the line just past j's far face and the two squares overlap across d.
    """
    a, x = (br, bc) if d in (UP, DOWN) else (bc, br)
    if d in (DOWN, RIGHT):
        touching = a[None] == (a + w)[:, None]
    else:
        touching = (a + w)[None] == a[:, None]
    overlap = (x[None] < (x + w)[:, None]) & (x[:, None] < (x + w)[None])
    return touching & overlap & alive[:, None] & alive[None]


def composites(front: jax.Array, pushed: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """Composite membership for one push phase of the large kernel.

    ``front`` bool[B, B, E]: ``[j, k]`` when block k is in front of block j; ``pushed``
    bool[B, E]: blocks with force > 0. Returns ``member`` bool[B, B, E] (``[x, y]`` when x
    and y are in the same composite) and ``in_composite`` bool[B, E].
    """
    b = front.shape[0]
    movable = until_stable(lambda m: m | (m[:, None] & front).any(0), pushed)
    eye = jnp.eye(b, dtype=bool)[:, :, None]
    touch = (front | jnp.swapaxes(front, 0, 1) | eye) & movable[:, None] & movable[None]

    def square(rel):
        # rel composed with itself as a fold over the middle block: batched tiny matrix
        # products (or a reduction over y) run as scalar loops on CPU
        return fold_over(b, lambda y: rel[:, y][:, None] & rel[y][None], jnp.logical_or, jnp.zeros_like(rel))

    return until_stable(square, touch), movable


def _composite_moves(member, in_composite, force, w, cannot_move) -> jax.Array:
    """bool[B, E]: the block's composite moves (its force minus its weight at least 0, and no
    block of it stuck)."""
    def term(y):
        return jnp.where(member[:, y], force[y] - w[y], 0), member[:, y] & cannot_move[y]

    def combine(acc, t):
        return acc[0] + t[0], acc[1] | t[1]

    b = force.shape[0]
    surplus, blocked = fold_over(b, term, combine, (jnp.zeros(force.shape, jnp.int32), jnp.zeros(force.shape, bool)))
    return in_composite & (surplus >= 0) & ~blocked


def _chain_moves(target, block_moves) -> jax.Array:
    """bool[N, E]: the agent is in a chain on a block that moves."""
    b = block_moves.shape[0]
    return fold_over(b, lambda j: (target == j + 1) & block_moves[j], jnp.logical_or, jnp.zeros(target.shape, bool))


def push_phase(cfg: EnvConfig, keep, d: int, orders: Orders, bodies: Bodies, marks: Marks) -> Pushed:
    """One push phase in direction d, the large kernel (more than 64 blocks)."""
    ar, ac, br, bc, w, alive = (bodies.agent_row, bodies.agent_col, bodies.block_row, bodies.block_col,
                                bodies.weight, bodies.alive)
    k, b = cfg.grid_size, br.shape[0]
    pusher = orders.actions == d
    run = orders.run
    if run is None:
        run = region(keep, lambda *a: pushers_ahead(*a, d) + 1, ar, ac, pusher)
    # Agent/block relations are folds (over blocks, or over agents in chunks) rather than
    # [N, B, E] arrays reduced over the block axis, which CPU code does as scalar loops.
    target = region(keep, functools.partial(chain_targets, d), ar, ac, run, pusher, br, bc, w, alive)
    force, cannot_move = region(keep, lambda t, *a: (forces(t, b), stuck(d, k, *a)),
                                target, ar, ac, br, bc, w, marks.moved)
    member, in_composite = composites(block_in_front(br, bc, w, alive, d), force > 0)
    block_moves = region(keep, _composite_moves, member, in_composite, force, w, cannot_move)
    agent_moves = region(keep, _chain_moves, target, block_moves)
    engaged = marks.engaged | (target > 0)
    return Pushed(bodies.shifted(d, agent_moves, block_moves), Marks(engaged, marks.moved | block_moves), force)


# --- the folded kernel (up to 64 blocks) -------------------------------------------------------


def front_rows(d: int, br, bc, w, alive) -> jax.Array:
    """uint32[W, B, E] bit rows: bit k of row j when alive block k is in front of alive block j
    in direction d (see :func:`block_in_front`)."""
    a, x = (br, bc) if d in (UP, DOWN) else (bc, br)
    forward = d in (DOWN, RIGHT)
    a_end, x_end = a + w, x + w

    def in_front(k):
        touching = (a[k] == a_end) if forward else (a_end[k] == a)
        return touching & (x[k] < x_end) & (x < x_end[k]) & alive[k]

    return row_bits(in_front, br.shape[0]) & jnp.where(alive, ~jnp.uint32(0), jnp.uint32(0))


def touch_rows(front: jax.Array) -> jax.Array:
    """uint32[W, B, E]: the contact relation made undirected (front or its transpose), plus self."""
    b = front.shape[1]
    rows = jnp.arange(b)[:, None]
    behind = fold_bits([has_bit_at(front[:, k][:, None], rows) for k in range(b)])  # bit k of row j: j in front of k
    own = np.zeros(front.shape[:2] + (1,), np.uint32)
    own[np.arange(b) // 32, np.arange(b), 0] = np.uint32(1) << (np.arange(b) % 32).astype(np.uint32)
    return front | behind | jnp.asarray(own)


def _downstream_of(movable, front) -> jax.Array:
    """uint32[W, E]: ``movable`` and every block directly in front of one of them."""
    out = movable
    for j in range(front.shape[1]):
        out = out | jnp.where(has_bit(movable, j)[None], front[:, j], jnp.uint32(0))
    return out


def _composite_rows(force, front, touch) -> Tuple[jax.Array, jax.Array]:
    """(uint32[W, E] V as a bit set, uint32[W, B, E] composite membership rows inside V)."""
    b = force.shape[0]
    # V: the pushed blocks and everything downstream of them, hop by hop
    movable = fold_bits(list(force > 0))
    if b > 1:  # a lone block has nothing in front of it: V is the pushed set
        movable = until_stable(lambda m: _downstream_of(m, front), movable)
    # composites: connected components of the contact graph inside V, by doubling
    in_v = jnp.where(has_bit_at(movable[:, None], jnp.arange(b)[:, None])[None], movable[:, None], jnp.uint32(0))
    comp = touch & in_v
    if b > 1:  # a lone block is its own composite
        comp = until_stable(compose_rows, comp)
    return movable, comp


def _block_moves(movable, comp, stuck, force, w) -> Tuple[jax.Array, jax.Array]:
    """(bool[B, E] blocks whose composite moves, uint32[W, E] the same as a bit set): in V, the
    composite's force at least its weight, and no block of it stuck."""
    b = comp.shape[1]
    surplus = jnp.zeros(comp.shape[1:], jnp.int32)  # composite force minus composite weight
    for j in range(b):
        surplus = surplus + jnp.where(has_bit(comp, j), force[j] - w[j], 0)
    stuck_bits = fold_bits(list(stuck))
    in_v = has_bit_at(movable[:, None], jnp.arange(b)[:, None])
    moves = in_v & (surplus >= 0) & no_bits(comp & stuck_bits[:, None])
    return moves, fold_bits(list(moves))


def _folded_start(d: int, k: int, ar, ac, pusher, br, bc, w, alive, moved, *given):
    """(run, front rows, stuck blocks) of a folded push phase: the values of the phase that do
    not depend on the agent chains, in one region. ``given``: (run,) when the step has it."""
    if given:
        (run,) = given
    else:
        # the bit-row count of pushers ahead sees 32 cells; longer lines need pointer jumping
        ahead = pushers_ahead_folded if ar.shape[0] <= BITSET_MAX_AGENTS else pushers_ahead
        run = ahead(ar, ac, pusher, d) + 1
    return run, front_rows(d, br, bc, w, alive), stuck(d, k, ar, ac, br, bc, w, moved)


def push_phase_folded(cfg: EnvConfig, keep, d: int, orders: Orders, bodies: Bodies, marks: Marks) -> Pushed:
    """:func:`push_phase` for up to 64 blocks (any number of agents), as folds in regions.

    Every value read more than once comes out of a region; independent values share one.
    Folds over agents run in chunks of FOLD_CHUNK (see :func:`cube_jax.core.folds.fold_over`)
    above 32 agents.
    """
    ar, ac, br, bc, w, alive = (bodies.agent_row, bodies.agent_col, bodies.block_row, bodies.block_col,
                                bodies.weight, bodies.alive)
    b = br.shape[0]
    pusher = orders.actions == d
    given = () if orders.run is None else (orders.run,)
    start = functools.partial(_folded_start, d, cfg.grid_size)
    run, front, stuck_now = region(keep, start, ar, ac, pusher, br, bc, w, alive, marks.moved, *given)
    target = region(keep, functools.partial(chain_targets, d), ar, ac, run, pusher, br, bc, w, alive)
    force, touch = region(keep, lambda t, f: (forces(t, b), touch_rows(f)), target, front)
    movable, comp = _composite_rows(force, front, touch)
    block_moves, moves_bits = region(keep, _block_moves, movable, comp, stuck_now, force, w)
    agent_moves = (target > 0) & has_bit_at(moves_bits[:, None], jnp.maximum(target - 1, 0))
    engaged = marks.engaged | (target > 0)
    return Pushed(bodies.shifted(d, agent_moves, block_moves), Marks(engaged, marks.moved | block_moves), force)
