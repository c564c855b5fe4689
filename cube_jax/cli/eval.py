"""``cube-jax eval``: play many episodes and summarise them.

A team of batched JAX policies (``heuristic``, ``random``, trained checkpoints) plays all
episodes at once: every episode is one member of a ``jax.vmap`` batch advancing in jitted
chunks (:func:`cube_jax.evaluation.evaluate`). Any other team (the team planner, or a mix
that includes it) plays on the CPU episode loop, one episode after the other
(:func:`cube_jax.runtime.run_episode`), which can also write a trace per episode.
Episode ``i`` starts from ``env.reset(PRNGKey(seed + i))`` either way; its ``steps`` is the
step on which it terminated (or ``max_steps``)::

    cube-jax eval --policy heuristic --n 4 --episodes 32 --seed 0 --json out.json
    cube-jax eval --policy random --scenario easy --episodes 64
    cube-jax eval --policy runs/ippo-easy-20250101-000000 --episodes 32
    cube-jax eval --team heuristic,heuristic,policy:runs/ippo-hard-... --scenario hard
    cube-jax eval --team team --n 4 --episodes 8 --traces traces/

``--policy`` is ``heuristic`` (the cube paper's baseline), ``random`` (uniform primitive
actions) or a checkpoint folder written by the RL baselines (greedy actions; its world
comes from the checkpoint unless ``--n``/``--scenario`` is given). ``--team`` gives one
member per agent (see :mod:`cube_jax.teams`).

Arguments are checked before any work, and a bad one is an argparse error (exit status 2)
naming it: numbers are ASCII integers; ``--n`` is 1..4096; ``--max-steps``, ``--episodes``
and ``--chunk`` are 1..2**31-2; every episode seed ``seed + i`` must lie in 0..2**32-1
(``PRNGKey`` keeps 32 bits, so 2**32 would silently repeat seed 0); ``--json`` must be a
file path that can be written (not a folder; missing parent folders are created when the
results are written); ``--traces`` must be a folder that can be written.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from cube_jax.cli.args import (check_seeds, check_world, check_writable, episode_limit, positive_int, read_members,
                               seed, team_option, team_size, world_kwargs)

BUILTIN_POLICIES = ("heuristic", "random")
LOOPS = ("auto", "batched", "cpu")

logger = logging.getLogger(__name__)


def add_parser(commands) -> argparse.ArgumentParser:
    ev = commands.add_parser(
        "eval",
        help="evaluate a policy or a mixed team on many episodes",
        description="Evaluate a policy or a team on E episodes (one vmapped batch when every member is a JAX "
                    "policy, else the CPU episode loop); prints a summary table.",
    )
    who = ev.add_mutually_exclusive_group(required=True)
    who.add_argument("--policy", help="heuristic, random, a checkpoint folder of an RL baseline, or builtin:NAME "
                                      "(a policy shipped in the package)")
    who.add_argument("--team", help="one member per agent, comma-separated: heuristic, team, random, "
                                    "policy:<checkpoint> (a single member applies to every agent)")
    who.add_argument("--team-file", type=Path, help="a YAML or JSON file listing the members (see cube_jax.teams)")
    world = ev.add_mutually_exclusive_group()
    world.add_argument("--n", type=team_size, help="the n-curriculum level (n agents, k = max(20, n))")
    world.add_argument("--scenario", help="a named scenario (easy, hard) or a scenario .yaml file")
    ev.add_argument("--episodes", type=positive_int, default=32, help="number of episodes (default 32)")
    ev.add_argument("--seed", type=seed, default=0,
                    help="episode i starts from PRNGKey(seed + i); every seed + i must be in 0..2**32-1 (default 0)")
    ev.add_argument("--max-steps", type=episode_limit, default=None, help="episode limit (default: the world's)")
    ev.add_argument("--chunk", type=positive_int, default=None,
                    help="steps per jitted scan between progress updates (default: about max_steps / 20)")
    ev.add_argument("--loop", choices=LOOPS, default="auto",
                    help="batched (vmapped JAX) or cpu (the episode loop); auto: batched when every member is a "
                         "JAX policy and no traces are asked for")
    ev.add_argument("--traces", type=Path, default=None,
                    help="write one trace per episode (LLM.md section 5) into this folder (CPU loop)")
    ev.add_argument("--json", type=Path, default=None, help="write per-episode results to this JSON file")
    ev.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    ev.set_defaults(run=run)
    return ev


def _check_output(parser: argparse.ArgumentParser, args) -> None:
    """Checks that --json and --traces can be written before any work is done."""
    if args.json is not None:
        check_writable(parser, "--json", args.json, folder=False)
    if args.traces is not None:
        check_writable(parser, "--traces", args.traces, folder=True)


# --- building the world and the team ------------------------------------------------------------


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _checkpoint_world(parser, args, path: Path, world: dict) -> dict:
    from cube_jax.rl.policy import load_policy

    if not path.exists():
        parser.error(
            f"argument --policy: {str(path)!r} is neither {' nor '.join(BUILTIN_POLICIES)} nor an existing "
            "checkpoint folder"
        )
    try:
        kwargs = dict(load_policy(path).env_kwargs)
    except (FileNotFoundError, ValueError) as err:
        parser.error(f"argument --policy: {_one_line(err)}")
    except Exception as err:  # noqa: BLE001 - orbax and flax raise many types for a damaged checkpoint
        parser.error(f"argument --policy: cannot read the checkpoint in {str(path)!r}: {type(err).__name__}: "
                     f"{_one_line(err)}")
    if world:  # the world asked for, with its own episode limit; the observation the policy reads
        for key in ("n", "scenario", "pool_size", "max_steps"):
            kwargs.pop(key, None)
        kwargs.update(world)
    return kwargs


def _setup(parser, args):
    """(env, make kwargs, members) from the arguments; argparse errors name the argument."""
    import cube_jax
    from cube_jax import registry
    from cube_jax.teams import TeamSpecError, check_team, parse_team

    world = world_kwargs(args)
    if args.policy is not None:
        if args.policy in BUILTIN_POLICIES:
            if not world:
                parser.error(f"argument --policy: {args.policy} needs a world: give --n N or --scenario NAME")
            kwargs, spec = dict(world), args.policy
        elif args.policy.startswith("builtin:"):  # a policy shipped in the package
            from cube_jax.rl import builtin

            try:
                folder = builtin.path(args.policy.split(":", 1)[1])
            except ValueError as err:
                parser.error(f"argument --policy: {err}")
            kwargs, spec = _checkpoint_world(parser, args, folder, world), args.policy
        else:
            kwargs, spec = _checkpoint_world(parser, args, Path(args.policy), world), f"policy:{args.policy}"
        option = "--policy"
    else:
        option = team_option(args)
        if not world:
            parser.error(f"argument {option}: a team needs a world: give --n N or --scenario NAME")
        kwargs, spec = dict(world), args.team
    kwargs.pop("pool_size", None)  # evaluation draws fresh layouts from the episode seeds
    if args.max_steps is not None:
        kwargs["max_steps"] = args.max_steps
    env = cube_jax.make(**kwargs)
    if args.policy is None:
        members = read_members(parser, args, env.num_agents, kinds=None, default="")
    else:
        try:
            members = parse_team(spec, env.num_agents)
        except TeamSpecError as err:
            parser.error(f"argument {option}: {err}")
    # a missing or unfitting checkpoint is found here, before any episode
    if args.policy is not None:
        check = registry.get(members[0].kind).check
        try:
            if check is not None:
                check(env, members[0])
        except ValueError as err:
            parser.error(f"argument --policy: {err}")
    else:
        try:
            check_team(env, members)
        except TeamSpecError as err:
            parser.error(f"argument {option}: {err}")
    return env, kwargs, members


def _cpu_episodes(env, kwargs, members, args) -> Dict[str, Any]:
    """Plays the episodes on the CPU loop, one after the other."""
    import time

    from tqdm import tqdm

    from cube_jax.runtime import run_episode
    from cube_jax.teams import team_agents

    agents = team_agents(env, members)
    episodes: List[dict] = []
    start = time.perf_counter()
    bar = tqdm(range(args.episodes), unit="episode", desc="eval", disable=args.no_progress, file=sys.stderr)
    for i in bar:
        seed = args.seed + i
        trace = None if args.traces is None else args.traces / f"episode-{seed:06d}.jsonl"
        result = run_episode(env, agents, seed=seed, trace=trace, env_kwargs=kwargs)
        episodes.append({
            "seed": seed,
            "blocks_total": result.blocks_total,
            "blocks_delivered": result.blocks_delivered,
            "weight_delivered": result.weight_delivered,
            "weight_total": result.weight_total,
            "steps": result.steps,
            "success": result.success,
            "return": result.episode_return,
        })
        bar.set_postfix(success=f"{sum(e['success'] for e in episodes)}/{len(episodes)}")
    return {
        "success_rate": float(np.mean([e["success"] for e in episodes])),
        "mean_steps": float(np.mean([e["steps"] for e in episodes])),
        "episodes": episodes,
        "compile_seconds": 0.0,
        "run_seconds": time.perf_counter() - start,
    }


def summary_table(name: str, env, result: dict, loop: str) -> str:
    from cube_jax.analytics.intervals import interval_text

    episodes = result["episodes"]
    delivered = sum(e["blocks_delivered"] for e in episodes)
    total = sum(e["blocks_total"] for e in episodes)
    ci = result["intervals"]
    rows = [
        ("team" if "," in name else "policy", name),
        ("world", repr(env)),
        ("loop", loop),
        ("episodes", f"{len(episodes)} (seeds {episodes[0]['seed']}..{episodes[-1]['seed']})"),
        ("success rate", f"{result['success_rate']:.3f}   95% CI {interval_text(ci['success_rate'])}"),
        ("blocks delivered", f"{delivered}/{total} ({delivered / max(total, 1):.3f})   per episode "
                             f"{interval_text(ci['blocks_delivered'])}"),
        ("weight delivered", f"per episode {interval_text(ci['weight_delivered'])}"),
        ("mean steps", f"{result['mean_steps']:.1f} (max_steps {env.max_steps})   95% CI "
                       f"{interval_text(ci['steps'])}"),
        ("compile time", f"{result['compile_seconds']:.1f} s"),
        ("run time", f"{result['run_seconds']:.2f} s"),
        ("episodes/s", f"{len(episodes) / max(result['run_seconds'], 1e-9):.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


# --- the eval command ----------------------------------------------------------------------------


def run(parser: argparse.ArgumentParser, args) -> int:
    from cube_jax import registry
    from cube_jax.evaluation import evaluate
    from cube_jax.teams import batched_team, is_batched

    _check_output(parser, args)
    check_seeds(parser, args)
    check_world(parser, args)
    env, kwargs, members = _setup(parser, args)
    loop = args.loop
    if loop == "auto":
        loop = "batched" if is_batched(members) and args.traces is None else "cpu"
    if loop == "batched" and not is_batched(members):
        batched = ", ".join(k.name for k in registry.kinds() if k.batched is not None)
        parser.error(f"argument --loop: batched needs every member to be of a batched kind ({batched})")
    if loop == "batched" and args.traces is not None:
        parser.error("argument --traces: traces are written by the CPU loop; use --loop cpu (or auto)")
    name = ",".join(str(m) for m in members) if len(set(members)) > 1 else str(members[0])
    if loop == "batched":
        result = evaluate(env, batched_team(env, members), episodes=args.episodes, seed=args.seed, chunk=args.chunk,
                          progress=not args.no_progress)
    else:
        result = _cpu_episodes(env, kwargs, members, args)
    from cube_jax.analytics import eval_intervals

    # 95% bootstrap intervals over episodes (a fixed world has one stratum; so does the curriculum)
    result["intervals"] = eval_intervals(result["episodes"])
    print(summary_table(name, env, result, loop))
    if args.json is not None:
        out = {key: result[key] for key in ("success_rate", "mean_steps", "episodes", "intervals")}
        out.update({"team": [str(m) for m in members], "loop": loop, "env": kwargs})
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")
    if args.traces is not None:
        print(f"traces in {args.traces}")
    return 0
