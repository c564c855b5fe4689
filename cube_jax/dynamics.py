"""The step rules of DYNAMICS.md as pure array functions.

One step is four push phases (UP, DOWN, LEFT, RIGHT, in that order) and then a
movement phase. Everything is computed on entity arrays (``N`` agents, ``B``
blocks) rather than on ``K x K`` occupancy grids, so a step costs O(N^2 + B^2)
independent of the grid size:

* agent chains are resolved by pointer jumping: every pusher points at the pusher
  on the cell ahead of it, or at the block there; ``ceil(log2 N)`` rounds of
  ``ptr = ptr[ptr]`` take every pusher to the end of its line;
* block chains ``C(j)`` are the reflexive-transitive closure of the "in front of"
  relation, computed by repeated squaring on ``uint32`` bit rows (``B <= 32``) or
  on a boolean matrix (larger ``B``);
* composites are the connected components of pushed blocks whose ``C`` sets
  overlap, found by the same doubling idea;
* the movement phase resolves blocked movers by pointer jumping along "the agent
  standing on my target", which follows lines of movers to their leader and
  leaves rotations moving.

No Python branch depends on a traced value, so ``step`` jits and vmaps.
"""
from __future__ import annotations

from typing import Dict, Tuple

import jax
import jax.numpy as jnp
from jax import lax

from cube_jax.types import ACTION_DELTAS, DOWN, PUSH_ORDER, RIGHT, UP, EnvConfig, State

# Bit rows are used for block relations while every block fits in one uint32 word.
BITSET_MAX_BLOCKS = 32


def ceil_log2(x: int) -> int:
    """Smallest r with 2**r >= x (0 for x <= 1): pointer-jumping rounds for paths of x hops."""
    return max(0, int(x) - 1).bit_length()


def square_contains(top_left: jax.Array, weight: jax.Array, cells: jax.Array) -> jax.Array:
    """bool[M, B]: whether cell ``m`` (int32[M, 2]) lies in the w x w square of block ``b``."""
    r, c = cells[:, 0:1], cells[:, 1:2]
    br, bc, w = top_left[None, :, 0], top_left[None, :, 1], weight[None, :]
    return (r >= br) & (r < br + w) & (c >= bc) & (c < bc + w)


def block_in_front(block_pos: jax.Array, weight: jax.Array, alive: jax.Array, d: int) -> jax.Array:
    """bool[B, B]: ``[j, k]`` is True when alive block k is in front of alive block j in direction d.

    Blocks never overlap, so "some cell of k is a cell of j shifted by d" means k's near
    face lies on the line just past j's far face and the two squares overlap across d.
    """
    along = 0 if d in (UP, DOWN) else 1
    across = 1 - along
    a, x, w = block_pos[:, along], block_pos[:, across], weight
    if d in (DOWN, RIGHT):
        touching = a[None, :] == a[:, None] + w[:, None]
    else:
        touching = a[None, :] + w[None, :] == a[:, None]
    overlap = (x[None, :] < x[:, None] + w[:, None]) & (x[:, None] < x[None, :] + w[None, :])
    return touching & overlap & alive[:, None] & alive[None, :]


# --- block relations: bit rows (B <= 32) ---------------------------------------------------


def _or_reduce(x: jax.Array, axis: int) -> jax.Array:
    return lax.reduce(x, jnp.uint32(0), lax.bitwise_or, (axis,))


def _bits_to_matrix(rows: jax.Array) -> jax.Array:
    """uint32[B] bit rows -> bool[B, B] membership matrix."""
    b = rows.shape[0]
    return ((rows[:, None] >> jnp.arange(b, dtype=jnp.uint32)[None, :]) & 1).astype(bool)


def _matrix_to_bits(m: jax.Array) -> jax.Array:
    b = m.shape[-1]
    bit = jnp.left_shift(jnp.uint32(1), jnp.arange(b, dtype=jnp.uint32))
    return jnp.where(m, bit[None, :], jnp.uint32(0)).sum(axis=-1, dtype=jnp.uint32)


def _composites_bits(front: jax.Array, pushed: jax.Array) -> jax.Array:
    """bool[B, B]: row j is the composite containing pushed block j (empty row if not pushed)."""
    b = front.shape[0]
    rows = _matrix_to_bits(front | jnp.eye(b, dtype=bool))  # C(j) reached in one hop
    for _ in range(ceil_log2(b - 1) if b > 1 else 0):  # paths of up to B-1 hops
        rows = _or_reduce(jnp.where(_bits_to_matrix(rows), rows[None, :], jnp.uint32(0)), 1)
    comp = jnp.where(pushed, rows, jnp.uint32(0))
    for _ in range(ceil_log2(b)):  # components of the overlap graph, diameter < B
        touches = ((comp[:, None] & comp[None, :]) != 0) & pushed[None, :]
        comp = _or_reduce(jnp.where(touches, comp[None, :], jnp.uint32(0)), 1)
    return _bits_to_matrix(comp)


