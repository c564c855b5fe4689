"""Workload balance: how evenly a team shares the pushing, from a trace alone.

COBLOCK (``shared/papers/coblock.txt``, eqs. 2-3) measures how evenly two teammates share
a task: with ``N_a``, ``N_b`` the actions each took and ``N*_a``, ``N*_b`` their numbers in
an optimal assignment, ``a = N_a * N*_b / N*_a`` and ``b = N_b`` (eq. 2), and
``gamma = a * b / (a**2 + b**2)`` (eq. 3): 0.5 when the work is shared as the optimal
assignment shares it, falling to 0 when one agent does everything.

**What counts as work.** In CUBE the work is pushing. Agent i *pushes* block b at step t
when, in the state before the step, i is aligned with a face g of the alive block b (it
stands in the line behind the face, directly or through consecutive agents: LLM.md's
``is_aligned_with_block``, the step rules' chain search with every agent pushing) and its
primitive action at step t is g's push direction (``down`` for the top face, ``up`` for the
bottom one, ``right`` for the left one, ``left`` for the right one). Whether the block
moved does not matter: an agent holding its face of a heavy block while the team gathers
is doing its share. An agent pushes at most one block per step, so ``N_i`` is the number
of steps at which agent i pushed. For an agent acting with primitives this is exactly the
trace's ``joint`` count (spatial and temporal) summed over faces; for a planner it also
counts a push whose plan step was not ``push_block`` (an agent walking into its face line).

The positions before step t are the previous ``step`` record's ``agents`` and ``blocks``
(the ``episode`` record's ``layout`` for t = 0), the action is the step record's ``actions``.

**Two agents.** Every CUBE agent can push every face, so an optimal assignment gives every
agent the same share: ``N*_a = N*_b``, ``a = N_a``, ``b = N_b``, and ``workload_balance``
is COBLOCK's gamma.

**More agents.** With normalised work ``x_i = N_i / N*_i`` and shares ``p_i = x_i / sum(x)``,
the effective number of contributors is ``E = 1 / sum(p_i**2)`` (the inverse Simpson
index: E agents doing equal work give E), and::

    workload_balance = (E - 1) / (2 * (n - 1))

For n = 2 this *is* eq. 3: ``E = (a + b)**2 / (a**2 + b**2)``, so ``(E - 1) / 2 =
a*b / (a**2 + b**2)``. For any n it is 0.5 when every agent pushes equally and 0 when one
agent pushes alone, it ignores the scale of the work (doubling everyone's pushes changes
nothing), and it says how many agents really carry the load: two of four agents pushing
equally give E = 2 and 1/6. (A Gini coefficient would also range over [0, 1], but it does
not reduce to COBLOCK's gamma at n = 2.)

**Mixed teams.** ``workload_balance_kinds`` applies the same formula to the kinds of the
team (``human``, ``llm``, ``heuristic``, ...): each kind's work is the pushes of its agents,
and its optimal share is proportional to its number of agents (``N*_k`` = agents of kind
k), COBLOCK's normalisation of eq. 2. For one person beside one language agent it is
COBLOCK's human-machine gamma; for one person beside three heuristic agents, the person's
pushes are weighed against the three agents' pushes divided by three.

Both are undefined (``None``, JSON null) when nobody pushed, and when there is only one
agent (one kind). ``cube-jax report`` gives them per episode beside ``pushes`` (steps with
a push, per agent) and, over the episodes where they are defined, their mean and
bootstrap interval.

>>> round(coblock_gamma(30, 10), 4), coblock_gamma(10, 10), coblock_gamma(10, 0)
(0.3, 0.5, 0.0)
>>> round(workload_balance([30, 10]), 4), workload_balance([5, 5, 5, 5]), workload_balance([6, 6, 0, 0])
(0.3, 0.5, 0.16666666666666666)
>>> workload_balance([0, 0]) is None, workload_balance([7]) is None
(True, True)
"""
from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from cube_jax.analytics.intervals import CONFIDENCE, RESAMPLES, bootstrap_ci
from cube_jax.analytics.traces import METRIC_VIEWS, MetricRecord, RecordError, decode_records, from_dicts
from cube_jax.core.types import ACTION_DELTAS
from cube_jax.names import STAY, action_or_stay, agent_order

_EPISODE, _STEP = METRIC_VIEWS["episode"], METRIC_VIEWS["step"]

BALANCE_METRICS = ("workload_balance", "workload_balance_kinds")
# The per-episode keys ``cube-jax report`` adds beside the metrics of LLM.md section 6.
BALANCE_KEYS = BALANCE_METRICS + ("pushes",)


