"""When an episode ends early, and the gate every model call passes (LLM.md section 2).

:class:`Limits` says what ends an episode as truncated: its steps, its model calls, its
wall-clock seconds (counted from the first decision, not from compilation) and a model
server that keeps failing. :class:`CallGate` enforces the two that concern model calls,
call by call: no call starts once the call limit is reached or the server is found failing,
and every call made is written to the trace the moment it ends.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Optional

import numpy as np

from cube_jax.agents.base import ModelCall


@dataclasses.dataclass
class Limits:
    """When an episode ends early (as truncated, with the reason in its ``end`` record).

    ``max_server_failures``: failed model calls in a row (the server failed after its
    retries) that end the episode; None means max(3, number of agents).
    """

    max_steps: Optional[int] = None  # at most the environment's own max_steps
    max_calls: Optional[int] = None  # model calls per episode; no call starts past it
    max_wall_s: Optional[float] = None  # wall-clock seconds per episode, from its first decision
    max_server_failures: Optional[int] = None

    def __post_init__(self):
        for name in ("max_steps", "max_calls", "max_server_failures"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"Limits: {name} must be None or an integer >= 1, got {value!r}")
        wall = self.max_wall_s
        if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float)) or not math.isfinite(wall)
                                 or wall <= 0):
            raise ValueError(f"Limits: max_wall_s must be None or a finite number > 0, got {wall!r}")

    def server_failures(self, num_agents: int) -> int:
        """Failed calls in a row that end an episode of ``num_agents`` agents."""
        return self.max_server_failures if self.max_server_failures is not None else max(3, num_agents)


class EpisodeEnded(Exception):
    """Ends the episode as truncated with ``reason``: raised by the runtime at a limit, and by
    an agent's ``decide`` that cannot go on (a person who closed the page, say)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class CallGate:
    """Counts an episode's model calls and decides whether the next one may start.

    ``write_call(agent, purpose, call)`` writes the call's ``llm`` record. Once a call is
    refused (the call limit, a failing server, the wall-clock limit), ``closed`` holds the
    reason and the runtime ends the episode when the current phase is over: calls already
    under way finish and are recorded.
    """

    def __init__(self, limits: Limits, num_agents: int, write_call: Callable[[int, str, ModelCall], None]):
        self.max_calls = limits.max_calls
        self.max_wall_s = limits.max_wall_s
        self.failure_threshold = limits.server_failures(num_agents)
        self.write_call = write_call
        self.started = 0  # calls permitted
        self.recorded = 0  # calls written to the trace
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.reasoning_tokens = 0  # of the completion tokens, those a reasoning model thought with
        self.failures_in_row = 0
        self.closed: Optional[str] = None
        self.first_decision: Optional[float] = None

    # -- the wall clock -------------------------------------------------------------------------
    def start_clock(self) -> None:
        """Marks the episode's first decision (the wall-clock limit counts from it)."""
        if self.first_decision is None:
            self.first_decision = time.perf_counter()

    def seconds_left(self) -> Optional[float]:
        if self.max_wall_s is None or self.first_decision is None:
            return None
        return self.max_wall_s - (time.perf_counter() - self.first_decision)

    def wall_reason(self) -> str:
        return f"wall-clock limit ({self.max_wall_s:g} s) reached"

    def check_wall(self) -> Optional[str]:
        left = self.seconds_left()
        if left is not None and left <= 0:
            self.closed = self.closed or self.wall_reason()
            return self.closed
        return None

    # -- calls ----------------------------------------------------------------------------------
    def permit(self) -> Optional[str]:
        if self.closed is None and self.max_calls is not None and self.started >= self.max_calls:
            self.closed = f"model call limit ({self.max_calls}) reached"
        if self.closed is None:
            self.check_wall()
        if self.closed is not None:
            return self.closed
        self.started += 1
        return None

    def record(self, agent: int, purpose: str, call: ModelCall) -> None:
        self.recorded += 1
        self.prompt_tokens += call.prompt_tokens
        self.completion_tokens += call.completion_tokens
        self.reasoning_tokens += call.reasoning_tokens
        self.write_call(agent, purpose, call)
        if call.server_failed:
            self.failures_in_row += 1
            if self.failures_in_row >= self.failure_threshold and self.closed is None:
                self.closed = f"model server failing ({self.failures_in_row} calls in a row): {call.error}"
        elif call.error is None or not call.error.startswith("cancelled"):
            self.failures_in_row = 0

    def ledger(self, agent: int, purpose: str) -> "AgentLedger":
        """The :class:`~cube_jax.agents.CallLedger` of one decision."""
        return AgentLedger(self, agent, purpose)


@dataclasses.dataclass
class AgentLedger:
    """One decision's view of the :class:`CallGate` (it knows whose calls these are)."""

    gate: CallGate
    agent: int
    purpose: str

    def permit(self) -> Optional[str]:
        return self.gate.permit()

    def record(self, call: ModelCall) -> None:
        self.gate.record(self.agent, self.purpose, call)
