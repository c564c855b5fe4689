"""Throughput of the CUBE step: a sweep over team size and batch size, and the targets.

Writes ``benchmarks/results/throughput.json`` with a heat map next to it
(``throughput_heatmap.png``: agent-steps/s against n = 4 at the same batch size) and, with
``--doc``, the generated tables of ``docs/performance.md`` (see :func:`render`).

    nice -n 5 python benchmarks/throughput.py --doc                  # every default section
    python benchmarks/throughput.py --sections targets --out runs/t.json
    python benchmarks/throughput.py --quick                          # smoke check
    python benchmarks/throughput.py --against 2086abb --out runs/a.json  # the working tree / 2086abb

The machine this runs on is shared: every comparison is made of A/B *pairs*, A and B timed
back to back, and the median of the pairs' ratios is reported; absolute rates (medians of
the rounds) are only meaningful within one run.

Sections (``--sections``, comma-separated; default all but tiles and device)
  sweep       the step rules alone (random actions, no reset, no observation) for every n
              in SWEEP_NS and batch size in SWEEP_ENVS: agent-steps/s against n = 4 at the
              same batch size, each cell paired with an n = 4 run timed just before it
  targets     paired comparisons: fresh-layout AutoResetWrapper(make(n=4)) with vector
              observations consumed against Jumanji's LevelBasedForaging (20x20, 4 agents,
              4 food, auto-reset, observations consumed); the vmapped step at n = 4 with
              2048 envs against the plain-Python reference (cube_jax/testing/reference.py) on one env;
              n = 8 against n = 4 at 1024 envs
  training    AutoResetWrapper + observations consumed at n = 4, 1024 envs (pool or fresh
              layouts, vector or egocentric), and n = 256 with 64 envs (fresh, egocentric)
  latency     one jitted step of one env (egocentric) at n = 64 and n = 256, best of rounds
              of 100 calls back to back
  tiles       (not in the default) the step rules at TILE_CASES with the batch in tiles of 2, 8
              and 32 Ki agent slots against one piece, every n tiled, in pairs timed back to back
              in one fresh process (python benchmarks/throughput.py --sections tiles --out
              benchmarks/results/throughput_tiles.json)
  device      for an accelerator (not in the default): the step rules at DEVICE_NS x DEVICE_ENVS
              (--ns, --sweep-envs override them) and the fresh-layout auto-reset loop at n = 4,
              --steps steps per call, best of --repeats rounds, with the device named
              (python benchmarks/throughput.py --sections device --out benchmarks/results/throughput_gpu.json)
``--against REV`` (alone, or beside the sections asked for) times AGAINST_CASES (the step rules
at n = 4 and n = 64, the fresh-layout auto-reset loop at n = 4; ``--against-envs`` envs) at the
working tree and at the git revision REV, one process each, interleaved round by round.
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
from cube_jax.cpus import cpu_model

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


# The sweep: every team size against every batch size.
SWEEP_NS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256)
SWEEP_ENVS = (64, 256, 1024, 4096)
SWEEP_AGENT_STEPS = 2**19  # agent-steps per timed rollout (steps = this / (n * envs), 4 .. 128)
SWEEP_MAX_BYTES = 4 << 30  # a cell whose compiled rollout needs more is skipped
# What the sweep must show: no cell below FLOOR_SMALL up to n = 32, none below FLOOR_LARGE above.
FLOOR_SMALL, FLOOR_LARGE, FOLD_MAX_N = 0.5, 0.25, 32


def sweep_steps(n: int, num_envs: int) -> int:
    return max(4, min(128, SWEEP_AGENT_STEPS // (n * num_envs)))


def dynamics_case(n: int, num_envs: int, steps: int, max_bytes=None):
    """The step rules alone, vmapped over ``num_envs`` (None when the rollout needs more than ``max_bytes``)."""
    env = cube_jax.make(n=n, pool_size=min(num_envs, 256))
    state, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    actions = _actions(jax.random.PRNGKey(1), ACTION_TABLE, num_envs, n)
    fn = dynamics_rollout(env, steps)
    memory = _memory_bytes(fn, state, actions)
    if max_bytes is not None and memory > max_bytes:
        return None
    row = {
        "n": n,
        "grid": env.grid_size,
        "blocks": env.num_blocks,
        "envs": num_envs,
        "steps": steps,
        "compile_s": _compile(fn, state, actions),
        "memory_bytes": memory,
    }
    return Case(row, fn, (state, actions), num_envs * steps, agents=n)


def _seconds(case: Case) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(case.fn(*case.args))
    return time.perf_counter() - t0


def bench_sweep(ns, envs, rounds: int) -> dict:
    """Agent-steps/s of every (n, envs) cell, each timed right after n = 4 at the same batch size."""
    base, cells, skipped = {}, [], []
    for e in envs:
        base[e] = dynamics_case(4, e, sweep_steps(4, e))
        for n in ns:
            if n == 4:
                continue
            case = dynamics_case(n, e, sweep_steps(n, e), SWEEP_MAX_BYTES)
            if case is None:
                skipped.append({"n": n, "envs": e, "reason": f"compiled rollout above {SWEEP_MAX_BYTES >> 30} GiB"})
            else:
                cells.append(case)
            print(f"  compiled sweep n={n} envs={e}", flush=True)
    ratios = {id(c): [] for c in cells}
    rates = {id(c): [] for c in cells + list(base.values())}
    for _ in range(rounds):
        for case in cells:
            b = base[case.row["envs"]]
            tb, tc = _seconds(b), _seconds(case)
            rb, rc = b.env_steps * 4 / tb, case.env_steps * case.agents / tc
            rates[id(b)].append(rb)
            rates[id(case)].append(rc)
            ratios[id(case)].append(rc / rb)
    rows = []
    for e in envs:
        b = base[e]
        rows.append(dict(b.row, kernel=_kernel(4, b.row["blocks"]), agent_steps_per_s=_median(rates[id(b)]), x_n4=1.0,
                         x_n4_pairs=[1.0] * rounds))
    for case in cells:
        rows.append(dict(case.row, kernel=_kernel(case.row["n"], case.row["blocks"]),
                         agent_steps_per_s=_median(rates[id(case)]), x_n4=_median(ratios[id(case)]),
                         x_n4_pairs=ratios[id(case)]))
    rows.sort(key=lambda r: (r["n"], r["envs"]))
    return {"ns": list(ns), "envs": list(envs), "rounds": rounds, "cells": rows, "skipped": skipped}


def _kernel(n: int, blocks: int) -> str:
    from cube_jax.core.dynamics import FOLD_MAX_AGENTS, FOLD_MAX_BLOCKS

    push = "folded" if blocks <= FOLD_MAX_BLOCKS else "large"
    movement = "folded" if n <= FOLD_MAX_AGENTS else "large"
    return push if push == movement else f"{push} push, {movement} movement"


def _median(values) -> float:
    return float(np.median(np.asarray(values, float)))


def reference_burst(n: int):
    """A function running the plain-Python reference (one env, random actions) for about
    ``seconds`` and returning its env-steps/s."""
    from cube_jax.testing import reference

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

    world = [fresh()]

    def burst(seconds: float) -> float:
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(100):
                world[0], _, terminated, truncated, _ = reference.step(world[0], [rng.randrange(5) for _ in range(n)])
                steps += 1
                if terminated or truncated:
                    world[0] = fresh()
        return steps / (time.perf_counter() - t0)

    return burst


def paired(name: str, goal: float, a, b, pairs: int, unit: str = "env-steps/s") -> dict:
    """Median over ``pairs`` of rate(a) / rate(b), a and b timed back to back (b first in
    odd pairs, a first in even ones). ``a`` and ``b`` are callables returning a rate."""
    ra, rb = [], []
    for i in range(pairs):
        if i % 2:
            rb.append(b())
            ra.append(a())
        else:
            ra.append(a())
            rb.append(b())
    ratios = [x / y for x, y in zip(ra, rb)]
    return {"case": name, "goal": goal, "unit": unit, "x": _median(ratios), "x_pairs": ratios,
            "a_median": _median(ra), "b_median": _median(rb)}


def _rate(case: Case, per_agent: bool = False):
    return lambda: case.env_steps * (case.agents if per_agent else 1) / _seconds(case)


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


def bench_targets(pairs: int, steps: int) -> list:
    rows = []
    fresh = training_case(4, 1024, steps, "vector", 0)
    lbf = lbf_case(1024, steps)
    print("  compiled the LBF pair", flush=True)
    if lbf is None:
        rows.append({"case": "fresh-layout AutoResetWrapper(make(n=4)), 1024 envs / Jumanji LBF", "goal": 20.0,
                     "skipped": "jumanji not installed (pip install -e '.[bench]')"})
    else:
        rows.append(paired("fresh-layout AutoResetWrapper(make(n=4)), 1024 envs / Jumanji LBF (auto-reset), 1024 envs",
                           20.0, _rate(fresh), _rate(lbf), pairs))
    dyn = dynamics_case(4, 2048, steps)
    burst = reference_burst(4)
    rows.append(paired("step rules, n = 4, 2048 envs / plain-Python reference, one env", 300.0,
                       _rate(dyn), lambda: burst(0.5), pairs))
    n8, n4 = dynamics_case(8, 1024, steps), dynamics_case(4, 1024, steps)
    rows.append(paired("step rules, n = 8 / n = 4, 1024 envs each", 0.5,
                       _rate(n8, per_agent=True), _rate(n4, per_agent=True), pairs, unit="agent-steps/s"))
    return rows


# --- on an accelerator ---------------------------------------------------------------------
#
# Batches sized for a GPU: the step rules alone at every n and batch size, and the training
# loop's environment side (fresh-layout AutoResetWrapper, vector observations and rewards
# consumed) at n = 4. Each program is timed in rounds, round-robin, and keeps its best round.
DEVICE_NS = (4, 16, 64)
DEVICE_ENVS = (16384, 65536)
DEVICE_MAX_BYTES = 32 << 30  # a program whose compiled rollout needs more is skipped


def bench_device(ns, envs, steps: int, rounds: int) -> dict:
    cases, skipped = [], []
    for e in envs:
        for n in ns:
            case = dynamics_case(n, e, steps, DEVICE_MAX_BYTES)
            if case is None:
                skipped.append({"n": n, "envs": e, "reason": f"compiled rollout above {DEVICE_MAX_BYTES >> 30} GiB"})
                continue
            case.row["loop"] = "step rules"
            cases.append(case)
            print(f"  compiled the step rules, n={n} envs={e}", flush=True)
        loop = training_case(4, e, steps, "vector", 0)
        loop.row.update(loop="fresh-layout AutoResetWrapper, vector observations consumed", steps=steps,
                        memory_bytes=_memory_bytes(loop.fn, *loop.args))
        loop.agents = 4
        cases.append(loop)
        print(f"  compiled the auto-reset loop, n=4 envs={e}", flush=True)
    rows = measure(cases, rounds)
    device = jax.devices()[0]
    return {"device": getattr(device, "device_kind", str(device)), "platform": device.platform, "rounds": rounds,
            "rows": [{k: r[k] for k in ("loop", "n", "envs", "steps", "env_steps_per_s", "agent_steps_per_s",
                                        "memory_bytes")} for r in rows],
            "skipped": skipped}


def render_device(device: dict) -> str:
    lines = [f"Device: {device['device']} ({device['platform']}); best of {device['rounds']} rounds.", "",
             "| loop | n | envs | steps per call | env-steps/s | agent-steps/s | memory (XLA) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in device["rows"]:
        lines.append(f"| {r['loop']} | {r['n']} | {r['envs']} | {r['steps']} | {_fmt(r['env_steps_per_s'])} | "
                     f"{_fmt(r['agent_steps_per_s'])} | {r['memory_bytes'] / 2**20:.0f} MiB |")
    for r in device["skipped"]:
        lines.append(f"| step rules | {r['n']} | {r['envs']} | | skipped: {r['reason']} | | |")
    return "\n".join(lines)


# --- one core against two ------------------------------------------------------------------
#
# The same jitted programs timed in two fresh processes: one restricted to a single core before
# JAX starts (as `taskset -c 0` does), one with every core. XLA's CPU compiler counts the
# schedulable cores when it compiles and splits large elementwise fusions into that many
# parallel tasks ("outer_dimension_partitions" in the compiled HLO); the count is reported
# beside the rates.
THREAD_ENVS = (64, 256, 1024)  # Jumanji's LBF loop of the targets joins when jumanji is installed


def _partitioned_fusions(fn, *args) -> int:
    text = fn.lower(*args).compile().as_text()
    return text.count('"outer_dimension_partitions":["')


def threads_child(steps: int, rounds: int) -> dict:
    """Rates of the step rules (n = 4) at THREAD_ENVS and of the fresh-layout auto-reset loop
    (n = 4, 1024 envs), in this process as it is."""
    cases = []
    for e in THREAD_ENVS:
        case = dynamics_case(4, e, max(steps, 65536 // e))
        case.row = {"case": f"step rules, n = 4, {e} envs", "partitioned_fusions": _partitioned_fusions(case.fn, *case.args)}
        cases.append(case)
    reset = training_case(4, 1024, steps, "vector", 0)
    reset.row = {"case": "fresh-layout AutoResetWrapper(make(n=4)), 1024 envs",
                 "partitioned_fusions": _partitioned_fusions(reset.fn, *reset.args)}
    cases.append(reset)
    lbf = lbf_case(1024, steps)
    if lbf is not None:
        lbf.row = {"case": "Jumanji LBF (auto-reset), 1024 envs", "partitioned_fusions": _partitioned_fusions(lbf.fn, *lbf.args)}
        cases.append(lbf)
    rows = measure(cases, rounds)
    return {"cores": len(os.sched_getaffinity(0)), "rows": rows}


def _child(call: str, pinned: bool = False) -> dict:
    """What ``throughput.<call>`` returns, run in a fresh Python process (pinned to one core
    if asked): settings read at import or trace time start from scratch there."""
    import subprocess

    code = (
        "import json, os\n"
        + ("os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n" if pinned else "")
        + "import throughput\n"
        + f"print('CHILD ' + json.dumps(throughput.{call}))\n"
    )
    here = str(Path(__file__).resolve().parent)  # this script's folder, where the child finds it
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("CHILD "))[len("CHILD "):])


def bench_threads(pairs: int, steps: int, rounds: int = 5) -> dict:
    """Pairs of processes, one pinned to a single core and one on every core, run back to back
    (alternating which goes first); per case the median of the pairs' ratios."""
    if len(os.sched_getaffinity(0)) < 2:
        return {"skipped": "one usable core"}
    runs = {True: [], False: []}
    for i in range(pairs):
        for pinned in ((True, False) if i % 2 == 0 else (False, True)):
            runs[pinned].append(_child(f"threads_child({steps}, {rounds})", pinned))
            print(f"  threads pair {i + 1}/{pairs}: {'one core' if pinned else 'all cores'} done", flush=True)
    rows = []
    for j, row in enumerate(runs[True][0]["rows"]):
        one = [r["rows"][j]["env_steps_per_s"] for r in runs[True]]
        every = [r["rows"][j]["env_steps_per_s"] for r in runs[False]]
        rows.append({
            "case": row["case"],
            "one_core": _median(one),
            "all_cores": _median(every),
            "x_pairs": [a / b for a, b in zip(every, one)],
            "x": _median([a / b for a, b in zip(every, one)]),
            "partitioned_one_core": row["partitioned_fusions"],
            "partitioned_all_cores": runs[False][0]["rows"][j]["partitioned_fusions"],
        })
    return {"cores": runs[False][0]["cores"], "pairs": pairs, "rows": rows}


