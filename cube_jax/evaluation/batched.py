"""The batched rollout: many episodes of a batched JAX policy at once, in one jitted scan.

Every episode is one member of a ``jax.vmap`` batch; the batch advances one step per scan
iteration; an episode that ends stays frozen (its state, policy state and statistics no
longer change) while the others finish. This one rollout serves ``cube-jax eval``, the
benchmarks, training's evaluation and the GIFs:

* :func:`rollout` is pure: ``rollout(env, policy, keys, num_steps)`` can be called inside a
  jitted training program (training's evaluation does);
* :func:`evaluate` drives it from the host in jitted chunks, with a progress bar, stops
  once every episode has ended, and returns per-episode results.

Episode ``i`` of ``evaluate(..., seed=s)`` starts from ``env.reset(PRNGKey(s + i))`` and its
policy from ``policy.init(fold_in(PRNGKey(s + i), 1))``.

>>> import cube_jax
>>> from cube_jax.agents import HeuristicPolicy
>>> env = cube_jax.make("easy")
>>> result = evaluate(env, HeuristicPolicy(env), episodes=2, seed=0, progress=False)
>>> result["success_rate"], [e["blocks_delivered"] for e in result["episodes"]]
(1.0, [3, 3])
"""
from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cube_jax.agents.base import BatchedPolicy

logger = logging.getLogger(__name__)


@struct.dataclass
class EpisodeStats:
    """What one episode has done so far (batched: a leading episode axis on every field)."""

    steps: jax.Array  # int32[] steps taken until the episode ended (or so far)
    done: jax.Array  # bool[] the episode has ended (terminated or truncated)
    success: jax.Array  # bool[] every block delivered
    delivered: jax.Array  # bool[B] blocks delivered, block id order
    weight_delivered: jax.Array  # int32[] summed weight of the delivered blocks
    episode_return: jax.Array  # float32[] sum of the shared per-agent reward


@struct.dataclass
class RolloutCarry:
    """The scan's carry: one episode (batched under vmap)."""

    state: Any
    policy_state: Any
    stats: EpisodeStats


def start(env, policy: BatchedPolicy, key: jax.Array, policy_state: Any = None) -> RolloutCarry:
    """The carry of a new episode from ``key`` (one episode; vmap it over keys)."""
    state, _ = env.reset(key)
    if policy_state is None:
        policy_state = policy.init(jax.random.fold_in(key, 1))
    stats = EpisodeStats(
        steps=jnp.int32(0),
        done=jnp.array(False),
        success=jnp.array(False),
        delivered=jnp.zeros((env.num_blocks,), bool),
        weight_delivered=jnp.int32(0),
        episode_return=jnp.float32(0.0),
    )
    return RolloutCarry(state, policy_state, stats)


def advance(env, policy: BatchedPolicy, carry: RolloutCarry) -> RolloutCarry:
    """One step of one episode; an ended episode stays as it is."""
    actions, policy_state = policy.act(carry.state, carry.policy_state)
    state, ts = env.step(carry.state, actions)
    old = carry.stats
    live = ~old.done
    stats = EpisodeStats(
        steps=old.steps + live.astype(jnp.int32),
        done=old.done | ts.terminated | ts.truncated,
        success=old.success | (live & ts.terminated),
        delivered=old.delivered | (live & ts.events.block_delivered),
        weight_delivered=old.weight_delivered + jnp.where(live, ts.events.delivered_weight, 0),
        episode_return=old.episode_return + jnp.where(live, ts.reward[0], 0.0),
    )
    new = RolloutCarry(state, policy_state, stats)
    keep = lambda fresh, before: jnp.where(old.done, before, fresh)  # noqa: E731
    return RolloutCarry(
        jax.tree.map(keep, new.state, carry.state),
        jax.tree.map(keep, new.policy_state, carry.policy_state),
        stats,
    )


def run_steps(env, policy: BatchedPolicy, carry: RolloutCarry, num_steps: int, film: bool = False):
    """``num_steps`` steps of a batch of episodes (``carry`` batched over episodes).

    Returns ``(carry, states)`` where ``states`` is the first episode's state after each
    step (a State batched over ``num_steps``) when ``film``, else None.
    """
    step = jax.vmap(lambda c: advance(env, policy, c))

    def body(c, _):
        c = step(c)
        return c, (jax.tree.map(lambda x: x[0], c.state) if film else None)

    return jax.lax.scan(body, carry, None, length=num_steps)


