"""Training configuration: typed sections, YAML files and ``key=value`` overrides.

:class:`Config` is the schema: every key with its type, range and default. Files and
overrides may only change values, never invent keys, so a typo fails loudly::

    python baselines/ippo.py env.scenario=hard train.num_envs=512 --preset gpu

Layering, later wins: the defaults of :class:`Config`, the algorithm's preset file
(``ippo.yaml``), any ``--config FILE``, the ``--preset NAME`` files (``NAME.yaml``,
repeatable, in order), then the ``key=value`` overrides, whose
values are read as YAML. With ``output.resume=<run>`` the run's saved ``config.yaml``
replaces the files and the overrides are applied again on top of it.

The preset files ship inside the package (``cube_jax/rl/presets/``, read with
:mod:`importlib.resources`), so an installed package has them; the repository's
``configs/`` holds copies of them to read, copy and edit.

>>> config = build("ippo", overrides=["train.lr=3e-4", "env.scenario=hard"])
>>> config.train.lr, config.env.scenario, config.train.num_envs
(0.0003, 'hard', 128)
>>> build("ippo", overrides=["train.num_env=4"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
cube_jax.rl.config.ConfigError: override 'train.num_env=4': unknown config key 'train.num_env' (did you mean 'train.num_envs' or ...
"""
from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Sequence, Tuple, Union

import yaml
from pydantic import BaseModel, ValidationError

from cube_jax.rl import algorithms
from cube_jax.rl.schema import (Config, DistributedSection, EnvSection, EvalSection, NetworkSection,  # noqa: F401
                                ObservationForm, OutputSection, PQNSection, ReachMode, Section, ShapingSection,
                                TrainSection)
from cube_jax.names import excerpt

# The preset files: the algorithms' own (<config_algo>.yaml) and the --preset ones.
CONFIG_DIR = Path(str(resources.files("cube_jax.rl") / "presets"))
ALGO_FILES = algorithms.CONFIG_ALGOS  # <algo>.yaml; every other file of CONFIG_DIR is a preset


class ConfigError(ValueError):
    """A config file or override that names an unknown key or holds a bad value."""


# --- the schema's keys ---------------------------------------------------------------------------
def _schema_keys(model: type = Config, prefix: str = "") -> Dict[str, bool]:
    """Every dotted key of the schema -> whether it is a section."""
    keys = {}
    for name, field in model.model_fields.items():
        kind = field.annotation
        is_section = isinstance(kind, type) and issubclass(kind, BaseModel)
        keys[prefix + name] = is_section
        if is_section:
            keys.update(_schema_keys(kind, prefix + name + "."))
    return keys


KEYS = _schema_keys()


