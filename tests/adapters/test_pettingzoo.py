"""The PettingZoo adapter: the upstream conformance tests, whole-episode determinism,
episode end, action checking, and agreement with the JAX world step by step.

Worlds are kept to three compiled shapes ("easy", "hard", the n=2 curriculum) plus one
one-agent scenario that is delivered in a single push.
"""
from __future__ import annotations

import doctest
import importlib

import gymnasium
import jax
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test, render_test
from pettingzoo.utils.conversions import parallel_to_aec

import cube_jax
import cube_jax.adapters.pettingzoo
from cube_jax.adapters.pettingzoo import CubeParallelEnv
from cube_jax.core.scenario import parse_ascii
from cube_jax.core.types import RIGHT, STAY

# pettingzoo.test re-exports a function under the module's name; load the module itself.
pz_state_test = importlib.import_module("pettingzoo.test.state_test")

def build(name: str, **kwargs) -> CubeParallelEnv:
    if name == "n2":
        return cube_jax.parallel_env(n=2, **kwargs)
    return cube_jax.parallel_env(name, **kwargs)


def random_actions(env: CubeParallelEnv, rng: np.random.Generator) -> dict:
    return {agent: int(rng.integers(0, 5)) for agent in env.agents}


# One agent behind one weight-1 block next to the goal column: RIGHT delivers it.
ONE_PUSH = cube_jax.Scenario(grid_size=8, agents=[(3, 5)], blocks=[(3, 6, 1)], max_steps=20, name="one-push")


# -- upstream conformance --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["easy", "hard", "n2"])
def test_parallel_api_test_passes(name, recwarn):
    # 150 cycles see "easy" and "hard" to their 100-step truncation; n=2 runs 240 steps,
    # covered to its end by the determinism test.
    parallel_api_test(build(name), num_cycles=150)
    # The upstream test reports contract breaches it tolerates as warnings.
    assert [str(w.message) for w in recwarn if "parallel_test" in w.filename] == []


def test_render_test_passes_for_every_mode(capsys):
    def is_map_of_easy(text):
        grid_size, agents, blocks = parse_ascii(text)
        return grid_size == 8 and len(agents) == 2 and len(blocks) <= 3

    render_test(
        lambda render_mode=None: parallel_to_aec(CubeParallelEnv("easy", render_mode=render_mode)),
        custom_tests={"ansi": is_map_of_easy},
    )
    printed = capsys.readouterr().out
    assert "0" in printed and ":" in printed  # human mode printed maps with agent 0 and the goal column


def test_parallel_seed_test_passes():
    parallel_seed_test(lambda: build("hard"))


def test_state_test_passes():
    pz_state_test.test_parallel_env(build("easy"), seed=3)


def test_docstring_example_runs():
    assert doctest.testmod(cube_jax.adapters.pettingzoo).failed == 0


# -- determinism -------------------------------------------------------------------------------
def run_episode(env: CubeParallelEnv, seed: int, action_seed: int) -> list:
    """Every output of one whole episode from reset(seed) under seeded random actions."""
    rng = np.random.default_rng(action_seed)
    obs, infos = env.reset(seed=seed)
    trace = [(obs, infos)]
    while env.agents:
        trace.append(env.step(random_actions(env, rng)))
    return trace


def assert_same_trace(trace1: list, trace2: list) -> None:
    assert len(trace1) == len(trace2)
    for t, (out1, out2) in enumerate(zip(trace1, trace2)):
        for d1, d2 in zip(out1, out2):
            assert d1.keys() == d2.keys(), f"step {t}"
            for agent in d1:
                if isinstance(d1[agent], np.ndarray):
                    np.testing.assert_array_equal(d1[agent], d2[agent], err_msg=f"step {t} {agent}")
                else:
                    assert d1[agent] == d2[agent], f"step {t} {agent}"


