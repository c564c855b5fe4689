"""The CPUs this process may run on, for the layers that size their work by them (the
training driver's host devices, the report's processes).

>>> usable_cpus() >= 1
True
"""
from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without sched_getaffinity
        return os.cpu_count() or 1
