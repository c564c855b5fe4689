"""The benchmark end to end: the suite's tasks and test sets, ``cube-jax bench run`` for each
way an agent plays, ``bench verify`` refusing every kind of tampering, and resume.

Entries here are small (a few test episodes of the small tasks) and made once per test
process by session fixtures; tests that tamper with one work on a copy.
"""
from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import jax
import numpy as np
import pytest

import cube_jax
from cube_jax import cli
from cube_jax.bench import entry as entries
from cube_jax.bench import run as bench_run
from cube_jax.bench.verify import verify
from cube_jax.core import suite
from cube_jax.core.layouts import CountsLayouts, PoolLayouts
from cube_jax.testing.fake_openai import FakeOpenAI
from tests.rl_tiny import TINY_PPO
from cube_jax.testing.sound_model import responder


def bench(argv, capsys):
    code = cli.main(["bench", *argv])
    return code, capsys.readouterr()


# --- the suite ---------------------------------------------------------------------------------------


def test_the_suite_declares_its_tasks_once_with_their_worlds():
    assert suite.VERSION == "cube-v1"
    assert suite.TASK_NAMES == ("easy", "hard", "n1", "n2", "n3", "n4", "n6", "n8", "coop2-3", "coop2-6")
    assert set(suite.TEST_SET_SHA256) == set(suite.TASK_NAMES)
    for t in suite.TASKS:
        env = t.make()
        assert env.num_agents == t.num_agents and env.max_steps == t.max_steps
    assert suite.task("n4").make().max_steps == cube_jax.make(n=4).max_steps
    with pytest.raises(ValueError, match="unknown task 'n5'; the tasks of cube-v1 are easy, hard"):
        suite.task("n5")
    with pytest.raises(ValueError, match=r"\['max_steps'\] are fixed by the task"):
        suite.task("n2").make(max_steps=10)


@pytest.mark.parametrize("name", [t.name for t in suite.TASKS])
def test_each_test_set_is_its_declared_contents(name):
    t = suite.task(name)
    layouts = suite.test_set(t)
    assert suite.contents_sha256(layouts) == suite.TEST_SET_SHA256[name]
    count = 1 if t.fixed_layout else suite.TEST_LAYOUTS
    assert np.asarray(layouts.agent_pos).shape == (count, t.num_agents, 2)
    assert len(set(suite.layout_rows(layouts))) == count  # distinct layouts


@pytest.mark.parametrize("name", ["n1", "n2", "coop2-3"])
def test_the_shipped_test_sets_come_from_the_reserved_key_stream(name):
    t = suite.task(name)
    assert suite.contents_sha256(suite.generate_test_set(t)) == suite.TEST_SET_SHA256[name]


def test_a_damaged_test_set_is_refused(monkeypatch):
    from cube_jax.core import testsets

    stored = dict(testsets.stored())
    stored["n2/agent_pos"] = stored["n2/agent_pos"].copy()
    stored["n2/agent_pos"][7, 0, 0] += 1
    monkeypatch.setattr(testsets, "stored", lambda: stored)
    with pytest.raises(ValueError, match="the test set of task 'n2' hashes to .* not to cube-v1's declared"):
        suite.test_set(suite.task("n2"))


def test_a_training_pool_that_holds_a_test_layout_is_refused():
    test = suite.test_set(suite.task("n1"))
    some = jax.tree.map(lambda x: np.asarray(x)[:5], test)
    with pytest.raises(ValueError, match="pool layout 0 is a layout of the test set of task 'n1' .5 pool layouts"):
        PoolLayouts.of(some, grid_size=20)
    # a drawn pool leaves them out: n = 1 has 6480 layouts, so 4096 draws meet test layouts
    env = cube_jax.make(n=1, pool_size=4096)
    gen = env.generator
    assert suite.test_layouts_in(gen.grid_size, gen.num_agents, gen.weights, gen.layouts) == []
    assert env.generator.size == 4096


def test_a_pool_whose_blocks_find_no_place_is_refused():
    crowded = CountsLayouts.of(grid_size=8, num_agents=2, counts={3: 4})  # four 3x3 blocks apart: no room
    with pytest.raises(RuntimeError, match="block placement failed for some layouts"):
        PoolLayouts.draw(crowded, size=4, seed=0)


