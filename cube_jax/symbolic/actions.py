"""Symbolic actions (cube paper, Table 1), plans, and their parsers.

A plan is a list of :class:`SymbolicAction`, written as text::

    move_to_block(2, left); rendezvous(2, left, 2, 10); push_block(2, 5)

or as JSON, checked against a pydantic schema::

    [{"action": "move_to_block", "args": {"block": 2, "face": "left"}},
     {"action": "push_block", "args": [2, 5]}]

Mistakes raise :class:`PlanError` naming the action (its index in the plan), the
argument and the reason. The exact execution semantics are in ``docs/symbolic.md``.

>>> plan = parse_plan("move_to_block(2, left); rendezvous(2, left, 2, 10); push_block(2, 5)")
>>> [a.name for a in plan]
['move_to_block', 'rendezvous', 'push_block']
>>> plan[1].args
{'block': 2, 'face': 'left', 'count': 2, 'timeout': 10}
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import pydantic

from cube_jax.core.checks import clip, excerpt, is_integer
from cube_jax.symbolic.vocabulary import (  # noqa: F401  (ACTION_SPECS and its tables are read from here too)
    ACTION_NAMES_BY_CODE,
    ACTION_SPECS,
    DIRECTIONS,
    FACE_NAMES,
    FACE_PUSH_DIRECTION,
    SYNC_ACTIONS,
    ActionSpec,
    ArgSpec,
    ErrorKind,
)

# The face names as the parser spells them (the ids are their positions, vocabulary.FACE_IDS).
FACES = FACE_NAMES
# Error kinds as PlanError spells them, following EmCoop's violation types.
PLAN_CHECK, PRECONDITION, EXECUTION = (k.label for k in (ErrorKind.PLAN_CHECK, ErrorKind.PRECONDITION, ErrorKind.EXECUTION))

# Integer arguments are stored in int32 plan arrays (cube_jax.symbolic.jax_executor).
MAX_ARGUMENT = 2**31 - 1
# Text and JSON plans larger than this are refused before parsing; plans are a few lines.
MAX_PLAN_CHARS = 2**20
# A JSON plan document is four levels deep ({"plan": [{"args": {...}}]}) plus its values.
MAX_JSON_DEPTH = 16
# Values visited when checking an already loaded JSON object (shared sub-objects count again).
MAX_JSON_NODES = 100_000

# EmCoop spellings -> (canonical action, renamed arguments)
ALIASES = {"wait": "idle", "push": "push_block"}
ARG_ALIASES = {"block_id": "block", "num_steps": "steps"}
KNOWN_ARGUMENTS = {a.name for spec in ACTION_SPECS.values() for a in spec.args}


class PlanError(ValueError):
    """A plan that cannot run: ``kind`` is ``plan_check``, ``precondition`` or ``execution``.

    ``action_index`` is the position of the offending action in the plan (None when the
    plan as a whole is wrong), ``argument`` the argument's name (None when not about one).
    """

    def __init__(self, kind: str, message: str, action_index: Optional[int] = None, argument: Optional[str] = None):
        self.kind = kind
        self.action_index = action_index
        self.argument = argument
        self.message = message
        where = [] if action_index is None else [f"action {action_index}"]
        if argument is not None:
            where.append(f"argument {excerpt(argument, 40)}")
        super().__init__(f"{kind}: {' '.join(where) + ': ' if where else ''}{message}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "action_index": self.action_index, "argument": self.argument, "message": self.message}


@dataclasses.dataclass(frozen=True)
class SymbolicAction:
    """One action with checked arguments, e.g. ``SymbolicAction("push_block", {"block": 2, "steps": 5})``.

    ``args`` maps argument names to ints (faces and directions stay lower-case strings).
    """

    name: str
    args: Dict[str, Any]

    def __post_init__(self):
        checked = check_action(self.name, self.args)
        object.__setattr__(self, "name", checked[0])
        object.__setattr__(self, "args", checked[1])

    @property
    def spec(self) -> ActionSpec:
        return ACTION_SPECS[self.name]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(self.args[a.name]) for a in self.spec.args)})"

    def __hash__(self):
        return hash((self.name, tuple(self.args.items())))

    def to_json(self) -> dict:
        return {"action": self.name, "args": dict(self.args)}


# --- argument checking ----------------------------------------------------------------------


def _fail(message: str, index: Optional[int], argument: Optional[str] = None) -> PlanError:
    return PlanError(PLAN_CHECK, message, index, argument)


def _check_value(action: str, arg: ArgSpec, value: Any, index: Optional[int]):
    if arg.kind in ("face", "direction"):
        allowed = FACES if arg.kind == "face" else tuple(DIRECTIONS)
        if not isinstance(value, str) or value.lower() not in allowed:
            raise _fail(f"{action}: {arg.kind} must be one of {', '.join(allowed)}; got {excerpt(value)}", index, arg.name)
        return value.lower()
    # integers: ints, NumPy integers or integral floats (5.0), never bools (cube_jax.core.checks)
    if isinstance(value, str) and _INT.fullmatch(value):  # a text plan's number too long to read
        raise _fail(
            f"{action}: {arg.name} must be <= {MAX_ARGUMENT} (2**31 - 1), got a number of {len(value)} digits",
            index,
            arg.name,
        )
    if not is_integer(value):
        raise _fail(f"{action}: {arg.name} must be an integer, got {excerpt(value)}", index, arg.name)
    if value < arg.minimum:
        what = "a block id" if arg.kind == "block" else arg.name
        raise _fail(f"{action}: {what} must be >= {arg.minimum}, got {excerpt(value)}", index, arg.name)
    if value > MAX_ARGUMENT:
        what = "a block id" if arg.kind == "block" else arg.name
        raise _fail(f"{action}: {what} must be <= {MAX_ARGUMENT} (2**31 - 1), got {excerpt(value)}", index, arg.name)
    return int(value)


def check_action(name: Any, args: Union[Mapping, Sequence, None], index: Optional[int] = None):
    """(canonical name, {arg: value}) for one action, or PlanError(kind="plan_check")."""
    if not isinstance(name, str):
        raise _fail(f"action name must be a string, got {excerpt(name)}", index)
    canonical = ALIASES.get(name, name)
    if canonical not in ACTION_SPECS:
        known = ", ".join(sorted(set(ACTION_SPECS) | set(ALIASES)))
        raise _fail(f"unknown action {excerpt(name, 40)}; known actions: {known}", index)
    spec = ACTION_SPECS[canonical]
    names = [a.name for a in spec.args]
    signature = f"{name}({', '.join(names)})"
    args = {} if args is None else args
    if isinstance(args, Mapping):
        given = {}
        for key, value in args.items():
            if not isinstance(key, str):
                raise _fail(f"{signature}: argument names must be strings, got {excerpt(key, 40)}", index)
            canonical_key = ARG_ALIASES.get(key, key)
            if canonical_key in given:
                raise _fail(f"{signature}: argument {canonical_key!r} is given twice", index, canonical_key)
            given[canonical_key] = value
        unknown = [k for k in given if k not in names]
        if unknown:
            raise _fail(f"{signature} has no argument {excerpt(unknown[0], 40)}", index, unknown[0])
        missing = [n for n in names if n not in given]
        if missing:
            raise _fail(f"{signature} is missing argument {missing[0]!r}", index, missing[0])
    elif isinstance(args, Sequence) and not isinstance(args, (str, bytes)):
        if len(args) != len(names):
            raise _fail(f"{signature} takes {len(names)} argument(s), got {len(args)}", index)
        given = dict(zip(names, args))
    else:
        raise _fail(f"{signature}: arguments must be a list or a mapping, got {excerpt(args)}", index)
    return canonical, {a.name: _check_value(name, a, given[a.name], index) for a in spec.args}


def make_action(name: str, *args, index: Optional[int] = None, **kwargs) -> SymbolicAction:
    """``make_action("push_block", 2, 5)`` or ``make_action("push", block_id=2, steps=5)``."""
    if args and kwargs:
        raise _fail(f"{name}: give arguments either by position or by name, not both", index)
    canonical, checked = check_action(name, kwargs if kwargs else list(args), index)
    return SymbolicAction(canonical, checked)


# --- text plans -----------------------------------------------------------------------------

_CALL = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*\((.*)\)\s*$", re.S)
# ASCII digits only: int() also reads other scripts' digits ("١٢" is 12).
_INT = re.compile(r"[+-]?[0-9]+")
# More digits than any allowed argument (2**31 - 1 has 10), with room for leading zeros.
_MAX_DIGITS = 20


def _parse_value(token: str):
    token = token.strip().strip("\"'")
    if _INT.fullmatch(token) and len(token.lstrip("+-").lstrip("0")) <= _MAX_DIGITS:
        return int(token)
    return token


def _split_actions(text: str) -> List[str]:
    """Splits on ';' and newlines outside parentheses."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch in ";\n" and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_action(text: str, index: Optional[int] = None) -> SymbolicAction:
    """One action in call form: ``name(arg, ...)`` or ``name(key=value, ...)``."""
    m = _CALL.match(text)
    if not m:
        raise _fail(f"cannot read {excerpt(text.strip())}; expected name(arg, ...), e.g. push_block(2, 5)", index)
    name, inner = m.group(1), m.group(2).strip()
    tokens = [t.strip() for t in inner.split(",")] if inner else []
    if any(not t for t in tokens):
        raise _fail(f"{clip(name, 40)}: empty argument in {excerpt(text.strip())}", index)
    keyed = [t for t in tokens if "=" in t]
    if keyed and len(keyed) != len(tokens):
        raise _fail(f"{clip(name, 40)}: give arguments either by position or by name, not both", index)
    if keyed:
        args = {}
        for t in keyed:
            key, value = (s.strip() for s in t.split("=", 1))
            if ARG_ALIASES.get(key, key) in {ARG_ALIASES.get(k, k) for k in args}:
                raise _fail(f"{clip(name, 40)}: argument {excerpt(key, 40)} is given twice", index, key)
            args[key] = _parse_value(value)
    else:
        args = [_parse_value(t) for t in tokens]
    canonical, checked = check_action(name, args, index)
    return SymbolicAction(canonical, checked)


