"""Record model exchanges, and replay them with no server.

A recording is a JSON Lines file, one per episode, shared by the episode's agents: each
line is one model call of one agent::

    {"schema": 1, "agent": "agent_0", "index": 0, "model": "qwen2.5-7b-instruct",
     "request_sha256": "...", "schema_name": "plan_reply", "messages": [...],
     "completion": {"text": ..., "prompt_tokens": ..., "completion_tokens": ...,
                    "attempts": ..., "latency_s": ..., "model": ..., "used_schema": ...,
                    "finish_reason": ...},
     "error": null}

``index`` numbers an agent's calls from 0; a failed call has ``"completion": null`` and
``"error": {"kind", "message", "attempts", "latency_s"}``. A call asked in another reply
mode than ``schema``, or with a scaled token budget (a starved reply asked again), adds
``"reply_mode"`` and ``"budget_scale"``; the completion of a reasoning model adds its
``reasoning``, ``reasoning_tokens``, ``reply_mode`` and ``mode_note``. ``request_sha256``
is the hash of the request (messages, schema name and schema, and the reply mode and
budget scale when not the defaults; :func:`request_digest`). The API key is never part of
it: the recording client does not know it.

:class:`RecordingClient` wraps a client (one per agent, all writing to the episode's file);
:class:`ReplayClient` serves one agent's calls from the file in order, checks that every
request is the recorded one (else :class:`ReplayMismatch` says which call diverged and
how), returns the recorded completions (their latency and attempts included, so a
replayed episode's ``llm`` records equal the recorded ones) and re-raises the recorded
errors. Since each agent replays its own sequence, the interleaving of agents in the file
does not matter.
"""
from __future__ import annotations

import asyncio

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from cube_jax.llm.client import ChatModel, Completion, ModelError

RECORDING_SCHEMA = 1
# What a mismatch message quotes of each side, at most.
EXCERPT = 80

PathLike = Union[str, Path]


def request_digest(messages: Sequence[Mapping[str, str]], schema: Optional[Mapping[str, Any]], schema_name: str,
                   reply_mode: str = "schema", budget_scale: int = 1) -> str:
    """The SHA-256 of a request (canonical JSON of messages, schema name and schema, and the
    reply mode and budget scale where they are not the defaults, so that a recording made
    before they existed keeps its digests)."""
    payload = {"messages": [dict(m) for m in messages], "schema_name": schema_name if schema is not None else None, "schema": schema}
    payload.update(_call_options(reply_mode, budget_scale))
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _call_options(reply_mode: str, budget_scale: int) -> Dict[str, Any]:
    """The options of a call that are not the defaults (``complete``'s keywords)."""
    out: Dict[str, Any] = {}
    if reply_mode != "schema":
        out["reply_mode"] = reply_mode
    if budget_scale != 1:
        out["budget_scale"] = budget_scale
    return out


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One recorded call (a line of the recording; see the module docstring)."""

    agent: str
    index: int
    model: str
    request_sha256: str
    schema_name: Optional[str]
    messages: List[Dict[str, str]]
    completion: Optional[Completion]
    error: Optional[ModelError]
    reply_mode: str = "schema"
    budget_scale: int = 1

    def to_json(self) -> dict:
        out = {
            "schema": RECORDING_SCHEMA,
            "agent": self.agent,
            "index": self.index,
            "model": self.model,
            "request_sha256": self.request_sha256,
            "schema_name": self.schema_name,
            "messages": self.messages,
            "completion": None if self.completion is None else _without_defaults(self.completion.to_dict()),
            "error": None if self.error is None else self.error.to_dict(),
        }
        out.update(_call_options(self.reply_mode, self.budget_scale))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Exchange":
        if data.get("schema") != RECORDING_SCHEMA:
            raise ValueError(f"unsupported recording schema {data.get('schema')!r}; expected {RECORDING_SCHEMA}")
        completion, error = data["completion"], data["error"]
        if (completion is None) == (error is None):
            raise ValueError("an exchange has exactly one of 'completion' and 'error'")
        return cls(
            agent=data["agent"],
            index=int(data["index"]),
            model=data["model"],
            request_sha256=data["request_sha256"],
            schema_name=data["schema_name"],
            messages=list(data["messages"]),
            completion=None if completion is None else Completion(**completion),
            error=None if error is None else ModelError.from_dict(error),
            reply_mode=data.get("reply_mode", "schema"),
            budget_scale=int(data.get("budget_scale", 1)),
        )


# A completion's keys that a recording leaves out at their defaults (older recordings lack them).
_COMPLETION_DEFAULTS = {"reasoning": None, "reasoning_tokens": 0, "reply_mode": None, "mode_note": None}


def _without_defaults(completion: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in completion.items() if k not in _COMPLETION_DEFAULTS or v != _COMPLETION_DEFAULTS[k]}


def load_exchanges(path: PathLike) -> Dict[str, List[Exchange]]:
    """A recording's exchanges, per agent name, each list in call order."""
    by_agent: Dict[str, List[Exchange]] = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                exchange = Exchange.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}, line {number}: not a recorded exchange: {err}") from None
            by_agent.setdefault(exchange.agent, []).append(exchange)
    for agent, exchanges in by_agent.items():
        exchanges.sort(key=lambda e: e.index)
        indices = [e.index for e in exchanges]
        if indices != list(range(len(indices))):
            raise ValueError(f"{path}: the calls of {agent} are numbered {indices[:10]}, not 0, 1, 2, ...")
    return by_agent


