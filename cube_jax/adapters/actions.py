"""What an agent's action may be in the PettingZoo adapter, checked: a primitive (an int in
0..4), or, in plan mode (``parallel_env(..., plans=True)``), a symbolic plan that the CPU
plan executor turns into primitives (:class:`PlanMode`; the infos it adds are described in
:mod:`cube_jax.adapters.pettingzoo`)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import gymnasium
import numpy as np

from cube_jax.core.types import NUM_ACTIONS, State
from cube_jax.names import agent_name, is_action
from cube_jax.symbolic.actions import ACTION_SPECS, DIRECTIONS, FACES, PlanError
from cube_jax.symbolic.executor import DONE, FAILED, PlanExecutor


class PlanActionSpace(gymnasium.spaces.Space):
    """The actions of plan mode: a primitive (an int in 0..4) or a plan (a text or JSON string,
    a list of JSON actions, or ``{"plan": [...]}``); None continues a running plan.

    ``sample()`` gives a primitive or a random plan of one to three actions with arguments
    in range for the world (its block ids), so random play exercises both paths.
    """

    def __init__(self, num_blocks: int, seed: Optional[int] = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.num_blocks = int(num_blocks)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def _argument(self, kind: str) -> str:
        rng = self.np_random
        if kind == "face":
            return FACES[int(rng.integers(len(FACES)))]
        if kind == "direction":
            return tuple(DIRECTIONS)[int(rng.integers(len(DIRECTIONS)))]
        if kind == "block":
            return str(int(rng.integers(self.num_blocks)))
        return str(int(rng.integers(1, 4)))

    def sample(self, mask=None, probability=None):
        rng = self.np_random
        if rng.random() < 0.6:
            return int(rng.integers(NUM_ACTIONS))
        specs = list(ACTION_SPECS.values())
        actions = []
        for _ in range(int(rng.integers(1, 4))):
            spec = specs[int(rng.integers(len(specs)))]
            actions.append(f"{spec.name}({', '.join(self._argument(a.kind) for a in spec.args)})")
        return "; ".join(actions)

    def contains(self, x) -> bool:
        if isinstance(x, (bool, np.bool_)):
            return False
        if isinstance(x, (int, np.integer)):
            return is_action(int(x))
        return x is None or isinstance(x, (str, list, dict))

    def __repr__(self) -> str:
        return f"PlanActionSpace(primitive 0..{NUM_ACTIONS - 1} or a plan over {self.num_blocks} blocks)"

    def __eq__(self, other) -> bool:
        return isinstance(other, PlanActionSpace) and other.num_blocks == self.num_blocks


class PlanMode:
    """Every agent's running plan, and the plan infos of each step."""

    def __init__(self, world, names: Sequence[str]):
        self.executor = PlanExecutor(world, keep_history=False)
        self.names = list(names)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.needs_input: List[bool] = [True] * len(self.names)

    def reset_infos(self, infos: Dict[str, dict]) -> None:
        for info in infos.values():
            info.update(plan_status=DONE, plan_action=None, needs_input=True)

    def joint_action(self, actions: Any, live: Sequence[str], state: State):
        """(int32[N] joint action, per-agent plan infos) for one step of the agents ``live``."""
        check_action_dict(actions, self.index, self.names, "primitive or plan")
        ex = self.executor
        primitives: Dict[int, int] = {}
        infos: Dict[str, dict] = {name: {} for name in self.names}
        for name in live:
            i = self.index[name]
            value = _item(actions.get(name))
            if value is None:
                if self.needs_input[i]:
                    raise ValueError(f"step: {name} has no running plan; give it a primitive (0..4) or a plan")
                continue
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, str, list, dict)):
                raise ValueError(f"step: action for {name!r} must be an int in 0..{NUM_ACTIONS - 1} or a plan "
                                 f"(text or JSON), got {type(value).__name__}")
            if isinstance(value, (int, np.integer)):
                if not 0 <= value < NUM_ACTIONS:
                    raise ValueError(f"step: action for {name!r} must be in 0..{NUM_ACTIONS - 1}, got {value!r}")
                ex.clear(i)
                primitives[i] = int(value)
                continue
            try:
                ex.set_plan(i, value, state)
            except PlanError as err:
                ex.clear(i)
                infos[name]["plan_error"] = err.to_dict()
        joint = self._act(state, infos)
        for i, value in primitives.items():
            joint[i] = value
        self._statuses(infos)
        return joint, infos

    def _act(self, state: State, infos: Dict[str, dict]):
        """The executor's joint action; each agent's info names the action that emitted its primitive."""
        ex = self.executor
        before = len(ex.history)
        ex.keep_history = True
        joint = ex.act(state)
        for record in ex.history[before:]:
            if record.primitive is not None and record.action is not None:
                infos[agent_name(record.agent)]["plan_action"] = str(record.action)
        ex.history.clear()
        ex.keep_history = False
        return joint

    def _statuses(self, infos: Dict[str, dict]) -> None:
        ex = self.executor
        for name in self.names:
            i = self.index[name]
            infos[name].setdefault("plan_action", None)
            status = ex.status(i)
            infos[name]["plan_status"] = status
            if status == FAILED and "plan_error" not in infos[name] and ex.error(i) is not None:
                infos[name]["plan_error"] = ex.error(i).to_dict()

    def add_infos(self, infos: Dict[str, dict], plan_infos: Dict[str, dict], state: State) -> None:
        """The step's plan infos, and whether each agent needs input next, into ``infos``."""
        ahead = self.executor.peek(state)  # does each plan still have something to emit?
        self.needs_input = [status in (DONE, FAILED) for status, _ in ahead]
        for name, info in infos.items():
            info.update(plan_infos[name])
            info["needs_input"] = self.needs_input[self.index[name]]


def _item(value):
    """A 0-d integer array (as some samplers return) as its int; anything else unchanged."""
    if isinstance(value, np.ndarray) and value.shape == () and np.issubdtype(value.dtype, np.integer):
        return value.item()
    return value


def check_action_dict(actions: Any, index: Dict[str, int], names: Sequence[str], what: str) -> None:
    """Refuses actions that are not a dict of known agent names."""
    if not isinstance(actions, dict):
        raise ValueError(f"step: actions must be a dict {{agent name: {what}}}, got {type(actions).__name__}")
    for name in actions:
        if name not in index:
            raise ValueError(f"step: unknown agent {name!r}; agents are {list(names)}")


def primitive_actions(actions: Any, live: Sequence[str], index: Dict[str, int], names: Sequence[str]) -> np.ndarray:
    """int32[N]: the joint action of a primitive-mode step; every live agent needs an int in 0..4."""
    check_action_dict(actions, index, names, "int")
    out = np.zeros((len(names),), np.int32)
    for name in live:
        if name not in actions:
            raise ValueError(f"step: no action for live agent {name!r}; every live agent needs one")
        value = _item(actions[name])
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
            raise ValueError(
                f"step: action for {name!r} must be an int in 0..{NUM_ACTIONS - 1}, got {value!r} "
                f"({type(value).__name__})"
            )
        if not 0 <= value < NUM_ACTIONS:
            raise ValueError(f"step: action for {name!r} must be in 0..{NUM_ACTIONS - 1}, got {value!r}")
        out[index[name]] = value
    return out


__all__ = ["PlanActionSpace", "PlanMode", "check_action_dict", "primitive_actions"]
