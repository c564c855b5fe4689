"""The batched JAX rollout: many episodes of a batched policy at once, in one jitted scan.

* :func:`evaluate` / :func:`rollout` / :func:`summarize` (:mod:`cube_jax.evaluation.batched`):
  batched JAX policies over many episodes at once.

The CPU episode loop (``run_episode``, ``run_episodes``, ``Episode``, ...) lives in
:mod:`cube_jax.runtime` and the trace format (``TraceWriter``, ``read_trace``, ...) in
:mod:`cube_jax.trace`. Those names were once re-exported here; they still resolve, with a
``DeprecationWarning`` that names their home.
"""
from __future__ import annotations

import importlib
import warnings

from cube_jax.evaluation.batched import EpisodeStats, evaluate, rollout, summarize

# The names this package used to re-export, and the package each now lives in.
_MOVED = {
    **{name: "cube_jax.runtime" for name in (
        "Episode", "EpisodeResult", "Limits", "TOPOLOGIES", "Topology", "arun_episode", "arun_episodes",
        "make_topology", "run_episode", "run_episodes")},
    **{name: "cube_jax.trace" for name in ("TraceError", "TraceWriter", "read_trace", "validate_trace")},
}


def __getattr__(name: str):
    """Resolve a moved name from its home, warning the caller of the path to use."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"cube_jax.evaluation.{name} is deprecated; import it from {home} "
                  f"(from {home} import {name})", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)


__all__ = ["EpisodeStats", "evaluate", "rollout", "summarize"]
