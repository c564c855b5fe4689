"""Where the greedy play of trained PPO seeds fails: frozen worlds against moving ones.

    python benchmarks/greedy_failures.py                # the n-curriculum's ten-seed runs under runs/rl_seeds/
    python benchmarks/greedy_failures.py runs/rl_seeds/ippo-n3 --episodes 512 --json /tmp/f.json

Every seed of each run folder (its ``checkpoint/runner`` holds all of them; PPO runs, feedforward
or recurrent) plays the same ``--episodes`` episodes (``episode_keys(EVAL_SEED, E)``: layouts
drawn by the world's reset, from its layout pool where it has one; the papers' reward) twice: greedily (argmax) and with actions sampled from its policy. A
greedy episode that does not deliver every block is *frozen* when the world (every agent's
and block's position and which blocks are delivered) did not change in its last
``--frozen-steps`` steps, and *moving* otherwise (the agents still walk, or cycle through
states). For a feedforward actor the world fixes the observation, so a frozen world is a
fixed point of the argmax: the same actions forever. For the frozen episodes the table
gives how long the world had stood still when the episode was cut off, and (feedforward
actors) the mean probability of the action the argmax takes there, averaged over the agents:
how sure the policy is of the move that keeps the team stuck, and how often sampled play
would leave it.

The JSON (``benchmarks/results/greedy_failures.json``) holds every seed's figures; the figure
``greedy_failures.png`` beside it shows, per run and seed, the share of episodes delivered,
failed frozen and failed moving; the table is printed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = "benchmarks/greedy_failures.py"
JSON_REL = "benchmarks/results/greedy_failures.json"
DEFAULT_RUNS = ("ippo-n2", "mappo-n2", "ippo-n2+network.blocked_moves=true", "mappo-n2+network.blocked_moves=true",
                "ippo_rnn-n2", "ippo-n3", "mappo-n3",
                "ippo-n3+train.ent_coef_final=0", "ippo-n3+network.blocked_moves=true",
                "ippo_rnn-n3", "ippo-n4+shaping.reach=focus",
                "ippo-n4+network.blocked_moves=true+shaping.reach=focus+train.init_from=ippo-n3+network.blocked_moves=true",
                )  # under runs/rl_seeds/, those that exist
EVAL_SEED = 20_000  # episode keys: PRNGKey(EVAL_SEED + i), other than training's and the driver's evaluation
DEFAULT_EPISODES = 256
DEFAULT_FROZEN_STEPS = 20


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=SCRIPT, description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", type=Path,
                        help="run folders of PPO runs (default: the n-curriculum's ten-seed runs under runs/rl_seeds/)")
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help=f"layouts per seed (default {DEFAULT_EPISODES})")
    parser.add_argument("--frozen-steps", type=int, default=DEFAULT_FROZEN_STEPS,
                        help=f"a failed episode is frozen when its world stood still this many last steps "
                        f"(default {DEFAULT_FROZEN_STEPS})")
    parser.add_argument("--json", type=Path, default=None, help=f"the results (default {JSON_REL})")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be at least 1, got {args.episodes}")
    if args.frozen_steps < 1:
        parser.error(f"--frozen-steps must be at least 1, got {args.frozen_steps}")
    if args.json is None:
        args.json = ROOT / JSON_REL
    if not args.runs:
        args.runs = [ROOT / "runs" / "rl_seeds" / name for name in DEFAULT_RUNS
                     if (ROOT / "runs" / "rl_seeds" / name / "summary.json").is_file()]
        if not args.runs:
            parser.error("no run folders given and none of the default ones exists under runs/rl_seeds/ "
                         "(python benchmarks/rl_seeds.py --algos ippo --worlds n3 trains one)")
    for run in args.runs:
        if not (run / "config.yaml").is_file() or not (run / "checkpoint" / "runner").is_dir():
            parser.error(f"{run}: not a finished run folder with a checkpoint (config.yaml, checkpoint/runner)")
    return args


# --- the analysis -------------------------------------------------------------------------------------------
def play(env, policy, keys, policy_states=None):
    """Plays one episode per key with the batched ``policy`` (its states ``policy_states``,
    batched over the episodes, or ``policy.init``'s): per episode ``success`` bool, ``still``
    int32 (steps the world had not changed when the episode ended), the final ``state`` and
    the policy's final state. Pure; jit it."""
    import jax
    import jax.numpy as jnp

    from cube_jax.evaluation.batched import advance, start

    def world(state):
        return (state.agent_pos, state.block_pos, state.block_alive)

    def one(key, policy_state):
        carry = start(env, policy, key, policy_state)

        def body(c, _):
            carry, still = c
            new = advance(env, policy, carry)
            same = jax.tree.reduce(jnp.logical_and, jax.tree.map(lambda a, b: jnp.all(a == b),
                                                                 world(new.state), world(carry.state)))
            live = ~carry.stats.done
            return (new, jnp.where(live, jnp.where(same, still + 1, 0), still)), None

        (carry, still), _ = jax.lax.scan(body, (carry, jnp.int32(0)), None, length=env.max_steps)
        return carry.stats.success, still, carry.state, carry.policy_state

    if policy_states is None:
        policy_states = jax.vmap(lambda k: policy.init(jax.random.fold_in(k, 1)))(keys)  # start's own default
    return jax.vmap(one)(keys, policy_states)


def classify(success: np.ndarray, still: np.ndarray, frozen_steps: int) -> Dict[str, np.ndarray]:
    """Masks over episodes: ``failed``, ``frozen`` (failed, world still for >= frozen_steps), ``moving``.

    >>> m = classify(np.array([True, False, False]), np.array([0, 30, 3]), 20)
    >>> [m[k].tolist() for k in ("failed", "frozen", "moving")]
    [[False, True, True], [False, True, False], [False, False, True]]
    """
    failed = ~np.asarray(success, bool)
    frozen = failed & (np.asarray(still) >= frozen_steps)
    return {"failed": failed, "frozen": frozen, "moving": failed & ~frozen}


def analyse_run(run_dir: Path, episodes: int, frozen_steps: int) -> Dict[str, Any]:
    """Every seed of one run folder: greedy and sampled success, and the greedy failures' kinds."""
    import jax
    import jax.numpy as jnp

    from cube_jax.evaluation.batched import episode_keys
    from cube_jax.rl import algorithms
    from cube_jax.rl import config as C
    from cube_jax.rl.checkpoint import restore_runner
    from cube_jax.rl.run import Session

    saved = C.load_yaml(run_dir / "config.yaml")
    learner = algorithms.find(str(saved.get("algo")))
    if learner is None or learner.q_values:
        raise SystemExit(f"{run_dir}: a {saved.get('algo')} run; this script reads PPO actors (ippo, mappo)")
    config = C.build(saved["algo"], overrides=[f"output.resume={run_dir}"])
    session = Session(config)
    trainer = session.trainer
    params = trainer.policy_params(restore_runner(run_dir / "checkpoint", session.abstract))
    env = trainer.env
    recurrent = trainer.recurrent
    keys = episode_keys(EVAL_SEED, episodes)
    sample_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)  # as the evaluation's rollout folds them

    @jax.jit
    def evaluate(actor_params, greedy):
        policy = trainer.batched_policy(actor_params)
        states = policy.states(sample_keys, jnp.full(keys.shape[:1], greedy))
        success, still, final, final_states = play(env, policy, keys, states)
        if recurrent:
            top = jnp.full(success.shape, jnp.nan)
        else:  # the probability of the argmax action in the final state, mean over agents
            logits = jax.vmap(policy.scores)(final, final_states)
            top = jax.nn.softmax(logits).max(-1).mean(-1)
        return success, still, top

    seeds = []
    for seed in range(config.num_seeds):
        seed_params = jax.tree.map(lambda x: x[seed], params)
        success, still, top = map(np.asarray, evaluate(seed_params, True))
        sampled, _, _ = map(np.asarray, evaluate(seed_params, False))
        masks = classify(success, still, frozen_steps)
        frozen = masks["frozen"]
        seeds.append({
            "greedy_success": float(success.mean()),
            "sampled_success": float(sampled.mean()),
            "failed": int(masks["failed"].sum()),
            "frozen": int(frozen.sum()),
            "moving": int(masks["moving"].sum()),
            "frozen_steps_median": float(np.median(still[frozen])) if frozen.any() else None,
            "frozen_top_probability": float(top[frozen].mean()) if frozen.any() and not recurrent else None,
        })
        print(f"  {run_dir.name} seed {seed}: greedy {seeds[-1]['greedy_success']:.2f}, sampled "
              f"{seeds[-1]['sampled_success']:.2f}; {seeds[-1]['failed']} failed: {seeds[-1]['frozen']} frozen, "
              f"{seeds[-1]['moving']} moving", flush=True)
    try:
        shown = str(run_dir.resolve().relative_to(ROOT))
    except ValueError:
        shown = str(run_dir)
    return {"run": run_dir.name, "run_dir": shown, "algo": config.algo, "recurrent": recurrent,
            "n": env.num_agents, "max_steps": env.max_steps, "env_steps_per_seed": _env_steps(run_dir, config),
            "ent_coef": config.train.ent_coef, "ent_coef_final": config.train.ent_coef_final,
            "blocked_moves": config.network.blocked_moves,
            "reach": config.shaping.reach if config.shaping.enabled else None,
            "init_from": Path(config.train.init_from).name if config.train.init_from else None, "seeds": seeds}


