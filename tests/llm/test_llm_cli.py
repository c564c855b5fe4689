"""``cube-jax llm`` end to end: the real CLI, the real client, a loopback fake server.

Every run writes traces, metrics.json, timelines and run.json into its --out folder; the
runs here use the small worlds (easy, hard) and the sound-plan model.
"""
from __future__ import annotations

import json
import os

import pytest

from cube_jax import cli
from cube_jax.trace import read_trace, validate_trace
from cube_jax.testing.fake_openai import FakeOpenAI, closed_port_url
from cube_jax.testing.sound_model import responder
from tests.trace_helpers import per_agent

KEY = "sk-cli-secret-7731"


def llm(argv, capsys):
    code = cli.main(["llm", *argv])
    return code, capsys.readouterr()


def outputs(folder, episodes):
    traces = sorted(folder.glob("episode-*.jsonl"))
    assert len(traces) == episodes
    for path in traces:
        assert validate_trace(path) is None, validate_trace(path)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert len(metrics["episodes"]) == episodes
    return traces, metrics


@pytest.mark.parametrize("topology", ["individual", "debate", "centralized", "decentralized"])
def test_every_topology_runs_end_to_end(tmp_path, capsys, topology):
    out = tmp_path / topology
    with FakeOpenAI(responder=responder) as server:
        code, captured = llm(["--scenario", "easy", "--topology", topology, "--model", "fake-model", "--base-url",
                              server.url, "--api-key", KEY, "--episodes", "2", "--seed", "3", "--concurrency", "2",
                              "--out", str(out), "--no-progress"], capsys)
    assert code == 0
    traces, metrics = outputs(out, 2)
    assert [t.name for t in traces] == ["episode-000003.jsonl", "episode-000004.jsonl"]
    assert sorted(p.name for p in out.glob("*.png")) == ["episode-000003.png", "episode-000004.png"]
    assert all(e["success"] for e in metrics["episodes"]) and metrics["aggregate"]["blocks_delivered"]["mean"] == 3
    assert metrics["aggregate"]["llm_calls"]["mean"] > 0
    assert read_trace(traces[0])[0]["topology"] == topology
    assert "2 episodes: success 2/2" in captured.out
    run = json.loads((out / "run.json").read_text())
    assert run["topology"] == topology and run["model"] == "fake-model"
    # the command is recorded as given, its key masked
    assert run["command"][:2] == ["cube-jax", "llm"] and run["command"][run["command"].index("--api-key") + 1] == "***"
    # the key reached the server and nothing on disk
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_a_mixed_team_with_per_agent_models(tmp_path, capsys):
    out = tmp_path / "mixed"
    with FakeOpenAI(responder=responder) as server:
        code, _ = llm(["--scenario", "hard", "--team", "llm:model-a,heuristic,llm:model-b", "--base-url", server.url,
                       "--episodes", "1", "--out", str(out), "--no-progress", "--no-timelines"], capsys)
        requested = {r.body["model"] for r in server.completions}
    assert code == 0
    traces, metrics = outputs(out, 1)
    agents = read_trace(traces[0])[0]["agents"]
    assert agents == {"agent_0": {"kind": "llm", "model": "model-a"}, "agent_1": {"kind": "heuristic", "model": None},
                      "agent_2": {"kind": "llm", "model": "model-b"}}
    assert requested == {"model-a", "model-b"} and metrics["episodes"][0]["success"]


def test_a_dead_server_never_stops_the_run(tmp_path, capsys):
    out = tmp_path / "dead"
    code, captured = llm(["--scenario", "easy", "--model", "m", "--base-url", closed_port_url(), "--retries", "0",
                          "--timeout", "2", "--episodes", "2", "--out", str(out), "--no-progress"], capsys)
    assert code == 0
    traces, metrics = outputs(out, 2)
    for episode in metrics["episodes"]:
        assert not episode["success"] and episode["fallbacks"] >= 1 and episode["invalid_reply_rate"] == 1.0
    end = read_trace(traces[0])[-1]
    assert end["truncated"] and end["reason"].startswith("model server failing")
    assert "model server failing" in captured.out


