"""What PPO's critic reads: the agent's own observation (IPPO) or a world state (MAPPO),
and the pre-reset input a truncated step is bootstrapped from."""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from cube_jax.core.observations import grid_observation
from cube_jax.core.wrappers import AutoResetWrapper, LogWrapper
from cube_jax.core.types import EnvConfig, State
from cube_jax.rl.policy import BLOCKED_FEATURES
from cube_jax.rl.shaping import ShapingWrapper


def world_vector(cfg: EnvConfig, state: State) -> jax.Array:
    """float32[2N + 4B + 1]: every agent's and block's position, block weights, alive flags, time."""
    scale = jnp.float32(max(cfg.grid_size - 1, 1))
    return jnp.concatenate(
        [
            state.agent_pos.reshape(-1).astype(jnp.float32) / scale,
            state.block_pos.reshape(-1).astype(jnp.float32) / scale,
            state.block_weight.astype(jnp.float32) / jnp.max(state.block_weight).astype(jnp.float32),
            state.block_alive.astype(jnp.float32),
            (state.t.astype(jnp.float32) / cfg.max_steps)[None],
        ]
    )


def critic_input(kind: str, cfg: EnvConfig, state: State, observation: jax.Array) -> jax.Array:
    """float32[N, C]: the critic's input for each agent of one environment.

    ``kind`` is ``"obs"`` (IPPO: the agent's own observation), ``"obs_world"`` (MAPPO:
    the agent's observation followed by the world vector), ``"world"`` or ``"grid"``
    (MAPPO: a global state shared by all agents, plus the agent's one-hot id).
    """
    n = cfg.num_agents
    own = observation.reshape(n, -1)
    if kind == "obs":
        return own
    if kind == "obs_world":
        world = world_vector(cfg, state)
        return jnp.concatenate([own, jnp.broadcast_to(world, (n, world.shape[0]))], axis=1)
    if kind == "world":
        world = world_vector(cfg, state)
    elif kind == "grid":
        world = grid_observation(state).reshape(-1)
    else:
        raise ValueError(f"critic input: unknown kind {kind!r}; expected 'obs', 'obs_world', 'world' or 'grid'")
    return jnp.concatenate([jnp.broadcast_to(world, (n, world.shape[0])), jnp.eye(n, dtype=jnp.float32)], axis=1)


class FinalCriticInputWrapper:
    """Adds ``extras["final_critic_input"]`` float32[N, C] of the state a step reached.

    Put under the auto-reset: the extras survive the reset, so a truncated step can be
    bootstrapped from the critic's value of the pre-reset state even when the critic
    looks at the world state rather than the observation.
    """

    def __init__(self, env, kind: str):
        self._env = env
        self.kind = kind

    def __getattr__(self, name):
        return getattr(self._env, name)

    def _with_input(self, state, ts):
        final = critic_input(self.kind, self._env.cfg, state, ts.observation)
        return state, ts.replace(extras=dict(ts.extras, final_critic_input=final))

    def reset(self, key):
        return self._with_input(*self._env.reset(key))

    def step(self, state, actions):
        return self._with_input(*self._env.step(state, actions))


def training_env(env, config, kind: str):
    """``env`` as PPO trains on it: shaped when ``shaping.enabled``, each step's critic input
    of the state it reached (:class:`FinalCriticInputWrapper`) kept under the auto-reset, and
    the episodes' statistics logged."""
    shaping = config.shaping
    if shaping.enabled:
        env = ShapingWrapper(env, config.train.gamma, shaping.align_weight, shaping.reach_weight, shaping.reach)
    # Where the critic reads observations, each step's own (pre-reset) observation is
    # computed for the bootstrap of truncated steps: the auto-reset reuses it.
    patch = kind in ("obs", "obs_world")
    return LogWrapper(AutoResetWrapper(FinalCriticInputWrapper(env, kind), patch_observations=patch))

def critic_inputs(ppo, env_state, obs: jax.Array) -> jax.Array:
    """float32[E, N, C] for the current (post-reset) states of a batch; with
    ``blocked_moves`` the critic's input of the world's observation, then the blocked
    features that end ``obs`` (for IPPO's critic: ``obs`` itself)."""
    base_state = env_state.env_state  # LogState -> the base State (the auto-reset keeps no wrapper state)
    world_obs = obs[..., :-BLOCKED_FEATURES] if ppo.blocked_moves else obs
    inputs = jax.vmap(lambda s, o: critic_input(ppo.critic_kind, ppo.env.cfg, s, o))(base_state, world_obs)
    return with_blocked(ppo, inputs, obs[..., -BLOCKED_FEATURES:]) if ppo.blocked_moves else inputs


def with_blocked(ppo, obs: jax.Array, blocked: Optional[jax.Array] = None) -> jax.Array:
    """``obs`` float32[E, N, D] followed by ``blocked`` float32[E, N, 4] (zeros: an episode's
    first step) where ``blocked_moves``; ``obs`` itself otherwise."""
    if not ppo.blocked_moves:
        return obs
    if blocked is None:
        blocked = jnp.zeros(obs.shape[:-1] + (BLOCKED_FEATURES,), obs.dtype)
    return jnp.concatenate([obs, blocked], axis=-1)
