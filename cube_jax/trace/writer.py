"""Writing a trace as its episode runs.

:class:`TraceWriter` writes one record per call and flushes it, so a trace is readable
while its episode runs. Each record is checked against its type
(:mod:`cube_jax.trace.records`) before it is written, so a writer never leaves a record
the validator would reject; ``wall`` is stamped by the writer and never goes back. Used as
a context manager, it closes a trace that an exception, a timeout or Ctrl-C interrupted
with an ``end`` record that says why.

>>> import io, json
>>> buffer = io.StringIO()
>>> with TraceWriter(buffer, clock=lambda: 0.0) as trace:
...     _ = trace.write("stage", 0, agent="agent_0", stage="R")
>>> json.loads(buffer.getvalue().splitlines()[-1])["reason"]
'closed without an end record'
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import time
from pathlib import Path
from typing import IO, Callable, Dict, Optional, Union

from cube_jax.trace.records import OUTCOME_COUNTS, RECORD_CLASSES, RECORD_TYPES
from cube_jax.trace.validate import TraceError, record_problem


def _json_safe(value):
    """Plain JSON values: numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy / jax scalars and arrays
        return _json_safe(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class TraceWriter:
    """Writes one episode's trace record by record (see the module docstring).

    ``target`` is a path (the file is created with its folder) or an open text stream.
    ``clock`` gives the seconds the ``wall`` key counts from (the first call is the
    episode's start); a clock that goes back is held at its latest reading, so ``wall``
    never decreases. ``outcome`` holds the outcome counts so far (``steps``,
    ``blocks_*``, ``weight_*``), kept up to date by the episode loop, so that an
    interrupted trace's ``end`` record reports them.
    """

    def __init__(self, target: Union[str, os.PathLike, IO[str]], clock: Callable[[], float] = time.perf_counter):
        if isinstance(target, (str, os.PathLike)):
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")
            self._owns_file = True
            self.path: Optional[Path] = path
        else:
            self._file = target
            self._owns_file = False
            self.path = None
        self._clock = clock
        self._start = clock()
        self._last_wall = 0.0
        self.last_t = 0
        self.ended = False
        self.records = 0
        self.outcome: Dict[str, int] = {}

    def wall(self) -> float:
        """Seconds since the episode started, never less than the last record's."""
        self._last_wall = max(self._last_wall, round(self._clock() - self._start, 6))
        return self._last_wall

    def write(self, record_type: str, t: int, **fields) -> dict:
        """Appends one record ``{"type", "t", "wall", **fields}``, flushes it and returns it.

        Raises :class:`ValueError` for an unknown record type and
        :class:`~cube_jax.trace.TraceError` (naming the record's line and key) for fields
        that do not fit the type; nothing is written then.
        """
        if self.ended:
            raise RuntimeError(f"trace: a {record_type!r} record after the end record")
        if record_type not in RECORD_CLASSES:
            raise ValueError(f"trace: unknown record type {record_type!r}; types are {RECORD_TYPES}")
        record = {"type": record_type, "t": int(t), "wall": self.wall(), **_json_safe(fields)}
        problem = record_problem(record, self.records + 1)
        if problem is not None:
            raise TraceError(str(self.path) if self.path else getattr(self._file, "name", "<stream>"), problem)
        self._file.write(json.dumps(record, allow_nan=False, ensure_ascii=False) + "\n")
        self._file.flush()
        self.last_t = int(t)
        self.records += 1
        if record_type == "end":
            self.ended = True
        return record

    def end(self, t: int, *, terminated: bool, truncated: bool, reason: str, **counts) -> dict:
        """Writes the ``end`` record: the flags, the reason and every outcome count
        (:data:`~cube_jax.trace.OUTCOME_COUNTS`, each required), then any extra keys."""
        missing = [key for key in OUTCOME_COUNTS if key not in counts]
        if missing:
            raise TypeError(f"trace: an end record needs the outcome counts {missing}")
        outcome = {key: int(counts.pop(key)) for key in OUTCOME_COUNTS}
        return self.write("end", t, terminated=bool(terminated), truncated=bool(truncated), reason=str(reason),
                          **outcome, **counts)

    def abort(self, reason: str, **end_fields) -> None:
        """Ends an interrupted trace: an ``end`` record, truncated, with ``reason``.

        ``end_fields`` are the outcome counts known so far; missing ones are written as 0.
        """
        if self.ended:
            return
        counts = {key: int(end_fields.get(key, 0)) for key in OUTCOME_COUNTS}
        self.end(self.last_t, terminated=False, truncated=True, reason=reason, **counts)

    def close(self) -> None:
        if self._owns_file and not self._file.closed:
            self._file.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.ended:
                if exc_type is None:
                    reason = "closed without an end record"
                elif issubclass(exc_type, KeyboardInterrupt):
                    reason = "interrupted (KeyboardInterrupt)"
                elif issubclass(exc_type, asyncio.CancelledError):
                    # what an asyncio program sees of Ctrl-C, a timeout or a shutdown
                    reason = "interrupted (cancelled)"
                else:
                    reason = f"error: {exc_type.__name__}: {str(exc)[:200]}"
                self.abort(reason, **self.outcome)
        finally:
            self.close()