@pytest.mark.parametrize("name", ["hard", "n2"])
def test_same_seed_gives_the_same_whole_episode(name):
    env1, env2 = build(name), build(name)
    trace1 = run_episode(env1, seed=7, action_seed=11)
    trace2 = run_episode(env2, seed=7, action_seed=11)
    assert len(trace1) == env1.world.max_steps + 1  # random play does not finish, so it runs to truncation
    assert_same_trace(trace1, trace2)
    assert env1.agents == [] and env2.agents == []


def test_unseeded_resets_continue_the_seeded_stream():
    env1, env2 = build("n2"), build("n2")
    env1.reset(seed=5)
    env2.reset(seed=5)
    for _ in range(3):
        layout1 = cube_jax.layout(env1.jax_state)
        assert layout1 == cube_jax.layout(env2.jax_state)
        env1.reset()
        env2.reset()
        assert cube_jax.layout(env1.jax_state) != layout1  # a fresh curriculum layout each episode


def test_different_seeds_give_different_curriculum_layouts():
    env = build("n2")
    env.reset(seed=0)
    first = cube_jax.layout(env.jax_state)
    env.reset(seed=1)
    assert cube_jax.layout(env.jax_state) != first
    env.reset(seed=0)
    assert cube_jax.layout(env.jax_state) == first


# -- episode end ---------------------------------------------------------------------------------
def test_delivering_the_last_block_terminates_and_empties_agents():
    env = CubeParallelEnv(scenario=ONE_PUSH)
    env.reset(seed=0)
    obs, rewards, terms, truncs, infos = env.step({"agent_0": RIGHT})
    assert terms == {"agent_0": True} and truncs == {"agent_0": False}
    assert rewards["agent_0"] == pytest.approx(-0.01 + 1.0)
    assert infos["agent_0"] == {
        "engaged": True,
        "moved": True,
        "blocks_delivered": (0,),
        "delivered_weight": 1,
        "t": 1,
    }
    assert set(obs) == {"agent_0"}
    assert env.agents == []
    with pytest.raises(RuntimeError, match="no live agents"):
        env.step({"agent_0": STAY})
    env.reset(seed=0)
    assert env.agents == ["agent_0"]


def test_running_out_of_steps_truncates_and_empties_agents():
    env = build("easy")
    env.reset(seed=0)
    for t in range(1, env.world.max_steps + 1):
        assert env.agents == ["agent_0", "agent_1"]
        _, rewards, terms, truncs, infos = env.step({"agent_0": STAY, "agent_1": STAY})
        assert rewards == {"agent_0": pytest.approx(-0.01), "agent_1": pytest.approx(-0.01)}
        assert infos["agent_1"]["t"] == t and infos["agent_1"]["moved"] is False
    assert terms == {"agent_0": False, "agent_1": False}
    assert truncs == {"agent_0": True, "agent_1": True}
    assert env.agents == []


def test_step_before_reset_is_refused():
    with pytest.raises(RuntimeError, match=r"no live agents.*call reset\(\) first"):
        build("easy").step({"agent_0": 0, "agent_1": 0})


# -- action checking -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def easy_env():
    env = build("easy")
    env.reset(seed=0)
    return env


@pytest.mark.parametrize(
    "actions, match",
    [
        ({"agent_0": 1}, "no action for live agent 'agent_1'"),
        ({"agent_0": 1, "agent_1": 1, "agent_7": 0}, "unknown agent 'agent_7'"),
        ({"agent_0": 1, "agent_1": 5}, r"'agent_1' must be in 0\.\.4, got 5"),
        ({"agent_0": -1, "agent_1": 0}, r"'agent_0' must be in 0\.\.4, got -1"),
        ({"agent_0": 1.0, "agent_1": 0}, r"'agent_0' must be an int in 0\.\.4, got 1\.0"),
        ({"agent_0": 0, "agent_1": "UP"}, r"'agent_1' must be an int in 0\.\.4, got 'UP'"),
        ({"agent_0": True, "agent_1": 0}, r"'agent_0' must be an int in 0\.\.4, got True"),
        ({"agent_0": np.float32(2), "agent_1": 0}, r"'agent_0' must be an int in 0\.\.4, got np\.float32\(2\.0\)"),
        ([1, 1], "actions must be a dict"),
    ],
)
def test_bad_actions_raise_value_error_naming_agent_and_value(easy_env, actions, match):
    before = cube_jax.layout(easy_env.jax_state)
    with pytest.raises(ValueError, match=match):
        easy_env.step(actions)
    assert cube_jax.layout(easy_env.jax_state) == before  # a refused step changes nothing


