"""The run folder: config, metrics.jsonl (one line per update), summary.json, learning
curve, a GIF of the trained policy and the checkpoint folder."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import numpy as np
import yaml

from cube_jax.rl.config import Config

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CURVE_FILE = "learning_curve.png"
GIF_FILE = "policy.gif"
CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoint"
EVALUATIONS_FILE = "evaluations.jsonl"
VIDEO_DIR = "videos"


def run_name(config: Config, when: Optional[float] = None) -> str:
    """``<algo>-<world>-<date-time>``, the time ``when`` (seconds since the epoch; default now)."""
    env = config.env
    world = env.scenario if env.scenario is not None else f"n{env.n}"
    world = Path(str(world)).stem  # a scenario path names the run by its file
    return f"{config.algo}-{world}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(when))}"


def make_run_dir(config: Config, when: Optional[float] = None, write: bool = True) -> Path:
    """Creates (or, when resuming, reuses) the run folder and writes config.yaml (plain YAML) into it.

    ``when`` names a new folder (see :func:`run_name`); ``write=False`` only finds the folder
    (the processes of a distributed run other than the first write nothing)."""
    out = config.output
    if out.resume is not None:
        run_dir = resume_run_dir(out.resume)
    else:
        run_dir = Path(out.root) / (out.name or run_name(config, when))
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / CONFIG_FILE, "w") as f:
            yaml.safe_dump(config.model_dump(), f, sort_keys=False)
    return run_dir


def resume_run_dir(path) -> Path:
    """The run folder of ``path``, which may be the run folder or its checkpoint folder."""
    from cube_jax.rl.checkpoint import readable  # a save stopped between its renames left <name>.old

    path = Path(path)
    if readable(path / CHECKPOINT_DIR).is_dir():
        return path
    if path.name == CHECKPOINT_DIR and readable(path).is_dir():
        return path.parent
    raise FileNotFoundError(f"output.resume={str(path)!r}: no run folder with a {CHECKPOINT_DIR}/ inside")


def _clean(value):
    """JSON-safe scalar: NaN (no episode finished in that update) becomes null."""
    value = float(value) if isinstance(value, (np.floating, float, np.ndarray)) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.integer):
        return int(value)
    return value


def metric_rows(metrics: Dict[str, np.ndarray], first_update: int, steps_per_update: int,
                wall_seconds: float) -> List[Dict[str, Any]]:
    """One dict per update from chunk metrics ``{name: float[U, S]}`` (S seeds), seed-averaged."""
    num_updates = next(iter(metrics.values())).shape[0]
    rows = []
    for u in range(num_updates):
        update = first_update + u + 1
        row = {"update": update, "env_steps": update * steps_per_update, "wall_seconds": round(wall_seconds, 3)}
        for name, values in metrics.items():
            per_seed = np.asarray(values[u], dtype=np.float64)
            finite = per_seed[np.isfinite(per_seed)]
            row[name] = _clean(finite.mean()) if finite.size else None
            if per_seed.size > 1:
                row[name + "_per_seed"] = [_clean(v) for v in per_seed]
        rows.append(row)
    return rows


def append_metrics(run_dir: Path, rows: Iterable[Dict[str, Any]]) -> None:
    with open(run_dir / METRICS_FILE, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def read_metrics(run_dir: Path) -> List[Dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_summary(run_dir: Path, summary: Dict[str, Any]) -> Path:
    path = run_dir / SUMMARY_FILE
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
    return path


def smoothed(values: List[Optional[float]], window: int = 5) -> np.ndarray:
    """Trailing mean over the last ``window`` finite values (updates without episodes skipped)."""
    out, recent = [], []
    for v in values:
        if v is not None:
            recent = (recent + [v])[-window:]
        out.append(np.mean(recent) if recent else np.nan)
    return np.asarray(out)


CURVES = (("success_rate", "success rate"), ("blocks_delivered_frac", "blocks delivered"),
          ("episode_return", "episode return"))


def seed_curves(rows: List[Dict[str, Any]], name: str) -> List[np.ndarray]:
    """One smoothed curve per seed of metric ``name`` (a single curve for a one-seed run)."""
    if rows and rows[0].get(name + "_per_seed") is not None:
        count = len(rows[0][name + "_per_seed"])
        return [smoothed([r[name + "_per_seed"][i] for r in rows]) for i in range(count)]
    return [smoothed([r.get(name) for r in rows])]


def _lines(path: Path) -> List[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def plot_learning_curve(run_dir: Path, title: str, path: Optional[Path] = None) -> Path:
    """learning_curve.png: success rate, blocks delivered and return of every seed against env steps.

    Each seed has its own line and legend entry; the legend sits outside the axes, so it
    covers no curve.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run_dir)
    steps = np.asarray([r["env_steps"] for r in rows], dtype=np.float64)
    fig, axes = plt.subplots(1, len(CURVES), figsize=(12, 3.2))
    for ax, (name, label) in zip(axes, CURVES):
        curves = seed_curves(rows, name)
        for i, curve in enumerate(curves):
            ax.plot(steps, curve, color=f"C{i % 10}", label=f"seed {i}" if len(curves) > 1 else "training")
        evaluated = [json.loads(line) for line in _lines(run_dir / EVALUATIONS_FILE)]
        if evaluated and name in ("success_rate", "blocks_delivered_frac"):  # eval.every's greedy evaluations
            ax.plot([e["env_steps"] for e in evaluated], [e[f"greedy_{name}"] for e in evaluated], "k.--",
                    label="greedy evaluation (mean)")
        if name != "episode_return":
            ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("env steps (all seeds)")
        ax.set_title(label, fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path) if path is not None else run_dir / CURVE_FILE
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path


