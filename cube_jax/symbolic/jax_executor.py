"""The plan executor in JAX: plans as fixed-size arrays, one pure step under jit and vmap.

It implements ``docs/symbolic.md`` ("Executor state and one step") exactly as the CPU
:class:`cube_jax.symbolic.PlanExecutor` does, so both give the same primitive actions,
plan indices, counters and statuses on every step (tested against each other).

**Plan arrays.** ``plans`` is ``int32[N, L, 1 + MAX_ARGS]``: per agent ``L`` rows of
``[code, arg0, arg1, arg2, arg3]`` with the action codes of docs/symbolic.md and the
arguments in their documented order; faces are face codes (up 0, down 1, left 2,
right 3) and a ``move`` direction is its primitive action id (UP 1 ... RIGHT 4). Unused
argument slots and rows past ``length[i]`` are 0. :func:`compile_plans` builds them from
parsed plans.

**One step.** :func:`executor_step` runs the two phases of the spec on arrays:

1. phase 1 for every agent at once, in a loop of at most ``L + 1`` rounds (each round
   either stops an agent or advances its index);
2. phase 2 decides the agents waiting at ``rendezvous`` / ``wait_agents`` from the
   group sizes after phase 1; the ones that succeed continue with phase 1's rules;
3. only then are the ``move_to_block`` steps that need a path computed: the spec's two
   distance fields (around other agents, then through them) by array relaxation. This
   is the same as evaluating them in phase 1, because a walking agent neither waits nor
   counts in a group, and it keeps the costly fields out of the loops.

>>> import jax, cube_jax
>>> from cube_jax.symbolic import parse_plan
>>> env = cube_jax.make(scenario=cube_jax.Scenario.from_ascii('''
... ......
... 0a....
... ......
... ......
... ......
... ......'''))
>>> state, _ = env.reset(jax.random.PRNGKey(0))
>>> plans, length = compile_plans([parse_plan("move_to_block(0, left); push_block(0, 4)")])
>>> ex = init_executor(plans, length)
>>> ex, actions = jax.jit(executor_step)(ex, state)
>>> actions.tolist(), STATUS_NAMES[int(ex.status[0])], int(ex.index[0])
([4], 'started', 1)
"""
from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

from cube_jax.core.checks import as_int, excerpt
from cube_jax.symbolic import concepts
from cube_jax.symbolic.actions import ACTION_SPECS, DIRECTIONS, FACES, SymbolicAction
from cube_jax.symbolic.distance import distance_field, next_action, unreachable
from cube_jax.core.types import DOWN, LEFT, RIGHT, STAY, UP, State

MAX_ARGS = 4
IDLE, MOVE, MOVE_TO_BLOCK, RENDEZVOUS, PUSH_BLOCK, YIELD_BLOCK, WAIT_AGENTS = (
    ACTION_SPECS[name].code
    for name in ("idle", "move", "move_to_block", "rendezvous", "push_block", "yield_block", "wait_agents")
)
# Statuses after a step (docs/symbolic.md); "succeeded" only ever appears in the history.
STARTED, IN_PROGRESS, SUCCEEDED, FAILED, DONE = 0, 1, 2, 3, 4
STATUS_NAMES = ("started", "in_progress", "succeeded", "failed", "done")
# Error kinds recorded for a failed plan.
NO_ERROR, PRECONDITION_ERROR, EXECUTION_ERROR = 0, 1, 2
ERROR_NAMES = ("", "precondition", "execution")

# How a round of phase 1 left an agent.
_GOING, _EMIT, _PENDING, _NEEDS_PATH, _STOPPED = 0, 1, 2, 3, 4


@struct.dataclass
class ExecutorState:
    """Every agent's plan and where it is in it."""

    plans: jax.Array  # int32[N, L, 1 + MAX_ARGS] rows [code, args...]
    length: jax.Array  # int32[N] actions in each plan
    index: jax.Array  # int32[N] current action (= length when the plan is done)
    emitted: jax.Array  # int32[N] primitives emitted by the current action
    started: jax.Array  # bool[N] the current action's preconditions were checked
    failed: jax.Array  # bool[N] the plan failed; the agent emits STAY until it gets a new plan
    status: jax.Array  # int32[N] STARTED, IN_PROGRESS, FAILED or DONE after the last step
    error_kind: jax.Array  # int32[N] NO_ERROR, PRECONDITION_ERROR or EXECUTION_ERROR
    error_index: jax.Array  # int32[N] index of the action that failed (-1 if none)

    @property
    def idle(self) -> jax.Array:
        """bool[N]: no action left to run (plan finished, empty or failed)."""
        return self.failed | (self.index >= self.length)


