"""Checking and reading trace files: every record against its type, and the rules that
span records (LLM.md section 5).

:func:`check_records` checks the lines of a trace and names the line and the key of the
first problem (:class:`TraceProblem`): a line that is not a JSON object, a record that
breaks its type (:mod:`cube_jax.trace.records`), and the file's own rules: ``episode``
first and ``end`` last, ``t`` and ``wall`` never going back, agents named in the
``episode`` record, one ``step`` record per step, the ``end`` record's step count.
:func:`validate_trace` and :func:`read_trace` apply it to a file or a stream.

>>> import io
>>> trace = io.StringIO('{"type": "stage", "t": 0, "wall": 0.0, "agent": "agent_0", "stage": "R"}\\n')
>>> print(validate_trace(trace))
line 1, key 'type': the first record must be 'episode', got 'stage'
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import typing
from pathlib import Path
from typing import IO, Any, Iterable, List, Optional, Tuple, Union

import msgspec

from cube_jax.names import excerpt
from cube_jax.trace.records import RECORD_CLASSES, RECORD_TYPES, RecordRuleError

Source = Union[str, os.PathLike, IO[str]]


@dataclasses.dataclass(frozen=True)
class TraceProblem:
    """Where a trace breaks the format: 1-based ``line`` (0 for the file as a whole), the
    ``key`` (a dotted path such as ``reward.0``, or None for the record as a whole) and
    what is wrong."""

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


# --- one record ----------------------------------------------------------------------------------


def record_problem(record: dict, line: int) -> Optional[TraceProblem]:
    """What is wrong with one record (a dict with a known ``type``) against its type, or None."""
    cls = RECORD_CLASSES[record["type"]]
    try:
        msgspec.convert(record, cls)
    except RecordRuleError as err:
        return TraceProblem(line, err.key, str(err))
    except msgspec.ValidationError as err:
        key, message = locate(str(err), record, cls)
        return TraceProblem(line, key, message)
    return None


_AT = re.compile(r" - at `\$([^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `([^`]*)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `([^`]*)`$")
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[(\.\.\.)\]")


def locate(text: str, record: Any, cls: type) -> Tuple[Optional[str], str]:
    """(dotted key, message) of a msgspec validation error ``text`` about ``record`` read as
    ``cls``. msgspec writes a dict key as ``[...]``; the key is found again by checking the
    dict's entries one by one."""
    at = _AT.search(text)
    message = text[:at.start()] if at else text
    keys: List[str] = []
    value: Any = record
    if at:
        value, tp = record, cls
        for name, index, any_key in _SEGMENT.findall(at.group(1)):
            tp = _bare(tp)
            try:
                if name:
                    value, tp = value[name], _field(tp, name)
                    keys.append(name)
                elif index:
                    value, tp = value[int(index)], _item(tp, int(index))
                    keys.append(index)
                else:
                    _, value_type = typing.get_args(tp)
                    key = next(k for k, v in value.items() if not _fits(v, value_type))
                    value, tp = value[key], value_type
                    keys.append(str(key))
            except (KeyError, IndexError, TypeError, ValueError, StopIteration):
                keys.append("..." if any_key else (name or index))
                value = msgspec.UNSET
    missing, unknown = _MISSING.match(message), _UNKNOWN.match(message)
    if missing:
        keys.append(missing.group(1))
        message = "required key is missing"
    elif unknown:
        keys.append(unknown.group(1))
        message = "unknown key"
    elif message.startswith("Expected") and value is not msgspec.UNSET and not isinstance(value, (dict, list)):
        message = f"{message}: {excerpt(json.dumps(value, ensure_ascii=False))}"
    return ".".join(keys) or None, message


