"""Where reset's layouts come from: one object per way of making them.

A layout is where every agent and block stands at t = 0 (:class:`Layout`). ``env.reset(key)``
asks the environment's generator for one, so the ways of making layouts are objects passed to
the environment rather than branches inside :func:`cube_jax.make`:

* :class:`FixedLayout`: the same layout at every reset (a scenario);
* :class:`CurriculumLayouts`: a fresh n-curriculum layout drawn from the key
  (:mod:`cube_jax.core.generator`);
* :class:`CountsLayouts`: a fresh layout with given block counts per weight on a given grid,
  placed by the curriculum's rules (COOP²'s CUBE setting: 15 x 15, three blocks of each
  weight 1-3);
* :class:`PoolLayouts`: layouts drawn once, reset picking one by the key (a cheap gather).

Every generator is a pytree whose shapes are static fields (``grid_size``, ``num_agents``,
``weights``), so jit compiles once per shape and many fixed layouts of one shape share one
program. Its ``__call__(key)`` is pure and jittable.

>>> import jax
>>> gen = CountsLayouts.of(grid_size=15, num_agents=3, counts={3: 3, 2: 3, 1: 3})
>>> lay = gen(jax.random.PRNGKey(0))
>>> lay.agent_pos.shape, lay.block_pos.shape, gen.weights
((3, 2), (9, 2), (3, 3, 3, 2, 2, 2, 1, 1, 1))
"""
from __future__ import annotations

import functools
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cube_jax.core import generator, testsets


@struct.dataclass
class Layout:
    """Where everything stands at t = 0 (a leading layout axis on every field for a batch)."""

    agent_pos: jax.Array  # int32[N, 2] (row, col) of each agent, index = agent id
    block_pos: jax.Array  # int32[B, 2] top-left (row, col) of each block, index = block id
    block_weight: jax.Array  # int32[B] each block's weight


@struct.dataclass
class LayoutGenerator:
    """The static shape every layout of a generator has; subclasses make the layouts."""

    grid_size: int = struct.field(pytree_node=False)
    num_agents: int = struct.field(pytree_node=False)
    weights: Tuple[int, ...] = struct.field(pytree_node=False)  # every block's weight, block id order

    def __call__(self, key: jax.Array) -> Layout:
        raise NotImplementedError

    def placed(self, key: jax.Array) -> Tuple[Layout, jax.Array]:
        """``(self(key), bool[] every block found a place)``; only a generator that places
        blocks can fail (its retries exhausted)."""
        return self(key), jnp.array(True)

    @property
    def num_blocks(self) -> int:
        return len(self.weights)

    @property
    def max_weight(self) -> int:
        return max(self.weights)

    def first_observation(self, key: jax.Array):
        """The t = 0 observation of ``self(key)`` when the generator holds it, else None."""
        return None


@struct.dataclass
class FixedLayout(LayoutGenerator):
    """The same layout at every reset."""

    layout: Layout = None

    @classmethod
    def of(cls, agents, blocks, grid_size: int) -> "FixedLayout":
        """From ``agents`` [(r, c)] and ``blocks`` [(r, c, w)] (a scenario's lists)."""
        weights = tuple(int(w) for _, _, w in blocks)
        layout = Layout(agent_pos=jnp.asarray(agents, jnp.int32).reshape(-1, 2),
                        block_pos=jnp.asarray([(r, c) for r, c, _ in blocks], jnp.int32).reshape(-1, 2),
                        block_weight=jnp.asarray(weights, jnp.int32))
        return cls(grid_size=int(grid_size), num_agents=len(agents), weights=weights, layout=layout)

    def __call__(self, key: jax.Array) -> Layout:
        return self.layout


@struct.dataclass
class CountsLayouts(LayoutGenerator):
    """A fresh layout from the key: agents on distinct rows of column 0, blocks placed by the
    curriculum's rules (heaviest first, off the border, no two touching)."""

    @classmethod
    def of(cls, grid_size: int, num_agents: int, counts) -> "CountsLayouts":
        """``counts``: ``{weight: count}`` or ``((weight, count), ...)``; blocks heaviest first."""
        counts = dict(counts)
        weights = tuple(int(w) for w in sorted(counts, reverse=True) for _ in range(int(counts[w])))
        if not weights or min(weights) < 1:
            raise ValueError(f"CountsLayouts: counts must give at least one block of weight >= 1, got {counts!r}")
        if not 1 <= num_agents <= grid_size:
            raise ValueError(f"CountsLayouts: {num_agents} agents do not fit in column 0 of a {grid_size}x{grid_size} "
                             "grid")
        if max(weights) > grid_size - 3:
            raise ValueError(f"CountsLayouts: a block of weight {max(weights)} does not fit off the border of a "
                             f"{grid_size}x{grid_size} grid")
        return cls(grid_size=int(grid_size), num_agents=int(num_agents), weights=weights)

    def placed(self, key: jax.Array) -> Tuple[Layout, jax.Array]:
        agent_pos, block_pos, ok = generator.sample_layout(key, self.num_agents, self.weights, self.grid_size)
        return Layout(agent_pos, block_pos, jnp.asarray(self.weights, jnp.int32)), ok

    def __call__(self, key: jax.Array) -> Layout:
        return self.placed(key)[0]

    @property
    def counts(self) -> Tuple[Tuple[int, int], ...]:
        """``((weight, count), ...)``, heaviest first."""
        return tuple((w, self.weights.count(w)) for w in dict.fromkeys(self.weights))


