"""Loading traces fast, and what a trace's header says about its run.

Validating every record of many long traces (:func:`cube_jax.trace.read_trace`) costs
more than their metrics. Two faster readers parse a whole file in one ``msgspec`` call and
check what their users rely on:

- :func:`load_metric_records` decodes only the keys the metrics and the workload balance
  read (:data:`METRIC_KEYS`), into views of the trace's record types
  (:func:`cube_jax.trace.record_views`: same names, same types, fewer keys), the
  report's path;
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
>>> views = decode_records(dumps(records[:1]).encode())
>>> type(views[0]).__name__, views[0].seed
('MetricEpisodeRecordView', 0)
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import re
from pathlib import Path
from typing import IO, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import msgspec

from cube_jax.names import agent_order
from cube_jax.trace import (
    OUTCOME_KEYS,
    PLAN_EVENTS,
    RECORD_TYPES,
    STAGES,
    TraceError,
    TraceProblem,
    check_records,
    record_views,
    required_keys,
)

Source = Union[str, os.PathLike, IO[str]]

# The keys each record type must carry (from the record types of the trace format).
REQUIRED_KEYS = {kind: required_keys(kind) for kind in RECORD_TYPES}

# --- the records the metrics read ----------------------------------------------------------------

# The keys the metrics (cube_jax.analytics.metrics) and the workload balance
# (cube_jax.analytics.balance) read of each record type, besides ``t`` and ``wall``.
METRIC_KEYS = {
    "episode": ("seed", "env", "topology", "agents", "layout"),
    "stage": ("agent", "stage"),
    "plan": ("agent", "plan_id", "spec", "event"),
    "message": ("sender",),
    "llm": ("latency_s", "prompt_tokens", "completion_tokens", "valid", "fallback", "starved", "reasoning_tokens",
            "repair"),
    "step": ("delivered", "tasks", "actions", "agents", "blocks"),
    "negotiation": ("room", "proposals", "commitments", "allocation", "quorum_failed"),
    "end": OUTCOME_KEYS,
}
METRIC_VIEWS = record_views(METRIC_KEYS, prefix="Metric")
MetricRecord = Union[tuple(METRIC_VIEWS.values())]
_DECODER = msgspec.json.Decoder(List[MetricRecord])
# Where msgspec places an error in the array of a file's records: the index and the key.
_WHERE = re.compile(r"at `\$\[(\d+)\]\.?([^`]*)`")


class RecordError(ValueError):
    """A record the metrics cannot read: ``line`` (1-based, 0 if unknown), ``key`` and why."""

    def __init__(self, line: int, key: Optional[str], message: str):
        self.line, self.key = line, key
        super().__init__(message)


def _record_error(err: msgspec.MsgspecError) -> RecordError:
    text = str(err)
    where = _WHERE.search(text)
    if where is None:
        return RecordError(0, None, text)
    key = where.group(2).split(".")[0].split("[")[0] or None
    return RecordError(int(where.group(1)) + 1, key, _WHERE.sub("", text).rstrip(" -"))



def decode_records(data: bytes) -> List[MetricRecord]:
    """The metric views of a trace's bytes (JSON Lines). :class:`RecordError` when a line
    is not JSON or a record lacks a key the metrics use or has it of the wrong type."""
    lines = data.splitlines()
    # one decoder call for the whole file: the lines as one JSON array; a blank line
    # becomes an empty element and fails, as the format wants
    try:
        records = _DECODER.decode(b"[" + b",".join(lines) + b"]")
    except msgspec.MsgspecError as err:
        raise _record_error(err) from None
    if len(records) != len(lines):
        raise RecordError(0, None, "a line holds more than one record")
    return records


def from_dicts(records: Sequence[dict]) -> List[MetricRecord]:
    """The metric views of records held as dicts (as :func:`~cube_jax.trace.read_trace`
    or a running episode keep them)."""
    try:
        return msgspec.convert(list(records), List[MetricRecord])
    except msgspec.MsgspecError as err:
        raise _record_error(err) from None


def header_fields(header) -> dict:
    """The ``episode`` record's fields that tell runs apart, as plain values."""
    return {"env": header.env, "seed": header.seed, "topology": header.topology,
            "agents": msgspec.to_builtins(header.agents)}


def check_order(records: Sequence[MetricRecord]) -> Optional[Tuple[int, str]]:
    """(line, message) when the trace does not start with ``episode`` and end with ``end``."""
    if not records:
        return 1, "the trace is empty"
    if type(records[0]) is not METRIC_VIEWS["episode"]:
        return 1, "the first record must be 'episode'"
    if type(records[-1]) is not METRIC_VIEWS["end"]:
        return len(records), "the last record must be 'end'"
    return None


# --- reading files -------------------------------------------------------------------------------

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


def load_metric_records(source: Source) -> List[MetricRecord]:
    """What the metrics read of one trace file (or stream), as the views of
    :data:`METRIC_VIEWS`: the fastest way from a file to
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
    """Trace files from files and folders, in the order given (a folder's files sorted),
    each once.

    A file named in ``sources`` is taken as it is. A folder gives the ``*.jsonl`` files
    under it (searched recursively) that may be traces: a file whose first line is a JSON
    object without a ``"type"`` key is other JSON Lines that a run folder holds (the
    recorded model exchanges under ``exchanges/`` of ``cube-jax llm --record``) and is
    skipped. Every other file is taken, so a broken trace (empty, not JSON, a wrong first
    record) is still reported as invalid. A path that does not exist raises
    :class:`FileNotFoundError` naming it.
    """
    paths: Dict[Path, None] = {}
    for source in sources:
        path = Path(source)
        if path.is_dir():
            paths.update(dict.fromkeys(p for p in sorted(path.rglob("*.jsonl")) if not _other_json_lines(p)))
        elif path.exists():
            paths[path] = None
        else:
            raise FileNotFoundError(f"no such trace file or folder: {str(path)!r}")
    return list(paths)


def _other_json_lines(path: Path) -> bool:
    """Whether ``path``'s first line is a JSON object without a ``type`` key."""
    try:
        with open(path, "rb") as file:
            first = file.readline()
        record = msgspec.json.decode(first)
    except (OSError, msgspec.DecodeError):
        return False
    return isinstance(record, dict) and "type" not in record


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
    return agent_order(item[0])


def agent_names(header: dict) -> List[str]:
    """The episode's agents in id order (``agent_0``, ``agent_1``, ..., ``agent_10``)."""
    return [name for name, _ in sorted(header["agents"].items(), key=_agent_order)]


def run_fields(header: dict) -> dict:
    """The fields runs are grouped by: ``topology``, ``team`` and ``scenario``."""
    return {"topology": str(header.get("topology")), "team": team_label(header), "scenario": stratum(header)}
