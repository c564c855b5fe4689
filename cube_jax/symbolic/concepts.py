"""Symbolic concepts of the cube paper (Table 2) as pure functions of a ``State``.

Every function here takes one (unbatched) :class:`cube_jax.State` and integer ids that
may be traced, returns jax arrays, and has no Python branch on a traced value, so it
works under ``jax.jit`` and ``jax.vmap`` (vmap over states for a batch).

Faces are named by the side of the block they are on; the integer ids are exported and
are the face codes of docs/symbolic.md::

    "up" = UP_FACE = 0       agents stand in the row above the block and push DOWN
    "down" = DOWN_FACE = 1   agents stand below it and push UP
    "left" = LEFT_FACE = 2   agents stand in the column left of it and push RIGHT
    "right" = RIGHT_FACE = 3 agents stand right of it and push LEFT

**Alignment** counts agent chains behind a face exactly as the step rules
(DYNAMICS.md, push phase rule 2) would if every agent pushed into that face: an agent is
aligned with block ``j`` on face ``f`` when the cells from it towards the block, in the
push direction of ``f``, each hold an agent up to a cell of ``j``. So an agent directly on
a face cell is aligned, and so is every agent in an unbroken line of agents behind it;
``count_aligned_agents`` is then the force the face would receive. Delivered blocks have
no aligned agents.

Concept summary (``B`` = number of blocks, ``K`` = grid side, ``N`` = agents):

* ``get_distance(p, q)``: Manhattan distance between two cells; ``distance_to_block``
  measures from a cell to the nearest cell of a block's square, ``distance_to_face`` to
  the nearest cell of the line just outside one of its faces.
* ``is_aligned_with_block``, ``count_aligned_agents``, ``aligned_agents``,
  ``face_alignment`` (int32[N]), ``face_aligned_counts`` (int32[B]); for all faces and
  blocks at once ``alignment`` (int32[4, N]) and ``aligned_counts`` (int32[4, B]).
* ``face_standing_cells``: bool[K, K] face cells an agent can stand on (inside the
  grid, not covered by an alive block); ``all_aligned_positions``: bool[K, K] cells where
  an agent can stand aligned with the face: the standing cells and the lines of cells
  behind them, outward up to the wall or the first alive block cell.
* ``block_progress``: pushes to the right still needed to deliver the block,
  ``K - col - w`` (0 once delivered; ``vocabulary.goal_distance``). ``delivered``: the
  block is no longer alive.
* ``required_force``: the force the step rules demand to move the block through the
  face: the summed weight of the block and every alive block it would push ahead of it
  (its block chain ``C(j)``, DYNAMICS.md push phase rule 3).
* ``quorum_status``: aligned agents >= required force; ``quorum_deficit``: how many more
  aligned agents are needed (0 when the quorum is met). Both are False / 0 for a
  delivered block, which needs nothing.
* ``blocked``: the face cannot move the block right now, either because no cell outside
  the face can hold an agent (every one is a wall or an alive block cell), or because a
  cell the block would enter is outside the grid (a wall), a cell of another alive block
  or holds an agent.

>>> import jax, cube_jax
>>> env = cube_jax.make(scenario=cube_jax.Scenario.from_ascii('''
... .....:
... .10a.:
... .....:
... .....:
... .....:
... .....:
... '''))
>>> state, _ = env.reset(jax.random.PRNGKey(0))
>>> int(count_aligned_agents(state, 0, FACE_IDS["left"]))
2
>>> int(quorum_deficit(state, 0, LEFT_FACE)), bool(blocked(state, 0, UP_FACE))
(0, False)
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from cube_jax.core.types import ACTION_DELTAS, State
from cube_jax.symbolic import vocabulary
from cube_jax.symbolic.vocabulary import (  # noqa: F401  (the face names are part of the concepts' interface)
    DOWN_FACE,
    FACE_ALONG,
    FACE_IDS,
    FACE_NAMES,
    FACE_OUTWARD,
    FACE_PUSH_ACTION,
    LEFT_FACE,
    NUM_FACES,
    RIGHT_FACE,
    UP_FACE,
    face_id,
)


def push_action(face) -> jax.Array:
    """int32[]: the primitive action that pushes into ``face`` (traced ids allowed)."""
    return jnp.asarray(FACE_PUSH_ACTION, jnp.int32)[face]


# --- distances ---------------------------------------------------------------------------


def get_distance(p: jax.Array, q: jax.Array) -> jax.Array:
    """int32[]: Manhattan distance between cells ``p`` and ``q`` (int32[2] each)."""
    return jnp.abs(jnp.asarray(p) - jnp.asarray(q)).sum().astype(jnp.int32)


def _box_distance(pos: jax.Array, low: jax.Array, high: jax.Array) -> jax.Array:
    """int32[]: Manhattan distance from cell ``pos`` to the nearest cell of the box [low, high]."""
    below = jnp.maximum(low - pos, 0)  # how far pos is before the box, per axis
    beyond = jnp.maximum(pos - high, 0)  # how far past it
    return (below + beyond).sum().astype(jnp.int32)


def distance_to_block(state: State, pos: jax.Array, block) -> jax.Array:
    """int32[]: Manhattan distance from cell ``pos`` to the nearest cell of ``block``'s square."""
    top_left = state.block_pos[block]
    return _box_distance(pos, top_left, top_left + state.block_weight[block] - 1)


