"""What a page may send over the WebSocket, checked before anything acts on it.

Every message is one JSON object (a text frame) with a ``type``; the models below are
strict (a number is never read from a string, unknown keys are refused) and bounded (text
lengths, list sizes, the frame's size, the nesting depth, text that UTF-8 can write).
:func:`parse_client_message` turns any text into a model or a short error that says what
is wrong and where; it never raises, so no input can take the server down. The server answers an error with ``{"type": "error", "error": ...}``
and keeps the connection open. ``id`` (optional, any integer) is echoed in the answers to
the message, so a page can match them.

>>> parse_client_message('{"type": "key", "agent": "agent_1", "key": "up"}')
(Key(id=None, type='key', agent='agent_1', key='up'), None)
>>> parse_client_message('{"type": "key", "agent": "agent_1"}')[1]
"key: field 'key': Field required"
>>> parse_client_message('{"type": "fly"}')[1]
"unknown message type 'fly'; types are: hello, pause, run, step, speed, new_episode, join, release, key, plan, resume, say, ping"
>>> parse_client_message('[1, 2]')[1]
'a message must be a JSON object, got list'
>>> parse_client_message('[' * 1200 + ']' * 1200)[1]
'nested more than 16 levels deep'
>>> parse_client_message('{"type": "say", "agent": "agent_0", "messages": [{"to": ["all"], "content": "\\udc80"}]}')[1]
'not valid Unicode text: a lone surrogate (U+DC80)'
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Dict, List, Literal, Optional, Tuple, Union

import pydantic

from cube_jax.names import excerpt
from cube_jax.runtime import MAX_MESSAGE_CHARS

# The largest text frame the server reads (the transport closes connections past 1 MiB).
MAX_FRAME_BYTES = 16 * 1024
MAX_PLAN_CHARS = 4000
MAX_SPEC_CHARS = 200
MAX_MESSAGES = 16
MAX_AGENTS = 4096
KEYS = ("up", "down", "left", "right", "stay")
# Steps per second a viewer may ask for; "max" runs as fast as the episode can.
MAX_SPEED = 1000.0
EXCERPT = 60
# The deepest message is four levels (a plan: message, list, action, arguments); a limit well
# above it, checked before parsing, keeps deep nesting away from every recursive reader.
MAX_NESTING = 16

AgentName = Annotated[str, pydantic.StringConstraints(pattern=r"^agent_(0|[1-9][0-9]{0,3})$")]
Recipient = Union[AgentName, Literal["all"]]
Speed = Union[Annotated[float, pydantic.Field(gt=0, le=MAX_SPEED)], Literal["max"]]


class _Message(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    id: Optional[int] = None


class OutgoingText(pydantic.BaseModel):
    """A message a person sends: recipients (agent names, or ``"all"`` for every agent the
    topology lets them address) and the text."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    to: Annotated[List[Recipient], pydantic.Field(min_length=1, max_length=MAX_AGENTS)]
    content: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=MAX_MESSAGE_CHARS)]


Messages = Annotated[List[OutgoingText], pydantic.Field(max_length=MAX_MESSAGES)]


class Hello(_Message):
    """Asks for the whole state again (the answer is a ``welcome``)."""

    type: Literal["hello"]


class Pause(_Message):
    type: Literal["pause"]


class RunOn(_Message):
    """Runs on (at ``speed`` steps per second when given)."""

    type: Literal["run"]
    speed: Optional[Speed] = None


class Step(_Message):
    """Pauses and lets exactly one more environment step happen."""

    type: Literal["step"]


class SetSpeed(_Message):
    type: Literal["speed"]
    speed: Speed


class NewEpisode(_Message):
    """Ends the running episode (truncated, with that reason) and starts the next seed."""

    type: Literal["new_episode"]


class Join(_Message):
    """Takes the seats of these ``human`` agents for this connection."""

    type: Literal["join"]
    agents: Annotated[List[AgentName], pydantic.Field(min_length=1, max_length=MAX_AGENTS)]


class Release(_Message):
    """Gives seats back; a running episode that needs them ends (the person left)."""

    type: Literal["release"]
    agents: Annotated[List[AgentName], pydantic.Field(min_length=1, max_length=MAX_AGENTS)]


class Key(_Message):
    """A primitive move for one step: ``move(<key>, 1)``, or ``idle(1)`` for ``stay``."""

    type: Literal["key"]
    agent: AgentName
    key: Literal["up", "down", "left", "right", "stay"]


