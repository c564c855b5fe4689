"""``bench run``: one agent (or mixed team) on chosen tasks of the suite, written as one entry.

Every test episode ``i`` of a task starts from test layout ``i`` (layout 0 of a fixed-layout
task) with episode seed ``i`` and is played to its end; its actions are recorded step by step
and agent by agent, and its scores come from replaying them (:mod:`cube_jax.bench.replay`).
How an agent plays depends on what it is:

* a team whose members all have a batched JAX form (``random``, ``heuristic``,
  ``policy:<checkpoint>``, mixed teams of these) plays all its episodes of a task at once, in
  one vmapped, jitted rollout; a policy with a stochastic action choice plays every episode
  twice, greedy and sampled;
* any other team (``team``, ``negotiator``, ``llm:<model>[@<url>]``, mixed teams with them)
  plays episode by episode in the runtime's loop (EmCoop's stages, the chosen topology),
  language agents leaving a trace per episode;
* an RL algorithm (``ippo``, ``mappo``, ...) first trains, one run per seed, for exactly its
  budget tier's environment steps on the task's world (training never draws a test layout:
  a pool leaves them out), then each seed's policy plays the test episodes, greedy and
  sampled.

The pieces: batched play in :mod:`cube_jax.bench.batched`, learners' training in
:mod:`cube_jax.bench.training` (the algorithms from :mod:`cube_jax.rl.algorithms`),
language-model members in :mod:`cube_jax.bench.language`, the entry folder's files in
:mod:`cube_jax.bench.folder`; the runtime's loop and :class:`Runner`, which plays the
tasks into the entry, here.

Work is kept as it finishes, under ``<entry>/work/``: a task's batched episodes, each loop
episode, each training run (resumed with ``output.resume``). Running the same command again
continues where it stopped and keeps everything finished; ``entry.json`` is rewritten
(atomically) after every task, so it always describes the tasks done so far.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlparse

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax import registry
from cube_jax.bench import entry as entries
from cube_jax.bench.batched import (STOCHASTIC_KINDS, BenchError, TaskResult, modes_of, play_batched,  # noqa: F401
                                    play_team, test_indices)
from cube_jax.bench.folder import WORK_DIR, EntryFolder  # noqa: F401
from cube_jax.bench.folder import write_npz as _write_npz  # noqa: F401
from cube_jax.bench.language import language_models
from cube_jax.bench.replay import replay, scores_of
from cube_jax.bench.training import check_overrides, train_and_play, train_run, world_overrides  # noqa: F401
from cube_jax.core import suite
from cube_jax.core.layouts import FixedLayout
from cube_jax.registry import Member
from cube_jax.rl import algorithms

log = logging.getLogger(__name__)

ALGORITHMS = algorithms.NAMES  # the learners bench run trains
# What a language agent's episode costs, summed per task and in the provenance (reasoning
# tokens are part of the completion tokens; entries made before they were kept count 0).
TOKEN_COUNTS = ("model_calls", "prompt_tokens", "completion_tokens", "reasoning_tokens")


# --- what plays --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Contender:
    """What ``bench run`` was asked to play: the agent spec a user typed and how it is played."""

    spec: str
    label: str
    topology: str = "individual"
    tier: Optional[str] = None  # learners: "S" or "M"
    env_steps: Optional[int] = None  # learners: environment steps per seed
    seeds: Tuple[int, ...] = ()  # learners: training seeds
    overrides: Tuple[str, ...] = ()  # learners: config overrides (a recipe), in the entry
    model_defaults: Dict[str, Any] = dataclasses.field(default_factory=dict)  # llm: model, base_url, temperature...
    concurrency: int = 1

    @property
    def learner(self) -> Optional[algorithms.Algorithm]:
        """The algorithm that trains this contender's policies, when it is a learner."""
        return algorithms.find(self.spec)

    @property
    def algorithm(self) -> Optional[str]:
        return self.learner.name if self.learner else None

    def members(self, num_agents: int, task_name: str) -> List[Member]:
        """One member per agent for a task of ``num_agents`` agents; BenchError naming the task
        when a mixed team's size does not fit it."""
        from cube_jax.teams import TeamSpecError, parse_team

        entries_ = [e for e in self.spec.split(",")]
        if len(entries_) > 1 and len(entries_) != num_agents:
            raise BenchError(f"task {task_name!r} has {num_agents} agents; the team {self.spec!r} has {len(entries_)} "
                             "members (a mixed team names one member per agent)")
        try:
            return parse_team(self.spec, num_agents, kinds=registry.names(provided=["llm"]))
        except TeamSpecError as err:
            raise BenchError(f"agent {self.spec!r}: {err}") from None

    def agent(self) -> entries.Agent:
        """The entry's ``agent`` record."""
        if self.algorithm:
            settings = {"env_steps_per_seed": self.env_steps, "seeds": list(self.seeds),
                        "overrides": list(self.overrides)}
            return entries.Agent(self.algorithm, self.spec, self.label, learns=True, tier=self.tier,
                                 settings=settings)
        kinds = [e.split(":", 1)[0] for e in self.spec.split(",")]
        mixed = len(set(self.spec.split(","))) > 1
        uses_llm = "llm" in kinds
        settings = {"models": self.model_settings()} if uses_llm else {}
        in_loop = any(registry.get(kind).batched is None for kind in kinds)  # a topology applies in the loop
        return entries.Agent("mixed" if mixed else kinds[0], self.spec, self.label,
                             topology=self.topology if in_loop and (uses_llm or mixed) else None,
                             team=self.spec.split(",") if mixed else None, settings=settings)

    def model_settings(self) -> List[Dict[str, Any]]:
        """What each distinct language-model member plays: model, server host (never a key), sampling."""
        from cube_jax.llm.local import LOCAL, MODEL_NAME, is_local

        out = []
        for part in dict.fromkeys(self.spec.split(",")):
            if part.split(":", 1)[0] != "llm":
                continue
            member = Contender(part, part).members(1, "-")[0]
            model = member.option("model", self.model_defaults.get("model")) or LOCAL
            url = member.option("base_url", self.model_defaults.get("base_url"))
            local = is_local(model)
            out.append({"member": part, "model": MODEL_NAME if local else model,
                        "server_host": "127.0.0.1 (the packaged local model)" if local else urlparse(url or "").netloc,
                        "temperature": member.option("temperature", self.model_defaults.get("temperature")),
                        "max_tokens": member.option("max_tokens", self.model_defaults.get("max_tokens")),
                        # reasoning models and reply modes, where they are not the defaults
                        **{k: v for k, default in (("reasoning_effort", None), ("reply_mode", "schema"))
                           if (v := member.option(k, self.model_defaults.get(k, default))) != default},

                        # plan repair and worked examples (--repair, --demos K), only when on
                        **{k: self.model_defaults[k] for k in ("repair", "demos") if self.model_defaults.get(k)}})
        return out


