"""Batched evaluation of the heuristic baseline on the n-curriculum: success and speed.

    python benchmarks/heuristic_eval.py           # n = 1..3 with 64 episodes, n = 4 with 256
    python benchmarks/heuristic_eval.py --doc     # and rewrite docs/symbolic_eval.md's tables

Each row is what ``cube-jax eval --policy heuristic --n N --episodes E --seed 0`` plays: one
``jax.vmap`` batch of the JAX heuristic (:class:`cube_jax.agents.HeuristicPolicy`), episode i
from ``PRNGKey(i)``. Writes ``benchmarks/results/heuristic_eval.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import cube_jax  # noqa: E402
from cube_jax.agents import HeuristicPolicy  # noqa: E402
from cube_jax.analytics.intervals import summarize  # noqa: E402
from cube_jax.evaluation import evaluate  # noqa: E402

from bench_common import write_generated  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "heuristic_eval.json"
ROWS = ((1, 64), (2, 64), (3, 64), (4, 256))


def measure(n: int, episodes: int) -> dict:
    env = cube_jax.make(n=n)
    out = evaluate(env, HeuristicPolicy(env), episodes=episodes, seed=0, progress=False)
    steps = summarize([{"steps": float(e["steps"])} for e in out["episodes"]], ["steps"])["steps"]
    return {
        "n": n, "grid": env.grid_size, "agents": env.num_agents, "blocks": env.num_blocks, "episodes": episodes,
        "max_steps": env.max_steps, "success_rate": out["success_rate"],
        "blocks_delivered": sum(e["blocks_delivered"] for e in out["episodes"]),
        "blocks_total": sum(e["blocks_total"] for e in out["episodes"]),
        "mean_steps": steps["mean"], "steps_ci": [steps["ci_low"], steps["ci_high"]],
        "compile_seconds": out["compile_seconds"], "run_seconds": out["run_seconds"],
    }


def render(data: dict) -> str:
    """docs/symbolic_eval.md's two tables (success, then speed) from a run's JSON."""
    success = ["| n | grid | agents | blocks | episodes (seeds) | success rate | blocks delivered | mean steps [95% CI] "
               "(max_steps) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    speed = ["| n | episodes | compile (once per world shape) | run | episodes/s (run time only) |",
             "| --- | --- | --- | --- | --- |"]
    for r in data["rows"]:
        low, high = r["steps_ci"]
        success.append(f"| {r['n']} | {r['grid']}x{r['grid']} | {r['agents']} | {r['blocks']} | {r['episodes']} "
                       f"(0..{r['episodes'] - 1}) | {r['success_rate']:.3f} | {r['blocks_delivered']}/"
                       f"{r['blocks_total']} | {r['mean_steps']:.1f} [{low:.1f}, {high:.1f}] ({r['max_steps']}) |")
        speed.append(f"| {r['n']} | {r['episodes']} | {r['compile_seconds']:.1f} s | {r['run_seconds']:.2f} s | "
                     f"{r['episodes'] / r['run_seconds']:.0f} |")
    load = ", ".join(f"{x:.1f}" for x in data["load_average"])
    return "\n".join(["#### Success (default `max_steps` = 4 k per block)", "", *success, "",
                      f"#### Speed (CPU, {data['cpus']} cores; load average {load} at the start)", "", *speed])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--doc", action="store_true", help="also rewrite the tables of docs/symbolic_eval.md")
    args = parser.parse_args(argv)
    data = {"cpus": os.cpu_count(), "load_average": list(os.getloadavg()), "rows": []}
    for n, episodes in ROWS:
        data["rows"].append(measure(n, episodes))
        print(f"  n={n}: success {data['rows'][-1]['success_rate']:.3f}", flush=True)
    print(render(data))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    if args.doc:
        write_generated(ROOT / "docs" / "symbolic_eval.md", "benchmarks/heuristic_eval.py",
                        str(args.out.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
