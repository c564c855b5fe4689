"""The CPU plan executor on hand-drawn worlds: emitted primitives, statuses and errors.

Expected primitive sequences are worked out by hand from docs/symbolic.md (breadth-first
distances, tie order UP, DOWN, LEFT, RIGHT). Most worlds are stepped with the plain-Python
reference of the step rules (``cube_jax/testing/reference.py``, itself checked against the JAX
environment), which needs no compilation; one scenario runs on the JAX environment.
"""
from __future__ import annotations

import types

import jax
import numpy as np
import pytest

import cube_jax
from cube_jax.symbolic import PlanError, PlanExecutor, render_symbolic, symbolic_observation
from cube_jax.symbolic.pathing import World, distance_field, free_cells, queue_targets
from cube_jax.testing import reference as ref

S, U, D, L, R = 0, 1, 2, 3, 4


def to_state(w: ref.World) -> cube_jax.State:
    return cube_jax.State(
        agent_pos=np.asarray(w.agents, np.int32).reshape(-1, 2),
        block_pos=np.asarray([b[:2] for b in w.blocks], np.int32),
        block_weight=np.asarray([b[2] for b in w.blocks], np.int32),
        block_alive=np.asarray([b[3] for b in w.blocks], bool),
        t=np.int32(w.t),
        key=np.zeros(2, np.uint32),
        grid_size=w.K,
    )


def world(ascii_map: str):
    """(sizes for the executor, reference world, state) of an ASCII map."""
    sc = cube_jax.Scenario.from_ascii(ascii_map)
    w = ref.World(K=sc.grid_size, agents=list(sc.agents), blocks=[[r, c, wt, True] for r, c, wt in sc.blocks])
    return types.SimpleNamespace(num_agents=len(sc.agents), num_blocks=len(sc.blocks)), w, to_state(w)


def drive(ex: PlanExecutor, state, plans: dict, steps: int, advance):
    """Sets the plans, then for ``steps`` steps emits the joint action and ``advance``s the state."""
    for agent, plan in plans.items():
        ex.set_plan(agent, plan, state)
    emitted = []
    for _ in range(steps):
        actions = ex.act(state)
        emitted.append(actions.tolist())
        state = advance(state, actions)
    return emitted, ex, state


def run(ascii_map: str, plans: dict, steps: int):
    """Runs the plans for ``steps`` steps on the reference; returns (primitives per step [steps][N], executor, state)."""
    sizes, w, state = world(ascii_map)
    box = [w]

    def advance(_, actions):
        box[0] = ref.step(box[0], actions.tolist())[0]
        return to_state(box[0])

    return drive(PlanExecutor(sizes), state, plans, steps, advance)


def run_on_env(ascii_map: str, plans: dict, steps: int):
    """Like ``run`` but stepping the JAX environment."""
    env = cube_jax.make(scenario=cube_jax.Scenario.from_ascii(ascii_map))
    state, _ = env.reset(jax.random.PRNGKey(0))
    return drive(PlanExecutor(env), state, plans, steps, lambda st, actions: env.step(st, actions)[0])


def column(emitted, agent):
    return [step[agent] for step in emitted]


def test_move_to_block_routes_around_the_block():
    emitted, ex, state = run(
        """
        ........
        ........
        ..aa....
        0.aa....
        ........
        ........
        ........
        ........
        """,
        {0: "move_to_block(0, right)"},
        8,
    )
    # below the block is 6 steps to (3,4); above is 7 to (2,4): DOWN, RIGHT x4, UP
    assert column(emitted, 0) == [D, R, R, R, R, U, S, S]
    assert cube_jax.layout(state)["agents"] == [(3, 4)]
    assert [r.status for r in ex.history if r.agent == 0][:3] == ["started", "in_progress", "in_progress"]
    assert [(r.action_index, r.primitive, r.status) for r in ex.records_at(6)] == [(0, None, "succeeded"), (None, S, "done")]
    assert ex.status(0) == "done"


