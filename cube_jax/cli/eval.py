"""``cube-jax eval``: play many episodes at once and summarise them.

Every episode is one member of a ``jax.vmap`` batch, and the whole batch advances in one
``lax.scan`` over steps, split into chunks so a progress bar can follow it. Episode ``i``
starts from ``env.reset(PRNGKey(seed + i))``; an episode that ends stays frozen while the
others finish, and its ``steps`` is the step on which it terminated (or ``max_steps``)::

    cube-jax eval --policy heuristic --n 4 --episodes 32 --seed 0 --json out.json
    cube-jax eval --policy random --scenario easy --episodes 64
    cube-jax eval --policy runs/ippo-easy-20250101-000000 --episodes 32

``--policy`` is ``heuristic`` (the cube paper's baseline, :mod:`cube_jax.symbolic.jax_heuristic`),
``random`` (uniform primitive actions) or a checkpoint folder written by the RL baselines
(greedy actions; its world comes from the checkpoint unless ``--n``/``--scenario`` is given).

Arguments are checked before any work, and a bad one is an argparse error (exit status 2)
naming it: numbers are ASCII integers; ``--n`` is 1..4096; ``--max-steps``, ``--episodes``
and ``--chunk`` are 1..2**31-2; every episode seed ``seed + i`` must lie in 0..2**32-1
(``PRNGKey`` keeps 32 bits, so 2**32 would silently repeat seed 0); ``--json`` must be a
file path that can be written (not a folder; missing parent folders are created when the
results are written).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from cube_jax.core.checks import MAX_EPISODE_STEPS, MAX_GRID_SIZE, MAX_SEED, clip

BUILTIN_POLICIES = ("heuristic", "random")


# --- argument checking -----------------------------------------------------------------------


def _parse_int(text: str, minimum: int, maximum: int, why: str = "") -> int:
    # ASCII digits only, and few of them: int() also reads other scripts' digits
    digits = text.strip().lstrip("+-")
    if not digits.isascii() or not digits.isdigit() or len(digits) > 20:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {clip(repr(text), 60)}")
    value = int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"must be <= {maximum}{f' ({why})' if why else ''}, got {value}")
    return value


def _positive_int(text: str) -> int:
    return _parse_int(text, 1, MAX_EPISODE_STEPS)


def _team_size(text: str) -> int:
    return _parse_int(text, 1, MAX_GRID_SIZE, f"the grid side is max(20, n) and at most {MAX_GRID_SIZE}")


def _episode_limit(text: str) -> int:
    return _parse_int(text, 1, MAX_EPISODE_STEPS, "the step counter is int32")


def _seed(text: str) -> int:
    return _parse_int(text, 0, MAX_SEED, "PRNGKey keeps 32 bits")


def add_parser(commands) -> argparse.ArgumentParser:
    ev = commands.add_parser(
        "eval",
        help="evaluate a policy on many episodes at once (jax.vmap)",
        description="Evaluate a policy on E episodes run as one vmapped batch; prints a summary table.",
    )
    ev.add_argument("--policy", required=True, help="heuristic, random, or a checkpoint folder of an RL baseline")
    world = ev.add_mutually_exclusive_group()
    world.add_argument("--n", type=_team_size, help="the n-curriculum level (n agents, k = max(20, n))")
    world.add_argument("--scenario", help="a named scenario (easy, hard) or a scenario .yaml file")
    ev.add_argument("--episodes", type=_positive_int, default=32, help="number of episodes (default 32)")
    ev.add_argument("--seed", type=_seed, default=0,
                    help="episode i starts from PRNGKey(seed + i); every seed + i must be in 0..2**32-1 (default 0)")
    ev.add_argument("--max-steps", type=_episode_limit, default=None, help="episode limit (default: the world's)")
    ev.add_argument("--chunk", type=_positive_int, default=None,
                    help="steps per jitted scan between progress updates (default: about max_steps / 20)")
    ev.add_argument("--json", type=Path, default=None, help="write per-episode results to this JSON file")
    ev.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    ev.set_defaults(run=run)
    return ev


def _check_world(parser: argparse.ArgumentParser, args) -> None:
    if args.scenario is not None:
        from cube_jax.core.scenario import load_scenario

        try:
            load_scenario(args.scenario)
        except ValueError as err:
            parser.error(f"argument --scenario: {err}")


def _check_seeds(parser: argparse.ArgumentParser, args) -> None:
    last = args.seed + args.episodes - 1
    if last > MAX_SEED:
        parser.error(
            f"argument --seed: episode seeds run from {args.seed} to {last} (--seed + --episodes - 1), past "
            f"{MAX_SEED}; PRNGKey keeps 32 bits, so seed {MAX_SEED + 1} would repeat seed 0"
        )


def _check_output(parser: argparse.ArgumentParser, args) -> None:
    """Checks that --json can be written before any work is done (the folders are made later)."""
    if args.json is None:
        return
    path = args.json
    shown = clip(str(path), 100)
    try:
        if path.is_dir():
            parser.error(f"argument --json: {shown} is a folder; give a file path")
        if path.exists():
            with open(path, "a"):  # opening to append changes nothing
                return
        parent = path.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            parser.error(f"argument --json: cannot create {shown}: {clip(str(parent), 100)} is not a folder")
        # writing a probe file is the only test that holds for every user and file system
        descriptor, probe = tempfile.mkstemp(dir=parent, prefix=".cube-jax-probe-")
        os.close(descriptor)
        os.unlink(probe)
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        parser.error(f"argument --json: cannot write {shown}: {clip(getattr(err, 'strerror', None) or str(err), 100)}")


def _world_kwargs(args) -> dict:
    if args.n is not None:
        return {"n": args.n}
    if args.scenario is not None:
        return {"scenario": args.scenario}
    return {}


# --- policies: policy(env_state, observation, policy_state) -> (actions, policy_state) ------------


def heuristic_policy(env):
    from cube_jax.symbolic.jax_heuristic import heuristic_policy as make

    step, init = make(env)

    def policy(state, observation, policy_state):
        return step(state, policy_state)

    return policy, lambda key: init


def random_policy(env):
    import jax

    def policy(state, observation, key):
        key, sub = jax.random.split(key)
        return jax.random.randint(sub, (env.num_agents,), 0, env.num_actions).astype("int32"), key

    return policy, lambda key: key


def checkpoint_policy(loaded, env):
    import jax

    def policy(state, observation, key):
        key, sub = jax.random.split(key)
        return loaded.act(observation, sub, greedy=True), key

    return policy, lambda key: key


# --- the batched rollout -----------------------------------------------------------------------


def make_rollout(env, policy: Callable, chunk: int):
    """A jitted ``chunk_fn(carry) -> carry`` running ``chunk`` steps of a vmapped batch."""
    import jax
    import jax.numpy as jnp

    def one_step(carry, _):
        state, observation, policy_state, done, steps = carry
        actions, new_policy_state = policy(state, observation, policy_state)
        new_state, ts = env.step(state, actions)
        ended = ts.terminated | ts.truncated
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(done, b, a), new, old)  # noqa: E731
        carry = (
            keep(new_state, state),
            keep(ts.observation, observation),
            keep(new_policy_state, policy_state),
            done | ended,
            jnp.where(done, steps, steps + 1),
        )
        return carry, None

    def run_chunk(carry):
        carry, _ = jax.lax.scan(one_step, carry, None, length=chunk)
        return carry

    return jax.jit(jax.vmap(run_chunk))


def evaluate(env, policy: Callable, init_policy_state: Callable, episodes: int, seed: int, chunk: Optional[int] = None,
             progress: bool = True) -> dict:
    """Runs ``episodes`` episodes (seeds ``seed + i``) as one batch; returns results and timings."""
    import jax
    import jax.numpy as jnp
    from tqdm import tqdm

    chunk = chunk or max(1, math.ceil(env.max_steps / 20))
    keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(seed, seed + episodes))
    states, timesteps = jax.jit(jax.vmap(env.reset))(keys)
    policy_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    policy_states = jax.vmap(init_policy_state)(policy_keys)
    carry = (states, timesteps.observation, policy_states, jnp.zeros((episodes,), bool), jnp.zeros((episodes,), jnp.int32))

    start = time.perf_counter()
    rollout = make_rollout(env, policy, chunk).lower(carry).compile()
    compile_seconds = time.perf_counter() - start

    start = time.perf_counter()
    chunks = math.ceil(env.max_steps / chunk)
    with tqdm(total=chunks * chunk, unit="step", desc="eval", disable=not progress, file=sys.stderr) as bar:
        for _ in range(chunks):
            carry = rollout(carry)
            done = np.asarray(carry[3])
            bar.update(chunk)
            bar.set_postfix(finished=f"{int(done.sum())}/{episodes}")
            if done.all():
                break
    jax.block_until_ready(carry)
    run_seconds = time.perf_counter() - start

    final_states, steps = carry[0], np.asarray(carry[4])
    alive = np.asarray(final_states.block_alive)
    episodes_out = [
        {
            "seed": seed + i,
            "blocks_total": int(alive.shape[1]),
            "blocks_delivered": int((~alive[i]).sum()),
            "steps": int(steps[i]),
            "success": bool(not alive[i].any()),
        }
        for i in range(episodes)
    ]
    return {
        "success_rate": float(np.mean([e["success"] for e in episodes_out])),
        "mean_steps": float(np.mean([e["steps"] for e in episodes_out])),
        "episodes": episodes_out,
        "compile_seconds": compile_seconds,
        "run_seconds": run_seconds,
    }


def summary_table(name: str, env, result: dict) -> str:
    episodes = result["episodes"]
    delivered = sum(e["blocks_delivered"] for e in episodes)
    total = sum(e["blocks_total"] for e in episodes)
    rows = [
        ("policy", name),
        ("world", repr(env)),
        ("episodes", f"{len(episodes)} (seeds {episodes[0]['seed']}..{episodes[-1]['seed']})"),
        ("success rate", f"{result['success_rate']:.3f}"),
        ("blocks delivered", f"{delivered}/{total} ({delivered / max(total, 1):.3f})"),
        ("mean steps", f"{result['mean_steps']:.1f} (max_steps {env.max_steps})"),
        ("compile time", f"{result['compile_seconds']:.1f} s"),
        ("run time", f"{result['run_seconds']:.2f} s"),
        ("episodes/s", f"{len(episodes) / max(result['run_seconds'], 1e-9):.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


# --- the eval command ----------------------------------------------------------------------------


def run(parser: argparse.ArgumentParser, args) -> int:
    _check_output(parser, args)
    _check_seeds(parser, args)
    _check_world(parser, args)
    import cube_jax

    world = _world_kwargs(args)
    if args.policy in BUILTIN_POLICIES:
        if not world:
            parser.error(f"argument --policy: {args.policy} needs a world: give --n N or --scenario NAME")
        env = cube_jax.make(**world, max_steps=args.max_steps)
        policy, init = heuristic_policy(env) if args.policy == "heuristic" else random_policy(env)
    else:
        path = Path(args.policy)
        if not path.exists():
            parser.error(
                f"argument --policy: {args.policy!r} is neither {' nor '.join(BUILTIN_POLICIES)} nor an existing "
                "checkpoint folder"
            )
        from cube_jax.rl.policy import load_policy

        loaded = load_policy(path)
        kwargs = dict(loaded.env_kwargs)
        if world:
            kwargs.pop("n", None)
            kwargs.pop("scenario", None)
            kwargs.update(world)
        if args.max_steps is not None:
            kwargs["max_steps"] = args.max_steps
        env = cube_jax.make(**kwargs)
        policy, init = checkpoint_policy(loaded, env)

    result = evaluate(env, policy, init, args.episodes, args.seed, args.chunk, progress=not args.no_progress)
    print(summary_table(args.policy, env, result))
    if args.json is not None:
        out = {key: result[key] for key in ("success_rate", "mean_steps", "episodes")}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")
    return 0
