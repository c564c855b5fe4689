"""An entry of the benchmark (BENCH.md sections 2 and 3): what it holds, how it is scored and
written, and where it came from.

One folder per entry::

    entry.json      suite version, test-set hashes, agent, per-task episodes and aggregates,
                    provenance, the digest of every evidence file
    actions.npz     every episode's actions, step by step and agent by agent (evidence)
    traces/         language agents' traces, one per episode (LLM.md section 5)
    <task>.gif      one episode of each task, drawn

Each episode carries its layout index, seed, mode (``greedy`` or ``sampled``), run (the
training seed, 0 for a fixed agent), its four scores and the SHA-256 of its actions, so an
edit of the actions that leaves the scores equal is still caught. Aggregates are computed
here from the episodes' scores alone (:func:`aggregates`): over episodes for a fixed agent,
over runs (each run's mean over its test episodes) for an agent that learns.

On disk (format 2) a task's episodes are one table, ``{"columns": [...], "rows": [[...], ...]}``,
a row per episode, when every record has the same fields (a list of records otherwise);
:func:`read_entry` gives them back as records, and reads format 1 (always a list of records)
too. :func:`write_entry` writes the current format; ``cube-jax bench upgrade`` rewrites an
older entry in it.

The actions of a task are one int8 array ``<task>/actions`` of shape ``[E, T, N]`` (episode,
step, agent; -1 after the episode's end) in ``actions.npz``, rows in the order of the task's
episodes in ``entry.json``; the archive's members are LZMA-compressed (``np.load`` reads it as
any ``.npz``).
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from cube_jax.core import suite
from cube_jax.cpus import cpu_model, usable_cpus
from cube_jax.files import write_atomic

FORMAT = 2
READABLE_FORMATS = (1, 2)
ENTRY_FILE = "entry.json"
ACTIONS_FILE = "actions.npz"
TRACES_DIR = "traces"
SCORES = ("success", "blocks", "steps", "return")
AGGREGATED = ("success", "blocks", "return")  # mean and IQM, each with its interval
MODES = ("greedy", "sampled")
TIERS = {"S": 10**7, "M": 10**8}  # environment steps per training seed
MIN_SEEDS = 5
MIN_FIXED_EPISODES = 10
BOOTSTRAP_SEED = 0
RESAMPLES = 10_000
CONFIDENCE = 0.95
NO_ACTION = -1  # actions.npz: a step after the episode's end


class EntryError(ValueError):
    """An entry that cannot be read, or does not hold what it claims; the message names the file,
    the task and the episode where they apply."""


# --- scores and aggregates -------------------------------------------------------------------------


def actions_digest(actions: np.ndarray) -> str:
    """SHA-256 of one episode's actions int8[T, N] (its played steps only), as stored."""
    return hashlib.sha256(np.ascontiguousarray(actions, dtype=np.int8).tobytes()).hexdigest()


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bootstrap(table: np.ndarray, seed: int = BOOTSTRAP_SEED, resamples: int = RESAMPLES,
              confidence: float = CONFIDENCE) -> Dict[str, np.ndarray]:
    """Means and interquartile means of every row of ``table`` float[metrics, units] with 95%
    percentile bootstrap intervals, one stratum (one task), ``resamples`` resamples.

    The resamples are rliable's (``get_interval_estimates(..., method="percentile")`` after
    ``numpy.random.seed(seed)``): resample r takes the units ``RandomState(seed).randint(0, U,
    size=(resamples, U))[r]``, and the bounds are ``numpy.percentile`` of the resampled statistics;
    ``tests/test_bench_entry.py`` checks that the numbers are rliable's own.
    """
    import scipy.stats

    table = np.asarray(table, dtype=float)
    units = table.shape[1]
    index = np.random.RandomState(seed).randint(0, units, size=(resamples, units))
    tail = 100 * (1 - confidence) / 2
    out = {}
    for name, statistic in (("mean", lambda x, axis: np.mean(x, axis=axis)),
                            ("iqm", lambda x, axis: scipy.stats.trim_mean(x, 0.25, axis=axis))):
        point = statistic(table, axis=1)
        resampled = statistic(table[:, index], axis=2)  # float[metrics, resamples]
        low, high = np.percentile(resampled, [tail, 100 - tail], axis=1)
        out[name], out[f"{name}_ci"] = point, np.stack([low, high], axis=1)
    return out


def _units(episodes: Sequence[Mapping[str, Any]], mode: str, learns: bool) -> np.ndarray:
    """float[metrics, units]: the scores aggregated for ``mode``: one column per episode, or per
    run (the mean of the run's episodes) for an agent that learns."""
    chosen = [e for e in episodes if e["mode"] == mode]
    if not learns:
        return np.array([[float(e[m]) for e in chosen] for m in AGGREGATED], dtype=float)
    runs = sorted({int(e["run"]) for e in chosen})
    return np.array([[np.mean([float(e[m]) for e in chosen if int(e["run"]) == r]) for r in runs]
                     for m in AGGREGATED], dtype=float)


