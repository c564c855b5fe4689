"""PPO's rollout: ``num_steps`` steps of every environment under the current policy, the
critic's values of them, and the samples the update reads."""
from __future__ import annotations

import functools
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp

from cube_jax.rl.policy import blocked_features
from cube_jax.rl.ppo.advantage import advantages
from cube_jax.rl.ppo.categorical import sample_categorical
from cube_jax.rl.ppo.critic import critic_inputs, with_blocked
from cube_jax.rl.ppo.state import Runner, Transition
from cube_jax.rl.trainer import local_key


def agent_starts(ppo, starts: jax.Array) -> jax.Array:
    """bool[1, E, N]: an env's start flags ``bool[E]`` for each of its agents, as one time step."""
    return jnp.broadcast_to(starts[:, None], (starts.shape[0], ppo.num_agents))[None]


def read_step(ppo, runner: Runner, critic_in: jax.Array):
    """``(logits float32[E, N, A], values float32[E, N], runner)`` for the current
    observations; a recurrent runner comes back with its hidden states advanced. A
    feedforward critic is not read here (``values`` is None): :func:`collect` reads the
    whole rollout's values in one pass after it, where the products are large enough to
    run at full speed."""
    if not ppo.recurrent:
        return ppo.actor.apply(runner.params["actor"], runner.obs), None, runner  # [E, N, A]
    resets = agent_starts(ppo, runner.starts)
    params, hidden = runner.params, runner.hidden
    actor_hidden, logits = ppo.actor.apply(params["actor"], hidden["actor"], runner.obs[None], resets)
    critic_hidden, value = ppo.critic.apply(params["critic"], hidden["critic"], critic_in[None], resets)
    return logits[0], value[0], runner.replace(hidden={"actor": actor_hidden, "critic": critic_hidden})


def env_step(ppo, runner: Runner, uniform: jax.Array) -> Tuple[Runner, Transition]:
    """One step of every environment; ``uniform`` float32[E, N] in [0, 1) draws each
    agent's action from its categorical policy (:func:`sample_categorical`)."""
    critic_in = critic_inputs(ppo, runner.env_state, runner.obs)
    before = runner
    logits, value, runner = read_step(ppo, runner, critic_in)
    action, log_prob = sample_categorical(logits, uniform)
    env_state, ts = jax.vmap(ppo.train_env.step)(runner.env_state, action)
    reward = ts.reward
    if ppo.shaping_coef or ppo.dense_coef:
        shaped = ppo.shaping_coef * ts.extras["shaping"] + ppo.dense_coef * ts.extras["potential"]
        reward = reward + shaped[:, None]
    episode = {
        k: ts.extras[k]
        for k in ("returned_episode", "episode_return", "episode_length", "blocks_delivered", "success")
    }
    final_critic_in, next_obs = ts.extras["final_critic_input"], ts.observation
    if ppo.blocked_moves:
        blocked = blocked_features(action, ts.events.agent_moved)  # of the state this step reached
        final_critic_in = jnp.concatenate([final_critic_in, blocked], axis=-1)
        fresh = (ts.terminated | ts.truncated)[:, None, None]  # a reset's first observation has none
        next_obs = with_blocked(ppo, next_obs, jnp.where(fresh, 0.0, blocked))
    transition = Transition(
        runner.obs, critic_in, action, log_prob, value, reward,
        ts.terminated, ts.truncated, final_critic_in, episode,
    )
    runner = runner.replace(env_state=env_state, obs=next_obs)
    if ppo.recurrent:
        transition = transition.replace(start=before.starts, critic_hidden=runner.hidden["critic"])
        runner = runner.replace(starts=ts.terminated | ts.truncated)
    return runner, transition


def last_value(ppo, runner: Runner) -> jax.Array:
    """float32[E, N]: the critic's value of the observations after the rollout."""
    critic_in = critic_inputs(ppo, runner.env_state, runner.obs)
    if not ppo.recurrent:
        return ppo.critic.apply(runner.params["critic"], critic_in)
    return read_step(ppo, runner, critic_in)[1]


def collect(ppo, runner: Runner) -> Tuple[Runner, Transition, Dict[str, Any]]:
    """A rollout of num_steps and its GAE: ``(runner, trajectory [T, E, ...], samples)``.

    The samples are flat ``[T * E * N, ...]`` agent steps, or (recurrent) time-major
    ``[T, E, N, ...]`` with each step's ``start`` flags and the ``hidden`` states
    ``[E, N, H]`` the rollout started from. ``critic_in`` is among them only where the
    critic reads something other than the vector observation (MAPPO, or a grid).
    """
    initial_hidden = runner.hidden if ppo.recurrent else None
    # The whole rollout's sampling noise in one draw, one number per agent step: on the
    # CPU every draw is a loop of its own, which cost more than the actor and the critic
    # in each step.
    key, k_noise = jax.random.split(runner.key)
    uniform = jax.random.uniform(local_key(k_noise, ppo.axis_name), (ppo.num_steps,) + runner.obs.shape[:2])
    with jax.named_scope("rollout"):
        runner, traj = jax.lax.scan(functools.partial(env_step, ppo), runner.replace(key=key), uniform)
    with jax.named_scope("values_and_gae"):
        if not ppo.recurrent:
            critic_in = traj.obs if ppo.critic_reads_obs else traj.critic_in
            traj = traj.replace(value=ppo.critic.apply(runner.params["critic"], critic_in))  # [T, E, N]
        last = last_value(ppo, runner)
        advantage, target = advantages(ppo, runner.params["critic"], traj, last)

    def flat(x):  # [T, E, N, ...] -> [T*E*N, ...]: agents are samples like envs and steps
        return x if ppo.recurrent else x.reshape((ppo.batch_size,) + x.shape[3:])

    samples = {
        "obs": flat(traj.obs),
        "action": flat(traj.action),
        "log_prob": flat(traj.log_prob),
        "value": flat(traj.value),
        "advantage": flat(advantage),
        "target": flat(target),
    }
    if not ppo.critic_reads_obs:
        samples["critic_in"] = flat(traj.critic_in)
    if ppo.recurrent:
        samples["start"] = jnp.broadcast_to(traj.start[..., None], traj.action.shape)
        samples["hidden"] = initial_hidden
    return runner, traj, samples