def _env_steps(run_dir: Path, config) -> int:
    summary = json.loads((run_dir / "summary.json").read_text())
    return int(summary["env_steps"]) // config.num_seeds


# --- the table and the figure --------------------------------------------------------------------------------
def totals(run: Dict[str, Any]) -> Dict[str, Any]:
    """One run's figures over its seeds."""
    seeds = run["seeds"]
    failed = sum(s["failed"] for s in seeds)
    frozen = sum(s["frozen"] for s in seeds)
    tops = [(s["frozen_top_probability"], s["frozen"]) for s in seeds if s["frozen_top_probability"] is not None]
    medians = [s["frozen_steps_median"] for s in seeds if s["frozen_steps_median"] is not None]
    return {
        "greedy": float(np.mean([s["greedy_success"] for s in seeds])),
        "sampled": float(np.mean([s["sampled_success"] for s in seeds])),
        "failed": failed,
        "frozen_share": frozen / failed if failed else None,
        "frozen_steps_median": float(np.median(medians)) if medians else None,
        "top": sum(p * k for p, k in tops) / sum(k for _, k in tops) if tops else None,
    }


def _label(run: Dict[str, Any]) -> str:
    """The run as the table names it: the algorithm, then what its recipe changes.

    >>> run = {"algo": "ippo", "recurrent": False, "ent_coef": 0.05, "ent_coef_final": None}
    >>> _label(run), _label(dict(run, reach="nearest")), _label(dict(run, reach="focus", blocked_moves=True))
    ('IPPO', 'IPPO', 'IPPO (blocked moves observed, focus reach)')
    >>> _label(dict(run, init_from="ippo-n3"))
    'IPPO (started from ippo-n3)'
    """
    name = run["algo"].upper() + ("-RNN" if run["recurrent"] else "")
    notes = [f"entropy {run['ent_coef']:g} -> {run['ent_coef_final']:g}"] if run["ent_coef_final"] is not None else []
    if run.get("blocked_moves"):  # absent from runs measured before the option existed
        notes.append("blocked moves observed")
    if run.get("reach") not in (None, "nearest"):  # the curriculum preset's reach is not named
        notes.append(f"{run['reach']} reach")
    if run.get("init_from"):
        notes.append(f"started from {run['init_from']}")
    return name + (f" ({', '.join(notes)})" if notes else "")


