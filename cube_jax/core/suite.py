"""The benchmark suite ``cube-v1``: its tasks and their held-out test sets (BENCH.md section 1).

A :class:`Task` names a world (what :func:`cube_jax.make` is given), its team size and its
episode length. A task whose world draws its layouts has a **test set**: 256 distinct layouts
from a reserved key stream that no training path uses, shipped with the package
(``suites/cube-v1.npz``) and identified by the SHA-256 of their contents, which the suite
declares (:data:`TEST_SET_SHA256`): loading a test set whose contents do not hash to it is
refused. Test episode ``i`` of a task starts from test layout ``i`` (layout 0 for a
fixed-layout task) with episode seed ``i``.

Training may draw any layout but these: :class:`~cube_jax.core.layouts.PoolLayouts` refuses a
pool that holds a test layout (and ``PoolLayouts.draw`` leaves them out), and
:func:`collision_chance` measures how often a fresh training draw equals a test layout.

Adding or changing a task, a test set or a scoring rule makes a new suite version.

>>> [t.name for t in TASKS]
['easy', 'hard', 'n1', 'n2', 'n3', 'n4', 'n6', 'n8', 'coop2-3', 'coop2-6']
>>> task("coop2-3").world, task("coop2-3").max_steps
({'scenario': 'coop2', 'num_agents': 3}, 50)
>>> test_set(task("n2")).agent_pos.shape
(256, 2, 2)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

import jax
import numpy as np

from cube_jax.core import testsets
from cube_jax.core.testsets import contents_sha256, layout_rows, test_layouts_in

VERSION = "cube-v1"
TEST_LAYOUTS = 256
# The reserved key stream: test layout keys are fold_in(fold_in(fold_in(PRNGKey(0), STREAM_TAG),
# suite number), task's stream number) folded with 0, 1, 2, ...; no training path folds these in.
STREAM_TAG = 0x43554245  # "CUBE"
SUITE_NUMBER = 1
COOP2_MAX_STEPS = 50  # COOP²'s CUBE setting (cube_jax.core.env: 15 x 15, three blocks of each weight 1-3)


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of the suite: a world, its team size and its episode length."""

    name: str
    world: Mapping  # keyword arguments of cube_jax.make
    num_agents: int
    max_steps: int
    fixed_layout: bool  # scored on the world's one layout; else on the test set
    stream: int  # the task's number in the reserved key stream
    description: str

    def make(self, **options):
        """The task's environment (``options``: observation form and the like, never the world)."""
        from cube_jax.core.env import make

        clash = set(options) & {"n", "scenario", "num_agents", "max_steps", "step_cost", "deliver_reward"}
        if clash:
            raise ValueError(f"task {self.name!r}: {sorted(clash)} are fixed by the task and cannot be set")
        return make(**dict(self.world), max_steps=self.max_steps, **options)

    def generator(self):
        """The task's own layout generator (what training on the task's world draws from)."""
        return self.make().generator


def _curriculum(k: int) -> Task:
    from cube_jax.core import generator

    return Task(f"n{k}", {"n": k}, k, generator.default_max_steps(k), False, k,
                f"the n-curriculum at n = {k}: {generator.grid_size_for(k)}x{generator.grid_size_for(k)} grid, "
                f"{k} agents, blocks {generator.block_counts(k)} (weight: count)")


def _coop2(agents: int) -> Task:
    return Task(f"coop2-{agents}", {"scenario": "coop2", "num_agents": agents}, agents, COOP2_MAX_STEPS, False,
                100 + agents, f"COOP²'s CUBE setting: 15x15 grid, {agents} agents, three blocks of each weight 1-3, "
                              "50 steps")


def _fixed(name: str) -> Task:
    from cube_jax.core.scenario import load_scenario

    sc = load_scenario(name)
    return Task(name, {"scenario": name}, len(sc.agents), sc.max_steps, True, 0,
                f"EmCoop's {name} scenario: {sc.grid_size}x{sc.grid_size} grid, {len(sc.agents)} agents, blocks of "
                f"weights {[w for _, _, w in sc.blocks]}, its one fixed layout")


TASKS: Tuple[Task, ...] = (
    _fixed("easy"),
    _fixed("hard"),
    *(_curriculum(k) for k in (1, 2, 3, 4, 6, 8)),
    _coop2(3),
    _coop2(6),
)
TASK_NAMES = tuple(t.name for t in TASKS)

# SHA-256 of each test set's contents (contents_sha256): what the suite's version fixes.
TEST_SET_SHA256: Dict[str, str] = {
    "easy": "639da485eda0940bd8d2c738b9c18a103b11a5e7872170e2c5a8606584eb0cac",
    "hard": "7467c49b960a497eb9a0e4ff91b5c84e8cdf97845c261bf580eb9960bfec76f4",
    "n1": "b1405f461eb53dc64eef90556c463aaa8b71445a726994bbc712ff6297befef8",
    "n2": "ab5b49700e17036b68db6fb8c5e3f706f73f45881abf6f23afdcbf01f4cb90fb",
    "n3": "a830315743c94bd7fa2d19c29901e22dd3ef0d4db40db71741e3c4cafaee2220",
    "n4": "cdaa5fbfa60842036377d1d2c5e6aae5c5e1eb1de8f5db5e7b1f39e57092b9ea",
    "n6": "90fe0097f3fe8530dd935d6334145d3d746d762c6a8490123c1cd5265c7b340c",
    "n8": "fd9560f32f13d7a15a993ff7832a5499ce3d7fec3d259c85f273f785c539e7b6",
    "coop2-3": "e614bfd18baa5d6184b50da5531de65ded9bf41ededdd4bd7bf3025e1f11c3b7",
    "coop2-6": "2d351fa55abc9f27553c2d82a87230b407d7c97d4dcc8cd989437414132ea22d",
}


