"""CPU plan executor: turns every agent's symbolic plan into one joint primitive action per step.

The rules are those of ``docs/symbolic.md`` ("Executor state and one step"): phase 1
advances each agent alone through finished actions and emits a primitive; phase 2
decides the synchronising actions (``rendezvous``, ``wait_agents``) from the set of
agents waiting after phase 1, so every member of a group that completes leaves together.

>>> import jax, cube_jax
>>> from cube_jax.symbolic import PlanExecutor, parse_plan
>>> env = cube_jax.make(scenario=cube_jax.Scenario.from_ascii('''
... ......
... 0a....
... ......
... ......
... ......
... ......'''))
>>> state, _ = env.reset(jax.random.PRNGKey(0))
>>> ex = PlanExecutor(env)
>>> _ = ex.set_plan(0, parse_plan("move_to_block(0, left); push_block(0, 4)"), state)
>>> actions = ex.act(state)
>>> actions.tolist(), ex.status(0)
([4], 'started')
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from cube_jax.core.checks import excerpt, is_integer
from cube_jax.core.types import STAY
from cube_jax.symbolic.actions import (
    PLAN_CHECK,
    PlanError,
    SymbolicAction,
    check_plan,
    parse_plan,
    parse_plan_json,
)
from cube_jax.symbolic.pathing import World, aligned_face, is_aligned, path_step, queue_targets
from cube_jax.symbolic.vocabulary import (
    DIRECTIONS,
    FACE_IDS,
    FACE_PUSH_ACTION,
    ErrorKind,
    STATUS_NAMES,
    Outcome,
    away_direction,
    obstacle_agents,
    packing_step,
)

# The statuses as the CPU side shows them: the labels of vocabulary.Status.
STARTED, IN_PROGRESS, SUCCEEDED, FAILED, DONE = STATUS_NAMES


@dataclasses.dataclass(frozen=True)
class HistoryRecord:
    """What one agent's plan did in one step (docs/symbolic.md, "History")."""

    t: int
    agent: int
    action_index: Optional[int]
    action: Optional[SymbolicAction]
    primitive: Optional[int]  # None for an action that ended without emitting
    status: str  # STARTED, IN_PROGRESS, SUCCEEDED, FAILED or DONE
    error: Optional[PlanError] = None

    def to_dict(self) -> dict:
        return {
            "t": self.t,
            "agent": self.agent,
            "action_index": self.action_index,
            "action": None if self.action is None else str(self.action),
            "primitive": self.primitive,
            "status": self.status,
            "error": None if self.error is None else self.error.to_dict(),
        }


@dataclasses.dataclass
class AgentPlan:
    """Runtime state of one agent's plan."""

    plan: List[SymbolicAction]
    index: int = 0  # current action; len(plan) when finished
    emitted: int = 0  # primitives emitted by the current action
    started: bool = False  # the current action's preconditions were checked
    error: Optional[PlanError] = None  # set when the plan failed
    status: str = DONE

    @property
    def current(self) -> Optional[SymbolicAction]:
        return self.plan[self.index] if self.index < len(self.plan) else None


def _err(kind: ErrorKind, index: int, message: str, argument: Optional[str] = None) -> PlanError:
    return PlanError(kind.label, message, index, argument)


# --- the rules of each action (docs/symbolic.md, "Actions") ------------------------------------
# Every entry of ACTION_SPECS has its rules here (RULES) and in jax_rules.RULES.

StepResult = Tuple[Outcome, Optional[int], Optional[PlanError]]


@dataclasses.dataclass(frozen=True)
class SyncRules:
    """How phase 2 decides a synchronising action (docs/symbolic.md, "Synchronisation")."""

    group: Callable[[dict], tuple]  # agents whose actions give the same group wait together
    member: Callable[[World, int, dict], bool]  # whether the agent counts in its group now
    lost: Callable[[World, int, dict, int], Optional[PlanError]]  # failure checked before counting
    waiting: Callable[[World, int, dict], int]  # the primitive emitted while waiting
    place: Callable[[dict], str]  # where it waits, named in the timeout message


