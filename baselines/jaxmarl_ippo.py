"""IPPO in the shape of JaxMARL's ``baselines/IPPO/ippo_ff_*.py``, run on CUBE through
``cube_jax.adapters.jaxmarl`` (docs/jaxmarl.md).

    python baselines/jaxmarl_ippo.py --task easy --total-timesteps 3000000
    python baselines/jaxmarl_ippo.py --task n2 --observation egocentric --num-envs 256 --num-seeds 2

One feed-forward actor-critic shared by every agent; ``batchify``/``unbatchify`` between
JaxMARL's per-agent dicts and the batch of actors; ``jax.vmap`` over environments; a
``jax.lax.scan`` rollout through JaxMARL's ``LogWrapper``; GAE; PPO's clipped update with
optax; the whole training loop one jitted function, seeds by ``jax.vmap``. As in JaxMARL's
scripts, a truncated step counts as terminal and the reward is the environment's own (the
papers' reward: no shaping, unlike ``baselines/ippo.py``).

The only CUBE-specific line is the one that builds the environment, in ``make_train``:
everything else is what it would be for any JaxMARL environment.
"""
from __future__ import annotations

import argparse
import time
from typing import NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal
from flax.training.train_state import TrainState
from jaxmarl.wrappers.baselines import LogWrapper

from cube_jax.adapters.jaxmarl import make_jaxmarl

CONFIG = {
    "ENV_NAME": "easy",  # a task of cube-v1, or a scenario cube_jax.make takes
    "ENV_KWARGS": {},  # e.g. {"observation": "egocentric"}
    "SEED": 0,
    "NUM_SEEDS": 1,
    "TOTAL_TIMESTEPS": 3_000_000,
    "NUM_ENVS": 128,
    "NUM_STEPS": 32,
    "UPDATE_EPOCHS": 2,
    "NUM_MINIBATCHES": 2,
    "LR": 1e-3,
    "ANNEAL_LR": True,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "ENT_COEF": 0.05,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.5,
    "HIDDEN": 64,
    "ACTIVATION": "tanh",
    "REPORTER": None,  # called with each update's metrics, once per seed (main's Reporter prints them)
}


class ActorCritic(nn.Module):
    action_dim: int
    hidden: int = 64
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x):
        activation = nn.relu if self.activation == "relu" else nn.tanh

        def trunk(y):
            for _ in range(2):
                y = activation(nn.Dense(self.hidden, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(y))
            return y

        logits = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01), bias_init=constant(0.0))(trunk(x))
        value = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(trunk(x))
        return distrax.Categorical(logits=logits), jnp.squeeze(value, axis=-1)


class Transition(NamedTuple):
    done: jnp.ndarray  # [NUM_ACTORS]
    action: jnp.ndarray  # [NUM_ACTORS]
    value: jnp.ndarray  # [NUM_ACTORS]
    reward: jnp.ndarray  # [NUM_ACTORS]
    log_prob: jnp.ndarray  # [NUM_ACTORS]
    obs: jnp.ndarray  # [NUM_ACTORS, obs_size]
    info: dict  # each [NUM_ACTORS]


def batchify(x: dict, agent_list, num_actors):
    """Per-agent arrays [NUM_ENVS, ...] -> one batch [NUM_ACTORS, -1], agent-major."""
    return jnp.stack([x[a] for a in agent_list]).reshape((num_actors, -1))


def unbatchify(x: jnp.ndarray, agent_list, num_envs, num_agents):
    """[NUM_ACTORS, ...] -> per-agent arrays [NUM_ENVS, ...] (the inverse of batchify)."""
    x = x.reshape((num_agents, num_envs) + x.shape[1:])
    return {a: x[i] for i, a in enumerate(agent_list)}


