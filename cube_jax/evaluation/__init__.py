"""Playing episodes: the batched JAX rollout, the CPU episode loop and episode traces.

* :func:`evaluate` / :func:`rollout` (:mod:`cube_jax.evaluation.batched`): batched JAX
  policies over many episodes at once;
* :func:`run_episode` / :func:`run_episodes` / :class:`Episode` (from :mod:`cube_jax.runtime`,
  the layer below): decision makers of every kind under EmCoop's MAEIL stages and a
  communication topology;
* :class:`TraceWriter`, :func:`read_trace`, :func:`validate_trace`
  (:mod:`cube_jax.trace`): the trace format of LLM.md section 5.
"""
from cube_jax.evaluation.batched import EpisodeStats, evaluate, rollout, summarize
from cube_jax.runtime import (
    TOPOLOGIES,
    Episode,
    EpisodeResult,
    Limits,
    Topology,
    arun_episode,
    arun_episodes,
    make_topology,
    run_episode,
    run_episodes,
)
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
    "arun_episode",
    "arun_episodes",
    "evaluate",
    "make_topology",
    "read_trace",
    "rollout",
    "run_episode",
    "run_episodes",
    "summarize",
    "validate_trace",
]
