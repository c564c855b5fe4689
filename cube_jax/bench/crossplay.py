"""Cross-play: teams that mix agents which never trained or planned together.

Ad-hoc teamwork asks how well an agent plays with partners it has not met. On a task of
``k`` agents and a set of members (shipped policies of different algorithms and seeds, the
heuristic, the team planner, any agent spec), cross-play plays one team per ordered pair of
members ``(A, B)``: agent 0 is ``B``, the newcomer, and agents ``1 .. k-1`` are ``A``, the
team it joins (``B,A,A`` on a task of three agents); a pair ``(A, A)`` is ``A`` alone. Each
team is an ordinary ``bench run`` entry, so it carries its provenance and evidence, verifies
by replay and takes its row (with its Δ against its members alone) on the board.

The board reads the matrix back from entries alone (:func:`matrices`): an entry is a cell
of a task's matrix when its team has that shape (agent 0 one member, every other agent one
other member), or when it is homogeneous and its member is in a cross-play team on the task
(the diagonal). :func:`render_markdown` and :func:`render_png` draw one matrix per task:
rows the team joined, columns the newcomer, each cell the team's success mean in its greedy
mode (its only mode where it has one).
"""
from __future__ import annotations

import math
import re
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from cube_jax.bench.text import fixed, markdown_cell, plot_label
from cube_jax.core import suite

PREFERRED_MODE = "greedy"
TITLE = "Cross-play"
NOTE = ("Row: the team that is joined (agents 1 .. k-1); column: the newcomer (agent 0); a cell is "
        "that team's success mean over its test episodes (greedy where the team has both modes), the "
        "diagonal each member alone. Every cell is an entry on the board above.")


class Team(NamedTuple):
    """One cross-play team: ``row`` (agents 1 .. k-1) joined by ``column`` (agent 0)."""

    row: str
    column: str
    spec: str  # what bench run plays: one member per agent, or the member alone on the diagonal
    name: str  # its entry folder's name


def folder_name(spec: str) -> str:
    """A folder name for a team spec: its members' names, safe for any file system."""
    parts = [re.sub(r"[^A-Za-z0-9_.-]+", "-", part.split(":", 1)[-1]).strip("-") or "member" for part in spec.split(",")]
    return "+".join(parts)


def teams(members: Sequence[str], num_agents: int) -> List[Team]:
    """Every cross-play team of ``members`` on a task of ``num_agents`` agents, row by row;
    ValueError for fewer than two distinct members, a member with a comma, or one agent."""
    members = list(dict.fromkeys(m.strip() for m in members))
    if len(members) < 2:
        raise ValueError(f"cross-play needs at least two distinct members, got {members}")
    if num_agents < 2:
        raise ValueError("cross-play needs a task of at least two agents")
    for member in members:
        if not member or "," in member:
            raise ValueError(f"a cross-play member is one agent spec (no comma), got {member!r}")
    out = []
    for row in members:
        for column in members:
            spec = row if row == column else ",".join([column] + [row] * (num_agents - 1))
            name = folder_name(row) if row == column else f"{folder_name(column)}-joins-{folder_name(row)}"
            out.append(Team(row, column, spec, name))
    return out


def cell_of(team: Sequence[str]) -> Optional[Tuple[str, str]]:
    """``(row, column)`` of a team given one spec per agent when it is a cross-play team
    (agent 0 differs from the others, who agree); None otherwise."""
    if len(team) < 2 or len(set(team[1:])) != 1 or team[0] == team[1]:
        return None
    return team[1], team[0]


class Matrix(NamedTuple):
    """One task's cross-play: members in order, and per cell its success, mode and entry."""

    task: str
    members: List[str]
    cells: Dict[Tuple[str, str], dict]  # (row, column) -> {"success", "ci", "mode", "id"}

    def success(self, row: str, column: str) -> Optional[float]:
        cell = self.cells.get((row, column))
        return None if cell is None else cell["success"]


