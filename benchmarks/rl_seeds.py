"""IPPO and MAPPO (and PQN-VDN, IPPO-RNN, MAPPO-RNN) over ten seeds per world, reported as the field reports RL results.

    nice -n 5 python benchmarks/rl_seeds.py                       # ippo and mappo on easy and hard, 10 seeds
    python benchmarks/rl_seeds.py --worlds n2,n3 --budget n3=20000000
    python benchmarks/rl_seeds.py --algos pqn_vdn --worlds easy --budget easy=2000000   # its preset's budget
    python benchmarks/rl_seeds.py --algos ippo_rnn --worlds n2 --budget n2=15000000       # GRU actor and critic
    python benchmarks/rl_seeds.py --worlds n3 --algos ippo --set train.ent_coef_final=0   # a variant of the recipe
    python benchmarks/rl_seeds.py --worlds n4 --algos ippo --set train.init_from=ippo-n3  # n = 4 from the n = 3 run
    python benchmarks/rl_seeds.py --quick                         # a tiny smoke run into runs/rl_seeds-quick
    python benchmarks/rl_seeds.py --render-only                   # figures and table from the JSON alone

Every (algorithm, world) pair is one run of the baseline driver, ``python
baselines/<algo>.py num_seeds=S train.target_success=null train.total_timesteps=B``: the S
seeds train in one vmapped program for the world's whole budget B (env steps per seed), so
every seed trains as long as every other and the learning curves line up. Each run keeps
its run folder (``<out>/<algo>-<world>/``, with its log beside it); a finished folder whose
config matches is reused, an unfinished one resumes from its checkpoint, and a run stopped
by the stall guard (``baselines/launch.py``) resumes with XLA's CPU thread pool switched off.
``--set KEY=VALUE`` adds a config override to every run: a variant of the recipe, whose runs,
rows and curves are kept apart from the plain ones (its folder is ``<algo>-<world>+KEY=VALUE``).
``--set train.init_from=NAME`` starts every seed from the same seed of this script's run folder
NAME (a curriculum over n: ``--worlds n4 --set train.init_from=ippo-n3``; its budget is the
run's own, on top of the source's).

The scores are the driver's final evaluation (``eval_per_seed`` in ``summary.json``):
greedy play, ``eval.episodes`` (128) episodes, the papers' reward, from keys that depend
only on the config's ``seed`` and ``num_seeds`` (the same in every run here). Per
(algorithm, world): the mean and the interquartile mean (IQM) of every seed's greedy
success and fraction of blocks delivered, each with a 95% percentile bootstrap interval
over the seeds (``cube_jax.analytics.intervals``), and how many seeds reach 0.9; per
algorithm over several worlds, the same with the seeds resampled within each world
(stratified, as rliable does). The JSON (``benchmarks/results/rl_seeds.json``; runs
measured before are kept unless measured again) also holds each run's learning curve:
the training success and blocks delivered of the sampled training episodes against env
steps per seed, the mean over seeds with a 95% bootstrap band, drawn per world in
``rl_seeds_<world>.png`` beside it. It scores each run on the layouts it trained on, with
its own budget: a tool for comparing recipes while tuning. Benchmark scores are
``cube-jax bench run`` entries on held-out layouts (docs/benchmark.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = "benchmarks/rl_seeds.py"
JSON_REL = "benchmarks/results/rl_seeds.json"
DEFAULT_OUT = ROOT / "runs" / "rl_seeds"
QUICK_OUT = ROOT / "runs" / "rl_seeds-quick"
TARGET = 0.9  # the greedy success a seed needs to count as having learned its world
CURVE_POINTS = 150  # learning-curve points kept per run in the JSON
CURVE_RESAMPLES = 2_000  # bootstrap resamples per learning-curve point
STALL_EXIT_CODE = 3  # baselines/launch.py: XLA's CPU thread pool stalled
ATTEMPTS = 3  # tries per run: the first, then resumes after a stall


@dataclasses.dataclass(frozen=True)
class World:
    """A world of the table: the driver's arguments that select it and its default budget."""

    name: str
    label: str  # as the table names it
    presets: tuple  # --preset NAME of baselines/<algo>.py
    overrides: tuple  # key=value overrides of baselines/<algo>.py
    budget: int  # env steps per seed


