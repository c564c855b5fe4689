"""benchmarks/profile_parts.py: the update section runs against the trainer's own pieces (a
tiny preset, one round), the step section times the pieces the step itself runs, and its
command line refuses a bad override before timing."""
from __future__ import annotations

import json

import pytest

from tests.bench_scripts import load_benchmark
from tests.rl_tiny import TINY_PPO

pp = load_benchmark("profile_parts")
# the tiny preset's keys that an update uses, as --set options
TINY_UPDATE = [f"--set={o}" for o in TINY_PPO if not o.startswith(("eval.", "train.updates_per_call"))]


def test_the_update_section_times_every_piece_and_both_seed_axes(tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert pp.main(["--sections", "update", "--rounds", "1", "--seeds", "2", "--out", str(out), *TINY_UPDATE]) == 0
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


def test_instructions_are_read_with_their_opcode_and_op_name():
    hlo = "\n".join([
        '  %ynn_fusion.15 = f32[64,64]{1,0} fusion(%a, %b), kind=kCustom, calls=%f.15, '
        'metadata={op_name="jit(update)/while/body/closed_call/minibatch_step/transpose(jvp(Actor.columns))/io,ib->ob"}',
        '  %while.691 = (s32[], f32[64]{0}, /*index=2*/f32[45,64]{1,0}) while(%t), condition=%c, body=%b',
        '  ROOT %tuple.9 = (f32[2]{0}, s32[]) tuple(%x, %y)',
    ])
    found = pp._instructions(hlo)
    assert found["ynn_fusion.15"][0] == "fusion"
    assert pp._PART.search(found["ynn_fusion.15"][1]).group(1) == "minibatch_step"
    assert pp._short(found["ynn_fusion.15"][1]) == "minibatch_step/transpose(jvp(Actor.columns))/io,ib->ob"
    assert found["while.691"] == ("while", "")
    assert found["tuple.9"][0] == "tuple"


def test_the_thunks_section_sums_a_traced_update_by_its_parts(tmp_path):
    """The section needs its XLA flag before JAX starts: the script runs as a user runs it."""
    import os
    import subprocess
    import sys

    out = tmp_path / "thunks.json"
    env = {**os.environ, "XLA_FLAGS": "--xla_backend_optimization_level=0"}
    done = subprocess.run([sys.executable, str(pp.__file__), "--sections", "thunks", "--rounds", "1",
                           "--out", str(out), *TINY_UPDATE], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    th = data["thunks"]
    assert pp.THUNK_FLAG in data["machine"]["xla_flags"]
    parts = {p["part"]: p["ms"] for p in th["parts"]}
    for part in pp.PARTS:  # every named scope of the update ran and was traced
        assert parts[part] > 0, part
    assert sum(p["share"] for p in th["parts"]) == pytest.approx(1.0)
    assert sum(parts.values()) == pytest.approx(th["thunk_ms_per_update"])
    times = [t["ms"] for t in th["top"]]
    assert times == sorted(times, reverse=True) and len(times) == 15
    assert not {t["opcode"] for t in th["top"]} & set(pp.CONTROL_FLOW)
    assert all(0 < t["busiest_thread_share"] <= 1 for t in th["top"])
    assert "| minibatch_step |" in pp.render(data) and "Thunks of IPPO update" in done.stdout


def test_the_step_section_times_the_pieces_the_step_runs(tmp_path):
    # above 32 agents the step counts the lines of pushers of all four phases at once
    out = tmp_path / "profile.json"
    assert pp.main(["--sections", "step", "--n", "40", "--envs", "4", "--rounds", "1", "--out", str(out)]) == 0
    pieces = {r["piece"]: r["ms"] for r in json.loads(out.read_text())["pieces"]}
    assert list(pieces) == ["whole step", "count of pushers ahead, all four push phases", "one push phase (RIGHT)",
                            "movement phase"]
    assert min(pieces.values()) > 0


def test_a_piece_only_the_earlier_checkout_timed_keeps_its_row():
    piece = {"group": "step", "ms": 2.0}
    data = {"pieces": [dict(piece, piece="count, all phases")]}
    before = {"pieces": [dict(piece, piece="count, one phase", ms=3.0)]}
    lines = pp._render_pieces(data, before)
    assert "| step | count, all phases |  | 2.00 ms |  |" in lines
    assert "| step | count, one phase | 3.00 ms |  |  |" in lines


def test_the_shuffle_section_times_both_shuffles_alternately(tmp_path):
    out = tmp_path / "shuffle.json"
    # 32 envs x 8 steps x 4 agents (the section's n = 4) = 1024 samples: the smallest update the Feistel network shuffles
    assert pp.main(["--sections", "shuffle", "--rounds", "2", "--out", str(out), *TINY_UPDATE,
                    "--set=train.num_envs=32", "--set=train.total_timesteps=512"]) == 0
    data = json.loads(out.read_text())
    pieces = {r["piece"]: r["ms"] for r in data["pieces"]}
    assert set(pieces) == {"permutation of 1024 samples, one sort", "permutation of 1024 samples, Feistel network",
                           "whole update, one sort", "whole update, Feistel network"}
    assert all(ms > 0 for ms in pieces.values())
    assert [r["piece"] for r in data["shuffle_ratios"]] == ["permutation of 1024 samples", "whole update"]
    assert "Feistel network / one sort, whole update:" in pp.render(data)


def test_the_shuffle_section_refuses_an_update_too_small_for_the_feistel_network(capsys):
    with pytest.raises(SystemExit, match="the Feistel network starts at 1024"):
        pp.main(["--sections", "shuffle", "--rounds", "1", *TINY_UPDATE])
