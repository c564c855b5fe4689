"""Sweeps in one program (cube_jax.rl.sweep, cube-jax sweep): which keys run traced, that a
traced point trains exactly as the same value built into its own program, and the command's
files, resume and refusals."""
import json
import os
import textwrap

import pytest

from cube_jax.cli import main
from cube_jax.rl import sweep
from cube_jax.rl.config import build
from tests.rl_tiny import json_from_script

TINY = ["train.num_envs=8", "train.num_steps=8", "train.total_timesteps=192", "train.updates_per_call=2",
        "train.num_minibatches=2", "train.update_epochs=1", "eval.episodes=4", "num_seeds=2", "env.scenario=easy"]


@pytest.fixture(scope="module")
def config():
    return build("ippo", overrides=TINY)


def test_grid_errors_name_the_key():
    with pytest.raises(sweep.SweepError, match="train.nope.*unknown config key"):
        sweep.parse_grid("ippo", ["train.nope=1,2"], TINY)
    with pytest.raises(sweep.SweepError, match="train.lr: given twice"):
        sweep.parse_grid("ippo", ["train.lr=0.1", "train.lr=0.2"], TINY)
    with pytest.raises(sweep.SweepError, match="empty value"):
        sweep.parse_grid("ippo", ["train.lr=0.1,"], TINY)
    with pytest.raises(sweep.SweepError, match="listed twice"):
        sweep.parse_grid("ippo", ["train.lr=1e-3,0.001"], TINY)
    with pytest.raises(sweep.SweepError, match="train.gamma.*less than or equal to 1"):
        sweep.parse_grid("ippo", ["train.gamma=0.9,1.5"], TINY)  # out of the schema's range
    # values typed by the schema: YAML reads "1e-3" as a string
    assert sweep.parse_grid("ippo", ["train.lr=1e-3,2e-3"], TINY) == {"train.lr": [0.001, 0.002]}


def test_keys_split_into_traced_and_static(config):
    grid = sweep.parse_grid("ippo", ["train.lr=1e-3,2e-3", "train.ent_coef=0,0.02", "train.num_steps=8,16",
                                     "train.anneal_lr=true,false"], TINY)
    plan = sweep.classify(config, grid)
    assert plan.traced == ("train.lr", "train.ent_coef")
    assert plan.static == ("train.num_steps", "train.anneal_lr")
    assert "shape or a branch" in plan.why_static["train.num_steps"]
    assert len(plan.groups(grid)) == 4 and len(plan.points(grid)) == 4


def test_a_drawn_world_keeps_the_numbers_traced():
    # a task's world trains on a pool of layouts drawn when the trainer is built; building it
    # inside the traced program must not make every key static
    n1 = build("pqn_vdn", overrides=[*(o for o in TINY if o != "env.scenario=easy"), "env.scenario=null", "env.n=1"])
    assert sweep.classify(n1, {"pqn.lr": [1e-3, 2e-3]}).traced == ("pqn.lr",)


def test_a_key_training_never_reads_is_refused():
    pqn = build("pqn_vdn", overrides=TINY)
    with pytest.raises(sweep.SweepError, match="never reads train.lr"):
        sweep.classify(pqn, {"train.lr": [1e-3, 2e-3]})
    assert sweep.classify(pqn, {"pqn.lr": [1e-3, 2e-3]}).traced == ("pqn.lr",)


def test_a_traced_point_trains_as_its_own_program():
    """The point ent_coef=0.02 of a traced grid and a program built with ent_coef=0.02: the
    same curves and the same evaluation, bit for bit on the CPU. Bit for bit holds with the
    CPU backend's fusion emitters, its default, which the rest of the suite turns off to
    compile faster (tests/conftest.py): the loop emitters round a traced coefficient and a
    constant one differently in the last bits. So the two programs run in a process of
    their own, with the default emitters."""
    script = textwrap.dedent(f"""
        import json
        import numpy as np
        from cube_jax.rl import sweep
        from cube_jax.rl.config import build
        config = build("ippo", overrides={TINY!r})
        grid = {{"train.ent_coef": [0.0, 0.02]}}
        traced = sweep.run_group(config, sweep.classify(config, grid), grid, {{}})
        alone = sweep.run_group(config, sweep.Plan((), ("train.ent_coef",), {{}}), {{"train.ent_coef": [0.02]}},
                                {{"train.ent_coef": 0.02}})
        out = {{"points": traced.points, "traced": [traced.curves, traced.final], "alone": [alone.curves, alone.final]}}
        print(json.dumps(out, default=lambda x: np.asarray(x).tolist()))
        """)
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_cpu_use_fusion_emitters" not in f)
    out = json_from_script(script, flags)
    (traced_curves, traced_final), (alone_curves, alone_final) = out["traced"], out["alone"]
    assert out["points"] == [{"train.ent_coef": 0.0}, {"train.ent_coef": 0.02}]
    for name, values in alone_curves.items():
        if name != "env_steps":
            assert traced_curves[name][1] == values[0], name
    for name, values in alone_final.items():
        assert traced_final[name][1] == values[0], name
    # the two points differ: the swept value reaches the update
    assert traced_curves["ent_coef"][1] == [pytest.approx(0.02)] * 2
    assert traced_curves["policy_loss"][0][1:] != traced_curves["policy_loss"][1][1:]


