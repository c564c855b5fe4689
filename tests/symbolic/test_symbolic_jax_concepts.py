"""The JAX symbolic concepts and distance fields.

Two kinds of checks: hand-drawn ASCII scenarios with the expected values written out,
and a plain-Python recomputation of every concept on random valid states. All concepts
of one state are evaluated by one jitted function (``concept_table``), compiled once per
shape; the random states all share one shape.
"""
from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cube_jax import Scenario, State
from cube_jax.symbolic import concepts as C
from cube_jax.symbolic.distance import distance_field, next_action, unreachable

U, D, L, R = C.UP_FACE, C.DOWN_FACE, C.LEFT_FACE, C.RIGHT_FACE
assert C.FACE_NAMES == ("up", "down", "left", "right")  # the codes of docs/symbolic.md


def state_from_ascii(text: str, alive=None) -> State:
    sc = Scenario.from_ascii(text)
    b = len(sc.blocks)
    return State(
        agent_pos=jnp.asarray(sc.agents, jnp.int32).reshape(-1, 2),
        block_pos=jnp.asarray([(r, c) for r, c, _ in sc.blocks], jnp.int32),
        block_weight=jnp.asarray([w for _, _, w in sc.blocks], jnp.int32),
        block_alive=jnp.asarray([True] * b if alive is None else alive, bool),
        t=jnp.int32(0),
        key=jax.random.PRNGKey(0),
        grid_size=sc.grid_size,
    )


def _per_block_face(state: State, block, face) -> dict:
    return {
        "aligned": C.aligned_agents(state, block, face),
        "count": C.count_aligned_agents(state, block, face),
        "face_count": C.face_aligned_counts(state, face)[block],
        "dist_to_face": jax.vmap(lambda pos: C.distance_to_face(state, pos, block, face))(state.agent_pos),
        "positions": C.all_aligned_positions(state, block, face),
        "face_cells": C.face_standing_cells(state, block, face),
        "required": C.required_force(state, block, face),
        "quorum": C.quorum_status(state, block, face),
        "deficit": C.quorum_deficit(state, block, face),
        "blocked": C.blocked(state, block, face),
    }


@jax.jit
def concept_table(state: State) -> dict:
    """Every concept for every (face, block) pair, plus the per-block ones: arrays [4, B, ...]."""
    b = state.block_pos.shape[0]
    blocks = jnp.arange(b)
    per_face = jax.vmap(lambda f: jax.vmap(lambda j: _per_block_face(state, j, f))(blocks))(jnp.arange(4))
    per_face["progress"] = jax.vmap(lambda j: C.block_progress(state, j))(blocks)
    per_face["delivered"] = jax.vmap(lambda j: C.delivered(state, j))(blocks)
    n = state.agent_pos.shape[0]
    per_face["dist_to_block"] = jax.vmap(
        lambda i: jax.vmap(lambda j: C.distance_to_block(state, state.agent_pos[i], j))(blocks)
    )(jnp.arange(n))
    return per_face


def table_of(text: str, alive=None) -> dict:
    return jax.tree.map(np.asarray, concept_table(state_from_ascii(text, alive)))


def cells(mask) -> set:
    return {(int(r), int(c)) for r, c in zip(*np.nonzero(np.asarray(mask)))}


# --------------------------------------------------------------------------- hand-drawn


# A weight-2 block with a chain of two agents behind its left face, a third agent on the
# left face's other row, one agent above it, and a weight-1 block in front of it (right).
CHAIN_MAP = """
........
........
...4....
.10aab..
..2aa...
........
3....c..
........
"""


def test_alignment_counts_chains_and_face_cells():
    t = table_of(CHAIN_MAP)
    # left face of a: 0 and 2 on face cells, 1 behind 0 in an unbroken line
    assert t["aligned"][L, 0].tolist() == [True, True, True, False, False]
    assert t["count"][L, 0] == 3
    assert t["count"][U, 0] == 1 and t["aligned"][U, 0].tolist() == [False, False, False, False, True]
    assert t["count"][R, 0] == 0 and t["count"][D, 0] == 0
    # nobody touches block b (its left face is block a)
    assert t["count"][:, 1].tolist() == [0, 0, 0, 0]
    assert t["count"][:, 2].tolist() == [0, 0, 0, 0]
    assert cells(t["face_cells"][L, 0]) == {(3, 2), (4, 2)}
    assert cells(t["face_cells"][R, 0]) == {(4, 5)}  # (3, 5) is block b
    assert cells(t["face_cells"][L, 1]) == set()