def parse_plan(text: str) -> List[SymbolicAction]:
    """A plan from text: actions separated by ``;`` or new lines (see the module docstring)."""
    if not isinstance(text, str):
        raise _fail(f"a text plan must be a string, got {type(text).__name__}", None)
    if len(text) > MAX_PLAN_CHARS:
        raise _fail(f"the plan has {len(text)} characters; plans are at most {MAX_PLAN_CHARS}", None)
    parts = _split_actions(text)
    if not parts:
        raise _fail("the plan is empty", None)
    return [parse_action(p, i) for i, p in enumerate(parts)]


# --- JSON plans ----------------------------------------------------------------------------


class PlanItem(pydantic.BaseModel):
    """One JSON action: ``{"action": name, "args": {name: value} | [values]}``."""

    model_config = pydantic.ConfigDict(extra="forbid")
    action: str
    # Argument values are checked by check_action, whose messages name the argument.
    args: Union[Dict[str, Any], List[Any]] = pydantic.Field(default_factory=dict)


class PlanDocument(pydantic.BaseModel):
    """A JSON plan: ``{"plan": [PlanItem, ...]}`` (a bare list is accepted as well)."""

    model_config = pydantic.ConfigDict(extra="forbid")
    plan: List[PlanItem] = pydantic.Field(min_length=1)