def test_collision_chance_of_fresh_draws_is_measured():
    measured = suite.collision_chance(suite.task("n1"), draws=20_000, chunk=20_000)
    # 256 of n = 1's 6480 equally likely layouts (20 rows x 18 x 18 block cells)
    assert measured["distinct_test_layouts"] == 256
    assert abs(measured["chance"] - 256 / 6480) < 0.006
    with pytest.raises(ValueError, match="one fixed layout"):
        suite.collision_chance(suite.task("easy"), draws=10)


def test_coop2_is_a_world_of_its_own():
    env = cube_jax.make("coop2", num_agents=3)
    assert (env.grid_size, env.num_agents, env.max_steps) == (15, 3, 50)
    assert env.block_weights == (3, 3, 3, 2, 2, 2, 1, 1, 1)
    assert isinstance(env.generator, CountsLayouts) and env.generator.counts == ((3, 3), (2, 3), (1, 3))
    state, _ = env.reset(jax.random.PRNGKey(3))
    lay = cube_jax.layout(state)
    assert all(c == 0 for _, c in lay["agents"]) and len({r for r, _ in lay["agents"]}) == 3
    cells = []
    for r, c, w, _ in lay["blocks"]:
        assert 1 <= r and r + w <= 14 and 1 <= c and c + w <= 14  # off the border, off the goal column
        cells.append((r, c, w))
    for i, (r, c, w) in enumerate(cells):  # no two blocks touch, not even diagonally
        for r2, c2, w2 in cells[i + 1:]:
            assert r + w < r2 or r2 + w2 < r or c + w < c2 or c2 + w2 < c
    assert cube_jax.make("coop2", num_agents=6).num_agents == 6
    with pytest.raises(ValueError, match="num_agents=16 do not fit"):
        cube_jax.make("coop2", num_agents=16)


def test_reset_to_starts_from_the_given_layout():
    t = suite.task("n3")
    env = t.make()
    lay = jax.tree.map(lambda x: np.asarray(x)[11], suite.test_set(t))
    state, ts = env.reset_to(lay, jax.random.PRNGKey(11))
    assert np.array_equal(np.asarray(state.agent_pos), lay.agent_pos)
    assert np.array_equal(np.asarray(state.block_pos), lay.block_pos)
    assert int(state.t) == 0 and np.array_equal(np.asarray(ts.observation), np.asarray(env.observe(state)))


# --- scoring --------------------------------------------------------------------------------------------------


def test_the_bootstrap_gives_rliables_numbers():
    from rliable import library as rly  # in the dev extra
    from rliable import metrics

    scores = np.random.default_rng(3).random(200) ** 2
    ours = entries.bootstrap(scores[None, :], seed=11, resamples=2000)
    for name, aggregate in (("mean", metrics.aggregate_mean), ("iqm", metrics.aggregate_iqm)):
        np.random.seed(11)  # rliable's StratifiedBootstrap draws from numpy's global generator
        point, interval = rly.get_interval_estimates({"x": scores[:, None]}, lambda x: np.array([aggregate(x)]),
                                                     reps=2000)
        assert ours[name][0] == pytest.approx(point["x"][0], abs=1e-12)
        assert np.array_equal(ours[f"{name}_ci"][0], interval["x"][:, 0])


def test_aggregates_are_over_runs_for_learners():
    episodes = [{"mode": "greedy", "run": r, "success": s, "blocks": s, "return": 0.0}
                for r, outcomes in enumerate([[1, 1], [0, 1], [0, 0]]) for s in outcomes]
    out = entries.aggregates(episodes, learns=True, resamples=100)
    assert out["greedy"]["count"] == 3 and out["greedy"]["unit"] == "runs"
    assert out["greedy"]["success"]["mean"] == pytest.approx(0.5)


# --- bench run and verify -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def heuristic_entry(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "heuristic"
    bench_run.Runner(bench_run.Contender("heuristic", "heuristic"), out, episodes=8, progress=False).run(
        bench_run.resolve_tasks(["easy", "n1"]))
    return out


@pytest.fixture
def tampered(heuristic_entry, tmp_path):
    copy = tmp_path / "entry"
    shutil.copytree(heuristic_entry, copy)
    return copy


def _entry(folder: Path) -> dict:
    return entries.read_entry(folder)


def _save(folder: Path, entry: dict) -> None:
    entries.write_entry(folder, entry)