def write_gif(states, done: np.ndarray, path: Path) -> Path:
    """GIF of one episode: ``states`` is a State batched over time, ``done`` bool[T]."""
    import jax

    from cube_jax.adapters.render import render_rgb, save_gif

    done = np.asarray(done)
    last = int(np.argmax(done)) if done.any() else len(done) - 1
    states = jax.device_get(states)
    frames = [render_rgb(jax.tree.map(lambda x: x[t], states)) for t in range(last + 1)]
    save_gif(frames, path)
    return path


def chunk_row(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The last row of a chunk with episode statistics averaged over the chunk's updates
    (episodes of a synchronised batch end only in some updates), each seed's as well."""
    out = dict(rows[-1])
    for name in ("episode_return", "success_rate", "blocks_delivered_frac"):
        values = [r[name] for r in rows if r.get(name) is not None]
        out[name] = float(np.mean(values)) if values else None
        if name + "_per_seed" in out:
            per_update = np.asarray([[np.nan if v is None else v for v in r[name + "_per_seed"]] for r in rows], float)
            ended = np.isfinite(per_update).any(axis=0)
            means = np.nanmean(np.where(ended, per_update, 0.0), axis=0)
            out[name + "_per_seed"] = [float(m) if e else None for m, e in zip(means, ended)]
    return out


def per_seed_text(values) -> str:
    """``"0: 1.00, 1: 0.75"``: one rate per seed, by seed index (`` - `` where a seed has none).

    >>> per_seed_text([1.0, None, 0.5])
    '0: 1.00, 1:  - , 2: 0.50'
    """
    return ", ".join(
        f"{i}: {' - ' if v is None or not math.isfinite(v) else format(v, '.2f')}" for i, v in enumerate(values)
    )


def progress_line(row: Dict[str, Any], num_updates: int, steps_per_second: float) -> str:
    """One chunk's progress; with several seeds the success rate of each follows the mean,
    so a stalled seed shows while the run goes on."""
    def fmt(name, spec=".2f"):
        value = row.get(name)
        return "  -  " if value is None else format(value, spec)

    seeds = row.get("success_rate_per_seed")
    return (
        f"update {row['update']:>5}/{num_updates}  env-steps {row['env_steps']:>11,}  "
        f"{steps_per_second:>9,.0f} steps/s  return {fmt('episode_return', '+.3f')}  "
        f"success {fmt('success_rate')}  blocks delivered {fmt('blocks_delivered_frac')}"
        + (f"  success per seed [{per_seed_text(seeds)}]" if seeds is not None else "")
    )


def eval_line(summary: Dict[str, Any]) -> str:
    """The run's last line: which seed's policy was saved and every seed's evaluation.

    >>> eval_line({"eval": {"greedy": True, "episodes": 128, "success_rate": 1.0, "blocks_delivered_frac": 1.0,
    ...            "return_mean": 1.25}, "policy_seed_index": 2, "checkpoint": "runs/x/checkpoint",
    ...            "eval_per_seed": {"success_rate": [1.0, 0.75, 1.0, 0.98], "blocks_delivered_frac": [1, 1, 1, 1]}})
    'eval (greedy, 128 episodes): seed 2 reported and saved: success 1.00, blocks delivered 1.00, return +1.250; success per seed: [0: 1.00, 1: 0.75, 2: 1.00, 3: 0.98]'
    """
    ev = summary["eval"]
    per_seed = per_seed_text(summary["eval_per_seed"]["success_rate"])
    return (
        f"eval ({'greedy' if ev['greedy'] else 'sampled'}, {ev['episodes']} episodes): "
        f"seed {summary['policy_seed_index']} reported{' and saved' if 'checkpoint' in summary else ''}: "
        f"success {ev['success_rate']:.2f}, "
        f"blocks delivered {ev['blocks_delivered_frac']:.2f}, return {ev['return_mean']:+.3f}; "
        f"success per seed: [{per_seed}]"
    )
