"""benchmarks/rl_seeds.py: the IQM and its interval against a plain-numpy bootstrap, the table
rendered from its JSON, the command line's refusals, and one tiny run end to end."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from cube_jax.analytics.intervals import bootstrap_ci, iqm, iqm_ci, iqm_cis
from tests.bench_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


rl_seeds = load_benchmark("rl_seeds")


# --- the interquartile mean -----------------------------------------------------------------------
def plain_iqm(values) -> float:
    """The mean of the sorted values without the lowest and highest quarter (int(n / 4) each)."""
    ordered = sorted(values)
    cut = len(ordered) // 4
    middle = ordered[cut:len(ordered) - cut]
    return sum(middle) / len(middle)


def plain_bootstrap(values, strata, seed, resamples, confidence=0.95):
    """Every resample by hand from the indices iqm_ci documents, then the percentile interval."""
    rng = np.random.default_rng(seed)
    groups = {}
    for i, s in enumerate(strata):
        groups.setdefault(s, []).append(i)
    draws = [(members, rng.integers(0, len(members), size=(resamples, len(members)))) for members in groups.values()]
    stats = []
    for r in range(resamples):
        sample = [values[members[j]] for members, index in draws for j in index[r]]
        stats.append(plain_iqm(sample))
    tail = 100 * (1 - confidence) / 2
    return np.percentile(stats, tail), np.percentile(stats, 100 - tail)


def test_the_iqm_is_the_mean_of_the_middle_half():
    # 10 seeds: 2 cut from each end, the mean of 0.2, 0.9 and four 1.0s
    assert iqm([0.0, 0.1, 0.2, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]) == pytest.approx(5.1 / 6)
    assert iqm([0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 100.0]) == 1.0  # an outlier each side is cut
    assert iqm([3.0]) == 3.0 and iqm([1.0, 2.0, 3.0]) == 2.0  # nothing to cut from 3 values


@pytest.mark.parametrize("values, strata", [
    ([0.0, 0.1, 0.2, 0.9, 1.0, 1.0, 1.0, 1.0, 0.95, 0.3], None),
    ([0.0, 0.0, 1.0, 1.0, 1.0, 0.5, 0.25, 0.0, 1.0, 0.75, 0.9, 0.1], ["easy"] * 5 + ["hard"] * 7),
])
def test_iqm_interval_matches_a_plain_bootstrap_with_the_same_resamples(values, strata):
    labels = strata if strata is not None else [0] * len(values)
    point, low, high = iqm_ci(values, strata, seed=7, resamples=2000)
    assert point == pytest.approx(plain_iqm(values), abs=1e-12)
    expected_low, expected_high = plain_bootstrap(values, labels, seed=7, resamples=2000)
    assert (low, high) == (pytest.approx(expected_low, abs=1e-12), pytest.approx(expected_high, abs=1e-12))
    assert low < point < high


def test_rows_share_resamples_and_constant_rows_have_no_width():
    table = np.array([[0.0, 0.5, 1.0, 1.0, 1.0, 0.0], [0.4] * 6])
    iqms, lows, highs = iqm_cis(table, seed=3, resamples=500)
    assert (iqms[0], lows[0], highs[0]) == iqm_ci(table[0], seed=3, resamples=500)
    assert (iqms[1], lows[1], highs[1]) == (pytest.approx(0.4),) * 3


def test_iqm_interval_refuses_what_it_cannot_bootstrap():
    with pytest.raises(ValueError, match="at least one run"):
        iqm_ci([])
    with pytest.raises(ValueError, match="finite"):
        iqm_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="strata names 2"):
        iqm_ci([1.0, 2.0, 3.0], strata=["a", "b"])


# --- the table --------------------------------------------------------------------------------------
def _stats(mean, iqm_, low=0.5, high=1.0):
    return {"mean": mean, "mean_low": low, "mean_high": high, "iqm": iqm_, "iqm_low": low, "iqm_high": high}


def _run(algo, world, success, blocks, seconds=100.0, sampled=None):
    return {"algo": algo, "world": world, "num_seeds": len(success), "env_steps_per_seed": 2_000_000,
            "wall_seconds": seconds, "eval_episodes": 128, "greedy_success_per_seed": success,
            "greedy_blocks_per_seed": blocks, "sampled_success_per_seed": sampled}


def test_render_writes_one_row_per_run_and_per_algorithm_over_worlds():
    data = {"target": 0.9, "confidence": 0.95, "resamples": 10000, "runs": [
        dict(_run("ippo", "easy", [1.0, 1.0, 0.0], [1.0, 1.0, 0.67], 412.4, [0.5, 0.25, 0.0]), seeds_at_target=2,
             success=_stats(0.667, 0.667, 0.0, 1.0), blocks=_stats(0.89, 0.89, 0.67, 1.0)),
        dict(_run("ippo", "hard", [0.5, 1.0, 1.0], [0.67, 1.0, 1.0], 800.0), seeds_at_target=2,
             success=_stats(0.833, 0.833), blocks=_stats(0.89, 0.89)),
    ], "aggregates": [
        {"algo": "ippo", "worlds": ["easy", "hard"], "num_seeds": 6, "wall_seconds": 1212.4, "seeds_at_target": 4,
         "success": _stats(0.75, 0.875, 0.5, 0.92), "blocks": _stats(0.89, 0.917, 0.78, 1.0)},
    ]}
    lines = rl_seeds.render(data).splitlines()
    assert lines[2] == ("| IPPO | easy | 3 | 2.00e+06 | 0.67 [0.00, 1.00] | 0.67 [0.00, 1.00] | 0.89 [0.67, 1.00] "
                        "| 0.89 [0.67, 1.00] | 2 / 3 | 1.00, 1.00, 0.00 | 0.50, 0.25, 0.00 | 412 s |")
    assert lines[3] == ("| IPPO | hard | 3 | 2.00e+06 | 0.83 [0.50, 1.00] | 0.83 [0.50, 1.00] | 0.89 [0.50, 1.00] "
                        "| 0.89 [0.50, 1.00] | 2 / 3 | 0.50, 1.00, 1.00 | - | 800 s |")
    assert lines[4] == ("| IPPO | all: easy, hard (stratified) | 3 + 3 | 2.00e+06, 2.00e+06 | 0.75 [0.50, 0.92] "
                        "| 0.88 [0.50, 0.92] | 0.89 [0.78, 1.00] | 0.92 [0.78, 1.00] | 4 / 6 |  |  | 1212 s |")
    assert len(lines) == 7 and "128 episodes" in lines[6] and "10000 resamples" in lines[6]


def test_summarise_fills_the_statistics_from_the_seeds():
    success = [1.0] * 8 + [0.0] * 2
    easy = _run("mappo", "easy", success, [1.0] * 8 + [2 / 3] * 2)
    hard = _run("mappo", "hard", [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.95], [1 / 3] * 10)
    data = rl_seeds.summarise([easy, hard])
    run = data["runs"][0]
    assert run["seeds_at_target"] == 8
    assert run["success"]["mean"] == pytest.approx(0.8) and run["success"]["iqm"] == 1.0
    assert (run["success"]["mean_low"], run["success"]["mean_high"]) == bootstrap_ci(success)[1:]
    assert (run["success"]["iqm_low"], run["success"]["iqm_high"]) == iqm_ci(success)[1:]
    assert run["blocks"]["iqm"] == 1.0 and run["blocks"]["mean"] == pytest.approx(14 / 15)
    assert data["runs"][1]["seeds_at_target"] == 2
    (both,) = data["aggregates"]
    assert both["worlds"] == ["easy", "hard"] and both["num_seeds"] == 20 and both["seeds_at_target"] == 10
    assert both["success"]["iqm"] == pytest.approx(iqm(success + hard["greedy_success_per_seed"]))
    strata = [0] * 10 + [1] * 10
    assert (both["success"]["iqm_low"], both["success"]["iqm_high"]) == \
        iqm_ci(success + hard["greedy_success_per_seed"], strata)[1:]


def test_a_new_measurement_replaces_its_own_run_and_keeps_the_others():
    previous = rl_seeds.summarise([_run("ippo", "n2", [1.0, 0.0], [1.0, 0.5]), _run("ippo", "easy", [0.0, 0.0],
                                                                                  [0.0, 0.0])])
    runs = rl_seeds.merged(previous, [_run("mappo", "easy", [1.0, 1.0], [1.0, 1.0]),
                                      _run("ippo", "easy", [1.0, 1.0], [1.0, 1.0])])
    assert [(r["algo"], r["world"]) for r in runs] == [("ippo", "easy"), ("mappo", "easy"), ("ippo", "n2")]
    assert runs[0]["greedy_success_per_seed"] == [1.0, 1.0]


# --- the command line ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--worlds", "easy,moon"], "--worlds: unknown name 'moon'; choose from easy, hard, n2, n3, n4"),
    (["--algos", "dqn"], "--algos: unknown name 'dqn'; choose from ippo, mappo, pqn_vdn"),
    (["--algos", ","], "--algos: name at least one of"),
    (["--seeds", "0"], "--seeds must be at least 1, got 0"),
    (["--budget", "easy"], "--budget 'easy': expected WORLD=STEPS"),
    (["--budget", "easy=lots"], "--budget 'easy=lots': STEPS must be a whole number"),
    (["--budget", "easy=2.5"], "--budget 'easy=2.5': STEPS must be a positive whole number"),
    (["--budget", "moon=5"], "--budget 'moon=5': unknown world 'moon'"),
    (["--worlds", "easy", "--budget", "hard=5000000"], "--budget 'hard=5000000': world 'hard' is not among --worlds"),
    (["--worlds", "easy", "--algos", "ippo", "--budget", "easy=100"], "--budget easy=100: ippo cannot run it"),
    (["--set", "train.ent_coef_final"], "--set 'train.ent_coef_final': override 'train.ent_coef_final': expected key=value"),
    (["--set", "num_seeds=3"], "--set 'num_seeds=3': num_seeds is set by this script; choose it with --seeds"),
    (["--set", "env.n=4"], "--set 'env.n=4': env.n is set by this script; choose it with --worlds"),
    (["--set", "train.target_success=0.8"], "train.target_success is set by this script (every seed trains"),
    (["--set", "output.root=/tmp"], "--set 'output.root=/tmp': the script chooses the run's outputs"),
    (["--algos", "ippo", "--set", "train.ent_coef_final=-1"],
     "--set train.ent_coef_final=-1: ippo cannot run it: override 'train.ent_coef_final=-1': train.ent_coef_final "
     "must be greater than or equal to 0"),
    (["--algos", "ippo", "--set", "train.entropy=0"], "--set train.entropy=0: ippo cannot run it"),
])
def test_bad_input_exits_naming_the_argument(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        rl_seeds.parse_args(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_budgets_default_per_world_and_can_be_overridden(tmp_path):
    tmp_path = tmp_path.resolve()
    args = rl_seeds.parse_args(["--worlds", "easy,n2", "--algos", "ippo", "--seeds", "3", "--budget", "n2=5e6",
                                "--out", str(tmp_path)])
    assert args.budgets == {"easy": rl_seeds.WORLDS["easy"].budget, "n2": 5_000_000}
    easy, n2 = args.plans
    assert easy.command == (f"python baselines/ippo.py num_seeds=3 train.target_success=null "
                            f"train.total_timesteps={rl_seeds.WORLDS['easy'].budget} output.root={tmp_path} "
                            "output.name=ippo-easy")
    assert n2.config["env"]["scenario"] is None and n2.config["env"]["n"] == 2
    assert n2.config["train"]["total_timesteps"] == 5_000_000 and n2.run_dir == tmp_path / "ippo-n2"


def test_the_recurrent_agents_run_through_their_own_scripts(tmp_path):
    tmp_path = tmp_path.resolve()
    args = rl_seeds.parse_args(["--worlds", "n2", "--algos", "ippo_rnn,mappo_rnn", "--budget", "n2=5e6",
                                "--out", str(tmp_path)])
    ippo, mappo = args.plans
    assert ippo.command == ("python baselines/ippo_rnn.py --preset curriculum env.n=2 num_seeds=10 "
                            f"train.target_success=null train.total_timesteps=5000000 output.root={tmp_path} "
                            "output.name=ippo_rnn-n2")
    assert mappo.command.startswith("python baselines/mappo_rnn.py --preset curriculum env.n=2 ")
    for plan, algo in ((ippo, "ippo"), (mappo, "mappo")):
        assert plan.config["algo"] == algo and plan.config["network"]["recurrent"] is True
        assert plan.config["env"]["n"] == 2 and plan.config["shaping"]["reach"] == "nearest"  # the world's preset
    assert ippo.run_dir == tmp_path / "ippo_rnn-n2"


def test_a_variant_adds_its_overrides_and_keeps_its_runs_apart(tmp_path):
    tmp_path = tmp_path.resolve()
    (plan,) = rl_seeds.parse_args(["--worlds", "n3", "--algos", "ippo", "--set", "train.ent_coef_final=0",
                                   "--out", str(tmp_path)]).plans
    assert plan.command == ("python baselines/ippo.py --preset curriculum env.n=3 num_seeds=10 "
                            f"train.target_success=null train.total_timesteps=30000000 output.root={tmp_path} "
                            "output.name=ippo-n3+train.ent_coef_final=0 train.ent_coef_final=0")
    assert plan.config["train"]["ent_coef_final"] == 0.0 and plan.variant == ("train.ent_coef_final=0",)
    assert plan.run_dir == tmp_path / "ippo-n3+train.ent_coef_final=0"
    # rows: the variant beside the plain run, each replaced only by a measurement of its own
    plain = _run("ippo", "n3", [0.5, 0.5], [0.8, 0.8])
    variant = dict(_run("ippo", "n3", [0.9, 0.7], [0.9, 0.9]), variant=["train.ent_coef_final=0"])
    runs = rl_seeds.merged(rl_seeds.summarise([plain, dict(variant, greedy_success_per_seed=[0.0, 0.0])]), [variant])
    assert [(r["algo"], r.get("variant")) for r in runs] == [("ippo", None), ("ippo", ["train.ent_coef_final=0"])]
    assert runs[0]["greedy_success_per_seed"] == [0.5, 0.5] and runs[1]["greedy_success_per_seed"] == [0.9, 0.7]
    data = rl_seeds.summarise(runs + [dict(variant, world="n2")])
    (agg,) = data["aggregates"]  # the variant over n2 and n3; the plain run has one world only
    assert agg["variant"] == ["train.ent_coef_final=0"] and agg["worlds"] == ["n3", "n2"] and agg["num_seeds"] == 4
    lines = rl_seeds.render(data).splitlines()
    assert lines[2].startswith("| IPPO | n = 3 | 2 |") and lines[3].startswith("| IPPO (train.ent_coef_final=0) | n = 3 |")
    assert lines[5].startswith("| IPPO (train.ent_coef_final=0) | all: n = 3, n = 2 (stratified) | 2 + 2 |")


def test_a_run_starts_from_an_earlier_run_of_the_script_named_by_its_folder(tmp_path, capsys):
    tmp_path = tmp_path.resolve()
    argv = ["--worlds", "n4", "--algos", "ippo", "--set", "train.init_from=ippo-n3", "--out", str(tmp_path)]
    with pytest.raises(SystemExit):
        rl_seeds.parse_args(argv)
    assert "--set 'train.init_from=ippo-n3': no finished run 'ippo-n3' with a checkpoint in" in capsys.readouterr().err
    source = tmp_path / "ippo-n3" / "checkpoint"
    (source / "runner").mkdir(parents=True)
    meta = {"algo": "ippo", "env_kwargs": {"observation": "vector", "view_radius": 3, "n": 3},
            "network": {"hidden": 64, "layers": 2, "activation": "tanh", "recurrent": False, "gru_hidden": 128}}
    (source / "policy.json").write_text(json.dumps(meta))
    (plan,) = rl_seeds.parse_args(argv).plans
    assert plan.command.endswith(f"output.name=ippo-n4+train.init_from=ippo-n3 train.init_from={tmp_path / 'ippo-n3'}")
    assert plan.config["train"]["init_from"] == str(tmp_path / "ippo-n3") and plan.variant == ("train.init_from=ippo-n3",)
    (source / "policy.json").write_text(json.dumps(dict(meta, network=dict(meta["network"], hidden=32))))
    with pytest.raises(SystemExit):
        rl_seeds.parse_args(argv)
    assert ("--set train.init_from=ippo-n3: ippo cannot run it: train.init_from=" in capsys.readouterr().err)


def _finished_run(tmp_path, edit):
    """A plan and a run folder holding its config.yaml (changed by ``edit``) and a summary.json."""
    (plan,) = rl_seeds.parse_args(["--worlds", "easy", "--algos", "ippo", "--out", str(tmp_path)]).plans
    saved = yaml.safe_load(yaml.safe_dump(dict(plan.config, output={"root": str(tmp_path)})))
    edit(saved)
    plan.run_dir.mkdir(parents=True)
    (plan.run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
    (plan.run_dir / "summary.json").write_text('{"env_steps": 20}')
    return plan


def test_a_finished_run_of_the_same_config_is_reused_even_before_a_key_was_added(tmp_path, capsys):
    plan = _finished_run(tmp_path, lambda saved: saved["eval"].pop("greedy"))  # its default, as if added since
    assert rl_seeds.run(plan, "1/1") == {"env_steps": 20}
    assert "[1/1] ippo on easy: reusing the finished run" in capsys.readouterr().out


def test_a_finished_run_of_another_config_is_refused_and_kept(tmp_path):
    plan = _finished_run(tmp_path, lambda saved: saved["train"].update(lr=0.5))
    with pytest.raises(rl_seeds.RunFailed, match="holds a finished run of another config"):
        rl_seeds.run(plan, "1/1")
    assert (plan.run_dir / "summary.json").read_text() == '{"env_steps": 20}'


# --- one tiny run ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_quick_run_writes_its_json_and_figure_and_is_reused(tmp_path):
    argv = [sys.executable, str(ROOT / "benchmarks" / "rl_seeds.py"), "--quick", "--algos", "ippo", "--worlds", "easy",
            "--out", str(tmp_path)]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert "[1/1] ippo on easy: 2 seeds x 192 env steps, started" in first.stdout
    data = json.loads((tmp_path / "rl_seeds.json").read_text())
    (run,) = data["runs"]
    assert (run["algo"], run["world"], run["num_seeds"], run["env_steps_per_seed"]) == ("ippo", "easy", 2, 192)
    assert len(run["greedy_success_per_seed"]) == len(run["greedy_blocks_per_seed"]) == 2
    assert run["eval_episodes"] == 4 and data["aggregates"] == []
    curve = run["curve"]
    assert len(curve["success"]["mean"]) == len(curve["env_steps_per_seed"]) <= 3
    assert (tmp_path / "rl_seeds_easy.png").stat().st_size > 0
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "reusing the finished run" in again.stdout, again.stderr[-2000:]