@dataclasses.dataclass(frozen=True)
class ActionRules:
    """One action's semantics on the CPU.

    ``step(world, agent, args, emitted, index, obstacles)`` gives (outcome, primitive,
    error) of a started, non-synchronising action; ``obstacles`` are the agents a path
    routes around (:func:`path_obstacles`). ``precondition(world, agent, args, index)``
    is checked when the action starts, after the check every action with a block gets
    (the block exists and is alive). ``sync``: the rules of a synchronising action.
    """

    step: Optional[Callable[..., StepResult]] = None
    precondition: Optional[Callable[[World, int, dict, int], Optional[PlanError]]] = None
    sync: Optional[SyncRules] = None


def _repeat(primitive: Callable[[World, int, dict], int]):
    """The step of an action that emits ``primitive`` until it has emitted ``steps`` of them."""

    def step(world: World, agent: int, args: dict, emitted: int, index: int, obstacles: Sequence[int]) -> StepResult:
        if emitted >= args["steps"]:
            return Outcome.SUCCEED, None, None
        return Outcome.EMIT, int(primitive(world, agent, args)), None

    return step


def _away(world: World, agent: int, args: dict) -> int:
    block = args["block"]
    return int(away_direction(world.agent_pos[agent], world.block_pos[block], world.block_weight[block]))


def _move_to_block(world: World, agent: int, args: dict, emitted: int, index: int, obstacles: Sequence[int]) -> StepResult:
    block, face = args["block"], args["face"]
    if not world.block_alive[block]:
        return Outcome.FAIL, None, _err(ErrorKind.EXECUTION, index, f"move_to_block: block {block} was delivered", "block")
    if is_aligned(world, agent, block, face):
        return Outcome.SUCCEED, None, None
    targets = queue_targets(world, agent, block, face)
    if not targets:
        return Outcome.FAIL, None, _err(ErrorKind.EXECUTION, index, f"move_to_block: the {face} face of block {block} has no free cell to line up on", "face")
    step = path_step(world, agent, targets, obstacles)
    if step is None:
        return Outcome.FAIL, None, _err(ErrorKind.EXECUTION, index, f"move_to_block: no path to the {face} face of block {block}", "face")
    return Outcome.EMIT, step, None


def _push_block(world: World, agent: int, args: dict, emitted: int, index: int, obstacles: Sequence[int]) -> StepResult:
    block = args["block"]
    if not world.block_alive[block]:
        return Outcome.SUCCEED, None, None
    if emitted >= args["steps"]:
        return Outcome.SUCCEED, None, None
    face = aligned_face(world, agent, block)
    if face is None:
        return Outcome.FAIL, None, _err(ErrorKind.EXECUTION, index, f"push_block: agent {agent} is no longer aligned with block {block}", "block")
    return Outcome.EMIT, FACE_PUSH_ACTION[FACE_IDS[face]], None


def _push_block_precondition(world: World, agent: int, args: dict, index: int) -> Optional[PlanError]:
    block = args["block"]
    if aligned_face(world, agent, block) is None:
        return _err(ErrorKind.PRECONDITION, index, f"push_block: agent {agent} is not aligned with any face of block {block}", "block")
    return None


def _rendezvous_precondition(world: World, agent: int, args: dict, index: int) -> Optional[PlanError]:
    block, face = args["block"], args["face"]
    if not is_aligned(world, agent, block, face):
        return _err(ErrorKind.PRECONDITION, index, f"rendezvous: agent {agent} is not aligned with the {face} face of block {block}", "face")
    return None


def _rendezvous_lost(world: World, agent: int, args: dict, index: int) -> Optional[PlanError]:
    block, face = args["block"], args["face"]
    if not world.block_alive[block]:
        return _err(ErrorKind.EXECUTION, index, f"rendezvous: block {block} was delivered", "block")
    if not is_aligned(world, agent, block, face):
        return _err(ErrorKind.EXECUTION, index, f"rendezvous: agent {agent} is no longer aligned with the {face} face of block {block}", "face")
    return None


