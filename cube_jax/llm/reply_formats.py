"""What a language agent's reply may be, declared once for prompts, servers and checks.

* the formats a model writes, one pydantic model per purpose (:func:`reply_format`), their
  JSON schemas (:func:`reply_schema`, self-contained for ``response_format``) and one-line
  examples (:func:`reply_example`);
* the schema built for one decision (:func:`decision_schema`): live blocks, the vocabulary,
  the recipients and budget of the moment;
* what a reply is checked against (:class:`ReplyContext`) and the checked replies
  :func:`cube_jax.llm.replies.parse_reply` returns (:class:`PlanReply`, ...).

:mod:`cube_jax.llm.replies` reads and checks replies against these, and re-exports them.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import Annotated, Any, Dict, FrozenSet, List, Literal, NamedTuple, Optional, Sequence, Tuple, Union

import pydantic

from cube_jax.names import CHOICE_PURPOSES, LLM_PURPOSES as PURPOSES, agent_name
from cube_jax.symbolic.actions import ACTION_SPECS, DIRECTIONS, FACES, SymbolicAction

SPEC_MAX_CHARS = 200
# Bounds of the state-aware schemas (decision_schema): every free-text field and every list
# is bounded, so that a whole reply fits the default token limit (512) and a
# grammar-constrained server cannot run into it.
SCHEMA_REASONING_CHARS = 200
SCHEMA_MESSAGE_CHARS = 200
SCHEMA_RATIONALE_CHARS = 160
SCHEMA_PLAN_ACTIONS = 6


# --- the reply formats (what prompts describe and response_format enforces) ---------------------

_SIGNATURES = ", ".join(f"{name}({', '.join(a.name for a in spec.args)})" for name, spec in ACTION_SPECS.items())
_ACTION_SCHEMA = {
    "type": "object",
    "description": f'One action: {{"action": name, "args": {{argument: value}}}} or args as a list in argument order: {_SIGNATURES}.',
    "properties": {
        "action": {"type": "string", "enum": list(ACTION_SPECS)},
        "args": {"anyOf": [{"type": "object"}, {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}]},
    },
    "required": ["action", "args"],
}
_PLAN_SCHEMA = {
    "description": (
        "The actions, in order: a list of action objects, or one text plan such as "
        '"move_to_block(2, left); rendezvous(2, left, 2, 10); push_block(2, 5)".'
    ),
    "anyOf": [
        {"type": "array", "minItems": 1, "items": _ACTION_SCHEMA},
        {"type": "string", "minLength": 1},
    ],
}
_RECIPIENTS_SCHEMA = {
    "description": 'Who receives it: agent names ("agent_2"), agent ids (2), or "all".',
    "type": "array",
    "minItems": 1,
    "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
}

Reasoning = Annotated[
    Optional[str],
    pydantic.Field(description="Optional: your reasoning, briefly, before the decision."),
]
Spec = Annotated[
    str,
    pydantic.StringConstraints(strip_whitespace=True, min_length=1, max_length=SPEC_MAX_CHARS),
    pydantic.Field(description='What the plan is for, as a task string such as "push_block(block#2)".'),
]
PlanField = Annotated[Any, pydantic.WithJsonSchema(_PLAN_SCHEMA)]


class MessageFormat(pydantic.BaseModel):
    """One message to teammates."""

    model_config = pydantic.ConfigDict(extra="ignore")
    to: Annotated[Any, pydantic.WithJsonSchema(_RECIPIENTS_SCHEMA)]
    content: str = pydantic.Field(description="The text of the message.")


def _as_message_list(value):
    # null means no messages; a lone message object is a list of one.
    return [] if value is None else [value] if isinstance(value, dict) else value


Messages = Annotated[
    List[MessageFormat],
    pydantic.BeforeValidator(_as_message_list),
    pydantic.Field(description="Messages to send now (may be empty)."),
]


class PlanReplyFormat(pydantic.BaseModel):
    """A new plan: what it is for, its actions, and messages to send with it."""

    model_config = pydantic.ConfigDict(extra="ignore")
    reasoning: Reasoning = None
    spec: Spec
    plan: PlanField
    messages: Messages = pydantic.Field(default_factory=list)


class InterruptReplyFormat(pydantic.BaseModel):
    """The answer to an interruption: keep the current plan ("resume") or replace it
    ("replan", with spec and plan)."""

    model_config = pydantic.ConfigDict(extra="ignore")
    reasoning: Reasoning = None
    decision: Annotated[
        Literal["resume", "replan"],
        pydantic.BeforeValidator(lambda v: v.strip().lower() if isinstance(v, str) else v),
        pydantic.Field(description='"resume" keeps your current plan; "replan" replaces it with spec and plan.'),
    ]
    spec: Optional[Spec] = None
    plan: Optional[PlanField] = None
    messages: Messages = pydantic.Field(default_factory=list)


class MessageReplyFormat(pydantic.BaseModel):
    """A turn that only sends messages (a leader's directive, a debate proposal)."""

    model_config = pydantic.ConfigDict(extra="ignore")
    reasoning: Reasoning = None
    messages: Annotated[
        List[MessageFormat],
        pydantic.BeforeValidator(_as_message_list),
        pydantic.Field(min_length=1, description="The messages to send (at least one)."),
    ]


def _as_block_choice(value):
    # "none", "null" and "" mean no block; "2", "block 2" and "block#2" mean block 2.
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "none", "null", "nothing"):
            return None
        match = re.fullmatch(r"(?:block\s*#?\s*)?(\d{1,9})", text)
        if match:
            return int(match.group(1))
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class ChoiceReplyFormat(pydantic.BaseModel):
    """A negotiation turn (``proposal`` or ``commitment``): one live block id, or null for none,
    and a short rationale."""

    model_config = pydantic.ConfigDict(extra="ignore")
    block: Annotated[
        Optional[int],
        pydantic.BeforeValidator(_as_block_choice),
        pydantic.Field(description="A live block id, or null for none."),
    ]
    rationale: str = pydantic.Field(default="", description="Why, in one short sentence.")


