"""The rules of every symbolic action on arrays, for the JAX plan executor.

Each action of ``ACTION_SPECS`` has its :class:`BatchedActionRules` in :data:`RULES`
(and its CPU twin in ``executor.RULES``); :class:`ActionArgs` reads every agent's
current arguments as those of one action, and :func:`queue_targets` is where
``move_to_block`` walks (docs/symbolic.md, "Actions" and "Queue tails").
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from cube_jax.core.types import STAY, State
from cube_jax.symbolic import concepts
from cube_jax.symbolic.vocabulary import (
    ACTION_SPECS,
    FACE_PUSH_ACTION,
    NUM_FACES,
    SPECS_BY_CODE,
    ActionSpec,
    Outcome,
    away_direction,
    packing_step,
    queue_tails,
)

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
        raise NotImplementedError(f"the JAX executor has no rules for action(s) {missing}; add them to jax_rules.RULES")
    return [RULES[spec.name] for spec in SPECS_BY_CODE]


def _by_code(code: jax.Array, values: Sequence[jax.Array]) -> jax.Array:
    """Per agent, ``values[code]`` (one array per action code, all of the same shape)."""
    if all(v is values[0] for v in values):
        return values[0]
    return lax.select_n(code, *values)


def _views(world: _World, args: jax.Array, emitted: jax.Array) -> List[ActionArgs]:
    return [ActionArgs(spec, world, args, emitted) for spec in SPECS_BY_CODE]


def queue_targets(world: _World, agent: jax.Array, block: jax.Array, face: jax.Array) -> jax.Array:
    """bool[K, K]: the tails of the queues behind each face cell, as ``agent`` sees them
    (``vocabulary.queue_tails``; docs/symbolic.md, "Queue tails")."""
    k = world.agent_grid.shape[0]
    tails, valid = queue_tails(agent, world.block_pos[block], world.block_weight[block], face,
                               world.agent_grid, world.block_grid)
    rows = jnp.arange(k)
    hit = (tails[:, 0][:, None, None] == rows[None, :, None]) & (tails[:, 1][:, None, None] == rows[None, None, :])
    return (hit & valid[:, None, None]).any(0)
