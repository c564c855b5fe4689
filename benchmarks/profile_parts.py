"""Where the time goes: one step at n = 256 and one IPPO update at n = 4, piece by piece.

Each piece is jitted on its own and timed as the median of rounds of calls back to back, on
whatever cores the process may use (pin it for figures that compare: ``taskset -c 0`` and
``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``). The pieces:

* ``step``: the step rules at n = 256 (45 blocks) over a batch of environments taken 20 random
  steps into their episodes: the whole step (``step_kernel``), the count of pushers ahead of
  every agent (above 32 agents that of all four push phases at once, as the step counts them;
  else that of one push phase), one push phase (RIGHT, handed the count above 32 agents) and
  the movement phase, each with the kernel the step itself picks for that phase;
* ``observe``: one environment at n = 256: ``env.step`` whole, the step rules, the egocentric
  observation and the reward;
* ``update``: one IPPO update of the default preset (``configs/ippo.yaml``) on the
  n-curriculum at n = 4 with one seed: the rollout (``PPO.collect``: num_steps steps of
  num_envs environments, actor, critic, sampling, the wrapped environment step and the
  shaping), the whole update (the rollout, GAE and update_epochs passes over shuffled
  minibatches), one epoch's shuffle and split into minibatches, one minibatch step (the
  loss's gradient and the Adam step), and two parts of the rollout for a batch of as many
  states as the rollout visits (4096 for the preset): the preset's shaping potential and the
  environment step; then the whole update per seed of a program that trains one seed or
  ``--seeds`` seeds at once, the seeds vmapped and mapped one after another
  (``train.seed_axis``). ``--set KEY=VALUE`` overrides the preset;
* ``shuffle``: the two ways ``trainer.shuffle_indices`` has of shuffling an update's samples
  (one sort of hashed words, and the Feistel network used from 1024 samples on) and the
  whole update with each, every program compiled first and the two timed in alternate
  rounds in one process, with the ratio of each round's pair;
* ``thunks``: the same update whole under ``jax.profiler`` (XLA's CPU runtime tracing each
  thunk: ``--xla_cpu_enable_xprof_traceme``, added to XLA_FLAGS when this section is asked
  for): every thunk's time summed over the threads that ran it, per update, by the part of
  the update its ops are in (PPO's named scopes ``rollout``, ``values_and_gae``, ``shuffle``
  and ``minibatch_step``), and the largest thunks with their ops and how much of their time
  one thread ran. Its own JSON keeps it apart from the timed pieces:

    python benchmarks/profile_parts.py --sections thunks --rounds 20 \\
        --out benchmarks/results/profile_thunks.json --doc

    taskset -c 0 env XLA_FLAGS=--xla_cpu_multi_thread_eigen=false python benchmarks/profile_parts.py \\
        --before ../before/benchmarks/results/profile_parts.json

``--before`` takes the JSON of the same script run on an earlier checkout (for example a
``git worktree`` of the earlier commit, run with ``PYTHONPATH`` pointing at it) and shows
both; ``--doc`` rewrites the block of ``docs/performance.md`` rendered from ``--out``'s JSON,
if the doc shows one.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "benchmarks/profile_parts.py"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "profile_parts.json"
DOC = ROOT / "docs" / "performance.md"


def _timed(fn, *args, rounds: int, calls: int = 5) -> float:
    """Median over ``rounds`` of the mean time of ``calls`` calls (ms); compiles first."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / calls * 1e3)
    times.sort()
    return times[len(times) // 2]


def _visited(env, envs: int):
    """A batch of ``envs`` states 20 random steps into their episodes."""
    import jax

    state, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), envs))
    step = jax.jit(jax.vmap(env.step))
    for i in range(20):
        state, _ = step(state, jax.random.randint(jax.random.PRNGKey(i), (envs, env.num_agents), 0, 5))
    return state


