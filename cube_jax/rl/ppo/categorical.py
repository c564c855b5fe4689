"""Categorical policies over the actions: log-probabilities, entropies and sampling."""
from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp


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
