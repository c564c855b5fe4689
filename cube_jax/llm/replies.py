"""What a language agent replies, and how a reply is read and checked.

A reply is one JSON object. Its format depends on the *purpose* of the call
(LLM.md section 4):

* ``plan`` (:class:`PlanReplyFormat`): ``{"reasoning": ..., "spec": "push_block(block#2)",
  "plan": ..., "messages": [...]}``;
* ``interrupt`` (:class:`InterruptReplyFormat`): ``{"reasoning": ..., "decision": "resume" |
  "replan", "spec": ..., "plan": ..., "messages": [...]}``, ``spec`` and ``plan`` only
  with ``replan`` (ignored with ``resume``);
* ``message`` (:class:`MessageReplyFormat`): ``{"reasoning": ..., "messages": [...]}`` with at
  least one message (a leader's directive, a debate proposal).

``plan`` is either a list of JSON actions ``{"action": "push_block", "args": {"block": 2,
"steps": 5}}`` (``args`` may be a list in argument order) or one text plan
``"move_to_block(2, left); rendezvous(2, left, 2, 10); push_block(2, 5)"``; the action
vocabulary and its checks are :mod:`cube_jax.symbolic.actions`. A message is ``{"to":
[recipients], "content": text}``; a recipient is written ``"agent_2"``, ``2`` or ``"all"``
(every agent the topology lets this agent message). :func:`reply_schema` gives each
format's JSON schema, for ``response_format`` and for prompts. The formats, their schemas
and the checked replies are declared in :mod:`cube_jax.llm.reply_formats` and re-exported
here; this module reads and checks replies.

Reading a reply (:func:`parse_reply`) is tolerant of form and strict on content:

1. :func:`extract_json` finds the object: the whole text, else a fenced block (```json, any
   other tag, or bare ```), else an object embedded in prose (trying up to 64 ``{``
   positions, preferring one with the format's keys); outer objects are tried before the
   objects nested in them. ``<think>...</think>`` sections are skipped; trailing commas
   before ``}``/``]`` are forgiven at any depth. Replies over 64 kB, or nesting brackets deeper than 32,
   are refused without being parsed.
2. The object is checked against the format (field by field), then the plan is parsed and
   checked against the world in a :class:`ReplyContext` (unknown or delivered blocks, a
   ``count`` above the team size, too many actions, too long a wait), then the messages
   (recipients the topology allows, the message budget, non-empty content).

Every problem raises :class:`cube_jax.symbolic.PlanError` of kind ``plan_check``, with
``action_index`` and ``argument`` where they apply; :func:`error_feedback` turns one into
the text of a corrective re-prompt.

>>> context = ReplyContext(num_agents=3, block_alive=(True, False, True), agent=0,
...                        allowed_recipients=frozenset({1, 2}), message_budget=3)
>>> reply = parse_reply('Sure! ```json\\n{"spec": "push_block(block#2)", '
...     '"plan": "move_to_block(2, left); push_block(2, 5)", '
...     '"messages": [{"to": ["agent_1"], "content": "left face of block 2"}]}\\n```',
...     "plan", context)
>>> [str(a) for a in reply.plan], reply.messages
(['move_to_block(2, left)', 'push_block(2, 5)'], (ReplyMessage(recipients=(1,), content='left face of block 2'),))
>>> parse_reply('{"spec": "s", "plan": [{"action": "push_block", "args": [1, 5]}]}', "plan", context)
Traceback (most recent call last):
...
cube_jax.symbolic.actions.PlanError: plan_check: action 0 argument 'block': push_block: block 1 is already delivered
"""
from __future__ import annotations

import contextlib
import json
import re
from typing import Any, FrozenSet, Iterator, List, Optional, Sequence, Tuple

import pydantic

