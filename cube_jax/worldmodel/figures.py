"""Pictures of a world model, as DR. WELL's figures draw it.

- :func:`plot_graph`: the graph, laid out left to right: tasks, their prototypes, their
  instances (one row each, so every label stays legible), each node sized by its attempts
  and coloured by its success rate (red 0%, green 100%, grey never tried);
- :func:`plot_trend`: the step at which each block was delivered, against the episode
  index, one line per block (a cross at the episode's last step when the block was not
  delivered), with the episode's length behind them.

matplotlib is imported only when drawing.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Tuple

from cube_jax.worldmodel.graph import build_graph, instance_node, prototype_node
from cube_jax.worldmodel.outcomes import world_name

# At most this many prototypes per task and instances per prototype are drawn (the best).
DRAWN_PROTOTYPES = 6
DRAWN_INSTANCES = 8
COLUMNS = {"task": 0.0, "prototype": 1.0, "instance": 2.35}
UNTRIED = "#BBBBBB"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_graph(model, path) -> Path:
    """Draws ``model``'s tasks, prototypes and instances into ``path`` (PNG); returns it."""
    import networkx as nx

    plt = _pyplot()
    graph = build_graph(model)
    rows, labels = _rows(model)
    depth = max(rows.values(), default=0) + 1
    height = max(4.0, 0.42 * depth + 1.8)
    figure, axes = plt.subplots(figsize=(16, height))
    try:
        shown = graph.subgraph(rows).copy()
        pos = {node: (COLUMNS[graph.nodes[node]["kind"]], -y) for node, y in rows.items()}
        most = max([graph.nodes[n]["attempts"] for n in shown] + [1])
        sizes = [120 + 1400 * math.sqrt(graph.nodes[n]["attempts"] / most) for n in shown]
        colours = [graph.nodes[n]["success_rate"] for n in shown]
        cmap = plt.get_cmap("RdYlGn")
        nx.draw_networkx_edges(shown, pos, ax=axes, arrows=False, edge_color="#999999", width=1.0)
        tried = [n for n, c in zip(shown, colours) if c is not None]
        nx.draw_networkx_nodes(shown, pos, nodelist=[n for n in shown if n not in tried], ax=axes,
                               node_size=[s for n, s in zip(shown, sizes) if n not in tried], node_color=UNTRIED,
                               edgecolors="#555555")
        drawn = nx.draw_networkx_nodes(shown, pos, nodelist=tried, ax=axes,
                                       node_size=[s for n, s in zip(shown, sizes) if n in tried],
                                       node_color=[c for c in colours if c is not None], cmap=cmap, vmin=0.0,
                                       vmax=1.0, edgecolors="#555555") if tried else None
        for node, (x, y) in pos.items():
            axes.text(x + 0.09, y, labels[node], fontsize=8.5, va="center", ha="left", family="monospace",
                      bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=1.0), zorder=4)
        for kind, x in COLUMNS.items():
            axes.text(x, 0.8, {"task": "tasks", "prototype": "prototypes", "instance": "instances"}[kind],
                      fontsize=11, fontweight="bold", ha="left")
        if not rows:
            axes.text(2.0, -0.5, "no experience yet", fontsize=14, ha="center", va="center", color="#555555")
        axes.set_xlim(-0.15, 3.75)
        axes.set_ylim(-depth + 0.4, 1.3)
        axes.axis("off")
        if drawn is not None:
            figure.colorbar(drawn, ax=axes, fraction=0.02, pad=0.01, label="success rate")
        delivered = sum(e.blocks_delivered for e in model.episodes)
        total = sum(e.blocks_total for e in model.episodes)
        axes.set_title(f"World model of {world_name(model.world)}: {len(model.episodes)} episodes, "
                       f"{delivered} of {total} blocks delivered (node size: attempts)", fontsize=12)
        return _save(figure, path)
    finally:
        plt.close(figure)