def plan_json_schema() -> dict:
    """The JSON schema of a plan document (for prompts and tools)."""
    return PlanDocument.model_json_schema()


def _schema_error(err: pydantic.ValidationError) -> PlanError:
    first = err.errors()[0]
    # pydantic puts union member tags such as "dict[str,any]" into the location: drop them
    loc = [p for p in first["loc"] if not (isinstance(p, str) and "[" in p)]
    index = loc[1] if len(loc) >= 2 and loc[0] == "plan" and isinstance(loc[1], int) else None
    field = loc[2] if len(loc) >= 3 else None
    argument = loc[3] if field == "args" and len(loc) >= 4 and loc[3] in KNOWN_ARGUMENTS else None
    where = clip(".".join(str(p) for p in loc), 80)
    return _fail(f"JSON plan does not match the schema at {where}: {clip(first['msg'], 200)}", index, argument)


def _duplicate_keys_refused(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise _fail(f"JSON object has the key {excerpt(key, 40)} twice", None)
        obj[key] = value
    return obj


def _check_json_shape(obj) -> None:
    """Refuses loaded objects nested deeper than MAX_JSON_DEPTH or with more than MAX_JSON_NODES values.

    Iterative, so a self-referencing or shared structure costs at most MAX_JSON_NODES visits.
    """
    stack, seen = [(obj, 1)], 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_JSON_NODES:
            raise _fail(f"the JSON plan has more than {MAX_JSON_NODES} values", None)
        if isinstance(value, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                raise _fail(f"the JSON plan is nested deeper than {MAX_JSON_DEPTH} levels", None)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def parse_plan_json(obj: Union[str, bytes, list, dict]) -> List[SymbolicAction]:
    """A plan from JSON text or an already loaded object (see :class:`PlanDocument`).

    Text is at most ``MAX_PLAN_CHARS`` long, objects have unique keys, and documents are at
    most ``MAX_JSON_DEPTH`` levels deep; anything else is a PlanError.
    """
    if isinstance(obj, (str, bytes, bytearray)):
        if len(obj) > MAX_PLAN_CHARS:
            raise _fail(f"the JSON plan has {len(obj)} characters; plans are at most {MAX_PLAN_CHARS}", None)
        try:
            obj = json.loads(obj, object_pairs_hook=_duplicate_keys_refused)
        except json.JSONDecodeError as err:
            raise _fail(f"not valid JSON: {clip(str(err), 200)}", None) from None
        except UnicodeDecodeError as err:
            raise _fail(f"not valid JSON: not UTF-8 text (byte {err.start})", None) from None
        except RecursionError:
            raise _fail("the JSON plan is nested too deeply", None) from None
        except PlanError:
            raise
        except ValueError as err:  # e.g. an integer of more than 4300 digits
            raise _fail(f"not valid JSON: {clip(str(err), 200)}", None) from None
    _check_json_shape(obj)
    if isinstance(obj, list):
        obj = {"plan": obj}
    try:
        doc = PlanDocument.model_validate(obj)
    except pydantic.ValidationError as err:
        raise _schema_error(err) from None
    return [SymbolicAction(*check_action(item.action, item.args, i)) for i, item in enumerate(doc.plan)]


def plan_to_text(plan: Sequence[SymbolicAction]) -> str:
    return "; ".join(str(a) for a in plan)


# --- checks against a world -----------------------------------------------------------------


def check_plan(plan: Sequence[SymbolicAction], num_agents: int, block_alive: Sequence[bool]) -> None:
    """Raises PlanError(kind="plan_check") for block ids out of range, delivered blocks, or a
    ``count`` no team of ``num_agents`` can reach."""
    for i, action in enumerate(plan):
        if not isinstance(action, SymbolicAction):
            raise _fail(f"expected a SymbolicAction, got {excerpt(action)}", i)
        block = action.args.get("block")
        if block is not None:
            if block >= len(block_alive):
                raise _fail(f"{action.name}: unknown block {block}; blocks are 0..{len(block_alive) - 1}", i, "block")
            if not block_alive[block]:
                raise _fail(f"{action.name}: block {block} is already delivered", i, "block")
        count = action.args.get("count")
        if count is not None and count > num_agents:
            raise _fail(f"{action.name}: count {count} exceeds the {num_agents} agents of this world", i, "count")
