"""The benchmark suite ``cube-v1`` (BENCH.md): tasks with held-out test sets, entries with
provenance and evidence, verification by replay, and a board built from entries.

* :mod:`cube_jax.core.suite`: the tasks and their test sets (re-exported here);
* :mod:`cube_jax.bench.run`: ``cube-jax bench run``, one agent on tasks into one entry;
* :mod:`cube_jax.bench.entry`: what an entry holds, its scores' aggregates and provenance;
* :mod:`cube_jax.bench.replay`: scores recomputed from recorded actions;
* :mod:`cube_jax.bench.verify`: ``cube-jax bench verify``;
* :mod:`cube_jax.bench.board`: ``cube-jax bench board``;
* :mod:`cube_jax.bench.external`: an entry from actions an agent outside this package played
  (``cube-jax bench import``).
"""
from cube_jax.core.suite import TASKS, TEST_LAYOUTS, VERSION, Task, task, test_set

__all__ = ["TASKS", "TEST_LAYOUTS", "VERSION", "Task", "task", "test_set"]
