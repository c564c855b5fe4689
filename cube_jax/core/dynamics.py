"""The step rules of DYNAMICS.md as pure array functions.

One step is four push phases (UP, DOWN, LEFT, RIGHT, in that order) and then a
movement phase. Everything is computed on entity arrays (``N`` agents, ``B``
blocks) rather than on ``K x K`` occupancy grids, so a step costs O(N^2 + B^2)
independent of the grid size:

* agent chains: the pushers standing in a line ahead of each agent are counted with a
  bit row per agent (``N <= 32``) or by pointer jumping (larger ``N``; once per step for
  all four push phases, since an agent moves only in the phase of its own action);
* composites: the pushed blocks plus everything downstream of them through "in front
  of" (a bit set grown hop by hop), split into connected components of the contact graph
  by doubling on ``uint32`` bit rows (``B <= 32``) or on boolean relations composed by folds
  (larger B);
* movement: blocked movers are resolved by iterating the rule to its fixed point (small
  N) or by pointer jumping along "the agent standing on my target".

Two kernels compute this: the *folded* one, where every relation is an unrolled fold of
elementwise operations over one entity axis and every value read more than once is
materialised in a *region* (see the section comment below and docs/dynamics.md), and the
*large* one. Each phase picks by its own axis: the push phases fold while there are at
most 32 blocks (over more than 32 agents in chunks, with pointer jumping for lines of
pushers), the movement phase while there are at most 32 agents; bigger worlds take the
large kernel's phase, whose agent/block relations are folds as well.

Layout. The kernel works on arrays whose LAST axis runs over environments: agent rows
are ``int32[N, E]``, pair relations ``bool[N, B, E]`` and so on, so every operation
vectorises across environments; with the environment axis first, XLA on CPU works on
each tiny entity axis separately and is an order of magnitude slower.
:func:`step_state` accepts one state or a batch with any leading axes and moves the
environment axis last internally; :func:`batched_step` is the same function with a
``jax.vmap`` rule that sends the whole batch through the kernel at once.

No Python branch depends on a traced value, so everything jits and vmaps.
"""
from __future__ import annotations

import functools
import math
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap
from jax.experimental.layout import Layout, with_layout_constraint

from cube_jax.core.checks import MAX_GRID_SIZE
from cube_jax.core.types import ACTION_DELTAS, DOWN, LEFT, PUSH_ORDER, RIGHT, UP, EnvConfig, State, StepEvents
from cube_jax.names import actions_or_stay

# Lines of pushers are counted with one uint32 bit row per agent up to this many agents.
BITSET_MAX_AGENTS = 32
# Up to this many agents the blocked-mover rule is iterated to its fixed point directly;
# above it, pointer jumping needs fewer rounds.
FIXPOINT_MAX_AGENTS = 4
# Push phases fold up to FOLD_MAX_BLOCKS blocks, the movement phase up to FOLD_MAX_AGENTS agents.
FOLD_MAX_AGENTS = 32
FOLD_MAX_BLOCKS = 64


def ceil_log2(x: int) -> int:
    """Smallest r with 2**r >= x (0 for x <= 1): doubling rounds for paths of x hops."""
    return max(0, int(x) - 1).bit_length()


def _until_stable(fn, x, max_rounds=None):
    """Applies ``fn`` until ``x`` stops changing, or for at most ``max_rounds`` rounds.

    A ``while_loop``: its carry is materialised at every round, and a batch stops as soon
    as no environment changes any more, which for the short chains of a real world is
    after a round or two, not after the worst case's B-1. Without ``max_rounds``, ``fn``
    must reach a fixed point; pointer jumping on a cycle of agents does not (a rotation of six agents
    keeps moving its pointers two and four places around the ring), so it passes the
    number of rounds after which every path has reached its end.
    """

    def again(carry):
        return carry[1] if max_rounds is None else carry[1] & (carry[2] < max_rounds)

    def round_(carry):
        y = fn(carry[0])
        return y, jnp.any(y != carry[0]), carry[2] + 1

    return lax.while_loop(again, round_, (x, jnp.array(True), jnp.int32(0)))[0]


FOLD_CHUNK = 32


def _fold_over(count: int, term, combine, init):
    """``combine(... combine(init, term(0)) ..., term(count - 1))``, elementwise.

    Up to FOLD_CHUNK terms the fold is unrolled; beyond, a ``fori_loop`` runs over
    chunks of FOLD_CHUNK unrolled terms (``term`` then also gets traced indices), which keeps
    the program small for hundreds of agents.
    """
    if count <= FOLD_CHUNK:
        acc = init
        for j in range(count):
            acc = combine(acc, term(j))
        return acc
    chunks = count // FOLD_CHUNK

    def chunk(c, acc):
        for u in range(FOLD_CHUNK):
            acc = combine(acc, term(c * FOLD_CHUNK + u))
        return acc

    acc = lax.fori_loop(0, chunks, chunk, init)
    for j in range(chunks * FOLD_CHUNK, count):
        acc = combine(acc, term(j))
    return acc


