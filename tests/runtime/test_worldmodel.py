"""The world model of LLM.md section 7: attempts and aggregates from traces, the guidebook
and the plan library, the file (canonical, atomic, strict), and ``cube-jax worldmodel``.

Two hand-written episodes of a world with block 0 (weight 2) and block 1 (weight 1), three
agents. A plan is (agent, plan id, spec or block, actions, commit t, end t, end event):

episode A (seed 0, 10 steps, truncated; block 0 delivered by the step from t=5):
    agent_0  p0  block 0  MR P (rendezvous ..., 5)  [0, 5) failed
    agent_1  p1  block 0  MR P (rendezvous ..., 5)  [0, 6) succeeded
    agent_0  p2  block 0  M P                       [5, 6) succeeded
    agent_2  p3  block 1  M(up) P                   [0, 3) failed
    agent_2  p4  block 1  M(up) P                   [3, 6) replaced
    agent_2  p5  quorum_wait(block#1)               [6, 8) failed   (not an attempt)
    agent_0  p6  block 1  M(down) P                 [6, 10) unfinished

episode B (seed 1, 5 steps, terminated; block 1 by the step from t=2, block 0 from t=4):
    agent_0  p0  block 1  M(up) P(1, 3)             [0, 3) succeeded
    agent_1  p1  block 0  MR P (rendezvous ..., 5)  [0, 5) succeeded
    agent_2  p2  block 0  MR P (rendezvous ..., 9)  [0, 5) succeeded
"""
from __future__ import annotations

import doctest
import json
import os

import pytest

from cube_jax.cli import main
from cube_jax.trace import TraceWriter, read_trace
from cube_jax.worldmodel import WorldMismatchError, WorldModel, WorldModelError, read_episode
from cube_jax.worldmodel.outcomes import Attempt
from cube_jax.worldmodel.stats import task_stats

WORLD = {"scenario": "tiny", "max_steps": 10}
AGENTS = ("agent_0", "agent_1", "agent_2")
WEIGHTS = (2, 1)
MR5 = ["move_to_block(0, left)", "rendezvous(0, left, 2, 5)", "push_block(0, 3)"]
MR9 = ["move_to_block(0, left)", "rendezvous(0, left, 2, 9)", "push_block(0, 3)"]
M0 = ["move_to_block(0, left)", "push_block(0, 3)"]
UP = ["move_to_block(1, up)", "push_block(1, 2)"]
DOWN = ["move_to_block(1, down)", "push_block(1, 2)"]
UP3 = ["move_to_block(1, up)", "push_block(1, 3)"]

EPISODE_A = dict(seed=0, steps=10, delivered={5: [0]}, plans=[
    ("agent_0", 0, 0, MR5, 0, 5, "failed"),
    ("agent_1", 1, 0, MR5, 0, 6, "succeeded"),
    ("agent_0", 2, 0, M0, 5, 6, "succeeded"),
    ("agent_2", 3, 1, UP, 0, 3, "failed"),
    ("agent_2", 4, 1, UP, 3, 6, "replaced"),
    ("agent_2", 5, "quorum_wait(block#1)", ["wait_agents(1, 3)"], 6, 8, "failed"),
    ("agent_0", 6, 1, DOWN, 6, 10, "unfinished"),
])
EPISODE_B = dict(seed=1, steps=5, delivered={2: [1], 4: [0]}, plans=[
    ("agent_0", 0, 1, UP3, 0, 3, "succeeded"),
    ("agent_1", 1, 0, MR5, 0, 5, "succeeded"),
    ("agent_2", 2, 0, MR9, 0, 5, "succeeded"),
])


