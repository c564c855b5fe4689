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
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Dict, Iterable, Iterator, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cube_jax.core.observations import OBSERVATION_FORM_NAMES
from cube_jax.rl import algorithms
from cube_jax.rl.shaping import REACH_MODES

# The preset files: the algorithms' own (<config_algo>.yaml) and the --preset ones.
CONFIG_DIR = Path(str(resources.files("cube_jax.rl") / "presets"))
ALGO_FILES = algorithms.CONFIG_ALGOS  # <algo>.yaml; every other file of CONFIG_DIR is a preset


class ConfigError(ValueError):
    """A config file or override that names an unknown key or holds a bad value."""


# --- value types -------------------------------------------------------------------------------
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _yaml_float(value):
    # YAML 1.1 reads "3e-4" (no dot) as a string; accept the usual float spelling.
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    return value


def _text(value):
    # A run named 2024 is a name, not a number.
    return str(value) if type(value) in (int, float) else value


NonNegative = Annotated[NonNegativeFloat, BeforeValidator(_yaml_float)]
Fraction = Annotated[float, Field(ge=0, le=1), BeforeValidator(_yaml_float)]
Text = Annotated[str, BeforeValidator(_text)]


# Every observation form of the core is trainable: the actor flattens a form with more than
# one feature axis ("grid") before its MLP (cube_jax/rl/networks.py).
ObservationForm = Literal[OBSERVATION_FORM_NAMES]  # type: ignore[valid-type]
ReachMode = Literal[REACH_MODES]  # type: ignore[valid-type]
AlgoName = Literal[algorithms.CONFIG_ALGOS]  # type: ignore[valid-type]


def _cross_field(message: str, *keys: str) -> PydanticCustomError:
    """An error about several keys at once; ``keys`` let the message name where each came from."""
    return PydanticCustomError("cross_field", message, {"keys": keys})


# --- the schema --------------------------------------------------------------------------------
class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class EnvSection(Section):
    scenario: Optional[Text] = Field("easy", description="a named scenario or a YAML path; null: the n-curriculum")
    n: Optional[PositiveInt] = Field(None, description="team size of the n-curriculum (when scenario is null)")
    num_agents: Optional[PositiveInt] = Field(None, description="a scenario's first agents, or coop2's team size")
    observation: ObservationForm = Field("vector", description="per-agent observation form of cube_jax.make")
    view_radius: PositiveInt = 3
    pool_size: NonNegativeInt = Field(4096, description="n-curriculum and coop2: pre-drawn layouts for cheap "
                                                        "auto-resets (never a test layout of the suite)")
    max_steps: Optional[PositiveInt] = Field(None, description="null: the scenario's or curriculum's own limit")

    @model_validator(mode="after")
    def _one_world(self):
        if (self.scenario is None) == (self.n is None):
            raise _cross_field(
                f"set exactly one of env.scenario (e.g. easy) and env.n (e.g. 4); got scenario={self.scenario!r}, "
                f"n={self.n!r} (use env.scenario=null env.n=4 for the curriculum)",
                "env.scenario", "env.n",
            )
        return self


class NetworkSection(Section):
    hidden: PositiveInt = 64
    layers: PositiveInt = 2
    activation: Literal["tanh", "relu"] = "tanh"
    critic_input: Literal["obs_world", "world", "grid"] = Field(
        "world",
        description="MAPPO only: 'obs_world' (own observation + compact world vector), 'world' (world vector + "
        "agent id) or 'grid' (five-channel grid + agent id)",
    )
    recurrent: bool = Field(
        False, description="PPO only (ippo, mappo): GRU actor and critic (a Dense embedding of width hidden, a GRU "
        "of gru_hidden units whose state is zeroed where an episode starts, then layers hidden layers and the "
        "head); PPO's minibatches then split train.num_envs, which train.num_minibatches must divide",
    )
    gru_hidden: PositiveInt = Field(128, description="recurrent only: units of the GRU's hidden state")
    blocked_moves: bool = Field(
        False, description="PPO only (ippo, mappo), vector and egocentric observations: every agent's observation is "
        "followed by 4 features, the one-hot direction of its last move when that move left it on its cell (zeros "
        "after a STAY, a move that took it elsewhere, or a reset); the actor and the critic read them, and the saved "
        "policy keeps its last actions and positions to compute them (cube_jax.rl.policy.blocked_features)",
    )