# --- composites ----------------------------------------------------------------------------
#
# The blocks that can move in a phase are V = the pushed blocks plus everything downstream
# of them through "in front of". Inside V, two blocks that touch along d are always in the
# same composite (the one in front is downstream of whatever pushed block reaches the one
# behind), and two pushed blocks whose C sets share a block are joined through that block.
# So the composites are exactly the connected components of the contact graph inside V.


def composites(front: jax.Array, pushed: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """Composite membership for one push phase of the large kernel (more than 32 blocks).

    ``front`` bool[B, B, E]: ``[j, k]`` when block k is in front of block j; ``pushed``
    bool[B, E]: blocks with force > 0. Returns ``member`` bool[B, B, E] (``[x, y]`` when x
    and y are in the same composite) and ``in_composite`` bool[B, E].
    """
    b = front.shape[0]
    movable = _until_stable(lambda m: m | (m[:, None] & front).any(0), pushed)
    eye = jnp.eye(b, dtype=bool)[:, :, None]
    touch = (front | jnp.swapaxes(front, 0, 1) | eye) & movable[:, None] & movable[None]

    def square(rel):
        # rel composed with itself as a fold over the middle block: batched tiny matrix
        # products (or a reduction over y) run as scalar loops on CPU
        return _fold_over(b, lambda y: rel[:, y][:, None] & rel[y][None], jnp.logical_or, jnp.zeros_like(rel))

    return _until_stable(square, touch), movable


# --- geometry ------------------------------------------------------------------------------


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


# Cells as one int32 key, so that "same cell" is one comparison in the folds over agents:
# with a stride above every column index plus one, two keys of cells within one cell of the
# grid (targets included) are equal only for equal cells.
CELL_KEY_STRIDE = 8192
assert CELL_KEY_STRIDE > MAX_GRID_SIZE + 1 and (MAX_GRID_SIZE + 1) * CELL_KEY_STRIDE < 2**31
NO_CELL = jnp.iinfo(jnp.int32).min  # a key no cell has


def _cell_key(r, c) -> jax.Array:
    return r * CELL_KEY_STRIDE + c


def _action_targets(ar, ac, actions):
    """The cell each agent's action points at (its own cell for STAY)."""
    tr = ar + jnp.where(actions == UP, -1, jnp.where(actions == DOWN, 1, 0))
    tc = ac + jnp.where(actions == LEFT, -1, jnp.where(actions == RIGHT, 1, 0))
    return tr, tc


def _select_match(acc, term):
    """Fold step for "the one agent with a property": ``term`` is (bool match, 1 + its index)."""
    match, value = term
    return jnp.where(match, value, acc)


def _pushers_ahead(ar, ac, pusher, d: int) -> jax.Array:
    """int32[N, E]: how many consecutive cells ahead of each agent, in d, hold pushers."""
    n = ar.shape[0]
    dr, dc = ACTION_DELTAS[d]
    if n <= BITSET_MAX_AGENTS:
        if dr:
            same_line, dist = ac[None] == ac[:, None], (ar[None] - ar[:, None]) * dr
        else:
            same_line, dist = ar[None] == ar[:, None], (ac[None] - ac[:, None]) * dc
        # Bit (dist-1) is set for every pusher at that distance ahead; the run of ones from
        # bit 0 is the line of pushers in front of the agent (count trailing ones).
        ahead = same_line & pusher[None] & (dist >= 1) & (dist <= 32)
        shift = jnp.clip(dist - 1, 0, 31).astype(jnp.uint32)
        bits = jnp.where(ahead, jnp.left_shift(jnp.uint32(1), shift), jnp.uint32(0)).sum(1, dtype=jnp.uint32)
        gaps = ~bits
        return lax.population_count((gaps & (jnp.uint32(0) - gaps)) - jnp.uint32(1)).astype(jnp.int32)
    # Pointer jumping (more than 32 agents): the count of every push phase at once, see
    # :func:`_pushers_ahead_all`.
    return _pushers_ahead_all(ar, ac, jnp.where(pusher, d, 0))


def _pushers_ahead_all(ar, ac, actions) -> jax.Array:
    """int32[N, E]: for each agent with a move action d (1-4), how many consecutive cells ahead
    of it, in d, hold agents whose action is d too; 0 for STAY.

    In push phase d only the agents whose action is d move, so those agents stand where the
    step started until their own phase: the counts of all four phases come from the starting
    positions, in one pass over agent pairs instead of four. Pointer jumping: each agent points
    at the agent with its action on the next cell ahead (or at itself) and counts hops;
    ceil(log2 N) rounds of ptr = ptr[ptr] reach the end of every line.
    """
    n = ar.shape[0]
    tr, tc = _action_targets(ar, ac, actions)
    # keys of (cell, action): a STAY agent's query matches no one (every key held has action 1-4)
    query = _cell_key(tr, tc) * 8 + actions
    held = jnp.where(actions > 0, _cell_key(ar, ac) * 8 + actions, NO_CELL)

    def right_ahead(j):  # agents with agent j, of the same action, on the next cell ahead get j + 1
        return held[j][None] == query, j + 1

    # one cell holds one agent at most, so a select keeps the only match (one op fewer than a max)
    ahead = _fold_over(n, right_ahead, _select_match, jnp.zeros(ar.shape, jnp.int32))  # 1 + index, or 0
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
    return jnp.right_shift(_until_stable(jump, packed, ceil_log2(n)), 16)


# --- phases --------------------------------------------------------------------------------


def _phase_result(d: int, ar, ac, br, bc, agent_moves, block_moves, engaged, moved, force):
    """What a push phase returns (both kernels): the agents and blocks that move shifted one
    cell in d, the engaged agents, the blocks moved so far, and F per block."""
    dr, dc = ACTION_DELTAS[d]
    step_b, step_a = block_moves.astype(jnp.int32), agent_moves.astype(jnp.int32)
    return ar + dr * step_a, ac + dc * step_a, br + dr * step_b, bc + dc * step_b, engaged, moved | block_moves, force


def push_phase(cfg: EnvConfig, keep, d: int, actions, ar, ac, br, bc, w, alive, engaged, moved, run=None):
    """One push phase in direction d on [X, E] arrays; returns them updated and F per block.
    ``run``: 1 + the count of pushers ahead of every pusher, when the step has it already."""
    k, b = cfg.grid_size, br.shape[0]
    pusher = actions == d

    # Agent chains: the first cell past a pusher's line of pushers must be a cell of block j.
    # Values read more than once come out of regions, so that XLA does not recompute them
    # (pointer jumping included) in every consumer.
    if run is None:
        run = _region(keep, lambda *a: _pushers_ahead(*a, d) + 1, ar, ac, pusher)

    # Agent/block relations are folds (over blocks, or over agents in chunks) rather than
    # [N, B, E] arrays reduced over the block axis, which CPU code does as scalar loops.
    target = _region(keep, functools.partial(_chain_targets, d), ar, ac, run, pusher, br, bc, w, alive)
    force, cannot_move = _region(keep, lambda t, *a: (_forces(t, b), _stuck(d, k, *a)),
                                 target, ar, ac, br, bc, w, moved)  # F_j [B, E], bool[B, E]

    member, in_composite = composites(block_in_front(br, bc, w, alive, d), force > 0)

    def composite_moves(member, in_composite, force, w, cannot_move):
        # per block: its composite's force minus its weight, and whether a block of it is stuck
        def term(y):
            return jnp.where(member[:, y], force[y] - w[y], 0), member[:, y] & cannot_move[y]

        def combine(acc, t):
            return acc[0] + t[0], acc[1] | t[1]

        surplus, blocked = _fold_over(b, term, combine, (jnp.zeros(force.shape, jnp.int32), jnp.zeros(force.shape, bool)))
        return in_composite & (surplus >= 0) & ~blocked

    block_moves = _region(keep, composite_moves, member, in_composite, force, w, cannot_move)  # [B, E]

    def chain_moves(target, block_moves):
        return _fold_over(b, lambda j: (target == j + 1) & block_moves[j], jnp.logical_or, jnp.zeros(target.shape, bool))

    agent_moves = _region(keep, chain_moves, target, block_moves)  # [N, E]
    return _phase_result(d, ar, ac, br, bc, agent_moves, block_moves, engaged | (target > 0), moved, force)


def movement_phase(cfg: EnvConfig, keep, actions, ar, ac, br, bc, w, alive, engaged):
    """Moves every agent that is not engaged and not STAY, by rules 1-5 of DYNAMICS.md.

    The path for more than 32 agents or 32 blocks; each pass over agent pairs is a region
    of its own, and pairs are visited twice in all (rule 2 and "who stands on my target").
    """
    n, k = ar.shape[0], cfg.grid_size
    tr, tc = _action_targets(ar, ac, actions)
    mover = ~engaged & (actions != 0)

    # 1. walls and alive blocks (a fold over blocks: an any() over the block axis of
    # [N, B, E] becomes a scalar loop per agent on CPU)
    mover = _region(keep, functools.partial(_walls_and_blocks, k), tr, tc, mover, br, bc, w, alive)

    # 2. same target: the smallest id keeps its move
    def same_target(tr, tc, mover):
        target = _cell_key(tr, tc)
        claim = jnp.where(mover, target, NO_CELL)

        def claims(j):  # mover n - 1 - j has my target; folded from the last id down, the smallest is kept
            return claim[n - 1 - j][None] == target, n - j

        first = _fold_over(n, claims, _select_match, jnp.zeros(tr.shape, jnp.int32))  # 1 + smallest claimant
        return mover & (first == jnp.arange(1, n + 1, dtype=jnp.int32)[:, None])

    def occupants(tr, tc, ar, ac):
        target, cell = _cell_key(tr, tc), _cell_key(ar, ac)

        def stands_on_target(j):
            return target == cell[j][None], j + 1

        return _fold_over(n, stands_on_target, _select_match, jnp.zeros(tr.shape, jnp.int32))

    mover = _region(keep, same_target, tr, tc, mover)
    # 3. swaps: the agent on my target targets my cell
    occupant = _region(keep, occupants, tr, tc, ar, ac)  # 1 + the agent standing on my target, or 0
    occ = jnp.maximum(occupant - 1, 0)
    taken = occupant > 0
    # the occupant's target and whether it moves, packed in one int32 (keys are below 2**26): one gather
    theirs = jnp.take_along_axis(_cell_key(tr, tc) * 2 + mover.astype(jnp.int32), occ, axis=0)
    occupant_moves = (theirs & 1) == 1
    back = jnp.right_shift(theirs, 1) == _cell_key(ar, ac)
    mover = mover & ~(occupant_moves & taken & back)
    # 4. blocked, to a fixed point. Movers' targets are distinct now, so following "who stands
    # on my target" gives simple lines (ending at a free cell or a stuck agent) and rotations
    # (which never end, and move).
    if n <= FIXPOINT_MAX_AGENTS:
        for _ in range(n - 1):
            mover = mover & ~(taken & ~jnp.take_along_axis(mover, occ, axis=0))
    else:
        free, stuck = n, n + 1
        occupant_moves = jnp.take_along_axis(mover, occ, axis=0)  # after rule 3: the occupant may have lost its move
        ptr = jnp.where(taken, jnp.where(occupant_moves, occ, stuck), free)
        ptr = jnp.where(mover, ptr, stuck).astype(jnp.int32)
        ends = jnp.broadcast_to(jnp.array([[free], [stuck]], jnp.int32), (2,) + ptr.shape[1:])
        table = jnp.concatenate([ptr, ends], axis=0)
        # After ceil(log2 N) rounds every line has reached its end; a rotation never does
        # (its pointers go round), and moves. Most batches settle after a round or two.
        table = _until_stable(lambda t: jnp.take_along_axis(t, t, axis=0), table, ceil_log2(n))
        mover = mover & (table[:n] != stuck)
    # 5. everyone left moves at once
    return jnp.where(mover, tr, ar), jnp.where(mover, tc, ac)


# --- the folded kernel (push phases up to 32 blocks, movement up to 32 agents) ----------
#
# XLA on CPU emits a reduction over a small entity axis as an inner loop per output
# element; LLVM vectorises across the environment axis only when it unrolls that loop
# completely, which it stops doing once the fused loop body grows (at about 8 agents and
# 11 blocks the whole kernel fell back to scalar code, 20x slower per agent). The folded
# kernel has no reductions: every relation is a Python-unrolled fold of elementwise
# ``[X, E]`` terms, one term per entity, which always vectorises. Left alone, XLA would
# then fuse each fold into every consumer and recompute it there (a fold read B times
# costs B times); so every value read more than once is computed inside a *region*, a
# ``lax.cond`` on a predicate that is always true, whose result XLA must materialise.
# (``lax.optimization_barrier`` does not do this on CPU: it is removed before fusion.)


def _shape_of(x) -> jax.ShapeDtypeStruct:
    aval = jax.typeof(x)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _cond(keep, fn, args):
    """``fn(*args)`` where ``keep``, zeros of its shapes elsewhere. The zeros take their shapes
    from the branch that ran ``fn`` when ``lax.cond`` has traced it first: tracing ``fn`` a
    second time (``jax.eval_shape``) cost as much as the first, and the step has many regions."""
    shapes = []

    def run(a):
        out = fn(*a)
        shapes.append(jax.tree.map(_shape_of, out))
        return out

    def skip(a):
        return jax.tree.map(jnp.zeros_like, shapes[0] if shapes else jax.eval_shape(fn, *a))

    return lax.cond(keep, run, skip, args)


def _region_call(fn):
    """``fn`` run inside a region (see above); the first argument is the region predicate."""

    @custom_vmap
    def call(keep, *args):
        return _cond(keep, fn, args)

    @call.def_vmap
    def _vmap_rule(axis_size, in_batched, keep, *args):
        # Under a further vmap (seeds x envs) the predicate stays one scalar, so the region
        # stays a real branch instead of turning into a select of both sides.
        keep = jnp.all(keep) if in_batched[0] else keep
        axes = [jax.tree.map(lambda b: 0 if b else None, b) for b in in_batched[1:]]
        out = _cond(keep, jax.vmap(fn, in_axes=tuple(axes)), args)
        return out, jax.tree.map(lambda _: True, out)

    return call


def _region(keep: jax.Array, fn, *args):
    return _region_call(fn)(keep, *args)


# Bit sets of blocks: uint32[W, ...] with the word axis first, W = ceil(B / 32) (one word up
# to 32 blocks, two up to FOLD_MAX_BLOCKS); bit i % 32 of word i // 32 stands for block i.


def _bit(i: int) -> jax.Array:
    return jnp.uint32(1 << i)


def _has_bit(words: jax.Array, i: int) -> jax.Array:
    """bool[...]: bit i (a static int) of the bit sets ``words`` (uint32[W, ...])."""
    return ((words[i // 32] >> jnp.uint32(i % 32)) & 1) != 0


def _has_bit_at(words: jax.Array, i: jax.Array) -> jax.Array:
    """bool: bit i (an int array broadcasting against ``words[0]``) of ``words`` (uint32[W, ...])."""
    word = words[0]
    for k in range(1, words.shape[0]):
        word = jnp.where(i >= 32 * k, words[k], word)
    return ((word >> (i % 32).astype(jnp.uint32)) & 1) != 0


def _fold_bits(flags) -> jax.Array:
    """uint32[W, ...]: bit i set where ``flags[i]`` (a list of bool arrays of one shape)."""
    words = []
    for start in range(0, len(flags), 32):
        out = jnp.zeros(flags[0].shape, jnp.uint32)
        for i, f in enumerate(flags[start:start + 32]):
            out = out | jnp.where(f, _bit(i), jnp.uint32(0))
        words.append(out)
    return jnp.stack(words)


def _no_bits(words: jax.Array) -> jax.Array:
    """bool[...]: no bit of ``words`` (uint32[W, ...]) is set."""
    out = words[0] == 0
    for k in range(1, words.shape[0]):
        out = out & (words[k] == 0)
    return out


def _row_bits(term, count: int) -> jax.Array:
    """uint32[W, X, E] bit rows: bit y of row x set where ``term(y)`` (bool[X, E]) holds at x."""
    return _fold_bits([term(y) for y in range(count)])


def _compose_rows(rows: jax.Array) -> jax.Array:
    """Bit rows of the relation composed with itself: row x ORs the rows of every y in row x."""
    out = jnp.zeros_like(rows)
    for y in range(rows.shape[1]):
        out = out | jnp.where(_has_bit(rows, y)[None], rows[:, y][:, None], jnp.uint32(0))
    return out


def _pushers_ahead_folded(ar, ac, pusher, d: int) -> jax.Array:
    """:func:`_pushers_ahead` as a fold over the agents standing ahead."""
    dr, dc = ACTION_DELTAS[d]
    bits = jnp.zeros(ar.shape, jnp.uint32)
    for m in range(ar.shape[0]):
        if dr:
            same_line, dist = ac[m][None] == ac, (ar[m][None] - ar) * dr
        else:
            same_line, dist = ar[m][None] == ar, (ac[m][None] - ac) * dc
        ahead = same_line & pusher[m][None] & (dist >= 1) & (dist <= 32)
        bits = bits | jnp.where(ahead, jnp.left_shift(jnp.uint32(1), jnp.clip(dist - 1, 0, 31).astype(jnp.uint32)), 0)
    gaps = ~bits
    return lax.population_count((gaps & (jnp.uint32(0) - gaps)) - jnp.uint32(1)).astype(jnp.int32)


def _alive_side(w, alive) -> jax.Array:
    """uint32[B, E]: each block's side, 0 for a delivered block (which covers no cell)."""
    return jnp.where(alive, w, 0).astype(jnp.uint32)


def _in_square(r, c, top, left, side) -> jax.Array:
    """bool: cell (r, c) lies in the square of ``side`` (uint32) cells from (top, left). One
    unsigned comparison per axis covers both of its bounds (a cell before the square wraps
    round to a large number)."""
    return ((r - top).astype(jnp.uint32) < side) & ((c - left).astype(jnp.uint32) < side)


def _chain_targets(d: int, ar, ac, run, pusher, br, bc, w, alive) -> jax.Array:
    """int32[N, E]: 1 + the block holding the cell ``run`` cells ahead of each pusher, or 0."""
    dr, dc = ACTION_DELTAS[d]
    tr, tc = ar + dr * run, ac + dc * run
    side = _alive_side(w, alive)
    target = jnp.zeros(ar.shape, jnp.int32)
    for j in range(br.shape[0]):
        target = jnp.where(_in_square(tr, tc, br[j], bc[j], side[j]), j + 1, target)
    return jnp.where(pusher, target, 0)


def _forces(target: jax.Array, b: int) -> jax.Array:
    """int32[B, E]: F_j, the number of agents in chains on block j."""
    ids = jnp.arange(1, b + 1, dtype=jnp.int32)[:, None]
    return _fold_over(target.shape[0], lambda n: (target[n][None] == ids).astype(jnp.int32), jnp.add,
                      jnp.zeros((b,) + target.shape[1:], jnp.int32))


def _front_rows(d: int, br, bc, w, alive) -> jax.Array:
    """uint32[B, E] bit rows: bit k of row j when alive block k is in front of alive block j
    in direction d (see :func:`block_in_front`)."""
    a, x = (br, bc) if d in (UP, DOWN) else (bc, br)
    forward = d in (DOWN, RIGHT)
    a_end, x_end = a + w, x + w

    def in_front(k):
        touching = (a[k] == a_end) if forward else (a_end[k] == a)
        return touching & (x[k] < x_end) & (x < x_end[k]) & alive[k]

    return _row_bits(in_front, br.shape[0]) & jnp.where(alive, ~jnp.uint32(0), jnp.uint32(0))


def _touch_rows(front: jax.Array) -> jax.Array:
    """uint32[W, B, E]: the contact relation made undirected (front or its transpose), plus self."""
    b = front.shape[1]
    rows = jnp.arange(b)[:, None]
    behind = _fold_bits([_has_bit_at(front[:, k][:, None], rows) for k in range(b)])  # bit k of row j: j in front of k
    own = np.zeros(front.shape[:2] + (1,), np.uint32)
    own[np.arange(b) // 32, np.arange(b), 0] = np.uint32(1) << (np.arange(b) % 32).astype(np.uint32)
    return front | behind | jnp.asarray(own)


def _downstream_of(movable, front) -> jax.Array:
    """uint32[W, E]: ``movable`` and every block directly in front of one of them."""
    out = movable
    for j in range(front.shape[1]):
        out = out | jnp.where(_has_bit(movable, j)[None], front[:, j], jnp.uint32(0))
    return out


def _block_moves(movable, comp, stuck, force, w) -> Tuple[jax.Array, jax.Array]:
    """(bool[B, E] blocks whose composite moves, uint32[E] the same as a bit set): in V, the
    composite's force at least its weight, and no block of it stuck."""
    b = comp.shape[1]
    surplus = jnp.zeros(comp.shape[1:], jnp.int32)  # composite force minus composite weight
    for j in range(b):
        surplus = surplus + jnp.where(_has_bit(comp, j), force[j] - w[j], 0)
    stuck_bits = _fold_bits(list(stuck))
    in_v = _has_bit_at(movable[:, None], jnp.arange(b)[:, None])
    moves = in_v & (surplus >= 0) & _no_bits(comp & stuck_bits[:, None])
    return moves, _fold_bits(list(moves))


def _stuck(d: int, k: int, ar, ac, br, bc, w, moved) -> jax.Array:
    """bool[B, E]: block j cannot move (moved already, would leave the grid, agent ahead)."""
    dr, dc = ACTION_DELTAS[d]
    tr, tc = br + dr, bc + dc

    side = w.astype(jnp.uint32)

    def ahead(n):
        return _in_square(ar[n], ac[n], tr, tc, side)

    agent_ahead = _fold_over(ar.shape[0], ahead, jnp.logical_or, jnp.zeros(br.shape, bool))
    outside = (tr < 0) | (tc < 0) | (tr + w > k) | (tc + w > k)
    return moved | outside | agent_ahead


def push_phase_folded(cfg: EnvConfig, keep, d: int, actions, ar, ac, br, bc, w, alive, engaged, moved, run=None):
    """:func:`push_phase` for up to 64 blocks (any number of agents), as folds in regions.

    Every value read more than once comes out of a region; independent values share one.
    Folds over agents run in chunks of FOLD_CHUNK (see :func:`_fold_over`) above 32 agents.
    ``run``: 1 + the count of pushers ahead of every pusher, when the step has it already.
    """
    b = br.shape[0]
    pusher = actions == d

    def start(ar, ac, pusher, br, bc, w, alive, moved, *given):
        if given:
            (run,) = given
        else:
            # the bit-row count of pushers ahead sees 32 cells; longer lines need pointer jumping
            ahead = _pushers_ahead_folded if ar.shape[0] <= BITSET_MAX_AGENTS else _pushers_ahead
            run = ahead(ar, ac, pusher, d) + 1
        return run, _front_rows(d, br, bc, w, alive), _stuck(d, cfg.grid_size, ar, ac, br, bc, w, moved)

    given = () if run is None else (run,)
    run, front, stuck = _region(keep, start, ar, ac, pusher, br, bc, w, alive, moved, *given)
    target = _region(keep, functools.partial(_chain_targets, d), ar, ac, run, pusher, br, bc, w, alive)
    force, touch = _region(keep, lambda t, f: (_forces(t, b), _touch_rows(f)), target, front)
    # V: the pushed blocks and everything downstream of them, hop by hop
    movable = _fold_bits(list(force > 0))
    if b > 1:  # a lone block has nothing in front of it: V is the pushed set
        movable = _until_stable(lambda m: _downstream_of(m, front), movable)
    # composites: connected components of the contact graph inside V, by doubling
    in_v = jnp.where(_has_bit_at(movable[:, None], jnp.arange(b)[:, None])[None], movable[:, None], jnp.uint32(0))
    comp = touch & in_v
    if b > 1:  # a lone block is its own composite
        comp = _until_stable(_compose_rows, comp)
    block_moves, moves_bits = _region(keep, _block_moves, movable, comp, stuck, force, w)
    agent_moves = (target > 0) & _has_bit_at(moves_bits[:, None], jnp.maximum(target - 1, 0))
    return _phase_result(d, ar, ac, br, bc, agent_moves, block_moves, engaged | (target > 0), moved, force)


def _walls_and_blocks(k: int, tr, tc, mover, br, bc, w, alive):
    """Rule 1 of the movement phase: movers whose target is off the grid or in a block fail."""
    outside = (tr < 0) | (tr >= k) | (tc < 0) | (tc >= k)
    side = _alive_side(w, alive)
    into_block = jnp.zeros(tr.shape, bool)
    for j in range(br.shape[0]):
        into_block = into_block | _in_square(tr, tc, br[j], bc[j], side[j])
    return mover & ~outside & ~into_block


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


def movement_phase_folded(cfg: EnvConfig, keep, actions, ar, ac, br, bc, w, alive, engaged):
    """:func:`movement_phase` for up to 32 agents, as folds in regions."""
    n = ar.shape[0]
    tr, tc = _action_targets(ar, ac, actions)
    mover = ~engaged & (actions != 0)
    mover = _region(keep, functools.partial(_walls_and_blocks, cfg.grid_size), tr, tc, mover, br, bc, w, alive)
    mover = _region(keep, _same_target, tr, tc, mover)
    mover, occupant = _region(keep, _swaps, ar, ac, tr, tc, mover)
    # 4. blocked, to a fixed point (see movement_phase); a lone agent has no one on its target
    if n <= FIXPOINT_MAX_AGENTS:
        if n > 1:
            mover = _until_stable(lambda m: _unblocked_round(m, occupant), mover)
    else:
        free, stuck = n, n + 1
        occupant_moves = _region(keep, _occupant_moves, mover, occupant)
        ptr = jnp.where(occupant > 0, jnp.where(occupant_moves, occupant - 1, stuck), free)
        ptr = _until_stable(_jump, jnp.where(mover, ptr, stuck).astype(jnp.int32), ceil_log2(n))
        mover = mover & (ptr != stuck)
    return jnp.where(mover, tr, ar), jnp.where(mover, tc, ac)


def step_kernel(cfg: EnvConfig, ar, ac, br, bc, w, alive, actions):
    """One step on environment-last arrays (``[N, E]``, ``[B, E]``).

    Returns the new ``(ar, ac, br, bc, alive)`` and the :class:`StepEvents` (environment-last).
    """
    actions = actions_or_stay(actions, jnp)
    start_r, start_c = ar, ac
    engaged = jnp.zeros(ar.shape, bool)
    moved = jnp.zeros(br.shape, bool)
    forces = []
    # The push phases fold over blocks and the movement phase over agents, so each picks its
    # kernel by its own axis: teams of 64 or 128 with at most 32 blocks push through folds.
    folded_push = br.shape[0] <= FOLD_MAX_BLOCKS
    folded = ar.shape[0] <= FOLD_MAX_AGENTS
    keep = jnp.any((actions | 1) != 0)  # always True: the region predicate
    phase = push_phase_folded if folded_push else push_phase
    # Above 32 agents the lines of pushers of all four phases are counted once, from the
    # starting positions (see _pushers_ahead_all); up to 32, each phase's bit rows are cheaper.
    run = None
    if ar.shape[0] > BITSET_MAX_AGENTS:
        run = _region(keep, lambda *a: _pushers_ahead_all(*a) + 1, ar, ac, actions)
    for d in PUSH_ORDER:
        ar, ac, br, bc, engaged, moved, force = phase(cfg, keep, d, actions, ar, ac, br, bc, w, alive, engaged, moved, run)
        forces.append(force)
    # Only a RIGHT push can bring a block into column K-1 (no alive block touches it
    # otherwise), and RIGHT is the last push phase, so delivering here is the same as
    # delivering after every phase.
    delivered = alive & (bc + w - 1 >= cfg.grid_size - 1)
    alive = alive & ~delivered
    if folded:
        ar, ac = movement_phase_folded(cfg, keep, actions, ar, ac, br, bc, w, alive, engaged)
    else:
        ar, ac = movement_phase(cfg, keep, actions, ar, ac, br, bc, w, alive, engaged)
    events = StepEvents(
        block_moved=moved,
        block_delivered=delivered,
        push_force=jnp.stack(forces),
        engaged=engaged,
        agent_moved=(ar != start_r) | (ac != start_c),
        delivered_weight=jnp.where(delivered, w, 0).sum(0, dtype=jnp.int32),
    )
    return (ar, ac, br, bc, alive), events


# On a CPU, teams of TILE_MIN_AGENTS or more step a large batch in tiles of environments, one
# tile after another: the kernel's folds keep [N, E] accumulators and relations, and once a
# pass's arrays outgrow a core's nearest caches every piece of the step slows alike. A tile
# holds about TILE_ELEMENTS agent slots (an int32 [N, tile] array of 32 KiB). Smaller teams
# keep the whole batch: their arrays are short along N, and tiles cost them more in loop rounds
# than they save. Other platforms take the whole batch at once: on a GPU the tiles ran one
# after another at a fixed rate each. The measurements behind each choice are in
# docs/performance.md ("Large batches and a smaller cache", "On a GPU").
TILE_ELEMENTS = 8 * 1024
TILE_MIN_AGENTS = 16


def _env_tile(n: int, e: int) -> int:
    """Environments per tile for a step of n agents over e environments (e: no tiling): for
    n >= TILE_MIN_AGENTS, the largest divisor of e within TILE_ELEMENTS // n, if one is at
    least a quarter of that."""
    most = max(1, TILE_ELEMENTS // n)
    if n < TILE_MIN_AGENTS or e <= most:
        return e
    return next((t for t in range(most, most // 4 - 1, -1) if t > 0 and e % t == 0), e)


def step_kernel_tiled(cfg: EnvConfig, ar, ac, br, bc, w, alive, actions):
    """:func:`step_kernel` over tiles of environments on a CPU (see TILE_ELEMENTS), in one
    piece elsewhere; the same results."""
    e = ar.shape[-1]
    tile = _env_tile(ar.shape[0], e)
    if tile == e:
        return step_kernel(cfg, ar, ac, br, bc, w, alive, actions)
    tiles = e // tile

    def split(x):  # [..., E] -> [tiles, ..., tile]
        return jnp.moveaxis(x.reshape(x.shape[:-1] + (tiles, tile)), -2, 0)

    def merge(x):  # [tiles, ..., tile] -> [..., E]
        return jnp.moveaxis(x, 0, -2).reshape(x.shape[1:-1] + (e,))

    def in_tiles(*args):
        return jax.tree.map(merge, lax.map(lambda a: step_kernel(cfg, *a), tuple(split(x) for x in args)))

    def whole(*args):
        return step_kernel(cfg, *args)

    return lax.platform_dependent(ar, ac, br, bc, w, alive, actions, cpu=in_tiles, default=whole)


@custom_vmap
def _env_minor(x: jax.Array) -> jax.Array:
    """``x`` with a row-major physical layout (its last, environment, axis minor)."""
    return with_layout_constraint(x, Layout(tuple(range(x.ndim))))


@_env_minor.def_vmap
def _env_minor_vmap(axis_size, in_batched, x):
    # Under a further vmap (e.g. seeds x envs) the constraint is dropped: batched, it
    # produced wrong values inside jit. The outer axis is major anyway.
    return x, in_batched[0]


def env_last(x: jax.Array, lead: tuple, tail: int) -> jax.Array:
    """[*lead, *tail] -> [*tail, E] with E = prod(lead), pinned environment-minor."""
    x = jnp.reshape(x, (math.prod(lead),) + x.shape[x.ndim - tail :])
    return _env_minor(jnp.moveaxis(x, 0, -1))


def env_first(x: jax.Array, lead: tuple) -> jax.Array:
    """Inverse of :func:`env_last`: [..., E] -> [*lead, ...]."""
    x = jnp.moveaxis(_env_minor(x), -1, 0)
    return jnp.reshape(x, lead + x.shape[1:])


def vmap_as_batch(fn):
    """``fn`` takes inputs with any leading batch axes; under ``jax.vmap`` it receives the
    whole batch at once (unbatched inputs broadcast) instead of being batched op by op."""

    @custom_vmap
    def call(*args):
        return fn(*args)

    @call.def_vmap
    def _vmap_rule(axis_size, in_batched, *args):
        def batch(x, is_batched):
            return x if is_batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

        args = [jax.tree.map(batch, a, b) for a, b in zip(args, in_batched)]
        out = fn(*args)
        return out, jax.tree.map(lambda _: True, out)

    return call


def actions_int32(actions) -> jax.Array:
    """``actions`` as int32. An integer outside 0..4 is STAY whatever its type: values of
    types wider than int32 (with x64 enabled) are mapped before the cast could wrap them
    into 0..4 (2**32 + 1 would become UP)."""
    actions = jnp.asarray(actions)
    if actions.dtype.itemsize > 4:
        actions = actions_or_stay(actions, jnp)
    return actions.astype(jnp.int32)


def step_state(cfg: EnvConfig, state: State, actions: jax.Array) -> Tuple[State, jax.Array, StepEvents]:
    """Applies one step to a state, or to a batch of states with any leading axes.

    Returns the new state, the delivered weight (int32 per environment) and the step
    events (see :func:`step_kernel`), all with the state's leading axes.
    """
    lead = state.t.shape
    pos = env_last(state.agent_pos, lead, 2)
    bpos = env_last(state.block_pos, lead, 2)
    acts = env_last(jnp.broadcast_to(actions_int32(actions), state.agent_pos.shape[:-1]), lead, 1)
    weight, alive = env_last(state.block_weight, lead, 1), env_last(state.block_alive, lead, 1)
    (ar, ac, br, bc, alive), events = step_kernel_tiled(cfg, pos[:, 0], pos[:, 1], bpos[:, 0], bpos[:, 1], weight,
                                                       alive, acts)
    new_state = state.replace(
        agent_pos=env_first(jnp.stack([ar, ac], axis=1), lead),
        block_pos=env_first(jnp.stack([br, bc], axis=1), lead),
        block_alive=env_first(alive, lead),
        t=state.t + 1,
    )
    events = jax.tree.map(lambda value: env_first(value, lead), events)
    return new_state, events.delivered_weight, events


@functools.lru_cache(maxsize=None)
def batched_step(cfg: EnvConfig):
    """``step_state`` for one environment whose ``jax.vmap`` runs the whole batch in one kernel."""
    return vmap_as_batch(functools.partial(step_state, cfg))


def reward_and_flags(cfg: EnvConfig, state: State, delivered_weight: jax.Array):
    """Shared reward ``-step_cost + D / N`` and the episode flags for a state after a step."""
    d_value = delivered_weight.astype(jnp.float32) * jnp.float32(cfg.deliver_reward)
    r = jnp.float32(-cfg.step_cost) + d_value / jnp.float32(cfg.num_agents)
    reward = jnp.broadcast_to(r[..., None], r.shape + (cfg.num_agents,))
    terminated = ~jnp.any(state.block_alive, axis=-1)
    truncated = (state.t >= cfg.max_steps) & ~terminated
    return reward, terminated, truncated