REPLY_FORMATS = {"plan": PlanReplyFormat, "interrupt": InterruptReplyFormat, "message": MessageReplyFormat,
                 "proposal": ChoiceReplyFormat, "commitment": ChoiceReplyFormat}

_EXAMPLES = {
    "plan": (
        '{"reasoning": "...", "spec": "push_block(block#2)", '
        '"plan": "move_to_block(2, left); rendezvous(2, left, 2, 10); push_block(2, 5)", '
        '"messages": [{"to": ["agent_1"], "content": "..."}]}'
    ),
    "interrupt": (
        '{"reasoning": "...", "decision": "resume", "messages": []}  or  '
        '{"reasoning": "...", "decision": "replan", "spec": "push_block(block#0)", '
        '"plan": "move_to_block(0, left); push_block(0, 5)", "messages": []}'
    ),
    "message": '{"reasoning": "...", "messages": [{"to": ["all"], "content": "..."}]}',
    "proposal": '{"block": 2, "rationale": "..."}  or  {"block": null, "rationale": "..."}',
    "commitment": '{"block": 2, "rationale": "..."}  or  {"block": null, "rationale": "..."}',
}


def reply_format(purpose: str) -> type:
    """The pydantic model of the reply for ``purpose`` (``plan``, ``interrupt``, ``message``)."""
    if purpose not in REPLY_FORMATS:
        raise ValueError(f"unknown purpose {purpose!r}; expected one of {', '.join(PURPOSES)}")
    return REPLY_FORMATS[purpose]


