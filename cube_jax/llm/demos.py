"""Worked examples for language agents (``--demos K``): a planner's decisions on other layouts
of the same world, shown in the shared prompt prefix.

COBLOCK (``coblock.txt``, section 4.1) gives its agents in-context examples, each "the
current world state and the reasoning steps". Here one example is a state rendered exactly
as the agent's own prompt shows a state (the user template, :mod:`cube_jax.llm.prompts`) and
the plan the cube paper's heuristic chose there, written in the plan reply format the agent
must produce. The examples sit in the system message (``demos.j2``), which is identical
across an agent's calls, so a server's prompt cache keeps them.

**Where they come from.** :func:`demo_pool` draws layouts of the episode's world from a key
stream of its own (``fold_in(PRNGKey(0), DEMO_STREAM)`` folded with 0, 1, 2, ...), which no
episode, pool or test set uses: an episode starts from ``PRNGKey(seed)`` and the suite's
test layouts from its reserved stream (:mod:`cube_jax.core.suite`). A world whose every
reset gives the same layout (a scenario such as ``easy``, or a bench task's test layout)
has no other layout of its own, so its demos come from fresh layouts of its shape: its grid,
team and block weights, placed by the curriculum's rules
(:class:`~cube_jax.core.layouts.CountsLayouts`). A bench task's world draws from the task's
generator and leaves out the task's 256 test layouts. On each demo layout the heuristic team
plays one episode (at most :data:`DEMO_STEPS` steps: the runtime's
:func:`~cube_jax.runtime.watch.planner_decisions`, which the commands hand to :func:`demo_pool`,
since the language agents do not import the runtime) and every plan it commits is kept with
the context it was chosen in.

**Never the episode's own layout.** Candidates are distinct layouts, one more than asked
for (:data:`SPARE`); an agent takes the first ``K`` of them whose layout differs from the
layout its episode started from (the state of its first decision, at ``t = 0``: every agent
reasons when an episode starts, LLM.md 2), so at most the spare is skipped.

**Deterministic and cached.** The candidates depend on the world and ``K`` only (the
heuristic is deterministic), and are generated once per world and process
(:func:`demo_pool`'s cache: every episode and agent of a run shares them); which ``K`` an
agent shows depends besides only on whether its episode's layout is one of them.

**Topology.** Example ``i`` of agent ``agent_k`` is a decision of ``agent_k`` on candidate
``i`` (its ``i``-th plan that pushes a block, counted round), so the team and the ``(you)``
mark read as in the agent's own prompt; it is rendered with the agent's topology view
(its recipients and budget, no turn instructions), and its reply carries no messages: a
planner sends none, and sending none is allowed by every topology (no example shows what the
agent's topology forbids).
"""
from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import numpy as np

from cube_jax.agents.base import DecisionContext, Plan

# The demos' own key stream: fold_in(PRNGKey(0), DEMO_STREAM), then the candidate's number.
DEMO_STREAM = 0x44454D4F  # "DEMO"
# Candidates beyond K, so that one equal to the episode's layout can be skipped.
SPARE = 1
# Steps of a demo episode at most (decisions later than this are never shown).
DEMO_STEPS = 60
# Draws tried per candidate at most (a draw whose blocks found no place, or that repeats an
# earlier candidate or a test layout, is skipped).
MAX_DRAWS = 64
# The most examples an agent may be given (each one is a whole state).
MAX_DEMOS = 8

LayoutKey = Tuple[Tuple[Tuple[int, int], ...], Tuple[Tuple[int, int, int], ...]]


@dataclasses.dataclass(frozen=True)
class DemoDecision:
    """One decision of the planner: its context, the plan it committed, and what the agent
    remembered of its earlier decisions there (the prompt's "recent decisions")."""

    ctx: DecisionContext
    plan: Plan
    decisions: Tuple[Dict[str, Any], ...] = ()
    number: int = 0  # the candidate's number in the demo stream
    world: str = ""  # the world's key (demo_source)

    @property
    def key(self) -> Tuple[str, int, int, int]:
        """What identifies the example (its world, candidate, agent and step), for prompt caches."""
        return (self.world, self.number, self.ctx.agent, self.ctx.t)


