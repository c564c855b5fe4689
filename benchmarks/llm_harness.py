"""The language-agent harness: its own cost per decision, episodes per hour against a slow
server, and what sound replies achieve under each topology.

    python benchmarks/llm_harness.py            # every section (a few minutes on 2 CPU cores)
    python benchmarks/llm_harness.py --quick    # smaller, for a smoke check

Sections
  overhead    harness time per agent decision, model time excluded: the prompt built from
              the templates and the symbolic view, the reply checked against the state and
              the topology, the plan compiled into the executor. An in-process model answers
              at once with sound plans; the world view a step shares among its decisions is
              timed separately. n = 3, 16, 64, 256 on the n-curriculum.
  throughput  episodes per hour on "hard" (3 agents, individual topology) against the
              loopback OpenAI-compatible server with a fixed latency per call (0.5 s), at
              concurrency 1, 8 and 64.
  outcomes    blocks delivered with the sound-plan model on easy, hard and make(n=4) under
              each topology.

Prints tables and writes ``benchmarks/results/llm_harness.json`` and ``llm_harness.png``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import jax  # noqa: E402
import numpy as np  # noqa: E402

import cube_jax  # noqa: E402
from cube_jax.agents.views import WorldView  # noqa: E402
from cube_jax.runtime import Episode, Limits, arun_episodes, run_episodes  # noqa: E402
from cube_jax.runtime.topologies import TOPOLOGIES  # noqa: E402
from cube_jax.llm import ModelClient  # noqa: E402
from cube_jax.llm.agent import LLMAgent  # noqa: E402

from bench_common import markdown_table, write_generated  # noqa: E402
from cube_jax.testing.sound_model import SoundModel  # noqa: E402


class TimedAgent(LLMAgent):
    """An LLM agent that times each of its decisions."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds = []

    async def decide(self, ctx):
        t0 = time.perf_counter()
        decision = await super().decide(ctx)
        self.seconds.append(time.perf_counter() - t0)
        return decision


def bench_overhead(n: int, steps: int) -> dict:
    env = cube_jax.make(n=n)
    model = SoundModel()
    # a first episode compiles the world's step and the templates; the second is timed
    asyncio.run(Episode(env, [LLMAgent(SoundModel()) for _ in range(n)], seed=1, limits=Limits(max_steps=2)).run())
    agents = [TimedAgent(model) for _ in range(n)]
    episode = Episode(env, agents, seed=0, limits=Limits(max_steps=steps))
    t0 = time.perf_counter()
    asyncio.run(episode.run())
    wall = time.perf_counter() - t0
    decide = [s for a in agents for s in a.seconds]
    state, _ = env.reset(jax.random.PRNGKey(0))
    views = []
    for _ in range(5):
        t1 = time.perf_counter()
        v = WorldView(state)
        _ = v.blocks
        views.append(time.perf_counter() - t1)
    per_decision = decide
    return {
        "n": n,
        "grid": env.grid_size,
        "blocks": env.num_blocks,
        "decisions": len(decide),
        "model_calls": model.calls,
        "decision_ms_mean": 1e3 * statistics.mean(per_decision),
        "decision_ms_p95": 1e3 * float(np.percentile(per_decision, 95)),
        "prompt_chars_mean": statistics.mean(len(a.last_prompt[1]["content"]) for a in agents if a.last_prompt),
        "view_ms_per_step": 1e3 * min(views),
        "episode_steps": steps,
        "wall_s": wall,
    }


async def _episodes_at(env, url: str, episodes: int, concurrency: int) -> list:
    client = ModelClient("fake-model", base_url=url, timeout=30.0)
    runs = [Episode(env, [LLMAgent(client) for _ in range(env.num_agents)], seed=s) for s in range(episodes)]
    results = await arun_episodes(runs, concurrency=concurrency)
    await client.aclose()
    return results


# The fake server runs in a process of its own, as a real server would: its threads must
# not compete with the harness for this process's interpreter lock.
SERVER = """
import sys
from cube_jax.testing.fake_openai import FakeOpenAI
from cube_jax.testing.sound_model import responder
with FakeOpenAI(responder=responder, latency=float(sys.argv[1])) as server:
    print(server.url, flush=True)
    sys.stdin.read()
    print(server.max_in_flight, flush=True)
"""


def bench_throughput(concurrency: int, episodes: int, latency: float) -> dict:
    env = cube_jax.make("hard")
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(latency)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        t0 = time.perf_counter()
        results = asyncio.run(_episodes_at(env, url, episodes, concurrency))
        wall = time.perf_counter() - t0
    finally:
        out, _ = server.communicate("", timeout=60)
    in_flight = int(out.strip() or 0)
    return {
        "concurrency": concurrency,
        "episodes": episodes,
        "latency_s": latency,
        "wall_s": wall,
        "episodes_per_hour": episodes / wall * 3600,
        "calls": sum(r.model_calls for r in results),
        "max_in_flight": in_flight,
        "success_rate": sum(r.success for r in results) / episodes,
    }


