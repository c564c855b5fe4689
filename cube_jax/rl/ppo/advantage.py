"""PPO's advantages: GAE over a rollout, truncated steps bootstrapped from the critic's value
of the state they reached before the reset."""
from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp

from cube_jax.rl.gae import bootstrap_values, gae
from cube_jax.rl.ppo.state import Transition


def final_values(ppo, critic_params, traj: Transition) -> jax.Array:
    """float32[T, E, N]: the critic's value of each step's pre-reset state, in one batched
    pass over the whole rollout; only truncated steps read it. A recurrent critic reads it
    with the hidden state it had after the step (before any reset), as one more step of
    the same episode."""
    if not ppo.recurrent:
        return truncated_values(ppo, critic_params, traj.final_critic_in, traj.truncated)
    no_reset = jnp.zeros((1,) + traj.value.shape, bool)
    return ppo.critic.apply(critic_params, traj.critic_hidden, traj.final_critic_in[None], no_reset)[1][0]


def truncated_values(ppo, critic_params, final_in: jax.Array, truncated: jax.Array) -> jax.Array:
    """float32[T, E, N]: the critic's values of ``final_in`` float32[T, E, N, C] at the steps
    where ``truncated`` bool[T, E]; elsewhere the value of an arbitrary step (never read).

    An environment is truncated at most once every ``max_steps`` steps, so a rollout has
    at most ``E * ceil(T / max_steps)`` truncated steps: the critic reads only those
    (gathered to a fixed number of rows) instead of all ``T * E`` of them.
    """
    steps, envs = truncated.shape
    rows = envs * -(-steps // ppo.env.max_steps)
    if rows >= steps * envs:
        return ppo.critic.apply(critic_params, final_in)
    flat_in = final_in.reshape((steps * envs,) + final_in.shape[2:])
    (where,) = jnp.nonzero(truncated.reshape(-1), size=rows, fill_value=0)
    values = ppo.critic.apply(critic_params, flat_in[where])  # [rows, N]
    out = jnp.zeros((steps * envs,) + values.shape[1:], values.dtype).at[where].set(values)
    return out.reshape((steps, envs) + values.shape[1:])


def advantages(ppo, critic_params, traj: Transition, last_value: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """(advantages, targets) float32[T, E, N] with truncation bootstrapped."""
    t = ppo.train_cfg
    finals = final_values(ppo, critic_params, traj)
    terminated = traj.terminated[..., None]
    truncated = traj.truncated[..., None]
    boot = bootstrap_values(traj.value, last_value, finals, terminated, truncated)
    return gae(traj.reward, traj.value, boot, terminated | truncated, t.gamma, t.gae_lambda)
