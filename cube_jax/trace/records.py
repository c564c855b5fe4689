"""The record types of a trace (LLM.md section 5), declared once.

Each record type is a ``msgspec`` Struct; together they form a tagged union on the
``"type"`` key (:data:`AnyRecord`), so one decoder picks the right type for every line.
The writer (:class:`~cube_jax.trace.writer.TraceWriter`) checks what it writes against
them, the validator (:mod:`~cube_jax.trace.validate`) checks files against them, and the
analytics read them, whole or as views that keep only the keys they use
(:func:`record_views`): a new key is one edit here.

Scalars are strict, as in the JSON file: a string is never read as a number, nor a bool
as an int (a JSON integer is a valid float). Records may carry keys beyond the ones
declared here; the types ignore them and :func:`~cube_jax.trace.read_trace` keeps them.
A rule that spans several keys of one record (a ``failed`` plan names its reason) is
checked in the record's ``__post_init__``, which raises :class:`RecordRuleError`.

>>> import msgspec
>>> msgspec.convert({"type": "stage", "t": 0, "wall": 1, "agent": "agent_0", "stage": "R"}, AnyRecord)
StageRecord(t=0, wall=1.0, agent='agent_0', stage='R')
>>> view = record_views({"stage": ("stage",)})["stage"]
>>> msgspec.convert({"type": "stage", "t": 0, "wall": 1, "agent": "agent_0", "stage": "R"}, view)
StageRecordView(t=0, wall=1.0, stage='R')
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import msgspec
from msgspec import Meta

from cube_jax.names import CHOICE_PURPOSES, EXCERPT, FACE_NAMES, LLM_PURPOSES, REPLY_MODES, STAGES, agent_name, excerpt

SCHEMA_VERSION = 1
PLAN_EVENTS = ("committed", "resumed", "succeeded", "failed", "replaced", "unfinished")
# A negotiation message's kind is the purpose of the decision that sent it.
MESSAGE_KINDS = CHOICE_PURPOSES
TASK_KEY = re.compile(rf"^(0|[1-9]\d*):({'|'.join(FACE_NAMES)})$")
BLOCK_KEY = re.compile(r"^(0|[1-9]\d*)$")


class RecordRuleError(Exception):
    """A record whose keys have the right types but break a rule of the format: ``key``
    names the key, the message says what is wrong. (Not a ValueError: msgspec would fold
    that into a message without the key.)"""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(message)


# --- field types ---------------------------------------------------------------------------------

NonNegativeInt = Annotated[int, Meta(ge=0)]
PositiveInt = Annotated[int, Meta(ge=1)]
Seconds = Annotated[float, Meta(ge=0)]
BlockId = NonNegativeInt
Cell = Tuple[int, int]  # [row, column]
BlockRow = Tuple[int, int, PositiveInt, bool]  # [row, column, weight, alive]


class AgentInfo(msgspec.Struct, gc=False):
    """An agent of the ``episode`` record: its kind and its model (null for planners)."""

    kind: str
    model: Optional[str]


class LayoutInfo(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The world at the start, as ``cube_jax.layout`` gives it."""

    t: NonNegativeInt
    agents: List[Cell]
    blocks: List[BlockRow]


class Outcome(msgspec.Struct, gc=False):
    """How an episode ended, declared once: the ``end`` record carries these keys, and the
    runtime's result, the world model's episodes and the analytics read them through this
    type (LLM.md section 5, under ``end``)."""

    steps: NonNegativeInt
    terminated: bool
    truncated: bool
    reason: str
    blocks_delivered: NonNegativeInt
    blocks_total: NonNegativeInt
    weight_delivered: NonNegativeInt
    weight_total: NonNegativeInt

    @classmethod
    def of(cls, source: Any) -> "Outcome":
        """The outcome fields of any object that has them (an ``end`` record or a view of
        one, a result, a world model's episode), as an :class:`Outcome`."""
        return cls(**{key: getattr(source, key) for key in OUTCOME_KEYS})

    def to_dict(self) -> Dict[str, Any]:
        return {key: getattr(self, key) for key in OUTCOME_KEYS}


_OUTCOME_FIELDS = msgspec.structs.fields(Outcome)
OUTCOME_KEYS = tuple(f.name for f in _OUTCOME_FIELDS)
# The counts of an outcome (its integer keys): what an interrupted trace reports as they stood.
OUTCOME_COUNTS = tuple(f.name for f in _OUTCOME_FIELDS if f.type == NonNegativeInt)