def bench_outcomes(world: str, topology: str, seeds: int) -> dict:
    env = cube_jax.make(n=4) if world == "n4" else cube_jax.make(world)
    model = SoundModel()
    runs = [Episode(env, [LLMAgent(model) for _ in range(env.num_agents)], seed=s, topology=topology)
            for s in range(seeds)]
    results = run_episodes(runs, concurrency=seeds)
    return {
        "world": world,
        "topology": topology,
        "episodes": seeds,
        "blocks_delivered_mean": statistics.mean(r.blocks_delivered for r in results),
        "blocks_total": results[0].blocks_total,
        "success_rate": statistics.mean(r.success for r in results),
        "steps_mean": statistics.mean(r.steps for r in results),
        "model_calls_mean": statistics.mean(r.model_calls for r in results),
    }


def overhead_table(rows) -> str:
    return markdown_table("Harness time per agent decision (model time excluded)", rows,
                          ["n", "grid", "blocks", "decisions", "decision_ms_mean", "decision_ms_p95", "view_ms_per_step",
                           "prompt_chars_mean"])


def throughput_table(rows) -> str:
    latency = rows[0]["latency_s"] if rows else 0
    return markdown_table(f"Episodes per hour, hard, 3 agents, {latency} s per call", rows,
                          ["concurrency", "episodes", "wall_s", "episodes_per_hour", "speedup_vs_c1", "calls",
                           "max_in_flight", "success_rate"])


def outcomes_table(rows) -> str:
    return markdown_table("Sound plans under each topology", rows,
                          ["world", "topology", "episodes", "blocks_delivered_mean", "blocks_total", "success_rate",
                           "steps_mean", "model_calls_mean"])


def render(data: dict) -> str:
    """The tables of a run, as ``docs/llm.md`` shows them between its markers."""
    tables = [overhead_table(data["overhead"]), throughput_table(data["throughput"]), outcomes_table(data["outcomes"])]
    return "\n".join(table.replace("\n## ", "\n#### ", 1) for table in tables)


def _plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ns = [r["n"] for r in rows]
    ax.plot(ns, [r["decision_ms_mean"] for r in rows], marker="o", label="per decision (mean)")
    ax.plot(ns, [r["decision_ms_p95"] for r in rows], marker="s", label="per decision (p95)")
    ax.plot(ns, [r["view_ms_per_step"] for r in rows], marker="^", label="world view (per step)")
    ax.axhline(5.0, color="k", ls="--", lw=0.8, label="5 ms goal")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("n (agents)")
    ax.set_ylabel("ms")
    ax.set_title("Harness time per decision (model time excluded)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer episodes")
    parser.add_argument("--latency", type=float, default=0.5, help="fake server latency per call, s (default 0.5)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "llm_harness.json")
    parser.add_argument("--doc", action="store_true", help="also rewrite the generated tables in docs/llm.md")
    args = parser.parse_args(argv)
    if not args.latency >= 0:
        parser.error("--latency must be >= 0")
    results = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                           "load_average_at_start": os.getloadavg()}}
    ns = [3, 16, 64] if args.quick else [3, 16, 64, 256]
    overhead = []
    for n in ns:
        overhead.append(bench_overhead(n, steps=10 if n >= 64 else 20))
        print(f"  overhead n={n}: {overhead[-1]['decision_ms_mean']:.2f} ms/decision", flush=True)
    results["overhead"] = overhead
    print(overhead_table(overhead))

    plan = [(1, 8), (8, 64), (64, 64)] if not args.quick else [(1, 2), (8, 16)]
    bench_throughput(1, 1, 0.0)  # compiles the world's step before anything is timed
    throughput = []
    for concurrency, episodes in plan:
        throughput.append(bench_throughput(concurrency, episodes, args.latency))
        print(f"  throughput c={concurrency}: {throughput[-1]['episodes_per_hour']:.0f} episodes/h", flush=True)
    base = throughput[0]["wall_s"] / throughput[0]["episodes"]
    for row in throughput:
        row["speedup_vs_c1"] = base / (row["wall_s"] / row["episodes"])
    results["throughput"] = throughput
    print(throughput_table(throughput))

    seeds = 2 if args.quick else 8
    worlds = ["easy", "hard"] if args.quick else ["easy", "hard", "n4"]
    outcomes = []
    for world in worlds:
        for topology in sorted(TOPOLOGIES):
            outcomes.append(bench_outcomes(world, topology, seeds))
            print(f"  outcomes {world} {topology}: {outcomes[-1]['blocks_delivered_mean']:.2f} blocks", flush=True)
    results["outcomes"] = outcomes
    print(outcomes_table(outcomes))

    results["machine"]["load_average_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    _plot(overhead, args.out.with_suffix(".png"))
    print(f"\nwrote {args.out} and {args.out.with_suffix('.png')}")
    if args.doc:
        write_generated(ROOT / "docs" / "llm.md", "benchmarks/llm_harness.py", str(args.out.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
