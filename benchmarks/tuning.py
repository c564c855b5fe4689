"""The baselines' shared tuning grid: one learning-rate grid, every learner, on n1's training layouts.

    python benchmarks/tuning.py                      # every learner of the registry
    python benchmarks/tuning.py --algos ippo,mappo   # some of them
    python benchmarks/tuning.py --doc                # and rewrite docs/baselines.md's table

For each learner it runs

    cube-jax sweep ALGO --task n1 --grid LR_KEY=5e-4,1e-3,2e-3 --seeds 3 --env-steps 2000000 \\
        --out benchmarks/results/sweeps/ALGO-n1

(``LR_KEY`` is ``train.lr`` for the PPO learners, ``pqn.lr`` for PQN-VDN; the grid holds every
learner's default), which trains on the task's training layouts and evaluates on its training
distribution, never on a test layout. A sweep already finished in its folder is read back, not
trained again (``cube-jax sweep`` keeps each finished group). Then it writes
``benchmarks/results/tuning.json``: per learner, the grid, every point's greedy and sampled
success and training-curve mean over the seeds, the point the sweep chose (highest greedy
success, then sampled success, blocks delivered, and the training-curve mean: the point that
learned sooner), the learner's default, and the commit and command behind each group.

Why n1: at tier S no learner finishes a drawn n2 layout with its default, so a short grid on n2
could not tell points apart; on n1 every learner learns, and the grid tells how soon.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_common import save_results  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "tuning.json"
SWEEPS = ROOT / "benchmarks" / "results" / "sweeps"
DOC = ROOT / "docs" / "baselines.md"
TASK = "n1"
LEARNING_RATES = (5e-4, 1e-3, 2e-3)
SEEDS = 3
ENV_STEPS = 2_000_000


def lr_key(algo: str) -> str:
    """The config key of the learner's learning rate."""
    return "pqn.lr" if algo == "pqn_vdn" else "train.lr"


def command(algo: str) -> list:
    """The ``cube-jax sweep`` arguments of one learner's grid."""
    out = (SWEEPS / f"{algo}-{TASK}").relative_to(ROOT)
    return ["sweep", algo, "--task", TASK, "--grid", f"{lr_key(algo)}=" + ",".join(f"{v:g}" for v in LEARNING_RATES),
            "--seeds", str(SEEDS), "--env-steps", str(ENV_STEPS), "--out", str(out)]


def default_lr(algo: str) -> float:
    """The learning rate the learner trains with when nothing is set (its presets applied)."""
    from cube_jax.rl import algorithms
    from cube_jax.rl.config import build

    learner = algorithms.get(algo)
    config = build(learner.config_algo, preset=list(learner.presets))
    section, name = lr_key(algo).split(".")
    return float(getattr(getattr(config, section), name))


def summarize(algo: str, sweep: dict) -> dict:
    """One learner's row of tuning.json from its sweep.json."""
    key = lr_key(algo)
    points = [{"lr": row["values"][key],
               "greedy_success": row["greedy_success_rate"]["mean"],
               "greedy_success_ci": [row["greedy_success_rate"]["low"], row["greedy_success_rate"]["high"]],
               "sampled_success": row["sampled_success_rate"]["mean"],
               "greedy_blocks": row["greedy_blocks_delivered_frac"]["mean"],
               "train_success_mean": row["train_success_mean"]} for row in sweep["rows"]]
    runs = [{"commit": g["provenance"]["git_commit"], "dirty": g["provenance"]["git_dirty"],
             "device": g["provenance"]["device"], "cpu_model": g["provenance"]["cpu_model"],
             "command": g["provenance"]["command"], "wall_seconds": g["wall_seconds"]} for g in sweep["groups"]]
    return {"algo": algo, "key": key, "task": sweep["task"], "seeds": sweep["groups"][0]["num_seeds"],
            "env_steps": sweep["rows"][0]["env_steps"], "points": points,
            "chosen": sweep["best"]["values"][key], "default": default_lr(algo), "runs": runs,
            "folder": str((SWEEPS / f"{algo}-{TASK}").relative_to(ROOT))}


def render(data: dict) -> str:
    """docs/baselines.md's tuning table from tuning.json."""
    rates = [f"{v:g}" for v in data["learning_rates"]]
    head = ["learner", "key", *(f"lr {r}: greedy / sampled / curve" for r in rates), "chosen", "default", "commit"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in data["rows"]:
        cells = {f"{p['lr']:g}": f"{p['greedy_success']:.2f} / {p['sampled_success']:.2f} / "
                                 f"{p['train_success_mean']:.2f}" for p in row["points"]}
        commits = sorted({r["commit"][:7] for r in row["runs"]})
        lines.append("| " + " | ".join([f"[{row['algo']}]({Path('..', row['folder'], 'sweep.md').as_posix()})",
                                         f"`{row['key']}`", *(cells.get(r, "-") for r in rates),
                                         f"**{row['chosen']:g}**", f"{row['default']:g}", ", ".join(commits)]) + " |")
    return "\n".join([f"Grid: learning rate {{{', '.join(rates)}}}, {data['seeds']} seeds per point, "
                      f"{data['env_steps']:,} env steps per seed, on `{data['task']}`'s training layouts; each "
                      "cell is greedy success / sampled success / mean of the training-success curve, "
                      "over the seeds.", "", *lines])


def main(argv=None) -> int:
    from cube_jax.cli import main as cube_jax_main
    from cube_jax.rl import algorithms

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algos", default=",".join(algorithms.NAMES),
                        help="comma-separated learners (default: every learner of the registry)")
    parser.add_argument("--doc", action="store_true", help="also rewrite docs/baselines.md's tuning table")
    args = parser.parse_args(argv)
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = [a for a in algos if a not in algorithms.NAMES]
    if unknown:
        parser.error(f"--algos: unknown learner {unknown[0]!r} (known: {', '.join(algorithms.NAMES)})")
    os.chdir(ROOT)  # the sweeps' folders, and the commands they record, are relative to the repository
    rows = []
    for algo in algos:
        if cube_jax_main(command(algo)) != 0:
            raise SystemExit(f"the sweep of {algo} failed")
        sweep = json.loads((SWEEPS / f"{algo}-{TASK}" / "sweep.json").read_text(encoding="utf-8"))
        rows.append(summarize(algo, sweep))
    data = {"task": TASK, "learning_rates": list(LEARNING_RATES), "seeds": SEEDS, "env_steps": ENV_STEPS,
            "rows": rows}
    save_results(data, RESULTS, render, DOC if args.doc else None, "benchmarks/tuning.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
