"""What the baseline driver (:mod:`cube_jax.rl.run`) needs from a training algorithm, and
the program of updates that both ``make_train`` and the driver run.

A trainer holds pure functions over one seed's training state; the driver vmaps them over
seeds, shards the env batch over a device mesh, runs updates in jitted chunks, saves
checkpoints and evaluates. :class:`cube_jax.rl.ppo.PPO` (IPPO and MAPPO) is one.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Protocol, Tuple

import jax
import jax.numpy as jnp
from jax import lax

Metrics = Dict[str, jax.Array]


class Trainer(Protocol):
    """One algorithm's training, for one seed; every method is pure and jit/vmap-able."""

    env: Any  # the unshaped world (cube_jax.make(**env_kwargs)): evaluation, summary, GIF
    env_kwargs: Dict[str, Any]  # keyword arguments of cube_jax.make for env
    num_updates: int  # the config's budget of updates
    steps_per_update: int  # env steps of one update

    def init(self, key: jax.Array) -> Any:
        """A fresh training state from a PRNG key."""

    def update(self, state: Any, num_updates: jax.Array) -> Tuple[Any, Metrics]:
        """One update: ``(state, {name: float32[] or int32[]})``; ``num_updates`` (int32[])
        is the budget, e.g. the horizon a learning rate anneals over."""

    def updates_done(self, state: Any) -> jax.Array:
        """int32[]: updates made so far (a resumed run starts counting from here)."""

    def env_batched(self, state: Any) -> Any:
        """A tree like ``state`` of bools: True where a leaf's first axis is the env batch
        (split over the device mesh); the rest is replicated."""

    def policy_params(self, state: Any) -> Any:
        """What acting needs: evaluated by :meth:`evaluate` and saved as the policy."""

    def evaluate(self, policy_params: Any, key: jax.Array, episodes: int) -> Tuple[Dict, Dict, Any]:
        """``(greedy, sampled, film)``: ``{name: float32[...]}`` over ``episodes`` episodes
        acting greedily and sampled, and ``(states [T + 1, ...], done bool[T + 1])`` of one
        greedy episode."""


def seed_axis(how: str) -> str:
    """``"vmap"`` or ``"map"``: ``train.seed_axis`` with ``"auto"`` resolved for the default
    backend (map on the CPU, vmap elsewhere)."""
    if how == "auto":
        return "map" if jax.default_backend() == "cpu" else "vmap"
    if how not in ("vmap", "map"):
        raise ValueError(f"train.seed_axis: {how!r} is not one of 'auto', 'vmap', 'map'")
    return how


def over_seeds(fn, how: str):
    """``fn`` of one seed's arguments, applied to arguments with a leading seed axis: as one
    batched program (``how="vmap"``) or seed after seed inside one program (``"map"``,
    ``lax.map``). Both return the same tree with the seed axis first.

    On the CPU the second is the faster: one IPPO update of the default preset at n = 4 took
    about 1.4 times as long per seed vmapped over four seeds as mapped over them, and 1.7 times
    as long vmapped over one seed (docs/performance.md, "Seeds one after another").
    """
    how = seed_axis(how)
    if how == "vmap":
        return jax.vmap(fn)
    return lambda *args: jax.lax.map(lambda a: fn(*a), args)


def update_chunk(trainer: Trainer, state: Any, active, num_updates, length: int) -> Tuple[Any, Metrics]:
    """``length`` scan steps of ``trainer.update``, of which the first ``active`` update.

    The rest pass the state through unchanged with NaN (integer metrics: 0) metrics, so
    every chunk, a last partial one included, is one compiled program. ``active`` and
    ``num_updates`` may be traced int32[]. Returns ``(state, {name: [length]})``.
    """
    update = lambda s: trainer.update(s, num_updates)  # noqa: E731
    skipped = jax.tree.map(
        lambda s: jnp.full(s.shape, jnp.nan, s.dtype) if jnp.issubdtype(s.dtype, jnp.floating)
        else jnp.zeros(s.shape, s.dtype),
        jax.eval_shape(update, state)[1],
    )

    def one(s, i):
        return jax.lax.cond(i < active, update, lambda c: (c, skipped), s)

    return jax.lax.scan(one, state, jnp.arange(length))