def test_record_then_replay_gives_the_same_traces(tmp_path, capsys):
    recorded, replayed = tmp_path / "recorded", tmp_path / "replayed"
    with FakeOpenAI(responder=responder) as server:
        code, _ = llm(["--scenario", "hard", "--topology", "decentralized", "--model", "fake-model", "--base-url",
                       server.url, "--api-key", KEY, "--episodes", "2", "--concurrency", "2", "--record", "--out",
                       str(recorded), "--no-progress", "--no-timelines"], capsys)
    assert code == 0 and (recorded / "exchanges").is_dir()
    # no server at all now
    code, _ = llm(["--replay", str(recorded), "--out", str(replayed), "--no-progress", "--no-timelines"], capsys)
    assert code == 0
    for a, b in zip(sorted(recorded.glob("episode-*.jsonl")), sorted(replayed.glob("episode-*.jsonl"))):
        assert per_agent(read_trace(a)) == per_agent(read_trace(b))
    assert KEY.encode() not in b"".join(p.read_bytes() for p in (recorded / "exchanges").iterdir())


@pytest.mark.parametrize(
    "argv, argument, reason",
    [
        (["--scenario", "easy", "--base-url", "http://127.0.0.1:9/v1", "--out", "OUT"], "--model", "name the model"),
        (["--scenario", "easy", "--model", "m", "--out", "OUT"], "--base-url", "give the server's base URL"),
        (["--model", "m", "--base-url", "http://x/v1", "--out", "OUT"], "--n/--scenario", "give the world"),
        (["--scenario", "easy", "--model", "m", "--base-url", "http://x/v1"], "--out", "a run folder is required"),
        (["--scenario", "easy", "--team", "llm,robot", "--model", "m", "--base-url", "http://x/v1", "--out", "OUT"],
         "--team", "unknown kind 'robot'"),
        (["--scenario", "easy", "--topology", "star", "--out", "OUT"], "--topology", "invalid choice"),
        (["--scenario", "easy", "--budget", "2", "--model", "m", "--base-url", "http://x/v1", "--out", "OUT"],
         "--budget", "only the decentralized topology"),
        (["--replay", "NOWHERE", "--out", "OUT"], "--replay", "no run.json"),
        (["--scenario", "easy", "--model", "m", "--base-url", "http://x/v1", "--seed", "4294967295", "--episodes", "2",
          "--out", "OUT"], "--seed", "episode seeds run from"),
    ],
)
def test_bad_arguments_name_the_argument(argv, argument, reason, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    argv = [str(tmp_path / a) if a in ("OUT", "NOWHERE") else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["llm", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argument}" in err and reason in err, err


def test_the_base_url_may_come_from_the_environment(tmp_path, capsys, monkeypatch):
    with FakeOpenAI(responder=responder) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        code, _ = llm(["--scenario", "easy", "--model", "fake-model", "--episodes", "1", "--out", str(tmp_path / "o"),
                       "--no-progress", "--no-timelines"], capsys)
        assert code == 0 and server.completions
        assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.completions)
    assert KEY not in (tmp_path / "o" / "run.json").read_text()


def test_prompt_templates_can_be_copied_and_used(tmp_path, capsys):
    folder = tmp_path / "prompts"
    code, captured = llm(["--write-prompts", str(folder)], capsys)
    assert code == 0 and sorted(os.listdir(folder)) == ["constraints.j2", "demos.j2", "negotiation.j2", "system.j2", "tips.j2", "user.j2"]
    (folder / "system.j2").write_text((folder / "system.j2").read_text().replace("CUBE is a cooperative", "CUBE (edited) is a cooperative"))
    with FakeOpenAI(responder=responder) as server:
        code, _ = llm(["--scenario", "easy", "--model", "m", "--base-url", server.url, "--episodes", "1", "--prompts",
                       str(folder), "--out", str(tmp_path / "run"), "--no-progress", "--no-timelines"], capsys)
        assert "CUBE (edited) is a cooperative" in server.completions[0].body["messages"][0]["content"]
    assert code == 0
    with pytest.raises(SystemExit):
        cli.main(["llm", "--write-prompts", str(folder)])  # refuses to overwrite


@pytest.mark.parametrize(
    "extra, argument, reason",
    [
        (["--max-phases", "0"], "--max-phases", "must be >= 1, got 0"),
        (["--max-phases", "two"], "--max-phases", "expected an integer >= 1"),
        (["--max-phases", "1001"], "--max-phases", "must be <= 1000"),
        (["--directive-timeout", "0"], "--directive-timeout", "must be a finite number > 0"),
        (["--directive-timeout", "nan"], "--directive-timeout", "must be a finite number > 0"),
        (["--temperature", "3"], "--temperature", "must be a number in 0..2"),
        (["--team", "llm:qwen@ftp://x,heuristic"], "--team", "entry 0 ('llm:qwen@ftp://x'): after '@' comes the server's"),
        (["--team", "llm:q@http://,heuristic"], "--team", "expected a base URL"),
        (["--team", "llm,heuristic", "--team-file", "team.yaml"], "--team-file", "not allowed with argument --team"),
        (["--team-file", "NOWHERE"], "--team-file", "cannot read it"),
    ],
)
def test_bad_runtime_and_team_options_name_the_option(extra, argument, reason, capsys, tmp_path):
    argv = ["--scenario", "easy", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "o"),
            *[str(tmp_path / a) if a == "NOWHERE" else a for a in extra]]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["llm", *argv])
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {argument}" in line and reason in line, line


