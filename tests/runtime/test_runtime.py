"""The runtime's clocks, phases, enforced topologies and limits (LLM.md sections 2.1 and 3).

Each test states a rule a user of the traces relies on: each agent's clock is its own,
messages of a phase arrive together (so ids give no advantage), the topology, not the
model, addresses debate proposals and centralized directives, limits are hard and every
model call made is recorded whatever ends the episode.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cube_jax
from cube_jax.agents import Agent, Decision, OutgoingMessage, Plan, Purpose, ScriptedAgent, heuristic_team
from cube_jax.runtime import Limits
from cube_jax.llm import ModelClient
from cube_jax.llm.agent import LLMAgent
from cube_jax.runtime import Episode, make_topology
from cube_jax.symbolic import parse_plan
from tests import interrupts
from cube_jax.testing.fake_openai import FakeOpenAI, closed_port_url
from cube_jax.testing.sound_model import responder
from tests.trace_helpers import of, per_agent, play

ROOT = Path(__file__).resolve().parents[2]

# Five agents in a row in an open 8x8 world with one block far from them.
ROW = cube_jax.Scenario(grid_size=8, agents=[(7, 1), (7, 2), (7, 3), (7, 4), (7, 5)], blocks=[(1, 5, 1)],
                        max_steps=12)


@pytest.fixture(scope="module")
def hard():
    return cube_jax.make("hard")


@pytest.fixture(scope="module")
def row():
    return cube_jax.make(scenario=ROW)




def stage_seconds(records, agent):
    """Seconds ``agent`` spent in each stage (LLM.md section 6's stage intervals)."""
    spent = collections.Counter()
    own = [r for r in records if r["type"] == "stage" and r["agent"] == agent]
    ends = [r["wall"] for r in own[1:]] + [records[-1]["wall"]]
    for record, end in zip(own, ends):
        spent[record["stage"]] += end - record["wall"]
    return spent


def plan(spec, text):
    return Plan(spec, tuple(parse_plan(text)))


# --- clocks -------------------------------------------------------------------------------------


def test_each_agents_clock_is_its_own(hard):
    """A planner beside two language agents whose server takes 1 s decides at once and waits."""
    for latency in (0.0, 1.0):  # the first episode pays for the world's and the templates' first use
        with FakeOpenAI(responder=responder, latency=latency) as server:
            client = ModelClient("fake-model", base_url=server.url, timeout=10.0)
            agents = [LLMAgent(client), heuristic_team(hard)[1], LLMAgent(client)]
            _, records = play(hard, agents, limits=Limits(max_steps=1))
    heuristic, model = stage_seconds(records, "agent_1"), stage_seconds(records, "agent_0")
    assert heuristic["R"] < 0.1
    assert 0.8 < heuristic["W"] < 1.6
    assert model["R"] > 0.9 and model["W"] < 0.3
    walls = [r["wall"] for r in records]
    assert walls == sorted(walls)


class Talker(Agent):
    """Every decision: tell every teammate where it is, then idle for three steps."""

    kind = "scripted"

    def __init__(self, resume: bool = True):
        self.resume = resume

    async def decide(self, ctx):
        if ctx.purpose == Purpose.INTERRUPT and self.resume:
            return Decision(resume=True)
        others = tuple(j for j in range(ctx.num_agents) if j != ctx.agent)
        text = f"I am at {cube_jax.layout(ctx.state)['agents'][ctx.agent]} at t={ctx.t}"
        return Decision(plan=plan("idle", "idle(3)"), messages=(OutgoingMessage(others, text),))


def test_identical_agents_are_interrupted_alike_whatever_their_ids(row):
    env = cube_jax.make(scenario=cube_jax.Scenario(grid_size=8, agents=ROW.agents[:4], blocks=ROW.blocks,
                                                   max_steps=12))
    _, records = play(env, [Talker() for _ in range(4)], topology="decentralized")
    entries = collections.Counter(r["agent"] for r in of(records, "stage", stage="I"))
    counts = [entries[f"agent_{i}"] for i in range(4)]
    assert min(counts) > 0 and max(counts) <= 1.2 * min(counts), counts


def test_messages_of_a_phase_arrive_when_it_ends(row):
    """Two agents that message each other in one phase both hear it when the phase ends,
    interrupted alike, though one committed first."""
    agents = [Talker(resume=True) for _ in range(2)] + [ScriptedAgent([Decision(plan=plan("idle", "idle(9)"))])
                                                        for _ in range(3)]
    _, records = play(row, agents, topology="decentralized", limits=Limits(max_steps=1))
    assert [len(c.inbox) for c in agents[2].contexts[:1]] == [0]
    for name in ("agent_0", "agent_1"):
        own = [(r["t"], r["stage"]) for r in of(records, "stage", agent=name)]
        assert own[:4] == [(0, "R"), (0, "W"), (0, "I"), (0, "W")]


def test_phases_per_step_are_bounded(row):
    """Agents that always answer a message with a message: at most max_phases phases a step."""
    agents = [Talker(resume=False) for _ in range(5)]
    _, records = play(row, agents, topology="decentralized", max_phases=2, limits=Limits(max_steps=3))
    for t in range(3):
        decisions = [r for r in of(records, "stage", t=t) if r["stage"] == "W"]
        assert len(decisions) <= 5 * 2
    # what the last phase said is delivered at the next step, not lost
    sent = sum(len(r["recipients"]) for r in of(records, "message"))
    assert sent > 0
    with pytest.raises(ValueError, match="max_phases"):
        Episode(row, agents, seed=0, max_phases=0)


def renumbered(records, order):
    """``records`` of a world whose seat i holds agent ``order[i]``, with seat i renamed
    ``agent_{order[i]}`` and lists by agent put in that order, as each agent lived it."""
    rename = {f"agent_{seat}": f"agent_{who}" for seat, who in enumerate(order)}
    seat_of = [order.index(who) for who in range(len(order))]
    out = []
    for record in records:
        r = dict(record)
        if r["type"] == "episode":
            r["agents"], r["layout"] = {rename[k]: v for k, v in r["agents"].items()}, None
        if r["type"] == "step":
            for key in ("actions", "symbolic"):
                r[key] = dict(sorted((rename[k], v) for k, v in r[key].items()))
            r["agents"] = [r["agents"][seat] for seat in seat_of]
            r["reward"] = [r["reward"][seat] for seat in seat_of]
        for key in ("agent", "sender"):
            if key in r:
                r[key] = rename[r[key]]
        if "recipients" in r:
            r["recipients"] = sorted(rename[x] for x in r["recipients"])
        out.append(r)
    return per_agent(out)


def test_renumbering_the_agents_renumbers_the_trace_and_nothing_else():
    positions = [(6, 1), (6, 3), (2, 6), (4, 0)]
    order = [2, 0, 3, 1]  # agent i of the second world is agent order[i] of the first

    def world(cells):
        return cube_jax.make(scenario=cube_jax.Scenario(grid_size=8, agents=cells, blocks=[(1, 2, 1)], max_steps=10))

    def team(ids):
        # agent k of the first world walks k+1 steps right and talks to the agent with the next id
        return [Walker(k, ids) for k in ids]

    _, first = play(world(positions), team([0, 1, 2, 3]), topology="decentralized")
    _, second = play(world([positions[k] for k in order]), team(order), topology="decentralized")
    assert renumbered(first, [0, 1, 2, 3]) == renumbered(second, order)


class Walker(Agent):
    """Behaves by who it is (``me``, an id of the first world), whatever seat it is given."""

    kind = "scripted"

    def __init__(self, me, seats):
        self.me, self.seats = me, list(seats)

    async def decide(self, ctx):
        if ctx.purpose == Purpose.INTERRUPT:
            return Decision(resume=True)
        partner = self.seats.index((self.me + 1) % 4)
        moves = " ; ".join(["move(right, 1)"] * (self.me + 1))
        return Decision(plan=plan(f"walk{self.me}", moves), messages=(OutgoingMessage((partner,), f"hi from {self.me}"),))


# --- topologies ---------------------------------------------------------------------------------


def test_debate_proposals_are_built_and_addressed_by_the_runtime(row):
    silent = [ScriptedAgent([Decision(plan=plan(f"rest{i}", "idle(5)"))]) for i in range(5)]
    _, records = play(row, silent, topology="debate", limits=Limits(max_steps=1))
    proposals = of(records, "message")
    assert [(m["sender"], m["recipients"]) for m in proposals] == [
        (f"agent_{i}", [f"agent_{j}" for j in range(i + 1, 5)]) for i in range(4)]
    assert proposals[0]["content"] == "Proposal: rest0: idle(5)"
    assert [m.content for m in silent[4].contexts[0].inbox][-1] == "Proposal: rest3: idle(5)"


def test_a_centralized_directive_reaches_every_follower_and_is_acknowledged(row):
    leader = ScriptedAgent(lambda ctx: Decision(messages=(OutgoingMessage((1,), "everyone: rest"),))
                           if ctx.purpose == Purpose.MESSAGE else Decision(plan=plan("lead", "idle(5)")))
    followers = [ScriptedAgent([Decision(plan=plan("follow", "idle(5)"))]) for _ in range(4)]
    _, records = play(row, [leader, *followers], topology="centralized", limits=Limits(max_steps=1))
    directive, *acks = of(records, "message")
    assert directive["sender"] == "agent_0" and directive["recipients"] == [f"agent_{i}" for i in range(1, 5)]
    assert sorted(a["sender"] for a in acks) == [f"agent_{i}" for i in range(1, 5)]
    assert all(a["recipients"] == ["agent_0"] and a["content"].startswith("Acknowledged directive 0.") for a in acks)
    assert all(f.contexts[0].inbox[0].content == "everyone: rest" for f in followers)
    # the leader plans with every acknowledgement in hand
    assert len([c for c in leader.contexts if c.purpose == Purpose.PLAN][0].inbox) == 4


class SlowLeader(ScriptedAgent):
    async def decide(self, ctx):
        if ctx.purpose == Purpose.MESSAGE:
            import asyncio

            await asyncio.sleep(0.6)
        return await super().decide(ctx)


def test_a_follower_waits_for_the_directive_at_most_directive_timeout(row):
    leader = SlowLeader(lambda ctx: Decision(messages=(OutgoingMessage((1, 2, 3, 4), "go"),))
                        if ctx.purpose == Purpose.MESSAGE else Decision(plan=plan("lead", "idle(5)")))
    followers = [ScriptedAgent([Decision(plan=plan("follow", "idle(5)"))]) for _ in range(4)]
    topology = make_topology("centralized", 5, directive_timeout=0.2)
    _, records = play(row, [leader, *followers], topology=topology, limits=Limits(max_steps=1))
    notes = [p.get("note", "") for p in of(records, "plan", event="committed") if p["agent"] != "agent_0"]
    assert notes == ["planned without the leader's directive (directive_timeout 0.2 s)"] * 4
    # the late directive still reaches them: it interrupts them when the phase ends
    assert all(("I" in [r["stage"] for r in of(records, "stage", agent=f"agent_{i}")]) for i in range(1, 5))
    with pytest.raises(ValueError, match="directive_timeout"):
        make_topology("centralized", 5, directive_timeout=0)


# --- limits -------------------------------------------------------------------------------------


class SlowToStart(Agent):
    kind = "scripted"

    def reset(self, agent, num_agents, seed):
        time.sleep(0.6)  # as a first compile would

    async def decide(self, ctx):
        return Decision(plan=plan("idle", "idle(1)"))


def test_the_wall_clock_limit_counts_from_the_first_decision(hard):
    result, _ = play(hard, [SlowToStart() for _ in range(3)], limits=Limits(max_wall_s=1.0, max_steps=3))
    assert result.reason == "max_steps (3) reached"


def test_a_dead_server_ends_the_episode_after_max_3_n_calls_and_keeps_every_record(row):
    client = ModelClient("fake-model", base_url=closed_port_url(), max_retries=0, backoff_base=0.0, timeout=2.0)
    result, records = play(row, [LLMAgent(client) for _ in range(5)])
    assert result.truncated and result.reason.startswith("model server failing (5 calls in a row)")
    calls = of(records, "llm")
    assert len(calls) == 5 == result.model_calls
    # fallbacks never look like a shared intent
    assert sorted(p["spec"] for p in of(records, "plan", event="committed")) == [f"fallback(agent_{i})"
                                                                                  for i in range(5)]


def test_the_call_limit_is_hard_with_a_real_server(row):
    with FakeOpenAI(responder=lambda body: '{"spec": "wait", "plan": "idle(1)"}') as server:
        client = ModelClient("fake-model", base_url=server.url)
        result, records = play(row, [LLMAgent(client) for _ in range(5)], limits=Limits(max_calls=12))
        requests = len(server.completions)
    assert requests == 12 == len(of(records, "llm")) == result.model_calls
    assert result.reason == "model call limit (12) reached"


CTRL_C_SCRIPT = """
import asyncio, sys
import cube_jax
from cube_jax.runtime import run_episode
from cube_jax.llm.agent import LLMAgent

class Hanging:
    model = "hanging-model"
    async def complete(self, messages, *, schema=None, schema_name="reply"):
        print("calling", flush=True)
        await asyncio.sleep(600)

env = cube_jax.make("easy")
run_episode(env, [LLMAgent(Hanging()), LLMAgent(Hanging())], seed=0, trace=sys.argv[1])
"""


def test_ctrl_c_keeps_the_record_of_every_call_made(tmp_path):
    path = tmp_path / "stopped.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    process = interrupts.start([sys.executable, "-c", CTRL_C_SCRIPT, str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout.readline().strip() == "calling"
    assert process.stdout.readline().strip() == "calling"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode != 0 and "KeyboardInterrupt" in err
    records = [json.loads(line) for line in path.read_text().splitlines()]
    calls = of(records, "llm")
    assert [c["agent"] for c in calls] == ["agent_0", "agent_1"] or [c["agent"] for c in calls] == ["agent_1", "agent_0"]
    assert all(c["error"] == "cancelled before the reply arrived" and not c["valid"] for c in calls)
    assert records[-1]["type"] == "end" and records[-1]["truncated"]
