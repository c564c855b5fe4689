"""What one episode's trace says about its tasks: the attempts of LLM.md section 7.

Every committed plan whose spec is ``push_block(block#b)`` is one :class:`Attempt` of task
b. It starts at its ``committed`` record's ``t`` and ends at its first ``succeeded``,
``failed``, ``replaced`` or ``unfinished`` record (at the ``end`` record when the trace
names no end for it). It succeeds when block b was delivered by then: a ``step`` record
with ``t = d`` that lists b in ``delivered`` describes the step from d to d + 1, so the
block is in the goal from time d + 1 on, and the attempt succeeds when d + 1 <= its end.
Its team size is the number of agents (itself included) whose attempts at b overlap it in
time, each attempt taken as the steps [start, end) it was in place, at least one step
long: an agent that takes over a block as another lets go does not count as a teammate.

>>> from cube_jax.analytics.synthetic import random_trace
>>> reading = read_episode(random_trace(seed=3, n=3, steps=30, topology="negotiation"))
>>> reading.world, reading.episode.steps <= 30, len(reading.attempts) > 0
({'n': 3}, True, True)
>>> all(1 <= a.team_size <= 3 and a.duration >= 0 for a in reading.attempts)
True
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import msgspec

from cube_jax.trace import OUTCOME_KEYS, Outcome, record_views

# The spec that makes a plan an attempt at a task, and how a task is named.
TASK_SPEC = re.compile(r"^push_block\(block#(0|[1-9]\d*)\)$")
PLAN_ENDS = ("succeeded", "failed", "replaced", "unfinished")
# How a plan's actions (or their names) are joined into one line.
ARROW = " -> "
# What an action's name is: the text before its argument list.
_ACTION_NAME = re.compile(r"^\s*([^\s(]+)")


def task_id(block: int) -> str:
    """A task's name: ``block#b``."""
    return f"block#{block}"


def world_name(world: Optional[Mapping[str, Any]]) -> str:
    """A world as one line of text: its ``env`` as compact JSON with sorted keys."""
    return "no world yet" if world is None else json.dumps(world, sort_keys=True, separators=(", ", ": "))


