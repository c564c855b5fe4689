"""The learners: one registry of algorithms, read by everything that trains or loads one.

Each algorithm is declared once, as an :class:`Algorithm`: the name users type
(``python baselines/<name>.py``, ``cube-jax bench run <name>``), the ``config.algo`` it
trains as with the preset files laid on top (the recurrent variants are PPO with a preset),
its trainer, how its policy acts and what its critic reads. The config
(:mod:`cube_jax.rl.config`), the driver (:mod:`cube_jax.rl.run`), policy loading
(:mod:`cube_jax.rl.policy`), transfer (:mod:`cube_jax.rl.transfer`), the benchmark
(:mod:`cube_jax.bench.run`) and ``baselines/launch.py`` read these records instead of
comparing names.

The module imports nothing heavy: a trainer is named by its entry point
(``"module:attribute"``) and imported when one is built.

>>> [a.name for a in ALGORITHMS]
['ippo', 'mappo', 'ippo_rnn', 'mappo_rnn', 'pqn_vdn']
>>> get("mappo_rnn").config_algo, get("mappo_rnn").presets
('mappo', ('mappo_rnn',))
>>> CONFIG_ALGOS
('ippo', 'mappo', 'pqn_vdn')
"""
from __future__ import annotations

import dataclasses
import pkgutil
from typing import Any, Callable, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """A learner, as users name it.

    * ``config_algo``: the value of ``config.algo`` it trains as (its own name, or the one it
      is a variant of), whose preset file ``<config_algo>.yaml`` holds its defaults; ``presets``
      are laid on top of that file, in order;
    * ``trainer``: the entry point ``"module:Class"`` of its trainer, built as ``Class(config)``;
    * ``critic_sees_world``: its critic reads the world state (``network.critic_input``) rather
      than the agent's own observation;
    * ``q_values``: its policy network scores actions by value (greedy play: argmax; sampled
      play: epsilon-greedy) rather than by an actor's logits (sampled from them);
    * ``exploration``: how it acts while training, in words (the learning curve's title);
    * ``ppo_options``: it takes ``network.recurrent`` and ``network.blocked_moves``;
    * ``minibatches_key``: the config key of its minibatch count;
    * ``transfers``: ``train.init_from`` can start it (its networks read the agent's
      observation alone, so they carry over to another team size).
    """

    name: str
    description: str
    trainer: str
    config_algo: str = ""
    presets: Tuple[str, ...] = ()
    critic_sees_world: bool = False
    q_values: bool = False
    exploration: str = "sampled actions"
    ppo_options: bool = True
    minibatches_key: str = "train.num_minibatches"
    transfers: bool = False

    def __post_init__(self):
        if not self.config_algo:
            object.__setattr__(self, "config_algo", self.name)

    @property
    def is_variant(self) -> bool:
        """True for a preset of another algorithm (ippo_rnn, mappo_rnn), which config.algo never names."""
        return self.config_algo != self.name

    def trainer_class(self) -> Callable[[Any], Any]:
        """The trainer class, imported on first use."""
        return pkgutil.resolve_name(self.trainer)

    def make_trainer(self, config) -> Any:
        """A trainer of ``config`` (whose ``algo`` is this algorithm's ``config_algo``)."""
        return self.trainer_class()(config)

    def critic_kind(self, config) -> str:
        """What the critic reads: ``"obs"``, or the world state ``config.network.critic_input``
        (:func:`cube_jax.rl.ppo.critic_input`)."""
        return config.network.critic_input if self.critic_sees_world else "obs"

    def minibatches(self, config) -> int:
        """The minibatch count this algorithm reads from ``config``."""
        section, key = self.minibatches_key.split(".")
        return getattr(getattr(config, section), key)


ALGORITHMS: Tuple[Algorithm, ...] = (
    Algorithm("ippo", "PPO whose critic sees the agent's own observation", "cube_jax.rl.ppo:PPO", transfers=True),
    Algorithm("mappo", "PPO whose critic sees the world state", "cube_jax.rl.ppo:PPO", critic_sees_world=True),
    Algorithm("ippo_rnn", "IPPO with GRU actor and critic", "cube_jax.rl.ppo:PPO", config_algo="ippo",
              presets=("ippo_rnn",), transfers=True),
    Algorithm("mappo_rnn", "MAPPO with GRU actor and critic", "cube_jax.rl.ppo:PPO", config_algo="mappo",
              presets=("mappo_rnn",), critic_sees_world=True),
    Algorithm("pqn_vdn", "Q-learning of the agents' summed action values", "cube_jax.rl.pqn:PQN", q_values=True,
              exploration="epsilon-greedy", ppo_options=False, minibatches_key="pqn.num_minibatches",
              transfers=True),
)
_BY_NAME = {a.name: a for a in ALGORITHMS}

# The values config.algo takes: the algorithms that are not presets of another.
CONFIG_ALGOS: Tuple[str, ...] = tuple(a.name for a in ALGORITHMS if not a.is_variant)
NAMES: Tuple[str, ...] = tuple(_BY_NAME)


def get(name: str) -> Algorithm:
    """The algorithm called ``name``; KeyError naming the known ones when there is none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown algorithm {name!r}; algorithms are {', '.join(NAMES)}") from None


def find(name: str) -> Optional[Algorithm]:
    """The algorithm called ``name``, or None."""
    return _BY_NAME.get(name)


def of(config) -> Algorithm:
    """The algorithm a config trains (``config.algo``)."""
    return _BY_NAME[config.algo]


def of_meta(meta) -> Algorithm:
    """The algorithm a checkpoint's metadata names; checkpoints of older runs that do not
    name one hold an IPPO or MAPPO actor, which acts as IPPO's."""
    return _BY_NAME[meta.get("algo", "ippo")]


__all__ = ["ALGORITHMS", "Algorithm", "CONFIG_ALGOS", "NAMES", "find", "get", "of", "of_meta"]