def test_quorum_uses_the_block_chain_weight():
    t = table_of(CHAIN_MAP)
    # pushing a to the right also pushes b: 2 + 1 = 3 needed, 3 aligned
    assert t["required"][L, 0] == 3 and t["quorum"][L, 0] and t["deficit"][L, 0] == 0
    # from above a alone moves: 2 needed, 1 aligned
    assert t["required"][U, 0] == 2 and not t["quorum"][U, 0] and t["deficit"][U, 0] == 1
    # pushing b left from its right face pushes a too
    assert t["required"][R, 1] == 3 and t["deficit"][R, 1] == 3
    assert t["required"][U, 1] == 1 and t["deficit"][U, 1] == 1


def test_blocked_faces():
    t = table_of(CHAIN_MAP)
    # a pushed right would enter (3,5) = block b; pushed left it would enter agents 0 and 2;
    # pushed up it would enter agent 4's cell; pushed down its way is free.
    assert t["blocked"][:, 0].tolist() == [False, True, True, True]  # faces up, down, left, right
    # b: its left face is all block a (nowhere to stand); pushed left it would enter a.
    assert t["blocked"][:, 1].tolist() == [False, False, True, True]


def test_faces_against_walls_are_blocked():
    t = table_of(
        """
        a.b.....
        ........
        ...0....
        ........
        .1..2...
        ......c.
        .3......
        .....4..
        """
    )
    # a sits in the corner: no room left of or above it, and pushing it left or up hits a wall
    assert t["blocked"][:, 0].tolist() == [True, True, True, True]
    assert cells(t["face_cells"][L, 0]) == set() and cells(t["face_cells"][U, 0]) == set()
    # b on the top wall: nothing above it, and it cannot be pushed up
    assert t["blocked"][:, 1].tolist() == [True, True, False, False]


def test_progress_delivered_and_distances():
    t = table_of(CHAIN_MAP)
    assert t["progress"].tolist() == [3, 2, 2]
    assert t["delivered"].tolist() == [False, False, False]
    assert t["dist_to_block"][1].tolist() == [2, 4, 7]  # agent 1 at (3,1)
    assert t["dist_to_block"][3].tolist() == [5, 8, 5]  # agent 3 at (6,0)
    assert int(C.get_distance(jnp.array([6, 0]), jnp.array([3, 1]))) == 4
    assert t["dist_to_face"][L, :, 1].tolist() == [1, 3, 6]  # agent 1 at (3,1) to each left face line
    assert t["dist_to_face"][R, :, 1].tolist() == [4, 5, 8]


def test_delivered_block_has_no_alignment_or_needs():
    t = table_of(CHAIN_MAP, alive=[False, True, True])
    assert t["delivered"].tolist() == [True, False, False]
    assert t["progress"].tolist() == [0, 2, 2]
    assert t["count"][:, 0].tolist() == [0, 0, 0, 0]
    assert t["required"][:, 0].tolist() == [0, 0, 0, 0]
    assert not t["quorum"][:, 0].any() and t["deficit"][:, 0].tolist() == [0, 0, 0, 0]
    assert t["blocked"][:, 0].all()
    # with a gone, b's left face is free: (3,4) and the cells of a's old square behind it
    assert cells(t["face_cells"][L, 1]) == {(3, 4)}
    assert t["required"][L, 0] == 0 and t["required"][L, 1] == 1


def test_all_aligned_positions_stop_at_walls_and_blocks():
    t = table_of(CHAIN_MAP)
    assert cells(t["positions"][L, 0]) == {(3, 0), (3, 1), (3, 2), (4, 0), (4, 1), (4, 2)}
    assert cells(t["positions"][U, 0]) == {(0, 3), (1, 3), (2, 3), (0, 4), (1, 4), (2, 4)}
    assert cells(t["positions"][R, 0]) == {(4, 5), (4, 6), (4, 7)}


# --------------------------------------------------------------------------- plain-Python recomputation

K, N, B = 8, 5, 3  # the shape of every state in this file (one compile of concept_table)
PUSH = {U: (1, 0), D: (-1, 0), L: (0, 1), R: (0, -1)}  # push step of each face


def random_layout(seed: int):
    """A valid random (agents, blocks [(r, c, w)], alive) with N agents and B blocks on K x K."""
    rng = np.random.default_rng(seed)
    while True:
        taken, blocks = set(), []
        for _ in range(B):
            w = int(rng.integers(1, 4))
            r, c = int(rng.integers(0, K - w + 1)), int(rng.integers(0, K - w))  # c + w - 1 <= K - 2
            square = {(r + i, c + j) for i in range(w) for j in range(w)}
            if square & taken:
                break
            taken |= square
            blocks.append((r, c, w))
        if len(blocks) == B:
            break
    free = [(r, c) for r in range(K) for c in range(K) if (r, c) not in taken]
    # bias agents toward block neighbourhoods so chains and alignments actually occur
    order = sorted(free, key=lambda cell: (min(abs(cell[0] - r) + abs(cell[1] - c) for r, c, _ in blocks), rng.random()))
    pool = order[: 3 * N]
    agents = [pool[i] for i in rng.choice(len(pool), N, replace=False)]
    alive = [bool(x) for x in rng.random(B) < 0.85]
    return agents, blocks, alive


