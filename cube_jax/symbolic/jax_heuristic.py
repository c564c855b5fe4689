"""The cube paper's heuristic baseline as a pure JAX policy, for batched evaluation.

The same rule as :class:`cube_jax.symbolic.HeuristicPlanner` (CPU), on the JAX plan
executor: target the alive block closest to the goal (ties: lower id); every agent whose
target changed or whose plan is finished or failed gets the plan
``move_to_block(t, left); rendezvous(t, left, w, 4K); push_block(t, gap + 1)``, where
``gap`` is the block's distance to the goal column; then the executor emits this step's
primitive actions. Step for step it gives the CPU planner's actions (tested).

>>> import jax, cube_jax
>>> env = cube_jax.make("easy")
>>> policy, policy_state = heuristic_policy(env)
>>> state, ts = env.reset(jax.random.PRNGKey(0))
>>> actions, policy_state = jax.jit(policy)(state, policy_state)
>>> actions.shape
(2,)
"""
from __future__ import annotations

from typing import Callable, Tuple

import jax
import jax.numpy as jnp
from flax import struct

from cube_jax.core.types import State
from cube_jax.symbolic import jax_executor as jx
from cube_jax.symbolic.vocabulary import LEFT_FACE, goal_distance

PLAN_LENGTH = 3  # move_to_block, rendezvous, push_block


@struct.dataclass
class HeuristicState:
    executor: jx.ExecutorState
    target: jax.Array  # int32[] the block the team works on (-1 before the first step)


def target_block(state: State) -> jax.Array:
    """int32[]: the alive block closest to the goal column (lowest id on ties), -1 if none."""
    k = state.grid_size
    b = state.block_pos.shape[0]
    gap = goal_distance(k, state.block_pos[:, 1], state.block_weight)
    key = jnp.where(state.block_alive, gap * b + jnp.arange(b), jnp.iinfo(jnp.int32).max)
    return jnp.where(state.block_alive.any(), jnp.argmin(key), -1).astype(jnp.int32)


def deliver_plan(state: State, block: jax.Array, timeout: int) -> jax.Array:
    """int32[3, 1 + MAX_ARGS]: line up on the left face, meet there, push right until delivered."""
    k = state.grid_size
    w = state.block_weight[block]
    gap = goal_distance(k, state.block_pos[block, 1], w)
    zero = jnp.int32(0)
    return jnp.stack([
        jnp.stack([jnp.int32(jx.MOVE_TO_BLOCK), block, jnp.int32(LEFT_FACE), zero, zero]),
        jnp.stack([jnp.int32(jx.RENDEZVOUS), block, jnp.int32(LEFT_FACE), w, jnp.int32(timeout)]),
        jnp.stack([jnp.int32(jx.PUSH_BLOCK), block, gap + 1, zero, zero]),
    ]).astype(jnp.int32)


def init_heuristic(num_agents: int) -> HeuristicState:
    """The policy state before an episode: empty plans, no target."""
    plans = jnp.zeros((num_agents, PLAN_LENGTH, 1 + jx.MAX_ARGS), jnp.int32)
    return HeuristicState(jx.init_executor(plans, jnp.zeros((num_agents,), jnp.int32)), jnp.int32(-1))


def heuristic_step(state: State, policy_state: HeuristicState, timeout: int) -> Tuple[jax.Array, HeuristicState]:
    """(int32[N] actions, new policy state) for one step of the heuristic."""
    n = state.agent_pos.shape[0]
    target = target_block(state)
    any_alive = target >= 0
    safe_target = jnp.maximum(target, 0)
    ex = policy_state.executor
    replan = (target != policy_state.target) | ex.idle
    plan = deliver_plan(state, safe_target, timeout)
    plans = jnp.broadcast_to(plan, (n,) + plan.shape)
    ex = jx.set_plans(ex, replan, plans, jnp.full((n,), PLAN_LENGTH, jnp.int32))
    ex, actions = jx.executor_step(ex, state)
    # with every block delivered the CPU planner stops calling its executor: keep the old state
    new = HeuristicState(ex, target)
    new = jax.tree.map(lambda a, b: jnp.where(any_alive, a, b), new, policy_state)
    return jnp.where(any_alive, actions, 0).astype(jnp.int32), new


def heuristic_policy(env) -> Tuple[Callable, HeuristicState]:
    """(policy, initial policy state) for ``env``: ``policy(env_state, policy_state) -> (actions, policy_state)``.

    Pure and jit/vmap-able; the rendezvous timeout is ``4 * K`` as in the CPU planner.
    """
    timeout = 4 * env.grid_size

    def policy(state: State, policy_state: HeuristicState):
        return heuristic_step(state, policy_state, timeout)

    return policy, init_heuristic(env.num_agents)


__all__ = ["HeuristicState", "deliver_plan", "heuristic_policy", "heuristic_step", "init_heuristic", "target_block"]