def profile_step(n: int, envs: int, rounds: int) -> list:
    import jax

    import cube_jax
    from cube_jax.core import dynamics as D
    from cube_jax.core import push as P
    from cube_jax.core.batching import env_last
    from cube_jax.core.bodies import Bodies, Marks, Orders
    from cube_jax.core.movement import movement_phase, movement_phase_folded

    env = cube_jax.make(n=n, observation="egocentric")
    cfg = env.cfg
    state = _visited(env, envs)
    lead = state.t.shape
    pos, bpos = env_last(state.agent_pos, lead, 2), env_last(state.block_pos, lead, 2)
    ar, ac, br, bc = pos[:, 0], pos[:, 1], bpos[:, 0], bpos[:, 1]
    w, alive = env_last(state.block_weight, lead, 1), env_last(state.block_alive, lead, 1)
    actions = jax.random.randint(jax.random.PRNGKey(99), (n, envs), 0, 5)
    bodies = Bodies(ar, ac, br, bc, w, alive)
    marks = Marks.none(ar.shape, br.shape)
    keep = jax.numpy.array(True)
    push = P.push_phase_folded if br.shape[0] <= D.FOLD_MAX_BLOCKS else P.push_phase
    movement = movement_phase_folded if n <= D.FOLD_MAX_AGENTS else movement_phase
    right = 4
    orders = Orders(actions)
    if n > P.BITSET_MAX_AGENTS:
        # as step_kernel: the lines of pushers of all four phases counted once, handed to each phase
        count = ("count of pushers ahead, all four push phases",
                 jax.jit(lambda r, c, a: P.pushers_ahead_all(r, c, a) + 1), (ar, ac, actions))
        orders = Orders(actions, count[1](ar, ac, actions))
    else:
        count = ("count of pushers ahead, one push phase",
                 jax.jit(lambda r, c, a: P.pushers_ahead(r, c, a == right, right)), (ar, ac, actions))
    pieces = [
        ("whole step", jax.jit(lambda *a: D.step_kernel(cfg, *a)), (ar, ac, br, bc, w, alive, actions)),
        count,
        ("one push phase (RIGHT)", jax.jit(lambda o, b, m: push(cfg, keep, right, o, b, m)), (orders, bodies, marks)),
        ("movement phase", jax.jit(lambda o, b, e: movement(cfg, keep, o, b, e)), (orders, bodies, marks.engaged)),
    ]
    label = f"step, n = {n} ({br.shape[0]} blocks), {envs} envs"
    return [{"group": label, "piece": name, "ms": _timed(fn, *args, rounds=rounds)} for name, fn, args in pieces]


def profile_observe(rounds: int) -> list:
    import jax
    import jax.numpy as jnp

    import cube_jax
    from cube_jax.core import dynamics as D
    from cube_jax.core import env as E

    env = cube_jax.make(n=256, observation="egocentric")
    cfg = env.cfg
    state = jax.tree.map(lambda x: x[0], _visited(env, 1))
    actions = jax.random.randint(jax.random.PRNGKey(99), (256,), 0, 5, dtype=jnp.int32)
    delivered = jnp.zeros((), jnp.int32)
    label = f"one environment, n = 256 ({env.num_blocks} blocks), egocentric"
    pieces = [
        ("env.step", jax.jit(env.step), (state, actions)),
        ("step rules", jax.jit(lambda s, a: D.batched_step(cfg)(s, a)), (state, actions)),
        ("observation", jax.jit(env.observe), (state,)),
        ("reward and flags", jax.jit(lambda s, d: E.reward_and_flags(cfg, s, d)), (state, delivered)),
    ]
    rows = [{"group": label, "piece": name, "ms": _timed(fn, *args, rounds=rounds)} for name, fn, args in pieces]
    return rows


# The update section's world: the n-curriculum at n = 4, one seed (--set adds to it).
UPDATE_OVERRIDES = ("env.scenario=null", "env.n=4", "num_seeds=1")


def update_config(overrides=()):
    """The IPPO preset profiled by the update section, with ``overrides`` after its own."""
    from cube_jax.rl import config as C

    return C.build("ippo", overrides=[*UPDATE_OVERRIDES, *overrides])


def _update_label(train) -> str:
    return f"IPPO update, n = 4, {train.num_envs} envs x {train.num_steps} steps, one seed"


