"""The web server without a browser: files it serves, the WebSocket protocol, seats, controls,
leaving, replays, and ``cube-jax serve`` itself."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import cube_jax
from cube_jax import cli
from cube_jax.agents import heuristic_team
from cube_jax.runtime import run_episode
from cube_jax.trace import read_trace, validate_trace
from cube_jax.web import protocol
from cube_jax.web.game import Settings
from cube_jax.web.server import BackgroundServer, check_host, create_app, is_loopback
from cube_jax.testing.fake_openai import FakeOpenAI
from cube_jax.testing.sound_model import responder
from cube_jax.testing.web import get, state, until

ROOT = Path(__file__).resolve().parents[2]


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A folder with one finished heuristic episode on ``easy`` (for the replay routes)."""
    folder = tmp_path_factory.mktemp("recorded")
    env = cube_jax.make("easy")
    run_episode(env, heuristic_team(env), seed=0, trace=folder / "heuristic.jsonl")
    return folder


@pytest.fixture(scope="module")
def play_server(tmp_path_factory, recorded):
    """``easy`` with a person at agent_0 beside a heuristic agent, steps as fast as they come."""
    out = tmp_path_factory.mktemp("play")
    env = cube_jax.make("easy")
    app = create_app(env, Settings(world={"scenario": "easy"}, team="human,heuristic", out=out, speed=None),
                     replays=[recorded])
    with BackgroundServer(app) as server:
        yield server


@pytest.fixture(scope="module")
def watch_server(tmp_path_factory):
    """A heuristic team on ``easy``, started paused."""
    out = tmp_path_factory.mktemp("watch")
    env = cube_jax.make("easy")
    app = create_app(env, Settings(world={"scenario": "easy"}, team="heuristic", out=out, speed=None, paused=True))
    with BackgroundServer(app) as server:
        yield server


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


def receive_until(ws, kind: str, timeout: float = 30.0, **match) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        message = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if message["type"] == kind and all(message.get(k) == v for k, v in match.items()):
            return message


# --- unit parts ------------------------------------------------------------------------------------


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(protocol).failed == 0


def test_only_loopback_hosts_are_served_without_public():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")
    assert check_host("127.0.0.1", public=False) is None
    assert "Add --public" in check_host("0.0.0.0", public=False)
    assert check_host("0.0.0.0", public=True) is None


def test_serve_refuses_a_public_host_without_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["serve", "--host", "0.0.0.0", "--scenario", "easy"])
    assert exit_info.value.code == 2
    assert "--host '0.0.0.0' is not a loopback address" in capsys.readouterr().err


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=64),
                 st.dictionaries(st.sampled_from(["type", "agent", "key", "plan", "speed", "agents", "messages", "id",
                                                  "spec", "x"]),
                                 st.one_of(st.sampled_from(list(protocol.MESSAGE_TYPES)), st.integers(), st.none(),
                                           st.floats(allow_nan=True), st.text(max_size=20),
                                           st.lists(st.text(max_size=8), max_size=3)),
                                 max_size=5).map(json.dumps)))
def test_no_input_makes_the_parser_raise(text):
    message, error = protocol.parse_client_message(text)
    assert (message is None) != (error is None)
    if error is not None:
        assert isinstance(error, str) and 0 < len(error) < 400


# --- files ---------------------------------------------------------------------------------------


def test_the_page_and_its_files_are_served_and_nothing_else(play_server, recorded):
    status, body, headers = get(play_server, "/")
    assert status == 200 and b"<canvas id=\"grid\"" in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert get(play_server, "/static/app.js")[0] == 200 and get(play_server, "/static/style.css")[0] == 200
    for path in ("/static/../pyproject.toml", "/static/%2e%2e/%2e%2e/pyproject.toml", "/static/..%2f__init__.py",
                 "/static//etc/passwd", "/api/trace?name=../../../etc/passwd", "/api/trace?name=/etc/passwd",
                 "/api/trace?name=" + str(recorded / "heuristic.jsonl"), "/api/timeline?name=..%2Fmetrics.json",
                 "/../pyproject.toml"):
        status, body, _ = get(play_server, path)
        assert status == 404, path
        assert b"[project]" not in body and b"root:" not in body
    # a host name that is not this machine's (DNS rebinding) is refused
    assert get(play_server, "/api/state", headers={"Host": "attacker.example"})[0] == 400


