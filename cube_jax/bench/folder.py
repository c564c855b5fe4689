"""An entry folder as ``bench run`` writes it: ``entry.json`` started or continued, the
finished tasks' actions (``actions.npz``), traces and GIF, the digests of its evidence, and
the unfinished work kept under ``work/``."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np

from cube_jax.bench import entry as entries
from cube_jax.bench.batched import BenchError
from cube_jax.core import suite
from cube_jax.files import write_atomic

WORK_DIR = "work"


class EntryFolder:
    """The files of one entry folder ``out`` and every finished task's actions (``arrays``)."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.work = self.out / WORK_DIR
        self.arrays: Dict[str, np.ndarray] = {}  # "<task>/actions" -> int8[E, T, N], what actions.npz holds
        self._run: Optional[Dict[str, Any]] = None  # this run's provenance record: the entry's or a continuation

    def finished(self, task: str) -> None:
        """Records that this run made ``task``'s scores (its ``tasks`` list), so that the board
        shows the commit behind each task of an entry continued at another commit."""
        assert self._run is not None, "start() first"
        if task not in self._run["tasks"]:
            self._run["tasks"].append(task)

    def start(self, agent: entries.Agent, command: Optional[Sequence[str]], env_steps: Optional[int]) -> Dict[str, Any]:
        """A new entry of ``agent``, or the folder's entry continued (its finished tasks' actions
        read back); BenchError when it is another agent's or was made with other settings."""
        path = self.out / entries.ENTRY_FILE
        prov = entries.provenance(command)
        if env_steps is not None:
            prov["env_steps_per_seed"] = env_steps
        if not path.is_file():
            entry = entries.new_entry(agent, {**prov, "tasks": []})
            self._run = entry["provenance"]
            return entry
        entry = entries.read_entry(self.out)
        if entry["agent"]["spec"] != agent.spec:
            raise BenchError(f"{path}: an entry of {entry['agent']['spec']!r}, not {agent.spec!r}; give another "
                             "--out or the same agent to continue it")
        if entry["agent"] != json.loads(json.dumps(agent.to_dict())):
            raise BenchError(f"{path}: the entry was made with other settings ({entry['agent']}); give another --out "
                             "or the same settings to continue it")
        continued = {**{k: prov[k] for k in ("git_commit", "git_dirty", "command", "started")}, "tasks": []}
        entry["provenance"].setdefault("continued", []).append(continued)
        self._run = continued
        earlier = entries.load_actions(self.out, entry) if entry["tasks"] else {}
        self.arrays = {f"{name}/actions": actions for name, actions in earlier.items()}
        return entry

    def move_traces(self, t: suite.Task) -> None:
        """A finished task's traces from ``work/`` into ``traces/`` (an interrupted run leaves
        nothing in the entry that its evidence does not list)."""
        written = sorted((self.work / t.name).glob("episode-*.jsonl"))
        if written:
            folder = self.out / entries.TRACES_DIR / t.name
            folder.mkdir(parents=True, exist_ok=True)
            for path in written:
                os.replace(path, folder / path.name)

    def keep_loop_episodes(self, t: suite.Task, kept: Dict[str, Any]) -> None:
        """An entry's task extended to more episodes: its episodes played in the loop are kept (as
        finished work), so only the missing ones are played; batched and trained play is redone."""
        folder = self.work / t.name
        folder.mkdir(parents=True, exist_ok=True)
        actions = self.arrays[f"{t.name}/actions"]
        for i, e in enumerate(kept["episodes"]):
            played = int((actions[i, :, 0] >= 0).sum())
            record = {k: v for k, v in e.items() if k not in (*entries.SCORES, "actions_digest")}
            entries.write_json(folder / f"episode-{e['seed']:03d}.json",
                               {**record, "actions": actions[i, :played].tolist()})

    def evidence(self) -> Dict[str, str]:
        """Writes ``actions.npz`` from every finished task's actions; the digest of every evidence
        file of the entry."""
        write_npz(self.out / entries.ACTIONS_FILE, dict(sorted(self.arrays.items())))
        out = {}
        for path in sorted(self.out.rglob("*")):
            rel = path.relative_to(self.out).as_posix()
            if path.is_file() and not rel.startswith(WORK_DIR + "/") and rel != entries.ENTRY_FILE \
                    and not rel.endswith(".tmp"):
                out[rel] = entries.file_digest(path)
        return out

    def write_gif(self, entry: Dict[str, Any]) -> None:
        """One GIF of the entry: the first episode of its first task."""
        if not entry["tasks"]:
            return
        from cube_jax.bench.replay import film

        name = next(iter(entry["tasks"]))
        first = entry["tasks"][name]["episodes"][0]
        actions = self.arrays[f"{name}/actions"][0]
        film(name, first["layout"], first["seed"], actions, self.out / "episode.gif")
        entry["gif"] = {"task": name, "layout": first["layout"], "seed": first["seed"], "mode": first["mode"],
                        "file": "episode.gif"}


def write_npz(path: Path, arrays: Dict[str, np.ndarray]) -> None:
    """A compressed npz whose bytes depend on the arrays alone (fixed member times), atomically.
    Its members are LZMA-compressed: an entry's actions take less than half the bytes of the
    DEFLATE that ``np.savez_compressed`` uses (a policy's greedy episodes repeat far apart), and
    ``np.load`` reads them the same way."""
    import io
    import zipfile

    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", compression=zipfile.ZIP_LZMA) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_LZMA
            archive.writestr(info, buffer.getvalue())
    write_atomic(path, packed.getvalue())