def test_numpy_integer_actions_are_accepted(easy_env):
    _, _, _, _, infos = easy_env.step({"agent_0": np.int64(0), "agent_1": np.array(0, np.int8)})
    assert infos["agent_0"]["moved"] is False


def test_bad_seed_and_render_mode_are_refused():
    for seed in (1.5, -1, 2**32, "0"):
        with pytest.raises(ValueError, match=r"seed must be None or an integer in 0\.\.4294967295"):
            build("easy").reset(seed=seed)
    with pytest.raises(ValueError, match="render_mode"):
        build("easy", render_mode="video")
    with pytest.raises(ValueError, match="unknown agent 'agent_2'"):
        build("easy").action_space("agent_2")


# -- agreement with the JAX world ------------------------------------------------------------------
def test_each_step_matches_the_jax_world_for_the_same_actions():
    env = build("hard")
    world = env.world
    obs, _ = env.reset(seed=3)
    state, ts = world.reset(jax.random.PRNGKey(3))
    rng = np.random.default_rng(0)
    for t in range(60):
        assert cube_jax.layout(env.jax_state) == cube_jax.layout(state), f"step {t}"
        host = jax.device_get(ts)
        for i, agent in enumerate(env.possible_agents):
            np.testing.assert_array_equal(obs[agent], host.observation[i])
        actions = random_actions(env, rng)
        obs, rewards, terms, truncs, infos = env.step(actions)
        state, ts = world.step(state, np.array([actions[a] for a in env.possible_agents], np.int32))
        host = jax.device_get(ts)
        for i, agent in enumerate(env.possible_agents):
            assert type(rewards[agent]) is float and type(terms[agent]) is bool and type(truncs[agent]) is bool
            assert obs[agent].dtype == np.float32
            assert rewards[agent] == float(host.reward[i])
            assert terms[agent] == bool(host.terminated) and truncs[agent] == bool(host.truncated)
            assert infos[agent]["engaged"] == bool(host.events.engaged[i])
            assert infos[agent]["moved"] == bool(host.events.agent_moved[i])
    np.testing.assert_array_equal(env.state(), grid_from_layout(cube_jax.layout(state), world.grid_size))


def grid_from_layout(lay: dict, k: int) -> np.ndarray:
    """float32[K, K, 5] the five channels of DYNAMICS.md, written cell by cell."""
    grid = np.zeros((k, k, 5), np.float32)
    grid[:, k - 1, 2] = 1.0
    for i, (r, c) in enumerate(lay["agents"]):
        grid[r, c, 0], grid[r, c, 3] = 1.0, i + 1
    for j, (r, c, w, alive) in enumerate(lay["blocks"]):
        if alive:
            grid[r : r + w, c : c + w, 1], grid[r : r + w, c : c + w, 4] = w, j + 1
    return grid


# -- spaces, state and render ------------------------------------------------------------------------
def test_spaces_are_fixed_objects_that_contain_what_the_env_returns(easy_env):
    obs, _ = easy_env.reset(seed=1)
    for agent in easy_env.possible_agents:
        space = easy_env.observation_space(agent)
        assert space is easy_env.observation_space(agent)
        assert space.shape == easy_env.world.observation_shape[1:] and space.dtype == np.float32
        assert space.contains(obs[agent])
        assert easy_env.action_space(agent) is easy_env.action_space(agent)
        assert easy_env.action_space(agent) == gymnasium.spaces.Discrete(5)
    state = easy_env.state()
    assert state.shape == (8, 8, 5) and state.dtype == np.float32
    assert easy_env.state_space.contains(state)
    assert state[:, 7, 2].tolist() == [1.0] * 8  # goal column channel


