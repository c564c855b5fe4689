"""Loading traces fast, and what a trace's header says about its run.

Validating every record of many long traces with pydantic
(:func:`cube_jax.trace.read_trace`) costs more than their metrics. Two faster
readers parse a whole file in one ``msgspec`` call and check what their users rely on:

- :func:`load_metric_records` decodes only what the metrics read, into the typed records of
  :mod:`cube_jax.analytics.records` (the report's path);
- :func:`load_trace` gives every record as a dict (for timelines and other tools) and checks
  that the first record is the ``episode`` header and the last the ``end`` record, that every
  record has a known ``type`` and the keys its type requires, and that stages and plan
  events are known ones.

A file that fails a check is handed to the full validator, so that the error names the line
and the key as :func:`~cube_jax.trace.validate_trace` does.

>>> import io
>>> from cube_jax.analytics.synthetic import random_trace
>>> from cube_jax.trace import dumps
>>> records = load_trace(io.StringIO(dumps(random_trace(seed=0, n=2, steps=5))))
>>> records[0]["type"], records[-1]["type"], records[-1]["steps"]
('episode', 'end', 5)
>>> stratum(records[0]), team_label(records[0])
('n=2', 'llm:synthetic')
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
from pathlib import Path
from typing import IO, Dict, Iterable, List, Optional, Union

import msgspec

from cube_jax.analytics.records import Record, RecordError, check_order, decode_records
from cube_jax.trace import (
    PLAN_EVENTS,
    RECORD_MODELS,
    STAGES,
    TraceError,
    TraceProblem,
    check_records,
)

Source = Union[str, os.PathLike, IO[str]]


def _required_keys(model) -> frozenset:
    return frozenset((field.alias or name) for name, field in model.model_fields.items() if field.is_required())


# The keys each record type must carry (from the record models of the trace schema).
REQUIRED_KEYS = {kind: _required_keys(model) for kind, model in RECORD_MODELS.items()}
_STAGES = frozenset(STAGES)
_EVENTS = frozenset(PLAN_EVENTS)


def _read_bytes(source: Source) -> tuple:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            raise TraceError(str(path), TraceProblem(0, None, "is a folder, not a trace file"))
        try:
            return str(path), path.read_bytes()
        except OSError as err:
            raise TraceError(str(path), TraceProblem(0, None, f"cannot be read: {err.strerror}")) from None
    text = source.read()
    return getattr(source, "name", "<stream>"), text.encode("utf-8") if isinstance(text, str) else text


def _validator_problem(data: bytes) -> Optional[TraceProblem]:
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        return TraceProblem(0, None, f"not UTF-8 text ({err.reason} at byte {err.start})")
    return check_records(lines)[1]


def _full_check(name: str, data: bytes, fallback: TraceProblem) -> TraceError:
    """The validator's account of a file the fast checks rejected (``fallback`` if it has none)."""
    return TraceError(name, _validator_problem(data) or fallback)


def _parse(lines: List[bytes]) -> list:
    # One parser call for the whole file: a JSON array of the lines. A blank line would
    # become an empty array element and fail here, as the schema wants.
    body = b"[" + b",".join(lines) + b"]"
    return msgspec.json.decode(body)


def _structure_problem(records: list, check_records: bool) -> Optional[TraceProblem]:
    if not records:
        return TraceProblem(1, None, "the trace is empty")
    numbered = enumerate(records, start=1) if check_records else ((1, records[0]), (len(records), records[-1]))
    for number, record in numbered:
        if not isinstance(record, dict):
            return TraceProblem(number, None, f"a record must be a JSON object, got {type(record).__name__}")
        if not check_records:
            continue
        kind = record.get("type")
        required = REQUIRED_KEYS.get(kind) if isinstance(kind, str) else None
        if required is None:
            return TraceProblem(number, "type", f"unknown record type {kind!r}")
        if not required <= record.keys():
            return TraceProblem(number, sorted(required - record.keys())[0], "Field required")
        if kind == "stage" and record["stage"] not in _STAGES:
            return TraceProblem(number, "stage", f"unknown stage {record['stage']!r}; stages are {STAGES}")
        if kind == "plan" and record["event"] not in _EVENTS:
            return TraceProblem(number, "event", f"unknown plan event {record['event']!r}")
    if records[0].get("type") != "episode":
        return TraceProblem(1, "type", f"the first record must be 'episode', got {records[0].get('type')!r}")
    if records[-1].get("type") != "end":
        return TraceProblem(len(records), "type", "the last record must be 'end'")
    return None


