"""PQN-VDN on CUBE: Q-learning without replay buffer or target network, the team's value
the sum of the agents' (value decomposition), trained end to end inside jitted programs.

One Q-network is shared by every agent: observations are ``float32[E, N, *F]``, the agent
axis is a batch axis like the env axis, and each observation carries the agent's one-hot
id. Each update is PQN's (parallel Q-networks):

* a rollout of ``train.num_steps`` steps in ``train.num_envs`` environments at once, every
  agent epsilon-greedy on its own Q-values, epsilon falling linearly from
  ``pqn.epsilon_start`` to ``pqn.epsilon_finish`` over ``pqn.epsilon_anneal_fraction`` of
  the budget; the many parallel environments decorrelate the data a replay buffer would;
* Q(lambda) targets for the team (:func:`vdn_targets`), computed backwards over the rollout
  from the team's greedy value ``sum_i max_a Q_i(o_i, a)`` under the current parameters
  (LayerNorm in every hidden layer keeps bootstrapping from them stable, which is why no
  target network is needed), on the shared team reward;
* ``pqn.num_epochs`` passes over shuffled minibatches of team steps, regressing the summed
  Q-values of the actions taken, ``sum_i Q_i(o_i, a_i)``, on those targets with Adam.

Termination and truncation stay apart as in PPO (:mod:`cube_jax.rl.gae`): a terminated
step's target is its reward, a truncated one bootstraps from the team's value of the final
(pre-reset) observations the auto-reset wrapper keeps, and the lambda-recursion is cut
after both.

:class:`PQN` is a :class:`~cube_jax.rl.trainer.Trainer`, so the driver
(:mod:`cube_jax.rl.run`) trains, checkpoints and evaluates it as it does PPO. Its policy
is the Q-network: greedy play takes ``argmax_a Q``, sampled play is epsilon-greedy with
``pqn.eval_epsilon``, which is saved with the parameters (:class:`QPolicyParams`), so
``load_policy`` and ``--team policy:RUN`` play a saved run.
"""
from __future__ import annotations

import functools
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

import cube_jax
from cube_jax.evaluation.batched import rollout, summarize
from cube_jax.rl import algorithms
from cube_jax.rl.config import Config, env_kwargs
from cube_jax.rl.gae import bootstrap_values
from cube_jax.rl.networks import build_q_network
from cube_jax.rl.policy import ActorPolicy, QPolicyParams, epsilon_greedy
from cube_jax.rl.shaping import ShapingWrapper
from cube_jax.rl.trainer import across_devices, episode_metrics, local_key, run_epochs, shuffle_indices, stagger_start
from cube_jax.core.wrappers import AutoResetWrapper, LogWrapper


# --- the targets -------------------------------------------------------------------------------
def team_value(q_values: jax.Array) -> jax.Array:
    """float32[...]: the team's greedy value ``sum_i max_a Q_i`` of action values float32[..., N, A]."""
    return q_values.max(axis=-1).sum(axis=-1)


def lambda_returns(rewards: jax.Array, bootstrap: jax.Array, done: jax.Array, gamma: float, lam: float) -> jax.Array:
    """float32[T, ...]: Q(lambda) returns, computed backwards over the rollout.

    ``G_t = r_t + gamma * ((1 - lam) * b_t + lam * G_{t+1})`` where ``b_t`` (``bootstrap``,
    from :func:`~cube_jax.rl.gae.bootstrap_values`) is the value of what followed step t;
    after a done step (``done`` bool[T, ...], terminated or truncated) the next stored step
    belongs to another episode, so there ``G_t = r_t + gamma * b_t``, as it is at the last
    step of the rollout.
    """
    keep = lam * (1.0 - done.astype(bootstrap.dtype))

    def backward(next_return, step):
        reward, boot, carry_on = step
        g = reward + gamma * (boot + carry_on * (next_return - boot))
        return g, g

    _, returns = jax.lax.scan(backward, bootstrap[-1], (rewards, bootstrap, keep), reverse=True)
    return returns


def vdn_targets(q_values: jax.Array, last_q_values: jax.Array, final_q_values: jax.Array, rewards: jax.Array,
                terminated: jax.Array, truncated: jax.Array, gamma: float, lam: float) -> jax.Array:
    """float32[T, E]: the team's Q(lambda) targets for the summed Q of the actions taken.

    ``q_values`` float32[T, E, N, A] of the stored observations; ``last_q_values``
    float32[E, N, A] of the observations after the last step; ``final_q_values``
    float32[T, E, N, A] of each step's pre-reset observations (read only where truncated);
    ``rewards`` float32[T, E] the team's reward; ``terminated``, ``truncated`` bool[T, E].
    """
    boot = bootstrap_values(team_value(q_values), team_value(last_q_values), team_value(final_q_values),
                            terminated, truncated)
    return lambda_returns(rewards, boot, terminated | truncated, gamma, lam)