from cube_jax.llm.reply_formats import (
    CHOICE_PURPOSES, PURPOSES, REPLY_FORMATS, SCHEMA_MESSAGE_CHARS, SCHEMA_PLAN_ACTIONS, SCHEMA_RATIONALE_CHARS,
    SCHEMA_REASONING_CHARS, SPEC_MAX_CHARS, ChoiceReply, ChoiceReplyFormat, InterruptReply, InterruptReplyFormat,
    MessageFormat, MessageReply, MessageReplyFormat, Messages, PlanField, PlanReply, PlanReplyFormat, Reasoning,
    Reply, ReplyContext, ReplyMessage, Spec, decision_schema, reply_example, reply_format, reply_schema,
)
from cube_jax.symbolic.actions import PLAN_CHECK, PlanError, SymbolicAction, check_plan, parse_action
from cube_jax.symbolic.actions import parse_plan, parse_plan_json
from cube_jax.names import EXCERPT, agent_name, excerpt

MAX_REPLY_CHARS = 65536
MAX_NESTING = 32
# How many "{" positions of a prose reply are tried as the start of the object.
MAX_OBJECT_STARTS = 64
# The longest error message passed on (the symbolic parsers quote bad input whole).
MAX_ERROR_CHARS = 300


# --- finding the JSON object in a reply ------------------------------------------------------