def profile_update(rounds: int, overrides=(), seeds: int = 4) -> tuple:
    import jax
    import jax.numpy as jnp

    import cube_jax
    from cube_jax.rl.ppo import PPO
    from cube_jax.rl.shaping import ShapingWrapper
    from cube_jax.rl.trainer import over_seeds

    config = update_config(overrides)
    ppo = PPO(config)
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    t, shaping = config.train, config.shaping
    env = cube_jax.make(n=4)
    shaped = ShapingWrapper(env, t.gamma, shaping.align_weight, shaping.reach_weight)
    visited = t.num_envs * t.num_steps
    states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(1), visited))
    stay = jnp.zeros((visited, 4), jnp.int32)
    label = _update_label(t)
    _, _, samples = jax.jit(ppo.collect)(runner)
    minibatches = jax.jit(ppo.minibatches)(jax.random.PRNGKey(2), samples)
    first = jax.tree.map(lambda x: x[0], minibatches)
    coefs = (ppo.learning_rate(runner.update, ppo.num_updates), ppo.entropy_coef(runner.update, ppo.num_updates),
             jnp.float32(1.0))  # the actor learns (no critic warm-up)
    pieces = [
        ("rollout (collect)", jax.jit(ppo.collect), (runner,)),
        ("shuffle and split into minibatches (one epoch)", jax.jit(ppo.minibatches), (jax.random.PRNGKey(2), samples)),
        ("one minibatch step (gradient and Adam)", jax.jit(lambda c, b: ppo._minibatch_step(c, b, coefs)),
         ((runner.params, runner.opt_state), first)),
        ("whole update", jax.jit(ppo.update), (runner,)),
        (f"shaping potential, {visited} states", jax.jit(jax.vmap(shaped.potential)), (states,)),
        (f"environment step, {visited} states", jax.jit(jax.vmap(env.step)), (states, stay)),
    ]
    rows = [{"group": label, "piece": name, "ms": _timed(fn, *args, rounds=rounds)} for name, fn, args in pieces]
    # The seeds of one run share each jitted call (train.seed_axis): batched into every
    # operation, or one after another; per seed, against the unbatched "whole update" above.
    update = lambda r: ppo.update(r, ppo.num_updates)  # noqa: E731
    group = f"IPPO update, n = 4, {t.num_envs} envs x {t.num_steps} steps, per seed of a program of S seeds"
    for count in sorted({1, seeds}):
        runners = jax.jit(jax.vmap(ppo.init))(jax.random.split(jax.random.PRNGKey(3), count))
        for how, piece in (("vmap", "vmapped over the seeds"), ("map", "one seed after another (lax.map)")):
            ms = _timed(jax.jit(over_seeds(update, how)), runners, rounds=rounds) / count
            rows.append({"group": group, "piece": f"whole update, S = {count}, {piece}", "ms": ms})
    return rows, ppo.steps_per_update


def _alternate(sort_fn, feistel_fn, args, rounds: int, calls: int) -> tuple:
    """The two compiled programs timed in alternate rounds (each round: the mean of ``calls``
    calls of one, then of the other): ``(median sort ms, median feistel ms, [feistel / sort
    of each round])``."""
    import jax

    times = ([], [])
    for fn in (sort_fn, feistel_fn):
        jax.block_until_ready(fn(*args))
    for _ in range(rounds):
        for fn, record in zip((sort_fn, feistel_fn), times):
            start = time.perf_counter()
            for _ in range(calls):
                result = fn(*args)
            jax.block_until_ready(result)
            record.append((time.perf_counter() - start) / calls * 1e3)
    return float(np.median(times[0])), float(np.median(times[1])), [b / a for a, b in zip(*times)]


