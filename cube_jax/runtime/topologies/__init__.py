"""Communication topologies: who may talk to whom, and when (LLM.md section 3).

A topology orchestrates the decisions of one cognitive phase (the decisions between two
environment steps) through the :class:`~cube_jax.evaluation.episode.Episode` it is given:
``await episode.decide(agent, purpose, view)`` asks one agent, ``await
episode.decide_many(...)`` asks several at once (their model calls overlap; the results
are applied in agent-id order so traces do not depend on timing), ``episode.apply(...)``
sends the decision's messages and commits its plan.

* ``individual``: no messages; every reasoning agent plans on its own, all at once.
* ``debate``: agents reasoning at the same time speak in id order; each reads the earlier
  proposals of the round, sends its own to every later speaker, then plans (the last
  sends nothing).
* ``centralized``: ``agent_0`` leads. When it reasons it first sends one directive to all
  followers; followers reasoning at the same time acknowledge it (a message to the
  leader) and plan with it in their prompt; followers that wait or execute are
  interrupted by it. The leader plans once the acknowledgements are in. A follower that
  reasons while the leader does not plans on its own.
* ``decentralized``: any agent in R or I may send up to ``budget`` messages per decision
  (default n), each to any set of agents; an agent receives at most n messages per step,
  the rest wait in its buffer for the next steps.

To add a topology (DR. WELL's negotiation, say), subclass :class:`Topology`, give it a
``name`` and role texts, override :meth:`Topology.deliberate` (and
:meth:`Topology.resolve_interrupts` if interrupts need more than resume/replan), and add it
to :data:`TOPOLOGIES`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Type

from cube_jax.agents.base import Purpose, TopologyView

if TYPE_CHECKING:  # pragma: no cover
    from cube_jax.runtime.loop import Episode


class Topology:
    """Base class: the ``individual`` rules (no messages), and the default handling of
    interrupts (every interrupted agent decides resume or replan, all at once)."""

    name = "individual"

    def __init__(self, num_agents: int, budget: Optional[int] = None):
        self.num_agents = num_agents
        self.budget = num_agents if budget is None else int(budget)
        if self.budget < 0:
            raise ValueError(f"topology {self.name}: budget must be >= 0, got {budget!r}")

    # -- rules ------------------------------------------------------------------------------
    def role(self, agent: int) -> str:
        return ("You act on your own: there is no communication with your teammates. Watch the world and "
                "choose plans that help the team deliver every block.")

    def receive_cap(self) -> Optional[int]:
        """How many messages an agent may receive per step (None: no limit)."""
        return None

    def view(self, agent: int, purpose: Purpose, *, recipients=(), budget: int = 0,
             instructions: str = "") -> TopologyView:
        return TopologyView(
            name=self.name,
            role=self.role(agent),
            may_send=budget > 0 and bool(recipients),
            allowed_recipients=frozenset(recipients),
            message_budget=int(budget) if recipients else 0,
            instructions=instructions,
        )

    def others(self, agent: int) -> List[int]:
        return [j for j in range(self.num_agents) if j != agent]

    # -- orchestration ----------------------------------------------------------------------
    def plan_view(self, agent: int) -> TopologyView:
        """What an agent planning on its own may do (the default deliberation's view)."""
        return self.view(agent, Purpose.PLAN)

    async def deliberate(self, episode: "Episode", reasoning: Sequence[int]) -> None:
        """Decisions of the agents in R (ids ascending): each must end with a committed plan.
        By default they all plan at once, each with :meth:`plan_view`."""
        views = {i: self.plan_view(i) for i in reasoning}
        decisions = await episode.decide_many(reasoning, Purpose.PLAN, views)
        for i in reasoning:
            episode.apply(i, Purpose.PLAN, decisions[i])

    def interrupt_view(self, agent: int) -> TopologyView:
        return self.view(agent, Purpose.INTERRUPT)

    async def resolve_interrupts(self, episode: "Episode", interrupted: Sequence[int]) -> None:
        """Decisions of the agents in I (ids ascending): each resumes or replans."""
        views = {i: self.interrupt_view(i) for i in interrupted}
        decisions = await episode.decide_many(interrupted, Purpose.INTERRUPT, views)
        for i in interrupted:
            episode.apply(i, Purpose.INTERRUPT, decisions[i])


class Individual(Topology):
    name = "individual"


class Debate(Topology):
    name = "debate"

    def role(self, agent: int) -> str:
        return (f"You take part in a debate. Agents who reason at the same time speak in id order: you read the "
                f"proposals of the agents before you, send your own proposal to the agents after you, then commit "
                f"your plan. You are agent_{agent}; the last speaker of a round sends nothing.")

    async def deliberate(self, episode: "Episode", reasoning: Sequence[int]) -> None:
        order = sorted(reasoning)
        for position, i in enumerate(order):
            later = order[position + 1:]
            view = self.view(i, Purpose.PLAN, recipients=later, budget=1 if later else 0,
                             instructions=("Send one proposal to the later speakers "
                                           f"({', '.join(f'agent_{j}' for j in later)}), then commit your plan."
                                           if later else "You speak last: commit your plan; send no message."))
            decision = await episode.decide(i, Purpose.PLAN, view)
            episode.apply(i, Purpose.PLAN, decision)


class Centralized(Topology):
    name = "centralized"
    leader = 0

    def role(self, agent: int) -> str:
        if agent == self.leader:
            return ("You are the leader (agent_0). When you reason you first send one directive to all followers, "
                    "wait for their acknowledgements, then commit your own plan.")
        return ("You are a follower; agent_0 leads. When the leader sends a directive, acknowledge it with one "
                "message to agent_0 and plan accordingly; a directive that reaches you while you execute "
                "interrupts you, and you decide whether to resume or replan.")

    def followers(self) -> List[int]:
        return [j for j in range(self.num_agents) if j != self.leader]

    def interrupt_view(self, agent: int) -> TopologyView:
        if agent == self.leader:
            return self.view(agent, Purpose.INTERRUPT)
        return self.view(agent, Purpose.INTERRUPT, recipients=[self.leader], budget=1,
                         instructions="The leader sent a directive: acknowledge it to agent_0, then resume or replan.")

    async def deliberate(self, episode: "Episode", reasoning: Sequence[int]) -> None:
        followers = self.followers()
        if self.leader not in reasoning or not followers:
            await super().deliberate(episode, reasoning)  # followers plan on their own
            return
        directive = self.view(self.leader, Purpose.MESSAGE, recipients=followers, budget=1,
                              instructions="Send ONE directive addressed to all followers (to: all): who does what.")
        episode.apply(self.leader, Purpose.MESSAGE, await episode.decide(self.leader, Purpose.MESSAGE, directive))
        # Followers that reason now, and followers the directive interrupted, answer at once.
        planning = [i for i in reasoning if i != self.leader]
        interrupted = episode.interrupted()
        views = {i: self.view(i, Purpose.PLAN, recipients=[self.leader], budget=1,
                              instructions="Acknowledge the leader's directive (one message to agent_0), then "
                                           "commit your plan.") for i in planning}
        views.update({i: self.interrupt_view(i) for i in interrupted})
        asked = sorted(views)
        purposes = {i: Purpose.PLAN if i in planning else Purpose.INTERRUPT for i in asked}
        decisions = await episode.decide_many(asked, purposes, views)
        for i in asked:
            episode.apply(i, purposes[i], decisions[i])
        leader_view = self.view(self.leader, Purpose.PLAN,
                                instructions="Your followers have answered; commit your own plan.")
        episode.apply(self.leader, Purpose.PLAN, await episode.decide(self.leader, Purpose.PLAN, leader_view))


class Decentralized(Topology):
    name = "decentralized"

    def role(self, agent: int) -> str:
        return (f"Communication is decentralized: whenever you reason or are interrupted you may send up to "
                f"{self.budget} messages, each to any set of teammates. Messages reaching a teammate who waits or "
                f"executes interrupt it, so write only what helps.")

    def receive_cap(self) -> Optional[int]:
        return self.num_agents

    def plan_view(self, agent: int) -> TopologyView:
        return self.view(agent, Purpose.PLAN, recipients=self.others(agent), budget=self.budget)

    def interrupt_view(self, agent: int) -> TopologyView:
        return self.view(agent, Purpose.INTERRUPT, recipients=self.others(agent), budget=self.budget)


TOPOLOGIES: Dict[str, Type[Topology]] = {
    cls.name: cls for cls in (Individual, Debate, Centralized, Decentralized)
}


def make_topology(name: str, num_agents: int, budget: Optional[int] = None) -> Topology:
    """The topology called ``name`` for a team of ``num_agents``; ValueError for an unknown name."""
    if name not in TOPOLOGIES:
        raise ValueError(f"topology: unknown {name!r}; topologies are {sorted(TOPOLOGIES)}")
    return TOPOLOGIES[name](num_agents, budget)
