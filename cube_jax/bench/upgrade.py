"""``bench upgrade``: an entry written by an earlier version of the package, rewritten in the
current entry format and evidence packing, its scores and actions untouched.

The entry is checked first (every check of ``bench verify`` but the replay: evidence digests,
the episode set, each episode's actions digest, the aggregates), so nothing that fails them is
rewritten. ``actions.npz`` is packed again (:func:`cube_jax.bench.folder.write_npz`) from the
same arrays, ``entry.json`` is written in :data:`cube_jax.bench.entry.FORMAT` with the new
digest of the archive, and the rewrite is recorded in the provenance (``rewritten``: commit,
command, time, the format it came from, the archive's bytes before and after). The check runs
again on the result. An entry already current is left as it is.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from cube_jax.bench import entry as entries
from cube_jax.bench.folder import write_npz
from cube_jax.bench.verify import verify


@dataclasses.dataclass
class Upgraded:
    """What :func:`upgrade` did to one entry folder."""

    path: Path
    changed: bool
    from_format: int
    bytes_before: int  # entry.json and actions.npz
    bytes_after: int

    def line(self) -> str:
        if not self.changed:
            return f"current {self.path}: format {entries.FORMAT}, nothing to rewrite"
        return (f"upgraded {self.path}: format {self.from_format} -> {entries.FORMAT}, entry and actions "
                f"{self.bytes_before / 1e6:.2f} MB -> {self.bytes_after / 1e6:.2f} MB")


def _size(folder: Path) -> int:
    return sum((folder / name).stat().st_size for name in (entries.ENTRY_FILE, entries.ACTIONS_FILE))


def upgrade(folder: Path, command: Optional[Sequence[str]] = None) -> Upgraded:
    """Rewrites the entry in ``folder`` as the module docstring says; EntryError (a
    VerificationError where the check fails) naming the file, task and episode otherwise. The
    new ``entry.json`` is written before the archive it names is moved into place, so an
    upgrade stopped between the two is finished by the next one."""
    folder = Path(folder)
    archive = folder / entries.ACTIONS_FILE
    packed = folder / (entries.ACTIONS_FILE + ".tmp")
    if packed.is_file() and entries.read_entry(folder)["evidence"].get(entries.ACTIONS_FILE) == \
            entries.file_digest(packed):
        packed.replace(archive)  # the entry names the new archive: an earlier upgrade stopped here
    verify(folder, sample=0)
    entry = entries.read_entry(folder)
    before = _size(folder)
    with np.load(archive) as data:
        arrays = {name: data[name] for name in data.files}
    write_npz(packed, arrays)
    digest = entries.file_digest(packed)
    if entry["format"] == entries.FORMAT and digest == entry["evidence"][entries.ACTIONS_FILE]:
        packed.unlink()
        return Upgraded(folder, False, entry["format"], before, before)
    prov = entries.provenance(command)
    entry["provenance"].setdefault("rewritten", []).append(
        {**{k: prov[k] for k in ("package_version", "git_commit", "git_dirty", "command", "started")},
         "from_format": entry["format"], "actions_bytes": [archive.stat().st_size, packed.stat().st_size]})
    entries.write_entry(folder, {**entry, "evidence": {**entry["evidence"], entries.ACTIONS_FILE: digest}})
    packed.replace(archive)
    verify(folder, sample=0)
    return Upgraded(folder, True, entry["format"], before, _size(folder))


__all__ = ["Upgraded", "upgrade"]
