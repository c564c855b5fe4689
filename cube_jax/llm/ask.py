"""Ask a model, check its reply, and let it repair a bad one (LLM.md section 4).

:func:`ask` sends the conversation with the purpose's JSON schema, reads the reply with
:func:`cube_jax.llm.replies.parse_reply`, and on a :class:`~cube_jax.symbolic.PlanError`
appends the model's reply and a corrective user message
(:func:`~cube_jax.llm.replies.error_feedback`) and asks again, at most ``max_repairs``
times. Then it gives up: the :class:`AskOutcome` has ``fallback=True`` and the caller falls
back to ``idle(1)``. A server that still fails after its retries (:class:`ModelError`)
ends the loop at once the same way. Nothing about a reply or a server makes :func:`ask`
raise; an exception out of it is a bug (or, with a replay client, a reproduction that
diverged).

The schema sent with each request is built for the decision
(:func:`~cube_jax.llm.replies.decision_schema`: live blocks, the vocabulary, allowed
recipients, the message budget, bounded strings and lists), or, with ``schema_kind="plain"``,
the purpose's general one.

Every model call gives a :class:`CallRecord`, which holds exactly the fields of a trace
``llm`` record besides ``agent``, ``purpose``, ``t`` and ``wall``. Each is reported to the
``ledger`` (:class:`~cube_jax.agents.CallLedger`) the moment the call ends, a call cut short
by a cancellation (a wall-clock limit, Ctrl-C) included, and the ledger is asked before
every call whether it may start at all (a hard call limit): a refused call is not made and
the outcome falls back.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from cube_jax.agents.base import CallLedger, ModelCall, OpenLedger
from cube_jax.llm.client import ChatModel, Completion, ModelError
from cube_jax.llm.replies import Reply, ReplyContext, decision_schema, error_feedback, parse_reply, reply_schema
from cube_jax.symbolic.actions import PlanError

log = logging.getLogger(__name__)

# How much of a bad reply is echoed back to the model in a repair turn.
ECHO_CHARS = 4000
# Which JSON schema goes with a request: "state", the one built for the decision
# (decision_schema, the default), or "plain", the purpose's general schema (reply_schema).
SCHEMA_KINDS = ("state", "plain")


# One model call, as a trace ``llm`` record needs it (the agents' record of a model call).
CallRecord = ModelCall


@dataclasses.dataclass(frozen=True)
class AskOutcome:
    """What :func:`ask` got.

    ``reply``: the checked reply, None on fallback. ``fallback``: True when it gave up (use
    ``idle(1)``). ``error``: the last problem's text (None when the last call was valid).
    ``calls``: one :class:`CallRecord` per model call, in order. ``transcript``: the
    conversation as sent last, plus the last reply (role ``assistant``) when there was one.
    ``model_failed``: the last call ended in a :class:`ModelError` (the server, not the
    reply, was at fault: a caller counts these to end an episode whose server keeps failing).
    """

    reply: Optional[Reply]
    fallback: bool
    error: Optional[str]
    calls: Tuple[CallRecord, ...]
    transcript: Tuple[Mapping[str, str], ...] = ()
    model_failed: bool = False


async def ask(
    client: ChatModel,
    messages: Sequence[Mapping[str, str]],
    purpose: str,
    context: ReplyContext,
    *,
    max_repairs: int = 2,
    ledger: Optional[CallLedger] = None,
    schema_kind: str = "state",
) -> AskOutcome:
    """Asks ``client`` for a ``purpose`` reply (``plan``, ``interrupt``, ``message``,
    ``proposal``, ``commitment``) to ``messages`` and checks it against ``context``; see the
    module docstring. ``schema_kind``: one of :data:`SCHEMA_KINDS`."""
    if max_repairs < 0:
        raise ValueError(f"max_repairs must be >= 0, got {max_repairs}")
    if schema_kind not in SCHEMA_KINDS:
        raise ValueError(f"schema_kind must be one of {', '.join(SCHEMA_KINDS)}, got {schema_kind!r}")
    ledger = ledger if ledger is not None else OpenLedger()
    schema = decision_schema(purpose, context) if schema_kind == "state" else reply_schema(purpose)
    conversation: List[Dict[str, str]] = [dict(m) for m in messages]
    calls: List[CallRecord] = []

    def made(call: CallRecord) -> None:
        calls.append(call)
        ledger.record(call)

    problem = None
    for repair in range(max_repairs + 1):
        refused = ledger.permit()
        if refused is not None:
            problem = f"no model call made: {refused}"
            log.info("%s call not made; falling back: %s", purpose, refused)
            return AskOutcome(None, True, problem, tuple(calls), tuple(conversation))
        started = time.perf_counter()
        try:
            completion = await client.complete(conversation, schema=schema, schema_name=f"{purpose}_reply")
        except ModelError as err:
            problem = f"{err.kind}: {err.message}"
            made(CallRecord(client.model, err.attempts, err.latency_s, 0, 0, False, True, problem, server_failed=True))
            log.warning("%s call failed; falling back: %s", purpose, problem)
            return AskOutcome(None, True, problem, tuple(calls), tuple(conversation), model_failed=True)
        except asyncio.CancelledError:
            # the decision was cut short (a limit, Ctrl-C): the call was made all the same
            made(CallRecord(client.model, 1, round(time.perf_counter() - started, 6), 0, 0, False, False,
                            "cancelled before the reply arrived"))
            raise
        try:
            reply = parse_reply(completion.text, purpose, context)
        except PlanError as err:
            problem = _problem(err, completion)
            giving_up = repair == max_repairs
            made(_record(client.model, completion, valid=False, fallback=giving_up, error=problem))
            conversation.append({"role": "assistant", "content": completion.text[:ECHO_CHARS]})
            if not giving_up:
                conversation.append({"role": "user", "content": error_feedback(err, purpose, context) + _cut_off_hint(completion)})
            continue
        made(_record(client.model, completion, valid=True, fallback=False, error=None))
        conversation.append({"role": "assistant", "content": completion.text})
        return AskOutcome(reply, False, None, tuple(calls), tuple(conversation))
    log.warning("%s reply still invalid after %d repair(s); falling back: %s", purpose, max_repairs, problem)
    return AskOutcome(None, True, problem, tuple(calls), tuple(conversation))


def _record(model: str, completion: Completion, *, valid: bool, fallback: bool, error: Optional[str]) -> CallRecord:
    return CallRecord(
        model, completion.attempts, completion.latency_s, completion.prompt_tokens, completion.completion_tokens,
        valid, fallback, error,
    )


def _problem(err: PlanError, completion: Completion) -> str:
    return str(err) + (" (the reply was cut off by the token limit)" if completion.finish_reason == "length" else "")


def _cut_off_hint(completion: Completion) -> str:
    if completion.finish_reason == "length":
        return "\nYour reply was cut off by the token limit: keep the reasoning short."
    return ""
