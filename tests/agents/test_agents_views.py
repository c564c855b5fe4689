"""The CPU symbolic views (alignment, required force, quorum, blocked) agree with a plain
recomputation of the concepts' definitions on random worlds."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cube_jax.agents.views import WorldView
from cube_jax.symbolic.actions import FACES
from tests.symbolic.test_symbolic_jax_concepts import plain_concepts, random_layout, state_from_layout


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_views_match_a_plain_recomputation(seed):
    agents, blocks, alive = random_layout(seed)
    view = WorldView(state_from_layout(agents, blocks, alive))
    want = plain_concepts(agents, blocks, alive)
    for block in view.blocks:
        j = block.id
        assert block.alive == alive[j]
        assert block.distance_to_goal == want["progress"][j]  # K - c - w, 0 once delivered
        if not alive[j]:
            assert block.faces == {}
            continue
        for f, face in enumerate(FACES):
            fv = block.faces[face]
            where = f"block {j} face {face} in {agents} {blocks} {alive}"
            assert set(fv.aligned) == set(np.flatnonzero(want["aligned"][f, j])), where
            assert fv.required == want["required"][f, j], where
            assert fv.deficit == want["deficit"][f, j], where
            assert fv.blocked == bool(want["blocked"][f, j]), where


def test_aligned_face_names_the_face():
    agents, blocks, alive = random_layout(7)
    view = WorldView(state_from_layout(agents, blocks, alive))
    for i in range(len(agents)):
        for block in view.blocks:
            face = view.aligned_face(i, block.id)
            expected = [FACES[f] for f in range(4) if view.alignment[f, i] == block.id]
            assert (face is None and not expected) or face == expected[0]
