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
  per step;
* ``negotiation``: DR. WELL's rooms: proposals, commitments, allocation under quorum, then
  planning with the world model's plan library.

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
from cube_jax.runtime.topologies.negotiation import Negotiation, WorldModelReader

TOPOLOGIES: Dict[str, Type[Topology]] = {
    cls.name: cls for cls in (Individual, Debate, Centralized, Decentralized, Negotiation)
}


def make_topology(name: str, num_agents: int, budget: Optional[int] = None,
                  directive_timeout: float = DEFAULT_DIRECTIVE_TIMEOUT,
                  world_model: Optional[WorldModelReader] = None) -> Topology:
    """The topology called ``name`` for a team of ``num_agents``; ValueError for an unknown
    name. ``world_model`` is read by ``negotiation`` (and refused by the others)."""
    if name not in TOPOLOGIES:
        raise ValueError(f"topology: unknown {name!r}; topologies are {sorted(TOPOLOGIES)}")
    if world_model is not None:
        if name != "negotiation":
            raise ValueError(f"topology: a world model is read only by the negotiation topology, not {name!r}")
        return Negotiation(num_agents, budget, directive_timeout=directive_timeout, world_model=world_model)
    return TOPOLOGIES[name](num_agents, budget, directive_timeout=directive_timeout)


__all__ = ["Centralized", "DEFAULT_DIRECTIVE_TIMEOUT", "Debate", "Decentralized", "Individual", "Negotiation",
           "TOPOLOGIES", "Topology", "WorldModelReader", "make_topology"]
