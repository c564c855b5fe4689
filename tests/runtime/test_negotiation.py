"""DR. WELL's negotiation on CUBE (LLM.md section 3.1): rooms, quorum, the negotiating planner.

Every trace here is checked against the room rules a reader of the `negotiation` records
relies on: allocations only under quorum, only agents in R or I in a room, no environment
step while a room is open, proposals and commitments the only messages.
"""
from __future__ import annotations

import io
import json

import pytest

import cube_jax
from cube_jax.agents import Agent, Decision, NegotiatorAgent, Plan, Purpose, ScriptedAgent, negotiator_team
from cube_jax.runtime import Episode, Limits, run_episodes
from cube_jax.trace import TraceWriter
from cube_jax.runtime import make_topology
from cube_jax.symbolic import parse_plan
from cube_jax.trace import read_trace
from cube_jax.worldmodel import WorldModel
from tests.trace_helpers import of
from tests.trace_helpers import play as play_traced


@pytest.fixture(scope="module")
def hard():
    return cube_jax.make("hard")


def play(env, agents, seed=0, **options):
    return play_traced(env, agents, seed, **{"topology": "negotiation", **options})



def check_room_rules(records):
    """The rules every negotiation trace keeps (LLM.md section 3.1)."""
    weights = {j: w for j, (_, _, w, _) in enumerate(records[0]["layout"]["blocks"])}
    stage, spec = {}, {}
    last_step_index = -1
    room_opened = None
    for index, r in enumerate(records):
        if r["type"] == "stage":
            stage[r["agent"]] = r["stage"]
        elif r["type"] == "plan" and r["event"] in ("committed", "resumed"):
            spec[r["agent"]] = r["spec"]
        elif r["type"] == "step":
            assert room_opened is None, f"the world stepped at t={r['t']} while a room was open"
            last_step_index = index
        elif r["type"] == "message":
            assert r.get("kind") in ("proposal", "commitment"), r
            if room_opened is None:
                room_opened = index
        elif r["type"] == "negotiation":
            room = r["room"]
            # only agents in R or I sit in a room
            assert all(stage[name] in ("R", "I") for name in room), (r, {n: stage[n] for n in room})
            executing = {}
            for name, s in spec.items():
                if name not in room and stage.get(name) in ("W", "X") and s.startswith("push_block(block#"):
                    block = int(s[len("push_block(block#"):-1])
                    executing[block] = executing.get(block, 0) + 1
            for block in set(r["allocation"].values()):
                committed = sum(1 for b in r["allocation"].values() if b == block)
                assert committed + executing.get(block, 0) >= weights[block], (r, executing)
            for block in r["quorum_failed"]:
                committed = sum(1 for b in r["commitments"].values() if b == block)
                assert committed + executing.get(block, 0) < weights[block]
                assert block not in r["allocation"].values()
            room_opened = None
    assert room_opened is None
    return last_step_index


@pytest.mark.parametrize("world", ["hard", "n4"])
def test_negotiators_deliver_every_block_under_the_room_rules(world):
    env = cube_jax.make("hard") if world == "hard" else cube_jax.make(n=4)
    result, records = play(env, negotiator_team(env))
    assert result.success
    rooms = of(records, "negotiation")
    assert rooms and rooms[0]["t"] == 0 and rooms[0]["room"] == [f"agent_{i}" for i in range(env.num_agents)]
    check_room_rules(records)
    # one proposal and one commitment per member of each room, and their model-free purposes
    assert len(of(records, "message", kind="proposal")) == sum(len(r["room"]) for r in rooms)
    assert len(of(records, "message", kind="commitment")) == sum(len(r["room"]) for r in rooms)
    # every allocated member then plans for its block
    for room in rooms:
        for name, block in room["allocation"].items():
            plans = [p for p in of(records, "plan", agent=name, event="committed") if p["t"] == room["t"]]
            assert plans[-1]["spec"] == f"push_block(block#{block})"


