"""The world model file (``--world-model PATH``): JSON, written atomically, read strictly.

The file holds the world it belongs to (the ``env`` of the traces' ``episode`` records),
the episodes (outcome and the step at which each block was delivered) and the tasks, each
with its prototypes, each with its instances, each with its attempts; every node carries
its statistics. The attempts are what the model learnt; the statistics follow from them
and are checked against them when the file is read, so a file edited by hand or cut short
is refused with the place that does not add up rather than read as something else.

The text is canonical (sorted keys, tasks by block, prototypes and instances by their
text, episodes and attempts in the order they were added, no clock readings), so the same
traces added in the same order always give the same bytes. :func:`save` writes a
temporary file in the same folder, flushes it to disk and renames it over the old one: an
interrupted save leaves the previous complete file.

The functions take the model as an argument (and, to read, the type to build), so that
this module needs nothing of :mod:`~cube_jax.worldmodel.model`, which reads and writes its
file through it.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional, Tuple, Type

import msgspec
from msgspec import Meta

from cube_jax.files import write_atomic
from cube_jax.names import excerpt
from cube_jax.trace import Outcome, outcome_fields
from cube_jax.worldmodel.errors import WorldMismatchError, WorldModelError
from cube_jax.worldmodel.outcomes import Attempt, EpisodeNode, world_name

FORMAT = "cube_jax.worldmodel"
VERSION = 1
# Statistics are rounded so that the file reads well; the same attempts give the same digits.
DIGITS = 6

NonNegativeInt = Annotated[int, Meta(ge=0)]
PositiveInt = Annotated[int, Meta(ge=1)]


# --- the file's schema ---------------------------------------------------------------------------


class _Entry(msgspec.Struct, forbid_unknown_fields=True):
    pass


class AttemptEntry(_Entry):
    episode: NonNegativeInt
    agent: str
    start: NonNegativeInt
    duration: NonNegativeInt
    team_size: PositiveInt
    success: bool


class InstanceEntry(_Entry):
    actions: List[str]
    stats: Dict[str, Any]
    attempts: List[AttemptEntry]


class PrototypeEntry(_Entry):
    actions: List[str]
    stats: Dict[str, Any]
    instances: List[InstanceEntry]


class TaskEntry(_Entry):
    id: str
    block: NonNegativeInt
    weight: Optional[PositiveInt]
    stats: Dict[str, Any]
    prototypes: List[PrototypeEntry]


# An episode: its id and index, the trace's seed and topology, its outcome (the keys of
# cube_jax.trace.Outcome), when each block was delivered and the trace's digest.
EpisodeEntry = msgspec.defstruct(
    "EpisodeEntry",
    [("id", str), ("index", NonNegativeInt), ("seed", int), ("topology", str), *outcome_fields(),
     ("completion", Dict[str, NonNegativeInt]), ("trace", str)],
    bases=(_Entry,), module=__name__)


class ModelFile(_Entry):
    format: Literal[FORMAT]
    version: Literal[VERSION]
    world: Optional[Dict[str, Any]]
    episodes: List[EpisodeEntry]
    tasks: List[TaskEntry]


_DECODER = msgspec.json.Decoder(ModelFile)


# --- writing -------------------------------------------------------------------------------------


def to_builtins(model) -> Dict[str, Any]:
    """The file's content as plain JSON values."""
    return {"format": FORMAT, "version": VERSION, "world": model.world,
            "episodes": [_episode(e) for e in model.episodes],
            "tasks": [_task(model.tasks[block]) for block in sorted(model.tasks)]}


