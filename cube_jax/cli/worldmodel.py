"""``cube-jax worldmodel``: DR. WELL's world model (LLM.md section 7), shown, drawn, or
built from traces.

    cube-jax worldmodel runs/wm.json
    cube-jax worldmodel runs/wm.json --from-traces runs/hard-negotiation
    cube-jax worldmodel runs/wm.json --plot wm.png --trend trend.png

Prints what the model knows of every task (the guidebook's lines) and the plan library of
every task. ``--from-traces DIR`` first adds the traces under DIR (its ``*.jsonl`` files,
searched recursively, in the order of their seeds and then their paths; other JSON Lines,
such as recorded model exchanges, are skipped) and rewrites PATH, creating it when
missing; a trace already in the model is not added twice, and a file that is not a valid
trace is reported on stderr and left out. ``--plot`` draws the graph and ``--trend`` the
step at which each block was delivered, episode after episode.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List

from cube_jax.cli.args import check_writable


def add_parser(commands) -> argparse.ArgumentParser:
    wp = commands.add_parser(
        "worldmodel",
        help="show, draw or build from traces the world model of DR. WELL's negotiation",
        description="Print the world model's guidebook and plan libraries; build it from traces; draw it.",
    )
    wp.add_argument("path", type=Path, metavar="PATH", help="the world model file (JSON)")
    wp.add_argument("--from-traces", type=Path, default=None, metavar="DIR",
                    help="add the traces under DIR to the model (creating PATH when missing) and rewrite PATH")
    wp.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                    help="draw the graph: tasks, prototypes and instances, sized by attempts, coloured by success")
    wp.add_argument("--trend", type=Path, default=None, metavar="FILE.png",
                    help="plot each block's completion step against the episode index")
    wp.add_argument("--quiet", action="store_true", help="print nothing but errors and the files written")
    wp.set_defaults(run=run)
    return wp


def run(parser: argparse.ArgumentParser, args) -> int:
    from cube_jax.worldmodel import WorldModel, WorldModelError

    check_arguments(parser, args)
    try:
        model = WorldModel.load(args.path)
    except WorldModelError as err:
        parser.error(f"argument PATH: {err}")
    if args.from_traces is not None:
        added = add_traces(parser, model, args.from_traces)
        model.save(args.path)
        print(f"world model {args.path}: {added} episodes added, {len(model.episodes)} in all", file=sys.stderr)
    if not args.quiet:
        print(overview(model))
    written = []
    if args.plot is not None:
        from cube_jax.worldmodel.figures import plot_graph

        written.append(plot_graph(model, args.plot))
    if args.trend is not None:
        from cube_jax.worldmodel.figures import plot_trend

        written.append(plot_trend(model, args.trend))
    for path in written:
        print(f"wrote {path}")
    return 0


def check_arguments(parser: argparse.ArgumentParser, args) -> None:
    """Every argument checked before any work: an argparse error naming it otherwise."""
    if args.path.is_dir():
        parser.error(f"argument PATH: {args.path} is a folder; give the world model file")
    if args.from_traces is None and not args.path.exists():
        parser.error(f"argument PATH: no such world model file: {args.path} (build one with --from-traces DIR)")
    if args.from_traces is not None:
        if not args.from_traces.is_dir():
            parser.error(f"argument --from-traces: {args.from_traces} is not a folder")
        check_writable(parser, "PATH", args.path, folder=False)
    for option, path in (("--plot", args.plot), ("--trend", args.trend)):
        if path is None:
            continue
        if path.suffix.lower() != ".png":
            parser.error(f"argument {option}: expected a .png file, got {path}")
        check_writable(parser, option, path, folder=False)


def add_traces(parser: argparse.ArgumentParser, model, folder: Path) -> int:
    """Adds the traces under ``folder`` to ``model`` in the order of their seeds, then their
    paths; returns how many episodes were new."""
    from cube_jax.trace import TraceError, read_trace
    from cube_jax.worldmodel import WorldMismatchError

    paths, invalid = ordered_traces(folder), []
    added = valid = 0
    for path in paths:
        try:
            records = read_trace(path)
        except TraceError as err:
            invalid.append(str(err))
            continue
        try:
            added += model.update(records)
        except WorldMismatchError as err:
            parser.error(f"argument --from-traces: {path}: {err}")
        valid += 1
    for problem in invalid:
        print(f"left out {problem}", file=sys.stderr)
    if not valid:
        found = f"none of the {len(invalid)} trace files is valid" if invalid else "no trace file (*.jsonl)"
        parser.error(f"argument --from-traces: {found} under {folder}")
    return added


def ordered_traces(folder: Path) -> List[Path]:
    """The trace files under ``folder`` by (seed, path); files whose first line names no
    seed come last (reading them reports what is wrong)."""
    import msgspec

    from cube_jax.analytics.traces import trace_paths

    keyed = []
    for path in trace_paths([folder]):
        try:
            with open(path, "rb") as file:
                header = msgspec.json.decode(file.readline())
        except (OSError, msgspec.DecodeError):
            header = None
        seed = header.get("seed") if isinstance(header, dict) else None
        known = isinstance(seed, int) and not isinstance(seed, bool)
        keyed.append((not known, seed if known else 0, str(path.relative_to(folder)), path))
    return [path for *_, path in sorted(keyed)]


def overview(model) -> str:
    """The guidebook's lines for every task, then the plan library of every task."""
    from cube_jax.worldmodel.outcomes import world_name
    from cube_jax.worldmodel.render import experience

    lines = [f"World: {world_name(model.world)}"] + experience(model, model.tasks)
    for block in sorted(model.tasks):
        lines += ["", model.plan_library(block)]
    return "\n".join(lines)
