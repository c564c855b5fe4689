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
    trace = _TraceBuilder()
    world = _World(rng, n, [int(w) for w in weights])
    team = _Team(rng, trace, world, names, kind, topology, message_rate)
    trace.emit("episode", 0, schema=SCHEMA_VERSION, env=dict(env or {"n": n}), seed=int(seed), topology=topology,
               agents={name: {"kind": kind, "model": team.model} for name in names}, layout=world.layout())
    world.schedule(steps, deliver_fraction)
    for name in names:
        team.enter(name, "R", 0)
    t = 0
    while t < steps and world.any_alive():
        _deliberate(team, t)
        trace.advance(1e-3)
        trace.emit("step", t, **world.step(t, names, team.plan))
        t += 1
        _end_plans(team, t, plan_end_rate)
    _close_plans(team, t)
    trace.advance(1e-3)
    trace.emit("end", t, **world.outcome(t))
    return trace.records


class _World:
    """The random environment: the blocks, when each is delivered, the agents' cells (a
    random walk that obeys no physics) and the faces' counts."""

    def __init__(self, rng: np.random.Generator, n: int, weights: List[int]):
        self.rng, self.weights = rng, weights
        self.grid = grid = max(8, 2 * n + 4)
        self.agent_cells = [[int(rng.integers(grid)), int(rng.integers(1, grid))] for _ in range(n)]
        self.blocks = [[int(rng.integers(grid - 1)), int(rng.integers(1, grid - 2)), w, True] for w in weights]

    def layout(self) -> dict:
        return {"t": 0, "agents": [list(a) for a in self.agent_cells], "blocks": [list(b) for b in self.blocks]}

    def schedule(self, steps: int, deliver_fraction: float) -> None:
        """Draws when each block is delivered: about ``deliver_fraction`` of them within ``steps``."""
        horizon = max(1, int(steps / max(deliver_fraction, 1e-9)))
        self.deliver_at = {b: int(self.rng.integers(horizon)) for b in range(len(self.weights))}
        self.faces = _FaceCounts(self.rng, len(self.agent_cells), self.weights)

    def alive(self) -> List[int]:
        return [b for b, block in enumerate(self.blocks) if block[3]]

    def any_alive(self) -> bool:
        return any(block[3] for block in self.blocks)

    def step(self, t: int, names: List[str], plan: Dict[str, Optional[dict]]) -> dict:
        """The fields of the ``step`` record from ``t``: deliveries, face counts, random moves."""
        rng = self.rng
        delivered = [b for b in self.alive() if self.deliver_at[b] <= t]
        tasks = self.faces.step(self.blocks)
        for b in delivered:
            self.blocks[b][3] = False
        for cell in self.agent_cells:
            cell[0] = int(np.clip(cell[0] + rng.integers(-1, 2), 0, self.grid - 1))
        return dict(actions={name: int(rng.integers(5)) for name in names},
                    symbolic={name: plan[name]["actions"][-1] if plan[name] else None for name in names},
                    reward=[round(float(rng.normal(-0.01, 0.05)), 4) for _ in names],
                    agents=[list(a) for a in self.agent_cells], blocks=[list(b) for b in self.blocks],
                    delivered=delivered, tasks=tasks)

    def outcome(self, t: int) -> dict:
        """The ``end`` record's fields after ``t`` steps."""
        delivered = [b for b, block in enumerate(self.blocks) if not block[3]]
        terminated = len(delivered) == len(self.blocks)
        return dict(terminated=terminated, truncated=not terminated,
                    reason="all blocks delivered" if terminated else "max_steps", steps=t,
                    blocks_delivered=len(delivered), blocks_total=len(self.blocks),
                    weight_delivered=sum(self.weights[b] for b in delivered), weight_total=sum(self.weights))


