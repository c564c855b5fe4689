"""A picture of one episode, from its trace: who reasoned, waited and acted, and when the
blocks' faces were manned, as EmCoop's Figs. 2 and 6 draw it.

Three panels share the horizontal axis, the environment steps. Between two steps, the
records written while the environment waited (reasoning, messages, plan events) get a
narrow column of their own (:func:`timeline_axis`), in the order they were written, so
that the cognitive time that takes no environment step stays visible.

- **Agents**: one lane per agent, coloured by its stage (R reasoning, W waiting,
  X executing, I interrupted); markers for plan events (new, resumed, succeeded, failed,
  replaced, unfinished); messages as arrows from the sender's lane to each recipient's.
- **Actions**: one thin lane per agent, the primitive action of every step.
- **Faces**: one lane per block face that agents ever lined up behind or pushed,
  labelled ``b<block>:<face> w<weight>``: the light area is the agents aligned (spatial)
  and the dark one the agents aligned and pushing (joint), each as a share of the weight,
  so a lane filled dark to the top is a satisfied face; the orange line is the agents
  pushing (temporal). The column before a step shows that step's counts.
- Dashed verticals mark deliveries, labelled with the block.
- Under ``negotiation``, each room is a shaded box over its members' lanes, from its first
  proposal to its ``negotiation`` record, labelled with the allocation (``b2x3``: three
  agents on block 2) and the blocks that failed quorum.

>>> import tempfile, pathlib
>>> from cube_jax.analytics.synthetic import random_trace
>>> path = render_timeline(random_trace(seed=0, n=2, steps=20), pathlib.Path(tempfile.mkdtemp()) / "t.png")
>>> path.stat().st_size > 10_000
True
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import msgspec
import numpy as np

from cube_jax.analytics.traces import agent_names, run_fields
from cube_jax.names import ACTION_NAMES as _ACTIONS, FACE_NAMES, STAGES, Stage
from cube_jax.trace import OUTCOME_KEYS, record_views

STAGE_COLORS = dict(zip(STAGES, ("#4C72B0", "#F2B701", "#59A14F", "#E15759")))
STAGE_NAMES = {stage.value: f"{stage.value} {stage.name.lower()}" for stage in Stage}
# plan event -> (marker, fill, legend)
PLAN_MARKERS = {
    "committed": ("^", "white", "plan new"),
    "resumed": ("o", "#FFD92F", "plan resumed"),
    "succeeded": ("*", "#1A9850", "plan succeeded"),
    "failed": ("X", "#D7301F", "plan failed"),
    "replaced": ("s", "#B07AA1", "plan replaced"),
    "unfinished": ("|", "#555555", "plan unfinished"),
}
ACTION_COLORS = ("#E0E0E0", "#8DD3C7", "#FB8072", "#80B1D3", "#FDB462")  # STAY UP DOWN LEFT RIGHT
ACTION_NAMES = tuple(name.lower() for name in _ACTIONS)
FACE_ORDER = {face: i for i, face in enumerate(FACE_NAMES)}
SPATIAL_COLOR, JOINT_COLOR, TEMPORAL_COLOR = "#A6CEE3", "#1F6E43", "#FF7F00"
MESSAGE_COLOR = "#6A3D9A"
ROOM_COLOR = "#8E44AD"

# The keys the timeline reads of each record type (the rest is skipped while decoding).
TIMELINE_KEYS = {
    "episode": ("layout",),
    "stage": ("agent", "stage"),
    "plan": ("agent", "event"),
    "message": ("sender", "recipients", "kind"),
    "llm": (),
    "step": ("actions", "tasks", "delivered"),
    "negotiation": ("room", "allocation", "quorum_failed"),
    "end": OUTCOME_KEYS,
}
VIEWS = record_views(TIMELINE_KEYS, prefix="Timeline")
_Record = Union[tuple(VIEWS.values())]
Episode, StageView, PlanView, MessageView, StepView, NegotiationView, End = (
    VIEWS[kind] for kind in ("episode", "stage", "plan", "message", "step", "negotiation", "end"))


def typed_records(records: Sequence[Any]) -> list:
    """The timeline's views of ``records`` (dicts as :func:`~cube_jax.trace.read_trace`
    gives them, or views already)."""
    records = list(records)
    if records and not isinstance(records[0], Mapping):
        return records
    return msgspec.convert(records, List[_Record])


@dataclasses.dataclass
class TimelineAxis:
    """Where each record sits on the horizontal axis.

    ``position[i]`` is record i's place; a step record's place is the left edge of its
    column, one unit wide. ``step_left[k]`` is step k's left edge, ``end`` the right end.
    """

    position: List[float]
    step_left: List[float]
    end: float


def timeline_axis(records: Sequence[Any], phase_width: float = 0.5) -> TimelineAxis:
    """Places the records: one unit per step; the records between two steps (and before the
    first) share a column spread over in the order written, ``phase_width`` wide for each
    stage change of the busiest agent in it (at most three), so that an agent that goes
    R, W and X between two steps shows all three."""
    records = typed_records(records)
    position = [0.0] * len(records)
    step_left: List[float] = []
    x = 0.0
    pending: List[int] = []

    def place_phase() -> None:
        nonlocal x
        if pending:
            changes = Counter(records[i].agent for i in pending if type(records[i]) is StageView)
            width = phase_width * min(3, max(1, max(changes.values(), default=1)))
            for rank, index in enumerate(pending):
                position[index] = x + width * (rank + 0.5) / len(pending)
            x += width
            pending.clear()

    for index, record in enumerate(records):
        if type(record) is StepView:
            place_phase()
            position[index] = x
            step_left.append(x)
            x += 1.0
        elif type(record) not in (Episode, End):
            pending.append(index)
    place_phase()
    position[0] = 0.0
    position[-1] = x
    return TimelineAxis(position, step_left, x)


@dataclasses.dataclass
class _Episode:
    """What every panel of one timeline reads: the records, where they sit, the lanes."""

    records: list  # the timeline's views of the trace's records
    axis: TimelineAxis
    agents: List[str]  # in lane order
    steps: List[int]  # the indices of the step records
    faces: List[str]  # the face lanes' task keys, "<block>:<face>"
    weights: Dict[int, int]  # block id -> weight

    @property
    def lane_of(self) -> Dict[str, int]:
        return {name: i for i, name in enumerate(self.agents)}

    @property
    def small(self) -> int:
        """The font size of lane labels."""
        return 8 if len(self.agents) <= 8 else 6

    def of(self, kind: type):
        """(index, record) of every record of the view type ``kind``."""
        return [(i, r) for i, r in enumerate(self.records) if type(r) is kind]


def render_timeline(records: Sequence[dict], path, *, title: Optional[str] = None, phase_width: float = 0.5,
                    steps: Optional[Tuple[int, int]] = None, dpi: int = 110) -> Path:
    """Draws the timeline of one episode's ``records`` into the PNG ``path``.

    ``steps=(start, stop)`` shows only environment steps start..stop-1 (with the cognitive
    columns between them). Returns the path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    header = records[0]
    episode = _read_episode(records, phase_width)
    fig, (ax_agents, ax_actions, ax_faces) = _figure(plt, episode)
    _draw_stages(ax_agents, episode)
    _draw_plan_events(ax_agents, episode)
    _draw_messages(ax_agents, episode)
    rooms = _draw_rooms(ax_agents, episode)
    _lanes(ax_agents, episode.agents, episode.small, top=-1.1)
    ax_agents.set_ylabel("agents", fontsize=9)
    _draw_actions(ax_actions, episode)
    _draw_faces(ax_faces, episode)
    _draw_deliveries((ax_agents, ax_actions, ax_faces), episode)
    _set_steps_shown(ax_faces, episode.axis, steps)
    fig.legend(handles=_legend(bool(rooms)), loc="lower center", ncol=10, fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(title or _title(header, episode.records[-1]), fontsize=10, y=0.995)
    fig.subplots_adjust(left=0.09, right=0.99, top=1 - 0.55 / fig.get_figheight(), bottom=1.2 / fig.get_figheight())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _read_episode(records: Sequence[dict], phase_width: float) -> _Episode:
    typed = typed_records(records)
    steps = [i for i, r in enumerate(typed) if type(r) is StepView]
    return _Episode(records=typed, axis=timeline_axis(typed, phase_width), agents=agent_names(records[0]),
                    steps=steps, faces=_faces(typed, steps), weights=_weights(typed, steps))


def _figure(plt, episode: _Episode):
    """The figure and its three panels (agents, actions, faces), sized to their lanes."""
    n = len(episode.agents)
    agent_height = max(0.16, min(0.42, 3.2 / max(n, 1)))
    face_height = 0.32 if len(episode.faces) <= 16 else 0.2
    heights = [0.6 + agent_height * n, 0.3 + (0.12 if n <= 8 else 0.06) * n,
               0.4 + face_height * max(len(episode.faces), 1)]
    width = 15.0
    return plt.subplots(3, 1, sharex=True, figsize=(width, sum(heights) + 1.9),
                        gridspec_kw={"height_ratios": heights, "hspace": 0.08})


# --- agents: stages, plan events, messages, rooms ------------------------------------------------


def _draw_stages(ax, episode: _Episode) -> None:
    """Each agent's lane coloured by its stage, from one stage record to its next."""
    lane_of, position = episode.lane_of, episode.axis.position
    segments: Dict[Tuple[int, str], List[Tuple[float, float]]] = {}
    open_stage: Dict[str, Tuple[float, str]] = {}
    for index, record in episode.of(StageView):
        name, x = record.agent, position[index]
        if name in open_stage:
            start, stage = open_stage[name]
            segments.setdefault((lane_of[name], stage), []).append((start, x - start))
        open_stage[name] = (x, record.stage)
    for name, (start, stage) in open_stage.items():
        segments.setdefault((lane_of[name], stage), []).append((start, episode.axis.end - start))
    bar = 0.7
    for (lane, stage), spans in segments.items():
        ax.broken_barh(spans, (lane - bar / 2, bar), facecolors=STAGE_COLORS.get(stage, "#999999"), linewidth=0)


def _draw_plan_events(ax, episode: _Episode) -> None:
    lane_of, position = episode.lane_of, episode.axis.position
    marker_size = 55 if len(episode.agents) <= 8 else 22
    plans = episode.of(PlanView)
    for event, (marker, fill, _) in PLAN_MARKERS.items():
        xs = [position[i] for i, r in plans if r.event == event]
        ys = [lane_of[r.agent] for _, r in plans if r.event == event]
        if xs:
            outline = {"edgecolors": "black"} if marker != "|" else {}
            ax.scatter(xs, ys, marker=marker, s=marker_size * (1.6 if marker == "*" else 1), c=fill,
                       linewidths=0.6 if marker != "|" else 1.5, zorder=4, **outline)


def _draw_messages(ax, episode: _Episode) -> None:
    """A shaft from the sender's lane to each recipient's, a head at the recipient."""
    from matplotlib.collections import LineCollection

    lane_of, n = episode.lane_of, len(episode.agents)
    shafts, heads_up, heads_down, senders = [], [], [], []
    for index, record in episode.of(MessageView):
        x, source = episode.axis.position[index], lane_of[record.sender]
        senders.append((x, source))
        for name in record.recipients:
            target = lane_of[name]
            shafts.append([(x, source), (x, target)])
            # lanes are numbered downwards: a smaller lane is higher on the page
            (heads_up if target < source else heads_down).append((x, target + (0.22 if target < source else -0.22)))
    if not shafts:
        return
    ax.add_collection(LineCollection(shafts, colors=MESSAGE_COLOR, linewidths=0.9 if n <= 8 else 0.5,
                                     alpha=0.8, zorder=5), autolim=False)
    head_size = 22 if n <= 8 else 9
    for heads, marker in ((heads_up, "^"), (heads_down, "v")):
        if heads:
            ax.scatter(*zip(*heads), marker=marker, s=head_size, c=MESSAGE_COLOR, linewidths=0, zorder=5)
    ax.scatter(*zip(*senders), marker="o", s=head_size / 2, c=MESSAGE_COLOR, linewidths=0, zorder=5)


def _draw_rooms(ax, episode: _Episode) -> List[tuple]:
    from matplotlib.patches import Rectangle

    rooms = _rooms(episode.records, episode.axis, episode.lane_of)
    for x0, x1, low_lane, high_lane, label in rooms:
        ax.add_patch(Rectangle((x0, low_lane - 0.48), max(x1 - x0, 0.15), high_lane - low_lane + 0.96,
                               facecolor=ROOM_COLOR, alpha=0.18, edgecolor=ROOM_COLOR, linewidth=0.8, zorder=3))
        ax.text(x0, low_lane - 0.5, label, fontsize=episode.small - 1, color=ROOM_COLOR, ha="left", va="bottom",
                zorder=7)
    return rooms


# --- primitive actions, block faces, deliveries -----------------------------------------------------


def _draw_actions(ax, episode: _Episode) -> None:
    lane_of, step_left = episode.lane_of, episode.axis.step_left
    for value, color in enumerate(ACTION_COLORS):
        for name in episode.agents:
            spans = [(step_left[k], 1.0) for k, i in enumerate(episode.steps)
                     if episode.records[i].actions.get(name) == value]
            if spans:
                ax.broken_barh(spans, (lane_of[name] - 0.45, 0.9), facecolors=color, linewidth=0)
    n = len(episode.agents)
    _lanes(ax, episode.agents if n <= 8 else [""] * n, episode.small - 1)
    ax.set_ylabel("actions", fontsize=9)


def _draw_faces(ax, episode: _Episode) -> None:
    """Per face lane: the aligned and the joint agents as filled steps, the pushing ones as
    a line, each as a share of the block's weight."""
    from matplotlib.collections import PolyCollection

    edges = _stair_edges(episode.axis)
    fills: Dict[str, list] = {SPATIAL_COLOR: [], JOINT_COLOR: []}
    for lane, key in enumerate(episode.faces):
        weight = max(episode.weights.get(_block_of(key), 1), 1)
        counts = _face_counts(episode, key)
        # the y axis runs downwards: a lane's floor is lane + 0.42 and its fills rise from it
        floor, height = lane + 0.42, 0.84
        if episode.steps:
            for count, color in (("spatial", SPATIAL_COLOR), ("joint", JOINT_COLOR)):
                fills[color].append(_step_polygon(edges, floor - height * np.minimum(counts[count] / weight, 1), floor))
            pushing = counts["temporal"] > 0
            if pushing.any():
                ax.hlines(floor - height * np.minimum(counts["temporal"][pushing] / weight, 1),
                          edges[:-1][pushing], edges[1:][pushing], color=TEMPORAL_COLOR, linewidth=1.2)
        ax.axhline(floor - height, color="#BBBBBB", linewidth=0.4, linestyle=":")
        ax.axhline(floor, color="#DDDDDD", linewidth=0.4)
    for color, polygons in fills.items():
        if polygons:
            ax.add_collection(PolyCollection(polygons, facecolors=color, linewidths=0), autolim=False)
    labels = [f"b{_block_of(key)}:{key.partition(':')[2]} w{episode.weights.get(_block_of(key), '?')}"
              for key in episode.faces]
    _lanes(ax, labels or ["(no face manned)"], episode.small)
    ax.set_ylabel("block faces", fontsize=9)


def _face_counts(episode: _Episode, key: str) -> Dict[str, np.ndarray]:
    """The face's spatial, temporal and joint counts at every step (0 where unlisted)."""
    counts = {c: np.zeros(len(episode.steps)) for c in ("spatial", "temporal", "joint")}
    for k, i in enumerate(episode.steps):
        task = episode.records[i].tasks.get(key)
        if task:
            for c in counts:
                counts[c][k] = getattr(task, c)
    return counts


def _draw_deliveries(axes, episode: _Episode) -> None:
    """A dashed vertical across every panel where a block was delivered, labelled above."""
    for k, i in enumerate(episode.steps):
        for block in episode.records[i].delivered:
            x = episode.axis.step_left[k] + 1.0
            for ax in axes:
                ax.axvline(x, color="black", linestyle="--", linewidth=0.8, alpha=0.7, zorder=6)
            axes[0].text(x, -0.75, f"b{block}", fontsize=episode.small, ha="center", va="bottom", zorder=7,
                         bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "black",
                               "linewidth": 0.5})


