"""The world model: what a team has tried in one world, as a graph of nodes with
statistics (LLM.md section 7, DR. WELL section 2.3).

Episodes, tasks (``block#b``), prototypes (a plan's action names, per task) and instances
(the plan's full action texts, per prototype). Attempts hang under their instance; every
statistic above is aggregated from them (:mod:`cube_jax.worldmodel.stats`), so a node never
holds a number its attempts do not give.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from cube_jax.worldmodel import render, store
from cube_jax.worldmodel.errors import WorldMismatchError, WorldModelError
from cube_jax.worldmodel.outcomes import (
    ARROW,
    Attempt,
    EpisodeNode,
    EpisodeReading,
    TraceContentError,
    read_episode,
    same_world,
    task_id,
    world_name,
)
from cube_jax.worldmodel.render import LIBRARY_INSTANCES, LIBRARY_PROTOTYPES
from cube_jax.worldmodel.stats import (PlanStats, TaskStats, TeamSizeStats, plan_stats, ranking_key, task_stats,
                                       team_size_stats)


@dataclasses.dataclass
class InstanceNode:
    """One plan as it was written: its action texts, and every attempt that used it."""

    actions: Tuple[str, ...]
    attempts: List[Attempt] = dataclasses.field(default_factory=list)

    @property
    def text(self) -> str:
        return ARROW.join(self.actions)

    @property
    def stats(self) -> PlanStats:
        return plan_stats(self.attempts)


@dataclasses.dataclass
class PrototypeNode:
    """The action names of a plan without their arguments, and the instances that share them."""

    names: Tuple[str, ...]
    instances: Dict[Tuple[str, ...], InstanceNode] = dataclasses.field(default_factory=dict)

    @property
    def text(self) -> str:
        return ARROW.join(self.names)

    @property
    def attempts(self) -> List[Attempt]:
        return [a for instance in self.instances.values() for a in instance.attempts]

    @property
    def stats(self) -> PlanStats:
        return plan_stats(self.attempts)

    def ranked(self) -> List[InstanceNode]:
        """Instances by success rate, then shorter mean duration."""
        return sorted(self.instances.values(), key=lambda node: ranking_key(node.stats, node.text))


@dataclasses.dataclass
class TaskNode:
    """One block of the world, with the prototypes tried on it."""

    block: int
    weight: Optional[int] = None
    prototypes: Dict[Tuple[str, ...], PrototypeNode] = dataclasses.field(default_factory=dict)

    @property
    def id(self) -> str:
        return task_id(self.block)

    @property
    def attempts(self) -> List[Attempt]:
        return [a for prototype in self.prototypes.values() for a in prototype.attempts]

    @property
    def stats(self) -> TaskStats:
        return task_stats(self.block, self.weight, self.attempts)

    def ranked(self) -> List[PrototypeNode]:
        """Prototypes by success rate, then shorter mean duration."""
        return sorted(self.prototypes.values(), key=lambda node: ranking_key(node.stats, node.text))


class WorldModel:
    """The graph of one world's episodes, tasks, prototypes and instances.

    Build it with :meth:`update` (one episode's trace records at a time), keep it with
    :meth:`save` and :meth:`load`, and ask it with :meth:`guidebook`, :meth:`plan_library`,
    :meth:`best_team_size`, :meth:`success_rate`, :meth:`task_stats` and :meth:`team_size_stats`.

    >>> model = WorldModel({"scenario": "hard"})
    >>> print(model.guidebook([0, 1, 2], t=0, room_size=3))
    Step 0; 3 agents in the room.
    World model: no experience yet.
    >>> model.best_team_size(2) is None
    True
    """

    def __init__(self, world: Optional[Mapping[str, Any]] = None):
        self.world: Optional[Dict[str, Any]] = dict(world) if world is not None else None
        self.episodes: List[EpisodeNode] = []
        self.tasks: Dict[int, TaskNode] = {}

    # --- building ------------------------------------------------------------------------------

    def update(self, records: Sequence[Mapping[str, Any]]) -> bool:
        """Adds one episode from its trace records (dicts, as :func:`cube_jax.trace.read_trace`
        gives them or the runtime keeps them). Returns False, changing nothing, when the same
        trace was added before. :class:`WorldMismatchError` when the trace is of another
        world; :class:`WorldModelError` when the records cannot be read."""
        try:
            reading = read_episode(records, index=len(self.episodes))
        except TraceContentError as err:
            raise WorldModelError(f"world model update: {err}") from None
        self.check_world(reading.world, "the trace")
        if any(e.digest == reading.episode.digest for e in self.episodes):
            return False
        self.add(reading)
        return True

    def add(self, reading: EpisodeReading) -> None:
        """Adds one episode read by :func:`~cube_jax.worldmodel.outcomes.read_episode` (as
        episode ``len(self.episodes)``)."""
        if reading.episode.index != len(self.episodes):
            raise WorldModelError(f"world model: episode {reading.episode.index} added as episode {len(self.episodes)}")
        self.check_world(reading.world, "the trace")
        if self.world is None:
            self.world = dict(reading.world)
        self.episodes.append(reading.episode)
        for block, weight in reading.weights.items():
            self.task(block).weight = weight
        for attempt in reading.attempts:
            self.add_attempt(attempt)

    def add_attempt(self, attempt: Attempt) -> None:
        task = self.task(attempt.block)
        prototype = task.prototypes.setdefault(attempt.prototype, PrototypeNode(attempt.prototype))
        instance = prototype.instances.setdefault(attempt.actions, InstanceNode(attempt.actions))
        instance.attempts.append(attempt)

    def task(self, block: int) -> TaskNode:
        """The task node of ``block`` (made when missing)."""
        return self.tasks.setdefault(block, TaskNode(block))

    def check_world(self, world: Optional[Mapping[str, Any]], what: str) -> None:
        """:class:`WorldMismatchError` naming both worlds when ``world`` is not this model's."""
        if world is not None and self.world is not None and not same_world(world, self.world):
            raise WorldMismatchError(f"{what} is of world {world_name(world)}, but the world model is of world "
                                     f"{world_name(self.world)}")

    # --- the file ------------------------------------------------------------------------------

    @classmethod
    def load(cls, path, env: Optional[Mapping[str, Any]] = None) -> "WorldModel":
        """The world model in ``path`` (an empty one for ``env`` when the file is missing).
        :class:`WorldMismatchError` when the file is of another world than ``env``;
        :class:`WorldModelError` naming the path and the problem when it is not a world model."""
        return store.load(path, env, model_type=cls)

    def save(self, path) -> None:
        """Writes the model to ``path`` atomically: a complete old file or a complete new one."""
        store.save(self, path)

    def to_json(self) -> str:
        """The file's text: the same model gives the same bytes."""
        return store.to_json(self)

    # --- queries -------------------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        return not self.episodes and not any(task.prototypes for task in self.tasks.values())

    def task_stats(self, block: int) -> TaskStats:
        """The aggregates of task ``block#<block>`` (zero attempts for a task never tried)."""
        node = self.tasks.get(block)
        return node.stats if node is not None else task_stats(block, None, ())

    def team_size_stats(self, block: int) -> Tuple[TeamSizeStats, ...]:
        """The attempts at ``block`` per team size (success rate and mean duration of each size
        tried, by increasing size; empty for a task never tried)."""
        node = self.tasks.get(block)
        return team_size_stats(node.attempts) if node is not None else ()

    def success_rate(self, block: int) -> Optional[float]:
        """The share of attempts at ``block`` that succeeded; None without attempts."""
        return self.task_stats(block).success_rate

    def best_team_size(self, block: int) -> Optional[int]:
        """The team size with the highest success rate on ``block`` (ties to the smaller);
        None until the task has a success."""
        return self.task_stats(block).best_team_size

    def guidebook(self, live_blocks: Iterable[int], t: int, room_size: int) -> str:
        """For a negotiation room: the step, the room's size and one line per live task."""
        return render.guidebook(self, live_blocks, t, room_size)

    def plan_library(self, block: int, prototypes: int = LIBRARY_PROTOTYPES, instances: int = LIBRARY_INSTANCES) -> str:
        """For planning on ``block``: its best ``prototypes`` prototypes, each with its best
        ``instances`` instances."""
        return render.plan_library(self, block, prototypes, instances)

    def graph(self):
        """The model as a ``networkx.DiGraph`` (episode -> task -> prototype -> instance)."""
        from cube_jax.worldmodel.graph import build_graph

        return build_graph(self)

    def __repr__(self) -> str:
        attempts = sum(len(task.attempts) for task in self.tasks.values())
        return f"WorldModel({world_name(self.world)}, {len(self.episodes)} episodes, {attempts} attempts)"


__all__ = ["InstanceNode", "PrototypeNode", "TaskNode", "WorldMismatchError", "WorldModel", "WorldModelError"]