def write_episode(target, seed, steps, delivered, plans, world=WORLD, clock=None):
    """Writes one episode's trace with :class:`TraceWriter`: plan ends, then commits, then the
    step record, at every t; ``delivered`` maps a step record's t to the blocks it delivers."""
    ticks = iter(range(10**6))
    trace = TraceWriter(target, clock=clock or (lambda: next(ticks) * 0.01))
    alive = [True] * len(WEIGHTS)
    trace.write("episode", 0, schema=1, env=world, seed=seed, topology="negotiation",
                agents={name: {"kind": "negotiator", "model": None} for name in AGENTS},
                layout={"t": 0, "agents": [[0, 0], [1, 0], [2, 0]],
                        "blocks": [[3, 3, w, True] for w in WEIGHTS]})
    done = 0
    for t in range(steps + 1):
        for agent, plan_id, task, actions, start, end, event in plans:
            if end == t and event != "unfinished":
                spec = f"push_block(block#{task})" if isinstance(task, int) else task
                extra = {"reason": "timeout"} if event == "failed" else {}
                trace.write("plan", t, agent=agent, plan_id=plan_id, spec=spec, actions=actions, event=event, **extra)
        if t == steps:
            for agent, plan_id, task, actions, start, end, event in plans:
                if event == "unfinished":
                    trace.write("plan", t, agent=agent, plan_id=plan_id, spec=f"push_block(block#{task})",
                                actions=actions, event="unfinished")
            break
        for agent, plan_id, task, actions, start, end, event in plans:
            if start == t:
                spec = f"push_block(block#{task})" if isinstance(task, int) else task
                trace.write("plan", t, agent=agent, plan_id=plan_id, spec=spec, actions=actions, event="committed")
        for block in delivered.get(t, []):
            alive[block] = False
            done += 1
        trace.write("step", t, actions={a: 0 for a in AGENTS}, symbolic={a: None for a in AGENTS},
                    reward=[0.0] * 3, agents=[[0, 0], [1, 0], [2, 0]],
                    blocks=[[3, 3, w, a] for w, a in zip(WEIGHTS, alive)], delivered=delivered.get(t, []), tasks={})
    weight = sum(w for w, a in zip(WEIGHTS, alive) if not a)
    trace.end(steps, terminated=done == len(WEIGHTS), truncated=done < len(WEIGHTS),
              reason="all blocks delivered" if done == len(WEIGHTS) else "max_steps", steps=steps,
              blocks_delivered=done, blocks_total=len(WEIGHTS), weight_delivered=weight, weight_total=sum(WEIGHTS))
    trace.close()


@pytest.fixture
def traces(tmp_path):
    """The two episodes as trace files (B's name sorts first; A has the lower seed)."""
    folder = tmp_path / "traces"
    write_episode(folder / "b-episode.jsonl", **EPISODE_A)
    write_episode(folder / "a-episode.jsonl", **EPISODE_B)
    return [read_trace(folder / "b-episode.jsonl"), read_trace(folder / "a-episode.jsonl")]


@pytest.fixture
def model(traces):
    model = WorldModel()
    for records in traces:
        assert model.update(records) is True
    return model


# --- attempts and aggregates ---------------------------------------------------------------------


def test_every_committed_push_plan_is_one_attempt_with_its_outcome(traces):
    reading = read_episode(traces[0])
    got = [(a.agent, a.block, a.start, a.duration, a.team_size, a.success) for a in reading.attempts]
    assert got == [
        ("agent_0", 0, 0, 5, 2, False),  # ended at 5, during the step that delivered the block (at 6)
        ("agent_1", 0, 0, 6, 2, True),
        ("agent_2", 1, 0, 3, 1, False),
        ("agent_2", 1, 3, 3, 1, False),
        ("agent_0", 0, 5, 1, 2, True),  # overlapped agent_1 only: its own earlier plan ended at 5
        ("agent_0", 1, 6, 4, 1, False),  # began as agent_2's ended: not a teammate
    ]
    assert reading.world == WORLD and dict(reading.weights) == {0: 2, 1: 1}
    assert dict(reading.episode.completion) == {0: 5}
    assert (reading.episode.seed, reading.episode.steps, reading.episode.truncated) == (0, 10, True)