# --- building plan arrays --------------------------------------------------------------------


def encode_action(action: SymbolicAction) -> list:
    """``[code, arg0, ..., arg3]`` of one parsed action (see the module docstring)."""
    row = [action.spec.code]
    for arg in action.spec.args:
        value = action.args[arg.name]
        if arg.kind == "face":
            value = FACES.index(value)
        elif arg.kind == "direction":
            value = DIRECTIONS[value]
        row.append(int(value))
    return row + [0] * (1 + MAX_ARGS - len(row))


def compile_plans(plans: Sequence[Sequence[SymbolicAction]], max_len: Optional[int] = None):
    """(int32[N, L, 1 + MAX_ARGS] plan rows, int32[N] lengths) from one parsed plan per agent.

    ``L`` is ``max_len`` or the longest plan (at least 1). Raises ValueError for a plan
    longer than ``max_len``, an entry that is not a SymbolicAction, or an argument that
    does not fit int32 (naming the agent and the action).
    """
    if isinstance(plans, (str, bytes)) or not isinstance(plans, Sequence):
        raise ValueError(f"compile_plans: plans must be a list with one parsed plan per agent, got {excerpt(plans)}")
    for i, plan in enumerate(plans):
        if isinstance(plan, (str, bytes)) or not isinstance(plan, Sequence):
            raise ValueError(f"compile_plans: agent {i}'s plan must be a list of SymbolicAction, got {excerpt(plan)}")
    longest = max([len(p) for p in plans] + [1])
    size = longest if max_len is None else as_int(max_len, "compile_plans: max_len", 1)
    if size < longest:
        raise ValueError(f"compile_plans: a plan has {longest} actions but max_len is {size}")
    rows = np.zeros((len(plans), size, 1 + MAX_ARGS), np.int32)
    info = np.iinfo(np.int32)
    for i, plan in enumerate(plans):
        for k, action in enumerate(plan):
            if not isinstance(action, SymbolicAction):
                raise ValueError(f"compile_plans: agent {i} action {k} is {excerpt(action)}, not a SymbolicAction")
            row = encode_action(action)
            bad = [v for v in row if not info.min <= v <= info.max]
            if bad:
                raise ValueError(
                    f"compile_plans: agent {i} action {k} ({action.name}) has the value {excerpt(bad[0])}, "
                    "which does not fit the int32 plan arrays"
                )
            rows[i, k] = row
    return jnp.asarray(rows), jnp.asarray([len(p) for p in plans], jnp.int32)


def init_executor(plans: jax.Array, length: jax.Array) -> ExecutorState:
    """A fresh executor running ``plans`` (as from :func:`compile_plans`) from their start."""
    n = plans.shape[0]
    zeros = jnp.zeros((n,), jnp.int32)
    return ExecutorState(
        plans=jnp.asarray(plans, jnp.int32),
        length=jnp.asarray(length, jnp.int32),
        index=zeros,
        emitted=zeros,
        started=jnp.zeros((n,), bool),
        failed=jnp.zeros((n,), bool),
        status=jnp.full((n,), DONE, jnp.int32),
        error_kind=zeros,
        error_index=zeros - 1,
    )


def set_plans(ex: ExecutorState, which: jax.Array, plans: jax.Array, length: jax.Array) -> ExecutorState:
    """Gives the agents in ``which`` (bool[N]) new plans (int32[N, L, 5], int32[N]); others keep theirs.

    A new plan starts from its first action with a clean status, as ``PlanExecutor.set_plan``.
    """
    fresh = init_executor(plans, length)
    return jax.tree.map(lambda new, old: jnp.where(_expand(which, new), new, old), fresh, ex)


def _expand(mask: jax.Array, like: jax.Array) -> jax.Array:
    return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))


# --- the world as one step sees it ----------------------------------------------------------


@struct.dataclass
class _World:
    agent_pos: jax.Array  # int32[N, 2]
    block_pos: jax.Array  # int32[B, 2]
    block_weight: jax.Array  # int32[B]
    alive: jax.Array  # bool[B]
    align: jax.Array  # int32[4, N] block each agent is aligned with per face (B if none)
    agent_grid: jax.Array  # int32[K, K] agent id per cell, -1 if none
    block_grid: jax.Array  # int32[K, K] alive block id per cell, -1 if none


