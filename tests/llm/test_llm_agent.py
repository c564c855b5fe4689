"""Language agents in the episode loop, through the real client and a loopback server.

The fake server (cube_jax/testing/fake_openai.py) speaks the OpenAI protocol; its replies are
scripted or come from the sound-plan model (cube_jax/testing/sound_model.py), which reads the
project's prompts and answers with the heuristic's plans.
"""
from __future__ import annotations

import asyncio
import io
import json
import re

import pytest

import cube_jax
from cube_jax.agents import heuristic_team
from cube_jax.runtime import Episode, arun_episodes
from cube_jax.trace import TraceWriter
from cube_jax.llm import ModelClient, RecordingClient, ReplayClient
from cube_jax.llm.agent import LLMAgent
from cube_jax.llm.prompts import PromptBook, write_default_templates
from cube_jax.testing.fake_openai import FakeOpenAI, closed_port_url
from cube_jax.testing.sound_model import responder
from tests.trace_helpers import per_agent, play

TOPOLOGIES = ["individual", "debate", "centralized", "decentralized"]
KEY = "sk-test-4f9c2b"


@pytest.fixture(scope="module")
def hard():
    return cube_jax.make("hard")


def strip_wall(records):
    return [{k: v for k, v in r.items() if k != "wall"} for r in records]



def llm_team(server, count, **options):
    client = ModelClient("fake-model", base_url=server.url, api_key=KEY, backoff_base=0.0, **options)
    return [LLMAgent(client) for _ in range(count)]


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_sound_replies_deliver_hard_under_every_topology(hard, topology):
    with FakeOpenAI(responder=responder) as server:
        result, records = play(hard, llm_team(server, 3), topology=topology)
    assert result.success and result.blocks_delivered == 3, result
    calls = [r for r in records if r["type"] == "llm"]
    assert calls and all(c["valid"] and not c["fallback"] and c["model"] == "fake-model" for c in calls)
    assert records[0]["agents"]["agent_1"] == {"kind": "llm", "model": "fake-model"}
    messages = [r for r in records if r["type"] == "message"]
    if topology == "individual":
        assert not messages
    else:
        assert messages
    if topology == "centralized":
        # the leader's directives are message turns; its later directives interrupt the followers
        assert {c["purpose"] for c in calls} == {"message", "plan", "interrupt"}
        assert messages[0]["sender"] == "agent_0" and messages[0]["recipients"] == ["agent_1", "agent_2"]
    if topology == "debate":
        assert [(m["sender"], m["recipients"]) for m in messages[:2]] == [("agent_0", ["agent_1", "agent_2"]),
                                                                        ("agent_1", ["agent_2"])]
    # the key went to the server as a bearer token and nowhere into the trace
    assert KEY not in json.dumps(records)
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in server.completions)


def test_a_mixed_team_of_models_and_a_planner(hard):
    with FakeOpenAI(responder=responder, model="model-a") as a, FakeOpenAI(responder=responder, model="model-b") as b:
        agents = [LLMAgent(ModelClient("model-a", base_url=a.url)), heuristic_team(hard)[0],
                  LLMAgent(ModelClient("model-b", base_url=b.url))]
        result, records = play(hard, agents, topology="decentralized")
    assert result.success
    assert records[0]["agents"] == {"agent_0": {"kind": "llm", "model": "model-a"},
                                    "agent_1": {"kind": "heuristic", "model": None},
                                    "agent_2": {"kind": "llm", "model": "model-b"}}
    assert {r["model"] for r in records if r["type"] == "llm" and r["agent"] == "agent_2"} == {"model-b"}
    assert not [r for r in records if r["type"] == "llm" and r["agent"] == "agent_1"]


def test_bad_replies_are_repaired_or_fall_back_and_the_episode_goes_on(hard):
    bad_plan = '{"spec": "push", "plan": "push_block(9, 2)"}'  # no block 9
    script = [
        "I think I will push something.",  # not JSON: repair 1
        bad_plan,  # semantically wrong: repair 2
        '```json\n{"spec": "wait", "plan": "idle(2)"}\n```',  # valid, inside a fence
        "nonsense", "nonsense", "nonsense",  # three bad replies: fallback to idle(1)
    ]
    with FakeOpenAI(replies=script, responder=responder) as server:
        agents = llm_team(server, 1) + heuristic_team(hard)[1:]
        result, records = play(hard, agents)
    calls = [r for r in records if r["type"] == "llm" and r["agent"] == "agent_0"]
    assert [(c["valid"], c["fallback"]) for c in calls[:6]] == [(False, False), (False, False), (True, False),
                                                              (False, False), (False, False), (False, True)]
    assert "unknown block 9" in calls[1]["error"]
    plans = [r for r in records if r["type"] == "plan" and r["agent"] == "agent_0" and r["event"] == "committed"]
    assert (plans[0]["spec"], plans[0]["actions"]) == ("wait", ["idle(2)"])
    assert (plans[1]["spec"], plans[1]["actions"]) == ("fallback(agent_0)", ["idle(1)"])
    # the corrective re-prompt quoted the error to the model
    repair = server.completions[1].body["messages"][-1]["content"]
    assert "plan_check" in repair and "JSON" in repair
    assert result.success  # later replies come from the sound model


