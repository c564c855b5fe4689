"""``negotiation``: DR. WELL's rooms (LLM.md section 3.1): propose, commit, allocate under
quorum, then plan for the allocated block with the world model's plan library."""
from __future__ import annotations

from typing import Dict, List, Optional, Protocol, Sequence

from cube_jax.agents.base import Decision, NegotiationView, Plan, Purpose, TaskEvidence
from cube_jax.names import agent_name
from cube_jax.runtime.phase import Phase, gather_all
from cube_jax.runtime.topologies.base import Topology
from cube_jax.symbolic.actions import make_action

# How long a member whose block failed quorum waits before the next room (steps).
QUORUM_WAIT_STEPS = 3


class WorldModelReader(Protocol):
    """What a negotiation reads of a world model (:mod:`cube_jax.worldmodel`).

    A reader may also have ``task_stats(block)`` and ``team_size_stats(block)`` (as
    :class:`~cube_jax.worldmodel.WorldModel` has): the room then gives its members every
    aggregate of each task, per team size too (:class:`~cube_jax.agents.base.TaskEvidence`);
    without them, only the success rate and the best team size."""

    def best_team_size(self, block: int) -> Optional[int]: ...

    def success_rate(self, block: int) -> Optional[float]: ...

    def guidebook(self, live_blocks: Sequence[int], t: int, room_size: int) -> str: ...

    def plan_library(self, block: int) -> str: ...


def task_evidence(model: WorldModelReader, block: int) -> Optional[TaskEvidence]:
    """What ``model`` knows of task ``block`` as numbers; None when it has no data on it."""
    stats = getattr(model, "task_stats", None)
    if stats is None:
        rate = model.success_rate(block)
        if rate is None:
            return None
        return TaskEvidence(success_rate=float(rate), best_team_size=model.best_team_size(block))
    task = stats(block)
    if not task.attempts:
        return None
    per_size = getattr(model, "team_size_stats", None)
    teams = tuple((s.team_size, s.attempts, s.success_rate, s.duration_mean) for s in per_size(block)) \
        if per_size is not None else ()
    return TaskEvidence(success_rate=task.success_rate, attempts=task.attempts, duration_mean=task.duration_mean,
                        start_mean=task.start_mean, best_team_size=task.best_team_size, teams=teams)


def task_spec(block: int) -> str:
    """The spec of a plan for block ``block``'s task."""
    return f"push_block(block#{block})"


