"""Experiment trackers: ``logger.tensorboard`` and ``logger.wandb`` log what ``metrics.jsonl``
holds, per seed, with the config; the event files are read back with TensorBoard's own
reader, the offline W&B runs are found on disk; a missing extra is a one-line error."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("optax")

from cube_jax.rl import trackers  # noqa: E402
from cube_jax.rl.config import build  # noqa: E402
from tests.rl.test_rl_baselines import REPO, subprocess_env  # noqa: E402

SEEDS = 2
TINY = ["train.num_envs=16", "train.num_steps=8", "train.total_timesteps=384", "train.target_success=null",
        f"num_seeds={SEEDS}", "eval.episodes=2", "output.gif=false", "network.hidden=16", "network.layers=1"]


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory) -> Path:
    pytest.importorskip("tensorboardX")
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("trackers")
    # three jitted calls, each followed by an evaluation (eval.every); the second one filmed
    args = [*TINY, f"output.root={root}", "output.name=run", "logger.tensorboard=true", "logger.wandb=offline",
            "logger.project=cube-test", "logger.tags=[tiny, ci]", "train.updates_per_call=1", "eval.every=1",
            "output.video_every=2"]
    done = subprocess.run([sys.executable, str(REPO / "baselines" / "ippo.py"), *args], cwd=root,
                          env={**subprocess_env(), "WANDB_SILENT": "true"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root / "run"


def test_tensorboard_holds_every_seeds_metrics_as_in_metrics_jsonl(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = [json.loads(line) for line in (tracked_run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    evaluations = [json.loads(line) for line in (tracked_run / "evaluations.jsonl").read_text().splitlines()]
    assert [e["update"] for e in evaluations] == [1, 2, 3]
    assert [e["env_steps"] for e in evaluations] == [r["env_steps"] for r in rows]
    rows += [{"update": e["update"], "env_steps": e["env_steps"],
              **{f"eval/{k}": v for k, v in e.items() if k not in ("update", "env_steps")}} for e in evaluations]
    rows.sort(key=lambda r: r["env_steps"])
    for seed in range(SEEDS):
        events = EventAccumulator(str(tracked_run / "tensorboard" / f"seed-{seed}"))
        events.Reload()
        tags = set(events.Tags()["scalars"])
        expected = [trackers.seed_values(row, seed, SEEDS) for row in rows]
        assert tags == set().union(*expected) and "success_rate" in tags and "episode_return" in tags
        for tag in tags:
            logged = [(e.step, e.value) for e in events.Scalars(tag)]
            wanted = [(row["env_steps"], values[tag]) for row, values in zip(rows, expected) if tag in values]
            assert [s for s, _ in logged] == [s for s, _ in wanted]
            assert [v for _, v in logged] == pytest.approx([v for _, v in wanted], rel=1e-6, abs=1e-7)
        assert "config/text_summary" in events.Tags()["tensors"]  # the config, as text


def test_every_second_evaluation_is_filmed(tracked_run):
    from PIL import Image

    videos = sorted((tracked_run / "videos").iterdir())
    assert [v.name for v in videos] == ["update-0000002.gif"]
    with Image.open(videos[0]) as gif:
        assert gif.n_frames > 1


def test_a_video_needs_evaluations_during_training():
    from cube_jax.rl.config import ConfigError

    with pytest.raises(ConfigError, match="output.video_every.*eval.every"):
        build("ippo", overrides=["output.video_every=2"])


def test_the_offline_wandb_run_of_each_seed_is_on_disk(tracked_run):
    runs = sorted((tracked_run / "wandb").glob("offline-run-*"))
    assert len(runs) == SEEDS
    for run in runs:
        log = list(run.glob("run-*.wandb"))
        assert len(log) == 1 and log[0].stat().st_size > 0
        data = log[0].read_bytes()
        assert b"success_rate" in data and b"cube-test" in data and b"tiny" in data


def test_nothing_is_tracked_unless_asked(tmp_path):
    config = build("ippo", overrides=TINY)
    assert config.logger.tensorboard is False and config.logger.wandb is None
    quiet = trackers.Trackers(config, tmp_path, SEEDS)
    assert not quiet.active
    quiet.log([{"update": 1, "env_steps": 128, "loss": 1.0}])
    quiet.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("override, extra, module", [
    ("logger.tensorboard=true", "tensorboard", "tensorboardX"),
    ("logger.wandb=offline", "wandb", "wandb"),
])
def test_a_missing_extra_is_a_one_line_error_naming_it(override, extra, module, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    config = build("ippo", overrides=[override])
    with pytest.raises(trackers.TrackerError) as err:
        trackers.check_extras(config)
    message = str(err.value)
    assert "\n" not in message and f"pip install 'cube_jax[{extra}]'" in message and override in message


def test_the_script_refuses_a_missing_extra_before_training(tmp_path):
    code = ("import sys; sys.modules['wandb'] = None; sys.argv = ['ippo.py', 'logger.wandb=online']; "
            f"sys.path.insert(0, {str(REPO / 'baselines')!r}); import launch; launch.main('ippo')")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=subprocess_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2
    assert "logger.wandb=online needs the wandb extra: pip install 'cube_jax[wandb]'" in done.stderr
    assert not (tmp_path / "runs").exists()
