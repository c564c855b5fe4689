"""The code paths for large teams against the reference.

Each phase of the step picks its kernel by its own axis: push phases fold while there are
at most 64 blocks (over any number of agents; block sets of one uint32 word up to 32
blocks, two above), the movement phase while there are at most 32 agents; beyond, the large
kernel's phase runs (pointer jumping for agent chains and blocked movers, composites of
more than 64 blocks composed by folds). The random-world test in test_dynamics_property.py
only reaches the folded kernel with at most 10 agents and 8 blocks, so crowded worlds check
every combination: 40 agents and 70 blocks (both large phases), 40 agents and 40 blocks
(the folded push phase with two-word block sets, the large movement phase), 40 agents and
12 blocks (folded push phase over more than 32 agents, large movement phase), 20 agents and
70 blocks (the other way round), 24 agents and 20 blocks (the folded kernel near its
limits), and worlds with a lone agent or a lone block (whose fixed points the folded kernel
skips). Rotations of agents (rings of 4, 6 and 10 cells) move under both movement kernels.
"""
import random

import numpy as np
import pytest

from cube_jax.core import batching, dynamics, movement
from cube_jax.testing import reference as ref
from tests.core.test_dynamics_property import DIRECTIONS, choose_actions, compare_episode, place_agents, place_blocks

K, N_AGENTS, N_BLOCKS = 22, 40, 70
assert N_AGENTS > dynamics.FOLD_MAX_AGENTS and N_AGENTS > movement.FIXPOINT_MAX_AGENTS
assert N_BLOCKS > dynamics.FOLD_MAX_BLOCKS
TWO_WORDS = (16, 40, 40)  # K, agents, blocks: block sets of two words in the folded push phase
assert 32 < TWO_WORDS[2] <= dynamics.FOLD_MAX_BLOCKS
MEDIUM = (14, 24, 20)  # K, agents, blocks: the folded kernel with more than 8 blocks
assert MEDIUM[1] <= dynamics.FOLD_MAX_AGENTS and MEDIUM[2] <= dynamics.FOLD_MAX_BLOCKS
MANY_AGENTS_FEW_BLOCKS = (16, 40, 12)  # the folded push phase over 40 agents, the large movement phase
assert MANY_AGENTS_FEW_BLOCKS[1] > dynamics.FOLD_MAX_AGENTS and MANY_AGENTS_FEW_BLOCKS[2] <= dynamics.FOLD_MAX_BLOCKS
FEW_AGENTS_MANY_BLOCKS = (22, 20, 70)  # the large push phase, the folded movement phase
assert FEW_AGENTS_MANY_BLOCKS[1] <= dynamics.FOLD_MAX_AGENTS and FEW_AGENTS_MANY_BLOCKS[2] > dynamics.FOLD_MAX_BLOCKS
LONE = ((5, 1, 1), (5, 4, 1), (5, 1, 3))  # K, agents, blocks: a lone agent, a lone block, both


def crowded_world(seed: int, k: int = K, n_agents: int = N_AGENTS, n_blocks: int = N_BLOCKS):
    rnd = random.Random(seed)
    main = rnd.choice(DIRECTIONS)
    for _ in range(50):
        blocks = place_blocks(rnd, k, n_blocks, main, 2)
        if blocks is None:
            continue
        agents = place_agents(rnd, k, blocks, n_agents, main)
        if agents is not None:
            world = ref.World(K=k, agents=agents, blocks=[[r, c, w, True] for r, c, w in blocks], max_steps=60)
            return world, main, rnd
    raise AssertionError(f"seed {seed}: could not place {n_blocks} blocks and {n_agents} agents on {k}x{k}")


@pytest.mark.parametrize("seed", range(6))
def test_large_team_paths_match_reference(seed):
    world, main, rnd = crowded_world(seed)
    compare_episode(world, [lambda w: choose_actions(rnd, w, main)] * 12)


@pytest.mark.parametrize("seed", range(4))
def test_two_word_block_sets_match_reference(seed):
    world, main, rnd = crowded_world(seed, *TWO_WORDS)
    compare_episode(world, [lambda w: choose_actions(rnd, w, main)] * 12)


@pytest.mark.parametrize("seed", range(4))
def test_crowded_folded_kernel_matches_reference(seed):
    world, main, rnd = crowded_world(seed, *MEDIUM)
    compare_episode(world, [lambda w: choose_actions(rnd, w, main)] * 12)


@pytest.mark.parametrize("seed", range(3))
def test_large_team_with_few_blocks_matches_reference(seed):
    world, main, rnd = crowded_world(seed, *MANY_AGENTS_FEW_BLOCKS)
    compare_episode(world, [lambda w: choose_actions(rnd, w, main)] * 12)


@pytest.mark.parametrize("seed", range(3))
def test_small_team_with_many_blocks_matches_reference(seed):
    world, main, rnd = crowded_world(seed, *FEW_AGENTS_MANY_BLOCKS)
    compare_episode(world, [lambda w: choose_actions(rnd, w, main)] * 12)