def distance_to_face(state: State, pos: jax.Array, block, face) -> jax.Array:
    """int32[]: Manhattan distance from cell ``pos`` to the nearest cell of ``face``'s line.

    The face line is the row (up/down) or column (left/right) just outside the block,
    across its w cells; cells outside the grid count too (walls are not looked at).
    """
    top_left = state.block_pos[block]
    w = state.block_weight[block]
    low = vocabulary.face_origin(top_left, w, face)  # face cell 0
    high = low + (w - 1) * jnp.asarray(FACE_ALONG, jnp.int32)[face]  # face cell w - 1
    return _box_distance(pos, low, high)


# --- alignment ---------------------------------------------------------------------------


def agent_grid(state: State) -> jax.Array:
    """int32[K, K]: the id of the agent on each cell, -1 where there is none."""
    return vocabulary.agent_grid(state.agent_pos, state.grid_size)


def block_grid(state: State) -> jax.Array:
    """int32[K, K]: the id of the alive block covering each cell, -1 where there is none."""
    return vocabulary.block_grid(state.block_pos, state.block_weight, state.block_alive, state.grid_size)


def chain_targets(state: State, direction) -> jax.Array:
    """int32[N]: the block each agent's chain reaches when every agent pushes in ``direction``.

    From each agent, walk ``direction`` (an action id 1..4, may be traced) through the
    consecutive cells holding agents; the first cell without one must be a cell of an
    alive block (DYNAMICS.md push rule 2). B where it is not (empty cell, wall). See
    ``vocabulary.chain_ends``.
    """
    step = jnp.asarray(ACTION_DELTAS, jnp.int32)[direction]
    return vocabulary.chain_ends(state.agent_pos, agent_grid(state), block_grid(state), step, state.block_pos.shape[0])


def face_alignment(state: State, face) -> jax.Array:
    """int32[N]: the block each agent is aligned with on ``face`` (B if none).

    This is the chain search of the step rules with every agent pushing into ``face``;
    an agent ends in at most one chain per direction, so in at most one block per face.
    """
    return chain_targets(state, push_action(face))


def alignment(state: State) -> jax.Array:
    """int32[4, N]: ``face_alignment`` for every face id."""
    return jax.vmap(lambda f: face_alignment(state, f))(jnp.arange(NUM_FACES))


def aligned_agents(state: State, block, face) -> jax.Array:
    """bool[N]: agents aligned with ``block`` on ``face``."""
    return face_alignment(state, face) == block


def is_aligned_with_block(state: State, agent, block, face) -> jax.Array:
    """bool[]: whether ``agent`` is aligned with ``block`` on ``face``."""
    return face_alignment(state, face)[agent] == block


def face_aligned_counts(state: State, face) -> jax.Array:
    """int32[B]: ``[j]`` = number of agents aligned with block j on ``face``."""
    b = state.block_pos.shape[0]
    return (face_alignment(state, face)[:, None] == jnp.arange(b)[None, :]).sum(0, dtype=jnp.int32)


def aligned_counts(state: State) -> jax.Array:
    """int32[4, B]: ``[f, j]`` = number of agents aligned with block j on face f."""
    return jax.vmap(lambda f: face_aligned_counts(state, f))(jnp.arange(NUM_FACES))


def count_aligned_agents(state: State, block, face) -> jax.Array:
    """int32[]: number of agents aligned with ``block`` on ``face`` (the face's force if all push)."""
    return aligned_agents(state, block, face).sum(dtype=jnp.int32)


# --- cells around a face -----------------------------------------------------------------


def block_cover(state: State) -> jax.Array:
    """bool[K, K]: cells covered by an alive block."""
    return block_grid(state) >= 0


def agent_cover(state: State) -> jax.Array:
    """bool[K, K]: cells holding an agent."""
    return agent_grid(state) >= 0


