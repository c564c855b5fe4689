"""Comparing runs: every metric with its interval per run, as tables and plots.

A run is the set of episodes that share the fields named by ``by`` (default: topology,
team and scenario, from each trace's ``episode`` record). :func:`compare_runs` gives each
run's mean and 95% bootstrap interval of every number metrics.json holds for an episode
(:func:`table_metrics`: the aggregate's metrics, then any other number, a per-agent count
such as ``pushes`` as ``pushes.agent_0``), stratified by scenario when ``scenario`` is not
among ``by`` and a run mixes several; a metric that is undefined (null) in some episodes is
summarised over the others, and the table says over how many. :func:`markdown_table` and
:func:`csv_text` lay them out, :func:`plot_bars` draws outcomes and communication as bars
with their intervals, and :func:`plot_radar` the normalised process metrics of each
topology, one panel per team and scenario, as EmCoop's Fig. 3 does. A metric that is zero
in every run is left out of the plots, and the figure says which.

>>> from cube_jax.analytics.report import Report
>>> episodes = [{"trace": "a", "seed": 0, "L_tot": 2}, {"trace": "b", "seed": 1, "L_tot": 4},
...             {"trace": "c", "seed": 0, "L_tot": 0}]
>>> runs = [{"topology": "debate", "team": "llm:m", "scenario": "easy"}] * 2 + [
...         {"topology": "individual", "team": "llm:m", "scenario": "easy"}]
>>> report = Report(episodes, runs, aggregate={}, failures=[], paths=[])
>>> [(run.label, run.episodes, run.summary["L_tot"]["mean"]) for run in compare_runs(report, metrics=["L_tot"])]
[('debate / llm:m / easy', 2, 3.0), ('individual / llm:m / easy', 1, 0.0)]
>>> table_metrics(Report([{"trace": "a", "seed": 0, "L_tot": 2, "balance": None, "pushes": {"agent_0": 3}}],
...                      runs[:1], aggregate={"L_tot": {}}, failures=[], paths=[]))
['L_tot', 'balance', 'pushes.agent_0']
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
import numbers
import textwrap
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from cube_jax.analytics.intervals import CONFIDENCE, RESAMPLES, interval_text, summarize
from cube_jax.analytics.metrics import EMCOOP_LEGEND, EPISODE_ONLY_METRICS, RATIO_METRICS

RUN_FIELDS = ("topology", "team", "scenario")
# What names an episode rather than measures it.
IDENTITY_FIELDS = ("trace", "seed")
# What the bar plots show: the outcomes, then communication and decision overhead.
BAR_METRICS = ("success", "blocks_delivered", "weight_delivered", "steps", "score_per_step", "L_tot", "L_avg",
               "D_delta", "llm_calls")
# What the radar shows: the process metrics that can differ between runs (Z_gain_rate is 0
# and C_dependency_ratio 0.5 in CUBE; the deviations are left to the table).
RADAR_METRICS = ("D_delta", "decision_time_avg", "wait_time_avg", "L_avg", "P_total", "P_int", "P_res_rate",
                 "P_re_rate", "P_coherence", "C_spatial_ratio", "C_temporal_ratio", "C_participation_ratio")


@dataclasses.dataclass
class Run:
    """One run: the fields it is grouped by, its episode count, ``{metric: {mean, ci_low,
    ci_high}}`` (None for a metric undefined in all its episodes) and, for a metric defined
    in only some of them, in how many (``defined``)."""

    fields: Dict[str, str]
    episodes: int
    summary: Dict[str, Optional[Dict[str, float]]]
    defined: Dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def label(self) -> str:
        return " / ".join(self.fields.values())


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real)  # bool too: a success counts as 0 or 1


def episode_numbers(episode: Mapping[str, object]) -> Dict[str, Optional[float]]:
    """The numbers of one metrics.json episode entry by name: each metric (None where it is
    null), and each number of a mapping (``pushes``) as ``name.key``; metrics listed per
    episode only (``block_done_t``) are not numbers to average."""
    out: Dict[str, Optional[float]] = {}
    for key, value in episode.items():
        if key in IDENTITY_FIELDS or key in EPISODE_ONLY_METRICS:
            continue
        if value is None or _is_number(value):
            out[key] = value
        elif isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in value.items() if v is None or _is_number(v)})
    return out


def table_metrics(report) -> List[str]:
    """What tables show: every metric of metrics.json's aggregate, in its order, then every
    other number its episodes hold (:func:`episode_numbers`), in the order first met; so a
    metric added to metrics.json reaches the tables without a list to update."""
    names = dict.fromkeys(report.document()["aggregate"])
    for episode in report.episodes:
        names.update(dict.fromkeys(episode_numbers(episode)))
    return list(names)


def _summarize_run(episodes: Sequence[dict], strata: Sequence[str], metrics: Sequence[str], confidence: float,
                   seed: int, resamples: int) -> tuple:
    """(summary, defined counts) of one run: metrics defined everywhere in one pass, the
    others each over the episodes that define them."""
    numbers_of = [episode_numbers(e) for e in episodes]
    mixed = len(set(strata)) > 1
    complete = [m for m in metrics if all(n.get(m) is not None for n in numbers_of)]
    summary: Dict[str, Optional[Dict[str, float]]] = {}
    if complete:
        summary.update(summarize(numbers_of, complete, strata if mixed else None, confidence, seed, resamples))
    defined = {}
    for metric in metrics:
        if metric in summary:
            continue
        keep = [i for i, n in enumerate(numbers_of) if n.get(metric) is not None]
        defined[metric] = len(keep)
        kept_strata = [strata[i] for i in keep]
        summary[metric] = summarize([numbers_of[i] for i in keep], [metric],
                                    kept_strata if len(set(kept_strata)) > 1 else None, confidence, seed,
                                    resamples)[metric] if keep else None
    return {m: summary[m] for m in metrics}, defined


def compare_runs(report, by: Sequence[str] = RUN_FIELDS, metrics: Optional[Sequence[str]] = None,
                 confidence: float = CONFIDENCE, seed: int = 0, resamples: int = RESAMPLES) -> List[Run]:
    """The runs of ``report`` (a :class:`~cube_jax.analytics.report.Report`), sorted by their
    fields, with ``metrics`` (default: :func:`table_metrics`)."""
    unknown = [field for field in by if field not in RUN_FIELDS]
    if unknown or not by:
        raise ValueError(f"runs are grouped by some of {RUN_FIELDS}, got {list(by)}")
    metrics = table_metrics(report) if metrics is None else list(metrics)
    groups: Dict[tuple, List[int]] = {}
    for index, run in enumerate(report.runs):
        groups.setdefault(tuple(run[field] for field in by), []).append(index)
    runs = []
    for key in sorted(groups):
        members = groups[key]
        summary, defined = _summarize_run([report.episodes[i] for i in members],
                                          [report.runs[i]["scenario"] for i in members], metrics, confidence, seed,
                                          resamples)
        runs.append(Run(dict(zip(by, key)), len(members), summary, defined))
    return runs


def metric_label(metric: str) -> str:
    """A metric's name for tables and plots: EmCoop's legend name for its eighteen."""
    return EMCOOP_LEGEND.get(metric, metric)


def _metrics_of(runs: Sequence[Run]) -> List[str]:
    return list(dict.fromkeys(m for run in runs for m in run.summary))


def cell_text(run: Run, metric: str, digits: int = 3) -> str:
    """``mean [low, high]``, with ``(k of N episodes)`` when only k define it, or ``undefined``."""
    summary = run.summary.get(metric)
    if summary is None:
        return "undefined"
    text = interval_text(summary, digits)
    count = run.defined.get(metric, run.episodes)
    return text if count == run.episodes else f"{text} ({count} of {run.episodes} episodes)"


def markdown_table(runs: Sequence[Run], metrics: Optional[Sequence[str]] = None, digits: int = 3) -> str:
    """A Markdown table: one row per metric (default: every metric of the runs), one column
    per run, ``mean [low, high]`` in each cell."""
    metrics = _metrics_of(runs) if metrics is None else metrics
    header = ["metric"] + [f"{run.label} (N={run.episodes})" for run in runs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in metrics:
        cells = [cell_text(run, metric, digits) for run in runs]
        lines.append("| " + " | ".join([f"`{metric}`"] + cells) + " |")
    return "\n".join(lines) + "\n"


def csv_text(runs: Sequence[Run], metrics: Optional[Sequence[str]] = None) -> str:
    """The same numbers as CSV, one row per run and metric: the run's fields, ``episodes``
    (those that define the metric), ``metric``, ``mean``, ``ci_low``, ``ci_high`` (empty
    where the metric is undefined)."""
    metrics = _metrics_of(runs) if metrics is None else metrics
    fields = list(runs[0].fields) if runs else list(RUN_FIELDS)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields + ["episodes", "metric", "mean", "ci_low", "ci_high"])
    for run in runs:
        for metric in metrics:
            s = run.summary.get(metric)
            values = ["", "", ""] if s is None else [repr(s["mean"]), repr(s["ci_low"]), repr(s["ci_high"])]
            writer.writerow([run.fields[f] for f in fields] + [run.defined.get(metric, run.episodes), metric, *values])
    return out.getvalue()


def write_tables(runs: Sequence[Run], markdown: Optional[Path] = None, csv_path: Optional[Path] = None,
                 metrics: Optional[Sequence[str]] = None) -> None:
    for path, text in ((markdown, markdown_table(runs, metrics) if markdown else None),
                       (csv_path, csv_text(runs, metrics) if csv_path else None)):
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")


# --- plots ---------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def drawable_metrics(runs: Sequence[Run], metrics: Sequence[str]) -> tuple:
    """(metrics to draw, metrics left out because they are zero in every run): a metric
    undefined in a run is not drawn either."""
    defined = [m for m in metrics if runs and all(run.summary.get(m) is not None for run in runs)]
    zero = [m for m in defined if all(run.summary[m][k] == 0 for run in runs for k in ("mean", "ci_low", "ci_high"))]
    return [m for m in defined if m not in zero], zero


def _wrapped(text: str, width_inches: float, fontsize: float) -> str:
    """``text`` broken into lines that fit ``width_inches`` at ``fontsize`` points."""
    return textwrap.fill(text, max(20, int(width_inches * 72 / (0.55 * fontsize))))


def _note_left_out(fig, zero: Sequence[str], width_inches: float) -> None:
    if zero:
        note = "Zero in every run, not drawn: " + ", ".join(metric_label(m) for m in zero)
        fig.text(0.5, 0.0, _wrapped(note, width_inches, 8), ha="center", va="top", fontsize=8, color="#555555")


def _nothing_to_draw(plt, title: str, zero: Sequence[str]):
    fig = plt.figure(figsize=(6.0, 2.0))
    why = ("every metric is zero in every run: " + ", ".join(metric_label(m) for m in zero)) if zero \
        else "no metric is defined in every run"
    fig.text(0.5, 0.6, _wrapped(title, 6.0, 11), ha="center", va="center", fontsize=11)
    fig.text(0.5, 0.3, _wrapped("Nothing to draw: " + why, 6.0, 9), ha="center", va="center", fontsize=9)
    return fig


def plot_bars(runs: Sequence[Run], path: Path, metrics: Sequence[str] = BAR_METRICS) -> Path:
    """One panel per metric, one bar per run with its 95% interval as an error bar; metrics
    that are zero in every run get no panel (a note under the figure names them)."""
    plt = _pyplot()
    title = "Outcomes and communication per run (mean, 95% bootstrap interval)"
    metrics, zero = drawable_metrics(runs, metrics)
    if not metrics:
        return _save(_nothing_to_draw(plt, title, zero), path, plt)
    columns = min(3, len(metrics))
    rows = math.ceil(len(metrics) / columns)
    width = max(4.0, 0.45 * len(runs) + 1.5)
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, 3.2 * rows), squeeze=False)
    colors = _run_colors(runs, plt)
    positions = np.arange(len(runs))
    for ax, metric in zip(axes.flat, metrics):
        means = np.array([run.summary[metric]["mean"] for run in runs])
        low = means - np.array([run.summary[metric]["ci_low"] for run in runs])
        high = np.array([run.summary[metric]["ci_high"] for run in runs]) - means
        ax.bar(positions, means, color=colors, yerr=[low, high], capsize=3, ecolor="black", linewidth=0)
        ax.set_title(_wrapped(metric_label(metric), width, 9), fontsize=9)
        ax.set_xticks(positions)
        ax.set_xticklabels([run.label for run in runs], rotation=35, ha="right", fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    fig.suptitle(_wrapped(title, width * columns, 11), fontsize=11)
    fig.tight_layout()
    _note_left_out(fig, zero, width * columns)
    return _save(fig, path, plt)


def _run_colors(runs: Sequence[Run], plt) -> list:
    topologies = sorted({run.fields.get("topology", run.label) for run in runs})
    palette = plt.get_cmap("tab10")
    return [palette(topologies.index(run.fields.get("topology", run.label)) % 10) for run in runs]


def radar_values(runs: Sequence[Run], metrics: Sequence[str] = RADAR_METRICS) -> np.ndarray:
    """float[runs, metrics] in [0, 1]: ratios as they are, every other metric divided by
    its largest mean among ``runs`` (0 where that is 0)."""
    values = np.array([[run.summary[m]["mean"] for m in metrics] for run in runs], dtype=float)
    for j, metric in enumerate(metrics):
        if metric not in RATIO_METRICS:
            top = values[:, j].max(initial=0.0)
            values[:, j] = values[:, j] / top if top > 0 else 0.0
    return values


def plot_radar(runs: Sequence[Run], path: Path, metrics: Sequence[str] = RADAR_METRICS) -> Path:
    """One radar panel per (team, scenario), one polygon per topology, of the normalised
    process metrics (:func:`radar_values`, normalised over all the runs drawn). Metrics that
    are zero in every run are not axes (a note names them); a panel whose runs are zero on
    every axis says so."""
    plt = _pyplot()
    title = "Process metrics per topology (ratios as they are; others / the largest run's mean)"
    metrics, zero = drawable_metrics(runs, metrics)
    if not metrics:
        return _save(_nothing_to_draw(plt, title, zero), path, plt)
    values = radar_values(runs, metrics)
    panels: Dict[str, List[int]] = {}
    for index, run in enumerate(runs):
        label = " / ".join(v for k, v in run.fields.items() if k != "topology") or "all runs"
        panels.setdefault(label, []).append(index)
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    width = 6.0 * columns
    fig, axes = plt.subplots(rows, columns, figsize=(width, 5.6 * rows), squeeze=False,
                             subplot_kw={"projection": "polar"})
    angles = np.linspace(0, 2 * np.pi, len(metrics), endpoint=False)
    closed = np.append(angles, angles[0])
    topologies = sorted({run.fields.get("topology", run.label) for run in runs})
    palette = plt.get_cmap("tab10")
    for ax, (label, members) in zip(axes.flat, panels.items()):
        for index in members:
            topology = runs[index].fields.get("topology", runs[index].label)
            color = palette(topologies.index(topology) % 10)
            ring = np.append(values[index], values[index][0])
            ax.plot(closed, ring, color=color, linewidth=1.5, label=topology)
            ax.fill(closed, ring, color=color, alpha=0.12)
        if not values[members].any():
            ax.text(0.5, 0.5, "every metric is 0 here", transform=ax.transAxes, ha="center", va="center", fontsize=8,
                    color="#555555")
        ax.set_xticks(angles)
        ax.set_xticklabels(metrics, fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_yticks([0.25, 0.5, 0.75, 1.0])
        ax.set_yticklabels(["", "0.5", "", "1"], fontsize=6)
        ax.set_title(_wrapped(label, 4.5, 9), fontsize=9, pad=18)
        ax.legend(loc="upper right", bbox_to_anchor=(1.3, 1.12), fontsize=7, frameon=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(_wrapped(title, width, 11), fontsize=11)
    fig.tight_layout()
    _note_left_out(fig, zero, width)
    return _save(fig, path, plt)


def _save(fig, path: Path, plt) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a tight box around everything drawn: no title, label, legend or note is cut at the edges
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.25)
    plt.close(fig)
    return path
