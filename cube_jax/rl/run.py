"""The baseline driver: trains, logs, checkpoints, evaluates and writes the run folder.

Updates run in jitted chunks of ``train.updates_per_call`` (each chunk a ``lax.scan`` of
whole PPO updates over every seed), so progress shows while it runs and a checkpoint can
be written between chunks. Every chunk is one compiled program: a partial last chunk
skips its surplus updates with ``lax.cond`` instead of compiling a shorter scan. The env batch is sharded over a 1-D device mesh (axis
``"env"``); parameters and keys are replicated. With ``distributed.coordinator`` set,
``jax.distributed`` joins several hosts first and the mesh spans all their devices.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from cube_jax.rl import checkpoint, outputs
from cube_jax.rl.ppo import PPO, Runner


class RuntimeStall(RuntimeError):
    """The process used no CPU for ``stall_seconds`` while waiting for a result."""


def wait_for(fetch, what: str, stall_seconds: float, poll: float = 5.0):
    """``fetch()`` on a helper thread; RuntimeStall if the process stays idle ``stall_seconds``.

    XLA's CPU runtime can wedge: every worker of its intra-op thread pool waits for work
    while the host waits for a result that never comes (seen in 2 of about 15 MAPPO runs
    on a 2-core machine; ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` avoids the pool,
    and trained about 30 % slower there). A CPU computation keeps the process busy, so an
    idle process means a stall. Not for accelerators, whose computations leave the host
    idle by design.
    """
    done = threading.Event()
    box: Dict[str, Any] = {}

    def target():
        try:
            box["value"] = fetch()
        except BaseException as err:  # re-raised on the caller's thread
            box["error"] = err
        finally:
            done.set()

    threading.Thread(target=target, name=f"fetch {what}", daemon=True).start()
    idle, cpu = 0.0, time.process_time()
    while not done.wait(poll):
        now = time.process_time()
        idle = idle + poll if now - cpu < 0.01 * poll else 0.0
        cpu = now
        if idle >= stall_seconds:
            raise RuntimeStall(f"no CPU used for {idle:.0f} s while computing {what}")
    if "error" in box:
        raise box["error"]
    return box["value"]


def init_distributed(config: Dict[str, Any]) -> None:
    dist = config["distributed"]
    if dist["coordinator"] is not None:
        jax.distributed.initialize(
            coordinator_address=dist["coordinator"],
            num_processes=dist["num_processes"],
            process_id=dist["process_id"],
        )


def make_mesh(config: Dict[str, Any]) -> Mesh:
    """1-D mesh over the devices that split the env batch."""
    devices = jax.devices()
    wanted = config["train"]["num_devices"] or len(devices)
    if wanted > len(devices):
        raise ValueError(f"train.num_devices={wanted} but only {len(devices)} devices are visible: {devices}")
    num_envs = config["train"]["num_envs"]
    if num_envs % wanted:
        raise ValueError(f"train.num_envs={num_envs} must be divisible by the {wanted} devices of the mesh")
    return Mesh(np.asarray(devices[:wanted]), ("env",))


def runner_shardings(mesh: Mesh, abstract: Runner) -> Runner:
    """Shardings for a seed-batched Runner: env arrays split on axis 1 (after seeds), the rest replicated."""
    replicated = NamedSharding(mesh, PartitionSpec())
    by_env = NamedSharding(mesh, PartitionSpec(None, "env"))
    return Runner(
        params=jax.tree.map(lambda _: replicated, abstract.params),
        opt_state=jax.tree.map(lambda _: replicated, abstract.opt_state),
        env_state=jax.tree.map(lambda _: by_env, abstract.env_state),
        obs=by_env,
        key=replicated,
        update=replicated,
    )


class Session:
    """Compiled pieces of one training run over ``num_seeds`` seeds on a device mesh."""

    def __init__(self, config: Dict[str, Any], mesh: Optional[Mesh] = None):
        self.config = config
        self.ppo = PPO(config)
        self.mesh = mesh if mesh is not None else make_mesh(config)
        self.num_seeds = config["num_seeds"]
        self.keys = jax.random.split(jax.random.PRNGKey(config["seed"]), self.num_seeds)
        init = jax.vmap(self.ppo.init)
        abstract = jax.eval_shape(init, self.keys)
        self.shardings = runner_shardings(self.mesh, abstract)
        self.abstract = jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), abstract, self.shardings
        )
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self._init = jax.jit(init, out_shardings=self.shardings)
        self.updates_per_call = config["train"]["updates_per_call"]
        self._chunk = jax.jit(
            self._chunk_fn, in_shardings=(self.shardings, self.replicated, self.replicated),
            out_shardings=(self.shardings, self.replicated), donate_argnums=0,
        )
        self._evaluate = jax.jit(jax.vmap(self._evaluate_fn, in_axes=(0, 0)))

    def init(self) -> Runner:
        return self._init(self.keys)

    def _chunk_fn(self, runner: Runner, active: jax.Array, num_updates: jax.Array):
        """``updates_per_call`` scan steps of which the first ``active`` (int32[]) update.

        The rest pass the runner through unchanged, so every chunk, including a last partial
        one, is the same compiled program. ``num_updates`` (int32[]) is the run's budget,
        the learning-rate annealing horizon.
        """
        update = jax.vmap(lambda r: self.ppo.update(r, num_updates))
        skipped = jax.tree.map(
            lambda s: jnp.full(s.shape, jnp.nan, s.dtype) if jnp.issubdtype(s.dtype, jnp.floating)
            else jnp.zeros(s.shape, s.dtype),
            jax.eval_shape(update, runner)[1],
        )

        def one(r, i):
            return jax.lax.cond(i < active, update, lambda c: (c, skipped), r)

        return jax.lax.scan(one, runner, jnp.arange(self.updates_per_call))

    def run_updates(self, runner: Runner, count: int):
        """(runner, metrics {name: float[count, seeds]}) after ``count`` (<= updates_per_call) more updates."""
        if not 1 <= count <= self.updates_per_call:
            raise ValueError(f"run_updates: count={count} must be in 1..train.updates_per_call={self.updates_per_call}")
        runner, metrics = self._chunk(runner, np.int32(count), np.int32(self.ppo.num_updates))
        return runner, jax.tree.map(lambda m: m[:count], metrics)

    def _evaluate_fn(self, actor_params, key):
        return self.ppo.evaluate(actor_params, key, self.config["eval"]["episodes"])

    def evaluate(self, runner: Runner, key: jax.Array):
        """(greedy, sampled, film) per seed: evaluations {name: float[seeds, ...]} and every
        seed's first greedy episode (states [seeds, T + 1, ...], done bool[seeds, T + 1])."""
        keys = jax.random.split(key, self.num_seeds)
        return self.fetch(self._evaluate(runner.params["actor"], keys), "the evaluation")

    def fetch(self, tree, what: str):
        """``jax.device_get(tree)``, guarded against a stalled CPU runtime (see :func:`wait_for`)."""
        stall = self.config["train"]["stall_seconds"]
        if not stall or jax.default_backend() != "cpu" or jax.process_count() > 1:
            return jax.device_get(tree)
        return wait_for(lambda: jax.device_get(tree), what, stall)


def _actor_of(runner: Runner, seed_index: int):
    return jax.device_get(jax.tree.map(lambda x: x[seed_index], runner.params["actor"]))


def _policy_meta(session: Session, runner: Runner, seed_index: int) -> Dict[str, Any]:
    ppo = session.ppo
    return {
        "algo": session.config["algo"],
        "env_kwargs": ppo.env_kwargs,
        "network": session.config["network"],
        "observation_shape": list(ppo.env.observation_shape),
        "num_actions": ppo.env.num_actions,
        "seed_index": seed_index,
        "seed": session.config["seed"],
        "updates": int(np.asarray(runner.update)[seed_index]),
        "env_steps": int(np.asarray(runner.update)[seed_index]) * ppo.steps_per_update,
    }


def save(session: Session, runner: Runner, run_dir: Path, seed_index: int = 0) -> Path:
    return checkpoint.save_checkpoint(
        run_dir / outputs.CHECKPOINT_DIR, runner, _actor_of(runner, seed_index),
        _policy_meta(session, runner, seed_index),
    )


def _best_seed_success(success: np.ndarray) -> float:
    """The best seed's training success rate over a chunk ``float[U, S]`` (NaN: no episode ended)."""
    success = np.asarray(success, np.float64)
    counted = np.isfinite(success).any(axis=0)  # bool[S]
    if not counted.any():
        return float("nan")
    per_seed = np.nanmean(np.where(np.isfinite(success), success, np.nan)[:, counted], axis=0)
    return float(per_seed.max())


def _seed_value(values: np.ndarray, seed_index: int):
    """One seed's value: a float, or a list for per-block rates float[seeds, B]."""
    value = np.asarray(values, np.float64)[seed_index]
    return float(value) if value.ndim == 0 else [float(x) for x in value]


def _seed_mean(values: np.ndarray):
    """Mean over the seed axis: a float, or a list for per-block rates float[seeds, B]."""
    mean = np.mean(np.asarray(values, np.float64), axis=0)
    return float(mean) if mean.ndim == 0 else [float(x) for x in mean]


def _stop_stalled(err: RuntimeStall, config: Dict[str, Any], run_dir: Path) -> None:
    """Says what happened and how to go on, then ends the process (the stalled threads cannot be joined)."""
    script = f"baselines/{config['algo']}.py"
    saved = (run_dir / outputs.CHECKPOINT_DIR / checkpoint.RUNNER_DIR).is_dir()
    again = f"output.resume={run_dir}" if saved else "<the same arguments>   (no checkpoint was saved yet)"
    print(
        f"error: training stopped: {err}. XLA's CPU thread pool stalled; this is not a problem of the "
        f"config. Go on with:\n  XLA_FLAGS=--xla_cpu_multi_thread_eigen=false python {script} {again}\n"
        f"(train.stall_seconds={config['train']['stall_seconds']} sets how long an idle process is waited for)",
        file=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(3)


def train_and_report(config: Dict[str, Any], log=print) -> Dict[str, Any]:
    """Runs the whole baseline described by ``config``; returns the summary it writes."""
    init_distributed(config)
    run_dir = outputs.make_run_dir(config)
    log(f"run folder: {run_dir}")
    session = Session(config)
    ppo = session.ppo
    train, out = config["train"], config["output"]
    log(
        f"{config['algo'].upper()} on {ppo.env!r}; {session.num_seeds} seed(s), {ppo.num_envs} envs x "
        f"{ppo.num_steps} steps per update, {ppo.num_updates} updates, mesh of {session.mesh.devices.size} "
        f"device(s) {[d.platform for d in session.mesh.devices.flat][:1]}"
    )

    runner = session.init()
    done_updates = 0
    wall_before = 0.0
    if out["resume"] is not None:
        runner = checkpoint.restore_runner(run_dir / outputs.CHECKPOINT_DIR, session.abstract)
        done_updates = int(np.asarray(runner.update)[0])
        previous = outputs.read_metrics(run_dir)
        previous = [r for r in previous if r["update"] <= done_updates]
        wall_before = previous[-1]["wall_seconds"] if previous else 0.0
        with open(run_dir / outputs.METRICS_FILE, "w") as f:  # drop rows written after the checkpoint
            f.writelines(json.dumps(r) + "\n" for r in previous)
        log(f"resumed from {run_dir / outputs.CHECKPOINT_DIR} at update {done_updates}")

    per_call = train["updates_per_call"]
    steps_per_update = ppo.steps_per_update * session.num_seeds
    start = time.perf_counter()
    steady_start, steady_steps = None, 0  # throughput after the first (compiling) chunk
    reached_target_at: Optional[float] = None
    calls = 0
    while done_updates < ppo.num_updates:
        count = min(per_call, ppo.num_updates - done_updates)
        t0 = time.perf_counter()
        runner, metrics = session.run_updates(runner, count)
        try:
            metrics = session.fetch(metrics, f"updates {done_updates + 1}-{done_updates + count}")
        except RuntimeStall as err:
            _stop_stalled(err, config, run_dir)
        now = time.perf_counter()
        if steady_start is None:
            steady_start = now
        else:
            steady_steps += count * steps_per_update
        elapsed = wall_before + now - start
        rows = outputs.metric_rows(metrics, done_updates, steps_per_update, elapsed)
        outputs.append_metrics(run_dir, rows)
        done_updates += count
        calls += 1
        rate = count * steps_per_update / max(now - t0, 1e-9)
        log(outputs.progress_line(outputs.chunk_row(rows), ppo.num_updates, rate))
        success = _best_seed_success(metrics["success_rate"])
        target = train["target_success"]
        if target is not None and reached_target_at is None and success >= target:
            reached_target_at = elapsed
            seeds = " (best seed)" if session.num_seeds > 1 else ""
            log(f"training success rate{seeds} {success:.2f} >= {target} after {elapsed:.1f} s; stopping")
        if out["checkpoint"] and (calls % out["checkpoint_every"] == 0 or reached_target_at is not None):
            save(session, runner, run_dir)
        if reached_target_at is not None:
            break
    wall = wall_before + time.perf_counter() - start
    steady_rate = steady_steps / (time.perf_counter() - steady_start) if steady_steps else None

    eval_key = jax.random.PRNGKey(config["seed"] + 10_000)
    try:
        greedy, sampled, film = session.evaluate(runner, eval_key)
    except RuntimeStall as err:
        _stop_stalled(err, config, run_dir)
    if not config["eval"]["greedy"]:  # the configured way of acting is what "eval" reports
        greedy, sampled = sampled, greedy
    # The saved policy is the seed that plays best in the configured way of acting, ties
    # broken by the other way and then by blocks delivered.
    best = int(np.argmax(greedy["success_rate"] + 1e-2 * sampled["success_rate"]
                         + 1e-4 * greedy["blocks_delivered_frac"]))
    env_steps = done_updates * steps_per_update
    summary = {
        "algo": config["algo"],
        "env": ppo.env_kwargs,
        "env_steps": int(env_steps),
        "updates": int(done_updates),
        "wall_seconds": round(wall, 2),
        "steps_per_second": round(env_steps / wall, 1),
        "steady_steps_per_second": None if steady_rate is None else round(steady_rate, 1),
        "seconds_to_target_success": None if reached_target_at is None else round(reached_target_at, 2),
        "num_seeds": session.num_seeds,
        "devices": int(session.mesh.devices.size),
        # "eval" is the saved policy's (the best seed's); "eval_mean_over_seeds" averages all seeds.
        "eval": {k: _seed_value(v, best) for k, v in greedy.items()} | {
            "episodes": config["eval"]["episodes"],
            "greedy": config["eval"]["greedy"],
            "block_weights": [int(w) for w in np.asarray(ppo.env.pool["block_weight"][0])]
            if ppo.env.pool else list(ppo.env.source.weights),
        },
        ("eval_sampled" if config["eval"]["greedy"] else "eval_greedy"): {
            k: _seed_value(v, best) for k, v in sampled.items()
        },
        "eval_mean_over_seeds": {k: _seed_mean(v) for k, v in greedy.items()},
        "eval_per_seed": {k: np.asarray(v).tolist() for k, v in greedy.items()},
        "eval_sampled_per_seed": {k: np.asarray(v).tolist() for k, v in sampled.items()},
        "policy_seed_index": best,
        "final_train": {k: v for k, v in rows[-1].items() if not k.endswith("_per_seed")} if calls else None,
        "run_dir": str(run_dir),
    }
    if out["checkpoint"]:
        save(session, runner, run_dir, best)
        summary["checkpoint"] = str(run_dir / outputs.CHECKPOINT_DIR)
    if out["plot"]:
        outputs.plot_learning_curve(run_dir, f"{config['algo'].upper()} {ppo.env.name}")
    if out["gif"]:
        states, done = jax.tree.map(lambda x: x[best], film)  # the best seed's first greedy episode
        outputs.write_gif(states, done, run_dir / outputs.GIF_FILE)
    outputs.write_summary(run_dir, summary)
    ev = summary["eval"]
    log(
        f"done: {env_steps:,} env steps in {wall:.1f} s ({summary['steps_per_second']:,.0f} steps/s); "
        f"eval over {config['eval']['episodes']} episodes: success {ev['success_rate']:.2f}, "
        f"blocks delivered {ev['blocks_delivered_frac']:.2f}, return {ev['return_mean']:+.3f}"
    )
    log(f"outputs in {run_dir}")
    return summary


def main(algo: str, argv=None) -> Dict[str, Any]:
    from cube_jax.rl.config import parse_args

    return train_and_report(parse_args(algo, argv))
