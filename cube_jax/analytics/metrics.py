"""The metrics of one episode, from its trace alone (LLM.md section 6).

:func:`episode_metrics` reads the records of one trace (dicts, as
:func:`~cube_jax.trace.read_trace` returns them, or the views of
:data:`~cube_jax.analytics.traces.METRIC_VIEWS`) in one pass and returns every metric: the
outcomes, EmCoop's eighteen under its legend's names, the cost of the model calls and the
negotiation metrics. The definitions, in short (T = the ``end`` record's ``steps``, at
least 1):

- A stage lasts from its ``stage`` record to the agent's next one, or to the ``end`` record;
  its length is the difference of the records' ``wall`` seconds.
- Per-agent figures (decision and wait time, messages sent) cover every agent of the
  ``episode`` record, 0 for one that never appears; their deviations are population ones.
- ``P_res_rate``: among the plans whose last event is ``failed`` or ``replaced``, the share
  whose agent's next plan (its first ``committed`` record with another ``plan_id`` after
  the plan's first record) has the same ``spec``.
- ``P_coherence``: the mean, over the step records with an agent in X, of the share of
  executing agents that share the most common spec (1 for a lone executor; 0 when no
  spec is shared by two).
- ``C_<c>_ratio``: over consecutive step records and the faces of blocks not yet delivered,
  \\|faces whose c-count rose\\| / (\\|rose\\| + \\|fell\\|), 0.5 when nothing changed.
- Cost: besides section 6's sums and rates (``invalid_reply_rate`` leaves starved replies
  out, ``starved_rate`` counts them), ``tokens_per_decision``: prompt and completion tokens
  (reasoning tokens are part of the completion tokens) over the decisions that asked a
  model, a decision being the calls up to one that is valid or falls back.
- Negotiation, all 0 when the trace has no ``negotiation`` record: ``negotiations``
  (rooms), ``room_size_avg`` (members per room), ``quorum_fail_rate`` (blocks in
  ``quorum_failed`` / blocks with at least one commitment, both counted room by room and
  summed; 0 when no block got a commitment), ``commit_match_rate`` (among members with a
  non-null proposal, the share whose commitment equals it; 0 when none), and
  ``block_done_t`` (block id as a string -> ``t`` of the step record that delivered it),
  which is listed per episode and not averaged.
- Plan repair (``--repair``, beyond section 6): ``repairs`` (``llm`` records with a
  ``repair`` key: replies whose plan failed a check), ``repairs_reach``, ``repairs_quorum``,
  ``repairs_clash`` (those by check) and ``repairs_unresolved`` (those whose plan ran
  unrepaired, ``resent`` false); all 0 without plan repair.

>>> from cube_jax.analytics.synthetic import random_trace
>>> m = episode_metrics(random_trace(seed=0, n=2, steps=30, kind="heuristic", topology="individual"))
>>> m["steps"], m["L_tot"], m["llm_calls"], m["C_dependency_ratio"], m["Z_gain_rate"]
(30, 0, 0, 0.5, 0.0)
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, List, Sequence, Union

import numpy as np

from cube_jax.analytics.traces import METRIC_VIEWS, MetricRecord, RecordError, check_order, from_dicts
from cube_jax.names import Stage
from cube_jax.trace import TaskCounts

_STEP, _STAGE, _PLAN = METRIC_VIEWS["step"], METRIC_VIEWS["stage"], METRIC_VIEWS["plan"]
_MESSAGE, _LLM, _NEGOTIATION = METRIC_VIEWS["message"], METRIC_VIEWS["llm"], METRIC_VIEWS["negotiation"]

OUTCOME_METRICS = ("success", "blocks_delivered", "blocks_total", "weight_delivered", "steps", "score_per_step")
EMCOOP_METRICS = (
    "D_delta",
    "decision_time_avg",
    "decision_time_std",
    "wait_time_avg",
    "wait_time_std",
    "L_tot",
    "L_avg",
    "L_std",
    "P_total",
    "P_int",
    "P_res_rate",
    "P_re_rate",
    "P_coherence",
    "Z_gain_rate",
    "C_spatial_ratio",
    "C_temporal_ratio",
    "C_dependency_ratio",
    "C_participation_ratio",
)
COST_METRICS = ("llm_calls", "prompt_tokens", "completion_tokens", "latency_mean_s", "latency_p95_s",
                "invalid_reply_rate", "fallbacks", "starved_rate", "reasoning_tokens", "tokens_per_decision")
NEGOTIATION_METRICS = ("negotiations", "room_size_avg", "quorum_fail_rate", "commit_match_rate")
# The metrics of LLM.md section 6 that are numbers, averaged across episodes with an interval.
METRICS = OUTCOME_METRICS + EMCOOP_METRICS + COST_METRICS + NEGOTIATION_METRICS
# Plan repair (--repair, cube_jax.llm.repair), beyond section 6's list: ``llm`` records whose plan
# failed a check (``repairs``, and per check), and of those the ones whose plan ran unrepaired
# because the repair budget was spent (``repairs_unresolved``). All 0 without plan repair.
REPAIR_METRICS = ("repairs", "repairs_reach", "repairs_quorum", "repairs_clash", "repairs_unresolved")
# Every number the metrics give, averaged across episodes with an interval: section 6's, then ours.
REPORTED_METRICS = METRICS + REPAIR_METRICS
# The metrics listed per episode only: block_done_t maps block ids to steps.
EPISODE_ONLY_METRICS = ("block_done_t",)

# EmCoop's legend: its number and name for each of the eighteen.
EMCOOP_LEGEND = {
    "D_delta": "M1: D_δ (Average decision overhead per step)",
    "decision_time_avg": "M2: Decision time avg (Average decision time)",
    "decision_time_std": "M3: Decision time std (Decision time std dev)",
    "wait_time_avg": "M4: Wait time avg (Average wait time across agents)",
    "wait_time_std": "M5: Wait time std (Wait time std dev across agents)",
    "L_tot": "M6: L_tot (Total messages exchanged)",
    "L_avg": "M7: L_avg (Average messages per agent)",
    "L_std": "M8: L_std (Communication load std dev)",
    "P_total": "M9: P_total (Total plans)",
    "P_int": "M10: P_int (Plan interruption count)",
    "P_res_rate": "M11: P_res_rate (Plan resumption rate)",
    "P_re_rate": "M12: P_re_rate (Replanning rate)",
    "P_coherence": "M13: P_coherence (Average plan coherence per step)",
    "Z_gain_rate": "M14: Z_gain_rate (Capability gains per step)",
    "C_spatial_ratio": "M15: C_spatial_ratio (Spatial constraint improvement)",
    "C_temporal_ratio": "M16: C_temporal_ratio (Temporal constraint improvement)",
    "C_dependency_ratio": "M17: C_dependency_ratio (Dependency constraint imp.)",
    "C_participation_ratio": "M18: C_participation_ratio (Participation constraint imp.)",
}

# Metrics whose values lie in [0, 1] by definition.
RATIO_METRICS = ("success", "P_res_rate", "P_re_rate", "P_coherence", "C_spatial_ratio", "C_temporal_ratio",
                 "C_dependency_ratio", "C_participation_ratio", "invalid_reply_rate", "starved_rate",
                 "quorum_fail_rate", "commit_match_rate")

DECIDING = frozenset(("R", "I"))
DECISION_STAGES = frozenset((Stage.REASONING.value, Stage.WAITING.value, Stage.INTERRUPTED.value))  # what D_delta counts
# The task counts whose rises and falls the constraint ratios follow; CUBE has no
# dependencies between tasks, so their ratio is the neutral 0.5.
CONSTRAINT_COUNTS = ("spatial", "temporal", "participation")
INTERRUPTED_EVENTS = frozenset(("failed", "replaced"))
_NO_COUNTS = TaskCounts(required=1, spatial=0, temporal=0, participation=0, joint=0)


def episode_metrics(records: Sequence[Union[dict, MetricRecord]]) -> Dict[str, object]:
    """Every metric of LLM.md section 6 for one episode's records (see the module docstring):
    :data:`METRICS`, then the plan repair counts (:data:`REPAIR_METRICS`), then
    :data:`EPISODE_ONLY_METRICS`.

    ``records`` are dicts (as :func:`~cube_jax.trace.read_trace` returns them, or
    as a running episode keeps them) or the views of
    :data:`~cube_jax.analytics.traces.METRIC_VIEWS`; the first must be the ``episode``
    record and the last the ``end`` record. Counts are ints, ``success`` a bool,
    ``block_done_t`` a dict (0 without negotiation), the rest floats. Raises
    :class:`~cube_jax.analytics.traces.RecordError` for records it cannot read.
    """
    if records and isinstance(records[0], dict):
        records = from_dicts(records)
    problem = check_order(records)
    if problem is not None:
        raise RecordError(problem[0], "type", problem[1])
    header, end = records[0], records[-1]
    agents = list(header.agents)
    horizon = max(end.steps, 1)

    stages = _StageClock(agents)
    sent = dict.fromkeys(agents, 0)
    plans = _PlanBook()
    coherence = _Coherence()
    constraints = _ConstraintChanges()
    llm_calls: list = []
    rooms = _Negotiations()

    for index, record in enumerate(records):
        kind = type(record)
        if kind is _STEP:
            coherence.at_step(stages.current)
            constraints.at_step(record)
            rooms.at_step(record)
        elif kind is _STAGE:
            stages.enter(index, record.agent, record.stage, record.wall)
            coherence.changed()
        elif kind is _PLAN:
            plans.add(index, record)
            if record.event in ("committed", "resumed"):
                coherence.set_spec(record.agent, record.spec)
        elif kind is _MESSAGE:
            if record.sender not in sent:
                raise RecordError(index + 1, "sender", f"unknown agent {record.sender!r}")
            sent[record.sender] += 1
        elif kind is _LLM:
            llm_calls.append(record)
        elif kind is _NEGOTIATION:
            rooms.add(record)
    stages.close(end.wall)

    decision = [stages.deciding[a] for a in agents]
    waiting = [stages.waiting[a] for a in agents]
    messages = [sent[a] for a in agents]
    interrupted, resumed = plans.interruptions()
    res_rate = resumed / interrupted if interrupted else 0.0
    metrics: Dict[str, object] = {
        "success": bool(end.terminated),
        "blocks_delivered": end.blocks_delivered,
        "blocks_total": end.blocks_total,
        "weight_delivered": end.weight_delivered,
        "steps": end.steps,
        "score_per_step": end.weight_delivered / horizon,
        "D_delta": stages.decisions / horizon,
        "decision_time_avg": _mean(decision),
        "decision_time_std": _std(decision),
        "wait_time_avg": _mean(waiting),
        "wait_time_std": _std(waiting),
        "L_tot": sum(messages),
        "L_avg": _mean(messages),
        "L_std": _std(messages),
        "P_total": len(plans.agent_of),
        "P_int": interrupted,
        "P_res_rate": res_rate,
        "P_re_rate": 1.0 - res_rate if interrupted else 0.0,
        "P_coherence": coherence.mean(),
        "Z_gain_rate": 0.0,
        **{f"C_{name}_ratio": constraints.ratio(name) for name in CONSTRAINT_COUNTS},
        "C_dependency_ratio": 0.5,
    }
    metrics.update(_cost(llm_calls))
    metrics.update(_repairs(llm_calls))
    metrics.update(rooms.metrics())
    return {name: metrics[name] for name in REPORTED_METRICS + EPISODE_ONLY_METRICS}


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def _std(values: Sequence[float]) -> float:
    return float(np.std(values)) if len(values) else 0.0


class _StageClock:
    """Seconds each agent spends deciding (R, I) and waiting (W), and how many times an
    agent entered R, W or I."""

    def __init__(self, agents: Sequence[str]):
        self.current: Dict[str, str] = {}
        self.since: Dict[str, float] = {}
        self.deciding = dict.fromkeys(agents, 0.0)
        self.waiting = dict.fromkeys(agents, 0.0)
        self.decisions = 0

    def _finish(self, agent: str, wall: float) -> None:
        stage = self.current.get(agent)
        if stage in DECIDING:
            self.deciding[agent] += wall - self.since[agent]
        elif stage == "W":
            self.waiting[agent] += wall - self.since[agent]

    def enter(self, index: int, agent: str, stage: str, wall: float) -> None:
        if agent not in self.deciding:
            raise RecordError(index + 1, "agent", f"unknown agent {agent!r}")
        self._finish(agent, wall)
        self.current[agent] = stage
        self.since[agent] = wall
        if stage in DECISION_STAGES:
            self.decisions += 1

    def close(self, wall: float) -> None:
        for agent in self.current:
            self._finish(agent, wall)


class _PlanBook:
    """Every plan's agent, spec, first record and last event; every agent's commits in order."""

    def __init__(self):
        self.agent_of: Dict[object, str] = {}
        self.first_index: Dict[object, int] = {}
        self.spec_of: Dict[object, str] = {}
        self.last_event: Dict[object, str] = {}
        self.commits: Dict[str, List[tuple]] = {}  # agent -> [(record index, plan_id, spec)]
        self._committed: set = set()

    def add(self, index: int, record) -> None:
        plan_id = record.plan_id
        if plan_id not in self.agent_of:
            self.agent_of[plan_id] = record.agent
            self.first_index[plan_id] = index
            self.spec_of[plan_id] = record.spec
        if record.event == "committed":
            if plan_id not in self._committed:
                # a plan's spec is the one it was committed with
                self._committed.add(plan_id)
                self.spec_of[plan_id] = record.spec
            self.commits.setdefault(record.agent, []).append((index, plan_id, record.spec))
        self.last_event[plan_id] = record.event

    def next_spec(self, plan_id) -> object:
        """The spec of the agent's next plan after ``plan_id``, or None when there is none."""
        after = self.first_index[plan_id]
        for index, other, spec in self.commits.get(self.agent_of[plan_id], ()):
            if index > after and other != plan_id:
                return spec
        return None

    def interruptions(self) -> tuple:
        """(P_int, how many of those plans were resumed by the agent's next plan)."""
        interrupted = [p for p, event in self.last_event.items() if event in INTERRUPTED_EVENTS]
        resumed = 0
        for plan_id in interrupted:
            following = self.next_spec(plan_id)
            resumed += following is not None and following == self.spec_of[plan_id]
        return len(interrupted), resumed