def test_quorum_failure_makes_members_wait_and_rejoin(hard):
    # hard: blocks 0, 1, 2 of weights 3, 2, 1. Everyone commits to block 0 except agent_2.
    def chooser(block_of):
        def script(ctx):
            if ctx.purpose in (Purpose.PROPOSAL, Purpose.COMMITMENT):
                return Decision(block=block_of(ctx), rationale="scripted")
            if ctx.purpose == Purpose.INTERRUPT:
                return Decision(resume=True)
            b = ctx.negotiation.allocation
            return Decision(plan=Plan(f"push_block(block#{b})", tuple(parse_plan(f"move_to_block({b}, left)"))))
        return ScriptedAgent(script)

    agents = [chooser(lambda ctx: 0), chooser(lambda ctx: 0), chooser(lambda ctx: None)]
    _, records = play(hard, agents, limits=Limits(max_steps=5))
    first = of(records, "negotiation")[0]
    assert first["commitments"] == {"agent_0": 0, "agent_1": 0, "agent_2": None}
    assert first["allocation"] == {} and first["quorum_failed"] == [0]
    commits = {p["agent"]: p for p in of(records, "plan", event="committed") if p["t"] == 0}
    assert commits["agent_0"]["spec"] == "quorum_wait(block#0)" and commits["agent_0"]["actions"] == [
        "wait_agents(3, 3)"]
    assert commits["agent_2"]["spec"] == "no_task(agent_2)" and commits["agent_2"]["actions"] == ["idle(1)"]
    # agent_2 idles one step and enters the next room alone
    assert of(records, "negotiation")[1]["room"] == ["agent_2"] and of(records, "negotiation")[1]["t"] == 1
    check_room_rules(records)


class Unruly(Agent):
    """Proposes a block that does not exist, commits to a real one, then plans for another task."""

    kind = "scripted"

    async def decide(self, ctx):
        if ctx.purpose == Purpose.PROPOSAL:
            return Decision(block=7, rationale="no such block")
        if ctx.purpose == Purpose.COMMITMENT:
            return Decision(block=0)
        return Decision(plan=Plan("wait", tuple(parse_plan("idle(1)"))))


def test_bad_proposals_and_plans_are_refused_recorded_and_the_episode_goes_on():
    alone = cube_jax.make(scenario=cube_jax.Scenario(grid_size=8, agents=[(7, 0)], blocks=[(1, 2, 1)], max_steps=6))
    result, records = play(alone, [Unruly()], limits=Limits(max_steps=3))
    room = of(records, "negotiation")[0]
    assert room["proposals"] == {"agent_0": None}  # block 7 refused: it counts as none
    assert room["commitments"] == {"agent_0": 0} and room["allocation"] == {"agent_0": 0}
    plan = of(records, "plan", event="committed")[0]
    assert plan["spec"] == "fallback(agent_0)" and plan["fallback"] is True
    assert "spec must be 'push_block(block#0)'" in plan["note"]
    assert result.steps == 3 and result.truncated


def test_a_room_of_one_and_a_block_nobody_can_reach():
    env = cube_jax.make(scenario=cube_jax.Scenario(grid_size=8, agents=[(7, 0)], blocks=[(1, 2, 2)], max_steps=4))
    committer = ScriptedAgent(lambda ctx: Decision(block=0) if ctx.purpose in (Purpose.PROPOSAL, Purpose.COMMITMENT)
                              else Decision(resume=True))
    result, records = play(env, [committer])
    rooms = of(records, "negotiation")
    assert rooms[0]["room"] == ["agent_0"] and rooms[0]["quorum_failed"] == [0] and rooms[0]["allocation"] == {}
    assert of(records, "plan", event="committed")[0]["actions"] == ["wait_agents(1, 3)"]
    assert result.truncated and result.reason == "max_steps (4) reached"
    check_room_rules(records)


def test_traces_are_the_same_at_every_concurrency(hard):
    def traces(concurrency):
        runs = [Episode(hard, negotiator_team(hard), seed=s, topology="negotiation", trace=TraceWriter(io.StringIO()))
                for s in range(3)]
        run_episodes(runs, concurrency=concurrency)
        return [[{k: v for k, v in json.loads(x).items() if k != "wall"} for x in run.trace._file.getvalue().splitlines()]
                for run in runs]

    assert traces(1) == traces(3)


class Rates:
    """A world model that knows block 0 (weight 3) succeeds and block 2 does not."""

    def best_team_size(self, block):
        return {0: 3, 2: 1}.get(block)

    def success_rate(self, block):
        return {0: 1.0, 1: 1.0, 2: 0.0}.get(block)

    def guidebook(self, live_blocks, t, room_size):
        return f"t={t}, room of {room_size}: block 0 succeeds; block 2 fails"

    def plan_library(self, block):
        return f"block {block}: move_to_block -> rendezvous -> push_block"


