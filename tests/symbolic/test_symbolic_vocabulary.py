"""The shared symbolic vocabulary: its tables, the documentation of the actions, and the
geometry rules, which must give the same answers on numpy (CPU executor) as on jax
(JAX executor and concepts)."""
from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cube_jax import State
from cube_jax.core.types import DOWN, LEFT, RIGHT, STAY, UP
from cube_jax.symbolic import ACTION_SPECS, SymbolicAction, concepts, executor, make_action
from cube_jax.symbolic import jax_executor as jx
from cube_jax.symbolic import vocabulary as V
from cube_jax.symbolic.pathing import World, queue_targets

DOCS = Path(__file__).resolve().parents[2] / "docs" / "symbolic.md"


# --------------------------------------------------------------------------- tables


def test_face_tables_follow_the_docs_table():
    assert V.FACE_NAMES == ("up", "down", "left", "right")
    assert (V.UP_FACE, V.DOWN_FACE, V.LEFT_FACE, V.RIGHT_FACE) == (0, 1, 2, 3)
    assert V.FACE_PUSH_ACTION == (DOWN, UP, RIGHT, LEFT)
    assert V.FACE_PUSH_DIRECTION == {"up": DOWN, "down": UP, "left": RIGHT, "right": LEFT}
    assert V.FACE_OUTWARD == ((-1, 0), (1, 0), (0, -1), (0, 1))
    assert V.FACE_AWAY_ACTION == (UP, DOWN, LEFT, RIGHT)
    assert V.FACE_ALONG == ((0, 1), (0, 1), (1, 0), (1, 0))
    # packing: toward face cell 0, LEFT along up/down faces, UP along left/right faces
    assert V.FACE_PACK_ACTION == (LEFT, LEFT, UP, UP)
    assert V.face_id("right") == 3 and V.face_id(1) == 1
    with pytest.raises(ValueError, match="unknown face 'north'"):
        V.face_id("north")


def test_statuses_and_error_kinds_are_one_table_for_both_executors():
    assert V.STATUS_NAMES == ("started", "in_progress", "succeeded", "failed", "done")
    assert (executor.STARTED, executor.IN_PROGRESS, executor.SUCCEEDED, executor.FAILED, executor.DONE) == V.STATUS_NAMES
    assert (jx.STARTED, jx.IN_PROGRESS, jx.SUCCEEDED, jx.FAILED, jx.DONE) == (0, 1, 2, 3, 4)
    assert [V.STATUS_NAMES[s] for s in (jx.STARTED, jx.DONE)] == ["started", "done"]
    assert V.ERROR_NAMES == ("", "precondition", "execution", "plan_check")
    assert V.ErrorKind.PLAN_CHECK.label == "plan_check"


def test_action_tables_derive_from_action_specs():
    # the documented codes and kinds of the paper's actions (later actions may follow them)
    documented = ("idle", "move", "move_to_block", "rendezvous", "push_block", "yield_block", "wait_agents")
    assert [V.ACTION_CODES[name] for name in documented] == [0, 1, 2, 3, 4, 5, 6]
    assert [V.ACTION_NAMES_BY_CODE[code] for code in range(7)] == list(documented)
    assert [name for name in documented if name in V.SYNC_ACTIONS] == ["rendezvous", "wait_agents"]
    assert [name for name in documented if name in V.WALKING_ACTIONS] == ["move", "move_to_block", "yield_block"]
    assert V.MAX_ARGS >= 4 and len(jx.encode_action(make_action("idle", 1))) == 1 + V.MAX_ARGS
    assert (jx.IDLE, jx.MOVE_TO_BLOCK, jx.WAIT_AGENTS) == (0, 2, 6)


def test_a_broken_action_table_is_refused():
    spec = V.ActionSpec("hop", 2, (V.ArgSpec("steps", "int"),), "hop")  # code 1 left out
    with pytest.raises(ValueError, match="codes must be 0..1, each once"):
        V._check_action_table({"idle": ACTION_SPECS["idle"], "hop": spec})
    sync = V.ActionSpec("gather", 0, (V.ArgSpec("count", "int", 1),), "gather", synchronising=True)
    with pytest.raises(ValueError, match="needs `count` and `timeout`"):
        V._check_action_table({"gather": sync})


