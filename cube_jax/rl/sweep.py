"""Hyperparameter sweeps in one program: a grid of config values trained together with the seeds.

A grid maps config keys (``train.lr``, ``train.ent_coef``, ``pqn.lambda_``, ...) to lists of
values. Each key is one of two kinds:

- **traced**: a number the training reads as an array, never as a Python value. The trainer
  is built inside the jitted program from a config whose value is a traced float, so every
  combination of the traced keys' values and every seed run as one batch of the same
  program (``jax.vmap``, or ``lax.map`` one after another on the CPU, as ``train.seed_axis``
  says). Learning rates, entropy and value coefficients, clipping, discounts and ``lambda``
  are usually of this kind.
- **static**: a value that sets a shape or a branch of the program (``train.num_envs``,
  ``network.hidden``, ``train.anneal_lr``, a shaping weight read when the trainer is built).
  Each combination of the static keys' values is a program of its own, run after the other.

:func:`classify` tells which is which by tracing the training once with the numbers traced:
a key whose traced value raises a concretization error is static; a key that the training
never reads is refused, since sweeping it would change nothing (e.g. ``train.lr`` under
PQN-VDN, whose learning rate is ``pqn.lr``).

:func:`run_group` trains one static combination: ``points x seeds`` trainers from the same
seeds (every point sees the same environments), ``train.total_timesteps`` each, then
evaluates every one of them greedily and sampled on ``eval.episodes`` episodes of the
training distribution. ``cube-jax sweep`` runs the groups, keeps each finished one in the
output folder (a rerun skips it) and writes the table and the figure.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.rl import algorithms
from cube_jax.rl.config import Config, ConfigError, build, parse_override
from cube_jax.rl.trainer import over_seeds, seed_axis, update_chunk

log = logging.getLogger(__name__)

Grid = Dict[str, List[Any]]
# what a trainer's construction or update raises when a traced value meets Python control flow or a shape
_STATIC_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
                  jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError, TypeError)


class SweepError(ValueError):
    """A grid that names an unknown key, repeats one, holds a bad value or sweeps nothing."""


def parse_grid(algo: str, texts: Sequence[str], base: Sequence[str] = ()) -> Grid:
    """``["train.lr=1e-4,3e-4", "train.ent_coef=0,0.01"]`` -> ``{key: [values]}``, each value
    read as YAML and checked against the schema (with the ``base`` overrides applied first)."""
    grid: Grid = {}
    for text in texts:
        if "=" not in text:
            raise SweepError(f"--grid {text!r}: expected key=value,value,..., e.g. train.lr=1e-4,3e-4")
        key, raw = text.split("=", 1)
        key = key.strip()
        if key in grid:
            raise SweepError(f"--grid {key}: given twice; list every value of a key in one --grid")
        if any(part.strip() == "" for part in raw.split(",")):
            raise SweepError(f"--grid {text!r}: an empty value; expected key=value,value,...")
        values = []
        for part in raw.split(","):
            try:
                parse_override(f"{key}={part}")
                # the value as the schema types it ("1e-3" is a string to YAML, a float to train.lr)
                values.append(getattr_key(build(algo, overrides=[*base, f"{key}={part.strip()}"]), key))
            except ConfigError as err:
                raise SweepError(f"--grid {key}: {err}") from None
        if len(set(map(repr, values))) != len(values):
            raise SweepError(f"--grid {key}: a value is listed twice in {raw!r}")
        grid[key] = values
    if not grid:
        raise SweepError("no --grid given: name at least one key and its values, e.g. --grid train.lr=1e-4,3e-4")
    return grid


def _yaml(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def overrides_of(values: Dict[str, Any]) -> List[str]:
    """``{"train.lr": 0.001}`` -> ``["train.lr=0.001"]``."""
    return [f"{key}={_yaml(value)}" for key, value in values.items()]


def with_values(config: Config, values: Dict[str, Any]) -> Config:
    """``config`` with ``values`` (dotted keys) set without validation, so that a value may be
    a traced array: the config a trainer is built from inside the swept program."""
    by_section: Dict[str, Dict[str, Any]] = {}
    top: Dict[str, Any] = {}
    for key, value in values.items():
        section, _, field = key.partition(".")
        if field:
            by_section.setdefault(section, {})[field] = value
        else:
            top[section] = value
    update = {section: getattr(config, section).model_copy(update=fields) for section, fields in by_section.items()}
    return config.model_copy(update={**update, **top})


# --- which keys run in one program -------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Plan:
    """A grid split into its traced keys (one program) and its static keys (a program each)."""

    traced: Tuple[str, ...]
    static: Tuple[str, ...]
    why_static: Dict[str, str]  # static key -> why it cannot be traced

    def groups(self, grid: Grid) -> List[Dict[str, Any]]:
        """Every combination of the static keys' values, in grid order."""
        return [dict(zip(self.static, combo)) for combo in itertools.product(*(grid[k] for k in self.static))]

    def points(self, grid: Grid) -> List[Dict[str, Any]]:
        """Every combination of the traced keys' values, in grid order."""
        return [dict(zip(self.traced, combo)) for combo in itertools.product(*(grid[k] for k in self.traced))]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _training_jaxpr(config: Config, keys: Sequence[str]):
    """The jaxpr of building the trainer and one update with ``keys`` traced (float32[] inputs)."""
    trainer_class = algorithms.of(config).trainer_class()

    def program(*values):
        trainer = trainer_class(with_values(config, dict(zip(keys, values))))
        state = trainer.init(jax.random.PRNGKey(0))
        return trainer.update(state, jnp.int32(trainer.num_updates))[1]

    return jax.make_jaxpr(program)(*[jnp.float32(getattr_key(config, k)) for k in keys])


