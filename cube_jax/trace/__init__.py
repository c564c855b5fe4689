"""Episode traces: the JSON Lines format of LLM.md section 5, declared once.

- :mod:`~cube_jax.trace.records`: the record types, one ``msgspec`` Struct per record
  type, a tagged union on ``"type"``;
- :mod:`~cube_jax.trace.writer`: :class:`TraceWriter`, which the runtime writes with;
- :mod:`~cube_jax.trace.validate`: :func:`validate_trace` and :func:`read_trace`, which
  check files against the record types and the rules that span records.

The analytics and the web app read traces through these.
"""
from cube_jax.trace.records import (
    EXCERPT,
    FACE_NAMES,
    LLM_PURPOSES,
    MESSAGE_KINDS,
    OUTCOME_COUNTS,
    OUTCOME_KEYS,
    PLAN_EVENTS,
    RECORD_CLASSES,
    RECORD_TYPES,
    SCHEMA_VERSION,
    STAGES,
    TASK_KEY,
    AgentInfo,
    AnyRecord,
    EndRecord,
    EpisodeRecord,
    LayoutInfo,
    LLMRecord,
    MessageRecord,
    NegotiationRecord,
    NoticeRecord,
    Outcome,
    PlanRecord,
    StageRecord,
    StepRecord,
    TaskCounts,
    TraceRecord,
    agent_name,
    outcome_fields,
    record_views,
    required_keys,
)
from cube_jax.trace.validate import TraceError, TraceProblem, check_records, dumps, read_trace, validate_trace
from cube_jax.trace.writer import TraceWriter

__all__ = ["EXCERPT", "FACE_NAMES", "LLM_PURPOSES", "MESSAGE_KINDS", "OUTCOME_COUNTS", "OUTCOME_KEYS", "PLAN_EVENTS",
           "RECORD_CLASSES", "RECORD_TYPES", "SCHEMA_VERSION", "STAGES", "TASK_KEY", "AgentInfo", "AnyRecord", "EndRecord",
           "EpisodeRecord", "LLMRecord", "LayoutInfo", "MessageRecord", "NegotiationRecord", "NoticeRecord", "Outcome",
           "PlanRecord", "StageRecord", "StepRecord", "TaskCounts", "TraceError", "TraceProblem", "TraceRecord",
           "TraceWriter", "agent_name", "check_records", "dumps", "outcome_fields", "read_trace", "record_views",
           "required_keys", "validate_trace"]
