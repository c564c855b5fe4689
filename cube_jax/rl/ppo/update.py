"""PPO's update: the rollout, then ``update_epochs`` passes of clipped-objective steps over
shuffled minibatches, with the learning rate and the entropy coefficient annealed over the budget
(and the actor held still for the first ``train.critic_warmup`` updates)."""
from __future__ import annotations

import functools
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import optax

from cube_jax.rl.ppo.categorical import policy_terms
from cube_jax.rl.ppo.rollout import collect
from cube_jax.rl.ppo.state import Runner
from cube_jax.rl.trainer import across_devices, episode_metrics, local_key, run_epochs, shuffle_indices


def learning_rate(ppo, updates_done: jax.Array, num_updates: jax.Array) -> jax.Array:
    """float32[]: ``lr``, linearly annealed to 0 over ``num_updates`` when ``anneal_lr``."""
    t = ppo.train_cfg
    if not t.anneal_lr:
        return jnp.float32(t.lr)
    return t.lr * jnp.maximum(1.0 - updates_done.astype(jnp.float32) / num_updates, 0.0)


def entropy_coef(ppo, updates_done: jax.Array, num_updates: jax.Array) -> jax.Array:
    """float32[]: ``ent_coef``, or with ``ent_coef_final`` set, linearly from ``ent_coef``
    to it over ``num_updates`` (the learning rate's horizon)."""
    t = ppo.train_cfg
    if t.ent_coef_final is None:
        return jnp.float32(t.ent_coef)
    progress = jnp.minimum(updates_done.astype(jnp.float32) / num_updates, 1.0)
    return jnp.float32(t.ent_coef) + (t.ent_coef_final - t.ent_coef) * progress


def actor_weight(ppo, updates_done: jax.Array) -> jax.Array:
    """float32[]: 0 during the first ``critic_warmup`` updates (the actor stays), 1 after."""
    return (updates_done >= ppo.train_cfg.critic_warmup).astype(jnp.float32)


def replay(ppo, params, batch: Dict[str, Any]) -> Tuple[jax.Array, jax.Array]:
    """``(logits float32[..., A], values float32[...])`` of a batch of samples (or a
    minibatch) under ``params``; a recurrent batch (``[T, E', N, ...]`` steps) is replayed
    through the GRUs from its ``hidden`` states, zeroed where ``start``."""
    critic_in = batch["obs"] if ppo.critic_reads_obs else batch["critic_in"]
    if not ppo.recurrent:
        return ppo.actor.apply(params["actor"], batch["obs"]), ppo.critic.apply(params["critic"], critic_in)
    hidden = batch["hidden"]
    _, logits = ppo.actor.apply(params["actor"], hidden["actor"], batch["obs"], batch["start"])
    _, value = ppo.critic.apply(params["critic"], hidden["critic"], critic_in, batch["start"])
    return logits, value


def replay_minibatch(ppo, params, batch: Dict[str, Any]) -> Tuple[jax.Array, jax.Array, int]:
    """``(logits, values, action axis)`` of a minibatch as :func:`minibatches` lays it out.
    Feedforward networks read their inputs one per column (``obs_columns`` float32[F, b],
    and ``critic_columns`` where the critic reads something else) and give the logits as
    float32[A, b]: the layout whose weight gradients are fast on the CPU
    (:func:`~cube_jax.rl.networks.mlp_columns`). Recurrent ones are :func:`replay`."""
    if ppo.recurrent:
        return replay(ppo, params, batch) + (-1,)
    obs = batch["obs_columns"]
    critic_in = obs if ppo.critic_reads_obs else batch["critic_columns"]
    return ppo.actor.columns(params["actor"], obs), ppo.critic.columns(params["critic"], critic_in), 0


def loss(ppo, params, batch: Dict[str, jax.Array], ent_coef: jax.Array):
    t = ppo.train_cfg
    logits, value, axis = replay_minibatch(ppo, params, batch)
    log_prob, entropy = policy_terms(logits, batch["action"], axis)
    # Clipped value loss keeps the critic from jumping far from the values the data was collected with.
    value_clipped = batch["value"] + jnp.clip(value - batch["value"], -t.clip_eps, t.clip_eps)
    value_loss = 0.5 * jnp.mean(
        jnp.maximum(jnp.square(value - batch["target"]), jnp.square(value_clipped - batch["target"]))
    )
    adv = batch["advantage"]
    if ppo.axis_name is None:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    else:  # normalised over the whole minibatch: every device's part of it
        mean = across_devices(adv.mean(), ppo.axis_name)
        var = across_devices(jnp.mean(jnp.square(adv - mean)), ppo.axis_name)
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


