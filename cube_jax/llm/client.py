"""One asynchronous client for any OpenAI-compatible Chat Completions server.

vLLM, Ollama's ``/v1`` endpoint, llama.cpp's server and hosted APIs all speak the same
protocol; :class:`ModelClient` talks to them through the ``openai`` SDK's ``AsyncOpenAI``
with the SDK's own retries switched off, so that every HTTP request is counted:

* retries with exponential backoff on timeouts, connection errors, HTTP 408, 429 and 5xx,
  honouring a ``Retry-After`` header (capped); other 4xx are final at once;
* reply modes (:data:`~cube_jax.names.REPLY_MODES`): with a ``schema``, the request asks for
  the reply as ``response_format`` with the JSON schema (``schema``, ``strict: false``, which
  every server above accepts), as the arguments of one function tool whose ``parameters``
  are the schema, forced by ``tool_choice`` (``tools``; the reply is read from
  ``message.tool_calls[0].function.arguments``, or from the content when the server answers
  there), or with the prompt alone (``text``). A server that refuses a mode (see
  :func:`refuses_mode`) is remembered as one without it, and the request is sent again in
  the next mode of :data:`MODE_FALLBACKS` (one extra HTTP request, not a retry); the
  :class:`Completion` says which mode answered, and why when it is not the one asked for;
* reasoning models: the reasoning a server returns beside the answer
  (``message.reasoning_content`` or ``message.reasoning``) and its count
  (``usage.completion_tokens_details.reasoning_tokens``) come with the :class:`Completion`;
  ``reasoning_effort`` is sent when set; ``budget_scale`` multiplies a call's ``max_tokens``
  (a reply starved by its reasoning is asked again with a larger budget);
* the API key (argument, else ``OPENAI_API_KEY``, else a placeholder that local servers
  accept) is sent as the Bearer header and nowhere else: not in ``repr``, not in logs, not
  in any :class:`ModelError` (server error texts are scrubbed of it).

:meth:`ModelClient.complete` returns a :class:`Completion` or raises :class:`ModelError`.
One client serves many concurrent requests (asyncio); share it between the agents that
use the same server and model: :class:`ClientPool` keeps one client per member's
:class:`ModelSettings` (model, base URL, key variable, sampling settings). It may be used from successive event loops (each
``asyncio.run``); it opens one connection pool per loop.

>>> client = ModelClient(model="qwen2.5-7b-instruct", base_url="http://127.0.0.1:8000/v1",
...                      api_key="sk-secret-123")
>>> client
ModelClient(model='qwen2.5-7b-instruct', base_url='http://127.0.0.1:8000/v1', api_key=<set>)
>>> backoff_delay(3, base=0.5, cap=30.0)
4.0
"""
from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import logging
import os
import random
import re
import time
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Protocol, Sequence, Tuple, runtime_checkable

from cube_jax.names import REASONING_EFFORTS, REPLY_MODES

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers ignore the key, but the SDK insists on one.
PLACEHOLDER_API_KEY = "not-needed"
RETRIABLE_STATUSES = frozenset({408, 429})
# The modes tried, in order, when the server refuses the one asked for: a schema-constrained
# reply is next best as a tool call's arguments and the other way round; the prompt alone
# always works.
MODE_FALLBACKS: Dict[str, Tuple[str, ...]] = {"schema": ("schema", "tools", "text"),
                                              "tools": ("tools", "schema", "text"),
                                              "text": ("text",)}
# The statuses of a refused mode: 400 and 422 (vLLM, Ollama, hosted APIs), 500 and 501
# (llama.cpp answers 500 "tools param requires --jinja flag" or "Unsupported param: tools").
REFUSAL_STATUSES = frozenset({400, 422, 500, 501})
# What a refusal of each mode names (servers word it differently).
_NAMES_MODE = {"schema": re.compile(r"response_format|json_schema|json schema|structured output", re.I),
               "tools": re.compile(r"\btools?\b|tool_choice|tool[ _]calls?|function[ _]call", re.I)}
