"""Means with 95% bootstrap confidence intervals, stratified by scenario.

The interval is SciPy's percentile bootstrap (:func:`scipy.stats.bootstrap`). When the
episodes come from several scenarios (strata), each resample draws, within every
stratum, as many episodes as it has, with replacement, as rliable's stratified bootstrap
does; the statistic is the mean over all the resampled episodes. ``mean`` is always the
plain mean of the values. A stratum of one episode contributes its value to every
resample; when every stratum has one episode, or all values are equal, the interval is
the mean itself.

>>> mean, low, high = bootstrap_ci([1.0, 2.0, 3.0, 4.0], seed=0)
>>> mean, bool(low < mean < high)
(2.5, True)
>>> bootstrap_ci([7.0])
(7.0, 7.0, 7.0)

Over training runs (one final score per seed) the field reports the interquartile mean as
well (rliable: Agarwal et al., 2021): :func:`iqm` is the mean of the middle half of the
values, :func:`iqm_ci` adds its stratified percentile bootstrap interval.

>>> iqm([0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 100.0])
1.0
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000
# The most resampled values held at once (about 64 MB of float64).
_BATCH_VALUES = 8_000_000
# `cube-jax eval`'s per-episode keys that get an interval, and the name of each summary.
EVAL_METRICS = {"success": "success_rate", "blocks_delivered": "blocks_delivered", "weight_delivered": "weight_delivered",
                "steps": "steps"}


def bootstrap_ci(values: Sequence[float], strata: Optional[Sequence[object]] = None, confidence: float = CONFIDENCE,
                 seed: int = 0, resamples: int = RESAMPLES) -> Tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` and its bootstrap confidence interval.

    ``strata`` gives each value's stratum (for example its scenario); values are then
    resampled within their stratum. The result depends only on the inputs and ``seed``.
    """
    means, lows, highs = bootstrap_cis(np.asarray(values, dtype=float)[None, :], strata, confidence, seed, resamples)
    return float(means[0]), float(lows[0]), float(highs[0])


