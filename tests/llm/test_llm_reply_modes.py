"""Reply modes: the reply asked for as response_format with the JSON schema, as one forced
function tool whose parameters are that schema, or in the prompt alone; a server that
refuses a mode gets the next one, and the trace says so once per agent. Through the real
client against the loopback fake server of cube_jax/testing/fake_openai.py."""
from __future__ import annotations

import asyncio
import json

import pytest

import cube_jax
from cube_jax import cli
from cube_jax.llm import ModelClient, ReplyOptions, ask, decision_schema
from cube_jax.llm.agent import LLMAgent
from cube_jax.llm.client import refuses_mode
from cube_jax.trace import read_trace
from cube_jax.testing.fake_openai import FakeOpenAI, Reply
from cube_jax.testing.sound_model import ME, responder
from tests.trace_helpers import of, per_agent, play

from tests.llm.test_llm_client import CONTEXT, GOOD, USER, Sleeps


def make_client(url, **options):
    return ModelClient("m", url, api_key="sk-x", sleep=Sleeps(), jitter=0.0, **options)


def run_ask(server, mode, calls=1, **client_options):
    """``calls`` decisions by one agent (one client) in reply mode ``mode``."""
    client = make_client(server.url, **client_options)

    async def go():
        async with client:
            return [await ask(client, USER, "plan", CONTEXT, options=ReplyOptions(reply_mode=mode))
                    for _ in range(calls)]

    return asyncio.run(go()), client


@pytest.fixture(scope="module")
def easy():
    return cube_jax.make("easy")


def speaker(body) -> str:
    """The agent a request speaks for (the prompt marks it "(you)")."""
    return ME.search(next(m["content"] for m in body["messages"] if m["role"] == "user")).group(1)


def kind_of(body) -> str:
    return "schema" if "response_format" in body else "tools" if "tools" in body else "text"


# --- each mode -----------------------------------------------------------------------------------


def test_tools_mode_sends_one_forced_tool_whose_parameters_are_the_decision_schema():
    with FakeOpenAI(replies=[GOOD]) as server:
        ([outcome], _) = run_ask(server, "tools")
        (request,) = server.completions
    body = request.body
    assert "response_format" not in body
    assert body["tools"] == [{"type": "function", "function": {
        "name": "plan_reply", "description": "Give your reply: its arguments are the reply object.",
        "parameters": decision_schema("plan", CONTEXT)}}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "plan_reply"}}
    (call,) = outcome.calls
    assert outcome.reply.spec == "push_block(block#1)"
    assert (call.valid, call.reply_mode, call.finish_reason, call.notice) == (True, "tools", "tool_calls", None)


def test_tools_mode_reads_the_content_of_a_server_that_answers_there():
    with FakeOpenAI(replies=[f"Here: {GOOD}"], tool_calls=False) as server:
        ([outcome], _) = run_ask(server, "tools")
    assert outcome.reply.spec == "push_block(block#1)" and outcome.calls[0].reply_mode == "tools"


def test_text_mode_sends_no_schema_and_reads_json_from_prose():
    with FakeOpenAI(replies=[f"I will push block 1.\n```json\n{GOOD}\n```"]) as server:
        ([outcome], client) = run_ask(server, "text")
        body = server.completions[0].body
    assert kind_of(body) == "text" and outcome.reply.spec == "push_block(block#1)"
    assert outcome.calls[0].reply_mode == "text" and client.refused == {}


# --- refused modes -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode, rejects, then", [
    ("schema", {"reject_response_format": True}, "tools"),
    ("tools", {"reject_tools": True}, "schema"),
    ("schema", {"reject_response_format": True, "reject_tools": True}, "text"),
    ("tools", {"reject_response_format": True, "reject_tools": True}, "text"),
])
def test_a_refused_mode_falls_back_to_the_next_and_is_remembered(mode, rejects, then):
    with FakeOpenAI(responder=lambda request: GOOD, **rejects) as server:
        (first, second), client = run_ask(server, mode, calls=2)
        kinds = [kind_of(r.body) for r in server.completions]
    refused = len(kinds) - 2
    assert kinds[refused - 1:] == [kinds[refused - 1], then, then] and kinds[0] == mode
    assert first.calls[0].attempts == refused + 1 and second.calls[0].attempts == 1
    assert [o.calls[0].reply_mode for o in (first, second)] == [then, then]
    assert all(o.calls[0].valid for o in (first, second)) and client._sleep.delays == []
    note = first.calls[0].notice
    assert note.startswith(f"reply mode {mode} asked; the server refused {mode} (http_400: ")
    assert note.endswith(f"replies use mode {then}")
    assert second.calls[0].notice == note  # every call says it; the trace writes it once per agent


def test_a_llama_cpp_500_about_tools_is_a_refusal_not_a_retry():
    with FakeOpenAI(responder=lambda request: GOOD, reject_tools=True, rejection_status=500) as server:
        ([outcome], client) = run_ask(server, "tools", max_retries=3)
        kinds = [kind_of(r.body) for r in server.completions]
    assert kinds == ["tools", "schema"] and client._sleep.delays == []
    assert client.refused["tools"].startswith("http_500: this model does not support tools")


