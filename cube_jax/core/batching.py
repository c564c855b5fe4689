"""How the step kernel meets batches: environment-last arrays, regions, the vmap rule, tiles.

The kernel works on arrays whose LAST axis runs over environments (agent rows ``int32[N, E]``,
pair relations ``bool[N, B, E]``), so that every operation vectorises across environments;
with the environment axis first, XLA on CPU works on each tiny entity axis separately and is
an order of magnitude slower. :func:`env_last` and :func:`env_first` move a batch with any
leading axes to that layout and back; :func:`vmap_as_batch` gives a function a ``jax.vmap``
rule that hands it the whole batch at once; :func:`in_env_tiles` runs a kernel over tiles of
environments on a CPU; :func:`region` materialises a value that is read more than once.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap
from jax.experimental.layout import Layout, with_layout_constraint

# --- the environment axis last ----------------------------------------------------------------


@custom_vmap
def _env_minor(x: jax.Array) -> jax.Array:
    """``x`` with a row-major physical layout (its last, environment, axis minor)."""
    return with_layout_constraint(x, Layout(tuple(range(x.ndim))))


@_env_minor.def_vmap
def _env_minor_vmap(axis_size, in_batched, x):
    # Under a further vmap (e.g. seeds x envs) the constraint is dropped: batched, it
    # produced wrong values inside jit. The outer axis is major anyway.
    return x, in_batched[0]


def env_last(x: jax.Array, lead: tuple, tail: int) -> jax.Array:
    """[*lead, *tail] -> [*tail, E] with E = prod(lead), pinned environment-minor."""
    x = jnp.reshape(x, (math.prod(lead),) + x.shape[x.ndim - tail :])
    return _env_minor(jnp.moveaxis(x, 0, -1))


def env_first(x: jax.Array, lead: tuple) -> jax.Array:
    """Inverse of :func:`env_last`: [..., E] -> [*lead, ...]."""
    x = jnp.moveaxis(_env_minor(x), -1, 0)
    return jnp.reshape(x, lead + x.shape[1:])


def vmap_as_batch(fn):
    """``fn`` takes inputs with any leading batch axes; under ``jax.vmap`` it receives the
    whole batch at once (unbatched inputs broadcast) instead of being batched op by op."""

    @custom_vmap
    def call(*args):
        return fn(*args)

    @call.def_vmap
    def _vmap_rule(axis_size, in_batched, *args):
        def batch(x, is_batched):
            return x if is_batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

        args = [jax.tree.map(batch, a, b) for a, b in zip(args, in_batched)]
        out = fn(*args)
        return out, jax.tree.map(lambda _: True, out)

    return call


# --- regions ----------------------------------------------------------------------------------
#
# XLA on CPU emits a reduction over a small entity axis as an inner loop per output element;
# LLVM vectorises across the environment axis only when it unrolls that loop completely, which
# it stops doing once the fused loop body grows (at about 8 agents and 11 blocks the whole
# kernel fell back to scalar code, 20x slower per agent). The folded kernel therefore has no
# reductions: every relation is a Python-unrolled fold of elementwise ``[X, E]`` terms, one
# term per entity, which always vectorises. Left alone, XLA would then fuse each fold into
# every consumer and recompute it there (a fold read B times costs B times); so every value
# read more than once is computed inside a *region*, a ``lax.cond`` on a predicate that is
# always true, whose result XLA must materialise. (``lax.optimization_barrier`` does not do
# this on CPU: it is removed before fusion.)


def _shape_of(x) -> jax.ShapeDtypeStruct:
    aval = jax.typeof(x)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _cond(keep, fn, args):
    """``fn(*args)`` where ``keep``, zeros of its shapes elsewhere. The zeros take their shapes
    from the branch that ran ``fn`` when ``lax.cond`` has traced it first: tracing ``fn`` a
    second time (``jax.eval_shape``) cost as much as the first, and the step has many regions."""
    shapes = []

    def run(a):
        out = fn(*a)
        shapes.append(jax.tree.map(_shape_of, out))
        return out

    def skip(a):
        return jax.tree.map(jnp.zeros_like, shapes[0] if shapes else jax.eval_shape(fn, *a))

    return lax.cond(keep, run, skip, args)


def _region_call(fn):
    """``fn`` run inside a region; the first argument is the region predicate."""

    @custom_vmap
    def call(keep, *args):
        return _cond(keep, fn, args)

    @call.def_vmap
    def _vmap_rule(axis_size, in_batched, keep, *args):
        # Under a further vmap (seeds x envs) the predicate stays one scalar, so the region
        # stays a real branch instead of turning into a select of both sides.
        keep = jnp.all(keep) if in_batched[0] else keep
        axes = [jax.tree.map(lambda b: 0 if b else None, b) for b in in_batched[1:]]
        out = _cond(keep, jax.vmap(fn, in_axes=tuple(axes)), args)
        return out, jax.tree.map(lambda _: True, out)

    return call


def region(keep: jax.Array, fn, *args):
    """``fn(*args)`` computed in a region: XLA materialises its result once instead of
    fusing (and recomputing) it into every consumer.

    ``keep`` is a bool scalar that is True whenever the value is needed (the kernel passes one
    it cannot prove constant, e.g. ``jnp.any((actions | 1) != 0)``); where it is False the
    result is zeros of ``fn``'s shapes. Under ``jax.vmap`` the region stays one branch.

    >>> import jax.numpy as jnp
    >>> int(region(jnp.array(True), lambda x: x.sum(), jnp.arange(4)))
    6
    """
    return _region_call(fn)(keep, *args)


# --- tiles of environments ---------------------------------------------------------------------
#
# On a CPU, teams of TILE_MIN_AGENTS or more step a large batch in tiles of environments, one
# tile after another: the kernel's folds keep [N, E] accumulators and relations, and once a
# pass's arrays outgrow a core's nearest caches every piece of the step slows alike. A tile
# holds about TILE_ELEMENTS agent slots (an int32 [N, tile] array of 32 KiB). Smaller teams
# keep the whole batch: their arrays are short along N, and tiles cost them more in loop rounds
# than they save. Other platforms take the whole batch at once: on a GPU the tiles ran one
# after another at a fixed rate each. The measurements behind each choice are in
# docs/performance.md ("Large batches and a smaller cache", "On a GPU").
TILE_ELEMENTS = 8 * 1024
TILE_MIN_AGENTS = 16


def env_tile(n: int, e: int) -> int:
    """Environments per tile for a step of n agents over e environments (e: no tiling): for
    n >= TILE_MIN_AGENTS, the largest divisor of e within TILE_ELEMENTS // n, if one is at
    least a quarter of that."""
    most = max(1, TILE_ELEMENTS // n)
    if n < TILE_MIN_AGENTS or e <= most:
        return e
    return next((t for t in range(most, most // 4 - 1, -1) if t > 0 and e % t == 0), e)


def in_env_tiles(kernel, *args):
    """``kernel(*args)`` on environment-last arrays whose first argument is ``[N, E]``: over
    tiles of environments on a CPU (see TILE_ELEMENTS), in one piece elsewhere; the same results."""
    e = args[0].shape[-1]
    tile = env_tile(args[0].shape[0], e)
    if tile == e:
        return kernel(*args)
    tiles = e // tile

    def split(x):  # [..., E] -> [tiles, ..., tile]
        return jnp.moveaxis(x.reshape(x.shape[:-1] + (tiles, tile)), -2, 0)

    def merge(x):  # [tiles, ..., tile] -> [..., E]
        return jnp.moveaxis(x, 0, -2).reshape(x.shape[1:-1] + (e,))

    def in_tiles(*args):
        return jax.tree.map(merge, lax.map(lambda a: kernel(*a), tuple(split(x) for x in args)))

    return lax.platform_dependent(*args, cpu=in_tiles, default=kernel)
