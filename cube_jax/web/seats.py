"""Who sits at the team's ``human`` agents: pages join and give back seats, and only a
seat's holder may play its agent (:class:`Seats`, the hub's :class:`TurnListener`)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Set

from cube_jax.names import agent_index, agent_name
from cube_jax.symbolic.actions import PlanError
from cube_jax.web import protocol
from cube_jax.web.human import HumanAgent, TurnListener, turn_info


@dataclasses.dataclass
class Client:
    """One connected page: its outgoing queue (JSON text) and the seats it holds."""

    id: int
    send: Callable[[str], None]
    seats: Set[int] = dataclasses.field(default_factory=set)


class Desk(Protocol):
    """What the seats read of the hub that owns them (:class:`cube_jax.web.game.Hub`)."""

    env: Any
    members: Sequence[Any]
    game: Any  # the running Game, or None
    clients: Mapping[int, Client]

    def reply(self, client: Client, request, kind: str, **fields) -> None: ...

    def broadcast(self, message: Dict[str, Any]) -> None: ...


class Seats(TurnListener):
    """The seat of every human agent (agent id -> client id) and the messages about them."""

    def __init__(self, hub: Desk):
        self.hub = hub
        self.held: Dict[int, int] = {}

    @property
    def human_ids(self) -> List[int]:
        return [i for i, m in enumerate(self.hub.members) if m.kind == "human"]

    def info(self) -> Dict[str, Optional[int]]:
        return {agent_name(i): self.held.get(i) for i in self.human_ids}

    def _ids(self, client: Client, request, names: Sequence[str]) -> Optional[List[int]]:
        """The agent ids of ``names``, or None after an error reply (no such agent, not human)."""
        hub, ids = self.hub, []
        for name in names:
            i = agent_index(name)
            if i >= hub.env.num_agents:
                hub.reply(client, request, "error", error=f"there is no {name}: the team has {hub.env.num_agents} "
                                                           "agents")
                return None
            if i not in self.human_ids:
                hub.reply(client, request, "error", error=f"{name} is a {hub.members[i].kind} agent; only human "
                                                           "agents take a person")
                return None
            ids.append(i)
        return ids

    def join(self, client: Client, message: protocol.Join) -> None:
        ids = self._ids(client, message, message.agents)
        if ids is None:
            return
        taken = [agent_name(i) for i in ids if self.held.get(i) not in (None, client.id)]
        if taken:
            self.hub.reply(client, message, "error", error=f"{', '.join(taken)} already has a person")
            return
        for i in ids:
            self.held[i] = client.id
            client.seats.add(i)
        self.hub.reply(client, message, "joined", agents=[agent_name(i) for i in sorted(client.seats)])
        self.hub.broadcast({"type": "seats", "seats": self.info()})

    async def give_back(self, client: Client, message: protocol.Release) -> None:
        ids = self._ids(client, message, message.agents)
        if ids is not None:
            await self.release(client, [i for i in ids if self.held.get(i) == client.id], left=False)

    async def release(self, client: Client, ids: Sequence[int], left: bool) -> None:
        """Frees ``ids``; a running episode ends (truncated) when a person leaves or gives a seat back."""
        for i in ids:
            if self.held.get(i) == client.id:
                del self.held[i]
            client.seats.discard(i)
        self.hub.broadcast({"type": "seats", "seats": self.info()})
        game = self.hub.game
        if ids and game is not None and game.running:
            names = ", ".join(agent_name(i) for i in ids)
            reason = f"the person at {names} left" if left else f"the person at {names} gave the seat back"
            # the loop ends the episode at its next decision or step; this does not wait for it
            game.pacer.end(reason)
            for i in ids:
                game.humans()[i].leave(reason)

    def agent_input(self, client: Client, message) -> None:
        """A move, plan or message for a human agent, from the page holding its seat."""
        hub, game = self.hub, self.hub.game
        i = agent_index(message.agent)
        if self.held.get(i) != client.id:
            holder = "nobody" if i not in self.held else "another page"
            hub.reply(client, message, "refused", agent=message.agent,
                      error=f"{message.agent} is not yours (its seat is held by {holder}); join it first")
            return
        if game is None or not game.running:
            hub.reply(client, message, "refused", agent=message.agent, error="no episode is running")
            return
        agent = game.humans().get(i)
        reason = agent.submit(message) if agent is not None else f"{message.agent} is not a human agent"
        if reason is not None:
            hub.reply(client, message, "refused", agent=message.agent, error=reason)

    # -- TurnListener -----------------------------------------------------------------------------
    def _holder(self, agent: HumanAgent) -> Optional[Client]:
        holder = self.held.get(agent.agent)
        return self.hub.clients.get(holder) if holder is not None else None

    def turn_opened(self, agent: HumanAgent, ctx) -> None:
        self.hub.broadcast({"type": "turn", "turn": turn_info(ctx)})

    def refused(self, agent: HumanAgent, item, error: PlanError) -> None:
        client = self._holder(agent)
        if client is not None:
            self.hub.reply(client, item, "refused", agent=agent.name, error=str(error), detail=error.to_dict())

    def accepted(self, agent: HumanAgent, item, decision) -> None:
        client = self._holder(agent)
        if client is not None:
            plan = None if decision.plan is None else str(decision.plan)
            self.hub.reply(client, item, "accepted", agent=agent.name, plan=plan, resume=bool(decision.resume),
                           messages=len(decision.messages))

    def turn_closed(self, agent: HumanAgent) -> None:
        self.hub.broadcast({"type": "turn_closed", "agent": agent.name})


__all__ = [Client, "Desk", "Seats"]
