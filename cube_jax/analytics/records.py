"""The parts of trace records that the metrics read, as typed ``msgspec`` structs.

Decoding a trace straight into these structs skips every key the metrics do not use (a step
record's positions, actions and rewards are most of a trace) without building Python
objects for them, and checks the types of the keys they do use on the way. The structs
follow LLM.md section 5; records may carry more keys, which are ignored. JSON values hold
no reference cycles, so the structs stay out of Python's cycle collector (``gc=False``).

>>> records = decode_records(b'{"type": "stage", "t": 0, "wall": 1, "agent": "agent_0", "stage": "R"}')
>>> records[0].stage, records[0].wall
('R', 1.0)
>>> from_dicts([{"type": "message", "t": 2, "wall": 0.5, "id": 0, "sender": "agent_1",
...              "recipients": [], "content": ""}])[0].sender
'agent_1'
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

import msgspec


class TaskCounts(msgspec.Struct, frozen=True, gc=False):
    spatial: int
    temporal: int
    participation: int
    joint: int


class Episode(msgspec.Struct, tag="episode", tag_field="type", gc=False):
    t: int
    wall: float
    seed: int
    env: Dict[str, Any]
    topology: str
    agents: Dict[str, Any]
    layout: Dict[str, Any]  # read by the workload balance (cube_jax.analytics.balance)


class Stage(msgspec.Struct, tag="stage", tag_field="type", gc=False):
    t: int
    wall: float
    agent: str
    stage: Literal["R", "W", "X", "I"]


class Plan(msgspec.Struct, tag="plan", tag_field="type", gc=False):
    t: int
    wall: float
    agent: str
    plan_id: Union[int, str]
    spec: str
    event: Literal["committed", "resumed", "succeeded", "failed", "replaced", "unfinished"]


class Message(msgspec.Struct, tag="message", tag_field="type", gc=False):
    t: int
    wall: float
    sender: str


class LLMCall(msgspec.Struct, tag="llm", tag_field="type", gc=False):
    t: int
    wall: float
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    valid: bool
    fallback: bool


class Step(msgspec.Struct, tag="step", tag_field="type", gc=False):
    t: int
    wall: float
    delivered: List[int]
    tasks: Dict[str, TaskCounts]
    # read by the workload balance
    actions: Dict[str, int]
    agents: List[Tuple[int, int]]
    blocks: List[Tuple[int, int, int, bool]]


class End(msgspec.Struct, tag="end", tag_field="type", gc=False):
    t: int
    wall: float
    terminated: bool
    steps: int
    blocks_delivered: int
    blocks_total: int
    weight_delivered: int


Record = Union[Episode, Stage, Plan, Message, LLMCall, Step, End]
_DECODER = msgspec.json.Decoder(List[Record])
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


def decode_records(data: bytes) -> List[Record]:
    """The records of a trace's bytes (JSON Lines). :class:`RecordError` when a line is not
    JSON or a record lacks a key the metrics use or has it of the wrong type."""
    lines = data.splitlines()
    # one decoder call for the whole file: the lines as one JSON array; a blank line
    # becomes an empty element and fails, as the schema wants
    try:
        records = _DECODER.decode(b"[" + b",".join(lines) + b"]")
    except msgspec.MsgspecError as err:
        raise _record_error(err) from None
    if len(records) != len(lines):
        raise RecordError(0, None, "a line holds more than one record")
    return records


def from_dicts(records: Sequence[dict]) -> List[Record]:
    """The structs of records held as dicts (as :func:`~cube_jax.trace.read_trace`
    or a running episode keep them)."""
    try:
        return msgspec.convert(list(records), List[Record])
    except msgspec.MsgspecError as err:
        raise _record_error(err) from None


def header_fields(header: Episode) -> dict:
    """The ``episode`` record's fields that tell runs apart, as a dict."""
    return {"env": header.env, "seed": header.seed, "topology": header.topology, "agents": header.agents}


def check_order(records: Sequence[Record]) -> Optional[Tuple[int, str]]:
    """(line, message) when the trace does not start with ``episode`` and end with ``end``."""
    if not records:
        return 1, "the trace is empty"
    if not isinstance(records[0], Episode):
        return 1, "the first record must be 'episode'"
    if not isinstance(records[-1], End):
        return len(records), "the last record must be 'end'"
    return None
