"""Throughput of CUBE through the JaxMARL adapter against the native step, in one run.

    python benchmarks/jaxmarl_throughput.py                          # easy, 64 and 1024 envs
    python benchmarks/jaxmarl_throughput.py --task n2 --envs 256,4096 --out runs/jm.json

Every case is one jitted ``lax.scan`` of ``--steps`` vmapped steps over ``num_envs``
environments of the task's world (the training world: the trainer's pool for a drawn task),
with random actions from a table and every observation and reward consumed; the episode
clocks start staggered, as in a training run after its first episodes, so that episodes end
at every step rather than all at once:

  native          ``jax.vmap(world.step)``: the core's step, no reset
  native+reset    ``AutoResetWrapper(world)``: the project's training step (resets only the
                  environments that finished)
  native+log      ``LogWrapper(AutoResetWrapper(world))`` of ``cube_jax.wrappers``
  jaxmarl         the adapter's ``step`` (JaxMARL's ``MultiAgentEnv.step``: ``step_env`` and a
                  reset every step, one selected), with the per-environment keys a JaxMARL
                  script splits at every step
  jaxmarl+log     the same inside JaxMARL's ``LogWrapper``

The machine may be shared: the cases are timed round-robin, ``--rounds`` times; a rate is the
median over the rounds and a ratio the median of the rounds' ratios (both cases timed in the
same round). Writes ``benchmarks/results/jaxmarl_throughput.json`` with the machine and the
provenance (versions, commit, command) and, with ``--doc``, the generated table of
``docs/jaxmarl.md`` (:func:`render`).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

import jax
import jax.numpy as jnp

from cube_jax.wrappers import AutoResetWrapper, LogWrapper

from bench_common import host_info, save_results

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/jaxmarl_throughput.py"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "jaxmarl_throughput.json"
DOC = ROOT / "docs" / "jaxmarl.md"
ACTION_TABLE = 16  # rollouts cycle through this many pre-drawn joint actions
CASES = ("native", "native+reset", "native+log", "jaxmarl", "jaxmarl+log")
# (case, baseline): the ratios reported
RATIOS = (("jaxmarl", "native+reset"), ("jaxmarl+log", "native+log"), ("jaxmarl", "native"),
          ("jaxmarl+log", "native"))


def native_rollout(world, wrap, num_envs: int, steps: int):
    """The core's vmapped step (``wrap``ped: auto-reset, logging), observations and rewards consumed."""
    env = wrap(world)
    state, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    step = jax.vmap(env.step)

    def rollout(state, actions):
        def body(carry, t):
            s, acc = carry
            s, ts = step(s, actions[t % ACTION_TABLE])
            return (s, acc + ts.observation.sum() + ts.reward.sum()), None

        return jax.lax.scan(body, (state, jnp.float32(0)), jnp.arange(steps))[0]

    return jax.jit(rollout), state


def jaxmarl_rollout(env, num_envs: int, steps: int):
    """The JaxMARL interface's vmapped step, keys split per step as JaxMARL's scripts do."""
    _, state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    step = jax.vmap(env.step)

    def rollout(state, actions):
        def body(carry, t):
            s, acc, key = carry
            key, sub = jax.random.split(key)
            a = actions[t % ACTION_TABLE]
            obs, s, rewards, dones, _ = step(jax.random.split(sub, num_envs), s,
                                             {name: a[:, i] for i, name in enumerate(env.agents)})
            consumed = sum(o.sum() for o in obs.values()) + sum(r.sum() for r in rewards.values())
            return (s, acc + consumed, key), None

        return jax.lax.scan(body, (state, jnp.float32(0), jax.random.PRNGKey(1)), jnp.arange(steps))[0]

    return jax.jit(rollout), state


def staggered(state, max_steps: int):
    """The state with every environment's clock at a random step of its episode."""
    if hasattr(state, "env_state"):  # a log wrapper's state around the core's
        return state.replace(env_state=staggered(state.env_state, max_steps))
    return state.replace(t=jax.random.randint(jax.random.PRNGKey(2), state.t.shape, 0, max_steps, jnp.int32))