def _rewrite_actions(folder: Path, change, redigest: bool = False) -> None:
    """Changes the actions file with ``change(arrays)`` and records its new digest, so that only
    the per-episode checks can tell; with ``redigest`` every episode's digest too, so that only
    the replay can."""
    with np.load(folder / entries.ACTIONS_FILE) as data:
        arrays = {name: data[name].copy() for name in data.files}
    change(arrays)
    bench_run._write_npz(folder / entries.ACTIONS_FILE, arrays)
    entry = _entry(folder)
    entry["evidence"][entries.ACTIONS_FILE] = entries.file_digest(folder / entries.ACTIONS_FILE)
    if redigest:
        for name, record in entry["tasks"].items():
            actions = arrays[f"{name}/actions"]
            played = (actions[:, :, 0] >= 0).sum(axis=1)
            for i, e in enumerate(record["episodes"]):
                e["actions_digest"] = entries.actions_digest(actions[i, : played[i]])
    _save(folder, entry)


def test_an_entry_records_what_bench_md_asks(heuristic_entry):
    entry = _entry(heuristic_entry)
    assert entry["suite"] == "cube-v1" and entry["test_sets"] == {k: suite.TEST_SET_SHA256[k] for k in ("easy", "n1")}
    assert entry["agent"]["kind"] == "heuristic" and entry["agent"]["learns"] is False
    prov = entry["provenance"]
    for key in ("package_version", "git_commit", "git_dirty", "python", "jax", "jaxlib", "device", "cpu_model",
                "command", "started", "wall_seconds"):
        assert key in prov, key
    n1 = entry["tasks"]["n1"]
    assert [e["layout"] for e in n1["episodes"]] == list(range(8)) == [e["seed"] for e in n1["episodes"]]
    assert [e["layout"] for e in entry["tasks"]["easy"]["episodes"]] == [0] * 8
    assert set(n1["aggregates"]) == {"greedy"}  # a deterministic planner is scored once
    assert set(n1["aggregates"]["greedy"]["success"]) == {"mean", "mean_ci", "iqm", "iqm_ci"}
    assert set(entry["evidence"]) == {"actions.npz", "episode.gif"}
    stored = json.loads((heuristic_entry / entries.ENTRY_FILE).read_text())  # a table, a row per episode
    assert stored["format"] == entries.FORMAT and stored["tasks"]["n1"]["episodes"]["columns"][:4] == \
        ["layout", "seed", "mode", "run"]
    assert [dict(zip(stored["tasks"]["n1"]["episodes"]["columns"], row))
            for row in stored["tasks"]["n1"]["episodes"]["rows"]] == n1["episodes"]
    with zipfile.ZipFile(heuristic_entry / entries.ACTIONS_FILE) as archive:
        assert {member.compress_type for member in archive.infolist()} == {zipfile.ZIP_LZMA}
    assert verify(heuristic_entry).tasks == {"easy": {"episodes": 8, "replayed": 8}, "n1": {"episodes": 8, "replayed": 8}}


def test_recorded_scores_are_the_policys_own_play(heuristic_entry):
    """Each episode's scores equal the heuristic's own play from its test layout and seed, stepped
    here one step at a time (not through bench run's batched rollout nor its replay)."""
    from cube_jax.agents import HeuristicPolicy

    t = suite.task("n1")
    env = t.make()
    policy = HeuristicPolicy(env)
    act, step = jax.jit(policy.act), jax.jit(env.step)
    for e in _entry(heuristic_entry)["tasks"]["n1"]["episodes"][:3]:
        key = jax.random.PRNGKey(e["seed"])
        state, _ = env.reset_to(jax.tree.map(lambda x: np.asarray(x)[e["layout"]], suite.test_set(t)), key)
        policy_state = policy.init(jax.random.fold_in(key, 1))
        steps, total = 0, np.float32(0.0)
        while True:
            actions, policy_state = act(state, policy_state)
            state, ts = step(state, actions)
            steps, total = steps + 1, total + np.float32(ts.reward[0])
            if bool(ts.terminated) or bool(ts.truncated):
                break
        delivered = 1.0 - float(np.mean(np.asarray(state.block_alive)))
        assert (steps, bool(ts.terminated), delivered) == (e["steps"], e["success"], e["blocks"])
        assert float(total) == e["return"]


