"""benchmarks/llm_models.py, the results table of language models, against the loopback fake
server (any OpenAI-compatible server redoes the table): every cell is played on the same
seeds, summarised with intervals, rendered, and resumed without being played again."""
from __future__ import annotations

import json

import pytest

from cube_jax.testing.fake_openai import FakeOpenAI
from tests.bench_scripts import load_benchmark
from cube_jax.testing.sound_model import responder


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("llm_models", "llm_models_bench")


def test_the_table_of_a_server_covers_every_cell_on_the_same_seeds(bench, tmp_path, capsys):
    out = tmp_path / "models.json"
    with FakeOpenAI(responder=responder) as server:
        args = ["--base-url", server.url, "--model", "fake-model", "--episodes", "2", "--max-calls-per-agent", "2",
                "--topologies", "individual,negotiation", "--out", str(out)]
        assert bench.main(args) == 0
        calls_first = len(server.completions)
        assert bench.main(args + ["--resume"]) == 0  # every cell kept: nothing asked again
        assert len(server.completions) == calls_first
    data = json.loads(out.read_text())
    cells = [(c["world"], c["agents"], c["topology"], c["feedback"]) for c in data["cells"]]
    assert cells == [(w, a, "individual", False) for w in ("easy",) for a in ("random", "heuristic", "team")] + [
        ("easy", "llm", "individual", False), ("easy", "llm", "negotiation", False), ("easy", "llm", "individual", True)
    ] + [(w, a, "individual", False) for w in ("hard",) for a in ("random", "heuristic", "team")] + [
        ("hard", "llm", "individual", False), ("hard", "llm", "negotiation", False), ("hard", "llm", "individual", True)]
    for cell in data["cells"]:
        assert [e["seed"] for e in cell["episodes"]] == [0, 1]
        for key, summary in cell["summary"].items():
            values = [float(e[key]) for e in cell["episodes"]]
            assert summary["mean"] == pytest.approx(sum(values) / 2)
            assert summary["ci_low"] <= summary["mean"] <= summary["ci_high"]
        if cell["agents"] == "llm":
            n = cell["num_agents"]
            assert cell["max_calls"] == 2 * n and all(0 < e["calls"] <= 2 * n for e in cell["episodes"])
        else:
            assert cell["max_calls"] is None and all(e["calls"] == 0 for e in cell["episodes"])
    heuristic = next(c for c in data["cells"] if c["agents"] == "heuristic" and c["world"] == "easy")
    assert heuristic["summary"]["success"]["mean"] == 1.0
    table = bench.render(data)
    assert "at most 2 model calls per agent and episode" in table
    assert "| easy | llm +feedback | individual |" in table and "| hard | heuristic | - | 1 [1, 1] | 3 [3, 3] of 3 |" in table
    assert (tmp_path / "models.png").is_file()


@pytest.mark.parametrize("args, problem", [
    (["--episodes", "0"], "--episodes: must be >= 1"),
    (["--max-calls-per-agent", "-1"], "--max-calls-per-agent: must be >= 0"),
    (["--topologies", "ring"], "unknown topology 'ring'"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url and --model go together"),
])
def test_bad_arguments_say_which(bench, args, problem, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(args)
    assert exit_.value.code == 2 and problem in capsys.readouterr().err


def test_a_resume_with_another_setup_is_refused(bench, tmp_path, capsys):
    out = tmp_path / "models.json"
    out.write_text(json.dumps({"setup": {"model": "other"}, "cells": []}))
    with FakeOpenAI(responder=responder) as server:
        with pytest.raises(SystemExit) as exit_:
            bench.main(["--base-url", server.url, "--model", "fake-model", "--resume", "--out", str(out)])
    assert exit_.value.code == 2 and "--resume:" in capsys.readouterr().err