def _rows(model) -> Tuple[Dict[str, float], Dict[str, str]]:
    """The row of every drawn node (instances one per row, parents centred on their
    children) and its label."""
    rows: Dict[str, float] = {}
    labels: Dict[str, str] = {}
    row = 0
    for block in sorted(model.tasks):
        task = model.tasks[block]
        weight = f" w{task.weight}" if task.weight is not None else ""
        labels[task.id] = f"{task.id}{weight}\n{_summary(task.stats)}"
        children: List[float] = []
        ranked = task.ranked()
        for prototype in ranked[:DRAWN_PROTOTYPES]:
            node = prototype_node(block, prototype)
            instances = prototype.ranked()
            ys = []
            for instance in instances[:DRAWN_INSTANCES]:
                child = instance_node(block, instance)
                rows[child], ys = row, ys + [row]
                labels[child] = f"{_arguments(instance.actions)}  {_summary(instance.stats)}"
                row += 1
            rows[node] = sum(ys) / len(ys)
            more = f" (+{len(instances) - DRAWN_INSTANCES} more)" if len(instances) > DRAWN_INSTANCES else ""
            labels[node] = "\n".join(_wrap(prototype.names)) + f"\n{_summary(prototype.stats)}{more}"
            children.append(rows[node])
        if len(ranked) > DRAWN_PROTOTYPES:
            labels[task.id] += f"\n+{len(ranked) - DRAWN_PROTOTYPES} prototypes not drawn"
        if not children:
            children, row = [row], row + 1
        rows[task.id] = sum(children) / len(children)
        row += 0.4  # a gap between tasks
    return rows, labels


def _summary(stats) -> str:
    rate = stats.success_rate
    return f"{stats.attempts} att" + (f", {100 * rate:.0f}%" if rate is not None else "")


def _wrap(names, width: int = 34) -> List[str]:
    lines, line = [], ""
    for name in names:
        piece = name if not line else f"{line} -> {name}"
        if line and len(piece) > width:
            lines.append(line + " ->")
            line = name
        else:
            line = piece
    return lines + [line]


def _arguments(actions) -> str:
    """An instance by its arguments alone (its prototype, to the left, gives the names)."""
    parts = []
    for action in actions:
        opening = action.find("(")
        parts.append(action[opening:].replace(" ", "") if opening >= 0 else "()")
    return " ".join(parts)


def plot_trend(model, path) -> Path:
    """Draws the per-block completion step against the episode index into ``path`` (PNG)."""
    plt = _pyplot()
    episodes = model.episodes
    blocks = sorted({b for e in episodes for b in range(e.blocks_total)} | {b for e in episodes for b in e.completion})
    figure, axes = plt.subplots(figsize=(9, 5))
    try:
        index = [e.index + 1 for e in episodes]
        axes.plot(index, [e.steps for e in episodes], color="#BBBBBB", linestyle="--", linewidth=1.2,
                  label="episode length")
        cmap = plt.get_cmap("tab10" if len(blocks) <= 10 else "tab20")
        for k, block in enumerate(blocks):
            colour = cmap(k % cmap.N)
            done = [e.completion.get(block, math.nan) for e in episodes]
            weight = model.tasks[block].weight if block in model.tasks else None
            name = f"block#{block}" + (f" (w{weight})" if weight is not None else "")
            axes.plot(index, done, marker="o", color=colour, linewidth=1.8, label=name)
            missed = [(e.index + 1, e.steps) for e in episodes if block not in e.completion and block < e.blocks_total]
            if missed:
                axes.scatter(*zip(*missed), marker="x", s=60, color=colour, zorder=3)
        if not episodes:
            axes.text(0.5, 0.5, "no episodes yet", fontsize=14, ha="center", va="center", color="#555555",
                      transform=axes.transAxes)
        if any(block not in e.completion for e in episodes for block in range(e.blocks_total)):
            axes.scatter([], [], marker="x", color="#333333", label="not delivered (at the episode's end)")
        axes.set_xlabel("episode")
        axes.set_ylabel("step at which the block was delivered")
        if index:
            axes.set_xticks(index if len(index) <= 20 else index[:: math.ceil(len(index) / 20)])
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        if episodes:
            axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        axes.set_title(f"Block completion per episode: {world_name(model.world)}", fontsize=11)
        return _save(figure, path)
    finally:
        plt.close(figure)


def _save(figure, path) -> Path:
    """Writes ``figure`` as the PNG ``path`` (its folder made when missing)."""
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path