def bootstrap_cis(table: np.ndarray, strata: Optional[Sequence[object]] = None, confidence: float = CONFIDENCE,
                  seed: int = 0, resamples: int = RESAMPLES) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means and intervals of every row of ``table`` (float[metrics, episodes]) at once.

    All rows share the resampled episodes, so the intervals of different metrics come
    from the same resamples. Returns three float[metrics] arrays: mean, low, high.
    """
    table = _checked_table(table, confidence, "episodes")
    episodes = table.shape[1]
    labels = np.zeros(episodes, dtype=int) if strata is None else _stratum_indices(strata, episodes)
    means = table.mean(axis=1)
    lows, highs = means.copy(), means.copy()
    varying = np.ptp(table, axis=1) > 0
    groups = [np.flatnonzero(labels == s) for s in np.unique(labels)]
    resampled = [g for g in groups if len(g) > 1]
    if not varying.any() or not resampled:
        return means, lows, highs
    import scipy.stats

    rows = table[varying]
    # strata of one episode are the same in every resample: their sum is a constant
    fixed = np.zeros((rows.shape[0], 1))
    for g in groups:
        if len(g) == 1:
            fixed[:, 0] += rows[:, g[0]]

    def pooled_mean(*samples, axis=-1):
        # samples: float[rows, batch, stratum size]; the result float[rows, batch]
        return (sum(sample.sum(axis=axis) for sample in samples) + fixed) / episodes

    data = tuple(rows[:, g] for g in resampled)
    batch = max(1, _BATCH_VALUES // (rows.shape[0] * episodes))
    result = scipy.stats.bootstrap(data, pooled_mean, n_resamples=resamples, batch=batch, vectorized=True, axis=-1,
                                   confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    # the mean lies in its interval: a bound a rounding error beyond it is the mean itself
    tolerance = 1e-9 * np.maximum(1.0, np.abs(means[varying]))
    lows[varying] = np.where((low > means[varying]) & (low - means[varying] <= tolerance), means[varying], low)
    highs[varying] = np.where((high < means[varying]) & (means[varying] - high <= tolerance), means[varying], high)
    return means, lows, highs


def _checked_table(table, confidence: float, unit: str) -> np.ndarray:
    """``table`` as float[metrics, units]; ValueError for a bad shape, confidence or value."""
    table = np.asarray(table, dtype=float)
    if table.ndim != 2 or table.shape[1] == 0:
        raise ValueError(f"bootstrap needs a [metrics, {unit}] table with at least one {unit[:-1]}, "
                         f"got shape {table.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    if not np.all(np.isfinite(table)):
        raise ValueError("bootstrap values must be finite numbers")
    return table


def _stratum_indices(strata: Sequence[object], episodes: int) -> np.ndarray:
    strata = list(strata)
    if len(strata) != episodes:
        raise ValueError(f"strata names {len(strata)} episodes but there are {episodes} values")
    index: Dict[object, int] = {}
    return np.array([index.setdefault(s, len(index)) for s in strata], dtype=int)


def summarize(episodes: Sequence[Mapping[str, object]], metrics: Iterable[str], strata: Optional[Sequence[object]] = None,
              confidence: float = CONFIDENCE, seed: int = 0, resamples: int = RESAMPLES) -> Dict[str, Dict[str, float]]:
    """``{metric: {"mean", "ci_low", "ci_high"}}`` over ``episodes`` (dicts holding each metric;
    booleans count as 0 and 1)."""
    metrics = list(metrics)
    if not episodes:
        raise ValueError("no episodes to summarize")
    for number, episode in enumerate(episodes):
        missing = [m for m in metrics if m not in episode]
        if missing:
            raise KeyError(f"episode {number} has no {missing[0]!r} (it has {sorted(episode)[:8]})")
    table = np.array([[float(episode[m]) for episode in episodes] for m in metrics], dtype=float)
    means, lows, highs = bootstrap_cis(table, strata, confidence, seed, resamples)
    return {m: {"mean": float(means[i]), "ci_low": float(lows[i]), "ci_high": float(highs[i])} for i, m in enumerate(metrics)}


def eval_intervals(episodes: Sequence[Mapping[str, object]], strata: Optional[Sequence[object]] = None,
                   confidence: float = CONFIDENCE, seed: int = 0, resamples: int = RESAMPLES) -> Dict[str, Dict[str, float]]:
    """Intervals for ``cube-jax eval``'s episodes: ``success_rate``, ``blocks_delivered``,
    ``weight_delivered`` and ``steps``, each ``{"mean", "ci_low", "ci_high"}``; a key that
    the episodes do not carry (``weight_delivered`` in older outputs) is left out.

    >>> out = eval_intervals([{"seed": 0, "success": True, "blocks_delivered": 3, "steps": 40},
    ...                       {"seed": 1, "success": False, "blocks_delivered": 1, "steps": 100}])
    >>> sorted(out), out["success_rate"]["mean"], out["steps"]["ci_low"] >= 40
    (['blocks_delivered', 'steps', 'success_rate'], 0.5, True)
    """
    present = [key for key in EVAL_METRICS if episodes and all(key in e for e in episodes)]
    if not present:
        raise ValueError(f"the episodes carry none of {sorted(EVAL_METRICS)}")
    summary = summarize(episodes, present, strata, confidence, seed, resamples)
    return {EVAL_METRICS[key]: summary[key] for key in present}


def interval_text(summary: Mapping[str, float], digits: int = 3) -> str:
    """``"mean [low, high]"`` for one summary, to ``digits`` significant figures.

    >>> interval_text({"mean": 0.5, "ci_low": 0.25, "ci_high": 0.75})
    '0.5 [0.25, 0.75]'
    """
    return f"{_fmt(summary['mean'], digits)} [{_fmt(summary['ci_low'], digits)}, {_fmt(summary['ci_high'], digits)}]"


def _fmt(value: float, digits: int) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"


# --- the interquartile mean over runs ------------------------------------------------------------
IQM_TRIM = 0.25  # the share cut from each end: rliable's aggregate_iqm, scipy.stats.trim_mean(x, 0.25)


def iqm(values: Sequence[float]) -> float:
    """The interquartile mean: the mean of ``values`` after cutting ``int(0.25 n)`` from each end.

    >>> iqm([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])  # 2 cut from each end: mean of 2..7
    4.5
    """
    import scipy.stats

    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"iqm needs a non-empty 1-D list of values, got shape {values.shape}")
    return float(scipy.stats.trim_mean(values, IQM_TRIM))


def iqm_ci(values: Sequence[float], strata: Optional[Sequence[object]] = None, confidence: float = CONFIDENCE,
           seed: int = 0, resamples: int = RESAMPLES) -> Tuple[float, float, float]:
    """(iqm, low, high): the interquartile mean of ``values`` and its bootstrap confidence interval.

    As rliable's ``get_interval_estimates(..., method="percentile")`` does it: every
    resample draws, within each stratum (a task; by default all values are one), as many
    values as the stratum has, with replacement; the statistic is the IQM of all the
    resampled values together; the interval is the percentile interval of the resampled
    IQMs (``numpy.percentile``, linear interpolation). Resample indices come from
    ``numpy.random.default_rng(seed)``: for each stratum in order of first appearance,
    ``integers(0, n_s, size=(resamples, n_s))``, a stratum's values in their given order.
    Meant for runs (tens to hundreds of values): all indices are drawn at once.

    >>> iqm_ci([0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], seed=0)
    (1.0, 0.8333333333333334, 1.0)
    """
    iqms, lows, highs = iqm_cis(np.asarray(values, dtype=float)[None, :], strata, confidence, seed, resamples)
    return float(iqms[0]), float(lows[0]), float(highs[0])


def iqm_cis(table: np.ndarray, strata: Optional[Sequence[object]] = None, confidence: float = CONFIDENCE,
            seed: int = 0, resamples: int = RESAMPLES) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IQMs and intervals of every row of ``table`` (float[metrics, runs]) at once, as :func:`iqm_ci`.

    All rows share the resampled runs. Returns three float[metrics] arrays: iqm, low, high.
    """
    import scipy.stats

    table = _checked_table(table, confidence, "runs")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    runs = table.shape[1]
    labels = np.zeros(runs, dtype=int) if strata is None else _stratum_indices(strata, runs)
    rng = np.random.default_rng(seed)
    # index[r, j]: the run that the j-th value of resample r takes (strata side by side)
    index = np.concatenate([group[rng.integers(0, len(group), size=(resamples, len(group)))]
                            for group in (np.flatnonzero(labels == s) for s in range(labels.max() + 1))], axis=1)
    iqms = scipy.stats.trim_mean(table, IQM_TRIM, axis=1)
    resampled = scipy.stats.trim_mean(table[:, index], IQM_TRIM, axis=2)  # float[metrics, resamples]
    tail = 100 * (1 - confidence) / 2
    lows, highs = np.percentile(resampled, [tail, 100 - tail], axis=1)
    # the IQM lies in its interval: a bound a rounding error beyond it is the IQM itself
    tolerance = 1e-9 * np.maximum(1.0, np.abs(iqms))
    lows = np.where((lows > iqms) & (lows - iqms <= tolerance), iqms, lows)
    highs = np.where((highs < iqms) & (iqms - highs <= tolerance), iqms, highs)
    return iqms, lows, highs
