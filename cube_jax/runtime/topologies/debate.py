"""``debate``: the agents reasoning at the same time speak in id order, each hearing the
proposals of those before it (EmCoop's broadcast chain)."""
from __future__ import annotations

from cube_jax.agents.base import Decision
from cube_jax.runtime.phase import Phase
from cube_jax.runtime.topologies.base import Topology


class Debate(Topology):
    """Members speak in id order. Each reads every earlier proposal of the round, then plans
    (or, interrupted, resumes or replans). Every speaker but the last sends exactly one
    proposal to all later speakers, built by the runtime: its committed plan (spec and
    actions), followed by the model's message text when it gave one. A model can neither
    skip the proposal nor narrow its recipients."""

    name = "debate"

    def role(self, agent: int) -> str:
        return ("You take part in a debate. Agents who reason at the same time speak in id order: you read the "
                "proposals of the agents before you, then commit your plan; your committed plan is sent as your "
                "proposal to the agents after you, with your message text, if you write one, appended.")

    async def deliberate(self, phase: Phase) -> None:
        order = list(phase.members)
        for position, i in enumerate(order):
            later = order[position + 1:]
            purpose = phase.purposes[i]
            if later:
                names = ", ".join(phase.name(j) for j in later)
                view = self.view(i, purpose, recipients=later, budget=1,
                                 instructions=f"Commit your plan; it goes to the later speakers ({names}) as your "
                                              "proposal, with your message text appended if you write one.")
            else:
                view = self.view(i, purpose, instructions="You speak last: commit your plan; send no message.")
            decision = await phase.decide(i, purpose, view)
            phase.commit(i, purpose, decision)
            if later:
                phase.send(i, later, proposal_text(phase.plan(i), decision), now=later)


def proposal_text(plan, decision: Decision) -> str:
    """A debate proposal: the speaker's committed plan, then its own words (if any)."""
    text = f"Proposal: {plan}" if plan is not None else "Proposal: no plan"
    words = "\n".join(m.content.strip() for m in decision.messages if m.content.strip())
    return f"{text}\n{words}" if words else text