_UNSUPPORTED = re.compile(r"unsupported|not supported", re.I)
# The request keys that each mode adds.
MODE_KEYS = {"schema": ("response_format",), "tools": ("tools", "tool_choice"), "text": ()}
# The completion budget a scaled call starts from when the client sets no max_tokens.
DEFAULT_BUDGET = 2048
TOOL_DESCRIPTION = "Give your reply: its arguments are the reply object."
# What an error message quotes of a server's text, at most.
EXCERPT = 300

Message = Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Completion:
    """One successful model call.

    ``text`` is the reply as the server gave it (the content, or in mode ``tools`` the tool
    call's arguments), ``<think>`` sections included. ``attempts`` counts the HTTP requests
    it took (retries and a request resent in another reply mode included); ``latency_s`` is
    the wall time of the whole call, backoff included; token counts are 0 when the server
    reports no usage (``reasoning_tokens`` are part of ``completion_tokens``); ``model`` is
    the name the server answered with; ``used_schema`` tells whether the answered request
    carried ``response_format``; ``finish_reason`` is the server's (``"length"`` when cut off
    by ``max_tokens``). ``reasoning``: the reasoning the server returned beside the answer
    (None when none); ``reply_mode``: the mode of the answered request; ``mode_note``: why it
    is not the mode asked for (None when it is).
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    latency_s: float
    model: str
    used_schema: bool
    finish_reason: Optional[str] = None
    reasoning: Optional[str] = None
    reasoning_tokens: int = 0
    reply_mode: Optional[str] = None
    mode_note: Optional[str] = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class ModelError(Exception):
    """A model call that failed for good (after its retries).

    ``kind``: ``timeout``, ``connection``, ``http_<status>`` (e.g. ``http_401``),
    ``bad_response`` (a reply that is not a chat completion) or ``client`` (any other
    failure inside the SDK). ``message`` is a short text without the API key;
    ``attempts`` and ``latency_s`` as in :class:`Completion`.
    """

    def __init__(self, kind: str, message: str, *, attempts: int, latency_s: float):
        self.kind = kind
        self.message = message
        self.attempts = attempts
        self.latency_s = latency_s
        super().__init__(f"{kind}: {message} (after {attempts} request(s), {latency_s:.2f} s)")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "attempts": self.attempts, "latency_s": self.latency_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelError":
        return cls(data["kind"], data["message"], attempts=data["attempts"], latency_s=data["latency_s"])

    def __eq__(self, other):
        return isinstance(other, ModelError) and self.to_dict() == other.to_dict()

    __hash__ = Exception.__hash__


@runtime_checkable
class ChatModel(Protocol):
    """What the ask-validate-repair loop needs: :class:`ModelClient`, the recording and
    replay clients, and any test double. ``reply_mode`` and ``budget_scale`` are passed only
    when they are not the defaults, so a double that never sees them may leave them out."""

    model: str

    async def complete(
        self, messages: Sequence[Message], *, schema: Optional[Mapping[str, Any]] = None, schema_name: str = "reply",
        reply_mode: str = "schema", budget_scale: int = 1,
    ) -> Completion: ...


def backoff_delay(retry: int, *, base: float, cap: float, jitter: float = 0.0, rng: Optional[random.Random] = None) -> float:
    """Seconds to wait before retry number ``retry`` (0-based): ``base * 2**retry``, times
    ``1 + jitter * u`` with ``u`` uniform in [0, 1), at most ``cap``."""
    delay = base * (2.0 ** retry)
    if jitter:
        delay *= 1.0 + jitter * (rng or random).random()
    return min(cap, delay)


def refuses_mode(mode: str, status: int, text: str, request: Mapping[str, Any]) -> bool:
    """Whether an error answer (``status``, the server's ``text``) to ``request``, sent in
    reply mode ``mode``, refuses that mode (see :data:`MODE_FALLBACKS` for what comes next).

    It does when the status is one of :data:`REFUSAL_STATUSES` and the text names the mode's
    feature (``response_format``, ``json_schema``, "structured output"; ``tools``,
    ``tool_choice``, "tool calls", "function calling"), or, for a 400 or 422, says
    "unsupported" or "not supported" without naming another key of the request (an
    unsupported ``temperature`` is not a refused mode). ``text`` is never refused.

    >>> refuses_mode("tools", 500, "tools param requires --jinja flag", {"tools": []})
    True
    >>> refuses_mode("schema", 400, "Unsupported parameter: 'temperature'", {"temperature": 0.2, "response_format": {}})
    False
    """
    if mode == "text" or status not in REFUSAL_STATUSES:
        return False
    if _NAMES_MODE[mode].search(text):
        return True
    if status >= 500 or not _UNSUPPORTED.search(text):
        return False
    sent = set(request) | set(request.get("extra_body") or ())
    others = sent - {"model", "messages", "extra_body", *MODE_KEYS[mode]}
    return not any(re.search(rf"\b{re.escape(key)}\b", text) for key in others)


def retry_after_seconds(headers: Mapping[str, str], *, now: Optional[float] = None) -> Optional[float]:
    """The wait a server asks for: ``retry-after-ms``, or ``Retry-After`` in seconds or as
    an HTTP date; None when absent or unreadable.

    >>> retry_after_seconds({"retry-after": "2"})
    2.0
    >>> retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:05 GMT"}, now=1445412480.0)
    5.0
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        if "retry-after-ms" in lowered:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000.0)
        value = lowered.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value).timestamp()
            return max(0.0, when - (time.time() if now is None else now))
    except (TypeError, ValueError, OverflowError):
        return None


