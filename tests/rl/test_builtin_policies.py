"""Policies shipped in the package (``builtin:NAME``): each has a card naming its entry, loads,
plays its task through ``cube-jax eval``, a mixed team and ``bench run`` as its card says, and
a wrong name is refused naming the shipped ones."""
import subprocess
import sys

import pytest

pytest.importorskip("optax")

from cube_jax import registry  # noqa: E402
from cube_jax.bench.entry import read_entry  # noqa: E402
from cube_jax.rl import builtin  # noqa: E402
from cube_jax.rl.policy import load_policy  # noqa: E402
from cube_jax.teams import TeamSpecError, parse_team  # noqa: E402
from tests.rl.test_rl_baselines import REPO, subprocess_env  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
import ship_policy  # noqa: E402

SHIPPED = builtin.names()


def test_the_package_ships_the_easy_and_hard_teammates():
    assert {"ippo-easy", "ippo-hard"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_each_card_names_its_entry_and_its_seed(name):
    card = builtin.card(name)
    assert card["name"] == name and card["suite"] == "cube-v1" and card["tier"] in ("S", "M")
    assert len(card["entry"]["commit"]) == 40 and card["entry"]["command"].startswith("cube-jax bench run ")
    seeds = {int(k): v for k, v in card["every_seed"].items()}
    assert card["training_seed"] == ship_policy.best_seed(seeds)
    assert card["held_out"] == seeds[card["training_seed"]]
    assert card["size_bytes"] == ship_policy.folder_size(builtin.path(name)) - (builtin.path(name) / "card.json").stat().st_size
    policy = load_policy(builtin.path(name))
    assert policy.meta["algo"] == card["algo"]
    shipped = card["entry"]["shipped_as"]
    if shipped is not None:  # the entry ships in the repository, and its scores are the card's
        entry = read_entry(REPO / shipped)
        assert entry["provenance"]["git_commit"] == card["entry"]["commit"]
        assert ship_policy.seed_scores(entry["tasks"][card["task"]]["episodes"])[card["training_seed"]] == card["held_out"]


def test_a_shipped_policy_plays_its_task_as_its_card_says(tmp_path):
    card = builtin.card("ippo-hard")
    out = tmp_path / "entry"
    done = subprocess.run([sys.executable, "-m", "cube_jax.cli", "bench", "run", "builtin:ippo-hard", "--tasks", "hard",
                           "--episodes", "8", "--no-progress", "--out", str(out)], capture_output=True, text=True,
                          cwd=REPO, timeout=600, env=subprocess_env())
    assert done.returncode == 0, done.stderr[-3000:]
    episodes = read_entry(out)["tasks"]["hard"]["episodes"]
    greedy = [e["success"] for e in episodes if e["mode"] == "greedy"]
    assert len(greedy) == 8 and sum(greedy) / len(greedy) == card["held_out"]["greedy_success"]
    done = subprocess.run([sys.executable, "-m", "cube_jax.cli", "eval", "--team", "builtin:ippo-hard,heuristic,heuristic",
                           "--scenario", "hard", "--episodes", "2", "--no-progress"], capture_output=True, text=True,
                          cwd=REPO, timeout=600, env=subprocess_env())
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_wrong_name_is_refused_naming_the_shipped_ones():
    with pytest.raises(TeamSpecError, match="no built-in policy 'ippo-moon'; the package ships ippo-easy"):
        parse_team("builtin:ippo-moon", 3, kinds=registry.names())
    assert parse_team("builtin:ippo-hard", 3, kinds=registry.names())[0].option("name") == "ippo-hard"


def test_the_best_seed_is_chosen_on_held_out_scores():
    scores = {0: {"greedy_success": 0.5, "sampled_success": 0.9, "greedy_blocks": 0.9},
              1: {"greedy_success": 0.5, "sampled_success": 0.9, "greedy_blocks": 0.95},
              2: {"greedy_success": 0.4, "sampled_success": 1.0, "greedy_blocks": 1.0}}
    assert ship_policy.best_seed(scores) == 1
    assert ship_policy.best_seed({3: scores[0], 1: scores[0]}) == 1
