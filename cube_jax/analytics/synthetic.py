"""Random valid traces (LLM.md section 5), for tests, benchmarks and trying the tools.

:func:`random_trace` plays the MAEIL stage machine with random choices instead of a model:
every agent starts in R, commits a plan (W), executes it (X) once every agent is ready,
ends it (succeeded or failed, back to R), and, when its topology lets agents talk, is
interrupted by messages (I) and then resumes or replans. Under ``negotiation`` the agents
in R meet in a room instead (LLM.md section 3.1): each proposes and then commits to a
live block or none (``message`` records of kind ``proposal`` and ``commitment``, each
after its ``llm`` record), the blocks that reach their quorum are allocated, and one
``negotiation`` record closes the room; members then commit ``push_block(block#b)`` for
their block, ``quorum_wait(block#b)`` for a block that failed its quorum, or ``idle`` for
none. A language agent whose call fell back commits a fallback plan (``fallback(agent_k)``,
``"fallback": true``). The environment part is random
too but keeps the schema's promises: the ``tasks`` counts of a face obey joint <= spatial
and participation = spatial, faces are listed only while their block is alive, and the
``end`` record's counts match the step records. Positions are random and obey no physics:
these traces exercise the metrics, the timeline and the reader, not the world.

>>> records = random_trace(seed=1, n=3, steps=20)
>>> [records[0]["type"], records[-1]["type"], sum(r["type"] == "step" for r in records)]
['episode', 'end', 20]
>>> rooms = [r for r in random_trace(seed=1, n=3, steps=20, topology="negotiation") if r["type"] == "negotiation"]
>>> rooms[0]["room"]
['agent_0', 'agent_1', 'agent_2']
"""
from __future__ import annotations

import io
from collections import Counter
from typing import Dict, List, Optional, Sequence

import numpy as np

from cube_jax.names import FACE_NAMES, agent_name
from cube_jax.trace import SCHEMA_VERSION, TraceWriter

FAILURE_REASONS = ("blocked by an agent", "block out of reach", "timeout")