def _bare(tp: Any) -> Any:
    """``tp`` without ``Annotated`` constraints and without ``Optional``."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is Union and type(None) in typing.get_args(tp):
            rest = [arg for arg in typing.get_args(tp) if arg is not type(None)]
            if len(rest) != 1:
                return tp
            tp = rest[0]
        else:
            return tp


def _field(tp: Any, name: str) -> Any:
    fields = {f.encode_name: f.type for f in msgspec.structs.fields(tp)}
    return fields[name]


def _item(tp: Any, index: int) -> Any:
    args = typing.get_args(tp)
    return args[index] if typing.get_origin(tp) is tuple else args[0]


def _fits(value: Any, tp: Any) -> bool:
    try:
        msgspec.convert(value, tp)
    except (msgspec.ValidationError, RecordRuleError):
        return False
    return True


# --- a whole trace -------------------------------------------------------------------------------


# The key of each record type that lists agents.
_NAME_LISTS = {"message": "recipients", "negotiation": "room"}


class _Rules:
    """The rules that span records, checked record by record."""

    def __init__(self):
        self.agents: Optional[set] = None
        self.last_t = 0
        self.last_wall = 0.0
        self.steps = 0
        self.ended = False

    def check(self, number: int, record: dict) -> Optional[TraceProblem]:
        kind = record["type"]
        if number == 1 and kind != "episode":
            return TraceProblem(number, "type", f"the first record must be 'episode', got {kind!r}")
        if number > 1 and kind == "episode":
            return TraceProblem(number, "type", "only the first record may be 'episode'")
        if self.ended:
            return TraceProblem(number, "type", "a record after the 'end' record")
        problem = record_problem(record, number)
        if problem is not None:
            return problem
        if record["t"] < self.last_t:
            return TraceProblem(number, "t", f"t went back from {self.last_t} to {record['t']}")
        if record["wall"] < self.last_wall:
            return TraceProblem(number, "wall", f"wall went back from {self.last_wall} to {record['wall']}")
        self.last_t, self.last_wall = record["t"], record["wall"]
        if kind == "episode":
            self.agents = set(record["agents"])
            return None
        problem = self._names(number, record)
        if problem is not None:
            return problem
        if kind == "step":
            return self._step(number, record)
        if kind == "end":
            self.ended = True
            if record["steps"] != self.steps:
                return TraceProblem(number, "steps",
                                    f"says {record['steps']} but the trace has {self.steps} step records")
        return None

    def _names(self, number: int, record: dict) -> Optional[TraceProblem]:
        for key in ("agent", "sender"):
            if key in record and record[key] not in self.agents:
                return TraceProblem(number, key, f"unknown agent {excerpt(str(record[key]))!r}")
        # a negotiation's proposals, commitments and allocation name room members only
        key = _NAME_LISTS.get(record["type"])
        for name in record[key] if key else ():
            if name not in self.agents:
                return TraceProblem(number, key, f"unknown agent {excerpt(str(name))!r}")
        return None

    def _step(self, number: int, record: dict) -> Optional[TraceProblem]:
        if record["t"] != self.steps:
            return TraceProblem(number, "t", f"step record {self.steps} has t={record['t']}")
        self.steps += 1
        for key in ("actions", "symbolic"):
            if set(record[key]) != self.agents:
                return TraceProblem(number, key, "must name every agent of the episode record")
        if len(record["reward"]) != len(self.agents) or len(record["agents"]) != len(self.agents):
            return TraceProblem(number, "reward", "needs one entry per agent")
        return None


def parse_line(number: int, text: str) -> Tuple[Optional[dict], Optional[TraceProblem]]:
    """(the record of one line, None) or (None, what is wrong with it before its type is known)."""
    if not text.strip():
        return None, TraceProblem(number, None, "empty line")
    try:
        record = msgspec.json.decode(text)
    except msgspec.DecodeError as err:
        reason = str(err).removeprefix("JSON is malformed: ")
        return None, TraceProblem(number, None, f"not JSON ({reason}): {excerpt(text)!r}")
    if not isinstance(record, dict):
        return None, TraceProblem(number, None, f"a record must be a JSON object, got {type(record).__name__}")
    kind = record.get("type")
    if not isinstance(kind, str) or kind not in RECORD_CLASSES:
        return None, TraceProblem(number, "type", f"unknown record type {excerpt(repr(kind))}; types are {RECORD_TYPES}")
    return record, None


def check_records(lines: Iterable[str]) -> Tuple[List[dict], Optional[TraceProblem]]:
    """(records parsed so far, the first problem or None) for the lines of a trace.

    The records are the lines' JSON objects as they are, keys beyond the format's included.
    """
    records: List[dict] = []
    rules = _Rules()
    number = 0
    for number, text in enumerate(lines, start=1):
        record, problem = parse_line(number, text)
        if problem is None:
            problem = rules.check(number, record)
        if problem is not None:
            return records, problem
        records.append(record)
    if not records:
        return records, TraceProblem(1, None, "the trace is empty")
    if records[-1]["type"] != "end":
        return records, TraceProblem(number, "type", "the last record must be 'end'")
    return records, None


def _lines(source: Source) -> Tuple[str, List[str]]:
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


def validate_trace(source: Source) -> Optional[TraceProblem]:
    """The first place where ``source`` breaks the trace format, or None when it is valid."""
    try:
        _, lines = _lines(source)
    except TraceError as err:
        return err.problem
    return check_records(lines)[1]


def read_trace(source: Source) -> List[dict]:
    """The records of a valid trace as dicts (keys beyond the format's kept);
    :class:`TraceError` naming line and key otherwise."""
    name, lines = _lines(source)
    records, problem = check_records(lines)
    if problem is not None:
        raise TraceError(name, problem)
    return records


def dumps(records: Iterable[dict]) -> str:
    """A trace's text from its records (for tests and tools)."""
    out = io.StringIO()
    for record in records:
        out.write(json.dumps(record, allow_nan=False, ensure_ascii=False) + "\n")
    return out.getvalue()
