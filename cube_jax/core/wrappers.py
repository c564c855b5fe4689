"""Wrappers for batched training: auto-reset and episode logging.

Both keep the pure ``reset(key)`` / ``step(state, actions)`` signatures, so they stack
and vmap like the base environment::

    env = LogWrapper(AutoResetWrapper(cube_jax.make(n=4, pool_size=4096)))
"""
from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
from flax import struct

from cube_jax.core.types import State, TimeStep


class Wrapper:
    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, key):
        return self._env.reset(key)

    def step(self, state, actions):
        return self._env.step(state, actions)


class AutoResetWrapper(Wrapper):
    """Starts a new episode inside ``step`` when the old one ends.

    The returned timestep keeps the ending step's reward, ``terminated`` and
    ``truncated`` (so terminated and truncated stay apart for bootstrapping), while its
    ``observation`` is the first observation of the new episode. The last observation of
    the old episode is in ``extras["final_observation"]``. Under ``vmap`` a reset is
    computed at every step and selected, so use a cheap reset (``pool_size``).
    """

    def step(self, state: State, actions) -> Tuple[State, TimeStep]:
        state, ts = self._env.step(state, actions)
        # The candidate next episode comes from the state's key; reset stores a fresh key
        # in the state it returns, so every episode of a run starts from a new key.
        reset_state, reset_ts = self._env.reset(state.key)
        done = ts.terminated | ts.truncated
        state = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_state, state)
        extras = dict(ts.extras, final_observation=ts.observation)
        observation = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_ts.observation, ts.observation)
        return state, ts.replace(observation=observation, extras=extras)

    def reset(self, key):
        state, ts = self._env.reset(key)
        return state, ts.replace(extras=dict(ts.extras, final_observation=ts.observation))


@struct.dataclass
class LogState:
    env_state: State
    episode_return: jax.Array  # float32[] running team return (per-agent reward, shared)
    episode_length: jax.Array  # int32[]
    blocks_delivered: jax.Array  # int32[] blocks delivered so far this episode
    weight_delivered: jax.Array  # int32[] summed weight delivered so far this episode
    returned: dict  # the last finished episode's statistics (see LogWrapper)


class LogWrapper(Wrapper):
    """Tracks episode return, length, blocks and weight delivered.

    Every timestep's ``extras`` gains ``episode_return``, ``episode_length``,
    ``blocks_delivered``, ``weight_delivered``, ``success`` (all blocks delivered) of the
    most recently finished episode, and ``returned_episode`` (bool) which is True exactly
    on the step that finished one, so averaging over those steps gives unbiased episode
    statistics. Put it outside :class:`AutoResetWrapper`.
    """

    def _zero_returned(self):
        return {
            "episode_return": jnp.float32(0.0),
            "episode_length": jnp.int32(0),
            "blocks_delivered": jnp.int32(0),
            "weight_delivered": jnp.int32(0),
            "success": jnp.array(False),
        }

    def reset(self, key):
        env_state, ts = self._env.reset(key)
        returned = self._zero_returned()
        state = LogState(env_state, jnp.float32(0.0), jnp.int32(0), jnp.int32(0), jnp.int32(0), returned)
        extras = dict(ts.extras, **returned, returned_episode=jnp.array(False))
        return state, ts.replace(extras=extras)

    def step(self, state: LogState, actions):
        env_state, ts = self._env.step(state.env_state, actions)
        done = ts.terminated | ts.truncated
        ret = state.episode_return + ts.reward[0]
        length = state.episode_length + 1
        blocks = state.blocks_delivered + ts.extras["block_delivered"].sum(dtype=jnp.int32)
        weight = state.weight_delivered + ts.extras["delivered_weight"]
        finished = {
            "episode_return": ret,
            "episode_length": length,
            "blocks_delivered": blocks,
            "weight_delivered": weight,
            "success": ts.terminated,
        }
        returned = jax.tree.map(lambda f, old: jnp.where(done, f, old), finished, state.returned)
        keep = ~done
        state = LogState(
            env_state,
            ret * keep,
            length * keep,
            blocks * keep,
            weight * keep,
            returned,
        )
        extras = dict(ts.extras, **returned, returned_episode=done)
        return state, ts.replace(extras=extras)