@pytest.mark.parametrize(
    "team, reason",
    [
        ("team:\n  - {kind: llm, model: a, temprature: 0.1}\n  - heuristic\n",
         "team: entry 0: llm has no setting 'temprature'; its settings: model, base_url, api_key_env, temperature"),
        ("- {kind: llm, model: a, max_tokens: 0}\n- heuristic\n", "team: entry 0: max_tokens: expected an integer"),
        ("- heuristic\n- {kind: llm, model: a, api_key_env: CUBE_JAX_TEST_UNSET_KEY}\n",
         "team: entry 1: api_key_env: the environment variable CUBE_JAX_TEST_UNSET_KEY is not set"),
        ("- heuristic\n- {model: a}\n", "team: entry 1 ('{\"model\": \"a\"}') needs \"kind\""),
        ("[heuristic, heuristic, heuristic]", "team: 3 members for a world of 2 agents"),
        ("{team: [llm}", "not YAML or JSON"),
    ],
)
def test_a_bad_team_file_entry_is_one_line_naming_it(team, reason, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("CUBE_JAX_TEST_UNSET_KEY", raising=False)
    path = tmp_path / "team.yaml"
    path.write_text(team)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["llm", "--scenario", "easy", "--team-file", str(path), "--base-url", "http://127.0.0.1:9/v1",
                  "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("cube-jax llm: error: argument --team-file: ") and reason in line, line


FILE_KEY_A, FILE_KEY_B = "sk-member-a-5521", "sk-member-b-9034"


@pytest.mark.parametrize("written_as", ["spec", "file"])
def test_each_llm_member_talks_to_its_own_server_with_its_own_settings(written_as, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KEY_OF_A", FILE_KEY_A)
    monkeypatch.setenv("OPENAI_API_KEY", FILE_KEY_B)
    out = tmp_path / "run"
    with FakeOpenAI(responder=responder) as a, FakeOpenAI(responder=responder) as b:
        if written_as == "spec":
            team = ["--team", f"llm:qwen@{a.url},heuristic,llm:llama@{b.url}", "--temperature", "0.3"]
        else:
            path = tmp_path / "team.json"
            path.write_text(json.dumps({"team": [
                {"kind": "llm", "model": "qwen", "base_url": a.url, "api_key_env": "KEY_OF_A", "temperature": 0.1,
                 "max_tokens": 200, "timeout": 30},
                "heuristic",
                f"llm:llama@{b.url}",
            ]}))
            team = ["--team-file", str(path), "--temperature", "0.7"]
        code, _ = llm(["--scenario", "hard", *team, "--episodes", "1", "--max-tokens", "300", "--out", str(out),
                       "--no-progress", "--no-timelines"], capsys)
        bodies_a, bodies_b = [r.body for r in a.completions], [r.body for r in b.completions]
        keys_a = {r.headers["authorization"] for r in a.completions}
        keys_b = {r.headers["authorization"] for r in b.completions}
        url_a, url_b = a.url, b.url
    assert code == 0 and bodies_a and bodies_b
    assert {body["model"] for body in bodies_a} == {"qwen"} and {body["model"] for body in bodies_b} == {"llama"}
    if written_as == "spec":
        assert {(x["temperature"], x["max_tokens"]) for x in bodies_a + bodies_b} == {(0.3, 300)}
        assert keys_a == keys_b == {f"Bearer {FILE_KEY_B}"}
    else:
        assert {(x["temperature"], x["max_tokens"]) for x in bodies_a} == {(0.1, 200)}
        assert {(x["temperature"], x["max_tokens"]) for x in bodies_b} == {(0.7, 300)}
        assert keys_a == {f"Bearer {FILE_KEY_A}"} and keys_b == {f"Bearer {FILE_KEY_B}"}
    traces, _ = outputs(out, 1)
    assert read_trace(traces[0])[0]["agents"] == {"agent_0": {"kind": "llm", "model": "qwen"},
                                                  "agent_1": {"kind": "heuristic", "model": None},
                                                  "agent_2": {"kind": "llm", "model": "llama"}}
    run = json.loads((out / "run.json").read_text())
    assert run["models"]["agent_0"]["base_url"] == url_a and run["models"]["agent_2"]["base_url"] == url_b
    for path in out.rglob("*"):
        if path.is_file():
            assert FILE_KEY_A.encode() not in path.read_bytes() and FILE_KEY_B.encode() not in path.read_bytes()


def _interrupt(trace):
    """The trace as a crash would leave it: cut before its end record."""
    lines = trace.read_text().splitlines()
    trace.write_text("\n".join(lines[: len(lines) // 2]) + "\n")


def test_resume_keeps_finished_episodes_and_replays_the_rest_from_the_recording(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeOpenAI(responder=responder) as server:
        argv = ["--scenario", "easy", "--model", "m", "--base-url", server.url, "--episodes", "2", "--record",
                "--out", str(out), "--no-timelines", "--no-progress"]
        assert llm(argv, capsys)[0] == 0
        asked = len(server.completions)
    first, second = out / "episode-000000.jsonl", out / "episode-000001.jsonl"
    kept = first.read_text()
    recorded_calls = len((out / "exchanges" / "episode-000001.jsonl").read_text().splitlines())
    _interrupt(second)
    with FakeOpenAI(responder=responder) as again:
        # --resume alone: the run's options come from run.json (its base URL named the old server)
        run = json.loads((out / "run.json").read_text())
        run["base_url"] = again.url
        run["models"] = {k: dict(v, base_url=again.url) for k, v in run["models"].items()}
        (out / "run.json").write_text(json.dumps(run))
        code, printed = llm(["--resume", str(out), "--no-progress", "--no-timelines"], capsys)
        assert code == 0, printed.err
        assert again.completions == []  # every exchange of the unfinished episode was recorded: none asked again
    assert "1 finished episode(s) kept, 1 to play" in printed.out
    assert first.read_text() == kept
    assert validate_trace(second) is None and read_trace(second)[-1]["reason"] == "all blocks delivered"
    assert len((out / "exchanges" / "episode-000001.jsonl").read_text().splitlines()) == recorded_calls
    metrics = json.loads((out / "metrics.json").read_text())
    assert sorted(e["seed"] for e in metrics["episodes"]) == [0, 1]
    assert asked > 0 and json.loads((out / "run.json").read_text())["resumed"] == 1


def test_resume_with_other_options_is_refused_naming_each_difference(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeOpenAI(responder=responder) as server:
        argv = ["--scenario", "easy", "--model", "m", "--base-url", server.url, "--episodes", "1", "--out", str(out),
                "--no-timelines", "--no-progress"]
        assert llm(argv, capsys)[0] == 0
    run = json.loads((out / "run.json").read_text())
    assert run["command"] == ["cube-jax", "llm", *argv]
    assert {"python", "cube_jax", "jax"} <= set(run["versions"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["llm", "--resume", str(out), "--topology", "debate", "--max-repairs", "5"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --resume: these options differ from the run's" in err
    assert "--topology 'debate' (the run has 'individual')" in err and "--max-repairs 5 (the run has 2)" in err


def test_the_local_model_is_the_default_without_a_base_url(tmp_path, monkeypatch):
    from cube_jax.cli.llm import LanguageAgents, language_agents
    from cube_jax.registry import Member
    import argparse

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    parser = argparse.ArgumentParser()
    args = argparse.Namespace(model=None, base_url=None, api_key=None, temperature=0.2, max_tokens=512, timeout=60.0,
                              retries=3, max_repairs=2, local_port=0, local_threads=1, concurrency=2,
                              strategy_tips=True, feedback=False, reply_schema="state", team_file=None, team=None)
    members = [Member("llm"), Member("heuristic"), Member("llm", "local", (("model", "local"),))]
    agents = language_agents(parser, args, members, prompts=None)
    assert isinstance(agents, LanguageAgents) and agents.uses_local(members) == 2
    assert agents.local.parallel == 4 and agents.local.threads == 1  # a slot per request in flight
    assert agents.settings(members[0]).model == "local" and agents.strategy_tips is True
