"""benchmarks/greedy_failures.py: the frozen-world count on scripted policies, its table, and
its command line's refusals (a trained run end to end: tests/rl/test_rl_baselines.py)."""
from __future__ import annotations

import doctest

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cube_jax
from cube_jax.agents.policies import RandomPolicy
from cube_jax.evaluation.batched import episode_keys
from tests.bench_scripts import load_benchmark


gf = load_benchmark("greedy_failures")


def test_the_examples_in_the_module_hold():
    assert doctest.testmod(gf).failed == 0


class Still:
    """Every agent stays put: the world never changes."""

    name = "still"

    def init(self, key):
        return ()

    def act(self, state, policy_state):
        return jnp.zeros(state.agent_pos.shape[0], jnp.int32), policy_state


def test_a_team_that_never_moves_is_frozen_for_the_whole_episode_and_a_random_one_is_not():
    env = cube_jax.make(scenario="easy")
    keys = episode_keys(0, 6)
    play = jax.jit(lambda policy, k: gf.play(env, policy, k), static_argnums=0)
    success, still, final, _ = play(Still(), keys)
    assert not np.asarray(success).any()
    assert np.asarray(still).tolist() == [env.max_steps] * 6
    start = jax.vmap(env.reset)(keys)[0]
    np.testing.assert_array_equal(final.agent_pos, start.agent_pos)
    success, still, final, _ = play(RandomPolicy(env.num_agents), keys)
    masks = gf.classify(np.asarray(success), np.asarray(still), 20)
    assert masks["failed"].all() and not masks["frozen"].any()  # random walkers keep the world changing
    assert (np.asarray(still) < 20).all()


@pytest.mark.parametrize("argv, message", [
    (["--episodes", "0"], "--episodes must be at least 1, got 0"),
    (["--frozen-steps", "0"], "--frozen-steps must be at least 1, got 0"),
    (["/nonexistent/run"], "/nonexistent/run: not a finished run folder with a checkpoint"),
])
def test_bad_input_exits_naming_the_argument(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        gf.parse_args(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
