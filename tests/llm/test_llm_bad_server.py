"""Servers that answer badly: every case is recorded in the trace, handled as LLM.md section 4
says, and none ends the run (the loopback fake server, cube_jax/testing/fake_openai.py)."""
from __future__ import annotations

import io
import json

import pytest

import cube_jax
from cube_jax.runtime import run_episode
from cube_jax.trace import TraceWriter, validate_trace
from cube_jax.llm import ModelClient
from cube_jax.llm.agent import LLMAgent
from cube_jax.testing.fake_openai import FakeOpenAI, Reply
from cube_jax.testing.sound_model import responder

SOUND_PLAN = json.dumps({"spec": "push_block(block#0)", "plan": [{"action": "idle", "args": {"steps": 2}}]})


@pytest.fixture(scope="module")
def easy():
    return cube_jax.make("easy")


def play(env, server, **options):
    client = ModelClient("fake-model", base_url=server.url, max_retries=0, backoff_base=0.0)
    buffer = io.StringIO()
    result = run_episode(env, [LLMAgent(client, **options) for _ in range(env.num_agents)], seed=0,
                         trace=TraceWriter(buffer), max_phases=1)
    text = buffer.getvalue()
    assert validate_trace(io.StringIO(text)) is None, validate_trace(io.StringIO(text))
    records = [json.loads(line) for line in text.splitlines()]
    return result, [r for r in records if r["type"] == "llm"], records


def test_a_reply_body_that_is_not_json_is_a_failed_call_and_the_agent_falls_back(easy):
    with FakeOpenAI(replies=[Reply.not_json()], responder=responder) as server:
        result, calls, records = play(easy, server)
    failed = [c for c in calls if c["error"]]
    assert len(failed) == 1, failed  # the first request to arrive got the bad reply, whichever agent sent it
    first = failed[0]
    assert first["valid"] is False and first["fallback"] is True
    assert first["error"].startswith(("bad_response", "client")), first["error"]
    fallback = [r for r in records if r["type"] == "plan" and r.get("fallback")]
    assert fallback and fallback[0]["spec"].startswith("fallback(agent_")
    assert records[-1]["type"] == "end" and result.success  # the episode went on and delivered every block


def test_an_empty_choice_list_is_a_bad_response(easy):
    with FakeOpenAI(replies=[Reply.empty_choices()], responder=responder) as server:
        result, calls, records = play(easy, server)
    failed = [c for c in calls if c["error"]]
    assert len(failed) == 1, failed
    assert failed[0]["error"].startswith("bad_response: the reply has no choices"), failed[0]["error"]
    assert failed[0]["fallback"] is True
    assert result.success


def test_a_reply_cut_at_the_token_limit_is_repaired_with_a_hint(easy):
    cut = '{"reasoning": "I will push block 0 because it is the closest to the goal and'
    with FakeOpenAI(replies=[Reply.cut_off(cut)], responder=responder) as server:
        result, calls, records = play(easy, server)
        repairs = [r.body["messages"] for r in server.completions if len(r.body["messages"]) == 4]
    cut_calls = [c for c in calls if not c["valid"]]
    assert len(cut_calls) == 1 and cut_calls[0]["fallback"] is False
    assert "cut off by the token limit" in cut_calls[0]["error"]
    assert len(repairs) == 1 and repairs[0][2] == {"role": "assistant", "content": cut}
    assert repairs[0][3]["content"].endswith("Your reply was cut off by the token limit: keep the reasoning short.")
    same_agent = [c for c in calls if c["agent"] == cut_calls[0]["agent"]]
    assert same_agent[1]["valid"] is True  # the repair worked
    assert result.success


def test_a_server_that_rejects_response_format_is_asked_without_it_and_the_calls_count_it(easy):
    with FakeOpenAI(responder=responder, reject_response_format=True) as server:
        result, calls, records = play(easy, server)
        bodies = [r.body for r in server.completions]
    assert "response_format" in bodies[0] and "response_format" not in bodies[-1]
    rejected = sum("response_format" in b for b in bodies)
    # each rejected request is one more attempt of its call; later calls go without at once
    assert sum(c["attempts"] for c in calls) == len(bodies) == len(calls) + rejected
    assert all(c["valid"] for c in calls) and calls[-1]["attempts"] == 1
    assert result.success


def test_every_request_carries_the_schema_built_for_its_decision(easy):
    with FakeOpenAI(responder=responder) as server:
        play(easy, server)
        schema = server.completions[0].body["response_format"]["json_schema"]["schema"]
    assert "messages" not in schema["properties"]  # individual: no messages at all
    assert schema["additionalProperties"] is False
    assert schema["properties"]["spec"]["enum"] == ["push_block(block#0)", "push_block(block#1)",
                                                    "push_block(block#2)", "idle"]
    action = schema["properties"]["plan"]["items"]["anyOf"][2]["properties"]  # move_to_block
    assert action["args"]["properties"] == {"block": {"type": "integer", "enum": [0, 1, 2]},
                                            "face": {"type": "string", "enum": ["up", "down", "left", "right"]}}
    assert schema["properties"]["reasoning"]["maxLength"] == 200


def test_the_plain_schema_is_the_purpose_s_general_one(easy):
    with FakeOpenAI(responder=responder) as server:
        _, _, records = play(easy, server, schema_kind="plain")
        schema = server.completions[0].body["response_format"]["json_schema"]["schema"]
    assert "messages" in schema["properties"] and "enum" not in schema["properties"]["spec"]
    assert records[0]["agents"]["agent_0"]["reply_schema"] == "plain"
