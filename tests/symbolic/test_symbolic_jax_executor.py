"""The JAX plan executor and heuristic against the CPU ones, step by step.

Every step compares the joint primitive action and each agent's plan index, emitted
count, started flag, failure and status (``PlanExecutor.snapshot``); the world then
advances with the CPU actions. The random plans are drawn from every entry of
``ACTION_SPECS`` with arguments from their ArgSpec kinds, and each comparison checks that
every action actually ran. Everything runs in the shape of the "hard" scenario
(8 x 8, 3 agents, 3 blocks, plans of 3 actions) so each jitted function compiles once.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cube_jax
from cube_jax import State

N_AGENTS, N_BLOCKS, K, L = 3, 3, 8, 3


@pytest.fixture(scope="module")
def cpu():
    # Imported inside the fixture so a missing CPU executor fails these tests rather than
    # skipping them.
    from cube_jax.symbolic import executor

    return executor, None


@pytest.fixture(scope="module")
def env():
    return cube_jax.make("hard")


@pytest.fixture(scope="module")
def jitted():
    from cube_jax.symbolic import jax_executor as jx

    return {"step": jax.jit(jx.executor_step), "set": jax.jit(jx.set_plans)}


def snapshot(ex, n):
    from cube_jax.symbolic.jax_executor import STATUS_NAMES

    return [
        {
            "index": int(ex.index[i]),
            "emitted": int(ex.emitted[i]),
            "started": bool(ex.started[i]),
            "failed": bool(ex.failed[i]),
            "status": STATUS_NAMES[int(ex.status[i])],
        }
        for i in range(n)
    ]


# --------------------------------------------------------------------------- random worlds and plans


def random_state(rng) -> State:
    """A valid random layout in the hard scenario's shape: weights 3, 2, 1 (blocks may be delivered)."""
    while True:
        taken, blocks = set(), []
        for w in (3, 2, 1):
            r, c = int(rng.integers(0, K - w + 1)), int(rng.integers(0, K - w))
            square = {(r + i, c + j) for i in range(w) for j in range(w)}
            if square & taken:
                break
            taken |= square
            blocks.append((r, c))
        if len(blocks) == N_BLOCKS:
            break
    # agents near the blocks so that faces, queues and chains come up often
    near = sorted(
        ((r, c) for r in range(K) for c in range(K) if (r, c) not in taken),
        key=lambda cell: (min(abs(cell[0] - r) + abs(cell[1] - c) for r, c in blocks), rng.random()),
    )[:8]
    agents = [near[i] for i in rng.choice(len(near), N_AGENTS, replace=False)]
    alive = rng.random(N_BLOCKS) < 0.9
    alive[0] = True  # keep at least one block to plan for
    return State(
        agent_pos=jnp.asarray(agents, jnp.int32),
        block_pos=jnp.asarray(blocks, jnp.int32),
        block_weight=jnp.asarray([3, 2, 1], jnp.int32),
        block_alive=jnp.asarray(alive),
        t=jnp.int32(0),
        key=jax.random.PRNGKey(0),
        grid_size=K,
    )


# How often each action is drawn: the ones that build up pushes more often. Every entry of
# ACTION_SPECS is drawn (a new action with DEFAULT_WEIGHT), and its arguments come from its
# ArgSpec kinds, so a new action is in the comparison without any change here.
ACTION_WEIGHTS = {"move_to_block": 0.3, "rendezvous": 0.2, "push_block": 0.2, "idle": 0.05, "move": 0.1,
                  "yield_block": 0.05, "wait_agents": 0.1}
DEFAULT_WEIGHT = 0.1


def random_argument(rng, arg, blocks):
    """A valid random value for ``arg`` (an ArgSpec) in a world whose alive blocks are ``blocks``."""
    from cube_jax.symbolic.vocabulary import DIRECTIONS, FACE_NAMES

    if arg.kind == "block":
        return int(rng.choice(blocks))
    if arg.kind == "face":
        return str(rng.choice(FACE_NAMES))
    if arg.kind == "direction":
        return str(rng.choice(list(DIRECTIONS)))
    assert arg.kind == "int", f"no generator for argument kind {arg.kind!r}"
    # small values, so that steps run out and timeouts expire within an episode; a count
    # above the number of agents is a plan_check error (check_plan)
    high = N_AGENTS if arg.name == "count" else arg.minimum + 5
    return int(rng.integers(arg.minimum, high + 1))