# --- the training state ------------------------------------------------------------------------
@struct.dataclass
class QRunner:
    """Everything one seed's training carries from update to update."""

    params: Any  # the Q-network's parameters, shared by all agents
    opt_state: Any
    env_state: Any  # LogState batched over E environments
    obs: jax.Array  # float32[E, N, *F] current observations
    key: jax.Array  # PRNG key
    update: jax.Array  # int32[] updates done so far


@struct.dataclass
class QTransition:
    obs: jax.Array  # float32[E, N, *F]
    action: jax.Array  # int32[E, N]
    q_values: jax.Array  # float32[E, N, A] of obs, under the parameters that collected it
    reward: jax.Array  # float32[E] the team's reward (shaped when shaping is on)
    terminated: jax.Array  # bool[E]
    truncated: jax.Array  # bool[E]
    final_obs: jax.Array  # float32[E, N, *F] observations of the pre-reset state
    episode: Dict[str, jax.Array]  # LogWrapper statistics, each [E]


# --- the schedules --------------------------------------------------------------------------------
def learning_rate(pqn, updates_done: jax.Array, num_updates) -> jax.Array:
    """float32[]: ``pqn.lr``, linearly annealed to 0 over ``num_updates`` when ``pqn.anneal_lr``."""
    p = pqn.pqn_cfg
    if not p.anneal_lr:
        return jnp.float32(p.lr)
    return p.lr * jnp.maximum(1.0 - updates_done.astype(jnp.float32) / num_updates, 0.0)


def epsilon(pqn, updates_done: jax.Array, num_updates) -> jax.Array:
    """float32[]: exploration of the rollout of update ``updates_done``: linear from
    ``epsilon_start`` to ``epsilon_finish`` over ``epsilon_anneal_fraction * num_updates``."""
    p = pqn.pqn_cfg
    if p.epsilon_anneal_fraction == 0:
        return jnp.float32(p.epsilon_finish)
    progress = jnp.minimum(updates_done.astype(jnp.float32) / (p.epsilon_anneal_fraction * num_updates), 1.0)
    return jnp.float32(p.epsilon_start + (p.epsilon_finish - p.epsilon_start) * progress)


# --- the training state ---------------------------------------------------------------------------
def init(pqn, key: jax.Array) -> QRunner:
    key, k_net, k_env = jax.random.split(key, 3)
    env_state, ts = jax.vmap(pqn.train_env.reset)(jax.random.split(k_env, pqn.num_envs))
    obs = ts.observation
    if pqn.train_cfg.stagger_start:
        env_state, obs = stagger_start(pqn.env, env_state, jax.random.fold_in(k_env, 1))
    params = pqn.q_network.init(k_net, obs[0, 0])
    return QRunner(params, pqn.optimizer.init(params), env_state, obs, key, jnp.int32(0))


def updates_done(pqn, runner: QRunner) -> jax.Array:
    """int32[]: updates this runner has made."""
    return runner.update


def env_batched(pqn, runner: QRunner) -> QRunner:
    """Which leaves of ``runner`` have the env axis first: the environments and their observations."""
    return QRunner(
        params=jax.tree.map(lambda _: False, runner.params),
        opt_state=jax.tree.map(lambda _: False, runner.opt_state),
        env_state=jax.tree.map(lambda _: True, runner.env_state),
        obs=True,
        key=False,
        update=False,
    )


def policy_params(pqn, runner: QRunner) -> QPolicyParams:
    """The Q-network's parameters and sampled play's epsilon, the latter shaped like
    ``runner.update`` so that a seed-batched runner gives one per seed."""
    epsilon = jnp.full(jnp.shape(runner.update), pqn.pqn_cfg.eval_epsilon, jnp.float32)
    return QPolicyParams(runner.params, epsilon)