class _Team:
    """The agents' side: stages, plans, model calls and messages, drawn at random."""

    def __init__(self, rng: np.random.Generator, trace: "_TraceBuilder", world: _World, names: List[str], kind: str,
                 topology: str, message_rate: float):
        self.rng, self.trace, self.world, self.names, self.kind = rng, trace, world, names, kind
        planner = kind in ("heuristic", "team")
        self.negotiates = topology == "negotiation" and not planner
        self.talks = topology not in ("individual", "negotiation") and not planner
        self.message_rate = message_rate
        self.model = "synthetic" if kind == "llm" else None
        self.stage: Dict[str, str] = {}
        self.plan: Dict[str, Optional[dict]] = {name: None for name in names}
        self.plan_ids = iter(range(10**9))
        self.message_ids = iter(range(10**9))

    def enter(self, name: str, new_stage: str, t: int) -> None:
        self.stage[name] = new_stage
        self.trace.emit("stage", t, agent=name, stage=new_stage)

    def decide(self, name: str, t: int, purpose: str) -> bool:
        """Leaves the decision's ``llm`` record; whether the agent fell back."""
        rng = self.rng
        if self.kind != "llm":
            self.trace.advance(1e-4)
            return False
        latency = float(rng.gamma(2.0, 0.6))
        self.trace.advance(latency)
        valid = bool(rng.random() > 0.1)
        fallback = not valid and bool(rng.random() < 0.5)
        self.trace.emit("llm", t, agent=name, purpose=purpose, model=self.model,
                        attempts=int(1 + (rng.random() < 0.05)), latency_s=round(latency, 4),
                        prompt_tokens=int(rng.integers(800, 3000)), completion_tokens=int(rng.integers(50, 400)),
                        valid=valid, fallback=fallback)
        return fallback

    def commit(self, name: str, t: int, fallback: bool = False, spec: Optional[str] = None,
               actions: Optional[List[str]] = None) -> None:
        """Commits a plan (by default a push of a random live block) and waits (W)."""
        target = int(self.rng.choice(self.world.alive() or [0]))
        face = FACE_NAMES[int(self.rng.integers(4))]
        pid = next(self.plan_ids)
        if spec is None:
            spec, actions = f"push_block(block#{target})", self.push_actions(target, face)
        extra = {}
        if fallback:
            spec, actions, extra = f"fallback({name})", ["idle(1)"], {"fallback": True}
        self.plan[name] = {"plan_id": pid, "spec": spec, "actions": actions}
        self.trace.emit("plan", t, agent=name, event="committed", **self.plan[name], **extra)
        self.enter(name, "W", t)

    def push_actions(self, block: int, face: str) -> List[str]:
        return [f"move_to_block({block}, {face})", f"push_block({block}, {face}, {int(self.rng.integers(1, 6))})"]

    def plan_event(self, name: str, t: int, event: str, **extra) -> None:
        self.trace.emit("plan", t, agent=name, event=event, **self.plan[name], **extra)

    def send_messages(self, name: str, t: int) -> List[str]:
        """Maybe a message to some teammates; the recipients."""
        rng, names = self.rng, self.names
        if not self.talks or len(names) < 2 or rng.random() >= self.message_rate:
            return []
        others = [other for other in names if other != name]
        count = int(rng.integers(1, len(others) + 1))
        recipients = sorted(rng.choice(others, size=count, replace=False).tolist(), key=names.index)
        self.trace.advance(1e-3)
        self.trace.emit("message", t, id=next(self.message_ids), sender=name, recipients=recipients,
                        content=f"{name} takes block {int(rng.integers(len(self.world.blocks)))}")
        return recipients


