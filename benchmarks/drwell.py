"""DR. WELL on CUBE, measured as its paper shows it: the same layouts played again and again by
negotiating teams, with and without the world model.

    python benchmarks/drwell.py --doc            # hard and 16 layouts of n = 4, 10 episodes each
    python benchmarks/drwell.py --layouts 2 --episodes 3 --out /tmp/drwell.json   # a smoke check
    python benchmarks/drwell.py --llm local --llm-episodes 2   # add the local language model

Worlds: ``hard`` (its one fixed layout) and cube-v1's ``n4`` task on its first ``--layouts``
test layouts (:mod:`cube_jax.core.suite`). Every layout is played ``--episodes`` times, on
episode seeds 0, 1, ..., by a team of negotiators (kind ``negotiator``) in three series:

- ``no world model``: as the team plays with none;
- ``world model``: one world model per layout, empty before episode 0 and updated after
  every episode (what ``cube-jax llm --world-model PATH`` does), so episode i reads what
  episodes 0..i-1 of that layout left in it; episode 0 therefore plays as without one;
- ``blank evidence`` (a control): a stand-in model that claims every task succeeds and knows
  nothing else, so the negotiators use their rules for experience (teams sized to the
  block's weight, side by side) with nothing learnt. What ``world model`` gains over it is
  what the accumulated evidence adds beyond the switch to teams working side by side.

With ``--llm`` a fourth series puts a language agent as ``agent_0`` beside negotiators, with
the world model, on the first layout of each world only (``--llm-episodes`` episodes).

The dynamics and the negotiators are deterministic, so a layout without a model gives the
same episode every time: the variation that intervals can speak of is between layouts.
Reported per world and series: completion steps (the episode's steps; ``max_steps`` when it
ends undelivered) and blocks delivered, as the mean over layouts with a 95% bootstrap
interval over layouts (:func:`cube_jax.analytics.intervals.bootstrap_ci`), per episode index
(the learning curve) and over episodes 1..n-1 (those that read some experience), and the
per-layout differences to ``no world model`` and, for ``world model``, to ``blank evidence``.

Writes ``benchmarks/results/drwell.json`` with the machine's description
(``bench_common.host_info``), the learning curves as ``drwell.png`` beside it, and under
``benchmarks/results/drwell/`` the world model of each world's first layout: per-block
completion step against episode index (``<world>-world-model-trend.png``) and its graph after
episodes 1, 5 and 10 (``<world>-world-model-graph-<k>.png``). ``--doc`` rewrites the
generated block of ``docs/drwell.md`` from the JSON.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]

import numpy as np  # noqa: E402

import cube_jax  # noqa: E402
from cube_jax.agents import negotiator_team  # noqa: E402
from cube_jax.analytics.intervals import bootstrap_ci  # noqa: E402
from cube_jax.analytics.metrics import NEGOTIATION_METRICS, episode_metrics  # noqa: E402
from cube_jax.bench.run import layout_world  # noqa: E402
from cube_jax.core import suite  # noqa: E402
from cube_jax.runtime import Limits, make_topology, run_episode  # noqa: E402
from cube_jax.trace import TraceWriter  # noqa: E402
from cube_jax.worldmodel import WorldModel  # noqa: E402
from cube_jax.worldmodel.figures import plot_graph, plot_trend  # noqa: E402

from bench_common import host_info, markdown_table, save_results  # noqa: E402

SCRIPT = "benchmarks/drwell.py"
RESULTS = ROOT / "benchmarks" / "results" / "drwell.json"
DOC = ROOT / "docs" / "drwell.md"
WORLDS = ("hard", "n4")
SERIES = ("no world model", "world model", "blank evidence")
LLM_SERIES = "language agent + negotiators (world model)"
GRAPH_AFTER = (1, 5, 10)


class BlankEvidence:
    """The control's stand-in world model: every task "succeeds", nothing else is known (no
    team size, no duration, no text), so the negotiators apply their rules for experience with
    no experience behind them."""

    def best_team_size(self, block: int) -> Optional[int]:
        return None

    def success_rate(self, block: int) -> Optional[float]:
        return 1.0

    def guidebook(self, live_blocks, t: int, room_size: int) -> str:
        return ""

    def plan_library(self, block: int) -> str:
        return ""


def world_env(world: str, layout: int):
    """The world's environment fixed to one layout: ``hard``'s own, or an n4 test layout."""
    if world == "hard":
        return cube_jax.make("hard")
    return layout_world(suite.task(world), layout)


def language_team(env, spec: str):
    """agent_0 a language agent served as ``spec`` says (``local`` or ``MODEL@URL``), the
    others negotiators; (agents, the local server or None)."""
    from cube_jax.llm import ModelClient
    from cube_jax.llm.agent import LLMAgent

    if spec == "local":
        from cube_jax.llm.local import MODEL_NAME, LocalServer

        server = LocalServer()
        client = ModelClient(MODEL_NAME, base_url=server.start(), timeout=600.0)
        return [LLMAgent(client)] + negotiator_team(env)[1:], server
    model, _, url = spec.partition("@")
    return [LLMAgent(ModelClient(model, base_url=url, timeout=600.0))] + negotiator_team(env)[1:], None


def play_layout(world: str, layout: int, series: str, episodes: int, figures: Optional[Path], llm: str = "",
                max_steps: Optional[int] = None) -> List[dict]:
    """``episodes`` episodes of one layout in one series; one row per episode."""
    env = world_env(world, layout)
    model = BlankEvidence() if series == "blank evidence" else (None if series == "no world model" else WorldModel())
    rows, server = [], None
    try:
        for seed in range(episodes):
            if series == LLM_SERIES:
                if server is not None:
                    server.stop()
                agents, server = language_team(env, llm)
            else:
                agents = negotiator_team(env)
            buffer = io.StringIO()
            t0 = time.perf_counter()
            result = run_episode(env, agents, seed=seed, trace=TraceWriter(buffer), limits=Limits(max_steps=max_steps),
                                 topology=make_topology("negotiation", env.num_agents, world_model=model))
            wall = time.perf_counter() - t0
            records = [json.loads(line) for line in buffer.getvalue().splitlines()]
            metrics = episode_metrics(records)
            rows.append({"seed": seed, "success": bool(result.success), "steps": int(result.steps),
                         "blocks_delivered": int(result.blocks_delivered), "blocks_total": int(result.blocks_total),
                         "block_done_t": metrics["block_done_t"] or {}, "wall_s": round(wall, 3),
                         **{m: metrics[m] for m in NEGOTIATION_METRICS + ("llm_calls",)}})
            if isinstance(model, WorldModel):
                model.update(records)
                if figures is not None and seed + 1 in GRAPH_AFTER:
                    plot_graph(model, figures / f"{world}-{slug(series)}-graph-{seed + 1}.png")
    finally:
        if server is not None:
            server.stop()
    if figures is not None and isinstance(model, WorldModel):
        plot_trend(model, figures / f"{world}-{slug(series)}-trend.png")
    return rows


def slug(text: str) -> str:
    return "-".join(text.replace("(", "").replace(")", "").split())


# --- the summary -------------------------------------------------------------------------------


def interval(values) -> Dict[str, float]:
    mean, low, high = bootstrap_ci([float(v) for v in values])
    return {"mean": round(mean, 3), "ci_low": round(low, 3), "ci_high": round(high, 3), "n": len(values)}


def summarize(runs: Dict[str, List[dict]], baseline: Optional[Dict[str, List[dict]]],
              control: Optional[Dict[str, List[dict]]] = None) -> dict:
    """Per-episode-index and pooled figures of one series (``runs``: layout -> episode rows),
    intervals over layouts; ``baseline`` (the no-model runs) and ``control`` (the blank
    evidence runs), when given, for paired differences over episodes 1..n-1."""
    layouts = sorted(runs, key=int)
    steps = np.array([[e["steps"] for e in runs[k]] for k in layouts], dtype=float)  # [layouts, episodes]
    blocks = np.array([[e["blocks_delivered"] for e in runs[k]] for k in layouts], dtype=float)
    success = np.array([[e["success"] for e in runs[k]] for k in layouts], dtype=float)
    later = slice(1, None) if steps.shape[1] > 1 else slice(0, None)
    out = {
        "curve": {"steps": [interval(steps[:, i]) for i in range(steps.shape[1])],
                  "blocks_delivered": [interval(blocks[:, i]) for i in range(blocks.shape[1])]},
        "steps": interval(steps.mean(axis=1)),
        "steps_after_first": interval(steps[:, later].mean(axis=1)),
        "blocks_delivered": interval(blocks.mean(axis=1)),
        "success": interval(success.mean(axis=1)),
        "blocks_total": int(runs[layouts[0]][0]["blocks_total"]),
    }
    if baseline is not None:
        base = np.array([[e["steps"] for e in baseline[k]] for k in layouts], dtype=float)
        out["steps_after_first_minus_no_model"] = interval((steps[:, later] - base[:, later]).mean(axis=1))
        out["layouts_faster_after_first"] = int((steps[:, later].mean(axis=1) < base[:, later].mean(axis=1)).sum())
        out["layouts_slower_after_first"] = int((steps[:, later].mean(axis=1) > base[:, later].mean(axis=1)).sum())
    if control is not None:
        blank = np.array([[e["steps"] for e in control[k]] for k in layouts], dtype=float)
        out["steps_after_first_minus_blank"] = interval((steps[:, later] - blank[:, later]).mean(axis=1))
    return out


def ci(s: dict, digits: int = 1) -> str:
    if s["ci_low"] == s["ci_high"]:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} [{s['ci_low']:.{digits}f}, {s['ci_high']:.{digits}f}]"


def render(data: dict) -> str:
    """The tables of ``docs/drwell.md`` from a run's JSON."""
    summary_rows, curve_rows, layout_rows = [], [], []
    episodes = data["episodes"]
    for world in data["worlds"]:
        for series, run in world["series"].items():
            s = run["summary"]
            delta = s.get("steps_after_first_minus_no_model")
            learnt = s.get("steps_after_first_minus_blank")
            summary_rows.append({
                "world": world["world"], "series": series, "layouts": len(run["layouts"]),
                "steps, all episodes": ci(s["steps"]), f"steps, episodes 1-{episodes - 1}": ci(s["steps_after_first"]),
                "minus no world model": "" if delta is None else ci(delta),
                "minus blank evidence": "" if learnt is None else ci(learnt),
                "faster / slower layouts": "" if delta is None else
                f"{s['layouts_faster_after_first']} / {s['layouts_slower_after_first']}",
                "blocks delivered": f"{ci(s['blocks_delivered'], 2)} of {s['blocks_total']}",
                "success": ci(s["success"], 2)})
            curve_rows.append({"world": world["world"], "series": series,
                               **{str(i): f"{c['mean']:.1f}" for i, c in enumerate(s["curve"]["steps"])}})
            if series == LLM_SERIES:
                continue
            for layout, rows in run["layouts"].items():
                layout_rows.append({"world": world["world"], "layout": layout, "series": series,
                                    "steps per episode": " ".join(
                                        str(e["steps"]) + ("" if e["success"] else f"({e['blocks_delivered']})")
                                        for e in rows)})
    lengths = max(len(run["summary"]["curve"]["steps"]) for w in data["worlds"] for run in w["series"].values())
    machine = data["machine"]
    head = (f"Run of {machine['date']}: {machine['cpus_usable']} usable core(s), {data['wall_s']:.0f} s; "
            f"{episodes} episodes per layout and series; hard's one layout and the first "
            f"{data['n4_layouts']} test layouts of n4. Intervals: 95% bootstrap over layouts (none for "
            f"hard's single deterministic layout).")
    tables = [
        markdown_table("Completion steps and blocks delivered: mean over layouts [95% interval]", summary_rows,
                       ["world", "series", "layouts", "steps, all episodes", f"steps, episodes 1-{episodes - 1}",
                        "minus no world model", "faster / slower layouts", "minus blank evidence", "blocks delivered",
                        "success"]),
        markdown_table("Learning curve: mean completion steps by episode index", curve_rows,
                       ["world", "series", *[str(i) for i in range(lengths)]]),
        markdown_table("Per layout: completion steps of episodes 0, 1, ... (blocks delivered when not all)",
                       layout_rows, ["world", "layout", "series", "steps per episode"]),
    ]
    return head + "\n" + "\n".join(table.replace("\n## ", "\n#### ", 1) for table in tables) + "\n"


