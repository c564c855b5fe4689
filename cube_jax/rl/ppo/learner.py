"""The PPO learner: the configured world, networks and sizes, with the rollout, advantage,
update and acting functions of its sibling modules as its methods."""
from __future__ import annotations

from typing import Optional

import optax

import cube_jax
from cube_jax.rl import algorithms
from cube_jax.rl.config import Config, env_kwargs
from cube_jax.rl.networks import build_networks
from cube_jax.rl.ppo import acting, advantage, critic, rollout, state
from cube_jax.rl.ppo import update as updating


class PPO:
    """IPPO/MAPPO for one seed; vmap its methods over seeds.

    The methods are the functions of :mod:`~cube_jax.rl.ppo.state`, ``rollout``, ``advantage``,
    ``update`` and ``acting``, each of which takes the learner first.

    ``axis_name`` is None except in the copy :func:`~cube_jax.rl.trainer.data_parallel` makes
    for one device's share of the environments (the driver's ``shard_map`` over a device
    mesh): there the rollout noise and the minibatch shuffle are the device's own, the
    gradients, the advantages' normalisation and the statistics are over every device.
    """

    axis_name: Optional[str] = None

    def __init__(self, config: Config):
        self.config = config
        self.train_cfg = t = config.train
        self.env_kwargs = env_kwargs(config)
        self.env = cube_jax.make(**self.env_kwargs)
        self.critic_kind = algorithms.of(config).critic_kind(config)
        self.train_env = critic.training_env(self.env, config, self.critic_kind)
        shaping = config.shaping
        self.shaping_coef = float(shaping.coef) if shaping.enabled else 0.0
        self.dense_coef = float(shaping.dense_coef) if shaping.enabled else 0.0
        # The actor flattens every feature axis of one agent's observation (several for "grid").
        feature_dims = len(self.env.observation_shape) - 1
        # IPPO's critic reads the observation as it is when it is a vector: the samples hold it once.
        self.critic_reads_obs = self.critic_kind == "obs" and feature_dims == 1
        self.actor, self.critic = build_networks(config.network.model_dump(), self.env.num_actions, feature_dims)
        self.recurrent = config.network.recurrent
        # network.blocked_moves: the networks' inputs end with blocked_features of the step that reached them.
        self.blocked_moves = config.network.blocked_moves
        self.num_envs, self.num_steps = t.num_envs, t.num_steps
        self.num_updates = t.total_timesteps // (self.num_envs * self.num_steps)
        self.num_agents = self.env.num_agents
        self.batch_size = self.num_envs * self.num_steps * self.num_agents  # samples per update
        self.minibatch_size = self.batch_size // t.num_minibatches
        # a recurrent minibatch is whole environments: a device's share must split into them
        self.env_multiple = t.num_minibatches if self.recurrent else 1
        # The learning rate is applied in _minibatch_step rather than inside optax so that the
        # annealing horizon (total updates) is a traced value: a resumed run with a longer
        # budget reuses the compiled program.
        self.optimizer = optax.chain(optax.clip_by_global_norm(t.max_grad_norm), optax.scale_by_adam(eps=1e-5))
        # trainer.shuffle_indices's method for the samples (benchmarks/profile_parts.py sets "sort"
        # to time the update with the shuffle it replaced)
        self.shuffle_method = "auto"

    @property
    def steps_per_update(self) -> int:
        """Environment steps of one update (each moves every agent of one environment)."""
        return self.num_envs * self.num_steps

    # -- the Trainer interface (cube_jax.rl.trainer.Trainer) ------------------------------------
    init = state.init
    updates_done = state.updates_done
    env_batched = state.env_batched
    policy_params = state.policy_params
    update = updating.update
    evaluate = acting.evaluate

    # -- its pieces --------------------------------------------------------------------------------
    learning_rate = updating.learning_rate
    entropy_coef = updating.entropy_coef
    actor_weight = updating.actor_weight
    critic_inputs = critic.critic_inputs
    _with_blocked = critic.with_blocked
    collect = rollout.collect
    _env_step = rollout.env_step
    advantages = advantage.advantages
    _final_values = advantage.final_values
    minibatches = updating.minibatches
    replay = updating.replay
    _replay_minibatch = updating.replay_minibatch
    _minibatch_step = updating.minibatch_step
    act = acting.act
    batched_policy = acting.batched_policy
