"""``decentralized``: anyone may message anyone, within a budget per decision and a cap per step."""
from __future__ import annotations

from typing import Optional

from cube_jax.agents.base import Purpose, TopologyView
from cube_jax.runtime.topologies.base import Topology


class Decentralized(Topology):
    """An agent in R or I may send up to ``budget`` messages per decision (default n), each
    to any set of teammates; an agent receives at most n messages per step, the rest wait in
    its buffer. Members decide side by side and hear each other when the phase ends."""

    name = "decentralized"

    def role(self, agent: int) -> str:
        return (f"Communication is decentralized: whenever you reason or are interrupted you may send up to "
                f"{self.budget} messages, each to any set of teammates. Messages reaching a teammate who waits or "
                f"executes interrupt it, so write only what helps.")

    def receive_cap(self) -> Optional[int]:
        return self.num_agents

    def member_view(self, agent: int, purpose: Purpose) -> TopologyView:
        return self.view(agent, purpose, recipients=self.others(agent), budget=self.budget)
