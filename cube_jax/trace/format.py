"""Episode traces: one JSON Lines file per episode, in the format of LLM.md section 5.

Every record is a JSON object with ``type``, ``t`` (environment steps already taken when
it happened) and ``wall`` (seconds since the episode started). The first record is the
``episode`` header and the last the ``end`` record; in between come ``stage``, ``plan``,
``message``, ``llm`` and ``step`` records in the order they happened. Records may carry
further keys; the ones below must be present with these meanings.

:class:`TraceWriter` writes records as they happen and flushes each one, so a trace is
readable while its episode runs; used as a context manager it closes a trace that an
exception, a timeout or Ctrl-C interrupted with an ``end`` record that says why.
:func:`validate_trace` checks a file against the schema and names the line and key of
the first problem; :func:`read_trace` loads a valid one.

>>> import io, json
>>> buffer = io.StringIO()
>>> with TraceWriter(buffer, clock=lambda: 0.0) as trace:
...     _ = trace.write("stage", 0, agent="agent_0", stage="R")
>>> json.loads(buffer.getvalue().splitlines()[-1])["reason"]
'closed without an end record'
"""
from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import math
import os
import re
import time
from pathlib import Path
from typing import IO, Annotated, Any, Callable, Dict, List, Literal, Optional, Tuple, Union

import pydantic

SCHEMA_VERSION = 1
STAGES = ("R", "W", "X", "I")
PLAN_EVENTS = ("committed", "resumed", "succeeded", "failed", "replaced", "unfinished")
LLM_PURPOSES = ("plan", "interrupt", "message")
RECORD_TYPES = ("episode", "stage", "plan", "message", "llm", "step", "end")
FACE_NAMES = ("up", "down", "left", "right")
TASK_KEY = re.compile(r"^(0|[1-9]\d*):(up|down|left|right)$")
# What a validation error quotes of a bad value, at most.
EXCERPT = 80


def agent_name(i: int) -> str:
    """The trace name of agent ``i``: ``agent_i``."""
    return f"agent_{i}"


# --- the records ---------------------------------------------------------------------------------

# Strict scalar types (a JSON string is never read as a number, nor a bool as an int); the
# models themselves are lax so that JSON arrays validate as tuples.
StrictInt = pydantic.StrictInt
StrictBool = pydantic.StrictBool
StrictStr = pydantic.StrictStr
StrictFloat = pydantic.StrictFloat
NonNegativeInt = Annotated[StrictInt, pydantic.Field(ge=0)]
PositiveInt = Annotated[StrictInt, pydantic.Field(ge=1)]
Number = Union[StrictInt, StrictFloat]
Cell = Tuple[StrictInt, StrictInt]
BlockRow = Tuple[StrictInt, StrictInt, PositiveInt, StrictBool]


class Record(pydantic.BaseModel):
    """Keys every record has; records may carry more."""

    model_config = pydantic.ConfigDict(extra="allow")
    type: StrictStr
    t: NonNegativeInt
    wall: Annotated[Number, pydantic.Field(ge=0)]


