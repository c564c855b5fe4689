"""What the baseline driver (:mod:`cube_jax.rl.run`) needs from a training algorithm, and
the program of updates that both ``make_train`` and the driver run.

A trainer holds pure functions over one seed's training state; the driver vmaps them over
seeds, shards the env batch over a device mesh, runs updates in jitted chunks, saves
checkpoints and evaluates. :class:`cube_jax.rl.ppo.PPO` (IPPO and MAPPO) is one.
"""
from __future__ import annotations

from typing import Any, Dict, Protocol, Tuple

import jax
import jax.numpy as jnp

Metrics = Dict[str, jax.Array]


class Trainer(Protocol):
    """One algorithm's training, for one seed; every method is pure and jit/vmap-able."""

    env: Any  # the unshaped world (cube_jax.make(**env_kwargs)): evaluation, summary, GIF
    env_kwargs: Dict[str, Any]  # keyword arguments of cube_jax.make for env
    num_updates: int  # the config's budget of updates
    steps_per_update: int  # env steps of one update

    def init(self, key: jax.Array) -> Any:
        """A fresh training state from a PRNG key."""

    def update(self, state: Any, num_updates: jax.Array) -> Tuple[Any, Metrics]:
        """One update: ``(state, {name: float32[] or int32[]})``; ``num_updates`` (int32[])
        is the budget, e.g. the horizon a learning rate anneals over."""

    def updates_done(self, state: Any) -> jax.Array:
        """int32[]: updates made so far (a resumed run starts counting from here)."""

    def env_batched(self, state: Any) -> Any:
        """A tree like ``state`` of bools: True where a leaf's first axis is the env batch
        (split over the device mesh); the rest is replicated."""

    def policy_params(self, state: Any) -> Any:
        """What acting needs: evaluated by :meth:`evaluate` and saved as the policy."""

    def evaluate(self, policy_params: Any, key: jax.Array, episodes: int) -> Tuple[Dict, Dict, Any]:
        """``(greedy, sampled, film)``: ``{name: float32[...]}`` over ``episodes`` episodes
        acting greedily and sampled, and ``(states [T + 1, ...], done bool[T + 1])`` of one
        greedy episode."""


def update_chunk(trainer: Trainer, state: Any, active, num_updates, length: int) -> Tuple[Any, Metrics]:
    """``length`` scan steps of ``trainer.update``, of which the first ``active`` update.

    The rest pass the state through unchanged with NaN (integer metrics: 0) metrics, so
    every chunk, a last partial one included, is one compiled program. ``active`` and
    ``num_updates`` may be traced int32[]. Returns ``(state, {name: [length]})``.
    """
    update = lambda s: trainer.update(s, num_updates)  # noqa: E731
    skipped = jax.tree.map(
        lambda s: jnp.full(s.shape, jnp.nan, s.dtype) if jnp.issubdtype(s.dtype, jnp.floating)
        else jnp.zeros(s.shape, s.dtype),
        jax.eval_shape(update, state)[1],
    )

    def one(s, i):
        return jax.lax.cond(i < active, update, lambda c: (c, skipped), s)

    return jax.lax.scan(one, state, jnp.arange(length))


# --- what the trainers share ---------------------------------------------------------------------
def shuffle_indices(key: jax.Array, n: int) -> jax.Array:
    """int32[n]: a random permutation of ``range(n)``, for shuffling a rollout's samples.

    ``jax.random.permutation`` sorts ``(random key, index)`` pairs in rounds; on the CPU a
    two-operand sort is slow (three of them took about 11 ms for 16384 indices, a sixth of
    an IPPO update of the default preset). Here each round is a sort of one uint32 word per
    index, random bits above the index's own ``m = ceil(log2 n)`` bits, which XLA sorts about
    ten times faster. Indices whose random bits tie in a round keep their order of the round
    before, so there are as many rounds as it takes to draw at least ``2 m`` random bits per
    index: a pair of indices keeps its original order only where its bits tie in every
    round, which happens to fewer than one pair of a permutation on average
    (``n**2 / 2 * 2**(-2 m) <= 1/2``). Batches of more than 2**21 indices, whose words would
    hold too few random bits, use ``jax.random.permutation``.
    """
    m = max(1, (n - 1).bit_length())
    free = 32 - m
    if free < 11:
        return jax.random.permutation(key, n).astype(jnp.int32)
    rounds = -(-2 * m // free)
    low = jnp.uint32((1 << m) - 1)
    order = jnp.arange(n, dtype=jnp.uint32)
    for k in jax.random.split(key, rounds):
        bits = jax.random.bits(k, (n,), jnp.uint32) & ~low
        order = order[jax.lax.sort(bits | jnp.arange(n, dtype=jnp.uint32)) & low]
    return order.astype(jnp.int32)


def run_epochs(epoch, runner, samples, lr, count: int):
    """``count`` passes of ``epoch(carry, key, samples, lr)`` over one rollout's samples,
    from the runner's ``(params, opt_state)``, each with a key of its own split from
    ``runner.key``: ``(next runner key, params, opt_state, stats [count, ...])``."""
    key, k_epochs = jax.random.split(runner.key)
    (params, opt_state), stats = jax.lax.scan(
        lambda c, k: epoch(c, k, samples, lr),
        (runner.params, runner.opt_state),
        jax.random.split(k_epochs, count),
    )
    return key, params, opt_state, stats


def mask_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``x`` where ``mask``; NaN when the mask is empty (no episode finished)."""
    count = mask.sum()
    total = jnp.sum(jnp.where(mask, x.astype(jnp.float32), 0.0))
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def episode_metrics(episode: Dict[str, jax.Array], num_blocks: int) -> Metrics:
    """A rollout's training-episode metrics from its LogWrapper statistics (each ``[T, E]``):
    means over the episodes that ended in it (NaN when none did), and how many ended."""
    done = episode["returned_episode"]
    return {
        "episode_return": mask_mean(episode["episode_return"], done),
        "success_rate": mask_mean(episode["success"], done),
        "blocks_delivered_frac": mask_mean(episode["blocks_delivered"] / num_blocks, done),
        "episode_length": mask_mean(episode["episode_length"], done),
        "episodes": done.sum(),
    }


def stagger_start(env, env_state, key: jax.Array):
    """``(env_state, observations)`` with every env's first episode started at a random step
    count in [0, max_steps) (``env_state``: a LogWrapper state batched over envs of ``env``).

    All envs reset together otherwise, so their episodes stay in lockstep and every update
    sees one slice of the episode (only the first 32 steps, then only the next 32, ...). The
    shortened first episodes end by truncation, which the targets bootstrap, so no return is
    cut wrongly; only their logged statistics are partial.
    """
    base = env_state.env_state
    base = base.replace(t=jax.random.randint(key, base.t.shape, 0, env.max_steps, dtype=base.t.dtype))
    return env_state.replace(env_state=base), jax.vmap(env.observe)(base)
