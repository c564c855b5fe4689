"""A policy whose observation does not depend on n (``egocentric_noid``) trained at one team
size plays any other, through ``cube-jax eval`` and ``bench run``; a form that does is refused
with the reason."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("optax")

from cube_jax.bench.entry import read_entry  # noqa: E402
from cube_jax.rl.policy import load_policy  # noqa: E402
from tests.rl.test_rl_baselines import REPO, TINY, run_folder, run_script, subprocess_env  # noqa: E402


@pytest.fixture(scope="module")
def trained_at_two(tmp_path_factory):
    root = tmp_path_factory.mktemp("team-sizes")
    stdout = run_script("ippo.py", [*TINY, "env.scenario=null", "env.n=2", "env.observation=egocentric_noid",
                                    "env.view_radius=2", "env.max_steps=50", "num_seeds=1", "output.gif=false",
                                    f"output.root={root}", "output.name=n2"], root)
    return run_folder(stdout)


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "cube_jax.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env=subprocess_env())


def test_it_plays_other_team_sizes_in_eval_and_bench(trained_at_two, tmp_path):
    policy = load_policy(trained_at_two)
    assert policy.meta["observation_shape"] == [2, 4 * 5 * 5 + 3]
    assert policy.initial_carry(num_agents=4).shape == (4, 0)
    out = tmp_path / "eval.json"
    done = _cli("eval", "--policy", str(trained_at_two), "--n", "4", "--episodes", "2", "--no-progress",
                "--json", str(out), cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(json.loads(out.read_text())["episodes"]) == 2
    # n = 4's own episode limit, not the training world's
    assert "max_steps" not in json.loads(out.read_text())["env"] and "(max_steps 480)" in done.stdout
    entry = tmp_path / "entry"
    done = _cli("bench", "run", f"policy:{trained_at_two}", "--tasks", "n3", "--episodes", "2", "--no-progress",
                "--out", str(entry), cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    scored = read_entry(entry)
    assert list(scored["tasks"]) == ["n3"]


def test_a_form_that_depends_on_n_is_refused_with_the_reason(tmp_path):
    root = tmp_path
    stdout = run_script("ippo.py", [*TINY, "env.scenario=null", "env.n=2", "env.observation=egocentric",
                                    "env.view_radius=2", "num_seeds=1", "output.gif=false", "output.plot=false",
                                    f"output.root={root}", "output.name=ids"], root)
    done = _cli("eval", "--policy", str(run_folder(stdout)), "--n", "3", "--episodes", "1", "--no-progress", cwd=REPO)
    assert done.returncode != 0
    assert "use a world of the same size" in done.stderr
