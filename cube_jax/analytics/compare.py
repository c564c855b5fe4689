"""Comparing runs: every metric with its interval per run, as tables and plots.

A run is the set of episodes that share the fields named by ``by`` (default: topology,
team and scenario, from each trace's ``episode`` record). :func:`compare_runs` gives each
run's mean and 95% bootstrap interval of every metric (stratified by scenario when
``scenario`` is not among ``by`` and a run mixes several); :func:`markdown_table` and
:func:`write_csv` lay them out, :func:`plot_bars` draws outcomes and communication as bars
with their intervals, and :func:`plot_radar` the normalised process metrics of each
topology, one panel per team and scenario, as EmCoop's Fig. 3 does.

>>> from cube_jax.analytics.report import Report
>>> episodes = [{"trace": "a", "seed": 0, "L_tot": 2}, {"trace": "b", "seed": 1, "L_tot": 4},
...             {"trace": "c", "seed": 0, "L_tot": 0}]
>>> runs = [{"topology": "debate", "team": "llm:m", "scenario": "easy"}] * 2 + [
...         {"topology": "individual", "team": "llm:m", "scenario": "easy"}]
>>> report = Report(episodes, runs, aggregate={}, failures=[], paths=[])
>>> [(run.label, run.episodes, run.summary["L_tot"]["mean"]) for run in compare_runs(report, metrics=["L_tot"])]
[('debate / llm:m / easy', 2, 3.0), ('individual / llm:m / easy', 1, 0.0)]
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from cube_jax.analytics.intervals import CONFIDENCE, RESAMPLES, interval_text, summarize
from cube_jax.analytics.metrics import EMCOOP_LEGEND, METRICS, RATIO_METRICS

RUN_FIELDS = ("topology", "team", "scenario")
# What the bar plots show: the outcomes, then communication and decision overhead.
BAR_METRICS = ("success", "blocks_delivered", "weight_delivered", "steps", "score_per_step", "L_tot", "L_avg",
               "D_delta", "llm_calls")
# What the radar shows: the process metrics that can differ between runs (Z_gain_rate is 0
# and C_dependency_ratio 0.5 in CUBE; the deviations are left to the table).
RADAR_METRICS = ("D_delta", "decision_time_avg", "wait_time_avg", "L_avg", "P_total", "P_int", "P_res_rate",
                 "P_re_rate", "P_coherence", "C_spatial_ratio", "C_temporal_ratio", "C_participation_ratio")


@dataclasses.dataclass
class Run:
    """One run: the fields it is grouped by, its episode count and ``{metric: {mean, ci_low, ci_high}}``."""

    fields: Dict[str, str]
    episodes: int
    summary: Dict[str, Dict[str, float]]

    @property
    def label(self) -> str:
        return " / ".join(self.fields.values())


def compare_runs(report, by: Sequence[str] = RUN_FIELDS, metrics: Sequence[str] = METRICS,
                 confidence: float = CONFIDENCE, seed: int = 0, resamples: int = RESAMPLES) -> List[Run]:
    """The runs of ``report`` (a :class:`~cube_jax.analytics.report.Report`), sorted by their fields."""
    unknown = [field for field in by if field not in RUN_FIELDS]
    if unknown or not by:
        raise ValueError(f"runs are grouped by some of {RUN_FIELDS}, got {list(by)}")
    groups: Dict[tuple, List[int]] = {}
    for index, run in enumerate(report.runs):
        groups.setdefault(tuple(run[field] for field in by), []).append(index)
    runs = []
    for key in sorted(groups):
        members = groups[key]
        strata = [report.runs[i]["scenario"] for i in members]
        summary = summarize([report.episodes[i] for i in members], metrics,
                            strata if len(set(strata)) > 1 else None, confidence, seed, resamples)
        runs.append(Run(dict(zip(by, key)), len(members), summary))
    return runs


def metric_label(metric: str) -> str:
    """A metric's name for tables and plots: EmCoop's legend name for its eighteen."""
    return EMCOOP_LEGEND.get(metric, metric)


def markdown_table(runs: Sequence[Run], metrics: Sequence[str] = METRICS, digits: int = 3) -> str:
    """A Markdown table: one row per metric, one column per run, ``mean [low, high]`` in each cell."""
    header = ["metric"] + [f"{run.label} (N={run.episodes})" for run in runs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for metric in metrics:
        cells = [interval_text(run.summary[metric], digits) for run in runs]
        lines.append("| " + " | ".join([f"`{metric}`"] + cells) + " |")
    return "\n".join(lines) + "\n"


def csv_text(runs: Sequence[Run], metrics: Sequence[str] = METRICS) -> str:
    """The same numbers as CSV, one row per run and metric: the run's fields, ``episodes``,
    ``metric``, ``mean``, ``ci_low``, ``ci_high``."""
    fields = list(runs[0].fields) if runs else list(RUN_FIELDS)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields + ["episodes", "metric", "mean", "ci_low", "ci_high"])
    for run in runs:
        for metric in metrics:
            s = run.summary[metric]
            writer.writerow([run.fields[f] for f in fields] + [run.episodes, metric, repr(s["mean"]), repr(s["ci_low"]),
                                                               repr(s["ci_high"])])
    return out.getvalue()


def write_tables(runs: Sequence[Run], markdown: Optional[Path] = None, csv_path: Optional[Path] = None,
                 metrics: Sequence[str] = METRICS) -> None:
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


def plot_bars(runs: Sequence[Run], path: Path, metrics: Sequence[str] = BAR_METRICS) -> Path:
    """One panel per metric, one bar per run with its 95% interval as an error bar."""
    plt = _pyplot()
    metrics = [m for m in metrics if all(m in run.summary for run in runs)]
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
        ax.set_title(metric_label(metric), fontsize=9)
        ax.set_xticks(positions)
        ax.set_xticklabels([run.label for run in runs], rotation=35, ha="right", fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    fig.suptitle("Outcomes and communication per run (mean, 95% bootstrap interval)", fontsize=11)
    fig.tight_layout()
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
    process metrics (:func:`radar_values`, normalised over all the runs drawn)."""
    plt = _pyplot()
    values = radar_values(runs, metrics)
    panels: Dict[str, List[int]] = {}
    for index, run in enumerate(runs):
        title = " / ".join(v for k, v in run.fields.items() if k != "topology") or "all runs"
        panels.setdefault(title, []).append(index)
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 5.0 * rows), squeeze=False,
                             subplot_kw={"projection": "polar"})
    angles = np.linspace(0, 2 * np.pi, len(metrics), endpoint=False)
    closed = np.append(angles, angles[0])
    topologies = sorted({run.fields.get("topology", run.label) for run in runs})
    palette = plt.get_cmap("tab10")
    for ax, (title, members) in zip(axes.flat, panels.items()):
        for index in members:
            topology = runs[index].fields.get("topology", runs[index].label)
            color = palette(topologies.index(topology) % 10)
            ring = np.append(values[index], values[index][0])
            ax.plot(closed, ring, color=color, linewidth=1.5, label=topology)
            ax.fill(closed, ring, color=color, alpha=0.12)
        ax.set_xticks(angles)
        ax.set_xticklabels(metrics, fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_yticks([0.25, 0.5, 0.75, 1.0])
        ax.set_yticklabels(["", "0.5", "", "1"], fontsize=6)
        ax.set_title(title, fontsize=9, pad=14)
        ax.legend(loc="upper right", bbox_to_anchor=(1.3, 1.12), fontsize=7, frameon=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle("Process metrics per topology (ratios as they are; others / the largest run's mean)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path, plt)


def _save(fig, path: Path, plt) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
