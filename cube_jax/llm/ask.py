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

Reasoning models (:class:`ReplyOptions`): the reasoning of a reply (the server's reasoning
field, and ``<think>`` sections of its text, :func:`~cube_jax.llm.replies.split_reasoning`)
is kept apart from the answer, which alone is checked. A reply whose answer is empty at the
token limit is *starved* (the model thought until its budget ran out): it is not a bad
reply and costs no repair; the same conversation is asked once more with
:data:`STARVED_BUDGET_SCALE` times the token budget, kept for the rest of the decision, and
a second starved reply in the decision falls back. The agent's earlier replies are sent
back in repair turns (the conversation is built anew at each decision, so these are the
only past assistant turns a request carries) with their reasoning as ``reasoning_history``
says: not at all, inline as a ``<think>`` section of the content, or as the assistant
message's ``reasoning_content`` field; the resent reasoning is cut to its last
:data:`ECHO_CHARS` characters, as a bad reply is to its first.

Every model call gives a :class:`CallRecord`, which holds exactly the fields of a trace
``llm`` record besides ``agent``, ``purpose``, ``t`` and ``wall`` (and a notice, when the
server refused the agent's reply mode, that the trace gives once per agent). Each is reported to the
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
from cube_jax.llm.replies import (Reply, ReplyContext, decision_schema, error_feedback, parse_reply, reply_schema,
                                  split_reasoning)
from cube_jax.names import REASONING_HISTORIES, REPLY_MODES
from cube_jax.symbolic.actions import PlanError

log = logging.getLogger(__name__)

# How much of a bad reply is echoed back to the model in a repair turn.
ECHO_CHARS = 4000
# Which JSON schema goes with a request: "state", the one built for the decision
# (decision_schema, the default), or "plain", the purpose's general schema (reply_schema).
SCHEMA_KINDS = ("state", "plain")
# A starved reply is asked again once with this many times the token budget.
STARVED_BUDGET_SCALE = 2


# One model call, as a trace ``llm`` record needs it (the agents' record of a model call).
CallRecord = ModelCall


@dataclasses.dataclass(frozen=True)
class ReplyOptions:
    """How an agent asks for its replies and what it keeps of a reasoning model's thinking.

    ``reply_mode``: one of :data:`~cube_jax.names.REPLY_MODES` (the server may refuse it; see
    :mod:`cube_jax.llm.client`). ``reasoning_history``: how reasoning is resent with the
    agent's earlier replies (:data:`~cube_jax.names.REASONING_HISTORIES`). ``drop_reasoning``:
    the trace keeps the reasoning's length, not its text.
    """

    reply_mode: str = "schema"
    reasoning_history: str = "none"
    drop_reasoning: bool = False

    def __post_init__(self):
        if self.reply_mode not in REPLY_MODES:
            raise ValueError(f"reply_mode must be one of {', '.join(REPLY_MODES)}, got {self.reply_mode!r}")
        if self.reasoning_history not in REASONING_HISTORIES:
            raise ValueError(f"reasoning_history must be one of {', '.join(REASONING_HISTORIES)}, "
                             f"got {self.reasoning_history!r}")

    def describe(self) -> Dict[str, object]:
        """The options that are not the defaults (for the trace's ``episode`` record)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != f.default}


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
    options: ReplyOptions = ReplyOptions(),
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
    request = {} if options.reply_mode == "schema" else {"reply_mode": options.reply_mode}

    def made(call: CallRecord) -> None:
        calls.append(call)
        ledger.record(call)

    problem = None
    repairs = 0
    starved_before = False
    while True:
        refused = ledger.permit()
        if refused is not None:
            problem = f"no model call made: {refused}"
            log.info("%s call not made; falling back: %s", purpose, refused)
            return AskOutcome(None, True, problem, tuple(calls), tuple(conversation))
        started = time.perf_counter()
        try:
            completion = await client.complete(conversation, schema=schema, schema_name=f"{purpose}_reply", **request)
        except ModelError as err:
            problem = f"{err.kind}: {err.message}"
            made(CallRecord(client.model, err.attempts, err.latency_s, 0, 0, False, True, problem, server_failed=True,
                            reply_mode=options.reply_mode))
            log.warning("%s call failed; falling back: %s", purpose, problem)
            return AskOutcome(None, True, problem, tuple(calls), tuple(conversation), model_failed=True)
        except asyncio.CancelledError:
            # the decision was cut short (a limit, Ctrl-C): the call was made all the same
            made(CallRecord(client.model, 1, round(time.perf_counter() - started, 6), 0, 0, False, False,
                            "cancelled before the reply arrived", reply_mode=options.reply_mode))
            raise
        answer, reasoning = _answer_and_reasoning(completion)
        if not answer.strip() and completion.finish_reason == "length":
            # the model spent its budget thinking: not a bad reply, no repair; once more with a larger budget
            problem = (f"starved: no answer within the token limit ({completion.completion_tokens} completion "
                       f"tokens, {completion.reasoning_tokens} of them reasoning)")
            made(_record(client.model, completion, reasoning, options, valid=False, fallback=starved_before,
                         error=problem, starved=True))
            if starved_before:
                break
            starved_before = True
            request["budget_scale"] = STARVED_BUDGET_SCALE
            continue
        try:
            reply = parse_reply(answer, purpose, context)
        except PlanError as err:
            problem = _problem(err, completion)
            giving_up = repairs == max_repairs
            made(_record(client.model, completion, reasoning, options, valid=False, fallback=giving_up, error=problem))
            conversation.append(_assistant_turn(answer[:ECHO_CHARS], reasoning, options.reasoning_history))
            if giving_up:
                break
            repairs += 1
            conversation.append({"role": "user", "content": error_feedback(err, purpose, context) + _cut_off_hint(completion)})
            continue
        made(_record(client.model, completion, reasoning, options, valid=True, fallback=False, error=None))
        conversation.append(_assistant_turn(answer, reasoning, options.reasoning_history))
        return AskOutcome(reply, False, None, tuple(calls), tuple(conversation))
    log.warning("%s reply still unusable after %d repair(s); falling back: %s", purpose, repairs, problem)
    return AskOutcome(None, True, problem, tuple(calls), tuple(conversation))


def _answer_and_reasoning(completion: Completion) -> Tuple[str, str]:
    """The answer of a reply, and all its reasoning: the server's field, then ``<think>`` text."""
    answer, thought = split_reasoning(completion.text)
    return answer, "\n".join(part for part in (completion.reasoning, thought) if part)


def _record(model: str, completion: Completion, reasoning: str, options: ReplyOptions, *, valid: bool,
            fallback: bool, error: Optional[str], starved: bool = False) -> CallRecord:
    return CallRecord(
        model, completion.attempts, completion.latency_s, completion.prompt_tokens, completion.completion_tokens,
        valid, fallback, error, reasoning_tokens=completion.reasoning_tokens,
        reasoning=None if options.drop_reasoning or not reasoning else reasoning, reasoning_chars=len(reasoning),
        finish_reason=completion.finish_reason, starved=starved,
        reply_mode=completion.reply_mode or ("schema" if completion.used_schema else "text"),
        notice=completion.mode_note,
    )


def _assistant_turn(answer: str, reasoning: str, history: str) -> Dict[str, str]:
    """The agent's earlier reply as it is sent back, with its reasoning as ``history`` says."""
    if reasoning and history != "none":
        kept = reasoning if len(reasoning) <= ECHO_CHARS else "..." + reasoning[-ECHO_CHARS:]
        if history == "inline":
            return {"role": "assistant", "content": f"<think>\n{kept}\n</think>\n{answer}"}
        return {"role": "assistant", "content": answer, "reasoning_content": kept}
    return {"role": "assistant", "content": answer}


def _problem(err: PlanError, completion: Completion) -> str:
    return str(err) + (" (the reply was cut off by the token limit)" if completion.finish_reason == "length" else "")


def _cut_off_hint(completion: Completion) -> str:
    if completion.finish_reason == "length":
        return "\nYour reply was cut off by the token limit: keep the reasoning short."
    return ""
