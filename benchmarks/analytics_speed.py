"""How long `cube-jax report` takes: metrics and intervals of many long traces.

    python benchmarks/analytics_speed.py                      # 1,000 traces of 500 steps, n = 4
    python benchmarks/analytics_speed.py --traces 100 --repeats 1

Writes random valid traces (:func:`cube_jax.analytics.synthetic.random_trace`, four
agents in a decentralized team, six blocks) into ``--folder`` (reused when it already holds
them), then times, ``--repeats`` times each:

- ``metrics``: reading every trace and computing its metrics (:func:`measure_traces`), with
  one process and with ``--jobs`` processes;
- ``report``: the same plus the bootstrap intervals of every metric (:func:`build_report`);
- ``cli``: ``python -m cube_jax.cli report FOLDER --json ...`` as a user runs it, start-up included.

Prints a table (best and median wall seconds, and CPU seconds, which other jobs on a
shared machine disturb less) and writes ``benchmarks/results/analytics_speed.json``.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="processes for the parallel runs")
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "cube_jax_analytics_bench")
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
               "python": platform.python_version(), "load_average": [load_before, load], "results": results}
    (RESULTS / "analytics_speed.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nwrote {RESULTS / 'analytics_speed.json'}")


if __name__ == "__main__":
    main()