def test_traces_are_listed_by_name_and_replayed_with_their_timeline(play_server):
    listing = json.loads(get(play_server, "/api/traces")[1])
    names = [t["name"] for t in listing["traces"]]
    assert "extra/0/heuristic.jsonl" in names
    status, body, _ = get(play_server, "/api/trace?name=extra/0/heuristic.jsonl")
    payload = json.loads(body)
    assert status == 200 and payload["grid_size"] == 8 and payload["grid_inferred"] is False
    assert payload["records"][0]["type"] == "episode" and payload["records"][-1]["reason"] == "all blocks delivered"
    status, png, headers = get(play_server, payload["timeline"])
    assert status == 200 and headers["Content-Type"] == "image/png" and png[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_uploaded_trace_is_checked(play_server, recorded):
    def post(body: bytes):
        request = urllib.request.Request(play_server.url + "/api/replay?name=mine.jsonl", data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    status, payload = post((recorded / "heuristic.jsonl").read_bytes())
    assert status == 200 and payload["name"] == "mine.jsonl" and payload["timeline"].startswith("data:image/png;base64,")
    status, payload = post(b'{"type": "stage"}\n')
    assert status == 422 and payload["error"] == ("not a valid trace: line 1, key 'type': the first record must be "
                                                  "'episode', got 'stage'")
    assert post(b"\xff\xfe")[0] == 422
    # too large: refused from its declared length, before the body is read
    import http.client

    host, port = play_server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest("POST", "/api/replay")
    connection.putheader("Content-Length", str(32 * 1024 * 1024 + 1))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and b"at most 33554432 bytes" in response.read()
    connection.close()


# --- the WebSocket ---------------------------------------------------------------------------------


def test_malformed_messages_get_an_error_reply_and_the_connection_stays(play_server):
    with connect(ws_url(play_server)) as ws:
        welcome = receive_until(ws, "welcome")
        assert welcome["game"]["humans"] == ["agent_0"] and welcome["game"]["grid_size"] == 8
        bad = {
            "not json": "not JSON",
            "[1, 2]": "a message must be a JSON object, got list",
            '{"type": "teleport"}': "unknown message type 'teleport'",
            '{"type": "key", "agent": "agent_0"}': "key: field 'key': Field required",
            '{"type": "key", "agent": "agent_0", "key": "jump"}': "key: field 'key'",
            '{"type": "run", "speed": "4"}': "run: field 'speed'",
            '{"type": "join", "agents": "agent_0"}': "join: field 'agents'",
            '{"type": "plan", "agent": "agent_0", "plan": "idle(1)", "extra": 1}': "Extra inputs are not permitted",
            json.dumps({"type": "plan", "agent": "agent_0", "plan": "x" * 20000}): "at most 16384",
        }
        for text, expected in bad.items():
            ws.send(text)
            reply = receive_until(ws, "error")
            assert expected in reply["error"], (text[:40], reply)
        ws.send(b"\x00\x01")
        assert "binary frames" in receive_until(ws, "error")["error"]
        ws.send(json.dumps({"type": "join", "agents": ["agent_1"], "id": 7}))
        reply = receive_until(ws, "error", id=7)
        assert reply["error"] == "agent_1 is a heuristic agent; only human agents take a person"
        ws.send(json.dumps({"type": "key", "agent": "agent_0", "key": "up", "id": 8}))
        reply = receive_until(ws, "refused", id=8)
        assert "agent_0 is not yours" in reply["error"]
        ws.send(json.dumps({"type": "ping", "id": 9}))
        assert receive_until(ws, "pong", id=9)["id"] == 9


def test_a_page_of_another_site_cannot_connect(play_server):
    with pytest.raises(InvalidStatus):
        with connect(ws_url(play_server), origin="http://attacker.example"):
            pass
    with connect(ws_url(play_server), origin=play_server.url) as ws:
        assert receive_until(ws, "welcome")["type"] == "welcome"


def test_a_person_plays_and_leaving_ends_the_episode(play_server):
    game = state(play_server)["game"]
    with connect(ws_url(play_server)) as ws:
        receive_until(ws, "welcome")
        ws.send(json.dumps({"type": "join", "agents": ["agent_0"], "id": 1}))
        assert receive_until(ws, "joined", id=1)["agents"] == ["agent_0"]
        with connect(ws_url(play_server)) as other:
            receive_until(other, "welcome")
            other.send(json.dumps({"type": "join", "agents": ["agent_0"], "id": 2}))
            assert receive_until(other, "error", id=2)["error"] == "agent_0 already has a person"
        until(lambda: state(play_server)["turns"], what="agent_0's turn")
        start = state(play_server)
        assert start["layout"]["agents"][0] == [2, 0] and start["stages"]["agent_0"] == "R"
        ws.send(json.dumps({"type": "key", "agent": "agent_0", "key": "left", "id": 3}))
        assert "cannot move left: that is the wall" in receive_until(ws, "refused", id=3)["error"]
        ws.send(json.dumps({"type": "key", "agent": "agent_0", "key": "right", "id": 4}))
        accepted = receive_until(ws, "accepted", id=4)
        assert accepted["plan"] == "key: right: move(right, 1)"
        step = receive_until(ws, "record", game=game["id"])
        while step["record"]["type"] != "step":
            step = receive_until(ws, "record", game=game["id"])
        assert step["record"]["agents"][0] == [2, 1]
        until(lambda: state(play_server)["layout"]["agents"][0] == [2, 1], what="the server's state")
    result = until(lambda: state(play_server)["result"], what="the end of the episode")
    assert (result["truncated"], result["reason"]) == (True, "the person at agent_0 left")
    trace = Path(result["trace"])
    assert validate_trace(trace) is None and read_trace(trace)[-1]["reason"] == "the person at agent_0 left"
    metrics = until(lambda: (trace.parent / "metrics.json").exists() and json.loads((trace.parent / "metrics.json").read_text()),
                    what="metrics.json")
    assert metrics["episodes"][0]["pushes"]["agent_0"] == 0 and "workload_balance" in metrics["episodes"][0]
    assert trace.with_suffix(".png").exists()
    # the page's "new episode" starts the next seed
    with connect(ws_url(play_server)) as ws:
        receive_until(ws, "welcome")
        ws.send(json.dumps({"type": "new_episode"}))
        new = receive_until(ws, "game")["game"]
        assert new["seed"] == game["seed"] + 1 and new["id"] == game["id"] + 1 and new["running"]


def test_pause_step_and_run(watch_server):
    with connect(ws_url(watch_server)) as ws:
        welcome = receive_until(ws, "welcome")
        assert welcome["controls"] == {"paused": True, "speed": "max"}
        time.sleep(0.3)
        assert state(watch_server)["t"] == 0  # paused before the first step
        ws.send(json.dumps({"type": "step"}))
        receive_until(ws, "controls")
        until(lambda: state(watch_server)["t"] == 1, what="one step")
        time.sleep(0.3)
        assert state(watch_server)["t"] == 1  # exactly one
        ws.send(json.dumps({"type": "run", "speed": "max"}))
        assert receive_until(ws, "controls")["controls"] == {"paused": False, "speed": "max"}
        ended = receive_until(ws, "ended")
    assert ended["result"]["terminated"] is True and ended["result"]["reason"] == "all blocks delivered"
    assert state(watch_server)["game"]["running"] is False


# --- cube-jax serve ------------------------------------------------------------------------------------


def test_cube_jax_serve_with_a_language_agent_beside_a_person(tmp_path):
    """The command prints its address, serves the page, plays a person beside an LLM agent
    (the loopback fake model answering with sound plans), and stops on Ctrl-C."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test"}
    with FakeOpenAI(responder=responder) as model:
        process = subprocess.Popen(
            [sys.executable, "-m", "cube_jax.cli", "serve", "--scenario", "easy", "--team", "human,llm",
             "--model", "fake-model", "--base-url", model.url, "--port", "0", "--out", str(tmp_path / "run"),
             "--speed", "max"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        try:
            line = process.stdout.readline()
            assert line.startswith("cube-jax serve: http://127.0.0.1:"), line + process.stderr.read()
            url = line.split()[2]
            base = url.rstrip("/")

            class Server:
                pass

            server = Server()
            server.url = base
            until(lambda: b"<canvas" in get(server, "/")[1], timeout=120, what="the page")
            with connect(base.replace("http://", "ws://") + "/ws") as ws:
                welcome = receive_until(ws, "welcome", timeout=120)
                assert welcome["game"]["agents"]["agent_1"] == {"kind": "llm", "model": "fake-model"}
                ws.send(json.dumps({"type": "join", "agents": ["agent_0"], "id": 1}))
                receive_until(ws, "joined", id=1)
                for k in range(2):
                    until(lambda: [t for t in state(server)["turns"] if t["agent"] == "agent_0"], timeout=120,
                          what="agent_0's turn")
                    ws.send(json.dumps({"type": "key", "agent": "agent_0", "key": "down", "id": 10 + k}))
                    receive_until(ws, "accepted", id=10 + k)
                until(lambda: state(server)["t"] >= 2, what="two steps")
            result = until(lambda: state(server)["result"], what="the end of the episode")
            assert result["reason"] == "the person at agent_0 left" and result["model_calls"] >= 1
        finally:
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "outputs in" in out
    trace = tmp_path / "run" / "episode-000000.jsonl"
    records = read_trace(trace)
    assert records[0]["agents"] == {"agent_0": {"kind": "human", "model": None},
                                    "agent_1": {"kind": "llm", "model": "fake-model"}}
    assert any(r["type"] == "llm" and r["valid"] for r in records)
    assert [r["agents"][0] for r in records if r["type"] == "step"][:2] == [[3, 0], [4, 0]]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["team"] == "human,llm"
    assert "sk-test" not in (tmp_path / "run" / "run.json").read_text() + trace.read_text()
