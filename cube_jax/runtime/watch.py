"""A planner's play with every plan it commits kept beside the context it decided in: the
material of language agents' worked examples (``--demos K``, :mod:`cube_jax.llm.demos`, which
the commands hand :func:`planner_decisions`: the language agents do not import the runtime).

>>> import cube_jax, jax
>>> env = cube_jax.make("easy")
>>> layout = env.generator(jax.random.PRNGKey(0))
>>> decisions = planner_decisions(env, layout, max_steps=5)
>>> [(ctx.t, plan.spec) for ctx, plan in decisions[0]][:1]
[(0, 'push_block(block#1)')]
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.agents.base import Agent, Decision, DecisionContext, Plan, Purpose
from cube_jax.runtime.limits import Limits
from cube_jax.runtime.play import run_episode

PLANNERS = ("heuristic", "team")


class _Watched(Agent):
    """A planner whose plan decisions are kept, with their contexts."""

    def __init__(self, inner: Agent, log: List[Tuple[DecisionContext, Plan]]):
        self.inner = inner
        self.kind = inner.kind
        self.log = log

    def reset(self, agent: int, num_agents: int, seed: int) -> None:
        self.inner.reset(agent, num_agents, seed)

    async def decide(self, ctx: DecisionContext) -> Decision:
        decision = await self.inner.decide(ctx)
        if ctx.purpose == Purpose.PLAN and decision.plan is not None:
            self.log.append((ctx, decision.plan))
        return decision

    def wants_replan(self, ctx: DecisionContext) -> bool:
        return self.inner.wants_replan(ctx)


def planner_decisions(env, layout, *, planner: str = "heuristic", max_steps: int = 60,
                      seed: int = 0) -> Dict[int, List[Tuple[DecisionContext, Plan]]]:
    """Plays ``planner``'s team (``heuristic`` or ``team``) for at most ``max_steps`` steps on
    ``env``'s world started from ``layout`` (a :class:`~cube_jax.core.layouts.Layout` of its
    shapes), under the ``individual`` topology; returns agent id -> every ``(context, plan)``
    of its plan decisions, in order."""
    from cube_jax.agents.planners import PLANNER_TEAMS
    from cube_jax.core.env import make
    from cube_jax.core.layouts import FixedLayout

    if planner not in PLANNERS:
        raise ValueError(f"planner_decisions: planner must be one of {', '.join(PLANNERS)}, got {planner!r}")
    fixed = FixedLayout(grid_size=env.grid_size, num_agents=env.num_agents,
                        weights=tuple(int(w) for w in np.asarray(layout.block_weight)),
                        layout=jax.tree.map(jnp.asarray, layout))
    world = make(layouts=fixed, max_steps=env.max_steps, step_cost=env.cfg.step_cost,
                 deliver_reward=env.cfg.deliver_reward)
    logs: List[List[Tuple[DecisionContext, Plan]]] = [[] for _ in range(env.num_agents)]
    agents = [_Watched(a, logs[i]) for i, a in enumerate(PLANNER_TEAMS[planner](world))]
    run_episode(world, agents, seed=seed, limits=Limits(max_steps=min(max_steps, env.max_steps)))
    return {i: log for i, log in enumerate(logs)}


__all__ = ["PLANNERS", "planner_decisions"]
