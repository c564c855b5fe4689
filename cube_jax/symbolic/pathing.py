"""CPU geometry of the symbolic layer: occupancy grids, faces, alignment, distance fields.

Everything here follows ``docs/symbolic.md`` ("Faces and alignment", "Pathfinding").
Distance fields are breadth-first searches from a target set over free cells; the step
an agent takes is the first of UP, DOWN, LEFT, RIGHT that lowers the distance by one.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from typing import List, Optional, Sequence, Tuple

import numpy as np

from cube_jax.symbolic.actions import FACE_PUSH_DIRECTION, FACES
from cube_jax.core.types import ACTION_DELTAS, DOWN, LEFT, RIGHT, STAY, UP

Cell = Tuple[int, int]
NO_PATH = np.iinfo(np.int32).max
# Neighbour order that breaks ties between equally short steps.
STEP_ORDER = (UP, DOWN, LEFT, RIGHT)


@dataclasses.dataclass
class World:
    """One state as numpy arrays plus the occupancy grids every rule looks up."""

    grid_size: int
    agent_pos: np.ndarray  # int32[N, 2]
    block_pos: np.ndarray  # int32[B, 2] top-left
    block_weight: np.ndarray  # int32[B]
    block_alive: np.ndarray  # bool[B]
    agent_at: np.ndarray  # int32[K, K] agent id on the cell, -1 if none
    block_at: np.ndarray  # int32[K, K] alive block id covering the cell, -1 if none

    @classmethod
    def from_state(cls, state) -> "World":
        k = int(state.grid_size)
        agent_pos = np.asarray(state.agent_pos, np.int32)
        block_pos = np.asarray(state.block_pos, np.int32)
        weight = np.asarray(state.block_weight, np.int32)
        alive = np.asarray(state.block_alive, bool)
        if agent_pos.ndim != 2:
            raise ValueError(f"expected one environment's state (agent_pos [N, 2]), got shape {agent_pos.shape}")
        agent_at = np.full((k, k), -1, np.int32)
        agent_at[agent_pos[:, 0], agent_pos[:, 1]] = np.arange(len(agent_pos), dtype=np.int32)
        block_at = np.full((k, k), -1, np.int32)
        for j in np.flatnonzero(alive):
            r, c = block_pos[j]
            w = weight[j]
            block_at[r : r + w, c : c + w] = j
        return cls(k, agent_pos, block_pos, weight, alive, agent_at, block_at)

    def inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.grid_size and 0 <= cell[1] < self.grid_size

    def agent_cell(self, i: int) -> Cell:
        return int(self.agent_pos[i, 0]), int(self.agent_pos[i, 1])


def face_cells(world: World, block: int, face: str) -> List[Cell]:
    """The face's cells inside the grid (docs/symbolic.md table), in order along the face."""
    r, c = (int(x) for x in world.block_pos[block])
    w = int(world.block_weight[block])
    if face == "up":
        cells = [(r - 1, c + j) for j in range(w)]
    elif face == "down":
        cells = [(r + w, c + j) for j in range(w)]
    elif face == "left":
        cells = [(r + j, c - 1) for j in range(w)]
    elif face == "right":
        cells = [(r + j, c + w) for j in range(w)]
    else:
        raise ValueError(f"face must be one of {FACES}, got {face!r}")
    return [cell for cell in cells if world.inside(cell)]


def _shift(cell: Cell, direction: int, times: int = 1) -> Cell:
    dr, dc = ACTION_DELTAS[direction]
    return cell[0] + dr * times, cell[1] + dc * times


def chain_end(world: World, cell: Cell, direction: int) -> Cell:
    """First cell from ``cell`` (exclusive) in ``direction`` that holds no agent."""
    nxt = _shift(cell, direction)
    while world.inside(nxt) and world.agent_at[nxt] >= 0:
        nxt = _shift(nxt, direction)
    return nxt


def is_aligned(world: World, agent: int, block: int, face: str) -> bool:
    """Agent stands in an unbroken line of agents that ends on a cell of alive ``block``
    when walked in the face's push direction (the agent-chain rule with everyone pushing)."""
    if not world.block_alive[block]:
        return False
    end = chain_end(world, world.agent_cell(agent), FACE_PUSH_DIRECTION[face])
    return world.inside(end) and world.block_at[end] == block


