"""The layout sampler draws from the documented rule, checked statistically.

The rule (docs/curriculum.md): agents on distinct uniformly random rows of column 0;
blocks placed heaviest first, each top-left cell uniform among the cells where the block
stays off the border and clear of every earlier block grown by one cell; a layout where
some block has no valid cell is drawn again. ``reference_layouts`` below implements that
rule directly with NumPy on K x K grids. The sampler's histograms are compared with it:
exactly (chi-square goodness of fit against the exact law) where the law is cheap to
enumerate, and against a large Monte-Carlo sample of the reference otherwise. Every draw
uses a fixed seed, so the tests are deterministic; ``test_checks_reject_a_biased_sampler``
shows the same checks fail for a plausible but biased sampler.
"""
import jax
import numpy as np
import pytest
from scipy import stats

from cube_jax.core import generator

DRAWS = 4000
P_MIN = 1e-4  # a correct sampler passes every check with this margin (fixed seeds)


# --- the documented rule, written plainly ----------------------------------------------------


def _valid_cells(occupied: np.ndarray, w: int) -> np.ndarray:
    """bool[D, K, K]: top-left cells whose w x w square is off the border and whose square
    grown by one cell meets no occupied cell (occupied: bool[D, K, K])."""
    d, k, _ = occupied.shape
    s = np.zeros((d, k + 1, k + 1), np.int64)
    s[:, 1:, 1:] = occupied.cumsum(1).cumsum(2)
    valid = np.zeros((d, k, k), bool)
    for r in range(1, k - w):
        for c in range(1, k - w):
            r0, r1, c0, c1 = r - 1, min(k, r + w + 1), c - 1, min(k, c + w + 1)
            box = s[:, r1, c1] - s[:, r0, c1] - s[:, r1, c0] + s[:, r0, c0]
            valid[:, r, c] = box == 0
    return valid


def _uniform_choice(rng, mask: np.ndarray) -> np.ndarray:
    """int[D]: one flat index per row of mask (bool[D, M]), uniform among its True entries."""
    counts = mask.sum(1)
    pick = np.floor(rng.random(len(mask)) * counts).astype(np.int64)
    return (np.cumsum(mask, axis=1) > pick[:, None]).argmax(1)


def reference_layouts(n: int, draws: int, seed: int, place=None):
    """(agent rows int[D, n], block top-left cells int[D, B, 2]) following the documented rule.

    ``place(rng, valid)`` picks a flat cell per layout among ``valid`` (bool[D, K*K]); the
    default is the rule's uniform choice.
    """
    place = place or _uniform_choice
    rng = np.random.default_rng(seed)
    k = generator.grid_size_for(n)
    weights = generator.block_weights(n)
    rows = np.stack([rng.permutation(k)[:n] for _ in range(draws)])
    blocks = np.zeros((draws, len(weights), 2), np.int64)
    todo = np.arange(draws)
    while len(todo):
        occupied = np.zeros((len(todo), k, k), bool)
        ok = np.ones(len(todo), bool)
        for i, w in enumerate(weights):
            valid = _valid_cells(occupied, w).reshape(len(todo), -1)
            ok &= valid.any(1)
            valid[~valid.any(1), 0] = True  # failed layouts are redrawn below; any cell will do
            flat = place(rng, valid)
            r, c = flat // k, flat % k
            blocks[todo, i] = np.stack([r, c], 1)
            for e in range(len(todo)):
                occupied[e, r[e] : r[e] + w, c[e] : c[e] + w] = True
        todo = todo[~ok]
    return rows, blocks


def sampled_layouts(n: int, draws: int, seed: int):
    weights = tuple(generator.block_weights(n))
    keys = jax.random.split(jax.random.PRNGKey(seed), draws)
    agents, blocks, ok = jax.jit(jax.vmap(lambda key: generator.sample_layout(key, n, weights)))(keys)
    assert bool(np.all(np.asarray(ok)))
    return np.asarray(agents)[:, :, 0], np.asarray(blocks)


# --- test statistics -------------------------------------------------------------------------


def goodness_of_fit(values: np.ndarray, probabilities: np.ndarray) -> float:
    """p-value of a chi-square test of ``values`` (ints indexing ``probabilities``) against that law."""
    observed = np.bincount(values, minlength=len(probabilities))
    keep = probabilities > 0
    assert observed[~keep].sum() == 0, "a value the law gives probability 0"
    return stats.chisquare(observed[keep], probabilities[keep] * len(values)).pvalue