@pytest.mark.parametrize("shape", LONE, ids=lambda s: f"k{s[0]}-n{s[1]}-b{s[2]}")
@pytest.mark.parametrize("seed", range(3))
def test_lone_agent_or_block_matches_reference(shape, seed):
    world, main, rnd = crowded_world(seed, *shape)
    compare_episode(world, [lambda w: choose_actions(rnd, w, main)] * 16)


def test_lines_of_movers_follow_their_leaders():
    # rows 0 and 1 full of agents moving RIGHT: each line follows its leader (row 0 has a
    # free cell at its end, row 1 does not and stays put); a column of pushers below
    agents = [(0, c) for c in range(15)] + [(1, c) for c in range(16)] + [(r, 0) for r in range(2, 11)]
    cells = [(r, c) for c in (3, 5, 7, 9, 11, 13) for r in range(3, 9)]
    world = ref.World(K=16, agents=agents, blocks=[[r, c, 1, True] for r, c in cells], max_steps=60)
    assert len(world.agents) == N_AGENTS
    compare_episode(world, [[ref.RIGHT] * N_AGENTS] * 3)


def ring(top: int, left: int, length: int):
    """The cells of a 2 x length ring from (top, left), clockwise, and each one's move along it."""
    cells = [(top, left + c) for c in range(length)] + [(top + 1, left + c) for c in reversed(range(length))]
    moves = [ref.RIGHT] * (length - 1) + [ref.DOWN] + [ref.LEFT] * (length - 1) + [ref.UP]
    return cells, moves


@pytest.mark.parametrize("length", [2, 3, 5], ids=lambda n: f"ring-of-{2 * n}")
@pytest.mark.parametrize("bystanders", [0, 30], ids=["folded", "large"])
def test_rotations_move(length, bystanders):
    # A rotation moves (rule 5). Pointer jumping round a ring of 6 or 10 never settles: its
    # pointers keep moving 2 and 4 places on; the step must still end, and move the ring.
    cells, moves = ring(1, 1, length)
    others = [(5 + i // 10, i % 10) for i in range(bystanders)]
    world = ref.World(K=12, agents=cells + others, blocks=[[10, 10, 1, True]], max_steps=60)
    actions = moves + [ref.STAY] * bystanders
    assert (len(world.agents) > dynamics.FOLD_MAX_AGENTS) == (bystanders > 0)
    compare_episode(world, [actions] * 3)
    after, *_ = ref.step(world, actions)
    assert after.agents[: len(cells)] == cells[1:] + cells[:1]


@pytest.mark.parametrize("shape", [MANY_AGENTS_FEW_BLOCKS, MEDIUM], ids=["large-movement", "folded"])
def test_large_batches_step_in_tiles_with_the_same_results(monkeypatch, shape):
    # From batching.TILE_MIN_AGENTS agents on, a large batch steps in tiles of environments
    # (batching.TILE_ELEMENTS agent slots each), under the large movement kernel (40 agents)
    # and the folded one (24) alike; with tiles of 8 envs, a batch of 24 different worlds must
    # come out as it does in one piece.
    import jax
    import jax.numpy as jnp

    import cube_jax

    world, main, rnd = crowded_world(0, *shape)
    env = cube_jax.make(scenario=cube_jax.Scenario(
        grid_size=world.K, agents=world.agents, blocks=[(r, c, w) for r, c, w, _ in world.blocks], max_steps=60))
    start, _ = env.reset(jax.random.PRNGKey(0))
    n = len(world.agents)
    assert n >= batching.TILE_MIN_AGENTS
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (24,) + x.shape), start)
    actions = jax.random.randint(jax.random.PRNGKey(1), (6, 24, n), 0, 5)

    step = dynamics.batched_step(env.cfg)

    def rollout(states):
        def one(states, a):
            states, delivered, events = jax.vmap(step)(states, a)
            return states, (states.agent_pos, states.block_pos, delivered, events.push_force)
        return jax.lax.scan(one, states, actions)[1]

    def traced():  # one trace per tile size, read for its loops and then compiled
        program = jax.jit(rollout).trace(states)
        return str(program.jaxpr), program.lower().compile()(states)

    assert batching.env_tile(n, 24) == 24
    untiled, whole = traced()
    monkeypatch.setattr(batching, "TILE_ELEMENTS", 8 * n)
    jax.clear_caches()  # traces are cached; the tile size is read when the step is traced
    assert batching.env_tile(n, 24) == 8 and batching.env_tile(batching.TILE_MIN_AGENTS - 1, 24) == 24
    tiled_jaxpr, tiled = traced()
    assert "length=3" in tiled_jaxpr and "length=3" not in untiled  # three tiles
    for a, b in zip(whole, tiled):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(whole[0][-1]).std(axis=0).sum() > 0  # the worlds differ
