"""The vocabulary of the symbolic layer, defined once: faces, directions, statuses, error
kinds, the table of symbolic actions, and the geometry rules of ``docs/symbolic.md``.

The CPU executor (one agent at a time, plain integers), the JAX executor (every agent at
once, traced arrays), the concepts and the shaped reward all read their names, codes and
rules from here. The geometry functions are array-generic: given jax arrays (traced or
not) they compute with ``jax.numpy``, given numpy arrays or Python integers with numpy,
so one definition serves both executors.

>>> FACE_NAMES[LEFT_FACE], FACE_PUSH_ACTION[LEFT_FACE] == RIGHT
('left', True)
>>> Status.IN_PROGRESS.label, STATUS_NAMES[Status.DONE]
('in_progress', 'done')
>>> [ACTION_SPECS[name].code for name in ("idle", "push_block")]
[0, 4]
>>> int(goal_distance(8, 5, 2)), int(goal_distance(8, 5, 2, alive=False))
(1, 0)
>>> face_cell((2, 3), 2, LEFT_FACE, 1).tolist()   # the second cell left of a 2x2 block at (2, 3)
[3, 2]
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.core.types import ACTION_DELTAS, DOWN, LEFT, RIGHT, STAY, UP
from cube_jax.names import FACE_NAMES


_IS_JAX = {}  # type -> whether its values are jax arrays (tracers included)


def _namespace(*values):
    """``jax.numpy`` when any value is a jax array (tracers included), else numpy."""
    for v in values:
        kind = type(v)
        if kind not in _IS_JAX:
            _IS_JAX[kind] = isinstance(v, jax.Array)
        if _IS_JAX[kind]:
            return jnp
    return np


def _action_with_delta(delta) -> int:
    return ACTION_DELTAS.index(tuple(delta))


# --- faces -----------------------------------------------------------------------------------
# A face is a side of a block (FACE_NAMES); its id is the face code of docs/symbolic.md and of
# plan arrays.

UP_FACE, DOWN_FACE, LEFT_FACE, RIGHT_FACE = range(4)
NUM_FACES = len(FACE_NAMES)
FACE_IDS = {name: i for i, name in enumerate(FACE_NAMES)}
# The primitive action that pushes into each face (agents on the left face push RIGHT).
FACE_PUSH_ACTION = (DOWN, UP, RIGHT, LEFT)
# The same by face name, as the CPU side spells faces.
FACE_PUSH_DIRECTION = dict(zip(FACE_NAMES, FACE_PUSH_ACTION))
# (row, col) step from a face cell away from the block: the push step reversed.
FACE_OUTWARD = tuple((-ACTION_DELTAS[a][0], -ACTION_DELTAS[a][1]) for a in FACE_PUSH_ACTION)
# The primitive action that steps away from the block through each face.
FACE_AWAY_ACTION = tuple(_action_with_delta(step) for step in FACE_OUTWARD)
# (row, col) step from face cell j to face cell j + 1: along the face, across the outward step.
FACE_ALONG = tuple((abs(dc), abs(dr)) for dr, dc in FACE_OUTWARD)
# The packing step of a waiting rendezvous: from face cell j toward face cell j - 1.
FACE_PACK_ACTION = tuple(_action_with_delta((-dr, -dc)) for dr, dc in FACE_ALONG)


# The face tables as arrays, indexed by (possibly traced) face ids in the geometry below.
_OUTWARD = np.asarray(FACE_OUTWARD, np.int32)
_ALONG = np.asarray(FACE_ALONG, np.int32)
_PACK = np.asarray(FACE_PACK_ACTION, np.int32)


def face_id(face) -> int:
    """The id of a face given by name (``"left"``...) or id; ValueError otherwise."""
    if isinstance(face, str):
        if face not in FACE_IDS:
            raise ValueError(f"unknown face {face!r}; faces are {FACE_NAMES}")
        return FACE_IDS[face]
    if isinstance(face, int) and not isinstance(face, bool) and 0 <= face < NUM_FACES:
        return face
    raise ValueError(f"face must be one of {FACE_NAMES} or an id 0..{NUM_FACES - 1}, got {face!r}")


# --- directions ------------------------------------------------------------------------------

# The ``direction`` argument of ``move``: its name and the primitive action it emits.
DIRECTIONS = {"up": UP, "down": DOWN, "left": LEFT, "right": RIGHT}
DIRECTION_NAMES = {action: name for name, action in DIRECTIONS.items()}
# Neighbour order that breaks ties between equally short path steps.
STEP_ORDER = (UP, DOWN, LEFT, RIGHT)


# --- statuses, outcomes and error kinds ------------------------------------------------------


class Status(enum.IntEnum):
    """An agent's status after a step (docs/symbolic.md, "Executor state and one step").

    The JAX executor stores the integer; the CPU executor, its history and the symbolic
    observation show the ``label``. ``SUCCEEDED`` only ever appears in the history.
    """

    STARTED = 0
    IN_PROGRESS = 1
    SUCCEEDED = 2
    FAILED = 3
    DONE = 4

    @property
    def label(self) -> str:
        return self.name.lower()


STATUS_NAMES = tuple(s.label for s in Status)


class ErrorKind(enum.IntEnum):
    """What went wrong (docs/symbolic.md, "Errors"); ``NONE`` marks a plan without error."""

    NONE = 0
    PRECONDITION = 1
    EXECUTION = 2
    PLAN_CHECK = 3

    @property
    def label(self) -> str:
        return "" if self is ErrorKind.NONE else self.name.lower()


ERROR_NAMES = tuple(k.label for k in ErrorKind)


class Outcome(enum.IntEnum):
    """How a started, non-synchronising action goes on this step (phase 1, step 4)."""

    EMIT = 0  # emits a primitive
    SUCCEED = 1  # ended well; the next action starts in this same step
    FAIL = 2  # ended badly (execution error)
    NEEDS_PATH = 3  # emits a path step, worked out after phase 2 (JAX executor)


# --- the symbolic actions ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: str  # "int" (with minimum), "face", "direction" or "block"
    minimum: int = 0


ARG_KINDS = ("int", "face", "direction", "block")


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """One symbolic action: its name, code (in plan arrays), arguments in order and summary.

    ``walking``: the agent walks on its own, so other agents do not route around it
    (docs/symbolic.md, "Pathfinding": the others are *parked*). ``synchronising``: it
    waits in phase 2 for a group of agents; it then has ``count`` and ``timeout``
    arguments.
    """

    name: str
    code: int
    args: Tuple[ArgSpec, ...]
    summary: str
    walking: bool = False
    synchronising: bool = False

    def arg_index(self, name: str) -> int:
        """Position of argument ``name`` (its column in a plan row is this plus one)."""
        for i, arg in enumerate(self.args):
            if arg.name == name:
                return i
        raise KeyError(f"{self.name} has no argument {name!r}")

    @property
    def block_arg(self):
        """The ``block`` argument, or None: an action with one needs its block alive to start."""
        return next((a for a in self.args if a.kind == "block"), None)


_STEPS = ArgSpec("steps", "int", 0)
_BLOCK = ArgSpec("block", "block", 0)
_FACE = ArgSpec("face", "face")
_COUNT = ArgSpec("count", "int", 1)
_TIMEOUT = ArgSpec("timeout", "int", 0)
# The single table of symbolic actions (docs/symbolic.md, "Actions"); codes are 0, 1, 2, ...
ACTION_SPECS: Dict[str, ActionSpec] = {
    spec.name: spec
    for spec in (
        ActionSpec("idle", 0, (_STEPS,), "emit STAY for `steps` steps"),
        ActionSpec("move", 1, (ArgSpec("direction", "direction"), _STEPS), "step in a direction `steps` times",
                   walking=True),
        ActionSpec("move_to_block", 2, (_BLOCK, _FACE), "walk until aligned with the block face", walking=True),
        ActionSpec(
            "rendezvous",
            3,
            (_BLOCK, _FACE, _COUNT, _TIMEOUT),
            "wait aligned at the face until `count` agents are in the same rendezvous",
            synchronising=True,
        ),
        ActionSpec("push_block", 4, (_BLOCK, _STEPS), "push into the aligned face for `steps` steps or until delivered"),
        ActionSpec("yield_block", 5, (_BLOCK, _STEPS), "step away from the block for `steps` steps", walking=True),
        ActionSpec("wait_agents", 6, (_COUNT, _TIMEOUT), "wait until `count` agents are waiting", synchronising=True),
    )
}


def _check_action_table(specs: Dict[str, ActionSpec]) -> None:
    codes = sorted(spec.code for spec in specs.values())
    if codes != list(range(len(specs))):
        raise ValueError(f"ACTION_SPECS codes must be 0..{len(specs) - 1}, each once; got {codes}")
    for name, spec in specs.items():
        if name != spec.name:
            raise ValueError(f"ACTION_SPECS entry {name!r} holds the spec of {spec.name!r}")
        kinds = [a.kind for a in spec.args]
        if any(k not in ARG_KINDS for k in kinds) or kinds.count("block") > 1 or kinds.count("face") > 1:
            raise ValueError(f"{name}: argument kinds must be among {ARG_KINDS}, with at most one block and one face")
        if spec.synchronising and not {"count", "timeout"} <= {a.name for a in spec.args}:
            raise ValueError(f"{name}: a synchronising action needs `count` and `timeout` arguments")


_check_action_table(ACTION_SPECS)
ACTION_CODES = {name: spec.code for name, spec in ACTION_SPECS.items()}
ACTION_NAMES_BY_CODE = {spec.code: name for name, spec in ACTION_SPECS.items()}
SPECS_BY_CODE = tuple(ACTION_SPECS[ACTION_NAMES_BY_CODE[code]] for code in range(len(ACTION_SPECS)))
NUM_ACTIONS = len(ACTION_SPECS)
# Argument slots of a plan row (JAX executor): [code, arg0, ..., arg{MAX_ARGS-1}].
MAX_ARGS = max(len(spec.args) for spec in ACTION_SPECS.values())
SYNC_ACTIONS = tuple(name for name, spec in ACTION_SPECS.items() if spec.synchronising)
WALKING_ACTIONS = tuple(name for name, spec in ACTION_SPECS.items() if spec.walking)


def encode_argument(arg: ArgSpec, value) -> int:
    """The integer of a checked argument in a plan row: face id, direction action id, or the int."""
    if arg.kind == "face":
        return FACE_IDS[value]
    if arg.kind == "direction":
        return DIRECTIONS[value]
    return int(value)


def decode_argument(arg: ArgSpec, number: int):
    """The inverse of :func:`encode_argument`."""
    if arg.kind == "face":
        return FACE_NAMES[number]
    if arg.kind == "direction":
        return DIRECTION_NAMES[number]
    return int(number)


# --- geometry ----------------------------------------------------------------------------------
# Cells are (row, col) pairs in the last axis; a block is its top-left cell and weight w.


def goal_distance(grid_size: int, col, weight, alive=True):
    """Right pushes a block at column ``col`` still needs to touch the goal column K - 1:
    ``K - 1 - (col + w - 1)``, at least 0, and 0 for a delivered block (``alive`` False)."""
    xp = _namespace(col, weight, alive)
    gap = xp.maximum(grid_size - col - weight, 0)
    return xp.where(alive, gap, 0)


def face_origin(top_left, weight, face):
    """int[..., 2]: face cell 0 of ``face`` (docs/symbolic.md table): the end nearest the top-left."""
    xp = _namespace(top_left, weight, face)
    outward = xp.asarray(_OUTWARD)[face]
    # one cell before the block on the outward axis, or one past its far side
    reach = xp.where(outward > 0, xp.asarray(weight)[..., None], 1)
    return xp.asarray(top_left) + outward * reach


def face_cell(top_left, weight, face, j):
    """int[..., 2]: face cell ``j`` of ``face`` (it may lie outside the grid)."""
    xp = _namespace(top_left, weight, face, j)
    return face_origin(top_left, weight, face) + xp.asarray(j)[..., None] * xp.asarray(_ALONG)[face]


def face_offset(cell, top_left, weight, face):
    """(bool[...] on the face's line, int[...] j): ``cell`` = face cell j when on the line and
    0 <= j < w. The line is the row (up/down) or column (left/right) just outside the face."""
    xp = _namespace(cell, top_left, weight, face)
    offset = xp.asarray(cell) - face_origin(top_left, weight, face)
    along = xp.asarray(_ALONG)[face]
    return (offset * (1 - along)).sum(-1) == 0, (offset * along).sum(-1)


def away_direction(agent_pos, top_left, weight):
    """int32[...]: ``yield_block``'s step (docs/symbolic.md, "Away direction"): away from the
    block's square along the axis on which the agent is farther from it (columns on ties)."""
    xp = _namespace(agent_pos, top_left, weight)
    agent_pos, top_left = xp.asarray(agent_pos), xp.asarray(top_left)
    far_side = top_left + xp.asarray(weight)[..., None] - 1
    gap = xp.maximum(xp.maximum(top_left - agent_pos, agent_pos - far_side), 0)  # rows, cols outside the square
    horizontal = xp.where(agent_pos[..., 1] < top_left[..., 1], LEFT, RIGHT)
    vertical = xp.where(agent_pos[..., 0] < top_left[..., 0], UP, DOWN)
    return xp.where(gap[..., 1] >= gap[..., 0], horizontal, vertical).astype(xp.int32)


# The occupancy grids are built two ways, one per namespace, to the same table (tested):
# under XLA a comparison grid fuses and compiles much faster than a scatter, while numpy
# would materialise its K x K x N comparisons and a scatter costs nothing.


def agent_grid(agent_pos, grid_size: int):
    """int32[K, K]: the id of the agent on each cell, -1 where there is none."""
    xp = _namespace(agent_pos)
    n = agent_pos.shape[0]
    if xp is np:
        grid = np.full((grid_size, grid_size), -1, np.int32)
        grid[agent_pos[:, 0], agent_pos[:, 1]] = np.arange(n, dtype=np.int32)
        return grid
    idx = jnp.arange(grid_size)
    rows = idx[:, None] == agent_pos[:, 0]  # bool[K, N]
    cols = idx[:, None] == agent_pos[:, 1]  # bool[K, N]
    here = rows[:, None, :] & cols[None, :, :]  # bool[K, K, N]; agents never share a cell
    return (jnp.where(here, jnp.arange(1, n + 1, dtype=jnp.int32), 0).sum(-1) - 1).astype(jnp.int32)


def block_grid(block_pos, block_weight, block_alive, grid_size: int):
    """int32[K, K]: the id of the alive block covering each cell (rows r..r+w-1, columns
    c..c+w-1 of a block at (r, c) of weight w), -1 where there is none."""
    xp = _namespace(block_pos, block_weight, block_alive)
    b = block_pos.shape[0]
    if xp is np:
        grid = np.full((grid_size, grid_size), -1, np.int32)
        for j in np.flatnonzero(block_alive):
            (r, c), w = block_pos[j], block_weight[j]
            grid[r : r + w, c : c + w] = j
        return grid
    idx = jnp.arange(grid_size)
    r, c, w = block_pos[:, 0], block_pos[:, 1], block_weight
    rows = (idx[:, None] >= r) & (idx[:, None] < r + w) & block_alive  # bool[K, B]
    cols = (idx[:, None] >= c) & (idx[:, None] < c + w)  # bool[K, B]
    cover = rows[:, None, :] & cols[None, :, :]  # bool[K, K, B]; blocks never overlap
    return (jnp.where(cover, jnp.arange(1, b + 1, dtype=jnp.int32), 0).sum(-1) - 1).astype(jnp.int32)


def _inside(cells, grid_size: int):
    """bool[...]: ``cells`` (int[..., 2]) lie inside the K x K grid."""
    return ((cells >= 0) & (cells < grid_size)).all(-1)


def grid_lookup(grid, cells):
    """int[...]: ``grid`` (int[K, K]) at ``cells`` (int[..., 2]), -1 for cells outside the grid."""
    xp = _namespace(grid, cells)
    k = grid.shape[0]
    safe = xp.minimum(xp.maximum(cells, 0), k - 1)
    return xp.where(_inside(cells, k), grid[safe[..., 0], safe[..., 1]], -1)


def chain_ends(agent_pos, agents_at, blocks_at, step, num_blocks: int):
    """int32[..., N]: the block each agent's chain reaches walking ``step`` (int[..., 2]), B if none.

    From each agent, walk through the consecutive cells holding agents; the first cell
    without one must be a cell of an alive block (DYNAMICS.md push rule 2, with every
    agent pushing). Each agent points at the agent right ahead of it (or at itself at the
    end of its line); ``ceil(log2 N)`` rounds of pointer jumping reach every line's last
    agent, so the cost grows as N log N, not N^2. ``agents_at`` / ``blocks_at`` are the
    grids of :func:`agent_grid` / :func:`block_grid`; leading axes of ``step`` (several
    directions at once) lead the result.
    """
    xp = _namespace(agent_pos, agents_at, blocks_at, step)
    n = agent_pos.shape[0]
    step = xp.asarray(step)[..., None, :]  # [..., 1, 2] against the agent axis
    ahead = grid_lookup(agents_at, agent_pos + step)  # int[..., N]: the agent right ahead, -1 if none
    last = xp.where(ahead >= 0, ahead, xp.arange(n, dtype=ahead.dtype))
    for _ in range(max(0, n - 1).bit_length()):
        last = xp.take_along_axis(last, last, axis=-1)
    block = grid_lookup(blocks_at, agent_pos[last] + step)
    return xp.where(block >= 0, block, num_blocks).astype(xp.int32)


def face_push_step(face):
    """int32[..., 2]: the (row, col) push step of ``face`` (into the block)."""
    xp = _namespace(face)
    return -xp.asarray(_OUTWARD)[face]


def queue_tails(agent, top_left, weight, face, agents_at, blocks_at, lines=None):
    """(int[..., lines, 2] tails, bool[..., lines] targets) of the queues behind ``face``
    as ``agent`` (int[...]: one agent, or several at once) sees them.

    Line ``j`` starts at face cell j and runs away from the block; its tail is its first
    cell holding no agent other than ``agent``. It is a target of ``move_to_block`` when
    j < w and the tail is inside the grid and not under an alive block (docs/symbolic.md,
    "Queue tails"). ``lines`` (default K, so that shapes do not depend on a traced w) is
    how many face cells are looked at; lines past w are never targets.
    """
    xp = _namespace(agent, top_left, weight, face, agents_at, blocks_at)
    k = agents_at.shape[0]
    span = xp.arange(k if lines is None else lines)
    starts = face_cell(top_left, weight, face, span)  # int[lines, 2]
    outward = xp.asarray(_OUTWARD)[face]
    line = starts[:, None, :] + xp.arange(k)[None, :, None] * outward  # int[lines, K, 2] outward from each
    occupant = grid_lookup(agents_at, line)
    other = (occupant >= 0) & (occupant != xp.asarray(agent)[..., None, None])
    queued = xp.cumprod(other, axis=-1).sum(-1)  # other agents in an unbroken row behind each face cell
    tails = starts + queued[..., None] * outward
    return tails, (span < weight) & _inside(tails, k) & (grid_lookup(blocks_at, tails) < 0)


def packing_step(agent_pos, top_left, weight, face, agents_at, blocks_at):
    """int32[...]: what a waiting ``rendezvous`` agent emits (docs/symbolic.md, "Packing step").

    On face cell j > 0 whose face cell j - 1 holds no agent and no alive block: the step
    toward it (UP along a left/right face, LEFT along an up/down face); otherwise STAY.
    """
    xp = _namespace(agent_pos, top_left, weight, face, agents_at, blocks_at)
    agent_pos = xp.asarray(agent_pos)
    on_line, j = face_offset(agent_pos, top_left, weight, face)
    on_face = on_line & (j > 0) & (j < weight)
    previous = agent_pos - xp.asarray(_ALONG)[face]
    free = (grid_lookup(agents_at, previous) < 0) & (grid_lookup(blocks_at, previous) < 0)
    return xp.where(on_face & free, xp.asarray(_PACK)[face], STAY).astype(xp.int32)


def obstacle_agents(agent, parked):
    """bool[N]: the agents ``agent`` routes around (docs/symbolic.md, "Pathfinding"): every
    other agent with a smaller id, and every parked one (bool[N] ``parked``)."""
    xp = _namespace(agent, parked)
    ids = xp.arange(parked.shape[0])
    return (ids != agent) & ((ids < agent) | parked)


__all__ = [
    "ACTION_CODES",
    "ACTION_NAMES_BY_CODE",
    "ACTION_SPECS",
    "ARG_KINDS",
    "ActionSpec",
    "ArgSpec",
    "DIRECTIONS",
    "DIRECTION_NAMES",
    "DOWN_FACE",
    "ERROR_NAMES",
    "ErrorKind",
    "FACE_ALONG",
    "FACE_AWAY_ACTION",
    "FACE_IDS",
    "FACE_NAMES",
    "FACE_OUTWARD",
    "FACE_PACK_ACTION",
    "FACE_PUSH_ACTION",
    "FACE_PUSH_DIRECTION",
    "LEFT_FACE",
    "MAX_ARGS",
    "NUM_ACTIONS",
    "NUM_FACES",
    "Outcome",
    "RIGHT_FACE",
    "SPECS_BY_CODE",
    "STATUS_NAMES",
    "STEP_ORDER",
    "SYNC_ACTIONS",
    "Status",
    "UP_FACE",
    "WALKING_ACTIONS",
    "agent_grid",
    "away_direction",
    "block_grid",
    "chain_ends",
    "decode_argument",
    "encode_argument",
    "face_cell",
    "face_id",
    "face_offset",
    "face_origin",
    "face_push_step",
    "goal_distance",
    "grid_lookup",
    "obstacle_agents",
    "packing_step",
    "queue_tails",
]
