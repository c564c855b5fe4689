"""Wrappers for batched training: auto-reset and episode logging.

Both keep the pure ``reset(key)`` / ``step(state, actions)`` signatures, so they stack
and vmap like the base environment::

    env = LogWrapper(AutoResetWrapper(cube_jax.make(n=4)))
"""
from __future__ import annotations

from typing import Optional, Tuple

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax
from jax.custom_batching import custom_vmap

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
    the old episode is in ``extras["final_observation"]``.

    The new episode is always ``env.reset(state.key)`` with the key of the episode that
    ended, so it is exactly the episode a plain per-environment reset would start (same
    layout, same distribution, no correlation between environments), and its state holds
    a fresh key for the episode after it.

    Cost under ``jax.vmap``: the batched step resets only the environments that finished,
    ``resets_per_step`` (R) of them at a time. A step where no environment finished
    computes no reset at all; a step where more than R finished runs ceil(finished / R)
    rounds of R resets. The default R is ``max(4, E // 64)`` for a batch of E
    environments; it changes the cost only, never the result. Unbatched, the step resets
    through ``lax.cond``.

    Under ``vmap`` the observation returned is ``env.observe`` of the state after the
    resets, so a wrapper placed under this one that changes observations must change
    ``observe`` alike. ``extras["final_observation"]`` is the step's own observation; when
    it is used, the batch computes observations twice. With ``patch_observations`` the
    observation returned is instead the step's own with the fresh episodes' first
    observations written over their rows: observations are computed once when the step's
    own are used anyway (``final_observation``, or a wrapper under this one that reads
    them, as the trainers' bootstrap of truncated steps does), but a loop that never reads
    them pays for the writes (measured: about a fifth of the vector-observation loop at
    n = 4 of ``benchmarks/throughput.py``'s targets). The result is the same either way.
    """

    def __init__(self, env, resets_per_step: Optional[int] = None, patch_observations: bool = False):
        super().__init__(env)
        if resets_per_step is not None and (
            not isinstance(resets_per_step, int) or isinstance(resets_per_step, bool) or resets_per_step < 1
        ):
            raise ValueError(f"AutoResetWrapper: resets_per_step must be an integer >= 1, got {resets_per_step!r}")
        if not isinstance(patch_observations, bool):
            raise ValueError(f"AutoResetWrapper: patch_observations must be True or False, got {patch_observations!r}")
        self.resets_per_step = resets_per_step
        self.patch_observations = patch_observations
        self._auto_step = custom_vmap(self._step_one)
        self._auto_step.def_vmap(self._step_batch)

    def step(self, state: State, actions) -> Tuple[State, TimeStep]:
        return self._auto_step(state, actions)

    def reset(self, key):
        state, ts = self._env.reset(key)
        return state, ts.replace(extras=dict(ts.extras, final_observation=ts.observation))

    # -- one environment -------------------------------------------------------------------
    def _step_one(self, state, actions):
        state, ts = self._env.step(state, actions)

        def start_next(_):
            next_state, next_ts = self._env.reset(state.key)
            return next_state, next_ts.observation

        state, observation = lax.cond(ts.terminated | ts.truncated, start_next, lambda _: (state, ts.observation), None)
        return state, ts.replace(observation=observation, extras=dict(ts.extras, final_observation=ts.observation))

    # -- a batch: reset only the environments that finished -----------------------------------
    def _step_batch(self, axis_size, in_batched, state, actions):
        state, actions = (
            jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)), arg, batched)
            for arg, batched in zip((state, actions), in_batched)
        )
        state, ts = jax.vmap(self._env.step)(state, actions)
        done = ts.terminated | ts.truncated  # bool[E]
        rank = jnp.cumsum(done) - 1  # rank of each finished environment among the finished
        finished = jnp.sum(done, dtype=jnp.int32)
        r = min(axis_size, self.resets_per_step or max(4, axis_size // 64))

        def reset_rows(start, state):
            """The fresh start states of the finished environments ranked start .. start+R-1,
            with their observations (index E pads a round with fewer, and is dropped when
            written)."""
            # this round's slot of each environment (r, dropped, for those not reset in this round)
            slot = jnp.where(done & (rank >= start), rank - start, r)
            idx = jnp.full((r,), axis_size, jnp.int32).at[slot].set(jnp.arange(axis_size, dtype=jnp.int32), mode="drop")
            fresh_state, fresh_ts = jax.vmap(self._env.reset)(state.key[jnp.minimum(idx, axis_size - 1)])
            return idx, (fresh_state, fresh_ts.observation if self.patch_observations else None)

        def write(rows, carry):
            idx, fresh = rows
            return jax.tree.map(lambda old, new: old.at[idx].set(new, mode="drop"), carry, fresh)

        # First round: R resets inside a cond that returns only those R rows, written outside
        # it, so that a step where nothing finished costs (almost) nothing.
        no_rows = jax.tree.map(jnp.zeros_like, jax.eval_shape(lambda s: reset_rows(jnp.int32(0), s), state))
        no_rows = (jnp.full((r,), axis_size, jnp.int32), no_rows[1])
        # With patch_observations the fresh rows' first observations are written over the
        # step's own (see the class doc); otherwise they are not carried at all.
        carry = (state, ts.observation if self.patch_observations else None)
        carry = write(lax.cond(finished > 0, lambda s: reset_rows(jnp.int32(0), s), lambda s: no_rows, state), carry)

        # More than R finished (all at once, e.g. at the first truncation of a run): further
        # rounds, in a loop that does not run otherwise.
        carry = lax.while_loop(
            lambda c: c[0] < finished,
            lambda c: (c[0] + r, write(reset_rows(c[0], c[1][0]), c[1])),
            (jnp.int32(r), carry),
        )[1]
        state, observation = carry
        if not self.patch_observations:
            # The next observation is that of the state after the resets. Patching the fresh
            # rows into the step's observation instead would copy the whole (large)
            # observation at every step; this way the step's own observation is computed
            # only when final_observation is used.
            observation = jax.vmap(self._env.observe)(state)
        extras = dict(ts.extras, final_observation=ts.observation)
        out = (state, ts.replace(observation=observation, extras=extras))
        return out, jax.tree.map(lambda _: True, out)


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
        blocks = state.blocks_delivered + ts.events.block_delivered.sum(dtype=jnp.int32)
        weight = state.weight_delivered + ts.events.delivered_weight
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