def state_from_layout(agents, blocks, alive, grid_size: int = K) -> State:
    return State(
        agent_pos=jnp.asarray(agents, jnp.int32),
        block_pos=jnp.asarray([(r, c) for r, c, _ in blocks], jnp.int32),
        block_weight=jnp.asarray([w for _, _, w in blocks], jnp.int32),
        block_alive=jnp.asarray(alive, bool),
        t=jnp.int32(0),
        key=jax.random.PRNGKey(0),
        grid_size=grid_size,
    )


def plain_square(blocks, j: int) -> set:
    """The cells of block j."""
    r, c, w = blocks[j]
    return {(r + i, c + k) for i in range(w) for k in range(w)}


def plain_chain(blocks, alive, j: int, face) -> set:
    """Block j and every alive block reachable from it through "in front of" when pushed into ``face``."""
    dr, dc = PUSH[face]
    square = lambda y: plain_square(blocks, y)  # noqa: E731
    chain, todo = {j}, [j]
    while todo:
        ahead = {(cr + dr, cc + dc) for cr, cc in square(todo.pop())}
        for y in range(len(blocks)):
            if alive[y] and y not in chain and ahead & square(y):
                chain.add(y)
                todo.append(y)
    return chain


def plain_concepts(agents, blocks, alive) -> dict:
    """Every concept recomputed with loops over cells, straight from the definitions."""
    inside = lambda cell: 0 <= cell[0] < K and 0 <= cell[1] < K  # noqa: E731
    square = lambda j: plain_square(blocks, j)  # noqa: E731
    block_at = {cell: j for j in range(B) if alive[j] for cell in square(j)}
    agent_at = {cell: i for i, cell in enumerate(agents)}
    out = collections.defaultdict(lambda: np.zeros((4, B), np.int64))
    out["aligned"] = np.zeros((4, B, N), bool)
    out["positions"] = np.zeros((4, B, K, K), bool)
    out["dist_to_face"] = np.zeros((4, B, N), np.int64)
    out["face_cells"] = np.zeros((4, B, K, K), bool)
    for f, (dr, dc) in PUSH.items():
        for j, (r, c, w) in enumerate(blocks):
            line = {U: [(r - 1, c + x) for x in range(w)], D: [(r + w, c + x) for x in range(w)],
                    L: [(r + x, c - 1) for x in range(w)], R: [(r + x, c + w) for x in range(w)]}[f]
            # distance to the face line, cells outside the grid included (walls and liveness not looked at)
            out["dist_to_face"][f, j] = [min(abs(ar - x) + abs(ac - y) for x, y in line) for ar, ac in agents]
            if not alive[j]:
                out["blocked"][f, j] = True
                continue
            for i, (ar, ac) in enumerate(agents):
                cell = (ar + dr, ac + dc)
                while cell in agent_at:
                    cell = (cell[0] + dr, cell[1] + dc)
                out["aligned"][f, j, i] = block_at.get(cell) == j
            faces = [cell for cell in line if inside(cell) and cell not in block_at]
            for cell in faces:
                out["face_cells"][f, j][cell] = True
                while inside(cell) and cell not in block_at:
                    out["positions"][f, j][cell] = True
                    cell = (cell[0] - dr, cell[1] - dc)
            out["required"][f, j] = sum(blocks[y][2] for y in plain_chain(blocks, alive, j, f))
            count = int(out["aligned"][f, j].sum())
            out["count"][f, j] = count
            out["face_count"][f, j] = count
            out["deficit"][f, j] = max(out["required"][f, j] - count, 0)
            out["quorum"][f, j] = out["deficit"][f, j] == 0
            entering = {(cr + dr, cc + dc) for cr, cc in square(j)} - square(j)
            obstructed = any(not inside(cell) or cell in block_at or cell in agent_at for cell in entering)
            out["blocked"][f, j] = obstructed or not faces
    out["progress"] = np.array([K - c - w if alive[j] else 0 for j, (r, c, w) in enumerate(blocks)])
    out["delivered"] = np.array([not a for a in alive])
    out["dist_to_block"] = np.array(
        [[min(abs(ar - x) + abs(ac - y) for x, y in square(j)) for j in range(B)] for ar, ac in agents]
    )
    return dict(out)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_concepts_match_a_plain_recomputation(seed):
    agents, blocks, alive = random_layout(seed)
    got = jax.tree.map(np.asarray, concept_table(state_from_layout(agents, blocks, alive)))
    want = plain_concepts(agents, blocks, alive)
    for name, expected in want.items():
        np.testing.assert_array_equal(got[name], expected, err_msg=f"{name} for {agents} {blocks} {alive}")