def outcome_fields() -> List[Tuple[str, Any]]:
    """The outcome's keys with their types, for :func:`msgspec.defstruct`: how a type that
    holds an outcome among other keys (the ``end`` record, the world model file's episode
    entries) declares them without listing them again."""
    return [(f.name, f.type) for f in _OUTCOME_FIELDS]


class TaskCounts(msgspec.Struct, frozen=True, gc=False):
    """A face's counts at one step (LLM.md section 5, under ``step``)."""

    required: PositiveInt
    spatial: NonNegativeInt
    temporal: NonNegativeInt
    participation: NonNegativeInt
    joint: NonNegativeInt


# The checks of plan repair (cube_jax.llm.repair), as an ``llm`` record's ``repair`` names them.
REPAIR_CHECKS = ("reach", "quorum", "clash")


class RepairInfo(msgspec.Struct, gc=False):
    """An ``llm`` record's ``repair`` key (``--repair``): the call's reply was valid but its
    plan failed ``check`` at ``face`` of ``block`` (action ``action_index``); ``resent``: the
    model was re-prompted with it (false: the repair budget was spent and the plan ran as
    it was)."""

    check: Literal[REPAIR_CHECKS]
    detail: str
    resent: bool
    block: Optional[BlockId] = None
    face: Optional[Literal[FACE_NAMES]] = None
    action_index: Optional[NonNegativeInt] = None


# --- the records ---------------------------------------------------------------------------------


class TraceRecord(msgspec.Struct, tag_field="type", gc=False):
    """Keys every record has: the environment step ``t`` and ``wall`` seconds since the
    episode started. JSON values hold no reference cycles, hence ``gc=False``."""

    t: NonNegativeInt
    wall: Seconds


class EpisodeRecord(TraceRecord, tag="episode"):
    schema: Literal[SCHEMA_VERSION]
    env: Dict[str, Any]
    seed: int
    topology: str
    agents: Dict[str, AgentInfo]
    layout: LayoutInfo


class StageRecord(TraceRecord, tag="stage"):
    agent: str
    stage: Literal[STAGES]


class PlanRecord(TraceRecord, tag="plan"):
    agent: str
    plan_id: Union[int, str]
    spec: str
    actions: List[str]
    event: Literal[PLAN_EVENTS]
    reason: Optional[str] = None
    fallback: bool = False

    def __post_init__(self):
        if self.event == "failed" and not self.reason:
            raise RecordRuleError("reason", "a plan record with event 'failed' needs a non-empty 'reason'")


class MessageRecord(TraceRecord, tag="message"):
    id: Union[int, str]
    sender: str
    recipients: List[str]
    content: str
    kind: Optional[Literal[MESSAGE_KINDS]] = None


class LLMRecord(TraceRecord, tag="llm"):
    agent: str
    purpose: Literal[LLM_PURPOSES]
    model: Optional[str]
    attempts: NonNegativeInt
    latency_s: Seconds
    prompt_tokens: NonNegativeInt
    completion_tokens: NonNegativeInt
    valid: bool
    fallback: bool
    error: Optional[str] = None
    # Reasoning models and reply modes (LLM.md section 5): absent from older traces.
    reasoning_tokens: NonNegativeInt = 0
    reasoning: Optional[str] = None  # null when there was none, or when it was dropped by option
    reasoning_chars: NonNegativeInt = 0
    finish_reason: Optional[str] = None
    starved: bool = False  # an empty answer at the token limit: valid is false
    reply_mode: Optional[Literal[REPLY_MODES]] = None
    repair: Optional[RepairInfo] = None  # plan repair (--repair): the check this reply's plan failed

    def __post_init__(self):
        if self.starved and self.valid:
            raise RecordRuleError("starved", "a starved reply (no answer at the token limit) cannot be valid")


class NoticeRecord(TraceRecord, tag="notice"):
    """Something an agent's harness changed on its own and says once (a reply mode the
    server refused, and the one used instead)."""

    agent: str
    text: str


class StepRecord(TraceRecord, tag="step"):
    actions: Dict[str, int]
    symbolic: Dict[str, Optional[str]]
    reward: List[float]
    agents: List[Cell]
    blocks: List[BlockRow]
    delivered: List[BlockId]
    tasks: Dict[str, TaskCounts]

    def __post_init__(self):
        for key in self.tasks:
            if not TASK_KEY.match(key):
                raise RecordRuleError(
                    "tasks", f"task key {excerpt(key)!r} is not '<block>:<face>' with face up, down, left or right")


