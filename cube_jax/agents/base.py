"""The agent interface: one protocol for everything that chooses actions.

There are two shapes of agent, because there are two ways to play CUBE:

* :class:`BatchedPolicy`: a pure JAX function of one environment's state that returns an
  action for every agent of that world. It is jitted and vmapped over thousands of
  environments by :func:`cube_jax.evaluation.rollout`. Random actions, the paper's
  heuristic on the JAX plan executor, and trained checkpoints are batched policies. A
  team of batched policies is again a batched policy (:class:`cube_jax.agents.TeamPolicy`),
  each agent taking its action from its own member.
* :class:`Agent`: a decision maker for ONE agent, run on the CPU by the episode loop
  (:mod:`cube_jax.runtime`). At a decision point the loop hands it a
  :class:`DecisionContext` and awaits a :class:`Decision`: a plan (a task specification and
  symbolic actions, compiled to primitives by the plan executor), messages to teammates
  (as the communication topology allows) and, when it was interrupted by a message,
  whether to resume or replan. An agent that acts one primitive at a time (a trained
  policy inside a mixed team) sets ``acts_with_primitives`` and answers
  :meth:`Agent.primitive` at every step instead. Planners, scripted and replayed agents,
  language-model agents and people at a keyboard are all agents; the loop treats every
  kind the same way and only waits longer for some.

Decision points follow EmCoop's MAEIL stages (LLM.md section 2): an agent reasons (R) at
the start and whenever its plan ended, commits and waits (W) until every agent is ready,
executes (X) with no decision until its plan ends, and is interrupted (I) by a message
that reaches it while it waits or executes.
"""
from __future__ import annotations

import abc
import dataclasses
import enum
import functools
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

import jax
import numpy as np

from cube_jax.core.types import State
from cube_jax.names import Purpose, Stage, agent_name
from cube_jax.symbolic.actions import PlanError, SymbolicAction, plan_to_text


class Reason(str, enum.Enum):
    """What brought an agent to this decision point."""

    START = "start"  # the episode began
    ENDED = "ended"  # its plan succeeded or failed
    REPLAN = "replan"  # it dropped its running plan itself (see Agent.wants_replan)
    MESSAGE = "message"  # a message interrupted it


@dataclasses.dataclass(frozen=True)
class Plan:
    """A committed plan: what it is for (``spec``, e.g. ``"push_block(block#2)"``; plan
    coherence and resumption compare these strings) and its symbolic actions.

    ``primitive`` marks a single primitive action given as a one-step plan (a key press):
    the trace shows no symbolic action for it, and its pushes count as those of an agent
    acting with primitives alone (LLM.md section 5, ``temporal``).
    """

    spec: str
    actions: Tuple[SymbolicAction, ...]
    primitive: bool = False

    def __post_init__(self):
        if not isinstance(self.spec, str) or not self.spec.strip():
            raise ValueError(f"Plan: spec must be a non-empty string, got {self.spec!r}")
        object.__setattr__(self, "actions", tuple(self.actions))
        for i, action in enumerate(self.actions):
            if not isinstance(action, SymbolicAction):
                raise ValueError(f"Plan: action {i} must be a SymbolicAction, got {type(action).__name__}")

    @property
    def text_actions(self) -> List[str]:
        return [str(a) for a in self.actions]

    def __str__(self) -> str:
        return f"{self.spec}: {plan_to_text(self.actions)}" if self.actions else self.spec


@dataclasses.dataclass(frozen=True)
class OutgoingMessage:
    """A message an agent wants to send: recipient agent ids and the text."""

    recipients: Tuple[int, ...]
    content: str


@dataclasses.dataclass(frozen=True)
class Message:
    """A message as sent: ``id`` is unique in the episode, ``t`` the step it was sent at."""

    id: int
    t: int
    sender: int
    recipients: Tuple[int, ...]
    content: str