class AgentInfo(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    kind: StrictStr
    model: Optional[StrictStr]


class Layout(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    t: NonNegativeInt
    agents: List[Cell]
    blocks: List[BlockRow]


class EpisodeRecord(Record):
    type: Literal["episode"]
    schema_version: Literal[1] = pydantic.Field(alias="schema")
    env: Dict[str, Any]
    seed: StrictInt
    topology: StrictStr
    agents: Dict[str, AgentInfo]
    layout: Layout


class StageRecord(Record):
    type: Literal["stage"]
    agent: StrictStr
    stage: Literal["R", "W", "X", "I"]


class PlanRecord(Record):
    type: Literal["plan"]
    agent: StrictStr
    plan_id: Union[StrictInt, StrictStr]
    spec: StrictStr
    actions: List[StrictStr]
    event: Literal["committed", "resumed", "succeeded", "failed", "replaced", "unfinished"]
    reason: Optional[StrictStr] = None

    @pydantic.model_validator(mode="after")
    def _failed_has_reason(self):
        if self.event == "failed" and not self.reason:
            raise ValueError("a plan record with event 'failed' needs a non-empty 'reason'")
        return self


class MessageRecord(Record):
    type: Literal["message"]
    id: Union[StrictInt, StrictStr]
    sender: StrictStr
    recipients: List[StrictStr]
    content: StrictStr


class LLMRecord(Record):
    type: Literal["llm"]
    agent: StrictStr
    purpose: Literal["plan", "interrupt", "message"]
    model: Optional[StrictStr]
    attempts: NonNegativeInt
    latency_s: Annotated[Number, pydantic.Field(ge=0)]
    prompt_tokens: NonNegativeInt
    completion_tokens: NonNegativeInt
    valid: StrictBool
    fallback: StrictBool
    error: Optional[StrictStr] = None


class TaskCounts(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    required: PositiveInt
    spatial: NonNegativeInt
    temporal: NonNegativeInt
    participation: NonNegativeInt
    joint: NonNegativeInt


class StepRecord(Record):
    type: Literal["step"]
    actions: Dict[str, StrictInt]
    symbolic: Dict[str, Optional[StrictStr]]
    reward: List[Number]
    agents: List[Cell]
    blocks: List[BlockRow]
    delivered: List[NonNegativeInt]
    tasks: Dict[str, TaskCounts]

    @pydantic.field_validator("tasks")
    @classmethod
    def _task_keys(cls, tasks):
        for key in tasks:
            if not TASK_KEY.match(key):
                raise ValueError(f"task key {key[:EXCERPT]!r} is not '<block>:<face>' with face up, down, left or right")
        return tasks


class EndRecord(Record):
    type: Literal["end"]
    terminated: StrictBool
    truncated: StrictBool
    reason: StrictStr
    steps: NonNegativeInt
    blocks_delivered: NonNegativeInt
    blocks_total: NonNegativeInt
    weight_delivered: NonNegativeInt
    weight_total: NonNegativeInt


RECORD_MODELS = {
    "episode": EpisodeRecord,
    "stage": StageRecord,
    "plan": PlanRecord,
    "message": MessageRecord,
    "llm": LLMRecord,
    "step": StepRecord,
    "end": EndRecord,
}


# --- writing -----------------------------------------------------------------------------------


def _json_safe(value):
    """Plain JSON values: numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy / jax scalars and arrays
        return _json_safe(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class TraceWriter:
    """Writes one episode's trace record by record (see the module docstring).

    ``target`` is a path (the file is created with its folder) or an open text stream.
    ``clock`` gives the seconds the ``wall`` key counts from (the first call is the
    episode's start). Each record is flushed as soon as it is written.
    """

    def __init__(self, target: Union[str, os.PathLike, IO[str]], clock: Callable[[], float] = time.perf_counter):
        if isinstance(target, (str, os.PathLike)):
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")
            self._owns_file = True
            self.path: Optional[Path] = path
        else:
            self._file = target
            self._owns_file = False
            self.path = None
        self._clock = clock
        self._start = clock()
        self.last_t = 0
        self.ended = False
        self.records = 0
        # Outcome counts so far (steps, blocks_*, weight_*), kept up to date by the episode
        # loop, so that an interrupted trace's end record reports them.
        self.outcome: Dict[str, int] = {}

    def wall(self) -> float:
        return round(max(self._clock() - self._start, 0.0), 6)

    def write(self, record_type: str, t: int, **fields) -> dict:
        """Appends one record ``{"type", "t", "wall", **fields}`` and flushes it."""
        if self.ended:
            raise RuntimeError(f"trace: a {record_type!r} record after the end record")
        if record_type not in RECORD_TYPES:
            raise ValueError(f"trace: unknown record type {record_type!r}; types are {RECORD_TYPES}")
        record = {"type": record_type, "t": int(t), "wall": self.wall(), **_json_safe(fields)}
        self._file.write(json.dumps(record, allow_nan=False, ensure_ascii=False) + "\n")
        self._file.flush()
        self.last_t = int(t)
        self.records += 1
        if record_type == "end":
            self.ended = True
        return record

    def end(self, t: int, *, terminated: bool, truncated: bool, reason: str, steps: int, blocks_delivered: int,
            blocks_total: int, weight_delivered: int, weight_total: int, **extra) -> dict:
        return self.write("end", t, terminated=bool(terminated), truncated=bool(truncated), reason=str(reason),
                          steps=int(steps), blocks_delivered=int(blocks_delivered), blocks_total=int(blocks_total),
                          weight_delivered=int(weight_delivered), weight_total=int(weight_total), **extra)

    def abort(self, reason: str, **end_fields) -> None:
        """Ends an interrupted trace: an ``end`` record, truncated, with ``reason``.

        ``end_fields`` are the outcome counts known so far (``steps``, ``blocks_*``,
        ``weight_*``); missing ones are written as 0.
        """
        if self.ended:
            return
        counts = {key: int(end_fields.get(key, 0)) for key in
                  ("steps", "blocks_delivered", "blocks_total", "weight_delivered", "weight_total")}
        self.end(self.last_t, terminated=False, truncated=True, reason=reason, **counts)

    def close(self) -> None:
        if self._owns_file and not self._file.closed:
            self._file.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.ended:
                if exc_type is None:
                    reason = "closed without an end record"
                elif issubclass(exc_type, KeyboardInterrupt):
                    reason = "interrupted (KeyboardInterrupt)"
                elif issubclass(exc_type, asyncio.CancelledError):
                    # what an asyncio program sees of Ctrl-C, a timeout or a shutdown
                    reason = "interrupted (cancelled)"
                else:
                    reason = f"error: {exc_type.__name__}: {str(exc)[:200]}"
                self.abort(reason, **self.outcome)
        finally:
            self.close()


# --- reading and validating ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TraceProblem:
    """Where a trace breaks the schema: 1-based ``line``, the ``key`` (dotted path, or None
    for the record as a whole) and what is wrong."""

    line: int
    key: Optional[str]
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f", key {self.key!r}" if self.key else "")
        return f"{where}: {self.message}"


class TraceError(ValueError):
    """A trace file that does not follow LLM.md section 5; ``problem`` says where."""

    def __init__(self, source: str, problem: TraceProblem):
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[:EXCERPT] + "..."


# Names pydantic puts into an error's location for the member of a union it tried.
_UNION_TAGS = {"int", "float", "str", "bool", "list", "dict", "tuple", "none", "null"}


def _pydantic_problem(line: int, err: pydantic.ValidationError) -> TraceProblem:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]
           if not (isinstance(p, str) and ("[" in p or p.startswith(("function-", "constrained-")) or p in _UNION_TAGS))]
    key = ".".join(loc) or None
    if key == "schema_version":
        key = "schema"
    return TraceProblem(line, key, first["msg"])


def check_records(lines: List[str]) -> Tuple[List[dict], Optional[TraceProblem]]:
    """(records parsed so far, the first problem or None) for the lines of a trace."""
    records: List[dict] = []
    agents: Optional[set] = None
    last_t = 0
    steps = 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            return records, TraceProblem(number, None, "empty line")
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            return records, TraceProblem(number, None, f"not JSON ({err.msg}): {_excerpt(text)!r}")
        if not isinstance(record, dict):
            return records, TraceProblem(number, None, f"a record must be a JSON object, got {type(record).__name__}")
        kind = record.get("type")
        if kind not in RECORD_MODELS:
            return records, TraceProblem(number, "type", f"unknown record type {_excerpt(repr(kind))}; types are {RECORD_TYPES}")
        if number == 1 and kind != "episode":
            return records, TraceProblem(number, "type", f"the first record must be 'episode', got {kind!r}")
        if number > 1 and kind == "episode":
            return records, TraceProblem(number, "type", "only the first record may be 'episode'")
        if records and records[-1]["type"] == "end":
            return records, TraceProblem(number, "type", "a record after the 'end' record")
        try:
            # JSON mode: the strict models take JSON arrays for their tuples (positions, blocks)
            RECORD_MODELS[kind].model_validate_json(text)
        except pydantic.ValidationError as err:
            return records, _pydantic_problem(number, err)
        if record["t"] < last_t:
            return records, TraceProblem(number, "t", f"t went back from {last_t} to {record['t']}")
        last_t = record["t"]
        if kind == "episode":
            agents = set(record["agents"])
        else:
            for key in ("agent", "sender"):
                if key in record and record[key] not in agents:
                    return records, TraceProblem(number, key, f"unknown agent {_excerpt(str(record[key]))!r}")
            for key in ("recipients",):
                for name in record.get(key, ()):
                    if name not in agents:
                        return records, TraceProblem(number, key, f"unknown agent {_excerpt(str(name))!r}")
            if kind == "step":
                if record["t"] != steps:
                    return records, TraceProblem(number, "t", f"step record {steps} has t={record['t']}")
                steps += 1
                for key in ("actions", "symbolic"):
                    if set(record[key]) != agents:
                        return records, TraceProblem(number, key, "must name every agent of the episode record")
                if len(record["reward"]) != len(agents) or len(record["agents"]) != len(agents):
                    return records, TraceProblem(number, "reward", "needs one entry per agent")
            if kind == "end" and record["steps"] != steps:
                return records, TraceProblem(number, "steps", f"says {record['steps']} but the trace has {steps} step records")
        records.append(record)
    if not records:
        return records, TraceProblem(1, None, "the trace is empty")
    if records[-1]["type"] != "end":
        return records, TraceProblem(len(lines), "type", "the last record must be 'end'")
    return records, None


def _lines(source: Union[str, os.PathLike, IO[str]]) -> Tuple[str, List[str]]:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            raise TraceError(str(path), TraceProblem(0, None, "is a folder, not a trace file"))
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise TraceError(str(path), TraceProblem(0, None, f"not UTF-8 text ({err.reason} at byte {err.start})")) from None
        except OSError as err:
            raise TraceError(str(path), TraceProblem(0, None, f"cannot be read: {err.strerror}")) from None
        return str(path), text.splitlines()
    return getattr(source, "name", "<stream>"), source.read().splitlines()


def validate_trace(source: Union[str, os.PathLike, IO[str]]) -> Optional[TraceProblem]:
    """The first place where ``source`` breaks the trace schema, or None when it is valid."""
    try:
        _, lines = _lines(source)
    except TraceError as err:
        return err.problem
    return check_records(lines)[1]


def read_trace(source: Union[str, os.PathLike, IO[str]]) -> List[dict]:
    """The records of a valid trace; :class:`TraceError` naming line and key otherwise."""
    name, lines = _lines(source)
    records, problem = check_records(lines)
    if problem is not None:
        raise TraceError(name, problem)
    return records


def dumps(records: List[dict]) -> str:
    """A trace's text from its records (for tests and tools)."""
    out = io.StringIO()
    for record in records:
        out.write(json.dumps(record, allow_nan=False, ensure_ascii=False) + "\n")
    return out.getvalue()