def _exact(x: float) -> float:
    """A float as JSON keeps it (repr round-trips), so recomputed aggregates compare exactly."""
    return float(repr(float(x)))


def aggregates(episodes: Sequence[Mapping[str, Any]], learns: bool, seed: int = BOOTSTRAP_SEED,
               resamples: int = RESAMPLES) -> Dict[str, Any]:
    """``{mode: {"count", "unit", <metric>: {"mean", "mean_ci", "iqm", "iqm_ci"}}}`` for every
    mode the episodes hold (BENCH.md section 2)."""
    out: Dict[str, Any] = {}
    for mode in MODES:
        if not any(e["mode"] == mode for e in episodes):
            continue
        table = _units(episodes, mode, learns)
        stats = bootstrap(table, seed, resamples)
        block: Dict[str, Any] = {"count": int(table.shape[1]), "unit": "runs" if learns else "episodes"}
        for i, metric in enumerate(AGGREGATED):
            block[metric] = {"mean": _exact(stats["mean"][i]), "mean_ci": [_exact(v) for v in stats["mean_ci"][i]],
                             "iqm": _exact(stats["iqm"][i]), "iqm_ci": [_exact(v) for v in stats["iqm_ci"][i]]}
        out[mode] = block
    return out


# --- provenance --------------------------------------------------------------------------------------


