"""``bench verify``: an entry's scores recomputed from its evidence alone (BENCH.md section 4).

The world is a deterministic function of its layout and the actions taken, so nothing of the
agent is needed. :func:`verify` checks, in order, and stops at the first failure with a
:class:`VerificationError` naming the file, task and episode:

1. ``entry.json`` is an entry of the installed suite version whose test-set hashes are the
   installed ones (:func:`cube_jax.bench.entry.read_entry`);
2. every evidence file exists and has the SHA-256 that ``entry.json`` records, and no file is
   missing from that list (a truncated or replaced file, an added one);
3. every task holds every episode it should: each (run, mode) plays test episodes
   0 .. ``episodes_per_run`` - 1, each once, with layout ``i`` (0 for a fixed-layout task) and
   seed ``i``;
4. each episode's actions in ``actions.npz`` have the digest its record gives;
5. the episodes (all, or a random sample of ``sample`` per task drawn with ``seed``) replayed
   through the JAX step give exactly the recorded ``success``, ``blocks``, ``steps`` and
   ``return``, end where the record says, and hold no action after their end;
6. the aggregates recomputed from the episodes' scores with the entry's bootstrap settings
   equal the recorded ones exactly.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from cube_jax.bench import entry as entries
from cube_jax.bench.replay import replay, scores_of
from cube_jax.core import suite


class VerificationError(entries.EntryError):
    """What an entry claims and its evidence disagree (or the evidence is damaged)."""


@dataclasses.dataclass
class Report:
    """What a passing verification checked."""

    path: Path
    tasks: Dict[str, Dict[str, int]]  # task -> {"episodes", "replayed"}
    seconds: float
    evidence_bytes: int

    def line(self) -> str:
        episodes = sum(v["episodes"] for v in self.tasks.values())
        replayed = sum(v["replayed"] for v in self.tasks.values())
        return (f"verified {self.path}: {len(self.tasks)} task(s), {replayed} of {episodes} episodes replayed, every "
                f"digest, score and aggregate equal ({self.seconds:.1f} s, evidence {self.evidence_bytes / 1e6:.2f} MB)")


def _episode_name(name: str, i: int, e: Mapping[str, Any]) -> str:
    return f"task {name!r}, episode {i} (layout {e.get('layout')}, seed {e.get('seed')}, {e.get('mode')}, run {e.get('run')})"


def _check_evidence(folder: Path, entry: Mapping[str, Any]) -> int:
    listed = entry["evidence"]
    if entries.ACTIONS_FILE not in listed:
        raise VerificationError(f"{folder / entries.ENTRY_FILE}: the evidence lists no {entries.ACTIONS_FILE}")
    size = 0
    for rel, digest in listed.items():
        path = folder / rel
        if not path.is_file():
            raise VerificationError(f"{path}: an evidence file the entry lists is missing")
        size += path.stat().st_size
        if entries.file_digest(path) != digest:
            raise VerificationError(f"{path}: its SHA-256 is not the one entry.json records (the file was changed or "
                                    "truncated)")
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel != entries.ENTRY_FILE and not rel.startswith("work/") and rel not in listed:
            raise VerificationError(f"{path}: a file the entry's evidence does not list")
    return size


def _check_episode_set(name: str, record: Mapping[str, Any]) -> None:
    t = suite.task(name)
    per_run = record.get("episodes_per_run")
    if not isinstance(per_run, int) or not 1 <= per_run <= suite.TEST_LAYOUTS:
        raise VerificationError(f"task {name!r}: episodes_per_run is {per_run!r}, not a count of 1..{suite.TEST_LAYOUTS}")
    groups: Dict[tuple, List[int]] = {}
    for i, e in enumerate(record["episodes"]):
        for key in ("layout", "seed", "mode", "run", *entries.SCORES, "actions_digest"):
            if key not in e:
                raise VerificationError(f"{_episode_name(name, i, e)}: no {key!r}")
        if e["mode"] not in entries.MODES:
            raise VerificationError(f"{_episode_name(name, i, e)}: mode {e['mode']!r} is not one of {entries.MODES}")
        expected_layout = 0 if t.fixed_layout else e["seed"]
        if e["layout"] != expected_layout:
            raise VerificationError(f"{_episode_name(name, i, e)}: test episode {e['seed']} starts from layout "
                                    f"{expected_layout}, not {e['layout']}")
        groups.setdefault((e["run"], e["mode"]), []).append(e["seed"])
    if not groups:
        raise VerificationError(f"task {name!r}: no episodes")
    for (run, mode), seeds in groups.items():
        missing = sorted(set(range(per_run)) - set(seeds))
        if missing:
            raise VerificationError(f"task {name!r}, run {run}, {mode}: episode {missing[0]} is missing "
                                    f"({len(missing)} of {per_run} missing)")
        if len(seeds) != per_run:
            extra = sorted(s for s in set(seeds) if seeds.count(s) > 1 or s >= per_run)
            raise VerificationError(f"task {name!r}, run {run}, {mode}: episode {extra[0] if extra else '?'} is "
                                    f"recorded more than once or beyond the {per_run} played")


def _check_task(name: str, record: Mapping[str, Any], actions: np.ndarray, sample: Optional[int],
                rng: np.random.Generator) -> int:
    episodes = record["episodes"]
    if actions.shape[0] != len(episodes):
        raise VerificationError(f"task {name!r}: {len(episodes)} episodes but {actions.shape[0]} rows of actions")
    played = (actions[:, :, 0] >= 0).sum(axis=1)
    for i, e in enumerate(episodes):
        if entries.actions_digest(actions[i, : played[i]]) != e["actions_digest"]:
            raise VerificationError(f"{_episode_name(name, i, e)}: its actions are not the ones it was scored on "
                                    "(their digest differs)")
    if sample == 0:
        return 0
    chosen = np.arange(len(episodes))
    if sample is not None and sample < len(episodes):
        chosen = np.sort(rng.choice(len(episodes), size=sample, replace=False))
    replayed = replay(name, np.array([episodes[i]["layout"] for i in chosen]),
                      np.array([episodes[i]["seed"] for i in chosen]), actions[chosen])
    for j, i in enumerate(chosen):
        e = episodes[i]
        if bool(replayed["acted_after_end"][j]):
            raise VerificationError(f"{_episode_name(name, i, e)}: actions recorded after the episode's end")
        recomputed = scores_of(replayed, j)
        for key in entries.SCORES:
            if recomputed[key] != e[key]:
                raise VerificationError(f"{_episode_name(name, i, e)}: recorded {key} {e[key]!r}, the replay gives "
                                        f"{recomputed[key]!r}")
        if e.get("end_reason") is None and not bool(replayed["ended"][j]):
            raise VerificationError(f"{_episode_name(name, i, e)}: the recorded actions stop before the episode's end "
                                    "and the record gives no reason")
    return len(chosen)


def _check_aggregates(name: str, record: Mapping[str, Any], entry: Mapping[str, Any]) -> None:
    boot = entry["bootstrap"]
    learns = bool(entry["agent"].get("learns"))
    recomputed = entries.aggregates(record["episodes"], learns, seed=boot["seed"], resamples=boot["resamples"])
    recorded = record.get("aggregates")
    if recorded != recomputed:
        for mode in sorted(set(recomputed) | set(recorded or {})):
            mine, theirs = recomputed.get(mode), (recorded or {}).get(mode)
            if mine != theirs:
                field = next((k for k in sorted(set(mine or {}) | set(theirs or {}))
                              if (mine or {}).get(k) != (theirs or {}).get(k)), "?")
                raise VerificationError(f"task {name!r}: the recorded {mode} aggregate {field!r} is "
                                        f"{(theirs or {}).get(field)!r}; the episodes give {(mine or {}).get(field)!r}")


def verify(folder: Path, sample: Optional[int] = None, seed: int = 0) -> Report:
    """Checks an entry as the module docstring says; VerificationError (an EntryError) at the first
    disagreement. ``sample``: how many episodes per task to replay (all when None; with 0, every
    check but the replay)."""
    start = time.perf_counter()
    folder = Path(folder)
    entry = entries.read_entry(folder)
    size = _check_evidence(folder, entry)
    actions = entries.load_actions(folder, entry)
    rng = np.random.default_rng(seed)
    checked: Dict[str, Dict[str, int]] = {}
    for name, record in entry["tasks"].items():
        if name not in actions:
            raise VerificationError(f"{folder / entries.ACTIONS_FILE}: no actions for task {name!r}")
        _check_episode_set(name, record)
        replayed = _check_task(name, record, actions[name], sample, rng)
        _check_aggregates(name, record, entry)
        checked[name] = {"episodes": len(record["episodes"]), "replayed": replayed}
    return Report(folder, checked, time.perf_counter() - start, size)


__all__ = ["Report", "VerificationError", "verify"]
