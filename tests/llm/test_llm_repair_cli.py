"""``--repair`` and ``--demos K`` through the commands: ``cube-jax llm`` (run.json, the traces,
a team file's per-member settings) and ``cube-jax bench run`` (the entry's settings and label)."""
from __future__ import annotations

import json

import pytest

from cube_jax import cli
from cube_jax.bench.entry import read_entry
from cube_jax.trace import read_trace, validate_trace
from cube_jax.testing.fake_openai import FakeOpenAI
from cube_jax.testing.sound_model import responder


def run(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr()


def test_cube_jax_llm_plays_with_repair_and_demos_and_records_them(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeOpenAI(responder=responder) as server:
        code, captured = run(["llm", "--scenario", "hard", "--model", "fake-model", "--base-url", server.url,
                              "--episodes", "1", "--repair", "--demos", "1", "--out", str(out), "--no-progress",
                              "--no-timelines"], capsys)
        system = server.completions[0].body["messages"][0]["content"]
    assert code == 0, captured.err
    trace = out / "episode-000000.jsonl"
    assert validate_trace(trace) is None
    records = read_trace(trace)
    assert all(info["repair"] is True and info["demos"] == 1 for info in records[0]["agents"].values())
    assert "=== EXAMPLE 1 OF 1: THE PROMPT ===" in system and "EXAMPLE 2" not in system
    settings = json.loads((out / "run.json").read_text())
    assert settings["repair"] is True and settings["demos"] == 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"repairs", "repairs_reach", "repairs_quorum", "repairs_clash", "repairs_unresolved"} <= set(
        metrics["aggregate"])


def test_a_team_file_sets_repair_and_demos_per_member(tmp_path, capsys):
    team = tmp_path / "team.yaml"
    team.write_text("team:\n  - {kind: llm, repair: true, demos: 1}\n  - {kind: llm}\n  - heuristic\n")
    out = tmp_path / "run"
    with FakeOpenAI(responder=responder) as server:
        code, captured = run(["llm", "--scenario", "hard", "--team-file", str(team), "--model", "fake-model",
                              "--base-url", server.url, "--episodes", "1", "--max-steps", "3", "--out", str(out),
                              "--no-progress", "--no-timelines"], capsys)
    assert code == 0, captured.err
    agents = read_trace(out / "episode-000000.jsonl")[0]["agents"]
    assert agents["agent_0"] == {"kind": "llm", "model": "fake-model", "repair": True, "demos": 1}
    assert agents["agent_1"] == {"kind": "llm", "model": "fake-model"}


@pytest.mark.parametrize("value, problem", [("9", "must be <= 8"), ("x", "expected an integer")])
def test_a_bad_demo_count_is_refused(value, problem, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["llm", "--scenario", "easy", "--demos", value, "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2 and problem in capsys.readouterr().err


def test_bench_entries_with_and_without_repair_and_demos_differ(tmp_path, capsys):
    entries = {}
    with FakeOpenAI(responder=responder) as server:
        spec = f"llm:fake-model@{server.url}"
        for name, extra in (("plain", []), ("both", ["--repair", "--demos", "1"])):
            out = tmp_path / name
            code, captured = run(["bench", "run", spec, "--tasks", "easy", "--episodes", "1", "--temperature", "0",
                                  *extra, "--out", str(out), "--no-progress"], capsys)
            assert code == 0, captured.err
            entry = read_entry(out)
            # the command recorded is the one given, not the program that ran it
            assert entry["provenance"]["command"].startswith(f"cube-jax bench run {spec} --tasks easy")
            entries[name] = entry["agent"]
    plain, both = entries["plain"], entries["both"]
    assert plain["label"] == spec and both["label"] == f"{spec} (repair, demos 1)"
    assert "repair" not in plain["settings"]["models"][0] and "demos" not in plain["settings"]["models"][0]
    assert both["settings"]["models"][0]["repair"] is True and both["settings"]["models"][0]["demos"] == 1
    trace = next((tmp_path / "both").glob("traces/easy/*.jsonl"))
    assert read_trace(trace)[0]["agents"]["agent_0"]["demos"] == 1
