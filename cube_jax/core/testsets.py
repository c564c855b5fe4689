"""The benchmark's held-out test layouts as stored, and the check that keeps them out of training.

The suite (:mod:`cube_jax.core.suite`) declares the tasks and the SHA-256 of each test set;
this module only reads the stored layouts (``suites/cube-v1.npz``: per task its
``agent_pos``, ``block_pos``, ``block_weight`` and the grid side) and answers which layouts of
a batch are test layouts of a world of the same shape. It imports nothing of the environment,
so that the layout generators can ask it when a pool is built.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, FrozenSet, List, Sequence, Tuple

import numpy as np

TEST_SET_FILE = Path(__file__).parent / "suites" / "cube-v1.npz"
FIELDS = ("agent_pos", "block_pos", "block_weight")


def contents_sha256(layouts) -> str:
    """SHA-256 of a batch of layouts: agent_pos, block_pos and block_weight as little-endian int32,
    in that order, each in C order."""
    digest = hashlib.sha256()
    for field in FIELDS:
        digest.update(np.ascontiguousarray(np.asarray(getattr(layouts, field)), dtype="<i4").tobytes())
    return digest.hexdigest()


def layout_rows(layouts) -> List[bytes]:
    """One byte string per layout of a batch (anything with the three fields, a leading layout
    axis on each), equal exactly when the layouts are."""
    arrays = [np.asarray(getattr(layouts, field), dtype="<i4") for field in FIELDS]
    joined = np.ascontiguousarray(np.concatenate([a.reshape(a.shape[0], -1) for a in arrays], axis=1))
    return [row.tobytes() for row in joined]


@functools.lru_cache(maxsize=None)
def stored() -> Dict[str, np.ndarray]:
    """Every array of the stored test sets, by name (``<task>/<field>``)."""
    with np.load(TEST_SET_FILE) as data:
        return {name: data[name] for name in data.files}


def stored_tasks() -> Tuple[str, ...]:
    return tuple(dict.fromkeys(name.split("/")[0] for name in stored()))


def world_shape(name: str) -> Tuple[int, int, Tuple[int, ...]]:
    """(grid side, agents, block weights) of a stored test set's world."""
    arrays = stored()
    weights = arrays[f"{name}/block_weight"]
    return int(arrays[f"{name}/grid_size"]), int(arrays[f"{name}/agent_pos"].shape[1]), tuple(int(w) for w in weights[0])


@functools.lru_cache(maxsize=None)
def _rows_of(name: str) -> FrozenSet[bytes]:
    arrays = stored()
    return frozenset(layout_rows(SimpleNamespace(**{field: arrays[f"{name}/{field}"] for field in FIELDS})))


def test_layouts_in(grid_size: int, num_agents: int, weights: Sequence[int], layouts) -> List[Tuple[int, str]]:
    """``[(index, task)]``: the layouts of a batch, of a world of this shape, that are stored test
    layouts of a task."""
    shape = (int(grid_size), int(num_agents), tuple(int(w) for w in weights))
    names = [name for name in stored_tasks() if world_shape(name) == shape]
    if not names:
        return []
    rows = layout_rows(layouts)
    return [(i, name) for name in names for i, row in enumerate(rows) if row in _rows_of(name)]


test_layouts_in.__test__ = False  # not a pytest test

__all__ = ["TEST_SET_FILE", "contents_sha256", "layout_rows", "stored", "test_layouts_in", "world_shape"]