def coblock_gamma(a: float, b: float, optimal_a: float = 1.0, optimal_b: float = 1.0) -> Optional[float]:
    """COBLOCK's workload balance of two agents (eqs. 2-3) from their action counts ``a``,
    ``b`` and their counts in an optimal assignment; None when neither acted."""
    a = a * optimal_b / optimal_a
    if a == 0 and b == 0:
        return None
    return float(a * b / (a * a + b * b))


def workload_balance(work: Sequence[float], optimal: Optional[Sequence[float]] = None) -> Optional[float]:
    """``(E - 1) / (2 (n - 1))`` for the work of n agents (see the module docstring);
    ``optimal`` gives each agent's work in an optimal assignment (default: equal shares).
    None for fewer than two agents or when nobody worked."""
    x = np.asarray(work, dtype=float)
    if x.ndim != 1 or (x < 0).any():
        raise ValueError(f"workload_balance: work must be a list of counts >= 0, got {list(work)[:8]}")
    if optimal is not None:
        share = np.asarray(optimal, dtype=float)
        if share.shape != x.shape or not (share > 0).all():
            raise ValueError(f"workload_balance: optimal must give one count > 0 per agent, got {list(optimal)[:8]}")
        x = x / share
    total = x.sum()
    if x.size < 2 or total == 0:
        return None
    p = x / total
    effective = 1.0 / float((p * p).sum())
    return (effective - 1.0) / (2.0 * (x.size - 1))


# --- pushes from the records -------------------------------------------------------------------


class _Blocks:
    """Which alive block covers a cell, rebuilt only when the blocks changed (most steps
    move none)."""

    def __init__(self):
        self._rows: Any = None
        self._cells: Dict[Tuple[int, int], int] = {}

    def at(self, blocks: Sequence[Sequence[Any]]) -> Dict[Tuple[int, int], int]:
        if blocks != self._rows:
            cells: Dict[Tuple[int, int], int] = {}
            for j, row in enumerate(blocks):
                r, c, w, alive = int(row[0]), int(row[1]), int(row[2]), bool(row[3])
                if r < 0 or c < 0:
                    raise RecordError(0, "blocks", "a position lies outside the grid (negative row or column)")
                if alive:
                    for dr in range(w):
                        for dc in range(w):
                            cells[(r + dr, c + dc)] = j
            self._rows, self._cells = blocks, cells
        return self._cells


def step_pushes(agents: Sequence[Sequence[int]], blocks: Sequence[Sequence[Any]], actions: Sequence[int],
                _blocks: Optional[_Blocks] = None) -> List[int]:
    """The block each agent pushes with ``actions`` in the world ``agents`` ([[r, c], ...])
    and ``blocks`` ([[r, c, w, alive], ...]) before a step, -1 for none.

    An agent's chain runs from its cell in the direction of its action through the cells
    that hold agents; the agent pushes the alive block that covers the first cell after
    them (the step rules' chain search with every agent pushing; cells beyond the grid hold
    nothing, so no wall needs to be known).

    >>> # agent 0 behind the left face of block 0 (weight 2), agent 1 in line behind agent 0
    >>> step_pushes([[2, 1], [2, 0], [5, 1]], [[2, 2, 2, True]], [4, 4, 4])
    [0, 0, -1]
    """
    if len(actions) != len(agents):
        raise RecordError(0, "actions", f"{len(actions)} actions for {len(agents)} agents")
    cells = [(r, c) for r, c in agents]
    if cells and min(map(min, cells)) < 0:
        raise RecordError(0, "agents", "a position lies outside the grid (negative row or column)")
    block_at = (_blocks or _Blocks()).at(blocks)
    if not block_at:  # every block delivered: nothing to push
        return [-1] * len(cells)
    occupied = set(cells)
    pushed = []
    for (r, c), action in zip(cells, actions):
        action = action_or_stay(action)
        if action == STAY:
            pushed.append(-1)
            continue
        dr, dc = ACTION_DELTAS[action]
        r, c = r + dr, c + dc
        while (r, c) in occupied:
            r, c = r + dr, c + dc
        pushed.append(block_at.get((r, c), -1))
    return pushed


def _names(agents: Mapping[str, Any]) -> List[str]:
    return sorted(agents, key=agent_order)


