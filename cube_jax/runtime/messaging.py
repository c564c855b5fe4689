"""Messages between agents: sent at once, delivered together when a phase ends (LLM.md 2.1).

A message is written to the trace when it is sent and waits in each recipient's buffer.
When the cognitive phase ends, :meth:`Mailbox.deliver` moves every buffered message into
its recipient's inbox at once, so no agent hears anything in the middle of its own decision
and an agent's id gives it no advantage; a recipient in W or X is interrupted (I). The
topology may cap how many messages an agent receives per step: the rest stay buffered for
the next steps. Sequential topologies (debate, centralized) hand a message straight to
recipients that are still to speak in the current phase (``now``): that order is their rule.
"""
from __future__ import annotations

from typing import Collection, List, Optional, Sequence

from cube_jax.agents.base import Message, Stage
from cube_jax.runtime.slot import AgentSlot, Recorder

# Longest message text an agent may send; longer ones are refused (PlanError).
MAX_MESSAGE_CHARS = 2000


class Mailbox:
    """The messages of one episode: ids, buffers, delivery and receive caps."""

    def __init__(self, slots: Sequence[AgentSlot], recorder: Recorder, receive_cap: Optional[int]):
        self.slots = slots
        self.recorder = recorder
        self.receive_cap = receive_cap
        self._next_id = 0

    def send(self, sender: int, recipients: Sequence[int], content: str, *, now: Collection[int] = (),
             kind: Optional[str] = None) -> Message:
        """Writes the message's record and buffers it for each recipient (recipients in
        ``now`` get it in their inbox at once: they are still to decide in this phase)."""
        message = Message(self._next_id, self.recorder.t, sender, tuple(int(r) for r in recipients), content)
        self._next_id += 1
        extra = {"kind": kind} if kind is not None else {}
        self.recorder.write("message", id=message.id, sender=self.slots[sender].name,
                            recipients=[self.slots[r].name for r in message.recipients], content=content, **extra)
        self.slots[sender].sent.append(message)
        for r in message.recipients:
            slot = self.slots[r]
            if r in now and slot.stage in (Stage.REASONING, Stage.INTERRUPTED):
                slot.inbox.append(message)
                slot.delivered_this_step += 1
            else:
                slot.buffer.append(message)
        return message

    def new_step(self) -> None:
        for slot in self.slots:
            slot.delivered_this_step = 0

    def deliver(self) -> List[int]:
        """Delivers every buffered message (up to the receive cap); returns the ids of the
        agents this interrupted."""
        interrupted = []
        for slot in self.slots:
            received = False
            while slot.buffer and (self.receive_cap is None or slot.delivered_this_step < self.receive_cap):
                slot.inbox.append(slot.buffer.popleft())
                slot.delivered_this_step += 1
                received = True
            if received and slot.stage in (Stage.WAITING, Stage.EXECUTING):
                self.recorder.stage(slot, Stage.INTERRUPTED)
                interrupted.append(slot.index)
        return interrupted

    def pending(self) -> int:
        """Messages sent and not yet delivered."""
        return sum(len(s.buffer) for s in self.slots)