def task(name: str) -> Task:
    """The task called ``name``; ValueError listing the tasks when there is none."""
    for t in TASKS:
        if t.name == name:
            return t
    raise ValueError(f"unknown task {name!r}; the tasks of {VERSION} are {', '.join(TASK_NAMES)}")


# --- test sets --------------------------------------------------------------------------------------


def generate_test_set(t: Task, size: int = TEST_LAYOUTS):
    """The test set drawn afresh from the reserved key stream: the first ``size`` distinct layouts
    of the task's generator (for a fixed-layout task, its one layout)."""
    from cube_jax.core.layouts import draw_layouts

    gen = t.generator()
    if t.fixed_layout:
        return jax.tree.map(lambda x: np.asarray(x)[None], gen.layout)
    base = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(0), STREAM_TAG), SUITE_NUMBER),
                              t.stream)
    keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(np.arange(2 * size, dtype=np.uint32))
    layouts, placed = jax.tree.map(np.asarray, draw_layouts(gen, keys))
    if not placed.all():
        raise RuntimeError(f"task {t.name!r}: block placement failed for {int((~placed).sum())} reserved keys")
    seen, keep = set(), []
    for i, row in enumerate(layout_rows(layouts)):
        if row not in seen:
            seen.add(row)
            keep.append(i)
    if len(keep) < size:
        raise RuntimeError(f"task {t.name!r}: only {len(keep)} distinct layouts among {2 * size} draws")
    return jax.tree.map(lambda x: x[np.asarray(keep[:size])], layouts)


def test_set(t: Task):
    """The task's test layouts (a :class:`~cube_jax.core.layouts.Layout` with a leading axis of
    256, or 1 for a fixed-layout task), as shipped; ValueError if they do not hash to the
    suite's declared SHA-256."""
    from cube_jax.core.layouts import Layout

    if t.fixed_layout:
        layouts = generate_test_set(t)
    else:
        stored = testsets.stored()
        layouts = Layout(*(stored[f"{t.name}/{field}"] for field in testsets.FIELDS))
    digest = contents_sha256(layouts)
    if TEST_SET_SHA256.get(t.name) != digest:
        raise ValueError(f"the test set of task {t.name!r} hashes to {digest[:16]}..., not to {VERSION}'s declared "
                         f"{TEST_SET_SHA256.get(t.name, '(none)')[:16]}...; the installed suite is damaged")
    return layouts


test_set.__test__ = False  # not a pytest test


def write_test_sets(path: Path = testsets.TEST_SET_FILE) -> Dict[str, str]:
    """Draws every drawn task's test set from the reserved stream into ``path``; returns the hashes
    (what :data:`TEST_SET_SHA256` declares, fixed-layout tasks included)."""
    arrays, hashes = {}, {}
    for t in TASKS:
        layouts = generate_test_set(t)
        hashes[t.name] = contents_sha256(layouts)
        if not t.fixed_layout:
            for field in testsets.FIELDS:
                arrays[f"{t.name}/{field}"] = np.asarray(getattr(layouts, field), np.int32)
            arrays[f"{t.name}/grid_size"] = np.asarray(t.generator().grid_size, np.int32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return hashes


# --- training draws against the test sets -------------------------------------------------------------


def collision_chance(t: Task, draws: int = 10**6, seed: int = 0, chunk: int = 65536) -> Dict[str, float]:
    """How often a fresh training draw of the task's world (keys ``split(PRNGKey(seed), draws)``,
    as training's resets draw them) equals one of its test layouts: ``{"draws", "collisions",
    "chance", "distinct_test_layouts"}``."""
    from cube_jax.core.layouts import draw_layouts

    if t.fixed_layout:
        raise ValueError(f"task {t.name!r} has one fixed layout: every draw is it")
    gen = t.generator()
    tests = frozenset(layout_rows(test_set(t)))
    keys = jax.random.split(jax.random.PRNGKey(seed), draws)
    collisions = 0
    for start in range(0, draws, chunk):
        part = keys[start:start + chunk]
        if part.shape[0] < chunk:  # one compiled shape: pad the last chunk and drop the padding
            part = np.concatenate([np.asarray(part), np.repeat(np.asarray(part[:1]), chunk - part.shape[0], 0)])
        rows = layout_rows(jax.tree.map(np.asarray, draw_layouts(gen, part)[0]))[: min(chunk, draws - start)]
        collisions += sum(row in tests for row in rows)
    return {"draws": draws, "collisions": collisions, "chance": collisions / draws,
            "distinct_test_layouts": len(tests)}


def describe(t: Optional[Task] = None) -> str:
    """One line per task: name, agents, steps, layouts."""
    lines = []
    for x in TASKS if t is None else (t,):
        where = "its one fixed layout" if x.fixed_layout else f"{TEST_LAYOUTS} held-out test layouts"
        lines.append(f"{x.name:8s} {x.num_agents} agents, {x.max_steps} steps, {where}: {x.description}")
    return "\n".join(lines)


__all__ = ["TASKS", "TASK_NAMES", "TEST_LAYOUTS", "TEST_SET_SHA256", "Task", "VERSION", "collision_chance",
           "contents_sha256", "describe", "generate_test_set", "layout_rows", "task", "test_layouts_in", "test_set",
           "write_test_sets"]
