"""One cognitive phase: what a topology may do with the agents that decide in it.

A phase is one round of decisions at one environment step (LLM.md 2.1): every agent then in
R or I decides on the same snapshot of the world. A topology gets a :class:`Phase` and
nothing else of the episode: it asks agents (:meth:`Phase.decide`, or
:meth:`Phase.decide_each` for agents that decide side by side), commits what they decided
(:meth:`Phase.commit`) and sends messages (:meth:`Phase.send`). Messages are delivered
when the phase ends, all at once, except where a sequential topology hands one to a
speaker still to come (``now``).
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Collection, Dict, Mapping, Optional, Sequence, Tuple

from cube_jax.agents.base import Decision, Message, NegotiationView, Plan, Purpose, Stage, TopologyView
from cube_jax.runtime.decisions import EpisodeState, ask_agent, commit_decision

Route = Callable[[int, Purpose, Decision], None]


class Phase:
    """The agents deciding in one phase (``members``, ids ascending) and what may be done."""

    def __init__(self, es: EpisodeState, members: Sequence[int]):
        self._es = es
        self.members: Tuple[int, ...] = tuple(members)
        self.purposes: Dict[int, Purpose] = {
            i: Purpose.INTERRUPT if es.slots[i].stage == Stage.INTERRUPTED else Purpose.PLAN for i in self.members}
        self.committed: set = set()
        es.snapshot_partners()

    @property
    def num_agents(self) -> int:
        return len(self._es.slots)

    @property
    def t(self) -> int:
        return self._es.t

    def stage(self, agent: int) -> Stage:
        return self._es.slots[agent].stage

    def plan(self, agent: int) -> Optional[Plan]:
        return self._es.slots[agent].plan

    def name(self, agent: int) -> str:
        return self._es.slots[agent].name

    async def decide(self, agent: int, purpose: Purpose, view: TopologyView,
                     negotiation: Optional[NegotiationView] = None) -> Decision:
        """Asks ``agent``; the decision comes back checked (see :func:`ask_agent`)."""
        return await ask_agent(self._es, agent, purpose, view, negotiation=negotiation)

    def commit(self, agent: int, purpose: Purpose, decision: Decision, note: Optional[str] = None) -> None:
        """Applies the decision's plan part now (the agent enters W at this moment)."""
        commit_decision(self._es, agent, purpose, decision, note=note)
        if purpose != Purpose.MESSAGE:
            self.committed.add(agent)

    def assign(self, agent: int, plan: Plan, note: Optional[str] = None) -> None:
        """Gives ``agent`` a plan the topology chose for it (not one it decided), now."""
        commit_decision(self._es, agent, self.purposes[agent], Decision(plan=plan), note=note)
        self.committed.add(agent)

    def world(self):
        """The symbolic view of the world now (:class:`~cube_jax.agents.views.WorldView`)."""
        return self._es.view

    def executing(self, spec: str) -> int:
        """Agents outside this phase holding a plan with ``spec`` (in W or X)."""
        return sum(1 for s in self._es.slots if s.index not in self.members and s.plan is not None
                   and s.plan.spec == spec and s.stage in (Stage.WAITING, Stage.EXECUTING))

    def record(self, record_type: str, **fields) -> None:
        """Writes a record of the topology's own (a negotiation room's)."""
        self._es.recorder.write(record_type, **fields)

    def send(self, sender: int, recipients: Sequence[int], content: str, *, now: Collection[int] = (),
             kind: Optional[str] = None) -> Message:
        return self._es.mailbox.send(sender, recipients, content, now=now, kind=kind)

    def send_messages(self, agent: int, purpose: Purpose, decision: Decision) -> None:
        """The default routing: each message of the decision as the agent addressed it,
        delivered when the phase ends."""
        for message in decision.messages:
            self.send(agent, message.recipients, message.content)

    async def decide_each(self, agents: Sequence[int], views: Mapping[int, TopologyView],
                          purposes: Optional[Mapping[int, Purpose]] = None, route: Optional[Route] = None) -> None:
        """Asks ``agents`` side by side (their model calls overlap); each decision is routed
        (default: :meth:`send_messages`) and committed the moment it arrives, so each
        agent's clock is its own."""
        purposes = purposes or self.purposes
        route = route or self.send_messages

        async def one(i: int) -> None:
            decision = await self.decide(i, purposes[i], views[i])
            route(i, purposes[i], decision)
            self.commit(i, purposes[i], decision)

        await gather_all([one(i) for i in agents])


async def gather_all(coroutines: Sequence[Awaitable]) -> list:
    """Runs ``coroutines`` side by side; when one fails (or all are cancelled), the others
    are cancelled and awaited, so that every model call they made is recorded before the
    error goes on."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    if not tasks:
        return []
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        raise