class _Coherence:
    """P_coherence, step by step: recomputed only when a stage or a spec has changed."""

    def __init__(self):
        self.spec: Dict[str, str] = {}
        self.total = 0.0
        self.steps = 0
        self.dirty = True
        self.value = None  # this step's coherence, None when no agent executes

    def changed(self) -> None:
        self.dirty = True

    def set_spec(self, agent: str, spec: str) -> None:
        self.spec[agent] = spec
        self.dirty = True

    def at_step(self, stage_of: Dict[str, str]) -> None:
        if self.dirty:
            self.value = self._value(stage_of)
            self.dirty = False
        if self.value is not None:
            self.total += self.value
            self.steps += 1

    def _value(self, stage_of: Dict[str, str]):
        executing = [agent for agent, stage in stage_of.items() if stage == "X"]
        if not executing:
            return None
        if len(executing) == 1:
            return 1.0
        # an executing agent without a committed plan shares its spec with nobody
        specs = Counter(self.spec[a] for a in executing if a in self.spec)
        most = max(specs.values(), default=0)
        return most / len(executing) if most >= 2 else 0.0

    def mean(self) -> float:
        return self.total / self.steps if self.steps else 0.0


class _ConstraintChanges:
    """The faces whose spatial, temporal and participation counts rose or fell between
    consecutive step records, leaving out blocks delivered by the earlier step or before."""

    def __init__(self):
        self.previous = None
        self.delivered: set = set()  # block ids as the task keys spell them
        self.rose = {name: set() for name in CONSTRAINT_COUNTS}
        self.fell = {name: set() for name in CONSTRAINT_COUNTS}
        self.settled: set = set()
        self._block_of: Dict[str, str] = {}

    def _block(self, key: str) -> str:
        block = self._block_of.get(key)
        if block is None:
            block = self._block_of[key] = key.partition(":")[0]
        return block

    def at_step(self, record) -> None:
        tasks = record.tasks
        previous = self.previous
        # most faces keep their counts from one step to the next: compare whole maps first
        if previous is not None and previous != tasks:
            settled, delivered = self.settled, self.delivered
            for key in previous.keys() | tasks.keys():
                if key in settled or (delivered and self._block(key) in delivered):
                    continue
                before = previous.get(key, _NO_COUNTS)
                after = tasks.get(key, _NO_COUNTS)
                if before != after:
                    self._compare(key, before, after)
        for block in record.delivered:
            self.delivered.add(str(block))
        self.previous = tasks

    def _compare(self, key: str, before: TaskCounts, after: TaskCounts) -> None:
        settled = True
        for name in CONSTRAINT_COUNTS:
            rose, fell = self.rose[name], self.fell[name]
            change = getattr(after, name) - getattr(before, name)
            if change > 0:
                rose.add(key)
            elif change < 0:
                fell.add(key)
            settled = settled and key in rose and key in fell
        if settled:
            # a face already counted as rising and falling for every constraint changes nothing more
            self.settled.add(key)

    def ratio(self, name: str) -> float:
        rose, fell = len(self.rose[name]), len(self.fell[name])
        return rose / (rose + fell) if rose + fell else 0.5