def _git(*args: str) -> Optional[str]:
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(command: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Where and with what an entry is made: versions, commit, machine, command, start time."""
    from importlib.metadata import PackageNotFoundError, version

    import jax

    def installed(name: str) -> Optional[str]:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    commit = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    device = jax.devices()[0]
    return {
        "package_version": installed("cube_jax"),
        "git_commit": commit,
        "git_dirty": None if dirty is None else bool(dirty),
        "python": platform.python_version(),
        "jax": installed("jax"),
        "jaxlib": installed("jaxlib"),
        "device": f"{device.platform}: {getattr(device, 'device_kind', device.platform)}",
        "cpu_model": cpu_model(),
        "cpus": usable_cpus(),
        "command": shlex.join(without_secrets(command if command is not None else ["cube-jax", *sys.argv[1:]])),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


SECRET_OPTIONS = ("--api-key",)


def without_secrets(argv: Sequence[str]) -> List[str]:
    """``argv`` with the value of every secret option (``--api-key KEY``, ``--api-key=KEY``)
    replaced by ``***``: a recorded command (an entry's, a language-agent run's) never holds a key."""
    out, hide = [], False
    for arg in argv:
        if hide:
            out.append("***")
            hide = False
        elif arg in SECRET_OPTIONS:
            out.append(arg)
            hide = True
        elif arg.split("=", 1)[0] in SECRET_OPTIONS and "=" in arg:
            out.append(arg.split("=", 1)[0] + "=***")
        else:
            out.append(arg)
    return out


def short_commit(run: Mapping[str, Any]) -> str:
    """A provenance record's commit, shortened, with ``+dirty`` when the tree was."""
    commit = (run.get("git_commit") or "unknown")[:7]
    return commit + "+dirty" if run.get("git_dirty") else commit


def runs(prov: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """An entry's runs in order, each a provenance record: its first run (``prov`` itself) and
    each continuation (``prov["continued"]``)."""
    return [prov, *prov.get("continued", [])]


# --- the entry as a file -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Agent:
    """Who plays: ``kind`` (a registry kind, an RL algorithm, or ``mixed``), the spec a user types,
    a label for the board, and for language agents and mixed teams the topology and members."""

    kind: str
    spec: str
    label: str
    learns: bool = False
    tier: Optional[str] = None
    topology: Optional[str] = None
    team: Optional[List[str]] = None
    settings: Dict[str, Any] = dataclasses.field(default_factory=dict)  # model, server host, sampling, recipe

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def new_entry(agent: Agent, prov: Mapping[str, Any]) -> Dict[str, Any]:
    return {"suite": suite.VERSION, "format": FORMAT, "test_sets": {}, "agent": agent.to_dict(),
            "bootstrap": {"seed": BOOTSTRAP_SEED, "resamples": RESAMPLES, "confidence": CONFIDENCE},
            "tasks": {}, "provenance": dict(prov), "evidence": {}}


def dumps(data: Any, indent: str = "") -> str:
    """``data`` as JSON, one level of indentation per nesting, except that an object or array
    holding no object or array (an episode record, an interval) stays on one line: an entry's
    thousands of episode records take a line each, a quarter fewer bytes than fully indented."""
    if isinstance(data, dict) and data and any(isinstance(v, (dict, list)) for v in data.values()):
        inner = indent + " "
        items = (f"{inner}{json.dumps(str(k))}: {dumps(v, inner)}" for k, v in data.items())
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(data, list) and data and any(isinstance(v, (dict, list)) for v in data):
        inner = indent + " "
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in data) + "\n" + indent + "]"
    return json.dumps(data)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Writes ``data`` (:func:`dumps`) atomically (a temporary file renamed over ``path``):
    nothing half written."""
    write_atomic(path, dumps(data) + "\n")


def episode_table(episodes: Sequence[Mapping[str, Any]]) -> Any:
    """The episodes as ``entry.json`` stores them: a table (``columns``, one row per episode) when
    every record has the same fields in the same order, else the records as they are."""
    columns = list(episodes[0]) if episodes else []
    if any(list(e) != columns for e in episodes):
        return [dict(e) for e in episodes]
    return {"columns": columns, "rows": [[e[c] for c in columns] for e in episodes]}


def episode_records(stored: Any, where: str) -> List[Dict[str, Any]]:
    """The records of :func:`episode_table`'s ``stored``; EntryError naming ``where`` and the row
    when it is neither a table nor a list of records."""
    if isinstance(stored, list):
        if not all(isinstance(e, dict) for e in stored):
            raise EntryError(f"{where}: an episode that is not a JSON object")
        return stored
    if not (isinstance(stored, dict) and isinstance(stored.get("columns"), list)
            and isinstance(stored.get("rows"), list)):
        raise EntryError(f"{where}: episodes are neither a table (columns, rows) nor a list of records")
    columns = stored["columns"]
    records = []
    for i, row in enumerate(stored["rows"]):
        if not isinstance(row, list) or len(row) != len(columns):
            raise EntryError(f"{where}: episode row {i} does not hold one value per column ({len(columns)})")
        records.append(dict(zip(columns, row)))
    return records


def write_entry(folder: Path, entry: Mapping[str, Any]) -> None:
    """``entry`` (its episodes as records) written to ``folder/entry.json`` in the current format
    (:func:`episode_table`), atomically."""
    tasks = {name: {**record, "episodes": episode_table(record["episodes"])}
             for name, record in entry["tasks"].items()}
    write_json(Path(folder) / ENTRY_FILE, {**entry, "format": FORMAT, "tasks": tasks})


def read_entry(folder: Path) -> Dict[str, Any]:
    """``entry.json`` of an entry folder, checked for its suite version and test sets; EntryError
    naming the file otherwise."""
    folder = Path(folder)
    path = folder if folder.suffix == ".json" else folder / ENTRY_FILE
    if not path.is_file():
        raise EntryError(f"{path}: no such entry file (an entry is a folder holding {ENTRY_FILE})")
    try:
        entry = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EntryError(f"{path}: not a JSON entry: {err}") from None
    if not isinstance(entry, dict):
        raise EntryError(f"{path}: not a JSON object")
    for key in ("suite", "format", "test_sets", "agent", "tasks", "provenance", "evidence", "bootstrap"):
        if key not in entry:
            raise EntryError(f"{path}: no {key!r} field")
    if entry["suite"] != suite.VERSION:
        raise EntryError(f"{path}: an entry of suite {entry['suite']!r}; the installed suite is {suite.VERSION!r}, "
                         "and entries of different versions are never compared")
    if entry["format"] not in READABLE_FORMATS:
        raise EntryError(f"{path}: entry format {entry['format']!r}; this package reads formats "
                         f"{', '.join(map(str, READABLE_FORMATS))}")
    for name, record in entry["tasks"].items():
        if not isinstance(record, dict) or "episodes" not in record:
            raise EntryError(f"{path}: task {name!r}: no episodes")
        record["episodes"] = episode_records(record["episodes"], f"{path}: task {name!r}")
        try:
            t = suite.task(name)
        except ValueError as err:
            raise EntryError(f"{path}: {err}") from None
        declared = suite.TEST_SET_SHA256[t.name]
        if entry["test_sets"].get(name) != declared:
            raise EntryError(f"{path}: task {name!r}: the entry's test set {str(entry['test_sets'].get(name))[:16]}... "
                             f"is not {suite.VERSION}'s ({declared[:16]}...)")
    return entry


def load_actions(folder: Path, entry: Mapping[str, Any]) -> Dict[str, np.ndarray]:
    """``{task: int8[E, T, N]}`` from ``actions.npz``, after checking its digest."""
    path = Path(folder) / ACTIONS_FILE
    if not path.is_file():
        raise EntryError(f"{path}: the actions file is missing")
    declared = entry["evidence"].get(ACTIONS_FILE)
    if declared != file_digest(path):
        raise EntryError(f"{path}: its SHA-256 is not the one entry.json records (the file was changed or truncated)")
    try:
        with np.load(path) as data:
            return {name[: -len("/actions")]: data[name] for name in data.files if name.endswith("/actions")}
    except Exception as err:  # noqa: BLE001 - numpy raises many types for a damaged archive
        raise EntryError(f"{path}: cannot read the actions: {type(err).__name__}: {err}") from None


__all__ = ["ACTIONS_FILE", "Agent", "ENTRY_FILE", "EntryError", "FORMAT", "MODES", "READABLE_FORMATS", "SCORES",
           "TIERS", "actions_digest", "aggregates", "bootstrap", "dumps", "episode_records", "episode_table",
           "file_digest", "load_actions", "new_entry", "provenance", "read_entry", "runs", "short_commit",
           "without_secrets", "write_entry", "write_json"]
