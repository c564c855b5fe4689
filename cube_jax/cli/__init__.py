"""The ``cube-jax`` command line (also ``python -m cube_jax.cli``).

Each subcommand lives in its own module with ``add_parser(commands)``, which registers
the subcommand's arguments and the function that runs it.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from cube_jax.cli import bench as bench_command
from cube_jax.cli import eval as eval_command
from cube_jax.cli import llm as llm_command
from cube_jax.cli import report as report_command
from cube_jax.cli import serve as serve_command
from cube_jax.cli import sweep as sweep_command
from cube_jax.cli import worldmodel as worldmodel_command

COMMANDS = (bench_command, eval_command, llm_command, report_command, serve_command, sweep_command,
            worldmodel_command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cube-jax", description="CUBE in JAX: evaluation tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as typed, for provenance
    subparser = parser._subparsers._group_actions[0].choices[args.command]
    return args.run(subparser, args)


if __name__ == "__main__":
    sys.exit(main())