def render_threads(threads: dict) -> str:
    if "skipped" in threads:
        return f"skipped: {threads['skipped']}"
    lines = [f"| program | one core, env-steps/s | {threads['cores']} cores, env-steps/s | {threads['cores']} cores / "
             f"one core (median of {threads['pairs']} pairs) | fusions split into tasks, one core / "
             f"{threads['cores']} cores |",
             "| --- | --- | --- | --- | --- |"]
    for r in threads["rows"]:
        lines.append(f"| {r['case']} | {_fmt(r['one_core'])} | {_fmt(r['all_cores'])} | **{r['x']:.2f}x** "
                     f"({min(r['x_pairs']):.2f}-{max(r['x_pairs']):.2f}) | {r['partitioned_one_core']} / "
                     f"{r['partitioned_all_cores']} |")
    return "\n".join(lines)


# The tile size on a CPU: the step rules at TILE_CASES in tiles of each size against one piece,
# every n tiled (TILE_MIN_AGENTS set to 1) so that the rows below batching.TILE_MIN_AGENTS show
# what tiles would cost them.
TILE_CASES = ((4, 4096), (8, 4096), (16, 4096), (32, 1024), (64, 1024), (256, 4096))
TILE_SETTINGS = (0, 2048, 8192, 32768)  # agent slots per tile; 0: the whole batch in one piece