def _set_steps_shown(ax, axis: TimelineAxis, steps: Optional[Tuple[int, int]]) -> None:
    _step_ticks(ax, axis)
    low, high = 0.0, axis.end
    if steps is not None:
        start, stop = max(0, steps[0]), min(len(axis.step_left), steps[1])
        if start < stop:
            low = axis.step_left[start - 1] + 1.0 if start > 0 else 0.0
            high = axis.step_left[stop - 1] + 1.0
    ax.set_xlim(low, high)
    ax.set_xlabel("environment step (narrow columns between steps: reasoning, messages, plan events)", fontsize=9)


def _legend(with_rooms: bool) -> list:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=STAGE_COLORS[s], label=STAGE_NAMES[s]) for s in STAGE_COLORS]
    handles += [Line2D([], [], linestyle="", marker=m, markerfacecolor=f, markeredgecolor="black" if m != "|" else f,
                       color=f, markersize=7, label=label) for m, f, label in PLAN_MARKERS.values()]
    handles.append(Line2D([], [], color=MESSAGE_COLOR, marker=">", markersize=5, label="message"))
    if with_rooms:
        handles.append(Patch(facecolor=ROOM_COLOR, alpha=0.3, edgecolor=ROOM_COLOR, label="negotiation room"))
    handles += [Patch(color=c, label=f"action {a}") for c, a in zip(ACTION_COLORS, ACTION_NAMES)]
    handles += [Patch(color=SPATIAL_COLOR, label="aligned / w"), Patch(color=JOINT_COLOR, label="joint / w"),
                Line2D([], [], color=TEMPORAL_COLOR, label="pushing / w"),
                Line2D([], [], color="black", linestyle="--", label="delivery")]
    return handles