class Negotiation(Topology):
    """At a decision point the agents in R or I enter a room, in id order (agents in W or X
    keep their plans). Each member in turn proposes one task (a live block, or none), seeing
    the earlier proposals and the world model's guidebook; the runtime computes each
    proposed block's suggested team size (the world model's best size when it has data, else
    the block's weight); each member in turn commits to one block or none, seeing the
    proposals, the team sizes and the earlier commitments. An allocation to block b is final
    when the members committed to b plus the agents already executing ``push_block(block#b)``
    number at least b's weight. Members with a final allocation then plan for it side by
    side, with the plan library of its task in their prompt (their plan's spec must be
    ``push_block(block#b)``); members whose block failed quorum wait (``wait_agents(w, 3)``,
    spec ``quorum_wait(block#b)``) and rejoin the next room; members that committed to none
    idle for one step. Proposals and commitments are the only messages, each to the whole
    room; one ``negotiation`` record closes each room."""

    name = "negotiation"

    def __init__(self, *args, world_model: Optional[WorldModelReader] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.world_model = world_model

    def role(self, agent: int) -> str:
        return ("You negotiate tasks with your teammates: when you are free, you enter a room with the others who are "
                "free; each proposes one block (or none), then each commits to one block (or none). A block is "
                "allocated only when enough agents commit to it for its weight; then you plan for your block.")

    def team_size(self, block: int, weight: int) -> int:
        best = self.world_model.best_team_size(block) if self.world_model is not None else None
        return int(best) if best is not None else int(weight)

    async def deliberate(self, phase: Phase) -> None:
        await Room(self, phase).run()


class Room:
    """One negotiation room: the proposal round, the commitment round, quorum, planning."""

    def __init__(self, topology: Negotiation, phase: Phase):
        self.topology, self.phase = topology, phase
        self.members = list(phase.members)
        world = phase.world()
        self.weights = {b.id: b.weight for b in world.blocks}
        self.live = [b.id for b in world.blocks if b.alive]
        self.executing = {b: phase.executing(task_spec(b)) for b in self.live}
        model = topology.world_model
        self.guidebook = model.guidebook(self.live, phase.t, len(self.members)) if model is not None else ""
        rates = {b: model.success_rate(b) for b in self.live} if model is not None else {}
        self.success = {b: float(r) for b, r in rates.items() if r is not None}
        known = {b: task_evidence(model, b) for b in self.live} if model is not None else {}
        self.evidence = {b: e for b, e in known.items() if e is not None}
        self.proposals: Dict[int, Optional[int]] = {}
        self.commitments: Dict[int, Optional[int]] = {}
        self.team_sizes: Dict[int, int] = {}

    def view(self, allocation: Optional[int] = None) -> NegotiationView:
        model = self.topology.world_model
        library = model.plan_library(allocation) if model is not None and allocation is not None else ""
        return NegotiationView(room=tuple(self.members), proposals=dict(self.proposals),
                               commitments=dict(self.commitments), team_sizes=dict(self.team_sizes),
                               executing={b: k for b, k in self.executing.items() if k}, guidebook=self.guidebook,
                               success=dict(self.success), allocation=allocation, plan_library=library,
                               evidence=dict(self.evidence))

    async def run(self) -> None:
        await self.round(Purpose.PROPOSAL, self.proposals, "proposal")
        self.team_sizes = {b: self.topology.team_size(b, self.weights[b])
                           for b in sorted({b for b in self.proposals.values() if b is not None})}
        await self.round(Purpose.COMMITMENT, self.commitments, "commitment")
        allocation, failed = self.quorum()
        names = {i: self.phase.name(i) for i in self.members}
        self.phase.record("negotiation", room=[names[i] for i in self.members],
                          proposals={names[i]: b for i, b in self.proposals.items()},
                          commitments={names[i]: b for i, b in self.commitments.items()},
                          team_sizes={str(b): k for b, k in self.team_sizes.items()},
                          allocation={names[i]: b for i, b in allocation.items()}, quorum_failed=failed)
        for i in self.members:
            block = self.commitments[i]
            if block is None:
                self.phase.assign(i, Plan(f"no_task({agent_name(i)})", (make_action("idle", 1),)))
            elif i not in allocation:
                count = min(self.weights[block], self.phase.num_agents)
                self.phase.assign(i, Plan(f"quorum_wait(block#{block})",
                                          (make_action("wait_agents", count, QUORUM_WAIT_STEPS),)))
        views = {i: self.topology.view(i, self.phase.purposes[i], required_spec=task_spec(b),
                                       instructions=f"Your task is block {b}: plan to deliver it; your plan's spec "
                                                    f"must be {task_spec(b)!r}.")
                 for i, b in allocation.items()}

        async def plan(i: int) -> None:
            purpose = self.phase.purposes[i]
            decision = await self.phase.decide(i, purpose, views[i], negotiation=self.view(allocation[i]))
            self.phase.commit(i, purpose, decision)

        await gather_all([plan(i) for i in sorted(allocation)])

    async def round(self, purpose: Purpose, choices: Dict[int, Optional[int]], kind: str) -> None:
        """Each member in turn: one choice, sent to the rest of the room."""
        for i in self.members:
            view = self.topology.view(i, purpose, instructions=ROUND_INSTRUCTIONS[purpose])
            decision = await self.phase.decide(i, purpose, view, negotiation=self.view())
            choices[i] = decision.block
            others = [j for j in self.members if j != i]
            self.phase.send(i, others, choice_text(kind, decision), now=others, kind=kind)

    def quorum(self):
        """(agent -> block for final allocations, block ids that failed quorum)."""
        committed: Dict[int, List[int]] = {}
        for i, block in self.commitments.items():
            if block is not None:
                committed.setdefault(block, []).append(i)
        allocation, failed = {}, []
        for block, agents in sorted(committed.items()):
            if len(agents) + self.executing.get(block, 0) >= self.weights[block]:
                allocation.update({i: block for i in agents})
            else:
                failed.append(block)
        return allocation, failed


ROUND_INSTRUCTIONS = {
    Purpose.PROPOSAL: "Propose one task for the team: a live block id (or none), with a short rationale.",
    Purpose.COMMITMENT: "Commit to one block (or none): the block you will work on if enough agents commit to it.",
}


def choice_text(kind: str, decision: Decision) -> str:
    what = "none" if decision.block is None else f"block {decision.block}"
    verb = "I propose" if kind == "proposal" else "I commit to"
    reason = decision.rationale.strip()
    return f"{verb} {what}" + (f": {reason}" if reason else ".")