class RecordingClient:
    """Wraps ``inner`` and appends every call of agent ``agent`` to the file ``path``
    (created if missing; several agents' clients may share it). Same interface as the
    client it wraps."""

    def __init__(self, inner: ChatModel, path: PathLike, *, agent: str, reuse: Sequence[Exchange] = ()):
        self.inner = inner
        self.model = inner.model
        self.path = Path(path)
        self.agent = agent
        self.calls = 0
        # Exchanges of an interrupted run of this episode (cube-jax llm --resume): served again,
        # and recorded again, while the requests match them in order; then the server answers.
        self.reuse: List[Exchange] = list(reuse)
        self.reused = 0

    def __repr__(self) -> str:
        return f"RecordingClient({self.inner!r}, path={str(self.path)!r}, agent={self.agent!r})"

    async def complete(
        self, messages: Sequence[Mapping[str, str]], *, schema: Optional[Mapping[str, Any]] = None, schema_name: str = "reply",
        reply_mode: str = "schema", budget_scale: int = 1,
    ) -> Completion:
        messages = [dict(m) for m in messages]
        options = _call_options(reply_mode, budget_scale)
        if self.reuse:
            earlier = self.reuse.pop(0)
            if earlier.request_sha256 == request_digest(messages, schema, schema_name, reply_mode, budget_scale):
                await asyncio.sleep(0)  # as a server would, never at once
                self.reused += 1
                self._append(messages, schema, schema_name, options, earlier.completion, earlier.error)
                if earlier.error is not None:
                    raise ModelError.from_dict(earlier.error.to_dict())
                return earlier.completion
            self.reuse = []  # the episode went another way: the server answers from here on
        try:
            completion = await self.inner.complete(messages, schema=schema, schema_name=schema_name, **options)
        except ModelError as err:
            self._append(messages, schema, schema_name, options, None, err)
            raise
        self._append(messages, schema, schema_name, options, completion, None)
        return completion

    def _append(self, messages, schema, schema_name: str, options: Dict[str, Any], completion: Optional[Completion],
                error: Optional[ModelError]) -> None:
        # Numbered when written, so that a call cancelled midway leaves no gap.
        index, self.calls = self.calls, self.calls + 1
        exchange = Exchange(
            self.agent, index, self.model, request_digest(messages, schema, schema_name, **options),
            schema_name if schema is not None else None, messages, completion, error, **options,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write per line, opened in append mode: lines of agents sharing the file stay whole.
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(exchange.to_json(), ensure_ascii=False) + "\n")


