"""Heuristic vs team planner on the n-curriculum: success rate and mean steps per n.

    python benchmarks/planners.py                       # n = 1..16, 32 seeds each
    python benchmarks/planners.py --n 1 2 3 4 --episodes 8

Every episode uses the default curriculum and ``default_max_steps(n)``; seed s resets the
environment with ``jax.random.PRNGKey(s)``. Episodes run on the CPU episode loop
(:func:`cube_jax.runtime.run_episode`), with ``--traces DIR`` writing one trace per
episode (``DIR/<planner>-n<n>/episode-<seed>.jsonl``) for ``cube-jax report``. Prints a table,
writes ``benchmarks/results/planners.json`` and ``benchmarks/results/planners.png``, and
rewrites the table of ``docs/symbolic.md`` from that JSON (:func:`render`).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import time
from pathlib import Path

import numpy as np

import cube_jax
from cube_jax.agents.planners import PLANNER_TEAMS
from cube_jax.core import generator
from cube_jax.runtime import run_episode

PLANNERS = PLANNER_TEAMS
RESULTS = Path(__file__).parent / "results"
DOC = Path(__file__).resolve().parents[1] / "docs" / "symbolic.md"
SCRIPT, JSON_PATH = "benchmarks/planners.py", "benchmarks/results/planners.json"


def render(data: dict) -> str:
    """docs/symbolic.md's table: success rate and mean steps per n of each planner."""
    rows = data["results"]
    lines = ["| n | blocks | max_steps | heuristic success | heuristic mean steps | team success | team mean steps |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for n in sorted({r["n"] for r in rows}):
        h, t = (next(r for r in rows if r["n"] == n and r["planner"] == name) for name in ("heuristic", "team"))
        lines.append(f"| {n} | {h['blocks']} | {h['max_steps']} | {h['success_rate']:.3f} | {h['mean_steps']:.1f} | "
                     f"{t['success_rate']:.3f} | {t['mean_steps']:.1f} |")
    return "\n".join(lines) + "\n"


def evaluate(n: int, planner_name: str, episodes: int, traces: Path = None) -> dict:
    env = cube_jax.make(n=n)
    team = PLANNERS[planner_name](env)
    start = time.perf_counter()
    runs = []
    for seed in range(episodes):
        trace = None if traces is None else traces / f"{planner_name}-n{n}" / f"episode-{seed:06d}.jsonl"
        result = run_episode(env, team, seed=seed, trace=trace, env_kwargs={"n": n})
        runs.append({"seed": seed, "steps": result.steps, "blocks_total": result.blocks_total,
                     "blocks_delivered": result.blocks_delivered, "success": result.success})
    return {
        "n": n,
        "planner": planner_name,
        "max_steps": generator.default_max_steps(n),
        "blocks": len(generator.block_weights(n)),
        "success_rate": float(np.mean([r["success"] for r in runs])),
        "mean_steps": float(np.mean([r["steps"] for r in runs])),
        "mean_steps_successful": float(np.mean([r["steps"] for r in runs if r["success"]] or [np.nan])),
        "blocks_delivered_frac": float(np.mean([r["blocks_delivered"] / r["blocks_total"] for r in runs])),
        "failed_seeds": [r["seed"] for r in runs if not r["success"]],
        "wall_seconds": time.perf_counter() - start,
        "episodes": runs,
    }


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_steps, ax_success) = plt.subplots(1, 2, figsize=(10, 4))
    for name in PLANNERS:
        mine = [r for r in rows if r["planner"] == name]
        ns = [r["n"] for r in mine]
        ax_steps.plot(ns, [r["mean_steps"] for r in mine], marker="o", label=name)
        ax_success.plot(ns, [r["success_rate"] for r in mine], marker="o", label=name)
    limits = sorted({(r["n"], r["max_steps"]) for r in rows})
    ax_steps.plot([n for n, _ in limits], [m for _, m in limits], "k--", label="max_steps")
    ax_steps.set(xlabel="n (agents)", ylabel="mean steps per episode", title="Steps to finish (or the limit)")
    ax_success.set(xlabel="n (agents)", ylabel="success rate", ylim=(-0.05, 1.05), title="Every block delivered")
    for ax in (ax_steps, ax_success):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=list(range(1, 17)))
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--workers", type=int, default=2, help="processes evaluating (n, planner) pairs in parallel")
    parser.add_argument("--traces", type=Path, default=None, help="write every episode's trace under this folder")
    args = parser.parse_args()
    if args.episodes < 1 or any(n < 1 for n in args.n):
        parser.error("--episodes and every --n must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(n, name) for n in args.n for name in PLANNERS]
    done = {}
    partial = args.out / "planners.partial.json"
    with concurrent.futures.ProcessPoolExecutor(
        args.workers, mp_context=multiprocessing.get_context("spawn")  # jax does not survive fork
    ) as pool:
        futures = {pool.submit(evaluate, n, name, args.episodes, args.traces): (n, name) for n, name in jobs}
        for future in concurrent.futures.as_completed(futures):
            row = future.result()
            done[futures[future]] = row
            print(f"  done n={row['n']} {row['planner']}: success {row['success_rate']:.3f}, "
                  f"mean steps {row['mean_steps']:.1f} ({row['wall_seconds']:.0f} s)", flush=True)
            partial.write_text(json.dumps(sorted(done.values(), key=lambda r: (r["n"], r["planner"])), indent=1))
    rows = []
    print(f"{'n':>3} {'blocks':>6} {'max':>5} | {'heuristic':>18} | {'team':>18} | failed seeds")
    print(f"{'':>3} {'':>6} {'':>5} | {'success':>8} {'steps':>9} | {'success':>8} {'steps':>9} |")
    for n in args.n:
        pair = [done[(n, name)] for name in PLANNERS]
        rows.extend(pair)
        h, t = pair
        failed = f"h={h['failed_seeds']} t={t['failed_seeds']}" if h["failed_seeds"] or t["failed_seeds"] else ""
        print(
            f"{n:>3} {h['blocks']:>6} {h['max_steps']:>5} | {h['success_rate']:>8.3f} {h['mean_steps']:>9.1f} | "
            f"{t['success_rate']:>8.3f} {t['mean_steps']:>9.1f} | {failed}",
            flush=True,
        )
    (args.out / "planners.json").write_text(json.dumps({"episodes_per_n": args.episodes, "results": rows}, indent=1))
    plot(rows, args.out / "planners.png")
    partial.unlink(missing_ok=True)
    if args.out.resolve() == RESULTS.resolve():
        from bench_common import write_generated

        write_generated(DOC, SCRIPT, JSON_PATH)
        print(f"rewrote the table of {DOC}")
    print(f"wrote {args.out / 'planners.json'} and {args.out / 'planners.png'}")


if __name__ == "__main__":
    main()