def test_the_command_writes_resumes_and_refuses(tmp_path, capsys, caplog):
    out = tmp_path / "sweep"
    argv = ["sweep", "ippo", "--task", "easy", "--grid", "train.ent_coef=0,0.02", "--grid", "train.update_epochs=1,2",
            "--seeds", "2", "--env-steps", "192", "--out", str(out),
            *[a for o in TINY if not o.startswith(("num_seeds", "train.total", "env.scenario", "train.update_epochs"))
              for a in ("--set", o)]]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "(chosen)" in printed and "train.ent_coef" in printed
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["traced"] == ["train.ent_coef"] and summary["static"] == ["train.update_epochs"]
    assert len(summary["rows"]) == 4 and summary["best"] in summary["rows"]
    assert all(len(r["greedy_success_rate"]["per_seed"]) == 2 for r in summary["rows"])
    assert (out / "sweep.png").stat().st_size > 0 and (out / "sweep.md").read_text().count("\n|") == 6
    # each group records the run that trained it, and the table names it
    for group in summary["groups"]:
        assert group["provenance"]["command"].startswith("cube-jax sweep ippo --task easy")
        assert {"git_commit", "git_dirty", "device", "cpu_model", "cpus", "jax"} <= set(group["provenance"])
    assert (out / "sweep.md").read_text().count("\ngroup ") == 2
    # a rerun keeps the finished groups (no training: their files are read back)
    group = out / "groups" / "group-1.json"
    kept = json.loads(group.read_text())
    kept["wall_seconds"] = -1.0  # marks the file: a rerun that trained again would overwrite it
    group.write_text(json.dumps(kept))
    caplog.clear()
    with caplog.at_level("INFO", logger="cube_jax.sweep"):
        assert main(argv) == 0
    assert sum("done before, kept" in r.getMessage() for r in caplog.records) == 2
    assert json.loads(group.read_text())["wall_seconds"] == -1.0
    # a kept group whose points are not this sweep's (the keys split otherwise) is refused, not read as done
    kept["points"] = [{"train.ent_coef": 0.5}]
    group.write_text(json.dumps(kept))
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and "group-1.json holds the points" in capsys.readouterr().err
    # the same folder with another grid is refused, naming what differs
    with pytest.raises(SystemExit) as stop:
        main([*argv[:5], "train.ent_coef=0,0.05", *argv[6:]])
    assert stop.value.code == 2
    assert "differs in: grid" in capsys.readouterr().err


def test_a_tie_goes_to_the_point_that_learned_sooner():
    from types import SimpleNamespace

    from cube_jax.cli.sweep import summarize

    final = {m: [[1.0, 1.0], [1.0, 1.0]] for m in ("greedy_success_rate", "sampled_success_rate",
                                                      "greedy_blocks_delivered_frac")}
    group = {"static": {}, "points": [{"train.lr": 1e-3}, {"train.lr": 3e-3}], "env_steps": 100,
             "wall_seconds": 1.0, "final": final,
             "curves": {"success_rate": [[None, 0.2, 1.0], [None, 0.8, 1.0]]}}
    plan = SimpleNamespace(traced=["train.lr"], static=[], why_static={})
    summary = summarize({"grid": {"train.lr": [1e-3, 3e-3]}}, plan, [group])
    assert summary["best"]["values"] == {"train.lr": 3e-3}
    assert [r["train_success_mean"] for r in summary["rows"]] == [pytest.approx(0.6), pytest.approx(0.9)]