def same_world(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two ``env`` mappings name the same world."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def action_name(action: str) -> str:
    """An action's name without its arguments: ``move_to_block(2, left)`` -> ``move_to_block``."""
    found = _ACTION_NAME.match(action)
    return found.group(1) if found else action.strip()


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One committed plan for a task and what came of it (times are environment steps)."""

    block: int
    actions: Tuple[str, ...]  # the plan's action texts, in order
    agent: str
    episode: int  # the episode's index in the world model
    start: int  # the commit's t
    duration: int  # steps from the commit to the plan's end
    team_size: int  # agents whose attempts at the same block overlapped this one, itself included
    success: bool  # the block was delivered by the plan's end

    @property
    def prototype(self) -> Tuple[str, ...]:
        """The action names without their arguments."""
        return tuple(action_name(a) for a in self.actions)


class EpisodeNode(Outcome, frozen=True, kw_only=True):
    """One episode of the world model: its :class:`~cube_jax.trace.Outcome` and when each
    block was delivered."""

    index: int
    seed: int
    topology: str
    completion: Mapping[int, int]  # block id -> t of the step record that delivered it
    digest: str  # identifies the trace's content, so that one trace is never added twice


@dataclasses.dataclass(frozen=True)
class EpisodeReading:
    """Everything the world model takes from one trace."""

    world: Dict[str, Any]  # the ``env`` of the ``episode`` record
    weights: Mapping[int, int]  # block id -> weight, from the layout
    episode: EpisodeNode
    attempts: Tuple[Attempt, ...]  # in the order of their commits


class TraceContentError(ValueError):
    """Records the world model cannot read: which record and why."""


# The keys read of each record type (the rest of a record is skipped while decoding).
_KEYS = {
    "episode": ("env", "seed", "topology", "layout"),
    "stage": (),
    "plan": ("agent", "plan_id", "spec", "actions", "event"),
    "message": (),
    "llm": (),
    "step": ("delivered",),
    "negotiation": (),
    "end": OUTCOME_KEYS,
}
_VIEWS = record_views(_KEYS, prefix="WorldModel")
_Record = Union[tuple(_VIEWS.values())]


def read_episode(records: Sequence[Mapping[str, Any]], index: int = 0) -> EpisodeReading:
    """The attempts and the outcome of one episode, from its trace records (dicts, as
    :func:`cube_jax.trace.read_trace` gives them or the runtime keeps them), as episode
    ``index`` of a world model. :class:`TraceContentError` names the record at fault."""
    records = list(records)
    views = _decode(records)
    if not views or type(views[0]) is not _VIEWS["episode"]:
        raise TraceContentError("record 1: the first record of a trace must be 'episode'")
    if type(views[-1]) is not _VIEWS["end"]:
        raise TraceContentError(f"record {len(views)}: the last record of a trace must be 'end'")
    header, end = views[0], views[-1]
    completion = _completion(views)
    attempts = _attempts(views, completion, end.t, index)
    episode = EpisodeNode(index=index, seed=header.seed, topology=header.topology, **Outcome.of(end).to_dict(),
                          completion=completion, digest=trace_digest(records))
    weights = {b: row[2] for b, row in enumerate(header.layout.blocks)}
    return EpisodeReading(world=dict(header.env), weights=weights, episode=episode, attempts=tuple(attempts))


# What differs between two runs of the same deterministic episode: left out of its digest.
TIMING_KEYS = ("wall", "latency_s")


def trace_digest(records: Sequence[Mapping[str, Any]]) -> str:
    """A short hash of the records' content, timings aside: the same episode played again
    by deterministic agents has the same digest (and is not added twice), so a run's world
    model file is the same on every run and at every concurrency."""
    content = [{k: v for k, v in record.items() if k not in TIMING_KEYS} for record in records]
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _decode(records: List[Mapping[str, Any]]) -> list:
    views = []
    for number, record in enumerate(records, start=1):
        if not isinstance(record, Mapping):
            raise TraceContentError(f"record {number}: expected a JSON object, got {type(record).__name__}")
        try:
            views.append(msgspec.convert(record, _Record))
        except msgspec.ValidationError as err:
            raise TraceContentError(f"record {number} ({record.get('type')!r}): {err}") from None
    return views


def _completion(views: list) -> Dict[int, int]:
    done: Dict[int, int] = {}
    for view in views:
        if type(view) is _VIEWS["step"]:
            for block in view.delivered:
                done.setdefault(block, view.t)
    return done


@dataclasses.dataclass
class _Plan:
    block: int
    agent: str
    actions: Tuple[str, ...]
    start: int
    end: Optional[int] = None


def _attempts(views: list, completion: Mapping[int, int], end_t: int, index: int) -> List[Attempt]:
    plans: Dict[Any, _Plan] = {}
    for view in views:
        if type(view) is not _VIEWS["plan"]:
            continue
        key = (type(view.plan_id).__name__, view.plan_id)  # plan ids 1 and "1" are two plans
        if view.event == "committed":
            found = TASK_SPEC.match(view.spec)
            if found and key not in plans:
                plans[key] = _Plan(int(found.group(1)), view.agent, tuple(view.actions), view.t)
        elif view.event in PLAN_ENDS and key in plans and plans[key].end is None:
            plans[key].end = view.t
    for plan in plans.values():
        if plan.end is None:
            plan.end = end_t
    by_block: Dict[int, List[_Plan]] = {}
    for plan in plans.values():
        by_block.setdefault(plan.block, []).append(plan)
    attempts = []
    for plan in plans.values():
        done = completion.get(plan.block)
        team = {other.agent for other in by_block[plan.block] if _overlap(plan, other)}
        attempts.append(Attempt(block=plan.block, actions=plan.actions, agent=plan.agent, episode=index,
                                start=plan.start, duration=plan.end - plan.start, team_size=len(team | {plan.agent}),
                                success=done is not None and done + 1 <= plan.end))
    return attempts


def _overlap(a: _Plan, b: _Plan) -> bool:
    a_end, b_end = max(a.end, a.start + 1), max(b.end, b.start + 1)
    return a.start < b_end and b.start < a_end
