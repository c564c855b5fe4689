"""The planners as agents: whole episodes in the CPU loop, their first decisions, and the
batched JAX heuristic taking the same decisions at the same steps."""
from __future__ import annotations

import io
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cube_jax
from cube_jax.agents import heuristic_team, team_planner_team
from cube_jax.agents.planners import lane_exit_plan, lane_mask
from cube_jax.runtime import run_episode
from cube_jax.trace import TraceWriter
from cube_jax.symbolic import render_symbolic, symbolic_observation
from cube_jax.symbolic.jax_heuristic import heuristic_policy
from cube_jax.symbolic.pathing import World


@pytest.fixture(scope="module")
def hard_env():
    return cube_jax.make("hard")


def trace_of(env, agents, seed):
    buffer = io.StringIO()
    result = run_episode(env, agents, seed=seed, trace=TraceWriter(buffer))
    return result, [json.loads(line) for line in buffer.getvalue().splitlines()]


@pytest.mark.parametrize("team", [heuristic_team, team_planner_team], ids=["heuristic", "team"])
def test_planner_delivers_every_block_of_the_hard_scenario(hard_env, team):
    # weights 3, 2, 1 with exactly 3 agents: the weight-3 block needs the whole team at once
    result = run_episode(hard_env, team(hard_env), seed=0)
    assert result.success and result.blocks_delivered == 3
    assert result.steps < hard_env.max_steps


def test_heuristic_pushes_the_block_closest_to_the_goal_with_everyone(hard_env):
    _, records = trace_of(hard_env, heuristic_team(hard_env), 0)
    first = [r for r in records if r["type"] == "plan" and r["t"] == 0]
    # block c (id 2, weight 1, at (5,5)) is 2 pushes from the goal; all three agents head for it
    assert {r["spec"] for r in first} == {"push_block(block#2)"}
    assert first[0]["actions"] == ["move_to_block(2, left)", "rendezvous(2, left, 1, 32)", "push_block(2, 3)"]
    state, _ = hard_env.reset(jax.random.PRNGKey(0))
    obs = symbolic_observation(state, 1)
    assert [b["distance_to_goal"] for b in obs["blocks"]] == [3, 5, 2]
    assert "block 2 weight 1 at (5,5) distance 2" in render_symbolic(obs)


def test_team_planner_splits_the_team(hard_env):
    _, records = trace_of(hard_env, team_planner_team(hard_env), 0)
    first = {r["agent"]: r["spec"] for r in records if r["type"] == "plan" and r["t"] == 0}
    # closest block c (weight 1) gets the nearest agent (2); block a (weight 3) cannot get a
    # full team from the 2 agents left, so they take block b (weight 2), which c still
    # blocks: they gather at its face while c goes
    assert first == {"agent_0": "gather(block#1)", "agent_1": "gather(block#1)",
                     "agent_2": "push_block(block#2)"}


@pytest.mark.slow
def test_heuristic_completes_a_curriculum_episode():
    env = cube_jax.make(n=2)
    result = run_episode(env, heuristic_team(env), seed=0)
    assert (result.blocks_total, result.blocks_delivered, result.success) == (3, 3, True)
    assert result.steps < env.max_steps


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


@pytest.fixture(scope="module")
def jax_heuristics():
    """One jitted JAX heuristic per world shape, shared by the parity runs."""
    cache = {}

    def get(env):
        key = env.cfg
        if key not in cache:
            policy, initial = heuristic_policy(env)
            cache[key] = (jax.jit(policy), initial)
        return cache[key]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("world, seeds", [("hard", [0, 1]), ("n4", [0, 2, 5])])
def test_jax_heuristic_takes_the_cpu_agents_decisions(world, seeds, jax_heuristics):
    env = cube_jax.make(n=4) if world == "n4" else cube_jax.make(world)
    policy, initial = jax_heuristics(env)
    for seed in seeds:
        result, records = trace_of(env, heuristic_team(env), seed)
        assert result.success
        state, _ = env.reset(jax.random.PRNGKey(seed))
        policy_state = initial
        for step in (r for r in records if r["type"] == "step"):
            cpu = [step["actions"][f"agent_{i}"] for i in range(env.num_agents)]
            actions, policy_state = policy(state, policy_state)
            assert np.asarray(actions).tolist() == cpu, f"seed {seed} t {step['t']}\n{env.render(state)}"
            state, _ = env.step(state, jnp.asarray(cpu))
