"""Argument types and checks shared by the ``cube-jax`` subcommands.

Every check runs before any work and turns a bad value into an argparse error (exit
status 2) that names the argument; numbers are ASCII integers within documented ranges.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from cube_jax.core.checks import MAX_EPISODE_STEPS, MAX_GRID_SIZE, MAX_SEED, clip


def parse_int(text: str, minimum: int, maximum: int, why: str = "") -> int:
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


def positive_int(text: str) -> int:
    return parse_int(text, 1, MAX_EPISODE_STEPS)


def team_size(text: str) -> int:
    return parse_int(text, 1, MAX_GRID_SIZE, f"the grid side is max(20, n) and at most {MAX_GRID_SIZE}")


def episode_limit(text: str) -> int:
    return parse_int(text, 1, MAX_EPISODE_STEPS, "the step counter is int32")


def seed(text: str) -> int:
    return parse_int(text, 0, MAX_SEED, "PRNGKey keeps 32 bits")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {clip(repr(text), 60)}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {clip(repr(text), 60)}")
    return value


def non_negative_int(text: str) -> int:
    return parse_int(text, 0, 10**6)


def port_number(text: str) -> int:
    return parse_int(text, 0, 65535, "a TCP port")


def thread_count(text: str) -> int:
    return parse_int(text, 1, 256, "CPU threads")


def temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in 0..2, got {clip(repr(text), 60)}") from None
    if not 0.0 <= value <= 2.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number in 0..2, got {clip(repr(text), 60)}")
    return value


# Far above any useful number of phases in one step; it keeps a typo from meaning "forever".
MAX_PHASES = 1000


def phase_limit(text: str) -> int:
    return parse_int(text, 1, MAX_PHASES, "cognitive phases per environment step")


# --- argument groups shared by subcommands -------------------------------------------------------


def add_world_arguments(p: argparse.ArgumentParser, scenario_note: str = "") -> None:
    """``--n`` or ``--scenario`` (at most one)."""
    world = p.add_mutually_exclusive_group()
    world.add_argument("--n", type=team_size, help="the n-curriculum level (n agents, k = max(20, n))")
    world.add_argument("--scenario", help="a named scenario (easy, hard) or a scenario .yaml file" + scenario_note)


def add_topology_arguments(p: argparse.ArgumentParser) -> None:
    """``--topology`` and ``--budget``: who may talk to whom."""
    from cube_jax.runtime.topologies import TOPOLOGIES

    p.add_argument("--topology", choices=sorted(TOPOLOGIES), default="individual", help="who may talk to whom")
    p.add_argument("--budget", type=non_negative_int, default=None,
                   help="decentralized: messages per decision (default: the team size)")


def add_team_arguments(p: argparse.ArgumentParser, default: str) -> None:
    """``--team`` or ``--team-file`` (at most one): one member per agent."""
    from cube_jax import registry

    listed = ", ".join(k.name if k.argument is None else f"{k.name}{'' if k.argument_required else '['}:<{k.argument}>"
                       f"{'' if k.argument_required else ']'}" for k in registry.kinds())
    team = p.add_mutually_exclusive_group()
    team.add_argument("--team", default=None, help=f"one member per agent, comma-separated (a single member applies "
                                                   f"to every agent): {listed} (default: {default})")
    team.add_argument("--team-file", type=Path, default=None,
                      help="a YAML or JSON file listing the members, each a --team entry or a mapping of kind and "
                           "its settings (llm: model, base_url, api_key_env, temperature, max_tokens, timeout, "
                           "reasoning_effort, reply_mode, reasoning_history, drop_reasoning)")


def read_members(parser: argparse.ArgumentParser, args, num_agents: int, kinds, default: str):
    """The team of ``--team`` or ``--team-file`` (else ``default``); an argparse error naming
    the option and the entry."""
    from cube_jax.teams import TeamSpecError, parse_team, read_team_file

    try:
        if getattr(args, "team_file", None) is not None:
            return read_team_file(args.team_file, num_agents, kinds=kinds)
        return parse_team(args.team or default, num_agents, kinds=kinds)
    except TeamSpecError as err:
        parser.error(f"argument {team_option(args)}: {err}")


def team_option(args) -> str:
    return "--team-file" if getattr(args, "team_file", None) is not None else "--team"


def add_runtime_arguments(p) -> None:
    """The runtime's pace: phases per step and the centralized follower's wait."""
    p.add_argument("--max-phases", type=phase_limit, default=3,
                   help="cognitive phases per environment step (default 3)")
    p.add_argument("--directive-timeout", type=positive_float, default=60.0,
                   help="centralized: seconds a follower waits for the leader's directive (default 60)")


def add_model_arguments(group) -> None:
    """The model server and how language-agent members talk to it."""
    group.add_argument("--model", default=None,
                       help="model name for llm members without their own (llm:<model>); 'local' serves "
                            "SmolLM2-135M-Instruct on this machine (the llm extra), the default when no base URL is given")
    group.add_argument("--base-url", default=None, help="the server's OpenAI-compatible base URL (or OPENAI_BASE_URL)")
    group.add_argument("--api-key", default=None, help="API key (or OPENAI_API_KEY); never written anywhere")
    group.add_argument("--temperature", type=temperature, default=0.2, help="sampling temperature, 0..2 (default 0.2)")
    group.add_argument("--max-tokens", type=positive_int, default=512, help="completion token limit per call")
    group.add_argument("--timeout", type=positive_float, default=60.0, help="seconds per HTTP request (default 60)")
    group.add_argument("--retries", type=non_negative_int, default=3, help="retries of a failed request (default 3)")
    group.add_argument("--max-repairs", type=non_negative_int, default=2,
                       help="corrective re-prompts after an invalid reply (default 2)")
    group.add_argument("--local-port", type=port_number, default=0,
                       help="--model local: the port of its server on 127.0.0.1 (default 0: a free one)")
    group.add_argument("--local-threads", type=thread_count, default=1,
                       help="--model local: CPU threads of its server (default 1, fastest on a busy 2-core machine)")
    _add_reasoning_arguments(group)
    _add_repair_arguments(group)


def _add_reasoning_arguments(group) -> None:
    """Reasoning models and reply modes (a team file's llm members may set each for
    themselves: reasoning_effort, reply_mode, reasoning_history, drop_reasoning)."""
    from cube_jax.names import REASONING_EFFORTS, REASONING_HISTORIES, REPLY_MODES

    group.add_argument("--reply-mode", choices=REPLY_MODES, default="schema",
                       help="how replies are asked for: schema (response_format with the JSON schema, the default), "
                            "tools (one forced function tool whose parameters are the schema) or text (the prompt "
                            "alone); a server that refuses a mode is asked in the next (schema, tools, text; tools, "
                            "schema, text)")
    group.add_argument("--reasoning-effort", choices=REASONING_EFFORTS, default=None,
                       help="reasoning models: the reasoning_effort sent with every request (default: none sent)")
    group.add_argument("--reasoning-history", choices=REASONING_HISTORIES, default="none",
                       help="reasoning models: how an agent's past reasoning is sent back with its earlier replies "
                            "(repair turns): none (the default), inline (a <think> section of the content) or field "
                            "(the assistant message's reasoning_content)")
    group.add_argument("--drop-reasoning", action="store_true",
                       help="reasoning models: traces keep the reasoning's length (reasoning_chars), not its text")


def reasoning_settings(args) -> dict:
    """The :class:`~cube_jax.llm.ModelSettings` fields of ``_add_reasoning_arguments``."""
    return {"reasoning_effort": getattr(args, "reasoning_effort", None),
            "reply_mode": getattr(args, "reply_mode", "schema"),
            "reasoning_history": getattr(args, "reasoning_history", "none"),
            "drop_reasoning": getattr(args, "drop_reasoning", False)}



# The most worked examples --demos gives (cube_jax.llm.demos.MAX_DEMOS): each is a whole state.
MAX_DEMOS = 8


def demo_count(text: str) -> int:
    return parse_int(text, 0, MAX_DEMOS, "each example is a whole state in the prompt")


def _add_repair_arguments(group) -> None:
    """Plan repair and worked examples (cube_jax.llm.repair, cube_jax.llm.demos): the defaults
    of every llm member, which a team file's ``repair`` / ``demos`` replace per member."""
    group.add_argument("--repair", action="store_true",
                       help="check every plan before it runs (reach, quorum, clash with teammates' plans) and "
                            "re-prompt with the violated check, within --max-repairs")
    group.add_argument("--demos", type=demo_count, default=0, metavar="K",
                       help="K worked examples (a planner's decisions on other layouts of the world) in the system "
                            f"prompt, 0..{MAX_DEMOS} (default 0)")


