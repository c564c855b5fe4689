"""The ``human`` agent: a person at a keyboard plays one agent beside the others.

The episode loop asks a :class:`HumanAgent` for decisions exactly as it asks a language
agent, and waits for it the same way: :meth:`HumanAgent.decide` opens a *turn* (its
listener tells the page what is asked: plan, resume or replan, or a message) and awaits
the person's input from an asyncio queue that the WebSocket feeds. An input is

- a key (:class:`~cube_jax.web.protocol.Key`): a one-step plan, ``move(<direction>, 1)``
  with spec ``"key: <direction>"``, or ``idle(1)`` for ``stay``;
- a typed plan (:class:`~cube_jax.web.protocol.PlanInput`), text or JSON, read by the
  symbolic parser, with an optional task string and messages;
- ``resume`` after an interrupting message, or ``say`` for a message-only turn.

Each input is turned into a :class:`~cube_jax.agents.Decision` and checked with the loop's
own check (``ctx.validate``) before it is accepted: an unreadable plan, a delivered block,
a recipient or a message count the topology does not allow, a move into the wall, a plan
where the turn asks for a message, are *refused* with the reason (the listener shows it)
and the turn stays open. Only a valid decision goes back to the loop, so a person's
mistake never costs the team a fallback step.

When the person leaves (the tab closes), :meth:`HumanAgent.leave` ends the episode as
truncated with the reason: a turn in progress raises
:class:`~cube_jax.runtime.EpisodeEnded`, and so does the next one.

>>> import asyncio, cube_jax
>>> from cube_jax.agents import heuristic_team
>>> from cube_jax.runtime import Episode, Limits
>>> from cube_jax.web.protocol import Key
>>> env = cube_jax.make("easy")
>>> person = HumanAgent()
>>> async def play():
...     episode = Episode(env, [person, heuristic_team(env)[1]], seed=0, limits=Limits(max_steps=2))
...     task = asyncio.create_task(episode.run())
...     for _ in range(2):
...         while person.turn is None:
...             await asyncio.sleep(0.01)
...         person.submit(Key(type="key", agent="agent_0", key="right"))
...     return await task
>>> result = asyncio.run(play())
>>> result.steps, result.reason
(2, 'max_steps (2) reached')
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from cube_jax.agents.base import Agent, Decision, DecisionContext, OutgoingMessage, Plan, Purpose, idle_plan
from cube_jax.core.types import ACTION_DELTAS
from cube_jax.runtime import EpisodeEnded
from cube_jax.names import agent_index, agent_name
from cube_jax.symbolic.actions import PLAN_CHECK, PlanError, make_action, parse_plan, parse_plan_json
from cube_jax.symbolic.vocabulary import DIRECTIONS
from cube_jax.web.protocol import Key, OutgoingText, PlanInput, Resume, Say

logger = logging.getLogger(__name__)

KEY_SPEC = "key: {key}"


@dataclasses.dataclass(frozen=True)
class _Left:
    reason: str


class TurnListener:
    """What a :class:`HumanAgent` tells the page; the server implements it. Every method is
    called from the event loop and must not block."""

    def turn_opened(self, agent: "HumanAgent", ctx: DecisionContext) -> None:
        """The agent is asked for a decision."""

    def refused(self, agent: "HumanAgent", item: Any, error: PlanError) -> None:
        """An input was refused; the turn stays open."""

    def accepted(self, agent: "HumanAgent", item: Any, decision: Decision) -> None:
        """An input became the agent's decision."""

    def turn_closed(self, agent: "HumanAgent") -> None:
        """The turn ended (decided, or the episode ended)."""


def _refuse(message: str, argument: Optional[str] = None) -> PlanError:
    return PlanError(PLAN_CHECK, message, argument=argument)


def key_plan(ctx: DecisionContext, key: str) -> Plan:
    """The one-step plan of a key press; a move into the wall is refused (PlanError)."""
    if key == "stay":
        return Plan(KEY_SPEC.format(key=key), idle_plan(1).actions, primitive=True)
    row, col = (int(x) for x in np.asarray(ctx.state.agent_pos)[ctx.agent])
    dr, dc = ACTION_DELTAS[DIRECTIONS[key]]
    size = int(ctx.views.grid_size)
    if not (0 <= row + dr < size and 0 <= col + dc < size):
        raise _refuse(f"{ctx.name} at ({row}, {col}) cannot move {key}: that is the wall", argument="key")
    return Plan(KEY_SPEC.format(key=key), (make_action("move", key, 1),), primitive=True)


def typed_plan(text_or_json, spec: Optional[str]) -> Plan:
    """A typed plan: text (``move_to_block(2, left); push_block(2, 5)``) or a JSON list of
    actions. ``spec`` defaults to the first pushed block (``push_block(block#2)``), or the
    plan's first action."""
    if isinstance(text_or_json, str) and not text_or_json.lstrip().startswith(("[", "{")):
        actions = parse_plan(text_or_json)
    else:
        actions = parse_plan_json(text_or_json)
    if not actions:
        raise _refuse("the plan has no action", argument="plan")
    if spec is None or not spec.strip():
        pushed = [a for a in actions if a.name == "push_block"]
        spec = f"push_block(block#{pushed[0].args['block']})" if pushed else str(actions[0])
    return Plan(spec.strip(), tuple(actions))


