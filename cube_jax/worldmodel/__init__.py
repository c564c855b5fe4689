"""DR. WELL's world model (LLM.md section 7): what a team has tried in one world, kept
across episodes, read by negotiation and planning.

A graph of episodes, tasks (``block#b``), plan prototypes (a plan's action names, per
task) and plan instances (the plan's full action texts, per prototype), built from traces
alone: every committed plan whose spec is ``push_block(block#b)`` is one attempt of task b
(:mod:`~cube_jax.worldmodel.outcomes`), and every node's statistics are aggregated from
the attempts under it (:mod:`~cube_jax.worldmodel.stats`).

- :class:`WorldModel`: :meth:`~WorldModel.update` adds one episode's trace records,
  :meth:`~WorldModel.load` and :meth:`~WorldModel.save` keep it in a JSON file
  (:mod:`~cube_jax.worldmodel.store`: refused when of another world, written atomically,
  byte-identical for the same traces in the same order);
- :mod:`~cube_jax.worldmodel.render`: the guidebook and the plan library as prompt text;
- :mod:`~cube_jax.worldmodel.graph` and :mod:`~cube_jax.worldmodel.figures`: the model as
  a ``networkx`` graph, its picture, and the per-block completion trend.

What the runtime calls (its negotiation topology takes any object with these methods, so
it need not import this package; block ids are ints):

- ``guidebook(live_blocks, t, room_size) -> str``: the text for proposals and commitments;
- ``plan_library(block) -> str``: the text for planning on ``block``;
- ``best_team_size(block) -> Optional[int]``: None until the task has a success;
- ``success_rate(block) -> Optional[float]``: None without attempts;
- ``task_stats(block) -> TaskStats``: every aggregate of the task;
- ``team_size_stats(block) -> Tuple[TeamSizeStats, ...]``: its attempts per team size (the
  negotiating planner reads these two when present, :mod:`cube_jax.agents.negotiator`);

and, around a run with ``--world-model PATH``: ``WorldModel.load(path, env=env)`` before
the first episode, then after each episode ``model.update(records)`` and
``model.save(path)``.

>>> from cube_jax.analytics.synthetic import random_trace
>>> model = WorldModel()
>>> model.update(random_trace(seed=0, n=3, steps=40, topology="negotiation"))
True
>>> len(model.episodes), model.guidebook([0], t=0, room_size=3).splitlines()[0]
(1, 'Step 0; 3 agents in the room.')
"""
from cube_jax.worldmodel.model import (
    InstanceNode,
    PrototypeNode,
    TaskNode,
    WorldMismatchError,
    WorldModel,
    WorldModelError,
)
from cube_jax.worldmodel.outcomes import (
    Attempt,
    EpisodeNode,
    EpisodeReading,
    action_name,
    read_episode,
    task_id,
    world_name,
)
from cube_jax.worldmodel.render import LIBRARY_INSTANCES, LIBRARY_PROTOTYPES
from cube_jax.worldmodel.stats import PlanStats, TaskStats, TeamSizeStats

__all__ = ["Attempt", "EpisodeNode", "EpisodeReading", "InstanceNode", "LIBRARY_INSTANCES", "LIBRARY_PROTOTYPES",
           "PlanStats", "PrototypeNode", "TaskNode", "TaskStats", "TeamSizeStats", "WorldMismatchError", "WorldModel",
           "WorldModelError", "action_name", "read_episode", "task_id", "world_name"]