def _world(state: State) -> _World:
    return _World(
        agent_pos=state.agent_pos,
        block_pos=state.block_pos,
        block_weight=state.block_weight,
        alive=state.block_alive,
        align=concepts.alignment(state),
        agent_grid=concepts.agent_grid(state),
        block_grid=concepts.block_grid(state),
    )


def _away_direction(world: _World, block: jax.Array) -> jax.Array:
    """int32[N]: yield_block's direction from each agent's ``block`` (docs/symbolic.md)."""
    b = jnp.clip(block, 0, world.block_pos.shape[0] - 1)
    ar, ac = world.agent_pos[:, 0], world.agent_pos[:, 1]
    r, c, w = world.block_pos[b, 0], world.block_pos[b, 1], world.block_weight[b]
    gap_r = jnp.maximum(jnp.maximum(r - ar, ar - (r + w - 1)), 0)
    gap_c = jnp.maximum(jnp.maximum(c - ac, ac - (c + w - 1)), 0)
    horizontal = jnp.where(ac < c, LEFT, RIGHT)
    vertical = jnp.where(ar < r, UP, DOWN)
    return jnp.where(gap_c >= gap_r, horizontal, vertical).astype(jnp.int32)


# --- phase 1 ---------------------------------------------------------------------------------


@struct.dataclass
class _Run:
    """Per-agent progress through one step."""

    index: jax.Array  # int32[N]
    emitted: jax.Array  # int32[N]
    started: jax.Array  # bool[N]
    failed: jax.Array  # bool[N]
    error_kind: jax.Array  # int32[N]
    error_index: jax.Array  # int32[N]
    outcome: jax.Array  # int32[N] _GOING, _EMIT, _PENDING, _NEEDS_PATH or _STOPPED
    primitive: jax.Array  # int32[N] the emitted action (STAY unless _EMIT)


def _current(ex: ExecutorState, run: _Run):
    """(int32[N] code, int32[N, 4] args, bool[N] has an action) of each agent's current action."""
    n, l = ex.plans.shape[0], ex.plans.shape[1]
    row = ex.plans[jnp.arange(n), jnp.clip(run.index, 0, l - 1)]
    return row[:, 0], row[:, 1:], ~run.failed & (run.index < ex.length)


def _fail(run: _Run, where: jax.Array, kind: int) -> _Run:
    return run.replace(
        failed=run.failed | where,
        error_kind=jnp.where(where, kind, run.error_kind),
        error_index=jnp.where(where, run.index, run.error_index),
        outcome=jnp.where(where, _STOPPED, run.outcome),
        primitive=jnp.where(where, STAY, run.primitive),
    )


def _emit(run: _Run, where: jax.Array, primitive: jax.Array) -> _Run:
    return run.replace(outcome=jnp.where(where, _EMIT, run.outcome), primitive=jnp.where(where, primitive, run.primitive))


def _succeed(run: _Run, where: jax.Array) -> _Run:
    return run.replace(
        index=run.index + where,
        emitted=jnp.where(where, 0, run.emitted),
        started=run.started & ~where,
    )


def _block_and_face(args: jax.Array, b: int):
    """int32[N] each: the block argument of block actions and the face argument of
    move_to_block / rendezvous, clipped into range for indexing."""
    return jnp.clip(args[:, 0], 0, b - 1), jnp.clip(args[:, 1], 0, 3)