def test_negotiators_follow_the_guidebook_and_planners_see_the_plan_library(hard):
    agents = [NegotiatorAgent() for _ in range(3)]
    seen = []

    class Watching(NegotiatorAgent):
        async def decide(self, ctx):
            seen.append(ctx.negotiation)
            return await super().decide(ctx)

    agents[2] = Watching()
    topology = make_topology("negotiation", 3, world_model=Rates())
    _, records = play(hard, agents, topology=topology, limits=Limits(max_steps=2))
    first = of(records, "negotiation")[0]
    # without a world model the heuristic's choice would be block 2 (closest to the goal);
    # block 1 succeeds as often as block 0 but lies behind block 2, out of reach for now
    assert set(first["proposals"].values()) == {0} and first["team_sizes"] == {"0": 3}
    assert seen[0].guidebook == "t=0, room of 3: block 0 succeeds; block 2 fails"
    assert seen[-1].allocation == 0 and seen[-1].plan_library.startswith("block 0:")
    with pytest.raises(ValueError, match="only by the negotiation topology"):
        make_topology("debate", 3, world_model=Rates())


def test_a_run_with_a_world_model_is_the_same_at_every_concurrency(tmp_path):
    from cube_jax import cli

    def run(concurrency):
        out, model = tmp_path / f"c{concurrency}", tmp_path / f"wm{concurrency}.json"
        code = cli.main(["llm", "--scenario", "hard", "--team", "negotiator", "--topology", "negotiation",
                         "--episodes", "3", "--concurrency", str(concurrency), "--world-model", str(model),
                         "--out", str(out), "--no-progress", "--no-timelines"])
        assert code == 0
        traces = [[{k: v for k, v in json.loads(line).items() if k != "wall"}
                   for line in path.read_text().splitlines()] for path in sorted(out.glob("episode-*.jsonl"))]
        return traces, model.read_bytes()

    one, three = run(1), run(3)
    assert one == three
    saved = json.loads(one[1])
    assert len(saved["episodes"]) == 3
    # the same traces again add nothing: the file stays byte for byte the same
    model = WorldModel.load(tmp_path / "wm1.json", env={"scenario": "hard"})
    for path in sorted((tmp_path / "c1").glob("episode-*.jsonl")):
        assert model.update(read_trace(path)) is False


def test_a_world_model_of_another_world_is_refused(tmp_path, capsys):
    from cube_jax import cli

    model = tmp_path / "wm.json"
    assert cli.main(["llm", "--scenario", "easy", "--team", "negotiator", "--topology", "negotiation", "--episodes",
                     "1", "--world-model", str(model), "--out", str(tmp_path / "a"), "--no-progress",
                     "--no-timelines"]) == 0
    with pytest.raises(SystemExit) as exit_:
        cli.main(["llm", "--scenario", "hard", "--team", "negotiator", "--topology", "negotiation", "--world-model",
                  str(model), "--out", str(tmp_path / "b")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("cube-jax llm: error: argument --world-model:") and '"scenario": "easy"' in err
    model.write_text("{not json")
    with pytest.raises(SystemExit):
        cli.main(["llm", "--scenario", "easy", "--team", "negotiator", "--topology", "negotiation", "--world-model",
                  str(model), "--out", str(tmp_path / "c")])
    assert "argument --world-model:" in capsys.readouterr().err


def test_a_language_agent_negotiates_beside_negotiators(hard):
    from cube_jax.llm import ModelClient
    from cube_jax.llm.agent import LLMAgent
    from cube_jax.testing.fake_openai import FakeOpenAI
    from cube_jax.testing.sound_model import responder

    with FakeOpenAI(responder=responder) as server:
        client = ModelClient("fake-model", base_url=server.url)
        result, records = play(hard, [NegotiatorAgent(), LLMAgent(client), NegotiatorAgent()])
    assert result.success
    check_room_rules(records)
    purposes = {r["purpose"] for r in of(records, "llm", agent="agent_1")}
    assert {"proposal", "commitment", "plan"} <= purposes
    assert all(r["valid"] for r in of(records, "llm"))