def reply_schema(purpose: str) -> dict:
    """The JSON schema of the reply for ``purpose``, self-contained (no ``$ref``), for
    ``response_format`` and prompts.

    >>> schema = reply_schema("plan")
    >>> list(schema["properties"]), schema["required"]
    (['reasoning', 'spec', 'plan', 'messages'], ['spec', 'plan'])
    """
    return json.loads(_schema_text(purpose))


@functools.lru_cache(maxsize=None)
def _schema_text(purpose: str) -> str:
    # Built once per purpose; callers get their own copy to change as they like.
    schema = reply_format(purpose).model_json_schema()
    return json.dumps(_inline_refs(schema, schema.pop("$defs", {})))


def reply_example(purpose: str, context: Optional["ReplyContext"] = None) -> str:
    """A one-line example of the reply for ``purpose``, for prompts and re-prompts.

    With a ``context`` the example fits that decision and its schema
    (:func:`decision_schema`): a live block, the plan as JSON actions, and messages only
    where the topology allows them, addressed to an allowed recipient; it never shows what
    the decision forbids.

    >>> silent = ReplyContext(num_agents=3, block_alive=(False, True), agent=0)
    >>> print(reply_example("interrupt", silent))
    {"decision": "resume"}  or  {"decision": "replan", "spec": "push_block(block#1)", "plan": [{"action": "move_to_block", "args": {"block": 1, "face": "left"}}, {"action": "push_block", "args": {"block": 1, "steps": 5}}]}
    """
    reply_format(purpose)
    if context is None:
        return _EXAMPLES[purpose]
    live = context.live_blocks
    block = live[0] if live else 0
    if purpose in CHOICE_PURPOSES:
        return json.dumps({"block": block, "rationale": "..."}) + "  or  " + json.dumps({"block": None, "rationale": "..."})
    messages = {}
    if context.may_message:
        to = agent_name(min(context.allowed_recipients))
        messages = {"messages": [{"to": [to], "content": "..."}]}
    if purpose == "message":
        return json.dumps({"reasoning": "...", **messages})
    count = min(2, context.num_agents)
    spec = context.required_spec or f"push_block(block#{block})"
    plan = [{"action": "move_to_block", "args": {"block": block, "face": "left"}},
            {"action": "rendezvous", "args": {"block": block, "face": "left", "count": count, "timeout": 10}},
            {"action": "push_block", "args": {"block": block, "steps": 5}}]
    if purpose == "plan":
        return json.dumps({"reasoning": "...", "spec": spec, "plan": plan, **messages})
    replan = {"decision": "replan", "spec": spec, "plan": [plan[0], plan[2]], **messages}
    return json.dumps({"decision": "resume", **messages}) + "  or  " + json.dumps(replan)


