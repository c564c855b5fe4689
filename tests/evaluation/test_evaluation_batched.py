"""The batched rollout: frozen finished episodes, teams of batched policies, films."""
from __future__ import annotations

import chex
import jax
import numpy as np
import pytest

import cube_jax
from cube_jax.agents import HeuristicPolicy, RandomPolicy, TeamPolicy
from cube_jax.evaluation import evaluate, rollout, summarize
from cube_jax.evaluation.batched import episode_keys


@pytest.fixture(scope="module")
def easy():
    return cube_jax.make("easy")


def test_heuristic_solves_easy_and_episodes_freeze_when_done(easy):
    result = evaluate(easy, HeuristicPolicy(easy), episodes=3, seed=5, progress=False, film=True)
    assert result["success_rate"] == 1.0
    assert [e["seed"] for e in result["episodes"]] == [5, 6, 7]
    for e in result["episodes"]:
        assert (e["blocks_delivered"], e["blocks_total"], e["weight_delivered"], e["weight_total"]) == (3, 3, 3, 3)
        # a delivery pays 1 per weight, shared by two agents; every step costs 0.01
        assert e["return"] == pytest.approx(3 * 0.5 - 0.01 * e["steps"], abs=1e-4)
    states, done = result["film"]
    steps = result["episodes"][0]["steps"]
    # the film starts at reset and shows the finished episode frozen afterwards
    assert int(states.t[0]) == 0 and int(states.t[steps]) == steps
    assert not done[:steps].any() and done[steps:].all()
    assert (np.asarray(states.block_alive[steps:]) == False).all()  # noqa: E712


def test_a_team_takes_each_agents_action_from_its_member(easy):
    team = TeamPolicy([HeuristicPolicy(easy), RandomPolicy(2)], assignment=(0, 1))
    state, _ = easy.reset(jax.random.PRNGKey(0))
    heuristic_actions, _ = HeuristicPolicy(easy).act(state, HeuristicPolicy(easy).init(None))
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    random_actions, _ = RandomPolicy(2).act(state, keys[1])
    actions, _ = jax.jit(team.act)(state, team.init(jax.random.PRNGKey(1)))
    assert int(actions[0]) == int(heuristic_actions[0]) and int(actions[1]) == int(random_actions[1])
    assert team.name == "heuristic,random"
    with pytest.raises(ValueError, match="member 2"):
        TeamPolicy([RandomPolicy(2)], assignment=(0, 2))


def test_rollout_is_pure_and_jits_inside_a_program(easy):
    policy = RandomPolicy(2)

    @jax.jit
    def mean_success(keys):
        stats, _ = rollout(easy, policy, keys, 30)
        return summarize(stats)

    summary = mean_success(episode_keys(0, 8))
    again = mean_success(episode_keys(0, 8))
    assert float(summary["mean_steps"]) <= 30
    chex.assert_trees_all_equal(summary, again)
    chex.assert_shape(summary["block_delivery_rate"], (3,))
