"""cube_jax.cpus: the CPUs a process may run on, as its affinity mask says."""
from __future__ import annotations

import doctest

import pytest

import cube_jax.cpus
from cube_jax.analytics.report import default_jobs
from cube_jax.cpus import usable_cpus


def test_doctests():
    assert doctest.testmod(cube_jax.cpus).failed == 0


def test_the_affinity_mask_counts_not_the_machine(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cube_jax.cpus.os, "sched_getaffinity", lambda pid: {3, 5, 7}, raising=False)
    monkeypatch.setattr(cube_jax.cpus.os, "cpu_count", lambda: 64)
    assert usable_cpus() == 3
    assert default_jobs() == 3  # the report sizes its processes by the same count