def check_world(parser: argparse.ArgumentParser, args) -> None:
    if args.scenario is not None:
        from cube_jax.core.scenario import load_scenario

        try:
            load_scenario(args.scenario)
        except ValueError as err:
            parser.error(f"argument --scenario: {err}")


def check_seeds(parser: argparse.ArgumentParser, args) -> None:
    last = args.seed + args.episodes - 1
    if last > MAX_SEED:
        parser.error(
            f"argument --seed: episode seeds run from {args.seed} to {last} (--seed + --episodes - 1), past "
            f"{MAX_SEED}; PRNGKey keeps 32 bits, so seed {MAX_SEED + 1} would repeat seed 0"
        )


def check_writable(parser: argparse.ArgumentParser, option: str, path: Path, folder: bool) -> None:
    """Checks before any work that ``path`` (a file, or a folder when ``folder``) can be
    written; missing folders are made later. An argparse error naming ``option`` otherwise."""
    shown = clip(str(path), 100)
    try:
        if path.exists():
            if folder and not path.is_dir():
                parser.error(f"argument {option}: {shown} exists and is not a folder")
            if not folder and path.is_dir():
                parser.error(f"argument {option}: {shown} is a folder; give a file path")
            if not folder:
                with open(path, "a"):  # opening to append changes nothing
                    return
        parent = path if folder and path.exists() else path.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            parser.error(f"argument {option}: cannot create {shown}: {clip(str(parent), 100)} is not a folder")
        # writing a probe file is the only test that holds for every user and file system
        descriptor, probe = tempfile.mkstemp(dir=parent, prefix=".cube-jax-probe-")
        os.close(descriptor)
        os.unlink(probe)
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        parser.error(f"argument {option}: cannot write {shown}: {clip(getattr(err, 'strerror', None) or str(err), 100)}")


def world_kwargs(args) -> dict:
    if args.n is not None:
        return {"n": args.n}
    if args.scenario is not None:
        return {"scenario": args.scenario}
    return {}