def load_trace(source: Source, check: bool = True) -> List[dict]:
    """The records of one trace file (or text stream), checked for what the metrics need.

    Raises :class:`~cube_jax.trace.TraceError` naming the line and key of the
    first problem when the file is not a trace. ``check=False`` checks only that the file
    is JSON Lines that starts with an ``episode`` and ends with an ``end`` record, and
    leaves the rest to the caller (:func:`~cube_jax.analytics.metrics.episode_metrics`
    raises on a record it cannot use; :func:`problem_of` then names it).
    """
    name, data = _read_bytes(source)
    lines = data.splitlines()
    with collector_paused():
        try:
            records = _parse(lines)
        except msgspec.DecodeError as err:
            raise _full_check(name, data, TraceProblem(0, None, f"not JSON Lines: {err}")) from None
    problem = _structure_problem(records, check)
    if problem is None and len(records) != len(lines):
        problem = TraceProblem(0, None, "a line holds more than one record")
    if problem is not None:
        raise _full_check(name, data, problem)
    return records


@contextlib.contextmanager
def collector_paused():
    """Pauses Python's cycle collector: JSON values hold no cycles, and the collector's
    passes over the many small objects of a parse cost more than the parse itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_metric_records(source: Source) -> List[Record]:
    """What the metrics read of one trace file (or stream), as the structs of
    :mod:`cube_jax.analytics.records`: the fastest way from a file to
    :func:`~cube_jax.analytics.metrics.episode_metrics`. Raises
    :class:`~cube_jax.trace.TraceError` naming the line and key of the first problem.
    """
    name, data = _read_bytes(source)
    try:
        with collector_paused():
            records = decode_records(data)
        order = check_order(records)
        if order is not None:
            raise RecordError(order[0], "type", order[1])
    except RecordError as err:
        raise _full_check(name, data, TraceProblem(err.line, err.key, str(err))) from None
    return records


def problem_of(source: Source) -> Optional[TraceError]:
    """The full validator's account of ``source``, or None when it finds nothing wrong."""
    name, data = _read_bytes(source)
    problem = _validator_problem(data)
    return None if problem is None else TraceError(name, problem)


def trace_paths(sources: Iterable[Union[str, os.PathLike]]) -> List[Path]:
    """Trace files from files and folders: a folder gives its ``*.jsonl`` files, searched
    recursively and sorted; a file is taken as it is; a file named twice is taken once. A
    path that does not exist raises :class:`FileNotFoundError` naming it."""
    paths: Dict[Path, None] = {}
    for source in sources:
        path = Path(source)
        if path.is_dir():
            paths.update(dict.fromkeys(sorted(path.rglob("*.jsonl"))))
        elif path.exists():
            paths[path] = None
        else:
            raise FileNotFoundError(f"no such trace file or folder: {str(path)!r}")
    return list(paths)


# --- what a header says about its run ------------------------------------------------------------


def stratum(header: dict) -> str:
    """The scenario an episode was played in, the stratum of the bootstrap.

    ``env`` is what was passed to ``make``: ``{"scenario": "hard"}`` gives ``"hard"``,
    ``{"n": 4}`` gives ``"n=4"``; any other ``env`` gives its keys and values sorted,
    ``"k=v,k=v"``. Options that do not choose the world (``max_steps`` and the like) are
    left out when a scenario or n is named.

    >>> stratum({"env": {"scenario": "hard", "max_steps": 50}}), stratum({"env": {"n": 4}})
    ('hard', 'n=4')
    """
    env = header.get("env") or {}
    if "scenario" in env:
        scenario = env["scenario"]
        return scenario if isinstance(scenario, str) else json.dumps(scenario, sort_keys=True)
    if "n" in env:
        return f"n={env['n']}"
    return ",".join(f"{key}={json.dumps(env[key], sort_keys=True)}" for key in sorted(env)) or "default"


def _agent_label(info: dict) -> str:
    kind = str(info.get("kind"))
    model = info.get("model")
    return f"{kind}:{model}" if model else kind


def team_label(header: dict) -> str:
    """The team of a run: the agents' kind (and model), once when every agent shares it,
    otherwise one per agent in id order.

    >>> team_label({"agents": {"agent_0": {"kind": "heuristic", "model": None},
    ...                        "agent_1": {"kind": "heuristic", "model": None}}})
    'heuristic'
    >>> team_label({"agents": {"agent_0": {"kind": "llm", "model": "m"},
    ...                        "agent_1": {"kind": "heuristic", "model": None}}})
    'llm:m,heuristic'
    """
    labels = [_agent_label(info) for _, info in sorted(header.get("agents", {}).items(), key=_agent_order)]
    if labels and all(label == labels[0] for label in labels):
        return labels[0]
    return ",".join(labels)


def _agent_order(item) -> tuple:
    name = item[0]
    suffix = name.rpartition("_")[2]
    return (0, int(suffix), name) if suffix.isdigit() else (1, 0, name)


def agent_names(header: dict) -> List[str]:
    """The episode's agents in id order (``agent_0``, ``agent_1``, ..., ``agent_10``)."""
    return [name for name, _ in sorted(header["agents"].items(), key=_agent_order)]


def run_fields(header: dict) -> dict:
    """The fields runs are grouped by: ``topology``, ``team`` and ``scenario``."""
    return {"topology": str(header.get("topology")), "team": team_label(header), "scenario": stratum(header)}
