"""The step rules of DYNAMICS.md as pure array functions.

One step is four push phases (UP, DOWN, LEFT, RIGHT, in that order), the delivery of blocks
that reached the last column, and then a movement phase: a chain of small pure functions over
the structs of :mod:`cube_jax.core.bodies` (the :class:`~cube_jax.core.bodies.Bodies` where
everything stands, the :class:`~cube_jax.core.bodies.Marks` of who pushed and what moved, the
:class:`~cube_jax.core.bodies.Orders` of this step). Everything is computed on entity arrays
(``N`` agents, ``B`` blocks) rather than on ``K x K`` occupancy grids, so a step costs
O(N^2 + B^2) independent of the grid size:

* agent chains: the pushers standing in a line ahead of each agent are counted with a
  bit row per agent (``N <= 32``) or by pointer jumping (larger ``N``; once per step for
  all four push phases, since an agent moves only in the phase of its own action);
* composites: the pushed blocks plus everything downstream of them through "in front
  of" (a bit set grown hop by hop), split into connected components of the contact graph
  by doubling on ``uint32`` bit rows (``B <= 64``) or on boolean relations composed by folds
  (larger B); see :mod:`cube_jax.core.push`;
* movement: blocked movers are resolved by iterating the rule to its fixed point (small
  N) or by pointer jumping along "the agent standing on my target"; see
  :mod:`cube_jax.core.movement`.

Two kernels compute each phase: the *folded* one, where every relation is an unrolled fold
of elementwise operations over one entity axis and every value read more than once is
materialised in a *region* (:func:`cube_jax.core.batching.region`, docs/dynamics.md), and the
*large* one. Each phase picks by its own axis: the push phases fold while there are at most
64 blocks (over more than 32 agents in chunks, with pointer jumping for lines of pushers),
the movement phase while there are at most 32 agents; bigger worlds take the large kernel's
phase, whose agent/block relations are folds as well.

The kernel works on environment-last arrays (:mod:`cube_jax.core.batching`):
:func:`step_state` accepts one state or a batch with any leading axes and moves the
environment axis last internally; :func:`batched_step` is the same function with a
``jax.vmap`` rule that sends the whole batch through the kernel at once.

No Python branch depends on a traced value, so everything jits and vmaps.
"""
from __future__ import annotations

import functools
from typing import List, Tuple

import jax
import jax.numpy as jnp

from cube_jax.core.batching import env_first, env_last, in_env_tiles, region, vmap_as_batch
from cube_jax.core.bodies import Bodies, Marks, Orders
from cube_jax.core.movement import movement_phase, movement_phase_folded
from cube_jax.core.push import BITSET_MAX_AGENTS, push_phase, push_phase_folded, pushers_ahead_all
from cube_jax.core.types import PUSH_ORDER, EnvConfig, State, StepEvents
from cube_jax.names import actions_or_stay

# Push phases fold up to FOLD_MAX_BLOCKS blocks, the movement phase up to FOLD_MAX_AGENTS agents.
FOLD_MAX_AGENTS = 32
FOLD_MAX_BLOCKS = 64


def _counted_lines(keep, orders: Orders, start: Bodies) -> Orders:
    """``orders`` with the lines of pushers of all four push phases counted once, from the
    starting positions (see :func:`~cube_jax.core.push.pushers_ahead_all`), above 32 agents;
    up to 32, each phase's bit rows are cheaper."""
    if start.agent_row.shape[0] <= BITSET_MAX_AGENTS:
        return orders
    run = region(keep, lambda *a: pushers_ahead_all(*a) + 1, start.agent_row, start.agent_col, orders.actions)
    return orders.replace(run=run)


def _push_phases(cfg: EnvConfig, keep, orders: Orders, bodies: Bodies, marks: Marks) -> Tuple[Bodies, Marks, List]:
    """The four push phases in PUSH_ORDER; returns the bodies and marks after them and F per
    block of each phase (int32[B, E] each)."""
    # The push phases fold over blocks and the movement phase over agents, so each picks its
    # kernel by its own axis: teams of 64 or 128 with at most 32 blocks push through folds.
    phase = push_phase_folded if bodies.block_row.shape[0] <= FOLD_MAX_BLOCKS else push_phase
    forces = []
    for d in PUSH_ORDER:
        pushed = phase(cfg, keep, d, orders, bodies, marks)
        bodies, marks = pushed.bodies, pushed.marks
        forces.append(pushed.force)
    return bodies, marks, forces


def _deliver(cfg: EnvConfig, bodies: Bodies) -> Tuple[Bodies, jax.Array]:
    """The bodies with the blocks that reached column K-1 delivered, and those blocks (bool[B, E]).

    Only a RIGHT push can bring a block into column K-1 (no alive block touches it otherwise),
    and RIGHT is the last push phase, so delivering here is the same as delivering after every
    phase."""
    delivered = bodies.alive & (bodies.block_col + bodies.weight - 1 >= cfg.grid_size - 1)
    return bodies.replace(alive=bodies.alive & ~delivered), delivered


