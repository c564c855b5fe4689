"""``centralized``: ``agent_0`` leads with directives that the runtime addresses to every follower."""
from __future__ import annotations

import asyncio
from typing import List, Optional

from cube_jax.agents.base import Decision, Message, Purpose, TopologyView
from cube_jax.runtime.phase import Phase, gather_all
from cube_jax.runtime.topologies.base import Topology


class Centralized(Topology):
    """``agent_0`` leads.

    * When the leader reasons (R) it first sends one directive, which the runtime addresses
      to every follower, then plans once the followers reasoning with it have answered (or
      ``directive_timeout`` seconds have passed).
    * A follower reasoning while the leader reasons waits for the directive (at most
      ``directive_timeout`` seconds; past it, it plans without and its plan record says so),
      acknowledges it (a message to the leader, built by the runtime when the model writes
      none) and plans with it in its prompt.
    * A follower reasoning while the leader does not plans with the leader's latest
      directive, if any, and sends nothing.
    * A directive reaching a follower in W or X interrupts it when the phase ends; it may
      then acknowledge it (one message to the leader) as it resumes or replans. An
      interrupted leader resumes or replans and sends nothing.
    """

    name = "centralized"
    leader = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.latest_directive: Optional[Message] = None

    def reset(self) -> None:
        self.latest_directive = None

    def role(self, agent: int) -> str:
        if agent == self.leader:
            return ("You are the leader (agent_0). When you reason you first write one directive, which goes to every "
                    "follower, then commit your own plan once they have answered.")
        return ("You are a follower; agent_0 leads. When the leader sends a directive, acknowledge it and plan "
                "accordingly; a directive that reaches you while you execute interrupts you, and you decide whether "
                "to resume or replan.")

    def followers(self) -> List[int]:
        return [j for j in range(self.num_agents) if j != self.leader]

    def latest_text(self) -> str:
        if self.latest_directive is None:
            return ""
        return f"The leader's latest directive (step {self.latest_directive.t}): {self.latest_directive.content}"

    def member_view(self, agent: int, purpose: Purpose) -> TopologyView:
        if agent == self.leader:
            return self.view(agent, purpose, instructions="Resume or replan; you send no message now.")
        if purpose == Purpose.INTERRUPT:
            return self.view(agent, purpose, recipients=[self.leader], budget=1,
                             instructions="The leader sent a directive: you may acknowledge it in one message to "
                                          "agent_0; then resume or replan.")
        return self.view(agent, purpose, instructions=self.latest_text() or "Plan on your own; send no message.")

    async def deliberate(self, phase: Phase) -> None:
        if self.leader not in phase.members or phase.purposes[self.leader] != Purpose.PLAN or self.num_agents == 1:
            await super().deliberate(phase)
            return
        round_ = DirectiveRound(self, phase)
        await gather_all([round_.leader_turn()] + [round_.follower_turn(i) for i in phase.members
                                                   if i != self.leader])


class DirectiveRound:
    """One phase in which the leader reasons: directive, acknowledgements, plans."""

    def __init__(self, topology: Centralized, phase: Phase):
        self.topology = topology
        self.phase = phase
        self.leader = topology.leader
        self.answering = [i for i in phase.members if i != self.leader]  # followers deciding with the leader
        self.waiting = set(self.answering)  # followers still waiting for the directive
        self.directive: Optional[Message] = None
        self.directive_sent = asyncio.Event()
        self.answered = asyncio.Event()
        self.pending_answers = set(self.answering)
        if not self.pending_answers:
            self.answered.set()
        self.leader_planning = False

    async def leader_turn(self) -> None:
        topology, phase = self.topology, self.phase
        ask = topology.view(self.leader, Purpose.MESSAGE, recipients=topology.followers(), budget=1,
                            instructions="Write ONE directive for your followers (it goes to all of them): who does "
                                         "what.")
        decision = await phase.decide(self.leader, Purpose.MESSAGE, ask)
        text = "\n".join(m.content.strip() for m in decision.messages if m.content.strip())
        if text:
            self.directive = phase.send(self.leader, topology.followers(), text, now=sorted(self.waiting))
            topology.latest_directive = self.directive
        self.waiting.clear()
        self.directive_sent.set()
        note = None
        try:
            await asyncio.wait_for(self.answered.wait(), topology.directive_timeout)
        except asyncio.TimeoutError:
            note = f"planned before every follower answered (directive_timeout {topology.directive_timeout:g} s)"
        self.leader_planning = True
        plan_view = topology.view(self.leader, Purpose.PLAN,
                                  instructions="Your directive went to every follower; commit your own plan.")
        phase.commit(self.leader, Purpose.PLAN, await phase.decide(self.leader, Purpose.PLAN, plan_view), note=note)

    async def follower_turn(self, agent: int) -> None:
        topology, phase = self.topology, self.phase
        purpose = phase.purposes[agent]
        note = None
        try:
            await asyncio.wait_for(self.directive_sent.wait(), topology.directive_timeout)
        except asyncio.TimeoutError:
            note = f"planned without the leader's directive (directive_timeout {topology.directive_timeout:g} s)"
            self.waiting.discard(agent)
        if self.directive is not None and note is None:
            view = topology.view(agent, purpose, recipients=[self.leader], budget=1,
                                 instructions="Acknowledge the leader's directive (one message to agent_0) and plan "
                                              "accordingly.")
        else:
            view = topology.view(agent, purpose, instructions="No directive came from the leader; plan on your own.")
        decision = await phase.decide(agent, purpose, view)
        if view.may_send:
            self.acknowledge(agent, decision)
        phase.commit(agent, purpose, decision, note=note)
        self.pending_answers.discard(agent)
        if not self.pending_answers:
            self.answered.set()

    def acknowledge(self, agent: int, decision: Decision) -> None:
        text = "\n".join(m.content.strip() for m in decision.messages if m.content.strip())
        if not text:
            plan = decision.plan if decision.plan is not None else self.phase.plan(agent)
            text = f"Acknowledged directive {self.directive.id}." + (f" My plan: {plan}" if plan is not None else "")
        now = [] if self.leader_planning else [self.leader]
        self.phase.send(agent, [self.leader], text, now=now)