@pytest.mark.parametrize("damage, message", [
    ("action", r"task 'n1', episode 3 \(layout 3, seed 3, greedy, run 0\): its actions are not the ones"),
    ("action_and_digest", r"task 'n1', episode 3 \(layout 3, seed 3, greedy, run 0\): recorded (success|steps|blocks)"),
    ("score", r"task 'n1', episode 5 .*: recorded steps 999, the replay gives"),
    ("aggregate", r"task 'easy': the recorded greedy aggregate 'success' is"),
    ("missing", r"task 'n1', run 0, greedy: episode 6 is missing"),
    ("version", r"an entry of suite 'cube-v0'; the installed suite is 'cube-v1'"),
    ("test_set", r"task 'n1': the entry's test set 0000000000000000... is not cube-v1's"),
    ("truncated", r"actions.npz: its SHA-256 is not the one entry.json records"),
    ("gif", r"episode.gif: its SHA-256 is not the one"),
    ("extra_file", r"notes.txt: a file the entry's evidence does not list"),
    ("after_end", r"task 'n1', episode 2 .*: actions recorded after the episode's end"),
])
def test_verify_refuses_tampering_naming_task_and_episode(tampered, damage, message):
    entry = _entry(tampered)
    if damage == "action":
        _rewrite_actions(tampered, lambda a: a["n1/actions"].__setitem__((3, 0, 0), (a["n1/actions"][3, 0, 0] + 1) % 5))
    elif damage == "action_and_digest":
        def stay(a):
            played = int((a["n1/actions"][3, :, 0] >= 0).sum())
            a["n1/actions"][3, :played] = 0  # every agent stays: nothing is delivered
        _rewrite_actions(tampered, stay, redigest=True)
    elif damage == "score":
        entry["tasks"]["n1"]["episodes"][5]["steps"] = 999
        _save(tampered, entry)
    elif damage == "aggregate":
        entry["tasks"]["easy"]["aggregates"]["greedy"]["success"]["mean"] = 0.99
        _save(tampered, entry)
    elif damage == "missing":
        del entry["tasks"]["n1"]["episodes"][6]
        _save(tampered, entry)
        _rewrite_actions(tampered, lambda a: a.__setitem__("n1/actions", np.delete(a["n1/actions"], 6, axis=0)))
    elif damage == "version":
        entry["suite"] = "cube-v0"
        _save(tampered, entry)
    elif damage == "test_set":
        entry["test_sets"]["n1"] = "0" * 64
        _save(tampered, entry)
    elif damage == "truncated":
        path = tampered / entries.ACTIONS_FILE
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "gif":
        with open(tampered / "episode.gif", "ab") as f:
            f.write(b"\0")
    elif damage == "extra_file":
        (tampered / "notes.txt").write_text("a better score")
    elif damage == "after_end":
        def act_after(a):
            played = int((a["n1/actions"][2, :, 0] >= 0).sum())
            a["n1/actions"][2, played] = 0
        _rewrite_actions(tampered, act_after, redigest=True)
    with pytest.raises(entries.EntryError, match=message):
        verify(tampered)


def _as_format_one(folder: Path) -> dict:
    """Writes the entry in ``folder`` as the package's first format did (a list of records per
    task, actions DEFLATE-compressed), its digests kept true; the entry as read before."""
    entry = _entry(folder)
    with np.load(folder / entries.ACTIONS_FILE) as data:
        arrays = {name: data[name] for name in data.files}
    np.savez_compressed(folder / entries.ACTIONS_FILE, **arrays)
    old = {**entry, "format": 1, "evidence": {**entry["evidence"],
                                               entries.ACTIONS_FILE: entries.file_digest(folder / entries.ACTIONS_FILE)}}
    entries.write_json(folder / entries.ENTRY_FILE, old)
    return entry


def test_an_entry_of_the_first_format_is_upgraded_checked_and_recorded(tampered, capsys):
    before = _as_format_one(tampered)
    assert verify(tampered).tasks["n1"] == {"episodes": 8, "replayed": 8}  # the first format still reads
    code, captured = bench(["upgrade", str(tampered.parent)], capsys)
    assert code == 0 and f"upgraded {tampered}: format 1 -> {entries.FORMAT}" in captured.out, captured.err
    after = _entry(tampered)
    assert after["tasks"] == before["tasks"] and after["agent"] == before["agent"]
    (rewrite,) = after["provenance"]["rewritten"]
    assert rewrite["from_format"] == 1 and rewrite["command"].startswith("cube-jax bench upgrade ")
    assert rewrite["actions_bytes"][1] == (tampered / entries.ACTIONS_FILE).stat().st_size
    assert verify(tampered).tasks["n1"] == {"episodes": 8, "replayed": 8}
    code, captured = bench(["upgrade", str(tampered)], capsys)
    assert code == 0 and f"current {tampered}: format {entries.FORMAT}, nothing to rewrite" in captured.out
    assert _entry(tampered) == after