# --- the rollout ----------------------------------------------------------------------------------
def env_step(pqn, runner: QRunner, epsilon: jax.Array) -> Tuple[QRunner, QTransition]:
    key, k_act = jax.random.split(runner.key)
    q_values = pqn.q_network.apply(runner.params, runner.obs)  # [E, N, A]
    action = epsilon_greedy(local_key(k_act, pqn.axis_name), q_values, epsilon)
    env_state, ts = jax.vmap(pqn.train_env.step)(runner.env_state, action)
    reward = ts.reward[:, 0]  # the reward is shared: every agent gets the team's
    if pqn.shaping_coef or pqn.dense_coef:
        reward = reward + pqn.shaping_coef * ts.extras["shaping"] + pqn.dense_coef * ts.extras["potential"]
    episode = {
        k: ts.extras[k]
        for k in ("returned_episode", "episode_return", "episode_length", "blocks_delivered", "success")
    }
    transition = QTransition(runner.obs, action, q_values, reward, ts.terminated, ts.truncated,
                             ts.extras["final_observation"], episode)
    return runner.replace(env_state=env_state, obs=ts.observation, key=key), transition


def collect(pqn, runner: QRunner, epsilon: jax.Array) -> Tuple[QRunner, QTransition]:
    """A rollout of ``train.num_steps`` steps, every agent epsilon-greedy (float32[]
    ``epsilon``): the runner after it and the transitions, each field ``[T, ...]``."""
    return jax.lax.scan(lambda r, _: env_step(pqn, r, epsilon), runner, None, pqn.num_steps)


# --- the targets and the update -------------------------------------------------------------------
def targets(pqn, params, traj: QTransition, last_obs: jax.Array) -> jax.Array:
    """float32[T, E]: :func:`vdn_targets` of a rollout, ``last_obs`` the observations after it."""
    p = pqn.pqn_cfg
    last_q = pqn.q_network.apply(params, last_obs)
    # One batched pass over the whole rollout's final observations; only truncated steps read it.
    final_q = pqn.q_network.apply(params, traj.final_obs)
    return vdn_targets(traj.q_values, last_q, final_q, traj.reward, traj.terminated, traj.truncated,
                       pqn.train_cfg.gamma, p.lambda_)


def loss(pqn, params, batch: Dict[str, jax.Array]):
    q_values = pqn.q_network.apply(params, batch["obs"])  # [M, N, A]
    taken = jnp.take_along_axis(q_values, batch["action"][..., None], axis=-1)[..., 0]  # [M, N]
    team_q = taken.sum(axis=-1)  # VDN: the team's Q is the sum of its agents'
    loss = 0.5 * jnp.mean(jnp.square(team_q - batch["target"]))
    return loss, {"td_loss": loss, "team_q": jnp.mean(team_q)}


def minibatch_step(pqn, carry, batch, lr):
    params, opt_state = carry
    grads, stats = jax.grad(functools.partial(loss, pqn), has_aux=True)(params, batch)
    grads = across_devices(grads, pqn.axis_name)
    updates, opt_state = pqn.optimizer.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: -lr * u, updates)
    return (optax.apply_updates(params, updates), opt_state), stats


def epoch(pqn, carry, key, samples, lr):
    m = pqn.pqn_cfg.num_minibatches
    perm = shuffle_indices(local_key(key, pqn.axis_name), pqn.batch_size)
    minibatches = jax.tree.map(lambda x: x[perm].reshape((m, pqn.minibatch_size) + x.shape[1:]), samples)
    return jax.lax.scan(lambda c, b: minibatch_step(pqn, c, b, lr), carry, minibatches)


def update(pqn, runner: QRunner, num_updates=None) -> Tuple[QRunner, Dict[str, jax.Array]]:
    """One PQN update: an epsilon-greedy rollout, the team's Q(lambda) targets, then
    ``pqn.num_epochs`` passes over shuffled minibatches of team steps.

    ``num_updates`` (int or int32[], default the config's budget) is the horizon that
    epsilon and the learning rate anneal over.
    """
    num_updates = pqn.num_updates if num_updates is None else num_updates
    explore = epsilon(pqn, runner.update, num_updates)
    lr = learning_rate(pqn, runner.update, num_updates)
    runner, traj = collect(pqn, runner, explore)
    target = targets(pqn, runner.params, traj, runner.obs)

    def flat(x):  # [T, E, ...] -> [T*E, ...]: a sample is one step of the whole team
        return x.reshape((pqn.batch_size,) + x.shape[2:])

    samples = {"obs": flat(traj.obs), "action": flat(traj.action), "target": flat(target)}
    key, params, opt_state, stats = run_epochs(functools.partial(epoch, pqn), runner, samples, lr, pqn.pqn_cfg.num_epochs)
    metrics = {
        **episode_metrics(traj.episode, pqn.env.num_blocks, pqn.axis_name),
        "epsilon": explore,
        "lr": lr,
        **across_devices({"reward_mean": traj.reward.mean(), "target_mean": target.mean(),
                          **jax.tree.map(jnp.mean, stats)}, pqn.axis_name),
    }
    runner = runner.replace(params=params, opt_state=opt_state, key=key, update=runner.update + 1)
    return runner, metrics