def _cost(calls: list) -> Dict[str, object]:
    if not calls:
        return {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "latency_mean_s": 0.0,
                "latency_p95_s": 0.0, "invalid_reply_rate": 0.0, "fallbacks": 0, "starved_rate": 0.0,
                "reasoning_tokens": 0, "tokens_per_decision": 0.0}
    latencies = np.array([call.latency_s for call in calls])
    tokens = sum(call.prompt_tokens + call.completion_tokens for call in calls)
    # a decision's calls end with a valid reply or a fallback (a cancelled call ends none)
    decisions = sum(call.valid or call.fallback for call in calls)
    return {
        "llm_calls": len(calls),
        "prompt_tokens": sum(call.prompt_tokens for call in calls),
        "completion_tokens": sum(call.completion_tokens for call in calls),
        "latency_mean_s": float(latencies.mean()),
        "latency_p95_s": float(np.percentile(latencies, 95)),
        # a starved reply (no answer at the token limit) is not a bad one: starved_rate counts it
        "invalid_reply_rate": sum(not call.valid and not call.starved for call in calls) / len(calls),
        "fallbacks": sum(call.fallback for call in calls),
        "starved_rate": sum(call.starved for call in calls) / len(calls),
        "reasoning_tokens": sum(call.reasoning_tokens for call in calls),
        "tokens_per_decision": tokens / decisions if decisions else 0.0,
    }