def render(data: Dict[str, Any]) -> str:
    """The Markdown table for the JSON ``data``.

    >>> seed = {"greedy_success": 0.5, "sampled_success": 0.75, "failed": 2, "frozen": 1, "moving": 1,
    ...         "frozen_steps_median": 200.0, "frozen_top_probability": 0.6}
    >>> run = {"run": "ippo-n3", "algo": "ippo", "recurrent": False, "n": 3, "env_steps_per_seed": 30000000,
    ...        "ent_coef": 0.05, "ent_coef_final": None, "seeds": [seed, dict(seed, frozen=2, moving=0)]}
    >>> print(render({"episodes": 4, "frozen_steps": 20, "runs": [run]}))
    | run | n | env steps per seed | greedy success (mean of seeds) | sampled success | failed greedy episodes | of them frozen | median steps frozen | probability of the argmax action there | frozen / failed per seed |
    | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
    | IPPO (`ippo-n3`) | 3 | 3.00e+07 | 0.50 | 0.75 | 4 | 75% | 200 | 0.60 | 1/2, 2/2 |
    <BLANKLINE>
    4 episodes per seed, from the same keys for every seed and run; frozen: the world did not change in the episode's last 20 or more steps.
    """
    columns = ["run", "n", "env steps per seed", "greedy success (mean of seeds)", "sampled success",
               "failed greedy episodes", "of them frozen", "median steps frozen",
               "probability of the argmax action there", "frozen / failed per seed"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for run in data["runs"]:
        t = totals(run)
        cells = [f"{_label(run)} (`{run['run']}`)", str(run["n"]), f"{run['env_steps_per_seed']:.2e}",
                 f"{t['greedy']:.2f}", f"{t['sampled']:.2f}", str(t["failed"]),
                 "-" if t["frozen_share"] is None else f"{t['frozen_share']:.0%}",
                 "-" if t["frozen_steps_median"] is None else f"{t['frozen_steps_median']:.0f}",
                 "-" if t["top"] is None else f"{t['top']:.2f}",
                 ", ".join(f"{s['frozen']}/{s['failed']}" for s in run["seeds"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"{data['episodes']} episodes per seed, from the same keys for every seed and run; frozen: the world "
              f"did not change in the episode's last {data['frozen_steps']} or more steps."]
    return "\n".join(lines)


def plot(data: Dict[str, Any], path: Path) -> Path:
    """Per run and seed, the greedy episodes' shares: delivered, failed frozen, failed moving."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = data["runs"]
    cols = min(4, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.9 * rows + 0.4), squeeze=False, sharey=True)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax, run in zip(axes.flat, runs):
        seeds = run["seeds"]
        x = np.arange(len(seeds))
        total = data["episodes"]
        parts = [("delivered", [s["greedy_success"] for s in seeds], "C2"),
                 ("failed, frozen", [s["frozen"] / total for s in seeds], "C3"),
                 ("failed, moving", [s["moving"] / total for s in seeds], "C1")]
        bottom = np.zeros(len(seeds))
        for name, values, color in parts:
            ax.bar(x, values, bottom=bottom, color=color, label=name)
            bottom += np.asarray(values)
        ax.plot(x, [s["sampled_success"] for s in seeds], "k_", markersize=12, label="sampled: delivered")
        ax.set_title(f"{_label(run)}\n{run['run']}", fontsize=8)
        ax.set_xticks(x)
        ax.set_xlabel("seed")
        ax.set_ylim(0, 1.0)
    for row in axes:
        row[0].set_ylabel("share of greedy episodes")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.3 / (2.9 * rows + 0.4) + 0.02, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    runs = []
    for i, run_dir in enumerate(args.runs, 1):
        print(f"[{i}/{len(args.runs)}] {run_dir}", flush=True)
        runs.append(analyse_run(run_dir, args.episodes, args.frozen_steps))
    data = {"episodes": args.episodes, "frozen_steps": args.frozen_steps, "eval_seed": EVAL_SEED,
            "seconds": round(time.perf_counter() - start, 1), "runs": runs}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.json}", flush=True)
    print(f"wrote {plot(data, args.json.with_suffix('.png'))}", flush=True)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