class _Secret:
    """A value that never shows in a repr (so not in ``vars(client)`` dumps either)."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


def _openai():
    try:
        import openai
    except ImportError as err:  # the SDK is an optional extra
        raise ImportError("ModelClient needs the openai package: pip install 'cube_jax[llm]'") from err
    return openai


class ModelClient:
    """An OpenAI-compatible Chat Completions client with counted retries (see the module
    docstring).

    ``model``: the model name the server knows. ``base_url``: e.g.
    ``http://localhost:8000/v1``; else ``OPENAI_BASE_URL``, else OpenAI's. ``api_key``: else
    ``OPENAI_API_KEY``, else a placeholder. ``temperature``/``max_tokens``/``seed`` are sent
    when not None, and ``reasoning_effort`` (``low``, ``medium``, ``high``) too; ``extra_body``
    is merged into every request body (server-specific options). ``timeout``: seconds per
    HTTP request. ``max_retries``: retries after the first request. Backoff before retry
    ``k`` is ``backoff_delay(k, base=backoff_base, cap=backoff_cap, jitter=jitter)``, or the
    server's ``Retry-After`` capped at ``backoff_cap``. ``structured_output=False`` never
    sends ``response_format`` (mode ``schema`` goes on as the next mode would). ``sleep``
    and ``clock`` are injectable for tests.

    ``refused`` maps each reply mode the server refused to the refusal's text, for the
    client's lifetime; ``structured_output`` is None until a request with
    ``response_format`` was answered (True) or refused (False).
    """

    def __init__(
        self,
        model: str,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        temperature: Optional[float] = None,
        max_tokens: Optional[int] = None,
        seed: Optional[int] = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        jitter: float = 0.1,
        structured_output: bool = True,
        reasoning_effort: Optional[str] = None,
        extra_body: Optional[Mapping[str, Any]] = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        clock: Callable[[], float] = time.perf_counter,
    ):
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff_base < 0 or backoff_cap < 0 or jitter < 0:
            raise ValueError(f"backoff_base, backoff_cap and jitter must be >= 0, got {backoff_base}, {backoff_cap}, {jitter}")
        if reasoning_effort is not None and reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, got {reasoning_effort!r}")
        self.model = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        key = api_key or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY
        self._key = _Secret(key)
        self.has_api_key = key != PLACEHOLDER_API_KEY
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_cap = float(backoff_cap)
        self.jitter = float(jitter)
        # None: not known yet; False: the server rejected response_format once.
        self.structured_output: Optional[bool] = None if structured_output else False
        self.refused: Dict[str, str] = {} if structured_output else {"schema": "structured output switched off"}
        self.reasoning_effort = reasoning_effort
        self.extra_body = dict(extra_body) if extra_body else None
        self._sleep = sleep
        self._clock = clock
        # Built now so that a malformed base URL is reported here, not at the first call.
        self._sdk = self._new_sdk_client()
        self._sdk_loop = None

    def __repr__(self) -> str:
        key = "<set>" if self.has_api_key else "<none>"
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, api_key={key})"

    __str__ = __repr__

    # --- the SDK client, one per event loop -----------------------------------------------

    def _new_sdk_client(self):
        openai = _openai()
        if not re.match(r"^https?://[^/\s]", self.base_url):
            raise ValueError(f"base_url must start with http:// or https:// and name a host, got {self.base_url!r}")
        try:
            return openai.AsyncOpenAI(api_key=self._key.value, base_url=self.base_url, timeout=self.timeout, max_retries=0)
        except Exception as err:  # the SDK's URL parser raises its own exception types
            raise ValueError(f"invalid base_url {self.base_url!r}: {self._scrub(str(err))}") from None

    def _client(self):
        loop = asyncio.get_running_loop()
        if self._sdk is None or self._sdk_loop not in (None, loop):
            # A connection pool belongs to the loop that opened it.
            self._sdk = self._new_sdk_client()
        self._sdk_loop = loop
        return self._sdk

    async def aclose(self) -> None:
        """Closes the connection pool of the running loop's SDK client."""
        if self._sdk is not None and self._sdk_loop is asyncio.get_running_loop():
            await self._sdk.close()
        self._sdk = self._sdk_loop = None

    async def __aenter__(self) -> "ModelClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    # --- one call ---------------------------------------------------------------------------

    def _request(self, messages: Sequence[Message], schema, schema_name: str, mode: str, budget_scale: int) -> dict:
        request: Dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if self.temperature is not None:
            request["temperature"] = self.temperature
        max_tokens = self.max_tokens if budget_scale == 1 else (self.max_tokens or DEFAULT_BUDGET) * budget_scale
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        if self.seed is not None:
            request["seed"] = self.seed
        if mode == "schema":
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": dict(schema), "strict": False},
            }
        elif mode == "tools":
            request["tools"] = [{"type": "function", "function": {
                "name": schema_name, "description": TOOL_DESCRIPTION, "parameters": dict(schema)}}]
            request["tool_choice"] = {"type": "function", "function": {"name": schema_name}}
        # in the body as it is: the SDK's own keyword for it is younger than the SDK this needs
        extra = {**({"reasoning_effort": self.reasoning_effort} if self.reasoning_effort else {}),
                 **(self.extra_body or {})}
        if extra:
            request["extra_body"] = extra
        return request

    def mode_for(self, requested: str) -> str:
        """The reply mode a request asking for ``requested`` is sent in: the first of its
        :data:`MODE_FALLBACKS` the server has not refused."""
        return next(m for m in MODE_FALLBACKS[requested] if m not in self.refused)

    async def complete(
        self, messages: Sequence[Message], *, schema: Optional[Mapping[str, Any]] = None, schema_name: str = "reply",
        reply_mode: str = "schema", budget_scale: int = 1,
    ) -> Completion:
        """Sends ``messages`` (``[{"role": ..., "content": ...}, ...]``) and returns the
        first choice's reply, or raises :class:`ModelError` once retries are spent.
        ``reply_mode``: how to ask for a reply to ``schema`` (without a schema, ``text``);
        ``budget_scale``: this call's ``max_tokens`` is the client's times this (from
        :data:`DEFAULT_BUDGET` when the client sets none)."""
        if reply_mode not in REPLY_MODES:
            raise ValueError(f"reply_mode must be one of {', '.join(REPLY_MODES)}, got {reply_mode!r}")
        if isinstance(budget_scale, bool) or not isinstance(budget_scale, int) or budget_scale < 1:
            raise ValueError(f"budget_scale must be an integer >= 1, got {budget_scale!r}")
        openai = _openai()
        requested = reply_mode if schema is not None else "text"
        start = self._clock()
        attempts = retries = 0
        while True:
            mode = self.mode_for(requested)
            attempts += 1
            server_wait: Optional[float] = None
            request = self._request(messages, schema, schema_name, mode, budget_scale)
            try:
                response = await self._client().chat.completions.create(**request)
            except openai.APIStatusError as err:
                status = err.status_code
                kind, text = f"http_{status}", self._scrub(_status_error_text(err))
                if refuses_mode(mode, status, text, request):
                    log.warning("%s refuses reply mode %s (%s); asking in another mode from now on", self.base_url,
                                mode, text[:EXCERPT])
                    self.refused[mode] = f"{kind}: {text[:EXCERPT]}"
                    if mode == "schema":
                        self.structured_output = False
                    continue
                if not (status in RETRIABLE_STATUSES or status >= 500):
                    raise self._failure(kind, text, attempts, start) from None
                server_wait = retry_after_seconds(err.response.headers)
            except openai.APITimeoutError:
                kind, text = "timeout", f"no reply within {self.timeout:g} s"
            except openai.APIConnectionError as err:
                kind, text = "connection", self._scrub(_connection_error_text(err))
            except openai.APIResponseValidationError as err:
                raise self._failure("bad_response", self._scrub(str(err)), attempts, start) from None
            except openai.OpenAIError as err:
                raise self._failure("client", self._scrub(str(err)), attempts, start) from None
            except ValueError as err:  # a 200 whose body is not JSON at all (the SDK's decoder raises)
                raise self._failure("bad_response", f"the reply is not JSON: {self._scrub(str(err))}", attempts,
                                    start) from None
            else:
                if mode == "schema":
                    self.structured_output = True
                return self._completion(response, attempts, start, mode, self._mode_note(requested, mode))
            if retries >= self.max_retries:
                raise self._failure(kind, text, attempts, start) from None
            if server_wait is not None:
                delay = min(self.backoff_cap, server_wait)
            else:
                delay = backoff_delay(retries, base=self.backoff_base, cap=self.backoff_cap, jitter=self.jitter)
            log.warning("%s from %s (request %d); retrying in %.2f s", kind, self.base_url, attempts, delay)
            retries += 1
            await self._sleep(delay)

    def _mode_note(self, requested: str, mode: str) -> Optional[str]:
        if mode == requested:
            return None
        chain = MODE_FALLBACKS[requested]
        skipped = "; ".join(f"{m} ({self.refused[m]})" for m in chain[:chain.index(mode)])
        return f"reply mode {requested} asked; the server refused {skipped}; replies use mode {mode}"

    def _completion(self, response, attempts: int, start: float, mode: str, note: Optional[str]) -> Completion:
        choices = getattr(response, "choices", None)
        if not choices:
            raise self._failure("bad_response", f"the reply has no choices: {str(response)[:EXCERPT]!r}", attempts, start)
        choice = choices[0]
        message = getattr(choice, "message", None)
        usage = getattr(response, "usage", None)
        details = getattr(usage, "completion_tokens_details", None)
        return Completion(
            text=_reply_text(message, mode),
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            attempts=attempts,
            latency_s=self._clock() - start,
            model=getattr(response, "model", None) or self.model,
            used_schema=mode == "schema",
            finish_reason=getattr(choice, "finish_reason", None),
            reasoning=_reasoning_of(message),
            reasoning_tokens=int(getattr(details, "reasoning_tokens", 0) or 0),
            reply_mode=mode,
            mode_note=note,
        )

    def _failure(self, kind: str, text: str, attempts: int, start: float) -> ModelError:
        error = ModelError(kind, text[:EXCERPT], attempts=attempts, latency_s=self._clock() - start)
        log.warning("model call to %s failed: %s", self.base_url, error)
        return error

    def _scrub(self, text: str) -> str:
        """``text`` with every occurrence of the API key masked."""
        if self.has_api_key and len(self._key.value) >= 4:
            text = text.replace(self._key.value, "***")
        return text


