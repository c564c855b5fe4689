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

from cube_jax.rl.checkpoint import POLICY_META, read_meta, restore_actor
from cube_jax.rl.networks import build_networks


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


def checkpoint_dir(path: Union[str, Path]) -> Path:
    """Accepts a run folder or its ``checkpoint/`` folder."""
    path = Path(path)
    if (path / POLICY_META).is_file():
        return path
    if (path / "checkpoint" / POLICY_META).is_file():
        return path / "checkpoint"
    raise FileNotFoundError(
        f"load_policy: {str(path)!r} is neither a run folder nor a checkpoint folder (no {POLICY_META} in it "
        "or in its checkpoint/); train one with: python baselines/ippo.py"
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
