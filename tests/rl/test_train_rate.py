"""benchmarks/train_rate.py: chunk rates read from a run's metrics rows, the table it renders,
and its command line refusing bad input before anything trains."""
from __future__ import annotations

import pytest

from tests.bench_scripts import load_benchmark

tr = load_benchmark("train_rate")


def _rows(chunks):
    """Metrics rows as the driver writes them: every update of a chunk stamped with the
    wall time at the chunk's end; ``chunks`` is ``[(updates, end time)]``, 100 steps an update."""
    rows, update = [], 0
    for count, end in chunks:
        for _ in range(count):
            update += 1
            rows.append({"update": update, "env_steps": 100 * update, "wall_seconds": end})
    return rows


def test_chunk_rates_leave_out_the_first_chunk():
    # the first chunk (compiling) ends at 5.0 s; then 1000 steps in 0.5 s and 1000 in 0.25 s
    assert tr.chunk_rates(_rows([(10, 5.0), (10, 5.5), (10, 5.75)])) == [2000.0, 4000.0]
    assert tr.chunk_rates(_rows([(10, 5.0)])) == []


def test_render_pairs_the_runs():
    run = dict(started="12:00:00", p10=90.0, p90=110.0, whole_run=80.0)
    data = {
        "machine": {"date": "2026-01-01 12:00", "cpus_usable": 2, "cpu_model": "x", "xla_flags": "", "load_average": 0.5},
        "steps": 4000000, "overrides": ["env.n=4"], "before_commit": "commit abc",
        "runs": [dict(run, label="before", median=100.0), dict(run, label="after", median=110.0),
                 dict(run, label="before", median=90.0), dict(run, label="after", median=108.0)],
    }
    text = tr.render(data)
    assert "runs alternately with commit abc" in text
    assert text.count("| before |") == 2 and text.count("| after |") == 2
    assert "before: median of the runs' medians 95 env-steps/s (runs 100, 90)." in text
    assert "After / before, pair by pair: 1.10, 1.20 (median 1.15)." in text


@pytest.mark.parametrize("argv, message", [
    (["--pairs", "0"], "--pairs and --steps must be at least 1"),
    (["--before-root", "/nonexistent"], "no baselines/ippo.py there"),
    (["--set", "env.n"], "expected KEY=VALUE"),
])
def test_bad_arguments_stop_before_training(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        tr.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_a_tiny_run_reports_its_chunks(tmp_path):
    """The script as a user runs it, on this checkout alone: a tiny preset of two chunks."""
    import json

    from tests.rl_tiny import TINY_PPO

    out = tmp_path / "rate.json"
    tiny = [f"--set={o}" for o in TINY_PPO if not o.startswith(("train.total_timesteps", "train.target_success"))]
    assert tr.main(["--pairs", "1", "--steps", "256", "--out", str(out), *tiny]) == 0  # 4 updates of 64 steps
    data = json.loads(out.read_text())
    (run,) = data["runs"]
    assert run["label"] == "this checkout" and run["env_steps"] == 256
    assert len(run["chunk_rates"]) == 1 and run["median"] > 0 and run["whole_run"] > 0
    assert "| this checkout |" in tr.render(data)