def check_spec(spec: str) -> None:
    """BenchError when ``spec`` names no agent the registry or the learners know."""
    if algorithms.find(spec):
        return
    known = registry.names(provided=["llm"])
    for part in spec.split(","):
        kind = part.split(":", 1)[0].strip()
        if kind not in known:
            raise BenchError(f"unknown agent {kind!r} in {spec!r}; agents are {', '.join(known)}, mixed teams of them "
                             f"(one per agent, comma-separated), and the learners {', '.join(ALGORITHMS)}")


def resolve_tasks(names: Sequence[str]) -> List[suite.Task]:
    """The tasks named (``all`` for every task), in the suite's order; BenchError for an unknown one."""
    if not names or list(names) == ["all"]:
        return list(suite.TASKS)
    out = []
    for name in names:
        try:
            out.append(suite.task(name))
        except ValueError as err:
            raise BenchError(str(err)) from None
    return [t for t in suite.TASKS if t in out]


# --- play in the runtime's loop -----------------------------------------------------------------------------


def layout_world(t: suite.Task, index: int):
    """The task's world fixed to test layout ``index`` (what the runtime's loop resets to)."""
    from cube_jax.core.env import make

    lay = jax.tree.map(lambda x: np.asarray(x)[index], suite.test_set(t))
    gen = FixedLayout(grid_size=t.make().grid_size, num_agents=t.num_agents,
                      weights=tuple(int(w) for w in lay.block_weight), layout=jax.tree.map(jnp.asarray, lay))
    env = make(layouts=gen, max_steps=t.max_steps)
    env.name = f"{t.name}, test layout {index}"
    env.make_kwargs = {"task": t.name, "test_layout": int(index), "max_steps": t.max_steps}
    return env


def loop_episode(t: suite.Task, contender: Contender, members: Sequence[Member], index: int, seed: int,
                 factories: Dict, trace: Optional[Path]):
    """One test episode in the runtime's loop, from test layout ``index`` with episode seed
    ``seed``: ``(episode, actions)`` where ``actions`` (a list filled as the episode runs)
    receives each step's joint action."""
    from cube_jax.runtime import Episode
    from cube_jax.runtime.topologies import make_topology
    from cube_jax.teams import team_agents
    from cube_jax.trace import agent_name

    env = layout_world(t, index)
    actions: List[List[int]] = []
    names = [agent_name(i) for i in range(env.num_agents)]

    def on_record(record: dict) -> None:
        if record["type"] == "step":
            actions.append([int(record["actions"][name]) for name in names])

    agents = team_agents(env, members, factories=factories)
    episode = Episode(env, agents, seed=seed, topology=make_topology(contender.topology, env.num_agents),
                      trace=trace, on_record=on_record)
    return episode, actions


