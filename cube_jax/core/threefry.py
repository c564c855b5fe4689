"""``jax.random.split`` and ``jax.random.bits`` of raw ``uint32[2]`` keys, bit for bit, as
straight-line arithmetic.

JAX lowers its Threefry-2x32 hash on CPU as a ``while_loop`` of five iterations (four rounds
each), which keeps compiles short but makes every call a loop of its own at run time: a
condition and a body of several thunks per iteration. A reset draws its words with two such
calls (the next episode's key and the layout's words), and the auto-reset runs a round of
resets at almost every step of a batch, so those loops were the largest single cost of a
fresh-layout reset. Here the same hash (Salmon et al., "Parallel random numbers: as easy as
1, 2, 3", SC 2011: 20 rounds of 2x32, the key injected every four) is written out round by
round, which XLA fuses into one elementwise kernel.

The results equal ``jax.random.split`` / ``jax.random.bits`` under JAX's default generator
(``threefry2x32`` with ``jax_threefry_partitionable``, the default); under any other setting
these functions call ``jax.random`` itself, so a key always gives what ``jax.random`` gives
(``tests/core/test_threefry.py`` compares them on random keys).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotl(x: jax.Array, r: int) -> jax.Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def hash2x32(k1: jax.Array, k2: jax.Array, x1: jax.Array, x2: jax.Array):
    """Threefry-2x32 of the counter pair ``(x1, x2)`` under the key ``(k1, k2)`` (uint32,
    broadcast together): the pair of uint32 arrays JAX's ``threefry2x32`` primitive returns."""
    ks = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, r) ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _native() -> bool:
    return bool(jax.config.jax_threefry_partitionable) and jax.config.jax_default_prng_impl == "threefry2x32"


def _hash_counts(key: jax.Array, count: int):
    """The hash of the counters 0 .. count-1 (high words 0) under a raw key, as JAX's generator
    draws them for both ``split`` and ``bits``."""
    key = jnp.asarray(key, jnp.uint32)
    counts = jnp.arange(count, dtype=jnp.uint32)
    return hash2x32(key[0], key[1], jnp.zeros_like(counts), counts)


def split(key: jax.Array, num: int = 2) -> jax.Array:
    """uint32[num, 2]: ``jax.random.split(key, num)`` of a raw key uint32[2]."""
    if not _native():
        return jax.random.split(key, num)
    return jnp.stack(_hash_counts(key, num), axis=-1)


def bits(key: jax.Array, count: int) -> jax.Array:
    """uint32[count]: ``jax.random.bits(key, (count,), jnp.uint32)`` of a raw key uint32[2]."""
    if not _native():
        return jax.random.bits(key, (count,), jnp.uint32)
    b1, b2 = _hash_counts(key, count)
    return b1 ^ b2
