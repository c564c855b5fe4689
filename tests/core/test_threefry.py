"""The reset's straight-line Threefry gives exactly what ``jax.random`` gives.

``cube_jax.core.threefry`` replaces ``jax.random.split`` and ``jax.random.bits`` in a reset
(the CPU lowers JAX's own as a loop); a key must keep giving the same episode, so every
word is compared with ``jax.random``'s, on random keys and on the corner keys, jitted and
under ``vmap``; and under a setting where the two would differ it falls back to
``jax.random`` itself.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cube_jax.core import threefry

WORD = st.integers(0, 2**32 - 1)


@jax.jit
def _ours(keys):
    return (jax.vmap(lambda k: threefry.split(k))(keys), jax.vmap(lambda k: threefry.split(k, 5))(keys),
            jax.vmap(lambda k: threefry.bits(k, 1))(keys), jax.vmap(lambda k: threefry.bits(k, 58))(keys))


@jax.jit
def _theirs(keys):
    return (jax.vmap(lambda k: jax.random.split(k))(keys), jax.vmap(lambda k: jax.random.split(k, 5))(keys),
            jax.vmap(lambda k: jax.random.bits(k, (1,), jnp.uint32))(keys),
            jax.vmap(lambda k: jax.random.bits(k, (58,), jnp.uint32))(keys))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(WORD, WORD), min_size=16, max_size=16))
def test_split_and_bits_are_jax_random_bit_for_bit(pairs):
    keys = jnp.asarray(np.array(pairs + [(0, 0), (2**32 - 1, 2**32 - 1)], np.uint32))
    for ours, theirs in zip(_ours(keys), _theirs(keys)):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_one_key_unbatched_and_no_loop_left():
    key = jax.random.PRNGKey(7)
    np.testing.assert_array_equal(threefry.split(key), jax.random.split(key))
    np.testing.assert_array_equal(threefry.bits(key, 400), jax.random.bits(key, (400,), jnp.uint32))
    # no loop left for the hash in a jitted split
    assert "while" not in jax.jit(threefry.split).lower(key).as_text()


def test_other_settings_fall_back_to_jax_random():
    key = jax.random.PRNGKey(3)
    with jax.threefry_partitionable(False):
        assert not threefry._native()
        np.testing.assert_array_equal(threefry.split(key, 3), jax.random.split(key, 3))
        np.testing.assert_array_equal(threefry.bits(key, 9), jax.random.bits(key, (9,), jnp.uint32))
    assert threefry._native()


@pytest.mark.parametrize("mutation", ["rotation", "injection"])
def test_the_comparison_sees_a_changed_hash(monkeypatch, mutation):
    # the test above fails for a hash that differs in one rotation or one key injection
    if mutation == "rotation":
        monkeypatch.setattr(threefry, "_ROTATIONS", ((13, 15, 26, 6), (17, 29, 16, 25)))
    else:
        monkeypatch.setattr(threefry, "_PARITY", np.uint32(0x1BD11BDB))
    key = jax.random.PRNGKey(11)
    assert not np.array_equal(np.asarray(threefry.bits(key, 8)), np.asarray(jax.random.bits(key, (8,), jnp.uint32)))
