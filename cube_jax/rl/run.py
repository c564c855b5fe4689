"""The baseline driver: trains, logs, checkpoints, evaluates and writes the run folder.

The driver knows a :class:`~cube_jax.rl.trainer.Trainer` only through its interface
(``config.algo``'s :class:`~cube_jax.rl.algorithms.Algorithm` builds it; IPPO and MAPPO
are :class:`~cube_jax.rl.ppo.PPO`). :func:`train_and_report` is a sequence of named steps:
:func:`set_up`, :func:`resume`, :func:`train`, :func:`evaluate`, :func:`save`, :func:`report`.
Updates run in jitted chunks of ``train.updates_per_call``, each chunk
:func:`~cube_jax.rl.trainer.update_chunk` (the program ``make_train`` runs) over every
seed (vmapped, or one seed after another on the CPU: ``train.seed_axis``), so progress
shows while it runs and a checkpoint can be written between chunks. Every chunk is one
compiled program: a partial last chunk skips its surplus updates with ``lax.cond`` instead
of compiling a shorter scan. The env batch is sharded over a 1-D device mesh (axis
``"env"``); the rest of the state is replicated. On a mesh of several devices a trainer
that supports it (IPPO, MAPPO, PQN-VDN) runs data parallel: the chunk is a ``shard_map``
in which each device updates its own share of the environments with
:func:`~cube_jax.rl.trainer.data_parallel`'s copy of the trainer, averaging gradients
with the others at every minibatch step. On the CPU, ``train.cpu_devices`` splits the
host into such devices, one per core (:func:`configure_cpu_devices`, which the baseline
scripts call before JAX starts). The processes, host devices and mesh are set up by
:mod:`cube_jax.rl.devices` (its names are importable from here too). With ``distributed.coordinator`` set,
``jax.distributed`` joins several hosts first and the mesh spans all their devices.

Results reach the host through ``fetch(tree, what)`` (default ``jax.device_get``); the
baseline scripts pass one that guards against a stalled CPU runtime. The driver reports
through :mod:`logging` (one record per chunk) and never ends the process.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from cube_jax.rl import algorithms, checkpoint, outputs, transfer
from cube_jax.rl.trackers import Trackers
from cube_jax.rl.config import Config
from cube_jax.rl.devices import (HOST_DEVICES_FLAG, MAX_AUTO_CPU_DEVICES, MESH_AXIS, DistributedError,  # noqa: F401
                                  configure_cpu_devices, cpu_device_count, init_distributed, is_primary, make_mesh,
                                  state_shardings)
from cube_jax.rl.trainer import Trainer, data_parallel, over_seeds, seed_axis, update_chunk

log = logging.getLogger(__name__)


# config.algo -> its trainer class, as the algorithm registry names them
TRAINERS: Dict[str, Callable[[Config], Trainer]] = {
    name: algorithms.get(name).trainer_class() for name in algorithms.CONFIG_ALGOS
}
Fetch = Callable[[Any, str], Any]  # fetch(device tree, what it is) -> the tree on the host


def device_get(tree, what: str):
    """The default ``fetch``: ``jax.device_get``."""
    return jax.device_get(tree)


class Session:
    """Compiled pieces of one training run over ``num_seeds`` seeds on a device mesh."""

    def __init__(self, config: Config, mesh: Optional[Mesh] = None, trainer: Optional[Trainer] = None,
                 fetch: Fetch = device_get):
        self.config = config
        self.trainer = trainer if trainer is not None else algorithms.of(config).make_trainer(config)
        self.fetch_fn = fetch
        self.mesh = mesh if mesh is not None else make_mesh(config)
        self.num_seeds = config.num_seeds
        self.keys = jax.random.split(jax.random.PRNGKey(config.seed), self.num_seeds)
        self.seed_axis = seed_axis(config.train.seed_axis)
        init = over_seeds(self.trainer.init, self.seed_axis)
        abstract = jax.eval_shape(init, self.keys)
        self.shardings = state_shardings(self.mesh, self.trainer, abstract)
        self.abstract = jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), abstract, self.shardings
        )
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self._init = jax.jit(init, out_shardings=self.shardings)
        self.updates_per_call = config.train.updates_per_call
        count = self.mesh.devices.size
        # data parallel where the trainer supports it: one program per device over its share of
        # the environments, gradients averaged (a global program over the sharded batch shuffled
        # every minibatch across the devices, and took twice as long on two CPU devices as on one)
        self.data_parallel = count > 1 and hasattr(self.trainer, "axis_name")
        if self.data_parallel:
            specs = jax.tree.map(lambda sharding: sharding.spec, self.shardings)
            chunk = jax.shard_map(functools.partial(self._chunk_fn, data_parallel(self.trainer, MESH_AXIS, count)),
                                  mesh=self.mesh, in_specs=(specs, PartitionSpec(), PartitionSpec()),
                                  out_specs=(specs, PartitionSpec()),
                                  # the step's regions (lax.cond with zeros in the untaken branch)
                                  # do not type-check device-varying values; what leaves replicated
                                  # (parameters, metrics) is averaged over the devices first
                                  check_vma=False)
        else:
            chunk = functools.partial(self._chunk_fn, self.trainer)
        self._chunk = jax.jit(
            chunk, in_shardings=(self.shardings, self.replicated, self.replicated),
            out_shardings=(self.shardings, self.replicated), donate_argnums=0,
        )
        # replicated: every process of a distributed run gets the whole evaluation
        self._evaluate = jax.jit(over_seeds(self._evaluate_fn, self.seed_axis), out_shardings=self.replicated)

    def init(self):
        return self._init(self.keys)

    def _chunk_fn(self, trainer, state, active: jax.Array, num_updates: jax.Array):
        """Every seed's :func:`update_chunk` of ``trainer`` (the session's, or inside the
        ``shard_map`` its data-parallel copy); metrics come back as ``{name: [updates_per_call, seeds]}``."""
        chunk = over_seeds(lambda s: update_chunk(trainer, s, active, num_updates, self.updates_per_call),
                           self.seed_axis)
        state, metrics = chunk(state)
        return state, jax.tree.map(lambda m: jnp.swapaxes(m, 0, 1), metrics)

    def run_updates(self, state, count: int):
        """(state, metrics {name: float[count, seeds]}) after ``count`` (<= updates_per_call) more updates."""
        if not 1 <= count <= self.updates_per_call:
            raise ValueError(f"run_updates: count={count} must be in 1..train.updates_per_call={self.updates_per_call}")
        state, metrics = self._chunk(state, np.int32(count), np.int32(self.trainer.num_updates))
        return state, jax.tree.map(lambda m: m[:count], metrics)

    def _evaluate_fn(self, policy_params, key):
        return self.trainer.evaluate(policy_params, key, self.config.eval.episodes)

    def evaluate(self, state, key: jax.Array):
        """(greedy, sampled, film) per seed, on the host: evaluations {name: float[seeds, ...]}
        and every seed's first greedy episode (states [seeds, T + 1, ...], done bool[seeds, T + 1])."""
        keys = jax.random.split(key, self.num_seeds)
        return self.fetch(self._evaluate(self.trainer.policy_params(state), keys), "the evaluation")

    def evaluate_success(self, state, key: jax.Array) -> np.ndarray:
        """float[seeds]: each seed's success rate in the configured way of acting (``eval.greedy``),
        from the same evaluation as :meth:`evaluate`; what ``train.target_success`` is checked against."""
        greedy, sampled, _ = self.fetch(self._evaluate(self.trainer.policy_params(state),
                                                       jax.random.split(key, self.num_seeds)), "the target check")
        return np.asarray((greedy if self.config.eval.greedy else sampled)["success_rate"], np.float64)

    def fetch(self, tree, what: str):
        """``tree`` on the host, through the session's ``fetch`` hook."""
        return self.fetch_fn(tree, what)

    def updates_done(self, state) -> np.ndarray:
        """int[seeds]: updates each seed has made."""
        return np.asarray(jax.device_get(self.trainer.updates_done(state)))