def getattr_key(config: Config, key: str) -> Any:
    section, _, field = key.partition(".")
    return getattr(getattr(config, section), field) if field else getattr(config, section)


def _reads(jaxpr) -> List[bool]:
    """Which inputs of ``jaxpr`` any equation (or the outputs) reads."""
    used = set()
    for eqn in jaxpr.jaxpr.eqns:
        used.update(id(v) for v in eqn.invars)
    used.update(id(v) for v in jaxpr.jaxpr.outvars)
    return [id(v) in used for v in jaxpr.jaxpr.invars]


def classify(config: Config, grid: Grid) -> Plan:
    """Splits ``grid``'s keys into traced and static ones for ``config`` (see the module's
    docstring); SweepError naming a key that training never reads."""
    numeric = [k for k, values in grid.items() if all(_is_number(v) for v in values)
               and _is_number(getattr_key(config, k))]
    why: Dict[str, str] = {k: "its values are not all numbers" for k in grid if k not in numeric}
    traced: List[str] = []
    for key in numeric:
        try:
            jaxpr = _training_jaxpr(config, [key])
        except _STATIC_ERRORS as err:
            why[key] = f"it sets a shape or a branch of the program: {type(err).__name__}"
            continue
        if not _reads(jaxpr)[0]:
            if _static_effect(config, key, grid[key]):
                why[key] = "it is read when the trainer is built"
                continue
            raise SweepError(f"--grid {key}: {config.algo}'s training never reads {key} with this config, so "
                             f"sweeping it would change nothing")
        traced.append(key)
    return Plan(tuple(traced), tuple(k for k in grid if k not in traced), why)


def _static_effect(config: Config, key: str, values: Sequence[Any]) -> bool:
    """Whether some value of ``key`` builds a trainer whose first update traces differently:
    a number read only while the trainer is built (then folded into constants)."""
    trainer_class = algorithms.of(config).trainer_class()

    def text(value):
        trainer = trainer_class(build_static(config, {key: value}))
        state = jax.eval_shape(trainer.init, jax.random.PRNGKey(0))
        return str(jax.make_jaxpr(lambda s: trainer.update(s, jnp.int32(trainer.num_updates)))(state))

    texts = {text(v) for v in values[:2]}
    return len(texts) > 1


def build_static(config: Config, values: Dict[str, Any]) -> Config:
    """``config`` with ``values`` applied and validated (a static group's config)."""
    data = config.model_dump()
    for key, value in values.items():
        section, _, field = key.partition(".")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    try:
        return type(config).model_validate(data)
    except Exception as err:  # pydantic's ValidationError, with the key in its text
        raise SweepError(f"{overrides_of(values)}: {err}") from None


