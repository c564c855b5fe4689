"""CPU geometry of the symbolic layer: occupancy grids, alignment, queues, distance fields.

Everything here follows ``docs/symbolic.md`` ("Faces and alignment", "Pathfinding"); the
rules themselves (occupancy, agent chains, queue tails) are those of
:mod:`cube_jax.symbolic.vocabulary`, evaluated with numpy. Distance fields are
breadth-first searches from a target set over free cells; the step an agent takes is the
first of UP, DOWN, LEFT, RIGHT that lowers the distance by one.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from typing import List, Optional, Sequence, Tuple

import numpy as np

from cube_jax.core.types import ACTION_DELTAS, STAY
from cube_jax.symbolic.vocabulary import (
    FACE_IDS,
    FACE_NAMES,
    NUM_FACES,
    STEP_ORDER,
    agent_grid,
    block_grid,
    chain_ends,
    face_push_step,
    queue_tails,
)

Cell = Tuple[int, int]
NO_PATH = np.iinfo(np.int32).max


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
    # (block, face id) -> every agent's queue targets there, filled on demand
    _queues: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_state(cls, state) -> "World":
        k = int(state.grid_size)
        agent_pos = np.asarray(state.agent_pos, np.int32)
        block_pos = np.asarray(state.block_pos, np.int32)
        weight = np.asarray(state.block_weight, np.int32)
        alive = np.asarray(state.block_alive, bool)
        if agent_pos.ndim != 2:
            raise ValueError(f"expected one environment's state (agent_pos [N, 2]), got shape {agent_pos.shape}")
        return cls(k, agent_pos, block_pos, weight, alive, agent_grid(agent_pos, k), block_grid(block_pos, weight, alive, k))

    @functools.cached_property
    def alignment(self) -> np.ndarray:
        """int32[4, N]: the block each agent is aligned with per face id (B if none)."""
        return chain_ends(self.agent_pos, self.agent_at, self.block_at, face_push_step(np.arange(NUM_FACES)),
                          len(self.block_alive))

    def inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.grid_size and 0 <= cell[1] < self.grid_size

    def agent_cell(self, i: int) -> Cell:
        return int(self.agent_pos[i, 0]), int(self.agent_pos[i, 1])


def is_aligned(world: World, agent: int, block: int, face: str) -> bool:
    """Agent stands in an unbroken line of agents that ends on a cell of alive ``block``
    when walked in the face's push direction (the agent-chain rule with everyone pushing)."""
    return bool(world.alignment[FACE_IDS[face], agent] == block)


def aligned_face(world: World, agent: int, block: int) -> Optional[str]:
    """The face of ``block`` the agent is aligned with, or None (at most one exists)."""
    for face in FACE_NAMES:
        if is_aligned(world, agent, block, face):
            return face
    return None


def queue_targets(world: World, agent: int, block: int, face: str) -> List[Cell]:
    """Tails of the queues behind each face cell, as seen by ``agent`` (targets of move_to_block)."""
    key = (block, FACE_IDS[face])
    if key not in world._queues:
        # every agent's at once: agents heading for one face share a single evaluation
        weight = int(world.block_weight[block])
        tails, targets = queue_tails(np.arange(len(world.agent_pos)), world.block_pos[block], weight, key[1],
                                     world.agent_at, world.block_at, lines=weight)
        world._queues[key] = (tails.tolist(), targets.tolist())
    tails, targets = world._queues[key]
    return [tuple(cell) for cell, target in zip(tails[agent], targets[agent]) if target]


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
        nr, nc = cell[0] + ACTION_DELTAS[action][0], cell[1] + ACTION_DELTAS[action][1]
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
