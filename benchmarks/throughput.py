"""Throughput of the CUBE step: env-steps/s against the number of envs and n.

Prints tables and writes ``benchmarks/results/throughput.json`` with two plots next to it
(env-steps/s against envs, agent-steps/s against n). Every figure comes from this one run,
so ratios between rows are meaningful even on a shared, noisy machine; absolute numbers
are not.

    python benchmarks/throughput.py            # full sweep (several minutes on 2 CPU cores)
    python benchmarks/throughput.py --quick    # small sweep, for a smoke check

Sections
  reference   the plain-Python reference of DYNAMICS.md (tests/reference.py), one env
  dynamics    random actions, no reset, no observation: the step rules alone; n from 1 to
              256 with the batch shrinking as n grows (1024 envs at n = 8, 256 at 16, 64 at 32)
  training    AutoResetWrapper + per-agent observations consumed, n = 4, 1024 envs, beside
              Jumanji's LevelBasedForaging (20x20, 4 agents, 4 food) treated the same way:
              a layout pool or a fresh layout for every episode (the default), vector or
              egocentric observations; episode clocks start staggered, as in training, so
              that episodes end at their natural rate (1 in max_steps env-steps); one row
              with 32-step episodes shows the cost of frequent fresh resets
  large n     n = 256, 64 envs, fresh layouts, egocentric observations, the same loop
  reset       cost of a reset alone: fresh curriculum draw vs pool gather
  latency     one jitted step of one env at large n (best of rounds of 100 calls back to back)
Memory is XLA's own estimate for the compiled rollout (arguments + outputs + temporaries).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import cube_jax
from cube_jax.core.wrappers import AutoResetWrapper

from bench_common import markdown_table

ROOT = Path(__file__).resolve().parents[1]
ACTION_TABLE = 16  # rollouts cycle through this many pre-drawn joint actions


def _positive_ints(text: str) -> list:
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _time(fn, *args, repeats: int):
    """(compile seconds, best seconds per call) of a jitted function."""
    compile_s = _compile(fn, *args)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return compile_s, best


def _compile(fn, *args) -> float:
    """Seconds of the first call (compile and one run)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


@dataclasses.dataclass
class Case:
    """A compiled rollout waiting to be timed: ``fn(*args)`` makes ``env_steps`` env-steps."""

    row: dict
    fn: object
    args: tuple
    env_steps: int
    agents: int = 0


def measure(cases: list, repeats: int) -> list:
    """Times every case ``repeats`` times round-robin and fills in the rates of its row.

    The rounds interleave the cases so that a change of load on the shared machine during
    the run hits all of them alike; each row keeps its best round.
    """
    best = [float("inf")] * len(cases)
    for _ in range(repeats):
        for i, case in enumerate(cases):
            t0 = time.perf_counter()
            jax.block_until_ready(case.fn(*case.args))
            best[i] = min(best[i], time.perf_counter() - t0)
    for case, seconds in zip(cases, best):
        case.row["env_steps_per_s"] = case.env_steps / seconds
        if case.agents:
            case.row["agent_steps_per_s"] = case.env_steps * case.agents / seconds
    return [case.row for case in cases]


def _memory_bytes(fn, *args) -> int:
    analysis = fn.lower(*args).compile().memory_analysis()
    if analysis is None:
        return -1
    return int(
        analysis.argument_size_in_bytes + analysis.output_size_in_bytes + analysis.temp_size_in_bytes
    )


def _actions(key, steps_table: int, num_envs: int, n: int):
    return jax.random.randint(key, (steps_table, num_envs, n), 0, 5, dtype=jnp.int32)


def dynamics_rollout(env, steps: int):
    """A jitted rollout of ``steps`` vmapped steps of the rules alone (no observation, no reset)."""
    from cube_jax.core.dynamics import batched_step, reward_and_flags

    step = jax.vmap(batched_step(env.cfg))

    def rollout(state, actions):
        def body(carry, t):
            s, total = carry
            s, delivered, _ = step(s, actions[t % ACTION_TABLE])
            reward, _, _ = reward_and_flags(env.cfg, s, delivered)
            return (s, total + reward.sum()), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.float32(0)), jnp.arange(steps))
        return state, total

    return jax.jit(rollout)