def play_in_loop(t: suite.Task, contender: Contender, members: Sequence[Member], folder: Path, episodes: int,
                 factories: Dict, progress: bool = True) -> TaskResult:
    """Episode by episode (``concurrency`` at a time), each kept in ``folder`` as it ends (a
    second call plays only the episodes not kept there)."""
    from tqdm import tqdm

    from cube_jax.runtime import arun_episodes
    from cube_jax.runtime.play import run_sync

    folder.mkdir(parents=True, exist_ok=True)
    layout_index, seeds = test_indices(t, episodes)
    mode = loop_mode(contender, members)
    concurrency = max(1, contender.concurrency)
    todo = [(int(li), int(s)) for li, s in zip(layout_index, seeds) if not (folder / f"episode-{s:03d}.json").is_file()]
    bar = tqdm(total=len(seeds), initial=len(seeds) - len(todo), unit="episode", desc=t.name,
               disable=not progress, file=sys.stderr)
    uses_llm = any(m.kind == "llm" for m in members)
    try:
        for start in range(0, len(todo), concurrency):
            batch = todo[start:start + concurrency]
            # each trace written beside the episode's record; moved into traces/ with the finished task
            played = [loop_episode(t, contender, members, li, s, factories,
                                   folder / f"episode-{s:03d}.jsonl" if uses_llm else None) for li, s in batch]
            results = run_sync(lambda: arun_episodes([p[0] for p in played], concurrency=concurrency))
            for (li, s), (_, actions), result in zip(batch, played, results):
                record = {"layout": li, "seed": s, "mode": mode, "run": 0, "actions": actions}
                if result.error is not None:
                    raise RuntimeError(f"task {t.name!r}: episode {s} stopped on an error: {result.error}")
                if not result.terminated and result.steps < t.max_steps:
                    record["end_reason"] = result.reason
                if uses_llm:
                    record.update(model_calls=result.model_calls, prompt_tokens=result.prompt_tokens,
                                  completion_tokens=result.completion_tokens, reasoning_tokens=result.reasoning_tokens,
                                  trace=f"{entries.TRACES_DIR}/{t.name}/episode-{s:03d}.jsonl")
                entries.write_json(folder / f"episode-{s:03d}.json", record)
                bar.update(1)
    finally:
        bar.close()
    records, actions = [], []
    for s in seeds:
        record = json.loads((folder / f"episode-{int(s):03d}.json").read_text())
        actions.append(np.asarray(record.pop("actions"), np.int8).reshape(-1, t.num_agents))
        records.append(record)
    return TaskResult(records, actions, episodes)


def loop_mode(contender: Contender, members: Sequence[Member]) -> str:
    """How a team in the loop acts: sampled when a member draws at random (a random agent, a
    language model above temperature 0), greedy otherwise."""
    if any(m.kind in STOCHASTIC_KINDS for m in members):
        return "sampled"
    if any(m.kind == "llm" for m in members):
        temperature = contender.model_defaults.get("temperature", 0.0) or 0.0
        return "greedy" if temperature == 0 else "sampled"
    return "greedy"


# --- the entry ---------------------------------------------------------------------------------------------------


def _scored(t: suite.Task, result: TaskResult) -> Tuple[List[Dict[str, Any]], np.ndarray]:
    """Every episode's record with its scores from replay, and the task's actions int8[E, T, N]."""
    length = max(1, max(a.shape[0] for a in result.actions))
    padded = np.full((len(result.actions), length, t.num_agents), entries.NO_ACTION, np.int8)
    for i, a in enumerate(result.actions):
        padded[i, : a.shape[0]] = a
    replayed = replay(t.name, np.array([e["layout"] for e in result.episodes]),
                      np.array([e["seed"] for e in result.episodes]), padded)
    out = []
    for i, (record, actions) in enumerate(zip(result.episodes, result.actions)):
        scored = {**record, **scores_of(replayed, i), "actions_digest": entries.actions_digest(actions)}
        natural = record.get("end_reason") is None
        if natural and not bool(replayed["ended"][i]):
            raise RuntimeError(f"task {t.name!r}: episode {i} was recorded without its end ({actions.shape[0]} steps)")
        out.append(scored)
    return out, padded


