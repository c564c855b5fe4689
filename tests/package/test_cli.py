"""``cube-jax eval``: argument errors, the JSON it writes, and the three kinds of policy.

The end-to-end runs use the small "easy" scenario (8 x 8, 2 agents, 3 blocks, 100 steps)
with 4 episodes, one compile per policy.
"""
from __future__ import annotations

import json
import sys
import types

import jax.numpy as jnp
import pytest

from cube_jax import cli


def run(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr()


@pytest.mark.parametrize(
    "argv, argument, reason",
    [
        (["--policy", "random", "--n", "0"], "--n", "must be >= 1"),
        (["--policy", "random", "--n", "two"], "--n", "expected an integer"),
        (["--policy", "random", "--n", "2", "--episodes", "0"], "--episodes", "must be >= 1"),
        (["--policy", "nonsense", "--n", "2"], "--policy", "'nonsense' is neither heuristic nor random"),
        (["--policy", "random", "--scenario", "nowhere"], "--scenario", "unknown scenario 'nowhere'"),
        (["--policy", "heuristic"], "--policy", "give --n N or --scenario NAME"),
        (["--policy", "random", "--n", "2", "--scenario", "easy"], "--scenario", "not allowed with argument --n"),
    ],
)
def test_bad_arguments_are_argparse_errors_naming_the_argument(argv, argument, reason, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["eval", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argument}" in err and reason in err, err


def check_json(path, episodes, seed, max_steps, blocks):
    out = json.loads(path.read_text())
    assert set(out) == {"success_rate", "mean_steps", "episodes", "intervals", "team", "loop", "env"}
    assert set(out["intervals"]) == {"success_rate", "blocks_delivered", "weight_delivered", "steps"}
    for summary in out["intervals"].values():
        assert summary["ci_low"] <= summary["mean"] <= summary["ci_high"]
    assert out["intervals"]["success_rate"]["mean"] == pytest.approx(out["success_rate"])
    assert [e["seed"] for e in out["episodes"]] == list(range(seed, seed + episodes))
    for e in out["episodes"]:
        assert set(e) == {"seed", "blocks_total", "blocks_delivered", "steps", "success", "weight_delivered",
                          "weight_total", "return"}
        assert 0 <= e["weight_delivered"] <= e["weight_total"]
        assert e["blocks_total"] == blocks and 0 <= e["blocks_delivered"] <= blocks
        assert e["success"] == (e["blocks_delivered"] == blocks)
        assert 1 <= e["steps"] <= max_steps
        if not e["success"]:
            assert e["steps"] == max_steps  # an unfinished episode runs to the limit
    assert out["success_rate"] == pytest.approx(sum(e["success"] for e in out["episodes"]) / episodes)
    assert out["mean_steps"] == pytest.approx(sum(e["steps"] for e in out["episodes"]) / episodes)
    return out


@pytest.mark.slow
def test_heuristic_solves_easy_and_writes_the_json(tmp_path, capsys):
    path = tmp_path / "out" / "heuristic.json"
    code, captured = run(["eval", "--policy", "heuristic", "--scenario", "easy", "--episodes", "4", "--seed", "3",
                          "--json", str(path), "--no-progress"], capsys)
    assert code == 0
    out = check_json(path, episodes=4, seed=3, max_steps=100, blocks=3)
    # "easy" has one fixed layout: every episode is the same, solved well within the limit
    assert out["success_rate"] == 1.0
    assert len({e["steps"] for e in out["episodes"]}) == 1 and out["mean_steps"] < 100
    assert "success rate      1.000   95% CI 1 [1, 1]" in captured.out and "episodes/s" in captured.out


@pytest.mark.slow
def test_random_policy_runs_end_to_end(tmp_path, capsys):
    path = tmp_path / "random.json"
    code, captured = run(["eval", "--policy", "random", "--scenario", "easy", "--episodes", "4", "--seed", "0",
                          "--max-steps", "30", "--json", str(path)], capsys)
    assert code == 0
    check_json(path, episodes=4, seed=0, max_steps=30, blocks=3)
    assert "eval" in captured.err  # the progress bar


@pytest.mark.slow
def test_checkpoint_policy_is_loaded_lazily_and_used(tmp_path, capsys, monkeypatch):
    calls = {}

    class StayPolicy:
        """A checkpoint stand-in whose policy stays put and notes what it was shown."""

        env_kwargs = {"scenario": "easy", "observation": "vector"}
        name = "stay"

        def for_world(self, env, name="policy"):
            self.cfg = env.cfg
            return self

        def init(self, key):
            return key

        def act(self, state, key):
            from cube_jax.core.observations import observe

            observation = observe(self.cfg, state)
            calls["shape"] = observation.shape
            return jnp.zeros(observation.shape[:-1], jnp.int32), key

    def load_policy(path):
        calls["path"] = str(path)
        return StayPolicy()

    fake = types.ModuleType("cube_jax.rl.policy")
    fake.load_policy = load_policy
    monkeypatch.setitem(sys.modules, "cube_jax.rl.policy", fake)
    folder = tmp_path / "run"
    folder.mkdir()
    path = tmp_path / "ckpt.json"
    code, _ = run(["eval", "--policy", str(folder), "--episodes", "2", "--max-steps", "20", "--json", str(path),
                   "--no-progress"], capsys)
    assert code == 0
    assert calls["path"] == str(folder) and calls["shape"] == (2, 24)  # per-agent observations of "easy"
    out = check_json(path, episodes=2, seed=0, max_steps=20, blocks=3)
    assert out["success_rate"] == 0.0 and out["mean_steps"] == 20.0  # standing still delivers nothing


@pytest.mark.slow
def test_a_mixed_batched_team_runs_vmapped(tmp_path, capsys):
    path = tmp_path / "mixed.json"
    code, captured = run(["eval", "--team", "heuristic,random", "--scenario", "easy", "--episodes", "2",
                          "--max-steps", "40", "--json", str(path), "--no-progress"], capsys)
    assert code == 0
    out = check_json(path, episodes=2, seed=0, max_steps=40, blocks=3)
    assert out["team"] == ["heuristic", "random"] and out["loop"] == "batched"
    assert "loop              batched" in captured.out


def test_the_team_planner_runs_on_the_cpu_loop_and_writes_traces(tmp_path, capsys):
    from cube_jax.trace import read_trace

    path, traces = tmp_path / "team.json", tmp_path / "traces"
    code, _ = run(["eval", "--team", "team", "--scenario", "hard", "--episodes", "2", "--seed", "4",
                   "--traces", str(traces), "--json", str(path), "--no-progress"], capsys)
    assert code == 0
    out = check_json(path, episodes=2, seed=4, max_steps=100, blocks=3)
    assert out["loop"] == "cpu" and out["success_rate"] == 1.0 and out["team"] == ["team"] * 3
    files = sorted(p.name for p in traces.iterdir())
    assert files == ["episode-000004.jsonl", "episode-000005.jsonl"]
    records = read_trace(traces / files[0])
    assert records[0]["env"] == {"scenario": "hard"} and records[0]["seed"] == 4
    assert records[-1]["steps"] == out["episodes"][0]["steps"]


@pytest.mark.parametrize(
    "argv, argument, reason",
    [
        (["--team", "heuristic,bogus,random", "--scenario", "hard"], "--team", "entry 1 has unknown kind 'bogus'"),
        (["--team", "heuristic,random", "--scenario", "hard"], "--team", "2 members for a world of 3 agents"),
        (["--team", "policy", "--scenario", "hard"], "--team", "needs a checkpoint folder"),
        (["--team", "heuristic"], "--team", "give --n N or --scenario NAME"),
        (["--team", "team", "--scenario", "hard", "--loop", "batched"], "--loop", "batched needs every member"),
        (["--policy", "random", "--team", "random", "--n", "2"], "--team", "not allowed with argument --policy"),
    ],
)
def test_bad_team_arguments_name_the_argument(argv, argument, reason, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["eval", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argument}" in err and reason in err, err


# --- checkpoints that cannot play: one line naming the argument, exit status 2 -----------------


@pytest.fixture(scope="module")
def easy_checkpoint(tmp_path_factory):
    """A tiny untrained checkpoint for the 2-agent "easy" world (vector observations of 24)."""
    import jax

    from cube_jax.rl.checkpoint import save_checkpoint
    from cube_jax.rl.networks import build_networks

    network = {"hidden": 8, "layers": 1, "activation": "tanh"}
    actor, _ = build_networks(network, 5, 1)
    params = actor.init(jax.random.PRNGKey(0), jnp.zeros((24,), jnp.float32))
    meta = {"network": network, "num_actions": 5, "observation_shape": [2, 24],
            "env_kwargs": {"scenario": "easy", "observation": "vector"}}
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "checkpoint", {"step": jnp.zeros(())}, params, meta)


def one_line_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["eval", *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_a_missing_checkpoint_in_a_team_names_the_entry(tmp_path, capsys):
    line = one_line_error(["--team", f"heuristic,heuristic,policy:{tmp_path / 'nowhere'}", "--scenario", "hard"], capsys)
    assert line.startswith("cube-jax eval: error: argument --team: team: entry 2 (policy:")
    assert "holds no checkpoint" in line


def test_a_checkpoint_of_another_world_size_names_the_entry(easy_checkpoint, capsys):
    line = one_line_error(["--team", f"heuristic,heuristic,policy:{easy_checkpoint}", "--scenario", "hard"], capsys)
    assert line.startswith("cube-jax eval: error: argument --team: team: entry 2 (policy:")
    assert "reads observations of shape (24,)" in line and "use a world of the same size" in line


def test_a_policy_folder_without_a_checkpoint_names_the_policy(tmp_path, capsys):
    line = one_line_error(["--policy", str(tmp_path), "--episodes", "1"], capsys)
    assert line == f"cube-jax eval: error: argument --policy: {str(tmp_path)!r} holds no checkpoint: no policy.json " \
                   "in it or in its checkpoint/ folder; train one with: python baselines/ippo.py"


def test_a_policy_checkpoint_on_a_world_of_another_size_names_the_policy(easy_checkpoint, capsys):
    line = one_line_error(["--policy", str(easy_checkpoint), "--scenario", "hard", "--episodes", "1"], capsys)
    assert line.startswith("cube-jax eval: error: argument --policy: the policy reads observations of shape (24,)")


def test_a_damaged_checkpoint_is_one_line(easy_checkpoint, tmp_path, capsys):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(easy_checkpoint, damaged)
    (damaged / "policy.json").write_text("{not json")
    line = one_line_error(["--team", f"heuristic,policy:{damaged}", "--scenario", "easy"], capsys)
    assert line.startswith("cube-jax eval: error: argument --team: team: entry 1 (policy:")


def test_a_team_file_entry_error_names_the_file_and_entry(tmp_path, capsys):
    path = tmp_path / "team.yaml"
    path.write_text("team:\n  - heuristic\n  - {kind: random, speed: 3}\n  - team\n")
    line = one_line_error(["--team-file", str(path), "--scenario", "hard"], capsys)
    assert line == f"cube-jax eval: error: argument --team-file: {path}: team: entry 1: random has no setting 'speed'; " \
                   "its settings: none"
    path.write_text("- heuristic\n- llm:qwen\n- team\n")
    line = one_line_error(["--team-file", str(path), "--scenario", "hard"], capsys)
    assert "entry 1: kind 'llm' plays only in cube-jax llm and cube-jax serve" in line