class TrainSection(Section):
    """The rollout and budget of every algorithm; the optimisation keys from update_epochs to
    max_grad_norm are PPO's (ippo, mappo); pqn_vdn reads its own from the pqn section."""

    num_envs: PositiveInt = 64
    num_steps: PositiveInt = Field(32, description="rollout length per update")
    total_timesteps: PositiveInt = Field(2_000_000, description="env steps per seed")
    update_epochs: PositiveInt = Field(4, description="PPO only")
    num_minibatches: PositiveInt = Field(4, description="PPO only: minibatches of num_envs * num_steps steps")
    lr: NonNegative = Field(2.5e-3, description="PPO only")
    anneal_lr: bool = Field(True, description="PPO only")
    gamma: Fraction = 0.99
    gae_lambda: Fraction = Field(0.95, description="PPO only")
    clip_eps: NonNegative = Field(0.2, description="PPO only")
    ent_coef: NonNegative = Field(0.01, description="PPO only")
    ent_coef_final: Optional[NonNegative] = Field(
        None, description="PPO only: the entropy coefficient falls linearly from ent_coef to this value over "
        "the budget, as the learning rate does with anneal_lr (null: ent_coef throughout)",
    )
    vf_coef: NonNegative = Field(0.5, description="PPO only")
    max_grad_norm: NonNegative = Field(0.5, description="PPO only")
    num_devices: NonNegativeInt = Field(0, description="devices in the env-batch mesh; 0: every visible device")
    cpu_devices: NonNegativeInt = Field(
        0, description="CPU only: host devices to split the machine into, each a core stepping its share of "
        "the environments, data parallel (gradients averaged over devices at every minibatch step); 0: one per "
        "usable core, at most 8 and as many as train.num_envs splits into whole minibatches; 1: one device whose "
        "threads share the cores. Left alone when XLA_FLAGS sets --xla_force_host_platform_device_count",
    )
    seed_axis: Literal["auto", "vmap", "map"] = Field(
        "auto", description="how the seeds of a run share each jitted call: vmap batches them into every "
        "operation (an accelerator's way), map runs them one after another (lax.map; faster on the CPU, where "
        "an update vmapped over four seeds took 1.4 times as long per seed as mapped); auto: map on the CPU, "
        "vmap elsewhere",
    )
    updates_per_call: PositiveInt = Field(10, description="updates per jitted call (progress, checkpoint granularity)")
    stall_seconds: NonNegativeInt = Field(120, description="CPU only: the scripts stop a run idle this long (0: never)")
    stagger_start: bool = Field(True, description="first episodes start at random step counts (no lockstep)")
    target_success: Optional[Fraction] = Field(
        0.9, description="stop once every seed's evaluated success (eval.greedy's way of acting, eval.episodes "
        "episodes, the papers' reward) reaches it (null: never)",
    )
    target_check_every: PositiveInt = Field(5, description="jitted calls between two checks of target_success")
    init_from: Optional[Text] = Field(
        None, description="ippo and pqn_vdn: a run folder whose parameters start this run, at another team size "
        "too (seed i from its seed i mod S; the first layer's inputs matched by feature, new ones from 0; a fresh "
        "optimizer and update count; cube_jax/rl/transfer.py). A resumed run continues from its own checkpoint "
        "(null: a fresh start)",
    )
    max_seconds: Optional[PositiveInt] = Field(
        None, description="a wall-clock limit: stop after the first jitted call that ends this many seconds into "
        "training (a resumed run counts its earlier seconds), then evaluate and save as at the budget's end "
        "(null: no limit)",
    )

    @model_validator(mode="after")
    def _at_least_one_update(self):
        batch = self.num_envs * self.num_steps
        if self.total_timesteps < batch:
            raise _cross_field(
                f"train.total_timesteps = {self.total_timesteps} is less than one update "
                f"(train.num_envs * train.num_steps = {batch})",
                "train.total_timesteps", "train.num_envs", "train.num_steps",
            )
        if self.cpu_devices and self.num_envs % self.cpu_devices:
            raise _cross_field(
                f"train.num_envs = {self.num_envs} must be divisible by train.cpu_devices = {self.cpu_devices} "
                "(each CPU device steps an equal share of the environments; 0 picks a count that divides)",
                "train.num_envs", "train.cpu_devices",
            )
        return self