def test_a_dead_server_ends_the_episode_as_truncated(hard):
    client = ModelClient("fake-model", base_url=closed_port_url(), max_retries=1, backoff_base=0.0, timeout=2.0)
    result, records = play(hard, [LLMAgent(client) for _ in range(3)])
    assert result.truncated and result.reason.startswith("model server failing (3 calls in a row)")
    assert "connection" in result.reason
    calls = [r for r in records if r["type"] == "llm"]
    assert len(calls) == 3 and all(c["fallback"] and c["attempts"] == 2 for c in calls)


def test_slow_replies_hit_the_wall_clock_limit(hard):
    from cube_jax.runtime import Limits

    with FakeOpenAI(responder=responder, latency=0.3) as server:
        result, _ = play(hard, llm_team(server, 3), limits=Limits(max_wall_s=1.0))
    assert result.truncated and result.reason == "wall-clock limit (1 s) reached"


def test_traces_do_not_depend_on_concurrency(hard):
    async def episodes(concurrency, server):
        client = ModelClient("fake-model", base_url=server.url)
        runs = [Episode(hard, [LLMAgent(client) for _ in range(3)], seed=s, topology="decentralized",
                        trace=TraceWriter(io.StringIO())) for s in range(4)]
        await arun_episodes(runs, concurrency=concurrency)
        await client.aclose()
        return [per_agent([json.loads(x) for x in run.trace._file.getvalue().splitlines()], drop=("wall", "latency_s"))
                for run in runs]

    with FakeOpenAI(responder=responder, latency=0.05) as server:
        one = asyncio.run(episodes(1, server))
        four = asyncio.run(episodes(4, server))
        assert server.max_in_flight >= 4  # the episodes' calls really overlapped
    assert one == four


def test_a_recorded_episode_replays_with_no_server(hard, tmp_path):
    exchanges = tmp_path / "episode.jsonl"
    with FakeOpenAI(responder=responder) as server:
        client = ModelClient("fake-model", base_url=server.url, api_key=KEY)
        agents = [LLMAgent(RecordingClient(client, exchanges, agent=f"agent_{i}")) for i in range(3)]
        _, recorded = play(hard, agents, topology="centralized")
    replayed_agents = [LLMAgent(ReplayClient(exchanges, agent=f"agent_{i}")) for i in range(3)]
    _, replayed = play(hard, replayed_agents, topology="centralized")
    assert per_agent(replayed) == per_agent(recorded)  # latencies come from the recording too
    assert KEY not in exchanges.read_text()


def test_prompts_show_the_world_and_templates_can_be_edited(hard, tmp_path):
    captured = {}

    def remember(request):
        # the three agents ask at once: keep agent_0's first request
        if "You are agent_0," in request["messages"][0]["content"]:
            captured.setdefault("first", request["messages"])
        return responder(request)

    with FakeOpenAI(responder=remember) as server:
        play(hard, llm_team(server, 3))
    system, user = captured["first"][0]["content"], captured["first"][1]["content"]
    assert "You are agent_0, one of the 3 agents." in system and "a team of 3 agents" in system and "col 7" in system
    for name in ("move_to_block(block, face)", "rendezvous(block, face, count, timeout)", "push_block(block, steps)"):
        assert name in system
    assert "- block 0: weight 3, top-left (1, 2), 3 pushes from the goal" in user
    assert "    left face: nobody aligned; needs 3, 3 more" in user
    assert "- agent_0 (you) at (1, 0)" in user and "STEP 0 (at most 100 steps)" in user

    folder = tmp_path / "prompts"
    write_default_templates(folder)
    (folder / "user.j2").write_text("Step {{ t }}. Blocks: {{ blocks | length }}. Reply with JSON.")
    book = PromptBook(folder)
    with FakeOpenAI(responder=remember) as server:
        client = ModelClient("fake-model", base_url=server.url)
        play(hard, [LLMAgent(client, prompts=book) for _ in range(3)])
        assert server.completions[0].body["messages"][1]["content"] == "Step 0. Blocks: 3. Reply with JSON.\n"
    (folder / "user.j2").write_text("{{ no_such_thing }}")
    with pytest.raises(ValueError, match="no_such_thing"):
        with FakeOpenAI(responder=remember) as server:
            play(hard, [LLMAgent(ModelClient("m", base_url=server.url), prompts=PromptBook(folder))
                        for _ in range(3)])


