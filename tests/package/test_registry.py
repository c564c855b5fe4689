"""The registry of agent kinds, and teams read from specs and team files through it."""
import json

import pytest

import cube_jax
from cube_jax import registry
from cube_jax.agents import Agent, Decision, idle_plan
from cube_jax.teams import TeamSpecError, is_batched, parse_team, read_team_file, team_agents, team_from_entries


def test_every_kind_is_declared_once_with_what_callers_need():
    table = {k.name: (k.batched is not None, k.argument, k.built_by) for k in registry.kinds()}
    assert table == {
        "heuristic": (True, None, None),
        "team": (False, None, None),
        "negotiator": (False, None, None),
        "random": (True, None, None),
        "policy": (True, "checkpoint folder", None),
        "builtin": (True, "name", None),
        "llm": (False, "model[@base URL]", "cube-jax llm and cube-jax serve"),
        "human": (False, None, "cube-jax serve"),
    }
    assert all(k.description for k in registry.kinds())
    assert registry.names(provided=["human", "llm"]) == ("heuristic", "team", "negotiator", "random", "policy",
                                                         "builtin", "llm", "human")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.AgentKind("team", "again", build=lambda env, m, ids: []))


class StayAgent(Agent):
    kind = "stay"

    async def decide(self, ctx):
        return Decision(plan=idle_plan(1, "stay"))


def test_a_new_kind_is_one_registration():
    registry.register(registry.AgentKind("stay", "never moves", build=lambda env, member, ids: [StayAgent() for _ in ids]))
    try:
        env = cube_jax.make("hard")
        members = parse_team("stay,heuristic,stay", env.num_agents)
        assert [a.kind for a in team_agents(env, members)] == ["stay", "heuristic", "stay"]
        assert not is_batched(members)
    finally:
        registry._KINDS.pop("stay")


@pytest.mark.parametrize(
    "spec, options",
    [
        ("llm:qwen", {"model": "qwen"}),
        ("llm:qwen@http://127.0.0.1:8001/v1", {"model": "qwen", "base_url": "http://127.0.0.1:8001/v1"}),
        ("llm:@https://host/v1", {"base_url": "https://host/v1"}),
        ("llm:org/model@v2@http://h:1/v1", {"model": "org/model@v2", "base_url": "http://h:1/v1"}),
    ],
)
def test_an_llm_entry_names_its_model_and_server(spec, options):
    (member,) = set(parse_team(spec, 2, kinds=registry.names(provided=["llm"])))
    assert member.kind == "llm" and dict(member.options) == options


@pytest.mark.parametrize(
    "spec, kinds, message",
    [
        ("llm,heuristic", None, "team: entry 0: kind 'llm' plays only in cube-jax llm and cube-jax serve; kinds here "
                                "are heuristic, team, negotiator, random, policy"),
        ("heuristic,llm:a@b", ("heuristic", "llm"), "team: entry 1 ('llm:a@b'): after '@' comes the server's base URL"),
        ("heuristic,random:3", None, "team: entry 1: random takes no argument, got 'random:3'"),
        ("heuristic,policy", None, "team: entry 1 needs a checkpoint folder: policy:<checkpoint folder>"),
    ],
)
def test_bad_entries_are_named(spec, kinds, message):
    with pytest.raises(TeamSpecError) as info:
        parse_team(spec, 2, kinds=kinds)
    assert str(info.value).startswith(message), str(info.value)


def test_a_team_file_in_yaml_or_json_gives_each_member_its_settings(tmp_path):
    entries = [{"kind": "llm", "model": "qwen", "base_url": "http://127.0.0.1:8001/v1", "api_key_env": "QWEN_KEY",
                "temperature": 0.1, "max_tokens": 256, "timeout": 30}, "heuristic", {"kind": "policy", "checkpoint": "runs/x"}]
    kinds = registry.names(provided=["llm"])
    (tmp_path / "team.json").write_text(json.dumps({"team": entries}))
    (tmp_path / "team.yaml").write_text("team:\n  - {kind: llm, model: qwen, base_url: 'http://127.0.0.1:8001/v1', "
                                        "api_key_env: QWEN_KEY, temperature: 0.1, max_tokens: 256, timeout: 30}\n"
                                        "  - heuristic\n  - {kind: policy, checkpoint: runs/x}\n")
    for name in ("team.json", "team.yaml"):
        members = read_team_file(tmp_path / name, 3, kinds=kinds)
        assert [m.to_dict() for m in members] == [entries[0], {"kind": "heuristic"}, entries[2]]
    assert team_from_entries(["random"], 3) == parse_team("random", 3)


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"kind": "llm", "temperature": 2.5}, "team: entry 0: temperature: must be in 0..2, got 2.5"),
        ({"kind": "llm", "timeout": True}, "team: entry 0: timeout: expected a finite number, got True"),
        ({"kind": "llm", "base_url": "127.0.0.1:8000"}, "team: entry 0: base_url: expected a base URL"),
        ({"kind": "llm", "api_key_env": "MY-KEY"}, "team: entry 0: api_key_env: expected the name of an environment"),
        ({"kind": "heuristic", "model": "x"}, "team: entry 0: heuristic has no setting 'model'; its settings: none"),
        ({"kind": "robot"}, "team: entry 0 has unknown kind 'robot'"),
    ],
)
def test_bad_team_file_entries_are_named(entry, message):
    with pytest.raises(TeamSpecError) as info:
        team_from_entries([entry], 2, kinds=registry.names(provided=["llm"]))
    assert str(info.value).startswith(message), str(info.value)


def test_the_registry_builds_an_llm_member_from_the_llm_package(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    env = cube_jax.make("hard")
    members = parse_team("llm:qwen@http://127.0.0.1:8001/v1,heuristic,llm:qwen@http://127.0.0.1:8001/v1",
                         env.num_agents, kinds=registry.names(provided=["llm"]))
    agents = team_agents(env, members)
    assert [a.kind for a in agents] == ["llm", "heuristic", "llm"]
    assert {(a.client.model, a.client.base_url) for a in agents[::2]} == {("qwen", "http://127.0.0.1:8001/v1")}
    assert agents[0].client is agents[2].client  # one client per model and server


@pytest.mark.parametrize(
    "spec, message",
    [
        ("llm:qwen,heuristic,heuristic", "team: entry 0 (llm:qwen): name the model and its server: llm:<model>@<base URL>"),
        ("llm,heuristic,heuristic", "team: entry 0 (llm): the local model plays under cube-jax llm and cube-jax serve"),
    ],
)
def test_an_llm_member_without_a_server_is_named(monkeypatch, spec, message):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    env = cube_jax.make("hard")
    with pytest.raises(TeamSpecError) as info:
        team_agents(env, parse_team(spec, env.num_agents, kinds=registry.names(provided=["llm"])))
    assert str(info.value).startswith(message), str(info.value)