def _policy_meta(session: Session, state, seed_index: int) -> Dict[str, Any]:
    trainer, config = session.trainer, session.config
    updates = int(session.updates_done(state)[seed_index])
    return {
        "algo": config.algo,
        "env_kwargs": trainer.env_kwargs,
        "network": config.network.model_dump(),
        "observation_shape": list(trainer.env.observation_shape),
        "num_actions": trainer.env.num_actions,
        "seed_index": seed_index,
        "seed": config.seed,
        "updates": updates,
        "env_steps": updates * trainer.steps_per_update,
    }


def save(session: Session, state, run_dir: Path, seed_index: int = 0) -> Path:
    policy = jax.device_get(jax.tree.map(lambda x: x[seed_index], session.trainer.policy_params(state)))
    return checkpoint.save_checkpoint(
        run_dir / outputs.CHECKPOINT_DIR, state, policy, _policy_meta(session, state, seed_index),
    )


def every_seed_at_target(per_seed: np.ndarray, target: Optional[float]) -> bool:
    """True when every seed's success rate ``float[S]`` has reached ``target``.

    The run stops only then, so a stalled seed keeps the run going until the budget ends
    instead of hiding behind a better one; a NaN (nothing measured) has not reached it.

    >>> every_seed_at_target(np.array([0.95, 0.91]), 0.9), every_seed_at_target(np.array([1.0, 0.5]), 0.9)
    (True, False)
    """
    per_seed = np.asarray(per_seed, np.float64)
    return target is not None and bool(np.all(np.isfinite(per_seed) & (per_seed >= target)))