WORLDS = {w.name: w for w in (
    World("easy", "easy", (), (), 6_000_000),  # the default preset's budget
    World("hard", "hard", ("hard",), (), 3_000_000),
    # the n-curriculum: configs/curriculum.yaml (20x20, fresh layouts, nearest-face reach)
    World("n2", "n = 2", ("curriculum",), ("env.n=2",), 40_000_000),
    World("n3", "n = 3", ("curriculum",), ("env.n=3",), 30_000_000),
    World("n4", "n = 4", ("curriculum",), ("env.n=4",), 40_000_000),
)}
ALGOS = ("ippo", "mappo", "pqn_vdn", "ippo_rnn", "mappo_rnn")  # the table's order of cube_jax.rl.algorithms
DEFAULT_ALGOS = ("ippo", "mappo")
DEFAULT_WORLDS = ("easy", "hard")
DEFAULT_SEEDS = 10
# --quick: the test suite's tiny budget (8 envs x 8 steps per update, 3 updates, a 1x16 network)
QUICK_ENVS, QUICK_STEPS = 8, 8
QUICK_OVERRIDES = (f"train.num_envs={QUICK_ENVS}", f"train.num_steps={QUICK_STEPS}", "train.updates_per_call=2",
                   "train.update_epochs=1", "train.num_minibatches=1", "pqn.num_minibatches=1", "network.hidden=16",
                   "network.layers=1", "eval.episodes=4", "output.gif=false")
QUICK_BUDGET = 3 * QUICK_ENVS * QUICK_STEPS
QUICK_SEEDS = 2
METRICS = {"success": "success_rate", "blocks": "blocks_delivered_frac"}  # table name -> eval_per_seed key