# A fenced block, with or without a language tag (```json, ```JSON, ```jsonc, bare ```).
_FENCE = re.compile(r"```[ \t]*(?:[A-Za-z][\w+.-]*)?[ \t]*\r?\n?(.*?)```", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_STRING_OR_TRAILING_COMMA = re.compile(r'("(?:[^"\\]|\\.)*")|,(\s*[}\]])', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def _fail(message: str, index: Optional[int] = None, argument: Optional[str] = None) -> PlanError:
    return PlanError(PLAN_CHECK, message, index, argument)


def _cut(text: str, limit: int = EXCERPT) -> str:
    return excerpt(" ".join(text.split()), limit, fit=True)


def _excerpt(text: str) -> str:
    return repr(_cut(text))


def _json_excerpt(value: Any) -> str:
    return _cut(json.dumps(value, default=str))


def _nesting_depth(text: str) -> int:
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth = depth + 1 if bracket in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


def _without_trailing_commas(text: str) -> str:
    return _STRING_OR_TRAILING_COMMA.sub(lambda m: m.group(1) or m.group(2), text)


def _decoded(text: str) -> Iterator[Any]:
    """Every JSON value read from ``text``, outermost first: the whole of it, each fenced
    block, then objects starting at its first ``{`` positions. Each is tried as written,
    then without trailing commas, before the next one: so a whole object with a trailing
    comma wins over the objects nested in it."""
    decoder = json.JSONDecoder()
    stripped = text.strip()
    for piece in [stripped] + [m.group(1).strip() for m in _FENCE.finditer(text)]:
        for variant in (piece, _without_trailing_commas(piece)):
            try:
                yield decoder.decode(variant)
                break
            except (ValueError, RecursionError):  # ValueError covers JSONDecodeError and huge ints
                pass
    # Dropping commas moves no "{": the k-th one of the text is the k-th one of its variant.
    forgiven = _without_trailing_commas(text)
    start, forgiven_start = text.find("{"), forgiven.find("{")
    for _ in range(MAX_OBJECT_STARTS):
        if start < 0:
            return
        for variant, at in ((text, start), (forgiven, forgiven_start)):
            try:
                yield decoder.raw_decode(variant, at)[0]
                break
            except (ValueError, RecursionError):
                pass
        start, forgiven_start = text.find("{", start + 1), forgiven.find("{", forgiven_start + 1)


def extract_json(text: str, keys: Sequence[str] = ()) -> dict:
    """The JSON object in a model's reply (see the module docstring for where it looks).

    Candidates are tried outermost first, each as written and then without trailing commas
    (before ``]`` or ``}``, at any depth); among the objects found, the first holding one of
    ``keys`` wins, else the first one. Raises :class:`PlanError` (``plan_check``) when there
    is none, and for a reply that is too long or too deeply nested.

    >>> extract_json('Here you go:\\n```json\\n{"spec": "x", "plan": [1, 2,],}\\n```')
    {'spec': 'x', 'plan': [1, 2]}
    >>> extract_json('{"spec": "x", "messages": [{"to": [1], "content": "hi"},],}', keys=["spec"])
    {'spec': 'x', 'messages': [{'to': [1], 'content': 'hi'}]}
    >>> extract_json('I think {a} then {"decision": "resume"} and {"x": 1}', keys=["decision"])
    {'decision': 'resume'}
    """
    if not isinstance(text, str):
        raise _fail(f"the reply must be text, got {type(text).__name__}")
    if len(text) > MAX_REPLY_CHARS:
        raise _fail(f"the reply has {len(text)} characters; at most {MAX_REPLY_CHARS} are read")
    text = _THINK.sub("", text)
    if not text.strip():
        raise _fail("the reply is empty; answer with one JSON object")
    if _nesting_depth(text) > MAX_NESTING:
        raise _fail(f"the reply nests brackets more than {MAX_NESTING} deep")
    first_object = first_other = None
    for value in _decoded(text):
        if isinstance(value, dict):
            if any(k in value for k in keys):
                return value
            if first_object is None:
                first_object = value
        elif first_other is None:
            first_other = value
    if first_object is not None:
        return first_object
    if first_other is not None:
        kind = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(first_other), "null")
        raise _fail(f"the reply must be a JSON object {{...}}, not a JSON {kind}: {_excerpt(text)}")
    raise _fail(f"no JSON object found in the reply: {_excerpt(text)}")


def split_reasoning(text: str) -> Tuple[str, str]:
    """``(answer, reasoning)``: ``text`` without its ``<think>`` sections, and their text.

    A closed ``<think>...</think>`` section is reasoning wherever it stands; so is whatever
    comes before a ``</think>`` left without its opening tag (chat templates that open the
    section themselves), and whatever follows a ``<think>`` that is never closed (a reply cut
    off while thinking). A text without these tags is its own answer, as it is.

    >>> split_reasoning('<think>block 1 is closest</think>\\n{"spec": "idle"}')
    ('{"spec": "idle"}', 'block 1 is closest')
    >>> split_reasoning("weighing block 1 against 2</think>{}"), split_reasoning("<think>still weighing")
    (('{}', 'weighing block 1 against 2'), ('', 'still weighing'))
    """
    if "<think" not in text.lower() and "</think" not in text.lower():
        return text, ""
    parts: List[str] = []

    def keep(match) -> str:
        parts.append(match.group(0)[len("<think>"):-len("</think>")])
        return ""

    answer = _THINK.sub(keep, text)
    closing = answer.lower().rfind("</think>")
    if closing >= 0:
        parts.insert(0, answer[:closing].replace("<think>", ""))
        answer = answer[closing + len("</think>"):]
    opening = answer.lower().find("<think>")
    if opening >= 0:
        parts.append(answer[opening + len("<think>"):])
        answer = answer[:opening]
    return answer.strip(), "\n".join(p.strip() for p in parts if p.strip())


# --- checking a reply --------------------------------------------------------------------------


def parse_reply(text: str, purpose: str, context: ReplyContext) -> Reply:
    """The checked reply in ``text`` for ``purpose``, or :class:`PlanError` (``plan_check``)
    naming the first problem (see the module docstring)."""
    model = reply_format(purpose)
    data = extract_json(text, keys=tuple(model.model_fields))
    try:
        reply = model.model_validate(data)
    except pydantic.ValidationError as err:
        raise _format_error(err) from None
    if purpose in CHOICE_PURPOSES:
        return _check_choice(reply, context)
    if purpose == "message":
        return MessageReply(messages=_check_messages(reply.messages, context), reasoning=reply.reasoning)
    if purpose == "interrupt" and reply.decision == "resume":
        return InterruptReply("resume", messages=_check_messages(reply.messages, context), reasoning=reply.reasoning)
    if purpose == "interrupt":
        missing = [name for name in ("spec", "plan") if getattr(reply, name) is None]
        if missing:
            raise _fail(f"field {missing[0]!r} is required with \"decision\": \"replan\"")
    if context.required_spec is not None and reply.spec != context.required_spec:
        raise _fail(f"field 'spec' must be {context.required_spec!r} (your allocated task), got "
                    f"{_json_excerpt(reply.spec)}")
    plan = _check_plan(reply.plan, context)
    messages = _check_messages(reply.messages, context)
    if purpose == "interrupt":
        return InterruptReply("replan", reply.spec, plan, messages, reply.reasoning)
    return PlanReply(reply.spec, plan, messages, reply.reasoning)


def _check_choice(reply: "ChoiceReplyFormat", context: ReplyContext) -> ChoiceReply:
    block = reply.block
    if block is not None:
        if not 0 <= block < len(context.block_alive):
            raise _fail(f"field 'block': there is no block {block}; live blocks are "
                        f"{', '.join(map(str, context.live_blocks)) or 'none'}", argument="block")
        if not context.block_alive[block]:
            raise _fail(f"field 'block': block {block} is already delivered; live blocks are "
                        f"{', '.join(map(str, context.live_blocks)) or 'none'}", argument="block")
    rationale = " ".join(reply.rationale.split())
    return ChoiceReply(block, rationale[:MAX_ERROR_CHARS])


def _format_error(err: pydantic.ValidationError) -> PlanError:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"] if isinstance(p, int) or not re.search(r"[\[\]]", p))
    if first["type"] == "missing":
        return _fail(f"field {where!r} is missing")
    if first["type"] == "too_short":
        return _fail(f"field {where!r} needs at least {first['ctx']['min_length']} item(s)")
    got = f"; got {_json_excerpt(first['input'])}" if "input" in first else ""
    return _fail(f"field {where!r}: {first['msg']}{got}")


@contextlib.contextmanager
def _reading_plan():
    """Any failure of the symbolic parsers as a PlanError with a message of bounded length
    (they quote the offending text whole)."""
    try:
        yield
    except PlanError as err:
        if len(err.message) <= MAX_ERROR_CHARS:
            raise
        raise PlanError(err.kind, _cut(err.message, MAX_ERROR_CHARS), err.action_index, err.argument) from None
    except (ValueError, TypeError, RecursionError) as err:  # e.g. an integer too long to read
        raise _fail(f"cannot read the plan: {_cut(str(err))}") from None


def _parse_plan_field(value: Any) -> List[SymbolicAction]:
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("[", "{") and _nesting_depth(text) <= MAX_NESTING:
            try:
                return _parse_plan_field(json.loads(text))
            except (ValueError, RecursionError):
                pass  # not JSON after all: read it as a text plan
        if not text:
            raise _fail("field 'plan' is empty; give at least one action")
        with _reading_plan():
            return parse_plan(text)
    if isinstance(value, dict):
        # A lone action object, or a nested {"plan": [...]} document.
        with _reading_plan():
            return parse_plan_json(value if "plan" in value else [value])
    if isinstance(value, list):
        if not value:
            raise _fail("field 'plan' is empty; give at least one action")
        with _reading_plan():
            # Text actions among JSON ones are read first, keeping their index for errors.
            items = [parse_action(x, i).to_json() if isinstance(x, str) else x for i, x in enumerate(value)]
            return parse_plan_json(items)
    raise _fail(f"field 'plan' must be a list of actions or a text plan, got {_json_excerpt(value)}")


def _check_plan(value: Any, context: ReplyContext) -> Tuple[SymbolicAction, ...]:
    plan = _parse_plan_field(value)
    if len(plan) > context.max_plan_actions:
        raise _fail(f"the plan has {len(plan)} actions; at most {context.max_plan_actions} are accepted")
    for i, action in enumerate(plan):
        for name in ("steps", "timeout"):
            if action.args.get(name, 0) > context.max_action_steps:
                raise _fail(
                    f"{action.name}: {name} {action.args[name]} is above the limit of {context.max_action_steps}", i, name
                )
    check_plan(plan, context.num_agents, context.block_alive)
    return tuple(plan)


_AGENT_NAME = re.compile(r"^agent[\s_-]?(\d+)$", re.I)


def _recipients_of(token: Any, where: str, context: ReplyContext) -> FrozenSet[int]:
    if isinstance(token, str):
        name = token.strip()
        if name.lower() in ("all", "everyone"):
            return context.allowed_recipients
        match = _AGENT_NAME.match(name)
        if match or name.isdigit():
            token = int(match.group(1) if match else name)
    if isinstance(token, float) and token.is_integer():
        token = int(token)
    if isinstance(token, bool) or not isinstance(token, int):
        raise _fail(f'{where}: unknown recipient {_json_excerpt(token)}; write "agent_<id>", <id> or "all"')
    if not 0 <= token < context.num_agents:
        raise _fail(f"{where}: there is no agent {token}; agents are {agent_name(0)} .. {agent_name(context.num_agents - 1)}")
    if token == context.agent:
        raise _fail(f"{where}: {agent_name(token)} is yourself")
    if token not in context.allowed_recipients:
        allowed = ", ".join(agent_name(r) for r in sorted(context.allowed_recipients))
        raise _fail(f"{where}: you may not message {agent_name(token)} now; you may message: {allowed}")
    return frozenset((token,))


def _check_messages(messages: Sequence[MessageFormat], context: ReplyContext) -> Tuple[ReplyMessage, ...]:
    if not messages:
        return ()
    if not context.may_message:
        raise _fail('you may not send messages now; reply with "messages": []')
    if len(messages) > context.message_budget:
        raise _fail(f"{len(messages)} messages; you may send at most {context.message_budget} now")
    checked = []
    for k, message in enumerate(messages):
        where = f"messages.{k}.to"
        tokens = message.to if isinstance(message.to, list) else [message.to]
        if not tokens or message.to is None:
            raise _fail(f"{where}: name at least one recipient")
        recipients = frozenset().union(*(_recipients_of(token, where, context) for token in tokens))
        content = message.content.strip()
        if not content:
            raise _fail(f"messages.{k}.content is empty")
        if len(content) > context.max_message_chars:
            raise _fail(f"messages.{k}.content has {len(content)} characters; at most {context.max_message_chars}")
        checked.append(ReplyMessage(tuple(sorted(recipients)), content))
    return tuple(checked)


# --- the corrective re-prompt ---------------------------------------------------------------


def error_feedback(err: PlanError, purpose: Optional[str] = None, context: Optional[ReplyContext] = None) -> str:
    """The user message that asks a model to correct its last reply: it quotes the error
    (kind, action index, argument, message) and restates the expected format (the example
    fitted to ``context`` when given).

    >>> print(error_feedback(PlanError("plan_check", "push_block: block 1 is already delivered", 0, "block"), "message"))
    Your last reply could not be used. Error (plan_check) at action 0, argument 'block': push_block: block 1 is already delivered
    Correct it and answer again with one JSON object and nothing else, of this form:
    {"reasoning": "...", "messages": [{"to": ["all"], "content": "..."}]}
    """
    where = []
    if err.action_index is not None:
        where.append(f"action {err.action_index}")
    if err.argument is not None:
        where.append(f"argument {err.argument!r}")
    location = f" at {', '.join(where)}" if where else ""
    lines = [f"Your last reply could not be used. Error ({err.kind}){location}: {err.message}"]
    if purpose is not None:
        lines.append("Correct it and answer again with one JSON object and nothing else, of this form:")
        lines.append(reply_example(purpose, context))
    else:
        lines.append("Correct it and answer again with one JSON object and nothing else.")
    return "\n".join(lines)


__all__ = ["CHOICE_PURPOSES", "EXCERPT", "MAX_ERROR_CHARS", "MAX_NESTING", "MAX_OBJECT_STARTS", "MAX_REPLY_CHARS",
           "PURPOSES", "REPLY_FORMATS", "SCHEMA_MESSAGE_CHARS", "SCHEMA_PLAN_ACTIONS", "SCHEMA_RATIONALE_CHARS",
           "SCHEMA_REASONING_CHARS", "SPEC_MAX_CHARS", "ChoiceReply", "ChoiceReplyFormat", "InterruptReply",
           "InterruptReplyFormat", "MessageFormat", "MessageReply", "MessageReplyFormat", "Messages", "PlanField",
           "PlanReply", "PlanReplyFormat", "Reasoning", "Reply", "ReplyContext", "ReplyMessage", "Spec",
           "decision_schema", "error_feedback", "extract_json", "parse_reply", "reply_example", "reply_format",
           "reply_schema"]