def _seed_value(values: np.ndarray, seed_index: int):
    """One seed's value: a float, or a list for per-block rates float[seeds, B]."""
    value = np.asarray(values, np.float64)[seed_index]
    return float(value) if value.ndim == 0 else [float(x) for x in value]


def _seed_mean(values: np.ndarray):
    """Mean over the seed axis: a float, or a list for per-block rates float[seeds, B]."""
    mean = np.mean(np.asarray(values, np.float64), axis=0)
    return float(mean) if mean.ndim == 0 else [float(x) for x in mean]


def open_run(config: Config) -> Path:
    """Joins the other hosts (``distributed``), then creates or reopens the run folder."""
    init_distributed(config)
    when = None
    if jax.process_count() > 1:  # every process names the folder by process 0's clock
        when = float(multihost_utils.broadcast_one_to_all(np.float64(time.time())))
    run_dir = outputs.make_run_dir(config, when, write=is_primary())
    log.info("run folder: %s%s", run_dir, "" if is_primary() else
             f" (written by process 0; this is process {jax.process_index()} of {jax.process_count()})")
    return run_dir


@dataclasses.dataclass
class Progress:
    """Where training stands: the state, the updates done, the clock and why it stopped."""

    state: Any
    done_updates: int = 0
    wall_before: float = 0.0  # seconds of training before this process (a resumed run's)
    wall: float = 0.0  # seconds of training in all, once ended
    steady_rate: Optional[float] = None  # env steps per second after the first (compiling) chunk
    reached_target_at: Optional[float] = None
    stopped: str = "budget"  # what ended the loop: the budget, the target or train.max_seconds
    calls: int = 0
    rows: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # the last chunk's metric rows


def train_and_report(config: Config, run_dir: Optional[Path] = None, fetch: Fetch = device_get,
                     trainer: Optional[Trainer] = None) -> Dict[str, Any]:
    """Runs the whole baseline described by ``config``; returns the summary it writes.

    ``run_dir`` is :func:`open_run`'s folder (opened here when not given); ``fetch`` brings
    each chunk's metrics and the evaluation to the host; ``trainer`` defaults to the one of
    ``config.algo``'s :class:`~cube_jax.rl.algorithms.Algorithm`.
    """
    if run_dir is None:
        run_dir = open_run(config)
    session = set_up(config, trainer, fetch)
    progress = resume(session, run_dir)
    trackers = Trackers(config, run_dir, session.num_seeds) if is_primary() else None
    summary = None
    try:
        progress = train(session, progress, run_dir, trackers)
        summary, film = evaluate(session, progress, run_dir)
    finally:
        if trackers is not None:
            trackers.close(summary)
    if config.output.checkpoint:
        save(session, progress.state, run_dir, summary["policy_seed_index"])
        summary["checkpoint"] = str(run_dir / outputs.CHECKPOINT_DIR)
    if is_primary():
        report(session, summary, film, run_dir)
    else:
        log.info(outputs.eval_line(summary))
    return summary