def tiles_child(rounds: int) -> dict:
    """Agent-steps/s of the step rules at TILE_CASES in one piece and in tiles of every size
    of TILE_SETTINGS, all compiled in this process (the tile size is read when the step is
    traced, so JAX's caches are cleared between sizes) and timed in ``rounds`` rounds: in each,
    every size right after one piece, the order of the sizes alternating from round to round."""
    from cube_jax.core import batching

    saved = batching.TILE_ELEMENTS, batching.TILE_MIN_AGENTS
    batching.TILE_MIN_AGENTS = 1
    rows = []
    try:
        for n, e in TILE_CASES:
            built = {}
            for elements in TILE_SETTINGS:
                batching.TILE_ELEMENTS = elements or 1 << 40
                jax.clear_caches()
                case = built[elements] = dynamics_case(n, e, sweep_steps(n, e))
                case.row["tile_envs"] = batching.env_tile(n, e)
                # compiled ahead of time: clearing the caches would send the jitted function
                # back to tracing, with the next size
                case.fn = case.fn.lower(*case.args).compile()
                _seconds(built[elements])  # the first call after compiling is not timed
            one, ratios = [], {el: [] for el in TILE_SETTINGS[1:]}
            for r in range(rounds):
                for elements in (TILE_SETTINGS[1:] if r % 2 == 0 else TILE_SETTINGS[:0:-1]):
                    t_one, t_tiles = _seconds(built[0]), _seconds(built[elements])
                    one.append(built[0].env_steps * n / t_one)
                    ratios[elements].append(t_one / t_tiles)
            rows.append({"n": n, "envs": e, "one_piece": _median(one), "tiles": [
                {"elements": el, "tile_envs": built[el].row["tile_envs"], "x": _median(ratios[el]), "x_pairs": ratios[el]}
                for el in TILE_SETTINGS[1:]]})
            print(f"  tiles n={n} envs={e} done", flush=True)
    finally:
        batching.TILE_ELEMENTS, batching.TILE_MIN_AGENTS = saved
        jax.clear_caches()
    return {"rows": rows}


