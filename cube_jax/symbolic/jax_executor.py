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

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

from cube_jax.core.types import STAY, State
from cube_jax.symbolic.distance import distance_field, next_action, unreachable
from cube_jax.symbolic.jax_plans import (  # noqa: F401  (the plan arrays: read from here too)
    DONE,
    FAILED,
    IDLE,
    IN_PROGRESS,
    MOVE,
    MOVE_TO_BLOCK,
    PUSH_BLOCK,
    RENDEZVOUS,
    STARTED,
    SUCCEEDED,
    WAIT_AGENTS,
    YIELD_BLOCK,
    ExecutorState,
    compile_plans,
    decode_action,
    encode_action,
    init_executor,
    plan_row,
    set_plans,
)
from cube_jax.symbolic.jax_rules import (  # noqa: F401  (the rules: read from here too)
    RULES,
    ActionArgs,
    BatchedActionRules,
    BatchedSyncRules,
    _by_code,
    _views,
    _World,
    _world,
    queue_targets,
    rules_by_code,
)
from cube_jax.symbolic.vocabulary import (  # noqa: F401  (STATUS_NAMES, ERROR_NAMES: read from here too)
    ERROR_NAMES,
    MAX_ARGS,
    NUM_ACTIONS,
    SPECS_BY_CODE,
    STATUS_NAMES,
    ErrorKind,
    Outcome,
    obstacle_agents,
)

# How a round of phase 1 left an agent.
_GOING, _EMIT, _PENDING, _NEEDS_PATH, _STOPPED = 0, 1, 2, 3, 4

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
