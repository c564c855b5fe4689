"""The episode loop: every kind of agent plays one episode under EmCoop's MAEIL stages.

It follows LLM.md section 2:

* every agent starts in R and commits a plan (R -> W) at the moment its own decision is
  complete, so each agent's clock is its own: a planner beside language agents shows a
  short decision and a long wait;
* at each environment step, up to ``max_phases`` cognitive phases run: in each, every agent
  then in R or I decides on the same snapshot (the topology orders or parallelises them,
  :mod:`cube_jax.runtime.topologies`); messages sent in a phase are delivered together when
  it ends, interrupting recipients in W or X (I), who decide in the next phase; messages of
  the last phase wait for the next step;
* the world advances one step when every agent is ready (W or X); every W becomes X and
  the plan executor compiles the plans into primitive actions;
* after the step an agent whose plan has nothing more to emit goes back to R (X -> R);
* while every agent executes, steps follow each other with no decision at all.

Limits (steps, model calls, wall-clock seconds counted from the first decision, a model
server that keeps failing) end an episode as truncated with the reason; every model call
made has its ``llm`` record whatever ends it. A bad decision never ends an episode: the
agent falls back to ``idle(1)`` with the spec ``fallback(agent_k)`` and the trace says so.

>>> import cube_jax
>>> from cube_jax.agents import heuristic_team
>>> from cube_jax.runtime import run_episode
>>> env = cube_jax.make("easy")
>>> result = run_episode(env, heuristic_team(env), seed=0)
>>> result.terminated, result.blocks_delivered, result.reason
(True, 3, 'all blocks delivered')
"""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Sequence, Union

import jax
import numpy as np

from cube_jax.agents.base import Agent, ModelCall, Purpose, Stage
from cube_jax.core.env import CubeEnv, layout
from cube_jax.runtime.decisions import EpisodeState
from cube_jax.runtime.limits import CallGate, EpisodeEnded, Limits
from cube_jax.runtime.messaging import Mailbox
from cube_jax.runtime.phase import Phase
from cube_jax.runtime.results import EpisodeResult
from cube_jax.runtime.slot import AgentSlot, Recorder
from cube_jax.runtime.stepping import close_ended_plans, close_plans_at_end, outcome, step_environment
from cube_jax.runtime.topologies import Topology, make_topology
from cube_jax.symbolic.executor import PlanExecutor
from cube_jax.names import agent_name
from cube_jax.trace import OUTCOME_COUNTS, TraceWriter

DEFAULT_MAX_PHASES = 3


def env_spec(env: CubeEnv) -> Dict[str, Any]:
    """What was passed to :func:`cube_jax.make` for ``env``, as far as the episode record needs it."""
    spec = getattr(env, "make_kwargs", None)
    if spec is not None:
        return dict(spec)
    if env.curriculum_n:
        return {"n": env.curriculum_n, "max_steps": env.max_steps}
    return {"scenario": env.name, "max_steps": env.max_steps}


