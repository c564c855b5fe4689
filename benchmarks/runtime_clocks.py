"""What the runtime's clocks and limits say, against loopback model servers.

    python benchmarks/runtime_clocks.py            # every section (a few minutes on 2 CPU cores)
    python benchmarks/runtime_clocks.py --quick    # smaller, for a smoke check

Sections
  clocks      per-agent decision and wait seconds (LLM.md section 6's stage intervals) of the
              team llm,heuristic,llm on "hard" against a server that answers after 1 s.
  fairness    identical language agents under "decentralized" (the sound-plan model, which
              speaks to the team whenever it plans): I-entries per agent and model calls per
              environment step, at n = 4 and 16.
  overhead    harness seconds per decision with an in-process model that answers at once:
              the cognitive phases' wall time divided by the decisions taken in them, at
              n = 4, 16 and 256 (individual topology).
  dead        a closed port at n = 16: model calls made against llm records written (must be 1).

Uses only the package's public names, so the same script measures any version of it. Prints
tables and writes ``benchmarks/results/runtime_clocks.json`` (or ``--out``); with ``--doc``
it rewrites the generated table of ``docs/llm.md``.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import io
import json
import platform
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import cube_jax  # noqa: E402
from cube_jax.agents import heuristic_team  # noqa: E402
from cube_jax.runtime import Episode, Limits  # noqa: E402
from cube_jax.trace import TraceWriter  # noqa: E402
from cube_jax.llm import ModelClient  # noqa: E402
from cube_jax.llm.agent import LLMAgent  # noqa: E402
from cube_jax.names import agent_name  # noqa: E402

from bench_common import markdown_table  # noqa: E402
from cube_jax.testing.fake_openai import FakeOpenAI, closed_port_url  # noqa: E402
from cube_jax.testing.sound_model import SoundModel, responder  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "runtime_clocks.json"


class Counting:
    """A chat model that counts the calls started through it."""

    def __init__(self, inner):
        self.inner, self.model, self.started = inner, inner.model, 0

    async def complete(self, *args, **kwargs):
        self.started += 1
        return await self.inner.complete(*args, **kwargs)

    async def aclose(self):
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


def play(env, agents, seed=0, **options):
    buffer = io.StringIO()
    episode = Episode(env, agents, seed=seed, trace=TraceWriter(buffer), **options)
    phases = wrap_phases(episode)

    async def run():
        try:
            return await episode.run()
        finally:
            for agent in agents:
                await agent.aclose()

    result = asyncio.run(run())
    return result, [json.loads(line) for line in buffer.getvalue().splitlines()], phases


def wrap_phases(episode):
    """Times every call of the topology's orchestration methods (the cognitive phases)."""
    seconds = []
    for name in ("deliberate", "resolve_interrupts"):
        method = getattr(episode.topology, name, None)
        if method is None:
            continue

        async def timed(*args, _method=method, **kwargs):
            t0 = time.perf_counter()
            try:
                return await _method(*args, **kwargs)
            finally:
                seconds.append(time.perf_counter() - t0)

        setattr(episode.topology, name, timed)
    return seconds


def stage_seconds(records):
    """agent -> stage -> seconds (a stage lasts to the agent's next stage record or the end)."""
    spent = collections.defaultdict(collections.Counter)
    last = {}
    for r in records:
        if r["type"] == "stage":
            if r["agent"] in last:
                stage, wall = last[r["agent"]]
                spent[r["agent"]][stage] += r["wall"] - wall
            last[r["agent"]] = (r["stage"], r["wall"])
    end = records[-1]["wall"]
    for agent, (stage, wall) in last.items():
        spent[agent][stage] += end - wall
    return spent


def bench_clocks(steps: int) -> dict:
    env = cube_jax.make("hard")
    out = {}
    for latency in (0.0, 1.0):  # the first episode pays for first uses
        with FakeOpenAI(responder=responder, latency=latency) as server:
            client = ModelClient("fake-model", base_url=server.url, timeout=30.0)
            agents = [LLMAgent(client), heuristic_team(env)[1], LLMAgent(client)]
            _, records, _ = play(env, agents, limits=Limits(max_steps=steps))
    spent = stage_seconds(records)
    for agent, kind in zip(("agent_0", "agent_1", "agent_2"), ("llm", "heuristic", "llm")):
        out[agent] = {"kind": kind, "decision_s": round(spent[agent]["R"] + spent[agent]["I"], 3),
                      "wait_s": round(spent[agent]["W"], 3)}
    return {"steps": steps, "agents": out}


