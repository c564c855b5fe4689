"""Training across processes (API.md, "Training across machines"): two processes on loopback
joined by ``jax.distributed`` (CPU collectives) train the same program as one process over
two devices, and a process that cannot reach its coordinator fails in bounded time with a
message that names the address."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("optax")
ocp = pytest.importorskip("orbax.checkpoint")

from tests.rl.test_rl_baselines import REPO, TINY, subprocess_env  # noqa: E402

SCRIPT = str(REPO / "baselines" / "ippo.py")
RUN = TINY + ["num_seeds=2", "output.gif=false", "output.plot=false"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_with_devices(count: int) -> dict:
    env = subprocess_env()
    env["XLA_FLAGS"] = (env["XLA_FLAGS"] + f" --xla_force_host_platform_device_count={count}").strip()
    return env


def restore(run_dir) -> dict:
    """The saved policy's parameters as flat {path: array}."""
    checkpointer = ocp.StandardCheckpointer()
    try:
        tree = checkpointer.restore((run_dir / "checkpoint" / "policy").resolve())
    finally:
        checkpointer.close()
    import jax

    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def metrics(run_dir) -> list:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_processes_train_what_one_process_trains_on_two_devices(tmp_path):
    port = free_port()
    common = RUN + [f"output.root={tmp_path}", "distributed.num_processes=2", f"distributed.coordinator=127.0.0.1:{port}",
                    "distributed.timeout_s=120", "output.name=two"]
    procs = [subprocess.Popen([sys.executable, SCRIPT, *common, f"distributed.process_id={i}"], cwd=REPO,
                              env=env_with_devices(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    one = subprocess.run([sys.executable, SCRIPT, *RUN, f"output.root={tmp_path}", "output.name=one"], cwd=REPO,
                         env=env_with_devices(2), capture_output=True, text=True, timeout=600)
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-3000:]
    assert one.returncode == 0, one.stderr[-3000:]
    assert "process 0 of 2 joined the coordinator" in outs[0][0] and "mesh of 2 device(s)" in outs[0][0]
    assert "written by process 0; this is process 1 of 2" in outs[1][0]
    assert "mesh of 2 device(s)" in one.stdout

    two_dir, one_dir = tmp_path / "two", tmp_path / "one"
    assert not (two_dir / "process-1").exists() and sorted(p.name for p in two_dir.iterdir()) == sorted(
        p.name for p in one_dir.iterdir())
    two_params, one_params = restore(two_dir), restore(one_dir)
    assert two_params.keys() == one_params.keys() and len(two_params) >= 4
    for name in one_params:
        np.testing.assert_allclose(two_params[name], one_params[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # the same training, update by update (seed-averaged metrics of metrics.jsonl)
    rows_two, rows_one = metrics(two_dir), metrics(one_dir)
    assert [r["update"] for r in rows_two] == [r["update"] for r in rows_one] == [1, 2, 3]
    for a, b in zip(rows_two, rows_one):
        for key in ("policy_loss", "value_loss", "entropy"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    summary_two = json.loads((two_dir / "summary.json").read_text())
    summary_one = json.loads((one_dir / "summary.json").read_text())
    assert summary_two["devices"] == summary_one["devices"] == 2
    assert summary_two["eval_per_seed"] == summary_one["eval_per_seed"]


def test_a_process_that_cannot_reach_its_coordinator_fails_in_bounded_time_naming_it(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, SCRIPT, "distributed.num_processes=2", "distributed.process_id=1",
                           f"distributed.coordinator={address}", "distributed.timeout_s=3", f"output.root={tmp_path}"],
                          cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert time.monotonic() - t0 < 60
    assert f"could not reach the coordinator at {address} within 3 s" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # one line, no traceback
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_busy_coordinator_port_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, SCRIPT, "distributed.num_processes=2", "distributed.process_id=0",
                               f"distributed.coordinator=127.0.0.1:{port}", "distributed.timeout_s=3",
                               f"output.root={tmp_path}"],
                              cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert f"cannot serve the coordinator at 127.0.0.1:{port}: port {port} is not free" in proc.stderr


@pytest.mark.parametrize("value, problem", [
    ("localhost", "must be 'host:port'"), ("host:0", "must be 'host:port'"), (":8476", "must be 'host:port'"),
    ("host:http", "must be 'host:port'"),
])
def test_a_malformed_coordinator_address_is_refused_before_training(value, problem):
    from cube_jax.rl.config import ConfigError, build

    with pytest.raises(ConfigError, match=problem):
        build("ippo", overrides=[f"distributed.coordinator={value}", "distributed.num_processes=2"])


def test_auto_coordinator_is_accepted():
    from cube_jax.rl.config import build

    assert build("ippo", overrides=["distributed.coordinator=auto"]).distributed.coordinator == "auto"