def _phase_one_round(ex: ExecutorState, world: _World, run: _Run, decide_sync: bool) -> _Run:
    """One round of phase 1 for every agent still _GOING (docs/symbolic.md, phase 1 steps 1-4)."""
    b = world.block_pos.shape[0]
    going = run.outcome == _GOING
    code, args, has_action = _current(ex, run)
    # 1. a failed plan or a finished one: STAY
    finished = going & ~has_action
    run = run.replace(outcome=jnp.where(finished, _STOPPED, run.outcome))
    going = going & has_action

    block, face = _block_and_face(args, b)
    alive = world.alive[block]
    agents = jnp.arange(world.agent_pos.shape[0])
    aligned_face_ok = world.align[face, agents] == block  # bool[N] aligned with (block, face)
    on_block = world.align == block[None, :]  # bool[4, N] aligned with block, per face
    aligned_any = on_block.any(0)

    # 2. preconditions of an action that has not started
    uses_block = (code == MOVE_TO_BLOCK) | (code == RENDEZVOUS) | (code == PUSH_BLOCK) | (code == YIELD_BLOCK)
    violated = (uses_block & ~alive) | ((code == RENDEZVOUS) & ~aligned_face_ok) | ((code == PUSH_BLOCK) & ~aligned_any)
    starting = going & ~run.started
    run = _fail(run, starting & violated, PRECONDITION_ERROR)
    going = going & ~(starting & violated)
    run = run.replace(
        started=run.started | (going & starting),
        emitted=jnp.where(going & starting, 0, run.emitted),
    )

    # 3. synchronising actions wait for phase 2 (or, reached in phase 2, only start)
    sync = going & ((code == RENDEZVOUS) | (code == WAIT_AGENTS))
    if decide_sync:
        run = _emit(run, sync, jnp.full_like(code, STAY))
    else:
        run = run.replace(outcome=jnp.where(sync, _PENDING, run.outcome))
    going = going & ~sync

    # 4. end condition, then emit
    counted = (code == IDLE) | (code == MOVE) | (code == YIELD_BLOCK)
    steps = jnp.where(code == IDLE, args[:, 0], args[:, 1])  # idle(steps); move/yield/push(_, steps)
    counted_done = counted & (run.emitted >= steps)
    counted_primitive = jnp.where(code == MOVE, args[:, 0], jnp.where(code == YIELD_BLOCK, _away_direction(world, block), STAY))

    walk = code == MOVE_TO_BLOCK
    walk_failed = walk & ~alive
    walk_done = walk & alive & aligned_face_ok
    walk_needs_path = walk & alive & ~aligned_face_ok

    push = code == PUSH_BLOCK
    push_done = push & (~alive | (run.emitted >= steps))
    push_lost = push & ~push_done & ~aligned_any
    push_face = jnp.argmax(on_block, 0)  # first aligned face in code order
    push_primitive = jnp.asarray(concepts.FACE_PUSH_ACTION, jnp.int32)[push_face]

    succeed = going & (counted_done | walk_done | push_done)
    run = _succeed(run, succeed)
    run = _fail(run, going & (walk_failed | push_lost), EXECUTION_ERROR)
    run = run.replace(outcome=jnp.where(going & walk_needs_path, _NEEDS_PATH, run.outcome))
    emit_counted = going & counted & ~counted_done
    emit_push = going & push & ~push_done & ~push_lost
    run = _emit(run, emit_counted, counted_primitive)
    run = _emit(run, emit_push, push_primitive)
    return run


def _phase_one(ex: ExecutorState, world: _World, run: _Run, decide_sync: bool) -> _Run:
    """Rounds of phase 1 until every agent has stopped; each round stops or advances each agent."""
    rounds = ex.plans.shape[1] + 1

    def body(_, run):
        return _phase_one_round(ex, world, run, decide_sync)

    return lax.fori_loop(0, rounds, body, run)


# --- phase 2 ---------------------------------------------------------------------------------


def _packing_step(world: _World, block: jax.Array, face: jax.Array) -> jax.Array:
    """int32[N]: what a waiting rendezvous agent emits (docs/symbolic.md, "Packing step").

    On face cell j > 0 with face cell j - 1 free of agents and alive blocks: one step
    toward it (UP along a left/right face, LEFT along an up/down face); else STAY.
    """
    k = world.agent_grid.shape[0]
    ar, ac = world.agent_pos[:, 0], world.agent_pos[:, 1]
    r, c, w = world.block_pos[block, 0], world.block_pos[block, 1], world.block_weight[block]
    upright = face >= 2  # left / right faces run down a column
    face_line = jnp.stack([r - 1, r + w, c - 1, c + w], -1)[jnp.arange(face.shape[0]), face]
    on_face = jnp.where(
        upright,
        (ac == face_line) & (r < ar) & (ar < r + w),
        (ar == face_line) & (c < ac) & (ac < c + w),
    )
    pr = jnp.clip(jnp.where(upright, ar - 1, ar), 0, k - 1)
    pc = jnp.clip(jnp.where(upright, ac, ac - 1), 0, k - 1)
    previous_free = (world.agent_grid[pr, pc] < 0) & (world.block_grid[pr, pc] < 0)
    return jnp.where(on_face & previous_free, jnp.where(upright, UP, LEFT), STAY).astype(jnp.int32)



