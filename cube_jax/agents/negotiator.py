"""The negotiating planner (kind ``negotiator``): DR. WELL's mechanism without a model.

In a negotiation room (:mod:`cube_jax.runtime.topologies.negotiation`) it proposes and
commits by the guidebook: the task with the best success rate in the world model that the
team can still reach, ties to the heuristic's choice (the alive block closest to the goal,
then the lower id). A block the team can reach needs no more agents than the team has and
has a clear lane to the goal (no alive block in its rows to its right: a block behind
another cannot be pushed home before the other is gone). When it commits, a block whose
quorum can no longer be reached loses to one that can, and a block whose suggested team is
already full loses to one still short of hands. Given a block, it plans like the heuristic: ``move_to_block -> rendezvous ->
push_block`` with the spec ``push_block(block#b)``. Outside a room (another topology) it
plays the heuristic. It never calls a model, so its choices are the same on every run.
"""
from __future__ import annotations

from typing import List, Optional

from cube_jax.agents.base import Agent, Decision, DecisionContext, NegotiationView, Plan, Purpose
from cube_jax.agents.planners import blocks_by_priority, deliver_plan, lane_blockers, rendezvous_timeout
from cube_jax.names import agent_name
from cube_jax.symbolic.actions import make_action


class NegotiatorAgent(Agent):
    """One agent of a negotiating team (build a team with :func:`negotiator_team`)."""

    kind = "negotiator"

    async def decide(self, ctx: DecisionContext) -> Decision:
        world = ctx.views.world
        order = blocks_by_priority(world)
        if ctx.purpose == Purpose.INTERRUPT:
            return Decision(resume=True)
        if ctx.purpose == Purpose.PROPOSAL:
            return self.choose(ctx, order, ctx.negotiation, committing=False)
        if ctx.purpose == Purpose.COMMITMENT:
            return self.choose(ctx, order, ctx.negotiation, committing=True)
        negotiation = ctx.negotiation
        target = negotiation.allocation if negotiation is not None and negotiation.allocation is not None else (
            order[0] if order else None)
        if target is None:
            return Decision(plan=Plan(f"no_task({agent_name(ctx.agent)})", (make_action("idle", 1),)))
        plan = deliver_plan(world, target, rendezvous_timeout(world.grid_size))
        return Decision(plan=Plan(f"push_block(block#{target})", tuple(plan)))

    def choose(self, ctx: DecisionContext, order: List[int], room: Optional[NegotiationView],
               committing: bool) -> Decision:
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


def negotiator_team(env) -> List[NegotiatorAgent]:
    """One :class:`NegotiatorAgent` per agent of ``env``."""
    return [NegotiatorAgent() for _ in range(env.num_agents)]
