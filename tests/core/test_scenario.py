"""Scenarios: the ASCII map form, YAML files, named scenarios and validation errors."""
from pathlib import Path

import pytest

import cube_jax
from cube_jax.core.scenario import Scenario, load_scenario, named_scenarios, parse_ascii

ROOT = Path(__file__).resolve().parents[2]

MAP = """
......
0.aa..
1.aa.:
..b..:
......
.....:
"""


def test_ascii_parse_and_print_round_trip():
    sc = Scenario.from_ascii(MAP, name="demo")
    assert sc.grid_size == 6
    assert sc.agents == ((1, 0), (2, 0))
    assert sc.blocks == ((1, 2, 2), (3, 2, 1))
    assert sc.to_ascii() == "\n".join(
        [".....:", "0.aa.:", "1.aa.:", "..b..:", ".....:", ".....:"]
    )
    assert Scenario.from_ascii(sc.to_ascii(), name="demo") == sc


def test_yaml_round_trip(tmp_path):
    sc = Scenario(grid_size=8, agents=[(2, 1), (3, 1)], blocks=[(2, 2, 2)], max_steps=50, name="x")
    path = tmp_path / "x.yaml"
    sc.to_yaml(path)
    assert Scenario.from_yaml(path) == sc


def test_named_scenarios_match_the_papers():
    assert {"easy", "hard"} <= set(named_scenarios())
    easy, hard = load_scenario("easy"), load_scenario("hard")
    assert easy.grid_size == hard.grid_size == 8
    assert sorted(w for _, _, w in easy.blocks) == [1, 1, 1]
    assert sorted(w for _, _, w in hard.blocks) == [1, 2, 3]
    assert len(easy.agents) == 2 and len(hard.agents) == 3


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_scenario_files_load(path):
    sc = load_scenario(str(path))
    assert sc.to_ascii()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(grid_size=8, agents=[(2, 1), (2, 1)], blocks=[(4, 4, 1)]), r"agent 1 at \(2, 1\) overlaps agent 0"),
        (dict(grid_size=8, agents=[(2, 2)], blocks=[(2, 2, 1)]), r"block 0 at \(2, 2\) covers cell \(2, 2\) of agent 0"),
        (dict(grid_size=8, agents=[(0, 0)], blocks=[(2, 2, 2), (3, 3, 1)]), r"block 1 at \(3, 3\) covers cell \(3, 3\) of block 0"),
        (dict(grid_size=8, agents=[(0, 0)], blocks=[(2, 6, 2)]), r"block 0 .* touches the goal column 7"),
        (dict(grid_size=8, agents=[(8, 0)], blocks=[(2, 2, 1)]), r"agent 0 at \(8, 0\) is outside the 8x8 grid"),
        (dict(grid_size=8, agents=[(0, 0)], blocks=[(6, 2, 3)]), r"block 0 \(weight 3\) at \(6, 2\) extends outside"),
        (dict(grid_size=8, agents=[(0, 0)], blocks=[(2, 2, 0)]), r"block 0 at \(2, 2\) has weight 0"),
        (dict(grid_size=8, agents=[], blocks=[(2, 2, 1)]), r"at least one agent"),
        (dict(grid_size=8, agents=[(0, 0)], blocks=[]), r"at least one block"),
        (dict(grid_size=1, agents=[(0, 0)], blocks=[]), r"grid_size must be an integer >= 2"),
        (dict(grid_size=8, agents=[(0, 0, 1)], blocks=[(2, 2, 1)]), r"agents must be a list of \(row, col\) pairs"),
        (dict(grid_size=8, agents=[(0, 0)], blocks=[(2, 2, 1)], max_steps=0), r"max_steps must be an integer >= 1, got 0"),
    ],
)
def test_invalid_scenarios_say_what_and_where(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Scenario(**kwargs)


@pytest.mark.parametrize(
    "text, message",
    [
        ("...\n.a.\n..", r"row 2 has 2 cells"),
        ("...\n.x?\n...", r"unknown character '\?' at \(1, 2\)"),
        ("0..\n0..\n...", r"agent 0 appears twice"),
        ("1..\n...\n...", r"agent ids must be 0..0"),
        ("....\n.aa.\n.a..\n....", r"block 'a' at \(1, 1\) is not a filled square"),
        ("....\n.b..\n....\n....", r"block letters must be a"),
    ],
)
def test_invalid_maps_say_what_and_where(text, message):
    with pytest.raises(ValueError, match=message):
        parse_ascii(text)


def test_bad_yaml_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid_size: 8\nagents: [[0, 0]]\nblocks: [[2, 2, 1]]\nspeed: 3\n")
    with pytest.raises(ValueError, match=r"bad.yaml: unknown field\(s\) \['speed'\]"):
        Scenario.from_yaml(bad)
    bad.write_text("grid_size: 8\nagents: [[0, 0]\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        Scenario.from_yaml(bad)
    bad.write_text("grid_size: 8\nagents: [[0, 0]]\n")
    with pytest.raises(ValueError, match="missing field 'blocks'"):
        Scenario.from_yaml(bad)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: cube_jax.make(n=0), "n must be an integer >= 1"),
        (lambda: cube_jax.make(), "give exactly one of"),
        (lambda: cube_jax.make("easy", n=2), "give exactly one of"),
        (lambda: cube_jax.make("nowhere"), "unknown scenario 'nowhere'"),
        (lambda: cube_jax.make(scenario="missing.yaml"), "does not exist"),
        (lambda: cube_jax.make("easy", observation="pixels"), "observation: got 'pixels'"),
        (lambda: cube_jax.make("easy", num_agents=5), "num_agents=5 but it places 2 agents"),
        (lambda: cube_jax.make("easy", pool_size=4), "pool_size applies to the n-curriculum"),
        (lambda: cube_jax.make(n=2, max_steps=0), "max_steps must be an integer >= 1"),
    ],
)
def test_make_rejects_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_composite_case_study_behaves_as_documented():
    import jax
    import jax.numpy as jnp

    env = cube_jax.make(scenario=str(ROOT / "configs" / "scenarios" / "composite.yaml"))
    start, _ = env.reset(jax.random.PRNGKey(0))
    moved, _ = env.step(start, jnp.full((5,), cube_jax.RIGHT))
    assert [b[:2] for b in cube_jax.layout(moved)["blocks"]] == [(2, 4), (4, 4), (2, 5)]
    for lazy in range(5):
        actions = jnp.full((5,), cube_jax.RIGHT).at[lazy].set(cube_jax.STAY)
        stuck, _ = env.step(start, actions)
        assert cube_jax.layout(stuck)["blocks"] == cube_jax.layout(start)["blocks"], f"agent {lazy} idle"