def _events(start: Bodies, end: Bodies, marks: Marks, delivered, forces: List) -> StepEvents:
    """What happened in the step (environment-last arrays)."""
    return StepEvents(
        block_moved=marks.moved,
        block_delivered=delivered,
        push_force=jnp.stack(forces),
        engaged=marks.engaged,
        agent_moved=(end.agent_row != start.agent_row) | (end.agent_col != start.agent_col),
        delivered_weight=jnp.where(delivered, end.weight, 0).sum(0, dtype=jnp.int32),
    )


def step_kernel(cfg: EnvConfig, ar, ac, br, bc, w, alive, actions):
    """One step on environment-last arrays: agents' rows and columns ``ar``, ``ac`` int32[N, E],
    blocks' rows, columns and weights ``br``, ``bc``, ``w`` int32[B, E], ``alive`` bool[B, E],
    ``actions`` int32[N, E].

    Returns the new ``(ar, ac, br, bc, alive)`` and the :class:`StepEvents` (environment-last).
    """
    orders = Orders(actions_or_stay(actions, jnp))
    start = Bodies(ar, ac, br, bc, w, alive)
    marks = Marks.none(ar.shape, br.shape)
    keep = jnp.any((orders.actions | 1) != 0)  # always True: the region predicate
    orders = _counted_lines(keep, orders, start)
    pushed, marks, forces = _push_phases(cfg, keep, orders, start, marks)
    bodies, delivered = _deliver(cfg, pushed)
    movement = movement_phase_folded if ar.shape[0] <= FOLD_MAX_AGENTS else movement_phase
    end = movement(cfg, keep, orders, bodies, marks.engaged)
    events = _events(start, end, marks, delivered, forces)
    return (end.agent_row, end.agent_col, end.block_row, end.block_col, end.alive), events


def step_kernel_tiled(cfg: EnvConfig, ar, ac, br, bc, w, alive, actions):
    """:func:`step_kernel` over tiles of environments on a CPU (see
    :data:`cube_jax.core.batching.TILE_ELEMENTS`), in one piece elsewhere; the same results."""
    return in_env_tiles(functools.partial(step_kernel, cfg), ar, ac, br, bc, w, alive, actions)


def actions_int32(actions) -> jax.Array:
    """``actions`` as int32. An integer outside 0..4 is STAY whatever its type: values of
    types wider than int32 (with x64 enabled) are mapped before the cast could wrap them
    into 0..4 (2**32 + 1 would become UP)."""
    actions = jnp.asarray(actions)
    if actions.dtype.itemsize > 4:
        actions = actions_or_stay(actions, jnp)
    return actions.astype(jnp.int32)


def step_state(cfg: EnvConfig, state: State, actions: jax.Array) -> Tuple[State, jax.Array, StepEvents]:
    """Applies one step to a state, or to a batch of states with any leading axes.

    Returns the new state, the delivered weight (int32 per environment) and the step
    events (see :func:`step_kernel`), all with the state's leading axes.
    """
    lead = state.t.shape
    pos = env_last(state.agent_pos, lead, 2)
    bpos = env_last(state.block_pos, lead, 2)
    acts = env_last(jnp.broadcast_to(actions_int32(actions), state.agent_pos.shape[:-1]), lead, 1)
    weight, alive = env_last(state.block_weight, lead, 1), env_last(state.block_alive, lead, 1)
    (ar, ac, br, bc, alive), events = step_kernel_tiled(cfg, pos[:, 0], pos[:, 1], bpos[:, 0], bpos[:, 1], weight,
                                                       alive, acts)
    new_state = state.replace(
        agent_pos=env_first(jnp.stack([ar, ac], axis=1), lead),
        block_pos=env_first(jnp.stack([br, bc], axis=1), lead),
        block_alive=env_first(alive, lead),
        t=state.t + 1,
    )
    events = jax.tree.map(lambda value: env_first(value, lead), events)
    return new_state, events.delivered_weight, events


@functools.lru_cache(maxsize=None)
def batched_step(cfg: EnvConfig):
    """``step_state`` for one environment whose ``jax.vmap`` runs the whole batch in one kernel."""
    return vmap_as_batch(functools.partial(step_state, cfg))


def reward_and_flags(cfg: EnvConfig, state: State, delivered_weight: jax.Array):
    """Shared reward ``-step_cost + D / N`` and the episode flags for a state after a step."""
    d_value = delivered_weight.astype(jnp.float32) * jnp.float32(cfg.deliver_reward)
    r = jnp.float32(-cfg.step_cost) + d_value / jnp.float32(cfg.num_agents)
    reward = jnp.broadcast_to(r[..., None], r.shape + (cfg.num_agents,))
    terminated = ~jnp.any(state.block_alive, axis=-1)
    truncated = (state.t >= cfg.max_steps) & ~terminated
    return reward, terminated, truncated
