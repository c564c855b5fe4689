"""A loopback HTTP server that speaks the OpenAI Chat Completions protocol, for tests.

``FakeOpenAI`` serves ``POST /v1/chat/completions`` and ``GET /v1/models`` on 127.0.0.1
(a free port) from a background thread, one thread per connection, so many requests run
at once. What it answers is scripted:

* a queue of items (``replies=[...]`` or :meth:`FakeOpenAI.push`): a string is a
  successful completion with that content; a :class:`Reply` can also be an HTTP error
  (with headers such as ``Retry-After``), a slow reply, or a dropped connection;
* when the queue is empty, ``responder(request_json)`` decides (it returns a string or a
  :class:`Reply`); with neither, the server answers 400 "no scripted reply left".

A :class:`Reply` may also be a body that is not JSON at all (:meth:`Reply.not_json`), a
completion with an empty choice list (:meth:`Reply.empty_choices`) or one cut at the token
limit (:meth:`Reply.cut_off`, ``finish_reason`` ``"length"``).

``latency`` delays every answer (fixed-latency mode); ``reject_response_format=True``
answers 400 to any request carrying ``response_format``, like a server without
structured output, and ``reject_tools=True`` to any carrying ``tools``, like one without
tool calls (``rejection_status`` picks another status: llama.cpp says 500). Every request
received is kept in :attr:`FakeOpenAI.requests` (method, path, headers, parsed body) for
assertions; :attr:`max_in_flight` is the largest number of requests it was handling at once.

It plays a reasoning model too:

* a reply's ``reasoning`` is sent beside the content as ``message.reasoning_content`` (or
  ``message.reasoning``: ``reasoning_field``), and its ``reasoning_tokens`` as
  ``usage.completion_tokens_details.reasoning_tokens`` (counted in the completion tokens);
  ``FakeOpenAI(reasoning=..., reasoning_tokens=...)`` gives every reply that has none its own;
* :meth:`Reply.starved`: an empty content with ``finish_reason: "length"``, the budget spent
  thinking; ``starve_below=N`` answers so every request whose ``max_tokens`` is missing or
  below N (without using the script), so that a retry with a larger budget gets through;
* tool calls: a request with ``tools`` is answered with ``message.tool_calls[0]`` calling
  the first tool with the reply's content as its arguments (``content`` null, finish reason
  ``"tool_calls"``), unless ``tool_calls=False`` (a server that answers in the content) or
  the content is empty.

>>> import json, urllib.request
>>> with FakeOpenAI(replies=['{"ok": true}']) as server:
...     request = urllib.request.Request(server.url + "/chat/completions", method="POST",
...         data=json.dumps({"model": "m", "messages": []}).encode())
...     body = json.load(urllib.request.urlopen(request))
>>> body["choices"][0]["message"]["content"], body["usage"]["total_tokens"]
('{"ok": true}', 17)
"""
from __future__ import annotations

import collections
import dataclasses
import http.server
import itertools
import json
import socket
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Union

DEFAULT_MODEL = "fake-model"


