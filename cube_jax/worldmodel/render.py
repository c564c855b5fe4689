"""The world model as text for prompts: the guidebook and the plan library (LLM.md
section 7, DR. WELL appendix A.2), compact and always the same for the same model.

The guidebook (negotiation) gives the step, the room's size and one line per live task
(long lines wrapped here)::

    Step 15; 2 agents in the room.
    World model: 3 episodes of this world, 9 of 9 blocks delivered.
    block#1 (weight 2): 15 attempts, 60.0% succeeded; start t=29.6 on average (t=25..37);
        9.6 steps on average; smallest successful team 3; best team size 3 (60.0% of 15)

The plan library (planning) gives a task's best prototypes, each with its best instances::

    Plan library for block#1 (15 attempts, 60.0% succeeded), best first:
    1. move_to_block -> rendezvous -> push_block: 15 attempts, 60.0% succeeded, team 3.0, 9.6 steps
       1a. move_to_block(1, left) -> rendezvous(1, left, 2, 32) -> push_block(1, 5): 3 attempts,
           100.0% succeeded, team 3.0, 4.0 steps
"""
from __future__ import annotations

from typing import Iterable, List, Optional

# How many prototypes, and instances of each, the plan library shows (DR. WELL's K and L).
LIBRARY_PROTOTYPES = 3
LIBRARY_INSTANCES = 2
NO_EXPERIENCE = "no experience yet"


def guidebook(model, live_blocks: Iterable[int], t: int, room_size: int) -> str:
    """The guidebook of ``model`` for a room of ``room_size`` agents at step ``t``."""
    head = f"Step {t}; {_count(room_size, 'agent')} in the room."
    return "\n".join([head] + experience(model, live_blocks))


def experience(model, blocks: Iterable[int]) -> List[str]:
    """What the model knows of ``blocks``: a line on its episodes, then one per task."""
    if model.empty:
        return [f"World model: {NO_EXPERIENCE}."]
    delivered = sum(e.blocks_delivered for e in model.episodes)
    total = sum(e.blocks_total for e in model.episodes)
    lines = [f"World model: {_count(len(model.episodes), 'episode')} of this world, "
             f"{delivered} of {total} blocks delivered."]
    return lines + [task_line(model.task_stats(block)) for block in sorted(set(blocks))]


def task_line(stats) -> str:
    """One task's aggregates on one line."""
    head = f"block#{stats.block}" + (f" (weight {stats.weight})" if stats.weight is not None else "")
    if not stats.attempts:
        return f"{head}: no attempts yet"
    parts = [f"{_count(stats.attempts, 'attempt')}, {_percent(stats.success_rate)} succeeded",
             f"start t={_number(stats.start_mean)} on average (t={stats.start_min}..{stats.start_max})",
             f"{_number(stats.duration_mean)} steps on average"]
    if stats.successes:
        best_tried = next(tried for size, tried, _ in stats.by_team_size if size == stats.best_team_size)
        parts += [f"smallest successful team {stats.smallest_success_team}",
                  f"best team size {stats.best_team_size} ({_percent(stats.best_team_success_rate)} of {best_tried})"]
    else:
        parts.append("no success yet")
    return f"{head}: " + "; ".join(parts)


def plan_library(model, block: int, prototypes: int = LIBRARY_PROTOTYPES, instances: int = LIBRARY_INSTANCES) -> str:
    """The plan library of ``model`` for task ``block#<block>``."""
    task = model.tasks.get(block)
    stats = model.task_stats(block)
    if task is None or not stats.attempts:
        return f"Plan library for block#{block}: {NO_EXPERIENCE}."
    lines = [f"Plan library for block#{block} ({_count(stats.attempts, 'attempt')}, "
             f"{_percent(stats.success_rate)} succeeded), best first:"]
    for rank, prototype in enumerate(task.ranked()[:prototypes], start=1):
        lines.append(f"{rank}. {prototype.text}: {plan_line(prototype.stats)}")
        for letter, instance in zip("abcdefghijklmnopqrstuvwxyz", prototype.ranked()[:instances]):
            lines.append(f"   {rank}{letter}. {instance.text}: {plan_line(instance.stats)}")
    return "\n".join(lines)


def plan_line(stats) -> str:
    """A prototype's or an instance's aggregates."""
    return (f"{_count(stats.attempts, 'attempt')}, {_percent(stats.success_rate)} succeeded, "
            f"team {_number(stats.team_size_mean)}, {_number(stats.duration_mean)} steps")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _percent(rate: Optional[float]) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def _number(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.1f}"
