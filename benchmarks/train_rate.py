"""IPPO training throughput as a user gets it: ``python baselines/ippo.py`` run end to end,
optionally alternating with an earlier checkout, its env-steps/s read from the runs' own files.

    python benchmarks/train_rate.py --pairs 3 --before-root ../before --doc

runs ``baselines/ippo.py env.scenario=null env.n=4 num_seeds=1 train.total_timesteps=4000000
train.target_success=null`` (no GIF, plot or checkpoint; ``--set`` adds overrides) ``--pairs``
times from this checkout and, with ``--before-root``, as often from that checkout (a ``git
worktree`` of an earlier commit), before and after alternately, since the shared machine's
speed drifts from one minute to the next. Each run's throughput comes from its
``metrics.jsonl``: the env steps of every jitted chunk of updates over the wall time between
the ends of two chunks (the host's work between chunks included), the first chunk left out as
it compiles; reported as the median over the chunks and the spread between their 10th and
90th percentiles, next to the whole run's rate from ``summary.json`` (compile included).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_common import host_info, save_results

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/train_rate.py"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "train_rate.json"
DOC = ROOT / "docs" / "performance.md"
BASE = ("env.scenario=null", "env.n=4", "num_seeds=1", "train.target_success=null",
        "output.gif=false", "output.plot=false", "output.checkpoint=false")


def chunk_rates(rows: list) -> list:
    """env-steps/s of every chunk but the first, from a run's metrics rows: a chunk is the
    updates that share one ``wall_seconds`` (the driver stamps each chunk's rows with the
    time at its end)."""
    ends = {}
    for row in rows:
        ends[row["wall_seconds"]] = row["env_steps"]  # the last update of each chunk
    stamps = sorted(ends)
    return [(ends[b] - ends[a]) / (b - a) for a, b in zip(stamps, stamps[1:]) if b > a]


def run_once(root: Path, label: str, steps: int, overrides: list, folder: Path) -> dict:
    """One training run from checkout ``root``; its rates from the files it wrote."""
    name = f"{label}-{len(list(folder.iterdir()))}"
    cmd = [sys.executable, "baselines/ippo.py", *BASE, f"train.total_timesteps={steps}", *overrides,
           f"output.root={folder}", f"output.name={name}"]
    env = dict(os.environ, PYTHONPATH=str(root))
    started = time.time()
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"train_rate: the {label} run failed ({root}):\n{done.stderr[-2000:]}")
    run_dir = folder / name
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    rates = chunk_rates(rows)
    if not rates:
        raise SystemExit(f"train_rate: the {label} run had fewer than two chunks; raise --steps")
    return {
        "label": label, "root": str(root), "started": time.strftime("%H:%M:%S", time.localtime(started)),
        "chunk_rates": [round(r, 1) for r in rates],
        "median": float(np.median(rates)), "p10": float(np.percentile(rates, 10)),
        "p90": float(np.percentile(rates, 90)),
        "whole_run": summary.get("steps_per_second"), "env_steps": rows[-1]["env_steps"],
    }


def render(data: dict) -> str:
    m = data["machine"]
    lines = [
        f"Run of {m['date']}: {m['cpus_usable']} usable core(s) (CPU: {m['cpu_model']}), "
        f"XLA_FLAGS `{m['xla_flags'] or '(none)'}`, load average {m['load_average']:.1f} at the start; "
        f"`baselines/ippo.py {' '.join(data['overrides'])}`, {data['steps']:.0e} env steps per run, "
        f"runs alternately{' with ' + data['before_commit'] if data.get('before_commit') else ''}.",
        "",
        "| run | started | env-steps/s, median over chunks | 10th-90th percentile of chunks | whole run (compile included) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in data["runs"]:
        whole = f"{r['whole_run']:,.0f}" if r["whole_run"] else ""
        lines.append(f"| {r['label']} | {r['started']} | {r['median']:,.0f} | {r['p10']:,.0f} - {r['p90']:,.0f} | {whole} |")
    lines.append("")
    for label in dict.fromkeys(r["label"] for r in data["runs"]):
        medians = [r["median"] for r in data["runs"] if r["label"] == label]
        lines.append(f"{label}: median of the runs' medians {np.median(medians):,.0f} env-steps/s "
                     f"(runs {', '.join(f'{v:,.0f}' for v in medians)}).")
    before = [r["median"] for r in data["runs"] if r["label"] == "before"]
    after = [r["median"] for r in data["runs"] if r["label"] == "after"]
    if before and after:
        ratios = [a / b for a, b in zip(after, before)]
        lines.append(f"After / before, pair by pair: {', '.join(f'{x:.2f}' for x in ratios)} "
                     f"(median {np.median(ratios):.2f}).")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3, help="runs per checkout (default 3)")
    parser.add_argument("--steps", type=int, default=4_000_000, help="env steps per run (default 4e6)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override of every run (repeatable)")
    parser.add_argument("--before-root", type=Path, help="an earlier checkout, run alternately with this one")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--doc", action="store_true", help="rewrite the generated block of docs/performance.md "
                        "(if it shows one of --out)")
    args = parser.parse_args(argv)
    if args.pairs < 1 or args.steps < 1:
        parser.error("--pairs and --steps must be at least 1")
    if args.before_root is not None and not (args.before_root / "baselines" / "ippo.py").is_file():
        parser.error(f"--before-root {args.before_root}: no baselines/ippo.py there (a checkout of this project?)")
    for item in args.overrides:
        if "=" not in item:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
    before_commit = None
    if args.before_root is not None:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.before_root,
                              capture_output=True, text=True)
        before_commit = f"commit {head.stdout.strip()}" if head.returncode == 0 else str(args.before_root)
    checkouts = ([("before", args.before_root.resolve())] if args.before_root else []) + [("after" if args.before_root else "this checkout", ROOT)]
    data = {"machine": host_info(), "steps": args.steps, "overrides": [*BASE, *args.overrides],
            "before_commit": before_commit, "runs": []}
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.pairs):
            for label, root in checkouts:
                run = run_once(root, label, args.steps, args.overrides, Path(folder))
                data["runs"].append(run)
                print(f"  pair {i + 1}/{args.pairs}, {label}: median {run['median']:,.0f} env-steps/s over "
                      f"{len(run['chunk_rates'])} chunks, whole run {run['whole_run']:,.0f}", flush=True)
    save_results(data, args.out, render, DOC if args.doc else None, SCRIPT, missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
