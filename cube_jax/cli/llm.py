"""``cube-jax llm``: language agents (and mixed teams) play episodes and leave traces.

::

    cube-jax llm --scenario hard --topology centralized --model qwen2.5-7b-instruct \\
                 --base-url http://127.0.0.1:8000/v1 --episodes 8 --seed 0 --concurrency 8 --out runs/llm
    cube-jax llm --n 3 --team llm,heuristic,llm --model NAME --base-url URL --out DIR
    cube-jax llm --n 3 --team llm:modelA,llm:modelB,policy:runs/ippo-... --base-url URL --out DIR
    cube-jax llm --replay runs/llm --out runs/llm-again        # no server: the recorded replies

The model server is any OpenAI-compatible Chat Completions endpoint (vLLM, Ollama,
llama.cpp's server, a hosted API): ``--base-url`` (or ``OPENAI_BASE_URL``), ``--model``, and
the key from ``--api-key`` or ``OPENAI_API_KEY`` (never written anywhere). ``--team`` gives
one member per agent (default ``llm`` for all; ``llm:<model>`` picks that agent's model and
``llm:<model>@<base URL>`` its server too; ``heuristic``, ``team``, ``random``,
``policy:<checkpoint>`` join as they are). ``--team-file`` lists the members in YAML or JSON,
where each ``llm`` member may also name its key's environment variable (``api_key_env``),
``temperature``, ``max_tokens`` and ``timeout`` (see :mod:`cube_jax.teams`)::

    cube-jax llm --n 3 --team llm:qwen@http://127.0.0.1:8001/v1,heuristic,llm:llama@http://127.0.0.1:8002/v1 ...
    cube-jax llm --n 3 --team-file team.yaml --out DIR

With neither ``--base-url`` nor ``OPENAI_BASE_URL`` (or with ``--model local``, or a member
``llm:local``) the command serves SmolLM2-135M-Instruct on 127.0.0.1 itself
(:mod:`cube_jax.llm.local`, the ``llm`` extra) and stops it when it ends, however it ends.

``--strategy-tips`` adds EmCoop's strategy advice to every prompt, ``--feedback`` the
cooperation constraints the agent's last step left unmet; both are off by default and
recorded in the trace's ``episode`` record (the language agents' entries). ``--reply-schema
plain`` sends the purpose's general JSON schema instead of the one built for each decision.

``--repair`` checks every plan before it runs (the agent can reach the face it pushes from,
the face's quorum can gather in time, no teammate's committed plan works the same block at
another face) and re-prompts the model with the violated check, within ``--max-repairs``;
``--demos K`` shows K worked examples (the heuristic's decisions on other layouts of the
world) in the system prompt. Both are recorded in the trace's ``episode`` record.

``--resume OUT`` continues an interrupted run in OUT with the options it was started with
(run.json): finished episodes are kept, the others are played again from their seeds, and
``metrics.json`` covers them all; with ``--record``, the exchanges an unfinished episode had
already recorded are served again from the recording instead of being asked of the server.
Options that differ from the recorded ones are refused, naming each difference.

``--max-phases`` bounds the cognitive phases of one environment step (default 3) and
``--directive-timeout`` how long a centralized follower waits for its leader's directive
(seconds, default 60).

``--out DIR`` receives one trace per episode (``episode-<seed>.jsonl``, LLM.md section 5),
``metrics.json`` (every metric of LLM.md section 6, with intervals), a timeline picture per
episode (``episode-<seed>.png``), ``run.json`` (this run's settings) and, with ``--record``,
every model exchange under ``exchanges/`` so that ``--replay DIR`` can re-run the episodes
offline with identical traces (wall times aside). Episodes run ``--concurrency`` at a time.
A bad reply, a server that is down or an unreachable URL never stops the run: each is
recorded in the traces and the metrics, and the command exits 0. What the run folder holds,
and how ``--replay`` and ``--resume`` read it back: :mod:`cube_jax.cli.llm_runs`.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from cube_jax.cli.args import (add_model_arguments, add_runtime_arguments, add_team_arguments, add_topology_arguments,
                               add_world_arguments, check_seeds, check_world, check_writable, episode_limit,
                               positive_float, positive_int, read_members, reasoning_settings, seed, team_option,
                               world_kwargs)
from cube_jax.cli.llm_runs import (EXCHANGES_DIR, REPLAYED, REPLAYED_SINCE, RESUMED, RESUMED_SINCE, RUN_FILE,
                                   UNFINISHED_REASONS, apply_replay, apply_resume, check_resumed, earlier_exchanges,
                                   finished, grow_world_model, open_world_model, run_settings, trace_of, versions,
                                   write_outputs)
from cube_jax.llm.factory import LanguageAgents, model_defaults


def add_parser(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "llm",
        help="language agents (or mixed teams) play episodes against an OpenAI-compatible server",
        description="Play episodes with language agents under a communication topology; writes traces, "
                    "metrics.json and timelines into --out.",
    )
    add_world_arguments(p)
    add_team_arguments(p, default="llm for every agent")
    add_topology_arguments(p)
    add_runtime_arguments(p)
    add_model_arguments(p)
    p.add_argument("--episodes", type=positive_int, default=8, help="number of episodes (default 8)")
    p.add_argument("--seed", type=seed, default=0, help="episode i starts from PRNGKey(seed + i) (default 0)")
    p.add_argument("--concurrency", type=positive_int, default=1, help="episodes played at once (default 1)")
    p.add_argument("--max-steps", type=episode_limit, default=None, help="episode step limit (default: the world's)")
    p.add_argument("--max-calls", type=positive_int, default=None, help="model calls per episode")
    p.add_argument("--max-wall", type=positive_float, default=None, help="wall-clock seconds per episode")
    p.add_argument("--prompts", type=Path, default=None, help="a folder of prompt templates overriding the defaults")
    p.add_argument("--write-prompts", type=Path, default=None,
                   help="copy the default prompt templates into this folder (to edit) and exit")
    p.add_argument("--record", action="store_true", help="keep every model exchange under OUT/exchanges/")
    p.add_argument("--replay", type=Path, default=None,
                   help="re-run the episodes recorded in this run folder with no server")
    p.add_argument("--out", type=Path, default=None, help="the run folder (created)")
    p.add_argument("--resume", type=Path, default=None,
                   help="continue the interrupted run in this folder with its recorded options (finished episodes "
                        "are kept, the others played again)")
    p.add_argument("--strategy-tips", action="store_true",
                   help="add EmCoop's strategy tips to the prompts (announce block and face, agree on timing)")
    p.add_argument("--feedback", action="store_true",
                   help="tell each agent the cooperation constraints its last step left unmet")
    p.add_argument("--reply-schema", choices=("state", "plain"), default="state",
                   help="the JSON schema sent with each request: built for the decision (default) or the "
                        "purpose's general one")
    p.add_argument("--world-model", type=Path, default=None,
                   help="negotiation: DR. WELL's world model file (JSON, created when missing), read by every room "
                        "and grown after every episode; episodes then run one after another")
    p.add_argument("--no-timelines", action="store_true", help="skip the timeline pictures")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run)
    return p


def run(parser: argparse.ArgumentParser, args) -> int:
    if args.write_prompts is not None:
        return _write_prompts(parser, args)
    resumed, recorded = _read_run_options(parser, args)
    world = _check_options(parser, args)
    args.out.mkdir(parents=True, exist_ok=True)
    kwargs, env, world_model = _make_world(parser, args, world)
    members = _read_team(parser, args, env, recorded)
    agents = language_agents(parser, args, members, _prompts(parser, args, members), replay=args.replay is not None)
    _check_team(parser, args, env, members)
    settings = run_settings(args, members, agents)
    seeds = [args.seed + i for i in range(args.episodes)]
    if resumed is not None:
        seeds = _resume(parser, args, resumed, settings, seeds, world_model)
    (args.out / RUN_FILE).write_text(json.dumps(settings, indent=2))
    with local_model(agents, "llm"):
        results = asyncio.run(_play(env, kwargs, members, args, agents, seeds, world_model))
    print(_table(results))
    write_outputs(args, [trace_of(args.out, args.seed + i) for i in range(args.episodes)])
    print(f"outputs in {args.out}")
    return 0


def _write_prompts(parser, args) -> int:
    from cube_jax.llm.prompts import write_default_templates

    try:
        written = write_default_templates(args.write_prompts)
    except (ValueError, OSError) as err:
        parser.error(f"argument --write-prompts: {err}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _read_run_options(parser, args) -> Tuple[Optional[Dict[str, Any]], Dict[str, Any]]:
    """The settings of the run that ``--resume`` continues and of the one ``--replay`` plays
    again (each None or empty without its option), read into ``args``."""
    recorded: Dict[str, Any] = {}
    resumed: Optional[Dict[str, Any]] = None
    if args.resume is not None:
        if args.replay is not None:
            parser.error("argument --resume: a replay is not resumed; replay it again")
        resumed = apply_resume(parser, args)
    if args.out is None:
        parser.error("argument --out: a run folder is required")
    if args.replay is not None:
        recorded = apply_replay(parser, args)
    if args.record and args.replay is not None:
        parser.error("argument --record: a replay records nothing new")
    return resumed, recorded


def _check_options(parser, args) -> Dict[str, Any]:
    """The world's options, after refusing options that do not go together."""
    check_world(parser, args)
    world = world_kwargs(args)
    if not world:
        parser.error("argument --n/--scenario: give the world: --n N or --scenario NAME")
    check_seeds(parser, args)
    if args.budget is not None and args.topology != "decentralized":
        parser.error("argument --budget: only the decentralized topology has a message budget")
    if args.world_model is not None and args.topology != "negotiation":
        parser.error("argument --world-model: only the negotiation topology reads a world model "
                     f"(--topology negotiation), not {args.topology!r}")
    check_writable(parser, "--out", args.out, folder=True)
    return world


