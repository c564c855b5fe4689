"""One asynchronous client for any OpenAI-compatible Chat Completions server.

vLLM, Ollama's ``/v1`` endpoint, llama.cpp's server and hosted APIs all speak the same
protocol; :class:`ModelClient` talks to them through the ``openai`` SDK's ``AsyncOpenAI``
with the SDK's own retries switched off, so that every HTTP request is counted:

* retries with exponential backoff on timeouts, connection errors, HTTP 408, 429 and 5xx,
  honouring a ``Retry-After`` header (capped); other 4xx are final at once;
* structured output: with a ``schema``, the request carries ``response_format`` with the
  JSON schema (``strict: false``, which every server above accepts). A server that answers
  400 naming ``response_format``/``json_schema`` or "unsupported" is remembered as one
  without structured output, and the request is sent again without it (one extra HTTP
  request, not a retry);
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
import logging
import os
import random
import re
import time
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Protocol, Sequence, runtime_checkable

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers ignore the key, but the SDK insists on one.
PLACEHOLDER_API_KEY = "not-needed"
RETRIABLE_STATUSES = frozenset({408, 429})
# A 400 mentioning one of these means "no structured output here" (vLLM, llama.cpp and
# Ollama word it differently).
_SCHEMA_REJECTION = re.compile(r"response_format|json_schema|unsupported", re.I)
SCHEMA_REJECTION_STATUSES = frozenset({400, 422})
# What an error message quotes of a server's text, at most.
EXCERPT = 300

Message = Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Completion:
    """One successful model call.

    ``attempts`` counts the HTTP requests it took (retries and a request resent without
    ``response_format`` included); ``latency_s`` is the wall time of the whole call, backoff
    included; token counts are 0 when the server reports no usage; ``model`` is the name
    the server answered with; ``used_schema`` tells whether the answered request carried
    ``response_format``; ``finish_reason`` is the server's (``"length"`` when cut off by
    ``max_tokens``).
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    latency_s: float
    model: str
    used_schema: bool
    finish_reason: Optional[str] = None

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
    replay clients, and any test double."""

    model: str

    async def complete(
        self, messages: Sequence[Message], *, schema: Optional[Mapping[str, Any]] = None, schema_name: str = "reply"
    ) -> Completion: ...


def backoff_delay(retry: int, *, base: float, cap: float, jitter: float = 0.0, rng: Optional[random.Random] = None) -> float:
    """Seconds to wait before retry number ``retry`` (0-based): ``base * 2**retry``, times
    ``1 + jitter * u`` with ``u`` uniform in [0, 1), at most ``cap``."""
    delay = base * (2.0 ** retry)
    if jitter:
        delay *= 1.0 + jitter * (rng or random).random()
    return min(cap, delay)


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
    when not None; ``extra_body`` is merged into every request body (server-specific
    options). ``timeout``: seconds per HTTP request. ``max_retries``: retries after the
    first request. Backoff before retry ``k`` is ``backoff_delay(k, base=backoff_base,
    cap=backoff_cap, jitter=jitter)``, or the server's ``Retry-After`` capped at
    ``backoff_cap``. ``structured_output=False`` never sends ``response_format``.
    ``sleep`` and ``clock`` are injectable for tests.
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

    def _request(self, messages: Sequence[Message], schema, schema_name: str) -> dict:
        request: Dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        if self.seed is not None:
            request["seed"] = self.seed
        if schema is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": dict(schema), "strict": False},
            }
        if self.extra_body:
            request["extra_body"] = self.extra_body
        return request

    async def complete(
        self, messages: Sequence[Message], *, schema: Optional[Mapping[str, Any]] = None, schema_name: str = "reply"
    ) -> Completion:
        """Sends ``messages`` (``[{"role": ..., "content": ...}, ...]``) and returns the
        first choice's text, or raises :class:`ModelError` once retries are spent."""
        openai = _openai()
        start = self._clock()
        attempts = retries = 0
        while True:
            use_schema = schema is not None and self.structured_output is not False
            attempts += 1
            server_wait: Optional[float] = None
            try:
                response = await self._client().chat.completions.create(
                    **self._request(messages, schema if use_schema else None, schema_name)
                )
            except openai.APIStatusError as err:
                status = err.status_code
                kind, text = f"http_{status}", self._scrub(_status_error_text(err))
                if use_schema and status in SCHEMA_REJECTION_STATUSES and _SCHEMA_REJECTION.search(text):
                    log.warning("%s rejects response_format (%s); asking without it from now on", self.base_url, text[:EXCERPT])
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
                if use_schema:
                    self.structured_output = True
                return self._completion(response, attempts, start, use_schema)
            if retries >= self.max_retries:
                raise self._failure(kind, text, attempts, start) from None
            if server_wait is not None:
                delay = min(self.backoff_cap, server_wait)
            else:
                delay = backoff_delay(retries, base=self.backoff_base, cap=self.backoff_cap, jitter=self.jitter)
            log.warning("%s from %s (request %d); retrying in %.2f s", kind, self.base_url, attempts, delay)
            retries += 1
            await self._sleep(delay)

    def _completion(self, response, attempts: int, start: float, used_schema: bool) -> Completion:
        choices = getattr(response, "choices", None)
        if not choices:
            raise self._failure("bad_response", f"the reply has no choices: {str(response)[:EXCERPT]!r}", attempts, start)
        choice = choices[0]
        message = getattr(choice, "message", None)
        usage = getattr(response, "usage", None)
        return Completion(
            text=(getattr(message, "content", None) or "") if message is not None else "",
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            attempts=attempts,
            latency_s=self._clock() - start,
            model=getattr(response, "model", None) or self.model,
            used_schema=used_schema,
            finish_reason=getattr(choice, "finish_reason", None),
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
    settings can be written to ``run.json`` as they are."""

    model: str
    base_url: str
    api_key_env: Optional[str] = None
    temperature: Optional[float] = None
    max_tokens: Optional[int] = None
    timeout: float = 60.0
    max_retries: int = 3

    def with_options(self, options: Mapping[str, Any]) -> "ModelSettings":
        """These settings with a member's own (``model``, ``base_url``, ``api_key_env``,
        ``temperature``, ``max_tokens``, ``timeout``) in place of the defaults."""
        known = {f.name for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v for k, v in options.items() if k in known})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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
        """The client for ``settings``; ValueError when its ``api_key_env`` is not set."""
        if settings not in self._clients:
            key = self._key.value if self._key else None
            if settings.api_key_env is not None:
                key = os.environ.get(settings.api_key_env)
                if not key:
                    raise ValueError(f"the environment variable {settings.api_key_env} (api_key_env) is not set")
            self._clients[settings] = ModelClient(
                settings.model, settings.base_url, key, temperature=settings.temperature,
                max_tokens=settings.max_tokens, timeout=settings.timeout, max_retries=settings.max_retries)
        return self._clients[settings]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
