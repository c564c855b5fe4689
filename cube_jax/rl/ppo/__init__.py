"""IPPO and MAPPO on CUBE, trained end to end inside jitted programs (PureJaxRL style).

One set of actor/critic parameters is shared by every agent: observations are
``float32[E, N, D]`` and the agent axis ``N`` is a batch axis like the env axis ``E``
(each observation carries the agent's one-hot id). The two algorithms differ only in
what the critic sees:

* IPPO: the agent's own observation;
* MAPPO: a global state: the compact world vector (:func:`world_vector`) plus the
  agent's one-hot id (``"world"``, the default), the world vector next to the agent's
  own observation (``"obs_world"``), or the flattened five-channel grid plus the id.

``make_train(config)`` returns ``train(key)``: rollouts and updates in nested
``lax.scan``s, the whole run one jitted program; ``jax.vmap(train)(keys)`` trains several
seeds at once. :class:`PPO` is a :class:`~cube_jax.rl.trainer.Trainer`: the driver
(:mod:`cube_jax.rl.run`) runs the same updates (:func:`~cube_jax.rl.trainer.update_chunk`)
in jitted chunks to show progress, save checkpoints and shard the env batch over a device
mesh.

With ``network.recurrent`` the actor and the critic are GRUs
(:class:`~cube_jax.rl.networks.RecurrentActor`, :class:`~cube_jax.rl.networks.RecurrentCritic`),
as in JaxMARL's IPPO-RNN and MAPPO-RNN. The runner then carries both hidden states
``float32[E, N, H]`` and whether each env's current observation starts an episode (where
the states are zeroed before they read it). A rollout keeps the hidden states it started
from and each step's start flags; the update replays the GRUs over the rollout from there,
with minibatches of whole environments' sequences rather than of single steps. A truncated
step is bootstrapped from the critic's value of the pre-reset state read with the hidden
state the critic had after that step, before the reset: the cut episode's memory, one
step further.

The pieces, a screen each: :mod:`~cube_jax.rl.ppo.critic` (what the critic reads),
:mod:`~cube_jax.rl.ppo.state` (the runner and the transitions), :mod:`~cube_jax.rl.ppo.rollout`,
:mod:`~cube_jax.rl.ppo.advantage`, :mod:`~cube_jax.rl.ppo.update` and
:mod:`~cube_jax.rl.ppo.acting`, composed by :class:`PPO` (:mod:`~cube_jax.rl.ppo.learner`).
"""
from __future__ import annotations

import jax

from cube_jax.rl.config import Config
from cube_jax.rl.ppo.categorical import policy_terms, sample_categorical
from cube_jax.rl.ppo.critic import FinalCriticInputWrapper, critic_input, world_vector
from cube_jax.rl.ppo.learner import PPO
from cube_jax.rl.ppo.state import RecurrentRunner, Runner, Transition
from cube_jax.rl.trainer import update_chunk


def make_train(config: Config):
    """``train(key) -> {"runner": Runner, "metrics": {name: float32[num_updates]}}``, jitted.

    The whole run (init, every rollout and update) is one XLA program; vmap it over keys
    to train several seeds at once: ``jax.jit(jax.vmap(make_train(config)))(keys)``. The
    updates are :func:`~cube_jax.rl.trainer.update_chunk`, the program the chunked driver
    runs, here as one chunk of the whole budget.
    """
    ppo = PPO(config)

    def train(key: jax.Array):
        runner = ppo.init(key)
        runner, metrics = update_chunk(ppo, runner, ppo.num_updates, ppo.num_updates, ppo.num_updates)
        return {"runner": runner, "metrics": metrics}

    return jax.jit(train)


__all__ = ["FinalCriticInputWrapper", "PPO", "RecurrentRunner", "Runner", "Transition", "critic_input", "make_train",
           "policy_terms", "sample_categorical", "world_vector"]