def _make_world(parser, args, world: Dict[str, Any]):
    """``(make's options, the environment, the world model or None)``."""
    import cube_jax

    kwargs = dict(world)
    if args.max_steps is not None:
        kwargs["max_steps"] = args.max_steps
    return kwargs, cube_jax.make(**kwargs), open_world_model(parser, args, kwargs)


def _read_team(parser, args, env, recorded: Dict[str, Any]):
    """The members: a replay's recorded ones, else those of --team or --team-file."""
    from cube_jax import registry
    from cube_jax.teams import TeamSpecError, team_from_entries

    kinds = registry.names(provided=["llm"])
    if args.replay is not None and recorded.get("members"):
        try:
            return team_from_entries(recorded["members"], env.num_agents, kinds=kinds)
        except TeamSpecError as err:
            parser.error(f"argument --replay: {args.replay / RUN_FILE}: {err}")
    return read_members(parser, args, env.num_agents, kinds, default="llm")


def _prompts(parser, args, members):
    """The prompt book of the language agents (None when the team has none)."""
    if not any(m.kind == "llm" for m in members):
        return None
    from cube_jax.llm.prompts import PromptBook

    try:
        return PromptBook(args.prompts) if args.prompts is not None else PromptBook.default()
    except ValueError as err:
        parser.error(f"argument --prompts: {err}")


