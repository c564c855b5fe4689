"""Cooperation analytics from episode traces (LLM.md sections 5 and 6).

- :mod:`~cube_jax.analytics.metrics`: :func:`episode_metrics`, every metric of one episode
  (the outcomes, EmCoop's eighteen, the cost of model calls, the negotiation metrics).
- :mod:`~cube_jax.analytics.intervals`: :func:`bootstrap_ci`, means with stratified
  bootstrap intervals; :func:`eval_intervals` for ``cube-jax eval``'s episodes.
- :mod:`~cube_jax.analytics.report`: :func:`build_report` and :func:`write_metrics_json`,
  from trace files and folders to metrics.json.
- :mod:`~cube_jax.analytics.balance`: :func:`workload_balance`, COBLOCK's workload balance
  (eqs. 2-3) of the pushes each agent contributed, generalised to n agents.
- :mod:`~cube_jax.analytics.compare`: runs side by side, as tables and plots.
- :mod:`~cube_jax.analytics.timeline`: :func:`render_timeline`, a picture of one episode.
- :mod:`~cube_jax.analytics.traces`: finding and reading traces fast, through views of the
  record types of :mod:`cube_jax.trace`; :mod:`~cube_jax.analytics.synthetic`: random
  valid traces.

The plotting modules import matplotlib only when they draw.
"""
from cube_jax.analytics.balance import BALANCE_METRICS, coblock_gamma, episode_workload, workload_balance
from cube_jax.analytics.intervals import bootstrap_ci, eval_intervals, summarize
from cube_jax.analytics.metrics import (COST_METRICS, EMCOOP_LEGEND, EMCOOP_METRICS, EPISODE_ONLY_METRICS, METRICS,
                                        NEGOTIATION_METRICS, OUTCOME_METRICS, REPAIR_METRICS, REPORTED_METRICS,
                                        episode_metrics)
from cube_jax.analytics.report import Report, TraceFailure, build_report, validate_traces, write_metrics_json
from cube_jax.analytics.timeline import render_timeline
from cube_jax.analytics.traces import load_trace, stratum, team_label, trace_paths

__all__ = [
    "BALANCE_METRICS",
    "COST_METRICS",
    "EMCOOP_LEGEND",
    "EMCOOP_METRICS",
    "EPISODE_ONLY_METRICS",
    "METRICS",
    "NEGOTIATION_METRICS",
    "OUTCOME_METRICS",
    "REPAIR_METRICS",
    "REPORTED_METRICS",
    "Report",
    "TraceFailure",
    "bootstrap_ci",
    "coblock_gamma",
    "episode_workload",
    "build_report",
    "episode_metrics",
    "eval_intervals",
    "load_trace",
    "render_timeline",
    "stratum",
    "summarize",
    "team_label",
    "trace_paths",
    "validate_traces",
    "workload_balance",
    "write_metrics_json",
]