def _phase_two(ex: ExecutorState, world: _World, run: _Run) -> _Run:
    """Decides the agents waiting at rendezvous / wait_agents (docs/symbolic.md, synchronisation)."""
    b = world.block_pos.shape[0]
    pending = run.outcome == _PENDING
    code, args, _ = _current(ex, run)
    block, face = _block_and_face(args, b)
    agents = jnp.arange(world.agent_pos.shape[0])
    aligned = world.align[face, agents] == block
    rendezvous = pending & (code == RENDEZVOUS)
    waiting = pending & (code == WAIT_AGENTS)

    # group sizes, fixed as they stand after phase 1
    member = rendezvous & aligned
    same_place = (block[:, None] == block[None, :]) & (face[:, None] == face[None, :])
    rendezvous_members = (same_place & member[None, :]).sum(1)
    members = jnp.where(code == RENDEZVOUS, rendezvous_members, waiting.sum())
    count = jnp.where(code == RENDEZVOUS, args[:, 2], args[:, 0])
    timeout = jnp.where(code == RENDEZVOUS, args[:, 3], args[:, 1])

    lost = rendezvous & (~world.alive[block] | ~aligned)
    run = _fail(run, lost, EXECUTION_ERROR)
    deciding = pending & ~lost
    met = deciding & (members >= count)
    timed_out = deciding & ~met & (run.emitted >= timeout)
    run = _fail(run, timed_out, EXECUTION_ERROR)
    waiting_primitive = jnp.where(code == RENDEZVOUS, _packing_step(world, block, face), STAY)
    run = _emit(run, deciding & ~met & ~timed_out, waiting_primitive)
    # the agents whose group is complete move on, with phase 1's rules
    run = _succeed(run, met)
    run = run.replace(outcome=jnp.where(met, _GOING, run.outcome))
    return _phase_one(ex, world, run, decide_sync=True)


# --- paths for move_to_block -----------------------------------------------------------------


def queue_targets(world: _World, agent: jax.Array, block: jax.Array, face: jax.Array) -> jax.Array:
    """bool[K, K]: the tails of the queues behind each face cell, as ``agent`` sees them.

    From each face cell, step away from the block over cells holding another agent; the
    first other cell is the tail, a target when it is inside the grid and not under an
    alive block (docs/symbolic.md, "Queue tails").
    """
    k = world.agent_grid.shape[0]
    r, c, w = world.block_pos[block, 0], world.block_pos[block, 1], world.block_weight[block]
    span = jnp.arange(k)  # positions along the face (only the first w are face cells)
    along = jnp.stack([jnp.zeros_like(span), span], -1)  # up/down faces run along a row
    across = jnp.stack([span, jnp.zeros_like(span)], -1)  # left/right faces along a column
    starts = jnp.stack([
        jnp.array([r - 1, c]) + along,
        jnp.array([r + w, c]) + along,
        jnp.array([r, c - 1]) + across,
        jnp.array([r, c + w]) + across,
    ])[face]  # int32[K, 2] face cells (j < w)
    out = jnp.asarray(concepts.FACE_OUTWARD, jnp.int32)[face]
    line = starts[:, None, :] + jnp.arange(k)[None, :, None] * out  # int32[K, K, 2] outward from each
    inside = ((line >= 0) & (line < k)).all(-1)
    safe = jnp.clip(line, 0, k - 1)
    occupant = world.agent_grid[safe[..., 0], safe[..., 1]]
    other = inside & (occupant >= 0) & (occupant != agent)
    run = jnp.cumprod(other, axis=1).sum(1)  # int32[K] other agents queued behind each face cell
    tail = starts + run[:, None] * out
    tail_inside = ((tail >= 0) & (tail < k)).all(-1)
    tail_safe = jnp.clip(tail, 0, k - 1)
    free = world.block_grid[tail_safe[:, 0], tail_safe[:, 1]] < 0
    valid = (span < w) & tail_inside & free  # bool[K]
    rows = jnp.arange(k)
    hit = (tail[:, 0][:, None, None] == rows[None, :, None]) & (tail[:, 1][:, None, None] == rows[None, None, :])
    return (hit & valid[:, None, None]).any(0)


def _field_to(passable: jax.Array, goals: jax.Array, start: jax.Array) -> jax.Array:
    """int32[K, K] the distance field, relaxed only until ``start`` has its distance.

    Breadth-first layers settle in order, so once ``start`` has a finite value every cell
    at most that far is final, which is all a step choice from ``start`` reads.
    """
    return distance_field(passable, goals, stop_at=start)


