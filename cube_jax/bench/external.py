"""Entries from agents that live outside this package: they supply their actions per test
episode, and the entry is scored by replaying them, as every entry is.

A trainer of its own (any framework) plays the suite's test episodes itself::

    from cube_jax.bench import external

    episodes = external.test_episodes("n2")            # 256 of them: layout, seed, Layout
    env = cube_jax.bench.task("n2").make()             # the task's world
    state, ts = env.reset_to(episodes.layouts[i], jax.random.PRNGKey(episodes.seeds[i]))
    ... step it with env.step, recording every joint action ...

and hands the actions over, in memory (:func:`write_entry`) or as a file
(``cube-jax bench import ACTIONS.npz``). The file is an ``.npz`` with one integer array per
task, mode and run, named ``<task>/<mode>/<run>`` (for example ``n2/greedy/0``), of shape
``[E, T, N]``: test episodes 0 .. E-1 in order (episode i starts from test layout i, or the one
layout of a fixed-layout task, with seed i), step by step, agent by agent, actions 0..4 and
-1 after the episode's end. Runs are training seeds (one run, 0, for an agent that does not
learn); modes are ``greedy`` and ``sampled``.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import jax
import numpy as np

from cube_jax.bench import entry as entries
from cube_jax.bench.run import BenchError, Contender, Runner, TaskResult
from cube_jax.core import suite

KEY = re.compile(r"^(?P<task>[^/]+)/(?P<mode>greedy|sampled)/(?P<run>\d+)$")


@dataclasses.dataclass(frozen=True)
class TestEpisodes:
    """The test episodes of a task: episode i starts from ``layouts[i]`` with ``PRNGKey(seeds[i])``."""

    __test__ = False

    task: str
    layout_index: np.ndarray  # int[E] into the task's test set
    seeds: np.ndarray  # int[E]
    layouts: Any  # Layout batched over E (host arrays)


def test_episodes(task_name: str, episodes: int = suite.TEST_LAYOUTS) -> TestEpisodes:
    t = suite.task(task_name)
    seeds = np.arange(episodes)
    index = np.zeros_like(seeds) if t.fixed_layout else seeds
    return TestEpisodes(t.name, index, seeds, jax.tree.map(lambda x: np.asarray(x)[index], suite.test_set(t)))


test_episodes.__test__ = False


def read_actions(path: Path) -> Dict[str, Dict[str, List[np.ndarray]]]:
    """``{task: {mode: [int8[E, T, N] per run]}}`` from an actions file; BenchError naming the
    array that does not fit the format."""
    path = Path(path)
    try:
        with np.load(path) as data:
            arrays = {name: data[name] for name in data.files}
    except Exception as err:  # noqa: BLE001 - numpy raises many types for a damaged archive
        raise BenchError(f"{path}: not an .npz of actions: {type(err).__name__}: {err}") from None
    out: Dict[str, Dict[str, Dict[int, np.ndarray]]] = {}
    for name, array in arrays.items():
        match = KEY.match(name)
        if match is None:
            raise BenchError(f"{path}: array {name!r} is not named <task>/<greedy|sampled>/<run>")
        out.setdefault(match["task"], {}).setdefault(match["mode"], {})[int(match["run"])] = array
    return {task: {mode: [runs[r] for r in sorted(runs)] for mode, runs in modes.items()}
            for task, modes in out.items()}


def _checked(task_name: str, mode: str, run: int, actions: np.ndarray, episodes: Optional[int]) -> List[np.ndarray]:
    where = f"task {task_name!r}, {mode}, run {run}"
    t = suite.task(task_name)
    actions = np.asarray(actions)
    if not np.issubdtype(actions.dtype, np.integer) or actions.ndim != 3 or actions.shape[2] != t.num_agents:
        raise BenchError(f"{where}: actions must be integers of shape [episodes, steps, {t.num_agents}], got "
                         f"{actions.dtype} {actions.shape}")
    if not 1 <= actions.shape[0] <= suite.TEST_LAYOUTS or (episodes is not None and actions.shape[0] != episodes):
        raise BenchError(f"{where}: {actions.shape[0]} episodes; every run and mode of a task plays the same test "
                         f"episodes 0..E-1, E at most {suite.TEST_LAYOUTS}")
    if actions.shape[1] > t.max_steps or ((actions < -1) | (actions > 4)).any():
        raise BenchError(f"{where}: actions are 0..4 (then -1 after the end), at most {t.max_steps} steps")
    out = []
    for i, episode in enumerate(actions.astype(np.int8)):
        ended = episode[:, 0] < 0
        played = int(np.argmax(ended)) if ended.any() else episode.shape[0]
        if (episode[played:] >= 0).any() or (episode[:played] < 0).any():
            raise BenchError(f"{where}, episode {i}: -1 marks every agent's steps after the end, and only those")
        out.append(episode[:played])
    return out


class _Imported(Contender):
    def agent(self):
        settings = {"env_steps_per_seed": self.env_steps, "seeds": list(self.seeds)} if self.tier else {}
        return entries.Agent("external", self.spec, self.label, learns=self.tier is not None, tier=self.tier,
                             settings=settings)


class _ImportRunner(Runner):
    def __init__(self, contender, out, actions, command=None):
        sizes = {a.shape[0] for modes in actions.values() for runs in modes.values() for a in runs}
        super().__init__(contender, out, episodes=max(sizes), progress=False, command=command)
        self.actions = actions

    def _play_task(self, t: suite.Task) -> TaskResult:
        modes = self.actions[t.name]
        episodes, played, count = [], [], None
        for mode, runs in modes.items():
            for run, array in enumerate(runs):
                checked = _checked(t.name, mode, run, array, count)
                count = len(checked)
                index = np.zeros(count, int) if t.fixed_layout else np.arange(count)
                episodes += [{"layout": int(index[i]), "seed": i, "mode": mode, "run": run} for i in range(count)]
                played += checked
        self.episodes = count
        return TaskResult(episodes, played, count)


def write_entry(out: Path, label: str, actions: Mapping[str, Mapping[str, Sequence[np.ndarray]]],
                tier: Optional[str] = None, env_steps: Optional[int] = None,
                seeds: Sequence[int] = (), command: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """An entry in ``out`` from ``{task: {mode: [actions per run]}}`` (each int[E, T, N] as the
    module docstring says). An agent that learns gives its ``tier`` (``S``, ``M``, or a custom
    budget's name), ``env_steps`` per seed and the training ``seeds`` (one per run)."""
    if tier is not None and (env_steps is None or not seeds):
        raise BenchError("an agent that learns gives its env steps per seed and its training seeds")
    runs = {len(r) for modes in actions.values() for r in modes.values()}
    if tier is None and runs != {1}:
        raise BenchError(f"an agent that does not learn plays one run per mode; got {sorted(runs)}")
    if tier is not None and runs != {len(seeds)}:
        raise BenchError(f"{len(seeds)} training seeds but {sorted(runs)} runs per mode")
    for name in actions:
        suite.task(name)
    tasks = [t for t in suite.TASKS if t.name in actions]
    contender = _Imported(f"external:{label}", label, tier=tier, env_steps=env_steps, seeds=tuple(seeds))
    return _ImportRunner(contender, Path(out), dict(actions), command=command).run(tasks)


__all__ = ["TestEpisodes", "read_actions", "test_episodes", "write_entry"]
