"""Worked examples (``--demos K``, cube_jax/llm/demos.py): K examples in the system prompt, from
other layouts than the episode's, deterministic, topology-respecting."""
from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cube_jax
from cube_jax.core.layouts import FixedLayout
from cube_jax.llm import ModelClient
from cube_jax.llm import demos
from cube_jax.llm.agent import LLMAgent
from cube_jax.llm.demos import demo_layouts, demo_pool, demo_source, layout_key
from cube_jax.runtime import Limits
from cube_jax.runtime.watch import planner_decisions
from cube_jax.testing.fake_openai import FakeOpenAI
from cube_jax.testing.sound_model import responder
from tests.trace_helpers import play

EXAMPLE = re.compile(r"=== EXAMPLE (\d+) OF (\d+): THE PROMPT ===\n(.*?)\n=== EXAMPLE \1 OF \2: THE REPLY ===\n(.*?)\n",
                     re.S)


@pytest.fixture(scope="module")
def easy():
    return cube_jax.make("easy")


def agents(server, env, k, **options):
    pool = demo_pool(env, k, planner_decisions)
    return [LLMAgent(ModelClient("fake-model", base_url=server.url, backoff_base=0.0), demos=k, demo_pool=pool,
                     **options) for _ in range(env.num_agents)]


def systems(server):
    """agent name -> the system messages of its requests."""
    out = {}
    for request in server.completions:
        system = request.body["messages"][0]["content"]
        me = re.search(r"^You are (agent_\d+),", system, re.M).group(1)
        out.setdefault(me, []).append(system)
    return out


def examples(system):
    return [(int(i), int(n), prompt, json.loads(reply)) for i, n, prompt, reply in EXAMPLE.findall(system)]


@pytest.mark.parametrize("topology", ["individual", "decentralized"])
def test_k_examples_sit_in_the_shared_system_prefix_and_respect_the_topology(easy, topology):
    with FakeOpenAI(responder=responder) as server:
        team = agents(server, easy, 2)
        result, records = play(easy, team, topology=topology, limits=Limits(max_steps=6))
        by_agent = systems(server)
    assert records[0]["agents"]["agent_0"] == {"kind": "llm", "model": "fake-model", "demos": 2}
    assert set(by_agent) == {"agent_0", "agent_1"}
    for me, prompts in by_agent.items():
        assert len(set(prompts)) == 1, f"{me}: the system prompt changed between calls"
        shown = examples(prompts[0])
        assert [(i, n) for i, n, _, _ in shown] == [(1, 2), (2, 2)]
        assert prompts[0].index("WORKED EXAMPLES") > prompts[0].index("YOUR ROLE")
        for _, _, prompt, reply in shown:
            # a state as the agent's own prompt shows one: its team with the (you) mark, the blocks
            assert f"- {me} (you) at" in prompt and "BLOCKS\n- block 0: weight 1" in prompt
            assert prompt.startswith("STEP ") and "(at most 100 steps)" in prompt
            # the reply format the agent must produce, with no messages whatever the topology
            assert set(reply) == {"reasoning", "spec", "plan"}
            assert all(set(a) == {"action", "args"} for a in reply["plan"])
            if topology == "individual":
                assert "Send no messages this turn." in prompt and "You may send" not in prompt
            else:
                other = "agent_1" if me == "agent_0" else "agent_0"
                assert f"You may send up to 2 message(s) to: {other}." in prompt
    # the user prompt is the agent's own, after the prefix
    first = server.completions[0].body["messages"]
    assert [m["role"] for m in first] == ["system", "user"] and "WORKED EXAMPLES" not in first[1]["content"]


def test_examples_come_from_other_layouts_than_the_episodes(easy):
    pool = demo_pool(easy, 2, planner_decisions)
    numbers = [c.number for c in pool.candidates]
    assert len(numbers) == 2 + demos.SPARE and len({c.layout for c in pool.candidates}) == 3
    own = layout_key(easy.reset(jax.random.PRNGKey(0))[0])
    assert own not in {c.layout for c in pool.candidates}
    # a world whose only layout is the first candidate: it shares easy's demos (same shape),
    # and its agents skip that candidate
    first = pool.candidates[0]
    agents_, blocks = first.layout
    lay = cube_jax.core.layouts.Layout(jnp.asarray(agents_, jnp.int32), jnp.asarray([b[:2] for b in blocks], jnp.int32),
                                       jnp.asarray([b[2] for b in blocks], jnp.int32))
    same = cube_jax.make(layouts=FixedLayout(grid_size=8, num_agents=2, weights=(1, 1, 1), layout=lay), max_steps=100)
    assert demo_source(same)[0] == demo_source(easy)[0]
    with FakeOpenAI(responder=responder) as server:
        team = agents(server, same, 2)
        play(same, team, limits=Limits(max_steps=2))
    shown = [e.number for e in team[0].examples]
    assert shown == numbers[1:] and first.number not in shown
    assert [e.number for e in pool.examples(0, 2, None)] == numbers[:2]


def test_examples_are_deterministic_for_a_world_and_k(easy):
    def rendered():
        with FakeOpenAI(responder=responder) as server:
            play(easy, agents(server, easy, 2), limits=Limits(max_steps=1))
            return systems(server)

    before = rendered()
    demos._CACHE.clear()  # generated again from nothing
    assert rendered() == before


def test_a_task_world_draws_from_the_task_and_leaves_its_test_layouts_out():
    from cube_jax.bench.run import layout_world
    from cube_jax.core import suite

    env = layout_world(suite.task("n2"), 3)
    key, generator, excluded = demo_source(env)
    assert key.startswith("task n2") and type(generator).__name__ == "CurriculumLayouts" and len(excluded) == 256
    drawn = demo_layouts(generator, 3, excluded)
    assert [layout_key(lay) for _, lay in drawn] == [layout_key(lay) for _, lay in demo_layouts(generator, 3, excluded)]
    assert not {layout_key(lay) for _, lay in drawn} & excluded
    test_layout = layout_key(jax.tree.map(lambda x: np.asarray(x)[3], suite.test_set(suite.task("n2"))))
    assert test_layout in excluded


def test_the_runtimes_planner_decisions_docstring_runs():
    import doctest

    import cube_jax.runtime.watch

    assert doctest.testmod(cube_jax.runtime.watch).failed == 0
