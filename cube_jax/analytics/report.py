"""From trace files to ``metrics.json``: every episode's metrics and their intervals.

:func:`build_report` takes trace files and folders (a folder gives its ``*.jsonl`` files,
recursively), computes :func:`~cube_jax.analytics.metrics.episode_metrics` for each, and
the mean and 95% bootstrap interval of every metric across episodes, stratified by
scenario (:func:`~cube_jax.analytics.traces.stratum`) when several are mixed. A file that
is not a valid trace does not stop the report: it is listed in ``Report.failures`` with the
line and key of its first problem, and the other files are measured.

:func:`write_metrics_json` writes the result in the format of API.md::

    {"episodes": [{"trace": str, "seed": int, <every metric>}, ...],
     "aggregate": {<metric>: {"mean": float, "ci_low": float, "ci_high": float}, ...}}

Each episode also carries ``plan_failures``: every failed or replaced plan attributed to the
cooperation constraint it did not meet, with the messages of its window
(:mod:`~cube_jax.analytics.attribution`, EmCoop's RQ2), and ``failures_by_constraint``, their
counts; the document's ``failure_attribution`` sums them over the episodes (plans, share,
messages per window, per constraint), and :meth:`Report.attribution_table` renders that.

Beside the metrics of LLM.md section 6, each episode carries its workload balance
(:mod:`~cube_jax.analytics.balance`: ``workload_balance``, ``workload_balance_kinds``, null
when undefined, and ``pushes`` per agent), and the aggregate holds the balance metrics'
means and intervals over the episodes where they are defined, with their number
(``"episodes"``).

>>> import tempfile, pathlib
>>> from cube_jax.analytics.synthetic import random_trace
>>> from cube_jax.trace import dumps
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> for seed in range(3):
...     _ = (folder / f"episode_{seed}.jsonl").write_text(dumps(random_trace(seed, n=2, steps=10)))
>>> _ = (folder / "broken.jsonl").write_text('{"type": "stage"}\\n')
>>> report = write_metrics_json([folder], folder / "metrics.json")
>>> len(report.episodes), [failure.path.name for failure in report.failures]
(3, ['broken.jsonl'])
>>> print(report.failures[0].message)
line 1, key 'type': the first record must be 'episode', got 'stage'
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import multiprocessing
import os
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Union

from cube_jax.analytics.attribution import attribution_counts, attribution_summary, attribution_table, plan_failures
from cube_jax.analytics.balance import record_workload, summarize_workload
from cube_jax.analytics.intervals import CONFIDENCE, RESAMPLES, summarize
from cube_jax.analytics.metrics import REPORTED_METRICS, episode_metrics
from cube_jax.analytics.traces import (RecordError, collector_paused, header_fields, load_metric_records, problem_of,
                                      run_fields, trace_paths)
from cube_jax.cpus import usable_cpus
from cube_jax.files import write_atomic
from cube_jax.trace import TraceError, TraceProblem, validate_trace

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]
# Below this many traces a pool of processes costs more to start than it saves.
_POOL_THRESHOLD = 64


@dataclasses.dataclass(frozen=True)
class TraceFailure:
    """A file left out of the report: its path and what is wrong (``line N, key K: ...``)."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclasses.dataclass
class Report:
    """The measured episodes, in the order of their files.

    ``episodes`` are metrics.json's episode entries; ``runs[i]`` holds the ``topology``,
    ``team`` and ``scenario`` of episode i (what comparisons group by), ``aggregate`` the
    mean and interval of every metric, ``balance`` those of the workload balance metrics
    (over the episodes where they are defined), ``failures`` the files that are not valid
    traces.
    """

    episodes: List[dict]
    runs: List[dict]
    aggregate: Dict[str, Dict[str, float]]
    failures: List[TraceFailure]
    paths: List[Path]
    balance: Dict[str, Dict[str, float]] = dataclasses.field(default_factory=dict)

    @property
    def strata(self) -> List[str]:
        return [run["scenario"] for run in self.runs]

    def document(self) -> dict:
        """metrics.json's content."""
        return {"episodes": self.episodes, "aggregate": {**self.aggregate, **self.balance},
                "failure_attribution": attribution_summary(self.episodes)}

    def attribution_table(self) -> str:
        """Failed and replaced plans per violated constraint, as a Markdown table."""
        return attribution_table(attribution_summary(self.episodes))