def test_task_aggregates_across_two_episodes(model):
    zero = model.task_stats(0)
    assert (zero.attempts, zero.successes, zero.weight) == (5, 4, 2)
    assert zero.success_rate == pytest.approx(0.8)
    assert zero.start_mean == pytest.approx(1.0) and (zero.start_min, zero.start_max) == (0, 5)
    assert zero.duration_mean == pytest.approx((5 + 6 + 1 + 5 + 5) / 5)
    assert (zero.smallest_success_team, zero.best_team_size) == (2, 2)
    one = model.task_stats(1)
    assert (one.attempts, one.successes, one.weight) == (4, 1, 1)
    assert one.success_rate == pytest.approx(0.25)
    assert one.start_mean == pytest.approx(2.25) and (one.start_min, one.start_max) == (0, 6)
    assert one.duration_mean == pytest.approx(3.25)
    assert (one.smallest_success_team, one.best_team_size, one.best_team_success_rate) == (1, 1, 0.25)
    assert model.success_rate(1) == pytest.approx(0.25) and model.best_team_size(0) == 2


def test_a_task_without_attempts_or_without_a_success_has_no_rate_or_no_best_size(traces):
    model = WorldModel()
    model.update(traces[0])  # block 1 failed every attempt in episode A
    assert model.success_rate(1) == 0.0 and model.best_team_size(1) is None
    assert model.task_stats(1).smallest_success_team is None
    assert model.success_rate(7) is None and model.best_team_size(7) is None
    assert model.task_stats(7).attempts == 0


def attempt(team, success, duration=10):
    return Attempt(block=0, actions=("push_block(0, 3)",), agent="agent_0", episode=0, start=0, duration=duration,
                   team_size=team, success=success)


def test_best_team_size_has_the_highest_success_rate_and_ties_to_the_smaller_size():
    tie = task_stats(0, 3, [attempt(3, True), attempt(3, False), attempt(1, True), attempt(1, False),
                            attempt(2, False)])
    assert (tie.best_team_size, tie.best_team_success_rate, tie.smallest_success_team) == (1, 0.5, 1)
    better = task_stats(0, 3, [attempt(1, True), attempt(1, False), attempt(3, True), attempt(2, False)])
    assert (better.best_team_size, better.best_team_success_rate) == (3, 1.0)
    assert better.by_team_size == ((1, 2, 1), (2, 1, 0), (3, 1, 1))
    assert task_stats(0, 3, [attempt(2, False)]).best_team_size is None


def test_prototypes_and_instances_rank_by_success_then_shorter_duration(model):
    zero = model.tasks[0]
    assert [p.text for p in zero.ranked()] == ["move_to_block -> push_block",
                                               "move_to_block -> rendezvous -> push_block"]
    mr = zero.prototypes[("move_to_block", "rendezvous", "push_block")]
    assert [i.actions for i in mr.ranked()] == [tuple(MR9), tuple(MR5)]
    stats = mr.stats
    assert (stats.attempts, stats.successes, stats.team_size_mean, stats.duration_mean) == (4, 3, 2.0, 5.25)
    one = model.tasks[1].prototypes[("move_to_block", "push_block")]
    # all three instances share the prototype; two failed, the shorter one first
    assert [i.actions for i in one.ranked()] == [tuple(UP3), tuple(UP), tuple(DOWN)]


def test_the_plan_library_shows_the_top_three_prototypes_with_their_top_two_instances(model):
    assert model.plan_library(0) == (
        "Plan library for block#0 (5 attempts, 80.0% succeeded), best first:\n"
        "1. move_to_block -> push_block: 1 attempt, 100.0% succeeded, team 2.0, 1.0 steps\n"
        "   1a. move_to_block(0, left) -> push_block(0, 3): 1 attempt, 100.0% succeeded, team 2.0, 1.0 steps\n"
        "2. move_to_block -> rendezvous -> push_block: 4 attempts, 75.0% succeeded, team 2.0, 5.2 steps\n"
        "   2a. move_to_block(0, left) -> rendezvous(0, left, 2, 9) -> push_block(0, 3): 1 attempt, 100.0% succeeded, "
        "team 2.0, 5.0 steps\n"
        "   2b. move_to_block(0, left) -> rendezvous(0, left, 2, 5) -> push_block(0, 3): 3 attempts, 66.7% succeeded, "
        "team 2.0, 5.3 steps")
    library = model.plan_library(1).splitlines()
    assert len(library) == 1 + 1 + 2  # one prototype, its best two of three instances
    assert library[2].startswith("   1a. move_to_block(1, up) -> push_block(1, 3): 1 attempt, 100.0%")
    assert library[3].startswith("   1b. move_to_block(1, up) -> push_block(1, 2): 2 attempts, 0.0%")
    assert model.plan_library(5) == "Plan library for block#5: no experience yet."