def plot(data: dict, path: Path) -> Path:
    """Mean completion steps against episode index, one panel per world, 95% bands over layouts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worlds = data["worlds"]
    fig, axes = plt.subplots(1, len(worlds), figsize=(5.2 * len(worlds), 3.6), squeeze=False)
    for ax, world in zip(axes[0], worlds):
        for i, (series, run) in enumerate(world["series"].items()):
            curve = run["summary"]["curve"]["steps"]
            x = np.arange(len(curve))
            mean = [c["mean"] for c in curve]
            ax.plot(x, mean, marker="o", markersize=3, color=f"C{i}", label=series)
            ax.fill_between(x, [c["ci_low"] for c in curve], [c["ci_high"] for c in curve], color=f"C{i}",
                            alpha=0.2, linewidth=0)
        layouts = len(next(iter(world["series"].values()))["layouts"])
        ax.set_title(f"{world['world']}: {layouts} layout{'s' if layouts != 1 else ''}, negotiators")
        ax.set_xlabel("episode index (the world model grows after each)")
        ax.set_ylabel("completion steps (mean over layouts)")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0][0].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10, help="episodes per layout and series (default 10)")
    parser.add_argument("--layouts", type=int, default=16, help="n4 test layouts, from layout 0 (default 16)")
    parser.add_argument("--llm", default="", help="add a series with agent_0 a language agent: 'local' or MODEL@URL")
    parser.add_argument("--llm-episodes", type=int, default=3, help="episodes of the language series (default 3)")
    parser.add_argument("--llm-max-steps", type=int, default=60, help="step limit of the language series (default 60)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--doc", action="store_true", help="also rewrite the generated block of docs/drwell.md")
    args = parser.parse_args(argv)
    for name in ("episodes", "layouts", "llm_episodes", "llm_max_steps"):
        if getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.layouts > suite.TEST_LAYOUTS:
        parser.error(f"argument --layouts: n4 has {suite.TEST_LAYOUTS} test layouts, got {args.layouts}")
    figures = args.out.parent / "drwell"
    figures.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    machine = host_info()
    worlds = []
    for world in WORLDS:
        layouts = [0] if world == "hard" else list(range(args.layouts))
        series_runs: Dict[str, Dict[str, List[dict]]] = {}
        for series in SERIES:
            t0 = time.perf_counter()
            series_runs[series] = {str(k): play_layout(world, k, series, args.episodes,
                                                       figures if series == "world model" and k == 0 else None)
                                   for k in layouts}
            mean = np.mean([e["steps"] for rows in series_runs[series].values() for e in rows])
            print(f"  {world} / {series}: {len(layouts)} layout(s) x {args.episodes} episodes, mean {mean:.1f} steps "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        if args.llm:
            series_runs[LLM_SERIES] = {"0": play_layout(world, 0, LLM_SERIES, args.llm_episodes, figures, llm=args.llm,
                                                        max_steps=args.llm_max_steps)}
        baseline, control = series_runs["no world model"], series_runs["blank evidence"]
        worlds.append({"world": world, "task": world, "layouts": layouts, "series": {
            series: {"layouts": runs,
                     "summary": summarize(runs, None if series in ("no world model", LLM_SERIES) else baseline,
                                          control if series == "world model" else None)}
            for series, runs in series_runs.items()}})
    data = {"machine": machine, "episodes": args.episodes, "n4_layouts": args.layouts, "llm": args.llm or None,
            "wall_s": round(time.perf_counter() - started, 1), "worlds": worlds}
    save_results(data, args.out, render, DOC if args.doc else None, SCRIPT)
    print(f"wrote {plot(data, args.out.with_suffix('.png'))} and the figures in {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
