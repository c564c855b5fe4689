"""The training config's schema: every key with its type, range and default, in typed,
frozen pydantic sections (:class:`Config` and its sections). :mod:`cube_jax.rl.config`
layers files and overrides onto it and re-exports these names."""
from __future__ import annotations

import re
from typing import Annotated, List, Literal, Optional

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cube_jax.core.observations import OBSERVATION_FORM_NAMES
from cube_jax.rl import algorithms
from cube_jax.rl.shaping import REACH_MODES


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
    critic_warmup: NonNegativeInt = Field(
        0, description="PPO only: the run's first updates in which the actor's parameters stay as they are and only "
        "the critic learns (the optimizer still reads the actor's gradients, so its moments are ready when the "
        "actor starts); for a critic that starts fresh under an actor carried over by train.init_from",
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
        "optimizer and update count; cube_jax/rl/transfer.py); or a saved policy alone, builtin:NAME or a "
        "checkpoint without runner/, whose policy network starts every seed (a PPO critic, mappo's too, starts "
        "fresh). A resumed run continues from its own checkpoint (null: a fresh start)",
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
    every: Optional[PositiveInt] = Field(
        None, description="also evaluate during training, every this many jitted calls, into evaluations.jsonl "
        "(and the trackers); null: only at the end")


class OutputSection(Section):
    root: Text = "runs"
    name: Optional[Text] = Field(None, description="run folder name; null: '<algo>-<env>-<time>'")
    gif: bool = True
    plot: bool = True
    checkpoint: bool = True
    checkpoint_every: PositiveInt = Field(5, description="save every this many jitted calls (and at the end)")
    video_every: Optional[PositiveInt] = Field(
        None, description="with eval.every: a GIF of the greedy policy on one fixed evaluation layout every this "
        "many evaluations, in <run>/videos/; null: none")
    resume: Optional[Text] = Field(None, description="a run folder or checkpoint folder to continue from")


class LoggerSection(Section):
    tensorboard: bool = Field(False, description="also write the metrics as TensorBoard event files, one folder per "
                              "seed under <run>/tensorboard/ (the tensorboard extra)")
    wandb: Optional[Literal["online", "offline"]] = Field(
        None, description="also log the metrics to Weights & Biases, one run per seed, files under <run>/wandb/ "
        "(the wandb extra); null: not at all")
    project: Text = Field("cube_jax", description="the W&B project")
    group: Optional[Text] = Field(None, description="the W&B group (null: the run folder's name)")
    tags: List[Text] = Field(default_factory=list, description="W&B tags")


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
        algorithms.CONFIG_ALGOS[0], description="; ".join(
            f"{a.name}: {a.description}" for a in algorithms.ALGORITHMS if not a.is_variant),
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
    logger: LoggerSection = Field(default_factory=LoggerSection)
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
        if self.output.video_every is not None and self.eval.every is None:
            raise _cross_field("output.video_every films every k-th evaluation during training: set eval.every too",
                               "output.video_every", "eval.every")
        return self
