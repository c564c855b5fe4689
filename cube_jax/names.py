"""The names every layer shares, declared once: primitive actions and the rule for an
action outside them, faces, MAEIL stages, the purposes of a decision, agent names, and
how a message quotes a long text.

This module sits below every layer (as :mod:`cube_jax.files` does) and imports nothing of
the package, so the core, the trace format, the runtime, the analytics and the web app all
read the same declarations.

>>> agent_name(3), agent_index("agent_3")
('agent_3', 3)
>>> action_or_stay(2), action_or_stay(7), ACTION_NAMES[action_or_stay(-1)]
(2, 0, 'STAY')
>>> STAGES, Stage("W").name
(('R', 'W', 'X', 'I'), 'WAITING')
>>> excerpt("x" * 100, 10)
'xxxxxxxxxx...'
"""
from __future__ import annotations

import enum
import re

# --- primitive actions (DYNAMICS.md) ---------------------------------------------------------------

STAY, UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3, 4
ACTION_NAMES = ("STAY", "UP", "DOWN", "LEFT", "RIGHT")
NUM_ACTIONS = len(ACTION_NAMES)
# The largest action code; every integer above it, or below 0, is STAY.
LAST_ACTION = NUM_ACTIONS - 1


def is_action(value: int) -> bool:
    """Whether the integer ``value`` is an action code (0..4) rather than STAY by the rule."""
    return 0 <= value <= LAST_ACTION


def action_or_stay(value: int) -> int:
    """The action an integer stands for: itself in 0..4, STAY otherwise (DYNAMICS.md)."""
    return value if is_action(value) else STAY


def actions_or_stay(actions, xp):
    """:func:`action_or_stay` over an integer array of ``xp`` (``numpy`` or ``jax.numpy``),
    with the array's shape and dtype."""
    return xp.where((actions >= 0) & (actions <= LAST_ACTION), actions, STAY)


# --- faces of a block --------------------------------------------------------------------------------

# A face is the side of a block an agent stands on; its index is the face id.
FACE_NAMES = ("up", "down", "left", "right")


# --- stages and purposes (LLM.md sections 2 and 5) ---------------------------------------------------


class Stage(str, enum.Enum):
    """MAEIL stages (LLM.md section 2); the value is the ``stage`` of trace ``stage`` records."""

    REASONING = "R"
    WAITING = "W"
    EXECUTING = "X"
    INTERRUPTED = "I"


class Purpose(str, enum.Enum):
    """Why an agent is asked for a decision; the ``purpose`` of trace ``llm`` records."""

    PLAN = "plan"  # in R: commit a plan (and maybe send messages)
    INTERRUPT = "interrupt"  # in I: resume or replan after a message
    MESSAGE = "message"  # a message-only turn (a centralized leader's directive)
    PROPOSAL = "proposal"  # negotiation: propose one task (a live block id, or none)
    COMMITMENT = "commitment"  # negotiation: commit to one block (or none)


STAGES = tuple(stage.value for stage in Stage)
LLM_PURPOSES = tuple(purpose.value for purpose in Purpose)
# Negotiation purposes: the reply chooses one block (or none).
CHOICE_PURPOSES = (Purpose.PROPOSAL.value, Purpose.COMMITMENT.value)
# How a language agent asks for its reply (the ``reply_mode`` of trace ``llm`` records): with
# the JSON schema as ``response_format``, as the arguments of one forced function tool, or in
# the prompt alone.
REPLY_MODES = ("schema", "tools", "text")
# What a reasoning model may be told to spend (``reasoning_effort``), and how an agent's past
# reasoning is sent back with its earlier replies: not at all, inside the reply's content
# (``<think>...</think>``), or as the assistant message's ``reasoning_content``.
REASONING_EFFORTS = ("low", "medium", "high")
REASONING_HISTORIES = ("none", "inline", "field")


# --- agents -------------------------------------------------------------------------------------------

_AGENT_NAME = re.compile(r"^agent_(0|[1-9]\d*)$")


def agent_name(i: int) -> str:
    """The name of agent ``i`` in traces, prompts and the adapters: ``agent_i``."""
    return f"agent_{i}"


def agent_index(name: str) -> int:
    """The index ``i`` of the agent named ``agent_i``; ValueError for any other text."""
    found = _AGENT_NAME.match(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"{excerpt(repr(name))} is not an agent name (agent_<index>)")
    return int(found.group(1))


def agent_order(name: str) -> tuple:
    """A sort key that puts agent names in index order (``agent_2`` before ``agent_10``),
    any other name after them, alphabetically."""
    suffix = name.rpartition("_")[2]
    return (0, int(suffix), name) if suffix.isdigit() else (1, 0, name)


# --- excerpts -----------------------------------------------------------------------------------------

# What a message quotes of a long text, at most (before the "...").
EXCERPT = 80


def excerpt(text: str, limit: int = EXCERPT, *, fit: bool = False) -> str:
    """``text`` cut to its first ``limit`` characters, marked with "..." when cut; with
    ``fit``, cut so that the marked excerpt itself is at most ``limit`` characters."""
    if len(text) <= limit:
        return text
    return text[:limit - 3] + "..." if fit else text[:limit] + "..."


__all__ = ["ACTION_NAMES", "CHOICE_PURPOSES", "DOWN", "EXCERPT", "FACE_NAMES", "LAST_ACTION", "LEFT", "LLM_PURPOSES",
           "NUM_ACTIONS", "Purpose", "REASONING_EFFORTS", "REASONING_HISTORIES", "REPLY_MODES", "RIGHT", "STAGES", "STAY",
           "Stage", "UP", "action_or_stay", "actions_or_stay", "agent_index", "agent_name", "agent_order", "excerpt",
           "is_action"]
