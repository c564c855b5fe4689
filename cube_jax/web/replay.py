"""Recorded episodes for the replay view: which traces may be opened, and what the page gets.

The page never names a file by path. :class:`TraceShelf` lists the traces it may serve (the
``*.jsonl`` files of the run folder, and the trace files or folders given at start) under
short names, and looks names up in that list: no name a page sends is ever joined to a
folder, so nothing outside those files can be read. A trace the person opens from their
own disk is sent in the request body instead, checked by the trace validator.

:func:`replay_payload` gives the page a trace's records (LLM.md section 5) and the grid
side, which the records do not hold: from ``env`` (``n`` gives ``max(20, n)``, a named
scenario its own side) or, for other worlds, the smallest side that holds every position.
"""
from __future__ import annotations

import base64
import io
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

import msgspec

from cube_jax.core.generator import grid_size_for
from cube_jax.core.scenario import load_scenario, named_scenarios
from cube_jax.trace import RECORD_TYPES, TraceError, read_trace, record_views

logger = logging.getLogger(__name__)

# The largest trace a page may upload for replay.
MAX_UPLOAD_BYTES = 32 * 1024 * 1024
TIMELINE_CACHE = 16

# What the grid side is read from: the world of the episode record and every step's positions.
_KEYS = {kind: () for kind in RECORD_TYPES} | {"episode": ("env", "layout"), "step": ("agents", "blocks")}
_VIEWS = record_views(_KEYS, prefix="Replay")
_Record = Union[tuple(_VIEWS.values())]


def grid_size(records: List[dict]) -> Tuple[int, bool]:
    """(the grid side of the trace's world, whether it was inferred from positions)."""
    typed = msgspec.convert(records, List[_Record])
    env = typed[0].env
    n = env.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 4096:
        return grid_size_for(n), False
    scenario = env.get("scenario")
    if isinstance(scenario, str) and scenario in named_scenarios():
        return int(load_scenario(scenario).grid_size), False
    side = 1
    for record in typed:
        if type(record) in (_VIEWS["episode"], _VIEWS["step"]):
            world = record.layout if type(record) is _VIEWS["episode"] else record
            for r, c in world.agents:
                side = max(side, r + 1, c + 1)
            for r, c, w, alive in world.blocks:
                # an alive block never touches the goal column, the last one
                side = max(side, r + w, c + w + (1 if alive else 0))
    return side, True


def replay_payload(records: List[dict], name: str, timeline: Optional[str]) -> dict:
    """What the replay view loads: ``{"name", "grid_size", "grid_inferred", "records", "timeline"}``."""
    side, inferred = grid_size(records)
    return {"name": name, "grid_size": side, "grid_inferred": inferred, "records": records, "timeline": timeline}


def records_from_text(text: str, name: str = "upload") -> List[dict]:
    """The records of a trace sent as text (TraceError naming the line and key otherwise)."""
    stream = io.StringIO(text)
    stream.name = name
    return read_trace(stream)


def timeline_png(records: List[dict]) -> bytes:
    """The timeline picture of ``records`` (:func:`cube_jax.analytics.render_timeline`) as PNG bytes."""
    from cube_jax.analytics import render_timeline

    with tempfile.TemporaryDirectory(prefix="cube-jax-timeline-") as folder:
        path = render_timeline(records, Path(folder) / "timeline.png")
        return Path(path).read_bytes()


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


class TraceShelf:
    """The traces the app may serve: those under ``folder`` and the ``extra`` files or folders."""

    def __init__(self, folder: Union[str, os.PathLike], extra: Iterable[Union[str, os.PathLike]] = ()):
        self.folder = Path(folder)
        self.extra = [Path(p) for p in extra]
        self._pictures: "OrderedDict[Tuple[str, float], bytes]" = OrderedDict()
        self._lock = threading.Lock()

    def listing(self) -> Dict[str, Path]:
        """Name -> file: run-folder traces by their path inside it, the others as ``extra/<i>/<file>``."""
        out: Dict[str, Path] = {}
        if self.folder.is_dir():
            for path in sorted(self.folder.rglob("*.jsonl")):
                if path.is_file() and not path.is_symlink():
                    out[path.relative_to(self.folder).as_posix()] = path
        for k, source in enumerate(self.extra):
            files = sorted(source.rglob("*.jsonl")) if source.is_dir() else [source]
            for path in files:
                if path.is_file():
                    relative = path.relative_to(source).as_posix() if source.is_dir() else path.name
                    out[f"extra/{k}/{relative}"] = path
        return out

    def entries(self) -> List[dict]:
        """The listing as the page shows it: name, size and modification time."""
        rows = []
        for name, path in self.listing().items():
            try:
                stat = path.stat()
            except OSError:
                continue
            rows.append({"name": name, "bytes": stat.st_size, "modified": stat.st_mtime})
        return rows

    def find(self, name: str) -> Optional[Path]:
        if not isinstance(name, str) or len(name) > 1000:
            return None
        return self.listing().get(name)

    def records(self, name: str) -> List[dict]:
        """The records of a listed trace; KeyError for a name not listed, TraceError for a bad file."""
        path = self.find(name)
        if path is None:
            raise KeyError(name)
        return read_trace(path)

    def timeline(self, name: str) -> bytes:
        """The timeline PNG of a listed trace (cached while the file is unchanged)."""
        path = self.find(name)
        if path is None:
            raise KeyError(name)
        key = (name, path.stat().st_mtime)
        with self._lock:
            if key in self._pictures:
                self._pictures.move_to_end(key)
                return self._pictures[key]
        png = timeline_png(read_trace(path))
        with self._lock:
            self._pictures[key] = png
            while len(self._pictures) > TIMELINE_CACHE:
                self._pictures.popitem(last=False)
        return png


__all__ = ["MAX_UPLOAD_BYTES", "TraceError", "TraceShelf", "data_url", "grid_size", "records_from_text",
           "replay_payload", "timeline_png"]