def minibatch_step(ppo, carry, batch, coefs):
    lr, ent_coef, actor_on = coefs
    params, opt_state = carry
    grads, stats = jax.grad(functools.partial(loss, ppo), has_aux=True)(params, batch, ent_coef)
    grads = across_devices(grads, ppo.axis_name)
    updates, opt_state = ppo.optimizer.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: -lr * u, updates)
    if ppo.train_cfg.critic_warmup:  # the actor stays during the warm-up; its optimizer moments still move
        updates = {**updates, "actor": jax.tree.map(lambda u: u * actor_on, updates["actor"])}
    return (optax.apply_updates(params, updates), opt_state), stats


def minibatches(ppo, key: jax.Array, samples: Dict[str, Any]) -> Dict[str, Any]:
    """``samples`` shuffled and split into ``num_minibatches`` along a new leading axis:
    single agent steps, or (recurrent) whole environments' sequences, so the GRUs replay
    each one from the hidden state it started the rollout with. Single steps hold their
    network inputs one sample per column: ``obs_columns`` float32[m, F, b] (and
    ``critic_columns``) in place of ``obs`` (and ``critic_in``), as
    :func:`replay_minibatch` reads them."""
    m = ppo.train_cfg.num_minibatches
    if not ppo.recurrent:
        perm = shuffle_indices(key, ppo.batch_size, ppo.shuffle_method)
        out = {k: v[perm].reshape((m, ppo.minibatch_size) + v.shape[1:]) for k, v in samples.items()}
        for key_in, key_out in (("obs", "obs_columns"), ("critic_in", "critic_columns")):
            if key_in in out:  # [m, b, *F] -> [m, F, b]: what the networks' ``columns`` read
                x = out.pop(key_in)
                out[key_out] = jnp.swapaxes(x.reshape(x.shape[:2] + (-1,)), 1, 2)
        return out
    perm = shuffle_indices(key, ppo.num_envs)

    def split(x, env_axis):  # [..., E, ...] -> [m, ..., E / m, ...]
        x = jnp.take(x, perm, axis=env_axis)
        x = x.reshape(x.shape[:env_axis] + (m, ppo.num_envs // m) + x.shape[env_axis + 1:])
        return jnp.moveaxis(x, env_axis, 0)

    steps = {k: split(v, 1) for k, v in samples.items() if k != "hidden"}  # time-major [T, E, N, ...]
    return {**steps, "hidden": jax.tree.map(lambda x: split(x, 0), samples["hidden"])}  # [E, N, H]


def epoch(ppo, carry, key, samples, coefs):
    # The named scopes label the update's parts in a profile (op_name metadata; no change
    # to the program): benchmarks/profile_parts.py --sections thunks sums time by them.
    with jax.named_scope("shuffle"):
        batches = minibatches(ppo, local_key(key, ppo.axis_name), samples)

    def step(c, b):
        with jax.named_scope("minibatch_step"):
            return minibatch_step(ppo, c, b, coefs)

    return jax.lax.scan(step, carry, batches)


def update(ppo, runner: Runner, num_updates=None) -> Tuple[Runner, Dict[str, jax.Array]]:
    """One PPO update: a rollout of num_steps, GAE, update_epochs over shuffled minibatches.

    ``num_updates`` (int or int32[], default the config's budget) is the horizon the
    learning rate anneals over.
    """
    num_updates = ppo.num_updates if num_updates is None else num_updates
    lr = learning_rate(ppo, runner.update, num_updates)
    ent_coef = entropy_coef(ppo, runner.update, num_updates)
    actor_on = actor_weight(ppo, runner.update)
    runner, traj, samples = collect(ppo, runner)
    key, params, opt_state, stats = run_epochs(functools.partial(epoch, ppo), runner, samples,
                                               (lr, ent_coef, actor_on), ppo.train_cfg.update_epochs)
    metrics = {
        **episode_metrics(traj.episode, ppo.env.num_blocks, ppo.axis_name),
        "lr": lr,
        "ent_coef": ent_coef,
        **across_devices({"reward_mean": traj.reward.mean(), **jax.tree.map(jnp.mean, stats)}, ppo.axis_name),
    }
    runner = runner.replace(params=params, opt_state=opt_state, key=key, update=runner.update + 1)
    return runner, metrics
