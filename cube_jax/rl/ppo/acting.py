"""A PPO actor at play: actions, its batched policy and the evaluation of both ways of acting."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from cube_jax.evaluation.batched import rollout, summarize
from cube_jax.rl.policy import ActorPolicy, RecurrentActorPolicy


def act(ppo, actor_params, observation: jax.Array, key: jax.Array, greedy) -> jax.Array:
    """int32[...]: actions for observations float32[..., D] (the actor's input: with
    ``blocked_moves``, followed by the blocked features); ``greedy`` may be a traced bool.
    Feedforward actors only: a recurrent one acts through :class:`RecurrentActorPolicy`."""
    if ppo.recurrent:
        raise ValueError("PPO.act: a recurrent actor needs its hidden state; play it with RecurrentActorPolicy")
    logits = ppo.actor.apply(actor_params, observation)
    sampled = jax.random.categorical(key, logits)
    return jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)


def batched_policy(ppo, actor_params):
    """The actor with ``actor_params`` as a batched policy on the training world
    (:class:`ActorPolicy` or :class:`RecurrentActorPolicy`, reading what training read)."""
    kind = RecurrentActorPolicy if ppo.recurrent else ActorPolicy
    return kind(ppo.actor, actor_params, ppo.env.cfg, blocked_moves=ppo.blocked_moves)


def evaluate(ppo, actor_params, key: jax.Array, episodes: int):
    """Plays ``episodes`` episodes of the unshaped environment greedily and as many sampled.

    Returns ``(greedy, sampled, film)``: the papers' numbers for both ways of acting
    (:func:`cube_jax.evaluation.summarize`: ``{name: float32[]}``, ``block_delivery_rate``
    float32[B] in block id order) and ``film = (states batched over max_steps + 1, done
    bool[max_steps + 1])`` of the first greedy episode, for the GIF. Both modes run as one
    batch of ``2 * episodes`` worlds in the evaluation module's rollout, through a single
    copy of the environment step, which keeps this program cheap to compile.
    """
    env = ppo.env
    total = 2 * episodes
    k_reset, k_play = jax.random.split(key)
    # Both halves start from the same layouts, so greedy and sampled are compared on equal terms.
    reset_keys = jnp.tile(jax.random.split(k_reset, episodes), (2, 1))
    greedy = jnp.arange(total) < episodes  # bool[2E]: first half greedy, second half sampled
    policy = batched_policy(ppo, actor_params)
    stats, film = rollout(env, policy, reset_keys, env.max_steps,
                          policy_states=policy.states(jax.random.split(k_play, total), greedy), film=True)

    def half(part):
        return summarize(jax.tree.map(lambda x: x[part], stats))

    return half(slice(0, episodes)), half(slice(episodes, total)), film
