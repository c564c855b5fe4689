"""``cube-jax report``: metrics of episodes from their traces alone (LLM.md section 6).

    cube-jax report runs/hard-centralized --json metrics.json
    cube-jax report runs/ --table runs.md --csv runs.csv --plots figures/
    cube-jax report runs/ --by topology,scenario --table by_topology.md
    cube-jax report runs/a.jsonl runs/b.jsonl --timelines figures/timelines
    cube-jax report runs/ --validate

Arguments are trace files and folders (a folder gives its ``*.jsonl`` files, recursively).
The command prints every metric's mean and 95% bootstrap interval across the episodes
(stratified by scenario when several are mixed) and writes, on request:

- ``--json``: metrics.json (API.md): per episode ``trace``, ``seed`` and every metric, and
  the ``aggregate`` of each metric; the workload balance (COBLOCK's gamma and its
  generalisation, :mod:`cube_jax.analytics.balance`) per episode and in the aggregate;
- ``--table`` / ``--csv``: every metric with its interval for each run, a run being the
  episodes that share the fields of ``--by`` (default topology, team and scenario);
- ``--plots DIR``: ``bars.png`` (outcomes and communication, with intervals) and
  ``radar.png`` (normalised process metrics per topology);
- ``--timelines DIR``: one timeline picture per trace, ``DIR/<trace name>.png``.

A file that is not a valid trace is reported on stderr (``file: line N, key K: message``)
and left out; the report goes on with the rest. The exit status is 0 when at least one
valid trace remains and 1 when none does. ``--validate`` only checks every file against the
full trace schema, reports each bad one the same way, and exits 1 when any is bad.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cube_jax.analytics.compare import RUN_FIELDS
from cube_jax.analytics.intervals import CONFIDENCE, RESAMPLES, interval_text



def _by(text: str) -> tuple:
    fields = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in fields if f not in RUN_FIELDS]
    if bad or not fields:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(RUN_FIELDS)}, got {text!r}")
    return fields


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _step_range(text: str) -> tuple:
    start, sep, stop = text.partition(":")
    try:
        window = (int(start), int(stop))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:STOP (environment steps), got {text!r}") from None
    if not sep or window[0] < 0 or window[1] <= window[0]:
        raise argparse.ArgumentTypeError(f"expected START:STOP with 0 <= START < STOP, got {text!r}")
    return window


def add_parser(commands) -> argparse.ArgumentParser:
    rp = commands.add_parser(
        "report",
        help="metrics of episodes from their traces, with intervals, tables, plots and timelines",
        description="Compute every metric of LLM.md section 6 from episode traces, with 95%% bootstrap intervals.",
    )
    rp.add_argument("paths", nargs="+", type=Path, help="trace files (*.jsonl) and folders of them")
    rp.add_argument("--json", type=Path, default=None, help="write metrics.json here")
    rp.add_argument("--validate", action="store_true",
                    help="only check every trace against the full schema; exit 1 if any is bad")
    rp.add_argument("--table", type=Path, default=None, help="write the per-run Markdown table here")
    rp.add_argument("--csv", type=Path, default=None, help="write the per-run CSV table here")
    rp.add_argument("--plots", type=Path, default=None, help="write bars.png and radar.png into this folder")
    rp.add_argument("--by", type=_by, default=RUN_FIELDS,
                    help="what makes a run for tables and plots: some of topology,team,scenario (default all three)")
    rp.add_argument("--timelines", type=Path, default=None, help="write one timeline PNG per trace into this folder")
    rp.add_argument("--steps", type=_step_range, default=None, help="timelines show only environment steps START:STOP")
    rp.add_argument("--strict", action="store_true",
                    help="check every record against the full schema before measuring it (slower)")
    rp.add_argument("--jobs", type=_positive_int, default=None,
                    help="processes that read traces (default: the CPUs available)")
    rp.add_argument("--confidence", type=_confidence, default=CONFIDENCE, help="interval level (default 0.95)")
    rp.add_argument("--resamples", type=_positive_int, default=RESAMPLES, help=f"bootstrap resamples (default {RESAMPLES})")
    rp.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    rp.add_argument("--quiet", action="store_true", help="print no summary table")
    rp.set_defaults(run=run)
    return rp


def run(parser: argparse.ArgumentParser, args) -> int:
    from cube_jax.analytics import report as reporting

    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        parser.error(f"argument paths: no such trace file or folder: {missing[0]!r}")
    if args.validate:
        return _validate(args)
    jobs = args.jobs or reporting.default_jobs()
    try:
        report = reporting.build_report(args.paths, jobs=jobs, validate=args.strict, confidence=args.confidence,
                                        seed=args.seed, resamples=args.resamples)
    except ValueError as err:
        print(f"cube-jax report: {err}", file=sys.stderr)
        return 1
    for failure in report.failures:
        print(f"left out {failure}", file=sys.stderr)
    if report.failures:
        print(f"cube-jax report: {len(report.failures)} of {len(report.paths)} trace files are not valid traces "
              "and were left out", file=sys.stderr)
    if not args.quiet:
        print(summary_table(report, args.confidence))
    written = []
    if args.json is not None:
        written.append(reporting.write_document(report, args.json))
    if args.table or args.csv or args.plots:
        written += _comparisons(report, args)
    if args.timelines is not None:
        written += _timelines(report, args)
    for path in written:
        print(f"wrote {path}")
    return 0


def summary_table(report, confidence: float) -> str:
    from cube_jax.analytics.balance import BALANCE_METRICS
    from cube_jax.analytics.metrics import REPORTED_METRICS

    strata = sorted(set(report.strata))
    lines = [f"{len(report.episodes)} episodes from {len(report.paths)} trace files; scenarios: {', '.join(strata)}"
             + (" (intervals stratified by scenario)" if len(strata) > 1 else ""),
             f"{'metric':<24} mean [{confidence:.0%} interval]"]
    lines += [f"{metric:<24} {interval_text(report.aggregate[metric])}" for metric in REPORTED_METRICS]
    for metric in BALANCE_METRICS:
        summary = report.balance.get(metric)
        shown = (f"{interval_text(summary)} ({summary['episodes']} of {len(report.episodes)} episodes)"
                 if summary else f"undefined in all {len(report.episodes)} episodes")
        lines.append(f"{metric:<24} {shown}")
    return "\n".join(lines)


def _comparisons(report, args) -> list:
    from cube_jax.analytics import compare

    runs = compare.compare_runs(report, by=args.by, confidence=args.confidence, seed=args.seed,
                                resamples=args.resamples)
    written = []
    compare.write_tables(runs, markdown=args.table, csv_path=args.csv)
    written += [p for p in (args.table, args.csv) if p is not None]
    if args.plots is not None:
        written.append(compare.plot_bars(runs, args.plots / "bars.png"))
        written.append(compare.plot_radar(runs, args.plots / "radar.png"))
    return written


def _timelines(report, args) -> list:
    from cube_jax.analytics.timeline import render_timeline
    from cube_jax.analytics.traces import load_trace

    written = []
    for episode in report.episodes:
        source = Path(episode["trace"])
        written.append(render_timeline(load_trace(source), args.timelines / f"{source.stem}.png", steps=args.steps))
    return written


def _validate(args) -> int:
    from cube_jax.analytics.report import validate_traces
    from cube_jax.analytics.traces import trace_paths

    paths = trace_paths(args.paths)
    failures = validate_traces(paths)
    for failure in failures:
        print(str(failure), file=sys.stderr)
    print(f"{len(paths) - len(failures)} of {len(paths)} trace files are valid")
    return 1 if failures or not paths else 0
