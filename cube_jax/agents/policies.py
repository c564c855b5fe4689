"""Batched JAX policies (random, the paper's heuristic, teams of them) and the adapter that
lets any batched policy act inside the CPU episode loop.

Every policy here follows :class:`cube_jax.agents.BatchedPolicy`: ``init(key)`` and a pure
``act(state, policy_state) -> (int32[N], policy_state)`` for one environment, so
:func:`cube_jax.evaluation.rollout` can jit and vmap it. Trained checkpoints follow the same
protocol (:meth:`cube_jax.rl.policy.LoadedPolicy.for_world` gives an :class:`~cube_jax.rl.policy.ActorPolicy`).

>>> import jax, cube_jax
>>> env = cube_jax.make("hard")
>>> team = TeamPolicy([HeuristicPolicy(env), RandomPolicy(env.num_agents)], (0, 0, 1))
>>> state, _ = env.reset(jax.random.PRNGKey(0))
>>> actions, _ = jax.jit(team.act)(state, team.init(jax.random.PRNGKey(1)))
>>> actions.shape
(3,)
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.agents.base import Agent, BatchedPolicy, Decision, DecisionContext, Plan, Purpose
from cube_jax.core.types import NUM_ACTIONS, State
from cube_jax.symbolic.jax_heuristic import heuristic_policy


class RandomPolicy:
    """Uniform random primitive actions for every agent."""

    name = "random"

    def __init__(self, num_agents: int):
        self.num_agents = int(num_agents)

    def init(self, key: jax.Array) -> jax.Array:
        return key

    def act(self, state: State, key: jax.Array) -> Tuple[jax.Array, jax.Array]:
        key, sub = jax.random.split(key)
        return jax.random.randint(sub, (self.num_agents,), 0, NUM_ACTIONS, dtype=jnp.int32), key


class HeuristicPolicy:
    """The cube paper's heuristic on the JAX plan executor (:mod:`cube_jax.symbolic.jax_heuristic`);
    it takes the decisions of :class:`cube_jax.agents.planners.HeuristicAgent` step for step."""

    name = "heuristic"

    def __init__(self, env):
        self._act, self._initial = heuristic_policy(env)

    def init(self, key: jax.Array):
        return self._initial

    def act(self, state: State, policy_state):
        return self._act(state, policy_state)


@dataclasses.dataclass(frozen=True)
class TeamPolicy:
    """A mixed team of batched policies: agent ``i`` takes its action from
    ``members[assignment[i]]``. Each member acts for the whole world (a heuristic member
    plans for everyone); only its own agents' actions are used."""

    members: Tuple[Any, ...]
    assignment: Tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "members", tuple(self.members))
        object.__setattr__(self, "assignment", tuple(int(m) for m in self.assignment))
        if not self.members:
            raise ValueError("TeamPolicy: needs at least one member")
        bad = [m for m in self.assignment if not 0 <= m < len(self.members)]
        if bad:
            raise ValueError(f"TeamPolicy: assignment names member {bad[0]}, but there are {len(self.members)} members")

    @property
    def name(self) -> str:
        return ",".join(self.members[m].name for m in self.assignment)

    def init(self, key: jax.Array):
        keys = jax.random.split(key, len(self.members))
        return tuple(member.init(k) for member, k in zip(self.members, keys))

    def act(self, state: State, policy_state):
        outputs = [member.act(state, ps) for member, ps in zip(self.members, policy_state)]
        actions = jnp.stack([a for a, _ in outputs])  # [members, N]
        which = jnp.asarray(self.assignment, jnp.int32)
        chosen = actions[which, jnp.arange(len(self.assignment))]
        return chosen.astype(jnp.int32), tuple(ps for _, ps in outputs)


class _SharedPolicyRun:
    """One batched policy stepping one episode on the CPU, shared by the agents it controls."""

    def __init__(self, policy: BatchedPolicy):
        self.policy = policy
        self._act = jax.jit(policy.act)
        self._seed: Optional[int] = None
        self._t: Optional[int] = None
        self._actions: Optional[np.ndarray] = None
        self._state = None
        self._last_joined: Optional[int] = None

    def join(self, agent: int, seed: int) -> None:
        """Called by each agent's reset (in id order): an id not above the last one starts an episode."""
        if self._last_joined is None or agent <= self._last_joined:
            self._state = self.policy.init(jax.random.fold_in(jax.random.PRNGKey(seed), 7))
            self._t = None
        self._last_joined = agent

    def actions(self, state: State, t: int) -> np.ndarray:
        if self._t != t:
            actions, self._state = self._act(state, self._state)
            self._actions = np.asarray(actions)
            self._t = t
        return self._actions


class PolicyAgent(Agent):
    """A batched policy acting for one agent inside the CPU episode loop, one primitive per step.

    Agents built with the same ``shared`` run (see :func:`policy_agents`) compute the policy
    once per step. They commit one standing plan (``spec`` = the policy's name) at the start
    and execute it for the whole episode; a message that interrupts them is answered with
    resume.
    """

    kind = "policy"
    acts_with_primitives = True

    def __init__(self, shared: _SharedPolicyRun, kind: Optional[str] = None):
        self.shared = shared
        if kind is not None:
            self.kind = kind

    def reset(self, agent: int, num_agents: int, seed: int) -> None:
        self.agent = agent
        self.shared.join(agent, seed)

    async def decide(self, ctx: DecisionContext) -> Decision:
        if ctx.purpose == Purpose.INTERRUPT:
            return Decision(resume=True)
        return Decision(plan=Plan(f"policy({self.shared.policy.name})", ()))

    def primitive(self, ctx: DecisionContext) -> int:
        return int(self.shared.actions(ctx.state, ctx.t)[ctx.agent])

    def describe(self):
        return {"kind": self.kind, "model": None, "policy": self.shared.policy.name}


def policy_agents(policy: BatchedPolicy, count: int, kind: Optional[str] = None) -> list:
    """``count`` :class:`PolicyAgent` objects sharing one run of ``policy``."""
    shared = _SharedPolicyRun(policy)
    return [PolicyAgent(shared, kind) for _ in range(count)]


__all__ = ["HeuristicPolicy", "PolicyAgent", "RandomPolicy", "TeamPolicy", "policy_agents"]