def bench_tiles(rounds: int) -> dict:
    """The tile sizes against one piece, in pairs timed back to back in one fresh process
    (:func:`tiles_child`); per case and size the median of the pairs' ratios."""
    from cube_jax.core import batching

    rows = _child(f"tiles_child({rounds})")["rows"]
    return {"method": "pairs in one process", "rounds": rounds, "default_elements": batching.TILE_ELEMENTS,
            "default_min_agents": batching.TILE_MIN_AGENTS, "rows": rows}


def render_tiles(tiles: dict) -> str:
    sizes = [t["elements"] for t in tiles["rows"][0]["tiles"]]
    head = [f"{e // 1024} Ki slots{' (default)' if e == tiles['default_elements'] else ''}" for e in sizes]
    lines = ["| n | envs | one piece, agent-steps/s | " + " | ".join(head) + " |", "| --- " * (3 + len(sizes)) + "|"]
    paired = "pairs" not in tiles  # earlier runs: one process per size, passes over the sizes
    for r in tiles["rows"]:
        now = [t["elements"] == tiles["default_elements"] and r["n"] >= tiles["default_min_agents"] for t in r["tiles"]]
        cells = [f"{'**' * bold}{t['x']:.2f}x{'**' * bold} ({t['tile_envs']}"
                 + (f"; {min(t['x_pairs']):.2f}-{max(t['x_pairs']):.2f})" if paired else ")") for t, bold in zip(r["tiles"], now)]
        lines.append(f"| {r['n']} | {r['envs']} | {_fmt(r['one_piece'])} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("A cell: agent-steps/s with tiles of that many agent slots against one piece (environments "
                 "per tile" + ("; spread of the pairs" if paired else "") + "). "
                 f"Bold: what a step does now (tiles of {tiles['default_elements'] // 1024} Ki slots from "
                 f"{tiles['default_min_agents']} agents on). "
                 + (f"Every size compiled in one process and timed right after one piece, {tiles['rounds']} "
                    "pairs per size, the order of the sizes alternating; median of the pairs' ratios."
                    if paired else f"One process per tile size, best of {tiles['rounds']} rounds each; median "
                    f"of {tiles['pairs']} passes over the sizes."))
    return "\n".join(lines)


# --- against another revision --------------------------------------------------------------
#
# ``--against REV``: the cases of AGAINST_CASES built at the working tree and at REV, each in a
# process of its own whose cube_jax is that revision's (REV's tracked files written to a
# temporary folder) and whose cases are this file's code, then timed in rounds, one round of
# one revision right after one of the other, which goes first alternating; per case the median
# of the pairs' ratios (working tree / REV, rates).
AGAINST_CASES = (("step rules", 4), ("step rules", 64), ("fresh-layout AutoResetWrapper, vector observations", 4))
AGAINST_CALLS = 3  # a round's rate of a case: its best of this many calls back to back


def against_cases(envs: int, steps: int) -> list:
    cases = []
    for loop, n in AGAINST_CASES:
        if loop == "step rules":
            case = dynamics_case(n, envs, sweep_steps(n, envs))
        else:
            case = training_case(n, envs, steps, "vector", 0)
        case.row = {"case": f"{loop}, n = {n}, {envs} envs"}
        cases.append(case)
    return cases


def serve_rounds(envs: int, steps: int) -> None:
    """In a child process: builds the cases, says READY with their names, then times one round
    (env-steps/s of every case, best of AGAINST_CALLS calls) for every line it reads."""
    cases = against_cases(envs, steps)
    for case in cases:
        _seconds(case)  # the first call after compiling is not timed
    print("READY " + json.dumps([case.row["case"] for case in cases]), flush=True)
    for _ in sys.stdin:
        best = [min(_seconds(case) for _ in range(AGAINST_CALLS)) for case in cases]
        print("ROUND " + json.dumps([case.env_steps / s for case, s in zip(cases, best)]), flush=True)


def _serving(tree: Path, envs: int, steps: int):
    import subprocess

    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
            f"import throughput; throughput.serve_rounds({envs}, {steps})\n")
    return subprocess.Popen([sys.executable, "-c", code], cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _reply(proc, prefix: str):
    for line in proc.stdout:
        if line.startswith(prefix + " "):
            return json.loads(line[len(prefix) + 1:])
    raise RuntimeError(f"the child process ended before {prefix} (exit code {proc.wait()})")


def bench_against(rev: str, envs: int, steps: int, pairs: int) -> dict:
    import tempfile

    from kernel_identity import commit_of, revision_tree

    with tempfile.TemporaryDirectory(prefix="throughput_against_") as tmp:
        trees = {"now": ROOT, "base": revision_tree(rev, Path(tmp))}
        procs = {side: _serving(tree, envs, steps) for side, tree in trees.items()}
        try:
            names = [_reply(proc, "READY") for proc in procs.values()][0]
            print(f"  compiled the cases at the working tree and at {rev}", flush=True)
            rates = {"now": [], "base": []}
            for i in range(pairs):
                for side in (("now", "base") if i % 2 == 0 else ("base", "now")):
                    procs[side].stdin.write("time\n")
                    procs[side].stdin.flush()
                    rates[side].append(_reply(procs[side], "ROUND"))
        finally:
            for proc in procs.values():
                proc.stdin.close()
                proc.wait()
    rows = []
    for j, name in enumerate(names):
        now, base = [r[j] for r in rates["now"]], [r[j] for r in rates["base"]]
        ratios = [a / b for a, b in zip(now, base)]
        rows.append({"case": name, "now": _median(now), "base": _median(base), "x": _median(ratios), "x_pairs": ratios})
    return {"rev": rev, "commit": commit_of(rev), "envs": envs, "pairs": pairs, "rows": rows}


def render_against(against: dict) -> str:
    lines = [f"| case | working tree, env-steps/s | {against['rev']} ({against['commit']}), env-steps/s | "
             f"working tree / {against['rev']} (median of {against['pairs']} pairs) |", "| --- | --- | --- | --- |"]
    for r in against["rows"]:
        lines.append(f"| {r['case']} | {_fmt(r['now'])} | {_fmt(r['base'])} | **{r['x']:.3f}x** "
                     f"({min(r['x_pairs']):.3f}-{max(r['x_pairs']):.3f}) |")
    return "\n".join(lines)


# --- output --------------------------------------------------------------------------------


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2e}"


