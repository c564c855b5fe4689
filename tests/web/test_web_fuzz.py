"""A person's connection and episode survive a few hundred malformed WebSocket frames.

One server on loopback (``easy``: a person at agent_0 beside a heuristic agent, which waits
for the person at every step). The person joins, then sends bad frames of every kind: deep
nesting, huge, binary, bytes that are not UTF-8, lone surrogates, wrong types, unknown
fields and floods sent without reading. Every frame gets its own error reply, in order, the
connection stays open, the seat stays taken, and the same episode goes on: the next key
moves the agent. The loops are bounded: every frame list below is finite and every read
has a time limit.

Two frames are refused by the WebSocket transport itself, before the app sees them: a text
frame that is not UTF-8 (RFC 6455 says to close with 1007) and one over the transport's
1 MiB limit (1009). A page in a browser cannot send the first. Sent on a second connection,
they close that connection only; the person's episode goes on.
"""
from __future__ import annotations

import json
import random
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import cube_jax
from cube_jax.web import protocol
from cube_jax.web.game import Settings
from cube_jax.web.server import WS_MAX_BYTES, BackgroundServer, create_app
from cube_jax.testing.web import state, until

PERSON = "agent_0"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = cube_jax.make("easy")
    app = create_app(env, Settings(world={"scenario": "easy"}, team="human,heuristic",
                                   out=tmp_path_factory.mktemp("fuzz"), speed=None))
    with BackgroundServer(app) as running:
        yield running


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