class NegotiationRecord(TraceRecord, tag="negotiation"):
    room: List[str]
    proposals: Dict[str, Optional[BlockId]]
    commitments: Dict[str, Optional[BlockId]]
    team_sizes: Dict[str, PositiveInt]
    allocation: Dict[str, Optional[BlockId]]
    quorum_failed: List[BlockId]

    def __post_init__(self):
        members = set(self.room)
        if len(members) != len(self.room):
            raise RecordRuleError("room", "names an agent twice")
        for key in ("proposals", "commitments", "allocation"):
            outside = [name for name in getattr(self, key) if name not in members]
            if outside:
                raise RecordRuleError(key, f"{excerpt(outside[0])!r} is not a member of the room")
        for block in self.team_sizes:
            if not BLOCK_KEY.match(block):
                raise RecordRuleError("team_sizes", f"key {excerpt(block)!r} is not a block id")


# The last record: the episode's outcome (:class:`Outcome`), stamped with ``t`` and ``wall``.
EndRecord = msgspec.defstruct("EndRecord", outcome_fields(), bases=(TraceRecord,), tag="end", tag_field="type",
                              gc=False, module=__name__)


RECORD_CLASSES: Dict[str, type] = {
    cls.__struct_config__.tag: cls
    for cls in (EpisodeRecord, StageRecord, PlanRecord, MessageRecord, LLMRecord, NoticeRecord, StepRecord,
                NegotiationRecord, EndRecord)
}
RECORD_TYPES = tuple(RECORD_CLASSES)
AnyRecord = Union[tuple(RECORD_CLASSES.values())]


def required_keys(record_type: str) -> frozenset:
    """The keys a record of ``record_type`` must carry (``type`` included)."""
    fields = msgspec.structs.fields(RECORD_CLASSES[record_type])
    return frozenset(f.encode_name for f in fields if f.required) | {"type"}


class _StepOnly(msgspec.Struct, tag_field="type", gc=False):
    """The base of views that keep no clock reading (``record_views(..., wall=False)``)."""

    t: NonNegativeInt


def record_views(keys: Mapping[str, Sequence[str]], prefix: str = "", *, wall: bool = True) -> Dict[str, type]:
    """Light record types that hold only some keys: ``keys`` maps a record type to the keys
    to keep (``t`` is always kept, and ``wall`` unless ``wall=False``, for readers that take
    records without clock readings), each with the type declared above.

    Decoding into a view skips the keys it leaves out without building Python objects for
    them (a step record's positions and rewards are most of a trace) and checks the kept
    ones as strictly as the full types do; rules that span keys (``__post_init__``) are
    the full types' alone. A record type ``keys`` leaves out gets a view with ``t`` (and
    ``wall``) alone, so that a reader decodes every type of the format, one added later
    included. Returns record type -> view class, named ``<prefix><Type>RecordView``; union
    them with ``Union[tuple(views.values())]``.
    """
    views = {}
    keys = {**keys, **{record_type: () for record_type in RECORD_TYPES if record_type not in keys}}
    for record_type, kept in keys.items():
        if record_type not in RECORD_CLASSES:
            raise ValueError(f"record_views: unknown record type {record_type!r}; types are {RECORD_TYPES}")
        full = RECORD_CLASSES[record_type]
        fields = {f.name: f for f in msgspec.structs.fields(full)}
        unknown = [key for key in kept if key not in fields]
        if unknown:
            raise ValueError(f"record_views: a {record_type!r} record has no key {unknown[0]!r}")
        spec = []
        for key in kept:
            if key in ("t", "wall"):
                continue
            field = fields[key]
            spec.append((key, field.type) if field.required else (key, field.type, field.default))
        views[record_type] = msgspec.defstruct(f"{prefix}{full.__name__}View", spec,
                                               bases=(TraceRecord if wall else _StepOnly,),
                                               tag=record_type, tag_field="type", gc=False,
                                               module=__name__)
    return views


__all__ = ["AgentInfo", "AnyRecord", "BLOCK_KEY", "EXCERPT", "EndRecord", "EpisodeRecord", "FACE_NAMES", "LLMRecord",
           "LLM_PURPOSES", "LayoutInfo", "MESSAGE_KINDS", "MessageRecord", "NegotiationRecord", "NoticeRecord",
           "OUTCOME_COUNTS", "OUTCOME_KEYS", "Outcome", "PLAN_EVENTS", "PlanRecord", "RECORD_CLASSES", "RECORD_TYPES",
           "REPAIR_CHECKS", "RecordRuleError", "RepairInfo", "SCHEMA_VERSION", "STAGES", "StageRecord", "StepRecord",
           "TASK_KEY", "TaskCounts", "TraceRecord", "agent_name", "outcome_fields", "record_views", "required_keys"]
