"""The symbolic layer: actions and plans (cube paper, Table 1), their executors, the
symbolic observation (section 2.3). Semantics: docs/symbolic.md. The planners that choose
plans are agents: :mod:`cube_jax.agents.planners`."""
from cube_jax.symbolic.actions import ACTION_SPECS, FACES, PlanError, SymbolicAction, check_plan, make_action
from cube_jax.symbolic.actions import parse_plan, parse_plan_json, plan_json_schema, plan_to_text
from cube_jax.symbolic.executor import HistoryRecord, PlanExecutor
from cube_jax.symbolic.observation import render_symbolic, symbolic_observation

__all__ = [
    "ACTION_SPECS",
    "FACES",
    "HistoryRecord",
    "PlanError",
    "PlanExecutor",
    "SymbolicAction",
    "check_plan",
    "make_action",
    "parse_plan",
    "parse_plan_json",
    "plan_json_schema",
    "plan_to_text",
    "render_symbolic",
    "symbolic_observation",
]

# The JAX side: concepts (Table 2) and distance fields as pure functions of a State, the
# array plan executor and the batched heuristic policy (jit/vmap-able).
from cube_jax.symbolic.concepts import (
    DOWN_FACE,
    FACE_IDS,
    FACE_NAMES,
    LEFT_FACE,
    RIGHT_FACE,
    UP_FACE,
    all_aligned_positions,
    block_progress,
    blocked,
    count_aligned_agents,
    delivered,
    get_distance,
    is_aligned_with_block,
    quorum_deficit,
    quorum_status,
)
from cube_jax.symbolic.distance import distance_field, next_action
from cube_jax.symbolic.jax_executor import ExecutorState, compile_plans, executor_step, init_executor, set_plans
from cube_jax.symbolic.jax_heuristic import heuristic_policy

__all__ += [
    "DOWN_FACE",
    "ExecutorState",
    "FACE_IDS",
    "FACE_NAMES",
    "LEFT_FACE",
    "RIGHT_FACE",
    "UP_FACE",
    "all_aligned_positions",
    "block_progress",
    "blocked",
    "compile_plans",
    "count_aligned_agents",
    "delivered",
    "distance_field",
    "executor_step",
    "get_distance",
    "heuristic_policy",
    "init_executor",
    "is_aligned_with_block",
    "next_action",
    "quorum_deficit",
    "quorum_status",
    "set_plans",
]

# The shared vocabulary (faces, statuses, error kinds, action codes, geometry rules).
from cube_jax.symbolic.vocabulary import ErrorKind, Status, goal_distance  # noqa: E402

__all__ += ["ErrorKind", "Status", "goal_distance"]
