"""The code paths for large teams against the reference.

Each phase of the step picks its kernel by its own axis: push phases fold while there are
at most 32 blocks (over any number of agents), the movement phase while there are at most
32 agents; beyond, the large kernel's phase runs (pointer jumping for agent chains and
blocked movers, composites of more than 32 blocks composed by folds). The random-world
test in test_dynamics_property.py only reaches the folded kernel with at most 10 agents and
8 blocks, so crowded worlds check every combination: 40 agents and 34 blocks (both large
phases), 40 agents and 12 blocks (folded push phase over more than 32 agents, large
movement phase), 20 agents and 34 blocks (the other way round), 24 agents and 20 blocks (the folded kernel near its limits), and worlds
with a lone agent or a lone block (whose fixed points the folded kernel skips).
"""
import random

import pytest

from cube_jax.core import dynamics
from tests import reference as ref
from tests.test_dynamics_property import DIRECTIONS, choose_actions, compare_episode, place_agents, place_blocks

K, N_AGENTS, N_BLOCKS = 16, 40, 34
assert N_AGENTS > dynamics.FOLD_MAX_AGENTS and N_AGENTS > dynamics.FIXPOINT_MAX_AGENTS
assert N_BLOCKS > dynamics.FOLD_MAX_BLOCKS
MEDIUM = (14, 24, 20)  # K, agents, blocks: the folded kernel with more than 8 blocks
assert MEDIUM[1] <= dynamics.FOLD_MAX_AGENTS and MEDIUM[2] <= dynamics.FOLD_MAX_BLOCKS
MANY_AGENTS_FEW_BLOCKS = (16, 40, 12)  # the folded push phase over 40 agents, the large movement phase
assert MANY_AGENTS_FEW_BLOCKS[1] > dynamics.FOLD_MAX_AGENTS and MANY_AGENTS_FEW_BLOCKS[2] <= dynamics.FOLD_MAX_BLOCKS
FEW_AGENTS_MANY_BLOCKS = (16, 20, 34)  # the large push phase, the folded movement phase
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
    cells = [(r, c) for c in (3, 5, 7, 9, 11, 13) for r in range(3, 9)][:N_BLOCKS]
    world = ref.World(K=K, agents=agents, blocks=[[r, c, 1, True] for r, c in cells], max_steps=60)
    assert len(world.agents) == N_AGENTS and len(world.blocks) == N_BLOCKS
    compare_episode(world, [[ref.RIGHT] * N_AGENTS] * 3)
