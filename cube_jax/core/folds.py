"""Loops the step kernel is built from: unrolled folds, fixed points, and bit sets of blocks.

Every relation of the kernel is a fold of elementwise ``[X, E]`` terms, one term per entity
(see :mod:`cube_jax.core.batching` for why there are no reductions over entity axes), and
every closure is iterated to its fixed point in a ``while_loop``. No Python branch depends on
a traced value.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def ceil_log2(x: int) -> int:
    """Smallest r with 2**r >= x (0 for x <= 1): doubling rounds for paths of x hops."""
    return max(0, int(x) - 1).bit_length()


def until_stable(fn, x, max_rounds=None):
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


def fold_over(count: int, term, combine, init):
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


def select_match(acc, term):
    """Fold step for "the one agent with a property": ``term`` is (bool match, 1 + its index)."""
    match, value = term
    return jnp.where(match, value, acc)


# --- bit sets of blocks ------------------------------------------------------------------------
#
# uint32[W, ...] with the word axis first, W = ceil(B / 32) (one word up to 32 blocks, two up
# to 64); bit i % 32 of word i // 32 stands for block i.


def _bit(i: int) -> jax.Array:
    return jnp.uint32(1 << i)


def has_bit(words: jax.Array, i: int) -> jax.Array:
    """bool[...]: bit i (a static int) of the bit sets ``words`` (uint32[W, ...])."""
    return ((words[i // 32] >> jnp.uint32(i % 32)) & 1) != 0


def has_bit_at(words: jax.Array, i: jax.Array) -> jax.Array:
    """bool: bit i (an int array broadcasting against ``words[0]``) of ``words`` (uint32[W, ...])."""
    word = words[0]
    for k in range(1, words.shape[0]):
        word = jnp.where(i >= 32 * k, words[k], word)
    return ((word >> (i % 32).astype(jnp.uint32)) & 1) != 0


def fold_bits(flags) -> jax.Array:
    """uint32[W, ...]: bit i set where ``flags[i]`` (a list of bool arrays of one shape)."""
    words = []
    for start in range(0, len(flags), 32):
        out = jnp.zeros(flags[0].shape, jnp.uint32)
        for i, f in enumerate(flags[start:start + 32]):
            out = out | jnp.where(f, _bit(i), jnp.uint32(0))
        words.append(out)
    return jnp.stack(words)


def no_bits(words: jax.Array) -> jax.Array:
    """bool[...]: no bit of ``words`` (uint32[W, ...]) is set."""
    out = words[0] == 0
    for k in range(1, words.shape[0]):
        out = out & (words[k] == 0)
    return out


def row_bits(term, count: int) -> jax.Array:
    """uint32[W, X, E] bit rows: bit y of row x set where ``term(y)`` (bool[X, E]) holds at x."""
    return fold_bits([term(y) for y in range(count)])


def compose_rows(rows: jax.Array) -> jax.Array:
    """Bit rows of the relation composed with itself: row x ORs the rows of every y in row x."""
    out = jnp.zeros_like(rows)
    for y in range(rows.shape[1]):
        out = out | jnp.where(has_bit(rows, y)[None], rows[:, y][:, None], jnp.uint32(0))
    return out
