"""The n-curriculum: one parameter n sets the team, the grid and the blocks.

Rule (see docs/curriculum.md):

* grid side ``k = max(20, n)``; ``n`` agents on distinct random rows of column 0;
* block weights run from ``wmax = n // 2 + 1`` down to 1. The papers' counts are the
  triangle ``count(w) = wmax - w + 1`` (n=1: {1:1}; n=2,3: {2:1, 1:2}; n=4,5:
  {3:1, 2:2, 1:3}; ...), so lighter weights are always at least as numerous;
* footprint budget: a block of weight w needs its square plus a one-cell margin, so its
  footprint is ``(w+1)^2``; the total footprint stays within half of ``(k-1)^2``, which
  keeps the covered area under half of the grid and random placement easy. When the
  full ladder 1..wmax does not fit even once each, the ladder is thinned to the halving
  ladder ``wmax, ceil(wmax/2), ceil(wmax/4), ..., 1`` (and, if that still does not fit,
  to ``{wmax, 1}``); the triangle counts are then scaled by the largest factor
  ``s <= 1`` (in steps of 1/100, each count at least 1) that fits the budget;
* placement, heaviest first: each block's top-left cell is drawn uniformly among the
  cells where its square avoids the border rows and columns and every earlier block's
  square grown by one cell (so no two blocks touch, not even diagonally). If a block
  finds no free cell the whole layout is drawn again with a fresh key.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from cube_jax.core import threefry

PLACEMENT_ATTEMPTS = 32


def grid_size_for(n: int) -> int:
    return max(20, n)


def _footprint(counts: Dict[int, int]) -> int:
    return sum((w + 1) ** 2 * c for w, c in counts.items())


def block_counts(n: int) -> Dict[int, int]:
    """Weight -> number of blocks for curriculum level n (see the module docstring)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    k = grid_size_for(n)
    wmax = n // 2 + 1
    budget = (k - 1) ** 2 // 2
    ladders = [
        list(range(wmax, 0, -1)),
        sorted({max(1, math.ceil(wmax / 2**i)) for i in range(wmax.bit_length() + 1)}, reverse=True),
        sorted({wmax, 1}, reverse=True),
    ]
    ladder = next((lad for lad in ladders if sum((w + 1) ** 2 for w in lad) <= budget), [wmax])
    for step in range(100, 0, -1):
        s = step / 100
        counts = {w: max(1, math.floor(s * (i + 1) + 1e-9)) for i, w in enumerate(ladder)}
        if _footprint(counts) <= budget:
            return counts
    return {w: 1 for w in ladder}


def block_weights(n: int) -> List[int]:
    """Weights of every block, heaviest first (block id order)."""
    counts = block_counts(n)
    return [w for w in sorted(counts, reverse=True) for _ in range(counts[w])]


def default_max_steps(n: int) -> int:
    """Episode limit of the curriculum: 4 * k steps per block."""
    return 4 * grid_size_for(n) * len(block_weights(n))


def _valid_top_left(occupied: jax.Array, w: jax.Array) -> jax.Array:
    """bool[K, K]: top-left cells where a w x w block fits off the border, away from ``occupied``."""
    k = occupied.shape[0]
    # prefix sums with a zero row/col in front: s[i, j] = sum of occupied[:i, :j]
    s = jnp.pad(jnp.cumsum(jnp.cumsum(occupied.astype(jnp.int32), 0), 1), ((1, 0), (1, 0)))
    idx = jnp.arange(k)
    lo = jnp.clip(idx - 1, 0, k)  # margin starts one cell before
    hi = jnp.clip(idx + w + 1, 0, k)  # and ends one cell after
    box = s[hi][:, hi] - s[lo][:, hi] - s[hi][:, lo] + s[lo][:, lo]
    fits = (idx >= 1) & (idx + w - 1 <= k - 2)
    return (box == 0) & fits[:, None] & fits[None, :]


