"""Random valid traces (LLM.md section 5), for tests, benchmarks and trying the tools.

:func:`random_trace` plays the MAEIL stage machine with random choices instead of a model:
every agent starts in R, commits a plan (W), executes it (X) once every agent is ready,
ends it (succeeded or failed, back to R), and, when its topology lets agents talk, is
interrupted by messages (I) and then resumes or replans. The environment part is random
too but keeps the schema's promises: the ``tasks`` counts of a face obey joint <= spatial
and participation = spatial, faces are listed only while their block is alive, and the
``end`` record's counts match the step records. Positions are random and obey no physics:
these traces exercise the metrics, the timeline and the reader, not the world.

>>> records = random_trace(seed=1, n=3, steps=20)
>>> [records[0]["type"], records[-1]["type"], sum(r["type"] == "step" for r in records)]
['episode', 'end', 20]
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from cube_jax.trace import FACE_NAMES, SCHEMA_VERSION, agent_name

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
    the kind is a planner's (``heuristic``, ``team``); each executing plan ends after a
    step with probability ``plan_end_rate``.
    """
    rng = np.random.default_rng(seed)
    names = [agent_name(i) for i in range(n)]
    if weights is None:
        weights = [int(w) for w in rng.integers(1, n + 1, size=n // 2 + 1)]
    weights = [int(w) for w in weights]
    talks = topology != "individual" and kind not in ("heuristic", "team")
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

    def decide(name: str, t: int, purpose: str) -> None:
        if kind == "llm":
            latency = float(rng.gamma(2.0, 0.6))
            trace.advance(latency)
            valid = bool(rng.random() > 0.1)
            trace.emit("llm", t, agent=name, purpose=purpose, model=model, attempts=int(1 + (rng.random() < 0.05)),
                       latency_s=round(latency, 4), prompt_tokens=int(rng.integers(800, 3000)),
                       completion_tokens=int(rng.integers(50, 400)), valid=valid, fallback=not valid and bool(rng.random() < 0.5))
        else:
            trace.advance(1e-4)

    def commit(name: str, t: int) -> None:
        alive = [b for b, block in enumerate(blocks) if block[3]] or [0]
        target = int(rng.choice(alive))
        face = FACE_NAMES[int(rng.integers(4))]
        pid = next(plan_ids)
        actions = [f"move_to_block({target}, {face})", f"push_block({target}, {face}, {int(rng.integers(1, 6))})"]
        plan[name] = {"plan_id": pid, "spec": f"push_block(block#{target})", "actions": actions}
        trace.emit("plan", t, agent=name, event="committed", **plan[name])
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

    for name in names:
        enter(name, "R", 0)
    t = 0
    while t < steps and any(block[3] for block in blocks):
        # cognitive phase: those reasoning decide (and may talk); messages interrupt the busy
        interrupted: List[str] = []
        for name in names:
            if stage[name] == "R":
                decide(name, t, "plan")
                interrupted += [r for r in send_messages(name, t) if stage[r] in ("W", "X")]
                commit(name, t)
        for name in dict.fromkeys(interrupted):
            enter(name, "I", t)
            decide(name, t, "interrupt")
            if rng.random() < 0.5:
                plan_event(name, t, "resumed")
                enter(name, "W", t)
            else:
                plan_event(name, t, "replaced")
                commit(name, t)
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
    def __init__(self):
        self.records: List[dict] = []
        self.wall = 0.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds

    def emit(self, kind: str, t: int, **fields) -> None:
        self.records.append({"type": kind, "t": int(t), "wall": round(self.wall, 6), **fields})


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