def decision_schema(purpose: str, context: "ReplyContext") -> dict:
    """The JSON schema of the reply for ``purpose`` built for one decision (LLM.md section 4,
    state-aware reply schema): block ids limited to the live blocks, faces, directions and
    action names to the vocabulary, counts to the team, recipients to those the topology
    allows now (no ``messages`` field at all where none is allowed), the number of messages
    to the budget, and every free-text field and list bounded in length. A server that
    enforces it cannot produce an out-of-vocabulary or cut-off reply; :func:`parse_reply`
    still checks everything, for servers that do not.

    >>> ctx = ReplyContext(num_agents=3, block_alive=(True, False, True), agent=0)
    >>> schema = decision_schema("plan", ctx)
    >>> sorted(schema["properties"]), schema["properties"]["spec"]["enum"]
    (['plan', 'reasoning', 'spec'], ['push_block(block#0)', 'push_block(block#2)', 'idle'])
    >>> decision_schema("proposal", ctx)["properties"]["block"]
    {'anyOf': [{'type': 'integer', 'enum': [0, 2]}, {'type': 'null'}]}
    """
    reply_format(purpose)
    live = list(context.live_blocks)
    if purpose in CHOICE_PURPOSES:
        return _object({"block": {"anyOf": ([{"type": "integer", "enum": live}] if live else []) + [{"type": "null"}]},
                        "rationale": {"type": "string", "maxLength": SCHEMA_RATIONALE_CHARS}},
                       ["block", "rationale"])
    reasoning = {"reasoning": {"type": "string", "maxLength": SCHEMA_REASONING_CHARS}}
    messages = {}
    if context.may_message:
        names = [agent_name(r) for r in sorted(context.allowed_recipients)]
        message = _object({"to": {"type": "array", "minItems": 1, "maxItems": len(names) + 1, "uniqueItems": True,
                                  "items": {"type": "string", "enum": names + ["all"]}},
                           "content": {"type": "string", "minLength": 1,
                                       "maxLength": min(SCHEMA_MESSAGE_CHARS, context.max_message_chars)}},
                          ["to", "content"])
        messages = {"messages": {"type": "array", "minItems": 1 if purpose == "message" else 0,
                                 "maxItems": context.message_budget, "items": message}}
    if purpose == "message":
        return _object({**reasoning, **messages}, ["messages"] if messages else [])
    if context.required_spec is not None:
        spec = {"type": "string", "enum": [context.required_spec]}
    else:
        spec = {"type": "string", "enum": [f"push_block(block#{b})" for b in live] + ["idle"]}
    plan = {"type": "array", "minItems": 1, "maxItems": min(SCHEMA_PLAN_ACTIONS, context.max_plan_actions),
            "items": {"anyOf": [_action_schema(name, action, context, live) for name, action in ACTION_SPECS.items()
                                if live or not any(a.kind == "block" for a in action.args)]}}
    if purpose == "plan":
        return _object({**reasoning, "spec": spec, "plan": plan, **messages}, ["spec", "plan"])
    resume = _object({**reasoning, "decision": {"type": "string", "enum": ["resume"]}, **messages}, ["decision"])
    replan = _object({**reasoning, "decision": {"type": "string", "enum": ["replan"]}, "spec": spec, "plan": plan,
                      **messages}, ["decision", "spec", "plan"])
    return {"anyOf": [resume, replan]}


def _object(properties: Dict[str, Any], required: Sequence[str]) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _action_schema(name: str, action, context: "ReplyContext", live: List[int]) -> dict:
    args = {}
    for arg in action.args:
        if arg.kind == "block":
            args[arg.name] = {"type": "integer", "enum": live}
        elif arg.kind == "face":
            args[arg.name] = {"type": "string", "enum": list(FACES)}
        elif arg.kind == "direction":
            args[arg.name] = {"type": "string", "enum": list(DIRECTIONS)}
        elif arg.name == "count":
            args[arg.name] = {"type": "integer", "minimum": max(1, arg.minimum), "maximum": context.num_agents}
        else:
            args[arg.name] = {"type": "integer", "minimum": arg.minimum, "maximum": context.max_action_steps}
    return _object({"action": {"type": "string", "enum": [name]},
                    "args": _object(args, [a.name for a in action.args])}, ["action", "args"])