def to_json(model) -> str:
    return json.dumps(to_builtins(model), sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def save(model, path) -> None:
    """Writes ``model`` to ``path`` atomically (see the module docstring)."""
    write_atomic(path, to_json(model))


def _episode(e: EpisodeNode) -> Dict[str, Any]:
    return {"id": f"episode#{e.index}", "index": e.index, "seed": e.seed, "topology": e.topology,
            **Outcome.of(e).to_dict(), "completion": {str(b): t for b, t in sorted(e.completion.items())},
            "trace": e.digest}


def _task(task) -> Dict[str, Any]:
    stats = _stats(task.stats)
    stats.pop("block")
    stats.pop("weight")
    stats["by_team_size"] = [{"team_size": size, "attempts": tried, "successes": won}
                             for size, tried, won in task.stats.by_team_size]
    return {"id": task.id, "block": task.block, "weight": task.weight, "stats": stats,
            "prototypes": [_prototype(p) for p in sorted(task.prototypes.values(), key=lambda p: p.names)]}


def _prototype(prototype) -> Dict[str, Any]:
    return {"actions": list(prototype.names), "stats": _stats(prototype.stats),
            "instances": [_instance(i) for i in sorted(prototype.instances.values(), key=lambda i: i.actions)]}


def _instance(instance) -> Dict[str, Any]:
    return {"actions": list(instance.actions), "stats": _stats(instance.stats),
            "attempts": [{"episode": a.episode, "agent": a.agent, "start": a.start, "duration": a.duration,
                          "team_size": a.team_size, "success": a.success} for a in instance.attempts]}


def _stats(stats) -> Dict[str, Any]:
    return {key: round(value, DIGITS) if isinstance(value, float) else value
            for key, value in dataclasses.asdict(stats).items()}


# --- reading -------------------------------------------------------------------------------------


def load(path, env: Optional[Mapping[str, Any]] = None, *, model_type: Type):
    """The world model (of ``model_type``, built as ``model_type(world)``) in ``path``; an
    empty one of world ``env`` when there is no file.
    :class:`WorldMismatchError` when the file is of another world than ``env``, naming
    both; :class:`WorldModelError` naming the path and the problem for anything else."""
    path = Path(path)
    if not path.exists():
        return model_type(env)
    if path.is_dir():
        raise WorldModelError(f"{path}: is a folder, not a world model file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise WorldModelError(f"{path}: cannot be read: {err.strerror}") from None
    model = from_json(data, str(path), model_type=model_type)
    if env is not None:
        if model.world is None:
            model.world = dict(env)
        try:
            model.check_world(env, "the run")
        except WorldMismatchError:
            raise WorldMismatchError(f"{path}: a world model of world {world_name(model.world)}, not of world "
                                     f"{world_name(env)}") from None
    return model


def from_json(data: bytes, source: str = "<world model>", *, model_type: Type):
    """The model (of ``model_type``) a file's bytes hold; :class:`WorldModelError` naming
    ``source`` otherwise."""
    def refuse(problem: str) -> WorldModelError:
        return WorldModelError(f"{source}: not a valid world model file: {problem}")

    if not data.strip():
        raise refuse("the file is empty")
    try:
        content = _DECODER.decode(data)
    except msgspec.ValidationError as err:
        raise refuse(" ".join(str(err).split())) from None
    except msgspec.DecodeError as err:
        reason = " ".join(str(err).split()).removeprefix("JSON is malformed: ")
        raise refuse(f"not JSON ({reason[:1].lower() + reason[1:]})") from None
    model = model_type(content.world)
    for position, entry in enumerate(content.episodes):
        if entry.index != position:
            raise refuse(f"episodes[{position}] has index {entry.index}")
        model.episodes.append(EpisodeNode(index=entry.index, seed=entry.seed, topology=entry.topology,
                                          **Outcome.of(entry).to_dict(),
                                          completion=_completion(entry, position, refuse), digest=entry.trace))
    for t, task in enumerate(content.tasks):
        model.task(task.block).weight = task.weight
        for p, prototype in enumerate(task.prototypes):
            for i, instance in enumerate(prototype.instances):
                for k, attempt in enumerate(instance.attempts):
                    if attempt.episode >= len(model.episodes):
                        raise refuse(f"tasks[{t}].prototypes[{p}].instances[{i}].attempts[{k}] names episode "
                                     f"{attempt.episode}, but the file has {len(model.episodes)} episodes")
                    model.add_attempt(Attempt(block=task.block, actions=tuple(instance.actions), agent=attempt.agent,
                                              episode=attempt.episode, start=attempt.start, duration=attempt.duration,
                                              team_size=attempt.team_size, success=attempt.success))
    difference = _first_difference(json.loads(data), to_builtins(model))
    if difference is not None:
        where, found, expected = difference
        raise refuse(f"{where} is {_short(found)}, but the attempts the file holds give {_short(expected)}")
    return model


def _completion(entry, position: int, refuse) -> Dict[int, int]:
    completion = {}
    for key, t in entry.completion.items():
        if not key.isdigit() or key != str(int(key)):
            raise refuse(f"episodes[{position}].completion has key {key!r}, not a block id")
        completion[int(key)] = t
    return completion


def _first_difference(found: Any, expected: Any, where: str = "") -> Optional[Tuple[str, Any, Any]]:
    """(path, found value, expected value) of the first place where two JSON values differ."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected)):
            if key not in found or key not in expected:
                return f"{where}.{key}".lstrip("."), found.get(key, "missing"), expected.get(key, "missing")
            inner = _first_difference(found[key], expected[key], f"{where}.{key}")
            if inner is not None:
                return inner
        return None
    if isinstance(found, list) and isinstance(expected, list):
        for index, (a, b) in enumerate(zip(found, expected)):
            inner = _first_difference(a, b, f"{where}[{index}]")
            if inner is not None:
                return inner
        if len(found) != len(expected):
            return f"{where} (length)".lstrip("."), len(found), len(expected)
        return None
    if found == expected and type(found) is type(expected):
        return None
    if isinstance(found, (int, float)) and isinstance(expected, (int, float)) and not isinstance(found, bool) \
            and not isinstance(expected, bool) and found == expected:
        return None
    return where.lstrip(".") or "the file", found, expected


def _short(value: Any) -> str:
    return excerpt(json.dumps(value, ensure_ascii=False))


__all__ = ["FORMAT", "VERSION", "from_json", "load", "save", "to_builtins", "to_json"]