def _packing(world: World, agent: int, args: dict) -> int:
    block = args["block"]
    return int(packing_step(world.agent_pos[agent], world.block_pos[block], world.block_weight[block],
                            FACE_IDS[args["face"]], world.agent_at, world.block_at))


RULES: Dict[str, ActionRules] = {
    "idle": ActionRules(step=_repeat(lambda world, agent, args: STAY)),
    "move": ActionRules(step=_repeat(lambda world, agent, args: DIRECTIONS[args["direction"]])),
    "move_to_block": ActionRules(step=_move_to_block),
    "rendezvous": ActionRules(
        precondition=_rendezvous_precondition,
        sync=SyncRules(
            group=lambda args: (args["block"], args["face"]),
            member=lambda world, agent, args: is_aligned(world, agent, args["block"], args["face"]),
            lost=_rendezvous_lost,
            waiting=_packing,
            place=lambda args: f"the {args['face']} face of block {args['block']}",
        ),
    ),
    "push_block": ActionRules(step=_push_block, precondition=_push_block_precondition),
    "yield_block": ActionRules(step=_repeat(_away)),
    "wait_agents": ActionRules(
        sync=SyncRules(
            group=lambda args: (),
            member=lambda world, agent, args: True,
            lost=lambda world, agent, args, index: None,
            waiting=lambda world, agent, args: STAY,
            place=lambda args: "the wait",
        ),
    ),
}


def rules_for(name: str) -> ActionRules:
    """The CPU rules of action ``name``; a clear error for an action that has none."""
    if name not in RULES:
        raise NotImplementedError(f"the CPU executor has no rules for action {name!r}; add them to executor.RULES")
    return RULES[name]


# --- one action on one state -------------------------------------------------------------------


def precondition_error(world: World, agent: int, action: SymbolicAction, index: int) -> Optional[PlanError]:
    """The first failed precondition of ``action`` for ``agent`` on ``world``, or None."""
    block_arg = action.spec.block_arg
    if block_arg is not None:
        block = action.args[block_arg.name]
        if not 0 <= block < len(world.block_alive):
            return _err(ErrorKind.PRECONDITION, index, f"{action.name}: unknown block {block}", block_arg.name)
        if not world.block_alive[block]:
            return _err(ErrorKind.PRECONDITION, index, f"{action.name}: block {block} is already delivered", block_arg.name)
    precondition = rules_for(action.name).precondition
    return None if precondition is None else precondition(world, agent, action.args, index)


def evaluate(world: World, agent: int, action: SymbolicAction, emitted: int, index: int, obstacles: Sequence[int] = ()) -> StepResult:
    """(outcome, primitive, error) of a started, non-synchronising action on this state;
    ``obstacles`` are the agents move_to_block routes around (see path_obstacles)."""
    step = rules_for(action.name).step
    if step is None:
        raise ValueError(f"evaluate: {action.name} is decided by the synchronisation phase")
    return step(world, agent, action.args, emitted, index, obstacles)


def path_obstacles(parked: Sequence[bool]) -> List[List[int]]:
    """Per agent, the agents it routes around: every agent with a smaller id, and every
    parked one (no walking action at the start of the step). Walking agents with a larger
    id are expected to get out of the way; this asymmetry stops two agents from stepping
    aside for each other in lockstep forever."""
    parked = np.asarray(parked, bool)
    rows = obstacle_agents(np.arange(len(parked))[:, None], parked).tolist()
    return [[j for j, obstacle in enumerate(row) if obstacle] for row in rows]


def sync_key(action: SymbolicAction) -> Tuple:
    """Agents whose current actions share this key are in the same rendezvous / wait state."""
    return (action.name,) + tuple(rules_for(action.name).sync.group(action.args))


