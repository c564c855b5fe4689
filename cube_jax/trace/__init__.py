"""Episode traces: the JSON Lines format of LLM.md section 5, declared once.

The runtime writes it (:class:`TraceWriter`), the validator checks it
(:func:`validate_trace`), and the analytics and the web app read it (:func:`read_trace`).
"""
from cube_jax.trace.format import (
    EXCERPT,
    FACE_NAMES,
    LLM_PURPOSES,
    PLAN_EVENTS,
    RECORD_MODELS,
    RECORD_TYPES,
    SCHEMA_VERSION,
    STAGES,
    TASK_KEY,
    TraceError,
    TraceProblem,
    TraceWriter,
    agent_name,
    check_records,
    dumps,
    read_trace,
    validate_trace,
)

__all__ = ["EXCERPT", "FACE_NAMES", "LLM_PURPOSES", "PLAN_EVENTS", "RECORD_MODELS", "RECORD_TYPES", "SCHEMA_VERSION", "STAGES", "TASK_KEY",
           "TraceError", "TraceProblem", "TraceWriter", "agent_name", "check_records", "dumps", "read_trace",
           "validate_trace"]