def _docs_action_rows() -> dict:
    text = DOCS.read_text()
    section = text[text.index("## Actions"):]
    section = section[: section.index("\n## ", 3)]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| (\d+) \| `(\w+)` \| ([^|]*) \|", line)
        if m:
            rows[m.group(2)] = (int(m.group(1)), m.group(3).strip().strip("`"))
    return rows


def test_the_docs_actions_table_lists_every_action_spec():
    """docs/symbolic.md's table row per action: its code and arguments as in ACTION_SPECS."""
    expected = {
        name: (spec.code, ", ".join(a.name + (f" >= {a.minimum}" if a.kind == "int" else "") for a in spec.args))
        for name, spec in ACTION_SPECS.items()
    }
    assert _docs_action_rows() == expected


# --------------------------------------------------------------------------- plan rows


def random_action(rng, spec) -> SymbolicAction:
    values = {"block": lambda a: int(rng.integers(0, 5)), "face": lambda a: str(rng.choice(V.FACE_NAMES)),
              "direction": lambda a: str(rng.choice(list(V.DIRECTIONS))),
              "int": lambda a: int(rng.integers(a.minimum, a.minimum + 9))}
    return SymbolicAction(spec.name, {a.name: values[a.kind](a) for a in spec.args})


def test_every_action_encodes_and_decodes():
    rng = np.random.default_rng(0)
    for spec in ACTION_SPECS.values():
        for _ in range(5):
            action = random_action(rng, spec)
            row = jx.encode_action(action)
            assert len(row) == 1 + V.MAX_ARGS and row[0] == spec.code
            assert jx.decode_action(row) == action
            assert jx.plan_row(spec.name, *row[1 : 1 + len(spec.args)]).tolist() == row
    assert jx.encode_action(make_action("move", "down", 3)) == [1, DOWN, 3, 0, 0]
    with pytest.raises(ValueError, match="9 is not an action code"):
        jx.decode_action([9, 0, 0, 0, 0])


# --------------------------------------------------------------------------- geometry by hand


def test_goal_distance_on_python_numpy_and_jax():
    assert int(V.goal_distance(8, 5, 2)) == 1  # columns 5-6, one push to touch column 7
    assert int(V.goal_distance(8, 0, 1)) == 7
    assert int(V.goal_distance(8, 5, 2, alive=False)) == 0
    cols, weights, alive = [2, 4, 6], [3, 1, 1], [True, True, False]
    assert V.goal_distance(8, np.asarray(cols), np.asarray(weights), np.asarray(alive)).tolist() == [3, 3, 0]
    assert V.goal_distance(8, jnp.asarray(cols), jnp.asarray(weights), jnp.asarray(alive)).tolist() == [3, 3, 0]


def test_face_cells_of_a_weight_two_block():
    top_left, w = (3, 4), 2  # covers rows 3-4, columns 4-5
    cells = {f: [V.face_cell(top_left, w, V.FACE_IDS[f], j).tolist() for j in range(w)] for f in V.FACE_NAMES}
    assert cells == {"up": [[2, 4], [2, 5]], "down": [[5, 4], [5, 5]], "left": [[3, 3], [4, 3]], "right": [[3, 6], [4, 6]]}
    on_line, j = V.face_offset(np.asarray([[4, 3], [5, 3], [4, 6]]), top_left, w, V.LEFT_FACE)
    assert on_line.tolist() == [True, True, False] and j.tolist()[:2] == [1, 2]


def test_away_direction_and_packing_step_by_hand():
    block, w = np.asarray([3, 3]), 2  # rows 3-4, columns 3-4
    # below and two columns right: columns are farther -> RIGHT; right above: UP
    assert int(V.away_direction(np.asarray([6, 6]), block, w)) == RIGHT
    assert int(V.away_direction(np.asarray([0, 4]), block, w)) == UP
    agents_at = np.full((8, 8), -1)
    agents_at[4, 2] = 0  # on left face cell 1
    blocks_at = np.full((8, 8), -1)
    blocks_at[3:5, 3:5] = 0
    assert int(V.packing_step(np.asarray([4, 2]), block, w, V.LEFT_FACE, agents_at, blocks_at)) == UP
    agents_at[3, 2] = 1  # face cell 0 taken
    assert int(V.packing_step(np.asarray([4, 2]), block, w, V.LEFT_FACE, agents_at, blocks_at)) == STAY


