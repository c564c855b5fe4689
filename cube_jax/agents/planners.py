"""The planners as agents: the cube paper's heuristic and a team planner.

Each agent of a planner team is its own :class:`~cube_jax.agents.Agent` (kind
``heuristic`` or ``team``), deciding at its decision points in the episode loop
(:mod:`cube_jax.runtime`); the agents of one team share a *brain* that holds
what they decide together (the heuristic's target, the team planner's assignment). Neither
calls a model, so each may also drop a running plan when the team's picture changes
(:meth:`~cube_jax.agents.Agent.wants_replan`).

* Heuristic (cube paper, section 3): target the undelivered block closest to the goal; an
  agent deciding gets ``move_to_block -> rendezvous -> push_block`` on it; when the target
  changes every agent replans. An agent whose plan ended while it stands in front of the
  target (its rows, at or right of it) first steps out of that lane.
* Team planner: sub-teams sized to each block's weight work on several blocks at once. A
  block is *clear* when no other alive block lies in its lane to the goal (its rows, to its
  right); a clear block's team gathers on its left face, meets there and pushes; a team
  assigned to a block that is not yet clear gathers and waits. Agents left over once every
  block has its team step out of the lanes of alive blocks so they never stop a push.

The batched JAX version of the heuristic is :mod:`cube_jax.symbolic.jax_heuristic`; it
takes the same decisions at the same steps (tested).

>>> import cube_jax
>>> from cube_jax.runtime import run_episode
>>> env = cube_jax.make("easy")
>>> result = run_episode(env, heuristic_team(env), seed=0)
>>> result.success, result.blocks_delivered
(True, 3)
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from cube_jax.agents.base import Agent, Decision, DecisionContext, Plan, Purpose, Reason
from cube_jax.symbolic.actions import SymbolicAction, make_action
from cube_jax.symbolic.pathing import World, path_step
from cube_jax.symbolic.vocabulary import goal_distance
from cube_jax.core.types import ACTION_NAMES


def goal_distances(world: World) -> np.ndarray:
    """int64[B]: right pushes each alive block still needs (a large value for delivered ones)."""
    dist = goal_distance(world.grid_size, world.block_pos[:, 1].astype(np.int64), world.block_weight)
    return np.where(world.block_alive, dist, np.iinfo(np.int32).max)


def blocks_by_priority(world: World) -> List[int]:
    """Alive block ids, closest to the goal first (ties: lower id)."""
    dist = goal_distances(world)
    return [int(j) for j in np.lexsort((np.arange(len(dist)), dist)) if world.block_alive[j]]


def deliver_plan(world: World, block: int, timeout: int) -> List[SymbolicAction]:
    """Line up on the left face, meet the others there, push right until delivered."""
    w = int(world.block_weight[block])
    pushes = int(goal_distance(world.grid_size, int(world.block_pos[block, 1]), w)) + 1
    return [
        make_action("move_to_block", block, "left"),
        make_action("rendezvous", block, "left", w, timeout),
        make_action("push_block", block, pushes),
    ]


def lane_mask(world: World, blocks, behind: int) -> np.ndarray:
    """bool[K, K]: the lanes of ``blocks``: their rows, from ``behind`` columns left of each
    block (0: the block itself, 1: with its left face) to the goal column."""
    lanes = np.zeros((world.grid_size, world.grid_size), bool)
    for j in blocks:
        r, c = world.block_pos[j]
        lanes[r : r + world.block_weight[j], max(c - behind, 0) :] = True
    return lanes


def lane_exit_plan(world: World, agent: int, lanes: np.ndarray) -> Optional[List[SymbolicAction]]:
    """One step toward the nearest free cell outside ``lanes`` when the agent stands in one
    (None otherwise, or when no such cell can be reached): how agents yield to pushes."""
    if not lanes[world.agent_cell(agent)]:
        return None
    outside = [tuple(cell) for cell in np.argwhere(~lanes & (world.block_at < 0))]
    step = path_step(world, agent, outside, obstacle_agents=range(len(world.agent_pos)))
    return None if step is None else [make_action("move", ACTION_NAMES[step].lower(), 1)]


def lane_blockers(world: World) -> Dict[int, List[int]]:
    """For each alive block, the alive blocks in its lane to the goal (its rows, to its right)."""
    alive = [int(j) for j in np.flatnonzero(world.block_alive)]
    blockers = {}
    for j in alive:
        r, c = world.block_pos[j]
        w = world.block_weight[j]
        blockers[j] = [
            x
            for x in alive
            if x != j
            and world.block_pos[x, 1] >= c + w
            and world.block_pos[x, 0] < r + w
            and r < world.block_pos[x, 0] + world.block_weight[x]
        ]
    return blockers


def rendezvous_timeout(grid_size: int) -> int:
    """A rendezvous that waits longer than a walk across the grid and back is given up (and
    started again by the replan that follows)."""
    return 4 * grid_size


# --- the heuristic ---------------------------------------------------------------------------


class HeuristicAgent(Agent):
    """One agent of the cube paper's heuristic team (build a team with :func:`heuristic_team`)."""

    kind = "heuristic"

    def __init__(self):
        self.plan_target: Optional[int] = None

    def reset(self, agent: int, num_agents: int, seed: int) -> None:
        self.agent = agent
        self.plan_target = None

    async def decide(self, ctx: DecisionContext) -> Decision:
        if ctx.purpose == Purpose.INTERRUPT:
            return Decision(resume=True)
        world = ctx.views.world
        order = blocks_by_priority(world)
        if not order:
            return Decision(plan=Plan("idle", (make_action("idle", 1),)))
        target = order[0]
        self.plan_target = target
        if ctx.reason != Reason.REPLAN:
            # an agent left without room at the face must not stand in front of the block
            exit_plan = lane_exit_plan(world, ctx.agent, lane_mask(world, [target], behind=0))
            if exit_plan:
                return Decision(plan=Plan(f"clear_lane(block#{target})", tuple(exit_plan)))
        return Decision(plan=Plan(f"push_block(block#{target})",
                                  tuple(deliver_plan(world, target, rendezvous_timeout(world.grid_size)))))

    def wants_replan(self, ctx: DecisionContext) -> bool:
        order = blocks_by_priority(ctx.views.world)
        return bool(order) and order[0] != self.plan_target