class PQNSection(Section):
    """PQN-VDN (algo=pqn_vdn): Q-learning without replay buffer or target network. The
    rollout, budget, gamma and staggered starts are train's; these are its own keys."""

    epsilon_start: Fraction = Field(1.0, description="chance that an agent acts at random at the first update")
    epsilon_finish: Fraction = Field(0.05, description="that chance once the annealing has ended")
    epsilon_anneal_fraction: Fraction = Field(
        0.25, description="share of the budget (train.total_timesteps) over which epsilon falls linearly "
        "from epsilon_start to epsilon_finish (0: epsilon_finish from the start)",
    )
    lambda_: Fraction = Field(
        0.65, description="lambda of the Q(lambda) targets: 0 bootstraps every step (one-step Q-learning), 1 sums "
        "the rewards to the end of the rollout or the episode",
    )
    num_epochs: PositiveInt = Field(2, description="passes over each rollout")
    num_minibatches: PositiveInt = Field(
        4, description="minibatches per pass; a sample is one env step of the whole team (num_envs * num_steps)"
    )
    lr: NonNegative = 5e-4
    max_grad_norm: NonNegative = 10.0
    anneal_lr: bool = Field(True, description="lr falls linearly to 0 over the budget")
    eval_epsilon: Fraction = Field(
        0.05, description="evaluation's sampled play is epsilon-greedy with this epsilon (greedy play: argmax Q); "
        "saved with the policy",
    )


class ShapingSection(Section):
    enabled: bool = Field(False, description="the papers' reward unless switched on")
    coef: NonNegative = Field(0.1, description="scale of the whole potential-based term")
    align_weight: NonNegative = Field(0.0, description="weight of the left-face quorum alignment")
    reach_weight: NonNegative = Field(0.0, description="weight of the nearest agents' distance to each left face")
    reach: ReachMode = Field(
        "quorum", description="the reach term: 'quorum' (each block's nearest quorum, summed over blocks) or "
        "'nearest' (each agent's distance to the nearest alive block's left face) or 'focus' (as 'nearest', "
        "except that the heaviest alive block's weight in nearest agents count their distance to its left face)",
    )
    dense_coef: NonNegative = Field(
        0.0, description="scale of a per-step reward phi(s') - align_weight (<= 0, 0 once all is delivered)"
    )


class EvalSection(Section):
    episodes: PositiveInt = 128
    greedy: bool = Field(True, description="report greedy play (true) or sampled play (false) as 'eval'")


class OutputSection(Section):
    root: Text = "runs"
    name: Optional[Text] = Field(None, description="run folder name; null: '<algo>-<env>-<time>'")
    gif: bool = True
    plot: bool = True
    checkpoint: bool = True
    checkpoint_every: PositiveInt = Field(5, description="save every this many jitted calls (and at the end)")
    resume: Optional[Text] = Field(None, description="a run folder or checkpoint folder to continue from")


class DistributedSection(Section):
    coordinator: Optional[Text] = Field(
        None, description="'host:port' of process 0 starts jax.distributed; 'auto': the cluster launcher's "
        "environment (SLURM, Open MPI); null: one process"
    )
    num_processes: PositiveInt = 1
    process_id: NonNegativeInt = 0
    timeout_s: PositiveInt = Field(
        120, description="seconds a process waits for the coordinator and the others before it fails"
    )

    @model_validator(mode="after")
    def _process_in_range(self):
        address = self.coordinator
        if address is not None and address != "auto":
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise _cross_field(
                    f"distributed.coordinator = {address!r} must be 'host:port' (port 1-65535), 'auto' or null",
                    "distributed.coordinator",
                )
        if self.process_id >= self.num_processes:
            raise _cross_field(
                f"distributed.process_id = {self.process_id} must be less than distributed.num_processes = "
                f"{self.num_processes}",
                "distributed.process_id", "distributed.num_processes",
            )
        return self


