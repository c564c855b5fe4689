"""The base of every topology: the ``individual`` rules and the default deliberation."""
from __future__ import annotations

import math
from typing import List, Optional

from cube_jax.agents.base import Purpose, TopologyView
from cube_jax.runtime.phase import Phase

DEFAULT_DIRECTIVE_TIMEOUT = 60.0


class Topology:
    """Who may talk to whom, and when (LLM.md section 3). Subclasses set ``name`` and role
    texts and override :meth:`deliberate` (what one phase's members do). This base is
    ``individual``: no messages; every member plans (or, when interrupted, resumes or
    replans) on its own, all side by side."""

    name = "individual"

    def __init__(self, num_agents: int, budget: Optional[int] = None,
                 directive_timeout: float = DEFAULT_DIRECTIVE_TIMEOUT):
        if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"topology {self.name}: num_agents must be an integer >= 1, got {num_agents!r}")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise ValueError(f"topology {self.name}: budget must be an integer >= 0, got {budget!r}")
        if (isinstance(directive_timeout, bool) or not isinstance(directive_timeout, (int, float))
                or not math.isfinite(directive_timeout) or directive_timeout <= 0):
            raise ValueError(f"topology {self.name}: directive_timeout must be a finite number of seconds > 0, "
                             f"got {directive_timeout!r}")
        self.num_agents = num_agents
        self.budget = num_agents if budget is None else budget
        self.directive_timeout = float(directive_timeout)

    def reset(self) -> None:
        """Called at the start of every episode (topologies that remember something forget it)."""

    # -- rules ------------------------------------------------------------------------------
    def role(self, agent: int) -> str:
        return ("You act on your own: there is no communication with your teammates. Watch the world and "
                "choose plans that help the team deliver every block.")

    def receive_cap(self) -> Optional[int]:
        """How many messages an agent may receive per step (None: no limit)."""
        return None

    def view(self, agent: int, purpose: Purpose, *, recipients=(), budget: int = 0, instructions: str = "",
             required_spec: Optional[str] = None) -> TopologyView:
        return TopologyView(
            name=self.name,
            role=self.role(agent),
            may_send=budget > 0 and bool(recipients),
            allowed_recipients=frozenset(recipients),
            message_budget=int(budget) if recipients else 0,
            instructions=instructions,
            required_spec=required_spec,
        )

    def others(self, agent: int) -> List[int]:
        return [j for j in range(self.num_agents) if j != agent]

    def member_view(self, agent: int, purpose: Purpose) -> TopologyView:
        """What a member deciding side by side with the others may do (default: no messages)."""
        return self.view(agent, purpose)

    # -- orchestration ----------------------------------------------------------------------
    async def deliberate(self, phase: Phase) -> None:
        """One phase: every member must end it committed (W). By default all decide side by
        side, each with :meth:`member_view`."""
        views = {i: self.member_view(i, phase.purposes[i]) for i in phase.members}
        await phase.decide_each(phase.members, views)
