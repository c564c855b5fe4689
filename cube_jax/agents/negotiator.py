"""The negotiating planner (kind ``negotiator``): DR. WELL's mechanism without a model.

In a negotiation room (:mod:`cube_jax.runtime.topologies.negotiation`) it proposes and
commits one block; given a block, it plans like the heuristic: ``move_to_block ->
rendezvous -> push_block`` with the spec ``push_block(block#b)``. Outside a room (another
topology) it plays the heuristic. It never calls a model, so its choices are the same on
every run.

**Without experience** (no world model, or one that has nothing on the live tasks) it
proposes the block the team can reach that the heuristic would pick: the alive block
closest to the goal (then the lower id) among those that need no more agents than the
team has and have a clear lane to the goal (no alive block in its rows to its right: a
block behind another cannot be pushed home before the other is gone). When it commits, a
block whose quorum can no longer be reached loses to one that can, and a block whose
suggested team is already full loses to one still short of hands. Every member so proposes
and commits the same block: the whole room works on one block at a time.

**With experience** (the room's :class:`~cube_jax.agents.base.TaskEvidence`: the world
model's aggregates for the live tasks, DR. WELL section 2.3 and appendix A.1.1) it reads,
for every live task, the success rate and the mean duration of each team size tried, and
decides by four rules:

1. *Team size.* The world model's best team size (the room's suggested team size) bounds
   the team from above; the team it sends is the smallest size from the block's weight
   (the force a push needs) up to that bound that the model has not seen do worse than the
   best size: a size never tried counts as good as the best until an attempt shows
   otherwise (optimism under uncertainty). A task done so far only by a crowd is so next
   tried by a team of its weight, a size that failed more often than the best is not tried
   again, and a task without a success gets a team of its weight.
2. *Task order.* Tasks rank by the expected success rate of that team (the rate measured
   for that size; for a size never tried, the best size's rate; 1 for a task never tried),
   then by the shorter expected duration (that size's mean duration, else the task's; none
   counts as 0 for a task never tried), then closest to the goal: the plan library's order
   (success, then duration), applied to tasks.
3. *Filling teams.* A member proposes, first, a task with a clear lane, then one whose
   quorum the room can still reach, then one whose team is not yet full (earlier proposals
   and the agents already executing it count), then by rule 2. Only when every reachable
   task is full does it join one as an extra hand. When it commits it goes by the same
   order, its own proposal before the others; so the room splits into teams that work side
   by side.
4. *Lanes.* A block's lane counts as clear also while every block in it has a full team
   (chosen in this round or executing): it is on its way out. Such a block gets no more
   agents than its weight, and its team pushes it only as far as one cell short of the
   left face of the block ahead (then negotiates again), so that face stays free for that
   block's pushers. An agent about to work that stands in front of a block steps out of
   its lane first.

Everything it reads is in the room's view, so the choice is a function of the world model
and the state: the same on every run.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from cube_jax.agents.base import Agent, Decision, DecisionContext, NegotiationView, Plan, Purpose, TaskEvidence
from cube_jax.agents.planners import (blocks_by_priority, deliver_plan, lane_blockers, lane_exit_plan, lane_mask,
                                     rendezvous_timeout)
from cube_jax.names import agent_name
from cube_jax.symbolic.actions import make_action


def team_target(weight: int, evidence: Optional[TaskEvidence]) -> int:
    """The team the negotiator sends to a task of ``weight`` (rule 1 of the module docstring)."""
    if evidence is None or evidence.best_team_size is None:
        return int(weight)
    best = int(evidence.best_team_size)
    tried = {size: rate for size, _, rate, _ in evidence.teams}
    bar = tried.get(best, evidence.success_rate)
    for size in range(int(weight), max(int(weight), best) + 1):
        if size not in tried or tried[size] >= bar:
            return size
    return max(int(weight), best)  # not reached: the best size itself meets the bar


def expectation(weight: int, evidence: Optional[TaskEvidence]) -> Tuple[int, float, Optional[float]]:
    """(team size, expected success rate, expected duration or None) of a task (rules 1-2)."""
    size = team_target(weight, evidence)
    if evidence is None:
        return size, 1.0, None
    teams = {s: (rate, duration) for s, _, rate, duration in evidence.teams}
    if size in teams:
        return size, teams[size][0], teams[size][1]
    best = evidence.best_team_size
    rate = teams[best][0] if best in teams else evidence.success_rate
    return size, rate, evidence.duration_mean


def push_room(world, block: int, blockers: List[int]) -> Optional[int]:
    """How far ``block`` can be pushed before it would stand on the left face of a block in its
    lane (leaving that block's pushers a cell to stand on); None when its lane is clear."""
    if not blockers:
        return None
    c, w = int(world.block_pos[block, 1]), int(world.block_weight[block])
    return min(int(world.block_pos[x, 1]) - c - w - 1 for x in blockers)


def side_by_side(world, agent: int, block: int, plan: list) -> list:
    """The deliver plan of a team working beside others: it first steps out of the way when
    it stands in front of a block, and it pushes a block whose lane is still taken only up to
    one cell short of the block ahead (it negotiates again when that push is done)."""
    alive = [int(j) for j in np.flatnonzero(world.block_alive)]
    room = push_room(world, block, lane_blockers(world).get(block, []))
    if room is not None:
        plan = plan[:-1] + [make_action("push_block", block, max(1, min(room, plan[-1].args["steps"])))]
    return (lane_exit_plan(world, agent, lane_mask(world, alive, behind=0)) or []) + plan


class NegotiatorAgent(Agent):
    """One agent of a negotiating team (build a team with :func:`negotiator_team`)."""

    kind = "negotiator"

    async def decide(self, ctx: DecisionContext) -> Decision:
        world = ctx.views.world
        order = blocks_by_priority(world)
        if ctx.purpose == Purpose.INTERRUPT:
            return Decision(resume=True)
        if ctx.purpose in (Purpose.PROPOSAL, Purpose.COMMITMENT):
            committing = ctx.purpose == Purpose.COMMITMENT
            room = ctx.negotiation
            if room is not None and room.evidence:
                return self.choose_informed(ctx, order, room, committing)
            return self.choose(ctx, order, room, committing)
        negotiation = ctx.negotiation
        target = negotiation.allocation if negotiation is not None and negotiation.allocation is not None else (
            order[0] if order else None)
        if target is None:
            return Decision(plan=Plan(f"no_task({agent_name(ctx.agent)})", (make_action("idle", 1),)))
        plan = deliver_plan(world, target, rendezvous_timeout(world.grid_size))
        if negotiation is not None and negotiation.evidence:
            plan = side_by_side(world, ctx.agent, target, plan)
        return Decision(plan=Plan(f"push_block(block#{target})", tuple(plan)))

    def choose(self, ctx: DecisionContext, order: List[int], room: Optional[NegotiationView],
               committing: bool) -> Decision:
        """Without experience: every member the same block (see the module docstring)."""
        world = ctx.views.world
        weight = {j: int(world.block_weight[j]) for j in order}
        success = room.success if room is not None else {}
        blockers = lane_blockers(world)
        if committing:
            candidates = sorted({b for b in (room.proposals.values() if room else ()) if b is not None and b in weight})
        else:
            candidates = [b for b in order if weight[b] <= ctx.num_agents]
        if not candidates:
            return Decision(block=None, rationale="no task the team can reach")
        rank = {b: k for k, b in enumerate(order)}

        def score(b: int):
            clear = not blockers.get(b)
            if not committing:
                return (clear, success.get(b, 0.0), -rank[b])
            committed = sum(1 for c in room.commitments.values() if c == b) + room.executing.get(b, 0)
            undecided = sum(1 for i in room.room if i not in room.commitments)  # this agent included
            reachable = committed + undecided >= weight[b]
            short = committed < room.team_sizes.get(b, weight[b])
            return (reachable, clear, short, success.get(b, 0.0), -rank[b])

        best = max(candidates, key=score)
        rate = success.get(best)
        why = (f"success rate {rate:.2f} in the guidebook" if rate is not None else "closest to the goal") + \
            f", weight {weight[best]}"
        return Decision(block=best, rationale=why)

    def choose_informed(self, ctx: DecisionContext, order: List[int], room: NegotiationView,
                        committing: bool) -> Decision:
        """With experience: teams sized and tasks ranked by the world model (rules 1-4)."""
        world = ctx.views.world
        weight = {j: int(world.block_weight[j]) for j in order}
        blockers = lane_blockers(world)
        rank = {b: k for k, b in enumerate(order)}
        expected = {b: expectation(weight[b], room.evidence.get(b)) for b in order}
        if committing:
            candidates = sorted({b for b in room.proposals.values() if b is not None and b in weight})
            spoken = room.commitments
        else:
            candidates = [b for b in order if weight[b] <= ctx.num_agents]
            spoken = room.proposals
        if not candidates:
            return Decision(block=None, rationale="no task the team can reach")
        left = sum(1 for i in room.room if i not in spoken)  # this agent included
        held: Dict[int, int] = {b: sum(1 for c in spoken.values() if c == b) + room.executing.get(b, 0)
                                for b in candidates}
        mine = room.proposals.get(ctx.agent) if committing else None
        # rule 4: a block in the lane with a full team (chosen in this round, or executing
        # outside the room) is on its way out of it
        staffed = {b for b in order
                   if sum(1 for c in spoken.values() if c == b) + room.executing.get(b, 0) >= weight[b]}

        def score(b: int):
            size, rate, duration = expected[b]
            clear = not blockers.get(b) or (all(x in staffed for x in blockers[b]) and held[b] < weight[b]
                                            and push_room(world, b, blockers[b]) >= 1)
            reachable = held[b] + left >= weight[b]
            open_ = held[b] < size
            return (clear, reachable, open_, b == mine, rate, -duration if duration is not None else 0.0, -rank[b])

        best = max(candidates, key=score)
        size, rate, duration = expected[best]
        evidence = room.evidence.get(best)
        told = "never tried" if evidence is None else (
            f"{rate:.0%} expected success with {size}" + (f", {duration:.1f} steps" if duration is not None else ""))
        role = "joins as an extra hand" if held[best] >= size else f"agent {held[best] + 1} of {size}"
        return Decision(block=best, rationale=f"world model: {told}; {role}; weight {weight[best]}")


def negotiator_team(env) -> List[NegotiatorAgent]:
    """One :class:`NegotiatorAgent` per agent of ``env``."""
    return [NegotiatorAgent() for _ in range(env.num_agents)]