def _below_floor(row: dict) -> bool:
    return row["x_n4"] < (FLOOR_SMALL if row["n"] <= FOLD_MAX_N else FLOOR_LARGE)


def render_sweep(sweep: dict) -> str:
    """The sweep as an n x envs table of agent-steps/s against n = 4 (cells below the floor in bold)."""
    cells = {(r["n"], r["envs"]): r for r in sweep["cells"]}
    envs = sweep["envs"]
    lines = ["| n | blocks | kernel | " + " | ".join(f"{e} envs" for e in envs) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in envs) + " |"]
    for n in sweep["ns"]:
        row = next((r for r in sweep["cells"] if r["n"] == n), None)
        if row is None:
            continue
        out = []
        for e in envs:
            c = cells.get((n, e))
            out.append("-" if c is None else (f"**{c['x_n4']:.2f}**" if _below_floor(c) else f"{c['x_n4']:.2f}"))
        lines.append(f"| {n} | {row['blocks']} | {row['kernel']} | " + " | ".join(out) + " |")
    base = [cells[(4, e)]["agent_steps_per_s"] for e in envs if (4, e) in cells]
    lines.append("| n = 4 agent-steps/s | | | " + " | ".join(_fmt(v) for v in base) + " |")
    return "\n".join(lines)


def render_targets(targets: list, latency: list) -> str:
    lines = ["| case | goal | median of pairs | pairs | A, B (medians) |", "| --- | --- | --- | --- | --- |"]
    for t in targets:
        if "skipped" in t:
            lines.append(f"| {t['case']} | >= {t['goal']:g}x | skipped: {t['skipped']} | | |")
            continue
        span = f"{min(t['x_pairs']):.3g}-{max(t['x_pairs']):.3g}"
        lines.append(f"| {t['case']} | >= {t['goal']:g}x | **{t['x']:.3g}x** | {len(t['x_pairs'])}: {span} | "
                     f"{_fmt(t['a_median'])}, {_fmt(t['b_median'])} {t['unit']} |")
    for r in latency:
        lines.append(f"| one jitted step of one env, n = {r['n']} (k = {r['grid']}, {r['blocks']} blocks), "
                     f"egocentric | {'< 1 ms' if r['n'] == 256 else ''} | **{r['step_ms']:.3g} ms** | best of "
                     f"rounds of {LATENCY_CALLS} calls | |")
    return "\n".join(lines)