# --- reading layers ----------------------------------------------------------------------------
def _leaves(tree: Mapping, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _leaves(value, dotted + ".")
        else:
            yield dotted, value


def _unknown_key(dotted: str) -> str:
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        head = ".".join(parts[:i])
        if KEYS.get(head) is False:
            return f"{head!r} is a value, not a section; {dotted!r} does not exist"
    section, last = ".".join(parts[:-1]), parts[-1]
    if KEYS.get(section):  # a known section: compare the last part with its keys
        names = [k[len(section) + 1:] for k in KEYS if k.startswith(section + ".") and "." not in k[len(section) + 1:]]
        close = [f"{section}.{k}" for k in difflib.get_close_matches(last, names, n=3, cutoff=0.6)]
        listing = f"keys of {section}: {', '.join(names)}"
    else:
        close = difflib.get_close_matches(dotted, [k for k, sec in KEYS.items() if not sec], n=3, cutoff=0.6)
        listing = f"top-level keys: {', '.join(k for k in KEYS if '.' not in k)}"
    text = f"unknown config key {dotted!r}"
    if close:
        text += f" (did you mean {' or '.join(repr(k) for k in close)}?)"
    text += "; " + listing
    return text


class _Layers:
    """The nested config tree being built, and where each of its values came from."""

    def __init__(self, algo: str):
        self.tree: Dict[str, Any] = Config().model_dump()
        self.tree["algo"] = algo
        self.source: Dict[str, str] = {}

    def apply(self, update: Any, where: str) -> None:
        if not isinstance(update, Mapping):
            raise ConfigError(f"{where}: expected a mapping of config keys, got {type(update).__name__}")
        for dotted, value in _leaves(update):
            self.set(dotted, value, where)

    def set(self, dotted: str, value: Any, where: str) -> None:
        if dotted not in KEYS:
            raise ConfigError(f"{where}: {_unknown_key(dotted)}")
        if KEYS[dotted]:
            raise ConfigError(f"{where}: {dotted!r} is a section; set one of its keys, e.g. {dotted}.<key>=...")
        *path, last = dotted.split(".")
        node = self.tree
        for part in path:
            node = node[part]
        node[last] = value
        self.source[dotted] = where

    def validate(self) -> Config:
        try:
            return Config.model_validate(self.tree)
        except ValidationError as err:
            raise ConfigError("\n".join(self._explain(e) for e in err.errors(include_url=False))) from None

    def _explain(self, error: Dict[str, Any]) -> str:
        if error["type"] == "cross_field":
            keys = error["ctx"]["keys"]
            where = ", ".join(dict.fromkeys(self.source.get(k, "defaults") for k in keys))
            return f"{where}: {error['msg']}"
        loc = [str(part) for part in error["loc"]]
        while len(loc) > 1 and ".".join(loc) not in KEYS:  # drop union-member tags pydantic appends
            loc.pop()
        dotted = ".".join(loc)
        where = self.source.get(dotted, "defaults")
        if error["type"] == "extra_forbidden":
            return f"{where}: {_unknown_key(dotted)}"
        message = error["msg"]
        if message.startswith("Input should be "):
            message = "must be " + message[len("Input should be "):]
        return f"{where}: {dotted} {message}, got {_short(error['input'])}"


def _short(value: Any, limit: int = 60) -> str:
    return excerpt(repr(value), limit, fit=True)


def parse_override(text: str) -> Tuple[str, Any]:
    """``"train.lr=3e-4"`` -> ``("train.lr", "3e-4")``: the value read as YAML (numbers typed by the schema)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value, e.g. train.num_envs=512")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        problem = str(getattr(err, "problem", None) or "not valid YAML")
        raise ConfigError(f"override {text!r}: value {_short(raw)} is not valid YAML ({problem})") from None
    return key.strip(), value


def load_yaml(path: Union[str, Path]) -> Dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{at} ({getattr(err, 'problem', None) or err})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level, got {type(data).__name__}")
    return data


def presets() -> List[str]:
    """Names usable with ``--preset``: the preset files other than the algorithms' own."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem not in ALGO_FILES)


def build(
    algo: str,
    config_files: Iterable[Union[str, Path]] = (),
    preset: Union[None, str, Sequence[str]] = None,
    overrides: Iterable[str] = (),
) -> Config:
    """Layers the defaults, the preset file <algo>.yaml, extra files, presets and overrides; validated.

    ``preset`` is the name of a preset file (``NAME.yaml`` of :data:`CONFIG_DIR`, as in the
    repository's ``configs/``) or a list of names, applied in order.
    """
    parsed = [(f"override {text!r}", *parse_override(text)) for text in overrides]
    layers = _Layers(algo)
    algo_file = CONFIG_DIR / f"{algo}.yaml"
    if algo_file.is_file():
        layers.apply(load_yaml(algo_file), str(algo_file))
    for path in config_files:
        layers.apply(load_yaml(path), str(path))
    for name in [] if preset is None else [preset] if isinstance(preset, str) else list(preset):
        preset_file = CONFIG_DIR / f"{name}.yaml"
        if not preset_file.is_file():
            raise ConfigError(f"--preset {name!r}: no file {preset_file}; available presets: {presets()}")
        layers.apply(load_yaml(preset_file), str(preset_file))
    for where, key, value in parsed:
        layers.set(key, value, where)
    resume = layers.tree["output"]["resume"]
    if resume is not None:
        # A resumed run continues with its own saved config; the command line may change only
        # what does not make it another run (the budget, when to stop, outputs, logging).
        saved = _resumed_config_file(resume)
        layers = _Layers(algo)
        layers.apply(load_yaml(saved), str(saved))
        before = layers.validate()
        if before.algo != algo:
            raise ConfigError(f"output.resume={str(resume)!r}: that run trained algo={before.algo}, this command "
                              f"trains {algo}; resume it with baselines/{before.algo}.py")
        for where, key, value in parsed:
            layers.set(key, value, where)
        _check_resumed(resume, before, layers.validate())
    config = layers.validate()
    if config.train.init_from is not None and config.output.resume is None:
        _check_init_from(config)
    return config


def _check_init_from(config: Config) -> None:
    """train.init_from names a saved run (or policy) whose network can start this one."""
    from cube_jax.rl.transfer import TransferError, check_compatible, policy_only, read_source

    try:
        folder, meta = read_source(config.train.init_from)
        check_compatible(meta, config.algo, config.network.model_dump(), config.env.observation,
                         config.train.init_from, config.env.view_radius, policy_alone=policy_only(folder))
    except TransferError as err:
        raise ConfigError(str(err)) from None


# What a resumed run's command line may change: the budget, when to stop, the devices it runs
# on, its outputs, logging and evaluation (and train.init_from, which a resumed run does not
# read: it continues its own checkpoint). Anything else would make it another run.
RESUMABLE_CHANGES = ("train.init_from", "train.total_timesteps", "train.max_seconds", "train.target_success", "train.target_check_every",
                     "train.stall_seconds", "train.updates_per_call", "train.cpu_devices", "train.num_devices",
                     "train.seed_axis", "output.", "logger.", "eval.", "distributed.")


def _flat(tree: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check_resumed(resume, before: Config, after: Config) -> None:
    """ConfigError naming every key the command line changes that a resumed run must keep."""
    old, new = _flat(before.model_dump()), _flat(after.model_dump())
    changed = [k for k in new if old.get(k) != new[k]
               and not any(k == r or (r.endswith(".") and k.startswith(r)) for r in RESUMABLE_CHANGES)]
    if changed:
        shown = ", ".join(f"{k}: {old.get(k)!r} -> {new[k]!r}" for k in changed[:6])
        raise ConfigError(f"output.resume={str(resume)!r}: the run was trained with another config ({shown}); a "
                          "resumed run keeps its config but for the budget, stopping, devices, outputs, logging and "
                          "evaluation: start a new run (or train.init_from) to change it")


def _resumed_config_file(resume) -> Path:
    path = Path(str(resume))
    run_dir = path.parent if path.name == "checkpoint" else path
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"output.resume={str(resume)!r}: no config.yaml in run folder {run_dir}")
    return saved


def env_kwargs(config: Config) -> Dict[str, Any]:
    """Keyword arguments for ``cube_jax.make`` described by ``config.env``."""
    env = config.env
    kwargs: Dict[str, Any] = {"observation": env.observation, "view_radius": env.view_radius}
    if env.scenario is not None:
        kwargs["scenario"] = env.scenario
        if env.num_agents is not None:
            kwargs["num_agents"] = env.num_agents
        if env.scenario == "coop2":  # a world that draws its layouts: a pool, as the curriculum's
            kwargs["pool_size"] = env.pool_size
    else:
        kwargs["n"] = env.n
        kwargs["pool_size"] = env.pool_size
    if env.max_steps is not None:
        kwargs["max_steps"] = env.max_steps
    return kwargs
