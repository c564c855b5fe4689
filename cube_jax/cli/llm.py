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

``--max-phases`` bounds the cognitive phases of one environment step (default 3) and
``--directive-timeout`` how long a centralized follower waits for its leader's directive
(seconds, default 60).

``--out DIR`` receives one trace per episode (``episode-<seed>.jsonl``, LLM.md section 5),
``metrics.json`` (every metric of LLM.md section 6, with intervals), a timeline picture per
episode (``episode-<seed>.png``), ``run.json`` (this run's settings) and, with ``--record``,
every model exchange under ``exchanges/`` so that ``--replay DIR`` can re-run the episodes
offline with identical traces (wall times aside). Episodes run ``--concurrency`` at a time.
A bad reply, a server that is down or an unreachable URL never stops the run: each is
recorded in the traces and the metrics, and the command exits 0.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from cube_jax.cli.args import (add_model_arguments, add_runtime_arguments, add_team_arguments, add_topology_arguments,
                               add_world_arguments, check_seeds, check_world, check_writable, episode_limit,
                               positive_float, positive_int, read_members, seed, team_option, world_kwargs)

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
EXCHANGES_DIR = "exchanges"
# Settings a replay takes from the recorded run.
REPLAYED = ("n", "scenario", "team", "topology", "budget", "episodes", "seed", "max_steps", "max_calls", "max_wall",
            "max_repairs", "model", "max_phases", "directive_timeout")
# Of those, the ones older recordings may lack: the command's defaults stand in for them.
REPLAYED_SINCE = ("max_phases", "directive_timeout")


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
    p.add_argument("--no-timelines", action="store_true", help="skip the timeline pictures")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run)
    return p


# --- settings ------------------------------------------------------------------------------------


def _apply_replay(parser, args) -> Dict[str, Any]:
    """Reads the recorded run's settings into ``args``; returns them."""
    run_file = args.replay / RUN_FILE
    if not run_file.is_file():
        parser.error(f"argument --replay: no {RUN_FILE} in {str(args.replay)!r}; record a run with --record first")
    try:
        recorded = json.loads(run_file.read_text())
    except (OSError, ValueError) as err:
        parser.error(f"argument --replay: {run_file} is not readable JSON ({err})")
    if not recorded.get("record"):
        parser.error(f"argument --replay: {str(args.replay)!r} was not recorded (run it with --record)")
    if args.out is not None and args.out.resolve() == args.replay.resolve():
        parser.error("argument --out: write the replay into another folder than the recording")
    for key in REPLAYED:
        if key in recorded or key not in REPLAYED_SINCE:
            setattr(args, key, recorded.get(key))
    args.team_file = None  # the recorded members stand in for the file
    return recorded


def _settings(args, members, models: "LanguageAgents") -> Dict[str, Any]:
    """This run's settings for run.json: every member with its own settings, and each
    language agent's model settings (no API key: at most the name of its variable)."""
    out = {key: getattr(args, key) for key in REPLAYED}
    out.update({
        "base_url": args.base_url, "temperature": args.temperature, "max_tokens": args.max_tokens,
        "timeout": args.timeout, "retries": args.retries, "concurrency": args.concurrency, "record": args.record,
        "replay": None if args.replay is None else str(args.replay),
        "prompts": None if args.prompts is None else str(args.prompts),
        "team_file": None if args.team_file is None else str(args.team_file),
        "members": [m.to_dict() for m in members],
        "models": {f"agent_{i}": models.settings(m).to_dict() for i, m in enumerate(members)
                   if m.kind == "llm" and args.replay is None},
    })
    return out


