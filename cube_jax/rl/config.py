"""Training configuration: YAML files plus ``key=value`` overrides from the command line.

A config is a nested plain dict whose every key exists in :data:`DEFAULTS`; files and
overrides may only change values, never invent keys, so a typo fails loudly::

    python baselines/ippo.py env.scenario=hard train.num_envs=512 --preset gpu

Layering, later wins: :data:`DEFAULTS` (the CPU preset), the algorithm's file
(``configs/ippo.yaml``), any ``--config FILE``, the ``--preset NAME`` file
(``configs/NAME.yaml``, repeatable), then the ``key=value`` overrides.
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import yaml

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"

DEFAULTS: Dict[str, Any] = {
    "algo": "ippo",  # "ippo": critic sees the agent's observation; "mappo": critic sees the world state
    "seed": 0,
    "num_seeds": 1,  # seeds trained at once with jax.vmap
    "env": {
        "scenario": "easy",  # a named scenario or a YAML path; null to use the n-curriculum
        "n": None,  # team size of the n-curriculum (when scenario is null)
        "observation": "vector",  # "vector" | "egocentric"
        "view_radius": 3,
        "pool_size": 4096,  # n-curriculum only: pre-drawn layouts so the per-step auto-reset is cheap
        "max_steps": None,  # null: the scenario's or curriculum's own limit
    },
    "network": {
        "hidden": 64,
        "layers": 2,
        "activation": "tanh",  # "tanh" | "relu"
        # MAPPO only: "obs_world" (own observation + compact world vector) | "world" (world vector
        # + agent id) | "grid" (five-channel grid + agent id)
        "critic_input": "world",
    },
    "train": {
        "num_envs": 64,
        "num_steps": 32,  # rollout length per update
        "total_timesteps": 2_000_000,  # env steps per seed
        "update_epochs": 4,
        "num_minibatches": 4,
        "lr": 2.5e-3,
        "anneal_lr": True,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "clip_eps": 0.2,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
        "num_devices": 0,  # devices in the env-batch mesh; 0 = every visible device
        "updates_per_call": 10,  # updates run per jitted call (progress and checkpoint granularity)
        "stall_seconds": 120,  # CPU only: stop with a clear error if the process sits idle this long (0: never)
        "stagger_start": True,  # first episodes start at random step counts so envs do not run in lockstep
        "target_success": 0.9,  # stop early once the training success rate reaches it (null: never)
    },
    "shaping": {
        "enabled": False,  # the papers' reward unless switched on
        "coef": 0.1,  # scale of the whole potential-based term
        "align_weight": 0.0,  # weight of the left-face quorum alignment beside block progress
        "reach_weight": 0.0,  # weight of the nearest agents' distance to each block's left face
    },
    "eval": {
        "episodes": 128,
        "greedy": True,
    },
    "output": {
        "root": "runs",
        "name": None,  # run folder name; null = "<algo>-<env>-<time>"
        "gif": True,
        "plot": True,
        "checkpoint": True,
        "checkpoint_every": 5,  # save the checkpoint every this many jitted calls (and at the end)
        "resume": None,  # a run folder or checkpoint folder to continue from
    },
    "distributed": {
        "coordinator": None,  # "host:port" starts jax.distributed (several hosts); null = one process
        "num_processes": 1,
        "process_id": 0,
    },
}

CHOICES = {
    "algo": ("ippo", "mappo"),
    "env.observation": ("vector", "egocentric"),
    "network.activation": ("tanh", "relu"),
    "network.critic_input": ("obs_world", "world", "grid"),
}
POSITIVE_INTS = (
    "num_seeds",
    "network.hidden",
    "network.layers",
    "train.num_envs",
    "train.num_steps",
    "train.total_timesteps",
    "train.update_epochs",
    "train.num_minibatches",
    "train.updates_per_call",
    "output.checkpoint_every",
    "eval.episodes",
    "env.view_radius",
)

BOOLS = (
    "train.anneal_lr",
    "train.stagger_start",
    "shaping.enabled",
    "eval.greedy",
    "output.gif",
    "output.plot",
    "output.checkpoint",
)


class ConfigError(ValueError):
    """A config file or override that names an unknown key or holds a bad value."""


def _flatten(tree: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _set(config: Dict[str, Any], dotted: str, value: Any, where: str) -> None:
    parts = dotted.split(".")
    node = config
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            known = sorted(_flatten(DEFAULTS))
            raise ConfigError(f"{where}: unknown config key {dotted!r}; known keys: {', '.join(known)}")
        if i == len(parts) - 1:
            if isinstance(node[part], dict):
                raise ConfigError(f"{where}: {dotted!r} is a section; set one of its keys, e.g. {dotted}.<key>=...")
            node[part] = value
        else:
            node = node[part]


def merge(config: Dict[str, Any], update: Dict[str, Any], where: str) -> Dict[str, Any]:
    """A copy of ``config`` with every leaf of the nested ``update`` set (unknown keys raise)."""
    if not isinstance(update, dict):
        raise ConfigError(f"{where}: expected a mapping of config keys, got {type(update).__name__}")
    out = copy.deepcopy(config)
    for dotted, value in _flatten(update).items():
        _set(out, dotted, value, where)
    return out


def parse_override(text: str) -> tuple:
    """``"train.lr=3e-4"`` -> ``("train.lr", 0.0003)``; the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value, e.g. train.num_envs=512")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: value {raw!r} is not valid YAML ({err})") from None
    # YAML 1.1 reads "3e-4" as a string; accept the usual float spelling.
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    return key.strip(), value