def profile_shuffle(rounds: int, overrides=()) -> tuple:
    """The shuffle of one update's samples both ways, and the whole update with each (see the
    module doc): ``(rows, ratios)``."""
    import jax

    from cube_jax.rl.ppo import PPO
    from cube_jax.rl.trainer import FEISTEL_MIN, shuffle_indices

    config = update_config(overrides)
    label = _update_label(config.train)
    ppo = PPO(config)
    n = ppo.batch_size
    if n < FEISTEL_MIN:
        raise SystemExit(f"--sections shuffle: an update of {n} samples is shuffled by the sort "
                         f"alone; the Feistel network starts at {FEISTEL_MIN} (raise train.num_envs or num_steps)")
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(2)
    programs = {f"permutation of {n} samples": ([], (key,), 50), "whole update": ([], (runner,), 5)}
    for method in ("sort", "feistel"):
        # a PPO of its own per method: the method is read when the update is traced, and jit
        # caches traces by the function, which two bound methods of one PPO would share
        variant = PPO(config)
        variant.shuffle_method = method
        programs[f"permutation of {n} samples"][0].append(
            jax.jit(lambda k, m=method: shuffle_indices(k, n, m)).lower(key).compile())
        programs["whole update"][0].append(jax.jit(variant.update).lower(runner).compile())
    rows, ratios = [], []
    for name, ((sort_fn, feistel_fn), args, calls) in programs.items():
        sort_ms, feistel_ms, pair_ratios = _alternate(sort_fn, feistel_fn, args, rounds, calls)
        rows.append({"group": label, "piece": f"{name}, one sort", "ms": sort_ms})
        rows.append({"group": label, "piece": f"{name}, Feistel network", "ms": feistel_ms})
        ratios.append({"piece": name, "median": float(np.median(pair_ratios)),
                       "low": float(min(pair_ratios)), "high": float(max(pair_ratios))})
    return rows, ratios


THUNK_FLAG = "--xla_cpu_enable_xprof_traceme=true"
PARTS = ("rollout", "values_and_gae", "shuffle", "minibatch_step")  # PPO's named scopes
OUTSIDE = "outside the scopes"  # the part of ops in none of them, and of copies the compiler added
# A control-flow thunk's traced span covers some of the thunks it runs, which are traced
# (and counted) themselves; these are left out of the sums.
CONTROL_FLOW = ("while", "conditional", "call")
_PART = re.compile(r"(?:^|/)(" + "|".join(PARTS) + r")(?:/|$)")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*)$")


def _instructions(hlo_text: str) -> dict:
    """{instruction name: (opcode, op_name metadata or "")} of a compiled module's text."""
    found = {}
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            opcode = re.search(r"\s([a-z][\w\-]*)\(", " " + m.group(2))
            op_name = re.search(r'metadata=\{op_name="([^"]*)"', line)
            found[m.group(1)] = (opcode.group(1) if opcode else "?", op_name.group(1) if op_name else "")
    return found


def _short(op_name: str) -> str:
    """An op_name without the jit and loop-body wrappers, at most 80 characters."""
    text = re.sub(r"(jit\(\w+\)/|while/body/|closed_call/|checkpoint/)", "", op_name)
    return text if len(text) <= 80 else "..." + text[-77:]


def profile_thunks(rounds: int, overrides=(), top: int = 15) -> dict:
    """One IPPO update (the update section's preset) under ``jax.profiler``: the time of every
    thunk of the compiled program (control flow left out: CONTROL_FLOW), summed over the
    threads that ran it, per update, and by the part of the update its ops belong to (PPO's
    named scopes, PARTS). Needs XLA_FLAGS to hold THUNK_FLAG before JAX starts (``main`` sets
    it when this section is asked for)."""
    import collections
    import tempfile

    import jax

    from cube_jax.rl.ppo import PPO

    if THUNK_FLAG not in os.environ.get("XLA_FLAGS", ""):
        raise RuntimeError(f"the thunks section needs XLA_FLAGS={THUNK_FLAG} set before JAX starts")
    ppo = PPO(update_config(overrides))
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    compiled = jax.jit(ppo.update).lower(runner).compile()
    instructions = _instructions(compiled.as_text())
    for _ in range(3):
        jax.block_until_ready(compiled(runner))
    totals, calls = collections.Counter(), collections.Counter()
    per_thread = collections.defaultdict(collections.Counter)
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        start = time.perf_counter()
        for _ in range(rounds):
            jax.block_until_ready(compiled(runner))
        wall = (time.perf_counter() - start) / rounds
        jax.profiler.stop_trace()
        trace = next(Path(folder).rglob("*.xplane.pb"))
        profile = jax.profiler.ProfileData.from_file(str(trace))
        for plane in profile.planes:
            for line in plane.lines:
                for event in line.events:
                    if event.name in instructions and instructions[event.name][0] not in CONTROL_FLOW:
                        totals[event.name] += event.duration_ns
                        calls[event.name] += 1
                        per_thread[event.name][line.name] += event.duration_ns
    if not totals:
        raise RuntimeError("the profile holds no thunk of the update: was XLA_FLAGS set before JAX started?")
    parts = collections.Counter()
    thunks = []
    for name, ns in totals.items():
        opcode, op_name = instructions[name]
        part = _PART.search(op_name)
        part = part.group(1) if part else OUTSIDE
        parts[part] += ns
        thunks.append({"thunk": name, "opcode": opcode, "part": part, "what": _short(op_name),
                       "calls": calls[name] / rounds, "ms": ns / rounds / 1e6,
                       "busiest_thread_share": max(per_thread[name].values()) / ns})
    thunks.sort(key=lambda t: -t["ms"])
    total = sum(totals.values()) / rounds / 1e6
    t = ppo.train_cfg
    return {
        "label": _update_label(t),
        "rounds": rounds, "wall_ms_per_update": wall * 1e3, "thunk_ms_per_update": total,
        "thunk_count": len(thunks),
        "parts": [{"part": k, "ms": v / rounds / 1e6, "share": v / rounds / 1e6 / total}
                  for k, v in parts.most_common()],
        "top": thunks[:top],
    }


