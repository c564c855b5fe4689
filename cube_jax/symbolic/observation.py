"""The symbolic observation of the cube paper (section 2.3) and its text form for prompts.

Each agent gets a plain dictionary: grid size, every agent's position, every block's id,
weight, position and distance to the goal column, and the history of symbolic actions
with the primitive each emitted and its status per step.

>>> import jax, cube_jax
>>> env = cube_jax.make("easy")
>>> state, _ = env.reset(jax.random.PRNGKey(0))
>>> obs = symbolic_observation(state, 0)
>>> obs["blocks"][0]
{'id': 0, 'weight': 1, 'position': [1, 2], 'distance_to_goal': 5, 'delivered': False}
>>> print(render_symbolic(obs).splitlines()[0])
t=0 grid=8x8 goal=column 7 you=agent 0 at (2, 0)
"""
from __future__ import annotations

from typing import Iterable, Optional, Union

import numpy as np

from cube_jax.core.types import ACTION_NAMES
from cube_jax.symbolic.executor import HistoryRecord, PlanExecutor
from cube_jax.symbolic.vocabulary import goal_distance


def distance_to_goal(grid_size: int, col: int, weight: int) -> int:
    """Right pushes until a block with left column ``col`` touches the goal column K-1
    (``vocabulary.goal_distance`` of an alive block, as a Python int)."""
    return int(goal_distance(grid_size, col, weight))


def symbolic_observation(
    state, agent_id: int, history: Union[PlanExecutor, Iterable[HistoryRecord], None] = None
) -> dict:
    """Agent ``agent_id``'s symbolic view of one (unbatched) state.

    ``history`` is a :class:`PlanExecutor` (its history is used) or a list of
    :class:`HistoryRecord`; records of every agent are included, oldest first.
    """
    agent_pos = np.asarray(state.agent_pos)
    if agent_pos.ndim != 2:
        raise ValueError(f"symbolic_observation: expected one environment's state, got agent_pos of shape {agent_pos.shape}")
    n = agent_pos.shape[0]
    if not 0 <= agent_id < n:
        raise ValueError(f"symbolic_observation: agent_id must be 0..{n - 1}, got {agent_id!r}")
    k = int(state.grid_size)
    block_pos = np.asarray(state.block_pos)
    weight = np.asarray(state.block_weight)
    alive = np.asarray(state.block_alive)
    records = history.history if isinstance(history, PlanExecutor) else list(history or [])
    return {
        "t": int(state.t),
        "agent_id": int(agent_id),
        "grid_size": k,
        "goal_column": k - 1,
        "agents": [{"id": i, "position": [int(r), int(c)]} for i, (r, c) in enumerate(agent_pos)],
        "blocks": [
            {
                "id": j,
                "weight": int(weight[j]),
                "position": [int(block_pos[j, 0]), int(block_pos[j, 1])],
                "distance_to_goal": int(goal_distance(k, int(block_pos[j, 1]), int(weight[j]), bool(alive[j]))),
                "delivered": not bool(alive[j]),
            }
            for j in range(len(weight))
        ],
        "history": [r.to_dict() for r in records],
    }


def _primitive_name(primitive: Optional[int]) -> str:
    return "-" if primitive is None else ACTION_NAMES[primitive]


def render_symbolic(obs: dict, max_history: int = 20) -> str:
    """Compact text of a symbolic observation: a header, one line per agent and block, and the
    last ``max_history`` history records."""
    me = obs["agents"][obs["agent_id"]]["position"]
    lines = [f"t={obs['t']} grid={obs['grid_size']}x{obs['grid_size']} goal=column {obs['goal_column']} "
             f"you=agent {obs['agent_id']} at ({me[0]}, {me[1]})"]
    lines.append("agents: " + " ".join(f"{a['id']}@({a['position'][0]},{a['position'][1]})" for a in obs["agents"]))
    for b in obs["blocks"]:
        where = "delivered" if b["delivered"] else (
            f"at ({b['position'][0]},{b['position'][1]}) distance {b['distance_to_goal']}")
        lines.append(f"block {b['id']} weight {b['weight']} {where}")
    history = obs["history"][-max_history:] if max_history else []
    if history:
        lines.append(f"history (last {len(history)} of {len(obs['history'])}):")
        for r in history:
            error = f" ({r['error']['kind']}: {r['error']['message']})" if r["error"] else ""
            lines.append(f"  t={r['t']} agent {r['agent']} {r['action'] or 'no action'} -> "
                         f"{_primitive_name(r['primitive'])} {r['status']}{error}")
    return "\n".join(lines)