# --- what the trainers share ---------------------------------------------------------------------
# A bijection of uint32 words (the "lowbias32" integer hash: xor-shifts and multiplications
# by odd constants, each invertible), keyed by a word xor-ed in before each of two rounds.
_MIX_SHIFTS = (16, 15, 16)
_MIX_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
_MIX_INVERSES = tuple(pow(m, -1, 1 << 32) for m in _MIX_MULTIPLIERS)


def _unshift(x: jax.Array, shift: int) -> jax.Array:
    """The inverse of ``x ^ (x >> shift)`` on uint32 words."""
    y = x
    for k in range(shift, 32, shift):
        y = y ^ (x >> k)
    return y


def _mix(x: jax.Array, keys: jax.Array) -> jax.Array:
    for key in keys:
        x = x ^ key
        x = x ^ (x >> _MIX_SHIFTS[0])
        x = x * jnp.uint32(_MIX_MULTIPLIERS[0])
        x = x ^ (x >> _MIX_SHIFTS[1])
        x = x * jnp.uint32(_MIX_MULTIPLIERS[1])
        x = x ^ (x >> _MIX_SHIFTS[2])
    return x


def _unmix(x: jax.Array, keys: jax.Array) -> jax.Array:
    for key in keys[::-1]:
        x = _unshift(x, _MIX_SHIFTS[2])
        x = x * jnp.uint32(_MIX_INVERSES[1])
        x = _unshift(x, _MIX_SHIFTS[1])
        x = x * jnp.uint32(_MIX_INVERSES[0])
        x = _unshift(x, _MIX_SHIFTS[0])
        x = x ^ key
    return x


# From this many samples on, the shuffle is a keyed Feistel permutation with no sort (see
# shuffle_indices); below, one sort of hashed words, whose orders are exactly equally likely.
FEISTEL_MIN = 1024
FEISTEL_ROUNDS = 4


def _feistel(x: jax.Array, keys: jax.Array, bits: int) -> jax.Array:
    """A keyed bijection of ``bits``-bit words (uint32 ``x`` < 2**bits): a Feistel network of
    ``len(keys)`` rounds. Each round splits a word into a left and a right part and maps
    ``(left, right) -> (right, left ^ f(right))``, with ``f`` the integer hash of
    :func:`_mix` keyed by the round's word and cut to the left part's width; every round is
    its own bijection whatever ``f`` is. An odd ``bits`` splits unevenly, and the widths of
    the two parts swap from round to round."""
    left_bits, right_bits = bits // 2, bits - bits // 2
    left, right = x >> right_bits, x & jnp.uint32((1 << right_bits) - 1)
    for key in keys:
        f = _mix(right, key[None]) & jnp.uint32((1 << left_bits) - 1)
        left, right = right, left ^ f
        left_bits, right_bits = right_bits, left_bits
    return (left << right_bits) | right