def _cell(entry: Mapping, task: str) -> dict:
    aggregates = entry["tasks"][task]["aggregates"]
    mode = PREFERRED_MODE if PREFERRED_MODE in aggregates else sorted(aggregates)[0]
    success = aggregates[mode]["success"]
    return {"success": success["mean"], "ci": tuple(success["mean_ci"]), "mode": mode, "id": entry["id"]}


def matrices(entries: Sequence[Mapping]) -> List[Matrix]:
    """The cross-play matrix of every task that has at least one cross-play team among
    ``entries``, in the suite's task order, members in alphabetical order. When two entries
    fill one cell, the first by id does."""
    entries = sorted(entries, key=lambda entry: entry["id"])
    out = []
    for task in suite.TASK_NAMES:
        members: Dict[str, None] = {}
        cells: Dict[Tuple[str, str], dict] = {}
        for entry in entries:
            team = entry["agent"].get("team")
            if entry["agent"]["kind"] != "mixed" or task not in entry["tasks"] or not team:
                continue
            cell = cell_of(team)
            if cell is not None:
                members.update(dict.fromkeys(cell))
                cells.setdefault(cell, _cell(entry, task))
        if not cells:
            continue
        for entry in entries:
            spec = entry["agent"]["spec"]
            if entry["agent"]["kind"] != "mixed" and spec in members and task in entry["tasks"]:
                cells.setdefault((spec, spec), _cell(entry, task))
        out.append(Matrix(task, sorted(members), cells))
    return out


def render_markdown(found: Sequence[Matrix], picture_name: Optional[str] = None) -> List[str]:
    """The cross-play section of the board's Markdown: one table per task (no lines when
    there is no cross-play)."""
    if not found:
        return []
    lines = [f"## {TITLE}", "", NOTE, ""]
    if picture_name:
        lines += [f"![cross-play]({picture_name})", ""]
    for matrix in found:
        lines += [f"### {matrix.task}", "", "| team joined ↓ · newcomer → | " + " | ".join(
            markdown_cell(m) for m in matrix.members) + " |", "| --- |" + " ---: |" * len(matrix.members)]
        for row in matrix.members:
            lines.append(f"| {markdown_cell(row)} | " + " | ".join(fixed(matrix.success(row, column))
                                                           for column in matrix.members) + " |")
        lines.append("")
    return lines


def render_png(found: Sequence[Matrix], path) -> None:
    """One heat map per task: success mean per cell, the value written in it, gaps blank."""
    from matplotlib.figure import Figure

    columns = min(2, max(1, len(found)))
    grid_rows = max(1, math.ceil(len(found) / columns))
    size = max((len(m.members) for m in found), default=2)
    fig = Figure(figsize=(5.6 * columns, (1.6 + 0.7 * size) * grid_rows + 0.4), layout="constrained")
    axes = list(fig.subplots(grid_rows, columns, squeeze=False).flat)
    for ax, matrix in zip(axes, found):
        values = [[matrix.success(row, column) for column in matrix.members] for row in matrix.members]
        shown = [[math.nan if v is None else v for v in line] for line in values]
        image = ax.imshow(shown, vmin=0.0, vmax=1.0, cmap="viridis")
        ticks = range(len(matrix.members))
        labels = [plot_label(m, 22) for m in matrix.members]
        ax.set_xticks(list(ticks), labels, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(list(ticks), labels, fontsize=8)
        ax.set_xlabel("newcomer (agent 0)", fontsize=9)
        ax.set_ylabel("team joined", fontsize=9)
        ax.set_title(matrix.task, fontsize=11)
        for i, line in enumerate(values):
            for j, value in enumerate(line):
                ax.text(j, i, "no entry" if value is None else f"{value:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if value is None or value > 0.6 else "white")
        fig.colorbar(image, ax=ax, shrink=0.8, label="success")
    for ax in axes[len(found):]:
        ax.set_visible(False)
    fig.suptitle(f"{suite.VERSION} cross-play (success mean)", fontsize=12)
    fig.savefig(path, dpi=120)