class Episode:
    """One episode of ``agents`` (one per agent of ``env``, id order) under ``topology``.

    ``trace`` is a path, a :class:`~cube_jax.trace.TraceWriter` or None. ``max_phases``
    bounds the cognitive phases per environment step. ``env_kwargs`` is recorded in the
    trace's episode record (default: derived from ``env``). ``on_record(record)`` is called
    with every record as it happens (a live view listens here), and ``before_step()``, when
    given, is awaited before every environment step (a viewer's pause and speed controls).
    Use :func:`~cube_jax.runtime.run_episode` or ``await Episode(...).run()``.
    """

    def __init__(self, env: CubeEnv, agents: Sequence[Agent], *, seed: int, topology: Union[str, Topology] = "individual",
                 trace: Union[None, str, os.PathLike, TraceWriter] = None, limits: Optional[Limits] = None,
                 max_phases: int = DEFAULT_MAX_PHASES, env_kwargs: Optional[Mapping[str, Any]] = None,
                 on_record: Optional[Callable[[dict], None]] = None,
                 before_step: Optional[Callable[[], Awaitable[None]]] = None):
        if len(agents) != env.num_agents:
            raise ValueError(f"Episode: {len(agents)} agents given for a world of {env.num_agents}")
        for i, agent in enumerate(agents):
            if not isinstance(agent, Agent):
                raise ValueError(f"Episode: agent {i} is a {type(agent).__name__}, not a cube_jax.agents.Agent")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
            raise ValueError(f"Episode: seed must be an integer in 0..2**32-1, got {seed!r}")
        if isinstance(max_phases, bool) or not isinstance(max_phases, (int, np.integer)) or max_phases < 1:
            raise ValueError(f"Episode: max_phases must be an integer >= 1, got {max_phases!r}")
        self.env = env
        self.seed = int(seed)
        self.topology = topology if isinstance(topology, Topology) else make_topology(topology, env.num_agents)
        if self.topology.num_agents != env.num_agents:
            raise ValueError(f"Episode: the topology is for {self.topology.num_agents} agents, the world has "
                             f"{env.num_agents}")
        self.limits = limits or Limits()
        self.max_phases = int(max_phases)
        self.max_steps = min(env.max_steps, self.limits.max_steps or env.max_steps)
        self.env_kwargs = dict(env_kwargs) if env_kwargs is not None else env_spec(env)
        self._trace_target = trace
        self.on_record = on_record
        self.before_step = before_step
        self.slots = [AgentSlot(i, a, agent_name(i)) for i, a in enumerate(agents)]
        self.trace: Optional[TraceWriter] = None
        self.es: Optional[EpisodeState] = None
        self._episode_return = 0.0
        self._start = time.perf_counter()

    # -- what callers read while it runs -----------------------------------------------------------
    @property
    def state(self):
        return None if self.es is None else self.es.state

    @property
    def t(self) -> int:
        return 0 if self.es is None else self.es.t

    @property
    def model_calls(self) -> int:
        return 0 if self.es is None else self.es.gate.recorded

    # -- the loop -----------------------------------------------------------------------------
    async def run(self) -> EpisodeResult:
        self._start = time.perf_counter()
        target = self._trace_target
        self.trace = target if isinstance(target, TraceWriter) else (TraceWriter(target) if target is not None else None)
        if self.trace is None:
            return await self._play()
        with self.trace:  # an exception or a cancellation still ends the trace with its reason
            return await self._play()

    def _setup(self) -> EpisodeState:
        recorder = Recorder(self.trace, self.on_record)
        gate = CallGate(self.limits, len(self.slots), self._write_call)
        mailbox = Mailbox(self.slots, recorder, self.topology.receive_cap())
        es = EpisodeState(env=self.env, seed=self.seed, max_steps=self.max_steps, slots=self.slots,
                          executor=PlanExecutor(self.env, keep_history=True), recorder=recorder, mailbox=mailbox,
                          gate=gate)
        es.state, _ = self.env.reset(jax.random.PRNGKey(self.seed))
        return es

    async def _play(self) -> EpisodeResult:
        self.es = es = self._setup()
        self.topology.reset()
        for slot in self.slots:
            slot.agent.reset(slot.index, len(self.slots), self.seed)
        es.recorder.write("episode", schema=1, env=self.env_kwargs, seed=self.seed, topology=self.topology.name,
                          agents={s.name: s.agent.describe() for s in self.slots}, layout=layout(es.state))
        for slot in self.slots:
            es.recorder.stage(slot, Stage.REASONING)
        terminated = truncated = False
        try:
            while True:
                await self._deliberate()
                if self.before_step is not None:
                    await self.before_step()
                terminated, truncated, reward = step_environment(es, self._plan_view)
                self._episode_return += reward
                if self.trace is not None:  # what an interrupted trace's end record says
                    self.trace.outcome = outcome(es)
                if terminated:
                    reason = "all blocks delivered"
                    break
                if truncated or es.t >= self.max_steps:
                    truncated, reason = True, f"max_steps ({self.max_steps}) reached"
                    break
                if es.gate.check_wall():
                    raise EpisodeEnded(es.gate.closed)
                close_ended_plans(es, self._plan_view)
        except EpisodeEnded as ended:
            terminated, truncated, reason = False, True, ended.reason
        return self._finish(terminated, truncated, reason)

    def _plan_view(self, agent: int):
        return self.topology.member_view(agent, Purpose.PLAN)

    async def _deliberate(self) -> None:
        """The cognitive phases of one step (at most ``max_phases``)."""
        es = self.es
        es.mailbox.new_step()
        es.mailbox.deliver()  # what earlier steps left buffered
        for k in range(self.max_phases):
            members = [s.index for s in self.slots if s.stage in (Stage.REASONING, Stage.INTERRUPTED)]
            if not members:
                break
            es.gate.start_clock()
            await self._with_wall_limit(self.topology.deliberate(Phase(es, members)))
            unready = [s.name for s in self.slots if s.stage not in (Stage.WAITING, Stage.EXECUTING)]
            if unready:
                raise RuntimeError(f"topology {self.topology.name!r} left {unready} without a committed plan")
            if es.gate.closed is not None:
                raise EpisodeEnded(es.gate.closed)
            if k < self.max_phases - 1:
                es.mailbox.deliver()

    async def _with_wall_limit(self, coroutine):
        left = self.es.gate.seconds_left()
        if left is None:
            return await coroutine
        try:
            return await asyncio.wait_for(coroutine, timeout=max(left, 0.0))
        except asyncio.TimeoutError:
            raise EpisodeEnded(self.es.gate.wall_reason()) from None

    def _write_call(self, agent: int, purpose: str, call: ModelCall) -> None:
        self.es.recorder.write("llm", agent=self.slots[agent].name, purpose=purpose, model=call.model,
                               attempts=call.attempts, latency_s=round(float(call.latency_s), 6),
                               prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens,
                               valid=call.valid, fallback=call.fallback, error=call.error, **dict(call.extra or {}))

    # -- the end --------------------------------------------------------------------------------
    def _finish(self, terminated: bool, truncated: bool, reason: str) -> EpisodeResult:
        es = self.es
        close_plans_at_end(es)
        counts = outcome(es)
        es.recorder.write("end", terminated=terminated, truncated=truncated, reason=reason, **counts)
        return self.result(terminated=terminated, truncated=truncated, reason=reason, **counts)

    def result(self, *, terminated: bool, truncated: bool, reason: str, error: Optional[str] = None,
               **counts) -> EpisodeResult:
        """The :class:`EpisodeResult` of this episode as it stands."""
        if not counts:
            counts = outcome(self.es) if self.es is not None and self.es.state is not None else {
                **dict.fromkeys(OUTCOME_COUNTS, 0), "blocks_total": self.env.num_blocks}
        gate = self.es.gate if self.es is not None else None
        return EpisodeResult(
            seed=self.seed, terminated=terminated, truncated=truncated, reason=reason,
            episode_return=round(self._episode_return, 6), model_calls=0 if gate is None else gate.recorded,
            prompt_tokens=0 if gate is None else gate.prompt_tokens,
            completion_tokens=0 if gate is None else gate.completion_tokens,
            wall_s=round(time.perf_counter() - self._start, 6),
            trace=None if self.trace is None or self.trace.path is None else str(self.trace.path), error=error,
            **counts,
        )


__all__ = ["DEFAULT_MAX_PHASES", "Episode", "env_spec"]
