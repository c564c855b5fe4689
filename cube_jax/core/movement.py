"""The movement phase of DYNAMICS.md: every agent that is not engaged and not STAY moves,
by rules 1-5.

1. a mover whose target is off the grid or in an alive block fails;
2. among movers with the same target, the smallest id keeps its move;
3. two movers targeting each other's cells fail;
4. a mover whose target holds an agent that does not move fails, to a fixed point;
5. everyone left moves at once.

Two kernels compute this: :func:`movement_phase_folded` (up to 32 agents), where each rule is
an unrolled fold over agents in a region, and :func:`movement_phase` (more agents), where
rule 4 follows "the agent standing on my target" by pointer jumping.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from cube_jax.core.batching import region
from cube_jax.core.bodies import NO_CELL, Bodies, Orders, action_targets, alive_side, cell_key, in_square
from cube_jax.core.folds import ceil_log2, fold_over, select_match, until_stable
from cube_jax.core.types import EnvConfig

# Up to this many agents the blocked-mover rule is iterated to its fixed point directly;
# above it, pointer jumping needs fewer rounds.
FIXPOINT_MAX_AGENTS = 4


def _walls_and_blocks(k: int, tr, tc, mover, br, bc, w, alive):
    """Rule 1: movers whose target is off the grid or in a block fail."""
    outside = (tr < 0) | (tr >= k) | (tc < 0) | (tc >= k)
    side = alive_side(w, alive)
    into_block = jnp.zeros(tr.shape, bool)
    for j in range(br.shape[0]):
        into_block = into_block | in_square(tr, tc, br[j], bc[j], side[j])
    return mover & ~outside & ~into_block


def _moves(bodies: Bodies, mover: jax.Array, tr, tc) -> Bodies:
    """Rule 5: every agent still a mover steps onto its target (``tr``, ``tc`` int32[N, E])."""
    return bodies.replace(agent_row=jnp.where(mover, tr, bodies.agent_row),
                          agent_col=jnp.where(mover, tc, bodies.agent_col))


# --- the large kernel (more than 32 agents) ----------------------------------------------------


def _first_claims(tr, tc, mover):
    """Rule 2 as a fold over claims: the smallest id keeps its move."""
    n = tr.shape[0]
    target = cell_key(tr, tc)
    claim = jnp.where(mover, target, NO_CELL)

    def claims(j):  # mover n - 1 - j has my target; folded from the last id down, the smallest is kept
        return claim[n - 1 - j][None] == target, n - j

    first = fold_over(n, claims, select_match, jnp.zeros(tr.shape, jnp.int32))  # 1 + smallest claimant
    return mover & (first == jnp.arange(1, n + 1, dtype=jnp.int32)[:, None])


def _occupants(tr, tc, ar, ac):
    """int32[N, E]: 1 + the agent standing on each agent's target, or 0."""
    target, cell = cell_key(tr, tc), cell_key(ar, ac)

    def stands_on_target(j):
        return target == cell[j][None], j + 1

    return fold_over(tr.shape[0], stands_on_target, select_match, jnp.zeros(tr.shape, jnp.int32))


def _blocked_by_jumps(mover, occ, taken):
    """Rule 4 for more than FIXPOINT_MAX_AGENTS agents. Movers' targets are distinct now, so
    following "who stands on my target" gives simple lines (ending at a free cell or a stuck
    agent) and rotations (which never end, and move)."""
    n = mover.shape[0]
    free, stuck = n, n + 1
    occupant_moves = jnp.take_along_axis(mover, occ, axis=0)  # after rule 3: the occupant may have lost its move
    ptr = jnp.where(taken, jnp.where(occupant_moves, occ, stuck), free)
    ptr = jnp.where(mover, ptr, stuck).astype(jnp.int32)
    ends = jnp.broadcast_to(jnp.array([[free], [stuck]], jnp.int32), (2,) + ptr.shape[1:])
    table = jnp.concatenate([ptr, ends], axis=0)
    # After ceil(log2 N) rounds every line has reached its end; a rotation never does
    # (its pointers go round), and moves. Most batches settle after a round or two.
    table = until_stable(lambda t: jnp.take_along_axis(t, t, axis=0), table, ceil_log2(n))
    return mover & (table[:n] != stuck)


