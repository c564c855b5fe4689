"""The planners play whole episodes on the JAX environment and deliver every block."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import cube_jax
from cube_jax.symbolic import HeuristicPlanner, TeamPlanner, render_symbolic, run_planner_episode, symbolic_observation
from cube_jax.symbolic.pathing import World
from cube_jax.symbolic.planners import lane_exit_plan, lane_mask


@pytest.fixture(scope="module")
def hard_env():
    return cube_jax.make("hard")


@pytest.mark.parametrize("planner_cls", [HeuristicPlanner, TeamPlanner])
def test_planner_delivers_every_block_of_the_hard_scenario(hard_env, planner_cls):
    # weights 3, 2, 1 with exactly 3 agents: the weight-3 block needs the whole team at once
    result = run_planner_episode(hard_env, planner_cls(hard_env), jax.random.PRNGKey(0))
    assert result["success"] and result["blocks_delivered"] == 3
    assert result["steps"] < hard_env.max_steps


def test_heuristic_pushes_the_block_closest_to_the_goal_with_everyone(hard_env):
    planner = HeuristicPlanner(hard_env, keep_history=True)
    state, _ = hard_env.reset(jax.random.PRNGKey(0))
    actions = planner.act(state)
    assert actions.dtype == np.int32 and actions.shape == (3,)
    # block c (id 2, weight 1, at (5,5)) is 2 pushes from the goal; all three agents head for it
    assert planner.target == 2
    assert {str(planner.executor.current_action(i)) for i in range(3)} == {"move_to_block(2, left)"}
    obs = symbolic_observation(state, 1, planner.executor)
    assert [b["distance_to_goal"] for b in obs["blocks"]] == [3, 5, 2]
    assert "agent 1 move_to_block(2, left) -> " in render_symbolic(obs)


def test_team_planner_splits_the_team(hard_env):
    planner = TeamPlanner(hard_env)
    state, _ = hard_env.reset(jax.random.PRNGKey(0))
    planner.act(state)
    # closest block c (weight 1) gets the nearest agent (2); block a (weight 3) cannot get a
    # full team from the 2 agents left, so they take block b (weight 2) and a waits
    assert planner.assigned == {2: 2, 0: 1, 1: 1}


@pytest.mark.slow
def test_heuristic_completes_a_curriculum_episode():
    env = cube_jax.make(n=2)
    result = run_planner_episode(env, HeuristicPlanner(env), jax.random.PRNGKey(0))
    assert result == {"steps": result["steps"], "blocks_total": 3, "blocks_delivered": 3, "success": True}
    assert result["steps"] < env.max_steps


def test_an_agent_with_nothing_to_do_steps_out_of_the_lane():
    sc = cube_jax.Scenario.from_ascii(
        """
        ........
        ........
        0aa.1...
        .aa.....
        ........
        ........
        ........
        ........
        """
    )
    state = cube_jax.State(
        agent_pos=np.asarray(sc.agents, np.int32),
        block_pos=np.asarray([b[:2] for b in sc.blocks], np.int32),
        block_weight=np.asarray([b[2] for b in sc.blocks], np.int32),
        block_alive=np.ones(1, bool),
        t=np.int32(0),
        key=np.zeros(2, np.uint32),
        grid_size=sc.grid_size,
    )
    world = World.from_state(state)
    ahead = lane_mask(world, [0], behind=0)
    assert ahead[2:4, 1:].all() and not ahead[1].any() and not ahead[2:4, 0].any()
    assert [str(a) for a in lane_exit_plan(world, 1, ahead)] == ["move(up, 1)"]  # row 1 is one step up
    assert lane_exit_plan(world, 0, ahead) is None  # agent 0 is behind the block, on its face
