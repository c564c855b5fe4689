"""The aggregates of LLM.md section 7, computed from attempts.

Per task (:class:`TaskStats`): attempts, success rate, mean start and start range, mean
duration, the smallest team size of a success, and the best team size: the size with the
highest success rate, ties to the smaller size, known once the task has a success (before
that every size scores 0 and the smallest would be a guess, not a finding). Per prototype
and per instance (:class:`PlanStats`): attempts, success rate, mean team size, mean
duration. Durations and starts count every attempt, succeeded or not.

>>> from cube_jax.worldmodel.outcomes import Attempt
>>> def attempt(team, success, duration=10):
...     return Attempt(0, ("push_block(0, 3)",), "agent_0", 0, 0, duration, team, success)
>>> stats = task_stats(0, 2, [attempt(1, False), attempt(2, True), attempt(3, True), attempt(2, False)])
>>> stats.success_rate, stats.best_team_size, stats.smallest_success_team
(0.5, 3, 2)
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Sequence, Tuple

from cube_jax.worldmodel.outcomes import Attempt


@dataclasses.dataclass(frozen=True)
class PlanStats:
    """What became of the attempts that used one prototype or one instance."""

    attempts: int
    successes: int
    success_rate: Optional[float]  # None without attempts
    team_size_mean: Optional[float]
    duration_mean: Optional[float]


@dataclasses.dataclass(frozen=True)
class TaskStats:
    """What became of the attempts at one task (``block#b``)."""

    block: int
    weight: Optional[int]  # the block's weight in the latest episode that had it
    attempts: int
    successes: int
    success_rate: Optional[float]  # None without attempts
    start_mean: Optional[float]
    start_min: Optional[int]
    start_max: Optional[int]
    duration_mean: Optional[float]
    smallest_success_team: Optional[int]  # None before the first success
    best_team_size: Optional[int]  # highest success rate, ties to the smaller size; None before a success
    best_team_success_rate: Optional[float]
    by_team_size: Tuple[Tuple[int, int, int], ...]  # (team size, attempts, successes), by size


@dataclasses.dataclass(frozen=True)
class TeamSizeStats:
    """What became of the attempts at one task made by teams of one size."""

    team_size: int
    attempts: int
    successes: int
    success_rate: float
    duration_mean: float  # every attempt of this size, succeeded or not


def plan_stats(attempts: Sequence[Attempt]) -> PlanStats:
    n = len(attempts)
    successes = sum(a.success for a in attempts)
    return PlanStats(attempts=n, successes=successes, success_rate=successes / n if n else None,
                     team_size_mean=_mean([a.team_size for a in attempts]),
                     duration_mean=_mean([a.duration for a in attempts]))


def task_stats(block: int, weight: Optional[int], attempts: Sequence[Attempt]) -> TaskStats:
    n = len(attempts)
    successes = sum(a.success for a in attempts)
    starts = [a.start for a in attempts]
    counts: Dict[int, Tuple[int, int]] = {}
    for a in attempts:
        tried, won = counts.get(a.team_size, (0, 0))
        counts[a.team_size] = (tried + 1, won + a.success)
    by_size = tuple((size, tried, won) for size, (tried, won) in sorted(counts.items()))
    best, best_rate = None, None
    if successes:
        # max keeps the first of equals, and the sizes are in increasing order
        best, tried, won = max(by_size, key=lambda row: row[2] / row[1])
        best_rate = won / tried
    return TaskStats(block=block, weight=weight, attempts=n, successes=successes,
                     success_rate=successes / n if n else None, start_mean=_mean(starts),
                     start_min=min(starts) if starts else None, start_max=max(starts) if starts else None,
                     duration_mean=_mean([a.duration for a in attempts]),
                     smallest_success_team=min((a.team_size for a in attempts if a.success), default=None),
                     best_team_size=best, best_team_success_rate=best_rate, by_team_size=by_size)


def team_size_stats(attempts: Sequence[Attempt]) -> Tuple[TeamSizeStats, ...]:
    """The attempts grouped by team size, by increasing size (a size never tried is absent)."""
    groups: Dict[int, list] = {}
    for a in attempts:
        groups.setdefault(a.team_size, []).append(a)
    rows = []
    for size, group in sorted(groups.items()):
        won = sum(a.success for a in group)
        rows.append(TeamSizeStats(team_size=size, attempts=len(group), successes=won, success_rate=won / len(group),
                                  duration_mean=sum(a.duration for a in group) / len(group)))
    return tuple(rows)


def ranking_key(stats: PlanStats, text: str):
    """The order of the plan library: higher success rate, then shorter mean duration, then
    more attempts, then the text (so that the order never depends on insertion)."""
    return (-(stats.success_rate or 0.0), stats.duration_mean if stats.duration_mean is not None else float("inf"),
            -stats.attempts, text)


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None