def test_move_to_block_goes_around_agents_when_it_can():
    layout = """
        ........
        ........
        ........
        01..a...
        ........
        ........
        ........
        ........
        """
    emitted, *_ = run(layout, {0: "move_to_block(0, left)"}, 6)
    # straight on is blocked by agent 1 (idle); around it above is as short as below: UP first,
    # and back down as soon as it has passed (DOWN before RIGHT at equal distance)
    assert column(emitted, 0) == [U, R, R, D, R, S]


def test_move_to_block_walks_through_agents_when_no_way_around():
    layout = """
        01......
        a.......
        ........
        ........
        ....b...
        ........
        ........
        ........
        """
    emitted, ex, *_ = run(layout, {0: "move_to_block(1, left)"}, 2)
    assert column(emitted, 0) == [R, R]  # agent 1 is in the only way out; the move is blocked
    assert ex.status(0) == "in_progress"


def test_extra_agents_queue_behind_the_face():
    sizes, _, state = world(
        """
        ........
        ........
        ........
        ..1a....
        0.......
        ........
        ........
        ........
        """
    )
    w = World.from_state(state)
    assert queue_targets(w, 0, 0, "left") == [(3, 1)]  # the face cell holds agent 1: its tail is behind it
    assert queue_targets(w, 1, 0, "left") == [(3, 2)]
    ex = PlanExecutor(sizes)
    ex.set_plan(0, "move_to_block(0, left)")
    assert ex.act(state).tolist() == [U, S]  # (3,0) then (3,1): UP before RIGHT at equal distance


def test_distance_field_is_breadth_first():
    sizes, _, state = world(
        """
        ........
        .aa.....
        .aa.....
        ........
        ........
        ........
        ........
        0.......
        """
    )
    dist = distance_field(free_cells(World.from_state(state)), [(0, 0)])
    assert dist[0, 3] == 3 and dist[3, 1] == 4 and dist[2, 3] == 5 and dist[7, 7] == 14
    assert dist[1, 1] == np.iinfo(np.int32).max  # under the block


def test_push_block_counts_steps_and_ends():
    emitted, ex, state = run(
        """
        ........
        0a......
        ........
        ........
        ........
        ........
        ........
        ........
        """,
        {0: "push_block(0, 3)"},
        5,
    )
    assert column(emitted, 0) == [R, R, R, S, S]
    assert cube_jax.layout(state)["blocks"] == [(1, 4, 1, True)]
    assert [r.status for r in ex.history] == ["started", "in_progress", "in_progress", "succeeded", "done", "done"]


def test_push_block_succeeds_on_delivery_and_the_plan_goes_on():
    emitted, ex, state = run(
        """
        ........
        ....0a..
        ........
        ........
        ........
        ........
        ........
        ........
        """,
        {0: "push(0, 10); move(down, 2)"},
        5,
    )
    assert column(emitted, 0) == [R, R, D, D, S]
    assert not cube_jax.layout(state)["blocks"][0][3]


def test_rendezvous_waits_then_everyone_pushes_together():
    plan = "move_to_block(0, left); rendezvous(0, left, 2, 10); push_block(0, 2)"
    emitted, ex, state = run_on_env(
        """
        ........
        ........
        .0aa....
        ..aa....
        ........
        1.......
        ........
        ........
        """,
        {0: plan, 1: plan},
        6,
    )
    # agent 1 queues behind agent 0 at (2,0) (UP x3); both push in the step it arrives
    assert column(emitted, 0) == [S, S, S, R, R, S]
    assert column(emitted, 1) == [U, U, U, R, R, S]
    assert cube_jax.layout(state)["blocks"] == [(2, 4, 2, True)]
    t3 = [(r.agent, r.action.name, r.primitive, r.status) for r in ex.records_at(3)]
    assert t3 == [
        (1, "move_to_block", None, "succeeded"),
        (0, "rendezvous", None, "succeeded"),
        (0, "push_block", R, "started"),
        (1, "rendezvous", None, "succeeded"),
        (1, "push_block", R, "started"),
    ]


