"""The model client, the ask-validate-repair loop and record/replay, through the real
openai SDK against the loopback server of cube_jax/testing/fake_openai.py (no other network)."""
import asyncio
import doctest
import json
import logging
import time

import pytest

import cube_jax.llm.client as client_module
from cube_jax.llm import (
    CallRecord,
    ModelClient,
    ModelError,
    PlanReply,
    RecordingClient,
    ReplayClient,
    ReplayMismatch,
    ReplyContext,
    ReplyMessage,
    ask,
    load_exchanges,
    decision_schema,
)
from cube_jax.symbolic import parse_plan
from cube_jax.testing.fake_openai import FakeOpenAI, Reply, closed_port_url

KEY = "sk-test-SECRET-0123456789abcdef"
USER = [{"role": "user", "content": "Plan your next move."}]
CONTEXT = ReplyContext(num_agents=3, block_alive=(True, True, False), agent=0,
                       allowed_recipients=frozenset({1, 2}), message_budget=2)
GOOD = '{"spec": "push_block(block#1)", "plan": "move_to_block(1, left); push_block(1, 5)", "messages": []}'
GOOD_PLAN = tuple(parse_plan("move_to_block(1, left); push_block(1, 5)"))
DELIVERED = '{"spec": "push_block(block#2)", "plan": "move_to_block(2, left)"}'


class Sleeps:
    """An injectable sleep that records the delays and does not wait."""

    def __init__(self):
        self.delays = []

    async def __call__(self, seconds):
        self.delays.append(seconds)


def make_client(url, **options):
    options = {"api_key": KEY, "backoff_base": 0.5, "jitter": 0.0, "sleep": Sleeps(), **options}
    return ModelClient("tiny-model", url, **options)


def complete(client, messages=USER, **kwargs):
    async def go():
        async with client:
            return await client.complete(messages, **kwargs)

    return asyncio.run(go())


def failure(client, messages=USER, **kwargs) -> ModelError:
    with pytest.raises(ModelError) as info:
        complete(client, messages, **kwargs)
    return info.value


def test_docstring_examples_run():
    assert doctest.testmod(client_module).failed == 0


# --- one call ------------------------------------------------------------------------------


def test_success_returns_text_usage_and_one_attempt():
    with FakeOpenAI(replies=[Reply.ok("hello", usage=(40, 7))]) as server:
        client = make_client(server.url, temperature=0.2, max_tokens=64, seed=3)
        result = complete(client, schema={"type": "object"}, schema_name="plan_reply")
        (request,) = server.completions
    assert (result.text, result.prompt_tokens, result.completion_tokens) == ("hello", 40, 7)
    assert (result.attempts, result.model, result.used_schema, result.finish_reason) == (1, "tiny-model", True, "stop")
    assert result.latency_s > 0
    assert request.body["messages"] == USER
    assert (request.body["temperature"], request.body["max_tokens"], request.body["seed"]) == (0.2, 64, 3)
    assert request.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "plan_reply", "schema": {"type": "object"}, "strict": False},
    }


def test_missing_usage_counts_zero_tokens_and_no_schema_sends_no_response_format():
    with FakeOpenAI(replies=[Reply.ok("x", usage=None)]) as server:
        result = complete(make_client(server.url))
        (request,) = server.completions
    assert (result.prompt_tokens, result.completion_tokens, result.used_schema) == (0, 0, False)
    assert "response_format" not in request.body and "temperature" not in request.body


@pytest.mark.parametrize(
    "failures",
    [
        [Reply.http_error(500), Reply.http_error(503)],
        [Reply.http_error(502), Reply.dropped()],
        [Reply.http_error(408), Reply.http_error(429)],
    ],
    ids=["5xx", "5xx-then-dropped", "408-429"],
)
def test_transient_failures_are_retried_with_exponential_backoff(failures):
    with FakeOpenAI(replies=[*failures, "ok"]) as server:
        client = make_client(server.url)
        result = complete(client)
        assert len(server.completions) == 3
    assert (result.text, result.attempts) == ("ok", 3)
    assert client._sleep.delays == [0.5, 1.0]