def render(data: dict) -> str:
    """The tables ``docs/performance.md`` shows between its generated markers for this JSON."""
    m = data["machine"]
    cpus = f"{m['cpus']} CPUs" + (f" ({m['cpu_model']})" if m.get("cpu_model") else "")
    parts = [f"Run of {m['date']}: JAX {m['jax']}, backend `{m['backend']}`, {cpus}, load average "
             f"{m['load_average_at_start'][0]:.1f} at the start and {m['load_average_at_end'][0]:.1f} at the end."]
    if "targets" in data or "latency" in data:
        parts += ["", "#### Targets", "", render_targets(data.get("targets", []), data.get("latency", []))]
    if "sweep" in data:
        s = data["sweep"]
        parts += ["", f"#### Agent-steps/s against n = 4 at the same batch size (median of {s['rounds']} pairs)", "",
                  render_sweep(s)]
    if "device" in data:
        parts += ["", "#### On the accelerator", "", render_device(data["device"])]
    if "threads" in data:
        parts += ["", "#### One core against all cores (separate processes)", "", render_threads(data["threads"])]
    if "tiles" in data:
        parts += ["", "#### Tiles of environments on a CPU against one piece (step rules, agent-steps/s)", "",
                  render_tiles(data["tiles"])]
    if "against" in data:
        parts += ["", "#### Against another revision, interleaved", "", render_against(data["against"])]
    if "before" in data:
        parts += ["", "#### Before and after", "", render_before_after(data["before"], data)]
    return "\n".join(parts) + "\n"


