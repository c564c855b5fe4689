"""Planners that drive the symbolic executor: the cube paper's heuristic and a team planner.

Both have the same interface: ``planner = Cls(env)``, ``planner.reset()`` at a new
episode, ``planner.act(state) -> np.int32[N]`` every step (they set plans on their own
:class:`PlanExecutor` and return its joint primitive action), usable in a loop with
``env.step``.

* :class:`HeuristicPlanner` (cube paper, section 3): target the undelivered block closest
  to the goal, send every agent to it with ``move_to_block -> rendezvous -> push_block``
  and repeat until it is delivered, then move on to the next closest.
* :class:`TeamPlanner`: splits the team into sub-teams sized to each block's weight that
  work on several blocks at once. A block is *clear* when no other alive block lies in
  its lane to the goal (its rows, to its right); a clear block's team gathers on its left
  face, meets there and pushes; a team assigned to a block that is not yet clear gathers
  and waits. Agents left over once every block has its team step out of the lanes of
  alive blocks (yield) so they never stop a push.

>>> import jax, cube_jax
>>> env = cube_jax.make("easy")
>>> result = run_planner_episode(env, HeuristicPlanner(env), jax.random.PRNGKey(0))
>>> result["success"], result["blocks_delivered"]
(True, 3)
"""
from __future__ import annotations

from typing import Dict, List, Optional

import jax
import numpy as np

from cube_jax.symbolic.actions import SymbolicAction, make_action
from cube_jax.symbolic.executor import PlanExecutor
from cube_jax.symbolic.observation import distance_to_goal
from cube_jax.symbolic.pathing import World, path_step
from cube_jax.core.types import ACTION_NAMES


def goal_distances(world: World) -> np.ndarray:
    """int64[B]: right pushes each alive block still needs (a large value for delivered ones)."""
    k = world.grid_size
    dist = k - 1 - (world.block_pos[:, 1] + world.block_weight - 1)
    return np.where(world.block_alive, dist, np.iinfo(np.int32).max)


def blocks_by_priority(world: World) -> List[int]:
    """Alive block ids, closest to the goal first (ties: lower id)."""
    dist = goal_distances(world)
    return [int(j) for j in np.lexsort((np.arange(len(dist)), dist)) if world.block_alive[j]]


def deliver_plan(world: World, block: int, timeout: int) -> List[SymbolicAction]:
    """Line up on the left face, meet the others there, push right until delivered."""
    w = int(world.block_weight[block])
    pushes = distance_to_goal(world.grid_size, int(world.block_pos[block, 1]), w) + 1
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
    (None otherwise): how agents with nothing to do yield to pushes."""
    if not lanes[world.agent_cell(agent)]:
        return None
    outside = [tuple(cell) for cell in np.argwhere(~lanes & (world.block_at < 0))]
    step = path_step(world, agent, outside, obstacle_agents=range(len(world.agent_pos)))
    return None if step is None else [make_action("move", ACTION_NAMES[step].lower(), 1)]


class _ExecutorPlanner:
    """A planner that drives a :class:`PlanExecutor` and replans as plans end."""

    name = ""

    def __init__(self, env, keep_history: bool = False):
        self.env = env
        self.keep_history = keep_history
        # A rendezvous that waits longer than a walk across the grid and back is given up
        # and started again (the replan puts the agent straight back into it).
        self.timeout = 4 * env.grid_size
        self.reset()

    def reset(self) -> None:
        self.executor = PlanExecutor(self.env, keep_history=self.keep_history)


class HeuristicPlanner(_ExecutorPlanner):
    """The cube paper's greedy baseline: everyone on the block closest to the goal."""

    name = "heuristic"

    def reset(self) -> None:
        super().reset()
        self.target: Optional[int] = None

    def act(self, state) -> np.ndarray:
        world = World.from_state(state)
        order = blocks_by_priority(world)
        if not order:
            return np.zeros(self.env.num_agents, np.int32)
        target = order[0]
        ahead = lane_mask(world, [target], behind=0)
        for i in range(self.env.num_agents):
            if target != self.target or self.executor.is_idle(i):
                # an agent left without room at the face must not stand in front of the block
                plan = self.executor.is_idle(i) and lane_exit_plan(world, i, ahead)
                self.executor.set_plan(i, plan or deliver_plan(world, target, self.timeout), state)
        self.target = target
        return self.executor.act(state)


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


class TeamPlanner(_ExecutorPlanner):
    """Sub-teams sized to each block's weight, working on several clear blocks at once."""

    name = "team"

    def reset(self) -> None:
        super().reset()
        self.assigned: Dict[int, int] = {}  # agent -> block
        self.plan_kind: Dict[int, str] = {}  # agent -> "deliver" | "gather" | "yield"

    # -- assignment --------------------------------------------------------------------------
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
        free = [i for i in range(self.env.num_agents) if i not in self.assigned]

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

    def act(self, state) -> np.ndarray:
        world = World.from_state(state)
        order = blocks_by_priority(world)
        if not order:
            return np.zeros(self.env.num_agents, np.int32)
        blockers = lane_blockers(world)
        self._assign(world, order, {j: not blockers[j] for j in order})
        for i in range(self.env.num_agents):
            block = self.assigned.get(i)
            if block is None:
                kind = "yield"
                if self.plan_kind.get(i) == kind and not self.executor.is_idle(i):
                    continue
                plan = lane_exit_plan(world, i, lane_mask(world, np.flatnonzero(world.block_alive), behind=1))
                if plan is None:
                    if not self.executor.is_idle(i):
                        self.executor.clear(i)
                    self.plan_kind[i] = "idle"
                    continue
            else:
                kind = "deliver" if not blockers[block] else "gather"
                same = self.plan_kind.get(i) == (kind, block)
                if same and not self.executor.is_idle(i):
                    continue
                if same and kind == "gather" and self.executor.error(i) is None:
                    continue  # gathered: wait at the face until the lane is clear
                if kind == "deliver":
                    plan = deliver_plan(world, block, self.timeout)
                else:
                    plan = [make_action("move_to_block", block, "left")]
                kind = (kind, block)
            self.executor.set_plan(i, plan, state)
            self.plan_kind[i] = kind
        return self.executor.act(state)


def run_planner_episode(env, planner, key: jax.Array, max_steps: Optional[int] = None) -> dict:
    """Plays one episode with ``planner`` from ``env.reset(key)``.

    Returns ``{"steps", "blocks_total", "blocks_delivered", "success"}``.
    """
    state, ts = env.reset(key)
    planner.reset()
    limit = env.max_steps if max_steps is None else max_steps
    steps = 0
    while steps < limit:
        actions = planner.act(state)
        state, ts = env.step(state, actions)
        steps += 1
        if bool(ts.terminated) or bool(ts.truncated):
            break
    alive = np.asarray(state.block_alive)
    return {
        "steps": steps,
        "blocks_total": int(alive.size),
        "blocks_delivered": int((~alive).sum()),
        "success": bool(not alive.any()),
    }