def _reply_text(message, mode: str) -> str:
    """The reply in ``message``: in mode ``tools`` the first tool call's arguments (a server
    that answered in the content instead is read there), else the content."""
    if message is None:
        return ""
    if mode == "tools":
        for call in getattr(message, "tool_calls", None) or ():
            arguments = getattr(getattr(call, "function", None), "arguments", None)
            if isinstance(arguments, str):
                return arguments
            if isinstance(arguments, (dict, list)):  # a server that sends the object itself
                return json.dumps(arguments)
    return getattr(message, "content", None) or ""


def _reasoning_of(message) -> Optional[str]:
    """The reasoning a server returned beside the answer: ``reasoning_content`` (vLLM,
    DeepSeek, llama.cpp) or ``reasoning`` (newer vLLM, Ollama, OpenRouter); None when none."""
    for key in ("reasoning_content", "reasoning"):
        value = getattr(message, key, None)
        if isinstance(value, str) and value:
            return value
    return None


def _status_error_text(err) -> str:
    """The server's own error message when its body is OpenAI-shaped, else the SDK's."""
    body = getattr(err, "body", None)
    message = None
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        if message is None:
            message = body.get("message") or body.get("detail")
    if not isinstance(message, str) or not message:
        message = getattr(err, "message", None) or str(err)
    return message