def test_retry_after_is_honoured_and_capped():
    with FakeOpenAI(replies=[Reply.http_error(429, retry_after=7), Reply.http_error(429, retry_after=100), "ok"]) as server:
        client = make_client(server.url, backoff_cap=20.0)
        assert complete(client).attempts == 3
    assert client._sleep.delays == [7.0, 20.0]


def test_backoff_is_capped_and_jitter_stays_in_bounds():
    with FakeOpenAI(replies=[Reply.http_error(500)] * 5 + ["ok"]) as server:
        client = make_client(server.url, max_retries=5, backoff_base=1.0, backoff_cap=5.0, jitter=0.5)
        assert complete(client).attempts == 6
    low = [1.0, 2.0, 4.0, 5.0, 5.0]
    assert all(lo <= d <= min(5.0, lo * 1.5) for lo, d in zip(low, client._sleep.delays)), client._sleep.delays


def test_a_timeout_is_retried():
    with FakeOpenAI(replies=[Reply.slow("late", 3.0), "on time"]) as server:
        client = make_client(server.url, timeout=0.3)
        result = complete(client)
    assert (result.text, result.attempts) == ("on time", 2)


def test_retries_run_out_with_a_model_error():
    with FakeOpenAI(replies=[Reply.http_error(500, "overloaded")] * 3) as server:
        err = failure(make_client(server.url, max_retries=2))
        assert len(server.completions) == 3
    assert (err.kind, err.message, err.attempts) == ("http_500", "overloaded", 3)
    assert err.latency_s > 0
    assert str(err).startswith("http_500: overloaded (after 3 request(s), ")


def test_timeouts_run_out_with_kind_timeout():
    with FakeOpenAI(replies=[Reply.slow("late", 3.0)] * 2) as server:
        err = failure(make_client(server.url, timeout=0.2, max_retries=1))
    assert (err.kind, err.attempts, err.message) == ("timeout", 2, "no reply within 0.2 s")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_client_errors_are_not_retried(status):
    with FakeOpenAI(replies=[Reply.http_error(status, "no such thing"), "never served"]) as server:
        client = make_client(server.url)
        err = failure(client)
        assert len(server.completions) == 1
    assert (err.kind, err.message, err.attempts) == (f"http_{status}", "no such thing", 1)
    assert client._sleep.delays == []


def test_server_down_is_a_connection_error_after_the_retries():
    client = make_client(closed_port_url(), max_retries=2)
    err = failure(client)
    assert (err.kind, err.attempts) == ("connection", 3)
    assert "Connection" in err.message
    assert client._sleep.delays == [0.5, 1.0]


def test_malformed_base_url_is_refused_when_the_client_is_built():
    with pytest.raises(ValueError, match="base_url must start with http:// or https://"):
        ModelClient("m", "localhost:8000/v1")
    with pytest.raises(ValueError, match="invalid base_url 'http://256.1.1.1:8000/v1'"):
        ModelClient("m", "http://256.1.1.1:8000/v1")


def test_a_server_without_structured_output_is_asked_again_without_it():
    with FakeOpenAI(responder=lambda request: "plain", reject_response_format=True) as server:
        client = make_client(server.url)

        async def two_calls():
            async with client:
                return [await client.complete(USER, schema={"type": "object"}) for _ in range(2)]

        first, second = asyncio.run(two_calls())
        sent = ["response_format" in r.body for r in server.completions]
    assert (first.text, first.attempts, first.used_schema) == ("plain", 2, False)
    assert (second.attempts, second.used_schema) == (1, False)
    assert sent == [True, False, False]
    assert client.structured_output is False
    assert client._sleep.delays == []


def test_a_400_about_something_else_is_final_even_with_a_schema():
    with FakeOpenAI(replies=[Reply.http_error(400, "messages must not be empty")]) as server:
        client = make_client(server.url)
        err = failure(client, schema={"type": "object"})
        assert len(server.completions) == 1
    assert err.kind == "http_400" and client.structured_output is None


def test_structured_output_can_be_switched_off():
    with FakeOpenAI(replies=["x"]) as server:
        result = complete(make_client(server.url, structured_output=False), schema={"type": "object"})
        assert "response_format" not in server.completions[0].body
    assert result.used_schema is False