# --- evaluation -----------------------------------------------------------------------------------
def evaluate(pqn, policy_params: QPolicyParams, key: jax.Array, episodes: int):
    """Plays ``episodes`` episodes of the unshaped environment greedily (argmax Q) and as
    many epsilon-greedy with ``policy_params.eval_epsilon``, from the same layouts.

    Returns ``(greedy, sampled, film)`` as :meth:`cube_jax.rl.ppo.PPO.evaluate` does: the
    papers' numbers of both ways of acting and the first greedy episode for the GIF, all
    from one batch of ``2 * episodes`` worlds in the evaluation module's rollout.
    """
    env = pqn.env
    total = 2 * episodes
    k_reset, k_play = jax.random.split(key)
    reset_keys = jnp.tile(jax.random.split(k_reset, episodes), (2, 1))
    greedy = jnp.arange(total) < episodes  # bool[2E]: first half greedy, second half epsilon-greedy
    policy = ActorPolicy(pqn.q_network, policy_params.q_network, env.cfg, epsilon=policy_params.eval_epsilon)
    stats, film = rollout(env, policy, reset_keys, env.max_steps,
                          policy_states=(jax.random.split(k_play, total), greedy), film=True)

    def half(part):
        return summarize(jax.tree.map(lambda x: x[part], stats))

    return half(slice(0, episodes)), half(slice(episodes, total)), film


class PQN:
    """PQN-VDN for one seed; vmap its methods over seeds (the module's functions, each of
    which takes the learner first).

    ``axis_name``: as :class:`~cube_jax.rl.ppo.PPO`'s, set only in the copy that updates one
    device's share of the environments (:func:`~cube_jax.rl.trainer.data_parallel`).
    """

    axis_name: Optional[str] = None

    def __init__(self, config: Config):
        own = [a.name for a in algorithms.ALGORITHMS if a.trainer_class() is PQN]
        if config.algo not in own:
            raise ValueError(f"PQN trains algo {' or '.join(map(repr, own))}, got config.algo={config.algo!r}")
        self.config = config
        self.train_cfg = t = config.train
        self.pqn_cfg = p = config.pqn
        self.env_kwargs = env_kwargs(config)
        self.env = cube_jax.make(**self.env_kwargs)
        env = self.env
        shaping = config.shaping
        if shaping.enabled:
            env = ShapingWrapper(env, t.gamma, shaping.align_weight, shaping.reach_weight, shaping.reach)
        # The auto-reset keeps each step's pre-reset observation: truncated steps bootstrap from
        # it, and the next observation is that one with the fresh episodes' rows written over.
        self.train_env = LogWrapper(AutoResetWrapper(env, patch_observations=True))
        self.shaping_coef = float(shaping.coef) if shaping.enabled else 0.0
        self.dense_coef = float(shaping.dense_coef) if shaping.enabled else 0.0
        feature_dims = len(self.env.observation_shape) - 1
        self.q_network = build_q_network(config.network.model_dump(), self.env.num_actions, feature_dims)
        self.num_envs, self.num_steps = t.num_envs, t.num_steps
        self.num_updates = t.total_timesteps // (self.num_envs * self.num_steps)
        self.batch_size = self.num_envs * self.num_steps  # samples per update: team steps
        self.minibatch_size = self.batch_size // p.num_minibatches
        # As in PPO, the learning rate is applied outside optax so that its annealing horizon
        # may be traced (a resumed run with a longer budget reuses the compiled program).
        self.optimizer = optax.chain(optax.clip_by_global_norm(p.max_grad_norm), optax.scale_by_adam(eps=1e-5))

    @property
    def steps_per_update(self) -> int:
        """Environment steps of one update (each moves every agent of one environment)."""
        return self.num_envs * self.num_steps

    # -- the Trainer interface (cube_jax.rl.trainer.Trainer) ------------------------------------
    init = init
    updates_done = updates_done
    env_batched = env_batched
    policy_params = policy_params
    update = update
    evaluate = evaluate

    # -- its pieces --------------------------------------------------------------------------------
    learning_rate = learning_rate
    epsilon = epsilon
    collect = collect
    targets = targets