def _rooms(records: Sequence[Any], axis: TimelineAxis, lane_of: Dict[str, int]) -> List[tuple]:
    """Negotiation rooms: (x from, x to, first lane, last lane, label) each, from the room's
    first proposal to its ``negotiation`` record; the label says what was allocated."""
    rooms, opened = [], None
    for index, record in enumerate(records):
        if type(record) is MessageView and record.kind == "proposal" and opened is None:
            opened = index
        elif type(record) is NegotiationView:
            lanes = [lane_of[name] for name in record.room]
            start = axis.position[opened if opened is not None else index]
            allocated = Counter(b for b in record.allocation.values() if b is not None)
            label = "room: " + (", ".join(f"b{b}x{k}" for b, k in sorted(allocated.items())) or "no allocation")
            if record.quorum_failed:
                label += " (no quorum: " + ", ".join(f"b{b}" for b in record.quorum_failed) + ")"
            rooms.append((start, axis.position[index], min(lanes), max(lanes), label))
            opened = None
    return rooms


def _lanes(ax, labels: Sequence[str], fontsize: int, top: float = -0.5) -> None:
    ax.set_ylim(len(labels) - 0.5, top)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=fontsize)
    ax.tick_params(axis="y", length=0)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)


def _block_of(key: str) -> int:
    """The block of a task key ``<block>:<face>``."""
    return int(key.partition(":")[0])