def shuffle_indices(key: jax.Array, n: int, method: str = "auto") -> jax.Array:
    """int32[n]: a random permutation of ``range(n)``, for shuffling a rollout's samples.

    From FEISTEL_MIN samples on (a rollout's agent steps), no sort: the indices go through a
    keyed Feistel network of FEISTEL_ROUNDS rounds on words of ``ceil(log2(n))`` bits
    (:func:`_feistel`, four random key words), a bijection of ``range(2**bits)``; when ``n``
    is not a power of two, an index that lands at ``n`` or beyond goes through it again until
    it lands below ``n`` ("cycle walking", which keeps a bijection of ``range(n)``). On the
    CPU the sort of the way below was the larger part of an IPPO update's shuffle (one sort
    of 16384 words, about 0.8 ms, against 0.03 ms for the network). The permutations come
    from a keyed family rather than uniformly from all ``n!``, which minibatches do not see:
    tested for no structure between neighbouring indices and for every index landing in any
    part of the order equally often (tests/rl/test_rl_training.py).

    Fewer samples (a recurrent run shuffles its environments): the indices ``0 .. n-1`` go
    through a keyed bijection of uint32 words (two rounds of an integer hash, each after a
    random key word is xor-ed in: :func:`_mix`), which makes ``n`` distinct words in an order
    that depends on the key; one sort of those words, mapped back through the inverse
    bijection, is the permutation, and every order of four items is equally likely (tested).
    One single-operand sort: on the CPU ``jax.random.permutation`` sorts ``(random key,
    index)`` pairs in rounds, and a two-operand sort of 16384 entries cost about ten times
    a one-word sort.

    ``method``: ``"auto"`` (the above), ``"sort"`` at any ``n``, or ``"feistel"`` from
    FEISTEL_MIN on (fewer words are too short for its halves to mix);
    ``benchmarks/profile_parts.py --sections shuffle`` times the two side by side.
    """
    if method not in ("auto", "feistel", "sort"):
        raise ValueError(f"shuffle_indices: method must be 'auto', 'feistel' or 'sort', got {method!r}")
    if method == "feistel" and n < FEISTEL_MIN:
        raise ValueError(f"shuffle_indices: method 'feistel' needs n >= {FEISTEL_MIN}, got n = {n}")
    if n > 1 << 31:
        return jax.random.permutation(key, n).astype(jnp.int32)
    if method == "feistel" or (method == "auto" and n >= FEISTEL_MIN):
        bits = (n - 1).bit_length()
        keys = jax.random.bits(key, (FEISTEL_ROUNDS,), jnp.uint32)
        perm = _feistel(jnp.arange(n, dtype=jnp.uint32), keys, bits)
        if n != 1 << bits:  # cycle walking: at most half of the words lie at n or beyond
            perm = lax.while_loop(
                lambda p: jnp.any(p >= n),
                lambda p: jnp.where(p >= n, _feistel(p, keys, bits), p),
                perm,
            )
        return perm.astype(jnp.int32)
    keys = jax.random.bits(key, (2,), jnp.uint32)
    words = jax.lax.sort(_mix(jnp.arange(n, dtype=jnp.uint32), keys))
    return _unmix(words, keys).astype(jnp.int32)


def run_epochs(epoch, runner, samples, schedule, count: int):
    """``count`` passes of ``epoch(carry, key, samples, schedule)`` over one rollout's samples,
    from the runner's ``(params, opt_state)``, each with a key of its own split from
    ``runner.key``: ``(next runner key, params, opt_state, stats [count, ...])``.
    ``schedule`` is this update's annealed values (a learning rate, or a tuple of values),
    passed through unchanged."""
    key, k_epochs = jax.random.split(runner.key)
    (params, opt_state), stats = jax.lax.scan(
        lambda c, k: epoch(c, k, samples, schedule),
        (runner.params, runner.opt_state),
        jax.random.split(k_epochs, count),
    )
    return key, params, opt_state, stats


def mask_mean(x: jax.Array, mask: jax.Array, axis_name: Optional[str] = None) -> jax.Array:
    """Mean of ``x`` where ``mask``; NaN when the mask is empty (no episode finished). With
    ``axis_name`` (a data-parallel trainer's device axis) over every device's ``x`` and ``mask``."""
    count = mask.sum()
    total = jnp.sum(jnp.where(mask, x.astype(jnp.float32), 0.0))
    if axis_name is not None:
        count, total = lax.psum((count, total), axis_name)
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def episode_metrics(episode: Dict[str, jax.Array], num_blocks: int, axis_name: Optional[str] = None) -> Metrics:
    """A rollout's training-episode metrics from its LogWrapper statistics (each ``[T, E]``):
    means over the episodes that ended in it (NaN when none did), and how many ended; with
    ``axis_name``, over the environments of every device."""
    done = episode["returned_episode"]
    ended = done.sum()
    return {
        "episode_return": mask_mean(episode["episode_return"], done, axis_name),
        "success_rate": mask_mean(episode["success"], done, axis_name),
        "blocks_delivered_frac": mask_mean(episode["blocks_delivered"] / num_blocks, done, axis_name),
        "episode_length": mask_mean(episode["episode_length"], done, axis_name),
        "episodes": ended if axis_name is None else lax.psum(ended, axis_name),
    }


