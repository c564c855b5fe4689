"""Reasoning models: their reasoning kept apart from the answer and traced, the reasoning
effort, past reasoning sent back, and starved replies (no answer at the token limit) asked
again with a larger budget. Through the real client against the loopback fake server of
cube_jax/testing/fake_openai.py."""
from __future__ import annotations

import asyncio
import json

import pytest

import cube_jax
from cube_jax import cli
from cube_jax.analytics import episode_metrics
from cube_jax.llm import ModelClient, ReplyContext, ReplyOptions, ask
from cube_jax.llm.agent import LLMAgent
from cube_jax.trace import read_trace
from cube_jax.testing.fake_openai import FakeOpenAI, Reply
from cube_jax.testing.sound_model import ME, responder
from tests.trace_helpers import of, per_agent, play

USER = [{"role": "user", "content": "Plan your next move."}]
CONTEXT = ReplyContext(num_agents=3, block_alive=(True, True, False), agent=0,
                       allowed_recipients=frozenset({1, 2}), message_budget=2)
GOOD = '{"spec": "push_block(block#1)", "plan": "move_to_block(1, left); push_block(1, 5)", "messages": []}'
DELIVERED = '{"spec": "push_block(block#2)", "plan": "move_to_block(2, left)"}'  # block 2 is delivered: invalid


def make_client(url, **options):
    return ModelClient("thinker", url, api_key="sk-x", max_retries=0, backoff_base=0.0, **options)


def run_ask(server, options=ReplyOptions(), max_repairs=2, **client_options):
    async def go():
        async with make_client(server.url, **client_options) as client:
            return await ask(client, USER, "plan", CONTEXT, max_repairs=max_repairs, options=options)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def easy():
    return cube_jax.make("easy")


# --- what the client reads and sends ---------------------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_the_client_reads_reasoning_from_either_field_and_its_token_count(field):
    with FakeOpenAI(replies=[Reply.thinking(GOOD, "Block 1 is closest.", tokens=30, reasoning_field=field,
                                            usage=(50, 20))]) as server:
        async def go():
            async with make_client(server.url) as client:
                return await client.complete(USER)

        completion = asyncio.run(go())
    assert (completion.text, completion.reasoning) == (GOOD, "Block 1 is closest.")
    # the reasoning tokens are part of the completion tokens, as OpenAI's usage counts them
    assert (completion.prompt_tokens, completion.completion_tokens, completion.reasoning_tokens) == (50, 50, 30)


def test_reasoning_effort_is_sent_only_when_given():
    with FakeOpenAI(responder=lambda request: GOOD) as server:
        run_ask(server, reasoning_effort="high")
        run_ask(server)
        efforts = [r.body.get("reasoning_effort", "absent") for r in server.completions]
    assert efforts == ["high", "absent"]


def test_an_unknown_reasoning_effort_is_refused_when_the_client_is_built():
    with pytest.raises(ValueError, match="reasoning_effort must be one of low, medium, high"):
        ModelClient("m", "http://127.0.0.1:1/v1", reasoning_effort="extreme")


# --- reasoning in the llm records --------------------------------------------------------------------


def test_think_sections_and_the_reasoning_field_are_the_record_s_reasoning():
    reply = Reply.thinking(f"<think>It must be block 1.</think>\n{GOOD}", "Blocks 0 and 1 are alive.", tokens=12)
    with FakeOpenAI(replies=[reply]) as server:
        outcome = run_ask(server)
    (call,) = outcome.calls
    assert outcome.reply.spec == "push_block(block#1)"
    assert call.reasoning == "Blocks 0 and 1 are alive.\nIt must be block 1."
    assert (call.reasoning_chars, call.reasoning_tokens) == (len(call.reasoning), 12)
    assert (call.valid, call.starved, call.finish_reason, call.reply_mode) == (True, False, "stop", "schema")
    # the transcript keeps the answer alone (reasoning_history none)
    assert outcome.transcript[-1] == {"role": "assistant", "content": GOOD}


def test_a_model_without_reasoning_gives_empty_reasoning_keys():
    with FakeOpenAI(replies=[GOOD]) as server:
        (call,) = run_ask(server).calls
    assert (call.reasoning, call.reasoning_chars, call.reasoning_tokens, call.starved) == (None, 0, 0, False)


def test_drop_reasoning_keeps_only_its_length():
    with FakeOpenAI(replies=[Reply.thinking(GOOD, "x" * 321)]) as server:
        (call,) = run_ask(server, ReplyOptions(drop_reasoning=True)).calls
    assert (call.reasoning, call.reasoning_chars) == (None, 321)