# --- placement by rejection ---------------------------------------------------------------
#
# A candidate top-left cell is drawn uniformly among the cells where the block fits off the
# border (rows and columns 1 .. k-1-w) and kept if it clears every earlier block grown by
# one cell: two interval tests per earlier block, no K x K grid. The first kept candidate of
# a stream of independent uniform candidates is uniform over the valid cells, which is the
# documented rule. Candidates come in rounds of a fixed size per block; after
# REJECTION_ROUNDS rounds without a valid one (rare: a crowded grid) the block is placed by
# the exact grid test instead, which also detects a block with no valid cell at all. Mixing
# the two keeps the distribution exact: whichever way a block is placed, every valid cell is
# equally likely. Later rounds, the grid test and a retried layout sit in ``while_loop``s,
# so under ``vmap`` a batch pays for them only when one of its layouts needs them.
#
# Random words: the first round of every block (and the agents' rows) comes from a single
# ``jax.random.bits`` draw (``threefry.bits``, the same words without the loop that each call
# of JAX's counter-based generator costs on CPU). A 16-bit half of a word becomes a value
# below S by multiply-and-shift; the few values that would make that biased are discarded
# like any rejected candidate (see _uniform_below), so candidates are exactly uniform.
REJECTION_ROUNDS = 4
MAX_CANDIDATES = 32
ROUND_FAILURE = 1e-4


def candidates_per_round(weights: Tuple[int, ...], k: int) -> Tuple[int, ...]:
    """Static number of candidates drawn per round for each block.

    From a lower bound on the share of valid cells (every earlier block forbids at most a
    ``(w_j + w + 1)^2`` square of top-left cells), enough candidates that a round fails
    with probability at most ROUND_FAILURE, between 2 and MAX_CANDIDATES. A batch runs a
    second round when any of its layouts needs one, so the first round must almost
    always be enough.
    """
    out = []
    for i, w in enumerate(weights):
        span = k - 1 - w
        forbidden = sum((wj + w + 1) ** 2 for wj in weights[:i])
        p = 1.0 - forbidden / max(span * span, 1)
        if p >= 1.0:
            out.append(2)
        elif p <= 0.0:
            out.append(MAX_CANDIDATES)
        else:
            out.append(int(min(MAX_CANDIDATES, max(2, math.ceil(math.log(ROUND_FAILURE) / math.log(1.0 - p))))))
    return tuple(out)


def _uniform_below(half_words: jax.Array, size, threshold) -> Tuple[jax.Array, jax.Array]:
    """(int32 value in 0..size-1, bool usable) from 16-bit random values (uint32 < 2^16).

    Multiply-and-shift with rejection: x * size spreads 2^16 values over size bins; the
    ``threshold = 2^16 mod size`` lowest remainders are dropped, so every usable value is
    exactly uniform (size <= 2^16).
    """
    m = half_words * size
    return (m >> 16).astype(jnp.int32), (m & 0xFFFF) >= threshold