def make_train(config):
    config = dict(config)
    # The only CUBE-specific line; JaxMARL's scripts have env = jaxmarl.make(...) here.
    env = make_jaxmarl(config["ENV_NAME"], **config["ENV_KWARGS"])
    config["NUM_ACTORS"] = env.num_agents * config["NUM_ENVS"]
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    config["MINIBATCH_SIZE"] = config["NUM_ACTORS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
    if config["NUM_UPDATES"] < 1:
        raise ValueError(f"TOTAL_TIMESTEPS {config['TOTAL_TIMESTEPS']} is less than one update "
                         f"(NUM_ENVS x NUM_STEPS = {config['NUM_ENVS'] * config['NUM_STEPS']})")
    env = LogWrapper(env)

    def linear_schedule(count):
        frac = 1.0 - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"])) / config["NUM_UPDATES"]
        return config["LR"] * frac

    def train(rng):
        # INIT NETWORK
        network = ActorCritic(env.action_space(env.agents[0]).n, config["HIDDEN"], config["ACTIVATION"])
        rng, _rng = jax.random.split(rng)
        init_x = jnp.zeros((1, int(np.prod(env.observation_space(env.agents[0]).shape))))
        params = network.init(_rng, init_x)
        lr = linear_schedule if config["ANNEAL_LR"] else config["LR"]
        tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]), optax.adam(lr, eps=1e-5))
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)

        # INIT ENV
        rng, _rng = jax.random.split(rng)
        obsv, env_state = jax.vmap(env.reset)(jax.random.split(_rng, config["NUM_ENVS"]))

        def _update_step(runner_state, unused):
            # COLLECT TRAJECTORIES
            def _env_step(runner_state, unused):
                train_state, env_state, last_obs, rng = runner_state
                obs_batch = batchify(last_obs, env.agents, config["NUM_ACTORS"])
                rng, _rng = jax.random.split(rng)
                pi, value = network.apply(train_state.params, obs_batch)
                action = pi.sample(seed=_rng)
                log_prob = pi.log_prob(action)
                env_act = unbatchify(action, env.agents, config["NUM_ENVS"], env.num_agents)

                rng, _rng = jax.random.split(rng)
                rng_step = jax.random.split(_rng, config["NUM_ENVS"])
                obsv, env_state, reward, done, info = jax.vmap(env.step)(rng_step, env_state, env_act)
                # infos are [NUM_ENVS, num_agents]: agent-major, as batchify orders the actors
                info = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape((config["NUM_ACTORS"],)), info)
                transition = Transition(
                    batchify(done, env.agents, config["NUM_ACTORS"]).squeeze(-1),
                    action,
                    value,
                    batchify(reward, env.agents, config["NUM_ACTORS"]).squeeze(-1),
                    log_prob,
                    obs_batch,
                    info,
                )
                return (train_state, env_state, obsv, rng), transition

            runner_state, traj_batch = jax.lax.scan(_env_step, runner_state, None, config["NUM_STEPS"])

            # CALCULATE ADVANTAGE
            train_state, env_state, last_obs, rng = runner_state
            _, last_val = network.apply(train_state.params, batchify(last_obs, env.agents, config["NUM_ACTORS"]))

            def _get_advantages(gae_and_next_value, transition):
                gae, next_value = gae_and_next_value
                not_done = 1.0 - transition.done
                delta = transition.reward + config["GAMMA"] * next_value * not_done - transition.value
                gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * not_done * gae
                return (gae, transition.value), gae

            _, advantages = jax.lax.scan(_get_advantages, (jnp.zeros_like(last_val), last_val), traj_batch,
                                         reverse=True, unroll=8)
            targets = advantages + traj_batch.value

            # UPDATE NETWORK
            def _update_epoch(update_state, unused):
                def _update_minbatch(train_state, batch_info):
                    traj_batch, advantages, targets = batch_info

                    def _loss_fn(params, traj_batch, gae, targets):
                        pi, value = network.apply(params, traj_batch.obs)
                        log_prob = pi.log_prob(traj_batch.action)

                        value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(
                            -config["CLIP_EPS"], config["CLIP_EPS"])
                        value_loss = 0.5 * jnp.maximum(jnp.square(value - targets),
                                                       jnp.square(value_pred_clipped - targets)).mean()

                        ratio = jnp.exp(log_prob - traj_batch.log_prob)
                        gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                        clipped = jnp.clip(ratio, 1.0 - config["CLIP_EPS"], 1.0 + config["CLIP_EPS"])
                        actor_loss = -jnp.minimum(ratio * gae, clipped * gae).mean()
                        entropy = pi.entropy().mean()

                        total_loss = actor_loss + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
                        return total_loss, (value_loss, actor_loss, entropy)

                    grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
                    (total_loss, (value_loss, actor_loss, entropy)), grads = grad_fn(
                        train_state.params, traj_batch, advantages, targets)
                    train_state = train_state.apply_gradients(grads=grads)
                    return train_state, {"total_loss": total_loss, "actor_loss": actor_loss,
                                         "critic_loss": value_loss, "entropy": entropy}

                train_state, traj_batch, advantages, targets, rng = update_state
                rng, _rng = jax.random.split(rng)
                batch_size = config["MINIBATCH_SIZE"] * config["NUM_MINIBATCHES"]
                assert batch_size == config["NUM_STEPS"] * config["NUM_ACTORS"], \
                    "batch size must be equal to number of steps * number of actors"
                permutation = jax.random.permutation(_rng, batch_size)
                batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]),
                                     (traj_batch, advantages, targets))
                shuffled = jax.tree.map(lambda x: jnp.take(x, permutation, axis=0), batch)
                minibatches = jax.tree.map(lambda x: x.reshape((config["NUM_MINIBATCHES"], -1) + x.shape[1:]),
                                           shuffled)
                train_state, loss_info = jax.lax.scan(_update_minbatch, train_state, minibatches)
                return (train_state, traj_batch, advantages, targets, rng), loss_info

            update_state = (train_state, traj_batch, advantages, targets, rng)
            update_state, loss_info = jax.lax.scan(_update_epoch, update_state, None, config["UPDATE_EPOCHS"])
            train_state, rng = update_state[0], update_state[-1]

            # METRICS: episodes that finished during this rollout (LogWrapper's returned_episode)
            info = traj_batch.info
            finished = info["returned_episode"]
            count = finished.sum()
            metric = {
                "returned_episode_returns": jnp.where(finished, info["returned_episode_returns"], 0.0).sum()
                / jnp.maximum(count, 1),
                "returned_episode_lengths": jnp.where(finished, info["returned_episode_lengths"], 0.0).sum()
                / jnp.maximum(count, 1),
                "finished_episodes": count / env.num_agents,
                **jax.tree.map(jnp.mean, loss_info),
            }
            if config["REPORTER"] is not None:
                jax.debug.callback(config["REPORTER"], metric)
            return (train_state, env_state, last_obs, rng), metric

        rng, _rng = jax.random.split(rng)
        runner_state = (train_state, env_state, obsv, _rng)
        runner_state, metric = jax.lax.scan(_update_step, runner_state, None, config["NUM_UPDATES"])
        return {"runner_state": runner_state, "metrics": metric}

    return train


