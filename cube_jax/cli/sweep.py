"""``cube-jax sweep``: a hyperparameter grid trained in one program per static group
(:mod:`cube_jax.rl.sweep`), written as a table, a figure and JSON.

    cube-jax sweep ippo --task easy --grid train.lr=1e-3,2.5e-3 --grid train.ent_coef=0,0.01 \\
        --seeds 3 --env-steps 2000000 --out runs/sweep-ippo-easy

The output folder holds ``sweep.json`` (the request, which keys ran traced or static and
why, every point's per-seed results and curves, the chosen point, and the provenance of the
run that trained each group: commit, machine, command), ``sweep.md`` (the table) and
``sweep.png`` (success per point and training curves). Each finished static group is kept
in ``groups/``; the same command run again goes on from the first unfinished group, and a
folder made by another request is refused, naming the difference.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from cube_jax.cli.args import positive_int

log = logging.getLogger("cube_jax.sweep")
REQUEST_FILE, RESULT_FILE, TABLE_FILE, FIGURE_FILE = "request.json", "sweep.json", "sweep.md", "sweep.png"
FIXED = ("num_seeds", "output.", "train.total_timesteps")  # set by --seeds, the folder, --env-steps


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "sweep", help="train a grid of hyperparameters in one program and tabulate it",
        description="Trains every combination of the --grid values with --seeds seeds, traced keys (learning "
        "rates, coefficients, discounts) together in one jitted program, shape-setting keys one program each; "
        "evaluates each on the training distribution (never a benchmark test layout) and writes "
        "sweep.json, sweep.md and sweep.png to --out.")
    parser.add_argument("algo", help="an algorithm of the registry: ippo, mappo, ippo_rnn, mappo_rnn, pqn_vdn")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                        help="a config key and its values (repeatable; keys: cube_jax/rl/schema.py)")
    parser.add_argument("--task", default=None, help="a cube-v1 task whose world to train on (its training layouts)")
    parser.add_argument("--seeds", type=positive_int, default=3, help="seeds per point (default 3)")
    parser.add_argument("--env-steps", type=positive_int, default=None,
                        help="env steps per point and seed (default: the config's train.total_timesteps)")
    parser.add_argument("--preset", action="append", default=[], help="extra preset(s), applied after the algorithm's")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    parser.add_argument("--out", type=Path, required=True, help="the output folder (continued when it holds a sweep)")
    parser.set_defaults(run=run)


def _request(parser, args) -> Dict[str, Any]:
    from cube_jax.rl import algorithms
    from cube_jax.rl.config import ConfigError, build
    from cube_jax.rl.sweep import SweepError, parse_grid

    try:
        learner = algorithms.get(args.algo)
    except (KeyError, ValueError) as err:
        parser.error(f"algo: {err.args[0]}")
    for text in args.set:
        key = text.split("=", 1)[0].strip()
        if any(key == f or (f.endswith(".") and key.startswith(f)) for f in FIXED):
            parser.error(f"--set {text!r}: {key} is set by --seeds, --env-steps or the sweep itself")
    world: List[str] = []
    if args.task is not None:
        from cube_jax.bench.training import world_overrides
        from cube_jax.core import suite

        try:
            world = world_overrides(suite.task(args.task))
        except (KeyError, ValueError) as err:
            parser.error(f"--task: {err.args[0]}")
    base = [*world, *args.set, f"num_seeds={args.seeds}", "output.checkpoint=false", "output.gif=false",
            "output.plot=false"]
    if args.env_steps is not None:
        base.append(f"train.total_timesteps={args.env_steps}")
    presets = [*learner.presets, *args.preset]
    try:
        config = build(learner.config_algo, preset=presets, overrides=base)
        grid = parse_grid(learner.config_algo, args.grid, base)
    except (ConfigError, SweepError) as err:
        parser.error(str(err))
    return {"algo": args.algo, "config_algo": learner.config_algo, "task": args.task, "presets": presets,
            "overrides": base, "grid": grid, "config": config}


def run(parser: argparse.ArgumentParser, args) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stdout)
    log.setLevel(logging.INFO)
    request = _request(parser, args)
    config, grid = request.pop("config"), request["grid"]
    from cube_jax.bench.entry import provenance
    from cube_jax.rl.sweep import SweepError, classify, run_group

    out: Path = args.out
    stored = out / REQUEST_FILE
    if stored.is_file():
        before = json.loads(stored.read_text())
        changed = [k for k in request if before.get(k) != json.loads(json.dumps(request[k]))]
        if changed:
            parser.error(f"--out {out}: holds a sweep of another request (differs in: {', '.join(changed)}); "
                         "use another folder")
    try:
        plan = classify(config, grid)
    except SweepError as err:
        parser.error(str(err))
    out.mkdir(parents=True, exist_ok=True)
    (out / "groups").mkdir(exist_ok=True)
    stored.write_text(json.dumps(request, indent=1) + "\n")
    groups = plan.groups(grid)
    points = plan.points(grid)
    log.info("sweep of %s: %d point(s) x %d seed(s) in one program (traced: %s), %d program(s) (static: %s)",
             args.algo, len(points), config.num_seeds, ", ".join(plan.traced) or "none", len(groups),
             ", ".join(f"{k} ({plan.why_static[k]})" for k in plan.static) or "none")
    results = []
    for i, static in enumerate(groups):
        path = out / "groups" / f"group-{i}.json"
        if path.is_file():
            kept = json.loads(path.read_text())
            if kept["static"] != static or kept["points"] != points:
                parser.error(f"--out {out}: {path.name} holds the points {kept['static'] or ''}{kept['points']}, "
                             f"but this sweep's group {i} is {static or ''}{points} (the keys are split into "
                             "traced and static otherwise than when it was made); use another folder")
            results.append(kept)
            log.info("group %d/%d %s: done before, kept", i + 1, len(groups), static or "")
            continue

        def progress(done, total, seconds, i=i):
            log.info("group %d/%d: update %d/%d, %.0f s", i + 1, len(groups), done, total, seconds)

        result = {**run_group(config, plan, grid, static, on_chunk=progress).to_json(),
                  "provenance": provenance(["cube-jax", *args.argv])}
        path.write_text(json.dumps(result) + "\n")
        results.append(result)
    summary = summarize(request, plan, results)
    (out / RESULT_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    (out / TABLE_FILE).write_text(table(summary) + "\n")
    plot(summary, out / FIGURE_FILE)
    print(table(summary))
    print(f"\nchosen: {summary['best']['values']}; files in {out}")
    return 0


# --- the table, the choice and the figure ----------------------------------------------------------
METRICS = ("greedy_success_rate", "sampled_success_rate", "greedy_blocks_delivered_frac")
# the choice's last tie-break: how soon a point learned (mean of its training-success curve)
SPEED = "train_success_mean"


def summarize(request: Dict[str, Any], plan, results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Every point's mean and 95% bootstrap interval over seeds, and the chosen point: the
    highest greedy success, ties broken by sampled success, then greedy blocks delivered, then
    the mean of the training-success curve (the point that learned sooner)."""
    from cube_jax.analytics.intervals import bootstrap_ci

    rows = []
    for group in results:
        for p, point in enumerate(group["points"]):
            row = {"values": {**group["static"], **point}, "env_steps": group["env_steps"],
                   "group_seconds": group["wall_seconds"]}
            for name in METRICS:
                seeds = group["final"][name][p]
                mean, low, high = bootstrap_ci(seeds)
                row[name] = {"mean": mean, "low": low, "high": high, "per_seed": seeds}
            measured = [x for x in group["curves"]["success_rate"][p] if x is not None]
            row["train_success_last"] = measured[-1] if measured else None
            row[SPEED] = float(np.mean(measured)) if measured else None
            rows.append(row)
    order = max(range(len(rows)), key=lambda i: (*(rows[i][m]["mean"] for m in METRICS),
                                                  -1.0 if rows[i][SPEED] is None else rows[i][SPEED]))
    return {**request, "traced": list(plan.traced), "static": list(plan.static), "why_static": plan.why_static,
            "rows": rows, "best": rows[order], "groups": results}


