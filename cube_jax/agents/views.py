"""Symbolic views of one state on the CPU: alignment, quorum and blocked faces per block.

The episode loop computes one :class:`WorldView` per step and shares it among every agent
that decides at that step (prompts read it) and the trace (the ``tasks`` counts of a step
record read it). It follows the concepts of the cube paper's Table 2 exactly as
:mod:`cube_jax.symbolic.concepts` defines them in JAX (tested against them): alignment is
the agent-chain rule of DYNAMICS.md with every agent pushing, the required force of a face
is the weight of the block's chain ``C(j)`` in the push direction, and a face is blocked
when nobody can stand at it or the block's next cells hold a wall, a block or an agent.

Everything is NumPy over entity arrays plus two ``K x K`` lookup grids, so a view of a
256-agent world costs about a millisecond.

>>> import jax, cube_jax
>>> env = cube_jax.make("hard")
>>> state, _ = env.reset(jax.random.PRNGKey(0))
>>> view = WorldView(state)
>>> [(b.id, b.weight, b.distance_to_goal) for b in view.blocks]
[(0, 3, 3), (1, 2, 5), (2, 1, 2)]
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Dict, List, Optional, Tuple

import numpy as np

from cube_jax.core.types import ACTION_DELTAS
from cube_jax.symbolic.actions import FACE_PUSH_DIRECTION, FACES
from cube_jax.symbolic.vocabulary import goal_distance
from cube_jax.symbolic.pathing import World


@dataclasses.dataclass(frozen=True)
class FaceView:
    """One face of one block: who is aligned, the force it needs, and whether it is blocked."""

    face: str
    aligned: Tuple[int, ...]  # agent ids aligned with this face (chains included)
    required: int  # force needed to move the block through this face (its chain's weight)
    deficit: int  # more aligned agents needed (0 when the quorum is met)
    blocked: bool


@dataclasses.dataclass(frozen=True)
class BlockView:
    id: int
    weight: int
    position: Tuple[int, int]  # top-left (row, col)
    alive: bool
    distance_to_goal: int  # right pushes still needed (0 once delivered)
    faces: Dict[str, FaceView]  # empty for a delivered block


class WorldView:
    """Symbolic facts about one (unbatched) state, computed lazily and cached."""

    def __init__(self, state):
        self.world = World.from_state(state)
        self.t = int(state.t)

    @property
    def num_agents(self) -> int:
        return int(self.world.agent_pos.shape[0])

    @property
    def grid_size(self) -> int:
        return self.world.grid_size

    @functools.cached_property
    def alignment(self) -> np.ndarray:
        """int[4, N]: ``[f, i]`` = the alive block agent i is aligned with on face f (FACES order), -1 if none."""
        align = self.world.alignment.astype(np.int64)  # the shared rule (vocabulary.chain_ends); B when none
        return np.where(align >= self.world.block_weight.shape[0], -1, align)

    @functools.cached_property
    def _chain_weights(self) -> np.ndarray:
        """int[4, B]: weight of each alive block's chain C(j) when pushed through each face."""
        w = self.world
        r, c, wt, alive = (w.block_pos[:, 0].astype(np.int64), w.block_pos[:, 1].astype(np.int64),
                           w.block_weight.astype(np.int64), w.block_alive)
        b = wt.shape[0]
        out = np.zeros((len(FACES), b), np.int64)
        for f, face in enumerate(FACES):
            dr, dc = ACTION_DELTAS[FACE_PUSH_DIRECTION[face]]
            # front[j, x]: block x is in front of block j (j's square shifted by d meets x's)
            rows = (r[:, None] + dr < r[None, :] + wt[None, :]) & (r[None, :] < r[:, None] + dr + wt[:, None])
            cols = (c[:, None] + dc < c[None, :] + wt[None, :]) & (c[None, :] < c[:, None] + dc + wt[:, None])
            front = rows & cols & ~np.eye(b, dtype=bool) & alive[:, None] & alive[None, :]
            reach = front | np.eye(b, dtype=bool)
            for _ in range(max(0, b - 1).bit_length()):
                reach = (reach.astype(np.int64) @ reach.astype(np.int64)) > 0
            out[f] = np.where(alive, (reach * wt[None, :]).sum(1), 0)
        return out

    def _face_blocked(self, block: int, face: str) -> bool:
        w = self.world
        k = w.grid_size
        r, c = (int(x) for x in w.block_pos[block])
        wt = int(w.block_weight[block])
        # no standing room: every face cell is outside the grid or under an alive block
        if face in ("up", "down"):
            row = r - 1 if face == "up" else r + wt
            cells = [(row, c + j) for j in range(wt)]
        else:
            col = c - 1 if face == "left" else c + wt
            cells = [(r + j, col) for j in range(wt)]
        standing = [cell for cell in cells if 0 <= cell[0] < k and 0 <= cell[1] < k and w.block_at[cell] < 0]
        if not standing:
            return True
        dr, dc = ACTION_DELTAS[FACE_PUSH_DIRECTION[face]]
        tr, tc = r + dr, c + dc
        if tr < 0 or tc < 0 or tr + wt > k or tc + wt > k:
            return True
        target = (slice(tr, tr + wt), slice(tc, tc + wt))
        other_block = (w.block_at[target] >= 0) & (w.block_at[target] != block)
        return bool(other_block.any() or (w.agent_at[target] >= 0).any())

    @functools.cached_property
    def blocks(self) -> List[BlockView]:
        w = self.world
        k = w.grid_size
        align = self.alignment
        chain = self._chain_weights
        views = []
        for j in range(w.block_weight.shape[0]):
            alive = bool(w.block_alive[j])
            r, c = (int(x) for x in w.block_pos[j])
            wt = int(w.block_weight[j])
            faces: Dict[str, FaceView] = {}
            if alive:
                for f, face in enumerate(FACES):
                    aligned = tuple(int(i) for i in np.flatnonzero(align[f] == j))
                    required = int(chain[f, j])
                    faces[face] = FaceView(face, aligned, required, max(required - len(aligned), 0),
                                           self._face_blocked(j, face))
            views.append(BlockView(j, wt, (r, c), alive, int(goal_distance(k, c, wt)) if alive else 0, faces))
        return views

    def aligned_face(self, agent: int, block: int) -> Optional[str]:
        """The face of ``block`` the agent is aligned with, or None."""
        faces = np.flatnonzero(self.alignment[:, agent] == block)
        return FACES[int(faces[0])] if faces.size else None