# --- building episodes ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LanguageAgents:
    """The factory of ``llm`` members (``team_agents(..., factories={"llm": ...})``) for
    ``cube-jax llm`` and ``serve``: one :class:`~cube_jax.llm.LLMAgent` per agent, whose client
    comes from ``pool`` for the member's settings over ``defaults`` (or replays ``replay_from``,
    with no server; or records every exchange to ``record_to``)."""

    pool: Any  # cube_jax.llm.ClientPool
    defaults: Dict[str, Any]  # ModelSettings fields from the command's options
    prompts: Any  # cube_jax.llm.prompts.PromptBook
    max_repairs: int
    record_to: Optional[Path] = None
    replay_from: Optional[Path] = None

    def settings(self, member):
        """The member's :class:`~cube_jax.llm.ModelSettings` (its own over the defaults)."""
        from cube_jax.llm.client import ModelSettings

        return ModelSettings(**{**self.defaults, **{k: v for k, v in member.options if k in self.defaults}})

    def for_episode(self, record_to: Optional[Path], replay_from: Optional[Path]) -> "LanguageAgents":
        return dataclasses.replace(self, record_to=record_to, replay_from=replay_from)

    def __call__(self, env, member, ids):
        from cube_jax.llm.agent import LLMAgent
        from cube_jax.llm.recording import RecordingClient, ReplayClient
        from cube_jax.trace import agent_name

        agents = []
        for i in ids:
            if self.replay_from is not None:
                client = ReplayClient(self.replay_from, agent=agent_name(i))
            else:
                client = self.pool.get(self.settings(member))
                if self.record_to is not None:
                    client = RecordingClient(client, self.record_to, agent=agent_name(i))
            agents.append(LLMAgent(client, prompts=self.prompts, max_repairs=self.max_repairs))
        return agents


def language_agents(parser: argparse.ArgumentParser, args, members, prompts, replay: bool = False) -> LanguageAgents:
    """The ``llm`` factory for ``members``, after checking that every language agent has a
    model, a server and its key variable (argparse errors naming the option and the entry)."""
    from cube_jax.llm.client import ClientPool

    defaults = {"model": args.model, "base_url": args.base_url or os.environ.get("OPENAI_BASE_URL"),
                "api_key_env": None, "temperature": args.temperature, "max_tokens": args.max_tokens,
                "timeout": args.timeout, "max_retries": args.retries}
    factory = LanguageAgents(ClientPool(args.api_key), defaults, prompts, args.max_repairs)
    if replay:
        return factory
    option = team_option(args)
    for position, member in enumerate(members):
        if member.kind != "llm":
            continue
        settings = factory.settings(member)
        if not settings.model:
            parser.error("argument --model: name the model (or give every llm member its own: llm:<model>)")
        if not settings.base_url:
            parser.error("argument --base-url: give the server's base URL (or set OPENAI_BASE_URL, or give every llm "
                         "member its own: llm:<model>@<base URL>)")
        if settings.api_key_env is not None and not os.environ.get(settings.api_key_env):
            parser.error(f"argument {option}: team: entry {position}: api_key_env: the environment variable "
                         f"{settings.api_key_env} is not set")
    return factory


def _episode(env, kwargs, members, seed: int, args, agents: LanguageAgents):
    from cube_jax.evaluation import Episode, Limits
    from cube_jax.runtime.topologies import make_topology
    from cube_jax.teams import team_agents

    exchanges = args.out / EXCHANGES_DIR / f"episode-{seed:06d}.jsonl"
    replayed = None if args.replay is None else args.replay / EXCHANGES_DIR / f"episode-{seed:06d}.jsonl"
    llm = agents.for_episode(record_to=exchanges if args.record else None, replay_from=replayed)
    team = team_agents(env, members, factories={"llm": llm})
    limits = Limits(max_steps=args.max_steps, max_calls=args.max_calls, max_wall_s=args.max_wall)
    topology = make_topology(args.topology, env.num_agents, args.budget, directive_timeout=args.directive_timeout)
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


