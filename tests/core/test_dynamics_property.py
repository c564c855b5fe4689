"""The JAX environment against ``cube_jax/testing/reference.py``, state by state.

Random worlds are drawn so that the interesting rules fire often: blocks touching
each other (block chains, composites), agents lined up behind block faces and behind
each other (agent chains), actions that mostly push into whatever is next to an agent.
Both sides step the same actions and must agree after every step on agent cells,
blocks, rewards, flags, ``t`` and the five-channel grid.

The environment compiles once per static configuration (grid size, agent count, block
count, max_steps, step_cost, deliver_reward, and the heaviest block weight), so worlds
are drawn from a short fixed list of ``SHAPES`` and never change any of these: a
placement that does not fit is rejected, not shrunk, and the last block of every world
has the shape's heaviest weight.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from cube_jax.testing import reference as ref

S, U, D, L, R = ref.STAY, ref.UP, ref.DOWN, ref.LEFT, ref.RIGHT
DIRECTIONS = (U, D, L, R)
OUT_OF_RANGE = (-100, -1, 5, 6, 99)


@dataclass(frozen=True)
class Shape:
    K: int
    n_agents: int
    n_blocks: int
    max_steps: int
    step_cost: float
    deliver_reward: float
    max_weight: int


# Small grids crowd the walls; max_steps of 8 and 12 let truncation happen within a run.
SHAPES = (
    Shape(K=6, n_agents=3, n_blocks=3, max_steps=12, step_cost=0.01, deliver_reward=1.0,
          max_weight=2),
    Shape(K=7, n_agents=2, n_blocks=2, max_steps=8, step_cost=0.05, deliver_reward=2.0,
          max_weight=3),
    Shape(K=8, n_agents=5, n_blocks=4, max_steps=100, step_cost=0.01, deliver_reward=1.0,
          max_weight=2),
    Shape(K=10, n_agents=10, n_blocks=6, max_steps=15, step_cost=0.02, deliver_reward=0.5,
          max_weight=3),
    Shape(K=12, n_agents=8, n_blocks=8, max_steps=200, step_cost=0.1, deliver_reward=1.5,
          max_weight=3),
)


# --------------------------------------------------------------------------- the JAX side


class JaxRun:
    """One episode of ``cube_jax`` driven through the public API."""

    def __init__(self, K, agents, blocks, max_steps, step_cost, deliver_reward):
        import jax

        import cube_jax

        self._cube_jax = cube_jax
        scenario = cube_jax.Scenario(
            grid_size=K,
            agents=list(agents),
            blocks=list(blocks),
            max_steps=max_steps,
            step_cost=step_cost,
            deliver_reward=deliver_reward,
        )
        self.env = cube_jax.make(scenario=scenario)
        self.state, _ = self.env.reset(jax.random.PRNGKey(0))

    def step(self, actions):
        import jax.numpy as jnp

        self.state, ts = self.env.step(self.state, jnp.asarray(actions, dtype=jnp.int32))
        return (
            [float(x) for x in np.asarray(ts.reward)],
            bool(ts.terminated),
            bool(ts.truncated),
        )

    def layout(self):
        lay = self._cube_jax.layout(self.state)
        return {
            "t": int(lay["t"]),
            "agents": [(int(r), int(c)) for r, c in lay["agents"]],
            "blocks": [(int(r), int(c), int(w), bool(a)) for r, c, w, a in lay["blocks"]],
        }

    def grid(self):
        return np.asarray(jitted_grid_observation()(self.state))


def jitted_grid_observation():
    """``cube_jax.grid_observation`` under ``jax.jit``: one compile per shape instead of
    an op-by-op dispatch (about 10 ms) at every compared step."""
    global _GRID_OBSERVATION
    if _GRID_OBSERVATION is None:
        import jax

        import cube_jax

        _GRID_OBSERVATION = jax.jit(cube_jax.grid_observation)
    return _GRID_OBSERVATION


_GRID_OBSERVATION = None


def describe(world: ref.World, history) -> str:
    """A repro: the starting scenario and the actions stepped so far."""
    blocks = [(r, c, w) for r, c, w, _ in world.blocks]
    return (
        f"Scenario(grid_size={world.K}, agents={world.agents}, blocks={blocks}, "
        f"max_steps={world.max_steps}, step_cost={world.step_cost}, "
        f"deliver_reward={world.deliver_reward})\nactions per step: {history}"
    )


def assert_same_state(jax_run: JaxRun, world: ref.World, repro: str) -> None:
    lay = jax_run.layout()
    where = f"\n{repro}"
    assert lay["t"] == world.t, f"t: jax {lay['t']} reference {world.t}{where}"
    assert lay["agents"] == list(world.agents), (
        f"agents: jax {lay['agents']} reference {world.agents}{where}"
    )
    assert len(lay["blocks"]) == len(world.blocks)
    for j, (got, want) in enumerate(zip(lay["blocks"], world.blocks)):
        # A delivered block covers no cell: its position is not part of the contract.
        same = got[2:] == (want[2], want[3]) and (not want[3] or got[:2] == (want[0], want[1]))
        assert same, f"block {j}: jax {got} reference {tuple(want)}{where}"
    want_grid = np.array(ref.grid(world), dtype=np.float32)
    got_grid = jax_run.grid()
    assert got_grid.shape == want_grid.shape and got_grid.dtype == np.float32
    if not np.array_equal(got_grid, want_grid):
        diff = sorted({(int(r), int(c)) for r, c, _ in np.argwhere(got_grid != want_grid)})
        raise AssertionError(f"grid differs at cells {diff}{where}")


def compare_episode(world: ref.World, action_seq) -> None:
    """Step both sides through ``action_seq`` (stopping at the episode's end) and compare."""
    start = world
    ref.check_invariants(world)
    jax_run = JaxRun(
        world.K,
        world.agents,
        [(r, c, w) for r, c, w, _ in world.blocks],
        world.max_steps,
        world.step_cost,
        world.deliver_reward,
    )
    assert_same_state(jax_run, world, describe(start, []))
    history = []
    for actions in action_seq:
        if callable(actions):
            actions = actions(world)
        history.append(list(actions))
        repro = describe(start, history)
        world, want_rewards, want_term, want_trunc, _ = ref.step(world, actions)
        ref.check_invariants(world)
        got_rewards, got_term, got_trunc = jax_run.step(actions)
        assert_same_state(jax_run, world, repro)
        np.testing.assert_allclose(got_rewards, want_rewards, rtol=0, atol=1e-6, err_msg=repro)
        assert (got_term, got_trunc) == (want_term, want_trunc), (
            f"(terminated, truncated): jax {(got_term, got_trunc)} "
            f"reference {(want_term, want_trunc)}\n{repro}"
        )
        if want_term or want_trunc:
            break


# --------------------------------------------------------------------------- random worlds


def fits_block(K, occupied, r, c, w) -> bool:
    """Inside the grid, clear of column K-1, on no occupied cell."""
    if r < 0 or c < 0 or r + w > K or c + w > K - 1:
        return False
    return all((r + i, c + k) not in occupied for i in range(w) for k in range(w))


def touching_block(rnd: random.Random, block, w: int, d: int):
    """Top-left of a w x w block touching ``block`` on its side facing direction d."""
    br, bc, bw = block
    off = rnd.randint(-(w - 1), bw - 1)
    return {
        U: (br - w, bc + off),
        D: (br + bw, bc + off),
        L: (br + off, bc - w),
        R: (br + off, bc + bw),
    }[d]


def face_cells(block, d: int) -> list:
    """The cells from which an agent pushing in direction d pushes ``block``."""
    br, bc, bw = block
    return {
        U: [(br + bw, bc + k) for k in range(bw)],
        D: [(br - 1, bc + k) for k in range(bw)],
        L: [(br + k, bc + bw) for k in range(bw)],
        R: [(br + k, bc - 1) for k in range(bw)],
    }[d]


def some_direction(rnd: random.Random, main: int) -> int:
    return main if rnd.random() < 0.6 else rnd.choice(DIRECTIONS)


def place_blocks(rnd: random.Random, K: int, n_blocks: int, main: int, max_weight: int):
    """Blocks that often touch each other, mostly one after another along ``main``.

    Half the time the first blocks form a convoy: a front block with up to two light
    blocks touching its back face, so that pushes along ``main`` make composites.
    """
    blocks, occupied = [], set()
    convoy = rnd.random() < 0.5
    for j in range(n_blocks):
        for attempt in range(40):
            if j == n_blocks - 1:
                w = max_weight
            else:
                w = rnd.choices((1, 2, 3)[:max_weight], weights=(6, 3, 2)[:max_weight])[0]
            if convoy and j == 0 and j < n_blocks - 1:
                w = rnd.choice((1, 2))
                r, c = rnd.randint(0, K - w), rnd.randint(0, K - 1 - w)
            elif convoy and 0 < j < min(3, n_blocks - 1) and attempt < 20:
                w = rnd.choices((1, 2), weights=(3, 1))[0]
                r, c = touching_block(rnd, blocks[0], w, ref.OPPOSITE[main])
            elif blocks and rnd.random() < 0.65:
                r, c = touching_block(rnd, rnd.choice(blocks), w, some_direction(rnd, main))
            else:
                r, c = rnd.randint(0, K - w), rnd.randint(0, K - 1 - w)
                # Against a wall now and then, so pushes into walls happen.
                border = rnd.random()
                if border < 0.1:
                    r = 0
                elif border < 0.2:
                    r = K - w
                elif border < 0.3:
                    c = 0
            if fits_block(K, occupied, r, c, w):
                blocks.append((r, c, w))
                occupied |= {(r + i, c + k) for i in range(w) for k in range(w)}
                break
        else:
            return None
    return blocks


def place_agents(rnd: random.Random, K: int, blocks, n_agents: int, main: int):
    """Agents on block faces, in lines behind each other, in 2 x 2 squares, or anywhere.

    Half the time a crew comes first: lines of agents on the faces from which
    pushing along ``main`` pushes the first three blocks.
    """
    occupied = {(r + i, c + k) for r, c, w in blocks for i in range(w) for k in range(w)}
    agents = []

    def free(cell):
        return 0 <= cell[0] < K and 0 <= cell[1] < K and cell not in occupied

    def add(cells):
        agents.extend(cells)
        occupied.update(cells)

    if rnd.random() < 0.5:
        back = ref.OPPOSITE[main]
        for block in blocks[:3]:
            for cell in face_cells(block, main):
                # A line of one to three agents on this face cell.
                for depth in range(3):
                    stop = rnd.random() < 0.1 + 0.3 * depth
                    if stop or len(agents) == n_agents or not free(cell):
                        break
                    add([cell])
                    cell = ref.shifted(cell, back)

    while len(agents) < n_agents:
        for _attempt in range(40):
            mode = rnd.random()
            if mode < 0.45:
                cells = [rnd.choice(face_cells(rnd.choice(blocks), some_direction(rnd, main)))]
            elif mode < 0.75 and agents:
                # Behind an earlier agent, so lines of pushers form.
                d = some_direction(rnd, main)
                cells = [ref.shifted(rnd.choice(agents), ref.OPPOSITE[d])]
            elif mode < 0.85 and n_agents - len(agents) >= 4:
                # A 2 x 2 square of agents, the smallest group that can rotate.
                r, c = rnd.randint(0, K - 2), rnd.randint(0, K - 2)
                cells = [(r, c), (r, c + 1), (r + 1, c + 1), (r + 1, c)]
            else:
                cells = [(rnd.randint(0, K - 1), rnd.randint(0, K - 1))]
            if all(free(cell) for cell in cells):
                add(cells)
                break
        else:
            return None
    return agents


@dataclass
class Episode:
    world: ref.World
    main: int  # the direction most pushes of this episode go
    seed: int  # seeds the actions; the repro printed on failure lists them anyway


# Placement and actions use a plain seeded ``random.Random``: its draws are uniform, so
# the rates at which the rules above fire (tuned by hand) hold in every run, which
# hypothesis-driven draws, biased towards simple values, did not keep.
@st.composite
def episodes(draw):
    shape = draw(st.sampled_from(SHAPES))
    main = draw(st.sampled_from(DIRECTIONS))
    seed = draw(st.integers(0, 2**32 - 1))
    rnd = random.Random(seed)
    blocks = place_blocks(rnd, shape.K, shape.n_blocks, main, shape.max_weight)
    assume(blocks is not None)
    agents = place_agents(rnd, shape.K, blocks, shape.n_agents, main)
    assume(agents is not None)
    world = ref.World(
        K=shape.K,
        agents=agents,
        blocks=[[r, c, w, True] for r, c, w in blocks],
        max_steps=shape.max_steps,
        step_cost=shape.step_cost,
        deliver_reward=shape.deliver_reward,
    )
    return Episode(world, main, seed)


# Moves that turn a 2 x 2 square of agents (top-left, top-right, bottom-right,
# bottom-left) clockwise and anticlockwise.
ROTATIONS = ((R, D, L, U), (D, L, U, R))


def rotate_squares(rnd: random.Random, world: ref.World, actions: list[int]) -> None:
    agents_at = ref.agent_occupancy(world)
    for r, c in world.agents:
        square = [(r, c), (r, c + 1), (r + 1, c + 1), (r + 1, c)]
        if all(cell in agents_at for cell in square) and rnd.random() < 0.7:
            for cell, a in zip(square, rnd.choice(ROTATIONS)):
                actions[agents_at[cell]] = a


def choose_actions(rnd: random.Random, world: ref.World, main: int) -> list[int]:
    """Mostly pushes into a neighbouring block or agent; some random and out-of-range actions."""
    blocks_at = ref.block_occupancy(world)
    agents_at = ref.agent_occupancy(world)
    team = rnd.random() < 0.35  # a step where most agents push the episode's main way
    actions = []
    for cell in world.agents:
        x = rnd.random()
        if team and x < 0.9:
            actions.append(main)
        elif x < 0.55:
            near = [
                d for d in DIRECTIONS
                if ref.shifted(cell, d) in blocks_at or ref.shifted(cell, d) in agents_at
            ]
            actions.append(rnd.choice(near) if near else rnd.randint(0, 4))
        elif x < 0.9:
            actions.append(rnd.randint(0, 4))
        else:
            actions.append(rnd.choice(OUT_OF_RANGE))
    if rnd.random() < 0.15:
        rotate_squares(rnd, world, actions)
    # Agents behind a pusher often join it, so lines of pushers form.
    for _ in range(2):
        for i, cell in enumerate(world.agents):
            if rnd.random() < 0.5:
                for d in DIRECTIONS:
                    k = agents_at.get(ref.shifted(cell, d))
                    if k is not None and actions[k] == d:
                        actions[i] = d
    return actions


@settings(max_examples=80, deadline=None)
@given(episode=episodes(), n_steps=st.integers(10, 20))
def test_jax_matches_reference_on_random_worlds(episode, n_steps):
    note(describe(episode.world, []))
    rnd = random.Random(episode.seed + 1)
    compare_episode(episode.world, [lambda w: choose_actions(rnd, w, episode.main)] * n_steps)


# --------------------------------------------------------------------------- pinned cases


def parse_picture(picture: str):
    """ASCII world: ``.`` empty, digits are agents (id = digit), letters are blocks.

    A block's letter fills its w x w square; ids follow the alphabet (a = 0).
    Returns ``(K, agents, blocks)`` with blocks as ``(row, col, weight)``.
    """
    rows = [line.split() for line in picture.strip().splitlines()]
    K = len(rows)
    assert all(len(row) == K for row in rows), "picture must be square"
    agents, cells = {}, {}
    for r, row in enumerate(rows):
        for c, token in enumerate(row):
            if token.isdigit():
                agents[int(token)] = (r, c)
            elif token != ".":
                cells.setdefault(token, []).append((r, c))
    assert sorted(agents) == list(range(len(agents))), "agent ids must be 0..N-1"
    blocks = []
    for letter in sorted(cells):
        (r, c) = min(cells[letter])
        w = int(round(len(cells[letter]) ** 0.5))
        assert sorted(cells[letter]) == [(r + i, c + k) for i in range(w) for k in range(w)], letter
        blocks.append((r, c, w))
    return K, [agents[i] for i in range(len(agents))], blocks


def draw_picture(world: ref.World, letters: str) -> str:
    """Inverse of ``parse_picture`` for the world's current state (delivered blocks vanish)."""
    K = world.K
    rows = [["."] * K for _ in range(K)]
    for i, (r, c) in enumerate(world.agents):
        rows[r][c] = str(i)
    for j in range(len(world.blocks)):
        for r, c in ref.block_cells(world, j):
            rows[r][c] = letters[j]
    return "\n".join(" ".join(row) for row in rows)


@dataclass
class Pinned:
    name: str
    before: str
    actions: list
    after: str
    reward: float  # every agent's reward for the step


PINNED = [
    Pinned(
        # Top: pushed blocks a and b share block b in their C sets; c sits in front of b's
        # lower half. Force 2 + 2 = 4 = 1 + 2 + 1: the composite {a, b, c} moves.
        # Bottom: e and f are pushed separately but both have d in front: one composite
        # {d, e, f} of weight 5 with force 3 (agent 7 pushes d directly): nothing moves.
        "composite_of_several_blocks",
        """
        2 . . . . . . . . .
        . . . . . . . . . .
        3 0 a b b . . . . .
        . 4 1 b b c . . . .
        . . . . . . . . . .
        . . . . . . . . . .
        . 5 e d d d . . . .
        . . 7 d d d . . . .
        . 6 f d d d . . . .
        . . . . . . . . . .
        """,
        [R, R, S, R, R, R, R, R],
        """
        2 . . . . . . . . .
        . . . . . . . . . .
        . 3 0 a b b . . . .
        . . 4 1 b b c . . .
        . . . . . . . . . .
        . . . . . . . . . .
        . 5 e d d d . . . .
        . . 7 d d d . . . .
        . 6 f d d d . . . .
        . . . . . . . . . .
        """,
        -0.01,
    ),
    Pinned(
        # UP moves a to (2,4), in front of b. In the RIGHT phase agents 2 and 1 push b with
        # force 2 = weight of {b, a}, but a has already moved: nothing moves, 1 and 2 stay
        # engaged. Agent 3 pushes c UP; in the RIGHT phase agent 4 pushes the moved c: no move.
        "block_chain_with_front_block_moved_earlier",
        """
        . . . . . . . .
        . . . . . . . .
        . 2 1 b . . . .
        . . . . a . . .
        . . . . 0 . . .
        . . . . . 4 . .
        . . . . . . c .
        . . . . . . 3 .
        """,
        [U, R, R, U, R],
        """
        . . . . . . . .
        . . . . . . . .
        . 2 1 b a . . .
        . . . . 0 . . .
        . . . . . . . .
        . . . . . 4 c .
        . . . . . . 3 .
        . . . . . . . .
        """,
        -0.01,
    ),
    Pinned(
        # Blocks pushed towards each other across a one-cell gap: the earlier phase wins.
        # Row 2: LEFT comes before RIGHT, so b closes the gap first and a's composite
        # {a, b} holds a moved block. Column 6: UP comes before DOWN, so d closes the gap
        # and c's composite {c, d} cannot move.
        "earlier_phase_closes_gap_first",
        """
        . . . . . . 5 .
        . . . . . . 3 .
        2 1 a . b 0 c .
        . . . . . . . .
        . . . . . . d .
        . . . . . . 4 .
        . . . . . . . .
        . . . . . . . .
        """,
        [L, R, R, D, U, D],
        """
        . . . . . . 5 .
        . . . . . . 3 .
        2 1 a b 0 . c .
        . . . . . . d .
        . . . . . . 4 .
        . . . . . . . .
        . . . . . . . .
        . . . . . . . .
        """,
        -0.01,
    ),
    Pinned(
        # Top square: a rotation of four agents moves. (On a square grid every cycle of
        # moves has even length, so four is the smallest rotation.) Bottom square: the
        # same rotation with agent 7 staying is blocked all the way round.
        "rotation_of_agents",
        """
        . . . . . . . .
        . . . . . . . .
        . . 0 1 . . . .
        . . 3 2 . . . .
        . . . . . . . .
        . . 4 5 . . . .
        . . 7 6 . . a .
        . . . . . . . .
        """,
        [R, D, L, U, R, D, L, S],
        """
        . . . . . . . .
        . . . . . . . .
        . . 3 0 . . . .
        . . 2 1 . . . .
        . . . . . . . .
        . . 4 5 . . . .
        . . 7 6 . . a .
        . . . . . . . .
        """,
        -0.01,
    ),
    Pinned(
        # Row 1: a line follows its leader. Row 3: the leader walks into the wall, so
        # the whole line stays. Row 5: the leader turns UP and the line follows into
        # the cells it leaves.
        "line_of_movers_follows_leader",
        """
        . . . . . . . .
        0 1 2 . . . . .
        . . . . . . . .
        . . . . . 3 4 5
        . . . . . . . .
        6 7 8 . . . . .
        . . . . . a . .
        . . . . . . . .
        """,
        [R, R, R, R, R, R, R, R, U],
        """
        . . . . . . . .
        . 0 1 2 . . . .
        . . . . . . . .
        . . . . . 3 4 5
        . . 8 . . . . .
        . 6 7 . . . . .
        . . . . . a . .
        . . . . . . . .
        """,
        -0.01,
    ),
    Pinned(
        # Only a RIGHT push can reach column K-1, so the phase that delivers is the last
        # push phase and the freed cells are used by the movement phase: agent 1 steps
        # into a's last cell (agent 2, aiming there too, loses to the smaller id); agent 5
        # steps into one of b's. D = 1 + 2 = 3 over 6 agents.
        "delivery_frees_cells_for_later_phase",
        """
        . . . . . . . .
        . . . . . . . 1
        . . . . . 0 a .
        . . . . . . . 2
        . . . . 3 b b .
        . . . . 4 b b .
        . . . . . . . 5
        c . . . . . . .
        """,
        [R, D, U, R, R, U],
        """
        . . . . . . . .
        . . . . . . . .
        . . . . . . 0 1
        . . . . . . . 2
        . . . . . 3 . .
        . . . . . 4 . 5
        . . . . . . . .
        c . . . . . . .
        """,
        -0.01 + 3 / 6,
    ),
    Pinned(
        # DYNAMICS.md leaves open whether a composite's check "holds no agent" sees an
        # agent that a second composite's push moves away in the same phase. Rule 5 is
        # decided before rule 6 moves anyone, so agent 0 still blocks a: b moves, a stays.
        "agent_leaving_in_same_phase_still_blocks",
        """
        . . . . . . . .
        . . . . . . . .
        . 1 a 0 b . . .
        . . . . . . . .
        . . . . . . . .
        . . . . . . . .
        . . . . . . . .
        . . . . . . . .
        """,
        [R, R],
        """
        . . . . . . . .
        . . . . . . . .
        . 1 a . 0 b . .
        . . . . . . . .
        . . . . . . . .
        . . . . . . . .
        . . . . . . . .
        . . . . . . . .
        """,
        -0.01,
    ),
]


def pinned_world(case: Pinned) -> ref.World:
    K, agents, blocks = parse_picture(case.before)
    return ref.World(K=K, agents=agents, blocks=[[r, c, w, True] for r, c, w in blocks])


def normalise_picture(picture: str) -> str:
    return "\n".join(" ".join(line.split()) for line in picture.strip().splitlines())


@pytest.mark.parametrize("case", PINNED, ids=lambda case: case.name)
def test_pinned_case_reference(case):
    world = pinned_world(case)
    world, rewards, terminated, truncated, _ = ref.step(world, case.actions)
    letters = "abcdefghijklmnopqrstuvwxyz"
    assert draw_picture(world, letters) == normalise_picture(case.after)
    assert rewards == pytest.approx([case.reward] * len(world.agents), abs=1e-9)
    assert (terminated, truncated) == (False, False)


@pytest.mark.parametrize("case", PINNED, ids=lambda case: case.name)
def test_pinned_case_jax_matches_reference(case):
    # A second step of everyone pushing RIGHT exercises the world the first step left.
    compare_episode(pinned_world(case), [case.actions, [R] * len(case.actions)])
