"""Scripted agents: decisions written in advance, for tests, examples and reproductions.

A :class:`ScriptedAgent` answers each decision point from a script: a list of decisions
taken in order (the last one repeats), or a function of the decision context. It never
waits, so an episode of scripted agents is deterministic.

>>> import cube_jax
>>> from cube_jax.agents import Decision, Plan
>>> from cube_jax.symbolic import parse_plan
>>> from cube_jax.runtime import run_episode
>>> env = cube_jax.make(scenario=cube_jax.Scenario.from_ascii('''
... ......
... 0a....
... ......
... ......
... ......
... ......'''))
>>> push = Decision(plan=Plan("push_block(block#0)", tuple(parse_plan("push_block(0, 5)"))))
>>> run_episode(env, [ScriptedAgent([push])], seed=0).steps
4
"""
from __future__ import annotations

from typing import Callable, Sequence, Union

from cube_jax.agents.base import Agent, Decision, DecisionContext, Purpose


class ScriptedAgent(Agent):
    """Decides from ``script``: a sequence of :class:`Decision` (used in order, the last one
    repeating) or a callable ``ctx -> Decision``. Interrupts are answered with the next
    decision too unless ``resume_on_interrupt`` (the default) answers them with resume."""

    kind = "scripted"

    def __init__(self, script: Union[Sequence[Decision], Callable[[DecisionContext], Decision]],
                 resume_on_interrupt: bool = True):
        if not callable(script):
            script = list(script)
            if not script:
                raise ValueError("ScriptedAgent: the script is empty")
        self.script = script
        self.resume_on_interrupt = resume_on_interrupt
        self.calls = 0
        self.contexts = []  # every context it was given, for tests

    def reset(self, agent: int, num_agents: int, seed: int) -> None:
        self.calls = 0
        self.contexts = []

    async def decide(self, ctx: DecisionContext) -> Decision:
        self.contexts.append(ctx)
        if ctx.purpose == Purpose.INTERRUPT and self.resume_on_interrupt:
            return Decision(resume=True)
        if callable(self.script):
            decision = self.script(ctx)
        else:
            decision = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return decision
