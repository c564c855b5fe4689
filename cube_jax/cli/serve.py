"""``cube-jax serve``: watch, replay and play CUBE in the browser.

::

    cube-jax serve --scenario hard --team heuristic                 # watch the heuristic team
    cube-jax serve --scenario easy --team human,heuristic           # play agent_0 beside a planner
    cube-jax serve --n 3 --team human,llm,heuristic --topology decentralized \\
                   --model qwen2.5-7b-instruct --base-url http://127.0.0.1:8000/v1
    cube-jax serve --n 16 --team heuristic --speed max --replay runs/llm   # and offer old traces

The command prints the page's address and serves until Ctrl-C. It binds to 127.0.0.1 by
default; another loopback address is fine, anything else needs ``--public`` (and prints a
warning: whoever reaches the machine can then watch and play).

Episodes run one after the other (``--seed``, then the next seed on the page's "new
episode") with the team of ``--team`` (one member per agent: ``human``, ``llm[:model[@URL]]``,
``heuristic``, ``team``, ``random``, ``policy:<checkpoint>``) under ``--topology``.
``human`` agents wait for a person: open the page, take the seat ("Play agent_0", or
``?play=all`` in the address) and move with the arrow keys or type plans. Language-agent
members use an OpenAI-compatible server as in ``cube-jax llm`` (``--base-url`` or
``OPENAI_BASE_URL``, ``--model``, the key from ``--api-key`` or ``OPENAI_API_KEY``), or, with
no base URL or ``--model local``, the local model, whose server the command starts and stops.

``--out DIR`` (default ``runs/serve-<time>``) receives one trace per episode
(``episode-<seed>.jsonl``), its timeline picture and the folder's ``metrics.json``, so
``cube-jax report DIR`` works on it; the replay view lists the folder's traces and those of
``--replay``.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import sys
from pathlib import Path

from cube_jax.cli.args import (add_model_arguments, add_runtime_arguments, add_topology_arguments, add_world_arguments,
                               check_world, check_writable, episode_limit, parse_int, positive_float, read_members,
                               seed, world_kwargs)
from cube_jax.names import agent_name

log = logging.getLogger(__name__)


def _port(text: str) -> int:
    return parse_int(text, 0, 65535)


def _speed(text: str):
    if text == "max":
        return None
    value = positive_float(text)
    if value > 1000:
        raise argparse.ArgumentTypeError(f"at most 1000 steps per second (or 'max'), got {text!r}")
    return value


def add_parser(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "serve",
        help="watch, replay and play episodes in the browser",
        description="Serve a local web app: a live view of episodes of any team (people included), replays of "
                    "traces, and play with the keyboard or typed plans.",
    )
    add_world_arguments(p, " (default: hard)")
    p.add_argument("--team", default="heuristic",
                   help="one member per agent: human, llm[:model[@base URL]], heuristic, team, random, "
                        "policy:<checkpoint> (default: heuristic for every agent)")
    add_topology_arguments(p)
    add_runtime_arguments(p)
    p.add_argument("--seed", type=seed, default=0, help="the first episode's seed; later episodes count up (default 0)")
    p.add_argument("--max-steps", type=episode_limit, default=None, help="episode step limit (default: the world's)")
    p.add_argument("--max-wall", type=positive_float, default=None, help="wall-clock seconds per episode")
    p.add_argument("--speed", type=_speed, default=4.0, help="steps per second, or 'max' (default 4)")
    p.add_argument("--paused", action="store_true", help="start paused (the page's Run or Step goes on)")
    p.add_argument("--out", type=Path, default=None, help="the run folder (default runs/serve-<time>)")
    p.add_argument("--replay", type=Path, action="append", default=[],
                   help="a trace file or folder to offer in the replay view (repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8765, help="the port (default 8765; 0 picks a free one)")
    p.add_argument("--public", action="store_true", help="allow --host to be an address other machines can reach")
    p.add_argument("--no-timelines", action="store_true", help="skip the timeline picture after each episode")
    llm = p.add_argument_group("language-agent members (as in cube-jax llm)")
    add_model_arguments(llm)
    llm.add_argument("--prompts", type=Path, default=None, help="a folder of prompt templates overriding the defaults")
    p.set_defaults(run=run)
    return p


def run(parser: argparse.ArgumentParser, args) -> int:
    try:
        from cube_jax.web.server import bind, check_host, create_app, serve, url_of
    except ImportError as err:
        parser.error(f"the web app needs the web extra (pip install 'cube_jax[web]'): {err}")
    problem = check_host(args.host, args.public)
    if problem is not None:
        parser.error(f"argument --host: {problem}")
    world, out = _checked_arguments(parser, args)
    env, members = _world_and_team(parser, args, world)
    llm_agents, factories = _language_agents(parser, args, members)
    settings = _settings(parser, args, world, out, factories)
    _write_run_file(args, world, out, members, llm_agents)
    app = create_app(env, settings, replays=args.replay, public=args.public)
    try:
        sock = bind(args.host, args.port)
    except OSError as err:
        parser.error(f"argument --port: cannot listen on {args.host}:{args.port}: {err.strerror or err}")
    if args.public:
        print(f"warning: serving on {args.host}, reachable from other machines: anyone who can connect can watch "
              "and play; there is no login", file=sys.stderr)
    _serve(llm_agents, lambda: serve(app, sock), url_of(sock), out)
    return 0


def _checked_arguments(parser, args):
    """The world's ``make`` keywords and the run folder, once the arguments are checked."""
    check_world(parser, args)
    world = world_kwargs(args) or {"scenario": "hard"}
    if args.budget is not None and args.topology != "decentralized":
        parser.error("argument --budget: only the decentralized topology has a message budget")
    for path in args.replay:
        if not path.exists():
            parser.error(f"argument --replay: no such trace file or folder: {str(path)[:200]!r}")
    out = args.out or Path("runs") / f"serve-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    check_writable(parser, "--out", out, folder=True)
    if args.max_steps is not None:
        world["max_steps"] = args.max_steps
    return world, out