# --------------------------------------------------------------------------- distance fields


def plain_bfs(passable: np.ndarray, goals: np.ndarray) -> np.ndarray:
    k = passable.shape[0]
    far = unreachable(k)
    dist = np.full((k, k), far, np.int64)
    queue = collections.deque()
    for cell in zip(*np.nonzero(goals & passable)):
        dist[cell] = 0
        queue.append(cell)
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < k and 0 <= nc < k and passable[nr, nc] and dist[nr, nc] == far:
                dist[nr, nc] = dist[r, c] + 1
                queue.append((nr, nc))
    return dist


@jax.jit
def field_and_steps(passable, goals):
    field = distance_field(passable, goals)
    k = passable.shape[0]
    cells = jnp.stack(jnp.meshgrid(jnp.arange(k), jnp.arange(k), indexing="ij"), -1).reshape(-1, 2)
    return field, jax.vmap(lambda p: next_action(field, p))(cells).reshape(k, k)


def test_distance_field_on_a_drawn_maze():
    maze = [
        "G.#.....",
        ".##.###.",
        "....#...",
        "###.#...",
        "....#...",
        ".####.##",
        "......#.",
        "#####.#.",
    ]
    passable = np.array([[ch != "#" for ch in row] for row in maze])
    goals = np.array([[ch == "G" for ch in row] for row in maze])
    field, steps = map(np.asarray, field_and_steps(passable, goals))
    assert field[0, 0] == 0 and field[2, 0] == 2 and field[2, 3] == 5
    assert field[0, 3] == 7  # up the corridor at column 3 from (2,3)
    assert field[7, 7] == 64 and field[6, 7] == 64  # sealed off by walls: unreachable
    assert field[0, 2] == 64  # a wall cell
    assert steps[2, 3] == 3 and steps[0, 0] == 0  # LEFT toward the goal; STAY on it


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_distance_field_matches_bfs_and_steps_descend(seed):
    rng = np.random.default_rng(seed)
    passable = rng.random((K, K)) < 0.75
    goals = rng.random((K, K)) < 0.05
    field, steps = map(np.asarray, field_and_steps(passable, goals))
    want = plain_bfs(passable, goals)
    np.testing.assert_array_equal(field, want)
    far = unreachable(K)
    moves = ((1, (-1, 0)), (2, (1, 0)), (3, (0, -1)), (4, (0, 1)))  # UP, DOWN, LEFT, RIGHT
    for r in range(K):
        for c in range(K):
            around = [(a, want[r + dr, c + dc]) for a, (dr, dc) in moves if 0 <= r + dr < K and 0 <= c + dc < K]
            if not passable[r, c]:
                # an impassable start (e.g. an agent's own cell when agents are obstacles)
                # steps to its nearest finite neighbour, first in action order
                finite = [(d, a) for a, d in around if d < far]
                assert steps[r, c] == (min(finite)[1] if finite else 0), (r, c)
                continue
            d = want[r, c]
            if d == 0 or d == far:
                assert steps[r, c] == 0, (r, c)
                continue
            # the first of UP, DOWN, LEFT, RIGHT whose neighbour is one step closer
            assert steps[r, c] == next(a for a, nd in around if nd == d - 1), (r, c)


@pytest.mark.parametrize("groups", [2, 3])  # 24 blocks (one-word bit sets) and 36 (bool relation)
def test_chain_weights_of_long_chains(groups):
    # Rows of touching blocks with a heavy block leaning on two of them, and delivered
    # blocks: chains of up to nine blocks in every direction.
    blocks, k = [], 24
    for i in range(groups):
        r = 1 + 4 * i
        blocks += [(r, 2 + c, 1) for c in range(7)] + [(r + 1, 5 + c, 1) for c in range(4)] + [(r, 9, 2)]
    alive = [j % 13 != 12 for j in range(len(blocks))]
    state = state_from_layout([(0, 0)], blocks, alive, grid_size=k)
    chains = jax.jit(jax.vmap(lambda f: C.chain_weights(state, f)))(jnp.arange(4))
    live = np.asarray(alive)  # (a delivered block's own row is not part of the rules)
    for f in (U, D, L, R):
        want = [sum(blocks[y][2] for y in plain_chain(blocks, alive, j, f)) for j in range(len(blocks))]
        np.testing.assert_array_equal(np.asarray(chains[f])[live], np.asarray(want)[live], err_msg=C.FACE_NAMES[f])
    assert np.asarray(chains[L]).max() >= 8  # the chains are long (the heavy block leans on two rows)