def _faces(records: Sequence[Any], step_indices: Sequence[int]) -> List[str]:
    seen = {}
    for i in step_indices:
        for key in records[i].tasks:
            seen[key] = True
    return sorted(seen, key=lambda key: (_block_of(key), FACE_ORDER.get(key.partition(":")[2], 9)))


def _weights(records: Sequence[Any], step_indices: Sequence[int]) -> Dict[int, int]:
    weights = {b: int(block[2]) for b, block in enumerate(records[0].layout.blocks)}
    for i in step_indices:
        for key, task in records[i].tasks.items():
            weights.setdefault(_block_of(key), int(task.required))
    return weights


def _stair_edges(axis: TimelineAxis) -> np.ndarray:
    """Step k's face counts fill from the end of step k-1 (or its own left edge) to its end."""
    if not axis.step_left:
        return np.zeros(1)
    rights = np.asarray(axis.step_left) + 1.0
    return np.concatenate([[axis.step_left[0]], rights])


def _step_polygon(edges: np.ndarray, levels: np.ndarray, floor: float) -> np.ndarray:
    """The outline of a step function over ``edges`` (float[K+1]) at ``levels`` (float[K]),
    closed along ``floor``: float[2K+2, 2]."""
    xs = np.concatenate([[edges[0]], np.repeat(edges, 2)[1:-1], [edges[-1]]])
    ys = np.concatenate([[floor], np.repeat(levels, 2), [floor]])
    return np.column_stack([xs, ys])


def _step_ticks(ax, axis: TimelineAxis) -> None:
    from matplotlib.ticker import MaxNLocator

    count = len(axis.step_left)
    lefts = axis.step_left + [axis.end]
    ticks = [int(t) for t in MaxNLocator(nbins=12, integer=True).tick_values(0, count) if 0 <= t <= count]
    ax.set_xticks([lefts[t] for t in ticks])
    ax.set_xticklabels([str(t) for t in ticks], fontsize=8)


def _title(header: dict, end) -> str:
    run = run_fields(header)
    outcome = "all blocks delivered" if end.terminated else f"truncated ({end.reason})"
    return (f"{run['topology']} | {run['team']} | {run['scenario']} | seed {header.get('seed')}: "
            f"{end.blocks_delivered}/{end.blocks_total} blocks, weight "
            f"{end.weight_delivered}/{end.weight_total}, {end.steps} steps, {outcome}")