def load_yaml(path: Path) -> Dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level")
    return data


def _check_number(flat: Dict[str, Any], key: str, kind, where: str) -> None:
    value = flat[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(f"{where}: {key} must be {kind.__name__ if isinstance(kind, type) else 'a number'}, got {value!r}")


def validate(config: Dict[str, Any], where: str = "config") -> Dict[str, Any]:
    """Checks types, ranges and choices; returns the config unchanged or raises ConfigError."""
    flat = _flatten(config)
    for key, allowed in CHOICES.items():
        if flat[key] not in allowed:
            raise ConfigError(f"{where}: {key} must be one of {allowed}, got {flat[key]!r}")
    for key in POSITIVE_INTS:
        _check_number(flat, key, int, where)
        if flat[key] < 1:
            raise ConfigError(f"{where}: {key} must be >= 1, got {flat[key]!r}")
    for key in BOOLS:
        if not isinstance(flat[key], bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {flat[key]!r}")
    for key in ("seed", "train.num_devices", "env.pool_size", "train.stall_seconds"):
        _check_number(flat, key, int, where)
        if flat[key] < 0:
            raise ConfigError(f"{where}: {key} must be >= 0, got {flat[key]!r}")
    for key in ("train.lr", "train.gamma", "train.gae_lambda", "train.clip_eps", "train.ent_coef", "train.vf_coef",
                "train.max_grad_norm", "shaping.coef",
                "shaping.align_weight", "shaping.reach_weight"):
        _check_number(flat, key, (int, float), where)
        if flat[key] < 0:
            raise ConfigError(f"{where}: {key} must be >= 0, got {flat[key]!r}")
    for key in ("train.gamma", "train.gae_lambda"):
        if flat[key] > 1:
            raise ConfigError(f"{where}: {key} must be in [0, 1], got {flat[key]!r}")
    if flat["train.target_success"] is not None:
        _check_number(flat, "train.target_success", (int, float), where)
    env = config["env"]
    if (env["scenario"] is None) == (env["n"] is None):
        raise ConfigError(
            f"{where}: set exactly one of env.scenario (e.g. easy) and env.n (e.g. 4); "
            f"got scenario={env['scenario']!r}, n={env['n']!r} (use env.scenario=null env.n=4 for the curriculum)"
        )
    if env["n"] is not None:
        _check_number(flat, "env.n", int, where)
        if env["n"] < 1:
            raise ConfigError(f"{where}: env.n must be >= 1, got {env['n']!r}")
    if env["max_steps"] is not None:
        _check_number(flat, "env.max_steps", int, where)
    train = config["train"]
    batch = train["num_envs"] * train["num_steps"]
    if batch % train["num_minibatches"]:
        raise ConfigError(
            f"{where}: train.num_envs * train.num_steps = {batch} must be divisible by "
            f"train.num_minibatches = {train['num_minibatches']}"
        )
    if train["total_timesteps"] < batch:
        raise ConfigError(
            f"{where}: train.total_timesteps = {train['total_timesteps']} is less than one update "
            f"(num_envs * num_steps = {batch})"
        )
    return config


def env_kwargs(config: Dict[str, Any]) -> Dict[str, Any]:
    """Keyword arguments for ``cube_jax.make`` described by ``config["env"]``."""
    env = config["env"]
    kwargs: Dict[str, Any] = {"observation": env["observation"], "view_radius": env["view_radius"]}
    if env["scenario"] is not None:
        kwargs["scenario"] = env["scenario"]
    else:
        kwargs["n"] = env["n"]
        kwargs["pool_size"] = env["pool_size"]
    if env["max_steps"] is not None:
        kwargs["max_steps"] = env["max_steps"]
    return kwargs


def build(
    algo: str,
    config_files: Iterable[Path] = (),
    preset=None,
    overrides: Iterable[str] = (),
) -> Dict[str, Any]:
    """Layers DEFAULTS, configs/<algo>.yaml, extra files, presets and overrides; validated.

    ``preset`` is a name of ``configs/NAME.yaml`` or a list of names, applied in order.
    """
    config = merge(DEFAULTS, {"algo": algo}, "defaults")
    algo_file = CONFIG_DIR / f"{algo}.yaml"
    if algo_file.is_file():
        config = merge(config, load_yaml(algo_file), str(algo_file))
    for path in config_files:
        config = merge(config, load_yaml(Path(path)), str(path))
    presets = [] if preset is None else [preset] if isinstance(preset, str) else list(preset)
    for name in presets:
        preset_file = CONFIG_DIR / f"{name}.yaml"
        if not preset_file.is_file():
            names = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem not in ("ippo", "mappo"))
            raise ConfigError(f"--preset {name!r}: no file {preset_file}; available presets: {names}")
        config = merge(config, load_yaml(preset_file), str(preset_file))
    parsed = [(text, *parse_override(text)) for text in overrides]
    for text, key, value in parsed:
        _set(config, key, value, f"override {text!r}")
    resume = config["output"]["resume"]
    if resume is not None:
        # A resumed run continues with its own saved config; the command line may still change values.
        saved = _resumed_config_file(resume)
        config = merge(merge(DEFAULTS, {"algo": algo}, "defaults"), load_yaml(saved), str(saved))
        for text, key, value in parsed:
            _set(config, key, value, f"override {text!r}")
    return validate(config)


def _resumed_config_file(resume) -> Path:
    path = Path(resume)
    run_dir = path.parent if path.name == "checkpoint" else path
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"output.resume={str(resume)!r}: no config.yaml in run folder {run_dir}")
    return saved


def parse_args(algo: str, argv: Optional[List[str]] = None) -> Dict[str, Any]:
    """Command line of the baseline scripts -> validated config (exits with a message on bad input)."""
    parser = argparse.ArgumentParser(
        prog=f"baselines/{algo}.py",
        description=f"Train {algo.upper()} on CUBE. Overrides are key=value, e.g. env.scenario=hard train.num_envs=512.",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides key=value (see cube_jax/rl/config.py DEFAULTS)")
    parser.add_argument("--config", action="append", default=[], help="extra YAML config file(s), applied in order")
    parser.add_argument(
        "--preset", action="append", default=[],
        help="a preset file from configs/, e.g. --preset hard --preset gpu (repeatable, applied in order)",
    )
    args = parser.parse_args(argv)
    try:
        return build(algo, args.config, args.preset, args.overrides)
    except ConfigError as err:
        parser.error(str(err))
