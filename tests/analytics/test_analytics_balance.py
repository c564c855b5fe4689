"""Workload balance (COBLOCK's gamma and its generalisation) from traces."""
from __future__ import annotations

import doctest
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cube_jax
from cube_jax import cli
from cube_jax.analytics import balance
from cube_jax.analytics.balance import (coblock_gamma, episode_pushes, episode_workload, step_pushes, trace_workload,
                                        workload, workload_balance)
from cube_jax.runtime import run_episode
from cube_jax.trace import read_trace
from cube_jax.trace import agent_name, dumps
from cube_jax.symbolic.vocabulary import FACE_PUSH_DIRECTION
from cube_jax.teams import parse_team, team_agents

STAY, UP, DOWN, LEFT, RIGHT = range(5)


def test_docstring_examples_run():
    assert doctest.testmod(balance).failed == 0


# --- the formulas ----------------------------------------------------------------------------------


def test_coblock_gamma_follows_eqs_2_and_3():
    assert coblock_gamma(30, 10) == pytest.approx(300 / 1000)  # a*b / (a^2 + b^2)
    assert coblock_gamma(10, 10) == 0.5 and coblock_gamma(12, 0) == 0.0
    # eq. 2: a = N_a * N*_b / N*_a: 30 actions where the optimum asks 3 for every 1 of b's is balanced
    assert coblock_gamma(30, 10, optimal_a=3, optimal_b=1) == 0.5
    assert coblock_gamma(0, 0) is None


def test_the_generalisation_by_hand():
    # shares 1/2, 1/4, 1/4: sum of squares 3/8, E = 8/3, (E - 1) / (2 * 2) = 5/12
    assert workload_balance([4, 2, 2]) == pytest.approx(5 / 12)
    assert workload_balance([5, 5, 5]) == pytest.approx(0.5)
    assert workload_balance([9, 0, 0]) == 0.0
    assert workload_balance([6, 6, 0, 0]) == pytest.approx(1 / 6)  # two of four carry the load: E = 2
    assert workload_balance([30, 10], optimal=[3, 1]) == pytest.approx(0.5)
    assert workload_balance([0, 0, 0]) is None and workload_balance([4]) is None
    with pytest.raises(ValueError, match="counts >= 0"):
        workload_balance([1, -1])
    with pytest.raises(ValueError, match="one count > 0 per agent"):
        workload_balance([1, 1], optimal=[1, 0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=2, max_size=12), st.integers(1, 9))
def test_the_generalisation_is_bounded_scale_free_symmetric_and_coblock_at_two(work, scale):
    gamma = workload_balance(work)
    if sum(work) == 0:
        assert gamma is None
        return
    assert -1e-12 <= gamma <= 0.5 + 1e-12
    assert workload_balance([w * scale for w in work]) == pytest.approx(gamma)
    assert workload_balance(work[::-1]) == pytest.approx(gamma)
    if len(work) == 2:
        assert gamma == pytest.approx(coblock_gamma(*work))
    if len(set(work)) == 1:
        assert gamma == pytest.approx(0.5)


def test_mixed_teams_weigh_each_kind_by_its_number_of_agents():
    # a person with 6 pushes beside three heuristic agents with 2 each
    out = workload(["agent_0", "agent_1", "agent_2", "agent_3"], ["human", "heuristic", "heuristic", "heuristic"],
                   [6, 2, 2, 2])
    assert out["pushes"] == {"agent_0": 6, "agent_1": 2, "agent_2": 2, "agent_3": 2}
    # per agent: shares 1/2, 1/6, 1/6, 1/6, sum of squares 1/3, E = 3, (3 - 1) / 6
    assert out["workload_balance"] == pytest.approx(1 / 3)
    # per kind: x_human = 6 / 1, x_heuristic = 6 / 3 = 2: COBLOCK's gamma(6, 2) = 12 / 40
    assert out["workload_balance_kinds"] == pytest.approx(0.3)
    one_kind = workload(["agent_0", "agent_1"], ["llm", "llm"], [3, 1])
    assert one_kind["workload_balance_kinds"] is None and one_kind["workload_balance"] == pytest.approx(0.3)


# --- pushes from hand-built traces -----------------------------------------------------------------


def build_trace(frames, final, kinds=("heuristic", "heuristic"), env=None):
    """A valid trace whose step k starts from ``frames[k] = (agents, blocks, actions)`` and
    whose last step ends in ``final = (agents, blocks)``."""
    n = len(kinds)
    names = [agent_name(i) for i in range(n)]
    first_agents, first_blocks, _ = frames[0]
    records = [{"type": "episode", "t": 0, "wall": 0.0, "schema": 1, "env": env or {"scenario": "easy"}, "seed": 0,
                "topology": "individual", "agents": {a: {"kind": k, "model": None} for a, k in zip(names, kinds)},
                "layout": {"t": 0, "agents": first_agents, "blocks": first_blocks}}]
    afters = [(a, b) for a, b, _ in frames[1:]] + [final]
    for t, ((_, _, actions), (agents, blocks)) in enumerate(zip(frames, afters)):
        records.append({"type": "step", "t": t, "wall": 0.1 * t, "actions": dict(zip(names, actions)),
                        "symbolic": {a: None for a in names}, "reward": [-0.01] * n, "agents": agents,
                        "blocks": blocks, "delivered": [], "tasks": {}})
    records.append({"type": "end", "t": len(frames), "wall": 1.0, "terminated": False, "truncated": True,
                    "reason": "max_steps", "steps": len(frames), "blocks_delivered": 0,
                    "blocks_total": len(final[1]), "weight_delivered": 0, "weight_total": sum(b[2] for b in final[1])})
    return records