def _connection_error_text(err) -> str:
    cause = err.__cause__ or err.__context__
    detail = f": {type(cause).__name__}: {cause}" if cause is not None and str(cause) else ""
    return f"{err.message.rstrip('.')}{detail}"


# --- one client per member's settings ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """How one language-agent member talks to its model: everything but the key, which is
    named by ``api_key_env`` (None: the pool's key, else ``OPENAI_API_KEY``), so that these
    settings can be written to ``run.json`` as they are.

    Reasoning models and reply modes: ``reasoning_effort`` (sent when set), ``reply_mode``
    (:data:`~cube_jax.names.REPLY_MODES`), ``reasoning_history`` (how past reasoning is sent
    back: :data:`~cube_jax.names.REASONING_HISTORIES`) and ``drop_reasoning`` (the trace keeps
    only its length); the last three are the agent's (:class:`~cube_jax.llm.ask.ReplyOptions`).
    """

    model: str
    base_url: str
    api_key_env: Optional[str] = None
    temperature: Optional[float] = None
    max_tokens: Optional[int] = None
    timeout: float = 60.0
    max_retries: int = 3
    reasoning_effort: Optional[str] = None
    reply_mode: str = "schema"
    reasoning_history: str = "none"
    drop_reasoning: bool = False

    def with_options(self, options: Mapping[str, Any]) -> "ModelSettings":
        """These settings with a member's own (``model``, ``base_url``, ``api_key_env``,
        ``temperature``, ``max_tokens``, ``timeout``, the reasoning and reply-mode settings)
        in place of the defaults."""
        known = {f.name for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v for k, v in options.items() if k in known})

    def to_dict(self) -> dict:
        """The settings as ``run.json`` keeps them: the reasoning and reply-mode settings only
        when they are not the defaults (so that a run made before they existed reads the same)."""
        out = dataclasses.asdict(self)
        for field in dataclasses.fields(self):
            if field.name in _SINCE_REASONING and out[field.name] == field.default:
                del out[field.name]
        return out


_SINCE_REASONING = ("reasoning_effort", "reply_mode", "reasoning_history", "drop_reasoning")


class ClientPool:
    """One :class:`ModelClient` per distinct :class:`ModelSettings`, shared by every agent and
    episode that uses them (one connection pool each). ``api_key``: the key of members that
    name no ``api_key_env`` (else ``OPENAI_API_KEY``); it is kept only inside the clients."""

    def __init__(self, api_key: Optional[str] = None):
        self._key = _Secret(api_key) if api_key else None
        self._clients: Dict[ModelSettings, ModelClient] = {}

    def __repr__(self) -> str:
        return f"ClientPool({len(self._clients)} client(s), api_key={'<set>' if self._key else '<none>'})"

    def get(self, settings: ModelSettings) -> "ModelClient":
        """The client for ``settings`` (agents whose settings differ only in what the agent
        does with replies share it); ValueError when its ``api_key_env`` is not set."""
        settings = dataclasses.replace(settings, reply_mode="schema", reasoning_history="none", drop_reasoning=False)
        if settings not in self._clients:
            key = self._key.value if self._key else None
            if settings.api_key_env is not None:
                key = os.environ.get(settings.api_key_env)
                if not key:
                    raise ValueError(f"the environment variable {settings.api_key_env} (api_key_env) is not set")
            self._clients[settings] = ModelClient(
                settings.model, settings.base_url, key, temperature=settings.temperature,
                max_tokens=settings.max_tokens, timeout=settings.timeout, max_retries=settings.max_retries,
                reasoning_effort=settings.reasoning_effort)
        return self._clients[settings]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