def set_up(config: Config, trainer: Optional[Trainer], fetch: Fetch) -> Session:
    """The run's compiled session, announced in the log."""
    session = Session(config, trainer=trainer, fetch=fetch)
    trainer, train_cfg = session.trainer, config.train
    log.info(
        "%s on %r; %d seed(s), %d envs x %d steps per update, %d updates, mesh of %d device(s) %s",
        config.algo.upper(), trainer.env, session.num_seeds, train_cfg.num_envs, train_cfg.num_steps,
        trainer.num_updates, session.mesh.devices.size, [d.platform for d in session.mesh.devices.flat][:1],
    )
    return session


def resume(session: Session, run_dir: Path) -> Progress:
    """The state training starts from: fresh, another run's networks (``train.init_from``), or
    this run's last checkpoint (``output.resume``, its metrics cut back to that checkpoint)."""
    config, trainer = session.config, session.trainer
    state = session.init()
    if config.output.resume is None:
        if config.train.init_from is not None:
            state, line = transfer.init_from(config.train.init_from, state, algo=config.algo,
                                             network=config.network.model_dump(), observation=config.env.observation,
                                             num_agents=trainer.env.cfg.num_agents,
                                             num_blocks=trainer.env.cfg.num_blocks,
                                             view_radius=config.env.view_radius)
            log.info("train.init_from: %s", line)
        return Progress(state)
    state = checkpoint.restore_runner(run_dir / outputs.CHECKPOINT_DIR, session.abstract)
    done_updates = int(session.updates_done(state)[0])
    previous = [r for r in outputs.read_metrics(run_dir) if r["update"] <= done_updates]
    if is_primary():
        with open(run_dir / outputs.METRICS_FILE, "w") as f:  # drop rows written after the checkpoint
            f.writelines(json.dumps(r) + "\n" for r in previous)
        evaluations = run_dir / outputs.EVALUATIONS_FILE
        if evaluations.is_file():  # and evaluations (eval.every) made after it
            kept = [line for line in evaluations.read_text().splitlines()
                    if line.strip() and json.loads(line)["update"] <= done_updates]
            evaluations.write_text("".join(line + "\n" for line in kept))
    log.info("resumed from %s at update %d", run_dir / outputs.CHECKPOINT_DIR, done_updates)
    # checkpoints fall after whole chunks, so the chunks done are known: target checks and
    # checkpoints come at the same updates as in the run never interrupted
    calls = done_updates // config.train.updates_per_call
    return Progress(state, done_updates, previous[-1]["wall_seconds"] if previous else 0.0, calls=calls)


def train(session: Session, progress: Progress, run_dir: Path, trackers: Optional[Trackers] = None) -> Progress:
    """Updates in jitted chunks until the budget, the target or ``train.max_seconds`` ends
    them, writing the metrics (to ``trackers`` too) and the checkpoints as they come."""
    config, trainer, out = session.config, session.trainer, session.config.output
    steps_per_update = trainer.steps_per_update * session.num_seeds
    start = time.perf_counter()
    steady_start, steady_steps = None, 0
    while progress.done_updates < trainer.num_updates:
        count = min(config.train.updates_per_call, trainer.num_updates - progress.done_updates)
        t0 = time.perf_counter()
        progress.state, metrics = session.run_updates(progress.state, count)
        done = progress.done_updates
        metrics = session.fetch(metrics, f"updates {done + 1}-{done + count}")
        now = time.perf_counter()
        if steady_start is None:
            steady_start = now
        else:
            steady_steps += count * steps_per_update
        elapsed = progress.wall_before + now - start
        progress.rows = outputs.metric_rows(metrics, done, steps_per_update, elapsed)
        if is_primary():
            outputs.append_metrics(run_dir, progress.rows)
        if trackers is not None:
            trackers.log(progress.rows)
        progress.done_updates += count
        progress.calls += 1
        rate = count * steps_per_update / max(now - t0, 1e-9)
        log.info(outputs.progress_line(outputs.chunk_row(progress.rows), trainer.num_updates, rate))
        stopping = _stop_reason(session, progress, elapsed)
        if config.eval.every is not None and progress.calls % config.eval.every == 0:
            evaluate_during(session, progress, run_dir, trackers)
        if out.checkpoint and (progress.calls % out.checkpoint_every == 0 or stopping):
            save(session, progress.state, run_dir)
        if stopping:
            progress.stopped = stopping
            break
    progress.wall = progress.wall_before + time.perf_counter() - start
    progress.steady_rate = steady_steps / (time.perf_counter() - steady_start) if steady_steps else None
    return progress