def test_a_400_about_another_parameter_is_final_and_refuses_no_mode():
    with FakeOpenAI(replies=[Reply.http_error(400, "Unsupported parameter: 'temperature' is not supported")]) as server:
        ([outcome], client) = run_ask(server, "schema", temperature=0.2)
        assert len(server.completions) == 1
    assert outcome.fallback and outcome.calls[0].error.startswith("http_400: Unsupported parameter")
    assert client.refused == {} and client.structured_output is None


@pytest.mark.parametrize("mode, status, text, refused", [
    ("schema", 400, "response_format of type json_schema is not supported", True),
    ("schema", 422, "Structured output is unavailable for this model", True),
    ("schema", 400, "unsupported request", True),
    ("schema", 400, "Unsupported value: 'temperature' must be 1", False),
    ("schema", 503, "response_format backend overloaded", False),
    ("tools", 400, "registry.ollama.ai/library/gemma:2b does not support tools", True),
    ("tools", 500, "tools param requires --jinja flag", True),
    ("tools", 500, "Unsupported param: tools", True),
    ("tools", 500, "unsupported", False),
    ("tools", 400, '"auto" tool choice requires --enable-auto-tool-choice', True),
    ("text", 400, "tools are not supported", False),
])
def test_what_counts_as_a_refused_mode(mode, status, text, refused):
    request = {"model": "m", "messages": [], "temperature": 0.2, "response_format": {}, "tools": []}
    assert refuses_mode(mode, status, text, request) is refused


# --- whole episodes ------------------------------------------------------------------------------


def test_an_episode_says_once_per_agent_that_its_mode_was_refused(easy):
    with FakeOpenAI(responder=responder, reject_tools=True) as server:
        client = ModelClient("m", server.url, max_retries=0)  # one client shared by the team
        agents = [LLMAgent(client, reply=ReplyOptions(reply_mode="tools")) for _ in range(easy.num_agents)]
        result, records = play(easy, agents, max_phases=1)
    notices = of(records, "notice")
    assert sorted(n["agent"] for n in notices) == ["agent_0", "agent_1"]  # easy: two agents
    assert all(n["text"].startswith("reply mode tools asked; the server refused tools (http_400: this model does "
                                    "not support tools)") for n in notices)
    calls = of(records, "llm")
    assert {c["reply_mode"] for c in calls} == {"schema"} and all(c["valid"] for c in calls) and result.success
    for notice in notices:  # each agent's notice comes before its first record in the new mode
        first = next(i for i, r in enumerate(records) if r["type"] == "llm" and r["agent"] == notice["agent"])
        assert records.index(notice) == first - 1
    assert records[0]["agents"]["agent_0"]["reply_mode"] == "tools"


def test_every_reply_mode_plays_an_episode_to_its_end(easy):
    for mode in ("schema", "tools", "text"):
        with FakeOpenAI(responder=responder) as server:
            client = ModelClient("m", server.url, max_retries=0)
            agents = [LLMAgent(client, reply=ReplyOptions(reply_mode=mode)) for _ in range(easy.num_agents)]
            result, records = play(easy, agents, max_phases=1)
            kinds = {kind_of(r.body) for r in server.completions}
        assert kinds == {mode} and result.success and not of(records, "notice")
        assert {c["reply_mode"] for c in of(records, "llm")} == {mode}


# --- the command -------------------------------------------------------------------------------------


def test_reply_modes_per_member_from_a_team_file_and_recorded_runs_replay(tmp_path, capsys):
    recorded, replayed, team = tmp_path / "recorded", tmp_path / "replayed", tmp_path / "team.json"
    team.write_text(json.dumps({"team": [{"kind": "llm", "reply_mode": "text"}, "llm", "heuristic"]}))
    with FakeOpenAI(responder=responder, reject_response_format=True) as server:
        code = cli.main(["llm", "--scenario", "hard", "--team-file", str(team), "--reply-mode", "schema", "--model",
                         "m", "--base-url", server.url, "--episodes", "1", "--record", "--out", str(recorded),
                         "--no-progress", "--no-timelines"])
        kinds = {(speaker(r.body), kind_of(r.body)) for r in server.completions}
    assert code == 0
    # agent_0 asks in text; agent_1 asks with the schema once, is refused, and goes on with tools
    assert kinds == {("agent_0", "text"), ("agent_1", "schema"), ("agent_1", "tools")}
    records = read_trace(recorded / "episode-000000.jsonl")
    assert [n["agent"] for n in of(records, "notice")] == ["agent_1"]
    assert {(c["agent"], c["reply_mode"]) for c in of(records, "llm")} == {("agent_0", "text"), ("agent_1", "tools")}
    assert json.loads((recorded / "run.json").read_text())["models"]["agent_0"]["reply_mode"] == "text"
    metrics = json.loads((recorded / "metrics.json").read_text())["episodes"][0]
    assert metrics["success"] and metrics["invalid_reply_rate"] == 0.0
    assert cli.main(["llm", "--replay", str(recorded), "--out", str(replayed), "--no-progress",
                     "--no-timelines"]) == 0
    assert per_agent(records) == per_agent(read_trace(replayed / "episode-000000.jsonl"))


def test_a_bad_reply_mode_is_an_argument_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        cli.main(["llm", "--scenario", "easy", "--reply-mode", "json", "--out", str(tmp_path / "x")])
    assert info.value.code == 2 and "argument --reply-mode: invalid choice: 'json'" in capsys.readouterr().err