def _inline_refs(node, defs: Dict[str, Any]):
    # Some servers' grammar compilers do not follow "$ref".
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            merged = {**defs[ref.split("/")[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline_refs(merged, defs)
        return {k: _inline_refs(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


# --- checked replies (what parse_reply returns) ----------------------------------------------


class ReplyMessage(NamedTuple):
    """A checked message: ``recipients`` agent ids (sorted, without duplicates), ``content``."""

    recipients: Tuple[int, ...]
    content: str


@dataclasses.dataclass(frozen=True)
class PlanReply:
    """A checked ``plan`` reply."""

    spec: str
    plan: Tuple[SymbolicAction, ...]
    messages: Tuple[ReplyMessage, ...] = ()
    reasoning: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class InterruptReply:
    """A checked ``interrupt`` reply; ``spec`` and ``plan`` are None with ``resume``."""

    decision: str
    spec: Optional[str] = None
    plan: Optional[Tuple[SymbolicAction, ...]] = None
    messages: Tuple[ReplyMessage, ...] = ()
    reasoning: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class MessageReply:
    """A checked ``message`` reply (at least one message)."""

    messages: Tuple[ReplyMessage, ...]
    reasoning: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class ChoiceReply:
    """A checked ``proposal`` or ``commitment`` reply: a live block id, or None for none."""

    block: Optional[int]
    rationale: str = ""


Reply = Union[PlanReply, InterruptReply, MessageReply, ChoiceReply]


@dataclasses.dataclass(frozen=True)
class ReplyContext:
    """What a reply is checked against: the world and the topology, seen by one agent.

    * ``num_agents``: team size; agents are ``0 .. num_agents-1`` (``agent_i``). A plan's
      ``count`` may not exceed it.
    * ``block_alive``: one bool per block, in id order (False = delivered). Plans may only
      name alive blocks.
    * ``agent``: the id of the agent replying (it cannot message itself).
    * ``allowed_recipients``: the agents it may message now (the topology decides); ``"all"``
      means exactly these. Empty, or ``message_budget`` 0: no messages allowed.
    * ``message_budget``: how many messages this reply may send.
    * ``max_plan_actions``: the longest plan accepted.
    * ``max_action_steps``: the largest ``steps`` or ``timeout`` argument accepted.
    * ``max_message_chars``: the longest message content accepted.
    * ``required_spec``: the spec a plan must have in this decision (negotiation: the
      allocated block's), None when any will do.
    """

    num_agents: int
    block_alive: Tuple[bool, ...]
    agent: int
    allowed_recipients: FrozenSet[int] = frozenset()
    message_budget: int = 0
    max_plan_actions: int = 32
    max_action_steps: int = 1000
    max_message_chars: int = 2000
    required_spec: Optional[str] = None

    def __post_init__(self):
        object.__setattr__(self, "block_alive", tuple(bool(a) for a in self.block_alive))
        object.__setattr__(self, "allowed_recipients", frozenset(int(r) for r in self.allowed_recipients))
        if self.num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {self.num_agents}")
        if not 0 <= self.agent < self.num_agents:
            raise ValueError(f"agent must be in 0..{self.num_agents - 1}, got {self.agent}")
        bad = sorted(r for r in self.allowed_recipients if not 0 <= r < self.num_agents or r == self.agent)
        if bad:
            raise ValueError(f"allowed_recipients must be other agents' ids in 0..{self.num_agents - 1}; got {bad[0]}")
        for name in ("message_budget", "max_plan_actions", "max_action_steps", "max_message_chars"):
            minimum = 0 if name == "message_budget" else 1
            if getattr(self, name) < minimum:
                raise ValueError(f"{name} must be >= {minimum}, got {getattr(self, name)}")

    @property
    def may_message(self) -> bool:
        return self.message_budget > 0 and bool(self.allowed_recipients)

    @property
    def live_blocks(self) -> Tuple[int, ...]:
        return tuple(b for b, alive in enumerate(self.block_alive) if alive)


__all__ = ["CHOICE_PURPOSES", "PURPOSES", "REPLY_FORMATS", "SCHEMA_MESSAGE_CHARS", "SCHEMA_PLAN_ACTIONS",
           "SCHEMA_RATIONALE_CHARS", "SCHEMA_REASONING_CHARS", "SPEC_MAX_CHARS", "ChoiceReply", "ChoiceReplyFormat",
           "InterruptReply", "InterruptReplyFormat", "MessageFormat", "MessageReply", "MessageReplyFormat",
           "Messages", "PlanField", "PlanReply", "PlanReplyFormat", "Reasoning", "Reply", "ReplyContext",
           "ReplyMessage", "Spec", "decision_schema", "reply_example", "reply_format", "reply_schema"]