def _repairs(calls: list) -> Dict[str, object]:
    flagged = [call.repair for call in calls if call.repair is not None]
    out: Dict[str, object] = {"repairs": len(flagged)}
    for check in ("reach", "quorum", "clash"):
        out[f"repairs_{check}"] = sum(r.check == check for r in flagged)
    out["repairs_unresolved"] = sum(not r.resent for r in flagged)
    return out


class _Negotiations:
    """The negotiation metrics: rooms, their sizes, quorum failures, kept proposals, and the
    step that delivered each block."""

    def __init__(self):
        self.rooms = 0
        self.members = 0
        self.failed = 0  # blocks in quorum_failed, summed over rooms
        self.committed = 0  # distinct blocks with a commitment, summed over rooms
        self.proposed = 0  # members with a non-null proposal
        self.kept = 0  # of those, members whose commitment is their proposal
        self.done_t: Dict[str, int] = {}

    def add(self, record) -> None:
        self.rooms += 1
        self.members += len(record.room)
        self.failed += len(record.quorum_failed)
        self.committed += len({b for b in record.commitments.values() if b is not None})
        for name, block in record.proposals.items():
            if block is not None:
                self.proposed += 1
                self.kept += record.commitments.get(name) == block

    def at_step(self, record) -> None:
        for block in record.delivered:
            self.done_t.setdefault(str(block), record.t)

    def metrics(self) -> Dict[str, object]:
        if not self.rooms:
            return {"negotiations": 0, "room_size_avg": 0.0, "quorum_fail_rate": 0.0, "commit_match_rate": 0.0,
                    "block_done_t": 0}
        return {
            "negotiations": self.rooms,
            "room_size_avg": self.members / self.rooms,
            "quorum_fail_rate": self.failed / self.committed if self.committed else 0.0,
            "commit_match_rate": self.kept / self.proposed if self.proposed else 0.0,
            "block_done_t": dict(self.done_t),
        }