def render_thunks(th: dict) -> list:
    lines = [f"Thunks of {th['label']} (`--sections thunks`, {th['rounds']} updates traced): "
             f"{th['wall_ms_per_update']:.1f} ms of wall time per update while traced, "
             f"{th['thunk_ms_per_update']:.1f} ms of thunk time summed over the threads, "
             f"{th['thunk_count']} thunks (control flow left out: its traced span covers thunks counted "
             "on their own).", "",
             "| part of the update | thunk time per update | share |", "| --- | --- | --- |"]
    lines += [f"| {p['part']} | {p['ms']:.2f} ms | {p['share']:.0%} |" for p in th["parts"]]
    lines += ["", "| thunk | part | ops (op_name) | calls per update | time per update | on its busiest thread |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {t['thunk']} ({t['opcode']}) | {t['part']} | `{t['what']}` | {t['calls']:g} | {t['ms']:.2f} ms | "
              f"{t['busiest_thread_share']:.0%} |" for t in th["top"]]
    return lines


def _machine() -> dict:
    import jax

    from bench_common import host_info

    return {**host_info(), "jax": jax.__version__, "backend": jax.default_backend()}


def _rate(data: dict):
    update = next((r["ms"] for r in data["pieces"] if r["piece"] == "whole update"), None)
    return None if update is None else data["env_steps_per_update"] / (update / 1e3)


def render(data: dict) -> str:
    m = data["machine"]
    before = data.get("before")
    lines = [
        f"Run of {m['date']}: JAX {m['jax']}, backend `{m['backend']}`, {m['cpus_usable']} usable core(s)"
        + (f" (CPU: {m['cpu_model']})" if m.get("cpu_model") else "") + ", "
        f"XLA_FLAGS `{m['xla_flags'] or '(none)'}`, load average {m['load_average']:.1f}"
        + (f"; before: `{before['source']}`, run of {before['machine']['date']} ({before['machine']['cpus_usable']} "
           f"usable core(s), load average {before['machine']['load_average']:.1f})." if before else "."),
        "",
    ]
    blocks = []  # the timed pieces' table and the thunks' tables, as the run has them
    if data["pieces"]:
        blocks.append(_render_pieces(data, before))
    if "thunks" in data:
        blocks.append(render_thunks(data["thunks"]))
    for i, block in enumerate(blocks):
        lines += ([""] if i else []) + block
    return "\n".join(lines) + "\n"


