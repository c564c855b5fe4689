"""The world model as a ``networkx`` graph: episode -> task -> prototype -> instance.

Node ids are strings: ``episode#i``, ``block#b``, ``block#b/prototype:<names>`` and
``block#b/instance:<actions>`` (names and actions joined by `` -> ``). Every node has a
``kind`` and its statistics as attributes (``attempts``, ``success_rate``, ...); an edge
from an episode to a task carries ``delivered_t``, the step at which that episode delivered
the block (None when it did not).

>>> from cube_jax.worldmodel.model import WorldModel
>>> graph = build_graph(WorldModel({"scenario": "hard"}))
>>> graph.number_of_nodes()
0
"""
from __future__ import annotations

import dataclasses

from cube_jax.worldmodel.outcomes import task_id


def prototype_node(block: int, prototype) -> str:
    return f"{task_id(block)}/prototype:{prototype.text}"


def instance_node(block: int, instance) -> str:
    return f"{task_id(block)}/instance:{instance.text}"


def build_graph(model):
    """A ``networkx.DiGraph`` of ``model`` (see the module docstring)."""
    try:
        import networkx as nx
    except ImportError:  # pragma: no cover - networkx comes with the llm extra
        raise ImportError("the world model's graph needs networkx: pip install 'cube_jax[llm]'") from None

    graph = nx.DiGraph(world=model.world)
    for block in sorted(model.tasks):
        task = model.tasks[block]
        graph.add_node(task.id, kind="task", label=task.id, **_attributes(task.stats))
        for prototype in sorted(task.prototypes.values(), key=lambda p: p.names):
            proto_id = prototype_node(block, prototype)
            graph.add_node(proto_id, kind="prototype", label=prototype.text, **_attributes(prototype.stats))
            graph.add_edge(task.id, proto_id)
            for instance in sorted(prototype.instances.values(), key=lambda i: i.actions):
                inst_id = instance_node(block, instance)
                graph.add_node(inst_id, kind="instance", label=instance.text, **_attributes(instance.stats))
                graph.add_edge(proto_id, inst_id)
    for episode in model.episodes:
        node = f"episode#{episode.index}"
        graph.add_node(node, kind="episode", label=node, seed=episode.seed, steps=episode.steps,
                       terminated=episode.terminated, blocks_delivered=episode.blocks_delivered,
                       blocks_total=episode.blocks_total)
        tried = {a.block for task in model.tasks.values() for a in task.attempts if a.episode == episode.index}
        for block in sorted(set(range(episode.blocks_total)) | tried | set(episode.completion)):
            if block not in model.tasks:
                graph.add_node(task_id(block), kind="task", label=task_id(block),
                               **_attributes(model.task_stats(block)))
            graph.add_edge(node, task_id(block), delivered_t=episode.completion.get(block))
    return graph


def _attributes(stats) -> dict:
    values = dataclasses.asdict(stats)
    values.pop("by_team_size", None)
    return values