@dataclasses.dataclass(frozen=True)
class ModelCall:
    """One model call an agent made while deciding: the fields of a trace ``llm`` record
    besides ``agent``, ``purpose``, ``t`` and ``wall``.

    ``attempts``: HTTP requests it took (retries included); ``latency_s``: its wall time;
    token counts (0 when unknown or on failure); ``valid``: the reply passed every check;
    ``fallback``: the agent gave up after this call; ``error``: what was wrong, None when valid.
    ``server_failed``: the server itself failed (after its retries), not the reply: the
    runtime ends an episode whose server keeps failing.

    What a language model's harness adds (LLM.md section 5; ``reply_mode`` None for a call
    that has none of it): ``reasoning_tokens``, ``reasoning`` (None when there was none or it
    was dropped), ``reasoning_chars``, ``finish_reason``, ``starved`` (an empty answer at the
    token limit), ``reply_mode``. ``notice``: a text the trace gives once per agent as a
    ``notice`` record (a reply mode the server refused), not part of the ``llm`` record.
    """

    model: Optional[str]
    attempts: int
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    valid: bool
    fallback: bool
    error: Optional[str] = None
    server_failed: bool = False
    reasoning_tokens: int = 0
    reasoning: Optional[str] = None
    reasoning_chars: int = 0
    finish_reason: Optional[str] = None
    starved: bool = False
    reply_mode: Optional[str] = None
    notice: Optional[str] = None
    # further keys of the call's ``llm`` record (LLM.md section 5 lets records add keys), e.g.
    # ``repair`` (cube_jax.llm.repair): written beside the contract keys, never in their place
    extra: Optional[Mapping[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        """The trace ``llm`` record's fields of this call (the reasoning and reply-mode keys
        only where they apply: a call with a ``reply_mode``)."""
        out = dataclasses.asdict(self)
        del out["server_failed"], out["notice"]
        if self.reply_mode is None:
            for key in _HARNESS_KEYS:
                del out[key]
        extra = out.pop("extra") or {}
        return {**extra, **out}


# The keys of an ``llm`` record that only a language model's harness gives.
_HARNESS_KEYS = ("reasoning_tokens", "reasoning", "reasoning_chars", "finish_reason", "starved", "reply_mode")


class CallLedger(Protocol):
    """Where an agent reports its model calls while it decides (``DecisionContext.calls``).

    ``permit()`` is asked before every model call: None lets it start, a text says why it
    may not (the episode's call limit, a server that keeps failing, the wall-clock limit),
    and the agent then falls back without calling. ``record(call)`` is told of every call
    made as soon as it ends, successful, failed or cancelled, so the runtime writes its
    ``llm`` record at that moment and no call goes unrecorded.
    """

    def permit(self) -> Optional[str]: ...

    def record(self, call: ModelCall) -> None: ...


class OpenLedger:
    """A ledger with no limit that keeps the calls it is told of (outside the runtime)."""

    def __init__(self) -> None:
        self.calls: List[ModelCall] = []

    def permit(self) -> Optional[str]:
        return None

    def record(self, call: ModelCall) -> None:
        self.calls.append(call)


@dataclasses.dataclass
class Decision:
    """An agent's answer at a decision point.

    In R (purpose ``plan``): ``plan`` is required. In I (purpose ``interrupt``):
    ``resume=True`` keeps the running plan, otherwise ``plan`` replaces it. A ``message``
    turn carries ``messages`` only. A negotiation ``proposal`` or ``commitment`` carries
    ``block`` (a live block id, or None for none) and a short ``rationale``. ``fallback`` marks a decision the agent fell back to
    after failing to get a valid reply, with ``note`` saying why. Model calls are not part
    of the decision: they are reported to ``DecisionContext.calls`` as they happen.
    """

    plan: Optional[Plan] = None
    resume: bool = False
    messages: Tuple[OutgoingMessage, ...] = ()
    fallback: bool = False
    note: Optional[str] = None
    block: Optional[int] = None  # a proposal's or commitment's block id (None: none)
    rationale: str = ""  # a proposal's or commitment's short reason


@dataclasses.dataclass(frozen=True)
class TopologyView:
    """What the communication topology allows one agent in one decision."""

    name: str  # individual | debate | centralized | decentralized | ...
    role: str  # the agent's role text for prompts
    may_send: bool  # whether this decision may carry messages
    allowed_recipients: frozenset  # agent ids it may address
    message_budget: int  # messages it may send in this decision
    instructions: str = ""  # what this turn asks for (e.g. "send one directive to all followers")
    required_spec: Optional[str] = None  # the spec a plan must have here (negotiation: its allocated block's)


@dataclasses.dataclass(frozen=True)
class PartnerState:
    """What an agent sees of one teammate when it decides."""

    agent: int
    stage: Stage
    spec: Optional[str]  # its current plan's spec (None when it has none)
    action: Optional[str]  # the symbolic action it is executing, as text (None when none)
    plan: Optional["Plan"] = None  # its current (committed or last) plan, for plan checks (cube_jax.llm.repair)
    plan_index: int = 0  # the index of the plan's action it is at (len(actions) once finished)


@dataclasses.dataclass(frozen=True)
class TaskEvidence:
    """What the world model knows of one task (``block#b``), as numbers (LLM.md section 7).

    ``attempts`` (0 when the model gives no count), ``success_rate``, ``duration_mean`` and
    ``start_mean`` aggregate every attempt at the task; ``best_team_size`` is the size with
    the highest success rate (ties to the smaller; None before a success); ``teams`` holds one
    ``(team size, attempts, success rate, mean duration)`` per size tried, by size.
    """

    success_rate: float
    attempts: int = 0
    duration_mean: Optional[float] = None
    start_mean: Optional[float] = None
    best_team_size: Optional[int] = None
    teams: Tuple[Tuple[int, int, float, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class NegotiationView:
    """What a member of a negotiation room sees (LLM.md section 3.1).

    ``room``: the members, id order. ``proposals`` / ``commitments``: agent id -> block id
    (None: none) for the members who have spoken so far in this room. ``team_sizes``: block
    id -> suggested team size, for every proposed block (after the proposal round).
    ``executing``: block id -> agents already executing a plan for it (outside the room).
    ``guidebook``: the world model's guidebook as text (empty without a world model), and
    ``success``: block id -> the world model's success rate for its task, where it has data;
    ``evidence``: block id -> what the world model knows of its task (:class:`TaskEvidence`),
    for every live block it has data on (empty without a world model or with an empty one).
    ``allocation``: the member's final block when it plans (None before).
    ``plan_library``: the world model's plan library for that block, as text.
    """

    room: Tuple[int, ...]
    proposals: Dict[int, Optional[int]]
    commitments: Dict[int, Optional[int]]
    team_sizes: Dict[int, int]
    executing: Dict[int, int]
    guidebook: str = ""
    success: Dict[int, float] = dataclasses.field(default_factory=dict)
    allocation: Optional[int] = None
    plan_library: str = ""
    evidence: Dict[int, TaskEvidence] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PlanProgress:
    """Where an agent's current (or last) plan stands, from the plan executor."""

    plan: Optional[Plan]
    index: int  # current action index (len(actions) when finished)
    status: str  # started | in_progress | succeeded | failed | done
    error: Optional[PlanError]  # why it failed, when it did


@dataclasses.dataclass
class DecisionContext:
    """Everything an agent may look at when it decides (built by the episode loop).

    ``state`` is the JAX state (unbatched) before the next step; ``views`` the symbolic
    views of it (:class:`cube_jax.agents.views.WorldView`, computed once per step and
    shared). ``inbox`` holds the messages delivered to the agent since it last decided;
    ``feedback`` says what happened to its last plan or reply. ``validate(decision)``
    checks a decision against the state and the topology (a :class:`PlanError` or None);
    the loop applies the same check to every decision it receives.
    """

    agent: int
    name: str
    purpose: Purpose
    reason: Reason
    t: int
    state: State
    views: Any
    num_agents: int
    max_steps: int
    progress: PlanProgress
    inbox: Tuple[Message, ...]
    feedback: Optional[str]
    topology: TopologyView
    history: Tuple[Any, ...]  # the agent's recent executor history records (oldest first)
    validate: Callable[["Decision"], Optional[PlanError]]
    seed: int = 0  # the episode's seed
    step_cost: float = 0.01  # the world's cost per step and agent
    calls: CallLedger = dataclasses.field(default_factory=OpenLedger)  # where model calls are reported
    partners: Tuple["PartnerState", ...] = ()  # every teammate's state (COBLOCK's partner state)
    sent: Tuple[Message, ...] = ()  # the messages this agent sent recently (oldest first)
    negotiation: Optional[NegotiationView] = None  # set in a negotiation room (and when planning after one)
    # the task the agent's last step worked on, counted in that step record's ``tasks``: t, action,
    # block, face, required, counts {spatial, temporal, participation}, violated; None if no block
    last_task: Optional[Mapping[str, Any]] = None

    @functools.cached_property
    def rng(self) -> np.random.Generator:
        """A NumPy generator for this decision, seeded from the episode seed, the agent and
        the step (so a random agent repeats its choices when the episode is replayed)."""
        return np.random.default_rng([self.seed, self.agent, self.t])


class Agent(abc.ABC):
    """A decision maker for one agent, run by the CPU episode loop.

    Subclasses set ``kind`` (``llm``, ``heuristic``, ``team``, ``policy``, ``random``,
    ``scripted``, ``replay``, ``human``) and implement :meth:`decide`. ``model`` names the
    model behind a language agent (None otherwise).
    """

    kind: str = "agent"
    model: Optional[str] = None
    acts_with_primitives: bool = False

    def reset(self, agent: int, num_agents: int, seed: int) -> None:
        """Called once at the start of every episode, before the first decision."""

    @abc.abstractmethod
    async def decide(self, ctx: DecisionContext) -> Decision:
        """The decision at a decision point (see :class:`Decision` for what each purpose needs)."""

    def wants_replan(self, ctx: DecisionContext) -> bool:
        """Asked before every step while the agent executes; True drops the running plan
        (trace event ``replaced``) and makes the agent reason again. Only agents that
        decide without a model call should override it (planners do)."""
        return False

    def primitive(self, ctx: DecisionContext) -> int:
        """This step's primitive action, for agents with ``acts_with_primitives``."""
        raise NotImplementedError(f"{type(self).__name__} does not act with primitives")

    def describe(self) -> Dict[str, Any]:
        """``{"kind", "model"}`` for the trace's episode record (more keys may be added)."""
        return {"kind": self.kind, "model": self.model}

    async def aclose(self) -> None:
        """Releases what the agent holds open in the running event loop (connections);
        :func:`cube_jax.runtime.run_episode` calls it when its episode ends."""


class BatchedPolicy(Protocol):
    """A pure JAX policy for one environment; jit and vmap it freely.

    ``init(key)`` gives the policy's state for a new episode; ``act(state, policy_state)``
    returns ``(int32[N] actions, new policy state)`` for one (unbatched) environment state.
    """

    name: str

    def init(self, key: jax.Array) -> Any: ...

    def act(self, state: State, policy_state: Any) -> Tuple[jax.Array, Any]: ...


def idle_plan(steps: int = 1, spec: str = "idle") -> Plan:
    """``idle(steps)`` with the given spec."""
    return Plan(spec, (SymbolicAction("idle", {"steps": int(steps)}),))


def fallback_plan(agent: int) -> Plan:
    """What agent ``agent`` falls back to when it has no valid plan: ``idle(1)`` with the spec
    ``fallback(agent_k)``, unique to the agent, so that agents idling on fallbacks never
    count as sharing an intent (LLM.md section 4)."""
    return idle_plan(1, spec=f"fallback({agent_name(agent)})")


__all__ = [
    "Agent",
    "BatchedPolicy",
    "CallLedger",
    "Decision",
    "DecisionContext",
    "Message",
    "ModelCall",
    "OpenLedger",
    "NegotiationView",
    "OutgoingMessage",
    "PartnerState",
    "Plan",
    "PlanProgress",
    "Purpose",
    "Reason",
    "Stage",
    "TaskEvidence",
    "TopologyView",
    "fallback_plan",
    "idle_plan",
]