def parked_agents(ex: ExecutorState) -> jax.Array:
    """bool[N]: agents that are not walking at the start of a step (docs/symbolic.md, "Pathfinding").

    Parked: no current action (plan done, empty or failed), or a current action other
    than ``move``, ``move_to_block`` and ``yield_block``.
    """
    n, l = ex.plans.shape[0], ex.plans.shape[1]
    code = ex.plans[jnp.arange(n), jnp.clip(ex.index, 0, l - 1), 0]
    walking = (code == MOVE) | (code == MOVE_TO_BLOCK) | (code == YIELD_BLOCK)
    return ~(~ex.failed & (ex.index < ex.length) & walking)


def path_step(world: _World, agent: jax.Array, targets: jax.Array, parked: jax.Array):
    """(int32[] primitive, bool[] a path exists) toward ``targets`` for ``agent``.

    Around its obstacle agents (every other agent with a smaller id, and every parked
    one) when that is possible, else as if no agent were there (docs/symbolic.md,
    "Pathfinding"); ``parked`` is bool[N] from :func:`parked_agents`.
    """
    k = world.agent_grid.shape[0]
    far = unreachable(k)
    pos = world.agent_pos[agent]
    free_b = world.block_grid < 0
    occupant = world.agent_grid
    safe = jnp.maximum(occupant, 0)
    obstacle = (occupant >= 0) & (occupant != agent) & ((occupant < agent) | parked[safe])
    free_a = free_b & ~obstacle
    field_a = _field_to(free_a, targets, pos)
    around = field_a[pos[0], pos[1]] < far
    # the second field is only needed without a way around; empty goals end it at once
    field_b = _field_to(free_b, targets & ~around, pos)
    through = field_b[pos[0], pos[1]] < far
    field = jnp.where(around, field_a, field_b)
    return next_action(field, pos), around | through


def _resolve_paths(world: _World, ex: ExecutorState, run: _Run, parked: jax.Array) -> _Run:
    """Steps (or failures) of the agents stopped at a move_to_block that needs a path."""
    b = world.block_pos.shape[0]
    walking = run.outcome == _NEEDS_PATH
    _, args, _ = _current(ex, run)
    block, face = _block_and_face(args, b)
    agents = jnp.arange(world.agent_pos.shape[0])

    def one(agent, blk, f, needed):
        targets = queue_targets(world, agent, blk, f) & needed
        step, reachable = path_step(world, agent, targets, parked)
        return step, targets.any(), reachable

    step, has_target, reachable = jax.vmap(one)(agents, block, face, walking)
    ok = walking & has_target & reachable
    run = _fail(run, walking & ~ok, EXECUTION_ERROR)
    return _emit(run, ok, step)


# --- one step --------------------------------------------------------------------------------


def executor_step(ex: ExecutorState, state: State):
    """(new ExecutorState, int32[N] primitive actions) for this step, from the state before it.

    Pure; jit and vmap it freely. Follows docs/symbolic.md step by step, with the path
    computations deferred to the end (see the module docstring).
    """
    world = _world(state)
    n = state.agent_pos.shape[0]
    parked = parked_agents(ex)  # fixed before phase 1
    run = _Run(
        index=ex.index,
        emitted=ex.emitted,
        started=ex.started,
        failed=ex.failed,
        error_kind=ex.error_kind,
        error_index=ex.error_index,
        outcome=jnp.full((n,), _GOING, jnp.int32),
        primitive=jnp.full((n,), STAY, jnp.int32),
    )
    run = _phase_one(ex, world, run, decide_sync=False)
    run = _phase_two(ex, world, run)
    run = _resolve_paths(world, ex, run, parked)

    emitting = run.outcome == _EMIT
    status = jnp.where(
        emitting,
        jnp.where(run.emitted == 0, STARTED, IN_PROGRESS),
        jnp.where(run.failed, FAILED, DONE),
    ).astype(jnp.int32)
    new = ex.replace(
        index=run.index,
        emitted=run.emitted + emitting,
        started=run.started,
        failed=run.failed,
        status=status,
        error_kind=run.error_kind,
        error_index=run.error_index,
    )
    return new, run.primitive.astype(jnp.int32)


__all__ = [
    "DONE",
    "ERROR_NAMES",
    "ExecutorState",
    "FAILED",
    "IN_PROGRESS",
    "MAX_ARGS",
    "STARTED",
    "STATUS_NAMES",
    "compile_plans",
    "encode_action",
    "executor_step",
    "init_executor",
    "parked_agents",
    "path_step",
    "queue_targets",
    "set_plans",
]