# --- data parallel: the env batch split over devices, each with its own program ---------------
def local_key(key: jax.Array, axis_name: Optional[str]) -> jax.Array:
    """``key`` for randomness of this device's own environments and samples: folded with the
    device's index on ``axis_name``; ``key`` itself outside a data-parallel program."""
    return key if axis_name is None else jax.random.fold_in(key, lax.axis_index(axis_name))


def across_devices(tree: Any, axis_name: Optional[str]) -> Any:
    """The mean of ``tree`` over the devices of ``axis_name`` (gradients, statistics); ``tree``
    itself outside a data-parallel program."""
    return tree if axis_name is None else lax.pmean(tree, axis_name)


def splits_over(count: int, num_envs: int, samples_per_env: int, minibatches: int, env_multiple: int = 1) -> bool:
    """Whether ``count`` devices can each take an equal share of ``num_envs`` environments, a
    multiple of ``env_multiple``, whose ``share * samples_per_env`` samples split into
    ``minibatches`` equal minibatches: what :func:`data_parallel` needs of a trainer, and
    what ``train.cpu_devices``'s automatic count (:func:`cube_jax.rl.run.cpu_device_count`)
    looks for."""
    return num_envs % (count * env_multiple) == 0 and (num_envs // count * samples_per_env) % minibatches == 0


def data_parallel(trainer: Any, axis_name: str, count: int) -> Any:
    """A copy of ``trainer`` that updates one device's share of the environments inside a
    ``shard_map`` over ``axis_name`` (``count`` devices), as PureJaxRL and JaxMARL split
    environments over devices: each device steps ``num_envs / count`` environments, shuffles
    its own samples into minibatches of ``1 / count`` of the size, and every minibatch
    step averages the devices' gradients (:func:`across_devices`), so the parameters stay
    the same on all of them; episode statistics and losses are over all devices.

    The trainer opts in with an ``axis_name`` attribute (None outside such a program) and
    the sizes ``num_envs``, ``batch_size`` and ``minibatch_size`` (and ``env_multiple``, what
    each device's environments must be a multiple of, when not 1); its budget
    (``num_updates``) stays the whole run's. ValueError where the sizes do not split.
    """
    if count == 1:
        return trainer
    unit = getattr(trainer, "env_multiple", 1)  # e.g. recurrent minibatches take whole environments
    if not splits_over(count, trainer.num_envs, trainer.batch_size // trainer.num_envs,
                       trainer.batch_size // trainer.minibatch_size, unit):
        raise ValueError(
            f"data parallel over {count} devices: train.num_envs={trainer.num_envs} does not split into "
            f"{count} equal shares" + (f", each a multiple of {unit} environments" if unit > 1 else "")
            + " with whole minibatches (choose train.num_envs accordingly, or fewer devices: "
            "train.num_devices, train.cpu_devices)")
    local = copy.copy(trainer)
    local.axis_name = axis_name
    local.num_envs = trainer.num_envs // count
    local.batch_size = trainer.batch_size // count
    local.minibatch_size = trainer.minibatch_size // count
    return local


def stagger_start(env, env_state, key: jax.Array):
    """``(env_state, observations)`` with every env's first episode started at a random step
    count in [0, max_steps) (``env_state``: a LogWrapper state batched over envs of ``env``).

    All envs reset together otherwise, so their episodes stay in lockstep and every update
    sees one slice of the episode (only the first 32 steps, then only the next 32, ...). The
    shortened first episodes end by truncation, which the targets bootstrap, so no return is
    cut wrongly; only their logged statistics are partial.
    """
    base = env_state.env_state
    base = base.replace(t=jax.random.randint(key, base.t.shape, 0, env.max_steps, dtype=base.t.dtype))
    return env_state.replace(env_state=base), jax.vmap(env.observe)(base)
