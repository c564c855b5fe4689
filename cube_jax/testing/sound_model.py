"""A scripted model that answers the project's default prompts with sound plans.

It reads the request like a model would read it: from the user prompt it takes who it is,
the blocks (id, weight, top-left cell, distance to the goal, delivered or not), what kind of
turn this is and whom it may message, and it replies in the JSON reply format with the cube
paper's heuristic: everyone on the alive block closest to the goal, ``move_to_block ->
rendezvous -> push_block``. It speaks as each topology asks (a debate proposal, a leader's
directive, a follower's acknowledgement, a word to the team in decentralized play) and
resumes when interrupted. Used as the ``responder`` of
:class:`~cube_jax.testing.fake_openai.FakeOpenAI` it drives whole episodes through the real
client, prompts, checks and episode loop.
"""
from __future__ import annotations

import json
import re
from typing import Optional

BLOCK = re.compile(r"^- block (\d+): weight (\d+), (?:top-left \((\d+), (\d+)\), (\d+) pushes from the goal|delivered)",
                   re.M)
ME = re.compile(r"^- (agent_\d+) \(you\)", re.M)
MAY_SEND = re.compile(r"You may send up to (\d+) message\(s\) to: (.*)\.$", re.M)
GRID = re.compile(r"The grid has (\d+)x\d+ cells")
ALLOCATED = re.compile(r"^YOUR ALLOCATED BLOCK: (\d+)$", re.M)


def _alive(user: str):
    """(block, weight, distance) of every live block in the prompt."""
    return [(int(b), int(w), int(d)) for b, w, _, _, d in BLOCK.findall(user) if d != ""]


def _target(user: str):
    alive = [(d, b, w) for b, w, d in _alive(user)]
    if not alive:
        return None
    distance, block, weight = min(alive)
    return block, weight, distance


def sound_reply(request: dict) -> str:
    """The reply content for one chat completions request (see the module docstring)."""
    messages = request["messages"]
    system = messages[0]["content"]
    user = next(m["content"] for m in messages if m["role"] == "user")  # the prompt, not a re-prompt
    k = int(GRID.search(system).group(1))
    send = MAY_SEND.search(user)
    recipients = [r.strip() for r in send.group(2).split(",")] if send else []
    me = ME.search(user).group(1)
    target = _target(user)
    if "(proposal reply)" in user or "(commitment reply)" in user:
        # negotiation: everyone names the block closest to the goal
        return json.dumps({"block": None if target is None else target[0], "rationale": "closest to the goal"})
    allocated = ALLOCATED.search(user)
    if allocated and target is not None:
        chosen = int(allocated.group(1))
        target = next(((b, w, d) for d, b, w in [(t[2], t[0], t[1]) for t in _alive(user)] if b == chosen), target)
    if "(interrupt reply)" in user:
        return json.dumps({"reasoning": "keep going", "decision": "resume",
                           "messages": _acknowledge(recipients)})
    if "(message reply)" in user:
        block = target[0] if target else 0
        return json.dumps({"reasoning": "one block at a time",
                           "messages": [{"to": ["all"], "content": f"Everyone: push block {block} from its left face."}]})
    if target is None:
        return json.dumps({"spec": "idle", "plan": "idle(1)"})
    block, weight, distance = target
    plan = (f"move_to_block({block}, left); rendezvous({block}, left, {weight}, {4 * k}); "
            f"push_block({block}, {distance + 1})")
    reply = {"reasoning": f"{me}: block {block} is closest to the goal", "spec": f"push_block(block#{block})",
             "plan": plan, "messages": []}
    if recipients:
        if recipients == ["agent_0"]:
            reply["messages"] = _acknowledge(recipients)
        else:
            reply["messages"] = [{"to": ["all"], "content": f"I push block {block}; join me at its left face."}]
    return json.dumps(reply)


def _acknowledge(recipients) -> list:
    if recipients == ["agent_0"]:
        return [{"to": ["agent_0"], "content": "Acknowledged."}]
    return []


def responder(request: dict) -> Optional[str]:
    return sound_reply(request)


class SoundModel:
    """The sound-plan model in process, with no HTTP: a :class:`cube_jax.llm.ChatModel` that
    answers at once (for measuring the harness without the model's time)."""

    def __init__(self, model: str = "sound-model"):
        self.model = model
        self.calls = 0

    async def complete(self, messages, *, schema=None, schema_name="reply"):
        from cube_jax.llm.client import Completion

        self.calls += 1
        text = sound_reply({"messages": list(messages)})
        return Completion(text=text, prompt_tokens=sum(len(m["content"]) for m in messages) // 4,
                          completion_tokens=len(text) // 4, attempts=1, latency_s=0.0, model=self.model,
                          used_schema=schema is not None, finish_reason="stop")