def n_sweep_envs(n: int) -> int:
    """Vmapped environments for team size n in the n sweep: 1024 up to n = 8, then 2^16 / n^2."""
    return max(1, min(1024, 2**16 // (n * n)))


def dynamics_case(n: int, num_envs: int, steps: int) -> Case:
    env = cube_jax.make(n=n, pool_size=min(num_envs, 256))
    state, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    actions = _actions(jax.random.PRNGKey(1), ACTION_TABLE, num_envs, n)
    fn = dynamics_rollout(env, steps)
    row = {
        "n": n,
        "grid": env.grid_size,
        "blocks": env.num_blocks,
        "envs": num_envs,
        "compile_s": _compile(fn, state, actions),
        "memory_bytes": _memory_bytes(fn, state, actions),
    }
    return Case(row, fn, (state, actions), num_envs * steps, agents=n)


def bench_reference(n: int, seconds: float) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests import reference

    env = cube_jax.make(n=n)
    rng = random.Random(0)
    lay = cube_jax.layout(env.reset(jax.random.PRNGKey(0))[0])

    def fresh():
        return reference.World(
            K=env.grid_size,
            agents=list(lay["agents"]),
            blocks=[[r, c, w, True] for r, c, w, _ in lay["blocks"]],
            max_steps=env.max_steps,
        )

    world, steps = fresh(), 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(100):
            world, _, terminated, truncated, _ = reference.step(world, [rng.randrange(5) for _ in range(n)])
            steps += 1
            if terminated or truncated:
                world = fresh()
    elapsed = time.perf_counter() - t0
    return {"n": n, "envs": 1, "env_steps_per_s": steps / elapsed, "agent_steps_per_s": steps * n / elapsed}


def training_case(n: int, num_envs: int, steps: int, observation: str, pool: int, max_steps=None) -> Case:
    """AutoResetWrapper around ``make(n=...)``: random actions, observations and rewards consumed."""
    env = AutoResetWrapper(cube_jax.make(n=n, pool_size=pool, observation=observation, max_steps=max_steps))
    state, ts = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    # Staggered clocks, as a training run has after its first episodes: about num_envs / max_steps
    # episodes end at every step instead of all of them at once every max_steps steps.
    state = state.replace(t=jax.random.randint(jax.random.PRNGKey(2), state.t.shape, 0, env.max_steps, jnp.int32))
    actions = _actions(jax.random.PRNGKey(1), ACTION_TABLE, num_envs, n)
    step = jax.vmap(env.step)

    def rollout(state, actions):
        def body(carry, t):
            s, acc, ends = carry
            s, ts = step(s, actions[t % ACTION_TABLE])
            done = (ts.terminated | ts.truncated).sum(dtype=jnp.int32)
            return (s, acc + ts.observation.sum() + ts.reward.sum(), ends + done), None

        (state, acc, ends), _ = jax.lax.scan(body, (state, jnp.float32(0), jnp.int32(0)), jnp.arange(steps))
        return state, acc, ends

    fn = jax.jit(rollout)
    compile_s = _compile(fn, state, actions)
    episodes = int(fn(state, actions)[2])
    layouts = f"pool={pool}" if pool else "fresh"
    row = {
        "env": f"cube n={n} ({observation}, {layouts}{'' if max_steps is None else f', {max_steps}-step episodes'})",
        "n": n,
        "observation": observation,
        "layouts": layouts,
        "max_steps": env.max_steps,
        "envs": num_envs,
        "obs_per_agent": int(np.prod(ts.observation.shape[2:])),
        "episodes_ended_per_1k_steps": 1000 * episodes / (num_envs * steps),
        "compile_s": compile_s,
    }
    return Case(row, fn, (state, actions), num_envs * steps)


def lbf_case(num_envs: int, steps: int):
    """Jumanji's LevelBasedForaging in the same loop, or None when jumanji is not installed."""
    try:
        import jumanji
        from jumanji.environments.routing.lbf.generator import RandomGenerator
        from jumanji.wrappers import AutoResetWrapper as JumanjiAutoReset
    except ImportError:
        return None
    env = jumanji.make(
        "LevelBasedForaging-v0",
        generator=RandomGenerator(grid_size=20, fov=20, num_agents=4, num_food=4, max_agent_level=2),
    )
    env = JumanjiAutoReset(env)
    state, ts = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    actions = _actions(jax.random.PRNGKey(1), ACTION_TABLE, num_envs, 4) % 6
    step = jax.vmap(env.step)

    def rollout(state, actions):
        def body(carry, t):
            s, acc = carry
            s, ts = step(s, actions[t % ACTION_TABLE])
            obs = ts.observation
            total = sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(obs))
            return (s, acc + total + jnp.sum(ts.reward)), None

        (state, acc), _ = jax.lax.scan(body, (state, jnp.float32(0)), jnp.arange(steps))
        return state, acc

    fn = jax.jit(rollout)
    row = {
        "env": "jumanji LevelBasedForaging 20x20, 4 agents, 4 food",
        "envs": num_envs,
        "compile_s": _compile(fn, state, actions),
    }
    return Case(row, fn, (state, actions), num_envs * steps)


def bench_reset(n: int, num_envs: int, repeats: int) -> list:
    rows = []
    for pool in (0, 4096):
        env = cube_jax.make(n=n, pool_size=pool)
        keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
        fn = jax.jit(jax.vmap(lambda k: env.reset(k)[0].agent_pos.sum()))
        compile_s, best = _time(fn, keys, repeats=repeats)
        rows.append({"n": n, "reset": "pool 4096" if pool else "fresh draw", "envs": num_envs, "resets_per_s": num_envs / best})
    return rows


LATENCY_CALLS = 100


def bench_large(n: int, repeats: int, observation: str) -> dict:
    env = cube_jax.make(n=n, observation=observation)
    state, _ = env.reset(jax.random.PRNGKey(0))
    actions = jax.random.randint(jax.random.PRNGKey(1), (n,), 0, 5, dtype=jnp.int32)
    step = jax.jit(env.step)
    compile_s = _compile(step, state, actions)
    # One call takes well under a millisecond, so a single call's timing is mostly noise:
    # each round makes CALLS calls back to back, each on the state the previous one reached.
    best = float("inf")
    for _ in range(repeats):
        current = state
        t0 = time.perf_counter()
        for _ in range(LATENCY_CALLS):
            current, ts = step(current, actions)
        jax.block_until_ready(ts.observation)
        best = min(best, (time.perf_counter() - t0) / LATENCY_CALLS)
    return {
        "n": n,
        "grid": env.grid_size,
        "blocks": env.num_blocks,
        "observation": observation,
        "step_ms": best * 1e3,
        "compile_s": compile_s,
        "memory_bytes": _memory_bytes(step, state, actions),
    }


def _plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for n in sorted({r["n"] for r in rows}):
        pts = sorted((r["envs"], r["env_steps_per_s"]) for r in rows if r["n"] == n)
        if len(pts) > 1:
            ax.plot(*zip(*pts), marker="o", label=f"n={n}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("vmapped environments")
    ax.set_ylabel("env-steps/s")
    ax.set_title("CUBE step throughput (random actions, no reset)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_scaling(rows: list, path: Path) -> None:
    """Agent-steps/s of the step rules against n (the n sweep's batch sizes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = sorted((r["n"], r["agent_steps_per_s"], r["envs"]) for r in rows if r.get("n_sweep"))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
    for n, rate, envs in pts:
        ax.annotate(f"{envs}", (n, rate), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    base = next((p[1] for p in pts if p[0] == 4), None)
    if base:
        ax.axhline(base, color="grey", lw=0.8, ls="--", label="n = 4")
        ax.axhline(base / 2, color="grey", lw=0.8, ls=":", label="half of n = 4")
        ax.legend()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("n (agents; the labels give the vmapped environments)")
    ax.set_ylabel("agent-steps/s")
    ax.set_title("CUBE step rules: agent-steps/s against team size")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small sweep (smoke check)")
    parser.add_argument("--envs", type=_positive_ints, help="env counts for the n=4 sweep, e.g. 1,64,2048")
    parser.add_argument("--ns", type=_positive_ints, help="team sizes for the n sweep, e.g. 1,4,16,64")
    parser.add_argument("--steps", type=int, default=64, help="steps per timed rollout (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds; the best is kept (default 5)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "throughput.json")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1")

    quick = args.quick
    env_counts = args.envs or ([1, 64, 1024] if quick else [1, 16, 256, 1024, 2048, 4096, 16384])
    ns = args.ns or ([1, 4, 16] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256])
    steps, repeats = args.steps, args.repeats
    results = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "jax": jax.__version__,
                    "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
                    "load_average_at_start": os.getloadavg()},
        "args": {"steps": steps, "repeats": repeats, "quick": quick},
    }

    print(f"JAX {jax.__version__} on {jax.default_backend()} ({os.cpu_count()} CPUs), load average {os.getloadavg()[0]:.1f}")
    ref = bench_reference(4, seconds=1.0 if quick else 3.0)
    results["reference"] = [ref]
    print(markdown_table("plain-Python reference (tests/reference.py), n=4, one env", [ref],
                         ["n", "envs", "env_steps_per_s"]))

    cases = []
    for e in env_counts:
        cases.append(dynamics_case(4, e, steps))
        print(f"  compiled dynamics n=4 envs={e}", flush=True)
    for n in ns:
        e = n_sweep_envs(n)
        case = next((c for c in cases if c.row["n"] == n and c.row["envs"] == e), None)
        if case is None:
            case = dynamics_case(n, e, steps if n <= 64 else 8)
            cases.append(case)
            print(f"  compiled dynamics n={n} envs={e}", flush=True)
        case.row["n_sweep"] = True
    sweep = measure(cases, repeats)
    base = next((r for r in sweep if r["n"] == 4 and r["envs"] == n_sweep_envs(4)), None)
    for row in sweep:
        row["x_reference"] = row["env_steps_per_s"] / ref["env_steps_per_s"]
        if base:
            row["x_n4_per_agent"] = row["agent_steps_per_s"] / base["agent_steps_per_s"]
    results["dynamics"] = sweep
    cols = ["n", "grid", "blocks", "envs", "env_steps_per_s", "agent_steps_per_s", "x_n4_per_agent", "x_reference",
            "compile_s", "memory_bytes"]
    print(markdown_table("dynamics: random actions, no reset, vmapped", sweep, cols))

    train_envs = 1024
    cases = [
        training_case(4, train_envs, steps, "vector", 4096),
        training_case(4, train_envs, steps, "egocentric", 4096),
        training_case(4, train_envs, steps, "vector", 0),
        training_case(4, train_envs, steps, "egocentric", 0),
        training_case(4, train_envs, steps, "vector", 0, max_steps=32),
    ]
    lbf_ = lbf_case(train_envs, steps)
    if lbf_ is not None:
        cases.append(lbf_)
    print("  compiled the training-shaped loops", flush=True)
    training = measure(cases, repeats)
    if lbf_ is None:
        training.append({"env": "jumanji LevelBasedForaging", "skipped": "jumanji not installed (pip install -e '.[bench]')"})
    lbf = training[-1].get("env_steps_per_s")
    for row in training:
        if lbf and "env_steps_per_s" in row:
            row["x_lbf"] = row["env_steps_per_s"] / lbf
        if row.get("observation") == "egocentric":
            vector = next(r for r in training if r.get("observation") == "vector" and r["layouts"] == row["layouts"])
            row["x_vector"] = row["env_steps_per_s"] / vector["env_steps_per_s"]
    results["training"] = training
    print(markdown_table("training-shaped: auto-reset + observations consumed", training,
                 ["env", "envs", "obs_per_agent", "env_steps_per_s", "x_lbf", "x_vector",
                  "episodes_ended_per_1k_steps", "compile_s"]))

    large_n, large_envs = (64, 16) if quick else (256, 64)
    large_training = measure([training_case(large_n, large_envs, 8, "egocentric", 0)], repeats)
    results["large_training"] = large_training
    print(markdown_table("large n, training-shaped: auto-reset, fresh layouts, egocentric observations consumed",
                 large_training, ["env", "envs", "obs_per_agent", "env_steps_per_s", "compile_s"]))

    resets = bench_reset(4, 1024, repeats)
    results["reset"] = resets
    print(markdown_table("reset alone, n=4", resets, ["n", "reset", "envs", "resets_per_s"]))

    large_ns = [16, 64] if quick else [64, 256]
    large = [bench_large(n, max(repeats, 5), "egocentric") for n in large_ns]
    results["large"] = large
    print(markdown_table("one jitted step of one env (latency)", large,
                 ["n", "grid", "blocks", "observation", "step_ms", "compile_s", "memory_bytes"]))

    results["machine"]["load_average_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    plot = args.out.with_suffix(".png")
    _plot(sweep, plot)
    scaling = args.out.with_name(args.out.stem + "_scaling.png")
    _plot_scaling(sweep, scaling)
    print(f"\nwrote {args.out}, {plot} and {scaling}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
