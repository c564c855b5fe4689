"""The CPU episode loop: every kind of agent plays one episode under EmCoop's MAEIL stages.

This is the one loop that runs decision makers (:class:`cube_jax.agents.Agent`): the
planners, scripted and replayed agents, trained policies inside mixed teams, language-model
agents and people. It follows LLM.md section 2:

* every agent starts in R (reasoning) and commits a plan (R -> W);
* the environment advances one step only when every agent is ready (W or X, no decision
  pending); at that moment every W becomes X, the plan executor
  (:class:`cube_jax.symbolic.PlanExecutor`) turns the plans into one joint primitive action
  and the JAX environment steps;
* before the next step, an agent whose plan has nothing more to emit (it succeeded or
  failed, as the executor would find at that state) goes back to R (X -> R), so a new plan
  starts on the very next step; a planner may also drop a running plan itself
  (``Agent.wants_replan``, event ``replaced``);
* a message delivered to an agent in W or X puts it in I, where it resumes (back to W with
  the same plan) or replans; agents in R or I may send messages, as the topology allows
  (:mod:`cube_jax.evaluation.topologies`);
* while every agent executes, steps follow each other with no decision at all.

Model calls of independent agents overlap (``asyncio``); decisions are applied in agent-id
order, so with deterministic agents the trace (wall times aside) is the same on every run
and at any concurrency. Limits (steps, model calls, wall-clock seconds, a model server that
keeps failing) end an episode as truncated with the reason; a bad decision never ends it:
the agent falls back to ``idle(1)`` and the trace says so.

>>> import cube_jax
>>> from cube_jax.agents import heuristic_team
>>> env = cube_jax.make("easy")
>>> result = run_episode(env, heuristic_team(env), seed=0)
>>> result.terminated, result.blocks_delivered, result.reason
(True, 3, 'all blocks delivered')
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import time
from typing import Any, Awaitable, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Union

import jax
import numpy as np

from cube_jax.agents.base import (
    Agent,
    Decision,
    DecisionContext,
    Message,
    OutgoingMessage,
    Plan,
    PlanProgress,
    Purpose,
    Reason,
    Stage,
    TopologyView,
    idle_plan,
)
from cube_jax.agents.views import WorldView
from cube_jax.core.env import CubeEnv, layout
from cube_jax.runtime.topologies import Topology, make_topology
from cube_jax.trace import TraceWriter, agent_name
from cube_jax.symbolic.actions import PLAN_CHECK, PlanError, check_plan
from cube_jax.symbolic.vocabulary import FACE_PUSH_DIRECTION
from cube_jax.symbolic.executor import DONE, FAILED, PlanExecutor

logger = logging.getLogger(__name__)

# Longest message text an agent may send; longer ones are refused (PlanError).
MAX_MESSAGE_CHARS = 2000
# History records per agent kept for its decision context.
HISTORY_PER_AGENT = 40
# Bound on interrupt rounds within one cognitive phase (a safety net: receive caps and the
# topologies' budgets already bound how many messages can arrive per step).
MAX_INTERRUPT_ROUNDS_PER_AGENT = 4


@dataclasses.dataclass
class Limits:
    """When an episode ends early (as truncated, with the reason in its ``end`` record)."""

    max_steps: Optional[int] = None  # at most the environment's own max_steps
    max_calls: Optional[int] = None  # model calls per episode
    max_wall_s: Optional[float] = None  # wall-clock seconds per episode
    max_server_failures: int = 3  # decisions in a row whose model server failed after its retries

    def __post_init__(self):
        for name in ("max_steps", "max_calls"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"Limits: {name} must be None or an integer >= 1, got {value!r}")
        if self.max_wall_s is not None and not (isinstance(self.max_wall_s, (int, float)) and self.max_wall_s > 0):
            raise ValueError(f"Limits: max_wall_s must be None or a number > 0, got {self.max_wall_s!r}")
        if not isinstance(self.max_server_failures, int) or self.max_server_failures < 1:
            raise ValueError(f"Limits: max_server_failures must be an integer >= 1, got {self.max_server_failures!r}")


@dataclasses.dataclass
class EpisodeResult:
    """How one episode went (the ``end`` record's fields and a few more)."""

    seed: int
    steps: int
    terminated: bool
    truncated: bool
    reason: str
    blocks_delivered: int
    blocks_total: int
    weight_delivered: int
    weight_total: int
    episode_return: float
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    trace: Optional[str] = None
    error: Optional[str] = None  # set when the episode stopped on an exception

    @property
    def success(self) -> bool:
        return self.terminated

    def to_dict(self) -> Dict[str, Any]:
        out = dataclasses.asdict(self)
        out["success"] = self.success
        return out


class EpisodeEnded(Exception):
    """Ends the episode as truncated with ``reason``: raised by the loop at a limit, and by an
    agent's ``decide`` that cannot go on (a person who closed the page, say)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass
class _Slot:
    """The loop's bookkeeping for one agent."""

    index: int
    agent: Agent
    name: str
    stage: Stage = Stage.REASONING
    plan: Optional[Plan] = None
    plan_id: Optional[int] = None
    reason: Reason = Reason.START
    inbox: List[Message] = dataclasses.field(default_factory=list)  # delivered, not yet read
    buffer: Deque[Message] = dataclasses.field(default_factory=collections.deque)  # sent, not yet delivered
    delivered_this_step: int = 0
    feedback: List[str] = dataclasses.field(default_factory=list)  # what happened since it last decided
    history: Deque[Any] = dataclasses.field(default_factory=lambda: collections.deque(maxlen=HISTORY_PER_AGENT))
    last_error: Optional[PlanError] = None
    last_status: str = DONE


def env_spec(env: CubeEnv) -> Dict[str, Any]:
    """What was passed to :func:`cube_jax.make` for ``env``, as far as the episode record needs it."""
    spec = getattr(env, "make_kwargs", None)
    if spec is not None:
        return dict(spec)
    if env.source.curriculum_n:
        return {"n": env.source.curriculum_n, "max_steps": env.max_steps}
    return {"scenario": env.name, "max_steps": env.max_steps}


class Episode:
    """One episode of ``agents`` (one per agent of ``env``, id order) under ``topology``.

    ``trace`` is a path, a :class:`TraceWriter` or None. ``env_kwargs`` is recorded in the
    trace's episode record (default: derived from ``env``). ``on_record(record)`` is called
    with every trace record as it happens (whether or not a trace file is written: a live
    view listens here), and ``before_step()``, when given, is awaited before every
    environment step (a viewer's pause, single-step and speed controls). Use
    :func:`run_episode` or ``await Episode(...).run()``.
    """

    def __init__(self, env: CubeEnv, agents: Sequence[Agent], *, seed: int, topology: Union[str, Topology] = "individual",
                 trace: Union[None, str, os.PathLike, TraceWriter] = None, limits: Optional[Limits] = None,
                 env_kwargs: Optional[Mapping[str, Any]] = None, on_record: Optional[Callable[[dict], None]] = None,
                 before_step: Optional[Callable[[], Awaitable[None]]] = None):
        if len(agents) != env.num_agents:
            raise ValueError(f"Episode: {len(agents)} agents given for a world of {env.num_agents}")
        for i, agent in enumerate(agents):
            if not isinstance(agent, Agent):
                raise ValueError(f"Episode: agent {i} is a {type(agent).__name__}, not a cube_jax.agents.Agent")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
            raise ValueError(f"Episode: seed must be an integer in 0..2**32-1, got {seed!r}")
        self.env = env
        self.seed = int(seed)
        self.topology = topology if isinstance(topology, Topology) else make_topology(topology, env.num_agents)
        self.limits = limits or Limits()
        self.max_steps = min(env.max_steps, self.limits.max_steps or env.max_steps)
        self.env_kwargs = dict(env_kwargs) if env_kwargs is not None else env_spec(env)
        self._trace_target = trace
        self.on_record = on_record
        self.before_step = before_step
        self.slots = [_Slot(i, a, agent_name(i)) for i, a in enumerate(agents)]
        self.executor = PlanExecutor(env, keep_history=True)
        self.trace: Optional[TraceWriter] = None
        self.t = 0
        self.state = None
        self._view: Optional[WorldView] = None
        self._next_plan_id = 0
        self._next_message_id = 0
        self.model_calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._server_failures = 0
        self._episode_return = 0.0
        self._start = 0.0

    # -- the loop -----------------------------------------------------------------------------
    async def run(self) -> EpisodeResult:
        self._start = time.perf_counter()
        target = self._trace_target
        self.trace = target if isinstance(target, TraceWriter) else (TraceWriter(target) if target is not None else None)
        if self.trace is None:
            return await self._play()
        with self.trace:  # an exception or a cancellation still ends the trace with its reason
            return await self._play()

    async def _play(self) -> EpisodeResult:
        n = self.env.num_agents
        self.state, _ = self.env.reset(jax.random.PRNGKey(self.seed))
        for slot in self.slots:
            slot.agent.reset(slot.index, n, self.seed)
        self._write("episode", schema=1, env=self.env_kwargs, seed=self.seed, topology=self.topology.name,
                    agents={s.name: s.agent.describe() for s in self.slots}, layout=layout(self.state))
        for slot in self.slots:
            self._set_stage(slot, Stage.REASONING)
        terminated = truncated = False
        reason = ""
        try:
            while True:
                await self._with_wall_limit(self._cognitive_phase())
                if self.before_step is not None:
                    await self.before_step()
                terminated, truncated = self._step()
                if terminated:
                    reason = "all blocks delivered"
                    break
                if truncated or self.t >= self.max_steps:
                    truncated, reason = True, f"max_steps ({self.max_steps}) reached"
                    break
                self._check_wall()
                self._close_ended_plans()
        except EpisodeEnded as ended:
            terminated, truncated, reason = False, True, ended.reason
        return self._finish(terminated, truncated, reason)

    async def _with_wall_limit(self, coroutine):
        if self.limits.max_wall_s is None:
            return await coroutine
        remaining = self.limits.max_wall_s - (time.perf_counter() - self._start)
        try:
            return await asyncio.wait_for(coroutine, timeout=max(remaining, 0.0))
        except asyncio.TimeoutError:
            raise EpisodeEnded(f"wall-clock limit ({self.limits.max_wall_s:g} s) reached") from None

    def _check_wall(self) -> None:
        if self.limits.max_wall_s is not None and time.perf_counter() - self._start >= self.limits.max_wall_s:
            raise EpisodeEnded(f"wall-clock limit ({self.limits.max_wall_s:g} s) reached")

    # -- the cognitive phase ------------------------------------------------------------------
    async def _cognitive_phase(self) -> None:
        for slot in self.slots:
            slot.delivered_this_step = 0
            self._deliver(slot)
        reasoning = [s.index for s in self.slots if s.stage == Stage.REASONING]
        if reasoning:
            await self.topology.deliberate(self, reasoning)
        for _ in range(MAX_INTERRUPT_ROUNDS_PER_AGENT * len(self.slots) + 1):
            interrupted = self.interrupted()
            if not interrupted:
                break
            await self.topology.resolve_interrupts(self, interrupted)
        else:
            # Only a topology that ignores the receive caps can get here: resume the rest.
            for i in self.interrupted():
                self.apply(i, Purpose.INTERRUPT, Decision(resume=True, note="interrupt rounds exhausted"))
        unready = [s.name for s in self.slots if s.stage not in (Stage.WAITING, Stage.EXECUTING)]
        if unready:
            raise RuntimeError(f"topology {self.topology.name!r} left {unready} without a committed plan")

    def interrupted(self) -> List[int]:
        """Ids of the agents in I, ascending."""
        return [s.index for s in self.slots if s.stage == Stage.INTERRUPTED]

    @property
    def view(self) -> WorldView:
        """The symbolic view of the current state (computed once per step)."""
        if self._view is None or self._view.t != self.t:
            self._view = WorldView(self.state)
        return self._view

    def _context(self, slot: _Slot, purpose: Purpose, view: TopologyView, consume: bool = True) -> DecisionContext:
        """The agent's decision context; ``consume`` marks its inbox and feedback as read
        (a real decision), which the per-step peeks (wants_replan, primitives) do not."""
        ex = self.executor.agents[slot.index]
        progress = PlanProgress(plan=slot.plan, index=ex.index, status=slot.last_status, error=slot.last_error)
        inbox, feedback = tuple(slot.inbox), "\n".join(slot.feedback) or None
        if consume:
            slot.inbox, slot.feedback = [], []
        reason = Reason.MESSAGE if purpose == Purpose.INTERRUPT else slot.reason
        return DecisionContext(
            agent=slot.index, name=slot.name, purpose=purpose, reason=reason, t=self.t, state=self.state,
            views=self.view, num_agents=len(self.slots), max_steps=self.max_steps, progress=progress, inbox=inbox,
            feedback=feedback, topology=view, history=tuple(slot.history),
            validate=lambda decision, _i=slot.index, _p=purpose, _v=view: self.check_decision(_i, _p, _v, decision),
            seed=self.seed, step_cost=self.env.cfg.step_cost,
        )

    async def decide(self, agent: int, purpose: Purpose, view: TopologyView) -> Decision:
        """Asks one agent; the decision comes back checked (an invalid one is replaced by the fallback)."""
        return (await self.decide_many([agent], purpose, {agent: view}))[agent]

    async def decide_many(self, agents: Sequence[int], purpose, views: Mapping[int, TopologyView]) -> Dict[int, Decision]:
        """Asks several agents at once (their model calls overlap); results by agent id.

        ``purpose`` is one :class:`Purpose` or a mapping agent -> purpose. Every context is
        built before any decision is applied, so the order in which replies arrive does not
        matter.
        """
        purposes = {i: purpose[i] if isinstance(purpose, Mapping) else purpose for i in agents}
        if self.limits.max_calls is not None and self.model_calls >= self.limits.max_calls:
            raise EpisodeEnded(f"model call limit ({self.limits.max_calls}) reached")
        contexts = {i: self._context(self.slots[i], purposes[i], views[i]) for i in agents}
        asked = [asyncio.ensure_future(self.slots[i].agent.decide(contexts[i])) for i in agents]
        try:
            results = await asyncio.gather(*asked)
        except BaseException:
            # one agent ended the episode (or failed): the others' pending decisions are void
            for task in asked:
                task.cancel()
            raise
        decisions = {}
        for i, decision in zip(agents, results):
            decisions[i] = self._checked(i, purposes[i], views[i], decision)
        return decisions

    def _checked(self, agent: int, purpose: Purpose, view: TopologyView, decision: Any) -> Decision:
        slot = self.slots[agent]
        if not isinstance(decision, Decision):
            error = PlanError(PLAN_CHECK, f"the agent returned {type(decision).__name__}, not a Decision")
            decision = Decision()
        else:
            error = None
        for call in decision.calls:
            self.model_calls += 1
            self.prompt_tokens += call.prompt_tokens
            self.completion_tokens += call.completion_tokens
            self._write("llm", agent=slot.name, purpose=purpose.value, model=call.model, attempts=call.attempts,
                        latency_s=round(float(call.latency_s), 6), prompt_tokens=call.prompt_tokens,
                        completion_tokens=call.completion_tokens, valid=call.valid, fallback=call.fallback,
                        error=call.error)
        server_error = decision.server_error
        if decision.calls:
            last = decision.calls[-1]
            failed_at_server = decision.fallback and not last.valid and server_error is not None
            self._server_failures = self._server_failures + 1 if failed_at_server else 0
        if error is None:
            error = self.check_decision(agent, purpose, view, decision)
        if error is not None:
            logger.info("%s: invalid decision at t=%d (%s); falling back to idle(1)", slot.name, self.t, error)
            if purpose == Purpose.MESSAGE:
                slot.feedback.append(f"Your last message turn was refused ({error}); nothing was sent.")
                decision = Decision(fallback=True, note=str(error))
            else:
                slot.feedback.append(f"Your last decision was refused ({error}); you idle for one step.")
                decision = Decision(plan=idle_plan(1, spec="fallback: idle"), fallback=True, note=str(error))
        if self._server_failures >= self.limits.max_server_failures:
            raise EpisodeEnded(f"model server failing ({self._server_failures} decisions in a row): {server_error}")
        return decision

    def check_decision(self, agent: int, purpose: Purpose, view: TopologyView, decision: Decision) -> Optional[PlanError]:
        """The first problem with ``decision`` against the current state and ``view``, or None."""
        if purpose == Purpose.MESSAGE:
            if decision.plan is not None or decision.resume:
                return PlanError(PLAN_CHECK, "a message turn carries messages only, no plan", argument="plan")
            if not decision.messages and not decision.fallback:
                return PlanError(PLAN_CHECK, "a message turn needs at least one message", argument="messages")
        elif purpose == Purpose.INTERRUPT and decision.resume:
            if decision.plan is not None:
                return PlanError(PLAN_CHECK, "give either resume or a new plan, not both", argument="plan")
        elif decision.plan is None:
            return PlanError(PLAN_CHECK, "a plan is required", argument="plan")
        if decision.plan is not None:
            alive = [bool(x) for x in np.asarray(self.state.block_alive)]
            try:
                check_plan(list(decision.plan.actions), len(self.slots), alive)
            except PlanError as err:
                return err
        if decision.messages:
            if not view.may_send:
                return PlanError(PLAN_CHECK, f"the {view.name} topology allows no message here", argument="messages")
            if len(decision.messages) > view.message_budget:
                return PlanError(PLAN_CHECK, f"{len(decision.messages)} messages exceed the budget of "
                                 f"{view.message_budget}", argument="messages")
            for k, message in enumerate(decision.messages):
                if not isinstance(message, OutgoingMessage) or not message.recipients:
                    return PlanError(PLAN_CHECK, f"message {k} needs at least one recipient", argument="messages")
                forbidden = sorted(set(message.recipients) - set(view.allowed_recipients))
                if forbidden:
                    allowed = ", ".join(agent_name(j) for j in sorted(view.allowed_recipients)) or "nobody"
                    return PlanError(PLAN_CHECK, f"message {k} addresses {agent_name(forbidden[0])}, which the "
                                     f"{view.name} topology does not allow here (allowed: {allowed})",
                                     argument="messages")
                if not isinstance(message.content, str) or not message.content.strip():
                    return PlanError(PLAN_CHECK, f"message {k} is empty", argument="messages")
                if len(message.content) > MAX_MESSAGE_CHARS:
                    return PlanError(PLAN_CHECK, f"message {k} has {len(message.content)} characters; at most "
                                     f"{MAX_MESSAGE_CHARS}", argument="messages")
        return None

    def apply(self, agent: int, purpose: Purpose, decision: Decision) -> None:
        """Sends the decision's messages, then commits, resumes or replaces the agent's plan."""
        slot = self.slots[agent]
        for message in decision.messages:
            self.send(agent, message.recipients, message.content)
        if purpose == Purpose.MESSAGE:
            return
        if purpose == Purpose.INTERRUPT and decision.resume:
            if slot.plan is None:  # nothing to resume (cannot happen for an agent in I): plan anew
                self._commit(slot, idle_plan(1, spec="fallback: idle"), note="nothing to resume")
                return
            self._plan_record(slot, "resumed")
            self._set_stage(slot, Stage.WAITING)
            return
        if purpose == Purpose.INTERRUPT and slot.plan is not None:
            self._plan_record(slot, "replaced")
        self._commit(slot, decision.plan, note=decision.note if decision.fallback else None)

    def _commit(self, slot: _Slot, plan: Plan, note: Optional[str] = None) -> None:
        slot.plan = plan
        slot.plan_id = self._next_plan_id
        self._next_plan_id += 1
        if slot.agent.acts_with_primitives:
            self.executor.clear(slot.index)
        else:
            self.executor.set_plan(slot.index, list(plan.actions), self.state)
        slot.last_status, slot.last_error = "started", None
        extra = {"note": note} if note else {}
        self._plan_record(slot, "committed", **extra)
        self._set_stage(slot, Stage.WAITING)

    # -- messages -------------------------------------------------------------------------------
    def send(self, sender: int, recipients: Sequence[int], content: str) -> Message:
        message = Message(self._next_message_id, self.t, sender, tuple(int(r) for r in recipients), content)
        self._next_message_id += 1
        self._write("message", id=message.id, sender=agent_name(sender),
                    recipients=[agent_name(r) for r in message.recipients], content=content)
        for r in message.recipients:
            self.slots[r].buffer.append(message)
            self._deliver(self.slots[r])
        return message

    def _deliver(self, slot: _Slot) -> None:
        cap = self.topology.receive_cap()
        while slot.buffer and (cap is None or slot.delivered_this_step < cap):
            slot.inbox.append(slot.buffer.popleft())
            slot.delivered_this_step += 1
            if slot.stage in (Stage.WAITING, Stage.EXECUTING):
                self._set_stage(slot, Stage.INTERRUPTED)

    # -- one environment step -------------------------------------------------------------------
    def _step(self):
        for slot in self.slots:
            if slot.stage == Stage.WAITING:
                self._set_stage(slot, Stage.EXECUTING)
        view = self.view
        before = len(self.executor.history)
        primitives = self.executor.act(self.state)
        running = {}
        for record in self.executor.history[before:]:
            self.slots[record.agent].history.append(record)
            if record.primitive is not None and record.action is not None:
                running[record.agent] = record.action
        # agents acting with primitives alone: policies, and a primitive given as a plan (a key)
        alone = [s.agent.acts_with_primitives or (s.plan is not None and s.plan.primitive) for s in self.slots]
        for i, is_alone in enumerate(alone):
            if is_alone:
                running.pop(i, None)
        for slot in self.slots:
            if slot.agent.acts_with_primitives:
                ctx = self._context(slot, Purpose.PLAN, self.topology.view(slot.index, Purpose.PLAN), consume=False)
                primitives[slot.index] = _checked_primitive(slot, slot.agent.primitive(ctx))
        tasks = step_tasks(view, primitives, running, alone)
        self.state, ts = self.env.step(self.state, primitives)
        reward = [float(str(x)) for x in np.asarray(ts.reward, np.float32)]  # float32 values, shortest text
        self._episode_return += reward[0]
        delivered = [int(j) for j in np.flatnonzero(np.asarray(ts.events.block_delivered))]
        lay = layout(self.state)
        self._write(
            "step",
            actions={s.name: int(primitives[s.index]) for s in self.slots},
            symbolic={s.name: (str(running[s.index]) if s.index in running else None) for s in self.slots},
            reward=reward,
            agents=[list(p) for p in lay["agents"]],
            blocks=[list(b) for b in lay["blocks"]],
            delivered=delivered,
            tasks=tasks,
        )
        self.t += 1
        if self.trace is not None:
            self.trace.outcome = self._outcome()
        return bool(ts.terminated), bool(ts.truncated)

    def _close_ended_plans(self) -> None:
        """X -> R for every agent whose plan has nothing more to emit at the new state (or
        that drops its plan itself)."""
        ended = self.executor.peek(self.state)
        for slot in self.slots:
            if slot.stage != Stage.EXECUTING or slot.agent.acts_with_primitives:
                continue
            status, error = ended[slot.index]
            if status in (DONE, FAILED):
                slot.last_status, slot.last_error = ("succeeded", None) if status == DONE else ("failed", error)
                if status == DONE:
                    self._plan_record(slot, "succeeded")
                    slot.feedback.append(f"Your plan {slot.plan.spec!r} succeeded.")
                else:
                    reason = error.message if error is not None else "failed"
                    self._plan_record(slot, "failed", reason=reason)
                    slot.feedback.append(f"Your plan {slot.plan.spec!r} failed: {error}.")
                slot.plan, slot.plan_id = None, None
                slot.reason = Reason.ENDED
                self._set_stage(slot, Stage.REASONING)
        for slot in self.slots:
            if slot.stage != Stage.EXECUTING or slot.agent.acts_with_primitives or not _may_drop_plans(slot.agent):
                continue
            ctx = self._context(slot, Purpose.PLAN, self.topology.view(slot.index, Purpose.PLAN), consume=False)
            if slot.agent.wants_replan(ctx):
                self._plan_record(slot, "replaced")
                slot.plan, slot.plan_id = None, None
                slot.reason = Reason.REPLAN
                self._set_stage(slot, Stage.REASONING)

    # -- the end --------------------------------------------------------------------------------
    def _outcome(self) -> Dict[str, int]:
        alive = np.asarray(self.state.block_alive)
        weight = np.asarray(self.state.block_weight)
        return {
            "steps": self.t,
            "blocks_delivered": int((~alive).sum()),
            "blocks_total": int(alive.size),
            "weight_delivered": int(weight[~alive].sum()),
            "weight_total": int(weight.sum()),
        }

    def _finish(self, terminated: bool, truncated: bool, reason: str) -> EpisodeResult:
        # Plans still held at the end: those the last step completed count as succeeded or
        # failed (what the executor would find next), the others as unfinished.
        ended = self.executor.peek(self.state) if any(s.plan is not None for s in self.slots) else []
        for slot in self.slots:
            if slot.plan is None:
                continue
            status, error = ended[slot.index] if not slot.agent.acts_with_primitives else (None, None)
            if status == DONE and slot.stage == Stage.EXECUTING:
                self._plan_record(slot, "succeeded")
            elif status == FAILED and slot.stage == Stage.EXECUTING:
                self._plan_record(slot, "failed", reason=error.message if error is not None else "failed")
            else:
                self._plan_record(slot, "unfinished")
        outcome = self._outcome()
        self._write("end", terminated=terminated, truncated=truncated, reason=reason, **outcome)
        return EpisodeResult(
            seed=self.seed, terminated=terminated, truncated=truncated, reason=reason,
            episode_return=round(self._episode_return, 6), model_calls=self.model_calls,
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
            wall_s=round(time.perf_counter() - self._start, 6),
            trace=None if self.trace is None or self.trace.path is None else str(self.trace.path), **outcome,
        )

    # -- records --------------------------------------------------------------------------------
    def _write(self, record_type: str, **fields) -> None:
        if self.trace is not None:
            record = self.trace.write(record_type, self.t, **fields)
        elif self.on_record is not None:
            record = {"type": record_type, "t": self.t, "wall": round(time.perf_counter() - self._start, 6), **fields}
        else:
            return
        if self.on_record is not None:
            self.on_record(record)

    def _set_stage(self, slot: _Slot, stage: Stage) -> None:
        slot.stage = stage
        self._write("stage", agent=slot.name, stage=stage.value)

    def _plan_record(self, slot: _Slot, event: str, **extra) -> None:
        plan = slot.plan
        self._write("plan", agent=slot.name, plan_id=slot.plan_id, spec=plan.spec, actions=plan.text_actions,
                    event=event, **extra)


def _may_drop_plans(agent: Agent) -> bool:
    """Whether the agent's class overrides :meth:`Agent.wants_replan` (only those are asked)."""
    return type(agent).wants_replan is not Agent.wants_replan


def _checked_primitive(slot: _Slot, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) <= 4:
        raise ValueError(f"{slot.name} ({slot.agent.kind}): primitive must be an int in 0..4, got {value!r}")
    return int(value)


def step_tasks(view: WorldView, primitives: np.ndarray, running: Mapping[int, Any], primitive_agents: Sequence[bool]):
    """The ``tasks`` of a step record (LLM.md section 5) for the step from ``view``'s state.

    ``running`` maps agent id -> the symbolic action that emitted its primitive;
    ``primitive_agents[i]`` is True for agents acting with primitives alone.
    """
    tasks = {}
    for block in view.blocks:
        if not block.alive:
            continue
        for face, fv in block.faces.items():
            spatial = set(fv.aligned)
            push = FACE_PUSH_DIRECTION[face]
            temporal = set()
            for i in range(len(primitives)):
                if int(primitives[i]) != push:
                    continue
                action = running.get(i)
                if action is not None and action.name == "push_block" and action.args["block"] == block.id:
                    temporal.add(i)
                elif primitive_agents[i] and i in spatial:
                    temporal.add(i)
            if spatial or temporal:
                tasks[f"{block.id}:{face}"] = {
                    "required": block.weight,
                    "spatial": len(spatial),
                    "temporal": len(temporal),
                    "participation": len(spatial),
                    "joint": len(spatial & temporal),
                }
    return tasks


def run_episode(env: CubeEnv, agents: Sequence[Agent], seed: int, **options) -> EpisodeResult:
    """Plays one episode synchronously in its own event loop (see :class:`Episode` for
    ``options``); the agents' connections are closed with the loop."""

    async def play() -> EpisodeResult:
        try:
            return await Episode(env, agents, seed=seed, **options).run()
        finally:
            for agent in agents:
                await agent.aclose()

    return asyncio.run(play())


async def run_episodes(episodes: Sequence[Episode], concurrency: int = 1, on_done=None) -> List[EpisodeResult]:
    """Runs ``episodes`` with at most ``concurrency`` at once; results in the given order.

    An episode that raises does not stop the others: its trace ends with the error and its
    result has ``error`` set. ``on_done(result)`` is called as each one finishes.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"run_episodes: concurrency must be an integer >= 1, got {concurrency!r}")
    gate = asyncio.Semaphore(concurrency)

    async def one(episode: Episode) -> EpisodeResult:
        async with gate:
            try:
                result = await episode.run()
            except Exception as err:  # noqa: BLE001 - one broken episode must not end the run
                logger.exception("episode with seed %d failed", episode.seed)
                outcome = episode._outcome() if episode.state is not None else {
                    "steps": 0, "blocks_delivered": 0, "blocks_total": episode.env.num_blocks,
                    "weight_delivered": 0, "weight_total": 0}
                trace = episode.trace.path if episode.trace is not None else None
                result = EpisodeResult(
                    seed=episode.seed, terminated=False, truncated=True, reason=f"error: {type(err).__name__}",
                    episode_return=round(episode._episode_return, 6), model_calls=episode.model_calls,
                    prompt_tokens=episode.prompt_tokens, completion_tokens=episode.completion_tokens,
                    wall_s=round(time.perf_counter() - episode._start, 6), trace=None if trace is None else str(trace),
                    error=f"{type(err).__name__}: {str(err)[:300]}", **outcome)
            if on_done is not None:
                on_done(result)
            return result

    return list(await asyncio.gather(*(one(e) for e in episodes)))


__all__ = ["Episode", "EpisodeEnded", "EpisodeResult", "Limits", "env_spec", "run_episode", "run_episodes", "step_tasks"]
