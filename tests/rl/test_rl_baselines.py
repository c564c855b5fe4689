"""Smoke tests of the baseline scripts on a tiny budget.

Each script runs once as a subprocess and its whole run folder is checked; the IPPO run
is then resumed from its checkpoint, and its saved policy plays through ``load_policy``,
the PettingZoo adapter and ``cube-jax eval``. Subprocesses compile with LLVM
optimisation off (the programs are tiny, compile time dominates) and share the
persistent compilation cache set up by ``tests/conftest.py``, so the resumed run reuses
the first run's programs.
"""
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("optax")

import jax  # noqa: E402

import cube_jax  # noqa: E402
from tests.rl_tiny import REPO  # noqa: E402

ENVS, STEPS = 8, 8  # env steps per update = 64
TINY = [
    f"train.num_envs={ENVS}",
    f"train.num_steps={STEPS}",
    f"train.total_timesteps={3 * ENVS * STEPS}",  # 3 updates ...
    "train.updates_per_call=2",  # ... in a full chunk and a partial one (one compiled program)
    "train.update_epochs=1",
    "train.num_minibatches=1",
    "network.hidden=16",
    "network.layers=1",
    "eval.episodes=4",
    "output.checkpoint_every=1",
    "train.target_success=null",
]


def subprocess_env() -> dict:
    return dict(os.environ, JAX_PLATFORMS="cpu")  # XLA_FLAGS as tests/conftest.py set them


def run_script(script: str, args, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, str(REPO / "baselines" / script), *args], capture_output=True, text=True,
                          cwd=cwd, env=subprocess_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


def run_folder(stdout: str) -> Path:
    first = stdout.splitlines()[0]
    assert first.startswith("run folder: "), first  # printed before training starts
    return Path(first[len("run folder: "):])