def build_cases(task: str, num_envs: int, steps: int) -> dict:
    """``{case: (jitted rollout, its arguments, compile seconds)}`` for one batch size."""
    from jaxmarl.wrappers.baselines import LogWrapper as JaxMARLLogWrapper

    from cube_jax.adapters.jaxmarl import make_jaxmarl

    env = make_jaxmarl(task)
    world = env.world

    actions = jax.random.randint(jax.random.PRNGKey(1), (ACTION_TABLE, num_envs, env.num_agents), 0, 5, jnp.int32)
    built = {
        "native": native_rollout(world, lambda w: w, num_envs, steps),
        "native+reset": native_rollout(world, AutoResetWrapper, num_envs, steps),
        "native+log": native_rollout(world, lambda w: LogWrapper(AutoResetWrapper(w)), num_envs, steps),
        "jaxmarl": jaxmarl_rollout(env, num_envs, steps),
        "jaxmarl+log": jaxmarl_rollout(JaxMARLLogWrapper(env), num_envs, steps),
    }
    cases = {}
    for name, (fn, state) in built.items():
        state = staggered(state, world.max_steps)
        started = time.perf_counter()
        jax.block_until_ready(fn(state, actions))
        cases[name] = (fn, (state, actions), time.perf_counter() - started)
    return cases


def measure(cases: dict, env_steps: int, rounds: int) -> dict:
    """env-steps/s of every case in every round, the cases timed round-robin."""
    rates = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (fn, args, _) in cases.items():
            started = time.perf_counter()
            jax.block_until_ready(fn(*args))
            rates[name].append(env_steps / (time.perf_counter() - started))
    return rates


def render(data: dict) -> str:
    """One row per batch size: every case's rate and the ratios (the doc's generated table)."""
    m, p = data["machine"], data["provenance"]
    lines = [
        f"`{p['command']}`: {data['task']}, {data['steps']} steps per call, {data['rounds']} rounds, "
        f"{m['cpus_usable']} usable core(s) ({m['cpu_model']}, load average {m['load_average']:.1f} at the start), "
        f"jax {p['jax']}, jaxmarl {data['jaxmarl']}. Millions of env-steps/s (median over the rounds), then "
        "ratios (median of the rounds' ratios):",
        "",
        "| envs | " + " | ".join(CASES) + " | " + " | ".join(f"{a} / {b}" for a, b in RATIOS) + " |",
        "|" + " --- |" * (1 + len(CASES) + len(RATIOS)),
    ]
    for num_envs in dict.fromkeys(r["envs"] for r in data["rates"]):
        rates = {r["case"]: r["env_steps_per_s"] for r in data["rates"] if r["envs"] == num_envs}
        ratios = {(r["case"], r["baseline"]): r["x"] for r in data["ratios"] if r["envs"] == num_envs}
        lines.append(f"| {num_envs} | " + " | ".join(f"{rates[c] / 1e6:.2f}" for c in CASES) + " | "
                     + " | ".join(f"{ratios[pair]:.2f}" for pair in RATIOS) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="easy", help="a task of cube-v1 (default easy)")
    parser.add_argument("--envs", default="64,1024", help="comma-separated batch sizes (default 64,1024)")
    parser.add_argument("--steps", type=int, default=128, help="steps per timed call (default 128)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds of every case (default 7)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--doc", action="store_true", help="rewrite the generated table of docs/jaxmarl.md")
    args = parser.parse_args(argv)
    envs = [int(v) for v in args.envs.split(",") if v]
    if not envs or min(envs) < 1 or args.steps < 1 or args.rounds < 1:
        parser.error("--envs, --steps and --rounds must be positive")

    from cube_jax.bench.entry import provenance

    data = {"machine": host_info(),
            "provenance": provenance(["python", SCRIPT, *argv]),
            "jaxmarl": version("jaxmarl"), "task": args.task, "steps": args.steps, "rounds": args.rounds,
            "rates": [], "ratios": []}
    for num_envs in envs:
        cases = build_cases(args.task, num_envs, args.steps)
        rates = measure(cases, num_envs * args.steps, args.rounds)
        for name in CASES:
            data["rates"].append({"envs": num_envs, "case": name, "env_steps_per_s": statistics.median(rates[name]),
                                  "rounds": [round(r) for r in rates[name]], "compile_s": cases[name][2]})
        for case, baseline in RATIOS:
            per_round = [a / b for a, b in zip(rates[case], rates[baseline])]
            data["ratios"].append({"envs": num_envs, "case": case, "baseline": baseline,
                                   "x": statistics.median(per_round), "x_rounds": per_round})
        print(f"  {num_envs} envs measured", flush=True)
    save_results(data, args.out, render, DOC if args.doc else None, SCRIPT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