def replies(ws, kind: str, count: int, timeout: float = 60.0) -> list:
    """The next ``count`` messages of type ``kind`` (others, such as broadcasts, are skipped)."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        message = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if message["type"] == kind:
            got.append(message)
    return got


def nested(depth: int, open_: str = "[", close: str = "]", inner: str = "1") -> str:
    return open_ * depth + inner + close * depth


def bad_frames() -> list:
    """(frame, words its error must contain): a few hundred, each malformed in its own way."""
    rng = random.Random(0)
    deep = [(nested(d), "nested more than 16 levels") for d in (17, 100, 1200, 5000)]
    deep += [(nested(d, '{"a":', "}"), "nested more than 16 levels") for d in (17, 1200, 2500)]
    deep += [('{"type": "plan", "agent": "agent_0", "plan": ' + nested(1200) + "}", "nested more than 16 levels"),
             (nested(1200, "[", "]", '"' + "]" * 50 + '"'), "nested more than 16 levels")]
    huge = [("x" * (protocol.MAX_FRAME_BYTES + 1), "at most 16384"),
            (json.dumps({"type": "ping", "pad": "a" * 100_000}), "at most 16384"),
            ("[" * 900_000, "at most 16384"),
            ("é" * 9000, "at most 16384")]
    binary = [(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))), "binary frames are not read")
              for _ in range(50)]
    binary += [(b"\xff\xfe\xfd", "binary frames"), (b"\xc3\x28", "binary frames"),
               (json.dumps({"type": "ping"}).encode(), "binary frames")]
    surrogates = [('{"type": "say", "agent": "agent_0", "messages": [{"to": ["all"], "content": "\\ud800"}]}',
                   "lone surrogate"),
                  ('{"type": "plan", "agent": "agent_0", "plan": "idle(1)", "spec": "\\udfff"}', "lone surrogate"),
                  ('{"\\udc80": 1}', "lone surrogate")]
    wrong_types = [
        ('{"type": 5}', "unknown message type"), ('{"type": null}', "unknown message type"),
        ('{"type": ["key"]}', "unknown message type"), ('{"type": {"a": 1}}', "unknown message type"),
        ('{"type": "key", "agent": 0, "key": "up"}', "key: field 'agent'"),
        ('{"type": "key", "agent": "agent_0", "key": 1}', "key: field 'key'"),
        ('{"type": "key", "agent": "agent_00", "key": "up"}', "key: field 'agent'"),
        ('{"type": "run", "speed": "fast"}', "run: field 'speed'"), ('{"type": "run", "speed": 1e999}', "run: field 'speed'"),
        ('{"type": "speed", "speed": NaN}', "speed: field 'speed'"), ('{"type": "speed", "speed": -1}', "speed: field 'speed'"),
        ('{"type": "join", "agents": "agent_0"}', "join: field 'agents'"), ('{"type": "join", "agents": []}', "join: field 'agents'"),
        ('{"type": "plan", "agent": "agent_0", "plan": 7}', "plan: field 'plan'"),
        ('{"type": "plan", "agent": "agent_0", "plan": ""}', "plan: field 'plan'"),
        ('{"type": "say", "agent": "agent_0", "messages": "hi"}', "say: field 'messages'"),
        ('{"type": "ping", "id": "1"}', "ping: field 'id'"), ('{"type": "ping", "id": 1.5}', "ping: field 'id'"),
        ("[]", "must be a JSON object, got list"), ('"key"', "must be a JSON object, got str"),
        ("3", "must be a JSON object, got int"), ("null", "must be a JSON object, got NoneType"),
        ("", "not JSON"), ("{", "not JSON"), ("{'type': 'ping'}", "not JSON"), ('{"type": "ping"} x', "not JSON"),
    ]
    unknown = [(json.dumps({"type": kind, "unknown": 1, **fields}), "Extra inputs are not permitted")
               for kind, fields in [("ping", {}), ("hello", {}), ("pause", {}), ("key", {"agent": PERSON, "key": "up"}),
                                    ("plan", {"agent": PERSON, "plan": "idle(1)"})]]
    flood = [("{" * rng.randrange(1, 16), "not JSON") for _ in range(150)]
    flood += [(json.dumps({"type": rng.choice(["fly", "teleport", "KEY", " key"])}), "unknown message type")
              for _ in range(50)]
    frames = deep + huge + binary + surrogates + wrong_types + unknown
    rng.shuffle(frames)
    return frames + flood


def test_hundreds_of_bad_frames_each_get_an_error_and_the_episode_goes_on(server):
    frames = bad_frames()
    assert len(frames) >= 300
    with connect(ws_url(server), max_size=None) as ws:
        replies(ws, "welcome", 1)
        ws.send(json.dumps({"type": "join", "agents": [PERSON], "id": 1}))
        assert replies(ws, "joined", 1)[0]["agents"] == [PERSON]
        until(lambda: state(server)["turns"], what="the person's turn")
        before = state(server)
        game, where = before["game"]["id"], before["layout"]["agents"][0]

        # first one at a time, reading each reply; then the flood, sent before anything is read
        paced, flood = frames[:-200], frames[-200:]
        for frame, words in paced:
            ws.send(frame)
            error = replies(ws, "error", 1)[0]["error"]
            assert words in error, (repr(frame)[:60], error)
        for frame, _ in flood:
            ws.send(frame)
        errors = replies(ws, "error", len(flood))
        assert [words in e["error"] for (_, words), e in zip(flood, errors)] == [True] * len(flood)

        # the connection is open, the seat held, the same episode waits for the same person
        ws.send(json.dumps({"type": "ping", "id": 2}))
        assert replies(ws, "pong", 1)[0]["id"] == 2
        now = state(server)
        assert now["game"]["id"] == game and now["game"]["running"] and now["result"] is None
        assert now["seats"][PERSON] is not None and now["layout"]["agents"][0] == where
        assert [t["agent"] for t in now["turns"]] == [PERSON]
        ws.send(json.dumps({"type": "key", "agent": PERSON, "key": "right", "id": 3}))
        assert replies(ws, "accepted", 1)[0]["id"] == 3
        until(lambda: state(server)["layout"]["agents"][0] == [where[0], where[1] + 1], what="the move")
        assert state(server)["game"]["id"] == game


@pytest.mark.parametrize("frame, code", [
    (b"\xff\xfe{}", 1007),               # a text frame that is not UTF-8
    ("a" * (WS_MAX_BYTES + 1), 1009),    # over the transport's limit
], ids=["not-utf8-text", "over-transport-limit"])
def test_frames_the_transport_refuses_close_only_their_connection(server, frame, code):
    with connect(ws_url(server)) as person:
        replies(person, "welcome", 1)
        person.send(json.dumps({"type": "join", "agents": [PERSON], "id": 1}))
        replies(person, "joined", 1)
        person.send(json.dumps({"type": "new_episode"}))  # the last test's person left: a fresh episode
        replies(person, "game", 1)
        until(lambda: state(server)["turns"], what="the person's turn")
        game = state(server)["game"]["id"]
        with connect(ws_url(server), max_size=None) as other:
            replies(other, "welcome", 1)
            with pytest.raises(ConnectionClosed) as closed:
                other.send(frame, text=True)
                replies(other, "pong", 1, timeout=30)  # never comes: the transport closes first
            assert closed.value.rcvd is not None and closed.value.rcvd.code == code
        person.send(json.dumps({"type": "ping", "id": 2}))
        assert replies(person, "pong", 1)[0]["id"] == 2
        now = state(server)
        assert now["game"]["id"] == game and now["result"] is None and now["seats"][PERSON] is not None
        assert now["game"]["running"] and [t["agent"] for t in now["turns"]] == [PERSON]