def test_a_language_team_negotiates_with_proposals_and_commitments(hard):
    with FakeOpenAI(responder=responder) as server:
        result, records = play(hard, llm_team(server, 3), topology="negotiation")
        proposal = next(r.body for r in server.completions if "(proposal reply)" in r.body["messages"][1]["content"])
    assert result.success
    purposes = [r["purpose"] for r in records if r["type"] == "llm"]
    assert purposes[:6] == ["proposal"] * 3 + ["commitment"] * 3
    room = next(r for r in records if r["type"] == "negotiation")
    assert room["proposals"] == {"agent_0": 2, "agent_1": 2, "agent_2": 2} == room["allocation"]
    assert proposal["response_format"]["json_schema"]["schema"]["properties"] == {
        "block": {"anyOf": [{"type": "integer", "enum": [0, 1, 2]}, {"type": "null"}]},
        "rationale": {"type": "string", "maxLength": 160}}
    assert "NEGOTIATION ROOM (agent_0, agent_1, agent_2)\nNo proposal yet." in proposal["messages"][1]["content"]


def test_prompts_show_partners_sent_messages_distances_and_no_forbidden_example(hard):
    with FakeOpenAI(responder=responder) as server:
        play(hard, llm_team(server, 3), topology="individual")
        individual = [r.body["messages"] for r in server.completions]
    with FakeOpenAI(responder=responder) as server:
        play(hard, llm_team(server, 3), topology="decentralized")
        decentralized = [r.body["messages"] for r in server.completions]
    system, user = next((m[0]["content"], m[1]["content"]) for m in individual if "- agent_0 (you) at (1, 0)" in m[1]["content"])
    assert '"messages"' not in system and "You send no messages" in system  # no example of a message
    assert "YOUR PARTNERS\n- agent_1: deciding; plan none; doing nothing" in user
    assert "block 2: weight 1, top-left (5, 5), 2 pushes from the goal; you are 8 steps from its left face" in user
    later = [m[1]["content"] for m in decentralized if "MESSAGES YOU SENT" in m[1]["content"]]
    assert later and "I push block" in later[0].split("MESSAGES YOU SENT")[1]
    assert '"messages": [{"to": ["agent_' in decentralized[0][0]["content"]  # allowed: shown
    assert not any(", started)" in m[1]["content"] for m in individual + decentralized)


def test_the_prompt_switches_are_off_by_default_and_recorded_when_on(hard):
    with FakeOpenAI(responder=responder) as server:
        _, plain = play(hard, llm_team(server, 3), topology="individual")
        default_prompts = [r.body["messages"][1]["content"] for r in server.completions]
    with FakeOpenAI(responder=responder) as server:
        client = ModelClient("fake-model", base_url=server.url)
        agents = [LLMAgent(client, strategy_tips=True, feedback=True) for _ in range(3)]
        _, switched = play(hard, agents, topology="individual")
        prompts = [r.body["messages"][1]["content"] for r in server.completions]
    assert plain[0]["agents"]["agent_0"] == {"kind": "llm", "model": "fake-model"}
    assert switched[0]["agents"]["agent_0"] == {"kind": "llm", "model": "fake-model", "strategy_tips": True,
                                                "feedback": True}
    assert not any("STRATEGY TIPS" in p or "COOPERATION CONSTRAINTS" in p for p in default_prompts)
    assert all("1. Communication: announce which block you are targeting and from which side." in p for p in prompts)
    later = [p for p in prompts if "COOPERATION CONSTRAINTS AFTER YOUR LAST STEP" in p]
    assert later and re.search(r"Block \d needs \d agents on its (up|down|left|right) face pushing at the same "
                               r"step\.\n- spatial: \d of \d agents aligned", later[0])


def test_feedback_shows_the_counts_of_the_step_record_of_the_agents_last_step(hard):
    """--feedback (EmCoop's RQ3): the constraints a prompt shows are those of the trace's step
    record for the agent's last step, on the face the agent was aligned with."""
    with FakeOpenAI(responder=responder) as server:
        client = ModelClient("fake-model", base_url=server.url)
        _, records = play(hard, [LLMAgent(client, feedback=True) for _ in range(3)], topology="individual")
        prompts = [r.body["messages"][1]["content"] for r in server.completions]
    steps = {r["t"]: r for r in records if r["type"] == "step"}
    shown = re.compile(r"COOPERATION CONSTRAINTS AFTER YOUR LAST STEP \(t=(\d+), push_block\((\d+), (\w+)\)\)\n"
                       r"Block (\d+) needs (\d+) agents on its (\w+) face pushing at the same step\.\n"
                       r"- spatial: (\d+) of \d+ agents aligned.*\n- temporal: (\d+) of .*\n- participation: (\d+) of")
    checked = 0
    for prompt in prompts:
        m = shown.search(prompt)
        if m is None:
            continue
        t, block, face = int(m[1]), m[4], m[6]
        assert m[2] == block
        step = steps[t]
        assert f"push_block({block}, {m[3]})" in step["symbolic"].values()
        counts = step["tasks"].get(f"{block}:{face}", {"spatial": 0, "temporal": 0, "participation": 0})
        assert (int(m[7]), int(m[8]), int(m[9])) == (counts["spatial"], counts["temporal"], counts["participation"])
        if "required" in counts:
            assert int(m[5]) == counts["required"]
        checked += 1
    assert checked >= 3
