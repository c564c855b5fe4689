"""The runtime's bookkeeping for one agent, and the records of its stages and plans."""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable, Deque, Dict, List, Optional

from cube_jax.agents.base import Agent, Message, Plan, Reason, Stage
from cube_jax.symbolic.actions import PlanError
from cube_jax.trace import TraceWriter

# History records per agent kept for its decision context.
HISTORY_PER_AGENT = 40
# Messages an agent sent that its decision context shows.
SENT_PER_AGENT = 8


@dataclasses.dataclass
class AgentSlot:
    """Where one agent stands: its stage, plan, messages and what happened since it decided."""

    index: int
    agent: Agent
    name: str
    stage: Stage = Stage.REASONING
    plan: Optional[Plan] = None
    plan_id: Optional[int] = None
    reason: Reason = Reason.START
    inbox: List[Message] = dataclasses.field(default_factory=list)  # delivered, not yet read
    buffer: Deque[Message] = dataclasses.field(default_factory=collections.deque)  # sent to it, not yet delivered
    delivered_this_step: int = 0
    sent: Deque[Message] = dataclasses.field(default_factory=lambda: collections.deque(maxlen=SENT_PER_AGENT))
    feedback: List[str] = dataclasses.field(default_factory=list)  # what happened since it last decided
    history: Deque[Any] = dataclasses.field(default_factory=lambda: collections.deque(maxlen=HISTORY_PER_AGENT))
    last_error: Optional[PlanError] = None
    last_status: str = "done"
    action: Optional[str] = None  # the symbolic action it executed at the last step, as text
    # the task its last step worked on, with that step record's ``tasks`` counts (stepping.last_task)
    last_task: Optional[Dict[str, Any]] = None


class Recorder:
    """Writes an episode's records: to a :class:`~cube_jax.trace.TraceWriter` when there is
    one, and to ``on_record`` (a live view) either way. ``t`` is the step the runtime is at.

    Every record is stamped with the wall time at which it is written, so an agent's
    ``stage`` record carries the moment of its own transition and ``wall`` never decreases.
    """

    def __init__(self, trace: Optional[TraceWriter], on_record: Optional[Callable[[dict], None]]):
        self.trace = trace
        self.on_record = on_record
        self.t = 0
        self._start = time.perf_counter()
        self._last_wall = 0.0

    def write(self, record_type: str, **fields) -> None:
        if self.trace is not None:
            record = self.trace.write(record_type, self.t, **fields)
        elif self.on_record is not None:
            self._last_wall = max(self._last_wall, round(time.perf_counter() - self._start, 6))
            record = {"type": record_type, "t": self.t, "wall": self._last_wall, **fields}
        else:
            return
        if self.on_record is not None:
            self.on_record(record)

    def stage(self, slot: AgentSlot, stage: Stage) -> None:
        """``slot`` enters ``stage`` now."""
        slot.stage = stage
        self.write("stage", agent=slot.name, stage=stage.value)

    def plan(self, slot: AgentSlot, event: str, **extra) -> None:
        plan = slot.plan
        self.write("plan", agent=slot.name, plan_id=slot.plan_id, spec=plan.spec, actions=plan.text_actions,
                   event=event, **extra)