def heuristic_team(env) -> List[HeuristicAgent]:
    """One :class:`HeuristicAgent` per agent of ``env``."""
    return [HeuristicAgent() for _ in range(env.num_agents)]


# --- the team planner ------------------------------------------------------------------------

Kind = object  # "yield", "idle" or ("deliver" | "gather", block)


class TeamBrain:
    """The team planner's shared assignment of agents to blocks, updated once per step."""

    def __init__(self):
        self.members: List[int] = []
        self._last_joined: Optional[int] = None
        self.reset()

    def join(self, agent: int) -> None:
        """Called by each member's reset; the episode loop resets agents in id order, so an id
        not above the last one starts a new episode."""
        if self._last_joined is None or agent <= self._last_joined:
            self.members = []
            self.reset()
        self.members.append(agent)
        self._last_joined = agent

    def reset(self) -> None:
        self.assigned: Dict[int, int] = {}  # agent -> block
        self.plan_kind: Dict[int, Kind] = {}  # agent -> the kind of its current plan
        self.t: Optional[int] = None
        self.world: Optional[World] = None
        self.blockers: Dict[int, List[int]] = {}

    def update(self, world: World, t: int) -> None:
        if self.t == t:
            return
        self.t, self.world = t, world
        order = blocks_by_priority(world)
        self.blockers = lane_blockers(world)
        if order:
            self._assign(world, order, {j: not self.blockers[j] for j in order})

    def _assign(self, world: World, order: List[int], clear: Dict[int, bool]) -> None:
        """Gives every block closest to the goal first a team of its weight.

        A full team on a clear block stays with it until it is delivered. Every other agent
        (waiting at a block that is not clear, or in a team still short of the weight) is
        released every step and taken back by the same block unless a block nearer the goal
        needs it, so no two blocks can wait for each other's agents.
        """
        previous = dict(self.assigned)
        size = {j: sum(1 for b in previous.values() if b == j) for j in order}
        full = {j for j in order if clear[j] and size[j] >= world.block_weight[j]}
        self.assigned = {a: b for a, b in previous.items() if b in full}
        team = {j: [a for a, b in self.assigned.items() if b == j] for j in order}
        free = [i for i in self.members if i not in self.assigned]

        def take(block: int, count: int) -> None:
            r, c = world.block_pos[block]
            w = world.block_weight[block]
            # its earlier members first, then the free agents nearest the middle of its left face
            free.sort(key=lambda i: (previous.get(i) != block,
                                     abs(world.agent_pos[i, 0] - (r + w // 2)) + abs(world.agent_pos[i, 1] - (c - 1)), i))
            for agent in free[:count]:
                self.assigned[agent] = block
                team[block].append(agent)
            del free[:count]

        # full teams first, in priority order; a block that cannot be fully staffed now waits
        for j in order:
            need = int(world.block_weight[j]) - len(team[j])
            if 0 < need <= len(free):
                take(j, need)
        # the rest gather at the first blocks still short of their teams
        for j in order:
            need = int(world.block_weight[j]) - len(team[j])
            if need > 0 and free:
                take(j, min(need, len(free)))

    def desired(self, agent: int) -> Kind:
        block = self.assigned.get(agent)
        if block is None:
            return "yield"
        return ("deliver" if not self.blockers[block] else "gather", block)

    def yield_plan(self, agent: int) -> Optional[List[SymbolicAction]]:
        world = self.world
        return lane_exit_plan(world, agent, lane_mask(world, np.flatnonzero(world.block_alive), behind=1))


class TeamAgent(Agent):
    """One agent of the team planner (build a team with :func:`team_planner_team`)."""

    kind = "team"

    def __init__(self, brain: TeamBrain):
        self.brain = brain

    def reset(self, agent: int, num_agents: int, seed: int) -> None:
        self.agent = agent
        self.brain.join(agent)

    async def decide(self, ctx: DecisionContext) -> Decision:
        if ctx.purpose == Purpose.INTERRUPT:
            return Decision(resume=True)
        brain, i = self.brain, ctx.agent
        world = ctx.views.world
        brain.update(world, ctx.t)
        if not blocks_by_priority(world):
            return Decision(plan=Plan("idle", (make_action("idle", 1),)))
        wanted = brain.desired(i)
        hold = make_action("idle", ctx.max_steps)
        if wanted == "yield":
            step = brain.yield_plan(i)
            if step is None:
                brain.plan_kind[i] = "idle"
                return Decision(plan=Plan("idle", (hold,)))
            brain.plan_kind[i] = "yield"
            return Decision(plan=Plan("clear_lanes", tuple(step)))
        kind, block = wanted
        brain.plan_kind[i] = wanted
        if kind == "deliver":
            actions = deliver_plan(world, block, rendezvous_timeout(world.grid_size))
            return Decision(plan=Plan(f"push_block(block#{block})", tuple(actions)))
        # gathered at a block whose lane is not clear yet: wait at its face
        return Decision(plan=Plan(f"gather(block#{block})", (make_action("move_to_block", block, "left"), hold)))

    def wants_replan(self, ctx: DecisionContext) -> bool:
        brain, i = self.brain, ctx.agent
        brain.update(ctx.views.world, ctx.t)
        wanted, current = brain.desired(i), brain.plan_kind.get(i)
        if wanted == "yield":
            if current == "yield":
                return False  # the step out of the lane is under way
            if current == "idle":
                return brain.yield_plan(i) is not None
            return True
        return current != wanted


def team_planner_team(env) -> List[TeamAgent]:
    """One :class:`TeamAgent` per agent of ``env``, sharing one :class:`TeamBrain`."""
    brain = TeamBrain()
    return [TeamAgent(brain) for _ in range(env.num_agents)]


PLANNER_TEAMS = {"heuristic": heuristic_team, "team": team_planner_team}