def random_plan(rng, alive):
    """A random valid plan of 1..L actions drawn from every entry of ACTION_SPECS."""
    from cube_jax.symbolic import ACTION_SPECS, SymbolicAction

    blocks = [int(j) for j in np.flatnonzero(alive)]
    names = sorted(ACTION_SPECS)
    weights = np.asarray([ACTION_WEIGHTS.get(name, DEFAULT_WEIGHT) for name in names])
    plan = []
    for _ in range(int(rng.integers(1, L + 1))):
        spec = ACTION_SPECS[str(rng.choice(names, p=weights / weights.sum()))]
        plan.append(SymbolicAction(spec.name, {arg.name: random_argument(rng, arg, blocks) for arg in spec.args}))
    return plan


def test_random_plans_draw_every_action():
    from cube_jax.symbolic import ACTION_SPECS

    rng = np.random.default_rng(0)
    drawn = {a.name for _ in range(200) for a in random_plan(rng, np.ones(N_BLOCKS, bool))}
    assert drawn == set(ACTION_SPECS)


def test_both_executors_have_rules_for_every_action():
    """Every ActionSpec has its semantics on both sides: a step rule unless it is
    synchronising, sync rules if it is (an action added to ACTION_SPECS alone fails here)."""
    from cube_jax.symbolic import ACTION_SPECS, executor
    from cube_jax.symbolic import jax_executor as jx

    for rules in (executor.RULES, jx.RULES):
        assert set(rules) == set(ACTION_SPECS)
        for name, spec in ACTION_SPECS.items():
            assert (rules[name].step is None) == spec.synchronising, name
            assert (rules[name].sync is None) == (not spec.synchronising), name
    assert len(jx.rules_by_code()) == len(ACTION_SPECS)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_executor_matches_cpu_on_random_plans(seed, cpu, env, jitted):
    from cube_jax.symbolic import ACTION_SPECS
    from cube_jax.symbolic import jax_executor as jx

    executor, _ = cpu
    rng = np.random.default_rng(seed)
    exercised = set()
    for episode in range(4):
        state = random_state(rng)
        ex_cpu = executor.PlanExecutor(env)
        ex_jax = jx.init_executor(jnp.zeros((N_AGENTS, L, 1 + jx.MAX_ARGS), jnp.int32), jnp.zeros(N_AGENTS, jnp.int32))
        for t in range(25):
            alive = np.asarray(state.block_alive)
            if not alive.any():
                break
            # new plans for idle agents (and now and then for a busy one)
            fresh = [ex_cpu.is_idle(i) or rng.random() < 0.05 for i in range(N_AGENTS)]
            plans = [random_plan(rng, alive) if f else [] for f in fresh]
            for i in range(N_AGENTS):
                if fresh[i]:
                    ex_cpu.set_plan(i, plans[i], state)
            rows, length = jx.compile_plans(plans, max_len=L)
            ex_jax = jitted["set"](ex_jax, jnp.asarray(fresh), rows, length)

            actions_cpu = ex_cpu.act(state)
            ex_jax, actions_jax = jitted["step"](ex_jax, state)
            where = f"seed {seed} episode {episode} t {t}\n{env.render(state)}\nplans {[str(p) for p in ex_cpu.agents]}"
            assert actions_cpu.tolist() == np.asarray(actions_jax).tolist(), where
            assert ex_cpu.snapshot() == snapshot(ex_jax, N_AGENTS), where
            state, _ = env.step(state, jnp.asarray(actions_cpu))
        exercised |= {r.action.name for r in ex_cpu.history if r.action is not None}
    # every action ran (started, emitted or ended) on both executors in this comparison
    assert exercised == set(ACTION_SPECS)


def test_compile_plans_encodes_codes_faces_and_directions():
    from cube_jax.symbolic import parse_plan
    from cube_jax.symbolic.jax_executor import compile_plans

    rows, length = compile_plans([parse_plan("rendezvous(2, right, 2, 7); move(down, 3)"), parse_plan("wait_agents(2, 5)")])
    assert length.tolist() == [2, 1]
    assert rows.shape == (2, 2, 5)
    assert rows[0].tolist() == [[3, 2, 3, 2, 7], [1, 2, 3, 0, 0]]  # right face = 3, DOWN = 2
    assert rows[1].tolist() == [[6, 2, 5, 0, 0], [0, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match="max_len"):
        compile_plans([parse_plan("idle(1); idle(2)")], max_len=1)