def rollout(env, policy: BatchedPolicy, keys: jax.Array, num_steps: Optional[int] = None, *,
            policy_states: Any = None, film: bool = False) -> Tuple[EpisodeStats, Any]:
    """Plays one episode per key for ``num_steps`` (default ``env.max_steps``) steps; pure.

    Returns ``(stats, film)``: per-episode :class:`EpisodeStats` (leading episode axis) and,
    with ``film``, ``(states, done)``: the first episode's states from reset on (a State
    batched over ``num_steps + 1``) and whether it had ended by each of them.
    """
    num_steps = env.max_steps if num_steps is None else int(num_steps)
    if policy_states is None:
        carry = jax.vmap(lambda k: start(env, policy, k))(keys)
    else:
        carry = jax.vmap(lambda k, ps: start(env, policy, k, ps))(keys, policy_states)
    first = jax.tree.map(lambda x: x[0], carry.state)
    carry, states = run_steps(env, policy, carry, num_steps, film=film)
    if not film:
        return carry.stats, None
    states = jax.tree.map(lambda a, rest: jnp.concatenate([a[None], rest]), first, states)
    done = jnp.concatenate([jnp.array([False]), _first_done_flags(carry.stats, num_steps)])
    return carry.stats, (states, done)


def _first_done_flags(stats: EpisodeStats, num_steps: int) -> jax.Array:
    """bool[num_steps]: whether the first episode had ended after each step."""
    return jnp.arange(1, num_steps + 1) >= jnp.where(stats.done[0], stats.steps[0], num_steps + 1)


def summarize(stats: EpisodeStats) -> Dict[str, jax.Array]:
    """Means over the episode axis: the papers' numbers for one batch of episodes."""
    delivered = stats.delivered.astype(jnp.float32)
    return {
        "success_rate": stats.success.astype(jnp.float32).mean(),
        "blocks_delivered_frac": delivered.mean(),
        "block_delivery_rate": delivered.mean(axis=0),  # float32[B], block id order
        "return_mean": stats.episode_return.mean(),
        "mean_steps": stats.steps.astype(jnp.float32).mean(),
        "weight_delivered_mean": stats.weight_delivered.astype(jnp.float32).mean(),
    }


def episode_keys(seed: int, episodes: int) -> jax.Array:
    """uint32[E, 2]: ``PRNGKey(seed + i)`` for episode i."""
    return jax.vmap(jax.random.PRNGKey)(jnp.arange(seed, seed + episodes, dtype=jnp.uint32))


def evaluate(env, policy: BatchedPolicy, *, episodes: int, seed: int = 0, chunk: Optional[int] = None,
             progress: bool = True, film: bool = False) -> Dict[str, Any]:
    """Plays ``episodes`` episodes (seeds ``seed + i``) as one batch, in jitted chunks.

    Returns ``{"success_rate", "mean_steps", "episodes": [{"seed", "blocks_total",
    "blocks_delivered", "weight_delivered", "weight_total", "steps", "success", "return"}],
    "compile_seconds", "run_seconds"}`` and, with ``film``, ``"film": (states, done)`` of the
    first episode (host arrays).
    """
    chunk = chunk or max(1, math.ceil(env.max_steps / 20))
    keys = episode_keys(seed, episodes)
    carry = jax.jit(jax.vmap(lambda k: start(env, policy, k)))(keys)
    first = jax.device_get(jax.tree.map(lambda x: x[0], carry.state))

    run_chunk = jax.jit(lambda c: run_steps(env, policy, c, chunk, film=film))
    t0 = time.perf_counter()
    compiled = run_chunk.lower(carry).compile()
    compile_seconds = time.perf_counter() - t0

    from tqdm import tqdm

    frames = []
    t0 = time.perf_counter()
    chunks = math.ceil(env.max_steps / chunk)
    with tqdm(total=chunks * chunk, unit="step", desc="eval", disable=not progress, file=sys.stderr) as bar:
        for _ in range(chunks):
            carry, states = compiled(carry)
            if film:
                frames.append(jax.device_get(states))
            done = np.asarray(carry.stats.done)
            bar.update(chunk)
            bar.set_postfix(finished=f"{int(done.sum())}/{episodes}")
            if done.all():
                break
    stats = jax.device_get(carry.stats)
    run_seconds = time.perf_counter() - t0

    weights = np.asarray(jax.device_get(carry.state.block_weight))
    out_episodes = []
    for i in range(episodes):
        delivered = np.asarray(stats.delivered[i])
        out_episodes.append({
            "seed": seed + i,
            "blocks_total": int(delivered.size),
            "blocks_delivered": int(delivered.sum()),
            "weight_delivered": int(stats.weight_delivered[i]),
            "weight_total": int(weights[i].sum()),
            "steps": int(stats.steps[i]),
            "success": bool(stats.success[i]),
            "return": float(stats.episode_return[i]),
        })
    result = {
        "success_rate": float(np.mean([e["success"] for e in out_episodes])),
        "mean_steps": float(np.mean([e["steps"] for e in out_episodes])),
        "episodes": out_episodes,
        "compile_seconds": compile_seconds,
        "run_seconds": run_seconds,
    }
    if film:
        states = jax.tree.map(lambda a, *rest: np.concatenate([np.asarray(a)[None], *rest]), first, *frames)
        steps0 = int(stats.steps[0])
        done = np.arange(states.t.shape[0]) >= (steps0 if bool(stats.done[0]) else states.t.shape[0])
        result["film"] = (states, done)
    return result


__all__ = ["EpisodeStats", "RolloutCarry", "advance", "episode_keys", "evaluate", "rollout", "run_steps", "start",
           "summarize"]