@dataclasses.dataclass(frozen=True)
class Reply:
    """One scripted answer.

    ``content``: the assistant text (status 200). ``status`` other than 200: an error whose
    body is ``{"error": {"message": error, ...}}``. ``headers``: extra response headers.
    ``delay``: seconds to wait before answering (added to the server's ``latency``).
    ``drop``: close the connection without answering. ``usage``: (prompt, completion)
    tokens, or None to leave usage out. ``finish_reason``: as the server reports it.
    """

    content: Optional[str] = None
    status: int = 200
    error: str = ""
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    usage: Optional[tuple] = (12, 5)
    finish_reason: str = "stop"
    raw_body: Optional[str] = None  # a 200 answer whose body is this text, as it is (not JSON, say)
    no_choices: bool = False  # a completion object with an empty choice list
    reasoning: Optional[str] = None  # a reasoning model's thinking, beside the content
    reasoning_field: Optional[str] = None  # "reasoning_content" or "reasoning" (None: the server's)
    reasoning_tokens: Optional[int] = None  # usage.completion_tokens_details.reasoning_tokens

    @classmethod
    def ok(cls, content: str, **kwargs) -> "Reply":
        return cls(content=content, **kwargs)

    @classmethod
    def http_error(cls, status: int, message: str = "", retry_after: Optional[float] = None, **kwargs) -> "Reply":
        headers = dict(kwargs.pop("headers", {}))
        if retry_after is not None:
            headers["Retry-After"] = f"{retry_after:g}"
        return cls(status=status, error=message or f"fake error {status}", headers=headers, **kwargs)

    @classmethod
    def slow(cls, content: str, delay: float, **kwargs) -> "Reply":
        return cls(content=content, delay=delay, **kwargs)

    @classmethod
    def dropped(cls) -> "Reply":
        return cls(drop=True)

    @classmethod
    def not_json(cls, text: str = "<html>502 Bad Gateway</html>") -> "Reply":
        return cls(raw_body=text)

    @classmethod
    def empty_choices(cls) -> "Reply":
        return cls(content="", no_choices=True)

    @classmethod
    def cut_off(cls, content: str) -> "Reply":
        return cls(content=content, finish_reason="length")

    @classmethod
    def thinking(cls, content: str, reasoning: str, *, tokens: Optional[int] = None, **kwargs) -> "Reply":
        """A reasoning model's answer: ``content`` with ``reasoning`` beside it."""
        return cls(content=content, reasoning=reasoning, reasoning_tokens=tokens, **kwargs)

    @classmethod
    def starved(cls, reasoning: str = "Let me weigh every block against every other one, then",
                tokens: int = 512, **kwargs) -> "Reply":
        """A reasoning model that spent its whole budget thinking: no answer, ``length``."""
        return cls(content="", reasoning=reasoning, reasoning_tokens=tokens, finish_reason="length",
                   usage=(12, 0), **kwargs)


Scripted = Union[str, Reply]


@dataclasses.dataclass(frozen=True)
class ReceivedRequest:
    """A request as the server saw it: ``headers`` with lower-case names, ``body`` parsed
    JSON (None for GET or unreadable JSON), ``raw`` the body bytes decoded."""

    method: str
    path: str
    headers: Dict[str, str]
    body: Any
    raw: str