def test_many_concurrent_requests_share_one_client():
    n, latency = 32, 0.2
    with FakeOpenAI(responder=lambda request: request["messages"][0]["content"], latency=latency) as server:
        client = make_client(server.url)

        async def all_at_once():
            async with client:
                return await asyncio.gather(*(client.complete([{"role": "user", "content": str(i)}]) for i in range(n)))

        start = time.perf_counter()
        results = asyncio.run(all_at_once())
        elapsed = time.perf_counter() - start
        assert server.max_in_flight >= n // 2
    assert [r.text for r in results] == [str(i) for i in range(n)]
    assert all(r.attempts == 1 for r in results)
    assert elapsed < n * latency / 2


def test_the_client_works_from_successive_event_loops():
    with FakeOpenAI(replies=["one", "two"]) as server:
        client = make_client(server.url)
        texts = [asyncio.run(client.complete(USER)).text for _ in range(2)]
    assert texts == ["one", "two"]


# --- the API key -----------------------------------------------------------------------------


def test_the_api_key_goes_only_into_the_bearer_header(caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    echo = f"Incorrect API key provided: {KEY}"
    with FakeOpenAI(replies=["fine", Reply.http_error(500, echo), Reply.http_error(401, echo)]) as server:
        client = make_client(server.url, max_retries=1)
        recorder = RecordingClient(client, tmp_path / "rec.jsonl", agent="agent_0")

        async def calls():
            async with client:
                await recorder.complete(USER)
                with pytest.raises(ModelError) as info:
                    await recorder.complete(USER)
                return info.value

        err = asyncio.run(calls())
        requests = server.completions
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in requests)
    for request in requests:
        others = {k: v for k, v in request.headers.items() if k != "authorization"}
        assert KEY not in request.raw and KEY not in json.dumps(others)
    assert err.kind == "http_401" and err.message == "Incorrect API key provided: ***"
    for text in (repr(client), str(client), repr(vars(client)), repr(recorder), str(err), repr(err), err.message, caplog.text,
                 (tmp_path / "rec.jsonl").read_text()):
        assert KEY not in text
    assert repr(client) == f"ModelClient(model='tiny-model', base_url='{client.base_url}', api_key=<set>)"