@dataclasses.dataclass(frozen=True)
class DemoLayout:
    """One candidate: its number in the demo stream, its layout, and every agent's decisions."""

    number: int
    layout: LayoutKey
    decisions: Dict[int, Tuple[DemoDecision, ...]]


@dataclasses.dataclass
class DemoPool:
    """The candidates of one world (see the module docstring)."""

    world: str
    candidates: List[DemoLayout]

    def select(self, k: int, episode_layout: Optional[LayoutKey]) -> List[DemoLayout]:
        """The first ``k`` candidates whose layout is not ``episode_layout``."""
        chosen = [c for c in self.candidates if c.layout != episode_layout][:k]
        if len(chosen) < k:
            raise RuntimeError(f"demos: {len(chosen)} candidate layouts of {self.world} for {k} examples")
        return chosen

    def examples(self, agent: int, k: int, episode_layout: Optional[LayoutKey]) -> List[DemoDecision]:
        """Agent ``agent``'s ``k`` examples."""
        out = []
        for i, candidate in enumerate(self.select(k, episode_layout)):
            mine = candidate.decisions.get(agent, ())
            if not mine:
                continue
            pushing = [d for d in mine if d.plan.spec.startswith("push_block(")] or list(mine)
            out.append(pushing[i % len(pushing)])
        return out


def layout_key(state) -> LayoutKey:
    """A state's (or layout's) positions, comparable: agents, then blocks as (row, col, weight)."""
    agents = np.asarray(state.agent_pos).reshape(-1, 2)
    blocks = np.asarray(state.block_pos).reshape(-1, 2)
    weights = np.asarray(getattr(state, "block_weight")).reshape(-1)
    return (tuple((int(r), int(c)) for r, c in agents),
            tuple((int(r), int(c), int(w)) for (r, c), w in zip(blocks, weights)))


# --- where demo layouts come from ---------------------------------------------------------------------


def demo_source(env):
    """``(world key, generator, excluded layout keys)`` for ``env``'s world (module docstring)."""
    from cube_jax.core.layouts import CountsLayouts, FixedLayout, PoolLayouts

    made = dict(getattr(env, "make_kwargs", None) or {})
    excluded = set()
    if "task" in made:
        from cube_jax.core import suite

        task = suite.task(made["task"])
        generator = task.generator()
        tests = suite.test_set(task)
        excluded = {layout_key(jax.tree.map(lambda x, i=i: np.asarray(x)[i], tests))
                    for i in range(np.asarray(tests.agent_pos).shape[0])}
        world = f"task {task.name}"
    else:
        generator = env.generator
        world = f"{type(generator).__name__}"
    shape = (env.grid_size, env.num_agents, tuple(env.block_weights), env.max_steps)
    if isinstance(generator, FixedLayout):
        generator = CountsLayouts.of(env.grid_size, env.num_agents, Counter(env.block_weights))
        world = f"{world} (fresh layouts of its shape)"
    key = f"{world} {shape}"
    if isinstance(generator, PoolLayouts):
        from cube_jax.core.testsets import contents_sha256

        key += f" pool {contents_sha256(generator.layouts)[:16]}"
    return key, generator, excluded


def demo_layouts(generator, count: int, excluded=frozenset()) -> List[Tuple[int, Any]]:
    """The first ``count`` distinct layouts of ``generator`` from the demo stream that are not
    ``excluded``: ``[(number, Layout)]``, drawn in batches (one compiled program per shape)."""
    from cube_jax.core.layouts import draw_layouts

    base = jax.random.fold_in(jax.random.PRNGKey(0), DEMO_STREAM)
    batch = max(8, 2 * count)
    out, seen = [], set(excluded)
    start = 0
    while len(out) < count:
        if start >= count * MAX_DRAWS:
            raise RuntimeError(f"demos: only {len(out)} usable layouts among {start} draws")
        numbers = np.arange(start, start + batch, dtype=np.uint32)
        keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(numbers)
        layouts, placed = jax.tree.map(np.asarray, draw_layouts(generator, keys))
        for j, number in enumerate(numbers):
            if not placed[j] or len(out) >= count:
                continue
            layout = jax.tree.map(lambda x, j=j: x[j], layouts)
            key = layout_key(layout)
            if key not in seen:
                seen.add(key)
                out.append((int(number), layout))
        start += batch
    return out