def test_render_modes():
    with pytest.warns(UserWarning, match="render_mode"):
        env = build("easy")
        env.reset(seed=0)
        assert env.render() is None
    rgb = build("easy", render_mode="rgb_array")
    rgb.reset(seed=0)
    frame = rgb.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    ansi = build("easy", render_mode="ansi")
    ansi.reset(seed=0)
    assert ansi.render() == ansi.world.render(ansi.jax_state)
    ansi.close()
    with pytest.raises(RuntimeError, match="call reset"):
        ansi.render()


# --- plan mode ----------------------------------------------------------------------------------


def test_parallel_api_test_passes_with_plans(recwarn):
    env = build("hard", plans=True)
    parallel_api_test(env, num_cycles=200)
    assert isinstance(env.action_space("agent_0"), cube_jax.adapters.pettingzoo.PlanActionSpace)


def test_a_running_plan_needs_no_input_until_it_ends():
    env = build("easy", plans=True)
    obs, infos = env.reset(seed=0)
    assert all(info["needs_input"] for info in infos.values())
    _, _, _, _, infos = env.step({"agent_0": "move(down, 2)", "agent_1": '[{"action": "idle", "args": [3]}]'})
    assert (infos["agent_0"]["plan_action"], infos["agent_0"]["plan_status"]) == ("move(down, 2)", "started")
    assert not infos["agent_0"]["needs_input"] and not infos["agent_1"]["needs_input"]
    _, _, _, _, infos = env.step({})  # both plans keep running
    assert infos["agent_0"]["plan_status"] == "in_progress" and infos["agent_0"]["needs_input"]
    assert not infos["agent_1"]["needs_input"]
    assert cube_jax.layout(env.jax_state)["agents"][0] == (4, 0)  # two steps down from (2, 0)
    with pytest.raises(ValueError, match="agent_0 has no running plan"):
        env.step({"agent_1": None})


def test_a_bad_plan_is_reported_in_info_and_the_episode_goes_on():
    env = build("easy", plans=True)
    env.reset(seed=0)
    before = cube_jax.layout(env.jax_state)["agents"]
    _, rewards, terminations, _, infos = env.step({"agent_0": "fly(up)", "agent_1": "push_block(1)"})
    assert infos["agent_0"]["plan_error"]["kind"] == "plan_check" and "unknown action 'fly'" in \
        infos["agent_0"]["plan_error"]["message"]
    assert infos["agent_1"]["plan_error"]["message"] == "push_block(block, steps) takes 2 argument(s), got 1"
    assert cube_jax.layout(env.jax_state)["agents"] == before and env.agents  # they stayed; the episode goes on
    assert infos["agent_0"]["needs_input"] and infos["agent_0"]["plan_status"] == "done"


def test_a_primitive_replaces_a_running_plan():
    env = build("easy", plans=True)
    env.reset(seed=0)
    env.step({"agent_0": "idle(5)", "agent_1": "idle(5)"})
    _, _, _, _, infos = env.step({"agent_0": 1})  # UP
    assert infos["agent_0"]["plan_action"] is None and infos["agent_0"]["needs_input"]
    assert infos["agent_1"]["plan_action"] == "idle(5)"
    assert cube_jax.layout(env.jax_state)["agents"][0] == (1, 0)


def test_plan_mode_repeats_whole_episodes_under_a_seed():
    def run():
        env = build("hard", plans=True)
        for k, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(5 + k)
        obs, _ = env.reset(seed=11)
        trail = []
        while env.agents:
            actions = {a: env.action_space(a).sample() for a in env.agents}
            obs, rewards, _, _, infos = env.step(actions)
            trail.append((cube_jax.layout(env.jax_state), {a: infos[a].get("plan_error") for a in infos}))
        return trail

    assert run() == run()