def test_the_guidebook_gives_the_step_the_room_and_each_live_task(model):
    assert model.guidebook([1, 0], t=7, room_size=2) == (
        "Step 7; 2 agents in the room.\n"
        "World model: 2 episodes of this world, 3 of 4 blocks delivered.\n"
        "block#0 (weight 2): 5 attempts, 80.0% succeeded; start t=1.0 on average (t=0..5); 4.4 steps on average; "
        "smallest successful team 2; best team size 2 (80.0% of 5)\n"
        "block#1 (weight 1): 4 attempts, 25.0% succeeded; start t=2.2 on average (t=0..6); 3.2 steps on average; "
        "smallest successful team 1; best team size 1 (25.0% of 4)")
    only_live = model.guidebook([1], t=0, room_size=1).splitlines()
    assert only_live[0] == "Step 0; 1 agent in the room." and len(only_live) == 3
    empty = WorldModel(WORLD)
    assert empty.guidebook([0, 1], t=3, room_size=2) == "Step 3; 2 agents in the room.\nWorld model: no experience yet."
    assert empty.plan_library(0) == "Plan library for block#0: no experience yet."


def test_the_graph_runs_from_episodes_to_tasks_to_prototypes_to_instances(model):
    graph = model.graph()
    kinds = {}
    for node, data in graph.nodes(data=True):
        kinds[data["kind"]] = kinds.get(data["kind"], 0) + 1
    assert kinds == {"episode": 2, "task": 2, "prototype": 3, "instance": 6}
    assert graph.edges["episode#0", "block#0"]["delivered_t"] == 5
    assert graph.edges["episode#0", "block#1"]["delivered_t"] is None
    prototype = "block#0/prototype:move_to_block -> push_block"
    assert list(graph.successors(prototype)) == ["block#0/instance:" + " -> ".join(M0)]
    assert graph.nodes[prototype]["attempts"] == 1 and graph.nodes["block#1"]["success_rate"] == 0.25


def test_the_same_trace_is_added_once_and_another_world_is_refused(traces):
    model = WorldModel()
    assert model.update(traces[0]) is True and model.update(traces[0]) is False
    assert len(model.episodes) == 1
    foreign = [dict(traces[1][0], env={"scenario": "hard", "max_steps": 100})] + traces[1][1:]
    with pytest.raises(WorldMismatchError, match=r'"scenario": "hard".*"scenario": "tiny"'):
        model.update(foreign)
    with pytest.raises(WorldModelError, match="first record of a trace must be 'episode'"):
        model.update(traces[1][1:])


# --- the file ------------------------------------------------------------------------------------


def test_the_same_traces_in_the_same_order_give_the_same_bytes(tmp_path, traces, model):
    again = WorldModel()
    for records in traces:
        again.update(records)
    model.save(tmp_path / "one.json")
    again.save(tmp_path / "two.json")
    first = (tmp_path / "one.json").read_bytes()
    assert first == (tmp_path / "two.json").read_bytes()
    loaded = WorldModel.load(tmp_path / "one.json", env=WORLD)
    loaded.save(tmp_path / "three.json")
    assert (tmp_path / "three.json").read_bytes() == first
    assert loaded.plan_library(0) == model.plan_library(0) and loaded.guidebook([0, 1], 0, 3) == model.guidebook(
        [0, 1], 0, 3)
    content = json.loads(first)
    assert content["world"] == WORLD
    assert [e["completion"] for e in content["episodes"]] == [{"0": 5}, {"0": 4, "1": 2}]
    assert b"wall" not in first
    swapped = WorldModel()
    for records in reversed(traces):
        swapped.update(records)
    assert swapped.to_json() != model.to_json()  # episode order is part of the model