def test_the_key_comes_from_the_environment_or_is_a_placeholder(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-777")
    with FakeOpenAI(replies=["a", "b"]) as server:
        complete(ModelClient("m", server.url))
        monkeypatch.delenv("OPENAI_API_KEY")
        client = ModelClient("m", server.url)
        complete(client)
        headers = [r.headers["authorization"] for r in server.completions]
    assert headers == ["Bearer sk-from-env-777", "Bearer not-needed"]
    assert repr(client).endswith("api_key=<none>)")


# --- ask: validate and repair ------------------------------------------------------------------


def run_ask(server, purpose="plan", context=CONTEXT, max_repairs=2, **options):
    client = make_client(server.url, **options)

    async def go():
        async with client:
            return await ask(client, USER, purpose, context, max_repairs=max_repairs)

    return asyncio.run(go())


def test_ask_returns_the_checked_reply_from_a_fenced_reply():
    with FakeOpenAI(replies=[Reply.ok(f"Here is my plan:\n```json\n{GOOD}\n```", usage=(100, 20))]) as server:
        outcome = run_ask(server)
        (request,) = server.completions
    assert outcome.reply == PlanReply("push_block(block#1)", GOOD_PLAN, (), None)
    assert (outcome.fallback, outcome.error, outcome.model_failed) == (False, None, False)
    (call,) = outcome.calls
    assert call == CallRecord("tiny-model", 1, call.latency_s, 100, 20, True, False, None, finish_reason="stop",
                              reply_mode="schema")
    # the schema built for this decision: live blocks only, no messages (CONTEXT allows none)
    assert request.body["response_format"]["json_schema"] == {"name": "plan_reply",
                                                              "schema": decision_schema("plan", CONTEXT), "strict": False}


def test_an_invalid_reply_is_repaired_with_the_error_quoted():
    with FakeOpenAI(replies=[DELIVERED, f"Fixed. {GOOD}"]) as server:
        outcome = run_ask(server)
        second = server.completions[1].body["messages"]
    assert outcome.reply.plan == GOOD_PLAN and not outcome.fallback
    assert [(c.valid, c.fallback) for c in outcome.calls] == [(False, False), (True, False)]
    problem = "plan_check: action 0 argument 'block': move_to_block: block 2 is already delivered"
    assert outcome.calls[0].error == problem
    assert second[:2] == [USER[0], {"role": "assistant", "content": DELIVERED}]
    assert second[2]["role"] == "user"
    assert second[2]["content"].startswith(
        "Your last reply could not be used. Error (plan_check) at action 0, argument 'block': "
        "move_to_block: block 2 is already delivered\n"
    )
    assert [m["role"] for m in outcome.transcript] == ["user", "assistant", "user", "assistant"]


def test_always_invalid_falls_back_after_max_repairs():
    with FakeOpenAI(responder=lambda request: "I would rather not say.") as server:
        outcome = run_ask(server, max_repairs=2)
        assert len(server.completions) == 3
    assert outcome.reply is None and outcome.fallback and not outcome.model_failed
    assert [(c.valid, c.fallback) for c in outcome.calls] == [(False, False), (False, False), (False, True)]
    assert outcome.error == "plan_check: no JSON object found in the reply: 'I would rather not say.'"


def test_no_repairs_means_one_call():
    with FakeOpenAI(responder=lambda request: "{}") as server:
        outcome = run_ask(server, max_repairs=0)
    assert len(outcome.calls) == 1 and outcome.fallback
    assert outcome.error == "plan_check: field 'spec' is missing"


def test_a_cut_off_reply_says_so():
    with FakeOpenAI(replies=[Reply.ok('{"spec": "push_block(block#1)", "pla', finish_reason="length"), GOOD]) as server:
        outcome = run_ask(server)
        repair = server.completions[1].body["messages"][-1]["content"]
    assert outcome.calls[0].error.endswith("(the reply was cut off by the token limit)")
    assert repair.endswith("Your reply was cut off by the token limit: keep the reasoning short.")


def test_a_failing_server_falls_back_at_once_with_the_error_recorded():
    with FakeOpenAI(responder=lambda request: Reply.http_error(503, "down for maintenance")) as server:
        outcome = run_ask(server, max_retries=1)
        assert len(server.completions) == 2
    assert outcome.fallback and outcome.model_failed and outcome.reply is None
    (call,) = outcome.calls
    assert call == CallRecord("tiny-model", 2, call.latency_s, 0, 0, False, True, "http_503: down for maintenance",
                              server_failed=True, reply_mode="schema")
    assert outcome.error == "http_503: down for maintenance"


def test_a_server_that_is_down_falls_back():
    client = make_client(closed_port_url(), max_retries=0)
    outcome = asyncio.run(ask(client, USER, "message", CONTEXT))
    assert outcome.fallback and outcome.model_failed
    assert outcome.calls[0].error.startswith("connection: Connection error")


def test_ask_works_without_structured_output_on_the_server():
    with FakeOpenAI(responder=lambda request: f"```\n{GOOD}\n```", reject_response_format=True) as server:
        outcome = run_ask(server)
    assert outcome.reply.spec == "push_block(block#1)"
    assert outcome.calls[0].attempts == 2 and outcome.calls[0].valid


def test_call_records_have_exactly_the_trace_llm_fields():
    with FakeOpenAI(replies=[GOOD]) as server:
        record = run_ask(server).calls[0].to_dict()
    assert list(record) == ["model", "attempts", "latency_s", "prompt_tokens", "completion_tokens", "valid", "fallback",
                            "error", "reasoning_tokens", "reasoning", "reasoning_chars", "finish_reason", "starved",
                            "reply_mode"]


def test_message_and_interrupt_purposes():
    replies = [
        '{"messages": [{"to": "all", "content": "I take block 0"}]}',
        '{"decision": "replan", "spec": "push_block(block#0)", "plan": [{"action": "push_block", "args": {"block": 0, "steps": 3}}]}',
    ]
    with FakeOpenAI(replies=replies) as server:
        message = run_ask(server, purpose="message")
        interrupt = run_ask(server, purpose="interrupt")
        names = [r.body["response_format"]["json_schema"]["name"] for r in server.completions]
    assert message.reply.messages == (ReplyMessage((1, 2), "I take block 0"),)
    assert (interrupt.reply.decision, [str(a) for a in interrupt.reply.plan]) == ("replan", ["push_block(0, 3)"])
    assert names == ["message_reply", "interrupt_reply"]


# --- record and replay ---------------------------------------------------------------------------


def test_replay_reproduces_recorded_outcomes_without_a_server(tmp_path):
    path = tmp_path / "episode.jsonl"
    script = {
        "agent_0": [DELIVERED, GOOD],
        "agent_1": ["not json at all", "still not", "nope"],
    }

    def responder(request):
        agent = request["messages"][0]["content"].split(":")[0]
        return script[agent].pop(0) if agent in script else Reply.http_error(500, f"{agent} has no script")

    def prompt(agent):
        return [{"role": "user", "content": f"{agent}: plan your next move"}]

    async def episode(clients):
        return await asyncio.gather(
            ask(clients["agent_0"], prompt("agent_0"), "plan", CONTEXT),
            ask(clients["agent_1"], prompt("agent_1"), "plan", CONTEXT),
            ask(clients["agent_2"], prompt("agent_2"), "plan", CONTEXT),
        )

    with FakeOpenAI(responder=responder) as server:
        client = make_client(server.url, max_retries=1)
        recorded = asyncio.run(episode({a: RecordingClient(client, path, agent=a) for a in ("agent_0", "agent_1", "agent_2")}))
        served = len(server.completions)
    assert served == 2 + 3 + 2
    assert [o.fallback for o in recorded] == [False, True, True]
    assert recorded[2].calls[0].error == "http_500: agent_2 has no script"

    exchanges = load_exchanges(path)
    assert {a: len(e) for a, e in exchanges.items()} == {"agent_0": 2, "agent_1": 3, "agent_2": 1}
    assert exchanges["agent_2"][0].error.attempts == 2

    replayers = {a: ReplayClient(path, agent=a) for a in ("agent_0", "agent_1", "agent_2")}
    replayed = asyncio.run(episode(replayers))
    assert replayed == recorded
    assert all(r.remaining == 0 for r in replayers.values())


def test_replay_names_the_call_that_diverged(tmp_path):
    path = tmp_path / "episode.jsonl"
    with FakeOpenAI(replies=[DELIVERED, GOOD]) as server:
        client = make_client(server.url)
        asyncio.run(ask(RecordingClient(client, path, agent="agent_0"), USER, "plan", CONTEXT))

    other_world = ReplyContext(num_agents=3, block_alive=(True, True, True), agent=0)
    # With block 2 alive the schema built for the decision differs, and so does the request.
    with pytest.raises(ReplayMismatch, match="diverged at call 0: the JSON schema differs from the recorded one"):
        asyncio.run(ask(ReplayClient(path, agent="agent_0"), USER, "plan", other_world))

    changed = [{"role": "user", "content": "Plan your next step."}]
    with pytest.raises(ReplayMismatch) as info:
        asyncio.run(ask(ReplayClient(path, agent="agent_0"), changed, "plan", CONTEXT))
    assert str(info.value) == (
        "replay of agent_0 diverged at call 0: message 0 (user) differs at character 15: "
        "now 'Plan your next step.', recorded 'Plan your next move.'"
    )

    replay = ReplayClient(path, agent="agent_0")
    asyncio.run(ask(replay, USER, "plan", CONTEXT))
    with pytest.raises(ReplayMismatch, match="diverged at call 2: the recording holds only 2 call"):
        asyncio.run(ask(replay, USER, "plan", CONTEXT))
    with pytest.raises(ReplayMismatch, match="diverged at call 0: schema 'message_reply' asked, 'plan_reply' recorded"):
        asyncio.run(ask(ReplayClient(path, agent="agent_0"), USER, "message", CONTEXT))


def test_a_damaged_recording_is_reported_with_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"schema": 1, "agent": "agent_0"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 1: not a recorded exchange"):
        ReplayClient(path, agent="agent_0")
