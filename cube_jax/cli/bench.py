"""``cube-jax bench``: the benchmark suite ``cube-v1`` (BENCH.md, docs/benchmark.md).
::

    cube-jax bench tasks                                          # the tasks and their test sets
    cube-jax bench run heuristic --tasks all --out results/heuristic
    cube-jax bench run heuristic,random --tasks easy,n2 --out results/mixed
    cube-jax bench run llm:local --topology centralized --tasks easy,hard --episodes 10 --out results/llm
    cube-jax bench run ippo --tier S --seeds 5 --tasks n2 --out results/ippo-n2
    cube-jax bench import my-actions.npz --label mine --out results/mine   # actions played elsewhere
    cube-jax bench crossplay --task hard --members builtin:ippo-hard,heuristic,team --out results/crossplay/hard
    cube-jax bench verify results/heuristic [--sample 32]
    cube-jax bench upgrade results                                # entries of an earlier format, rewritten
    cube-jax bench board results --out docs                       # leaderboard.md, .png, .html

``run`` writes one entry folder (``entry.json`` and its evidence) and continues an interrupted
run in the same folder, keeping what was finished. ``verify`` replays an entry's recorded
actions and recomputes every score and aggregate; it exits 1 naming the task and episode
where the entry and its evidence disagree. ``upgrade`` rewrites entries written by an earlier
version in the current format, checked before and after, scores and actions untouched.
``board`` renders the leaderboard from entry folders alone, each verified on a sample of its
episodes first.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path

from cube_jax.cli.args import add_model_arguments, check_writable, positive_int, reasoning_settings
from cube_jax.rl import algorithms

log = logging.getLogger(__name__)


def add_parser(commands) -> argparse.ArgumentParser:
    parser = commands.add_parser("bench", help="the benchmark suite cube-v1: run, verify, board",
                                 description=__doc__.split("::")[0].strip())
    sub = parser.add_subparsers(dest="bench_command", required=True)

    tasks = sub.add_parser("tasks", help="list the suite's tasks and their test sets")
    tasks.set_defaults(run=_runner(_tasks, tasks))

    run = sub.add_parser("run", help="play an agent on tasks of the suite and write an entry")
    run.add_argument("agent", help="random, heuristic, team, negotiator, policy:<checkpoint>, llm[:<model>[@<url>]], "
                                   "a mixed team (one member per agent, comma-separated), or a learner: "
                                   f"{', '.join(algorithms.NAMES)} (trained at --tier first)")
    run.add_argument("--tasks", default="all", help="comma-separated task names, or all (default)")
    run.add_argument("--out", type=Path, required=True, help="the entry folder (continued when it holds an entry)")
    run.add_argument("--label", default=None, help="the board's label for the agent (default: the agent spec)")
    run.add_argument("--episodes", type=positive_int, default=256,
                     help="test episodes per task (default all 256; fewer is said on the board)")
    run.add_argument("--topology", default="individual",
                     choices=("individual", "debate", "centralized", "decentralized", "negotiation"),
                     help="communication topology of language agents and mixed teams (default individual)")
    run.add_argument("--concurrency", type=positive_int, default=1, help="episodes played at once in the loop")
    learners = run.add_argument_group("learners")
    learners.add_argument("--tier", choices=("S", "M"), default=None,
                          help="budget tier: S = 1e7, M = 1e8 environment steps per seed")
    learners.add_argument("--env-steps", type=positive_int, default=None,
                          help="another budget per seed instead of a tier (an unranked entry: its own tier)")
    learners.add_argument("--seeds", type=positive_int, default=5, help="training seeds (default 5, the least ranked)")
    learners.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                          help="a training config override (the recipe; recorded in the entry), repeatable")
    add_model_arguments(run.add_argument_group("language models"))
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.set_defaults(run=_runner(_run, run))

    crossplay = sub.add_parser("crossplay", help="mixed teams of agents that never met, one entry per team",
                               description="On one task, one bench-run entry per ordered pair of members (A, B): "
                                           "agent 0 is B, the newcomer, every other agent is A, the team it joins; "
                                           "(A, A) is A alone. The board shows them as a matrix.")
    crossplay.add_argument("--task", required=True, help="the task (of at least two agents)")
    crossplay.add_argument("--members", required=True,
                           help="comma-separated agent specs that need no model server: builtin:NAME, "
                                "policy:<checkpoint>, heuristic, team, negotiator, random")
    crossplay.add_argument("--out", type=Path, required=True, help="folder of the teams' entry folders")
    crossplay.add_argument("--entries", type=Path, nargs="*", default=[],
                           help="entry folders (or folders of them) whose homogeneous entries on the task stand for "
                                "a member alone: those are not played again")
    crossplay.add_argument("--episodes", type=positive_int, default=256, help="test episodes per team (default all 256)")
    crossplay.add_argument("--no-progress", action="store_true", help="no progress bars")
    crossplay.set_defaults(run=_runner(_crossplay, crossplay))

    imported = sub.add_parser("import", help="an entry from actions an agent outside this package played")
    imported.add_argument("actions", type=Path, help="an .npz of arrays <task>/<greedy|sampled>/<run>, each int "
                                                     "[episodes, steps, agents], -1 after the end (docs/benchmark.md)")
    imported.add_argument("--label", required=True, help="the agent's name on the board")
    imported.add_argument("--out", type=Path, required=True, help="the entry folder")
    imported.add_argument("--tier", default=None, help="a learner's budget tier (S, M) or its own budget's name")
    imported.add_argument("--env-steps", type=positive_int, default=None, help="a learner's env steps per seed")
    imported.add_argument("--seeds", default=None, help="a learner's training seeds, one per run: 0,1,2,3,4")
    imported.set_defaults(run=_runner(_import, imported))

    verify = sub.add_parser("verify", help="replay entries' evidence and recompute every score and aggregate")
    verify.add_argument("entries", nargs="+", type=Path, help="entry folders")
    verify.add_argument("--sample", type=positive_int, default=None, help="episodes replayed per task (default all)")
    verify.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    verify.set_defaults(run=_runner(_verify, verify))

    upgrade = sub.add_parser("upgrade", help="rewrite entries of an earlier version in the current entry format")
    upgrade.add_argument("entries", nargs="+", type=Path, help="entry folders, or folders of entry folders")
    upgrade.set_defaults(run=_runner(_upgrade, upgrade))

    board = sub.add_parser("board", help="render the leaderboard from entry folders")
    board.add_argument("entries", nargs="+", type=Path, help="entry folders, or folders of entry folders")
    board.add_argument("--out", type=Path, required=True, help="folder for leaderboard.md, .png and .html")
    board.add_argument("--verify-sample", type=positive_int, default=16,
                       help="episodes per task replayed to mark each entry verified (default 16)")
    board.set_defaults(run=_runner(_board, board))
    return parser


def _runner(function, parser):
    def run(_, args):
        return function(parser, args)

    return run


def _tasks(parser, args) -> int:
    from cube_jax.core import suite

    print(f"{suite.VERSION}: {len(suite.TASKS)} tasks")
    print(suite.describe())
    for t in suite.TASKS:
        print(f"  {t.name:8s} test set sha256 {suite.TEST_SET_SHA256[t.name]}")
    return 0


def _run(parser, args) -> int:
    from cube_jax.bench.entry import TIERS, EntryError
    from cube_jax.bench.run import BenchError, Contender, Runner, check_overrides, check_spec, resolve_tasks

    try:
        check_spec(args.agent)
        tasks = resolve_tasks([t.strip() for t in args.tasks.split(",") if t.strip()])
    except BenchError as err:
        parser.error(str(err))
    learner = Contender(args.agent, args.agent).learner is not None
    if learner:
        if (args.tier is None) == (args.env_steps is None):
            parser.error("argument --tier: a learner trains at one budget: give --tier S|M or --env-steps N")
        try:
            check_overrides(args.set)
        except BenchError as err:
            parser.error(str(err))
    elif args.tier is not None or args.env_steps is not None or args.set:
        parser.error(f"argument --tier/--env-steps/--set: {args.agent!r} does not learn; these are for learners")
    check_writable(parser, "--out", args.out, folder=True)
    from cube_jax.llm.factory import model_defaults as llm_defaults

    model_defaults = {**llm_defaults(args.model, args.base_url, temperature=args.temperature,
                                     max_tokens=args.max_tokens, timeout=args.timeout, max_retries=args.retries,
                                     **reasoning_settings(args)),
                      "api_key": args.api_key, "max_repairs": args.max_repairs,
                      "local_threads": args.local_threads, "local_port": args.local_port,
                      **_repair_defaults(args)}
    env_steps = TIERS[args.tier] if args.tier else args.env_steps
    contender = Contender(args.agent, args.label or _default_label(args), topology=args.topology,
                          tier=args.tier or (f"{env_steps:.0e} steps" if learner else None),
                          env_steps=env_steps if learner else None,
                          seeds=tuple(range(args.seeds)) if learner else (), overrides=tuple(args.set),
                          model_defaults=model_defaults, concurrency=args.concurrency)
    try:
        with _log_to_stdout():
            entry = Runner(contender, args.out, episodes=args.episodes, progress=not args.no_progress,
                           command=["cube-jax", *args.argv]
                           ).run(tasks)
    except (BenchError, EntryError) as err:
        print(f"cube-jax bench run: error: {err}", file=sys.stderr)
        return 2
    print(f"entry written: {args.out / 'entry.json'} ({len(entry['tasks'])} task(s), "
          f"{entry['provenance'].get('wall_seconds', 0):.1f} s)")
    return 0


def _crossplay(parser, args) -> int:
    from cube_jax.bench import crossplay
    from cube_jax.bench.board import load_entries
    from cube_jax.bench.entry import EntryError
    from cube_jax.bench.run import BenchError, Contender, Runner, check_spec, resolve_tasks

    members = [m.strip() for m in args.members.split(",") if m.strip()]
    try:
        (task,) = resolve_tasks([args.task])
        for member in members:
            check_spec(member)
            if member.split(":", 1)[0] == "llm" or Contender(member, member).learner is not None:
                raise BenchError(f"cross-play member {member!r}: members are agents that play without a model server "
                                 "or training (builtin:NAME, policy:<checkpoint>, heuristic, team, ...)")
        teams = crossplay.teams(members, task.num_agents)
        known = load_entries(args.entries) if args.entries else []
    except (BenchError, ValueError) as err:
        parser.error(str(err))
    alone = {e["agent"]["spec"] for e in known if e["agent"]["kind"] != "mixed" and task.name in e["tasks"]
             and e["tasks"][task.name]["episodes_per_run"] >= args.episodes}
    check_writable(parser, "--out", args.out, folder=True)
    played = [team for team in teams if not (team.row == team.column and team.spec in alone)]
    print(f"cross-play on {task.name}: {len(members)} members, {len(played)} teams to play "
          f"({len(teams) - len(played)} members alone taken from --entries)")
    for number, team in enumerate(played, start=1):
        label = team.spec if team.row == team.column else f"{team.column} joins {team.row}"
        contender = Contender(team.spec, label)
        command = ["cube-jax", "bench", "run", team.spec, "--tasks", task.name, "--label", label,
                   "--episodes", str(args.episodes), "--out", str(args.out / team.name)]
        print(f"[{number}/{len(played)}] {label} -> {args.out / team.name}")
        try:
            with _log_to_stdout():
                Runner(contender, args.out / team.name, episodes=args.episodes, progress=not args.no_progress,
                       command=command).run([task])
        except (BenchError, EntryError) as err:
            print(f"cube-jax bench crossplay: error: team {team.spec!r}: {err}", file=sys.stderr)
            return 2
    print(f"entries written under {args.out}; render them with: cube-jax bench board {args.out} ... --out docs")
    return 0


def _repair_defaults(args) -> dict:
    """--repair and --demos K for the language members (recorded in the entry's settings only
    when on, so entries made without them read as before)."""
    return {**({"repair": True} if args.repair else {}), **({"demos": args.demos} if args.demos else {})}


def _default_label(args) -> str:
    """The agent spec, marked with --repair and --demos K when a language member plays with
    them, so that entries with and without them differ on the board."""
    if "llm" not in [e.split(":", 1)[0] for e in args.agent.split(",")]:
        return args.agent
    marks = (["repair"] if args.repair else []) + ([f"demos {args.demos}"] if args.demos else [])
    return f"{args.agent} ({', '.join(marks)})" if marks else args.agent


def _import(parser, args) -> int:
    from cube_jax.bench.entry import TIERS, EntryError
    from cube_jax.bench.external import read_actions, write_entry
    from cube_jax.bench.run import BenchError

    try:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else []
    except ValueError:
        parser.error(f"argument --seeds: comma-separated integers, got {args.seeds!r}")
    env_steps = args.env_steps if args.env_steps is not None else TIERS.get(args.tier or "")
    check_writable(parser, "--out", args.out, folder=True)
    try:
        with _log_to_stdout():
            entry = write_entry(args.out, args.label, read_actions(args.actions), tier=args.tier,
                                env_steps=env_steps, seeds=seeds, command=["cube-jax", *args.argv])
    except (BenchError, EntryError) as err:
        print(f"cube-jax bench import: error: {err}", file=sys.stderr)
        return 2
    print(f"entry written: {args.out / 'entry.json'} ({len(entry['tasks'])} task(s))")
    return 0


def _verify(parser, args) -> int:
    from cube_jax.bench.entry import EntryError
    from cube_jax.bench.verify import verify

    failed = 0
    for folder in args.entries:
        try:
            print(verify(folder, sample=args.sample, seed=args.seed).line())
        except EntryError as err:
            print(f"FAILED {folder}: {err}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def _upgrade(parser, args) -> int:
    from cube_jax.bench.board import entry_folders
    from cube_jax.bench.entry import EntryError
    from cube_jax.bench.upgrade import upgrade

    failed = 0
    for path in args.entries:
        if not path.exists():
            parser.error(f"{path}: no such entry folder")
        for folder, _ in entry_folders(path):
            try:
                print(upgrade(folder, command=["cube-jax", *args.argv]).line())
            except EntryError as err:
                print(f"FAILED {folder}: {err}", file=sys.stderr)
                failed += 1
    return 1 if failed else 0


def _board(parser, args) -> int:
    from cube_jax.bench.board import load_entries, write_board
    from cube_jax.bench.entry import EntryError
    from cube_jax.bench.verify import verify

    try:
        entries = load_entries(args.entries)
    except ValueError as err:
        parser.error(str(err))
    if not entries:
        parser.error(f"no entries in {', '.join(map(str, args.entries))}")
    verified = {}
    for entry in entries:
        try:
            verify(entry["folder"], sample=args.verify_sample, seed=0)
            verified[entry["id"]] = True
        except EntryError as err:
            print(f"not verified: {entry['id']}: {err}", file=sys.stderr)
            verified[entry["id"]] = False
    args.out.mkdir(parents=True, exist_ok=True)
    written = write_board(entries, args.out, verified=verified)
    print("board: " + ", ".join(str(p) for p in written.values()))
    return 0


@contextlib.contextmanager
def _log_to_stdout():
    """The package's progress lines on stdout, once each, for the command; the logger is left
    as it was found afterwards (a command run inside another program changes nothing)."""
    logger = logging.getLogger("cube_jax")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])
