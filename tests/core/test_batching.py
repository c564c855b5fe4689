"""core/batching.py and core/bodies.py: a region computes what its function computes, under
vmap and vmap of vmap; the environment axis goes last and comes back; the tile size divides
the batch; a push phase's shift moves exactly the marked bodies."""
import chex
import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.core import batching
from cube_jax.core.bodies import Bodies, Marks
from cube_jax.core.types import DOWN, RIGHT


def pair_sums(x, y):
    return x + y[:, None], (x * 2).sum(0)


def test_a_region_returns_its_function_values_alone_and_under_nested_vmap():
    x = jnp.arange(24, dtype=jnp.int32).reshape(2, 3, 4)
    y = jnp.arange(6, dtype=jnp.int32).reshape(2, 3)
    keep = jnp.array(True)
    alone = batching.region(keep, pair_sums, x[0], y[0])
    chex.assert_trees_all_equal(alone, pair_sums(x[0], y[0]))
    # a batched predicate (one per env) and an unbatched argument, one and two vmaps deep
    once = jax.vmap(lambda k, a: batching.region(k, pair_sums, a, y[0]))(jnp.ones(2, bool), x)
    chex.assert_trees_all_equal(once, jax.vmap(lambda a: pair_sums(a, y[0]))(x))
    twice = jax.vmap(jax.vmap(lambda a, b: batching.region(keep, pair_sums, a, b)))(x[:, :, None], y[:, :, None])
    chex.assert_shape(twice, [(2, 3, 1, 4), (2, 3, 4)])
    chex.assert_trees_all_equal(twice, jax.vmap(jax.vmap(pair_sums))(x[:, :, None], y[:, :, None]))
    # where the predicate is False the region gives zeros of the function's shapes
    skipped = jax.jit(lambda k: batching.region(k, pair_sums, x[0], y[0]))(jnp.array(False))
    chex.assert_trees_all_equal(skipped, (jnp.zeros((3, 4), jnp.int32), jnp.zeros((4,), jnp.int32)))


def test_the_environment_axis_goes_last_and_comes_back():
    x = jnp.arange(2 * 3 * 5 * 2).reshape(2, 3, 5, 2)  # lead (2, 3), entities 5, (row, col)
    last = batching.env_last(x, (2, 3), 2)
    chex.assert_shape(last, (5, 2, 6))
    assert int(last[4, 1, 5]) == int(x[1, 2, 4, 1])
    chex.assert_trees_all_equal(batching.env_first(last, (2, 3)), x)


def test_tiles_divide_the_batch_from_the_least_team_on():
    n = batching.TILE_MIN_AGENTS
    most = batching.TILE_ELEMENTS // n
    assert batching.env_tile(n - 1, 4 * most) == 4 * most  # small teams: one piece
    assert batching.env_tile(n, most) == most  # a batch that fits one tile: one piece
    assert batching.env_tile(n, 4 * most) == most
    assert batching.env_tile(n, 3 * most + 1) == 3 * most + 1  # no divisor within a quarter: one piece


def test_a_push_shift_moves_exactly_the_marked_bodies():
    bodies = Bodies(agent_row=jnp.array([[1], [2]]), agent_col=jnp.array([[3], [4]]), block_row=jnp.array([[5]]),
                    block_col=jnp.array([[6]]), weight=jnp.array([[2]]), alive=jnp.array([[True]]))
    right = bodies.shifted(RIGHT, jnp.array([[True], [False]]), jnp.array([[True]]))
    np.testing.assert_array_equal(right.agent_col[:, 0], [4, 4])
    np.testing.assert_array_equal(right.agent_row[:, 0], [1, 2])
    assert int(right.block_col[0, 0]) == 7 and int(right.block_row[0, 0]) == 5
    down = bodies.shifted(DOWN, jnp.array([[False], [True]]), jnp.array([[False]]))
    np.testing.assert_array_equal(down.agent_row[:, 0], [1, 3])
    assert int(down.block_row[0, 0]) == 5
    chex.assert_trees_all_equal(down.weight, bodies.weight)
    marks = Marks.none((2, 1), (1, 1))
    chex.assert_shape([marks.engaged, marks.moved], [(2, 1), (1, 1)])
    assert marks.engaged.dtype == bool and not bool(marks.moved.any())