class _Room:
    """One negotiation room of the agents in R (LLM.md section 3.1): proposals, commitments,
    quorum, then the members' plans."""

    def __init__(self, team: _Team, room: List[str], t: int):
        self.team, self.room, self.t = team, room, t
        self.rng, self.weights = team.rng, team.world.weights

    def negotiate(self) -> None:
        team, t = self.team, self.t
        proposals: Dict[str, Optional[int]] = {}
        for name in self.room:
            self.choose(name, "proposal", proposals)
        commitments = dict(proposals)
        for name in self.room:
            self.choose(name, "commitment", commitments)
        committed = sorted({b for b in commitments.values() if b is not None})
        executing = Counter(team.plan[a]["spec"] for a in team.names
                            if a not in self.room and team.stage[a] == "X" and team.plan[a])
        final = {b for b in committed if sum(c == b for c in commitments.values())
                 + executing[f"push_block(block#{b})"] >= self.weights[b]}
        proposed = {b for b in proposals.values() if b is not None}
        team.trace.emit("negotiation", t, room=list(self.room), proposals=proposals, commitments=commitments,
                        team_sizes={str(b): self.weights[b] for b in sorted(proposed)},
                        allocation={a: b for a, b in commitments.items() if b in final},
                        quorum_failed=[b for b in committed if b not in final])
        for name in self.room:
            self.commit(name, commitments[name], final)

    def choose(self, name: str, purpose: str, choices: Dict[str, Optional[int]]) -> None:
        """One round of the room: the member's call, its choice and its message to the room."""
        rng, team = self.rng, self.team
        team.decide(name, self.t, purpose)
        alive = team.world.alive()
        block = int(rng.choice(alive)) if alive and rng.random() < 0.9 else None
        if purpose == "commitment" and choices.get(name) is not None and rng.random() < 0.7:
            block = choices[name]  # most members keep their proposal
        team.trace.advance(1e-3)
        team.trace.emit("message", self.t, id=next(team.message_ids), sender=name,
                        recipients=[m for m in self.room if m != name],
                        content=f"{purpose}: {'none' if block is None else f'block {block}'}", kind=purpose)
        choices[name] = block

    def commit(self, name: str, block: Optional[int], final: set) -> None:
        """The member's plan: push its allocated block, wait for a quorum, or idle."""
        team, t = self.team, self.t
        fallback = team.decide(name, t, "plan") if block in final else False
        if block is None:
            team.commit(name, t, fallback, "idle", ["idle(1)"])
        elif block in final:
            face = FACE_NAMES[int(self.rng.integers(4))]
            team.commit(name, t, fallback, f"push_block(block#{block})", team.push_actions(block, face))
        else:
            team.commit(name, t, fallback, f"quorum_wait(block#{block})", [f"wait_agents({self.weights[block]}, 3)"])


def _deliberate(team: _Team, t: int) -> None:
    """The cognitive phase before step ``t``: those reasoning decide (and may talk, or meet
    in a room); messages interrupt the busy; then every waiting agent executes."""
    interrupted: List[str] = []
    room = [name for name in team.names if team.stage[name] == "R"]
    if team.negotiates and room:
        _Room(team, room, t).negotiate()
    for name in room if not team.negotiates else ():
        fallback = team.decide(name, t, "plan")
        interrupted += [r for r in team.send_messages(name, t) if team.stage[r] in ("W", "X")]
        team.commit(name, t, fallback)
    for name in dict.fromkeys(interrupted):
        team.enter(name, "I", t)
        fallback = team.decide(name, t, "interrupt")
        if team.rng.random() < 0.5:
            team.plan_event(name, t, "resumed")
            team.enter(name, "W", t)
        else:
            team.plan_event(name, t, "replaced")
            team.commit(name, t, fallback)
    for name in team.names:
        if team.stage[name] == "W":
            team.enter(name, "X", t)


def _end_plans(team: _Team, t: int, plan_end_rate: float) -> None:
    """Each executing plan ends with probability ``plan_end_rate``, succeeded or failed."""
    rng = team.rng
    for name in team.names:
        if team.stage[name] == "X" and rng.random() < plan_end_rate:
            if rng.random() < 0.6:
                team.plan_event(name, t, "succeeded")
            else:
                team.plan_event(name, t, "failed", reason=str(rng.choice(FAILURE_REASONS)))
            team.plan[name] = None
            team.enter(name, "R", t)


def _close_plans(team: _Team, t: int) -> None:
    for name in team.names:
        if team.plan[name] is not None:
            team.plan_event(name, t, "unfinished")


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
