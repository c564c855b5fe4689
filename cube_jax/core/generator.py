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
from typing import Dict, List, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

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


def _place_blocks(key: jax.Array, weights: jax.Array, k: int) -> Tuple[jax.Array, jax.Array]:
    """Sequential placement. Returns (int32[B, 2] top-left cells, bool[] every block placed)."""
    idx = jnp.arange(k)

    def place(carry, inputs):
        occupied, ok = carry
        w, sub = inputs
        valid = _valid_top_left(occupied, w)
        logits = jnp.where(valid.reshape(-1), 0.0, -jnp.inf)
        flat = jax.random.categorical(sub, logits)
        r, c = flat // k, flat % k
        cover = ((idx >= r) & (idx < r + w))[:, None] & ((idx >= c) & (idx < c + w))[None, :]
        return (occupied | cover, ok & valid.any()), jnp.stack([r, c]).astype(jnp.int32)

    keys = jax.random.split(key, weights.shape[0])
    (_, ok), pos = lax.scan(place, (jnp.zeros((k, k), bool), jnp.array(True)), (weights, keys))
    return pos, ok


def sample_layout(key: jax.Array, n: int, weights: Tuple[int, ...]):
    """Jittable curriculum layout: (agent_pos int32[n, 2], block_pos int32[B, 2], ok bool[]).

    Retries placement with fresh keys until it succeeds (at most PLACEMENT_ATTEMPTS).
    """
    k = grid_size_for(n)
    w = jnp.asarray(weights, jnp.int32)
    agent_key, block_key = jax.random.split(key)
    rows = jax.random.permutation(agent_key, k)[:n]
    agent_pos = jnp.stack([rows, jnp.zeros_like(rows)], axis=1).astype(jnp.int32)

    def retry(carry):
        attempt, sub, _, _ = carry
        sub, use = jax.random.split(sub)
        pos, ok = _place_blocks(use, w, k)
        return attempt + 1, sub, pos, ok

    def again(carry):
        attempt, _, _, ok = carry
        return (~ok) & (attempt < PLACEMENT_ATTEMPTS)

    init = (jnp.int32(0), block_key, jnp.zeros((len(weights), 2), jnp.int32), jnp.array(False))
    _, _, block_pos, ok = lax.while_loop(again, retry, init)
    return agent_pos, block_pos, ok