@pytest.mark.parametrize("history, sent_back", [
    ("none", {"role": "assistant", "content": DELIVERED}),
    ("inline", {"role": "assistant", "content": f"<think>\nBlock 2 looks close.\n</think>\n{DELIVERED}"}),
    ("field", {"role": "assistant", "content": DELIVERED, "reasoning_content": "Block 2 looks close."}),
])
def test_past_reasoning_is_sent_back_with_the_reply_as_the_history_mode_says(history, sent_back):
    with FakeOpenAI(replies=[Reply.thinking(DELIVERED, "Block 2 looks close."), GOOD]) as server:
        outcome = run_ask(server, ReplyOptions(reasoning_history=history))
        repair = server.completions[1].body["messages"]
    assert [c.valid for c in outcome.calls] == [False, True]
    assert repair[0] == USER[0] and repair[1] == sent_back and repair[2]["role"] == "user"


def test_resent_reasoning_is_cut_to_its_end():
    thought = "a" * 5000 + "so block 2."
    with FakeOpenAI(replies=[Reply.thinking(DELIVERED, thought), GOOD]) as server:
        run_ask(server, ReplyOptions(reasoning_history="field"))
        resent = server.completions[1].body["messages"][1]["reasoning_content"]
    assert resent.startswith("...") and resent.endswith("so block 2.") and len(resent) == 4003


# --- starved replies ---------------------------------------------------------------------------------


def test_a_starved_reply_is_asked_again_once_with_twice_the_budget_and_costs_no_repair():
    with FakeOpenAI(replies=[GOOD], starve_below=1000) as server:
        outcome = run_ask(server, max_repairs=0, max_tokens=512)
        budgets = [r.body["max_tokens"] for r in server.completions]
        messages = [r.body["messages"] for r in server.completions]
    assert budgets == [512, 1024] and messages[0] == messages[1] == USER
    first, second = outcome.calls
    assert (first.valid, first.starved, first.fallback, first.finish_reason) == (False, True, False, "length")
    assert first.error.startswith("starved: no answer within the token limit (512 completion tokens, 512 of them")
    assert first.reasoning_tokens == 512 and first.reasoning.startswith("Let me weigh")
    assert (second.valid, second.starved) == (True, False)
    assert outcome.reply.spec == "push_block(block#1)" and not outcome.fallback


def test_a_reply_starved_again_falls_back():
    with FakeOpenAI(responder=lambda request: Reply.starved(tokens=request["max_tokens"])) as server:
        outcome = run_ask(server, max_repairs=2, max_tokens=300)
        budgets = [r.body["max_tokens"] for r in server.completions]
    assert budgets == [300, 600]
    assert [(c.starved, c.fallback) for c in outcome.calls] == [(True, False), (True, True)]
    assert outcome.fallback and not outcome.model_failed and outcome.error.startswith("starved")


def test_the_larger_budget_stays_for_the_repairs_of_the_decision():
    with FakeOpenAI(replies=[Reply.starved(), DELIVERED, GOOD]) as server:
        outcome = run_ask(server, max_repairs=1, max_tokens=256)
        budgets = [r.body["max_tokens"] for r in server.completions]
    assert budgets == [256, 512, 512]
    assert [(c.starved, c.valid) for c in outcome.calls] == [(True, False), (False, False), (False, True)]


def test_a_cut_off_reply_with_some_answer_is_not_starved_but_repaired():
    with FakeOpenAI(replies=[Reply.cut_off('{"spec": "push_block(block#1)", "pla'), GOOD]) as server:
        outcome = run_ask(server)
    assert [(c.starved, c.valid) for c in outcome.calls] == [(False, False), (False, True)]


def test_an_unclosed_think_section_at_the_limit_is_starved():
    with FakeOpenAI(replies=[Reply.cut_off("<think>First block 0, then"), GOOD]) as server:
        outcome = run_ask(server, max_tokens=100)
    first = outcome.calls[0]
    assert (first.starved, first.reasoning) == (True, "First block 0, then")


# --- whole episodes ------------------------------------------------------------------------------