def _summary(data: dict) -> dict:
    """(label -> value) of the figures compared before and after."""
    out = {}
    for t in data.get("targets", []):
        if "x" in t:
            out[t["case"]] = t["x"]
    for r in data.get("latency", []):
        out[f"one step, n = {r['n']} (ms)"] = r["step_ms"]
    for c in data.get("sweep", {}).get("cells", []):
        if c["n"] != 4:
            out[f"sweep n = {c['n']}, {c['envs']} envs, x n = 4"] = c["x_n4"]
    return out


def render_before_after(before: dict, now: dict) -> str:
    b, a = _summary(before), _summary(now)
    lines = [f"Before: `{before['source']}` (load average {before['machine']['load_average_at_start'][0]:.1f}); "
             "after: this run. Ratios, except the latency rows (ms); the sweep rows list the cells above "
             "n = 32 and those below the floor in either run.", "",
             "| figure | before | after |", "| --- | --- | --- |"]
    for label in a:
        if label in b and not label.startswith("sweep"):
            lines.append(f"| {label} | {b[label]:.3g} | {a[label]:.3g} |")
    sweep = [label for label in a if label.startswith("sweep") and label in b]
    worst_b = min(b[label] for label in sweep) if sweep else float("nan")
    worst_a = min(a[label] for label in sweep) if sweep else float("nan")
    for label in sweep:
        if int(label.split()[3].rstrip(",")) > FOLD_MAX_N or min(a[label], b[label]) < FLOOR_SMALL:
            lines.append(f"| {label} | {b[label]:.3g} | {a[label]:.3g} |")
    lines.append(f"| sweep: lowest cell, x n = 4 | {worst_b:.3g} | {worst_a:.3g} |")
    small = [label for label in sweep if int(label.split()[3].rstrip(",")) <= FOLD_MAX_N]
    large = [label for label in sweep if label not in small]
    for name, labels, floor in (("n <= 32", small, FLOOR_SMALL), ("n > 32", large, FLOOR_LARGE)):
        if labels:
            lines.append(f"| sweep: cells below {floor}x, {name} | {sum(b[x] < floor for x in labels)} of "
                         f"{len(labels)} | {sum(a[x] < floor for x in labels)} of {len(labels)} |")
    return "\n".join(lines)


def _plot_heatmap(sweep: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    ns, envs = sweep["ns"], sweep["envs"]
    cells = {(r["n"], r["envs"]): r["x_n4"] for r in sweep["cells"]}
    grid = np.full((len(ns), len(envs)), np.nan)
    for i, n in enumerate(ns):
        for j, e in enumerate(envs):
            grid[i, j] = cells.get((n, e), np.nan)
    fig, ax = plt.subplots(figsize=(6, 7))
    im = ax.imshow(grid, cmap="RdYlGn", norm=LogNorm(vmin=0.125, vmax=8), aspect="auto")
    for i, n in enumerate(ns):
        for j, e in enumerate(envs):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        fontweight="bold" if grid[i, j] < (FLOOR_SMALL if n <= FOLD_MAX_N else FLOOR_LARGE) else None)
    ax.set_xticks(range(len(envs)), [str(e) for e in envs])
    ax.set_yticks(range(len(ns)), [str(n) for n in ns])
    ax.set_xlabel("vmapped environments")
    ax.set_ylabel("n (agents)")
    ax.set_title("agent-steps/s against n = 4 at the same batch size")
    fig.colorbar(im, ax=ax, label="x n = 4")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


