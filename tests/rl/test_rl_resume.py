"""Exact resume: a training run killed with SIGKILL at an arbitrary point and resumed with
``output.resume`` ends with the same parameters, optimizer state, environments, keys and
metrics as the same run never interrupted, bit for bit on the CPU; and a checkpoint being
written when the kill lands is never the one resumed from half-written.

Each algorithm's uninterrupted and killed runs are subprocesses of ``baselines/<algo>.py``;
the killed run starts once the uninterrupted one has written its first metric row, so it
reads the training program from the persistent compilation cache of ``tests/conftest.py``
instead of compiling it a second time beside it. The kill lands after a number of metric
rows drawn per algorithm, plus a random fraction of a chunk, so it may fall inside a
checkpoint's save.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("optax")

import jax  # noqa: E402

from cube_jax.rl import checkpoint  # noqa: E402
from tests.rl.test_rl_baselines import REPO, subprocess_env  # noqa: E402

ENVS, STEPS, UPDATES = 16, 8, 12
TINY = [
    f"train.num_envs={ENVS}", f"train.num_steps={STEPS}", f"train.total_timesteps={UPDATES * ENVS * STEPS}",
    "train.updates_per_call=1", "train.update_epochs=1", "train.num_minibatches=1", "train.cpu_devices=1",
    "network.hidden=16", "network.layers=1", "eval.episodes=4", "output.checkpoint_every=1", "output.gif=false",
    "train.target_success=null", "num_seeds=2",
]
SCRIPTS = {"ippo": "ippo.py", "mappo_rnn": "mappo_rnn.py", "pqn_vdn": "pqn_vdn.py"}
TIME_FIELDS = ("wall", "per_s", "per_second")


def start(algo: str, root: Path, name: str, *extra: str) -> subprocess.Popen:
    args = [*TINY, f"output.root={root}", f"output.name={name}", *extra]
    return subprocess.Popen([sys.executable, str(REPO / "baselines" / SCRIPTS[algo]), *args], cwd=root,
                            env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    return out


def wait_for_rows(proc: subprocess.Popen, metrics: Path, rows: int, deadline: float) -> None:
    """Wait until a running ``proc`` has written ``rows`` metric rows to ``metrics``."""
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= rows):
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        assert time.monotonic() < deadline, f"{metrics.parent.name} never wrote {rows} metric rows"
        time.sleep(0.01)


def metric_rows(run: Path):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not any(t in k for t in TIME_FIELDS)} for r in rows]


def leaves(run: Path):
    tree = checkpoint.restore_runner(run / "checkpoint")
    return [(jax.tree_util.keystr(path), np.asarray(x)) for path, x in jax.tree_util.tree_leaves_with_path(tree)]


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(SCRIPTS))
def test_a_run_killed_and_resumed_ends_where_the_uninterrupted_run_ends(algo, tmp_path):
    rng = random.Random(algo)
    full = start(algo, tmp_path, "full")
    deadline = time.monotonic() + 600
    wait_for_rows(full, tmp_path / "full" / "metrics.jsonl", 1, deadline)  # compiled, and in the cache
    killed = start(algo, tmp_path, "killed")
    metrics = tmp_path / "killed" / "metrics.jsonl"
    wait_for_rows(killed, metrics, rng.randint(2, UPDATES - 2), deadline)
    time.sleep(rng.random() * 0.2)  # anywhere in the next chunk, its checkpoint's save included
    os.kill(killed.pid, signal.SIGKILL)
    killed.communicate()
    rows_at_kill = len(metrics.read_text().splitlines())
    assert rows_at_kill < UPDATES, "the kill landed after the run ended; nothing was resumed"
    finish(full)

    out = finish(start(algo, tmp_path, "killed", f"output.resume={tmp_path / 'killed'}"))
    assert "resumed from" in out
    expected, got = leaves(tmp_path / "full"), leaves(tmp_path / "killed")
    assert [k for k, _ in got] == [k for k, _ in expected]
    differing = [k for (k, a), (_, b) in zip(expected, got) if a.dtype != b.dtype or not np.array_equal(a, b)]
    assert differing == [], f"{algo}: runner leaves differ after the resume: {differing[:8]}"
    assert metric_rows(tmp_path / "killed") == metric_rows(tmp_path / "full")
    assert len(metric_rows(tmp_path / "full")) == UPDATES
    # the resumed run's clock goes on from the rows it kept: its summary counts both sessions
    # (a benchmark entry's provenance.training_seconds sums these)
    walls = [json.loads(line)["wall_seconds"] for line in metrics.read_text().splitlines()]
    assert walls == sorted(walls)
    assert json.loads((tmp_path / "killed" / "summary.json").read_text())["wall_seconds"] >= walls[-1]


def _fake_checkpoint(folder: Path, update: int) -> Path:
    folder.mkdir(parents=True)
    (folder / checkpoint.RUNNER_DIR).mkdir()
    (folder / checkpoint.POLICY_META).write_text(json.dumps({"updates": update}))
    return folder


def test_a_save_stopped_between_its_renames_leaves_the_previous_checkpoint_readable(tmp_path, monkeypatch):
    directory = _fake_checkpoint(tmp_path / "checkpoint", 3)
    staging = _fake_checkpoint(tmp_path / f"checkpoint{checkpoint.STAGING_SUFFIX}", 4)
    renames = []
    real_rename = Path.rename

    def stop_after_one(self, target):
        if renames:
            raise KeyboardInterrupt("killed between the renames")
        renames.append(target)
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        checkpoint._swap(staging, directory)
    monkeypatch.setattr(Path, "rename", real_rename)
    assert not directory.exists()
    assert checkpoint.read_meta(directory) == {"updates": 3}  # the previous one, complete
    assert checkpoint.readable(directory).name == f"checkpoint{checkpoint.OLD_SUFFIX}"
    # the next save puts it back in place before writing, then swaps the new one in
    checkpoint._repair(directory)
    assert checkpoint.read_meta(directory) == {"updates": 3}
    assert not (tmp_path / f"checkpoint{checkpoint.OLD_SUFFIX}").exists()
    checkpoint._swap(staging, directory)
    assert checkpoint.read_meta(directory) == {"updates": 4}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_a_half_written_checkpoint_is_never_read(tmp_path):
    directory = _fake_checkpoint(tmp_path / "checkpoint", 7)
    half = tmp_path / f"checkpoint{checkpoint.STAGING_SUFFIX}"
    (half / checkpoint.RUNNER_DIR).mkdir(parents=True)  # the kill landed while this was written
    assert checkpoint.readable(directory) == directory
    assert checkpoint.read_meta(directory) == {"updates": 7}
    checkpoint._repair(directory)  # a stale copy beside a complete checkpoint goes
    old = _fake_checkpoint(tmp_path / f"checkpoint{checkpoint.OLD_SUFFIX}", 6)
    checkpoint._repair(directory)
    assert not old.exists() and checkpoint.read_meta(directory) == {"updates": 7}
    shutil.rmtree(half)