def check_run_folder(run_dir: Path, updates: int, algo: str) -> dict:
    """Every output of a run: summary.json (API.md fields), metrics.jsonl, PNG, GIF, checkpoint.

    Env steps count every seed of the run (the presets train several at once).
    """
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algo"] == algo
    for key, kind in {"env_steps": int, "wall_seconds": float, "steps_per_second": float}.items():
        assert isinstance(summary[key], kind), (key, summary[key])
    seeds = yaml.safe_load((run_dir / "config.yaml").read_text())["num_seeds"]
    assert summary["env_steps"] == updates * ENVS * STEPS * seeds
    assert summary["steps_per_second"] > 0
    for key in ("success_rate", "blocks_delivered_frac", "return_mean"):
        assert isinstance(summary["eval"][key], float) and np.isfinite(summary["eval"][key]), key
    assert 0.0 <= summary["eval"]["success_rate"] <= 1.0
    assert 0.0 <= summary["eval"]["blocks_delivered_frac"] <= 1.0
    assert len(summary["eval"]["block_delivery_rate"]) == len(summary["eval"]["block_weights"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == list(range(1, updates + 1))  # no padded updates logged
    assert [r["env_steps"] for r in rows] == [u * ENVS * STEPS * seeds for u in range(1, updates + 1)]
    if seeds > 1:
        assert len(summary["eval_per_seed"]["success_rate"]) == seeds
        assert all(len(r["success_rate_per_seed"]) == seeds for r in rows)
    assert all(np.isfinite(r["policy_loss"]) and "episode_return" in r for r in rows)
    assert all(r["lr"] > 0 for r in rows)
    assert (run_dir / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (run_dir / "policy.gif").read_bytes()[:3] == b"GIF"
    meta = json.loads((run_dir / "checkpoint" / "policy.json").read_text())
    assert meta["algo"] == algo and meta["updates"] == updates
    assert (run_dir / "checkpoint" / "policy").is_dir() and (run_dir / "checkpoint" / "runner").is_dir()
    return summary


@pytest.fixture(scope="module")
def ippo_run(tmp_path_factory):
    """The run folder of one tiny ``baselines/ippo.py`` run, shared by the tests below.

    Under pytest-xdist the tests of this module may land on different workers; the run
    is made once, in the session's shared temporary folder, under a file lock, and the
    other workers reuse it.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "rl-baselines-ippo"
    with open(shared / "rl-baselines-ippo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        run_dir = root / "ippo-tiny"
        if not (run_dir / "summary.json").is_file():
            stdout = run_script("ippo.py", TINY + [f"output.root={root}", "output.name=ippo-tiny"], REPO)
            progress = [line for line in stdout.splitlines() if line.startswith("update ")]
            assert [line.split()[1] for line in progress] == ["2/3", "3/3"]  # one progress line per chunk
            assert "steps/s" in progress[-1]
            assert run_folder(stdout) == run_dir
            (root / "ippo-tiny.stdout").write_text(stdout)
    return run_dir


@pytest.mark.slow
def test_ippo_script_writes_the_run_folder(ippo_run):
    summary = check_run_folder(ippo_run, updates=3, algo="ippo")
    assert summary["num_seeds"] == 4  # the CPU preset trains four seeds at once
    from cube_jax.cpus import usable_cpus
    from cube_jax.rl import config as C
    from cube_jax.rl.run import HOST_DEVICES_FLAG, cpu_device_count

    if HOST_DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):  # the script split the CPU: one device per core
        assert summary["devices"] == cpu_device_count(C.build("ippo", overrides=TINY), usable_cpus())
    assert summary["env"]["scenario"] == "easy"
    assert summary["updates"] == 3
    rows = [json.loads(line) for line in (ippo_run / "metrics.jsonl").read_text().splitlines()]
    lr = yaml.safe_load((ippo_run / "config.yaml").read_text())["train"]["lr"]
    np.testing.assert_allclose([r["lr"] for r in rows], [lr, lr * 2 / 3, lr / 3], rtol=1e-5)  # annealed over 3


@pytest.mark.slow
def test_greedy_failures_reads_every_seed_of_a_run_and_agrees_with_the_evaluation(ippo_run, tmp_path):
    # benchmarks/greedy_failures.py on the run folder: every seed's greedy success is what the
    # evaluation module's rollout gives on the same layouts, and its failures are split in two
    from cube_jax.evaluation import rollout
    from cube_jax.evaluation.batched import episode_keys
    from cube_jax.rl.checkpoint import restore_runner
    from cube_jax.rl.config import build
    from cube_jax.rl.policy import ActorPolicy
    from cube_jax.rl.run import Session
    from tests.bench_scripts import load_benchmark

    gf = load_benchmark("greedy_failures")
    out = tmp_path / "failures.json"
    assert gf.main([str(ippo_run), "--episodes", "6", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    (run,) = data["runs"]
    assert (run["algo"], run["recurrent"], len(run["seeds"])) == ("ippo", False, 4)
    assert (tmp_path / "failures.png").read_bytes()[:4] == b"\x89PNG"
    session = Session(build("ippo", overrides=[f"output.resume={ippo_run}"]))
    params = session.trainer.policy_params(restore_runner(ippo_run / "checkpoint", session.abstract))
    keys = episode_keys(gf.EVAL_SEED, 6)
    env = session.trainer.env
    for i, seed in enumerate(run["seeds"]):
        policy = ActorPolicy(session.trainer.actor, jax.tree.map(lambda x: x[i], params), env.cfg)
        stats, _ = rollout(env, policy, keys)
        assert seed["greedy_success"] == pytest.approx(float(np.mean(stats.success)))
        assert seed["failed"] == 6 - int(np.sum(stats.success)) == seed["frozen"] + seed["moving"]
        assert 0.0 <= seed["sampled_success"] <= 1.0


@pytest.mark.slow
def test_the_last_line_names_the_reported_seed_and_shows_every_seed(ippo_run):
    summary = json.loads((ippo_run / "summary.json").read_text())
    last = (ippo_run.parent / "ippo-tiny.stdout").read_text().splitlines()[-1]
    ev, best = summary["eval"], summary["policy_seed_index"]
    per_seed = ", ".join(f"{i}: {rate:.2f}" for i, rate in enumerate(summary["eval_per_seed"]["success_rate"]))
    assert last == (
        f"eval (greedy, 4 episodes): seed {best} reported and saved: success {ev['success_rate']:.2f}, "
        f"blocks delivered {ev['blocks_delivered_frac']:.2f}, return {ev['return_mean']:+.3f}; "
        f"success per seed: [{per_seed}]"
    )
    assert per_seed.count(":") == 4  # the preset's four seeds
    assert json.loads((ippo_run / "checkpoint" / "policy.json").read_text())["seed_index"] == best


@pytest.mark.slow
def test_mappo_script_writes_the_run_folder(tmp_path):
    stdout = run_script("mappo.py", ["--preset", "hard"] + TINY + [f"output.root={tmp_path}"], tmp_path)
    summary = check_run_folder(run_folder(stdout), updates=3, algo="mappo")
    assert summary["env"]["scenario"] == "hard"
    saved = yaml.safe_load((run_folder(stdout) / "config.yaml").read_text())
    assert saved["shaping"]["enabled"] and saved["shaping"]["align_weight"] == 1.0  # the hard preset
    assert saved["shaping"]["reach"] == "nearest" and saved["num_seeds"] == 4
    assert summary["eval"]["block_weights"] == [3, 2, 1]


@pytest.mark.slow
def test_training_resumes_from_the_checkpoint(ippo_run, tmp_path):
    resumed = tmp_path / "resumed"
    shutil.copytree(ippo_run, resumed)
    stdout = run_script("ippo.py", [f"output.resume={resumed}", f"train.total_timesteps={5 * ENVS * STEPS}"], REPO)
    assert "resumed from" in stdout and "at update 3" in stdout
    summary = check_run_folder(resumed, updates=5, algo="ippo")  # rows 1-3 kept from the first run, 4-5 added
    assert summary["updates"] == 5
    first = [json.loads(line) for line in (ippo_run / "metrics.jsonl").read_text().splitlines()]
    again = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert again[:3] == first


@pytest.mark.slow
def test_saved_policy_plays_in_jax_and_pettingzoo(ippo_run):
    import cube_jax
    from cube_jax.rl.policy import load_policy

    policy = load_policy(ippo_run)
    assert policy.env_kwargs["scenario"] == "easy"
    env = cube_jax.make(**policy.env_kwargs)
    _, ts = env.reset(jax.random.PRNGKey(0))
    act = jax.jit(policy.act)
    actions = act(ts.observation, jax.random.PRNGKey(1))
    assert actions.shape == (2,) and actions.dtype == np.int32
    batched = jax.vmap(policy.act, in_axes=(0, 0, None))(
        np.stack([ts.observation] * 3), jax.random.split(jax.random.PRNGKey(2), 3), False
    )
    assert batched.shape == (3, 2) and 0 <= int(batched.min()) and int(batched.max()) < env.num_actions

    pz = cube_jax.parallel_env(**policy.env_kwargs)
    obs, _ = pz.reset(seed=0)
    key, steps = jax.random.PRNGKey(3), 0
    while pz.agents:
        stacked = np.stack([obs[a] for a in pz.possible_agents])
        key, sub = jax.random.split(key)
        chosen = np.asarray(act(stacked, sub))
        obs, _, _, _, _ = pz.step({a: int(chosen[i]) for i, a in enumerate(pz.agents)})
        steps += 1
    assert 1 <= steps <= env.max_steps

    with pytest.raises(ValueError, match="expects 24"):
        policy.act(np.zeros((2, 7), np.float32), jax.random.PRNGKey(0))


@pytest.mark.slow
def test_eval_cli_loads_the_checkpoint(ippo_run, tmp_path):
    out = tmp_path / "eval.json"
    proc = subprocess.run(
        [sys.executable, "-m", "cube_jax.cli", "eval", "--policy", str(ippo_run / "checkpoint"), "--episodes", "4",
         "--no-progress", "--json", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=600, env=subprocess_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(result["episodes"]) == 4 and 0.0 <= result["success_rate"] <= 1.0


def test_bad_override_fails_before_training(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "baselines" / "ippo.py"), "train.num_env=4"],
                          capture_output=True, text=True, cwd=tmp_path, env=subprocess_env(), timeout=120)
    assert proc.returncode == 2
    assert "unknown config key 'train.num_env'" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_grid_observations_train_and_play(tmp_path):
    """Every observation form of the core trains; the grid form ([K, K, 6] per agent) goes
    through the actor's flattening in training, evaluation, the GIF and the saved policy."""
    from cube_jax.rl.policy import load_policy

    stdout = run_script("ippo.py", TINY + ["env.observation=grid", "num_seeds=1", "train.total_timesteps=64",
                                           f"output.root={tmp_path}"], tmp_path)
    run_dir = run_folder(stdout)
    summary = check_run_folder(run_dir, updates=1, algo="ippo")
    assert summary["env"]["observation"] == "grid"
    policy = load_policy(run_dir)
    assert policy.feature_shape == (8, 8, 6) and policy.observation_size == 384
    env = cube_jax.make(**policy.env_kwargs)
    _, ts = env.reset(jax.random.PRNGKey(0))
    actions = policy.act(ts.observation, jax.random.PRNGKey(2))
    assert actions.shape == (2,) and actions.dtype == np.int32
    with pytest.raises(ValueError, match=r"has \(8, 8, 5\) features per agent, the policy expects \(8, 8, 6\)"):
        policy.act(np.zeros((2, 8, 8, 5), np.float32), jax.random.PRNGKey(0))


# --- the stall guard of the scripts ------------------------------------------------------------
def test_stalled_fetch_is_reported_and_busy_or_failing_ones_are_not():
    import threading
    import time

    from baselines.launch import RuntimeStall, wait_for

    assert wait_for(lambda: 7, "a value", stall_seconds=1.0, poll=0.05) == 7

    def busy():  # a long computation keeps the process's CPU clock moving
        end = time.perf_counter() + 0.6
        while time.perf_counter() < end:
            pass
        return "done"

    assert wait_for(busy, "a busy result", stall_seconds=0.2, poll=0.05) == "done"
    never = threading.Event()
    with pytest.raises(RuntimeStall, match="while computing a stalled result"):
        wait_for(lambda: never.wait(30), "a stalled result", stall_seconds=0.2, poll=0.05)
    never.set()  # release the helper thread

    def broken():
        raise ValueError("bad shapes")

    with pytest.raises(ValueError, match="bad shapes"):
        wait_for(broken, "a failing result", stall_seconds=1.0, poll=0.05)


def test_a_stalled_run_exits_3_with_the_command_that_goes_on(tmp_path):
    """The script layer, not the library, ends a stalled process; it says how to resume."""
    run_dir = tmp_path / "mappo-easy"
    (run_dir / "checkpoint" / "runner").mkdir(parents=True)
    script = (
        "import sys; from pathlib import Path\n"
        "from baselines import launch\n"
        "from cube_jax.rl.config import build\n"
        "launch.configure_logging()\n"
        "launch._stop_stalled(launch.RuntimeStall('no CPU used for 120 s while computing updates 1-10'),\n"
        "                     build('mappo'), Path(sys.argv[1]))\n"
        "print('not reached')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(run_dir)], capture_output=True, text=True, cwd=REPO,
                          env=subprocess_env(), timeout=120)
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: training stopped: no CPU used for 120 s while computing updates 1-10. XLA's CPU thread pool "
        "stalled; this is not a problem of the config. Go on with:",
        f"  XLA_FLAGS=--xla_cpu_multi_thread_eigen=false python baselines/mappo.py output.resume={run_dir}",
        "(train.stall_seconds=120 sets how long an idle process is waited for)",
    ]


def test_before_a_checkpoint_the_stall_message_says_to_start_again(tmp_path):
    from baselines.launch import RuntimeStall, stall_message
    from cube_jax.rl.config import build

    text = stall_message(RuntimeStall("no CPU used for 5 s while computing the evaluation"),
                         build("ippo", overrides=["train.stall_seconds=5"]), tmp_path)
    assert "python baselines/ippo.py <the same arguments>   (no checkpoint was saved yet)" in text
    assert "train.stall_seconds=5" in text


@pytest.mark.slow
def test_a_checkpoint_joins_mixed_teams(ippo_run, tmp_path, capsys):
    from cube_jax import cli
    from cube_jax.trace import read_trace
    from cube_jax.testing.fake_openai import FakeOpenAI
    from cube_jax.testing.sound_model import responder

    checkpoint = str(ippo_run / "checkpoint")
    # batched: the paper's heuristic beside the trained policy
    out = tmp_path / "mixed.json"
    assert cli.main(["eval", "--team", f"heuristic,policy:{checkpoint}", "--scenario", "easy", "--episodes", "2",
                     "--no-progress", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["loop"] == "batched" and result["team"] == ["heuristic", f"policy:{checkpoint}"]
    # on the CPU loop beside a language agent
    with FakeOpenAI(responder=responder) as server:
        assert cli.main(["llm", "--scenario", "easy", "--team", f"llm,policy:{checkpoint}", "--model", "fake-model",
                         "--base-url", server.url, "--episodes", "1", "--out", str(tmp_path / "llm"), "--no-progress",
                         "--no-timelines"]) == 0
    records = read_trace(tmp_path / "llm" / "episode-000000.jsonl")
    assert [a["kind"] for a in records[0]["agents"].values()] == ["llm", "policy"]
    assert all(r["symbolic"]["agent_1"] is None for r in records if r["type"] == "step")
    capsys.readouterr()