def _render_pieces(data: dict, before) -> list:
    old = {(r["group"], r["piece"]): r["ms"] for r in before["pieces"]} if before else {}
    if before:
        lines = ["| what | piece | before | after | after / before |", "| --- | --- | --- | --- | --- |"]
    else:
        lines = ["| what | piece | time |", "| --- | --- | --- |"]
    for r in data["pieces"]:
        if before:
            was = old.get((r["group"], r["piece"]))
            ratio = f"{r['ms'] / was:.2f}" if was else ""
            was_text = f"{was:.2f} ms" if was else ""
            lines.append(f"| {r['group']} | {r['piece']} | {was_text} | {r['ms']:.2f} ms | {ratio} |")
        else:
            lines.append(f"| {r['group']} | {r['piece']} | {r['ms']:.2f} ms |")
    now = {(r["group"], r["piece"]) for r in data["pieces"]}
    for (group, piece), was in old.items():  # pieces the earlier checkout timed and this one does not
        if (group, piece) not in now:
            lines.append(f"| {group} | {piece} | {was:.2f} ms |  |  |")
    if data.get("shuffle_ratios"):
        lines.append("")
        for r in data["shuffle_ratios"]:
            lines.append(f"Feistel network / one sort, {r['piece']}: {r['median']:.3f} (median of the rounds' pairs; "
                         f"{r['low']:.3f} to {r['high']:.3f}).")
    rate = _rate(data)
    if rate is not None:
        text = f"IPPO training, one seed: {data['env_steps_per_update']} env steps per update, {rate:.3g} env-steps/s"
        if before and _rate(before) is not None:
            text += f" (before: {_rate(before):.3g})"
        lines += ["", text + "."]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=256, help="team size of the step's pieces (default 256)")
    parser.add_argument("--envs", type=int, default=1024, help="batch of the step's pieces (default 1024)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per piece; the median is reported")
    parser.add_argument("--sections", default="step,update",
                        help="comma-separated: step, observe, update, shuffle, thunks")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="update, shuffle and thunks: a config override of the IPPO preset (repeatable)")
    parser.add_argument("--seeds", type=int, default=4, help="update only: seeds of the per-seed rows (default 4)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--before", type=Path, help="this script's JSON from an earlier checkout")
    parser.add_argument("--doc", action="store_true", help="rewrite the generated block of docs/performance.md "
                        "(if it shows one of --out)")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - {"step", "observe", "update", "shuffle", "thunks"})
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; choose from step, observe, update, shuffle, thunks")
    if args.n < 1 or args.envs < 1 or args.rounds < 1 or args.seeds < 1:
        parser.error("--n, --envs, --rounds and --seeds must be at least 1")
    if args.overrides and {"update", "shuffle", "thunks"} & set(sections):
        from cube_jax.rl import config as C

        try:  # a bad override stops here, before anything is timed
            update_config(args.overrides)
        except C.ConfigError as err:
            parser.error(f"--set: {err}")
    if "thunks" in sections and THUNK_FLAG not in os.environ.get("XLA_FLAGS", ""):
        # read when JAX's CPU backend starts, which has not happened yet in this process
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + THUNK_FLAG).strip()
    data = {"machine": _machine(), "pieces": [], "env_steps_per_update": None}
    if "step" in sections:
        data["pieces"] += profile_step(args.n, args.envs, args.rounds)
        print(f"  timed the step's pieces at n = {args.n}", flush=True)
    if "observe" in sections:
        data["pieces"] += profile_observe(args.rounds)
        print("  timed one environment's step at n = 256", flush=True)
    if "update" in sections:
        rows, data["env_steps_per_update"] = profile_update(args.rounds, args.overrides, args.seeds)
        data["pieces"] += rows
        print("  timed the IPPO update's pieces", flush=True)
    if "shuffle" in sections:
        rows, data["shuffle_ratios"] = profile_shuffle(args.rounds, args.overrides)
        data["pieces"] += rows
        print("  timed the two shuffles and the update with each", flush=True)
    if "thunks" in sections:
        data["thunks"] = profile_thunks(args.rounds, args.overrides)
        print("  profiled the IPPO update's thunks", flush=True)
    if args.before:
        before = json.loads(args.before.read_text())
        before.pop("before", None)
        resolved = args.before.resolve()
        before["source"] = str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else args.before.name
        data["before"] = before
    from bench_common import save_results

    save_results(data, args.out, render, DOC if args.doc else None, SCRIPT, missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