def _halves(words: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """The high and low 16 bits of uint32 words."""
    return words >> 16, words & 0xFFFF


def _clear_of(cand: jax.Array, w, pos: jax.Array, weights: jax.Array, placed: jax.Array) -> jax.Array:
    """bool[T]: candidates int32[T, 2] whose w x w square clears every placed block grown by one.

    ``pos`` int32[B, 2] and ``weights`` int32[B] of all blocks, ``placed`` bool[B] those to test.
    """
    # [r, r+w-1] meets [rj-1, rj+wj] iff rj - w <= r <= rj + wj (same for columns)
    near = (cand[:, None] >= pos[None] - w) & (cand[:, None] <= pos[None] + weights[None, :, None])  # [T, B, 2]
    return ~jnp.any(near[..., 0] & near[..., 1] & placed[None], axis=1)


def _place_exact(key: jax.Array, pos: jax.Array, weights: jax.Array, placed: jax.Array, w, k: int):
    """A w x w block uniformly among its valid cells by the grid test: (int32[2], bool[] some cell valid)."""
    idx = jnp.arange(k)
    rows = (idx[None] >= pos[:, :1]) & (idx[None] < pos[:, :1] + weights[:, None]) & placed[:, None]  # [B, K]
    cols = (idx[None] >= pos[:, 1:]) & (idx[None] < pos[:, 1:] + weights[:, None])
    occupied = jnp.any(rows[:, :, None] & cols[:, None, :], axis=0)
    valid = _valid_top_left(occupied, w)
    flat = jax.random.categorical(key, jnp.where(valid.reshape(-1), 0.0, -jnp.inf))
    return jnp.stack([flat // k, flat % k]).astype(jnp.int32), valid.any()


def _block_table(words: jax.Array, weights: Tuple[int, ...], k: int) -> dict:
    """Per-block constants of the placement (one row per block, heaviest first)."""
    b = len(weights)
    spans = [k - 1 - w for w in weights]  # top-left rows (and columns) 1 .. k-1-w: off the border
    if min(spans) < 1:
        raise ValueError(f"a block of weight {max(weights)} does not fit off the border of a {k}x{k} grid")
    return {
        "i": jnp.arange(b, dtype=jnp.int32),
        "w": jnp.asarray(weights, jnp.int32),
        "span": jnp.asarray(spans, jnp.int32),
        "count": jnp.asarray(candidates_per_round(weights, k), jnp.int32),
        "threshold": jnp.asarray([2**16 % s for s in spans], jnp.uint32),
        "words": words,
    }


def _try_round(x: dict, all_weights: jax.Array, pos: jax.Array, round_words: jax.Array, found, cell):
    """One round of candidates for block ``x["i"]``: (found, cell), the first clear candidate
    unless ``found`` already."""
    t = round_words.shape[0]
    placed = jnp.arange(pos.shape[0]) < x["i"]
    # one word per candidate: row from its high half, column from its low half
    high, low = _halves(round_words)
    size = x["span"].astype(jnp.uint32)
    row, row_ok = _uniform_below(high, size, x["threshold"])
    col, col_ok = _uniform_below(low, size, x["threshold"])
    cand = 1 + jnp.stack([row, col], axis=1)
    usable = row_ok & col_ok & (jnp.arange(t) < x["count"])
    clear = usable & _clear_of(cand, x["w"], pos, all_weights, placed)
    cell = jnp.where(found, cell, cand[jnp.argmax(clear)])
    return found | clear.any(), cell


# Blocks placed by a Python loop (no loop in the program) up to this many; a scan above.
UNROLLED_BLOCKS = 6


def _first_rounds(words: jax.Array, weights: Tuple[int, ...], k: int) -> Tuple[jax.Array, jax.Array]:
    """Every block from its first round only: (int32[B, 2] cells, bool[] every first round
    found one). Where it returns True the cells are exactly those of :func:`_place_blocks`
    (whose later rounds and grid tests then do not run)."""
    xs = _block_table(words, weights, k)
    b = len(weights)
    start = (jnp.zeros((b, 2), jnp.int32), jnp.array(True))

    def place(carry, x):
        pos, ok = carry
        found, cell = _try_round(x, xs["w"], pos, x["words"], jnp.array(False), jnp.zeros((2,), jnp.int32))
        return (pos.at[x["i"]].set(cell), ok & found), None

    if b > UNROLLED_BLOCKS:
        return lax.scan(place, start, xs)[0]
    carry = start
    for i in range(b):
        carry, _ = place(carry, jax.tree.map(lambda v: v[i], xs))
    return carry


def _place_blocks(key: jax.Array, words: jax.Array, weights: Tuple[int, ...], k: int) -> Tuple[jax.Array, jax.Array]:
    """Sequential placement, heaviest first, one ``lax.scan`` step per block.

    ``words`` uint32[B, T] feed every block's first round (block i uses its first
    ``candidates_per_round(...)[i]`` words); ``key`` feeds the rare later rounds and grid
    tests. Returns (int32[B, 2] top-left cells, bool[] every block placed).
    """
    b, t = words.shape
    xs = _block_table(words, weights, k)
    all_weights = xs["w"]

    def place(carry, x):
        pos, ok = carry
        placed = jnp.arange(b) < x["i"]

        def next_round(carry):
            rounds, found, cell = carry
            round_key = jax.random.fold_in(key, x["i"] * REJECTION_ROUNDS + rounds)
            round_words = jax.random.bits(round_key, (t,), jnp.uint32)
            return (rounds + 1,) + _try_round(x, all_weights, pos, round_words, found, cell)

        found, cell = _try_round(x, all_weights, pos, x["words"], jnp.array(False), jnp.zeros((2,), jnp.int32))
        _, found, cell = lax.while_loop(
            lambda c: (~c[1]) & (c[0] < REJECTION_ROUNDS), next_round, (jnp.int32(1), found, cell)
        )

        def exact(carry):
            done, found, cell = carry
            # Reading the loop-carried flag (False whenever the body runs) keeps XLA from
            # hoisting the grid test out of the loop, where it would run for every layout.
            exact_key = jax.random.fold_in(key, b * REJECTION_ROUNDS + x["i"] + done.astype(jnp.int32))
            exact_cell, any_valid = _place_exact(exact_key, jnp.where(done, 0, pos), all_weights, placed, x["w"], k)
            return jnp.array(True), found | any_valid, jnp.where(found, cell, exact_cell)

        _, found, cell = lax.while_loop(lambda c: ~c[0], exact, (found, found, cell))
        return (pos.at[x["i"]].set(cell), ok & found), None

    (pos, ok), _ = lax.scan(place, (jnp.zeros((b, 2), jnp.int32), jnp.array(True)), xs)
    return pos, ok


def _agent_draws(n: int, k: int) -> int:
    """Random words used for the agents' rows (0: a permutation instead)."""
    return 0 if 2 * n > k else 2 * n + 8


def _rows_from_words(words: jax.Array, n: int, k: int) -> Tuple[jax.Array, jax.Array]:
    """(int32[n] the first n distinct usable row values of ``words``, bool[] the words held n)."""
    v, usable = _uniform_below(_halves(words)[0], jnp.uint32(k), jnp.uint32(2**16 % k))
    m = v.shape[0]
    earlier = jnp.tril(jnp.ones((m, m), bool), -1)
    new = usable & ~jnp.any((v[:, None] == v[None, :]) & earlier & usable[None, :], axis=1)
    rank = jnp.cumsum(new) - 1  # position among the distinct values
    slot = new[:, None] & (rank[:, None] == jnp.arange(n)[None, :])  # [m, n]
    return jnp.sum(jnp.where(slot, v[:, None], 0), axis=0), rank[-1] >= n - 1


def _permuted_rows(key: jax.Array, n: int, k: int) -> jax.Array:
    return jax.random.permutation(key, k)[:n].astype(jnp.int32)


def _agent_rows(key: jax.Array, words: jax.Array, n: int, k: int) -> jax.Array:
    """int32[n]: n distinct rows of 0..k-1, a uniformly random ordered choice.

    For small teams the rows are the first n distinct usable values of ``words`` (the first
    n distinct values of an i.i.d. uniform stream are a uniform ordered sample without
    replacement); if the words hold fewer, or for larger teams, a permutation from ``key``.
    """
    if not _agent_draws(n, k):
        return _permuted_rows(key, n, k)
    rows, enough = _rows_from_words(words, n, k)
    return jnp.where(enough, rows, _permuted_rows(key, n, k))


def _block_cells(block_key: jax.Array, first_words: jax.Array, weights: Tuple[int, ...], k: int):
    """Every block placed, retrying the layout with fresh keys while one finds no cell:
    (int32[B, 2] cells, bool[] placed within PLACEMENT_ATTEMPTS)."""
    block_words = first_words.shape[0]

    def retry(carry):
        attempt, _, _ = carry
        # attempt 0 uses the first words; a retried layout draws its own
        attempt_key = jax.random.fold_in(block_key, attempt)
        fresh = jax.random.bits(jax.random.fold_in(attempt_key, 0), (block_words,), jnp.uint32)
        attempt_words = jnp.where(attempt == 0, first_words, fresh)
        pos, ok = _place_blocks(
            jax.random.fold_in(attempt_key, 1), attempt_words.reshape(len(weights), -1), weights, k
        )
        return attempt + 1, pos, ok

    def again(carry):
        attempt, _, ok = carry
        return (~ok) & (attempt < PLACEMENT_ATTEMPTS)

    init = (jnp.int32(0), jnp.zeros((len(weights), 2), jnp.int32), jnp.array(False))
    _, pos, ok = lax.while_loop(again, retry, init)
    return pos, ok


def _words_per_layout(n: int, weights: Tuple[int, ...], k: int) -> Tuple[int, int]:
    """(agent words, block words) drawn for one layout's first attempt."""
    return _agent_draws(n, k), len(weights) * max(candidates_per_round(weights, k))


def _layout_words(key: jax.Array, n: int, weights: Tuple[int, ...], k: int) -> Tuple[jax.Array, int]:
    """(uint32 words of the layout's first attempt, how many of them are the agents')."""
    agent_words, block_words = _words_per_layout(n, weights, k)
    return threefry.bits(key, agent_words + block_words), agent_words  # = jax.random.bits, no loop


def general_layout(agent_key: jax.Array, block_key: jax.Array, words: jax.Array, n: int, weights: Tuple[int, ...],
                   grid_size: Optional[int] = None):
    """The placement rule run in full, without the first-round shortcut of :func:`sample_layout`:
    (int32[n] agent rows, int32[B, 2] block cells, bool[] placed). ``words`` are the layout's
    first words (agents' rows, then every block's first round)."""
    k = grid_size_for(n) if grid_size is None else int(grid_size)
    agent_words, _ = _words_per_layout(n, weights, k)
    rows = _agent_rows(agent_key, words[:agent_words], n, k)
    cells, ok = _block_cells(block_key, words[agent_words:], weights, k)
    return rows, cells, ok


def sample_layout(key: jax.Array, n: int, weights: Tuple[int, ...], grid_size: Optional[int] = None):
    """Jittable curriculum layout: (agent_pos int32[n, 2], block_pos int32[B, 2], ok bool[]).

    ``n`` agents and blocks of ``weights`` (heaviest first) on a ``grid_size`` grid (default:
    the curriculum's ``max(20, n)``), placed by the curriculum's rules.

    Retries placement with fresh keys until it succeeds (at most PLACEMENT_ATTEMPTS).
    The same key always gives the same layout, batched or not.

    Almost every layout takes its agents' rows from its first words and every block from
    its first round of candidates, which needs no loop. The full rule
    (:func:`general_layout`: later rounds, grid tests, retried layouts, a permutation for
    the rows) gives the same layout in that case, and runs, inside one ``while_loop``, only
    for a layout that needs it: under ``vmap`` a batch pays for it only when one of its
    layouts does.
    """
    k = grid_size_for(n) if grid_size is None else int(grid_size)
    if n > k:
        raise ValueError(f"{n} agents do not fit in column 0 of a {k}x{k} grid")
    weights = tuple(int(w) for w in weights)
    words, agent_words = _layout_words(key, n, weights, k)
    if agent_words:
        rows, rows_ok = _rows_from_words(words[:agent_words], n, k)
    else:
        rows, rows_ok = _permuted_rows(jax.random.fold_in(key, 1), n, k), jnp.array(True)
    cells, cells_ok = _first_rounds(words[agent_words:].reshape(len(weights), -1), weights, k)

    def general(carry):
        done, _, _, _ = carry
        # The keys read the loop-carried flag (False whenever the body runs for this
        # layout), so that XLA cannot hoist the full rule out of the loop.
        flag = done.astype(jnp.uint32)
        return (jnp.array(True),) + general_layout(
            jax.random.fold_in(key, 1 + flag), jax.random.fold_in(key, 2 + flag), words, n, weights, k
        )

    _, rows, cells, ok = lax.while_loop(
        lambda c: ~c[0], general, (rows_ok & cells_ok, rows, cells, jnp.array(True))
    )
    agent_pos = jnp.stack([rows, jnp.zeros_like(rows)], axis=1).astype(jnp.int32)
    return agent_pos, cells, ok