def test_rendezvous_times_out_and_the_agent_stops():
    emitted, ex, *_ = run(
        """
        ........
        0aa.....
        .aa.....
        ........
        ........
        ........
        ........
        1.......
        """,
        {0: "rendezvous(0, left, 2, 3); push_block(0, 5)"},
        6,
    )
    assert column(emitted, 0) == [S] * 6
    err = ex.error(0)
    assert (ex.status(0), err.kind, err.action_index, err.argument) == ("failed", "execution", 0, "timeout")
    assert "timed out after 3 steps with 1 of 2 agents" in err.message
    assert [r.status for r in ex.history if r.agent == 0] == ["started", "in_progress", "in_progress", "failed", "failed", "failed"]


def test_waiting_agents_pack_along_a_face_against_the_wall():
    emitted, *_ = run(
        """
        ........
        0aaa....
        .aaa....
        1aaa....
        ........
        ........
        ........
        2.......
        """,
        {0: "rendezvous(0, left, 3, 5)", 1: "rendezvous(0, left, 3, 5)"},
        2,
    )
    # agent 1 moves up to the free middle face cell, freeing the bottom one for a third agent
    assert emitted == [[S, U, S], [S, S, S]]


@pytest.mark.parametrize(
    "plan, argument, words",
    [
        ("rendezvous(0, up, 1, 5)", "face", "not aligned with the up face of block 0"),
        ("idle(1); push_block(0, 2)", "block", "not aligned with any face of block 0"),
    ],
)
def test_precondition_failures_are_reported_not_ignored(plan, argument, words):
    emitted, ex, *_ = run(
        """
        ........
        ........
        .0......
        ...a....
        ........
        ........
        ........
        ........
        """,
        {0: plan},
        3,
    )
    err = ex.error(0)
    assert (err.kind, err.argument) == ("precondition", argument)
    assert words in err.message
    assert ex.status(0) == "failed"
    assert set(column(emitted, 0)) == {S}


def test_set_plan_rejects_delivered_and_unknown_blocks():
    sizes, _, state = world(
        """
        ........
        .0a.....
        ........
        ........
        ........
        ........
        ........
        ........
        """
    )
    ex = PlanExecutor(sizes)
    with pytest.raises(PlanError, match="unknown block 1") as err:
        ex.set_plan(0, "move_to_block(1, left)")
    assert err.value.kind == "plan_check"
    delivered = state.replace(block_alive=np.array([False]))
    with pytest.raises(PlanError, match="block 0 is already delivered"):
        ex.set_plan(0, "push_block(0, 1)", delivered)


def test_move_idle_yield_and_wait_agents():
    plans = {
        0: "wait_agents(2, 5); move(right, 1)",
        1: "idle(2); wait_agents(2, 5); yield_block(0, 2)",
    }
    emitted, ex, *_ = run(
        """
        ........
        0.......
        ........
        ..a.....
        ..1.....
        ........
        ........
        ........
        """,
        plans,
        5,
    )
    # agent 1 enters the wait state at t=2 and both leave it at once; it yields DOWN (below the block)
    assert emitted == [[S, S], [S, S], [R, D], [S, D], [S, S]]


def test_history_feeds_the_symbolic_observation():
    emitted, ex, state = run(
        """
        ........
        0a......
        ........
        ........
        ........
        ........
        ........
        ........
        """,
        {0: "push_block(0, 2)"},
        2,
    )
    obs = symbolic_observation(state, 0, ex)
    assert obs["grid_size"] == 8 and obs["agents"] == [{"id": 0, "position": [1, 2]}]
    assert obs["blocks"] == [{"id": 0, "weight": 1, "position": [1, 3], "distance_to_goal": 4, "delivered": False}]
    assert [(h["t"], h["action"], h["primitive"], h["status"]) for h in obs["history"]] == [
        (0, "push_block(0, 2)", R, "started"),
        (1, "push_block(0, 2)", R, "in_progress"),
    ]
    text = render_symbolic(obs)
    assert "block 0 weight 1 at (1,3) distance 4" in text
    assert "t=1 agent 0 push_block(0, 2) -> RIGHT in_progress" in text