def test_an_upgrade_refuses_an_entry_that_fails_its_checks(tampered, capsys):
    entry = _as_format_one(tampered)
    evidence = _entry(tampered)["evidence"]  # the first format's archive
    entry["tasks"]["n1"]["episodes"][2]["actions_digest"] = "0" * 64
    entries.write_json(tampered / entries.ENTRY_FILE, {**entry, "format": 1, "evidence": evidence})
    files = {p.name: p.read_bytes() for p in tampered.iterdir()}
    code, captured = bench(["upgrade", str(tampered)], capsys)
    assert code == 1 and "FAILED" in captured.err and "task 'n1', episode 2" in captured.err
    assert {p.name: p.read_bytes() for p in tampered.iterdir()} == files  # nothing rewritten


def test_verify_cli_exits_one_naming_the_failure(tampered, heuristic_entry, capsys):
    code, captured = bench(["verify", str(heuristic_entry), "--sample", "3"], capsys)
    assert code == 0 and "3 of 8 episodes replayed" not in captured.out and "6 of 16 episodes replayed" in captured.out
    entry = _entry(tampered)
    entry["tasks"]["n1"]["episodes"][1]["success"] = not entry["tasks"]["n1"]["episodes"][1]["success"]
    _save(tampered, entry)
    code, captured = bench(["verify", str(tampered)], capsys)
    assert code == 1 and "FAILED" in captured.err and "task 'n1', episode 1" in captured.err