def movement_phase(cfg: EnvConfig, keep, orders: Orders, bodies: Bodies, engaged: jax.Array) -> Bodies:
    """Moves every agent that is not engaged and not STAY; the path for more than 32 agents or
    more than 64 blocks. Each pass over agent pairs is a region of its own, and pairs are
    visited twice in all (rule 2 and "who stands on my target")."""
    ar, ac, actions = bodies.agent_row, bodies.agent_col, orders.actions
    n = ar.shape[0]
    tr, tc = action_targets(ar, ac, actions)
    mover = ~engaged & (actions != 0)
    # 1. (a fold over blocks: an any() over the block axis of [N, B, E] is a scalar loop per agent on CPU)
    mover = region(keep, functools.partial(_walls_and_blocks, cfg.grid_size), tr, tc, mover, bodies.block_row,
                   bodies.block_col, bodies.weight, bodies.alive)
    mover = region(keep, _first_claims, tr, tc, mover)  # 2.
    # 3. swaps: the agent on my target targets my cell
    occupant = region(keep, _occupants, tr, tc, ar, ac)  # 1 + the agent standing on my target, or 0
    occ = jnp.maximum(occupant - 1, 0)
    taken = occupant > 0
    # the occupant's target and whether it moves, packed in one int32 (keys are below 2**26): one gather
    theirs = jnp.take_along_axis(cell_key(tr, tc) * 2 + mover.astype(jnp.int32), occ, axis=0)
    occupant_moves = (theirs & 1) == 1
    back = jnp.right_shift(theirs, 1) == cell_key(ar, ac)
    mover = mover & ~(occupant_moves & taken & back)
    # 4. blocked, to a fixed point
    if n <= FIXPOINT_MAX_AGENTS:
        for _ in range(n - 1):
            mover = mover & ~(taken & ~jnp.take_along_axis(mover, occ, axis=0))
    else:
        mover = _blocked_by_jumps(mover, occ, taken)
    return _moves(bodies, mover, tr, tc)


# --- the folded kernel (up to 32 agents) -------------------------------------------------------


def _same_target(tr, tc, mover):
    """Rule 2: among movers with the same target, the smallest id keeps its move."""
    ids = jnp.arange(tr.shape[0])[:, None]
    lost = jnp.zeros(tr.shape, bool)
    for m in range(tr.shape[0]):
        lost = lost | ((ids > m) & mover[m] & (tr[m] == tr) & (tc[m] == tc))
    return mover & ~lost


def _swaps(ar, ac, tr, tc, mover):
    """Rule 3 (two movers targeting each other's cells fail), and per agent 1 + the agent
    standing on its target cell (0: none)."""
    swap = jnp.zeros(tr.shape, bool)
    occupant = jnp.zeros(tr.shape, jnp.int32)
    for m in range(tr.shape[0]):
        on_target = (tr == ar[m]) & (tc == ac[m])  # agent m stands on my target
        swap = swap | (on_target & (tr[m] == ar) & (tc[m] == ac) & mover[m])
        occupant = jnp.where(on_target, m + 1, occupant)
    return mover & ~swap, occupant


def _occupant_moves(mover, occupant):
    """bool[N, E]: the agent standing on my target is a mover."""
    out = jnp.zeros(mover.shape, bool)
    for m in range(mover.shape[0]):
        out = out | ((occupant == m + 1) & mover[m])
    return out


def _unblocked_round(mover, occupant):
    """One round of rule 4: a mover whose target holds an agent that is not moving fails."""
    return mover & ~((occupant > 0) & ~_occupant_moves(mover, occupant))


def _jump(ptr):
    """Pointer jumping: ptr[i] <- ptr[ptr[i]] (entries past the agents point at themselves)."""
    out = ptr
    for m in range(ptr.shape[0]):
        out = jnp.where(ptr == m, ptr[m], out)
    return out


def _blocked_folded(keep, mover, occupant):
    """Rule 4 of the folded kernel, to a fixed point (a lone agent has no one on its target)."""
    n = mover.shape[0]
    if n <= FIXPOINT_MAX_AGENTS:
        if n > 1:
            mover = until_stable(lambda m: _unblocked_round(m, occupant), mover)
        return mover
    free, stuck = n, n + 1
    occupant_moves = region(keep, _occupant_moves, mover, occupant)
    ptr = jnp.where(occupant > 0, jnp.where(occupant_moves, occupant - 1, stuck), free)
    ptr = until_stable(_jump, jnp.where(mover, ptr, stuck).astype(jnp.int32), ceil_log2(n))
    return mover & (ptr != stuck)


def movement_phase_folded(cfg: EnvConfig, keep, orders: Orders, bodies: Bodies, engaged: jax.Array) -> Bodies:
    """:func:`movement_phase` for up to 32 agents, as folds in regions."""
    ar, ac, actions = bodies.agent_row, bodies.agent_col, orders.actions
    tr, tc = action_targets(ar, ac, actions)
    mover = ~engaged & (actions != 0)
    mover = region(keep, functools.partial(_walls_and_blocks, cfg.grid_size), tr, tc, mover, bodies.block_row,
                   bodies.block_col, bodies.weight, bodies.alive)
    mover = region(keep, _same_target, tr, tc, mover)
    mover, occupant = region(keep, _swaps, ar, ac, tr, tc, mover)
    mover = _blocked_folded(keep, mover, occupant)
    return _moves(bodies, mover, tr, tc)
