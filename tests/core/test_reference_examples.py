"""The worked examples of DYNAMICS.md, checked on the reference and on the JAX env.

Every test runs twice: ``[reference]`` steps ``cube_jax/testing/reference.py``, ``[jax]`` steps
``cube_jax`` through its public API only (``Scenario``, ``make``, ``reset``, ``step``,
``layout``, ``grid_observation``). Expected values are written out by hand from the
spec's table, not computed by either side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from cube_jax.testing import reference as ref

S, U, D, L, R = ref.STAY, ref.UP, ref.DOWN, ref.LEFT, ref.RIGHT

BACKENDS = ["reference", "jax"]


# --------------------------------------------------------------------------- drivers


@dataclass
class Outcome:
    """What a user sees after one step, in plain Python."""

    t: int
    agents: list[tuple[int, int]]
    blocks: list[tuple[int, int, int, bool]]  # (row, col, weight, alive), id order
    rewards: list[float]
    terminated: bool
    truncated: bool
    grid: np.ndarray  # float32 [K, K, 5]


def run_reference(K, agents, blocks, action_seq, max_steps=100, step_cost=0.01, deliver_reward=1.0):
    world = ref.World(
        K=K,
        agents=list(agents),
        blocks=[[r, c, w, True] for r, c, w in blocks],
        max_steps=max_steps,
        step_cost=step_cost,
        deliver_reward=deliver_reward,
    )
    ref.check_invariants(world)
    outcomes = []
    for actions in action_seq:
        world, rewards, terminated, truncated, _ = ref.step(world, actions)
        ref.check_invariants(world)
        outcomes.append(
            Outcome(
                t=world.t,
                agents=list(world.agents),
                blocks=[tuple(b) for b in world.blocks],
                rewards=rewards,
                terminated=terminated,
                truncated=truncated,
                grid=np.array(ref.grid(world), dtype=np.float32),
            )
        )
    return outcomes


def run_jax(K, agents, blocks, action_seq, max_steps=100, step_cost=0.01, deliver_reward=1.0):
    import jax
    import jax.numpy as jnp

    import cube_jax

    scenario = cube_jax.Scenario(
        grid_size=K,
        agents=list(agents),
        blocks=list(blocks),
        max_steps=max_steps,
        step_cost=step_cost,
        deliver_reward=deliver_reward,
    )
    env = cube_jax.make(scenario=scenario)
    state, _ = env.reset(jax.random.PRNGKey(0))
    start = cube_jax.layout(state)
    assert start["t"] == 0
    assert [tuple(a) for a in start["agents"]] == [tuple(a) for a in agents]
    assert [tuple(b) for b in start["blocks"]] == [(r, c, w, True) for r, c, w in blocks]

    outcomes = []
    for actions in action_seq:
        state, ts = env.step(state, jnp.asarray(actions, dtype=jnp.int32))
        lay = cube_jax.layout(state)
        outcomes.append(
            Outcome(
                t=int(lay["t"]),
                agents=[(int(r), int(c)) for r, c in lay["agents"]],
                blocks=[(int(r), int(c), int(w), bool(a)) for r, c, w, a in lay["blocks"]],
                rewards=[float(x) for x in np.asarray(ts.reward)],
                terminated=bool(ts.terminated),
                truncated=bool(ts.truncated),
                grid=np.asarray(jax.jit(cube_jax.grid_observation)(state)),
            )
        )
    return outcomes


def run(backend, *args, **kwargs):
    return {"reference": run_reference, "jax": run_jax}[backend](*args, **kwargs)


def assert_blocks(got, expected):
    """Blocks equal; a delivered block covers no cell, so its position is not compared."""
    assert len(got) == len(expected)
    for j, (g, e) in enumerate(zip(got, expected)):
        assert (g[2], g[3]) == (e[2], e[3]), f"block {j}: got {g}, expected {e}"
        if e[3]:
            assert g[:2] == e[:2], f"block {j}: got {g}, expected {e}"


# --------------------------------------------------------------------------- the table


@dataclass
class Example:
    name: str
    K: int
    agents: list  # (row, col)
    blocks: list  # (row, col, weight)
    actions: list
    expect_agents: list
    expect_blocks: list  # (row, col, weight, alive)
    expect_reward: float = -0.01  # every agent's; -step_cost when nothing is delivered
    expect_terminated: bool = False


# A scenario needs at least one block: examples about agents alone get a block far away.
FAR_BLOCK = (6, 4, 1)

EXAMPLES = [
    Example(
        "push_w1",
        8, [(2, 1)], [(2, 2, 1)], [R],
        [(2, 2)], [(2, 3, 1, True)],
    ),
    Example(
        "force_1_below_weight_2",
        8, [(2, 1)], [(2, 2, 2)], [R],
        [(2, 1)], [(2, 2, 2, True)],
    ),
    Example(
        "two_face_cells_push_w2",
        8, [(2, 1), (3, 1)], [(2, 2, 2)], [R, R],
        [(2, 2), (3, 2)], [(2, 3, 2, True)],
    ),
    Example(
        "agent_line_push_w2",
        8, [(2, 1), (2, 0)], [(2, 2, 2)], [R, R],
        [(2, 2), (2, 1)], [(2, 3, 2, True)],
    ),
    Example(
        "line_needs_every_agent_pushing",
        8, [(2, 1), (2, 0)], [(2, 2, 2)], [R, S],
        [(2, 1), (2, 0)], [(2, 2, 2, True)],
    ),
    Example(
        "block_chain_too_heavy",
        8, [(2, 1)], [(2, 2, 1), (2, 3, 1)], [R],
        [(2, 1)], [(2, 2, 1, True), (2, 3, 1, True)],
    ),
    Example(
        "block_chain_pushed_by_line",
        8, [(2, 1), (2, 0)], [(2, 2, 1), (2, 3, 1)], [R, R],
        [(2, 2), (2, 1)], [(2, 3, 1, True), (2, 4, 1, True)],
    ),
    Example(
        "push_blocked_by_agent_then_agent_moves",
        8, [(2, 1), (2, 3)], [(2, 2, 1)], [R, R],
        [(2, 1), (2, 4)], [(2, 2, 1, True)],
    ),
    Example(
        "same_target_smallest_id_wins",
        8, [(2, 1), (2, 3)], [FAR_BLOCK], [R, L],
        [(2, 2), (2, 3)], [(6, 4, 1, True)],
    ),
    Example(
        "blocked_by_stationary_agent",
        8, [(2, 1), (2, 2)], [FAR_BLOCK], [R, S],
        [(2, 1), (2, 2)], [(6, 4, 1, True)],
    ),
    Example(
        "line_of_movers_follows_leader",
        8, [(2, 1), (2, 2), (2, 3)], [FAR_BLOCK], [R, R, R],
        [(2, 2), (2, 3), (2, 4)], [(6, 4, 1, True)],
    ),
    Example(
        "swap_fails",
        8, [(2, 1), (2, 2)], [FAR_BLOCK], [R, L],
        [(2, 1), (2, 2)], [(6, 4, 1, True)],
    ),
    Example(
        "delivery_terminates",
        6, [(2, 3), (0, 0)], [(2, 4, 1)], [R, S],
        [(2, 4), (0, 0)], [(2, 5, 1, False)],
        expect_reward=-0.01 + 1 / 2, expect_terminated=True,
    ),
    Example(
        "up_phase_before_right_phase",
        8, [(4, 3), (3, 2)], [(3, 3, 1)], [U, R],
        [(3, 3), (3, 2)], [(2, 3, 1, True)],
    ),
    Example(
        "composite_weight_5_force_2",
        10, [(2, 2), (4, 2)], [(2, 3, 1), (4, 3, 1), (2, 4, 3)], [R, R],
        [(2, 2), (4, 2)], [(2, 3, 1, True), (4, 3, 1, True), (2, 4, 3, True)],
    ),
    Example(
        "composite_weight_5_force_5",
        10,
        [(2, 2), (4, 2), (2, 1), (4, 1), (2, 0)],
        [(2, 3, 1), (4, 3, 1), (2, 4, 3)],
        [R, R, R, R, R],
        [(2, 3), (4, 3), (2, 2), (4, 2), (2, 1)],
        [(2, 4, 1, True), (4, 4, 1, True), (2, 5, 3, True)],
    ),
]

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda ex: ex.name)
def test_worked_example(ex, backend):
    (out,) = run(backend, ex.K, ex.agents, ex.blocks, [ex.actions])
    assert out.t == 1
    assert out.agents == ex.expect_agents
    assert_blocks(out.blocks, ex.expect_blocks)
    np.testing.assert_allclose(out.rewards, [ex.expect_reward] * len(ex.agents), rtol=0, atol=1e-6)
    assert out.terminated is ex.expect_terminated
    assert out.truncated is False


def test_reference_marks_blocked_pusher_engaged():
    """'nothing moves (force 1 < 2); A0 engaged' -- engagement is only visible in the reference."""
    world = ref.World(K=8, agents=[(2, 1)], blocks=[[2, 2, 2, True]])
    _, _, _, _, info = ref.step(world, [R])
    assert info["engaged"] == [0]
    assert info["force"][R] == [1]
    assert info["moved"] == []


# --------------------------------------------------------------------------- beyond the table


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_actions_are_stay(backend):
    # A0 faces a block (action 5), A3 would push on into A4 (action 7): with every
    # out-of-range action read as STAY, A3 is blocked and nothing else moves.
    agents = [(2, 1), (4, 4), (5, 5), (6, 1), (6, 2)]
    (out,) = run(backend, 8, agents, [(2, 2, 1)], [[5, -1, 99, R, 7]])
    assert out.agents == agents
    assert_blocks(out.blocks, [(2, 2, 1, True)])
    np.testing.assert_allclose(out.rewards, [-0.01] * 5, rtol=0, atol=1e-6)
    assert (out.t, out.terminated, out.truncated) == (1, False, False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_action_does_not_push(backend):
    # -1 and 5 must not be read as (action mod 5) or clipped into a push.
    agents = [(2, 1), (4, 1)]
    (out,) = run(backend, 8, agents, [(2, 2, 1), (4, 2, 1)], [[-1, 5]])
    assert out.agents == agents
    assert_blocks(out.blocks, [(2, 2, 1, True), (4, 2, 1, True)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_at_max_steps(backend):
    outs = run(backend, 8, [(2, 1)], [(2, 2, 1)], [[S], [U], [S]], max_steps=3)
    assert [(o.t, o.terminated, o.truncated) for o in outs] == [
        (1, False, False),
        (2, False, False),
        (3, False, True),
    ]
    assert outs[-1].agents == [(1, 1)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_delivery_on_last_step_terminates_without_truncating(backend):
    (out,) = run(backend, 6, [(2, 3), (0, 0)], [(2, 4, 1)], [[R, S]], max_steps=1)
    assert (out.t, out.terminated, out.truncated) == (1, True, False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reward_on_delivery_step(backend):
    # Two blocks (w=2 and w=1) delivered in the same step, one block left alive:
    # D = 2.5 * 2 + 2.5 * 1 = 7.5, every agent gets -0.05 + 7.5 / 3 = 2.45.
    agents = [(2, 2), (3, 2), (4, 3)]
    blocks = [(2, 3, 2), (4, 4, 1), (0, 0, 1)]
    (out,) = run(backend, 6, agents, blocks, [[R, R, R]], step_cost=0.05, deliver_reward=2.5)
    assert out.agents == [(2, 3), (3, 3), (4, 4)]
    assert_blocks(out.blocks, [(2, 4, 2, False), (4, 5, 1, False), (0, 0, 1, True)])
    np.testing.assert_allclose(out.rewards, [2.45] * 3, rtol=0, atol=1e-6)
    assert (out.terminated, out.truncated) == (False, False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reward_without_delivery_is_minus_step_cost(backend):
    (out,) = run(backend, 8, [(2, 1), (5, 5)], [(2, 2, 1)], [[R, U]], step_cost=0.125)
    np.testing.assert_allclose(out.rewards, [-0.125] * 2, rtol=0, atol=1e-6)


def expected_grid(K, agent_cells, block_cells):
    """agent_cells: {(r, c): agent id}; block_cells: {(r, c): (weight, block id)}."""
    g = np.zeros((K, K, 5), dtype=np.float32)
    g[:, K - 1, 2] = 1.0
    for (r, c), i in agent_cells.items():
        g[r, c, 0] = 1.0
        g[r, c, 3] = i + 1
    for (r, c), (w, j) in block_cells.items():
        g[r, c, 1] = w
        g[r, c, 4] = j + 1
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_grid_after_composite_push(backend):
    ex = EXAMPLES[-1]
    (out,) = run(backend, ex.K, ex.agents, ex.blocks, [ex.actions])
    agent_cells = {(2, 3): 0, (4, 3): 1, (2, 2): 2, (4, 2): 3, (2, 1): 4}
    block_cells = {(2, 4): (1, 0), (4, 4): (1, 1)}
    block_cells.update({(r, c): (3, 2) for r in (2, 3, 4) for c in (5, 6, 7)})
    assert out.grid.dtype == np.float32
    np.testing.assert_array_equal(out.grid, expected_grid(10, agent_cells, block_cells))


@pytest.mark.parametrize("backend", BACKENDS)
def test_grid_after_delivery_shows_no_block(backend):
    (out,) = run(backend, 6, [(2, 3), (0, 0)], [(2, 4, 1)], [[R, S]])
    np.testing.assert_array_equal(out.grid, expected_grid(6, {(2, 4): 0, (0, 0): 1}, {}))


def test_jax_grid_matches_reference_after_a_step():
    ex = EXAMPLES[-1]
    actions = [R, U, R, D, R]  # a partial push: the composite stays, A1 and A3 move
    (want,) = run_reference(ex.K, ex.agents, ex.blocks, [actions])
    (got,) = run_jax(ex.K, ex.agents, ex.blocks, [actions])
    assert got.agents == want.agents
    np.testing.assert_array_equal(got.grid, want.grid)
