"""DR. WELL on CUBE, shown as its paper shows it: negotiation over episodes, with and without
the world model.

    python benchmarks/drwell.py                  # negotiator teams, 10 episodes per series
    python benchmarks/drwell.py --episodes 3     # a smoke check
    python benchmarks/drwell.py --llm local --llm-episodes 2   # add the local language model

For each world (``hard``, ``make(n=4)``) and each series (the negotiator team without a
world model; with one that grows after every episode; and, with ``--llm``, a team of one
language agent beside negotiators, with the world model), episodes are played in order on
seeds 0, 1, ...: episode i reads the world model as episodes 0..i-1 left it. Recorded per
episode: success, steps, the per-block completion steps (``block_done_t``), commitments,
rooms, model calls; per series the negotiation metrics with 95% bootstrap intervals.
Pictures beside the JSON: per-block completion step against episode index (one figure per
world and series) and the world model's graph after episodes 1, 5 and 10.

Writes ``benchmarks/results/drwell.json`` and the PNGs under ``benchmarks/results/drwell/``;
with ``--doc`` rewrites the generated tables of ``docs/drwell.md``.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import cube_jax  # noqa: E402
from cube_jax.agents import negotiator_team  # noqa: E402
from cube_jax.analytics.intervals import summarize  # noqa: E402
from cube_jax.analytics.metrics import NEGOTIATION_METRICS, episode_metrics  # noqa: E402
from cube_jax.runtime import Limits, run_episode  # noqa: E402
from cube_jax.trace import TraceWriter  # noqa: E402
from cube_jax.runtime import make_topology  # noqa: E402
from cube_jax.worldmodel import WorldModel  # noqa: E402
from cube_jax.worldmodel.figures import plot_graph, plot_trend  # noqa: E402

from bench_common import markdown_table, write_generated  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "drwell.json"
FIGURES = ROOT / "benchmarks" / "results" / "drwell"
WORLDS = {"hard": lambda: cube_jax.make("hard"), "n4": lambda: cube_jax.make(n=4)}
GRAPH_AFTER = (1, 5, 10)
SUMMARY_METRICS = ("success", "steps", "blocks_delivered") + NEGOTIATION_METRICS + ("llm_calls",)


def language_team(env, spec: str):
    """agent_0 a language agent served as ``spec`` says (``local`` or ``MODEL@URL``), the
    others negotiators."""
    from cube_jax.llm import ModelClient
    from cube_jax.llm.agent import LLMAgent

    if spec == "local":
        from cube_jax.llm.local import MODEL_NAME, LocalServer

        server = LocalServer()
        client = ModelClient(MODEL_NAME, base_url=server.start(), timeout=600.0)
        return [LLMAgent(client)] + negotiator_team(env)[1:], server
    model, _, url = spec.partition("@")
    return [LLMAgent(ModelClient(model, base_url=url, timeout=600.0))] + negotiator_team(env)[1:], None


def play_series(world: str, series: str, episodes: int, figures: Path, llm: str = "", max_steps=None) -> dict:
    env = WORLDS[world]()
    model = WorldModel() if series != "no world model" else None
    rows = []
    server = None
    try:
        for seed in range(episodes):
            if series.startswith("language"):
                if server is not None:  # one server for the whole series
                    server.stop()
                agents, server = language_team(env, llm)
            else:
                agents = negotiator_team(env)
            topology = make_topology("negotiation", env.num_agents, world_model=model)
            buffer = io.StringIO()
            t0 = time.perf_counter()
            result = run_episode(env, agents, seed=seed, topology=topology, trace=TraceWriter(buffer),
                                 limits=Limits(max_steps=max_steps))
            wall = time.perf_counter() - t0
            records = [json.loads(line) for line in buffer.getvalue().splitlines()]
            metrics = episode_metrics(records)
            rows.append({
                "seed": seed, "success": result.success, "steps": result.steps,
                "blocks_delivered": result.blocks_delivered, "blocks_total": result.blocks_total,
                "block_done_t": metrics["block_done_t"] or {},
                "commitments": sum(r["type"] == "message" and r.get("kind") == "commitment" for r in records),
                "wall_s": round(wall, 3), **{m: metrics[m] for m in NEGOTIATION_METRICS + ("llm_calls",)},
            })
            if model is not None:
                model.update(records)
                if seed + 1 in GRAPH_AFTER:
                    plot_graph(model, figures / f"{world}-{slug(series)}-graph-{seed + 1}.png")
            print(f"  {world} / {series} / episode {seed}: {rows[-1]['steps']} steps, "
                  f"blocks {result.blocks_delivered}/{result.blocks_total}, done at {rows[-1]['block_done_t']}",
                  flush=True)
    finally:
        if server is not None:
            server.stop()
    if model is not None:
        plot_trend(model, figures / f"{world}-{slug(series)}-trend.png")
    summary = summarize([{m: float(r[m]) for m in SUMMARY_METRICS} for r in rows], SUMMARY_METRICS)
    return {"world": world, "series": series, "episodes": rows, "summary": summary}


def slug(text: str) -> str:
    return "-".join(text.replace("(", "").replace(")", "").split())


def render(data: dict) -> str:
    """The tables of ``docs/drwell.md`` from a run's JSON."""
    summary_rows, trend_rows = [], []
    for run in data["runs"]:
        row = {"world": run["world"], "series": run["series"], "episodes": len(run["episodes"])}
        for metric in SUMMARY_METRICS:
            s = run["summary"][metric]
            row[metric] = f"{s['mean']:.3g} [{s['ci_low']:.3g}, {s['ci_high']:.3g}]"
        summary_rows.append(row)
        for episode in run["episodes"]:
            done = " ".join(f"b{b}@{t}" for b, t in sorted(episode["block_done_t"].items(), key=lambda x: int(x[0])))
            trend_rows.append({"world": run["world"], "series": run["series"], "episode": episode["seed"],
                               "steps": episode["steps"], "blocks": f"{episode['blocks_delivered']}/"
                               f"{episode['blocks_total']}", "completion steps": done or "none",
                               "rooms": episode["negotiations"], "commitments": episode["commitments"]})
    tables = [
        markdown_table("Per series: mean [95% bootstrap interval]", summary_rows,
                       ["world", "series", "episodes", *SUMMARY_METRICS]),
        markdown_table("Per episode: when each block was delivered (block@step)", trend_rows,
                       ["world", "series", "episode", "steps", "blocks", "completion steps", "rooms", "commitments"]),
    ]
    return "\n".join(table.replace("\n## ", "\n#### ", 1) for table in tables)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10, help="episodes per series of negotiators (default 10)")
    parser.add_argument("--llm", default="", help="add a series with agent_0 a language agent: 'local' or MODEL@URL")
    parser.add_argument("--llm-episodes", type=int, default=3, help="episodes of the language series (default 3)")
    parser.add_argument("--llm-max-steps", type=int, default=60, help="step limit of the language series (default 60)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--doc", action="store_true", help="also rewrite the generated tables of docs/drwell.md")
    args = parser.parse_args(argv)
    for name in ("episodes", "llm_episodes", "llm_max_steps"):
        if getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    figures = args.out.parent / "drwell"
    figures.mkdir(parents=True, exist_ok=True)
    runs = []
    for world in WORLDS:
        for series in ("no world model", "world model"):
            runs.append(play_series(world, series, args.episodes, figures))
        if args.llm:
            runs.append(play_series(world, "language agent + negotiators (world model)", args.llm_episodes, figures,
                                    llm=args.llm, max_steps=args.llm_max_steps))
    data = {"episodes": args.episodes, "llm": args.llm or None, "runs": runs}
    print(render(data))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out} and the figures in {figures}")
    if args.doc:
        write_generated(ROOT / "docs" / "drwell.md", "benchmarks/drwell.py", str(args.out.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