SECTIONS = ("sweep", "targets", "training", "latency", "threads", "device", "tiles")
# "device" is for an accelerator, "tiles" a design check of its own: both are asked for by name
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in ("device", "tiles"))
DOC = ROOT / "docs" / "performance.md"
SCRIPT = "benchmarks/throughput.py"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small sweep (smoke check)")
    parser.add_argument("--sections", help=f"comma-separated, of {SECTIONS} (default: all but device and tiles; "
                        "none with --against)")
    parser.add_argument("--ns", type=_positive_ints, help="team sizes of the sweep (default SWEEP_NS)")
    parser.add_argument("--sweep-envs", type=_positive_ints, help="batch sizes of the sweep (default SWEEP_ENVS)")
    parser.add_argument("--steps", type=int, default=64, help="steps per timed rollout outside the sweep (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="pairs per comparison / timed rounds (default 5)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "throughput.json")
    parser.add_argument("--before", type=Path, help="an earlier run's JSON, carried into this one for the "
                        "before/after table")
    parser.add_argument("--against", metavar="REV", help="also time AGAINST_CASES at the working tree and at the git "
                        "revision REV, interleaved (--repeats pairs, --against-envs envs)")
    parser.add_argument("--against-envs", type=int, default=256, help="batch size of --against (default 256)")
    parser.add_argument("--doc", action="store_true", help="also rewrite the generated block of docs/performance.md")
    parser.add_argument("--compile-cache", type=Path, help="a directory for JAX's persistent compilation cache "
                        "(a second run of unchanged kernels then skips their compiles)")
    args = parser.parse_args(argv)
    if args.compile_cache:
        jax.config.update("jax_compilation_cache_dir", str(args.compile_cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1")
    if args.sections is None:
        args.sections = "" if args.against else ",".join(DEFAULT_SECTIONS)
    sections = [s for s in args.sections.split(",") if s]
    if not set(sections) <= set(SECTIONS):
        parser.error(f"--sections: expected some of {SECTIONS}, got {args.sections!r}")

    quick = args.quick
    steps, repeats = args.steps, args.repeats
    results = {
        "machine": {"platform": platform.platform(), "cpu_model": cpu_model(), "cpus": os.cpu_count(), "jax": jax.__version__,
                    "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
                    "date": time.strftime("%Y-%m-%d %H:%M"), "load_average_at_start": os.getloadavg()},
        "args": {"steps": steps, "repeats": repeats, "quick": quick, "sections": sections},
    }
    print(f"JAX {jax.__version__} on {jax.default_backend()} ({os.cpu_count()} CPUs), load average {os.getloadavg()[0]:.1f}")

    if "targets" in sections:
        results["targets"] = bench_targets(repeats, steps)
        print(render_targets(results["targets"], []))
    if "latency" in sections:
        results["latency"] = [bench_large(n, max(repeats, 5), "egocentric") for n in ([16, 64] if quick else [64, 256])]
        print(render_targets([], results["latency"]))
    if "sweep" in sections:
        ns = args.ns or ((1, 4, 8, 64) if quick else SWEEP_NS)
        envs = args.sweep_envs or ((64, 256) if quick else SWEEP_ENVS)
        if 4 not in ns:
            ns = sorted(set(ns) | {4})
        results["sweep"] = bench_sweep(ns, envs, repeats)
        print(render_sweep(results["sweep"]))
    if "training" in sections:
        cases = [
            training_case(4, 1024, steps, "vector", 4096),
            training_case(4, 1024, steps, "egocentric", 4096),
            training_case(4, 1024, steps, "vector", 0),
            training_case(4, 1024, steps, "egocentric", 0),
            training_case(4, 1024, steps, "vector", 0, max_steps=32),
            training_case(64 if quick else 256, 16 if quick else 64, 8, "egocentric", 0),
        ]
        print("  compiled the training-shaped loops", flush=True)
        results["training"] = measure(cases, repeats)
        print(markdown_table("training-shaped: auto-reset + observations consumed", results["training"],
                             ["env", "envs", "obs_per_agent", "env_steps_per_s", "episodes_ended_per_1k_steps"]))
        results["reset"] = bench_reset(4, 1024, repeats)
        print(markdown_table("reset alone, n=4", results["reset"], ["n", "reset", "envs", "resets_per_s"]))

    if "device" in sections:
        results["device"] = bench_device(args.ns or DEVICE_NS, args.sweep_envs or DEVICE_ENVS, steps, repeats)
        print(render_device(results["device"]))
    if "threads" in sections:
        results["threads"] = bench_threads(repeats if not quick else 1, steps)
        print(render_threads(results["threads"]))
    if "tiles" in sections:
        results["tiles"] = bench_tiles(3 if quick else 9)
        print(render_tiles(results["tiles"]))

    if args.against:
        results["against"] = bench_against(args.against, args.against_envs, steps, repeats)
        print(render_against(results["against"]))

    results["machine"]["load_average_at_end"] = os.getloadavg()
    if args.before:
        before = json.loads(args.before.read_text())
        before.pop("before", None)
        before["source"] = str(args.before.resolve().relative_to(ROOT)) if args.before.resolve().is_relative_to(ROOT) \
            else args.before.name
        results["before"] = before
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {args.out}")
    if "sweep" in results:
        heatmap = args.out.with_name(args.out.stem + "_heatmap.png")
        _plot_heatmap(results["sweep"], heatmap)
        print(f"wrote {heatmap}")
    if args.doc:
        from bench_common import write_generated

        write_generated(DOC, SCRIPT, str(args.out.resolve().relative_to(ROOT)))
        print(f"rewrote the generated block of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