# --------------------------------------------------------------------------- numpy and jax agree

K, N, B = 6, 3, 2


@st.composite
def worlds(draw):
    """A valid K x K world: B blocks of weight 1-2 (some delivered), N agents on free cells."""
    cells = [(r, c) for r in range(K) for c in range(K)]
    taken, blocks = set(), []
    for _ in range(B):
        w = draw(st.integers(1, 2))
        free = [(r, c) for r, c in cells if r + w <= K and c + w <= K - 1
                and not {(r + i, c + j) for i in range(w) for j in range(w)} & taken]
        r, c = draw(st.sampled_from(free))
        taken |= {(r + i, c + j) for i in range(w) for j in range(w)}
        blocks.append((r, c, w))
    agents = draw(st.lists(st.sampled_from([x for x in cells if x not in taken]), min_size=N, max_size=N, unique=True))
    alive = draw(st.lists(st.booleans(), min_size=B, max_size=B))
    return np.asarray(agents, np.int32), np.asarray([b[:2] for b in blocks], np.int32), \
        np.asarray([b[2] for b in blocks], np.int32), np.asarray(alive, bool)


def to_state(agents, block_pos, weights, alive) -> State:
    return State(agent_pos=jnp.asarray(agents), block_pos=jnp.asarray(block_pos), block_weight=jnp.asarray(weights),
                 block_alive=jnp.asarray(alive), t=jnp.int32(0), key=jax.random.PRNGKey(0), grid_size=K)


@jax.jit
def jax_rules(state: State, block, face):
    """The geometry rules evaluated with jax for every agent (one compile for every example)."""
    agents_at, blocks_at = concepts.agent_grid(state), concepts.block_grid(state)
    top_left, w = state.block_pos[block], state.block_weight[block]
    tails = jax.vmap(lambda a: V.queue_tails(a, top_left, w, face, agents_at, blocks_at))(jnp.arange(N))
    return {
        "align": concepts.alignment(state),
        "away": V.away_direction(state.agent_pos, top_left, w),
        "pack": V.packing_step(state.agent_pos, top_left, w, face, agents_at, blocks_at),
        "tails": tails,
        "agents_at": agents_at,
        "blocks_at": blocks_at,
        "progress": jax.vmap(lambda j: concepts.block_progress(state, j))(jnp.arange(B)),
    }


@settings(max_examples=60, deadline=None)
@given(worlds(), st.integers(0, B - 1), st.integers(0, 3))
def test_geometry_rules_agree_on_numpy_and_jax(world, block, face):
    agents, block_pos, weights, alive = world
    cpu = World.from_state(to_state(agents, block_pos, weights, alive))
    out = jax.tree.map(np.asarray, jax_rules(to_state(agents, block_pos, weights, alive), block, face))
    assert (cpu.agent_at == out["agents_at"]).all() and (cpu.block_at == out["blocks_at"]).all()
    assert (cpu.alignment == out["align"]).all()
    top_left, w = block_pos[block], int(weights[block])
    assert V.away_direction(agents, top_left, w).tolist() == out["away"].tolist()
    assert V.packing_step(agents, top_left, w, face, cpu.agent_at, cpu.block_at).tolist() == out["pack"].tolist()
    progress = [int(V.goal_distance(K, int(block_pos[j, 1]), int(weights[j]), bool(alive[j]))) for j in range(B)]
    assert progress == out["progress"].tolist()
    # the CPU reads every agent's queues at once from w lines; jax one agent at a time from K lines
    jax_tails, jax_targets = out["tails"]
    for i in range(N):
        expected = sorted({tuple(t) for t, ok in zip(jax_tails[i].tolist(), jax_targets[i].tolist()) if ok})
        assert sorted(queue_targets(cpu, i, block, V.FACE_NAMES[face])) == expected


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(V).failed == 0
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    for test in finder.find(jx.decode_action, "decode_action", globs={"decode_action": jx.decode_action}):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