def _cell(stat: Dict[str, float]) -> str:
    return f"{stat['mean']:.3f} [{stat['low']:.3f}, {stat['high']:.3f}]"


def table(summary: Dict[str, Any]) -> str:
    keys = list(summary["grid"])
    head = [*keys, "greedy success", "sampled success", "greedy blocks", "train success (last)",
            "train success (curve mean)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in summary["rows"]:
        mark = " **(chosen)**" if row == summary["best"] else ""
        last = row["train_success_last"]
        cells = [*(str(row["values"][k]) for k in keys), _cell(row["greedy_success_rate"]) + mark,
                 _cell(row["sampled_success_rate"]), _cell(row["greedy_blocks_delivered_frac"]),
                 "-" if last is None else f"{last:.3f}", "-" if row[SPEED] is None else f"{row[SPEED]:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([f"{summary['algo']} sweep{' on ' + summary['task'] if summary['task'] else ''}; "
                      f"{summary['rows'][0]['env_steps']:,} env steps per point and seed; "
                      f"{summary['groups'][0]['num_seeds']} seeds; "
                      f"mean [95% bootstrap interval over seeds]", "", *lines, "", *_made_by(summary)])


def _made_by(summary: Dict[str, Any]) -> List[str]:
    """One line per group's run: the commit, machine and command that trained it."""
    from cube_jax.bench.entry import short_commit

    lines = []
    for i, group in enumerate(summary["groups"]):
        prov = group.get("provenance")
        if prov is None:
            continue
        lines.append(f"group {i}: commit {short_commit(prov)}, {prov['device']}, {prov['cpu_model']} ({prov['cpus']} cpus), "
                     f"{group['wall_seconds']:.0f} s: `{prov['command']}`")
    return lines


def plot(summary: Dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["rows"]
    labels = [", ".join(f"{k.split('.')[-1]}={v}" for k, v in r["values"].items()) for r in rows]
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(12, 0.5 + 0.4 * max(len(rows), 6)))
    y = np.arange(len(rows))
    means = np.array([r["greedy_success_rate"]["mean"] for r in rows])
    err = np.array([[m - r["greedy_success_rate"]["low"], r["greedy_success_rate"]["high"] - m]
                    for m, r in zip(means, rows)]).T
    bars.barh(y, means, xerr=err, color=["C1" if r == summary["best"] else "C0" for r in rows])
    bars.set_yticks(y, labels, fontsize=8)
    bars.invert_yaxis()
    bars.set_xlim(0, 1.02)
    bars.set_xlabel("greedy success (mean over seeds, 95% interval)")
    for group in summary["groups"]:
        for p, point in enumerate(group["points"]):
            label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in {**group["static"], **point}.items())
            success = [np.nan if x is None else x for x in group["curves"]["success_rate"][p]]
            curves.plot(group["curves"]["env_steps"], success, label=label)
    curves.set_xlabel("env steps per seed")
    curves.set_ylabel("training success (mean over seeds)")
    curves.set_ylim(-0.02, 1.02)
    if len(rows) <= 12:
        curves.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{summary['algo']} sweep{' on ' + summary['task'] if summary['task'] else ''}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
