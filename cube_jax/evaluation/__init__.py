"""Playing episodes: the batched JAX rollout, the CPU episode loop and episode traces.

* :func:`evaluate` / :func:`rollout` (:mod:`cube_jax.evaluation.batched`): batched JAX
  policies over many episodes at once;
* :func:`run_episode` / :func:`run_episodes` / :class:`Episode`
  (:mod:`cube_jax.evaluation.episode`): decision makers of every kind under EmCoop's MAEIL
  stages and a communication topology (:mod:`cube_jax.evaluation.topologies`);
* :class:`TraceWriter`, :func:`read_trace`, :func:`validate_trace`
  (:mod:`cube_jax.trace`): the trace format of LLM.md section 5.
"""
from cube_jax.runtime.loop import Episode, EpisodeResult, Limits, run_episode, run_episodes
from cube_jax.evaluation.batched import EpisodeStats, evaluate, rollout, summarize
from cube_jax.runtime.topologies import TOPOLOGIES, Topology, make_topology
from cube_jax.trace import TraceError, TraceWriter, read_trace, validate_trace

__all__ = [
    "Episode",
    "EpisodeResult",
    "EpisodeStats",
    "Limits",
    "TOPOLOGIES",
    "Topology",
    "TraceError",
    "TraceWriter",
    "evaluate",
    "make_topology",
    "read_trace",
    "rollout",
    "run_episode",
    "run_episodes",
    "summarize",
    "validate_trace",
]
