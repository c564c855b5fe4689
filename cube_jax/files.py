"""Files that others read while they are written: :func:`write_atomic` writes a temporary
file in the same folder, flushes it to disk and renames it over the old one, so a reader
sees the previous complete file or the new complete file, never a part of one, and an
interrupted write leaves the previous file.

>>> import pathlib, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_atomic(folder / "a.json", '{"x": 1}\\n').name
'a.json'
>>> (folder / "a.json").read_text()
'{"x": 1}\\n'
>>> sorted(p.name for p in folder.iterdir())
['a.json']
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Union

__all__ = ["write_atomic"]


def write_atomic(path: Union[str, os.PathLike], data: Union[str, bytes]) -> Path:
    """Writes ``data`` (text as UTF-8) to ``path`` atomically; creates its folder; keeps the
    old file's permissions (0o644 for a new one). Returns the path."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(path.parent)
    return path


def _sync_folder(folder: Path) -> None:
    # the rename itself is durable only once the folder is flushed (POSIX; a no-op elsewhere)
    with contextlib.suppress(OSError, AttributeError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
