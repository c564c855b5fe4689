"""Bootstrap intervals: exact bounds where they can be worked out, stratification,
determinism, degenerate inputs, and the intervals for `cube-jax eval`'s episodes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cube_jax.analytics.intervals import bootstrap_ci, bootstrap_cis, eval_intervals, interval_text, summarize


def test_a_stratum_of_one_episode_is_a_constant_in_every_resample():
    # stratum "a" resamples {1, 2, 3}; "b" always contributes 10. The pooled mean ranges over
    # (3 + 10) / 4 .. (9 + 10) / 4, and each extreme has probability 1/27 > 2.5%.
    assert bootstrap_ci([1.0, 2.0, 3.0, 10.0], strata=["a", "a", "a", "b"], seed=0) == (4.0, 3.25, 4.75)


def test_stratifying_narrows_the_interval_when_scenarios_differ():
    values = [0.0, 0.1, 0.2, 0.0, 10.0, 10.1, 10.2, 10.0]
    strata = ["easy"] * 4 + ["hard"] * 4
    _, low_plain, high_plain = bootstrap_ci(values, seed=1)
    mean, low, high = bootstrap_ci(values, strata=strata, seed=1)
    assert mean == pytest.approx(5.075)
    # within-scenario spread is 0.2 at most, so the stratified mean moves by less than 0.2
    assert mean - 0.2 < low < mean < high < mean + 0.2
    assert high_plain - low_plain > 2.0


def test_the_interval_is_the_mean_when_nothing_can_vary():
    assert bootstrap_ci([3.5]) == (3.5, 3.5, 3.5)
    assert bootstrap_ci([0.1] * 7) == (pytest.approx(0.1),) * 3
    assert bootstrap_ci([1.0, 5.0], strata=["a", "b"]) == (3.0, 3.0, 3.0)


def test_same_seed_same_interval_and_other_seed_close():
    values = np.random.default_rng(0).normal(size=50)
    first, again = bootstrap_ci(values, seed=3), bootstrap_ci(values, seed=3)
    assert first == again
    other = bootstrap_ci(values, seed=4)
    assert other[0] == first[0] and abs(other[1] - first[1]) < 0.05 and abs(other[2] - first[2]) < 0.05


def test_the_percentile_interval_of_a_normal_sample_has_the_textbook_width():
    values = np.random.default_rng(1).normal(size=400)
    mean, low, high = bootstrap_ci(values, seed=0)
    half = 1.96 * values.std() / np.sqrt(len(values))
    assert high - low == pytest.approx(2 * half, rel=0.1)


def test_rows_are_summarised_at_once_and_independently_of_their_neighbours():
    table = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0]])
    means, lows, highs = bootstrap_cis(table, seed=0)
    assert list(means) == [2.5, 5.0] and (lows[1], highs[1]) == (5.0, 5.0)
    assert (lows[0], highs[0]) == bootstrap_ci([1.0, 2.0, 3.0, 4.0], seed=0)[1:]


@pytest.mark.parametrize("values, strata, message", [
    ([], None, "at least one episode"),
    ([1.0, float("nan")], None, "finite"),
    ([1.0, 2.0], ["a"], "strata names 1 episodes but there are 2"),
])
def test_bad_input_is_a_clear_error(values, strata, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(values, strata=strata)


def test_bad_confidence_is_a_clear_error():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0, 2.0], confidence=95)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30), st.integers(1, 3), st.integers(0, 10))
def test_the_interval_holds_the_mean_and_lies_within_the_values(values, strata_count, seed):
    strata = [i % strata_count for i in range(len(values))]
    mean, low, high = bootstrap_ci(values, strata=strata, seed=seed, resamples=500)
    assert min(values) - 1e-6 <= low <= mean <= high <= max(values) + 1e-6


def test_summarize_counts_booleans_and_names_a_missing_metric():
    episodes = [{"success": True, "steps": 10}, {"success": False, "steps": 30}]
    out = summarize(episodes, ["success", "steps"])
    assert out["success"]["mean"] == 0.5 and out["steps"]["mean"] == 20.0
    assert 10.0 <= out["steps"]["ci_low"] <= out["steps"]["ci_high"] <= 30.0
    with pytest.raises(KeyError, match="episode 1 has no 'steps'"):
        summarize([{"steps": 1}, {"success": True}], ["steps"])


def test_eval_intervals_for_the_eval_json_episodes():
    episodes = [{"seed": s, "blocks_total": 3, "blocks_delivered": d, "steps": t, "success": d == 3,
                 "weight_delivered": w} for s, (d, t, w) in enumerate([(3, 40, 4), (3, 60, 4), (1, 100, 1), (3, 50, 4)])]
    out = eval_intervals(episodes, seed=0)
    assert list(out) == ["success_rate", "blocks_delivered", "weight_delivered", "steps"]
    assert out["success_rate"]["mean"] == 0.75 and out["steps"]["mean"] == 62.5
    assert out["weight_delivered"]["mean"] == 3.25
    for summary in out.values():
        assert set(summary) == {"mean", "ci_low", "ci_high"}
        assert summary["ci_low"] <= summary["mean"] <= summary["ci_high"]
    # the episodes of today's `cube-jax eval` carry no weight: that summary is left out
    older = [{k: v for k, v in e.items() if k != "weight_delivered"} for e in episodes]
    assert "weight_delivered" not in eval_intervals(older)
    with pytest.raises(ValueError, match="carry none of"):
        eval_intervals([{"seed": 0}])


def test_interval_text():
    assert interval_text({"mean": 0.123456, "ci_low": 0.1, "ci_high": 0.15}) == "0.123 [0.1, 0.15]"
    assert interval_text({"mean": 39414.2, "ci_low": 35429.0, "ci_high": 43570.9}) == "39414 [35429, 43571]"
