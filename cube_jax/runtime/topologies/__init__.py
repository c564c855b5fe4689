"""Communication topologies: who may talk to whom, and when (LLM.md section 3).

One file per topology; each gets a :class:`~cube_jax.runtime.phase.Phase` (the agents that
decide in one cognitive phase, and what may be done with them) and nothing else of the
episode:

* ``individual``: no messages; every agent plans on its own, all side by side;
* ``debate``: the agents reasoning together speak in id order; each hears the earlier
  proposals (built by the runtime from each speaker's committed plan);
* ``centralized``: ``agent_0`` leads; its directive goes to every follower, followers that
  reason with it acknowledge it;
* ``decentralized``: up to ``budget`` messages per decision to anyone, at most n received
  per step.

A new topology is one new file with a :class:`Topology` subclass, added to
:data:`TOPOLOGIES` here.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

from cube_jax.runtime.topologies.base import DEFAULT_DIRECTIVE_TIMEOUT, Topology
from cube_jax.runtime.topologies.centralized import Centralized
from cube_jax.runtime.topologies.debate import Debate
from cube_jax.runtime.topologies.decentralized import Decentralized
from cube_jax.runtime.topologies.individual import Individual

TOPOLOGIES: Dict[str, Type[Topology]] = {cls.name: cls for cls in (Individual, Debate, Centralized, Decentralized)}


def make_topology(name: str, num_agents: int, budget: Optional[int] = None,
                  directive_timeout: float = DEFAULT_DIRECTIVE_TIMEOUT) -> Topology:
    """The topology called ``name`` for a team of ``num_agents``; ValueError for an unknown name."""
    if name not in TOPOLOGIES:
        raise ValueError(f"topology: unknown {name!r}; topologies are {sorted(TOPOLOGIES)}")
    return TOPOLOGIES[name](num_agents, budget, directive_timeout=directive_timeout)


__all__ = ["Centralized", "DEFAULT_DIRECTIVE_TIMEOUT", "Debate", "Decentralized", "Individual", "TOPOLOGIES",
           "Topology", "make_topology"]