# --- playing them ---------------------------------------------------------------------------------------

# play(env, layout, max_steps=...) -> {agent id: [(context, plan), ...]}: the planner's episode on
# a demo layout. The language agents do not import the runtime (an import contract), so the
# commands hand them the runtime's cube_jax.runtime.watch.planner_decisions.
Player = Callable[..., Dict[int, List[Tuple[DecisionContext, Plan]]]]


def _decisions(env, world_key: str, number: int, lay, play: Player) -> Dict[int, Tuple[DemoDecision, ...]]:
    out = {}
    for i, log in play(env, lay, max_steps=DEMO_STEPS).items():
        kept, earlier = [], []
        for ctx, plan in log:
            # the prompt shows the world's step limit, not the demo episode's shorter one
            kept.append(DemoDecision(dataclasses.replace(ctx, max_steps=env.max_steps), plan, tuple(earlier[-4:]),
                                     number, world_key))
            earlier.append({"t": ctx.t, "text": f"committed {plan}"})
        out[int(i)] = tuple(kept)
    return out


_CACHE: Dict[str, DemoPool] = {}
_LOCK = threading.Lock()


def demo_pool(env, k: int, play: Optional[Player]) -> DemoPool:
    """The ``k + SPARE`` candidates of ``env``'s world, each played by ``play`` (the runtime's
    :func:`cube_jax.runtime.watch.planner_decisions`), generated once per world and process
    (later calls asking for more extend the same list; fewer take its first ones)."""
    if not 0 <= k <= MAX_DEMOS:
        raise ValueError(f"demos: K must be in 0..{MAX_DEMOS}, got {k!r}")
    if play is None:
        raise ValueError("demos: generating them needs a player of planner episodes "
                         "(cube_jax.runtime.watch.planner_decisions)")
    key, generator, excluded = demo_source(env)
    want = k + SPARE
    with _LOCK:
        pool = _CACHE.get(key)
        if pool is None or len(pool.candidates) < want:
            layouts = demo_layouts(generator, want, excluded)
            have = {c.number: c for c in (pool.candidates if pool else [])}
            candidates = []
            for number, lay in layouts:
                if number not in have:
                    have[number] = DemoLayout(number, layout_key(lay), _decisions(env, key, number, lay, play))
                candidates.append(have[number])
            pool = _CACHE[key] = DemoPool(key, candidates)
    return DemoPool(pool.world, pool.candidates[:want])


# --- the reply an example shows ---------------------------------------------------------------------------


def demo_reasoning(ctx: DecisionContext, plan: Plan) -> str:
    """A short reason for the planner's plan, in the words a model might use."""
    import re

    match = re.match(r"^(\w+)\(block#(\d+)\)$", plan.spec)
    if match is None:
        return "Nothing useful to do now: wait a step."
    what, block = match.group(1), int(match.group(2))
    view = ctx.views.blocks[block]
    if what == "push_block":
        return (f"Block {block} is the live block closest to the goal ({view.distance_to_goal} pushes). It weighs "
                f"{view.weight}, so {view.weight} agent(s) must push its left face together: go there, meet, push.")
    if what == "clear_lane":
        return f"I stand in the lane block {block} is pushed along; step out of it so the push is not blocked."
    return f"Work toward block {block}."


def demo_reply(ctx: DecisionContext, plan: Plan) -> str:
    """The planner's plan in the plan reply format (JSON actions, no messages)."""
    return json.dumps({"reasoning": demo_reasoning(ctx, plan), "spec": plan.spec,
                       "plan": [a.to_json() for a in plan.actions]})


__all__ = ["DEMO_STEPS", "DEMO_STREAM", "DemoDecision", "DemoLayout", "DemoPool", "MAX_DEMOS", "SPARE", "demo_layouts",
           "demo_pool", "demo_reply", "demo_source", "layout_key"]
