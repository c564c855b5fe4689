"""A plain-Python reference of the CUBE step rules in ``DYNAMICS.md``.

Written for a reader checking it line by line against the spec, not for speed:
no numpy, no jax, occupancy kept as dicts of cells. The section and rule numbers
in the comments are those of ``DYNAMICS.md`` ("One step").

The tests compare the JAX environment against this module state by state.

>>> w = World(K=8, agents=[(2, 1)], blocks=[[2, 2, 1, True]], max_steps=100)
>>> w, rewards, terminated, truncated, info = step(w, [RIGHT])
>>> w.agents, w.blocks, info["moved"]
([(2, 2)], [[2, 3, 1, True]], [0])
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

STAY, UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3, 4

# Push phases run in this fixed order; each sees the world the previous one left.
PUSH_ORDER = (UP, DOWN, LEFT, RIGHT)

OFFSETS = {
    UP: (-1, 0),
    DOWN: (1, 0),
    LEFT: (0, -1),
    RIGHT: (0, 1),
}
OPPOSITE = {UP: DOWN, DOWN: UP, LEFT: RIGHT, RIGHT: LEFT}

Cell = tuple[int, int]


@dataclass
class World:
    """One CUBE world.

    agents: ``(row, col)`` per agent; the index is the agent id.
    blocks: ``[row, col, weight, alive]`` per block (top-left cell); the index is
        the block id. A delivered block keeps its last position but covers no cell;
        the spec gives a delivered block no position, so the tests never compare it.
    """

    K: int
    agents: list[Cell]
    blocks: list[list]
    t: int = 0
    max_steps: int = 100
    step_cost: float = 0.01
    deliver_reward: float = 1.0

    def __post_init__(self) -> None:
        self.agents = [tuple(a) for a in self.agents]
        self.blocks = [[int(r), int(c), int(w), bool(alive)] for r, c, w, alive in self.blocks]


# --------------------------------------------------------------------------- cells


def shifted(cell: Cell, d: int) -> Cell:
    dr, dc = OFFSETS[d]
    return (cell[0] + dr, cell[1] + dc)


def inside(world: World, cell: Cell) -> bool:
    return 0 <= cell[0] < world.K and 0 <= cell[1] < world.K


def block_cells(world: World, j: int) -> list[Cell]:
    """Cells covered by block ``j``; none once it is delivered."""
    r, c, w, alive = world.blocks[j]
    if not alive:
        return []
    return [(r + i, c + k) for i in range(w) for k in range(w)]


def block_occupancy(world: World) -> dict[Cell, int]:
    """cell -> id of the alive block covering it."""
    occupancy = {}
    for j in range(len(world.blocks)):
        for cell in block_cells(world, j):
            occupancy[cell] = j
    return occupancy


def agent_occupancy(world: World) -> dict[Cell, int]:
    """cell -> id of the agent standing on it."""
    return {cell: i for i, cell in enumerate(world.agents)}


def normalise_action(a) -> int:
    """An action outside 0..4 is STAY (section "Actions")."""
    a = int(a)
    return a if a in OFFSETS else STAY


# --------------------------------------------------------------------------- step


def step(world: World, actions) -> tuple[World, list[float], bool, bool, dict]:
    """One environment step. ``world`` is not modified; a new world is returned.

    Returns ``(new_world, rewards, terminated, truncated, info)`` where ``info`` has
    ``delivered`` (block ids delivered this step, in order of delivery), ``moved``
    (block ids moved this step, sorted), ``force`` ({direction: [F_j per block]}),
    ``engaged`` (sorted agent ids in a chain in some push phase) and ``D``.
    """
    world = copy.deepcopy(world)
    N = len(world.agents)
    if len(actions) != N:
        raise ValueError(f"expected {N} actions, got {len(actions)}")
    actions = [normalise_action(a) for a in actions]

    moved_blocks: set[int] = set()
    engaged: set[int] = set()
    delivered: list[int] = []
    force: dict[int, list[int]] = {}
    D = 0.0

    for d in PUSH_ORDER:
        force[d] = push_phase(world, actions, d, moved_blocks, engaged)
        D += deliver(world, delivered)

    movement_phase(world, actions, engaged)

    # Reward, termination, truncation. Python floats are float64; the JAX side
    # evaluates the same formula in float32, so the tests compare with atol 1e-6.
    reward = -world.step_cost + D / N
    rewards = [reward] * N
    world.t += 1
    terminated = not any(alive for _, _, _, alive in world.blocks)
    truncated = world.t >= world.max_steps and not terminated
    info = {
        "delivered": delivered,
        "moved": sorted(moved_blocks),
        "force": force,
        "engaged": sorted(engaged),
        "D": D,
    }
    return world, rewards, terminated, truncated, info


def push_phase(
    world: World, actions: list[int], d: int, moved_blocks: set[int], engaged: set[int]
) -> list[int]:
    """Push phase for direction ``d``; updates ``world``, ``moved_blocks``, ``engaged``.

    Returns ``F_j`` for every block.
    """
    n_blocks = len(world.blocks)
    blocks_at = block_occupancy(world)
    agents_at = agent_occupancy(world)

    # 1. Pushers: agents whose action is d.
    pushers = {i for i, a in enumerate(actions) if a == d}
    pusher_cells = {world.agents[i] for i in pushers}

    # 2. Agent chains. From each pusher, walk forward through cells holding a pusher;
    # if the first cell that does not hold one is a cell of an alive block j, the
    # pusher is in a chain on j. Every pusher on such a line reaches the same cell,
    # so walking from each pusher separately finds exactly the agents "on that line".
    # A cell outside the grid holds neither a pusher nor a block: the line ends there.
    chain_block: dict[int, int] = {}  # agent id -> block id its chain pushes
    for i in sorted(pushers):
        cell = shifted(world.agents[i], d)
        while cell in pusher_cells:
            cell = shifted(cell, d)
        if cell in blocks_at:
            chain_block[i] = blocks_at[cell]

    F = [0] * n_blocks
    for i, j in chain_block.items():
        F[j] += 1
        # Engaged whether or not the push succeeds.
        engaged.add(i)

    # 3. Block chains: k is in front of j if some cell of k is a cell of j shifted
    # by d. C(j) = j plus every block reachable through "in front of".
    in_front: dict[int, set[int]] = {j: set() for j in range(n_blocks)}
    for j in range(n_blocks):
        for cell in block_cells(world, j):
            k = blocks_at.get(shifted(cell, d))
            if k is not None and k != j:
                in_front[j].add(k)

    def chain_of(j: int) -> set[int]:
        reached = {j}
        todo = [j]
        while todo:
            for k in in_front[todo.pop()]:
                if k not in reached:
                    reached.add(k)
                    todo.append(k)
        return reached

    # 4. Composites: connected components of the pushed blocks under "C sets share
    # a block"; a composite's blocks are the union of its members' C sets.
    pushed = [j for j in range(n_blocks) if F[j] > 0]
    C = {j: chain_of(j) for j in pushed}
    composites: list[set[int]] = []  # each entry: the composite's blocks
    for j in pushed:
        blocks = set(C[j])
        # Merge every existing composite that shares a block with C(j). Composites
        # built so far are pairwise disjoint, so this yields the connected components.
        rest = []
        for other in composites:
            if other & blocks:
                blocks |= other
            else:
                rest.append(other)
        composites = rest + [blocks]

    # 5. Move condition, decided for every composite on the world as it is at the
    # start of this phase (composites are disjoint, and no decision depends on
    # another composite's move: cells ahead of a composite hold no block outside it).
    moving: list[set[int]] = []
    for blocks in composites:
        total_force = sum(F[j] for j in blocks)
        total_weight = sum(world.blocks[j][2] for j in blocks)
        if total_force < total_weight:
            continue
        if blocks & moved_blocks:
            continue
        targets = [shifted(cell, d) for j in blocks for cell in block_cells(world, j)]
        if not all(inside(world, cell) and cell not in agents_at for cell in targets):
            continue
        moving.append(blocks)

    # 6. Move the blocks of moving composites and every agent in a chain on them.
    dr, dc = OFFSETS[d]
    for blocks in moving:
        for j in blocks:
            world.blocks[j][0] += dr
            world.blocks[j][1] += dc
            moved_blocks.add(j)
        for i, j in chain_block.items():
            if j in blocks:
                world.agents[i] = shifted(world.agents[i], d)

    return F


def deliver(world: World, delivered: list[int]) -> float:
    """7. Delivery after a push phase: alive blocks with a cell in column K-1.

    Returns the phase's delivered value (``deliver_reward * w`` summed).
    """
    value = 0.0
    for j in range(len(world.blocks)):
        if any(c == world.K - 1 for _, c in block_cells(world, j)):
            world.blocks[j][3] = False
            delivered.append(j)
            value += world.deliver_reward * world.blocks[j][2]
    return value


def movement_phase(world: World, actions: list[int], engaged: set[int]) -> None:
    """Movement phase: every non-engaged agent whose action is not STAY tries to move."""
    blocks_at = block_occupancy(world)
    agents_at = agent_occupancy(world)

    movers = {i for i, a in enumerate(actions) if a != STAY and i not in engaged}
    target = {i: shifted(world.agents[i], actions[i]) for i in movers}

    # 1. Target outside the grid or on an alive block cell: fail.
    movers = {i for i in movers if inside(world, target[i]) and target[i] not in blocks_at}

    # 2. Same target: the smallest id keeps its move.
    by_target: dict[Cell, list[int]] = {}
    for i in movers:
        by_target.setdefault(target[i], []).append(i)
    movers = {min(ids) for ids in by_target.values()}

    # 3. Swaps: two movers that target each other's cells both fail. Only movers
    # still left after rules 1-2 are considered; whichever reading is taken, a
    # pair with one member already failed ends up failing in rule 4 anyway.
    swapping = set()
    for i in movers:
        j = agents_at.get(target[i])
        if j is not None and j in movers and target[j] == world.agents[i]:
            swapping.add(i)
            swapping.add(j)
    movers -= swapping

    # 4. Blocked: repeat until nothing changes.
    changed = True
    while changed:
        changed = False
        for i in sorted(movers):
            j = agents_at.get(target[i])
            if j is not None and j not in movers:
                movers.discard(i)
                changed = True

    # 5. All remaining movers move at once.
    for i in movers:
        world.agents[i] = target[i]


# --------------------------------------------------------------------------- grid


def grid(world: World) -> list[list[list[float]]]:
    """The five observation channels as nested lists ``[K][K][5]``.

    0: 1.0 at agent cells; 1: block weight at alive block cells; 2: 1.0 on column
    K-1; 3: agent id + 1 at agent cells; 4: block id + 1 at alive block cells.
    """
    K = world.K
    g = [[[0.0] * 5 for _ in range(K)] for _ in range(K)]
    for r in range(K):
        g[r][K - 1][2] = 1.0
    for i, (r, c) in enumerate(world.agents):
        g[r][c][0] = 1.0
        g[r][c][3] = float(i + 1)
    for j in range(len(world.blocks)):
        for r, c in block_cells(world, j):
            g[r][c][1] = float(world.blocks[j][2])
            g[r][c][4] = float(j + 1)
    return g


def check_invariants(world: World) -> None:
    """Raise AssertionError if the world breaks an invariant from "World"."""
    seen: dict[Cell, str] = {}
    for i, cell in enumerate(world.agents):
        assert inside(world, cell), f"agent {i} outside the grid at {cell}"
        assert cell not in seen, f"agent {i} at {cell} overlaps {seen[cell]}"
        seen[cell] = f"agent {i}"
    for j in range(len(world.blocks)):
        for cell in block_cells(world, j):
            assert inside(world, cell), f"block {j} outside the grid at {cell}"
            assert cell not in seen, f"block {j} at {cell} overlaps {seen[cell]}"
            assert cell[1] != world.K - 1, f"alive block {j} touches the goal column"
            seen[cell] = f"block {j}"
