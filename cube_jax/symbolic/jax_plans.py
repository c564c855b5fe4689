"""Plan arrays for the JAX plan executor: one agent's plan as ``L`` rows of ints.

``plans`` is ``int32[N, L, 1 + MAX_ARGS]``: per agent ``L`` rows of
``[code, arg0, ..., arg{MAX_ARGS-1}]`` (``MAX_ARGS`` = 4, the most arguments an action
has) with the action codes of docs/symbolic.md and the arguments in their documented
order; faces are face codes (up 0, down 1, left 2, right 3) and a ``move`` direction is
its primitive action id (UP 1 ... RIGHT 4). Unused argument slots and rows past
``length[i]`` are 0. :func:`compile_plans` builds them from parsed plans,
:func:`decode_action` reads a row back; :class:`ExecutorState` is where each agent is in
its plan (:mod:`cube_jax.symbolic.jax_executor` steps it).
"""
from __future__ import annotations

from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cube_jax.core.checks import as_int, excerpt
from cube_jax.symbolic.actions import SymbolicAction
from cube_jax.symbolic.vocabulary import (
    ACTION_CODES,
    ACTION_SPECS,
    MAX_ARGS,
    NUM_ACTIONS,
    SPECS_BY_CODE,
    Status,
    decode_argument,
    encode_argument,
)

# Every action's code as a constant named after it (IDLE, MOVE, MOVE_TO_BLOCK, ...), from ACTION_SPECS.
globals().update({name.upper(): code for name, code in ACTION_CODES.items()})
# Statuses after a step (vocabulary.Status); "succeeded" only ever appears in the history.
STARTED, IN_PROGRESS, SUCCEEDED, FAILED, DONE = Status



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