def bench_fairness(n: int, steps: int) -> dict:
    env = cube_jax.make(n=n, max_steps=steps)
    with FakeOpenAI(responder=responder) as server:
        client = ModelClient("fake-model", base_url=server.url, timeout=30.0)
        result, records, _ = play(env, [LLMAgent(client) for _ in range(n)], topology="decentralized",
                                  limits=Limits(max_steps=steps))
    entries = collections.Counter(r["agent"] for r in records if r["type"] == "stage" and r["stage"] == "I")
    counts = [entries[agent_name(i)] for i in range(n)]
    calls = sum(r["type"] == "llm" for r in records)
    spread = round(max(counts) / min(counts), 3) if min(counts) > 0 else None  # None: someone never entered I
    return {"n": n, "steps": result.steps, "i_entries": counts, "i_entries_max_over_min": spread, "calls": calls,
            "calls_per_step": round(calls / max(result.steps, 1), 2)}


def bench_overhead(n: int, steps: int) -> dict:
    env = cube_jax.make(n=n)
    play(env, [LLMAgent(SoundModel()) for _ in range(n)], seed=1, limits=Limits(max_steps=2))  # compile
    _, records, phases = play(env, [LLMAgent(SoundModel()) for _ in range(n)], limits=Limits(max_steps=steps))
    decisions = sum(r["type"] == "plan" and r["event"] in ("committed", "resumed") for r in records)
    return {"n": n, "decisions": decisions, "phase_s": round(sum(phases), 4),
            "ms_per_decision": round(1000 * sum(phases) / max(decisions, 1), 3)}


def bench_dead(n: int) -> dict:
    env = cube_jax.make(n=n)
    clients = [Counting(ModelClient("fake-model", base_url=closed_port_url(), max_retries=0, timeout=2.0))
               for _ in range(n)]
    result, records, _ = play(env, [LLMAgent(c) for c in clients])
    made = sum(c.started for c in clients)
    recorded = sum(r["type"] == "llm" for r in records)
    return {"n": n, "calls_made": made, "llm_records": recorded, "ratio": round(recorded / max(made, 1), 3),
            "reason": result.reason}


def render(data: dict) -> str:
    """The Markdown tables of a run (the block ``docs/llm.md`` shows between its markers)."""
    steps, dead = data["clocks"]["steps"], data["dead"]
    tables = [
        markdown_table(f"Team llm,heuristic,llm on hard, server answering after 1 s ({steps} steps)",
                       [{"agent": a, **v} for a, v in data["clocks"]["agents"].items()],
                       ["agent", "kind", "decision_s", "wait_s"]),
        markdown_table("Identical language agents under decentralized (sound-plan model, loopback server)",
                       [{**f, "i_entries": " ".join(map(str, f["i_entries"]))} for f in data["fairness"]],
                       ["n", "steps", "i_entries", "i_entries_max_over_min", "calls_per_step"]),
        markdown_table("Harness time per decision (in-process model answering at once, individual)",
                       data["overhead"], ["n", "decisions", "ms_per_decision"]),
        markdown_table("A closed port", [dead], ["n", "calls_made", "llm_records", "ratio", "reason"]),
    ]
    return "\n".join(table.replace("\n## ", "\n#### ", 1) for table in tables)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer steps, for a smoke check")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the JSON to write (default {RESULTS})")
    parser.add_argument("--doc", action="store_true", help="also rewrite the generated table in docs/llm.md")
    args = parser.parse_args(argv)
    steps = 4 if args.quick else 25
    data = {
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                             capture_output=True).stdout.strip()},
        "clocks": bench_clocks(3),
    }
    data["fairness"] = [bench_fairness(4, 4 * steps), bench_fairness(16, 2 * steps)]
    data["overhead"] = [bench_overhead(n, 2 if args.quick else 4) for n in (4, 16, 256)]
    data["dead"] = bench_dead(16)
    print(render(data))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    if args.doc:
        from bench_common import write_generated

        write_generated(ROOT / "docs" / "llm.md", "benchmarks/runtime_clocks.py",
                        str(args.out.relative_to(ROOT)))


if __name__ == "__main__":
    main()
