"""The MAEIL runtime: every kind of agent plays episodes under EmCoop's stages and a
communication topology (LLM.md sections 2 and 3), with per-agent clocks, phases and
simultaneous delivery.

* :func:`run_episode` / :func:`run_episodes` (and the coroutine forms :func:`arun_episode`,
  :func:`arun_episodes`) / :class:`Episode`: the episode loop (:mod:`.loop`);
* :mod:`.topologies`: who may talk to whom, and when, one file per topology, each handed
  a :class:`~cube_jax.runtime.phase.Phase`;
* :mod:`.decisions`, :mod:`.messaging`, :mod:`.stepping`, :mod:`.limits`: asking agents and
  checking what they decide, messages and their delivery, the environment step, limits.
"""
from cube_jax.runtime.limits import EpisodeEnded, Limits
from cube_jax.runtime.loop import DEFAULT_MAX_PHASES, Episode, env_spec
from cube_jax.runtime.messaging import MAX_MESSAGE_CHARS
from cube_jax.runtime.play import arun_episode, arun_episodes, run_episode, run_episodes
from cube_jax.runtime.results import EpisodeResult
from cube_jax.runtime.stepping import step_tasks
from cube_jax.runtime.topologies import DEFAULT_DIRECTIVE_TIMEOUT, TOPOLOGIES, Topology, make_topology

__all__ = ["DEFAULT_DIRECTIVE_TIMEOUT", "DEFAULT_MAX_PHASES", "Episode", "EpisodeEnded", "EpisodeResult", "Limits",
           "MAX_MESSAGE_CHARS", "TOPOLOGIES", "Topology", "arun_episode", "arun_episodes", "env_spec", "make_topology",
           "run_episode", "run_episodes", "step_tasks"]
