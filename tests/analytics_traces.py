"""Hand-built traces for the analytics tests: a small builder that keeps ``t`` and the
step count right, so each test writes only the records that matter to it."""
from __future__ import annotations

from typing import Dict, Iterable, Optional

from cube_jax.evaluation.trace import agent_name


class TraceBuilder:
    def __init__(self, n: int = 2, env: Optional[dict] = None, seed: int = 0, topology: str = "debate",
                 kind: str = "llm", weights: Iterable[int] = (2, 1)):
        self.n = n
        self.names = [agent_name(i) for i in range(n)]
        self.weights = list(weights)
        self.t = 0
        self.wall = 0.0
        self.records = [{
            "type": "episode", "t": 0, "wall": 0.0, "schema": 1, "env": env or {"scenario": "easy"}, "seed": seed,
            "topology": topology, "agents": {a: {"kind": kind, "model": "m" if kind == "llm" else None} for a in self.names},
            "layout": {"t": 0, "agents": [[i, 1] for i in range(n)],
                       "blocks": [[1, 3 + 2 * b, w, True] for b, w in enumerate(self.weights)]},
        }]

    def _add(self, kind: str, wall: Optional[float], **fields) -> "TraceBuilder":
        if wall is not None:
            self.wall = float(wall)
        self.records.append({"type": kind, "t": self.t, "wall": self.wall, **fields})
        return self

    def stage(self, agent: int, stage: str, wall: Optional[float] = None) -> "TraceBuilder":
        return self._add("stage", wall, agent=self.names[agent], stage=stage)

    def plan(self, agent: int, plan_id, spec: str, event: str, wall: Optional[float] = None) -> "TraceBuilder":
        extra = {"reason": "blocked"} if event == "failed" else {}
        return self._add("plan", wall, agent=self.names[agent], plan_id=plan_id, spec=spec,
                         actions=[spec.replace("block#", "")], event=event, **extra)

    def message(self, sender: int, recipients: Iterable[int], wall: Optional[float] = None) -> "TraceBuilder":
        mid = sum(r["type"] == "message" for r in self.records)
        return self._add("message", wall, id=mid, sender=self.names[sender],
                         recipients=[self.names[r] for r in recipients], content="hello")

    def llm(self, latency: float, prompt: int = 100, completion: int = 10, valid: bool = True,
            fallback: bool = False, wall: Optional[float] = None) -> "TraceBuilder":
        return self._add("llm", wall, agent=self.names[0], purpose="plan", model="m", attempts=1, latency_s=latency,
                         prompt_tokens=prompt, completion_tokens=completion, valid=valid, fallback=fallback)

    def step(self, tasks: Optional[Dict[str, tuple]] = None, delivered: Iterable[int] = (), actions=None,
             wall: Optional[float] = None) -> "TraceBuilder":
        """``tasks``: ``{"<block>:<face>": (spatial, temporal, participation, joint)}``."""
        task_counts = {}
        for key, (spatial, temporal, participation, joint) in (tasks or {}).items():
            task_counts[key] = {"required": self.weights[int(key.partition(":")[0])], "spatial": spatial,
                                "temporal": temporal, "participation": participation, "joint": joint}
        actions = actions or [0] * self.n
        self._add("step", wall, actions=dict(zip(self.names, actions)), symbolic={a: None for a in self.names},
                  reward=[0.0] * self.n, agents=[[i, 1] for i in range(self.n)],
                  blocks=[[1, 3 + 2 * b, w, True] for b, w in enumerate(self.weights)], delivered=list(delivered),
                  tasks=task_counts)
        self.t += 1
        return self

    def end(self, wall: Optional[float] = None, terminated: bool = False, delivered: int = 0, weight: int = 0) -> list:
        self._add("end", wall, terminated=terminated, truncated=not terminated,
                  reason="all blocks delivered" if terminated else "max_steps", steps=self.t,
                  blocks_delivered=delivered, blocks_total=len(self.weights), weight_delivered=weight,
                  weight_total=sum(self.weights))
        return self.records