class Runner:
    """Plays one contender on tasks into one entry folder, resuming from its ``work/``."""

    def __init__(self, contender: Contender, out: Path, episodes: int = suite.TEST_LAYOUTS, progress: bool = True,
                 command: Optional[Sequence[str]] = None):
        if not 1 <= episodes <= suite.TEST_LAYOUTS:
            raise BenchError(f"--episodes must be in 1..{suite.TEST_LAYOUTS}, got {episodes}")
        self.contender = contender
        self.out = Path(out)
        self.episodes = episodes
        self.progress = progress
        self.command = command
        self.folder = EntryFolder(self.out)
        self.work = self.folder.work
        self._language = None

    # -- the whole entry ---------------------------------------------------------------------------
    def run(self, tasks: Sequence[suite.Task]) -> Dict[str, Any]:
        self.work.mkdir(parents=True, exist_ok=True)
        entry = self.folder.start(self.contender.agent(), self.command, self.contender.env_steps
                                  if self.contender.learner else None)
        start = time.perf_counter()
        self._language, serving = language_models(self.contender, tasks)
        with serving:
            for t in tasks:
                kept = entry["tasks"].get(t.name)
                if kept is not None and kept["episodes_per_run"] >= self.episodes:
                    log.info("%s: kept from the earlier run (%d episodes)", t.name, kept["episodes_per_run"])
                    continue
                self._run_task(t, entry, kept)
                entries.write_entry(self.out, entry)
                shutil.rmtree(self.work / t.name, ignore_errors=True)  # its episodes are in the entry now
                log.info("%s: %s", t.name, _summary_line(entry["tasks"][t.name]))
        if self.work.is_dir() and not any(self.work.iterdir()):
            self.work.rmdir()  # nothing left unfinished
        log.info("entry in %s (%.1f s)", self.out, time.perf_counter() - start)
        return entry

    def _run_task(self, t: suite.Task, entry: Dict[str, Any], kept: Optional[Dict[str, Any]]) -> None:
        """Plays task ``t`` (keeping ``kept``'s loop episodes) into ``entry``: its scored episodes,
        test set, wall seconds, tokens, the entry's GIF, traces and evidence."""
        if kept is not None:
            self.folder.keep_loop_episodes(t, kept)
        t0 = time.perf_counter()
        result = self._play_task(t)
        episodes, self.folder.arrays[f"{t.name}/actions"] = _scored(t, result)
        entry["test_sets"][t.name] = suite.TEST_SET_SHA256[t.name]
        entry["tasks"][t.name] = self._task_record(t, episodes, result.planned)
        self.folder.finished(t.name)
        prov = entry["provenance"]
        prov["wall_seconds"] = round(prov.get("wall_seconds", 0.0) + time.perf_counter() - t0, 2)
        if result.training_seconds is not None:  # every resumed session's training, which wall_seconds misses
            prov["training_seconds"] = round(prov.get("training_seconds", 0.0) + result.training_seconds, 2)
        if "tokens" in entry["tasks"][t.name]:
            prov["tokens"] = {k: sum(r.get("tokens", {}).get(k, 0) for r in entry["tasks"].values())
                              for k in TOKEN_COUNTS}
        if "gif" not in entry:
            self.folder.write_gif(entry)
        self.folder.move_traces(t)
        entry["evidence"] = self.folder.evidence()

    def _task_record(self, t: suite.Task, episodes: List[Dict[str, Any]], planned: int) -> Dict[str, Any]:
        learns = self.contender.algorithm is not None
        record = {"fixed_layout": t.fixed_layout, "max_steps": t.max_steps, "unit": "runs" if learns else "episodes",
                  "episodes_planned": suite.TEST_LAYOUTS, "episodes_per_run": planned, "episodes": episodes,
                  "aggregates": entries.aggregates(episodes, learns)}
        tokens = [e for e in episodes if "model_calls" in e]
        if tokens:
            record["tokens"] = {k: int(sum(e.get(k, 0) for e in tokens)) for k in TOKEN_COUNTS}
        return record

    # -- playing one task ------------------------------------------------------------------------------
    def _play_task(self, t: suite.Task) -> TaskResult:
        from cube_jax.teams import is_batched

        if self.contender.learner:
            return train_and_play(t, self.contender, self.work, self.episodes, self.progress)
        members = self.contender.members(t.num_agents, t.name)
        if is_batched(members):
            return play_team(t, members, self.episodes, self.progress)
        factories = {"llm": self._language} if self._language is not None else {}
        return play_in_loop(t, self.contender, members, self.work / t.name, self.episodes, factories, self.progress)


def _summary_line(record: Dict[str, Any]) -> str:
    parts = []
    for mode, block in record["aggregates"].items():
        parts.append(f"{mode}: success {block['success']['mean']:.3f} [{block['success']['mean_ci'][0]:.3f}, "
                     f"{block['success']['mean_ci'][1]:.3f}], blocks {block['blocks']['mean']:.3f}, "
                     f"return {block['return']['mean']:+.3f} ({block['count']} {block['unit']})")
    return "; ".join(parts)


__all__ = ["ALGORITHMS", "BenchError", "Contender", "Runner", "check_spec", "layout_world", "modes_of",
           "play_batched", "resolve_tasks"]