def evaluate_during(session: Session, progress: Progress, run_dir: Path, trackers: Optional[Trackers] = None) -> None:
    """An evaluation during training (``eval.every``): every seed greedy and sampled on the
    same ``eval.episodes`` layouts each time, one line of ``evaluations.jsonl`` (and the
    trackers' ``eval/`` metrics), and every ``output.video_every``-th time a GIF of seed 0's
    greedy play on the first of those layouts (``videos/update-<updates>.gif``). Its key is
    fixed, so a resumed run evaluates and films exactly as the run never interrupted."""
    config, trainer = session.config, session.trainer
    greedy, sampled, film = session.evaluate(progress.state, jax.random.PRNGKey(config.seed + 30_000))
    steps = progress.done_updates * trainer.steps_per_update * session.num_seeds  # as metrics.jsonl counts them
    row = {"update": progress.done_updates, "env_steps": steps}
    for way, values in (("greedy", greedy), ("sampled", sampled)):
        for name in ("success_rate", "blocks_delivered_frac"):
            per_seed = np.asarray(values[name], np.float64)
            row[f"{way}_{name}"] = float(per_seed.mean())
            row[f"{way}_{name}_per_seed"] = per_seed.tolist()
    if not is_primary():
        return
    with open(run_dir / outputs.EVALUATIONS_FILE, "a") as f:
        f.write(json.dumps(row) + "\n")
    if trackers is not None:
        trackers.log_evaluation(row)
    log.info("evaluation at update %d: greedy success %.3f, sampled %.3f (mean over seeds)", progress.done_updates,
             row["greedy_success_rate"], row["sampled_success_rate"])
    count = progress.calls // config.eval.every
    if config.output.video_every is not None and count % config.output.video_every == 0:
        states, done = jax.tree.map(lambda x: x[0], film)
        path = run_dir / outputs.VIDEO_DIR / f"update-{progress.done_updates:07d}.gif"
        path.parent.mkdir(exist_ok=True)
        outputs.write_gif(states, done, path)


def _stop_reason(session: Session, progress: Progress, elapsed: float) -> Optional[str]:
    """``"target"`` once every seed reaches ``train.target_success`` (checked every
    ``train.target_check_every`` chunks), ``"max_seconds"`` past the wall-clock limit, else None."""
    config, train_cfg, num_updates = session.config, session.config.train, session.trainer.num_updates
    if train_cfg.target_success is not None and progress.calls % train_cfg.target_check_every == 0:
        checked = session.evaluate_success(progress.state, jax.random.PRNGKey(config.seed + 20_000))
        at_target = every_seed_at_target(checked, train_cfg.target_success)
        log.info("%s success (%d episodes, the papers' reward) per seed [%s]%s",
                 "greedy" if config.eval.greedy else "sampled", config.eval.episodes,
                 outputs.per_seed_text(checked),
                 f": every seed >= {train_cfg.target_success} after {elapsed:.1f} s; stopping" if at_target else "")
        if at_target:
            progress.reached_target_at = elapsed
            return "target"
    out_of_time = (train_cfg.max_seconds is not None and elapsed >= train_cfg.max_seconds
                   and progress.done_updates < num_updates)
    if train_cfg.max_seconds is not None and jax.process_count() > 1:  # every process stops at the same update
        out_of_time = bool(multihost_utils.broadcast_one_to_all(np.bool_(out_of_time)))
    if out_of_time:
        log.info("%.1f s of training, past train.max_seconds = %d; stopping at update %d of %d",
                 elapsed, train_cfg.max_seconds, progress.done_updates, num_updates)
        return "max_seconds"
    return None