def _world_and_team(parser, args, world):
    import cube_jax
    from cube_jax import registry
    from cube_jax.teams import TeamSpecError, check_team

    try:
        env = cube_jax.make(**world)
    except ValueError as err:
        parser.error(f"argument --n/--scenario: {err}")
    members = read_members(parser, args, env.num_agents, registry.names(provided=["llm", "human"]), "heuristic")
    try:
        check_team(env, members)
    except TeamSpecError as err:
        parser.error(f"argument --team: {err}")
    return env, members


def _language_agents(parser, args, members):
    """``(the language agents' factory, or None, and the team's extra factories)``."""
    if not any(m.kind == "llm" for m in members):
        return None, {}
    from cube_jax.cli.llm import language_agents
    from cube_jax.llm.prompts import PromptBook

    try:
        prompts = PromptBook(args.prompts) if args.prompts is not None else PromptBook.default()
    except ValueError as err:
        parser.error(f"argument --prompts: {err}")
    llm_agents = language_agents(parser, args, members, prompts)
    return llm_agents, {"llm": llm_agents}


def _settings(parser, args, world, out, factories):
    from cube_jax.runtime import Limits
    from cube_jax.web.game import Settings

    try:
        limits = Limits(max_steps=args.max_steps, max_wall_s=args.max_wall)
    except ValueError as err:
        parser.error(str(err))
    out.mkdir(parents=True, exist_ok=True)
    return Settings(world=world, team=args.team, topology=args.topology, budget=args.budget,
                    max_phases=args.max_phases, directive_timeout=args.directive_timeout, seed=args.seed,
                    out=out, limits=limits, speed=args.speed, paused=args.paused,
                    timelines=not args.no_timelines, factories=factories)


def _write_run_file(args, world, out, members, llm_agents) -> None:
    (out / "run.json").write_text(json.dumps({
        "command": "serve", "world": world, "team": args.team, "topology": args.topology, "budget": args.budget,
        "max_phases": args.max_phases, "directive_timeout": args.directive_timeout, "seed": args.seed,
        "max_steps": args.max_steps, "max_wall": args.max_wall, "model": args.model,
        "base_url": args.base_url, "members": [m.to_dict() for m in members],
        "models": {agent_name(i): llm_agents.settings(m).to_dict() for i, m in enumerate(members)
                   if m.kind == "llm"}}, indent=2))


def _serve(llm_agents, serve, url: str, out: Path) -> None:
    """Serves until Ctrl-C, with the local model's server around it when a member needs it."""
    from cube_jax.cli.llm import local_model

    try:
        with local_model(llm_agents, "serve"):
            print(f"cube-jax serve: {url} (run folder {out}; Ctrl-C stops)", flush=True)
            serve()
    except KeyboardInterrupt:
        pass
    finally:
        if llm_agents is not None:
            asyncio.run(llm_agents.pool.aclose())
    print(f"outputs in {out}")