B1 = [1, 3, 1, True]  # a weight-1 block at (1, 3)


def test_pushes_of_a_hand_built_episode():
    frames = [
        # agent_0 right behind the block's left face pushes; agent_1 walks right in the open
        ([[1, 2], [3, 0]], [[1, 3, 1, True]], [RIGHT, RIGHT]),
        ([[1, 3], [3, 1]], [[1, 4, 1, True]], [RIGHT, UP]),
        # agent_1 in line behind agent_0, both aligned with the left face; only agent_0 pushes
        ([[1, 4], [1, 3]], [[1, 5, 1, True]], [RIGHT, STAY]),
        # aligned but not pushing: agent_0 stays, agent_1 pushes through the chain
        ([[1, 5], [1, 4]], [[1, 6, 1, True]], [STAY, RIGHT]),
        # agent_1 goes under the block and pushes its bottom face up; agent_0 pushes the wrong way
        ([[1, 5], [2, 6]], [[1, 6, 1, True]], [LEFT, UP]),
        # the block is delivered (not alive): pushing into its old cell pushes nothing
        ([[1, 5], [2, 6]], [[0, 6, 1, False]], [RIGHT, UP]),
    ]
    records = build_trace(frames, ([[1, 6], [1, 6]], [[0, 6, 1, False]]))
    names, kinds, counts = episode_pushes(records)
    assert names == ["agent_0", "agent_1"] and kinds == ["heuristic", "heuristic"]
    assert counts == [3, 2]
    out = episode_workload(records)
    assert out["pushes"] == {"agent_0": 3, "agent_1": 2}
    assert out["workload_balance"] == pytest.approx(6 / 13)  # 2*3 / (4 + 9)


def test_a_heavy_block_pushed_from_two_face_cells_and_from_above():
    # a weight-2 block at (2, 2): agents on both left face cells, one above it pushing down
    agents = [[2, 1], [3, 1], [1, 3]]
    block = [[2, 2, 2, True]]
    assert step_pushes(agents, block, [RIGHT, RIGHT, DOWN]) == [0, 0, 0]
    assert step_pushes(agents, block, [LEFT, RIGHT, UP]) == [-1, 0, -1]
    # an agent beside the block but not behind a face (diagonal) pushes nothing
    assert step_pushes([[1, 1]], block, [RIGHT]) == [-1]
    assert step_pushes([], [], []) == []


def test_no_push_leaves_the_balance_undefined():
    frames = [([[1, 0], [3, 0]], [B1], [UP, DOWN])]
    out = episode_workload(build_trace(frames, ([[0, 0], [4, 0]], [B1])))
    assert out == {"pushes": {"agent_0": 0, "agent_1": 0}, "workload_balance": None, "workload_balance_kinds": None}


def test_a_position_off_the_grid_is_an_error_naming_the_line():
    frames = [([[1, 2], [-1, 0]], [B1], [RIGHT, STAY])]
    with pytest.raises(balance.RecordError, match="outside the grid") as err:
        episode_pushes(build_trace(frames, ([[1, 2], [0, 0]], [B1])))
    assert (err.value.line, err.value.key) == (1, "layout")
    frames = [([[1, 2], [3, 0]], [B1], [RIGHT, STAY]), ([[1, 3], [3, -2]], [[1, 4, 1, True]], [RIGHT, STAY])]
    with pytest.raises(balance.RecordError, match="outside the grid") as err:
        episode_pushes(build_trace(frames, ([[1, 3], [3, 0]], [B1])))
    assert (err.value.line, err.value.key) == (2, "agents")


@pytest.fixture(scope="module")
def random_team_trace(tmp_path_factory):
    """A real episode of agents acting with primitives (random) on ``hard``."""
    env = cube_jax.make("hard")
    path = tmp_path_factory.mktemp("random") / "episode.jsonl"
    run_episode(env, team_agents(env, parse_team("random", env.num_agents)), seed=3, trace=path)
    return read_trace(path), path


def test_pushes_agree_with_the_traces_joint_counts_for_primitive_agents(random_team_trace):
    records, path = random_team_trace
    names, _, _ = episode_pushes(records)
    before = records[0]["layout"]
    total = 0
    for record in (r for r in records if r["type"] == "step"):
        actions = [record["actions"][a] for a in names]
        pushed = step_pushes(before["agents"], before["blocks"], actions)
        for block in range(len(before["blocks"])):
            for face, direction in FACE_PUSH_DIRECTION.items():
                mine = sum(1 for i, j in enumerate(pushed) if j == block and actions[i] == direction)
                joint = record["tasks"].get(f"{block}:{face}", {}).get("joint", 0)
                assert mine == joint, (record["t"], block, face)
                total += mine
        before = record
    assert total > 0  # the episode did push
    assert trace_workload(path) == episode_workload(records)