class Reporter:
    """Prints a progress line every ``every`` updates: the mean return and length of the episodes
    that finished since the last line, over every seed (the callback runs once per seed)."""

    def __init__(self, every: int, num_seeds: int, steps_per_update: int):
        self.every, self.num_seeds, self.steps_per_update = every, num_seeds, steps_per_update
        self.calls, self.sums = 0, np.zeros(3)

    def __call__(self, metric):
        count = float(metric["finished_episodes"])
        self.sums += (float(metric["returned_episode_returns"]) * count,
                      float(metric["returned_episode_lengths"]) * count, count)
        self.calls += 1
        update, seed = divmod(self.calls, self.num_seeds)
        if seed == 0 and update % self.every == 0:
            ret, length, episodes = self.sums
            text = (f"return {ret / episodes:+.3f}, length {length / episodes:.1f} over {episodes:.0f} episodes"
                    if episodes else "no episode finished")
            print(f"update {update} ({update * self.steps_per_update:,} env steps per seed): {text}; loss "
                  f"{float(metric['total_loss']):.4f}, entropy {float(metric['entropy']):.3f}", flush=True)
            self.sums[:] = 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default=CONFIG["ENV_NAME"], help="a task of cube-v1 (easy, hard, n1..n8, coop2-3, "
                        "coop2-6) or a scenario; default easy")
    parser.add_argument("--observation", help="vector (default), egocentric or grid")
    parser.add_argument("--total-timesteps", type=int, default=CONFIG["TOTAL_TIMESTEPS"])
    parser.add_argument("--num-envs", type=int, default=CONFIG["NUM_ENVS"])
    parser.add_argument("--num-steps", type=int, default=CONFIG["NUM_STEPS"])
    parser.add_argument("--lr", type=float, default=CONFIG["LR"])
    parser.add_argument("--seed", type=int, default=CONFIG["SEED"])
    parser.add_argument("--num-seeds", type=int, default=CONFIG["NUM_SEEDS"])
    parser.add_argument("--report-every", type=int, default=None, help="updates between progress lines "
                        "(default: about 20 lines)")
    args = parser.parse_args(argv)
    config = dict(CONFIG, ENV_NAME=args.task, TOTAL_TIMESTEPS=args.total_timesteps, NUM_ENVS=args.num_envs,
                  NUM_STEPS=args.num_steps, LR=args.lr, SEED=args.seed, NUM_SEEDS=args.num_seeds,
                  ENV_KWARGS={} if args.observation is None else {"observation": args.observation})
    updates = config["TOTAL_TIMESTEPS"] // (config["NUM_STEPS"] * config["NUM_ENVS"])
    config["REPORTER"] = Reporter(args.report_every or max(updates // 20, 1), config["NUM_SEEDS"],
                                  config["NUM_STEPS"] * config["NUM_ENVS"])

    started = time.time()
    rngs = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_SEEDS"])
    out = jax.block_until_ready(jax.jit(jax.vmap(make_train(config)))(rngs))
    seconds = time.time() - started
    metrics = jax.tree.map(np.asarray, out["metrics"])  # each [NUM_SEEDS, NUM_UPDATES]
    tail = slice(-max(updates // 10, 1), None)  # the last tenth of the updates
    count = metrics["finished_episodes"][:, tail]
    last = [f"{(r * c).sum() / c.sum():+.3f}" if c.sum() else "no episode finished"
            for r, c in zip(metrics["returned_episode_returns"][:, tail], count)]
    steps = updates * config["NUM_STEPS"] * config["NUM_ENVS"] * config["NUM_SEEDS"]
    print(f"{config['ENV_NAME']}: {steps:,} env steps in {seconds:.0f} s (compile included, "
          f"{steps / seconds:,.0f} env-steps/s); mean return of the episodes finished in the last tenth "
          f"of the updates, per seed: {', '.join(last)}")
    return out

if __name__ == "__main__":
    main()
