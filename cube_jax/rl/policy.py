"""Loading a trained policy from a checkpoint, for evaluation and the PettingZoo adapter.

>>> policy = load_policy("runs/ippo-easy-20250101-000000")   # doctest: +SKIP
>>> env = cube_jax.make(**policy.env_kwargs)                    # doctest: +SKIP
>>> actions = policy.act(ts.observation, key)                   # int32[N], greedy by default  # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.core.observations import observation_shape, observe
from cube_jax.core.types import EnvConfig, State
from cube_jax.rl.checkpoint import POLICY_META, read_meta, restore_actor
from cube_jax.rl.networks import build_networks


@dataclasses.dataclass(frozen=True)
class ActorPolicy:
    """An actor network as a batched policy (:class:`cube_jax.agents.BatchedPolicy`).

    It computes the observation it reads from the state (``cfg``'s form) and acts for every
    agent; its policy state is ``(key, greedy)``: greedy takes the most likely action,
    otherwise actions are sampled with the key. ``params`` may be traced (training's
    evaluation builds one inside its jitted program).
    """

    actor: Any  # the flax Actor module
    params: Any  # its parameters
    cfg: EnvConfig  # whose observation form the actor reads
    name: str = "policy"

    def init(self, key: jax.Array):
        return key, jnp.array(True)

    def act(self, state: State, policy_state):
        key, greedy = policy_state
        key, sub = jax.random.split(key)
        logits = self.actor.apply(self.params, observe(self.cfg, state))
        actions = jnp.where(greedy, jnp.argmax(logits, axis=-1), jax.random.categorical(sub, logits))
        return actions.astype(jnp.int32), (key, greedy)


@dataclasses.dataclass(frozen=True)
class LoadedPolicy:
    """A trained actor. ``act`` is pure, so ``jax.jit`` and ``jax.vmap`` over it work."""

    params: Any  # actor parameters (flax), shared by all agents
    actor: Any  # the flax Actor module
    env_kwargs: Dict[str, Any]  # keyword arguments of cube_jax.make for the world it was trained on
    observation_size: int  # D, the per-agent observation length it expects (flattened)
    meta: Dict[str, Any]  # everything in the checkpoint's policy.json
    feature_shape: Tuple[int, ...] = ()  # one agent's observation shape; () means (observation_size,)

    def act(self, observation: jax.Array, key: jax.Array, greedy: bool = True) -> jax.Array:
        """int32[N] actions for per-agent observations float32[N, *F] (any leading axes work).

        ``F`` is ``feature_shape`` (``(D,)`` for the vector forms, ``(K, K, 6)`` for the grid).
        ``greedy`` picks the most likely action; otherwise actions are sampled with ``key``.
        ``greedy`` may be a traced bool.
        """
        observation = jnp.asarray(observation, jnp.float32)
        expected = self.feature_shape or (self.observation_size,)
        if tuple(observation.shape[observation.ndim - len(expected):]) != tuple(expected):
            got = observation.shape[-1] if len(expected) == 1 else tuple(observation.shape[-len(expected):])
            want = expected[0] if len(expected) == 1 else tuple(expected)
            raise ValueError(
                f"LoadedPolicy.act: observation has {got} features per agent, the policy "
                f"expects {want} (trained with cube_jax.make(**{self.env_kwargs}))"
            )
        logits = self.actor.apply(self.params, observation)
        sampled = jax.random.categorical(key, logits)
        return jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)


    def for_world(self, env, name: str = "policy") -> ActorPolicy:
        """This policy as a batched policy on ``env``'s world (greedy by default): it reads the
        observation form it was trained with; ValueError when that does not fit ``env``."""
        cfg = dataclasses.replace(env.cfg, observation=self.env_kwargs.get("observation", "vector"),
                                  view_radius=self.env_kwargs.get("view_radius", env.cfg.view_radius))
        expected = self.feature_shape or (self.observation_size,)
        got = tuple(observation_shape(cfg)[1:])
        if got != tuple(expected):
            raise ValueError(
                f"the policy reads observations of shape {tuple(expected)} per agent (trained on "
                f"cube_jax.make(**{self.env_kwargs})); this world gives {got} in its {cfg.observation!r} form "
                f"({env.num_agents} agents, {env.num_blocks} blocks): use a world of the same size")
        return ActorPolicy(self.actor, self.params, cfg, name)


def checkpoint_dir(path: Union[str, Path]) -> Path:
    """Accepts a run folder or its ``checkpoint/`` folder."""
    path = Path(path)
    if (path / POLICY_META).is_file():
        return path
    if (path / "checkpoint" / POLICY_META).is_file():
        return path / "checkpoint"
    raise FileNotFoundError(
        f"{str(path)!r} holds no checkpoint: no {POLICY_META} in it or in its checkpoint/ folder; train one with: "
        "python baselines/ippo.py"
    )


def load_policy(path: Union[str, Path]) -> LoadedPolicy:
    """The policy saved by ``baselines/ippo.py`` or ``baselines/mappo.py`` at ``path``."""
    directory = checkpoint_dir(path)
    meta = read_meta(directory)
    feature_shape = tuple(int(d) for d in meta["observation_shape"][1:])  # observation_shape is [N, *F]
    actor, _ = build_networks(meta["network"], meta["num_actions"], len(feature_shape))
    abstract = jax.eval_shape(actor.init, jax.random.PRNGKey(0), jnp.zeros(feature_shape, jnp.float32))
    params = restore_actor(directory, abstract)
    return LoadedPolicy(params=params, actor=actor, env_kwargs=dict(meta["env_kwargs"]),
                        observation_size=int(np.prod(feature_shape)), meta=meta, feature_shape=feature_shape)
