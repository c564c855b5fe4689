"""benchmarks/profile_parts.py: the update section runs against the trainer's own pieces (a
tiny preset, one round), and its command line refuses a bad override before timing."""
from __future__ import annotations

import json

import pytest

from tests.bench_scripts import load_benchmark
from tests.rl_tiny import TINY_PPO

pp = load_benchmark("profile_parts")


def test_the_update_section_times_every_piece_and_both_seed_axes(tmp_path, capsys):
    out = tmp_path / "profile.json"
    overrides = [f"--set={o}" for o in TINY_PPO if not o.startswith(("eval.", "train.updates_per_call"))]
    assert pp.main(["--sections", "update", "--rounds", "1", "--seeds", "2", "--out", str(out), *overrides]) == 0
    data = json.loads(out.read_text())
    assert data["env_steps_per_update"] == 8 * 8
    pieces = {r["piece"]: r["ms"] for r in data["pieces"]}
    for piece in ("rollout (collect)", "one minibatch step (gradient and Adam)", "whole update",
                  "whole update, S = 1, vmapped over the seeds", "whole update, S = 2, one seed after another (lax.map)"):
        assert pieces[piece] > 0, piece
    assert len(pieces) == 6 + 4
    assert "IPPO training, one seed: 64 env steps per update" in pp.render(data)


def test_a_bad_override_stops_before_anything_is_timed(capsys):
    with pytest.raises(SystemExit) as stop:
        pp.main(["--sections", "update", "--set", "train.num_envz=8"])
    assert stop.value.code == 2
    assert "train.num_envz" in capsys.readouterr().err