@pytest.mark.parametrize("argv, message", [
    (["run", "heuristic", "--tasks", "n5"], "unknown task 'n5'"),
    (["run", "wizard", "--tasks", "easy"], "unknown agent 'wizard'"),
    (["run", "heuristic", "--tier", "S"], "'heuristic' does not learn"),
    (["run", "ippo", "--tasks", "easy"], "give --tier S|M or --env-steps N"),
    (["run", "ippo", "--tier", "L"], "invalid choice: 'L'"),
    (["run", "ippo", "--tier", "S", "--set", "train.total_timesteps=5"], "train.total_timesteps is fixed by the benchmark"),
])
def test_bad_bench_arguments_are_one_clear_error(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench([*argv, "--out", str(tmp_path / "x")], capsys)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_mixed_team_of_another_size_is_refused_naming_the_task(tmp_path, capsys):
    code, captured = bench(["run", "heuristic,random", "--tasks", "hard", "--episodes", "2", "--out",
                            str(tmp_path / "m"), "--no-progress"], capsys)
    assert code == 2 and "task 'hard' has 3 agents; the team 'heuristic,random' has 2 members" in captured.err


def test_an_entry_of_another_agent_is_not_continued(heuristic_entry, tampered, capsys):
    code, captured = bench(["run", "random", "--tasks", "easy", "--out", str(tampered), "--no-progress"], capsys)
    assert code == 2 and "an entry of 'heuristic', not 'random'" in captured.err
    assert _entry(tampered) == _entry(heuristic_entry)  # nothing written is lost


def test_a_mixed_batched_team_plays_sampled_and_verifies(tmp_path, capsys):
    import logging

    out = tmp_path / "mixed"
    logger = logging.getLogger("cube_jax")
    before = (list(logger.handlers), logger.level, logger.propagate)
    code, captured = bench(["run", "heuristic,random", "--tasks", "easy", "--episodes", "4", "--out", str(out),
                            "--no-progress"], capsys)
    assert code == 0, captured.err
    assert "easy: sampled: success" in captured.out  # progress lines on stdout while it ran
    assert (list(logger.handlers), logger.level, logger.propagate) == before  # and the logger as it was
    entry = _entry(out)
    assert entry["agent"]["kind"] == "mixed" and entry["agent"]["team"] == ["heuristic", "random"]
    assert set(entry["tasks"]["easy"]["aggregates"]) == {"sampled"}
    assert verify(out).tasks["easy"]["replayed"] == 4


def test_loop_agents_resume_keeping_finished_episodes(tmp_path, monkeypatch):
    out = tmp_path / "team"
    played = []
    real = bench_run.loop_episode

    def counting(t, contender, members, index, seed, factories, trace):
        played.append(seed)
        if len(played) == 3:
            raise KeyboardInterrupt  # the run is stopped while its third episode starts
        return real(t, contender, members, index, seed, factories, trace)

    monkeypatch.setattr(bench_run, "loop_episode", counting)
    contender = bench_run.Contender("team", "team", concurrency=1)
    with pytest.raises(KeyboardInterrupt):
        bench_run.Runner(contender, out, episodes=4, progress=False).run(bench_run.resolve_tasks(["n1"]))
    assert not (out / entries.ENTRY_FILE).exists()
    assert sorted(p.name for p in (out / "work" / "n1").glob("episode-*.json")) == ["episode-000.json",
                                                                                     "episode-001.json"]
    played.clear()
    monkeypatch.setattr(bench_run, "loop_episode", real)
    monkeypatch.setattr(bench_run, "loop_episode", lambda *a: (played.append(a[4]), real(*a))[1])
    bench_run.Runner(contender, out, episodes=4, progress=False).run(bench_run.resolve_tasks(["n1"]))
    assert played == [2, 3]
    assert verify(out).tasks["n1"]["episodes"] == 4


def test_an_entry_grows_by_tasks_and_episodes(tmp_path, monkeypatch):
    out = tmp_path / "team"
    contender = bench_run.Contender("team", "team")
    bench_run.Runner(contender, out, episodes=2, progress=False).run(bench_run.resolve_tasks(["easy"]))
    bench_run.Runner(contender, out, episodes=2, progress=False).run(bench_run.resolve_tasks(["easy", "n1"]))
    played = []
    real = bench_run.loop_episode
    monkeypatch.setattr(bench_run, "loop_episode", lambda *a: (played.append((a[0].name, a[3], a[4])), real(*a))[1])
    entry = bench_run.Runner(contender, out, episodes=3, progress=False).run(bench_run.resolve_tasks(["easy", "n1"]))
    assert played == [("easy", 0, 2), ("n1", 2, 2)]  # only the episode each task lacked: its layout, its seed
    assert len(entry["provenance"]["continued"]) == 2
    # each run records the tasks it made, so the board names the commit behind each task
    assert [run["tasks"] for run in (entry["provenance"], *entry["provenance"]["continued"])] == \
        [["easy"], ["n1"], ["easy", "n1"]]
    assert verify(out).tasks == {"easy": {"episodes": 3, "replayed": 3}, "n1": {"episodes": 3, "replayed": 3}}
    assert not (out / "work").exists()


def test_language_agents_leave_traces_and_tokens_as_evidence(tmp_path, capsys):
    from cube_jax.trace import validate_trace

    out = tmp_path / "llm"
    with FakeOpenAI(responder=responder) as server:
        url = server.url
        code, captured = bench(["run", f"llm:fake-model@{url}", "--topology", "centralized", "--tasks", "easy",
                                "--episodes", "2", "--concurrency", "2", "--temperature", "0", "--api-key",
                                "sk-bench-secret-1", "--out", str(out), "--no-progress"], capsys)
    assert code == 0, captured.err
    entry = _entry(out)
    assert entry["agent"]["topology"] == "centralized"
    assert entry["agent"]["settings"]["models"] == [{"member": f"llm:fake-model@{url}", "model": "fake-model",
                                                    "server_host": url.split("/")[2], "temperature": 0.0,
                                                    "max_tokens": 512}]
    assert entry["tasks"]["easy"]["tokens"]["model_calls"] > 0 and entry["provenance"]["tokens"]["prompt_tokens"] > 0
    assert set(entry["tasks"]["easy"]["aggregates"]) == {"greedy"}  # temperature 0
    traces = sorted(out.glob("traces/easy/*.jsonl"))
    assert len(traces) == 2 and all(validate_trace(p) is None for p in traces)
    from cube_jax.trace import read_trace

    assert [read_trace(p)[0]["seed"] for p in traces] == [0, 1]  # test episode i plays with seed i
    assert all(f"traces/easy/{p.name}" in entry["evidence"] for p in traces)
    for path in out.rglob("*"):
        if path.is_file():
            assert b"sk-bench-secret-1" not in path.read_bytes(), path
    assert "--api-key '***'" in entry["provenance"]["command"]  # the command is recorded, its key is not
    assert verify(out).tasks["easy"]["replayed"] == 2


def test_a_learner_trains_at_its_budget_then_plays_greedy_and_sampled(tmp_path, capsys):
    out = tmp_path / "ippo"
    tiny = [f"--set={o}" for o in TINY_PPO if not o.startswith(("train.total_timesteps", "train.target_success"))]
    with pytest.raises(SystemExit):
        bench(["run", "ippo", "--env-steps", "100", "--seeds", "2", "--tasks", "easy", "--episodes", "3",
               *tiny, "--set=output.plot=false", "--out", str(out), "--no-progress"], capsys)
    assert "output.plot is fixed by the benchmark" in capsys.readouterr().err
    code, captured = bench(["run", "ippo", "--env-steps", "100", "--seeds", "2", "--tasks", "easy", "--episodes", "3",
                            *tiny, "--out", str(out), "--no-progress"], capsys)
    assert code == 0, captured.err
    entry = _entry(out)
    agent = entry["agent"]
    assert agent["learns"] and agent["tier"] == "1e+02 steps" and agent["settings"]["seeds"] == [0, 1]
    easy = entry["tasks"]["easy"]
    assert easy["unit"] == "runs" and set(easy["aggregates"]) == {"greedy", "sampled"}
    assert easy["aggregates"]["greedy"]["count"] == 2
    # exactly the budget, in whole updates of 8 envs x 8 steps: 2 updates
    assert {e["env_steps"] for e in easy["episodes"]} == {128}
    # the training wall of every seed, as its run counts it across resumes
    walls = [json.loads((out / "work" / "train" / "easy" / f"seed-{k}" / "summary.json").read_text())["wall_seconds"]
             for k in (0, 1)]
    assert entry["provenance"]["training_seconds"] == round(sum(walls), 2) > 0
    assert len(easy["episodes"]) == 2 * 2 * 3
    assert verify(out).tasks["easy"]["replayed"] == 12


def test_an_agent_outside_the_package_enters_by_its_actions(heuristic_entry, tmp_path, capsys):
    """The heuristic's recorded actions, handed over as a trainer outside the package would hand
    its own, give the same scores."""
    from cube_jax.bench.external import test_episodes

    with np.load(heuristic_entry / entries.ACTIONS_FILE) as data:
        arrays = {f"{name.split('/')[0]}/greedy/0": data[name] for name in data.files}
    np.savez(tmp_path / "mine.npz", **arrays)
    code, captured = bench(["import", str(tmp_path / "mine.npz"), "--label", "my planner", "--out",
                            str(tmp_path / "mine")], capsys)
    assert code == 0, captured.err
    mine, theirs = _entry(tmp_path / "mine"), _entry(heuristic_entry)
    assert mine["agent"]["kind"] == "external" and mine["agent"]["label"] == "my planner"
    for name in ("easy", "n1"):
        assert mine["tasks"][name]["aggregates"] == theirs["tasks"][name]["aggregates"]
    assert verify(tmp_path / "mine").tasks["n1"]["replayed"] == 8
    episodes = test_episodes("n1", 8)
    assert list(episodes.seeds) == list(range(8)) and np.asarray(episodes.layouts.agent_pos).shape == (8, 1, 2)
    # a bad array is one error naming it
    arrays["n1/greedy/0"] = arrays["n1/greedy/0"][:, :, :1].repeat(2, axis=2)
    np.savez(tmp_path / "bad.npz", **arrays)
    code, captured = bench(["import", str(tmp_path / "bad.npz"), "--label", "x", "--out", str(tmp_path / "bad")],
                           capsys)
    assert code == 2 and "task 'n1', greedy, run 0: actions must be integers of shape [episodes, steps, 1]" in captured.err
    np.savez(tmp_path / "named.npz", **{"n1/best": arrays["easy/greedy/0"]})
    code, captured = bench(["import", str(tmp_path / "named.npz"), "--label", "x", "--out", str(tmp_path / "named")],
                           capsys)
    assert code == 2 and "array 'n1/best' is not named <task>/<greedy|sampled>/<run>" in captured.err


def test_the_board_command_renders_verified_entries(heuristic_entry, tmp_path, capsys):
    code, captured = bench(["board", str(heuristic_entry), "--out", str(tmp_path / "board"), "--verify-sample", "2"],
                           capsys)
    assert code == 0, captured.err
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "## n1" in md and "✓" in md and (tmp_path / "board" / "leaderboard.html").is_file()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
