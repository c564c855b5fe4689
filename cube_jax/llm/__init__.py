"""Talking to language models (LLM.md section 4): one client for any OpenAI-compatible
server, the reply formats and their checks, the ask-validate-repair loop, and the
recording and replay of model exchanges.

The ``openai`` SDK (the ``llm`` extra) is imported by this package only, and only when a
:class:`ModelClient` is built; the reply formats and checks need pydantic alone.
"""
from cube_jax.llm.ask import AskOutcome, CallRecord, ReplyOptions, ask
from cube_jax.llm.client import ChatModel, ClientPool, Completion, ModelClient, ModelError, ModelSettings
from cube_jax.llm.recording import Exchange, RecordingClient, ReplayClient, ReplayMismatch, load_exchanges, request_digest
from cube_jax.llm.replies import (
    CHOICE_PURPOSES,
    MAX_NESTING,
    MAX_REPLY_CHARS,
    PURPOSES,
    InterruptReply,
    InterruptReplyFormat,
    MessageFormat,
    MessageReply,
    MessageReplyFormat,
    PlanReply,
    PlanReplyFormat,
    ReplyContext,
    ReplyMessage,
    ChoiceReply,
    ChoiceReplyFormat,
    decision_schema,
    error_feedback,
    extract_json,
    parse_reply,
    reply_example,
    reply_format,
    reply_schema,
    split_reasoning,
)

__all__ = [
    "AskOutcome",
    "CHOICE_PURPOSES",
    "ChoiceReply",
    "ChoiceReplyFormat",
    "CallRecord",
    "ChatModel",
    "ClientPool",
    "Completion",
    "Exchange",
    "InterruptReply",
    "InterruptReplyFormat",
    "MAX_NESTING",
    "MAX_REPLY_CHARS",
    "MessageFormat",
    "MessageReply",
    "MessageReplyFormat",
    "ModelClient",
    "ModelError",
    "ModelSettings",
    "PURPOSES",
    "PlanReply",
    "PlanReplyFormat",
    "RecordingClient",
    "ReplayClient",
    "ReplayMismatch",
    "ReplyOptions",
    "ReplyContext",
    "ReplyMessage",
    "ask",
    "decision_schema",
    "error_feedback",
    "extract_json",
    "load_exchanges",
    "parse_reply",
    "reply_example",
    "reply_format",
    "reply_schema",
    "request_digest",
    "split_reasoning",
]