def face_cell_mask(state: State, block, face) -> jax.Array:
    """bool[K, K]: the face cells of ``face`` (docs/symbolic.md) that lie inside the grid."""
    k = state.grid_size
    idx = jnp.arange(k)
    cells = jnp.stack(jnp.meshgrid(idx, idx, indexing="ij"), -1)  # int32[K, K, 2]
    w = state.block_weight[block]
    on_line, j = vocabulary.face_offset(cells, state.block_pos[block], w, face)
    return on_line & (j >= 0) & (j < w)


def face_standing_cells(state: State, block, face) -> jax.Array:
    """bool[K, K]: the face cells of ``face`` of ``block`` an agent can stand on.

    These are inside the grid and not covered by an alive block. Empty for a delivered
    block.
    """
    return face_cell_mask(state, block, face) & ~block_cover(state) & state.block_alive[block]


def _shift_toward(mask: jax.Array, step) -> jax.Array:
    """bool[K, K]: ``out[p] = mask[p - step]`` (False where p - step is outside the grid)."""
    k = mask.shape[0]
    padded = jnp.pad(mask, 1)
    dr, dc = step
    return jax.lax.dynamic_slice(padded, (1 - dr, 1 - dc), (k, k))


def all_aligned_positions(state: State, block, face) -> jax.Array:
    """bool[K, K]: every cell where an agent can stand aligned with ``block`` on ``face``.

    The face cells and the straight lines outward from them, stopping at the wall or at
    the first cell of an alive block (an agent line cannot pass through a block).
    """
    k = state.grid_size
    free = ~block_cover(state)
    step = jnp.asarray(FACE_OUTWARD, jnp.int32)[face]

    def grow(_, reach):
        return reach | (_shift_toward(reach, step) & free)

    # A line outward is at most K - 1 cells long.
    return jax.lax.fori_loop(0, k - 1, grow, face_standing_cells(state, block, face))


# --- block facts ---------------------------------------------------------------------------


def delivered(state: State, block) -> jax.Array:
    """bool[]: whether ``block`` has been delivered."""
    return ~state.block_alive[block]


def block_progress(state: State, block) -> jax.Array:
    """int32[]: cells the block still has to move right to reach the goal column (0 once delivered)."""
    gap = vocabulary.goal_distance(state.grid_size, state.block_pos[block, 1], state.block_weight[block],
                                   state.block_alive[block])
    return gap.astype(jnp.int32)


def block_in_front(state: State, direction) -> jax.Array:
    """bool[B, B]: ``[j, x]`` when alive block x is in front of alive block j in ``direction``.

    "In front of" (DYNAMICS.md push rule 3): some cell of x is a cell of j shifted by one
    step; as squares these are interval overlaps on both axes. ``direction`` may be traced.
    """
    step = jnp.asarray(ACTION_DELTAS, jnp.int32)[direction]
    return blocks_in_front(state.block_pos[:, 0], state.block_pos[:, 1], state.block_weight, state.block_alive, step)


def blocks_in_front(r, c, w, alive, step) -> jax.Array:
    """:func:`block_in_front` on the blocks' arrays: rows ``r``, columns ``c``, weights ``w``
    and ``alive`` flags ``[B, *T]`` (``T``: trailing batch axes, e.g. environments last),
    ``step`` the direction's (row, column) delta; ``bool[B, B, *T]``."""
    b = r.shape[0]

    def overlap(start_j, start_x):  # [j, x]: [start_j, start_j + w_j) meets [start_x, start_x + w_x)
        return (start_j[:, None] < start_x[None, :] + w[None, :]) & (start_x[None, :] < start_j[:, None] + w[:, None])

    other = ~jnp.eye(b, dtype=bool).reshape((b, b) + (1,) * (r.ndim - 1))
    return overlap(r + step[0], r) & overlap(c + step[1], c) & other & alive[:, None] & alive[None, :]


def chain_weights(state: State, face) -> jax.Array:
    """int32[B]: ``[j]`` = summed weight of block j's chain ``C(j)`` when pushed into ``face``.

    ``C(j)`` is j plus every alive block reachable through "in front of" in the push
    direction; the step rules move j only with a force of at least this much (when no
    other pushed block joins the composite).
    """
    return chain_closure_weights(block_in_front(state, push_action(face)), state.block_weight)


