"""IPPO and MAPPO on CUBE, trained end to end inside jitted programs (PureJaxRL style).

One set of actor/critic parameters is shared by every agent: observations are
``float32[E, N, D]`` and the agent axis ``N`` is a batch axis like the env axis ``E``
(each observation carries the agent's one-hot id). The two algorithms differ only in
what the critic sees:

* IPPO: the agent's own observation;
* MAPPO: a global state: the compact world vector (:func:`world_vector`) plus the
  agent's one-hot id (``"world"``, the default), the world vector next to the agent's
  own observation (``"obs_world"``), or the flattened five-channel grid plus the id.

``make_train(config)`` returns ``train(key)``: rollouts and updates in nested
``lax.scan``s, the whole run one jitted program; ``jax.vmap(train)(keys)`` trains several
seeds at once. :class:`PPO` is a :class:`~cube_jax.rl.trainer.Trainer`: the driver
(:mod:`cube_jax.rl.run`) runs the same updates (:func:`~cube_jax.rl.trainer.update_chunk`)
in jitted chunks to show progress, save checkpoints and shard the env batch over a device
mesh.

With ``network.recurrent`` the actor and the critic are GRUs
(:class:`~cube_jax.rl.networks.RecurrentActor`, :class:`~cube_jax.rl.networks.RecurrentCritic`),
as in JaxMARL's IPPO-RNN and MAPPO-RNN. The runner then carries both hidden states
``float32[E, N, H]`` and whether each env's current observation starts an episode (where
the states are zeroed before they read it). A rollout keeps the hidden states it started
from and each step's start flags; the update replays the GRUs over the rollout from there,
with minibatches of whole environments' sequences rather than of single steps. A truncated
step is bootstrapped from the critic's value of the pre-reset state read with the hidden
state the critic had after that step, before the reset: the cut episode's memory, one
step further.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

import cube_jax
from cube_jax.core.observations import grid_observation
from cube_jax.evaluation.batched import rollout, summarize
from cube_jax.rl.config import Config, env_kwargs
from cube_jax.rl.gae import bootstrap_values, gae
from cube_jax.rl.networks import build_networks, init_recurrent
from cube_jax.rl.policy import BLOCKED_FEATURES, ActorPolicy, RecurrentActorPolicy, blocked_features
from cube_jax.rl.shaping import ShapingWrapper
from cube_jax.rl.trainer import (across_devices, episode_metrics, local_key, run_epochs, shuffle_indices,
                                 stagger_start, update_chunk)
from cube_jax.core.types import EnvConfig, State
from cube_jax.core.wrappers import AutoResetWrapper, LogWrapper


# --- what the critic sees --------------------------------------------------------------------
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


# --- the training state ----------------------------------------------------------------------
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


def policy_terms(logits: jax.Array, action: jax.Array, axis: int = -1) -> Tuple[jax.Array, jax.Array]:
    """``(log-probability of action, entropy)`` of categorical policies whose ``logits`` have
    their actions along ``axis`` (int ``action`` has every other axis of ``logits``): what
    ``distrax.Categorical(logits).log_prob(action)`` and ``.entropy()`` give, for either layout."""
    log_p = jax.nn.log_softmax(logits, axis=axis)
    chosen = jax.lax.broadcasted_iota(jnp.int32, logits.shape, axis % logits.ndim) == jnp.expand_dims(action, axis)
    log_prob = jnp.sum(jnp.where(chosen, log_p, 0.0), axis=axis)
    return log_prob, -jnp.sum(jnp.exp(log_p) * log_p, axis=axis)


def sample_categorical(logits: jax.Array, uniform: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """``(action int32[...], its log-probability float32[...])``: a sample of the categorical
    policies ``logits`` float32[..., A] by inversion, ``uniform`` float32[...] in [0, 1) being
    one uniform number per policy: the action is the first whose cumulative probability
    exceeds it. One random number per sample instead of the A of a Gumbel argmax."""
    below = jnp.cumsum(jnp.exp(jax.nn.log_softmax(logits, axis=-1)), axis=-1) <= uniform[..., None]
    action = jnp.minimum(jnp.sum(below, axis=-1), logits.shape[-1] - 1).astype(jnp.int32)
    return action, policy_terms(logits, action)[0]


class PPO:
    """IPPO/MAPPO for one seed; vmap its methods over seeds.

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
        self.critic_kind = "obs" if config.algo == "ippo" else config.network.critic_input
        env = self.env
        shaping = config.shaping
        if shaping.enabled:
            env = ShapingWrapper(env, t.gamma, shaping.align_weight, shaping.reach_weight, shaping.reach)
        # Where the critic reads observations, each step's own (pre-reset) observation is
        # computed for the bootstrap of truncated steps: the auto-reset reuses it.
        patch = self.critic_kind in ("obs", "obs_world")
        self.train_env = LogWrapper(AutoResetWrapper(FinalCriticInputWrapper(env, self.critic_kind), patch_observations=patch))
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

    def learning_rate(self, updates_done: jax.Array, num_updates: jax.Array) -> jax.Array:
        """float32[]: ``lr``, linearly annealed to 0 over ``num_updates`` when ``anneal_lr``."""
        t = self.train_cfg
        if not t.anneal_lr:
            return jnp.float32(t.lr)
        return t.lr * jnp.maximum(1.0 - updates_done.astype(jnp.float32) / num_updates, 0.0)

    def entropy_coef(self, updates_done: jax.Array, num_updates: jax.Array) -> jax.Array:
        """float32[]: ``ent_coef``, or with ``ent_coef_final`` set, linearly from ``ent_coef``
        to it over ``num_updates`` (the learning rate's horizon)."""
        t = self.train_cfg
        if t.ent_coef_final is None:
            return jnp.float32(t.ent_coef)
        progress = jnp.minimum(updates_done.astype(jnp.float32) / num_updates, 1.0)
        return jnp.float32(t.ent_coef) + (t.ent_coef_final - t.ent_coef) * progress

    # -- pieces ---------------------------------------------------------------------------------
    def critic_inputs(self, env_state, obs: jax.Array) -> jax.Array:
        """float32[E, N, C] for the current (post-reset) states of a batch; with
        ``blocked_moves`` the critic's input of the world's observation, then the blocked
        features that end ``obs`` (for IPPO's critic: ``obs`` itself)."""
        base_state = env_state.env_state  # LogState -> the base State (the auto-reset keeps no wrapper state)
        world_obs = obs[..., :-BLOCKED_FEATURES] if self.blocked_moves else obs
        inputs = jax.vmap(lambda s, o: critic_input(self.critic_kind, self.env.cfg, s, o))(base_state, world_obs)
        return self._with_blocked(inputs, obs[..., -BLOCKED_FEATURES:]) if self.blocked_moves else inputs

    def _with_blocked(self, obs: jax.Array, blocked: Optional[jax.Array] = None) -> jax.Array:
        """``obs`` float32[E, N, D] followed by ``blocked`` float32[E, N, 4] (zeros: an episode's
        first step) where ``blocked_moves``; ``obs`` itself otherwise."""
        if not self.blocked_moves:
            return obs
        if blocked is None:
            blocked = jnp.zeros(obs.shape[:-1] + (BLOCKED_FEATURES,), obs.dtype)
        return jnp.concatenate([obs, blocked], axis=-1)

    def init(self, key: jax.Array) -> Runner:
        key, k_actor, k_critic, k_env = jax.random.split(key, 4)
        env_state, ts = jax.vmap(self.train_env.reset)(jax.random.split(k_env, self.num_envs))
        obs = ts.observation
        if self.train_cfg.stagger_start:
            env_state, obs = stagger_start(self.env, env_state, jax.random.fold_in(k_env, 1))
        obs = self._with_blocked(obs)
        sample_critic = self.critic_inputs(env_state, obs)[0, 0]
        if not self.recurrent:
            params = {
                "actor": self.actor.init(k_actor, obs[0, 0]),
                "critic": self.critic.init(k_critic, sample_critic),
            }
            return Runner(params, self.optimizer.init(params), env_state, obs, key, jnp.int32(0))
        params = {
            "actor": init_recurrent(self.actor, k_actor, obs[0, 0]),
            "critic": init_recurrent(self.critic, k_critic, sample_critic),
        }
        zeros = jnp.zeros((self.num_envs, self.num_agents, self.config.network.gru_hidden), jnp.float32)
        return RecurrentRunner(params, self.optimizer.init(params), env_state, obs, key, jnp.int32(0),
                               hidden={"actor": zeros, "critic": zeros}, starts=jnp.ones((self.num_envs,), bool))

    def updates_done(self, runner: Runner) -> jax.Array:
        """int32[]: updates this runner has made."""
        return runner.update

    def env_batched(self, runner: Runner) -> Runner:
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
        if not self.recurrent:
            return batched
        return RecurrentRunner(**vars(batched), hidden=jax.tree.map(lambda _: True, runner.hidden), starts=True)

    def policy_params(self, runner: Runner):
        """The actor's parameters: what :meth:`evaluate` and a saved policy need."""
        return runner.params["actor"]

    def _agent_starts(self, starts: jax.Array) -> jax.Array:
        """bool[1, E, N]: an env's start flags ``bool[E]`` for each of its agents, as one time step."""
        return jnp.broadcast_to(starts[:, None], (starts.shape[0], self.num_agents))[None]

    def _read_step(self, runner: Runner, critic_in: jax.Array):
        """``(logits float32[E, N, A], values float32[E, N], runner)`` for the current
        observations; a recurrent runner comes back with its hidden states advanced. A
        feedforward critic is not read here (``values`` is None): :meth:`collect` reads the
        whole rollout's values in one pass after it, where the products are large enough to
        run at full speed."""
        if not self.recurrent:
            return self.actor.apply(runner.params["actor"], runner.obs), None, runner  # [E, N, A]
        resets = self._agent_starts(runner.starts)
        params, hidden = runner.params, runner.hidden
        actor_hidden, logits = self.actor.apply(params["actor"], hidden["actor"], runner.obs[None], resets)
        critic_hidden, value = self.critic.apply(params["critic"], hidden["critic"], critic_in[None], resets)
        return logits[0], value[0], runner.replace(hidden={"actor": actor_hidden, "critic": critic_hidden})

    def _env_step(self, runner: Runner, uniform: jax.Array) -> Tuple[Runner, Transition]:
        """One step of every environment; ``uniform`` float32[E, N] in [0, 1) draws each
        agent's action from its categorical policy (:func:`sample_categorical`)."""
        critic_in = self.critic_inputs(runner.env_state, runner.obs)
        before = runner
        logits, value, runner = self._read_step(runner, critic_in)
        action, log_prob = sample_categorical(logits, uniform)
        env_state, ts = jax.vmap(self.train_env.step)(runner.env_state, action)
        reward = ts.reward
        if self.shaping_coef or self.dense_coef:
            shaped = self.shaping_coef * ts.extras["shaping"] + self.dense_coef * ts.extras["potential"]
            reward = reward + shaped[:, None]
        episode = {
            k: ts.extras[k]
            for k in ("returned_episode", "episode_return", "episode_length", "blocks_delivered", "success")
        }
        final_critic_in, next_obs = ts.extras["final_critic_input"], ts.observation
        if self.blocked_moves:
            blocked = blocked_features(action, ts.events.agent_moved)  # of the state this step reached
            final_critic_in = jnp.concatenate([final_critic_in, blocked], axis=-1)
            fresh = (ts.terminated | ts.truncated)[:, None, None]  # a reset's first observation has none
            next_obs = self._with_blocked(next_obs, jnp.where(fresh, 0.0, blocked))
        transition = Transition(
            runner.obs, critic_in, action, log_prob, value, reward,
            ts.terminated, ts.truncated, final_critic_in, episode,
        )
        runner = runner.replace(env_state=env_state, obs=next_obs)
        if self.recurrent:
            transition = transition.replace(start=before.starts, critic_hidden=runner.hidden["critic"])
            runner = runner.replace(starts=ts.terminated | ts.truncated)
        return runner, transition

    def _last_value(self, runner: Runner) -> jax.Array:
        """float32[E, N]: the critic's value of the observations after the rollout."""
        critic_in = self.critic_inputs(runner.env_state, runner.obs)
        if not self.recurrent:
            return self.critic.apply(runner.params["critic"], critic_in)
        return self._read_step(runner, critic_in)[1]

    def _final_values(self, critic_params, traj: Transition) -> jax.Array:
        """float32[T, E, N]: the critic's value of each step's pre-reset state, in one batched
        pass over the whole rollout; only truncated steps read it. A recurrent critic reads it
        with the hidden state it had after the step (before any reset), as one more step of
        the same episode."""
        if not self.recurrent:
            return self._truncated_values(critic_params, traj.final_critic_in, traj.truncated)
        no_reset = jnp.zeros((1,) + traj.value.shape, bool)
        return self.critic.apply(critic_params, traj.critic_hidden, traj.final_critic_in[None], no_reset)[1][0]

    def _truncated_values(self, critic_params, final_in: jax.Array, truncated: jax.Array) -> jax.Array:
        """float32[T, E, N]: the critic's values of ``final_in`` float32[T, E, N, C] at the steps
        where ``truncated`` bool[T, E]; elsewhere the value of an arbitrary step (never read).

        An environment is truncated at most once every ``max_steps`` steps, so a rollout has
        at most ``E * ceil(T / max_steps)`` truncated steps: the critic reads only those
        (gathered to a fixed number of rows) instead of all ``T * E`` of them.
        """
        steps, envs = truncated.shape
        rows = envs * -(-steps // self.env.max_steps)
        if rows >= steps * envs:
            return self.critic.apply(critic_params, final_in)
        flat_in = final_in.reshape((steps * envs,) + final_in.shape[2:])
        (where,) = jnp.nonzero(truncated.reshape(-1), size=rows, fill_value=0)
        values = self.critic.apply(critic_params, flat_in[where])  # [rows, N]
        out = jnp.zeros((steps * envs,) + values.shape[1:], values.dtype).at[where].set(values)
        return out.reshape((steps, envs) + values.shape[1:])

    def advantages(self, critic_params, traj: Transition, last_value: jax.Array) -> Tuple[jax.Array, jax.Array]:
        """(advantages, targets) float32[T, E, N] with truncation bootstrapped."""
        t = self.train_cfg
        final_values = self._final_values(critic_params, traj)
        terminated = traj.terminated[..., None]
        truncated = traj.truncated[..., None]
        boot = bootstrap_values(traj.value, last_value, final_values, terminated, truncated)
        return gae(traj.reward, traj.value, boot, terminated | truncated, t.gamma, t.gae_lambda)

    def replay(self, params, batch: Dict[str, Any]) -> Tuple[jax.Array, jax.Array]:
        """``(logits float32[..., A], values float32[...])`` of a batch of samples (or a
        minibatch) under ``params``; a recurrent batch (``[T, E', N, ...]`` steps) is replayed
        through the GRUs from its ``hidden`` states, zeroed where ``start``."""
        critic_in = batch["obs"] if self.critic_reads_obs else batch["critic_in"]
        if not self.recurrent:
            return self.actor.apply(params["actor"], batch["obs"]), self.critic.apply(params["critic"], critic_in)
        hidden = batch["hidden"]
        _, logits = self.actor.apply(params["actor"], hidden["actor"], batch["obs"], batch["start"])
        _, value = self.critic.apply(params["critic"], hidden["critic"], critic_in, batch["start"])
        return logits, value

    def _replay_minibatch(self, params, batch: Dict[str, Any]) -> Tuple[jax.Array, jax.Array, int]:
        """``(logits, values, action axis)`` of a minibatch as :meth:`minibatches` lays it out.
        Feedforward networks read their inputs one per column (``obs_columns`` float32[F, b],
        and ``critic_columns`` where the critic reads something else) and give the logits as
        float32[A, b]: the layout whose weight gradients are fast on the CPU
        (:func:`~cube_jax.rl.networks.mlp_columns`). Recurrent ones are :meth:`replay`."""
        if self.recurrent:
            return self.replay(params, batch) + (-1,)
        obs = batch["obs_columns"]
        critic_in = obs if self.critic_reads_obs else batch["critic_columns"]
        return self.actor.columns(params["actor"], obs), self.critic.columns(params["critic"], critic_in), 0

    def _loss(self, params, batch: Dict[str, jax.Array], ent_coef: jax.Array):
        t = self.train_cfg
        logits, value, axis = self._replay_minibatch(params, batch)
        log_prob, entropy = policy_terms(logits, batch["action"], axis)
        # Clipped value loss keeps the critic from jumping far from the values the data was collected with.
        value_clipped = batch["value"] + jnp.clip(value - batch["value"], -t.clip_eps, t.clip_eps)
        value_loss = 0.5 * jnp.mean(
            jnp.maximum(jnp.square(value - batch["target"]), jnp.square(value_clipped - batch["target"]))
        )
        adv = batch["advantage"]
        if self.axis_name is None:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        else:  # normalised over the whole minibatch: every device's part of it
            mean = across_devices(adv.mean(), self.axis_name)
            var = across_devices(jnp.mean(jnp.square(adv - mean)), self.axis_name)
            adv = (adv - mean) / (jnp.sqrt(var) + 1e-8)
        log_ratio = log_prob - batch["log_prob"]
        ratio = jnp.exp(log_ratio)
        policy_loss = -jnp.mean(
            jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - t.clip_eps, 1.0 + t.clip_eps) * adv)
        )
        entropy = jnp.mean(entropy)
        total = policy_loss + t.vf_coef * value_loss - ent_coef * entropy
        stats = {
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
            "clip_frac": jnp.mean((jnp.abs(ratio - 1.0) > t.clip_eps).astype(jnp.float32)),
        }
        return total, stats

    def _minibatch_step(self, carry, batch, coefs):
        lr, ent_coef = coefs
        params, opt_state = carry
        grads, stats = jax.grad(self._loss, has_aux=True)(params, batch, ent_coef)
        grads = across_devices(grads, self.axis_name)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: -lr * u, updates)
        return (optax.apply_updates(params, updates), opt_state), stats

    def minibatches(self, key: jax.Array, samples: Dict[str, Any]) -> Dict[str, Any]:
        """``samples`` shuffled and split into ``num_minibatches`` along a new leading axis:
        single agent steps, or (recurrent) whole environments' sequences, so the GRUs replay
        each one from the hidden state it started the rollout with. Single steps hold their
        network inputs one sample per column: ``obs_columns`` float32[m, F, b] (and
        ``critic_columns``) in place of ``obs`` (and ``critic_in``), as
        :meth:`_replay_minibatch` reads them."""
        m = self.train_cfg.num_minibatches
        if not self.recurrent:
            perm = shuffle_indices(key, self.batch_size, self.shuffle_method)
            out = {k: v[perm].reshape((m, self.minibatch_size) + v.shape[1:]) for k, v in samples.items()}
            for key_in, key_out in (("obs", "obs_columns"), ("critic_in", "critic_columns")):
                if key_in in out:  # [m, b, *F] -> [m, F, b]: what the networks' ``columns`` read
                    x = out.pop(key_in)
                    out[key_out] = jnp.swapaxes(x.reshape(x.shape[:2] + (-1,)), 1, 2)
            return out
        perm = shuffle_indices(key, self.num_envs)

        def split(x, env_axis):  # [..., E, ...] -> [m, ..., E / m, ...]
            x = jnp.take(x, perm, axis=env_axis)
            x = x.reshape(x.shape[:env_axis] + (m, self.num_envs // m) + x.shape[env_axis + 1:])
            return jnp.moveaxis(x, env_axis, 0)

        steps = {k: split(v, 1) for k, v in samples.items() if k != "hidden"}  # time-major [T, E, N, ...]
        return {**steps, "hidden": jax.tree.map(lambda x: split(x, 0), samples["hidden"])}  # [E, N, H]

    def _epoch(self, carry, key, samples, coefs):
        # The named scopes label the update's parts in a profile (op_name metadata; no change
        # to the program): benchmarks/profile_parts.py --sections thunks sums time by them.
        with jax.named_scope("shuffle"):
            minibatches = self.minibatches(local_key(key, self.axis_name), samples)

        def step(c, b):
            with jax.named_scope("minibatch_step"):
                return self._minibatch_step(c, b, coefs)

        return jax.lax.scan(step, carry, minibatches)

    def collect(self, runner: Runner) -> Tuple[Runner, Transition, Dict[str, Any]]:
        """A rollout of num_steps and its GAE: ``(runner, trajectory [T, E, ...], samples)``.

        The samples are flat ``[T * E * N, ...]`` agent steps, or (recurrent) time-major
        ``[T, E, N, ...]`` with each step's ``start`` flags and the ``hidden`` states
        ``[E, N, H]`` the rollout started from. ``critic_in`` is among them only where the
        critic reads something other than the vector observation (MAPPO, or a grid).
        """
        initial_hidden = runner.hidden if self.recurrent else None
        # The whole rollout's sampling noise in one draw, one number per agent step: on the
        # CPU every draw is a loop of its own, which cost more than the actor and the critic
        # in each step.
        key, k_noise = jax.random.split(runner.key)
        uniform = jax.random.uniform(local_key(k_noise, self.axis_name), (self.num_steps,) + runner.obs.shape[:2])
        with jax.named_scope("rollout"):
            runner, traj = jax.lax.scan(self._env_step, runner.replace(key=key), uniform)
        with jax.named_scope("values_and_gae"):
            if not self.recurrent:
                critic_in = traj.obs if self.critic_reads_obs else traj.critic_in
                traj = traj.replace(value=self.critic.apply(runner.params["critic"], critic_in))  # [T, E, N]
            last_value = self._last_value(runner)
            advantage, target = self.advantages(runner.params["critic"], traj, last_value)

        def flat(x):  # [T, E, N, ...] -> [T*E*N, ...]: agents are samples like envs and steps
            return x if self.recurrent else x.reshape((self.batch_size,) + x.shape[3:])

        samples = {
            "obs": flat(traj.obs),
            "action": flat(traj.action),
            "log_prob": flat(traj.log_prob),
            "value": flat(traj.value),
            "advantage": flat(advantage),
            "target": flat(target),
        }
        if not self.critic_reads_obs:
            samples["critic_in"] = flat(traj.critic_in)
        if self.recurrent:
            samples["start"] = jnp.broadcast_to(traj.start[..., None], traj.action.shape)
            samples["hidden"] = initial_hidden
        return runner, traj, samples

    def update(self, runner: Runner, num_updates=None) -> Tuple[Runner, Dict[str, jax.Array]]:
        """One PPO update: a rollout of num_steps, GAE, update_epochs over shuffled minibatches.

        ``num_updates`` (int or int32[], default the config's budget) is the horizon the
        learning rate anneals over.
        """
        num_updates = self.num_updates if num_updates is None else num_updates
        lr = self.learning_rate(runner.update, num_updates)
        ent_coef = self.entropy_coef(runner.update, num_updates)
        runner, traj, samples = self.collect(runner)
        key, params, opt_state, stats = run_epochs(self._epoch, runner, samples, (lr, ent_coef),
                                                   self.train_cfg.update_epochs)
        metrics = {
            **episode_metrics(traj.episode, self.env.num_blocks, self.axis_name),
            "lr": lr,
            "ent_coef": ent_coef,
            **across_devices({"reward_mean": traj.reward.mean(), **jax.tree.map(jnp.mean, stats)}, self.axis_name),
        }
        runner = runner.replace(params=params, opt_state=opt_state, key=key, update=runner.update + 1)
        return runner, metrics

    # -- evaluation -----------------------------------------------------------------------------
    def act(self, actor_params, observation: jax.Array, key: jax.Array, greedy) -> jax.Array:
        """int32[...]: actions for observations float32[..., D] (the actor's input: with
        ``blocked_moves``, followed by the blocked features); ``greedy`` may be a traced bool.
        Feedforward actors only: a recurrent one acts through :class:`RecurrentActorPolicy`."""
        if self.recurrent:
            raise ValueError("PPO.act: a recurrent actor needs its hidden state; play it with RecurrentActorPolicy")
        logits = self.actor.apply(actor_params, observation)
        sampled = jax.random.categorical(key, logits)
        return jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)

    def batched_policy(self, actor_params):
        """The actor with ``actor_params`` as a batched policy on the training world
        (:class:`ActorPolicy` or :class:`RecurrentActorPolicy`, reading what training read)."""
        kind = RecurrentActorPolicy if self.recurrent else ActorPolicy
        return kind(self.actor, actor_params, self.env.cfg, blocked_moves=self.blocked_moves)

    def evaluate(self, actor_params, key: jax.Array, episodes: int):
        """Plays ``episodes`` episodes of the unshaped environment greedily and as many sampled.

        Returns ``(greedy, sampled, film)``: the papers' numbers for both ways of acting
        (:func:`cube_jax.evaluation.summarize`: ``{name: float32[]}``, ``block_delivery_rate``
        float32[B] in block id order) and ``film = (states batched over max_steps + 1, done
        bool[max_steps + 1])`` of the first greedy episode, for the GIF. Both modes run as one
        batch of ``2 * episodes`` worlds in the evaluation module's rollout, through a single
        copy of the environment step, which keeps this program cheap to compile.
        """
        env = self.env
        total = 2 * episodes
        k_reset, k_play = jax.random.split(key)
        # Both halves start from the same layouts, so greedy and sampled are compared on equal terms.
        reset_keys = jnp.tile(jax.random.split(k_reset, episodes), (2, 1))
        greedy = jnp.arange(total) < episodes  # bool[2E]: first half greedy, second half sampled
        policy = self.batched_policy(actor_params)
        stats, film = rollout(env, policy, reset_keys, env.max_steps,
                              policy_states=policy.states(jax.random.split(k_play, total), greedy), film=True)

        def half(part):
            return summarize(jax.tree.map(lambda x: x[part], stats))

        return half(slice(0, episodes)), half(slice(episodes, total)), film


def make_train(config: Config):
    """``train(key) -> {"runner": Runner, "metrics": {name: float32[num_updates]}}``, jitted.

    The whole run (init, every rollout and update) is one XLA program; vmap it over keys
    to train several seeds at once: ``jax.jit(jax.vmap(make_train(config)))(keys)``. The
    updates are :func:`~cube_jax.rl.trainer.update_chunk`, the program the chunked driver
    runs, here as one chunk of the whole budget.
    """
    ppo = PPO(config)

    def train(key: jax.Array):
        runner = ppo.init(key)
        runner, metrics = update_chunk(ppo, runner, ppo.num_updates, ppo.num_updates, ppo.num_updates)
        return {"runner": runner, "metrics": metrics}

    return jax.jit(train)
