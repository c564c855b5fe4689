"""Actor and critic MLPs, their recurrent (GRU) versions, and the Q-network of PQN-VDN.
Parameters are shared by all agents: the agent axis is just another batch axis, and every
observation carries the agent's one-hot id."""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.custom_batching
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


def orthogonal(scale: float = 1.0):
    """Flax's orthogonal initializer, whose QR runs one matrix at a time under ``jax.vmap``.

    Batched, the QR is one LAPACK call that splits its batch over XLA's CPU thread pool and
    waits for the pieces; two of them side by side (the actor's and the critic's, every seed
    initialised at once) can each hold a thread of a small pool while waiting for the other
    thread, and the process hangs (a 2-core CPU: the first chunk of a run never returned).
    ``sequential_vmap`` loops over the batch instead, with the same values.
    """
    base = nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        return jax.custom_batching.sequential_vmap(lambda k: base(k, shape, dtype))(key)

    return init


class MLP(nn.Module):
    """``layers`` hidden layers of width ``hidden``, then a linear head of ``out`` units."""

    hidden: int
    layers: int
    out: int
    activation: str = "tanh"
    head_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for _ in range(self.layers):
            x = act(nn.Dense(self.hidden, kernel_init=orthogonal(np.sqrt(2)))(x))
        # A small policy head starts near-uniform; the critic head starts at unit scale.
        return nn.Dense(self.out, kernel_init=orthogonal(self.head_scale))(x)


def mlp_columns(mlp_params, columns: jax.Array, activation: str) -> jax.Array:
    """What :class:`MLP` computes, with the batch along the last axis: ``columns``
    float32[F, B] -> float32[out, B], from the MLP's own parameters (``Dense_0`` ...).

    The same products, laid out so that the backward pass's weight gradients contract two
    row-major ``[features, B]`` operands over their last axis. On the CPU that is the fast
    form: for an MLP of two 64-unit layers over 8192 samples the gradient took about two
    thirds of the time of the batch-major one (measured when it was written; the update's
    profile is in docs/performance.md, "The IPPO update").
    """
    act = ACTIVATIONS[activation]
    layers = [mlp_params[f"Dense_{i}"] for i in range(len(mlp_params))]
    for i, layer in enumerate(layers):
        columns = jnp.einsum("io,ib->ob", layer["kernel"], columns) + layer["bias"][:, None]
        if i < len(layers) - 1:
            columns = act(columns)
    return columns


class Actor(nn.Module):
    """float32[..., *F] observation -> float32[..., A] action logits.

    ``feature_dims`` is the number of trailing feature axes ``F`` of one agent's
    observation (1 for vectors, 3 for the ``[K, K, 6]`` grid), flattened before the MLP.
    """

    num_actions: int
    hidden: int = 64
    layers: int = 2
    activation: str = "tanh"
    feature_dims: int = 1

    @nn.compact
    def __call__(self, observation: jax.Array) -> jax.Array:
        observation = flat_features(observation, observation.ndim - self.feature_dims)
        return MLP(self.hidden, self.layers, self.num_actions, self.activation, head_scale=0.01)(observation)

    def columns(self, params, columns: jax.Array) -> jax.Array:
        """float32[F, B] flattened observations, one per column -> float32[A, B] logits, one
        column per observation: the transpose of :meth:`apply` on the rows (:func:`mlp_columns`)."""
        return mlp_columns(params["params"]["MLP_0"], columns, self.activation)


class Critic(nn.Module):
    """float32[..., C] critic input -> float32[...] value."""

    hidden: int = 64
    layers: int = 2
    activation: str = "tanh"

    @nn.compact
    def __call__(self, critic_input: jax.Array) -> jax.Array:
        return MLP(self.hidden, self.layers, 1, self.activation, head_scale=1.0)(critic_input)[..., 0]

    def columns(self, params, columns: jax.Array) -> jax.Array:
        """float32[C, B] critic inputs, one per column -> float32[B] values (:func:`mlp_columns`)."""
        return mlp_columns(params["params"]["MLP_0"], columns, self.activation)[0]


class ResettingGRU(nn.Module):
    """A GRU scanned over the leading time axis, its state zeroed where an episode starts.

    ``(hidden float32[B..., H], (inputs float32[T, B..., F], resets bool[T, B...]))`` ->
    ``(hidden after the last step, outputs float32[T, B..., H])``. Where ``resets[t]`` is
    true the state is zeroed before step ``t`` reads its input, so a sequence that crosses
    an episode boundary gives the new episode the outputs a fresh sequence would.
    """

    hidden: int

    @functools.partial(nn.scan, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0)
    @nn.compact
    def __call__(self, hidden: jax.Array, step):
        inputs, resets = step
        hidden = jnp.where(resets[..., None], jnp.zeros_like(hidden), hidden)
        hidden, out = nn.GRUCell(self.hidden, recurrent_kernel_init=orthogonal())(hidden, inputs)
        return hidden, out