def chain_closure_weights(front: jax.Array, weight: jax.Array) -> jax.Array:
    """int32[B, *T]: ``[j]`` = summed ``weight`` of j and every block reachable from it through
    ``front`` bool[B, B, *T] (``[j, x]``: x is in front of j), ``T`` trailing batch axes.

    The reachability is a transitive closure by repeated squaring, written as unrolled
    folds of elementwise terms (batched integer matrix products, or reductions over the
    short block axis, have no fast kernel on the CPU, and the closure is computed twice in
    every step of a shaped training rollout): up to 32 blocks each row is a bit set in one
    uint32 word, above that a bool[B, B] relation.
    """
    b = front.shape[0]
    rounds = max(0, b - 2).bit_length()  # squarings that cover paths of up to B - 1 hops
    if b > 32:
        reach = front | jnp.eye(b, dtype=bool).reshape((b, b) + (1,) * (front.ndim - 2))
        for _ in range(rounds):
            reach = functools.reduce(jnp.logical_or, [reach[:, j, None] & reach[None, j, :] for j in range(b)], reach)
        return jnp.where(reach, weight[None, :], 0).sum(1).astype(jnp.int32)
    one = jnp.uint32(1)
    rows = (one << jnp.arange(b, dtype=jnp.uint32)).reshape((b,) + (1,) * (front.ndim - 2))  # block j's set holds j ...
    rows = functools.reduce(jnp.bitwise_or, [jnp.where(front[:, x], one << x, jnp.uint32(0)) for x in range(b)], rows)
    for _ in range(rounds):  # ... and everything the blocks in its set reach
        rows = functools.reduce(jnp.bitwise_or, [jnp.where((rows >> x) & one, rows[x], jnp.uint32(0)) for x in range(b)],
                                rows)
    zero = jnp.zeros((), weight.dtype)
    return functools.reduce(jnp.add, [jnp.where((rows >> x) & one, weight[x], zero) for x in range(b)]).astype(
        jnp.int32)


def required_force(state: State, block, face) -> jax.Array:
    """int32[]: force needed to move ``block`` through ``face`` (its chain's weight; 0 if delivered)."""
    return jnp.where(state.block_alive[block], chain_weights(state, face)[block], 0).astype(jnp.int32)


def quorum_deficit(state: State, block, face) -> jax.Array:
    """int32[]: additional aligned agents needed to push ``block`` through ``face`` (>= 0)."""
    return jnp.maximum(required_force(state, block, face) - count_aligned_agents(state, block, face), 0)


def quorum_status(state: State, block, face) -> jax.Array:
    """bool[]: aligned agents on ``face`` meet or exceed the force needed (False once delivered)."""
    return state.block_alive[block] & (quorum_deficit(state, block, face) == 0)


def blocked(state: State, block, face) -> jax.Array:
    """bool[]: ``face`` of ``block`` cannot be used to push it now (see the module docstring).

    Either no cell outside the face can hold an agent, or the block's next cells in the
    push direction are a wall, another alive block's cells or an agent's cell. A
    delivered block counts as blocked on every face.
    """
    k = state.grid_size
    no_standing_room = ~face_standing_cells(state, block, face).any()
    target = state.block_pos[block] - jnp.asarray(FACE_OUTWARD, jnp.int32)[face]
    w = state.block_weight[block]
    off_grid = (target < 0).any() | (target + w > k).any()
    # Cells the block would newly enter = its shifted square minus its own square.
    idx = jnp.arange(k)
    shifted = ((idx >= target[0]) & (idx < target[0] + w))[:, None] & ((idx >= target[1]) & (idx < target[1] + w))[None, :]
    own = _block_square(state, block)
    entering = shifted & ~own
    obstacle = block_cover(state) | agent_cover(state)
    path_obstructed = off_grid | (entering & obstacle).any()
    return ~state.block_alive[block] | no_standing_room | path_obstructed


def _block_square(state: State, block) -> jax.Array:
    """bool[K, K]: the square of ``block`` (whether alive or not)."""
    k = state.grid_size
    idx = jnp.arange(k)
    r, c = state.block_pos[block, 0], state.block_pos[block, 1]
    w = state.block_weight[block]
    return ((idx >= r) & (idx < r + w))[:, None] & ((idx >= c) & (idx < c + w))[None, :]


__all__ = [
    "DOWN_FACE",
    "FACE_IDS",
    "FACE_NAMES",
    "FACE_OUTWARD",
    "FACE_PUSH_ACTION",
    "LEFT_FACE",
    "NUM_FACES",
    "RIGHT_FACE",
    "UP_FACE",
    "agent_cover",
    "agent_grid",
    "aligned_agents",
    "aligned_counts",
    "alignment",
    "all_aligned_positions",
    "block_cover",
    "block_grid",
    "block_in_front",
    "block_progress",
    "blocked",
    "chain_targets",
    "chain_weights",
    "count_aligned_agents",
    "delivered",
    "distance_to_block",
    "face_alignment",
    "face_cell_mask",
    "face_id",
    "face_standing_cells",
    "get_distance",
    "is_aligned_with_block",
    "push_action",
    "quorum_deficit",
    "quorum_status",
    "required_force",
]