class Config(Section):
    """A whole training run. Immutable; ``model_dump()`` is the plain tree saved as config.yaml."""

    algo: AlgoName = Field(
        "ippo", description="PPO whose critic sees the agent's own observation (ippo) or the world (mappo), or "
        "Q-learning of the agents' summed action values (pqn_vdn)",
    )
    seed: NonNegativeInt = 0
    num_seeds: PositiveInt = Field(1, description="seeds trained at once, in one program (train.seed_axis)")
    env: EnvSection = Field(default_factory=EnvSection)
    network: NetworkSection = Field(default_factory=NetworkSection)
    train: TrainSection = Field(default_factory=TrainSection)
    pqn: PQNSection = Field(default_factory=PQNSection)
    shaping: ShapingSection = Field(default_factory=ShapingSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    output: OutputSection = Field(default_factory=OutputSection)
    distributed: DistributedSection = Field(default_factory=DistributedSection)

    @model_validator(mode="after")
    def _whole_minibatches(self):
        # Only the algorithm being trained has its minibatches checked: PPO splits agent
        # steps, PQN-VDN team steps, both out of num_envs * num_steps env steps.
        t = self.train
        batch = t.num_envs * t.num_steps
        learner = algorithms.of(self)
        key, minibatches = learner.minibatches_key, learner.minibatches(self)
        if batch % minibatches:
            raise _cross_field(
                f"train.num_envs * train.num_steps = {batch} must be divisible by {key} = {minibatches}",
                "train.num_envs", "train.num_steps", key,
            )
        ppo_names = " and ".join(a.name for a in algorithms.ALGORITHMS if a.ppo_options and not a.is_variant)
        if self.network.blocked_moves:
            if not learner.ppo_options:
                raise _cross_field(f"network.blocked_moves=true is for {ppo_names}; {self.algo}'s Q-network reads "
                                   "the observation alone", "network.blocked_moves", "algo")
            if self.env.observation == "grid":
                raise _cross_field("network.blocked_moves=true appends features to a vector; env.observation=grid is "
                                   "a K x K x 6 grid (use vector or egocentric)", "network.blocked_moves", "env.observation")
        if self.network.recurrent:
            if not learner.ppo_options:
                raise _cross_field(f"network.recurrent=true is for {ppo_names}; {self.algo}'s Q-network is "
                                   "feedforward", "network.recurrent", "algo")
            if t.num_envs % t.num_minibatches:
                raise _cross_field(
                    f"train.num_minibatches = {t.num_minibatches} must divide train.num_envs = {t.num_envs} with "
                    "network.recurrent=true: a recurrent policy's minibatches are whole environments' sequences",
                    "train.num_minibatches", "train.num_envs", "network.recurrent",
                )
        return self


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
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
        # A resumed run continues with its own saved config; the command line may still change values.
        saved = _resumed_config_file(resume)
        layers = _Layers(algo)
        layers.apply(load_yaml(saved), str(saved))
        for where, key, value in parsed:
            layers.set(key, value, where)
    config = layers.validate()
    if config.train.init_from is not None and config.output.resume is None:
        _check_init_from(config)
    return config


def _check_init_from(config: Config) -> None:
    """train.init_from names a saved run whose network can start this one."""
    from cube_jax.rl.transfer import TransferError, check_compatible, read_source

    try:
        _, meta = read_source(config.train.init_from)
        check_compatible(meta, config.algo, config.network.model_dump(), config.env.observation,
                         config.train.init_from, config.env.view_radius)
    except TransferError as err:
        raise ConfigError(str(err)) from None


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