def test_an_interrupted_save_leaves_the_previous_file(tmp_path, traces, monkeypatch):
    path = tmp_path / "models" / "wm.json"
    model = WorldModel()
    model.update(traces[0])
    model.save(path)
    before = path.read_bytes()
    model.update(traces[1])

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        model.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["wm.json"]  # no temporary file left behind
    model.save(path)
    assert len(WorldModel.load(path).episodes) == 2


def test_a_missing_file_is_an_empty_model_of_the_given_world(tmp_path):
    model = WorldModel.load(tmp_path / "new.json", env=WORLD)
    assert model.world == WORLD and model.empty and not (tmp_path / "new.json").exists()


def test_a_file_of_another_world_is_refused_naming_both(tmp_path, model):
    path = tmp_path / "wm.json"
    model.save(path)
    with pytest.raises(WorldMismatchError) as info:
        WorldModel.load(path, env={"scenario": "hard", "max_steps": 100})
    message = str(info.value)
    assert str(path) in message and '"scenario": "tiny"' in message and '"scenario": "hard"' in message
    assert "\n" not in message


@pytest.mark.parametrize("edit, problem", [
    (lambda text: text[: len(text) // 2], "not JSON (input data was truncated)"),
    (lambda text: text.replace("{", "{{", 1), "not JSON ("),
    (lambda text: "", "empty"),
    (lambda text: "[1, 2]", "Expected `object`"),
    (lambda text: text.replace('"format": "cube_jax.worldmodel"', '"format": "other"'), "format"),
    (lambda text: text.replace('"team_size": 2', '"team_size": "2"', 1), "team_size"),
    (lambda text: text.replace('"success_rate": 0.8,', '"success_rate": 0.9,', 1),
     "tasks[0].stats.success_rate is 0.9, but the attempts the file holds give 0.8"),
    (lambda text: text.replace('"episode": 1', '"episode": 7', 1), "names episode 7, but the file has 2 episodes"),
])
def test_a_corrupt_file_is_a_one_line_error_naming_the_path(tmp_path, model, edit, problem):
    path = tmp_path / "wm.json"
    path.write_text(edit(model.to_json()))
    with pytest.raises(WorldModelError) as info:
        WorldModel.load(path, env=WORLD)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message
    assert not isinstance(info.value, WorldMismatchError)


# --- real traces ---------------------------------------------------------------------------------


def test_real_heuristic_traces_give_attempts_that_agree_with_the_trace(tmp_path):
    import cube_jax
    from cube_jax.agents import heuristic_team
    from cube_jax.runtime import run_episode

    env = cube_jax.make("hard")
    model = WorldModel()
    for seed in (0, 1):
        path = tmp_path / f"hard_{seed}.jsonl"
        run_episode(env, heuristic_team(env), seed=seed, trace=path)
        records = read_trace(path)
        model.update(records)
        commits = [r for r in records if r["type"] == "plan" and r["event"] == "committed"
                   and r["spec"].startswith("push_block(block#")]
        delivered = {b: r["t"] for r in records if r["type"] == "step" for b in r["delivered"]}
        episode = model.episodes[-1]
        assert dict(episode.completion) == delivered and episode.seed == seed
        attempts = [a for task in model.tasks.values() for a in task.attempts if a.episode == episode.index]
        assert len(attempts) == len(commits) > 0
        for block in delivered:  # a delivered block had at least one attempt that saw it delivered
            assert any(a.success for a in attempts if a.block == block)
    assert model.world == {"scenario": "hard", "max_steps": 100}
    assert sorted(model.tasks) == [0, 1, 2] and [model.tasks[b].weight for b in range(3)] == [3, 2, 1]
    for block in range(3):
        assert model.plan_library(block).startswith(f"Plan library for block#{block} (")
        assert model.best_team_size(block) is not None


@pytest.mark.parametrize("module", ["__init__", "outcomes", "stats", "model", "graph"])
def test_the_docstring_examples_run(module):
    import importlib

    name = "cube_jax.worldmodel" + ("" if module == "__init__" else f".{module}")
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0


# --- the command ---------------------------------------------------------------------------------


def run_command(argv, capsys):
    code = main(["worldmodel", *map(str, argv)])
    return code, capsys.readouterr()


def one_line_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(["worldmodel", *map(str, argv)])
    assert info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cube-jax worldmodel: error:")]
    assert len(lines) == 1
    return lines[0]


def test_the_command_builds_from_a_run_folder_prints_and_plots(tmp_path, traces, capsys):
    folder = tmp_path / "traces"
    (folder / "exchanges").mkdir()
    (folder / "exchanges" / "x.jsonl").write_text('{"request": {"model": "m"}, "response": {}}\n')
    (folder / "run.json").write_text("{}\n")
    (folder / "metrics.json").write_text("{}\n")
    path, graph, trend = tmp_path / "out" / "wm.json", tmp_path / "graph.png", tmp_path / "trend.png"
    code, out = run_command([path, "--from-traces", folder, "--plot", graph, "--trend", trend], capsys)
    assert code == 0
    assert "2 episodes added, 2 in all" in out.err and "left out" not in out.err
    assert "block#0 (weight 2): 5 attempts, 80.0% succeeded" in out.out
    assert "Plan library for block#1 (4 attempts, 25.0% succeeded), best first:" in out.out
    assert graph.stat().st_size > 20_000 and trend.stat().st_size > 20_000
    built = WorldModel.load(path, env=WORLD)
    assert [e.seed for e in built.episodes] == [0, 1]  # by seed, though the seed-1 trace's name sorts first
    before = path.read_bytes()
    code, out = run_command([path, "--from-traces", folder, "--quiet"], capsys)
    assert code == 0 and "0 episodes added, 2 in all" in out.err and path.read_bytes() == before
    code, out = run_command([path], capsys)
    assert code == 0 and out.out.startswith('World: {"max_steps": 10, "scenario": "tiny"}\nWorld model: 2 episodes')


def test_the_command_draws_an_empty_model(tmp_path, capsys):
    path = tmp_path / "wm.json"
    WorldModel(WORLD).save(path)
    code, out = run_command([path, "--plot", tmp_path / "g.png", "--trend", tmp_path / "t.png"], capsys)
    assert code == 0 and "World model: no experience yet." in out.out
    assert (tmp_path / "g.png").stat().st_size > 5_000 and (tmp_path / "t.png").stat().st_size > 5_000


def test_bad_arguments_are_one_line_errors_naming_them(tmp_path, model, capsys):
    missing = tmp_path / "none.json"
    assert "argument PATH: no such world model file" in one_line_error([missing], capsys)
    assert "argument --from-traces" in one_line_error([missing, "--from-traces", tmp_path / "nowhere"], capsys)
    (tmp_path / "empty").mkdir()
    assert "no trace file" in one_line_error([missing, "--from-traces", tmp_path / "empty"], capsys)
    path = tmp_path / "wm.json"
    model.save(path)
    assert "argument --plot: expected a .png file" in one_line_error([path, "--plot", tmp_path / "g.svg"], capsys)
    assert "argument PATH" in one_line_error([tmp_path, "--from-traces", tmp_path / "empty"], capsys)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    line = one_line_error([corrupt], capsys)
    assert "argument PATH" in line and str(corrupt) in line and "not a valid world model file" in line
    other = tmp_path / "other"
    write_episode(other / "t.jsonl", **EPISODE_B, world={"scenario": "hard", "max_steps": 100})
    line = one_line_error([path, "--from-traces", other], capsys)
    assert "argument --from-traces" in line and '"scenario": "hard"' in line and '"scenario": "tiny"' in line
    assert path.read_bytes() == model.to_json().encode()  # nothing written
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "t.jsonl").write_text('{"type": "episode"}\n')
    assert "none of the 1 trace files is valid" in one_line_error([missing, "--from-traces", broken], capsys)
