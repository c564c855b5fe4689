"""The loopback OpenAI-compatible test server speaks the real protocol and follows its script.

Checked with the standard library's HTTP client (not the client under test), and its
completions against the openai SDK's own response model.
"""
import doctest
import http.client
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from openai.types.chat import ChatCompletion

import cube_jax.testing.fake_openai as fake_openai
from cube_jax.testing.fake_openai import FakeOpenAI, Reply, closed_port_url

REQUEST = {"model": "tiny-model", "messages": [{"role": "user", "content": "hi"}]}


def post(url, body=REQUEST, headers=None, timeout=10):
    request = urllib.request.Request(
        url + "/chat/completions", method="POST", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.load(err)


def test_docstring_example_runs():
    assert doctest.testmod(fake_openai).failed == 0


def test_a_completion_is_a_valid_openai_chat_completion():
    with FakeOpenAI(replies=[Reply.ok("hello", usage=(30, 4))]) as server:
        status, _, body = post(server.url)
    assert status == 200
    completion = ChatCompletion.model_validate(body)
    assert completion.object == "chat.completion"
    assert completion.model == "tiny-model"
    assert completion.choices[0].message.content == "hello"
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (30, 4, 34)


def test_usage_can_be_left_out():
    with FakeOpenAI(replies=[Reply.ok("x", usage=None)]) as server:
        _, _, body = post(server.url)
    assert "usage" not in body


def test_script_is_served_in_order_then_the_responder_then_a_400():
    seen = []

    def responder(request):
        seen.append(request["messages"][-1]["content"])
        return "from responder"

    with FakeOpenAI(replies=["first", "second"], responder=responder) as server:
        contents = [post(server.url)[2]["choices"][0]["message"]["content"] for _ in range(3)]
        assert server.pending == 0
    assert contents == ["first", "second", "from responder"]
    assert seen == ["hi"]
    with FakeOpenAI(replies=["only"]) as server:
        post(server.url)
        status, _, body = post(server.url)
    assert status == 400
    assert body["error"]["message"] == "fake server: no scripted reply left"


def test_http_errors_carry_openai_error_bodies_and_headers():
    with FakeOpenAI(replies=[Reply.http_error(429, "slow down", retry_after=3), Reply.http_error(503)]) as server:
        status, headers, body = post(server.url)
        assert (status, headers["Retry-After"]) == (429, "3")
        assert body == {"error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": None}}
        status, _, body = post(server.url)
        assert (status, body["error"]["message"]) == (503, "fake error 503")


def test_dropped_connection_sends_nothing():
    with FakeOpenAI(replies=[Reply.dropped(), "after"]) as server:
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            post(server.url)
        assert post(server.url)[2]["choices"][0]["message"]["content"] == "after"


def test_slow_reply_waits_its_delay():
    with FakeOpenAI(replies=[Reply.slow("late", 0.3)]) as server:
        start = time.perf_counter()
        post(server.url)
        assert time.perf_counter() - start >= 0.3


def test_reject_response_format_answers_400_only_when_it_is_sent():
    with FakeOpenAI(responder=lambda request: "fine", reject_response_format=True) as server:
        structured = {**REQUEST, "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {}}}}
        status, _, body = post(server.url, structured)
        assert status == 400 and "response_format" in body["error"]["message"]
        assert post(server.url)[0] == 200


def test_requests_are_recorded_with_headers_and_body():
    with FakeOpenAI(replies=["x"]) as server:
        post(server.url, headers={"Authorization": "Bearer sk-abc"})
        (request,) = server.completions
    assert request.method == "POST" and request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-abc"
    assert request.body == REQUEST


def test_models_endpoint_lists_the_model():
    with FakeOpenAI(model="m-1") as server:
        with urllib.request.urlopen(server.url + "/models", timeout=10) as response:
            body = json.load(response)
    assert body == {"object": "list", "data": [{"id": "m-1", "object": "model", "created": 0, "owned_by": "fake"}]}


def test_fixed_latency_serves_64_requests_at_once():
    results = []
    with FakeOpenAI(responder=lambda request: request["messages"][0]["content"], latency=1.0) as server:
        threads = [
            threading.Thread(target=lambda i=i: results.append(post(server.url, {**REQUEST, "messages": [{"role": "user", "content": str(i)}]})))
            for i in range(64)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert server.max_in_flight == 64
    assert sorted(int(body["choices"][0]["message"]["content"]) for _, _, body in results) == list(range(64))


def test_closed_port_refuses_connections():
    url = closed_port_url()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/models", timeout=5)


def test_stop_does_not_wait_for_a_slow_reply():
    outcome = []

    def ask():
        try:
            outcome.append(post(server.url))
        except (http.client.HTTPException, ConnectionError, urllib.error.URLError) as err:
            outcome.append(err)

    server = FakeOpenAI(replies=[Reply.slow("never", 30)]).start()
    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    while not server.requests:
        time.sleep(0.01)
    start = time.perf_counter()
    server.stop()
    thread.join(timeout=5)
    assert time.perf_counter() - start < 5
    assert len(outcome) == 1 and isinstance(outcome[0], Exception)


def test_reasoning_starved_replies_and_tool_calls_are_valid_openai_completions():
    tools = [{"type": "function", "function": {"name": "plan_reply", "parameters": {"type": "object"}}}]
    with FakeOpenAI(replies=[Reply.thinking('{"a": 1}', "so", tokens=9, usage=(30, 4)), '{"b": 2}'],
                    starve_below=100, reasoning_field="reasoning") as server:
        starved = ChatCompletion.model_validate(post(server.url, {**REQUEST, "max_tokens": 64})[2])
        thought = ChatCompletion.model_validate(post(server.url, {**REQUEST, "max_tokens": 100})[2])
        called = ChatCompletion.model_validate(post(server.url, {**REQUEST, "max_tokens": 100, "tools": tools})[2])
        assert server.pending == 0  # the starved reply used no scripted one
    assert (starved.choices[0].message.content, starved.choices[0].finish_reason) == ("", "length")
    assert starved.usage.completion_tokens_details.reasoning_tokens == 64
    message = thought.choices[0].message
    assert (message.content, message.reasoning) == ('{"a": 1}', "so")
    assert (thought.usage.completion_tokens, thought.usage.completion_tokens_details.reasoning_tokens) == (13, 9)
    (call,) = called.choices[0].message.tool_calls
    assert called.choices[0].message.content is None and called.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, call.function.arguments) == ("plan_reply", '{"b": 2}')


@pytest.mark.parametrize("option, key", [("reject_response_format", "response_format"), ("reject_tools", "tools")])
def test_a_server_can_refuse_response_format_or_tools(option, key):
    with FakeOpenAI(responder=lambda request: "fine", **{option: True}) as server:
        refused = post(server.url, {**REQUEST, key: {}})
        answered = post(server.url)
    assert refused[0] == 400 and key.split("_")[0] in refused[2]["error"]["message"]
    assert answered[0] == 200
