"""Asking agents: their decision contexts, the checks every decision passes, and commits.

:class:`EpisodeState` is what one episode's parts share (the world, the agents' slots, the
plan executor, the records, the mailbox and the call gate). :func:`ask_agent` asks one
agent for a decision and checks it against the state and the topology (an invalid one is
replaced by the agent's fallback, ``fallback(agent_k)``); :func:`commit_decision` applies its
plan part at the moment it arrives, so the agent's ``W`` record carries its own time.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, List, Optional, Tuple

import numpy as np

from cube_jax.agents.base import (
    Decision,
    DecisionContext,
    NegotiationView,
    OutgoingMessage,
    PartnerState,
    Plan,
    PlanProgress,
    Purpose,
    Reason,
    Stage,
    TopologyView,
    fallback_plan,
)
from cube_jax.agents.views import WorldView
from cube_jax.core.env import CubeEnv
from cube_jax.runtime.limits import CallGate
from cube_jax.runtime.messaging import MAX_MESSAGE_CHARS, Mailbox
from cube_jax.runtime.slot import AgentSlot, Recorder
from cube_jax.symbolic.actions import PLAN_CHECK, PlanError, check_plan
from cube_jax.symbolic.executor import PlanExecutor

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class EpisodeState:
    """What the parts of one running episode share."""

    env: CubeEnv
    seed: int
    max_steps: int
    slots: List[AgentSlot]
    executor: PlanExecutor
    recorder: Recorder
    mailbox: Mailbox
    gate: CallGate
    state: Any = None  # the JAX state (unbatched)
    next_plan_id: int = 0
    partners: Tuple[PartnerState, ...] = ()  # every agent as the current phase began (snapshot_partners)
    _view: Optional[WorldView] = None

    @property
    def t(self) -> int:
        return self.recorder.t

    def snapshot_partners(self) -> None:
        """Every agent's stage, plan and action as a phase begins: what each member of the
        phase sees of its teammates, whoever of them decides first."""
        self.partners = tuple(PartnerState(s.index, s.stage, None if s.plan is None else s.plan.spec, s.action,
                                           plan=s.plan, plan_index=self.executor.agents[s.index].index)
                              for s in self.slots)

    @property
    def view(self) -> WorldView:
        """The symbolic view of the current state (computed once per step)."""
        if self._view is None or self._view.t != self.t:
            self._view = WorldView(self.state)
        return self._view


def build_context(es: EpisodeState, slot: AgentSlot, purpose: Purpose, view: TopologyView,
                  consume: bool = True, negotiation: Optional[NegotiationView] = None) -> DecisionContext:
    """The agent's decision context; ``consume`` marks its inbox and feedback as read (a
    real decision), which the per-step peeks (``wants_replan``, primitives) do not."""
    ex = es.executor.agents[slot.index]
    progress = PlanProgress(plan=slot.plan, index=ex.index, status=slot.last_status, error=slot.last_error)
    # by step and sender, not by arrival: replies that race each other give the same prompt
    inbox = tuple(sorted(slot.inbox, key=lambda m: (m.t, m.sender, m.id)))
    feedback = "\n".join(slot.feedback) or None
    if consume:
        slot.inbox, slot.feedback = [], []
    reason = Reason.MESSAGE if purpose == Purpose.INTERRUPT else slot.reason
    partners = tuple(p for p in (es.partners or ()) if p.agent != slot.index)
    return DecisionContext(
        agent=slot.index, name=slot.name, purpose=purpose, reason=reason, t=es.t, state=es.state,
        views=es.view, num_agents=len(es.slots), max_steps=es.max_steps, progress=progress, inbox=inbox,
        feedback=feedback, topology=view, history=tuple(slot.history),
        validate=lambda decision, _i=slot.index, _p=purpose, _v=view: check_decision(es, _i, _p, _v, decision),
        seed=es.seed, step_cost=es.env.cfg.step_cost, calls=es.gate.ledger(slot.index, purpose.value),
        partners=partners, sent=tuple(slot.sent), negotiation=negotiation, last_task=slot.last_task,
    )


async def ask_agent(es: EpisodeState, agent: int, purpose: Purpose, view: TopologyView,
                    negotiation: Optional[NegotiationView] = None) -> Decision:
    """Asks one agent; the decision comes back checked (an invalid one is replaced by its
    fallback, and the agent is told why in its next context)."""
    slot = es.slots[agent]
    decision = await slot.agent.decide(build_context(es, slot, purpose, view, negotiation=negotiation))
    if not isinstance(decision, Decision):
        error: Optional[PlanError] = PlanError(PLAN_CHECK, f"the agent returned {type(decision).__name__}, not a Decision")
    else:
        error = check_decision(es, agent, purpose, view, decision)
    if error is None:
        return decision
    logger.info("%s: invalid decision at t=%d (%s); falling back", slot.name, es.t, error)
    if purpose == Purpose.MESSAGE:
        slot.feedback.append(f"Your last message turn was refused ({error}); nothing was sent.")
        return Decision(fallback=True, note=str(error))
    if purpose in (Purpose.PROPOSAL, Purpose.COMMITMENT):
        slot.feedback.append(f"Your last {purpose.value} was refused ({error}); it counts as none.")
        return Decision(block=None, fallback=True, note=str(error))
    slot.feedback.append(f"Your last decision was refused ({error}); you idle for one step.")
    return Decision(plan=fallback_plan(agent), fallback=True, note=str(error))


def check_decision(es: EpisodeState, agent: int, purpose: Purpose, view: TopologyView,
                   decision: Decision) -> Optional[PlanError]:
    """The first problem with ``decision`` against the current state and ``view``, or None."""
    if purpose in (Purpose.PROPOSAL, Purpose.COMMITMENT):
        return check_choice(es, purpose, decision)
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
        alive = [bool(x) for x in np.asarray(es.state.block_alive)]
        try:
            check_plan(list(decision.plan.actions), len(es.slots), alive)
        except PlanError as err:
            return err
        if view.required_spec is not None and decision.plan.spec != view.required_spec:
            return PlanError(PLAN_CHECK, f"the plan's spec must be {view.required_spec!r} (your allocated task), got "
                             f"{decision.plan.spec[:80]!r}", argument="spec")
    return check_messages(es, view, decision)


def check_choice(es: EpisodeState, purpose: Purpose, decision: Decision) -> Optional[PlanError]:
    """A negotiation proposal or commitment: a live block id or none, and nothing else."""
    if decision.plan is not None or decision.resume or decision.messages:
        return PlanError(PLAN_CHECK, f"a {purpose.value} names one block (or none) and carries no plan or message",
                         argument="block")
    block = decision.block
    if block is None:
        return None
    alive = np.asarray(es.state.block_alive)
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or not 0 <= block < alive.size:
        return PlanError(PLAN_CHECK, f"unknown block {block!r}; blocks are 0..{alive.size - 1}", argument="block")
    if not alive[block]:
        return PlanError(PLAN_CHECK, f"block {block} is already delivered", argument="block")
    return None


def check_messages(es: EpisodeState, view: TopologyView, decision: Decision) -> Optional[PlanError]:
    if not decision.messages:
        return None
    if not view.may_send:
        return PlanError(PLAN_CHECK, f"the {view.name} topology allows no message here", argument="messages")
    if len(decision.messages) > view.message_budget:
        return PlanError(PLAN_CHECK, f"{len(decision.messages)} messages exceed the budget of {view.message_budget}",
                         argument="messages")
    for k, message in enumerate(decision.messages):
        if not isinstance(message, OutgoingMessage) or not message.recipients:
            return PlanError(PLAN_CHECK, f"message {k} needs at least one recipient", argument="messages")
        forbidden = sorted(set(message.recipients) - set(view.allowed_recipients))
        if forbidden:
            allowed = ", ".join(es.slots[j].name for j in sorted(view.allowed_recipients)) or "nobody"
            shown = es.slots[forbidden[0]].name if 0 <= forbidden[0] < len(es.slots) else f"agent {forbidden[0]}"
            return PlanError(PLAN_CHECK, f"message {k} addresses {shown}, which the {view.name} topology does not "
                             f"allow here (allowed: {allowed})", argument="messages")
        if not isinstance(message.content, str) or not message.content.strip():
            return PlanError(PLAN_CHECK, f"message {k} is empty", argument="messages")
        if len(message.content) > MAX_MESSAGE_CHARS:
            return PlanError(PLAN_CHECK, f"message {k} has {len(message.content)} characters; at most "
                             f"{MAX_MESSAGE_CHARS}", argument="messages")
    return None


def commit_decision(es: EpisodeState, agent: int, purpose: Purpose, decision: Decision,
                    note: Optional[str] = None) -> None:
    """Applies the plan part of a checked decision now: resume (back to W with the same
    plan), or a new plan (replacing the running one when interrupted), then W. A message
    turn changes no plan."""
    if purpose == Purpose.MESSAGE:
        return
    slot = es.slots[agent]
    note = note or (decision.note if decision.fallback else None)
    if purpose == Purpose.INTERRUPT and decision.resume and slot.plan is not None:
        es.recorder.plan(slot, "resumed")
        es.recorder.stage(slot, Stage.WAITING)
        return
    if purpose == Purpose.INTERRUPT and slot.plan is not None:
        es.recorder.plan(slot, "replaced")
    plan = decision.plan if decision.plan is not None else fallback_plan(agent)
    commit_plan(es, slot, plan, fallback=decision.fallback or decision.plan is None, note=note)


def commit_plan(es: EpisodeState, slot: AgentSlot, plan: Plan, *, fallback: bool = False,
                note: Optional[str] = None) -> None:
    slot.plan = plan
    slot.plan_id = es.next_plan_id
    es.next_plan_id += 1
    if slot.agent.acts_with_primitives:
        es.executor.clear(slot.index)
    else:
        es.executor.set_plan(slot.index, list(plan.actions), es.state)
    slot.last_status, slot.last_error = "started", None
    extra = {}
    if fallback:
        extra["fallback"] = True
    if note:
        extra["note"] = note
    es.recorder.plan(slot, "committed", **extra)
    es.recorder.stage(slot, Stage.WAITING)
