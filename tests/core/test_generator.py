"""The n-curriculum: block counts, placement rules, reproducibility, large n."""
import jax
import numpy as np
import pytest

import cube_jax
from cube_jax.core import generator


@pytest.mark.parametrize(
    "n, counts",
    [
        (1, {1: 1}),
        (2, {2: 1, 1: 2}),
        (3, {2: 1, 1: 2}),
        (4, {3: 1, 2: 2, 1: 3}),
        (5, {3: 1, 2: 2, 1: 3}),
        (6, {4: 1, 3: 2, 2: 3, 1: 4}),
    ],
)
def test_papers_counts_for_small_n(n, counts):
    assert generator.block_counts(n) == counts


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 10, 12, 16, 20, 33, 64, 100, 128, 200, 256])
def test_count_rule_invariants(n):
    counts = generator.block_counts(n)
    k = generator.grid_size_for(n)
    assert k == max(20, n)
    wmax = n // 2 + 1
    assert max(counts) == wmax and counts[wmax] >= 1, "the heaviest weight is present"
    assert min(counts) == 1, "weight 1 is present"
    weights = sorted(counts)
    for lighter, heavier in zip(weights, weights[1:]):
        assert counts[lighter] >= counts[heavier], "lighter weights are at least as numerous"
    covered = sum(w * w * c for w, c in counts.items())
    assert covered <= k * k / 2, "blocks cover at most half of the grid"


def test_counts_reject_bad_n():
    for bad in (0, -3, 2.5, "4", True):
        with pytest.raises(ValueError, match="n must be an integer"):
            generator.block_counts(bad)


def _check_layout(n, agent_pos, block_pos):
    k = generator.grid_size_for(n)
    weights = generator.block_weights(n)
    agent_pos, block_pos = np.asarray(agent_pos), np.asarray(block_pos)
    assert agent_pos.shape == (n, 2)
    assert (agent_pos[:, 1] == 0).all(), "agents start on column 0"
    assert len(set(agent_pos[:, 0].tolist())) == n, "on distinct rows"
    grown = np.zeros((k + 2, k + 2), int)  # each block's square grown by one cell, padded
    for (r, c), w in zip(block_pos, weights):
        assert 1 <= r and r + w - 1 <= k - 2 and 1 <= c and c + w - 1 <= k - 2, "no block cell on the border"
        grown[r : r + w + 2, c : c + w + 2] += 1
    for (r, c), w in zip(block_pos, weights):
        # no other block's grown square reaches into this block: no touching, not even diagonally
        assert grown[r + 1 : r + w + 1, c + 1 : c + w + 1].max() == 1


@pytest.mark.parametrize("n", [1, 2, 4, 9, 16])
def test_layouts_follow_the_rules(n):
    weights = tuple(generator.block_weights(n))
    sample = jax.jit(jax.vmap(lambda key: generator.sample_layout(key, n, weights)))
    agent_pos, block_pos, ok = sample(jax.random.split(jax.random.PRNGKey(n), 64))
    assert bool(np.all(ok))
    for i in range(64):
        _check_layout(n, agent_pos[i], block_pos[i])


@pytest.mark.slow
def test_layout_at_n_256():
    weights = tuple(generator.block_weights(256))
    agent_pos, block_pos, ok = jax.jit(lambda key: generator.sample_layout(key, 256, weights))(jax.random.PRNGKey(0))
    assert bool(ok)
    _check_layout(256, agent_pos, block_pos)


def test_reset_is_reproducible_from_the_key():
    env = cube_jax.make(n=4)
    a, _ = env.reset(jax.random.PRNGKey(7))
    b, _ = env.reset(jax.random.PRNGKey(7))
    c, _ = env.reset(jax.random.PRNGKey(8))
    assert cube_jax.layout(a) == cube_jax.layout(b)
    assert cube_jax.layout(a) != cube_jax.layout(c)


def test_pool_reset_picks_pool_layouts():
    env = cube_jax.make(n=4, pool_size=8, pool_seed=3)
    pool = {tuple(map(tuple, np.asarray(p))) for p in env.pool["block_pos"]}
    for seed in range(10):
        state, _ = env.reset(jax.random.PRNGKey(seed))
        assert tuple(map(tuple, np.asarray(state.block_pos))) in pool
    assert len(pool) == 8


def test_a_pool_is_drawn_once_and_the_same_inside_a_trace():
    from cube_jax.core.layouts import CurriculumLayouts, PoolLayouts, _drawn_pool

    source = CurriculumLayouts.of(2)
    eager = PoolLayouts.draw(source, 8, 5)
    assert PoolLayouts.draw(source, 8, 5) is eager  # kept, not drawn again
    _drawn_pool.cache_clear()
    # asked for while tracing, it is computed then (concrete), not staged into the program
    inside = {}
    jax.make_jaxpr(lambda x: inside.setdefault("pool", PoolLayouts.draw(source, 8, 5)) and x)(0.0)
    assert not isinstance(inside["pool"].layouts.block_pos, jax.core.Tracer)
    np.testing.assert_array_equal(inside["pool"].layouts.block_pos, eager.layouts.block_pos)
