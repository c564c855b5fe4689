"""State, timestep and static configuration of a CUBE world.

Shapes use ``N`` for the number of agents, ``B`` for the (maximum) number of
blocks and ``K`` for the side of the square grid. All are static: they fix the
shapes of every array, so one compiled step serves every world of that size.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict

import jax
import jax.numpy as jnp
from flax import struct

# Primitive actions (DYNAMICS.md), declared in cube_jax.names. Any other integer is STAY.
from cube_jax.names import ACTION_NAMES, DOWN, LEFT, NUM_ACTIONS, RIGHT, STAY, UP
# (row, col) displacement of each action, indexed by action id.
ACTION_DELTAS = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))
# Push phases run in this fixed order.
PUSH_ORDER = (UP, DOWN, LEFT, RIGHT)


@struct.dataclass
class State:
    """Everything that changes during an episode.

    ``grid_size`` is static (not traced) so that observations and ``layout`` can
    be computed from the state alone.
    """

    agent_pos: jax.Array  # int32[N, 2] (row, col) of each agent, index = agent id
    block_pos: jax.Array  # int32[B, 2] (row, col) of each block's top-left cell
    block_weight: jax.Array  # int32[B] weight w: the block covers a w x w square
    block_alive: jax.Array  # bool[B] False once delivered (a delivered block covers no cell)
    t: jax.Array  # int32[] steps taken in this episode
    key: jax.Array  # PRNG key (uint32[2]) used by auto-reset; step itself draws nothing
    grid_size: int = struct.field(pytree_node=False, default=0)


@struct.dataclass
class StepEvents:
    """What happened during one step, beyond the new positions (all zero after a reset).

    Shapes are for one environment; a batched step adds the batch's leading axes.
    """

    block_moved: jax.Array  # bool[B] the block moved in a push phase of this step
    block_delivered: jax.Array  # bool[B] the block reached the goal column in this step
    push_force: jax.Array  # int32[4, B] F_j of each push phase (UP, DOWN, LEFT, RIGHT): agents in chains on block j
    engaged: jax.Array  # bool[N] the agent was in a pushing chain in some push phase
    agent_moved: jax.Array  # bool[N] the agent ends the step on another cell (pushing or moving)
    delivered_weight: jax.Array  # int32[] total weight delivered in this step (the reward's D)

    @classmethod
    def zeros(cls, num_agents: int, num_blocks: int) -> "StepEvents":
        """The events of a reset: nothing happened."""
        return cls(
            block_moved=jnp.zeros((num_blocks,), bool),
            block_delivered=jnp.zeros((num_blocks,), bool),
            push_force=jnp.zeros((4, num_blocks), jnp.int32),
            engaged=jnp.zeros((num_agents,), bool),
            agent_moved=jnp.zeros((num_agents,), bool),
            delivered_weight=jnp.zeros((), jnp.int32),
        )


@struct.dataclass
class TimeStep:
    """What a step (or reset) returns besides the new state.

    ``events`` is the core's typed record of the step; ``extras`` is where wrappers add
    what they compute (``final_observation``, episode statistics, shaping terms), empty
    straight out of the core.
    """

    observation: Any  # per-agent observation, see cube_jax.core.observations
    reward: jax.Array  # float32[N] the shared team reward, one entry per agent
    terminated: jax.Array  # bool[] every block delivered
    truncated: jax.Array  # bool[] t >= max_steps and not terminated
    events: StepEvents
    extras: Dict[str, jax.Array] = struct.field(default_factory=dict)

    @property
    def done(self) -> jax.Array:
        return self.terminated | self.truncated


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Static description of a world family; hashable so it keys the jit cache."""

    grid_size: int
    num_agents: int
    num_blocks: int
    max_steps: int
    step_cost: float = 0.01
    deliver_reward: float = 1.0
    observation: str = "vector"
    view_radius: int = 3