def episode_pushes(records: Sequence[Mapping[str, Any]]) -> Tuple[List[str], List[str], List[int]]:
    """(agent names in id order, their kinds, steps at which each pushed) for one episode's
    records (dicts as :func:`~cube_jax.trace.read_trace` gives them)."""
    return record_pushes(from_dicts(records))


def record_pushes(records: Sequence[MetricRecord]) -> Tuple[List[str], List[str], List[int]]:
    """:func:`episode_pushes` of the metric views of the records (as
    :func:`~cube_jax.analytics.traces.load_metric_records` gives them)."""
    if not records or type(records[0]) is not _EPISODE:
        raise RecordError(1, "type", "the first record must be 'episode'")
    header = records[0]
    kinds = {name: info.kind for name, info in header.agents.items()}
    steps = ((line, r.actions, r.agents, r.blocks)
             for line, r in enumerate(records, start=1) if type(r) is _STEP)
    return _count_pushes(kinds, header.layout, steps)


def _count_pushes(kinds_of: Mapping[str, str], layout, steps) -> Tuple[List[str], List[str], List[int]]:
    """Counts pushes over ``steps``: ``(line, actions by name, agents after, blocks after)``,
    from the ``layout`` of the episode record; ``kinds_of`` maps each agent's name to its kind."""
    names = _names(kinds_of)
    kinds = [str(kinds_of[name]) for name in names]
    agents, blocks = layout.agents, layout.blocks
    counts = [0] * len(names)
    cache = _Blocks()
    source = 1  # the line the positions before the next step come from
    for line, actions, after_agents, after_blocks in steps:
        try:
            primitive = [actions[name] for name in names]
        except (KeyError, TypeError):
            raise RecordError(line, "actions", "must give an integer action for every agent") from None
        try:
            pushed = step_pushes(agents, blocks, primitive, cache)
        except RecordError as err:
            raise RecordError(source, err.key if source > 1 else "layout", str(err)) from None
        for i, block in enumerate(pushed):
            if block >= 0:
                counts[i] += 1
        agents, blocks, source = after_agents, after_blocks, line
    return names, kinds, counts


def workload(names: Sequence[str], kinds: Sequence[str], counts: Sequence[int]) -> Dict[str, Any]:
    """``{"pushes": {agent: count}, "workload_balance", "workload_balance_kinds"}``."""
    members: "OrderedDict[str, List[int]]" = OrderedDict()
    for kind, count in zip(kinds, counts):
        members.setdefault(kind, []).append(count)
    by_kind = workload_balance([sum(c) for c in members.values()], [len(c) for c in members.values()])
    return {"pushes": dict(zip(names, (int(c) for c in counts))), "workload_balance": workload_balance(counts),
            "workload_balance_kinds": by_kind}


def episode_workload(records: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The workload keys of one episode's records (see :func:`workload`)."""
    return workload(*episode_pushes(records))


def record_workload(records: Sequence[MetricRecord]) -> Dict[str, Any]:
    """The workload keys of one episode's metric views (see :func:`workload`)."""
    return workload(*record_pushes(records))


def trace_workload(path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """The workload keys of the trace file at ``path``; RecordError when it cannot be read."""
    try:
        records = decode_records(Path(path).read_bytes())
    except RecordError as err:
        raise RecordError(err.line, err.key, f"not a trace: {str(err)[:120]}") from None
    return record_workload(records)


def summarize_workload(episodes: Sequence[Mapping[str, Any]], strata: Optional[Sequence[object]] = None,
                       confidence: float = CONFIDENCE, seed: int = 0,
                       resamples: int = RESAMPLES) -> Dict[str, Dict[str, float]]:
    """``{metric: {"mean", "ci_low", "ci_high", "episodes"}}`` for each balance metric, over
    the episodes where it is defined (``episodes`` says how many); a metric defined in no
    episode is left out."""
    out = {}
    for metric in BALANCE_METRICS:
        kept = [i for i, e in enumerate(episodes) if e.get(metric) is not None]
        if not kept:
            continue
        values = [float(episodes[i][metric]) for i in kept]
        kept_strata = None if strata is None else [strata[i] for i in kept]
        mean, low, high = bootstrap_ci(values, kept_strata, confidence, seed, resamples)
        out[metric] = {"mean": mean, "ci_low": low, "ci_high": high, "episodes": len(kept)}
    return out


__all__ = ["BALANCE_KEYS", "BALANCE_METRICS", "coblock_gamma", "episode_pushes", "episode_workload", "record_pushes",
           "record_workload", "step_pushes", "summarize_workload", "trace_workload", "workload", "workload_balance"]