def _check_team(parser, args, env, members) -> None:
    from cube_jax.teams import TeamSpecError, check_team

    try:
        check_team(env, members)
    except TeamSpecError as err:
        parser.error(f"argument {team_option(args)}: {err}")


def _resume(parser, args, resumed: Dict[str, Any], settings: Dict[str, Any], seeds: List[int],
            world_model) -> List[int]:
    """The seeds still to play: the episodes that ran to their end are kept (and grown into
    the world model, a no-op for those it holds)."""
    check_resumed(parser, args, resumed, settings)
    kept = [s for s in seeds if finished(trace_of(args.out, s))]
    grow_world_model(parser, args, world_model, [trace_of(args.out, s) for s in kept])
    print(f"resuming {args.out}: {len(kept)} finished episode(s) kept, {len(seeds) - len(kept)} to play")
    settings["resumed"] = resumed.get("resumed", 0) + 1
    return [s for s in seeds if s not in kept]


# --- playing the episodes ---------------------------------------------------------------------------


async def _play(env, kwargs, members, args, agents: LanguageAgents, seeds: List[int], world_model=None):
    from tqdm import tqdm

    from cube_jax.runtime import arun_episodes

    bar = tqdm(total=len(seeds), unit="episode", desc="llm", disable=args.no_progress, file=sys.stderr)
    totals = {"steps": 0, "calls": 0, "tokens": 0}

    def done(result):
        totals["steps"] += result.steps
        totals["calls"] += result.model_calls
        totals["tokens"] += result.prompt_tokens + result.completion_tokens
        bar.update(1)
        bar.set_postfix(steps=totals["steps"], calls=totals["calls"], tokens=totals["tokens"])

    try:
        if world_model is None:
            episodes = [_episode(env, kwargs, members, s, args, agents) for s in seeds]
            return await arun_episodes(episodes, concurrency=args.concurrency, on_done=done)
        # Episode i reads the world model as episodes before it left it, whatever --concurrency
        # says: one episode at a time, the model grown and saved after each.
        results = []
        for s in seeds:
            episode = _episode(env, kwargs, members, s, args, agents, world_model=world_model)
            results += await arun_episodes([episode], concurrency=1, on_done=done)
            grow_world_model(None, args, world_model, [trace_of(args.out, s)])
        return results
    finally:
        bar.close()
        await agents.pool.aclose()


