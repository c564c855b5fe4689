"""Experiment trackers: the rows of ``metrics.jsonl`` also go to TensorBoard and Weights & Biases.

``logger.tensorboard=true`` writes one event folder per seed, ``<run>/tensorboard/seed-<k>``;
``logger.wandb=online|offline`` opens one W&B run per seed (project, group and tags from the
config, files under ``<run>/wandb/``). Each seed logs its own value of every metric (the
``<name>_per_seed`` entry of a row, else the row's value), at the row's ``env_steps``, and
the whole config once. With neither set nothing is imported and nothing is written.
"""
from __future__ import annotations

import json
import numbers
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from cube_jax.rl.config import Config

SKIPPED = ("update", "env_steps")  # the step itself, not a metric


class TrackerError(RuntimeError):
    """A tracker asked for in the config cannot run (its extra is not installed)."""


def _need(module: str, extra: str, key: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as err:
        raise TrackerError(f"{key} needs the {extra} extra: pip install 'cube_jax[{extra}]' ({err})") from None


def seed_values(row: Dict[str, Any], seed: int, num_seeds: int) -> Dict[str, float]:
    """``{metric: seed's value}`` of one metrics row (numbers only; None and lists left out).

    >>> seed_values({"update": 1, "env_steps": 64, "loss": 0.5, "loss_per_seed": [0.4, 0.6], "x": None}, 1, 2)
    {'loss': 0.6}
    """
    out = {}
    for name, value in row.items():
        if name in SKIPPED or name.endswith("_per_seed"):
            continue
        per_seed = row.get(name + "_per_seed")
        if isinstance(per_seed, list) and len(per_seed) == num_seeds:
            value = per_seed[seed]
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def check_extras(config: Config) -> None:
    """Raises :class:`TrackerError` (one line, naming the extra) when a tracker the config
    asks for is not installed; called before anything trains."""
    if config.logger.tensorboard:
        _need("tensorboardX", "tensorboard", "logger.tensorboard=true")
    if config.logger.wandb is not None:
        _need("wandb", "wandb", f"logger.wandb={config.logger.wandb}")


class Trackers:
    """The trackers a config asks for; :meth:`log` takes metrics rows, :meth:`close` ends them."""

    def __init__(self, config: Config, run_dir: Path, num_seeds: int):
        self.num_seeds = num_seeds
        self.writers: List[Any] = []  # tensorboardX SummaryWriter per seed
        self.runs: List[Any] = []  # wandb runs per seed
        logger = config.logger
        settings = config.model_dump(mode="json")
        if logger.tensorboard:
            tensorboardx = _need("tensorboardX", "tensorboard", "logger.tensorboard=true")
            for seed in range(num_seeds):
                writer = tensorboardx.SummaryWriter(str(Path(run_dir) / "tensorboard" / f"seed-{seed}"))
                writer.add_text("config", "```\n" + json.dumps(settings, indent=2) + "\n```", 0)
                self.writers.append(writer)
        if logger.wandb is not None:
            wandb = _need("wandb", "wandb", f"logger.wandb={logger.wandb}")
            for seed in range(num_seeds):
                self.runs.append(wandb.init(
                    project=logger.project, group=logger.group or Path(run_dir).name, tags=list(logger.tags),
                    name=f"{Path(run_dir).name}-seed-{seed}", dir=str(run_dir), mode=logger.wandb,
                    config={**settings, "seed_index": seed}, reinit="create_new",
                ))

    @property
    def active(self) -> bool:
        return bool(self.writers or self.runs)

    def log(self, rows: Iterable[Dict[str, Any]]) -> None:
        for row in rows:
            step = int(row["env_steps"])
            for seed in range(self.num_seeds):
                values = seed_values(row, seed, self.num_seeds)
                if self.writers:
                    for name, value in values.items():
                        self.writers[seed].add_scalar(name, value, step)
                if self.runs:
                    self.runs[seed].log({**values, "update": row["update"]}, step=step)

    def log_evaluation(self, row: Dict[str, Any]) -> None:
        """An evaluation during training (a line of ``evaluations.jsonl``), as ``eval/<name>``."""
        renamed = {("" if k in SKIPPED else "eval/") + k: v for k, v in row.items() if k != "wall_seconds"}
        self.log([{**renamed, "update": row["update"], "env_steps": row["env_steps"]}])

    def close(self, summary: Optional[Dict[str, Any]] = None) -> None:
        """Flushes and ends every tracker; ``summary``'s evaluation goes to each W&B run's summary."""
        for writer in self.writers:
            writer.close()
        for run in self.runs:
            if summary is not None:
                run.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str))})
            run.finish()
        self.writers, self.runs = [], []


__all__ = ["TrackerError", "Trackers", "check_extras", "seed_values"]
