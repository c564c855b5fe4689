"""Language models on CUBE: a results table of a real model under every topology, beside
random, the heuristic and the team planner on the same seeds.

    python benchmarks/llm_models.py                      # the local model, 4 episodes per cell
    python benchmarks/llm_models.py --episodes 16 --max-calls-per-agent 0   # no call limit
    python benchmarks/llm_models.py --base-url http://host:8000/v1 --model NAME   # any server
    python benchmarks/llm_models.py --resume             # keeps the cells already measured

Every cell plays the same fixed seeds (0, 1, ...) on ``easy`` and ``hard``: the language
agents under each topology of LLM.md section 3, with and without ``--feedback`` (EmCoop's
RQ3) under one topology, and three non-language teams. Each language episode is bounded:
at most ``--max-calls-per-agent`` model calls per agent (the episode ends, truncated, when
they are spent) besides the world's own step limit; the bound is written in the JSON and
the table. Per episode it records success, blocks delivered, ``invalid_reply_rate`` (LLM.md
section 6), model calls, tokens and wall seconds; each cell reports their means with 95%
bootstrap intervals (:mod:`cube_jax.analytics.intervals`).

Without ``--base-url`` the packaged local model is served (``cube-jax llm --model local``'s
server: llama.cpp, one thread, one slot per agent). The JSON is rewritten after every cell,
so an interrupted run resumes with ``--resume``. Writes
``benchmarks/results/llm_models.json``, a plot beside it, and with ``--doc`` the table in
``docs/llm.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import cube_jax  # noqa: E402
from cube_jax.analytics.intervals import interval_text, summarize  # noqa: E402
from cube_jax.analytics.metrics import episode_metrics  # noqa: E402
from cube_jax.runtime import Limits, run_episode  # noqa: E402
from cube_jax.trace import TraceWriter  # noqa: E402
from cube_jax.llm import ModelClient  # noqa: E402
from cube_jax.llm.agent import LLMAgent  # noqa: E402
from cube_jax.llm.local import MODEL_NAME, LocalServer  # noqa: E402
from cube_jax.runtime.topologies import TOPOLOGIES  # noqa: E402
from cube_jax.teams import parse_team, team_agents  # noqa: E402

from bench_common import write_generated  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "llm_models.json"
WORLDS = ("easy", "hard")
BASELINES = ("random", "heuristic", "team")
# per-episode values that get a mean and an interval, and the table's name for each
METRICS = {"success": "success", "blocks_delivered": "blocks", "invalid_reply_rate": "invalid reply rate",
           "calls": "calls", "tokens": "tokens", "wall_s": "wall s"}


def play(env, agents, seed: int, topology: str, limits: Limits) -> dict:
    """One episode; its row: the result's figures and the trace's invalid-reply rate."""
    buffer = io.StringIO()
    result = run_episode(env, agents, seed=seed, topology=topology, trace=TraceWriter(buffer), limits=limits)
    records = [json.loads(line) for line in buffer.getvalue().splitlines()]
    metrics = episode_metrics(records)
    return {
        "seed": seed, "success": bool(result.success), "blocks_delivered": result.blocks_delivered,
        "blocks_total": result.blocks_total, "steps": result.steps, "reason": result.reason,
        "invalid_reply_rate": float(metrics["invalid_reply_rate"]), "calls": result.model_calls,
        "tokens": result.prompt_tokens + result.completion_tokens, "wall_s": round(result.wall_s, 3),
        "error": result.error,
    }


def cell_key(cell: dict) -> tuple:
    return cell["world"], cell["agents"], cell["topology"], cell["feedback"]


def measure_cell(world: str, agents: str, topology: str, feedback: bool, seeds, client, per_agent_calls: int,
                 progress=print) -> dict:
    env = cube_jax.make(world)
    n = env.num_agents
    language = agents == "llm"
    limits = Limits(max_calls=per_agent_calls * n) if language and per_agent_calls else Limits()
    episodes = []
    for seed in seeds:
        team = ([LLMAgent(client, feedback=feedback) for _ in range(n)] if language
                else team_agents(env, parse_team(agents, n)))
        row = play(env, team, seed, topology, limits)
        episodes.append(row)
        progress(f"  {world} {agents} {topology}{' +feedback' if feedback else ''} seed {seed}: "
                 f"{row['blocks_delivered']}/{row['blocks_total']} blocks, {row['steps']} steps, {row['calls']} calls, "
                 f"{row['wall_s']:.0f} s ({row['reason'] or 'done'})")
        if row["error"]:
            progress(f"    error: {row['error']}")
    summary = summarize(episodes, list(METRICS))
    return {"world": world, "agents": agents, "topology": topology, "feedback": feedback, "num_agents": n,
            "blocks_total": env.num_blocks, "max_calls": limits.max_calls, "episodes": episodes, "summary": summary}


def plan(topologies, feedback_topology: str) -> list:
    """(world, agents, topology, feedback) of every cell, in the order they are played."""
    cells = []
    for world in WORLDS:
        cells += [(world, agents, "individual", False) for agents in BASELINES]
        cells += [(world, "llm", topology, False) for topology in topologies]
        if feedback_topology:
            cells.append((world, "llm", feedback_topology, True))
    return cells


def render(data: dict) -> str:
    """The results table, as ``docs/llm.md`` shows it between its markers."""
    setup = data["setup"]
    limit = (f"at most {setup['max_calls_per_agent']} model calls per agent and episode"
             if setup["max_calls_per_agent"] else "no limit on model calls")
    lines = [f"Model: `{setup['model']}` ({setup['server']}); {setup['episodes']} episodes per cell on seeds "
             f"{setup['seeds'][0]}-{setup['seeds'][-1]}; {limit}, then the episode ends as truncated. "
             "Mean [95% bootstrap interval].", ""]
    columns = ["world", "team", "topology"] + list(METRICS.values())
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for cell in data["cells"]:
        team = cell["agents"] + (" +feedback" if cell["feedback"] else "")
        topology = cell["topology"] if cell["agents"] == "llm" else "-"
        values = []
        for key in METRICS:
            if cell["agents"] != "llm" and key in ("invalid_reply_rate", "calls", "tokens"):
                values.append("-")
            else:
                values.append(interval_text(cell["summary"][key], 2))
        blocks = values[1]
        values[1] = f"{blocks} of {cell['blocks_total']}"
        lines.append("| " + " | ".join([cell["world"], team, topology] + values) + " |")
    return "\n".join(lines) + "\n"


def _plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(WORLDS), figsize=(5.2 * len(WORLDS), 3.8), squeeze=False)
    for ax, world in zip(axes[0], WORLDS):
        cells = [c for c in data["cells"] if c["world"] == world]
        labels = [(c["topology"] if c["agents"] == "llm" else c["agents"]) + (" +fb" if c["feedback"] else "")
                  for c in cells]
        s = [c["summary"]["blocks_delivered"] for c in cells]
        means = [v["mean"] for v in s]
        err = [[m - v["ci_low"] for m, v in zip(means, s)], [v["ci_high"] - m for m, v in zip(means, s)]]
        colors = ["tab:gray" if c["agents"] != "llm" else "tab:blue" for c in cells]
        ax.bar(range(len(cells)), means, yerr=err, color=colors, capsize=3)
        ax.set_xticks(range(len(cells)), labels, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel("blocks delivered (mean, 95% CI)")
        if cells:
            ax.axhline(cells[0]["blocks_total"], color="k", ls="--", lw=0.8)
        ax.set_title(f"{world}: {data['setup']['model']} (blue) vs baselines (gray)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per cell, on seeds 0.. (default 4)")
    parser.add_argument("--max-calls-per-agent", type=int, default=6,
                        help="model calls per agent and episode; 0: no limit (default 6)")
    parser.add_argument("--topologies", default=",".join(sorted(TOPOLOGIES)),
                        help="comma-separated topologies for the language agents (default: all)")
    parser.add_argument("--feedback-topology", default="individual",
                        help="the topology also played with --feedback; '' for none (default individual)")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server; default: the local model")
    parser.add_argument("--model", default=None, help="the model name at --base-url")
    parser.add_argument("--resume", action="store_true", help="keep the cells already in --out with the same setup")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--doc", action="store_true", help="also rewrite the generated table in docs/llm.md")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"argument --episodes: must be >= 1, got {args.episodes}")
    if args.max_calls_per_agent < 0:
        parser.error(f"argument --max-calls-per-agent: must be >= 0, got {args.max_calls_per_agent}")
    topologies = [t.strip() for t in args.topologies.split(",") if t.strip()]
    unknown = [t for t in topologies + ([args.feedback_topology] if args.feedback_topology else [])
               if t not in TOPOLOGIES]
    if unknown:
        parser.error(f"unknown topology {unknown[0]!r}: choose from {', '.join(sorted(TOPOLOGIES))}")
    if (args.base_url is None) != (args.model is None):
        parser.error("--base-url and --model go together")

    seeds = list(range(args.episodes))
    with contextlib.ExitStack() as stack:
        if args.base_url is None:
            parallel = max(cube_jax.make(w).num_agents for w in WORLDS)
            server = stack.enter_context(LocalServer(parallel=parallel))
            base_url, model, server_text = server.base_url, MODEL_NAME, server.settings()["server"] + \
                f", {server.threads} thread, {server.parallel} slots"
        else:
            base_url, model, server_text = args.base_url, args.model, args.base_url
        setup = {"model": model, "server": server_text, "episodes": args.episodes, "seeds": seeds,
                 "max_calls_per_agent": args.max_calls_per_agent}
        data = {"setup": setup, "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                            "load_average_at_start": os.getloadavg()}, "cells": []}
        kept = {}
        if args.resume and args.out.exists():
            old = json.loads(args.out.read_text())
            if old.get("setup") != setup:
                parser.error(f"--resume: {args.out} was made with {old.get('setup')}, not {setup}")
            kept = {cell_key(c): c for c in old["cells"]}
        client = ModelClient(model, base_url=base_url, timeout=900.0)
        t0 = time.perf_counter()
        for world, agents, topology, feedback in plan(topologies, args.feedback_topology):
            key = (world, agents, topology, feedback)
            if key in kept:
                data["cells"].append(kept[key])
                continue
            data["cells"].append(measure_cell(world, agents, topology, feedback, seeds, client, args.max_calls_per_agent,
                                              progress=lambda s: print(s, flush=True)))
            data["machine"]["load_average_at_end"] = os.getloadavg()
            data["machine"]["wall_s"] = round(time.perf_counter() - t0, 1)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(render(data))
    _plot(data, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    if args.doc:
        write_generated(ROOT / "docs" / "llm.md", "benchmarks/llm_models.py", str(args.out.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