def _episode(env, kwargs, members, seed: int, args, agents: LanguageAgents, world_model=None):
    from cube_jax.runtime import Episode, Limits
    from cube_jax.runtime.topologies import make_topology
    from cube_jax.teams import team_agents

    exchanges = args.out / EXCHANGES_DIR / f"episode-{seed:06d}.jsonl"
    replayed = None if args.replay is None else args.replay / EXCHANGES_DIR / f"episode-{seed:06d}.jsonl"
    earlier = earlier_exchanges(exchanges) if args.record and args.resume is not None else None
    llm = agents.for_episode(record_to=exchanges if args.record else None, replay_from=replayed, resume_from=earlier)
    team = team_agents(env, members, factories={"llm": llm})
    limits = Limits(max_steps=args.max_steps, max_calls=args.max_calls, max_wall_s=args.max_wall)
    topology = make_topology(args.topology, env.num_agents, args.budget, directive_timeout=args.directive_timeout,
                             world_model=world_model)
    return Episode(env, team, seed=seed, topology=topology, limits=limits,
                   trace=args.out / f"episode-{seed:06d}.jsonl", env_kwargs=kwargs, max_phases=args.max_phases)


def _table(results) -> str:
    head = f"{'seed':>6} {'steps':>5} {'blocks':>7} {'weight':>7} {'ok':>3} {'calls':>5} {'tokens':>8}  reason"
    lines = [head, "-" * len(head)]
    for r in results:
        tokens = r.prompt_tokens + r.completion_tokens
        lines.append(f"{r.seed:>6} {r.steps:>5} {r.blocks_delivered:>3}/{r.blocks_total:<3} "
                     f"{r.weight_delivered:>3}/{r.weight_total:<3} {'yes' if r.success else 'no':>3} "
                     f"{r.model_calls:>5} {tokens:>8}  {r.reason if r.error is None else r.error}")
    done = len(results)
    succ = sum(r.success for r in results)
    calls = sum(r.model_calls for r in results)
    tokens = sum(r.prompt_tokens + r.completion_tokens for r in results)
    lines.append("-" * len(head))
    lines.append(f"{done} episodes: success {succ}/{done}, blocks {sum(r.blocks_delivered for r in results)}/"
                 f"{sum(r.blocks_total for r in results)}, model calls {calls}, tokens {tokens}")
    return "\n".join(lines)


# --- the language agents (also for cube-jax serve) --------------------------------------------------


def language_agents(parser: argparse.ArgumentParser, args, members, prompts, replay: bool = False) -> LanguageAgents:
    """The ``llm`` factory for ``members``, after checking that every language agent has a
    model, a server and its key variable (argparse errors naming the option and the entry)."""
    from cube_jax.llm.client import ClientPool

    from cube_jax.llm.local import LocalServer, is_local
    from cube_jax.runtime.watch import planner_decisions

    defaults = model_defaults(args.model, args.base_url, api_key_env=None, temperature=args.temperature,
                              max_tokens=args.max_tokens, timeout=args.timeout, max_retries=args.retries,
                              **reasoning_settings(args))
    factory = LanguageAgents(ClientPool(args.api_key), defaults, prompts, args.max_repairs,
                             strategy_tips=getattr(args, "strategy_tips", False),
                             feedback=getattr(args, "feedback", False),
                             schema_kind=getattr(args, "reply_schema", "state"),
                             repair=getattr(args, "repair", False), demos=getattr(args, "demos", 0),
                             demo_player=planner_decisions)
    if replay:
        return factory
    option = team_option(args)
    for position, member in enumerate(members):
        if member.kind != "llm":
            continue
        settings = factory.settings(member)
        if is_local(settings.model):
            continue
        if not settings.model:
            parser.error("argument --model: name the model (or give every llm member its own: llm:<model>)")
        if not settings.base_url:
            parser.error("argument --base-url: give the server's base URL (or set OPENAI_BASE_URL, or give every llm "
                         "member its own: llm:<model>@<base URL>), or play the model on this machine: --model local")
        if settings.api_key_env is not None and not os.environ.get(settings.api_key_env):
            parser.error(f"argument {option}: team: entry {position}: api_key_env: the environment variable "
                         f"{settings.api_key_env} is not set")
    local = factory.uses_local(members)
    if local:
        in_flight = local * getattr(args, "concurrency", 1)
        factory = dataclasses.replace(factory, local=LocalServer(port=args.local_port, threads=args.local_threads,
                                                                 parallel=in_flight))
    return factory


@contextlib.contextmanager
def local_model(agents: Optional[LanguageAgents], command: str):
    """Runs the local model's server (when the team plays it) for the ``with`` block and stops
    it however the block ends; a server that cannot start exits with a one-line error."""
    from cube_jax.llm.local import LocalModelError

    server = None if agents is None else agents.local
    if server is None:
        yield
        return
    try:
        server.start()
    except LocalModelError as err:
        print(f"cube-jax {command}: error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    try:
        yield
    finally:
        server.stop()


__all__ = ["EXCHANGES_DIR", "REPLAYED", "REPLAYED_SINCE", "RESUMED", "RESUMED_SINCE", "RUN_FILE", "UNFINISHED_REASONS",
           "LanguageAgents", "add_parser", "finished", "language_agents", "local_model", "run", "versions"]