def random_trace(
    seed: int,
    n: int = 3,
    steps: int = 50,
    weights: Optional[Sequence[int]] = None,
    topology: str = "decentralized",
    kind: str = "llm",
    message_rate: float = 0.3,
    plan_end_rate: float = 0.1,
    deliver_fraction: float = 0.7,
    env: Optional[dict] = None,
) -> List[dict]:
    """The records of one random episode of ``n`` agents that lasts at most ``steps`` steps.

    ``weights`` are the blocks' weights (default: ``n // 2 + 1`` blocks of random weight
    1..n); about ``deliver_fraction`` of them are delivered at random steps within the
    episode, and the episode terminates early when all are. ``kind`` is every agent's kind;
    ``llm`` agents leave an ``llm`` record per decision. Agents send messages (with
    probability ``message_rate`` per decision) unless the topology is ``individual`` or
    ``negotiation`` or the kind is a planner's (``heuristic``, ``team``); under
    ``negotiation``, agents that are not planners meet in rooms (see the module docstring). Each executing plan
    ends after a step with probability ``plan_end_rate``.
    """
    rng = np.random.default_rng(seed)
    names = [agent_name(i) for i in range(n)]
    if weights is None:
        weights = [int(w) for w in rng.integers(1, n + 1, size=n // 2 + 1)]
    weights = [int(w) for w in weights]
    planner = kind in ("heuristic", "team")
    negotiates = topology == "negotiation" and not planner
    talks = topology not in ("individual", "negotiation") and not planner
    model = "synthetic" if kind == "llm" else None
    trace = _TraceBuilder()
    grid = max(8, 2 * n + 4)
    agent_cells = [[int(rng.integers(grid)), int(rng.integers(1, grid))] for _ in names]
    blocks = [[int(rng.integers(grid - 1)), int(rng.integers(1, grid - 2)), w, True] for w in weights]
    trace.emit("episode", 0, schema=SCHEMA_VERSION, env=dict(env or {"n": n}), seed=int(seed), topology=topology,
               agents={name: {"kind": kind, "model": model} for name in names},
               layout={"t": 0, "agents": [list(a) for a in agent_cells], "blocks": [list(b) for b in blocks]})

    horizon = max(1, int(steps / max(deliver_fraction, 1e-9)))
    deliver_at = {b: int(rng.integers(horizon)) for b in range(len(weights))}
    faces = _FaceCounts(rng, n, weights)
    stage = {}
    plan: Dict[str, Optional[dict]] = {name: None for name in names}
    plan_ids = iter(range(10**9))
    message_ids = iter(range(10**9))

    def enter(name: str, new_stage: str, t: int) -> None:
        stage[name] = new_stage
        trace.emit("stage", t, agent=name, stage=new_stage)

    def decide(name: str, t: int, purpose: str) -> bool:
        """Leaves the decision's ``llm`` record; whether the agent fell back."""
        if kind == "llm":
            latency = float(rng.gamma(2.0, 0.6))
            trace.advance(latency)
            valid = bool(rng.random() > 0.1)
            fallback = not valid and bool(rng.random() < 0.5)
            trace.emit("llm", t, agent=name, purpose=purpose, model=model, attempts=int(1 + (rng.random() < 0.05)),
                       latency_s=round(latency, 4), prompt_tokens=int(rng.integers(800, 3000)),
                       completion_tokens=int(rng.integers(50, 400)), valid=valid, fallback=fallback)
            return fallback
        trace.advance(1e-4)
        return False

    def commit(name: str, t: int, fallback: bool = False, spec: Optional[str] = None,
               actions: Optional[List[str]] = None) -> None:
        alive = [b for b, block in enumerate(blocks) if block[3]] or [0]
        target = int(rng.choice(alive))
        face = FACE_NAMES[int(rng.integers(4))]
        pid = next(plan_ids)
        if spec is None:
            spec = f"push_block(block#{target})"
            actions = [f"move_to_block({target}, {face})", f"push_block({target}, {face}, {int(rng.integers(1, 6))})"]
        extra = {}
        if fallback:
            spec, actions, extra = f"fallback({name})", ["idle(1)"], {"fallback": True}
        plan[name] = {"plan_id": pid, "spec": spec, "actions": actions}
        trace.emit("plan", t, agent=name, event="committed", **plan[name], **extra)
        enter(name, "W", t)

    def plan_event(name: str, t: int, event: str, **extra) -> None:
        trace.emit("plan", t, agent=name, event=event, **plan[name], **extra)

    def send_messages(name: str, t: int) -> List[str]:
        if not talks or n < 2 or rng.random() >= message_rate:
            return []
        others = [other for other in names if other != name]
        count = int(rng.integers(1, len(others) + 1))
        recipients = sorted(rng.choice(others, size=count, replace=False).tolist(), key=names.index)
        trace.advance(1e-3)
        trace.emit("message", t, id=next(message_ids), sender=name, recipients=recipients,
                   content=f"{name} takes block {int(rng.integers(len(blocks)))}")
        return recipients

    def choose(name: str, t: int, purpose: str, room: List[str], choices: Dict[str, Optional[int]]) -> None:
        """One round of a room: the member's call, its choice and its message to the room."""
        decide(name, t, purpose)
        alive = [b for b, block in enumerate(blocks) if block[3]]
        block = int(rng.choice(alive)) if alive and rng.random() < 0.9 else None
        if purpose == "commitment" and choices.get(name) is not None and rng.random() < 0.7:
            block = choices[name]  # most members keep their proposal
        trace.advance(1e-3)
        trace.emit("message", t, id=next(message_ids), sender=name, recipients=[m for m in room if m != name],
                   content=f"{purpose}: {'none' if block is None else f'block {block}'}", kind=purpose)
        choices[name] = block

    def negotiate(room: List[str], t: int) -> None:
        """A room of the agents in R: proposals, commitments, quorum, then the members' plans."""
        proposals: Dict[str, Optional[int]] = {}
        for name in room:
            choose(name, t, "proposal", room, proposals)
        commitments = dict(proposals)
        for name in room:
            choose(name, t, "commitment", room, commitments)
        committed = sorted({b for b in commitments.values() if b is not None})
        executing = Counter(plan[a]["spec"] for a in names if a not in room and stage[a] == "X" and plan[a])
        final = {b for b in committed if sum(c == b for c in commitments.values())
                 + executing[f"push_block(block#{b})"] >= weights[b]}
        proposed = {b for b in proposals.values() if b is not None}
        trace.emit("negotiation", t, room=list(room), proposals=proposals, commitments=commitments,
                   team_sizes={str(b): weights[b] for b in sorted(proposed)},
                   allocation={a: b for a, b in commitments.items() if b in final},
                   quorum_failed=[b for b in committed if b not in final])
        for name in room:
            fallback = decide(name, t, "plan") if commitments[name] in final else False
            block = commitments[name]
            if block is None:
                commit(name, t, fallback, "idle", ["idle(1)"])
            elif block in final:
                face = FACE_NAMES[int(rng.integers(4))]
                commit(name, t, fallback, f"push_block(block#{block})",
                       [f"move_to_block({block}, {face})", f"push_block({block}, {face}, {int(rng.integers(1, 6))})"])
            else:
                commit(name, t, fallback, f"quorum_wait(block#{block})", [f"wait_agents({weights[block]}, 3)"])

    for name in names:
        enter(name, "R", 0)
    t = 0
    while t < steps and any(block[3] for block in blocks):
        # cognitive phase: those reasoning decide (and may talk); messages interrupt the busy
        interrupted: List[str] = []
        room = [name for name in names if stage[name] == "R"]
        if negotiates and room:
            negotiate(room, t)
        for name in room if not negotiates else ():
            fallback = decide(name, t, "plan")
            interrupted += [r for r in send_messages(name, t) if stage[r] in ("W", "X")]
            commit(name, t, fallback)
        for name in dict.fromkeys(interrupted):
            enter(name, "I", t)
            fallback = decide(name, t, "interrupt")
            if rng.random() < 0.5:
                plan_event(name, t, "resumed")
                enter(name, "W", t)
            else:
                plan_event(name, t, "replaced")
                commit(name, t, fallback)
        for name in names:
            if stage[name] == "W":
                enter(name, "X", t)
        # primitive phase
        trace.advance(1e-3)
        delivered = [b for b, block in enumerate(blocks) if block[3] and deliver_at[b] <= t]
        tasks = faces.step(blocks)
        for b in delivered:
            blocks[b][3] = False
        for cell in agent_cells:
            cell[0] = int(np.clip(cell[0] + rng.integers(-1, 2), 0, grid - 1))
        trace.emit("step", t, actions={name: int(rng.integers(5)) for name in names},
                   symbolic={name: plan[name]["actions"][-1] if plan[name] else None for name in names},
                   reward=[round(float(rng.normal(-0.01, 0.05)), 4) for _ in names],
                   agents=[list(a) for a in agent_cells], blocks=[list(b) for b in blocks],
                   delivered=delivered, tasks=tasks)
        t += 1
        for name in names:
            if stage[name] == "X" and rng.random() < plan_end_rate:
                if rng.random() < 0.6:
                    plan_event(name, t, "succeeded")
                else:
                    plan_event(name, t, "failed", reason=str(rng.choice(FAILURE_REASONS)))
                plan[name] = None
                enter(name, "R", t)
    for name in names:
        if plan[name] is not None:
            plan_event(name, t, "unfinished")
    delivered_ids = [b for b, block in enumerate(blocks) if not block[3]]
    trace.advance(1e-3)
    terminated = len(delivered_ids) == len(blocks)
    trace.emit("end", t, terminated=terminated, truncated=not terminated,
               reason="all blocks delivered" if terminated else "max_steps", steps=t,
               blocks_delivered=len(delivered_ids), blocks_total=len(blocks),
               weight_delivered=sum(weights[b] for b in delivered_ids), weight_total=sum(weights))
    return trace.records


class _TraceBuilder:
    """The records of a trace, written by :class:`~cube_jax.trace.TraceWriter` (so checked
    against the record types) on a clock that moves only when told to."""

    def __init__(self):
        self.records: List[dict] = []
        self.wall = 0.0
        self._writer = TraceWriter(io.StringIO(), clock=lambda: self.wall)

    def advance(self, seconds: float) -> None:
        self.wall += seconds

    def emit(self, record_type: str, t: int, **fields) -> None:
        self.records.append(self._writer.write(record_type, t, **fields))


class _FaceCounts:
    """Per block, one face that agents gather behind (a random walk of the spatial count)
    and now and then a passer-by on another face."""

    def __init__(self, rng: np.random.Generator, n: int, weights: Sequence[int]):
        self.rng = rng
        self.n = n
        self.main_face = [FACE_NAMES[int(rng.integers(4))] for _ in weights]
        self.aligned = [0 for _ in weights]

    def step(self, blocks: List[list]) -> Dict[str, dict]:
        rng = self.rng
        tasks: Dict[str, dict] = {}
        for b, (_, _, w, alive) in enumerate(blocks):
            if not alive:
                continue
            self.aligned[b] = int(np.clip(self.aligned[b] + rng.integers(-1, 2), 0, self.n))
            counts = [(self.main_face[b], self.aligned[b])]
            if rng.random() < 0.1:
                counts.append((FACE_NAMES[int(rng.integers(4))], 1))
            for face, spatial in counts:
                pushing = int(rng.integers(0, spatial + 1))
                # an agent pushing while out of line counts as temporal only
                stray = int(pushing > 0 and rng.random() < 0.1)
                key = f"{b}:{face}"
                if spatial or pushing + stray:
                    tasks[key] = {"required": w, "spatial": spatial, "temporal": pushing + stray,
                                  "participation": spatial, "joint": pushing}
        return tasks
