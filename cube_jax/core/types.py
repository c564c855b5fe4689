"""State, timestep and static configuration of a CUBE world.

Shapes use ``N`` for the number of agents, ``B`` for the (maximum) number of
blocks and ``K`` for the side of the square grid. All are static: they fix the
shapes of every array, so one compiled step serves every world of that size.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict

import jax
from flax import struct

# Primitive actions (DYNAMICS.md). Any other integer is STAY inside the jitted core.
STAY, UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3, 4
NUM_ACTIONS = 5
ACTION_NAMES = ("STAY", "UP", "DOWN", "LEFT", "RIGHT")
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
class TimeStep:
    """What a step (or reset) returns besides the new state."""

    observation: Any  # per-agent observation, see cube_jax.core.observations
    reward: jax.Array  # float32[N] the shared team reward, one entry per agent
    terminated: jax.Array  # bool[] every block delivered
    truncated: jax.Array  # bool[] t >= max_steps and not terminated
    extras: Dict[str, jax.Array]  # step events, see cube_jax.core.dynamics.StepEvents

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