def test_report_gives_the_balance_per_episode_and_its_interval(tmp_path, capsys):
    frames = [([[1, 2], [3, 0]], [B1], [RIGHT, RIGHT]), ([[1, 3], [3, 1]], [[1, 4, 1, True]], [RIGHT, STAY]),
              ([[1, 4], [3, 1]], [[1, 5, 1, True]], [RIGHT, STAY]), ([[1, 5], [3, 1]], [[1, 6, 1, True]], [STAY, STAY])]
    # agent_0 (a person) pushes 3 times, agent_1 (a language agent) never: gamma 0
    pushed = build_trace(frames, ([[1, 5], [3, 1]], [[1, 6, 1, True]]), kinds=("human", "llm"))
    idle = build_trace([([[1, 0], [3, 0]], [B1], [UP, DOWN])], ([[0, 0], [4, 0]], [B1]), kinds=("human", "llm"))
    (tmp_path / "a.jsonl").write_text(dumps(pushed))
    (tmp_path / "b.jsonl").write_text(dumps(idle))
    out = tmp_path / "metrics.json"
    assert cli.main(["report", str(tmp_path), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    first, second = doc["episodes"]
    assert first["pushes"] == {"agent_0": 3, "agent_1": 0}
    assert first["workload_balance"] == 0.0 and first["workload_balance_kinds"] == 0.0
    assert second["workload_balance"] is None and second["workload_balance_kinds"] is None
    assert doc["aggregate"]["workload_balance"] == {"mean": 0.0, "ci_low": 0.0, "ci_high": 0.0, "episodes": 1}
    printed = capsys.readouterr().out
    assert "workload_balance         0 [0, 0] (1 of 2 episodes)" in printed


def test_the_aggregate_leaves_out_a_metric_no_episode_defines(tmp_path):
    idle = build_trace([([[1, 0], [3, 0]], [B1], [UP, DOWN])], ([[0, 0], [4, 0]], [B1]))
    (tmp_path / "a.jsonl").write_text(dumps(idle))
    doc_path = tmp_path / "metrics.json"
    assert cli.main(["report", str(tmp_path / "a.jsonl"), "--json", str(doc_path), "--quiet"]) == 0
    aggregate = json.loads(doc_path.read_text())["aggregate"]
    assert "workload_balance" not in aggregate and "workload_balance_kinds" not in aggregate
    assert "success" in aggregate


def test_balance_of_several_episodes_has_a_bootstrap_interval():
    episodes = [{"workload_balance": v, "workload_balance_kinds": None} for v in (0.1, 0.2, 0.3, 0.4, None)]
    out = balance.summarize_workload(episodes, resamples=2000)
    assert set(out) == {"workload_balance"}
    summary = out["workload_balance"]
    assert summary["episodes"] == 4 and summary["mean"] == pytest.approx(0.25)
    assert 0.1 <= summary["ci_low"] < 0.25 < summary["ci_high"] <= 0.4
    assert np.isfinite([summary["ci_low"], summary["ci_high"]]).all()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_pushes_follow_the_shared_chain_rule_on_random_worlds(seed):
    """step_pushes agrees with the symbolic layer's chain search (vocabulary.chain_ends)."""
    from cube_jax.core.types import ACTION_DELTAS
    from cube_jax.symbolic.vocabulary import agent_grid, block_grid, chain_ends

    rng = np.random.default_rng(seed)
    k = int(rng.integers(4, 10))
    taken = np.zeros((k, k), bool)
    blocks = []
    for _ in range(int(rng.integers(0, 4))):
        w = int(rng.integers(1, 3))
        r, c = int(rng.integers(0, k - w + 1)), int(rng.integers(0, k - w))
        if not taken[r:r + w, c:c + w].any():
            taken[r:r + w, c:c + w] = True
            blocks.append([r, c, w, bool(rng.random() < 0.85)])
    free = np.argwhere(~taken)
    n = int(rng.integers(1, min(8, len(free)) + 1))
    agents = [[int(r), int(c)] for r, c in free[rng.choice(len(free), n, replace=False)]]
    actions = [int(a) for a in rng.integers(0, 5, n)]
    pos = np.asarray(agents, np.int64)
    rows = np.asarray(blocks, np.int64).reshape(-1, 4)
    alive = np.asarray([b[3] for b in blocks], bool)
    agents_at, blocks_at = agent_grid(pos, k), block_grid(rows[:, :2], rows[:, 2], alive, k)
    expected = []
    for i, a in enumerate(actions):
        if a == 0:
            expected.append(-1)
            continue
        end = int(chain_ends(pos, agents_at, blocks_at, np.asarray(ACTION_DELTAS[a]), len(blocks))[i])
        expected.append(end if end < len(blocks) else -1)
    assert step_pushes(agents, blocks, actions) == expected