def same_law(a: np.ndarray, b: np.ndarray, size: int) -> float:
    """p-value of a two-sample chi-square test that int samples a and b share one law on 0..size-1."""
    table = np.stack([np.bincount(a, minlength=size), np.bincount(b, minlength=size)])
    table = table[:, table.sum(0) >= 10]  # drop (near-)empty cells
    return stats.chi2_contingency(table)[1]


def exact_pair_law(n: int) -> np.ndarray:
    """float[K*K, K*K]: exact joint law of the top-left cells of blocks 0 and 1 (block 0
    uniform over its cells, block 1 uniform among the cells valid given block 0)."""
    k = generator.grid_size_for(n)
    w0, w1 = generator.block_weights(n)[:2]
    law = np.zeros((k * k, k * k))
    firsts = [(r, c) for r in range(1, k - w0) for c in range(1, k - w0)]
    for r, c in firsts:
        occupied = np.zeros((1, k, k), bool)
        occupied[0, r : r + w0, c : c + w0] = True
        valid = _valid_cells(occupied, w1).reshape(-1)
        law[r * k + c] = valid / valid.sum() / len(firsts)
    return law


def _gap_laws(pair_law: np.ndarray, k: int):
    """Exact laws of |row_1 - row_0| and |col_1 - col_0| (each float[K]) from the pair law."""
    cells = np.arange(k * k)
    row_gap = np.abs(cells[None, :] // k - cells[:, None] // k)
    col_gap = np.abs(cells[None, :] % k - cells[:, None] % k)
    return (np.bincount(row_gap.reshape(-1), pair_law.reshape(-1), minlength=k),
            np.bincount(col_gap.reshape(-1), pair_law.reshape(-1), minlength=k))


def check_against_rule(n: int, agents, blocks, ref_agents, ref_blocks) -> dict:
    """p-values of every check of one sample against the rule (exact laws and the reference)."""
    k = generator.grid_size_for(n)
    weights = generator.block_weights(n)
    flat = blocks[..., 0] * k + blocks[..., 1]
    ref_flat = ref_blocks[..., 0] * k + ref_blocks[..., 1]
    w0 = weights[0]
    span = np.zeros((k, k))
    span[1 : k - w0, 1 : k - w0] = 1
    pair_law = exact_pair_law(n)
    row_gap, col_gap = _gap_laws(pair_law, k)
    checks = {
        "agent rows uniform": goodness_of_fit(agents.reshape(-1), np.full(k, 1 / k)),
        "first agent row uniform": goodness_of_fit(agents[:, 0], np.full(k, 1 / k)),
        "block 0 uniform over its cells": goodness_of_fit(flat[:, 0], (span / span.sum()).reshape(-1)),
        "block 1 exact law": goodness_of_fit(flat[:, 1], pair_law.sum(0)),
        "row gap of blocks 0, 1 exact law": goodness_of_fit(np.abs(blocks[:, 1, 0] - blocks[:, 0, 0]), row_gap),
        "column gap of blocks 0, 1 exact law": goodness_of_fit(np.abs(blocks[:, 1, 1] - blocks[:, 0, 1]), col_gap),
    }
    for j in range(len(weights)):
        checks[f"block {j} row"] = same_law(blocks[:, j, 0], ref_blocks[:, j, 0], k)
        checks[f"block {j} column"] = same_law(blocks[:, j, 1], ref_blocks[:, j, 1], k)
        if j:
            gap, ref_gap = np.abs(blocks[:, j] - blocks[:, j - 1]), np.abs(ref_blocks[:, j] - ref_blocks[:, j - 1])
            checks[f"row gap of blocks {j - 1}, {j}"] = same_law(gap[:, 0], ref_gap[:, 0], k)
            checks[f"column gap of blocks {j - 1}, {j}"] = same_law(gap[:, 1], ref_gap[:, 1], k)
    for w in sorted(set(weights)):
        ids = [j for j, wj in enumerate(weights) if wj == w]
        checks[f"weight {w} cells"] = same_law(flat[:, ids].reshape(-1), ref_flat[:, ids].reshape(-1), k * k)
    return checks


# --- tests -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_n4():
    return reference_layouts(4, DRAWS, seed=1)


def test_n4_layouts_follow_the_rule_statistically(reference_n4):
    agents, blocks = sampled_layouts(4, DRAWS, seed=0)
    checks = check_against_rule(4, agents, blocks, *reference_n4)
    failed = {name: p for name, p in checks.items() if p < P_MIN}
    assert not failed, f"histograms differ from the documented rule: {failed}"


def test_crowded_n8_layouts_follow_the_rule_statistically():
    # 11 blocks on 20 x 20: many rejected candidates per block
    agents, blocks = sampled_layouts(8, 2000, seed=2)
    checks = check_against_rule(8, agents, blocks, *reference_layouts(8, 2000, seed=3))
    failed = {name: p for name, p in checks.items() if p < P_MIN}
    assert not failed, f"histograms differ from the documented rule: {failed}"


def test_grid_fallback_keeps_the_rule(monkeypatch, reference_n4):
    # One candidate per round and one round: most blocks fall back to the exact grid test,
    # so the mixture of the two ways of placing a block is what gets tested here.
    monkeypatch.setattr(generator, "candidates_per_round", lambda weights, k: (1,) * len(weights))
    monkeypatch.setattr(generator, "REJECTION_ROUNDS", 1)
    agents, blocks = sampled_layouts(4, DRAWS, seed=4)
    checks = check_against_rule(4, agents, blocks, *reference_n4)
    failed = {name: p for name, p in checks.items() if p < P_MIN}
    assert not failed, f"histograms differ from the documented rule: {failed}"


def _row_first(rng, valid: np.ndarray) -> np.ndarray:
    """Subtly biased: a row uniform among rows with a valid cell, then a valid cell of that row."""
    k = int(round(np.sqrt(valid.shape[1])))
    grid = valid.reshape(len(valid), k, k)
    row = _uniform_choice(rng, grid.any(2))
    col = _uniform_choice(rng, grid[np.arange(len(valid)), row])
    return row * k + col


def _next_valid(rng, valid: np.ndarray) -> np.ndarray:
    """Biased: a uniform valid-or-not candidate, moved to the next valid cell in reading order."""
    cells = np.arange(valid.shape[1])
    candidate = rng.integers(0, valid.shape[1], len(valid))
    after = valid & (cells[None, :] >= candidate[:, None])
    return np.where(after.any(1), after.argmax(1), valid.argmax(1))


@pytest.mark.parametrize("biased", [_row_first, _next_valid])
def test_checks_reject_a_biased_sampler(reference_n4, biased):
    agents, blocks = reference_layouts(4, DRAWS, seed=5, place=biased)
    checks = check_against_rule(4, agents, blocks, *reference_n4)
    assert min(checks.values()) < 1e-6, "the checks must be able to fail"


def test_checks_pass_the_reference_itself(reference_n4):
    agents, blocks = reference_layouts(4, DRAWS, seed=6)
    assert min(check_against_rule(4, agents, blocks, *reference_n4).values()) >= P_MIN


def test_same_key_same_layout_batched_or_not():
    weights = tuple(generator.block_weights(8))
    keys = jax.random.split(jax.random.PRNGKey(9), 16)
    batched = jax.jit(jax.vmap(lambda key: generator.sample_layout(key, 8, weights)))(keys)
    one = jax.jit(lambda key: generator.sample_layout(key, 8, weights))
    for i in (0, 7, 15):
        single = one(keys[i])
        np.testing.assert_array_equal(batched[0][i], single[0])
        np.testing.assert_array_equal(batched[1][i], single[1])


@pytest.mark.parametrize("n, weights", [(4, (7, 7, 7, 6)), (8, None), (40, None)])
def test_first_rounds_give_the_full_rule_layout(n, weights):
    """sample_layout takes a shortcut (agents' rows from the first words, every block from its
    first round of candidates) and runs the full rule only where the shortcut fails; both
    must give the same layout for every key. (7, 7, 7, 6) on a 20 x 20 grid makes the
    shortcut fail often, so a batch mixes both ways; n = 40 takes its rows from a permutation."""
    weights = tuple(generator.block_weights(n)) if weights is None else weights
    k = generator.grid_size_for(n)
    keys = jax.random.split(jax.random.PRNGKey(11), 512)
    agents, blocks, ok = jax.jit(jax.vmap(lambda key: generator.sample_layout(key, n, weights)))(keys)

    def full(key):
        words, agent_words = generator._layout_words(key, n, weights, k)
        rows, cells, placed = generator.general_layout(
            jax.random.fold_in(key, 1), jax.random.fold_in(key, 2), words, n, weights
        )
        if agent_words:
            _, rows_ok = generator._rows_from_words(words[:agent_words], n, k)
        else:
            rows_ok = True
        _, cells_ok = generator._first_rounds(words[agent_words:].reshape(len(weights), -1), weights, k)
        return rows, cells, placed, rows_ok & cells_ok

    rows, cells, placed, shortcut = jax.jit(jax.vmap(full))(keys)
    np.testing.assert_array_equal(agents[:, :, 0], rows)
    np.testing.assert_array_equal(agents[:, :, 1], 0)
    np.testing.assert_array_equal(blocks, cells)
    np.testing.assert_array_equal(ok, placed)
    if n == 4:
        assert 0 < int(shortcut.sum()) < len(keys), "the batch must mix both ways"