class PlanInput(_Message):
    """A symbolic plan (text, or the JSON action list of the symbolic parser), an optional
    task string (``spec``) and messages."""

    type: Literal["plan"]
    agent: AgentName
    plan: Union[Annotated[str, pydantic.StringConstraints(min_length=1, max_length=MAX_PLAN_CHARS)],
                Annotated[List[Dict[str, Any]], pydantic.Field(min_length=1, max_length=256)]]
    spec: Optional[Annotated[str, pydantic.StringConstraints(min_length=1, max_length=MAX_SPEC_CHARS)]] = None
    messages: Messages = []


class Resume(_Message):
    """After an interrupting message: keep the running plan (and maybe answer)."""

    type: Literal["resume"]
    agent: AgentName
    messages: Messages = []


class Say(_Message):
    """A message-only turn (a centralized leader's directive)."""

    type: Literal["say"]
    agent: AgentName
    messages: Annotated[List[OutgoingText], pydantic.Field(min_length=1, max_length=MAX_MESSAGES)]


class Ping(_Message):
    type: Literal["ping"]


ClientMessage = Annotated[Union[Hello, Pause, RunOn, Step, SetSpeed, NewEpisode, Join, Release, Key, PlanInput, Resume,
                                Say, Ping], pydantic.Field(discriminator="type")]
MESSAGE_TYPES = ("hello", "pause", "run", "step", "speed", "new_episode", "join", "release", "key", "plan", "resume",
                 "say", "ping")
_ADAPTER = pydantic.TypeAdapter(ClientMessage)
# Messages that act for an agent and so need its seat.
AGENT_INPUTS = (Key, PlanInput, Resume, Say)


def _excerpt(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return repr(excerpt(text, EXCERPT))


def _validation_error(kind: str, err: pydantic.ValidationError) -> str:
    first = err.errors()[0]
    # pydantic names the union member it tried ("str", "list[dict[str,any]]", "constrained-str"): drop those
    loc = [str(p) for p in first["loc"][1:] if not (isinstance(p, str) and ("[" in p or p in {"str", "float", "int", "list"}
                                                                              or p.startswith(("constrained-", "literal")))
                                                    )]
    where = f"field {'.'.join(loc)!r}" if loc else "the message"
    return f"{kind}: {where}: {first['msg']}"


def nesting_depth(text: str, limit: int) -> int:
    """How deep ``text``'s brackets nest outside JSON strings, counted up to ``limit + 1``
    (one linear pass: no recursion, whatever the input)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in "]}":
            depth -= 1
    return deepest


def parse_client_message(text: Union[str, bytes]) -> Tuple[Optional[pydantic.BaseModel], Optional[str]]:
    """(the message, None) or (None, what is wrong with it)."""
    try:
        return _parse(text)
    except Exception as err:  # noqa: BLE001 - defensive: nothing a page sends may raise
        return None, f"the message could not be read: {type(err).__name__}"


def _parse(text: Union[str, bytes]) -> Tuple[Optional[pydantic.BaseModel], Optional[str]]:
    if not isinstance(text, (str, bytes)):
        return None, f"a message must be a text frame, got {type(text).__name__}"
    size = len(text.encode("utf-8", "replace") if isinstance(text, str) else text)
    if size > MAX_FRAME_BYTES:
        return None, f"message of {size} bytes; at most {MAX_FRAME_BYTES}"
    if isinstance(text, bytes):
        return None, "binary frames are not read; send JSON text"
    if nesting_depth(text, MAX_NESTING) > MAX_NESTING:
        return None, f"nested more than {MAX_NESTING} levels deep"
    try:
        data = json.loads(text)
    except ValueError as err:
        return None, f"not JSON ({getattr(err, 'msg', err)}): {_excerpt(text)}"
    try:
        # JSON escapes can spell lone surrogates, which no trace file (UTF-8) can hold
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        return None, f"not valid Unicode text: a lone surrogate (U+{ord(err.object[err.start]):04X})"
    if not isinstance(data, dict):
        return None, f"a message must be a JSON object, got {type(data).__name__}"
    kind = data.get("type")
    if kind not in MESSAGE_TYPES:
        return None, f"unknown message type {_excerpt(kind) if kind is not None else 'None'}; types are: " + \
            ", ".join(MESSAGE_TYPES)
    try:
        return _ADAPTER.validate_python(data), None
    except pydantic.ValidationError as err:
        return None, _validation_error(kind, err)


__all__ = ["AGENT_INPUTS", "ClientMessage", "Hello", "Join", "KEYS", "Key", "MAX_FRAME_BYTES", "MESSAGE_TYPES",
           "MAX_NESTING", "NewEpisode", "OutgoingText", "Pause", "Ping", "PlanInput", "Release", "Resume", "RunOn", "Say", "SetSpeed",
           "Step", "nesting_depth", "parse_client_message"]