# --- the executor --------------------------------------------------------------------------------


class PlanExecutor:
    """Runs one plan per agent on a CPU copy of the state.

    ``set_plan(agent, plan, state)`` checks and installs a plan (text, JSON, or a list of
    actions); ``act(state)`` returns ``np.int32[N]`` primitives for this step and advances
    every plan by the rules of docs/symbolic.md. Statuses and the history are updated by
    ``act`` itself: an action whose end is visible in the new state is closed at the next
    ``act`` (no separate observe step is needed).
    """

    def __init__(self, env, keep_history: bool = True):
        self.keep_history = keep_history
        self.num_agents = env.num_agents
        self.num_blocks = env.num_blocks
        self.agents = [AgentPlan([]) for _ in range(self.num_agents)]
        self.history: List[HistoryRecord] = []

    # -- plans ------------------------------------------------------------------------------
    def set_plan(self, agent: int, plan: Union[str, list, dict, Sequence[SymbolicAction]], state=None) -> List[SymbolicAction]:
        """Installs ``plan`` for ``agent`` (replacing its current plan). Raises PlanError
        (kind ``plan_check``) for a malformed plan, an unknown block, or (with ``state``) a
        block that is already delivered."""
        if not is_integer(agent) or not 0 <= agent < self.num_agents:
            raise ValueError(f"set_plan: agent must be an integer 0..{self.num_agents - 1}, got {excerpt(agent)}")
        agent = int(agent)
        if not isinstance(plan, (str, Sequence, Mapping)) or isinstance(plan, bytes):
            raise PlanError(
                PLAN_CHECK, f"a plan must be text, JSON or a list of SymbolicAction, got {excerpt(plan)}", None
            )
        if isinstance(plan, str):
            plan = parse_plan(plan) if "(" in plan or not plan.strip().startswith(("[", "{")) else parse_plan_json(plan)
        elif isinstance(plan, dict) or (isinstance(plan, list) and plan and isinstance(plan[0], dict)):
            plan = parse_plan_json(plan)
        plan = list(plan)
        alive = [True] * self.num_blocks if state is None else [bool(x) for x in np.asarray(state.block_alive)]
        check_plan(plan, self.num_agents, alive)
        self.agents[agent] = AgentPlan(plan)
        return plan

    def clear(self, agent: int) -> None:
        self.agents[agent] = AgentPlan([])

    def status(self, agent: int) -> str:
        return self.agents[agent].status

    def error(self, agent: int) -> Optional[PlanError]:
        return self.agents[agent].error

    def is_idle(self, agent: int) -> bool:
        """True when the agent has no action left to run (plan finished, empty or failed)."""
        a = self.agents[agent]
        return a.error is not None or a.current is None

    def current_action(self, agent: int) -> Optional[SymbolicAction]:
        a = self.agents[agent]
        return None if a.error is not None else a.current

    def snapshot(self) -> List[dict]:
        """Per agent ``{index, emitted, started, failed, status}`` (what the JAX executor tracks)."""
        return [
            {"index": a.index, "emitted": a.emitted, "started": a.started, "failed": a.error is not None, "status": a.status}
            for a in self.agents
        ]

    # -- one step ---------------------------------------------------------------------------
    def act(self, state) -> np.ndarray:
        """Joint primitive actions ``np.int32[N]`` for this step (docs/symbolic.md)."""
        world = World.from_state(state)
        t = int(state.t)
        self._obstacles = path_obstacles([self.current_action(i) is None or not self.current_action(i).spec.walking
                                          for i in range(self.num_agents)])
        primitives = np.zeros(self.num_agents, np.int32)
        pending = []  # agents stopped at a synchronising action in phase 1
        for i in range(self.num_agents):
            result = self._advance(world, t, i, after_sync=False)
            if result is None:
                pending.append(i)
            else:
                primitives[i] = result
        members: Dict[Tuple, int] = {}
        for i in pending:
            action = self.agents[i].current
            if rules_for(action.name).sync.member(world, i, action.args):
                members[sync_key(action)] = members.get(sync_key(action), 0) + 1
        for i in pending:
            primitives[i] = self._decide_sync(world, t, i, members)
        return primitives

    def _record(self, t, i, primitive, status, error=None, with_action=True):
        if not self.keep_history:
            return
        a = self.agents[i]
        action = a.current if with_action else None
        index = a.index if action is not None else None
        self.history.append(HistoryRecord(t, i, index, action, primitive, status, error))

    def _emit(self, t, i, primitive) -> int:
        a = self.agents[i]
        a.status = STARTED if a.emitted == 0 else IN_PROGRESS
        self._record(t, i, int(primitive), a.status)
        a.emitted += 1
        return int(primitive)

    def _succeed(self, t, i) -> None:
        a = self.agents[i]
        self._record(t, i, None, SUCCEEDED)
        a.index, a.emitted, a.started = a.index + 1, 0, False

    def _fail(self, t, i, error: PlanError) -> int:
        a = self.agents[i]
        a.error, a.status = error, FAILED
        self._record(t, i, None, a.status, error)
        return STAY

    def _advance(self, world: World, t: int, i: int, after_sync: bool) -> Optional[int]:
        """Phase 1 for agent i: the primitive it emits, or None when it waits for phase 2.

        With ``after_sync=True`` (after a synchronising action succeeded in phase 2) a
        synchronising action reached now is only started and emits STAY.
        """
        a = self.agents[i]
        while True:
            if a.error is not None:
                self._record(t, i, STAY, FAILED, a.error, with_action=False)
                return STAY
            action = a.current
            if action is None:
                a.status = DONE
                self._record(t, i, STAY, a.status, with_action=False)
                return STAY
            if not a.started:
                error = precondition_error(world, i, action, a.index)
                if error is not None:
                    return self._fail(t, i, error)
                a.started, a.emitted = True, 0
            if action.spec.synchronising:
                return self._emit(t, i, STAY) if after_sync else None
            outcome, primitive, error = evaluate(world, i, action, a.emitted, a.index, self._obstacles[i])
            if outcome == Outcome.SUCCEED:
                self._succeed(t, i)
                continue
            if outcome == Outcome.FAIL:
                return self._fail(t, i, error)
            return self._emit(t, i, primitive)

    def _decide_sync(self, world: World, t: int, i: int, members: Dict[Tuple, int]) -> int:
        a = self.agents[i]
        action = a.current
        args = action.args
        rules = rules_for(action.name).sync
        error = rules.lost(world, i, args, a.index)
        if error is not None:
            return self._fail(t, i, error)
        count = members.get(sync_key(action), 0)
        if count >= args["count"]:
            self._succeed(t, i)
            return self._advance(world, t, i, after_sync=True)
        if a.emitted >= args["timeout"]:
            return self._fail(t, i, _err(ErrorKind.EXECUTION, a.index, f"{action.name}: timed out after {a.emitted} steps with {count} of {args['count']} agents at {rules.place(args)}", "timeout"))
        return self._emit(t, i, rules.waiting(world, i, args))

    def peek(self, state) -> List[Tuple[str, Optional[PlanError]]]:
        """Per agent ``(status, error)`` that :meth:`act` would leave on ``state``, without
        changing anything: ``done`` or ``failed`` means the plan has nothing left to emit
        there (it succeeded or failed), so a new plan can take over on this very step."""
        saved_agents, saved_history = self.agents, self.keep_history
        self.agents = [dataclasses.replace(a) for a in saved_agents]
        self.keep_history = False
        try:
            self.act(state)
            return [(a.status, a.error) for a in self.agents]
        finally:
            self.agents, self.keep_history = saved_agents, saved_history

    def records_at(self, t: int) -> List[HistoryRecord]:
        return [r for r in self.history if r.t == t]