@struct.dataclass
class CurriculumLayouts(CountsLayouts):
    """A fresh n-curriculum layout from the key: the curriculum's grid side and block weights for
    ``n`` (:mod:`cube_jax.core.generator`), placed as :class:`CountsLayouts` places them."""

    @classmethod
    def of(cls, n: int) -> "CurriculumLayouts":
        return cls(grid_size=generator.grid_size_for(n), num_agents=int(n), weights=tuple(generator.block_weights(n)))

    @property
    def n(self) -> int:
        return self.num_agents


@struct.dataclass
class PoolLayouts(LayoutGenerator):
    """Layouts drawn once; reset picks one uniformly by the key.

    Build it with :meth:`draw` (from another generator) or :meth:`of` (given layouts); both
    refuse, or leave out, every layout of a test set of the suite (:mod:`cube_jax.core.testsets`).
    ``observations`` (float32[P, ...], optional) are the layouts' t = 0 observations, so that
    a reset is a gather (what auto-reset under ``vmap`` pays at every step).
    """

    layouts: Layout = None  # a leading pool axis on every field
    observations: Optional[jax.Array] = None

    @property
    def size(self) -> int:
        return int(self.layouts.agent_pos.shape[0])

    def _index(self, key: jax.Array) -> jax.Array:
        return jax.random.randint(key, (), 0, self.layouts.agent_pos.shape[0])

    def __call__(self, key: jax.Array) -> Layout:
        return jax.tree.map(lambda x: x[self._index(key)], self.layouts)

    def first_observation(self, key: jax.Array):
        return None if self.observations is None else self.observations[self._index(key)]

    def with_observations(self, observations: jax.Array) -> "PoolLayouts":
        return self.replace(observations=observations)

    @classmethod
    def of(cls, layouts: Layout, grid_size: int) -> "PoolLayouts":
        """A pool of given layouts (a leading pool axis); ValueError if one is a test layout."""
        weights = np.asarray(layouts.block_weight)
        if weights.ndim != 2 or not (weights == weights[:1]).all():
            raise ValueError("PoolLayouts: every layout of a pool must have the same block weights, block id order")
        pool = cls(grid_size=int(grid_size), num_agents=int(layouts.agent_pos.shape[1]),
                   weights=tuple(int(w) for w in weights[0]), layouts=layouts)
        clash = _test_layouts_in(pool, pool.layouts)
        if clash:
            index, task = clash[0]
            raise ValueError(f"PoolLayouts: pool layout {index} is a layout of the test set of task {task!r} "
                             f"({len(clash)} pool layouts are test layouts); training may not draw them")
        return pool

    @classmethod
    def draw(cls, source: LayoutGenerator, size: int, seed: int) -> "PoolLayouts":
        """``size`` layouts of ``source`` from the keys ``split(PRNGKey(seed), size)``, leaving out
        every test layout of the suite (replaced, in order, by the draws of further key rounds
        ``split(fold_in(PRNGKey(seed), r), size)``, r = 1, 2, ...); RuntimeError when a layout's
        blocks found no place.

        The pool is a constant of (source, size, seed): the last few drawn are kept, and a draw
        asked for inside a function being traced (a trainer built in a jitted program, as a
        sweep builds it) is the kept one, or is computed then and there, never staged."""
        try:
            hash(source)
        except TypeError:  # a source that cannot be a cache key (arrays in its fields)
            return _draw_pool(cls, source, int(size), int(seed))
        return _drawn_pool(cls, source, int(size), int(seed))


@functools.lru_cache(maxsize=8)
def _drawn_pool(cls, source: LayoutGenerator, size: int, seed: int) -> PoolLayouts:
    return _draw_pool(cls, source, size, seed)


def _draw_pool(cls, source: LayoutGenerator, size: int, seed: int) -> PoolLayouts:
    if isinstance(jnp.zeros(()), jax.core.Tracer):  # called while tracing: compute the constant now
        with jax.ensure_compile_time_eval():
            return _draw_pool(cls, source, size, seed)
    root = jax.random.PRNGKey(seed)
    parts, count, rounds = [], 0, 0
    while count < size:
        keys = jax.random.split(root if rounds == 0 else jax.random.fold_in(root, rounds), size)
        layouts, ok = draw_layouts(source, keys)
        if not bool(np.all(np.asarray(ok))):
            raise RuntimeError(f"PoolLayouts.draw: block placement failed for some layouts of {source!r}")
        test = {i for i, _ in _test_layouts_in(source, layouts)}
        keep = np.array([i for i in range(size) if i not in test], dtype=int)[: size - count]
        parts.append(jax.tree.map(lambda x: x[keep], layouts))
        count, rounds = count + len(keep), rounds + 1
    return cls.of(jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts), source.grid_size)


def _test_layouts_in(source: LayoutGenerator, layouts: Layout):
    return testsets.test_layouts_in(source.grid_size, source.num_agents, source.weights, layouts)


@jax.jit
def draw_layouts(source: LayoutGenerator, keys: jax.Array) -> Tuple[Layout, jax.Array]:
    """One layout of ``source`` per key (a leading key axis) and bool[K] whether each placed all
    its blocks, compiled once per generator shape."""
    return jax.vmap(source.placed)(keys)


__all__ = ["CountsLayouts", "CurriculumLayouts", "FixedLayout", "Layout", "LayoutGenerator", "PoolLayouts",
           "draw_layouts"]