def outgoing(ctx: DecisionContext, messages: Sequence[OutgoingText]) -> Tuple[OutgoingMessage, ...]:
    """The messages as the loop takes them; ``"all"`` names every agent the topology allows."""
    out = []
    allowed = sorted(ctx.topology.allowed_recipients)
    for k, message in enumerate(messages):
        if not ctx.topology.may_send:
            raise _refuse(f"the {ctx.topology.name} topology lets {ctx.name} send no message now", argument="messages")
        recipients: List[int] = []
        for name in message.to:
            ids = allowed if name == "all" else [agent_index(name)]
            for i in ids:
                if not 0 <= i < ctx.num_agents:
                    raise _refuse(f"message {k}: there is no {name} in a team of {ctx.num_agents}", argument="messages")
                if i not in recipients:
                    recipients.append(i)
        out.append(OutgoingMessage(tuple(recipients), message.content))
    return tuple(out)


def decision_for(ctx: DecisionContext, item) -> Decision:
    """The decision an input stands for at this turn (PlanError when it does not fit the turn)."""
    purpose = ctx.purpose
    if isinstance(item, Say):
        if purpose != Purpose.MESSAGE:
            raise _refuse(f"{ctx.name} must commit a plan now (a key or a typed plan), not only talk", argument="plan")
        return Decision(messages=outgoing(ctx, item.messages))
    if purpose == Purpose.MESSAGE:
        raise _refuse(f"this turn of {ctx.name} carries messages only: {ctx.topology.instructions or 'send a message'}",
                      argument="messages")
    if isinstance(item, Resume):
        if purpose != Purpose.INTERRUPT:
            raise _refuse(f"{ctx.name} has no interrupted plan to resume; commit a plan", argument="resume")
        return Decision(resume=True, messages=outgoing(ctx, item.messages))
    if isinstance(item, Key):
        return Decision(plan=key_plan(ctx, item.key))
    if isinstance(item, PlanInput):
        return Decision(plan=typed_plan(item.plan, item.spec), messages=outgoing(ctx, item.messages))
    raise _refuse(f"not an input for {ctx.name}: {type(item).__name__}")


class HumanAgent(Agent):
    """One agent played by a person (see the module docstring); ``listener`` is told about
    turns, refusals and acceptances."""

    kind = "human"

    def __init__(self, listener: Optional[TurnListener] = None):
        self.listener = listener or TurnListener()
        self.agent = 0
        self.name = agent_name(0)
        self.turn: Optional[DecisionContext] = None  # the open turn, while it waits for an input
        self.left: Optional[str] = None
        self._inputs: asyncio.Queue = asyncio.Queue()

    def reset(self, agent: int, num_agents: int, seed: int) -> None:
        self.agent, self.name = agent, agent_name(agent)
        self.turn = None
        self._inputs = asyncio.Queue()

    def submit(self, item) -> Optional[str]:
        """Hands an input to the open turn; the reason it cannot be taken otherwise."""
        if self.left is not None:
            return f"the episode of {self.name} is over: {self.left}"
        if self.turn is None:
            return f"{self.name} is not asked for a decision now"
        self.turn = None  # until the input is checked: a refusal opens the turn again
        self._inputs.put_nowait(item)
        return None

    def leave(self, reason: str) -> None:
        """The person left: the episode ends as truncated with ``reason``."""
        if self.left is None:
            self.left = reason
            self._inputs.put_nowait(_Left(reason))

    async def decide(self, ctx: DecisionContext) -> Decision:
        if self.left is not None:
            raise EpisodeEnded(self.left)
        while not self._inputs.empty():  # inputs of an earlier turn are stale
            stale = self._inputs.get_nowait()
            if isinstance(stale, _Left):
                raise EpisodeEnded(stale.reason)
        self.turn = ctx
        self.listener.turn_opened(self, ctx)
        try:
            while True:
                item = await self._inputs.get()
                if isinstance(item, _Left):
                    raise EpisodeEnded(item.reason)
                try:
                    decision = decision_for(ctx, item)
                    error = ctx.validate(decision)
                except PlanError as err:
                    error = err
                if error is not None:
                    logger.info("%s: input refused at t=%d: %s", self.name, ctx.t, error)
                    self.turn = ctx
                    self.listener.refused(self, item, error)
                    continue
                self.listener.accepted(self, item, decision)
                return decision
        finally:
            self.turn = None
            self.listener.turn_closed(self)


def turn_info(ctx: DecisionContext) -> Dict[str, Any]:
    """What the page shows of an open turn."""
    view = ctx.topology
    return {
        "agent": ctx.name,
        "purpose": ctx.purpose.value,
        "reason": ctx.reason.value,
        "t": ctx.t,
        "may_send": bool(view.may_send),
        "recipients": [agent_name(i) for i in sorted(view.allowed_recipients)] if view.may_send else [],
        "budget": int(view.message_budget) if view.may_send else 0,
        "instructions": view.instructions,
        "role": view.role,
        "feedback": ctx.feedback,
        "inbox": [{"id": m.id, "t": m.t, "sender": agent_name(m.sender), "content": m.content} for m in ctx.inbox],
        "plan": None if ctx.progress.plan is None else str(ctx.progress.plan),
        "plan_status": ctx.progress.status,
    }


def human_factory(listener: Optional[TurnListener] = None):
    """A ``team_agents`` factory for the ``human`` kind (one :class:`HumanAgent` per id)."""

    def build(env, member, ids):
        return [HumanAgent(listener) for _ in ids]

    return build


__all__ = ["HumanAgent", "TurnListener", "decision_for", "human_factory", "key_plan", "outgoing", "turn_info",
           "typed_plan"]