def run(parser: argparse.ArgumentParser, args) -> int:
    if args.write_prompts is not None:
        from cube_jax.llm.prompts import write_default_templates

        try:
            written = write_default_templates(args.write_prompts)
        except (ValueError, OSError) as err:
            parser.error(f"argument --write-prompts: {err}")
        print("wrote " + ", ".join(str(p) for p in written))
        return 0
    if args.out is None:
        parser.error("argument --out: a run folder is required")
    recorded: Dict[str, Any] = {}
    if args.replay is not None:
        recorded = _apply_replay(parser, args)
    if args.record and args.replay is not None:
        parser.error("argument --record: a replay records nothing new")
    check_world(parser, args)
    world = world_kwargs(args)
    if not world:
        parser.error("argument --n/--scenario: give the world: --n N or --scenario NAME")
    check_seeds(parser, args)
    if args.budget is not None and args.topology != "decentralized":
        parser.error("argument --budget: only the decentralized topology has a message budget")
    check_writable(parser, "--out", args.out, folder=True)
    args.out.mkdir(parents=True, exist_ok=True)

    import cube_jax
    from cube_jax import registry
    from cube_jax.teams import TeamSpecError, check_team, team_from_entries

    kwargs = dict(world)
    if args.max_steps is not None:
        kwargs["max_steps"] = args.max_steps
    env = cube_jax.make(**kwargs)
    kinds = registry.names(provided=["llm"])
    if args.replay is not None and recorded.get("members"):
        try:
            members = team_from_entries(recorded["members"], env.num_agents, kinds=kinds)
        except TeamSpecError as err:
            parser.error(f"argument --replay: {args.replay / RUN_FILE}: {err}")
    else:
        members = read_members(parser, args, env.num_agents, kinds, default="llm")
    prompts = None
    if any(m.kind == "llm" for m in members):
        from cube_jax.llm.prompts import PromptBook

        try:
            prompts = PromptBook(args.prompts) if args.prompts is not None else PromptBook.default()
        except ValueError as err:
            parser.error(f"argument --prompts: {err}")
    agents = language_agents(parser, args, members, prompts, replay=args.replay is not None)
    try:
        check_team(env, members)
    except TeamSpecError as err:
        parser.error(f"argument {team_option(args)}: {err}")
    (args.out / RUN_FILE).write_text(json.dumps(_settings(args, members, agents), indent=2))
    results = asyncio.run(_play(env, kwargs, members, args, agents))
    print(_table(results))
    _write_outputs(args, results)
    print(f"outputs in {args.out}")
    return 0


async def _play(env, kwargs, members, args, agents: LanguageAgents):
    from tqdm import tqdm

    from cube_jax.evaluation import arun_episodes

    seeds = [args.seed + i for i in range(args.episodes)]
    episodes = [_episode(env, kwargs, members, s, args, agents) for s in seeds]
    bar = tqdm(total=len(episodes), unit="episode", desc="llm", disable=args.no_progress, file=sys.stderr)
    totals = {"steps": 0, "calls": 0, "tokens": 0}

    def done(result):
        totals["steps"] += result.steps
        totals["calls"] += result.model_calls
        totals["tokens"] += result.prompt_tokens + result.completion_tokens
        bar.update(1)
        bar.set_postfix(steps=totals["steps"], calls=totals["calls"], tokens=totals["tokens"])

    try:
        return await arun_episodes(episodes, concurrency=args.concurrency, on_done=done)
    finally:
        bar.close()
        await agents.pool.aclose()


def _write_outputs(args, results) -> None:
    """metrics.json and the timelines, from the traces alone."""
    from cube_jax.analytics import render_timeline, write_metrics_json
    from cube_jax.evaluation import read_trace

    traces = [Path(r.trace) for r in results if r.trace is not None]
    report = write_metrics_json(traces, args.out / "metrics.json")
    for failure in report.failures:
        log.warning("left out of the metrics: %s", failure)
    print(f"wrote {args.out / 'metrics.json'}")
    if not args.no_timelines:
        for path in traces:
            try:
                render_timeline(read_trace(path), path.with_suffix(".png"))
            except Exception as err:  # noqa: BLE001 - a picture must not cost the run its other outputs
                log.warning("timeline of %s not drawn: %s", path, err)