# --- block relations: boolean matrices (any B) ---------------------------------------------


def _bool_product(a: jax.Array, b: jax.Array) -> jax.Array:
    return (a.astype(jnp.float32) @ b.astype(jnp.float32)) > 0.5


def _composites_dense(front: jax.Array, pushed: jax.Array) -> jax.Array:
    b = front.shape[0]
    reach = front | jnp.eye(b, dtype=bool)
    for _ in range(ceil_log2(b - 1) if b > 1 else 0):
        reach = _bool_product(reach, reach)
    comp = reach & pushed[:, None]
    for _ in range(ceil_log2(b)):
        touches = _bool_product(comp, comp.T) & pushed[None, :]
        comp = _bool_product(touches, comp)
    return comp


def composites(front: jax.Array, pushed: jax.Array) -> jax.Array:
    """bool[B, B]: ``[j, x]`` is True when block x belongs to the composite of pushed block j.

    ``C(j)`` is j plus every block reachable through "in front of"; two pushed blocks
    whose C sets share a block are in one composite, whose blocks are the union of its
    members' C sets.
    """
    if front.shape[0] <= BITSET_MAX_BLOCKS:
        return _composites_bits(front, pushed)
    return _composites_dense(front, pushed)


# --- phases -------------------------------------------------------------------------------


def agent_chains(agent_pos, pusher, block_pos, weight, alive, d) -> jax.Array:
    """int32[N]: the block each agent pushes through its chain in direction d, or B if none.

    A pusher's chain runs forward through consecutive cells holding pushers; it is a chain
    on block j when the first cell past the pushers is a cell of alive block j.
    """
    n, b = agent_pos.shape[0], block_pos.shape[0]
    ahead = agent_pos + jnp.asarray(ACTION_DELTAS[d], jnp.int32)
    pusher_ahead = jnp.all(ahead[:, None, :] == agent_pos[None, :, :], axis=-1) & pusher[None, :]
    block_ahead = square_contains(block_pos, weight, ahead) & alive[None, :]
    ptr = jnp.where(
        pusher_ahead.any(1),
        jnp.argmax(pusher_ahead, 1),
        jnp.where(block_ahead.any(1), n + jnp.argmax(block_ahead, 1), n + b),
    )
    ptr = jnp.where(pusher, ptr, n + b).astype(jnp.int32)
    # Entries n..n+b are the blocks and n+b is "no chain"; they point at themselves.
    table = jnp.concatenate([ptr, jnp.arange(n, n + b + 1, dtype=jnp.int32)])
    for _ in range(ceil_log2(n)):
        table = table[table]
    return table[:n] - n


def push_phase(cfg: EnvConfig, d: int, actions, agent_pos, block_pos, weight, alive, engaged, moved):
    """One push phase in direction d. Returns the updated arrays and this phase's force per block."""
    k = cfg.grid_size
    b = block_pos.shape[0]
    delta = jnp.asarray(ACTION_DELTAS[d], jnp.int32)

    chain_block = agent_chains(agent_pos, actions == d, block_pos, weight, alive, d)
    in_chain = chain_block < b
    on_block = chain_block[:, None] == jnp.arange(b)[None, :]  # bool[N, B]
    force = on_block.sum(0, dtype=jnp.int32)  # F_j
    pushed = force > 0

    member = composites(block_in_front(block_pos, weight, alive, d), pushed)  # bool[B, B]
    target = block_pos + delta
    outside = (target < 0).any(1) | (target + weight[:, None] > k).any(1)
    agent_ahead = square_contains(target, weight, agent_pos).any(0)
    cannot_move = moved | outside | agent_ahead  # bool[B]

    total_force = jnp.where(member, force[None, :], 0).sum(1)
    total_weight = jnp.where(member, weight[None, :], 0).sum(1)
    blocked = (member & cannot_move[None, :]).any(1)
    composite_moves = pushed & (total_force >= total_weight) & ~blocked  # per pushed block j
    block_moves = (member & composite_moves[:, None]).any(0)  # bool[B]
    agent_moves = (on_block & block_moves[None, :]).any(1)  # bool[N]

    block_pos = block_pos + jnp.where(block_moves[:, None], delta, 0)
    agent_pos = agent_pos + jnp.where(agent_moves[:, None], delta, 0)
    return agent_pos, block_pos, engaged | in_chain, moved | block_moves, force


def delivered_blocks(cfg: EnvConfig, block_pos, weight, alive) -> jax.Array:
    """bool[B]: alive blocks with a cell in the goal column K-1."""
    return alive & (block_pos[:, 1] + weight - 1 >= cfg.grid_size - 1)