class FakeOpenAI:
    """The server; a context manager (``with FakeOpenAI(...) as server: server.url``)."""

    def __init__(
        self,
        replies: Iterable[Scripted] = (),
        responder: Optional[Callable[[dict], Scripted]] = None,
        *,
        latency: float = 0.0,
        reject_response_format: bool = False,
        reject_tools: bool = False,
        rejection_status: int = 400,
        tool_calls: bool = True,
        reasoning: Optional[str] = None,
        reasoning_field: str = "reasoning_content",
        reasoning_tokens: Optional[int] = None,
        starve_below: Optional[int] = None,
        model: str = DEFAULT_MODEL,
    ):
        self.responder = responder
        self.latency = latency
        self.reject_response_format = reject_response_format
        self.reject_tools = reject_tools
        self.rejection_status = rejection_status
        self.tool_calls = tool_calls
        self.reasoning = reasoning
        self.reasoning_field = reasoning_field
        self.reasoning_tokens = reasoning_tokens
        self.starve_below = starve_below
        self.model = model
        self.requests: List[ReceivedRequest] = []
        self.max_in_flight = 0
        self._script: Deque[Scripted] = collections.deque(replies)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._ids = itertools.count()
        self._stopping = threading.Event()
        self._server: Optional[http.server.ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> "FakeOpenAI":
        handler = type("Handler", (_Handler,), {"fake": self})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
        server.daemon_threads = True
        # The default backlog of 5 refuses bursts of concurrent connections.
        server.request_queue_size = 256
        server.server_bind()
        server.server_activate()
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake server is not running")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """The base URL to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting -------------------------------------------------------------------------

    def push(self, *replies: Scripted) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not served yet."""
        with self._lock:
            return len(self._script)

    @property
    def completions(self) -> List[ReceivedRequest]:
        """The chat completion requests received, in order."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def _next_reply(self, body: dict) -> Reply:
        with self._lock:
            item = self._script.popleft() if self._script else None
        if item is None and self.responder is not None:
            item = self.responder(body)
        if item is None:
            return Reply.http_error(400, "fake server: no scripted reply left")
        return Reply.ok(item) if isinstance(item, str) else item

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def completion_body(self, reply: Reply, request: dict) -> dict:
        """An OpenAI ``chat.completion`` object for a successful ``reply``."""
        message: Dict[str, Any] = {"role": "assistant", "content": reply.content}
        finish_reason = reply.finish_reason
        reasoning = reply.reasoning if reply.reasoning is not None else self.reasoning
        if reasoning is not None:
            message[reply.reasoning_field or self.reasoning_field] = reasoning
        tools = request.get("tools")
        if tools and self.tool_calls and reply.content:
            name = tools[0].get("function", {}).get("name", "reply")
            message["content"] = None
            message["tool_calls"] = [{"id": f"call_fake_{next(self._ids)}", "type": "function",
                                      "function": {"name": name, "arguments": reply.content}}]
            finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
        body = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        }
        if reply.no_choices:
            body["choices"] = []
        if reply.usage is not None:
            prompt, completion = reply.usage
            thought = reply.reasoning_tokens if reply.reasoning_tokens is not None else self.reasoning_tokens
            body["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion + (thought or 0),
                             "total_tokens": prompt + completion + (thought or 0)}
            if thought is not None:
                body["usage"]["completion_tokens_details"] = {"reasoning_tokens": thought}
        return body

    def _starves(self, request: dict) -> Optional[Reply]:
        """The starved reply for a request whose budget is below ``starve_below``, else None."""
        budget = request.get("max_tokens")
        if self.starve_below is None or (isinstance(budget, int) and budget >= self.starve_below):
            return None
        return Reply.starved(tokens=budget if isinstance(budget, int) else self.starve_below)


def error_body(status: int, message: str) -> dict:
    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}
    return {"error": {"message": message, "type": kind.get(status, "server_error"), "param": None, "code": None}}


class _Handler(http.server.BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def _record(self, body: Any, raw: str) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        with self.fake._lock:
            self.fake.requests.append(ReceivedRequest(self.command, self.path, headers, body, raw))

    def _send_json(self, status: int, payload: dict, headers: Mapping[str, str] = {}) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            self.close_connection = True

    def do_GET(self):
        self._record(None, "")
        if self.path.rstrip("/").endswith("/models"):
            model = {"id": self.fake.model, "object": "model", "created": 0, "owned_by": "fake"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_json(404, error_body(404, f"no route {self.path}"))

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = None
        self._record(body, raw)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, error_body(404, f"no route {self.path}"))
            return
        if not isinstance(body, dict):
            self._send_json(400, error_body(400, "the request body is not a JSON object"))
            return
        self.fake._enter()
        try:
            self._answer(body)
        finally:
            self.fake._leave()

    def _answer(self, body: dict) -> None:
        fake = self.fake
        status = fake.rejection_status
        if fake.reject_response_format and "response_format" in body:
            self._send_json(status, error_body(status, "response_format of type json_schema is not supported by "
                                                       "this server"))
            return
        if fake.reject_tools and "tools" in body:
            self._send_json(status, error_body(status, "this model does not support tools"))
            return
        reply = fake._starves(body) or fake._next_reply(body)
        fake._wait(fake.latency + reply.delay)
        if reply.drop or fake._stopping.is_set():
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if reply.status != 200:
            self._send_json(reply.status, error_body(reply.status, reply.error), reply.headers)
        elif reply.raw_body is not None:
            data = reply.raw_body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send_json(200, fake.completion_body(reply, body), reply.headers)


def closed_port_url() -> str:
    """A base URL where nothing listens (a port just freed), for connection failures."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