def measure_trace(path: PathLike, validate: bool = False) -> dict:
    """``{"trace", "seed", <every metric>}`` and the run's fields (``"run"``) for one file.

    Raises :class:`~cube_jax.trace.TraceError` naming the line and key of the
    first problem of a file that is not a valid trace. ``validate`` checks every record
    against the full schema first (slower); without it, only what the metrics use is checked.
    """
    if validate:
        problem = validate_trace(path)
        if problem is not None:
            raise TraceError(str(path), problem)
    with collector_paused():
        records = load_metric_records(path)
        try:
            metrics = episode_metrics(records)
            balance = record_workload(records)
        except RecordError as err:
            raise problem_of(path) or TraceError(str(path), TraceProblem(err.line, err.key, str(err))) from None
    with open(path, encoding="utf-8") as f:
        failures = plan_failures(json.loads(line) for line in f if line.strip())
    return {"trace": str(path), "seed": records[0].seed, **metrics, **balance,
            "failures_by_constraint": attribution_counts(failures), "plan_failures": failures,
            "run": run_fields(header_fields(records[0]))}


def _measure_or_fail(item) -> tuple:
    path, validate = item
    try:
        return "ok", measure_trace(path, validate)
    except TraceError as err:
        return "bad", str(err.problem)


def measure_traces(paths: Sequence[PathLike], jobs: int = 1, validate: bool = False) -> tuple:
    """(measured episodes, failures) for ``paths``, in their order; ``jobs`` > 1 measures
    in that many processes (started from a fork server where the platform has one)."""
    items = [(Path(p), validate) for p in paths]
    jobs = max(1, min(jobs, len(items)))
    if jobs > 1 and len(items) >= _POOL_THRESHOLD:
        # Not "fork": this process has JAX (multithreaded) loaded, and a forked child can
        # deadlock on a lock one of its threads held. A fork server starts clean once.
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            outcomes = list(pool.map(_measure_or_fail, items, chunksize=max(1, len(items) // (8 * jobs))))
    else:
        outcomes = [_measure_or_fail(item) for item in items]
    measured, failures = [], []
    for (path, _), (status, value) in zip(items, outcomes):
        if status == "ok":
            measured.append(value)
        else:
            failures.append(TraceFailure(path, value))
            logger.info("left out %s: %s", path, value)
    return measured, failures


def build_report(sources: Iterable[PathLike], *, jobs: int = 1, validate: bool = False, confidence: float = CONFIDENCE,
                 seed: int = 0, resamples: int = RESAMPLES) -> Report:
    """The report of every trace under ``sources`` (files and folders).

    Raises :class:`FileNotFoundError` for a source that does not exist and
    :class:`ValueError` when no valid trace remains (the message lists the failures).
    """
    paths = trace_paths(sources)
    if not paths:
        raise ValueError(f"no trace files (*.jsonl) in {[str(s) for s in sources]}")
    measured, failures = measure_traces(paths, jobs=jobs, validate=validate)
    if not measured:
        listed = "; ".join(str(f) for f in failures[:5]) + (" ..." if len(failures) > 5 else "")
        raise ValueError(f"none of the {len(paths)} trace files is valid: {listed}")
    runs = [episode.pop("run") for episode in measured]
    strata = [run["scenario"] for run in runs]
    by_scenario = strata if len(set(strata)) > 1 else None
    aggregate = summarize(measured, REPORTED_METRICS, by_scenario, confidence, seed, resamples)
    balance = summarize_workload(measured, by_scenario, confidence, seed, resamples)
    return Report(episodes=measured, runs=runs, aggregate=aggregate, failures=failures, paths=paths, balance=balance)


def write_metrics_json(sources: Union[PathLike, Iterable[PathLike]], out: PathLike, **options) -> Report:
    """Builds the report of ``sources`` (see :func:`build_report`, whose options it takes)
    and writes metrics.json to ``out`` (its folder is created)."""
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    report = build_report(list(sources), **options)
    write_document(report, out)
    return report


def write_document(report: Report, out: PathLike) -> Path:
    """Writes ``report``'s metrics.json to ``out`` atomically, so that a reader never sees
    half a file (its folder is created); returns the path."""
    return write_atomic(out, json.dumps(report.document(), indent=1) + "\n")


def validate_traces(sources: Iterable[PathLike]) -> List[TraceFailure]:
    """The files under ``sources`` (files and folders) that break the trace schema (full
    check of every record), each with the line and key of its first problem."""
    failures = []
    for path in trace_paths(sources):
        problem = validate_trace(path)
        if problem is not None:
            failures.append(TraceFailure(path, str(problem)))
    return failures


def default_jobs() -> int:
    """The processes a report uses by default: the CPUs this process may run on."""
    return usable_cpus()
