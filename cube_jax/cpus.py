"""The CPUs this process may run on, for the layers that size their work by them (the
training driver's host devices, the report's processes), and the processor's name, which
benchmark results and entries record.

>>> usable_cpus() >= 1
True
>>> isinstance(cpu_model(), str) and cpu_model() != ""
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


def cpu_model() -> str:
    """The processor's name as the kernel reports it (``model name`` of /proc/cpuinfo), or
    ``platform.processor()`` elsewhere: shared machines change kind from one day to the next,
    and a figure is only comparable with others from the same kind."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