# --- the command line -------------------------------------------------------------------------------
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=SCRIPT, description=__doc__.split("\n")[0],
        epilog=f"worlds: {', '.join(WORLDS)}; default budgets (env steps per seed): "
        + ", ".join(f"{w.name}={w.budget:,}" for w in WORLDS.values()),
    )
    parser.add_argument("--algos", default=None, help=f"comma-separated, of {', '.join(ALGOS)} "
                        f"(default {','.join(DEFAULT_ALGOS)})")
    parser.add_argument("--worlds", default=None, help=f"comma-separated, of {', '.join(WORLDS)} "
                        f"(default {','.join(DEFAULT_WORLDS)})")
    parser.add_argument("--seeds", type=int, default=None, help=f"seeds per run (default {DEFAULT_SEEDS}; "
                        f"--quick: {QUICK_SEEDS})")
    parser.add_argument("--budget", action="append", default=[], metavar="WORLD=STEPS",
                        help="env steps per seed for a world, e.g. hard=5000000 (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                        help="a config override of every run, e.g. train.ent_coef_final=0 (repeatable): a variant, "
                        "reported in rows of its own")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run (the test suite's budget)")
    parser.add_argument("--out", type=Path, default=None, help=f"the run folders (default {DEFAULT_OUT.relative_to(ROOT)}; "
                        f"--quick: {QUICK_OUT.relative_to(ROOT)})")
    parser.add_argument("--json", type=Path, default=None, help=f"the results (default {JSON_REL}; --quick: <out>/rl_seeds.json)")
    parser.add_argument("--render-only", action="store_true", help="train nothing: figures and table from the JSON")
    args = parser.parse_args(argv)

    args.algos = _names(parser, "--algos", args.algos, DEFAULT_ALGOS, ALGOS)
    args.worlds = _names(parser, "--worlds", args.worlds, DEFAULT_WORLDS, WORLDS)
    if args.seeds is None:
        args.seeds = QUICK_SEEDS if args.quick else DEFAULT_SEEDS
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    budgets = {w: QUICK_BUDGET if args.quick else WORLDS[w].budget for w in args.worlds}
    for text in args.budget:
        world, steps = _budget(parser, text)
        if world not in args.worlds:
            parser.error(f"--budget {text!r}: world {world!r} is not among --worlds ({','.join(args.worlds)})")
        budgets[world] = steps
    args.budgets = budgets
    args.sets = _sets(parser, args.sets)
    if args.out is None:
        args.out = QUICK_OUT if args.quick else DEFAULT_OUT
    args.out = args.out.resolve()
    if args.json is None:
        args.json = args.out / "rl_seeds.json" if args.quick else ROOT / JSON_REL
    if not args.render_only:
        for algo in args.algos:
            _check_algo(parser, algo)
        args.plans = [plan for world in args.worlds for algo in args.algos
                      for plan in [_plan(parser, algo, world, args)]]
    return args


def _names(parser, flag: str, text: Optional[str], default: Sequence[str], known) -> List[str]:
    if text is None:
        return list(default)
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        parser.error(f"{flag}: name at least one of {', '.join(known)}")
    for name in names:
        if name not in known:
            parser.error(f"{flag}: unknown name {name!r}; choose from {', '.join(known)}")
    return list(dict.fromkeys(names))


# Keys the script sets itself, and the flag that chooses each instead of --set.
OWN_KEYS = {"num_seeds": "--seeds", "train.total_timesteps": "--budget", "train.target_success": None,
            "env.n": "--worlds", "env.scenario": "--worlds"}


def _sets(parser, texts: Sequence[str]) -> tuple:
    """``--set`` overrides, checked for form and for keys the script owns; their order kept."""
    from cube_jax.rl.config import ConfigError, parse_override

    out = []
    for text in texts:
        try:
            key, _ = parse_override(text)
        except ConfigError as err:
            parser.error(f"--set {text!r}: {err}")
        if key.startswith("output."):
            parser.error(f"--set {text!r}: the script chooses the run's outputs (output.*); use --out")
        if key in OWN_KEYS:
            flag = OWN_KEYS[key]
            parser.error(f"--set {text!r}: {key} is set by this script"
                         + (f"; choose it with {flag}" if flag else " (every seed trains for the whole budget)"))
        if "/" in text:
            parser.error(f"--set {text!r}: the value names the run's folder and cannot hold '/'")
        out.append(text.strip())
    return tuple(dict.fromkeys(out))


def _budget(parser, text: str):
    world, sep, steps = text.partition("=")
    world, steps = world.strip(), steps.strip()
    if not sep or not world or not steps:
        parser.error(f"--budget {text!r}: expected WORLD=STEPS, e.g. easy=2000000")
    if world not in WORLDS:
        parser.error(f"--budget {text!r}: unknown world {world!r}; choose from {', '.join(WORLDS)}")
    try:
        value = float(steps)
    except ValueError:
        parser.error(f"--budget {text!r}: STEPS must be a whole number of env steps per seed, got {steps!r}")
    if not value.is_integer() or value < 1:
        parser.error(f"--budget {text!r}: STEPS must be a positive whole number of env steps per seed, got {steps!r}")
    return world, int(value)


def _build(algo: str, presets=(), overrides=()):
    """``config.build`` for an algorithm of ALGOS: as its script builds it (a recurrent one,
    baselines/ippo_rnn.py or mappo_rnn.py, is the PPO driver with its preset applied first)."""
    from cube_jax.rl import algorithms
    from cube_jax.rl.config import build

    learner = algorithms.get(algo)
    return build(learner.config_algo, preset=[*learner.presets, *presets], overrides=list(overrides))


def _check_algo(parser, algo: str) -> None:
    """An algorithm can run when its script and its config are there and the config builds."""
    from cube_jax.rl.config import ConfigError

    script = ROOT / "baselines" / f"{algo}.py"
    if not script.is_file():
        parser.error(f"--algos: {algo} is not available here (no {script.relative_to(ROOT)})")
    try:
        _build(algo)
    except (ConfigError, ValueError) as err:
        parser.error(f"--algos: {algo} is not available here (its config does not build: {str(err)[:200]})")


# --- one run of the driver -------------------------------------------------------------------------
@dataclasses.dataclass
class Plan:
    """One (algorithm, world) run: the driver's command and where it writes."""

    algo: str
    world: str
    budget: int  # env steps per seed
    args: List[str]  # baselines/<algo>.py's arguments
    run_dir: Path
    config: Dict[str, Any]  # the config the run will have (config.yaml), output section aside
    quick: bool
    variant: tuple = ()  # the --set overrides

    @property
    def label(self) -> str:
        """``ippo on n3``, with a variant's overrides: ``ippo on n3 +train.ent_coef_final=0``."""
        return f"{self.algo} on {self.world}" + "".join(f" +{text}" for text in self.variant)

    @property
    def command(self) -> str:
        return shlex.join(["python", f"baselines/{self.algo}.py", *self.args])


def _plan(parser, algo: str, world: str, args) -> Plan:
    from cube_jax.rl.config import ConfigError

    name = f"{algo}-{world}" + "".join(f"+{text}" for text in args.sets)
    presets = list(WORLDS[world].presets)
    overrides = list(WORLDS[world].overrides) + [f"num_seeds={args.seeds}", "train.target_success=null", f"train.total_timesteps={args.budgets[world]}",
                  f"output.root={_shown(args.out)}", f"output.name={name}"]  # the driver runs in ROOT
    overrides += [_resolved(parser, text, args.out) for text in args.sets]
    if args.quick:
        overrides += list(QUICK_OVERRIDES)
    try:
        config = _build(algo, presets, overrides)
    except ConfigError as err:
        named = [text for text in args.sets if text.partition("=")[0].strip() in str(err)]
        flag = (f"--set {named[0]}" if named else f"--budget {world}={args.budgets[world]}"
                if "total_timesteps" in str(err) else f"--worlds {world}")
        parser.error(f"{flag}: {algo} cannot run it: {err}")
    driver_args = [a for p in presets for a in ("--preset", p)] + overrides
    return Plan(algo, world, args.budgets[world], driver_args, args.out / name,
                _comparable(config.model_dump()), args.quick, tuple(args.sets))


def _resolved(parser, text: str, out: Path) -> str:
    """An override for the driver: ``train.init_from=NAME`` names a run folder of ``out`` (this
    script's own earlier run, e.g. ``ippo-n3``), given to the driver as its path."""
    key, _, value = text.partition("=")
    if key.strip() != "train.init_from":
        return text
    source = out / value.strip()
    if not (source / "checkpoint").is_dir():
        parser.error(f"--set {text!r}: no finished run {source.name!r} with a checkpoint in {_shown(out)}; name one of "
                     "this script's run folders there, e.g. ippo-n3")
    return f"train.init_from={_shown(source)}"


def _comparable(config: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in config.items() if k != "output"}


def run(plan: Plan, number: str) -> Dict[str, Any]:
    """Trains ``plan`` (or reuses its finished run folder) and returns its summary.json."""
    summary_path = plan.run_dir / "summary.json"
    log_path = plan.run_dir.parent / f"{plan.run_dir.name}.log"
    what = f"[{number}] {plan.label}"
    found = _existing(plan, what)
    if found == "finished":
        print(f"{what}: reusing the finished run {_shown(plan.run_dir)}", flush=True)
        return json.loads(summary_path.read_text())
    extra_env: Dict[str, str] = {}
    resume = found == "unfinished"
    if plan.quick:  # tiny programs: compile time dominates, LLVM optimisation and fusion emitters do not pay
        flags = os.environ.get("XLA_FLAGS", "")
        for flag in ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"):
            if flag.split("=")[0] not in flags:
                flags += " " + flag
        extra_env["XLA_FLAGS"] = flags.strip()
    start = time.perf_counter()
    print(f"{what}: {_seed_text(plan)} x {plan.budget:,} env steps, started {time.strftime('%H:%M:%S')}"
          f"{' (resuming)' if resume else ''}; log {_shown(log_path)}", flush=True)
    for attempt in range(1, ATTEMPTS + 1):
        args = plan.args + ([f"output.resume={plan.run_dir}"] if resume else [])
        code = _drive(plan.algo, args, log_path, extra_env)
        if code == 0:
            break
        if code == STALL_EXIT_CODE and attempt < ATTEMPTS:
            # the stall guard's own advice: go on from the last checkpoint without XLA's CPU thread pool
            extra_env["XLA_FLAGS"] = (extra_env.get("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
                                      + " --xla_cpu_multi_thread_eigen=false").strip()
            resume = _existing(plan, what) == "unfinished"
            print(f"{what}: XLA's CPU runtime stalled; trying again{' from the checkpoint' if resume else ''} "
                  "with XLA_FLAGS=--xla_cpu_multi_thread_eigen=false", flush=True)
            continue
        tail = log_path.read_text(errors="replace").splitlines()[-15:] if log_path.is_file() else []
        raise RunFailed(f"{what}: the driver exited with status {code}; the end of {_shown(log_path)}:\n"
                        + "\n".join(tail))
    summary = json.loads(summary_path.read_text())
    success = summary["eval_per_seed"]["success_rate"]
    print(f"{what}: done in {time.perf_counter() - start:.0f} s ({summary['wall_seconds']:.0f} s training, "
          f"{summary['steps_per_second']:,.0f} env-steps/s); greedy success per seed "
          f"[{', '.join(f'{v:.2f}' for v in success)}], {sum(v >= TARGET for v in success)} of {len(success)} "
          f">= {TARGET}", flush=True)
    return summary


class RunFailed(RuntimeError):
    """The driver failed for another reason than a stall, or stalled on every try."""


def _seed_text(plan: Plan) -> str:
    return f"{plan.config['num_seeds']} seed{'s' if plan.config['num_seeds'] > 1 else ''}"


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _saved_config(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The run folder's config.yaml read through today's schema (a key added since takes its
    default), output section aside; None when there is none or it no longer validates."""
    from cube_jax.rl.config import Config

    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    try:
        return _comparable(Config.model_validate(yaml.safe_load(path.read_text())).model_dump())
    except ValueError:  # pydantic's ValidationError: a key removed or a value now refused
        return None


def _existing(plan: Plan, what: str) -> str:
    """What ``plan.run_dir`` holds: ``"none"``, ``"finished"`` (summary.json) or ``"unfinished"``
    (a checkpoint to resume from), each of the same config. A run of another config is never
    touched (RunFailed); a folder without either is cleared, as the driver would append to its metrics."""
    if not plan.run_dir.exists():
        return "none"
    finished = (plan.run_dir / "summary.json").is_file()
    saved = (plan.run_dir / "checkpoint" / "runner").is_dir()
    if (finished or saved) and _saved_config(plan.run_dir) != plan.config:
        raise RunFailed(f"{what}: {_shown(plan.run_dir)} holds a {'finished' if finished else 'checkpointed'} run of "
                        "another config (its config.yaml differs); move it away or choose another --out")
    if finished:
        return "finished"
    if saved:
        return "unfinished"
    shutil.rmtree(plan.run_dir)
    return "none"


def _drive(algo: str, args: List[str], log_path: Path, extra_env: Dict[str, str]) -> int:
    """Runs baselines/<algo>.py with ``args``, its output appended to ``log_path``; its exit status."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        log.write(f"$ {shlex.join([sys.executable, f'baselines/{algo}.py', *args])}\n")
        log.flush()
        return subprocess.run([sys.executable, str(ROOT / "baselines" / f"{algo}.py"), *args], cwd=ROOT,
                              stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **extra_env)).returncode


# --- what a run gives ----------------------------------------------------------------------------------
def record(plan: Plan, summary: Dict[str, Any]) -> Dict[str, Any]:
    """One run's entry of the JSON: every seed's evaluation and the learning curve."""
    seeds = summary["num_seeds"]
    greedy = summary["eval_per_seed"]
    ev = summary["eval"]
    if not ev["greedy"]:
        raise RunFailed(f"{plan.label}: its evaluation is not greedy (eval.greedy=false)")
    sampled = summary.get("eval_sampled_per_seed") or {}
    return {
        "algo": plan.algo,
        "world": plan.world,
        "variant": list(plan.variant),
        "command": plan.command,
        "run_dir": _shown(plan.run_dir),
        "num_seeds": seeds,
        "config_seed": plan.config["seed"],
        "env": summary["env"],
        "env_steps_per_seed": summary["env_steps"] // seeds,
        "wall_seconds": summary["wall_seconds"],
        "steps_per_second": summary["steps_per_second"],
        "eval_episodes": ev["episodes"],
        "greedy_success_per_seed": greedy["success_rate"],
        "greedy_blocks_per_seed": greedy["blocks_delivered_frac"],
        "greedy_return_per_seed": greedy["return_mean"],
        "sampled_success_per_seed": sampled.get("success_rate"),
        "cpu_count": os.cpu_count(),
        "load_average_end": round(os.getloadavg()[0], 2),
        "curve": learning_curve(plan.run_dir, seeds),
    }


def learning_curve(run_dir: Path, seeds: int) -> Dict[str, Any]:
    """Training success and blocks delivered (sampled episodes, each seed's trailing mean over
    5 updates) against env steps per seed: the mean over seeds and its 95% bootstrap band,
    at most CURVE_POINTS points, from the run's metrics.jsonl."""
    from cube_jax.analytics.intervals import bootstrap_cis
    from cube_jax.rl.outputs import read_metrics, seed_curves

    rows = read_metrics(run_dir)
    steps = np.asarray([r["env_steps"] for r in rows], float) / seeds
    per_seed = {name: np.asarray(seed_curves(rows, key)) for name, key in METRICS.items()}  # float[seeds, updates]
    measured = np.all([np.isfinite(c).all(axis=0) for c in per_seed.values()], axis=0)
    keep = np.flatnonzero(measured)
    keep = keep[np.unique(np.linspace(0, len(keep) - 1, min(CURVE_POINTS, len(keep))).round().astype(int))] \
        if len(keep) else keep
    curve: Dict[str, Any] = {"env_steps_per_seed": [int(s) for s in steps[keep]]}
    for name, values in per_seed.items():
        if len(keep):
            mean, low, high = bootstrap_cis(values[:, keep].T, resamples=CURVE_RESAMPLES)
        else:
            mean = low = high = np.zeros(0)
        curve[name] = {"mean": _rounded(mean), "low": _rounded(low), "high": _rounded(high)}
    return curve


def _rounded(values) -> List[float]:
    return [round(float(v), 4) for v in values]


# --- the statistics -------------------------------------------------------------------------------------
def summarise(records: List[Dict[str, Any]], seed: int = 0) -> Dict[str, Any]:
    """The JSON: the records with their statistics, and per algorithm over several worlds."""
    from cube_jax.analytics.intervals import CONFIDENCE, RESAMPLES

    runs = [dict(r, **statistics([r], seed)) for r in records]
    aggregates = []
    for algo, variant in dict.fromkeys((r["algo"], _variant(r)) for r in runs):
        mine = [r for r in runs if (r["algo"], _variant(r)) == (algo, variant)]
        if len(mine) > 1:
            aggregates.append({"algo": algo, "variant": list(variant), "worlds": [r["world"] for r in mine],
                               "num_seeds": sum(r["num_seeds"] for r in mine),
                               "wall_seconds": round(sum(r["wall_seconds"] for r in mine), 2),
                               **statistics(mine, seed)})
    return {"target": TARGET, "confidence": CONFIDENCE, "resamples": RESAMPLES, "bootstrap_seed": seed,
            "runs": runs, "aggregates": aggregates}


def statistics(records: List[Dict[str, Any]], seed: int = 0) -> Dict[str, Any]:
    """Mean and IQM with 95% intervals of greedy success and blocks delivered over the seeds of
    ``records``, resampled within each record (its world), and the seeds at the target."""
    from cube_jax.analytics.intervals import bootstrap_cis, iqm_cis

    strata = [i for i, r in enumerate(records) for _ in r["greedy_success_per_seed"]]
    table = np.array([[v for r in records for v in r[f"greedy_{name}_per_seed"]] for name in METRICS], float)
    means, mean_lows, mean_highs = bootstrap_cis(table, strata, seed=seed)
    iqms, iqm_lows, iqm_highs = iqm_cis(table, strata, seed=seed)
    out: Dict[str, Any] = {"seeds_at_target": int(np.sum(table[0] >= TARGET))}
    for i, name in enumerate(METRICS):
        out[name] = {"mean": float(means[i]), "mean_low": float(mean_lows[i]), "mean_high": float(mean_highs[i]),
                     "iqm": float(iqms[i]), "iqm_low": float(iqm_lows[i]), "iqm_high": float(iqm_highs[i])}
    return out


def _variant(run: Dict[str, Any]) -> tuple:
    """A run's --set overrides (none in runs recorded before the option existed)."""
    return tuple(run.get("variant") or ())


def _key(run: Dict[str, Any]) -> tuple:
    return run["algo"], run["world"], _variant(run)


def merged(previous: Optional[Dict[str, Any]], records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The runs of the earlier JSON not measured again, then the new ones, in world then
    algorithm order (a variant after its plain run)."""
    fresh = {_key(r) for r in records}
    kept = [r for r in (previous or {}).get("runs", []) if _key(r) not in fresh]
    kept = [{k: v for k, v in r.items() if k not in ("seeds_at_target", *METRICS)} for r in kept]
    order = {name: i for i, name in enumerate(WORLDS)}
    algos = {name: i for i, name in enumerate(ALGOS)}
    return sorted(kept + records, key=lambda r: (order.get(r["world"], 99), algos.get(r["algo"], 99), _variant(r)))


# --- the table and the figures --------------------------------------------------------------------------
def _interval(stats: Dict[str, float], what: str) -> str:
    return f"{stats[what]:.2f} [{stats[what + '_low']:.2f}, {stats[what + '_high']:.2f}]"


def _algo_label(run: Dict[str, Any]) -> str:
    """IPPO, MAPPO-RNN, ...; a variant names its overrides: IPPO (train.ent_coef_final=0)."""
    name = run["algo"].upper().replace("_", "-")
    return f"{name} ({', '.join(_variant(run))})" if _variant(run) else name


def _world_label(name: str) -> str:
    return WORLDS[name].label if name in WORLDS else name


def render(data: Dict[str, Any]) -> str:
    """The Markdown table (what lies between the markers) for the JSON ``data``.

    >>> stats = {"mean": 0.8, "mean_low": 0.5, "mean_high": 1.0, "iqm": 1.0, "iqm_low": 0.75, "iqm_high": 1.0}
    >>> run = {"algo": "ippo", "world": "easy", "num_seeds": 4, "env_steps_per_seed": 2000000, "wall_seconds": 412.3,
    ...        "eval_episodes": 128, "greedy_success_per_seed": [1.0, 1.0, 1.0, 0.0], "seeds_at_target": 3,
    ...        "sampled_success_per_seed": [0.9, 0.8, 0.75, 0.5], "success": stats, "blocks": dict(stats, mean=0.93)}
    >>> print(render({"target": 0.9, "confidence": 0.95, "resamples": 10000, "runs": [run], "aggregates": []}))
    | algorithm | world | seeds | env steps per seed | greedy success: mean [95% CI] | greedy success: IQM [95% CI] | blocks delivered: mean [95% CI] | blocks delivered: IQM [95% CI] | seeds >= 0.9 | greedy success per seed | sampled success per seed | wall (all seeds) |
    | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
    | IPPO | easy | 4 | 2.00e+06 | 0.80 [0.50, 1.00] | 1.00 [0.75, 1.00] | 0.93 [0.50, 1.00] | 1.00 [0.75, 1.00] | 3 / 4 | 1.00, 1.00, 1.00, 0.00 | 0.90, 0.80, 0.75, 0.50 | 412 s |
    <BLANKLINE>
    Greedy evaluation, 128 episodes per seed, the papers' reward; intervals: 95% percentile bootstrap over seeds, 10000 resamples.
    """
    columns = ["algorithm", "world", "seeds", "env steps per seed", "greedy success: mean [95% CI]",
               "greedy success: IQM [95% CI]", "blocks delivered: mean [95% CI]", "blocks delivered: IQM [95% CI]",
               f"seeds >= {data['target']}", "greedy success per seed", "sampled success per seed", "wall (all seeds)"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    runs_of = {_key(r): r for r in data["runs"]}
    for r in data["runs"] + data["aggregates"]:
        if "worlds" in r:  # an algorithm over several worlds
            mine = [runs_of[(r["algo"], w, _variant(r))] for w in r["worlds"]]
            world = "all: " + ", ".join(_world_label(w) for w in r["worlds"]) + " (stratified)"
            seeds = " + ".join(str(m["num_seeds"]) for m in mine)
            steps = ", ".join(f"{m['env_steps_per_seed']:.2e}" for m in mine)
            greedy = sampled = ""
        else:
            world, seeds, steps = _world_label(r["world"]), str(r["num_seeds"]), f"{r['env_steps_per_seed']:.2e}"
            greedy, sampled = _rates(r["greedy_success_per_seed"]), _rates(r.get("sampled_success_per_seed"))
        cells = [_algo_label(r), world, seeds, steps,
                 _interval(r["success"], "mean"), _interval(r["success"], "iqm"),
                 _interval(r["blocks"], "mean"), _interval(r["blocks"], "iqm"),
                 f"{r['seeds_at_target']} / {r['num_seeds']}", greedy, sampled, f"{r['wall_seconds']:.0f} s"]
        lines.append("| " + " | ".join(cells) + " |")
    episodes = sorted({r["eval_episodes"] for r in data["runs"]})
    lines += ["", f"Greedy evaluation, {' or '.join(map(str, episodes))} episodes per seed, the papers' reward; "
              f"intervals: {data['confidence']:.0%} percentile bootstrap over seeds, {data['resamples']} resamples"
              + ("; rows \"all\" resample the seeds within each world." if data["aggregates"] else ".")]
    return "\n".join(lines)


def _rates(values: Optional[List[float]]) -> str:
    return "-" if values is None else ", ".join(f"{v:.2f}" for v in values)


def plot_curves(data: Dict[str, Any], folder: Path) -> List[Path]:
    """``rl_seeds_<world>.png`` per world: each algorithm's mean training success and blocks
    delivered over seeds against env steps per seed, with its 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for world in dict.fromkeys(r["world"] for r in data["runs"]):
        runs = [r for r in data["runs"] if r["world"] == world]
        # the legend goes under the panels, a line per run (long variant names wrapped), so it
        # covers no curve and no label squeezes the panels
        labels = [textwrap.fill(f"{_algo_label(r)}, {r['num_seeds']} seeds", 110) for r in runs]
        legend_height = 0.17 * sum(label.count("\n") + 1 for label in labels) + 0.2  # inches
        height = 3.4 + legend_height
        fig, axes = plt.subplots(1, len(METRICS), figsize=(10, height))
        for ax, (name, title) in zip(axes, (("success", "training success rate"),
                                            ("blocks", "training blocks delivered"))):
            for i, r in enumerate(runs):
                x, curve = r["curve"]["env_steps_per_seed"], r["curve"][name]
                ax.plot(x, curve["mean"], color=f"C{i}", label=labels[i])
                ax.fill_between(x, curve["low"], curve["high"], color=f"C{i}", alpha=0.25, linewidth=0)
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("env steps per seed")
            ax.set_title(title, fontsize=10)
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="lower center", ncol=1, frameon=False, fontsize=8)
        fig.suptitle(f"{_world_label(world)}: mean over seeds, 95% bootstrap band "
                     "(sampled training episodes)", fontsize=10)
        fig.tight_layout(rect=(0, legend_height / height, 1, 1))
        path = folder / f"rl_seeds_{world}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


# --- the whole command -------------------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    previous = json.loads(args.json.read_text()) if args.json.is_file() else None
    failed = []
    if args.render_only:
        if previous is None:
            raise SystemExit(f"--render-only: no results at {args.json}")
        data = previous
    else:
        records, start = [], time.perf_counter()
        for i, plan in enumerate(args.plans, 1):
            try:
                summary = run(plan, f"{i}/{len(args.plans)}")
            except RunFailed as err:
                print(str(err), file=sys.stderr, flush=True)
                failed.append(plan.label)
                continue
            records.append(record(plan, summary))
        print(f"{len(records)} of {len(args.plans)} runs in {time.perf_counter() - start:.0f} s", flush=True)
        if not records:
            return 1
        data = summarise(merged(previous, records))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {_shown(args.json)}", flush=True)
    for path in plot_curves(data, args.json.parent):
        print(f"wrote {_shown(path)}", flush=True)
    print(render(data))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
