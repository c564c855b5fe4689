"""Why plans fail: each failed or replaced plan attributed to the cooperation constraint it
did not meet (EmCoop's RQ2), with the messages of its window.

For every plan whose last event is ``failed`` or ``replaced`` (the plans of ``P_int``), its
task is the block it worked on (its spec ``push_block(block#b)``, else the block its actions
name) and the face its actions name (``left`` when none does). Over the plan's window, from
its commit to its end, the ``step`` records' ``tasks`` counts of that face (LLM.md section 5)
decide, in this order:

* ``spatial``: never as many agents aligned with the face as the block's weight;
* ``participation``: never as many capable agents aligned as the weight (in CUBE every agent
  is capable, so this follows spatial and is never reached alone);
* ``temporal``: enough agents aligned at some step, but never that many pushing at the same
  step (``joint`` below the weight);
* ``none``: the face met every constraint at some step, and the plan failed for another
  reason (a path blocked, a block delivered by others, a replan);
* ``no_task``: the plan worked on no block (idle, a fallback).

The window's messages are those sent in it (from its commit step to its end step) by the
agent or to it.

>>> records = [
...     {"type": "plan", "t": 0, "agent": "agent_0", "plan_id": 0, "spec": "push_block(block#1)",
...      "actions": ["move_to_block(1, left)", "push_block(1, 3)"], "event": "committed"},
...     {"type": "message", "t": 1, "id": 0, "sender": "agent_1", "recipients": ["agent_0"], "content": "wait"},
...     {"type": "step", "t": 1, "tasks": {"1:left": {"required": 2, "spatial": 1, "temporal": 1,
...                                         "participation": 1, "joint": 1}}},
...     {"type": "plan", "t": 3, "agent": "agent_0", "plan_id": 0, "spec": "push_block(block#1)",
...      "actions": [], "event": "failed", "reason": "push_block: the block did not move"}]
>>> [(f["constraint"], f["block"], f["face"], len(f["messages"])) for f in plan_failures(records)]
[('spatial', 1, 'left', 1)]
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import msgspec

from cube_jax.names import FACE_NAMES
from cube_jax.trace import RECORD_TYPES, record_views

CONSTRAINTS = ("spatial", "temporal", "participation", "none", "no_task")
INTERRUPTED = ("failed", "replaced")
# The symbolic actions whose first argument is a block (cube paper, Table 1).
BLOCK_ACTIONS = ("move_to_block", "rendezvous", "push_block", "yield_block")
_SPEC_BLOCK = re.compile(r"block#(\d+)")
_ACTION = re.compile(rf"^\s*(\w+)\s*\(\s*(\d+)?\s*(?:,\s*({'|'.join(FACE_NAMES)}))?")
# What the table and metrics.json quote of a message, at most.
MESSAGE_EXCERPT = 160

# The keys read of each record type; records need no clock readings (hand-written ones too).
_KEYS = {kind: () for kind in RECORD_TYPES} | {
    "plan": ("agent", "plan_id", "spec", "actions", "event", "reason"),
    "message": ("sender", "recipients", "content"),
    "step": ("tasks",),
}
_VIEWS = record_views(_KEYS, prefix="Attribution", wall=False)
_Record = Union[tuple(_VIEWS.values())]


def _task(spec: str, actions: Sequence[str]):
    block, face = None, None
    match = _SPEC_BLOCK.search(spec or "")
    if match:
        block = int(match.group(1))
    for text in actions or ():
        found = _ACTION.match(text)
        if not found or found.group(2) is None or found.group(1) not in BLOCK_ACTIONS:
            continue
        if block is None:
            block = int(found.group(2))
        if face is None and int(found.group(2)) == block and found.group(3):
            face = found.group(3)
    return block, face or "left"


def _constraint(steps: Sequence[Any], block: Optional[int], face: str) -> str:
    if block is None:
        return "no_task"
    key = f"{block}:{face}"
    counts = [s.tasks.get(key) for s in steps]
    counts = [c for c in counts if c]
    required = next((c.required for c in counts), None)
    if not counts:
        return "spatial"  # nobody ever stood at the face
    if max(c.spatial for c in counts) < required:
        return "spatial"
    if max(c.participation for c in counts) < required:
        return "participation"
    if max(c.joint for c in counts) < required:
        return "temporal"
    return "none"


def plan_failures(records: Iterable[dict]) -> List[Dict[str, Any]]:
    """One entry per failed or replaced plan of one trace's records (dicts, file order):
    ``agent``, ``plan_id``, ``spec``, ``event``, ``reason``, ``t_start``, ``t_end``, ``block``,
    ``face``, ``constraint`` (one of :data:`CONSTRAINTS`) and the window's ``messages``
    (``t``, ``sender``, ``recipients``, ``content``, cut to 160 characters)."""
    records = msgspec.convert(list(records), List[_Record])
    plans: Dict[tuple, dict] = {}
    for r in records:
        if type(r) is not _VIEWS["plan"]:
            continue
        entry = plans.setdefault((r.agent, r.plan_id), {"agent": r.agent, "plan_id": r.plan_id, "spec": r.spec,
                                                        "actions": r.actions, "t_start": r.t})
        entry.update(event=r.event, t_end=r.t, reason=r.reason)
        if r.event in ("committed", "resumed") and r.actions:
            entry["actions"] = r.actions
    steps = [r for r in records if type(r) is _VIEWS["step"]]
    messages = [r for r in records if type(r) is _VIEWS["message"]]
    out = []
    for entry in plans.values():
        if entry["event"] not in INTERRUPTED:
            continue
        block, face = _task(entry["spec"], entry["actions"])
        window = [s for s in steps if entry["t_start"] <= s.t < max(entry["t_end"], entry["t_start"] + 1)]
        said = [{"t": m.t, "sender": m.sender, "recipients": list(m.recipients), "content": m.content[:MESSAGE_EXCERPT]}
                for m in messages if entry["t_start"] <= m.t <= entry["t_end"]
                and (m.sender == entry["agent"] or entry["agent"] in m.recipients)]
        out.append({"agent": entry["agent"], "plan_id": entry["plan_id"], "spec": entry["spec"], "event": entry["event"],
                    "reason": entry["reason"], "t_start": entry["t_start"], "t_end": entry["t_end"], "block": block,
                    "face": face, "constraint": _constraint(window, block, face), "messages": said})
    return out


def attribution_counts(failures: Iterable[dict]) -> Dict[str, int]:
    """``constraint -> number of plans`` over ``failures`` (every constraint listed)."""
    counts = {c: 0 for c in CONSTRAINTS}
    for failure in failures:
        counts[failure["constraint"]] += 1
    return counts


def attribution_summary(episodes: Sequence[dict]) -> Dict[str, Dict[str, float]]:
    """Across episodes (metrics.json entries with ``plan_failures``): per constraint the plans
    attributed to it, their share of all failed or replaced plans, and the mean number of
    messages in their windows."""
    failures = [f for e in episodes for f in e.get("plan_failures", [])]
    total = len(failures)
    out = {}
    for constraint in CONSTRAINTS:
        mine = [f for f in failures if f["constraint"] == constraint]
        out[constraint] = {"plans": len(mine), "share": round(len(mine) / total, 4) if total else 0.0,
                           "messages_per_window": round(sum(len(f["messages"]) for f in mine) / len(mine), 4)
                           if mine else 0.0}
    return out


def attribution_table(summary: Dict[str, Dict[str, float]]) -> str:
    """The summary of :func:`attribution_summary` as a Markdown table."""
    lines = ["| constraint violated | failed or replaced plans | share | messages in the window (mean) |",
             "|---|---|---|---|"]
    for constraint in CONSTRAINTS:
        row = summary[constraint]
        lines.append(f"| {constraint} | {row['plans']} | {row['share']:.2f} | {row['messages_per_window']:.2f} |")
    return "\n".join(lines)


__all__ = ["CONSTRAINTS", "attribution_counts", "attribution_summary", "attribution_table", "plan_failures"]