# --- one static group: every point and seed in one program ----------------------------------------
@dataclasses.dataclass
class GroupResult:
    """What one static group's program measured: per point and seed."""

    static: Dict[str, Any]
    points: List[Dict[str, Any]]
    seed: int  # config.seed: the seeds' keys are split from it
    num_seeds: int
    env_steps: int  # per point and seed
    wall_seconds: float
    final: Dict[str, List[List[Any]]]  # "greedy"/"sampled" metric -> [points][seeds]
    curves: Dict[str, Any]  # "env_steps": [chunks], every update metric -> [points][chunks] (mean over seeds, None: no value)

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def run_group(config: Config, plan: Plan, grid: Grid, static: Dict[str, Any],
              on_chunk: Optional[Callable[[int, int, float], None]] = None) -> GroupResult:
    """Trains and evaluates every point of ``plan``'s traced keys with ``config.num_seeds``
    seeds under the static values ``static``; ``on_chunk(done_updates, num_updates, seconds)``
    after every jitted chunk."""
    config = build_static(config, static)
    points = plan.points(grid)
    trainer_class = algorithms.of(config).trainer_class()
    reference = trainer_class(config)
    num_updates, length = reference.num_updates, config.train.updates_per_call
    seeds = config.num_seeds
    how = seed_axis(config.train.seed_axis)
    seed_keys = jax.random.split(jax.random.PRNGKey(config.seed), seeds)
    keys = jnp.tile(seed_keys, (len(points), 1))  # flat index = point * seeds + seed
    hypers = {k: jnp.repeat(jnp.asarray([p[k] for p in points], jnp.float32), seeds) for k in plan.traced}

    def trainer_of(h):
        return trainer_class(with_values(config, h)) if h else reference

    init = jax.jit(over_seeds(lambda k, h: trainer_of(h).init(k), how))

    def chunk_fn(state, h, active, total):
        return over_seeds(lambda s, hh: update_chunk(trainer_of(hh), s, active, total, length), how)(state, h)

    chunk = jax.jit(chunk_fn, donate_argnums=0)
    evaluate = jax.jit(over_seeds(
        lambda params, k, h: trainer_of(h).evaluate(params, k, config.eval.episodes)[:2], how))

    start = time.perf_counter()
    state = init(keys, hypers)
    done, steps, rows = 0, [], {}
    while done < num_updates:
        count = min(length, num_updates - done)
        state, metrics = chunk(state, hypers, np.int32(count), np.int32(num_updates))
        metrics = jax.device_get(metrics)  # {name: [flat, length]}
        done += count
        steps.append(done * reference.steps_per_update)
        for name, values in metrics.items():  # every metric of the update: its mean over the chunk and the seeds
            per = np.asarray(values, np.float64)[:, :count].reshape(len(points), seeds, count)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a chunk in which no episode ended: NaN
                rows.setdefault(name, []).append(np.nanmean(per, axis=(1, 2)))
        if on_chunk is not None:
            on_chunk(done, num_updates, time.perf_counter() - start)
    eval_keys = jax.random.split(jax.random.PRNGKey(config.seed + 10_000), seeds)
    params = jax.jit(over_seeds(reference.policy_params, how))(state)  # acting needs no swept value
    greedy, sampled = jax.device_get(evaluate(params, jnp.tile(eval_keys, (len(points), 1)), hypers))
    final = {}
    for way, values in (("greedy", greedy), ("sampled", sampled)):
        for name in ("success_rate", "blocks_delivered_frac"):
            final[f"{way}_{name}"] = np.asarray(values[name], np.float64).reshape(len(points), seeds).tolist()
    curves = {"env_steps": steps, **{name: _finite(np.stack(v, axis=1)) for name, v in rows.items()}}
    return GroupResult(static, points, config.seed, seeds, num_updates * reference.steps_per_update,
                       round(time.perf_counter() - start, 2), final, curves)


def _finite(values: np.ndarray) -> List[Any]:
    """``values`` as nested lists with NaN (nothing measured) as None, so the JSON stays standard."""
    return [[None if not np.isfinite(x) else float(x) for x in row] for row in values]
