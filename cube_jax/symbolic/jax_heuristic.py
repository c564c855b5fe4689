"""The cube paper's heuristic baseline as a pure JAX policy, for batched evaluation.

The same decisions as :class:`cube_jax.agents.planners.HeuristicAgent` in the CPU episode
loop, at the same steps (tested step by step), on the JAX plan executor. Before each step:

1. the target is the alive block closest to the goal (ties: lower id);
2. an agent whose plan has nothing more to emit at this state (a dry run of the executor
   finds it finished or failed) gets a new plan, and so does one whose plan was made for
   another target;
3. the new plan is ``move_to_block(t, left); rendezvous(t, left, w, 4K); push_block(t,
   gap + 1)`` (``gap`` = the block's distance to the goal column), except that an agent
   whose plan ended while it stands in front of the target (the target's rows, at or right
   of its left column) first takes one step toward the nearest cell outside that lane
   (``move(d, 1)``), around the other agents when it can;
4. the executor emits this step's primitive actions.

The dry run and the real step are the two iterations of one loop, so the executor is
compiled once.

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
from cube_jax.symbolic import concepts
from cube_jax.symbolic import jax_executor as jx
from cube_jax.symbolic.distance import distance_field, next_action, unreachable
from cube_jax.symbolic.vocabulary import LEFT_FACE, goal_distance

PLAN_LENGTH = 3  # move_to_block, rendezvous, push_block


@struct.dataclass
class HeuristicState:
    executor: jx.ExecutorState
    plan_target: jax.Array  # int32[N] the target each agent's plan was made for (-1 before its first plan)


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


def lane_exit_steps(state: State, block: jax.Array, needed: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """(int32[N] step, bool[N] taken) toward the nearest free cell outside ``block``'s lane.

    The lane is the block's rows from its left column to the goal. For each agent in
    ``needed`` standing in the lane: the first step down the breadth-first distance field to
    the free cells outside it, around every other agent when such a path exists, else as if
    no agent were there; ``taken`` is False when the agent is outside the lane or no path
    exists. Agents not in ``needed`` get empty targets, which settle in one round.
    """
    k = state.grid_size
    far = unreachable(k)
    idx = jnp.arange(k)
    r, c, w = state.block_pos[block, 0], state.block_pos[block, 1], state.block_weight[block]
    lane = ((idx >= r) & (idx < r + w))[:, None] & (idx >= c)[None, :]
    free = concepts.block_grid(state) < 0
    occupant = concepts.agent_grid(state)
    outside = ~lane & free

    def one(agent, need):
        pos = state.agent_pos[agent]
        in_lane = lane[pos[0], pos[1]]
        goals = outside & need & in_lane
        others = (occupant >= 0) & (occupant != agent)
        field_a = distance_field(free & ~others, goals, stop_at=pos)
        around = field_a[pos[0], pos[1]] < far
        field_b = distance_field(free, goals & ~around, stop_at=pos)
        through = field_b[pos[0], pos[1]] < far
        field = jnp.where(around, field_a, field_b)
        return next_action(field, pos), need & in_lane & (around | through)

    return jax.vmap(one)(jnp.arange(state.agent_pos.shape[0]), needed)


def init_heuristic(num_agents: int) -> HeuristicState:
    """The policy state before an episode: empty plans, no target."""
    plans = jnp.zeros((num_agents, PLAN_LENGTH, 1 + jx.MAX_ARGS), jnp.int32)
    return HeuristicState(jx.init_executor(plans, jnp.zeros((num_agents,), jnp.int32)),
                          jnp.full((num_agents,), -1, jnp.int32))


def heuristic_step(state: State, policy_state: HeuristicState, timeout: int) -> Tuple[jax.Array, HeuristicState]:
    """(int32[N] actions, new policy state) for one step of the heuristic (see the module docstring)."""
    n = state.agent_pos.shape[0]
    target = target_block(state)
    any_alive = target >= 0
    safe_target = jnp.maximum(target, 0)
    deliver = jnp.broadcast_to(deliver_plan(state, safe_target, timeout), (n, PLAN_LENGTH, 1 + jx.MAX_ARGS))

    def iteration(k, carry):
        ex, plan_target, _ = carry
        stepped, actions = jx.executor_step(ex, state)
        # iteration 0 is the dry run: it finds the plans that end here and replaces them
        dry = k == 0
        ended = stepped.idle
        replan = dry & any_alive & (ended | (plan_target != target))
        exit_step, exits = lane_exit_steps(state, safe_target, dry & any_alive & ended)
        exits = replan & ended & exits
        move = jnp.zeros_like(deliver).at[:, 0, 0].set(jx.MOVE).at[:, 0, 1].set(exit_step).at[:, 0, 2].set(1)
        rows = jnp.where(exits[:, None, None], move, deliver)
        lengths = jnp.where(exits, 1, PLAN_LENGTH).astype(jnp.int32)
        replanned = jx.set_plans(ex, replan, rows, lengths)
        ex = jax.tree.map(lambda a, b: jnp.where(dry, a, b), replanned, stepped)
        return ex, jnp.where(replan, target, plan_target), actions

    zeros = jnp.zeros((n,), jnp.int32)
    ex, plan_target, actions = jax.lax.fori_loop(0, 2, iteration, (policy_state.executor, policy_state.plan_target,
                                                                   zeros))
    new = HeuristicState(ex, plan_target)
    # with every block delivered the episode is over: keep the old state
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


__all__ = ["HeuristicState", "deliver_plan", "heuristic_policy", "heuristic_step", "init_heuristic",
           "lane_exit_steps", "target_block"]
