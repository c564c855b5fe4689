"""The plan executor in JAX: plans as fixed-size arrays, one pure step under jit and vmap.

It implements ``docs/symbolic.md`` ("Executor state and one step") exactly as the CPU
:class:`cube_jax.symbolic.PlanExecutor` does, so both give the same primitive actions,
plan indices, counters and statuses on every step (tested against each other).

**Plan arrays.** ``plans`` is ``int32[N, L, 1 + MAX_ARGS]``: per agent ``L`` rows of
``[code, arg0, ..., arg{MAX_ARGS-1}]`` (``MAX_ARGS`` = 4, the most arguments an action
has) with the action codes of docs/symbolic.md and the arguments in their documented
order; faces are face codes (up 0, down 1, left 2, right 3) and a ``move`` direction is
its primitive action id (UP 1 ... RIGHT 4). Unused argument slots and rows past
``length[i]`` are 0. :func:`compile_plans` builds them from parsed plans,
:func:`decode_action` reads a row back.

**One step.** :func:`executor_step` runs the two phases of the spec on arrays:

1. phase 1 for every agent at once, in a loop of at most ``L + 1`` rounds (each round
   either stops an agent or advances its index); every action's rules (:data:`RULES`)
   are evaluated for every agent and each agent takes those of its current action;
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

import dataclasses
import functools
from typing import Callable, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

from cube_jax.core.checks import as_int, excerpt
from cube_jax.core.types import STAY, State
from cube_jax.symbolic import concepts
from cube_jax.symbolic.actions import SymbolicAction
from cube_jax.symbolic.distance import distance_field, next_action, unreachable
from cube_jax.symbolic.vocabulary import (  # noqa: F401  (STATUS_NAMES, ERROR_NAMES: read from here too)
    ACTION_CODES,
    ACTION_SPECS,
    ERROR_NAMES,
    FACE_PUSH_ACTION,
    MAX_ARGS,
    NUM_ACTIONS,
    NUM_FACES,
    SPECS_BY_CODE,
    STATUS_NAMES,
    ActionSpec,
    ErrorKind,
    Outcome,
    Status,
    away_direction,
    decode_argument,
    encode_argument,
    obstacle_agents,
    packing_step,
    queue_tails,
)

# Every action's code as a constant named after it (IDLE, MOVE, MOVE_TO_BLOCK, ...), from ACTION_SPECS.
globals().update({name.upper(): code for name, code in ACTION_CODES.items()})
# Statuses after a step (vocabulary.Status); "succeeded" only ever appears in the history.
STARTED, IN_PROGRESS, SUCCEEDED, FAILED, DONE = Status

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
    status: jax.Array  # int32[N] a Status: STARTED, IN_PROGRESS, FAILED or DONE after the last step
    error_kind: jax.Array  # int32[N] an ErrorKind: NONE, PRECONDITION or EXECUTION
    error_index: jax.Array  # int32[N] index of the action that failed (-1 if none)

    @property
    def idle(self) -> jax.Array:
        """bool[N]: no action left to run (plan finished, empty or failed)."""
        return self.failed | (self.index >= self.length)


# --- building plan arrays --------------------------------------------------------------------


def encode_action(action: SymbolicAction) -> list:
    """``[code, arg0, ..., arg{MAX_ARGS-1}]`` of one parsed action (see the module docstring)."""
    row = [action.spec.code] + [encode_argument(arg, action.args[arg.name]) for arg in action.spec.args]
    return row + [0] * (1 + MAX_ARGS - len(row))


def decode_action(row) -> SymbolicAction:
    """The action of one plan row (the inverse of :func:`encode_action`).

    >>> str(decode_action([3, 2, 3, 2, 7]))
    'rendezvous(2, right, 2, 7)'
    """
    row = [int(x) for x in np.asarray(row).reshape(-1)]
    if not 0 <= row[0] < NUM_ACTIONS:
        raise ValueError(f"decode_action: {row[0]} is not an action code (0..{NUM_ACTIONS - 1})")
    spec = SPECS_BY_CODE[row[0]]
    return SymbolicAction(spec.name, {arg.name: decode_argument(arg, x) for arg, x in zip(spec.args, row[1:])})


def plan_row(name: str, *args) -> jax.Array:
    """int32[1 + MAX_ARGS]: the row of action ``name`` with encoded ``args`` (ints, may be traced)."""
    spec = ACTION_SPECS[name]
    if len(args) != len(spec.args):
        raise ValueError(f"plan_row: {name} takes {len(spec.args)} argument(s), got {len(args)}")
    padding = [0] * (MAX_ARGS - len(args))
    return jnp.stack([jnp.asarray(x, jnp.int32) for x in (spec.code, *args, *padding)])


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


class ActionArgs:
    """Every agent's current arguments read as those of one action ``spec``: right for the
    agents whose current action it is, and harmless (clipped into range) for the others."""

    def __init__(self, spec: ActionSpec, world: _World, args: jax.Array, emitted: jax.Array):
        self.spec, self.world, self.args, self.emitted = spec, world, args, emitted  # args int32[N, MAX_ARGS]

    def __getitem__(self, name: str) -> jax.Array:
        """int32[N]: the argument ``name``."""
        return self.args[:, self.spec.arg_index(name)]

    @functools.cached_property
    def block(self) -> jax.Array:
        return jnp.clip(self["block"], 0, self.world.block_pos.shape[0] - 1)

    @functools.cached_property
    def face(self) -> jax.Array:
        return jnp.clip(self["face"], 0, NUM_FACES - 1)

    @functools.cached_property
    def alive(self) -> jax.Array:
        """bool[N]: the block is alive."""
        return self.world.alive[self.block]

    @functools.cached_property
    def aligned(self) -> jax.Array:
        """bool[N]: the agent is aligned with (block, face)."""
        return self.world.align[self.face, jnp.arange(self.args.shape[0])] == self.block

    @functools.cached_property
    def faces_aligned(self) -> jax.Array:
        """bool[4, N]: the agent is aligned with the block on each face."""
        return self.world.align == self.block[None, :]


# --- the rules of each action (docs/symbolic.md, "Actions") -------------------------------------
# Every entry of ACTION_SPECS has its rules here (RULES) and in executor.RULES.


@dataclasses.dataclass(frozen=True)
class BatchedSyncRules:
    """How phase 2 decides a synchronising action, for every agent at once."""

    group: Callable[[ActionArgs], jax.Array]  # int32[N]: agents with the same action and group wait together
    member: Callable[[ActionArgs], jax.Array]  # bool[N]: the agent counts in its group now
    lost: Callable[[ActionArgs], jax.Array]  # bool[N]: fails before counting (execution error)
    waiting: Callable[[ActionArgs], jax.Array]  # int32[N]: the primitive emitted while waiting


@dataclasses.dataclass(frozen=True)
class BatchedActionRules:
    """One action's semantics on arrays.

    ``step(args)`` gives (int32[N] Outcome, int32[N] primitive) of the started,
    non-synchronising action; an outcome ``NEEDS_PATH`` is resolved after phase 2 by a
    path step toward ``targets(world, agent, row)`` (bool[K, K], one agent with its plan
    row's arguments). ``precondition(args)``: bool[N] violated, checked when the action
    starts, after the check every action with a block gets (the block is alive).
    ``sync``: the rules of a synchronising action.
    """

    step: Optional[Callable[[ActionArgs], Tuple[jax.Array, jax.Array]]] = None
    precondition: Optional[Callable[[ActionArgs], jax.Array]] = None
    targets: Optional[Callable[[_World, jax.Array, jax.Array], jax.Array]] = None
    sync: Optional[BatchedSyncRules] = None


def _repeat(primitive: Callable[[ActionArgs], jax.Array]):
    """The step of an action that emits ``primitive`` until it has emitted ``steps`` of them."""

    def step(a: ActionArgs):
        return jnp.where(a.emitted >= a["steps"], Outcome.SUCCEED, Outcome.EMIT), primitive(a)

    return step


def _away(a: ActionArgs) -> jax.Array:
    return away_direction(a.world.agent_pos, a.world.block_pos[a.block], a.world.block_weight[a.block])


def _move_to_block(a: ActionArgs):
    outcome = jnp.where(~a.alive, Outcome.FAIL, jnp.where(a.aligned, Outcome.SUCCEED, Outcome.NEEDS_PATH))
    return outcome, jnp.full_like(outcome, STAY)


def _move_to_block_targets(world: _World, agent: jax.Array, row: jax.Array) -> jax.Array:
    spec = ACTION_SPECS["move_to_block"]
    block = jnp.clip(row[spec.arg_index("block")], 0, world.block_pos.shape[0] - 1)
    face = jnp.clip(row[spec.arg_index("face")], 0, NUM_FACES - 1)
    return queue_targets(world, agent, block, face)


def _push_block(a: ActionArgs):
    done = ~a.alive | (a.emitted >= a["steps"])
    lost = ~a.faces_aligned.any(0)
    face = jnp.argmax(a.faces_aligned, 0)  # the one aligned face (first in code order)
    outcome = jnp.where(done, Outcome.SUCCEED, jnp.where(lost, Outcome.FAIL, Outcome.EMIT))
    return outcome, jnp.asarray(FACE_PUSH_ACTION, jnp.int32)[face]


def _packing(a: ActionArgs) -> jax.Array:
    w = a.world
    return packing_step(w.agent_pos, w.block_pos[a.block], w.block_weight[a.block], a.face, w.agent_grid, w.block_grid)


RULES = {
    "idle": BatchedActionRules(step=_repeat(lambda a: jnp.full_like(a.emitted, STAY))),
    "move": BatchedActionRules(step=_repeat(lambda a: a["direction"])),
    "move_to_block": BatchedActionRules(step=_move_to_block, targets=_move_to_block_targets),
    "rendezvous": BatchedActionRules(
        precondition=lambda a: ~a.aligned,
        sync=BatchedSyncRules(
            group=lambda a: a.block * NUM_FACES + a.face,
            member=lambda a: a.aligned,
            lost=lambda a: ~a.alive | ~a.aligned,
            waiting=_packing,
        ),
    ),
    "push_block": BatchedActionRules(step=_push_block, precondition=lambda a: ~a.faces_aligned.any(0)),
    "yield_block": BatchedActionRules(step=_repeat(_away)),
    "wait_agents": BatchedActionRules(
        sync=BatchedSyncRules(
            group=lambda a: jnp.zeros_like(a.emitted),
            member=lambda a: jnp.ones_like(a.emitted, bool),
            lost=lambda a: jnp.zeros_like(a.emitted, bool),
            waiting=lambda a: jnp.full_like(a.emitted, STAY),
        ),
    ),
}


def rules_by_code() -> List[BatchedActionRules]:
    """The rules of every action, in code order; a clear error for an action that has none."""
    missing = [spec.name for spec in SPECS_BY_CODE if spec.name not in RULES]
    if missing:
        raise NotImplementedError(f"the JAX executor has no rules for action(s) {missing}; add them to jax_executor.RULES")
    return [RULES[spec.name] for spec in SPECS_BY_CODE]


def _by_code(code: jax.Array, values: Sequence[jax.Array]) -> jax.Array:
    """Per agent, ``values[code]`` (one array per action code, all of the same shape)."""
    if all(v is values[0] for v in values):
        return values[0]
    return lax.select_n(code, *values)


def _views(world: _World, args: jax.Array, emitted: jax.Array) -> List[ActionArgs]:
    return [ActionArgs(spec, world, args, emitted) for spec in SPECS_BY_CODE]


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
    """(int32[N] code, int32[N, MAX_ARGS] args, bool[N] has an action) of each agent's current action."""
    n, l = ex.plans.shape[0], ex.plans.shape[1]
    row = ex.plans[jnp.arange(n), jnp.clip(run.index, 0, l - 1)]
    return jnp.clip(row[:, 0], 0, NUM_ACTIONS - 1), row[:, 1:], ~run.failed & (run.index < ex.length)


def _fail(run: _Run, where: jax.Array, kind: ErrorKind) -> _Run:
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


def _violated(rules: BatchedActionRules, a: ActionArgs) -> jax.Array:
    """bool[N]: a precondition of ``a``'s action fails (block alive, then its own)."""
    violated = jnp.zeros(a.emitted.shape, bool)
    if a.spec.block_arg is not None:
        violated = ~a.alive
    if rules.precondition is not None:
        violated = violated | rules.precondition(a)
    return violated


def _phase_one_round(ex: ExecutorState, world: _World, run: _Run, decide_sync: bool) -> _Run:
    """One round of phase 1 for every agent still _GOING (docs/symbolic.md, phase 1 steps 1-4)."""
    rules = rules_by_code()
    going = run.outcome == _GOING
    code, args, has_action = _current(ex, run)
    # 1. a failed plan or a finished one: STAY
    finished = going & ~has_action
    run = run.replace(outcome=jnp.where(finished, _STOPPED, run.outcome))
    going = going & has_action

    # 2. preconditions of an action that has not started
    starting = going & ~run.started
    views = _views(world, args, jnp.where(starting, 0, run.emitted))
    violated = _by_code(code, [_violated(r, a) for r, a in zip(rules, views)])
    run = _fail(run, starting & violated, ErrorKind.PRECONDITION)
    going = going & ~(starting & violated)
    run = run.replace(
        started=run.started | (going & starting),
        emitted=jnp.where(going & starting, 0, run.emitted),
    )

    # 3. synchronising actions wait for phase 2 (or, reached in phase 2, only start)
    sync = going & jnp.asarray([spec.synchronising for spec in SPECS_BY_CODE])[code]
    if decide_sync:
        run = _emit(run, sync, jnp.full_like(code, STAY))
    else:
        run = run.replace(outcome=jnp.where(sync, _PENDING, run.outcome))
    going = going & ~sync

    # 4. end condition, then emit
    waits = (jnp.full_like(code, Outcome.EMIT), jnp.full_like(code, STAY))  # never read: sync agents left above
    steps = [waits if r.step is None else r.step(a) for r, a in zip(rules, views)]
    outcome = _by_code(code, [jnp.asarray(o, jnp.int32) for o, _ in steps])
    primitive = _by_code(code, [jnp.asarray(p, jnp.int32) for _, p in steps])
    run = _succeed(run, going & (outcome == Outcome.SUCCEED))
    run = _fail(run, going & (outcome == Outcome.FAIL), ErrorKind.EXECUTION)
    run = run.replace(outcome=jnp.where(going & (outcome == Outcome.NEEDS_PATH), _NEEDS_PATH, run.outcome))
    return _emit(run, going & (outcome == Outcome.EMIT), primitive)


def _phase_one(ex: ExecutorState, world: _World, run: _Run, decide_sync: bool) -> _Run:
    """Rounds of phase 1 until every agent has stopped; each round stops or advances each agent."""
    rounds = ex.plans.shape[1] + 1

    def body(_, run):
        return _phase_one_round(ex, world, run, decide_sync)

    return lax.fori_loop(0, rounds, body, run)


# --- phase 2 ---------------------------------------------------------------------------------


def _phase_two(ex: ExecutorState, world: _World, run: _Run) -> _Run:
    """Decides the agents waiting at a synchronising action (docs/symbolic.md, synchronisation)."""
    pending = run.outcome == _PENDING
    code, args, _ = _current(ex, run)
    views = _views(world, args, run.emitted)
    zero = jnp.zeros_like(code)
    rules = [(r.sync, a) for r, a in zip(rules_by_code(), views)]

    def per_code(read):
        return _by_code(code, [zero if sync is None else jnp.asarray(read(sync, a), jnp.int32) for sync, a in rules])

    # group sizes, fixed as they stand after phase 1
    group = per_code(lambda sync, a: sync.group(a))
    member = pending & (per_code(lambda sync, a: sync.member(a)) > 0)
    same_group = (code[:, None] == code[None, :]) & (group[:, None] == group[None, :])
    members = (same_group & member[None, :]).sum(1)
    count = per_code(lambda sync, a: a["count"])
    timeout = per_code(lambda sync, a: a["timeout"])

    lost = pending & (per_code(lambda sync, a: sync.lost(a)) > 0)
    run = _fail(run, lost, ErrorKind.EXECUTION)
    deciding = pending & ~lost
    met = deciding & (members >= count)
    timed_out = deciding & ~met & (run.emitted >= timeout)
    run = _fail(run, timed_out, ErrorKind.EXECUTION)
    run = _emit(run, deciding & ~met & ~timed_out, per_code(lambda sync, a: sync.waiting(a)))
    # the agents whose group is complete move on, with phase 1's rules
    run = _succeed(run, met)
    run = run.replace(outcome=jnp.where(met, _GOING, run.outcome))
    return _phase_one(ex, world, run, decide_sync=True)


# --- paths ---------------------------------------------------------------------------------


def queue_targets(world: _World, agent: jax.Array, block: jax.Array, face: jax.Array) -> jax.Array:
    """bool[K, K]: the tails of the queues behind each face cell, as ``agent`` sees them
    (``vocabulary.queue_tails``; docs/symbolic.md, "Queue tails")."""
    k = world.agent_grid.shape[0]
    tails, valid = queue_tails(agent, world.block_pos[block], world.block_weight[block], face,
                               world.agent_grid, world.block_grid)
    rows = jnp.arange(k)
    hit = (tails[:, 0][:, None, None] == rows[None, :, None]) & (tails[:, 1][:, None, None] == rows[None, None, :])
    return (hit & valid[:, None, None]).any(0)


def _field_to(passable: jax.Array, goals: jax.Array, start: jax.Array) -> jax.Array:
    """int32[K, K] the distance field, relaxed only until ``start`` has its distance.

    Breadth-first layers settle in order, so once ``start`` has a finite value every cell
    at most that far is final, which is all a step choice from ``start`` reads.
    """
    return distance_field(passable, goals, stop_at=start)


def parked_agents(ex: ExecutorState) -> jax.Array:
    """bool[N]: agents that are not walking at the start of a step (docs/symbolic.md, "Pathfinding").

    Parked: no current action (plan done, empty or failed), or a current action that is
    not a walking one (``ActionSpec.walking``: ``move``, ``move_to_block``, ``yield_block``).
    """
    n, l = ex.plans.shape[0], ex.plans.shape[1]
    code = jnp.clip(ex.plans[jnp.arange(n), jnp.clip(ex.index, 0, l - 1), 0], 0, NUM_ACTIONS - 1)
    walking = jnp.asarray([spec.walking for spec in SPECS_BY_CODE])[code]
    return ~(~ex.failed & (ex.index < ex.length) & walking)


def path_step(world: _World, agent: jax.Array, targets: jax.Array, parked: jax.Array):
    """(int32[] primitive, bool[] a path exists) toward ``targets`` for ``agent``.

    Around its obstacle agents (``vocabulary.obstacle_agents``: every other agent with a
    smaller id, and every parked one) when that is possible, else as if no agent were
    there (docs/symbolic.md, "Pathfinding"); ``parked`` is bool[N] from :func:`parked_agents`.
    """
    k = world.agent_grid.shape[0]
    far = unreachable(k)
    pos = world.agent_pos[agent]
    free_b = world.block_grid < 0
    occupant = world.agent_grid
    obstacle = (occupant >= 0) & obstacle_agents(agent, parked)[jnp.maximum(occupant, 0)]
    free_a = free_b & ~obstacle
    field_a = _field_to(free_a, targets, pos)
    around = field_a[pos[0], pos[1]] < far
    # the second field is only needed without a way around; empty goals end it at once
    field_b = _field_to(free_b, targets & ~around, pos)
    through = field_b[pos[0], pos[1]] < far
    field = jnp.where(around, field_a, field_b)
    return next_action(field, pos), around | through


def _resolve_paths(world: _World, ex: ExecutorState, run: _Run, parked: jax.Array) -> _Run:
    """Steps (or failures) of the agents whose action needs a path step (``BatchedActionRules.targets``)."""
    walking = run.outcome == _NEEDS_PATH
    code, args, _ = _current(ex, run)
    agents = jnp.arange(world.agent_pos.shape[0])
    with_targets = [(spec.code, r.targets) for spec, r in zip(SPECS_BY_CODE, rules_by_code()) if r.targets is not None]
    slot = np.zeros(NUM_ACTIONS, np.int32)  # code -> position in with_targets
    for i, (c, _) in enumerate(with_targets):
        slot[c] = i

    def one(agent, c, row, needed):
        masks = [targets(world, agent, row) for _, targets in with_targets]
        targets = masks[0] if len(masks) == 1 else lax.select_n(jnp.asarray(slot)[c], *masks)
        targets = targets & needed
        step, reachable = path_step(world, agent, targets, parked)
        return step, targets.any(), reachable

    step, has_target, reachable = jax.vmap(one)(agents, code, args, walking)
    ok = walking & has_target & reachable
    run = _fail(run, walking & ~ok, ErrorKind.EXECUTION)
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
    "ActionArgs",
    "BatchedActionRules",
    "DONE",
    "ERROR_NAMES",
    "ExecutorState",
    "FAILED",
    "IN_PROGRESS",
    "MAX_ARGS",
    "RULES",
    "STARTED",
    "STATUS_NAMES",
    "BatchedSyncRules",
    "compile_plans",
    "decode_action",
    "encode_action",
    "executor_step",
    "init_executor",
    "parked_agents",
    "path_step",
    "plan_row",
    "queue_targets",
    "rules_by_code",
    "set_plans",
]