def aligned_face(world: World, agent: int, block: int) -> Optional[str]:
    """The face of ``block`` the agent is aligned with, or None (at most one exists)."""
    for face in FACES:
        if is_aligned(world, agent, block, face):
            return face
    return None


def queue_targets(world: World, agent: int, block: int, face: str) -> List[Cell]:
    """Tails of the queues behind each face cell, as seen by ``agent`` (targets of move_to_block)."""
    back = {UP: DOWN, DOWN: UP, LEFT: RIGHT, RIGHT: LEFT}[FACE_PUSH_DIRECTION[face]]
    targets = []
    for cell in face_cells(world, block, face):
        while world.inside(cell) and world.agent_at[cell] >= 0 and world.agent_at[cell] != agent:
            cell = _shift(cell, back)
        if world.inside(cell) and world.block_at[cell] < 0:
            targets.append(cell)
    return targets


def free_cells(world: World, obstacle_agents: Optional[Sequence[int]] = None) -> np.ndarray:
    """bool[K, K]: inside and not under an alive block, and not holding any agent listed in
    ``obstacle_agents``."""
    free = world.block_at < 0
    if obstacle_agents is not None and len(obstacle_agents):
        blocked = np.zeros_like(free)
        pos = world.agent_pos[np.asarray(obstacle_agents, np.int64)]
        blocked[pos[:, 0], pos[:, 1]] = True
        free = free & ~blocked
    return free


@functools.lru_cache(maxsize=None)
def _neighbours(k: int) -> Tuple[Tuple[int, ...], ...]:
    """Flat indices of each cell's neighbours inside a k x k grid, in STEP_ORDER."""
    out = []
    for r in range(k):
        for c in range(k):
            out.append(tuple(nr * k + nc for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
                             if 0 <= nr < k and 0 <= nc < k))
    return tuple(out)


def _bfs(free: np.ndarray, targets: Sequence[Cell], stop_at: Optional[Cell] = None) -> np.ndarray:
    """int32[K, K] breadth-first distance to the nearest target over ``free`` (NO_PATH elsewhere).

    With ``stop_at`` the search ends as soon as that cell gets its distance; every cell
    nearer than it then has its final distance, which is all a step choice needs.
    """
    k = free.shape[0]
    # Plain lists: element access on them is several times faster than on numpy arrays.
    is_free = free.reshape(-1).tolist()
    dist = [NO_PATH] * (k * k)
    goal = -1 if stop_at is None else stop_at[0] * k + stop_at[1]
    neighbours = _neighbours(k)
    queue = collections.deque()
    for r, c in targets:
        x = r * k + c
        if is_free[x] and dist[x] == NO_PATH:
            dist[x] = 0
            queue.append(x)
    if goal >= 0 and dist[goal] == 0:
        queue.clear()
    while queue:
        x = queue.popleft()
        d = dist[x] + 1
        for y in neighbours[x]:
            if is_free[y] and dist[y] == NO_PATH:
                dist[y] = d
                if y == goal:
                    queue.clear()
                    break
                queue.append(y)
    return np.asarray(dist, np.int64).reshape(k, k).astype(np.int32)


def distance_field(free: np.ndarray, targets: Sequence[Cell]) -> np.ndarray:
    """int32[K, K] breadth-first distance from every free cell to the target set."""
    return _bfs(free, targets)


def descend(dist: np.ndarray, cell: Cell) -> int:
    """Primitive action one step down the field from ``cell`` (STAY on a target)."""
    d = dist[cell]
    if d == 0:
        return STAY
    k = dist.shape[0]
    for action in STEP_ORDER:
        nr, nc = _shift(cell, action)
        if 0 <= nr < k and 0 <= nc < k and dist[nr, nc] == d - 1:
            return action
    raise AssertionError(f"no descending neighbour from {cell} at distance {d}")


def path_step(world: World, agent: int, targets: Sequence[Cell], obstacle_agents: Sequence[int]) -> Optional[int]:
    """Next primitive toward ``targets``: around the ``obstacle_agents`` when a path exists,
    else as if no agent were there; None when no path exists even then."""
    start = world.agent_cell(agent)
    for free in (free_cells(world, [j for j in obstacle_agents if j != agent]), free_cells(world)):
        dist = _bfs(free, targets, stop_at=start)
        if dist[start] != NO_PATH:
            return descend(dist, start)
    return None
