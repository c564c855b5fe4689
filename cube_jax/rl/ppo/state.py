"""What one seed's PPO training carries from update to update, and what a rollout records."""
from __future__ import annotations

from typing import Any, Dict

import jax
import jax.numpy as jnp
from flax import struct

from cube_jax.rl.networks import init_recurrent
from cube_jax.rl.ppo.critic import critic_inputs, with_blocked
from cube_jax.rl.trainer import stagger_start


@struct.dataclass
class Runner:
    """Everything one seed's training carries from update to update."""

    params: Any  # {"actor": ..., "critic": ...} shared by all agents
    opt_state: Any
    env_state: Any  # LogState batched over E environments
    obs: jax.Array  # float32[E, N, D] current observations (then the blocked_features with network.blocked_moves)
    key: jax.Array  # PRNG key
    update: jax.Array  # int32[] updates done so far


@struct.dataclass
class RecurrentRunner(Runner):
    """A :class:`Runner` of GRU networks (``network.recurrent``)."""

    hidden: Dict[str, jax.Array]  # {"actor", "critic"}: float32[E, N, H] before reading obs
    starts: jax.Array  # bool[E] obs is the first of an episode: the hidden states are zeroed before reading it


@struct.dataclass
class Transition:
    obs: jax.Array  # float32[E, N, D]
    critic_in: jax.Array  # float32[E, N, C]
    action: jax.Array  # int32[E, N]
    log_prob: jax.Array  # float32[E, N]
    value: jax.Array  # float32[E, N] (a feedforward critic's: read after the rollout, see PPO.collect)
    reward: jax.Array  # float32[E, N] (shaped when shaping is on)
    terminated: jax.Array  # bool[E]
    truncated: jax.Array  # bool[E]
    final_critic_in: jax.Array  # float32[E, N, C] critic input of the pre-reset state
    episode: Dict[str, jax.Array]  # LogWrapper statistics, each [E]
    start: Any = None  # recurrent only: bool[E] obs is the first of an episode
    critic_hidden: Any = None  # recurrent only: float32[E, N, H] the critic's state after reading critic_in


def init(ppo, key: jax.Array) -> Runner:
    """A fresh runner: new networks and optimizer, ``num_envs`` environments reset (their first
    episodes at random step counts with ``train.stagger_start``), and zeroed hidden states."""
    key, k_actor, k_critic, k_env = jax.random.split(key, 4)
    env_state, ts = jax.vmap(ppo.train_env.reset)(jax.random.split(k_env, ppo.num_envs))
    obs = ts.observation
    if ppo.train_cfg.stagger_start:
        env_state, obs = stagger_start(ppo.env, env_state, jax.random.fold_in(k_env, 1))
    obs = with_blocked(ppo, obs)
    sample_critic = critic_inputs(ppo, env_state, obs)[0, 0]
    if not ppo.recurrent:
        params = {
            "actor": ppo.actor.init(k_actor, obs[0, 0]),
            "critic": ppo.critic.init(k_critic, sample_critic),
        }
        return Runner(params, ppo.optimizer.init(params), env_state, obs, key, jnp.int32(0))
    params = {
        "actor": init_recurrent(ppo.actor, k_actor, obs[0, 0]),
        "critic": init_recurrent(ppo.critic, k_critic, sample_critic),
    }
    zeros = jnp.zeros((ppo.num_envs, ppo.num_agents, ppo.config.network.gru_hidden), jnp.float32)
    return RecurrentRunner(params, ppo.optimizer.init(params), env_state, obs, key, jnp.int32(0),
                           hidden={"actor": zeros, "critic": zeros}, starts=jnp.ones((ppo.num_envs,), bool))


def updates_done(ppo, runner: Runner) -> jax.Array:
    """int32[]: updates this runner has made."""
    return runner.update


def env_batched(ppo, runner: Runner) -> Runner:
    """Which leaves of ``runner`` have the env axis first: the environments, their
    observations and (recurrent) the hidden states and start flags."""
    batched = Runner(
        params=jax.tree.map(lambda _: False, runner.params),
        opt_state=jax.tree.map(lambda _: False, runner.opt_state),
        env_state=jax.tree.map(lambda _: True, runner.env_state),
        obs=True,
        key=False,
        update=False,
    )
    if not ppo.recurrent:
        return batched
    return RecurrentRunner(**vars(batched), hidden=jax.tree.map(lambda _: True, runner.hidden), starts=True)


def policy_params(ppo, runner: Runner):
    """The actor's parameters: what :func:`~cube_jax.rl.ppo.acting.evaluate` and a saved policy need."""
    return runner.params["actor"]