def test_an_episode_with_a_reasoning_model_traces_its_reasoning_and_starved_calls(easy):
    with FakeOpenAI(responder=responder, reasoning="I compare the blocks.", reasoning_tokens=40,
                    starve_below=600) as server:
        client = ModelClient("thinker", server.url, max_tokens=512, max_retries=0)
        result, records = play(easy, [LLMAgent(client) for _ in range(easy.num_agents)], max_phases=1)
    calls = of(records, "llm")
    starved = [c for c in calls if c["starved"]]
    answered = [c for c in calls if not c["starved"]]
    assert starved and answered and result.success
    assert all(c["valid"] is False and c["fallback"] is False and c["finish_reason"] == "length" for c in starved)
    assert all(c["valid"] and c["reasoning"] == "I compare the blocks." and c["reasoning_tokens"] == 40
               and c["reply_mode"] == "schema" for c in answered)
    m = episode_metrics(records)
    assert m["starved_rate"] == len(starved) / len(calls) and m["invalid_reply_rate"] == 0.0
    assert m["reasoning_tokens"] == sum(c["reasoning_tokens"] for c in calls) == result.reasoning_tokens
    assert m["fallbacks"] == 0 and m["tokens_per_decision"] > 0


# --- the command -------------------------------------------------------------------------------------


def test_the_reasoning_options_reach_the_requests_traces_and_run_json(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeOpenAI(responder=responder, reasoning="thinking hard", reasoning_tokens=25) as server:
        code = cli.main(["llm", "--scenario", "easy", "--model", "m", "--base-url", server.url, "--episodes", "1",
                         "--reasoning-effort", "low", "--drop-reasoning", "--out", str(out), "--no-progress",
                         "--no-timelines"])
        efforts = {r.body.get("reasoning_effort") for r in server.completions}
    assert code == 0 and efforts == {"low"}
    records = read_trace(out / "episode-000000.jsonl")
    calls = of(records, "llm")
    assert {(c["reasoning"], c["reasoning_chars"], c["reasoning_tokens"]) for c in calls} == {(None, 13, 25)}
    assert records[0]["agents"]["agent_0"]["drop_reasoning"] is True
    run = json.loads((out / "run.json").read_text())
    assert (run["reasoning_effort"], run["drop_reasoning"], run["reasoning_history"]) == ("low", True, "none")
    assert run["models"]["agent_0"]["reasoning_effort"] == "low"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["episodes"][0]["reasoning_tokens"] == 25 * len(calls)
    assert {"starved_rate", "reasoning_tokens", "tokens_per_decision"} <= set(metrics["aggregate"])


def test_each_member_has_its_own_reasoning_settings_from_a_team_file(tmp_path, capsys):
    out, team = tmp_path / "run", tmp_path / "team.json"
    with FakeOpenAI(responder=responder) as server:
        team.write_text(json.dumps({"team": [{"kind": "llm", "reasoning_effort": "high", "reasoning_history": "field"},
                                             "llm", "heuristic"]}))
        code = cli.main(["llm", "--scenario", "hard", "--team-file", str(team), "--model", "m", "--base-url",
                         server.url, "--episodes", "1", "--out", str(out), "--no-progress", "--no-timelines"])
        efforts = {_speaker(r.body): r.body.get("reasoning_effort") for r in server.completions}
    assert code == 0 and efforts == {"agent_0": "high", "agent_1": None}
    agents = read_trace(out / "episode-000000.jsonl")[0]["agents"]
    assert agents["agent_0"] == {"kind": "llm", "model": "m", "reasoning_history": "field"}
    assert agents["agent_1"] == {"kind": "llm", "model": "m"}


def test_record_then_replay_reproduces_starved_retries(tmp_path, capsys):
    recorded, replayed = tmp_path / "recorded", tmp_path / "replayed"
    with FakeOpenAI(responder=responder, reasoning="hmm", starve_below=600) as server:
        code = cli.main(["llm", "--scenario", "easy", "--model", "m", "--base-url", server.url, "--max-tokens", "512",
                         "--reasoning-history", "inline", "--episodes", "1", "--record", "--out", str(recorded),
                         "--no-progress", "--no-timelines"])
    assert code == 0
    assert cli.main(["llm", "--replay", str(recorded), "--out", str(replayed), "--no-progress",
                     "--no-timelines"]) == 0
    a, b = (read_trace(folder / "episode-000000.jsonl") for folder in (recorded, replayed))
    assert any(c["starved"] for c in of(a, "llm"))
    assert per_agent(a) == per_agent(b)


def _speaker(body) -> str:
    """The agent a request speaks for (the prompt marks it "(you)")."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return ME.search(user).group(1)