class ReplayMismatch(Exception):
    """A replayed agent asked something other than what was recorded (or more calls)."""

    def __init__(self, agent: str, index: int, detail: str):
        self.agent = agent
        self.index = index
        self.detail = detail
        super().__init__(f"replay of {agent} diverged at call {index}: {detail}")


class ReplayClient:
    """Serves agent ``agent``'s recorded calls from ``path`` in order, with no server
    (see the module docstring). ``exchanges`` may be given instead of a path."""

    def __init__(self, path: Optional[PathLike] = None, *, agent: str, exchanges: Optional[Sequence[Exchange]] = None):
        if (path is None) == (exchanges is None):
            raise ValueError("give either a recording path or the exchanges")
        self.agent = agent
        self.exchanges = list(load_exchanges(path).get(agent, []) if exchanges is None else exchanges)
        self.model = self.exchanges[0].model if self.exchanges else "replay"
        self.calls = 0

    def __repr__(self) -> str:
        return f"ReplayClient(agent={self.agent!r}, calls={self.calls}/{len(self.exchanges)})"

    @property
    def remaining(self) -> int:
        """Recorded calls not served yet."""
        return len(self.exchanges) - self.calls

    async def complete(
        self, messages: Sequence[Mapping[str, str]], *, schema: Optional[Mapping[str, Any]] = None, schema_name: str = "reply",
        reply_mode: str = "schema", budget_scale: int = 1,
    ) -> Completion:
        # A reply never arrives at once from a server: yielding here lets the agents deciding
        # side by side reach their own requests first, in the same order as when recorded.
        await asyncio.sleep(0)
        index = self.calls
        if index >= len(self.exchanges):
            raise ReplayMismatch(self.agent, index, f"the recording holds only {len(self.exchanges)} call(s) for this agent")
        recorded = self.exchanges[index]
        messages = [dict(m) for m in messages]
        if request_digest(messages, schema, schema_name, reply_mode, budget_scale) != recorded.request_sha256:
            raise ReplayMismatch(self.agent, index, _difference(recorded, messages, schema, schema_name, reply_mode,
                                                                budget_scale))
        self.calls += 1
        if recorded.error is not None:
            raise ModelError.from_dict(recorded.error.to_dict())
        return recorded.completion


def _excerpt(text: str, at: int) -> str:
    start = max(0, at - EXCERPT // 4)
    piece = text[start : start + EXCERPT]
    return repr(("..." if start else "") + piece + ("..." if start + EXCERPT < len(text) else ""))


def _difference(recorded: Exchange, messages: List[Dict[str, str]], schema, schema_name: str, reply_mode: str,
                budget_scale: int) -> str:
    now_name = schema_name if schema is not None else None
    if now_name != recorded.schema_name:
        return f"schema {now_name!r} asked, {recorded.schema_name!r} recorded"
    if reply_mode != recorded.reply_mode:
        return f"reply mode {reply_mode!r} asked, {recorded.reply_mode!r} recorded"
    if budget_scale != recorded.budget_scale:
        return f"token budget scale {budget_scale} asked, {recorded.budget_scale} recorded"
    for i, (old, new) in enumerate(zip(recorded.messages, messages)):
        if old == new:
            continue
        if old.get("role") != new.get("role"):
            return f"message {i} has role {new.get('role')!r}, recorded {old.get('role')!r}"
        a, b = str(old.get("content", "")), str(new.get("content", ""))
        if a == b:  # another key differs (the reasoning resent with an earlier reply)
            keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            return f"message {i} ({new.get('role')}) differs in {', '.join(keys)}"
        at = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return f"message {i} ({new.get('role')}) differs at character {at}: now {_excerpt(b, at)}, recorded {_excerpt(a, at)}"
    if len(messages) != len(recorded.messages):
        return f"{len(messages)} messages sent, {len(recorded.messages)} recorded"
    return "the JSON schema differs from the recorded one"
