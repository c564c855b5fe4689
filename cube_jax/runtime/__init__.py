"""The MAEIL runtime: every kind of agent plays episodes under EmCoop's stages and a
communication topology (LLM.md sections 2 and 3).

* :func:`run_episode` / :func:`run_episodes` / :class:`Episode`: the CPU episode loop;
* :mod:`cube_jax.runtime.topologies`: who may talk to whom, and when.
"""
from cube_jax.runtime.loop import Episode, EpisodeEnded, EpisodeResult, Limits, env_spec, run_episode, run_episodes, step_tasks
from cube_jax.runtime.topologies import TOPOLOGIES, Topology, make_topology

__all__ = ["Episode", "EpisodeEnded", "EpisodeResult", "Limits", "TOPOLOGIES", "Topology", "env_spec", "make_topology",
           "run_episode", "run_episodes", "step_tasks"]