def movement_phase(cfg: EnvConfig, actions, agent_pos, block_pos, weight, alive, engaged):
    """Moves every agent that is not engaged and not STAY, by rules 1-5 of DYNAMICS.md."""
    n, k = agent_pos.shape[0], cfg.grid_size
    deltas = jnp.asarray(ACTION_DELTAS, jnp.int32)
    mover = ~engaged & (actions != 0)
    target = agent_pos + deltas[actions]

    # 1. walls and alive blocks
    outside = ((target < 0) | (target >= k)).any(1)
    into_block = (square_contains(block_pos, weight, target) & alive[None, :]).any(1)
    mover = mover & ~outside & ~into_block
    # 2. same target: the smallest id keeps its move
    ids = jnp.arange(n)
    same = jnp.all(target[:, None, :] == target[None, :, :], -1) & mover[None, :] & (ids[None, :] < ids[:, None])
    mover = mover & ~same.any(1)
    # 3. swaps
    on_my_target = jnp.all(target[:, None, :] == agent_pos[None, :, :], -1)  # [i, j]: j stands on i's target
    swap = (on_my_target & on_my_target.T & mover[None, :]).any(1)
    mover = mover & ~swap
    # 4. blocked, to a fixed point: follow "who stands on my target" to the end of the line.
    # Targets of movers are distinct now, so every path is a simple line or a rotation.
    free, stuck = n, n + 1
    occupied = on_my_target.any(1)
    occupant = jnp.argmax(on_my_target, 1)
    ptr = jnp.where(occupied, jnp.where(mover[occupant], occupant, stuck), free)
    ptr = jnp.where(mover, ptr, stuck).astype(jnp.int32)
    table = jnp.concatenate([ptr, jnp.array([free, stuck], jnp.int32)])
    for _ in range(ceil_log2(n)):
        table = table[table]
    # 5. everyone left moves at once (rotations never reach a terminal and move)
    moves = mover & (table[:n] != stuck)
    return jnp.where(moves[:, None], target, agent_pos), moves


def step_state(cfg: EnvConfig, state: State, actions: jax.Array) -> Tuple[State, jax.Array, Dict[str, jax.Array]]:
    """Applies one step. Returns the new state, the delivered value D and the step events."""
    actions = jnp.asarray(actions).astype(jnp.int32)
    actions = jnp.where((actions >= 0) & (actions <= 4), actions, 0)  # out of range -> STAY
    agent_pos, block_pos = state.agent_pos, state.block_pos
    weight, alive = state.block_weight, state.block_alive
    engaged = jnp.zeros(agent_pos.shape[0], bool)
    moved = jnp.zeros(block_pos.shape[0], bool)
    start_pos = agent_pos

    forces = []
    for d in PUSH_ORDER:
        agent_pos, block_pos, engaged, moved, force = push_phase(
            cfg, d, actions, agent_pos, block_pos, weight, alive, engaged, moved
        )
        forces.append(force)
        # Only a RIGHT push can bring a block into column K-1 (no alive block touches it
        # otherwise), so delivering after the RIGHT phase is the same as after every phase.
        if d == RIGHT:
            delivered = delivered_blocks(cfg, block_pos, weight, alive)
            alive = alive & ~delivered

    agent_pos, _ = movement_phase(cfg, actions, agent_pos, block_pos, weight, alive, engaged)
    delivered_weight = jnp.where(delivered, weight, 0).sum(dtype=jnp.int32)
    new_state = state.replace(agent_pos=agent_pos, block_pos=block_pos, block_alive=alive, t=state.t + 1)
    events = {
        "block_moved": moved,  # bool[B] moved by a push this step
        "block_delivered": delivered,  # bool[B] delivered this step
        "push_force": jnp.stack(forces),  # int32[4, B] F_j per push phase (UP, DOWN, LEFT, RIGHT)
        "engaged": engaged,  # bool[N] agents that were in a chain this step
        "agent_moved": jnp.any(agent_pos != start_pos, axis=1),  # bool[N]
        "delivered_weight": delivered_weight,  # int32[] sum of weights delivered this step
    }
    return new_state, delivered_weight, events


def reward_and_flags(cfg: EnvConfig, state: State, delivered_weight: jax.Array):
    """Shared reward ``-step_cost + D / N`` and the episode flags for a state after a step."""
    d_value = delivered_weight.astype(jnp.float32) * jnp.float32(cfg.deliver_reward)
    r = jnp.float32(-cfg.step_cost) + d_value / jnp.float32(cfg.num_agents)
    reward = jnp.full((cfg.num_agents,), r, jnp.float32)
    terminated = ~jnp.any(state.block_alive)
    truncated = (state.t >= cfg.max_steps) & ~terminated
    return reward, terminated, truncated
