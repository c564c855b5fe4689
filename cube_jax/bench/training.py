"""``bench run`` of a learner: one training run per seed, for exactly its budget tier's
environment steps on the task's world (training never draws a test layout: a pool leaves
them out), then each seed's policy plays the test episodes, greedy and sampled. The
algorithm (its ``config.algo`` and presets) comes from :mod:`cube_jax.rl.algorithms`."""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Dict, List, Sequence

from cube_jax.bench.batched import BenchError, TaskResult, play_team
from cube_jax.core import suite
from cube_jax.registry import Member

log = logging.getLogger("cube_jax.bench.run")

FIXED_BY_TASK = ("env.scenario", "env.n", "env.num_agents", "env.max_steps", "seed", "num_seeds",
                 "train.total_timesteps", "train.target_success", "train.max_seconds", "output.")


def world_overrides(t: suite.Task) -> List[str]:
    world = dict(t.world)
    if "n" in world:
        return ["env.scenario=null", f"env.n={world['n']}", f"env.max_steps={t.max_steps}"]
    out = [f"env.scenario={world['scenario']}", f"env.max_steps={t.max_steps}"]
    if "num_agents" in world:
        out.append(f"env.num_agents={world['num_agents']}")
    return out


def check_overrides(overrides: Sequence[str]) -> None:
    for text in overrides:
        key = text.split("=", 1)[0].strip()
        if any(key == fixed or (fixed.endswith(".") and key.startswith(fixed)) for fixed in FIXED_BY_TASK):
            raise BenchError(f"--set {text!r}: {key} is fixed by the benchmark (the task, the tier and the seeds set it)")


def train_run(t: suite.Task, contender, seed: int, run_dir: Path) -> Dict[str, Any]:
    """One training run of ``contender``'s algorithm on ``t``'s world with ``seed``, exactly its
    budget (no early stop), resumed from ``run_dir`` when it holds an unfinished run; returns
    its summary (``summary.json``)."""
    from cube_jax.rl.checkpoint import readable
    from cube_jax.rl.config import ConfigError, build
    from cube_jax.rl.run import train_and_report

    summary_file = run_dir / "summary.json"
    if summary_file.is_file():
        return json.loads(summary_file.read_text())
    learner = contender.learner
    base = [*world_overrides(t), f"seed={seed}", "num_seeds=1", "train.target_success=null", "train.max_seconds=null",
            f"output.root={run_dir.parent}", f"output.name={run_dir.name}", "output.gif=false",
            "output.checkpoint=true"]
    try:
        config = build(learner.config_algo, preset=learner.presets, overrides=[*base, *contender.overrides])
        per_update = config.train.num_envs * config.train.num_steps
        total = math.ceil(contender.env_steps / per_update) * per_update  # at least the budget, whole updates
        resume = [f"output.resume={run_dir}"] if readable(run_dir / "checkpoint").is_dir() else []
        config = build(learner.config_algo, preset=learner.presets,
                       overrides=[*base, *contender.overrides, f"train.total_timesteps={total}", *resume])
    except ConfigError as err:
        raise BenchError(f"{contender.spec} on task {t.name!r}: {err}") from None
    return train_and_report(config)  # opens run_dir (output.root/name) and writes its config.yaml


def train_and_play(t: suite.Task, contender, work: Path, episodes: int, progress: bool = True) -> TaskResult:
    """Every training seed's run on ``t`` (kept under ``work/train/``), then its policy's test episodes."""
    records, actions, trained = [], [], 0.0
    for run, seed in enumerate(contender.seeds):
        run_dir = work / "train" / t.name / f"seed-{seed}"
        summary = train_run(t, contender, seed, run_dir)
        log.info("%s seed %d: %s env steps in %.0f s", t.name, seed, f"{summary['env_steps']:,}",
                 summary["wall_seconds"])
        trained += float(summary["wall_seconds"])
        checkpoint = str(run_dir / "checkpoint")
        member = Member("policy", checkpoint, (("checkpoint", checkpoint),))
        played = play_team(t, [member] * t.num_agents, episodes, progress, run=run)
        for e in played.episodes:
            e["training_seed"] = seed
            e["env_steps"] = int(summary["env_steps"])
        records += played.episodes
        actions += played.actions
    return TaskResult(records, actions, episodes, training_seconds=trained)
