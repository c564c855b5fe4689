"""Generalized advantage estimation that tells termination from truncation.

A terminated step (every block delivered) has no future, so its bootstrap value is 0.
A truncated step (the time limit) does have one: the episode was cut, not finished, so
it bootstraps from the critic's value of the final (pre-reset) observation. In both
cases the advantage recursion stops there, because the next stored step belongs to a
new episode.
"""
from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp


def bootstrap_values(
    values: jax.Array,
    last_value: jax.Array,
    final_values: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
) -> jax.Array:
    """float32[T, ...]: the value each step's TD target bootstraps from.

    ``values`` float32[T, ...] V(s_t) of the stored observations; ``last_value``
    float32[...] V of the observation after the last step; ``final_values`` float32[T, ...]
    V of each step's pre-reset observation (only read where truncated); ``terminated``
    and ``truncated`` bool[T, ...] (broadcast against the values).
    """
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    boot = jnp.where(truncated, final_values, next_values)
    return jnp.where(terminated, 0.0, boot)


def gae(
    rewards: jax.Array,
    values: jax.Array,
    bootstrap: jax.Array,
    done: jax.Array,
    gamma: float,
    lam: float,
) -> Tuple[jax.Array, jax.Array]:
    """(advantages, value targets), both float32[T, ...].

    ``rewards``, ``values``, ``bootstrap`` float32[T, ...] (``bootstrap`` from
    :func:`bootstrap_values`); ``done`` bool[T, ...] is terminated or truncated: the
    recursion ``A_t = delta_t + gamma * lam * A_{t+1}`` is cut after a done step.
    """
    deltas = rewards + gamma * bootstrap - values
    carry_on = gamma * lam * (1.0 - done.astype(values.dtype))

    def backward(next_advantage, inputs):
        delta, keep = inputs
        advantage = delta + keep * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(values[0]), (deltas, carry_on), reverse=True)
    return advantages, advantages + values
