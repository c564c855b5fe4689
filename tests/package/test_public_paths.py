"""One public path to each thing: the episode loop from ``cube_jax.runtime``, the trace
from ``cube_jax.trace``, the batched rollout from ``cube_jax.evaluation``.

The names ``cube_jax.evaluation`` once re-exported keep working for a deprecation period,
as the very same objects, with a warning that names their home; training reaches the
batched rollout without loading the episode loop.
"""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import cube_jax.evaluation
import cube_jax.runtime
import cube_jax.trace

ROOT = Path(__file__).resolve().parents[2]
MOVED = [
    ("run_episode", "cube_jax.runtime"),
    ("run_episodes", "cube_jax.runtime"),
    ("arun_episode", "cube_jax.runtime"),
    ("arun_episodes", "cube_jax.runtime"),
    ("Episode", "cube_jax.runtime"),
    ("EpisodeResult", "cube_jax.runtime"),
    ("Limits", "cube_jax.runtime"),
    ("TOPOLOGIES", "cube_jax.runtime"),
    ("Topology", "cube_jax.runtime"),
    ("make_topology", "cube_jax.runtime"),
    ("TraceWriter", "cube_jax.trace"),
    ("TraceError", "cube_jax.trace"),
    ("read_trace", "cube_jax.trace"),
    ("validate_trace", "cube_jax.trace"),
]


@pytest.mark.parametrize("name, home", MOVED)
def test_an_old_evaluation_name_warns_with_its_new_path_and_is_the_same_object(name, home):
    with pytest.warns(DeprecationWarning, match=rf"import it from {home.replace('.', '[.]')}") as caught:
        old = getattr(cube_jax.evaluation, name)
    assert old is getattr(sys.modules[home], name)
    assert f"from {home} import {name}" in str(caught[0].message)


def test_a_from_import_of_an_old_name_warns_too():
    with pytest.warns(DeprecationWarning, match="cube_jax.runtime"):
        from cube_jax.evaluation import run_episode
    assert run_episode is cube_jax.runtime.run_episode


def test_the_batched_rollout_imports_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from cube_jax.evaluation import EpisodeStats, evaluate, rollout, summarize  # noqa: F401


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        cube_jax.evaluation.no_such_name  # noqa: B018


@pytest.mark.parametrize("module", ["cube_jax.rl", "cube_jax.rl.ppo", "cube_jax.rl.pqn", "cube_jax.rl.run",
                                    "cube_jax.evaluation"])
def test_training_and_the_batched_rollout_do_not_load_the_episode_loop(module):
    check = (f"import sys, {module}; loaded = sorted(m for m in sys.modules if m.startswith("
             f"('cube_jax.runtime', 'cube_jax.llm'))); print(loaded); assert not loaded")
    _passes_in_a_fresh_interpreter(check)


def test_the_registry_names_the_llm_factory_without_importing_it():
    check = ("import sys, cube_jax.registry, cube_jax.teams; "
             "loaded = sorted(m for m in sys.modules if m.startswith(('cube_jax.llm', 'cube_jax.web', 'cube_jax.cli'))); "
             "print(loaded); assert not loaded")
    _passes_in_a_fresh_interpreter(check)


def _passes_in_a_fresh_interpreter(check: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
