"""How long `cube-jax report` takes: metrics and intervals of many long traces.

    python benchmarks/analytics_speed.py                      # 1,000 traces of 500 steps, n = 4
    python benchmarks/analytics_speed.py --traces 100 --repeats 1
    python benchmarks/analytics_speed.py --doc                # and rewrite docs/analytics.md's Speed block

Writes random valid traces (:func:`cube_jax.analytics.synthetic.random_trace`, four
agents in a decentralized team, six blocks) into ``--folder`` (reused when it already holds
them), then times, ``--repeats`` times each:

- ``metrics``: reading every trace and computing its metrics (:func:`measure_traces`), with
  one process and with ``--jobs`` processes;
- ``report``: the same plus the bootstrap intervals of every metric (:func:`build_report`);
- ``cli``: ``python -m cube_jax.cli report FOLDER --json ...`` as a user runs it, start-up included.

Prints a table (best and median wall seconds, and CPU seconds, which other jobs on a
shared machine disturb less) and writes ``benchmarks/results/analytics_speed.json``; with
``--doc``, rewrites the generated block of the *Speed* section of ``docs/analytics.md`` from
the JSON (:func:`render`).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cube_jax.analytics.report import build_report, default_jobs, measure_traces
from cube_jax.analytics.synthetic import random_trace
from cube_jax.trace import dumps

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 10.0  # what the report of 1,000 traces of 500 steps must stay under
LABELS = {("metrics", False): "read the traces and compute every metric and the workload balance",
          ("report", False): "the same and the intervals of every metric and the balance (the report)",
          ("metrics", True): "read and compute",
          ("report", True): "the report",
          ("cli", True): "`cube-jax report DIR --json ...`, start-up included"}
LABELS[("cli", False)] = LABELS[("cli", True)]
WEIGHTS = [3, 2, 2, 1, 1, 1]  # the blocks of make(n=4)


def write_traces(folder: Path, traces: int, steps: int, n: int) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"episode_{seed:05d}.jsonl" for seed in range(traces)]
    for seed, path in enumerate(paths):
        if not path.exists():
            records = random_trace(seed, n=n, steps=steps, weights=WEIGHTS, deliver_fraction=0.5, env={"n": n})
            path.write_text(dumps(records), encoding="utf-8")
    return paths


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (pool workers, subprocesses)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(function, repeats: int) -> tuple:
    """(wall seconds, CPU seconds) of each of ``repeats`` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), cpu_seconds()
        function()
        wall.append(time.perf_counter() - start)
        cpu.append(cpu_seconds() - start_cpu)
    return wall, cpu


def render(data: dict) -> str:
    """The *Speed* block of docs/analytics.md: the machine and its load, the table, what it shows."""
    load, results = data["load_average"], data["results"]
    single = min(row["jobs"] for row in results)
    machine = f"{data['cpus']} CPUs" + (f", {data['platform']}" if data.get("platform") else "")
    lines = [f"{data['traces']:,} traces of {data['steps']} steps, n = {data['n']} "
             f"({data['megabytes']:,.0f} MB in all); measured on {machine}, Python {data['python']}; load average "
             f"{load[0]:.1f} before timing and {load[1]:.1f} after. {len(results[0]['seconds'])} repeats, wall "
             "seconds best (median); CPU seconds of the measuring process with one process (with several, the "
             "work is in the workers).",
             "", "| what | processes | wall s | CPU s |", "| --- | --- | --- | --- |"]
    for row in results:
        parallel = row["jobs"] > single
        cpu = "" if parallel else f"{min(row['cpu_seconds']):.2f}"
        best = f"{row['best_s']:.2f}"
        if row["what"] == "cli" or (parallel and row["what"] == "report"):
            best = f"**{best}**"
        lines.append(f"| {LABELS[row['what'], parallel]} | {row['jobs']} | {best} ({row['median_s']:.2f}) | {cpu} |")
    cli = next(row for row in results if row["what"] == "cli")
    report = max((row for row in results if row["what"] == "report"), key=lambda row: row["jobs"])
    verdict = "under" if cli["best_s"] < GOAL_S else "over"
    processes = "process" if cli["jobs"] == 1 else "processes"
    lines += ["", f"With the {cli['jobs']} {processes} the command uses by default here, the report takes "
              f"{report['best_s']:.1f} s of wall time and the command as a user runs it {cli['best_s']:.1f} s, "
              f"{verdict} the {GOAL_S:.0f} s goal; the difference, {cli['best_s'] - report['best_s']:.1f} s, is "
              "what the command adds to the report: the interpreter's start-up (importing JAX, which the package "
              "loads, and SciPy) and writing the JSON."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="processes for the parallel runs")
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "cube_jax_analytics_bench")
    parser.add_argument("--doc", action="store_true", help="rewrite the generated block of docs/analytics.md")
    args = parser.parse_args()

    start = time.perf_counter()
    paths = write_traces(args.folder / f"{args.traces}x{args.steps}_n{args.n}", args.traces, args.steps, args.n)
    folder = paths[0].parent
    print(f"{len(paths)} traces in {folder} ({sum(p.stat().st_size for p in paths) / 1e6:.0f} MB), "
          f"ready in {time.perf_counter() - start:.1f} s", flush=True)

    load_before = os.getloadavg()[0]
    rows = []
    for jobs in sorted({1, args.jobs}):
        rows.append(("metrics", jobs, timed(lambda: measure_traces(paths, jobs=jobs), args.repeats)))
        rows.append(("report", jobs, timed(lambda: build_report([folder], jobs=jobs), args.repeats)))
    out = Path(tempfile.mkdtemp()) / "metrics.json"
    command = [sys.executable, "-m", "cube_jax.cli", "report", str(folder), "--json", str(out), "--quiet"]
    rows.append(("cli", args.jobs, timed(lambda: subprocess.run(command, check=True), args.repeats)))

    load = os.getloadavg()[0]
    print(f"\nload average while timing: {load_before:.1f} before, {load:.1f} after ({os.cpu_count()} CPUs)")
    print(f"{'what':<8} {'jobs':>4} {'best s':>8} {'median s':>9} {'traces/s':>9} {'CPU s':>7}")
    results = []
    for what, jobs, (seconds, cpu) in rows:
        best, median = min(seconds), sorted(seconds)[len(seconds) // 2]
        print(f"{what:<8} {jobs:>4} {best:>8.2f} {median:>9.2f} {len(paths) / best:>9.0f} {min(cpu):>7.2f}")
        results.append({"what": what, "jobs": jobs, "seconds": seconds, "best_s": best, "median_s": median,
                        "cpu_seconds": cpu})
    RESULTS.mkdir(exist_ok=True)
    summary = {"traces": len(paths), "steps": args.steps, "n": args.n,
               "megabytes": sum(p.stat().st_size for p in paths) / 1e6, "cpus": os.cpu_count(),
               "platform": platform.platform(),
               "python": platform.python_version(), "load_average": [load_before, load], "results": results}
    (RESULTS / "analytics_speed.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nwrote {RESULTS / 'analytics_speed.json'}")
    if args.doc:
        from bench_common import write_generated

        write_generated(ROOT / "docs" / "analytics.md", "benchmarks/analytics_speed.py",
                        "benchmarks/results/analytics_speed.json")


if __name__ == "__main__":
    main()