def evaluate(session: Session, progress: Progress, run_dir: Path) -> Tuple[Dict[str, Any], Any]:
    """``(summary, film)``: every seed evaluated in both ways of acting, the best seed chosen
    (the saved policy), and its first greedy episode for the GIF."""
    config, trainer = session.config, session.trainer
    greedy, sampled, film = session.evaluate(progress.state, jax.random.PRNGKey(config.seed + 10_000))
    other = "sampled" if config.eval.greedy else "greedy"
    if not config.eval.greedy:  # the configured way of acting is what "eval" reports
        greedy, sampled = sampled, greedy
    # The saved policy is the seed that plays best in the configured way of acting, ties
    # broken by the other way and then by blocks delivered.
    best = int(np.argmax(greedy["success_rate"] + 1e-2 * sampled["success_rate"]
                         + 1e-4 * greedy["blocks_delivered_frac"]))
    env_steps = progress.done_updates * trainer.steps_per_update * session.num_seeds
    summary = {
        "algo": config.algo,
        "env": trainer.env_kwargs,
        "env_steps": int(env_steps),
        "updates": int(progress.done_updates),
        "wall_seconds": round(progress.wall, 2),
        "steps_per_second": round(env_steps / progress.wall, 1),
        "steady_steps_per_second": None if progress.steady_rate is None else round(progress.steady_rate, 1),
        "seconds_to_target_success": (None if progress.reached_target_at is None
                                      else round(progress.reached_target_at, 2)),
        "stopped": progress.stopped,
        "num_seeds": session.num_seeds,
        "devices": int(session.mesh.devices.size),
        # "eval" is the saved policy's (the best seed's); "eval_mean_over_seeds" averages all seeds.
        "eval": {k: _seed_value(v, best) for k, v in greedy.items()} | {
            "episodes": config.eval.episodes,
            "greedy": config.eval.greedy,
            "block_weights": list(trainer.env.block_weights),
        },
        f"eval_{other}": {k: _seed_value(v, best) for k, v in sampled.items()},
        "eval_mean_over_seeds": {k: _seed_mean(v) for k, v in greedy.items()},
        "eval_per_seed": {k: np.asarray(v).tolist() for k, v in greedy.items()},
        f"eval_{other}_per_seed": {k: np.asarray(v).tolist() for k, v in sampled.items()},
        "policy_seed_index": best,
        "final_train": ({k: v for k, v in progress.rows[-1].items() if not k.endswith("_per_seed")}
                        if progress.calls else None),
        "run_dir": str(run_dir),
    }
    return summary, film


def report(session: Session, summary: Dict[str, Any], film, run_dir: Path) -> None:
    """The run folder's learning curve, GIF of the saved policy and summary, and the log's last lines."""
    config, trainer, out = session.config, session.trainer, session.config.output
    if out.plot:
        title = f"{config.algo.upper()} {trainer.env.name}: training episodes ({algorithms.of(config).exploration})"
        outputs.plot_learning_curve(run_dir, title)
    if out.gif:
        best = summary["policy_seed_index"]
        states, done = jax.tree.map(lambda x: x[best], film)  # the best seed's first greedy episode
        outputs.write_gif(states, done, run_dir / outputs.GIF_FILE)
    outputs.write_summary(run_dir, summary)
    log.info("done: %s env steps in %.1f s (%s steps/s); outputs in %s",
             f"{summary['env_steps']:,}", summary["wall_seconds"], f"{summary['steps_per_second']:,.0f}", run_dir)
    log.info(outputs.eval_line(summary))