class RecurrentActor(nn.Module):
    """``(hidden float32[B..., H], observations float32[T, B..., *F], resets bool[T, B...])`` ->
    ``(hidden, logits float32[T, B..., A])``: a Dense embedding of width ``hidden``, the GRU of
    ``gru_hidden`` units (:class:`ResettingGRU`), then ``layers`` hidden layers and the head."""

    num_actions: int
    hidden: int = 64
    layers: int = 1
    activation: str = "tanh"
    feature_dims: int = 1
    gru_hidden: int = 128

    @nn.compact
    def __call__(self, hidden: jax.Array, observation: jax.Array, resets: jax.Array):
        x = flat_features(observation, observation.ndim - self.feature_dims)
        x = ACTIVATIONS[self.activation](nn.Dense(self.hidden, kernel_init=orthogonal(np.sqrt(2)))(x))
        hidden, x = ResettingGRU(self.gru_hidden)(hidden, (x, resets))
        return hidden, MLP(self.hidden, self.layers, self.num_actions, self.activation, head_scale=0.01)(x)


class RecurrentCritic(nn.Module):
    """``(hidden float32[B..., H], critic inputs float32[T, B..., C], resets bool[T, B...])`` ->
    ``(hidden, values float32[T, B...])``, built like :class:`RecurrentActor`."""

    hidden: int = 64
    layers: int = 1
    activation: str = "tanh"
    gru_hidden: int = 128

    @nn.compact
    def __call__(self, hidden: jax.Array, critic_input: jax.Array, resets: jax.Array):
        x = ACTIVATIONS[self.activation](
            nn.Dense(self.hidden, kernel_init=orthogonal(np.sqrt(2)))(critic_input))
        hidden, x = ResettingGRU(self.gru_hidden)(hidden, (x, resets))
        return hidden, MLP(self.hidden, self.layers, 1, self.activation, head_scale=1.0)(x)[..., 0]


def init_recurrent(module: nn.Module, key: jax.Array, sample: jax.Array):
    """Parameters of a recurrent module for one input ``sample`` float32[*F] (no batch, no time axis)."""
    hidden = jnp.zeros((module.gru_hidden,), jnp.float32)
    return module.init(key, hidden, sample[None], jnp.zeros((1,), bool))


def build_networks(network_config: dict, num_actions: int, feature_dims: int = 1):
    """(actor, critic) modules from the ``network`` section of a config (as a plain dict):
    :class:`Actor` and :class:`Critic`, or with ``recurrent`` :class:`RecurrentActor` and
    :class:`RecurrentCritic`.

    ``feature_dims``: trailing feature axes of one agent's observation (see :class:`Actor`).
    """
    kw = dict(hidden=network_config["hidden"], layers=network_config["layers"], activation=network_config["activation"])
    if network_config.get("recurrent", False):  # checkpoints saved before the key existed are feedforward
        gru = network_config["gru_hidden"]
        return (RecurrentActor(num_actions=num_actions, feature_dims=feature_dims, gru_hidden=gru, **kw),
                RecurrentCritic(gru_hidden=gru, **kw))
    return Actor(num_actions=num_actions, feature_dims=feature_dims, **kw), Critic(**kw)


class QNetwork(nn.Module):
    """float32[..., *F] observation -> float32[..., A] action values.

    ``layers`` hidden layers of width ``hidden``, each Dense -> LayerNorm -> activation;
    ``feature_dims`` trailing feature axes ``F`` are flattened first (3 for the grid form).
    """

    num_actions: int
    hidden: int = 64
    layers: int = 2
    activation: str = "relu"
    feature_dims: int = 1

    @nn.compact
    def __call__(self, observation: jax.Array) -> jax.Array:
        x = flat_features(observation, observation.ndim - self.feature_dims)
        for _ in range(self.layers):
            x = ACTIVATIONS[self.activation](nn.LayerNorm()(nn.Dense(self.hidden)(x)))
        return nn.Dense(self.num_actions)(x)


def build_q_network(network_config: dict, num_actions: int, feature_dims: int = 1) -> QNetwork:
    """The Q-network described by the ``network`` section of a config (as a plain dict)."""
    return QNetwork(num_actions=num_actions, hidden=network_config["hidden"], layers=network_config["layers"],
                    activation=network_config["activation"], feature_dims=feature_dims)


def flat_features(x: jax.Array, batch_dims: int) -> jax.Array:
    """Flattens everything after the first ``batch_dims`` axes (grid observations -> vectors)."""
    return x.reshape(x.shape[:batch_dims] + (-1,))


def param_count(params) -> int:
    return int(sum(np.prod(p.shape) for p in jax.tree.leaves(params)))

