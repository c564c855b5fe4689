"""Plan repair (``--repair``, cube_jax/llm/repair.py): each check on hand-built states, and the
re-prompt through the real client and a loopback server."""
from __future__ import annotations

import json

import jax
import pytest

import cube_jax
from cube_jax.agents import heuristic_team
from cube_jax.agents.base import (DecisionContext, PartnerState, Plan, PlanProgress, Purpose, Reason, Stage,
                                  TopologyView)
from cube_jax.agents.views import WorldView
from cube_jax.analytics import episode_metrics
from cube_jax.llm import ModelClient
from cube_jax.llm.agent import LLMAgent
from cube_jax.llm.repair import engagements, review_plan
from cube_jax.names import agent_name
from cube_jax.symbolic import parse_plan
from cube_jax.testing.fake_openai import FakeOpenAI
from cube_jax.testing.sound_model import responder
from tests.trace_helpers import of, play

# Block a (id 0, weight 2) in the open; block b (id 1, weight 2) in the bottom-left corner, whose
# left and down faces are off the grid; block c (id 2, weight 1) above it.
MAP = """
0.......
........
...aa...
1..aa...
........
.c......
bb......
bb.....2
"""
# The no-path case: the left face of block a, the cell (6, 0), is free but walled in.
POCKET = """
0......
.......
.......
.......
bb.....
bb.....
.a.....
"""


def world(text):
    env = cube_jax.make(scenario=cube_jax.Scenario.from_ascii(text, name="repair", max_steps=50))
    state, _ = env.reset(jax.random.PRNGKey(0))
    return env, state


def context(text, agent=0, partners=()):
    env, state = world(text)
    return DecisionContext(
        agent=agent, name=agent_name(agent), purpose=Purpose.PLAN, reason=Reason.START, t=0, state=state,
        views=WorldView(state), num_agents=env.num_agents, max_steps=50,
        progress=PlanProgress(None, 0, "done", None), inbox=(), feedback=None,
        topology=TopologyView("individual", "", False, frozenset(), 0), history=(), validate=lambda d: None,
        partners=tuple(partners))


def partner(agent, stage, text=None, spec="plan", index=0):
    plan = None if text is None else Plan(spec, tuple(parse_plan(text)))
    return PartnerState(agent, stage, None if plan is None else spec, None, plan=plan, plan_index=index)


FREE = [partner(1, Stage.REASONING), partner(2, Stage.REASONING)]


def review(ctx, text):
    return review_plan(ctx, parse_plan(text))


# --- reading plans ------------------------------------------------------------------------------------


def test_engagements_follow_the_agent_through_its_plan():
    plan = parse_plan("move_to_block(0, left); rendezvous(0, left, 2, 10); push_block(0, 4); move(up, 1); "
                      "push_block(1, 2); move_to_block(1, up); push_block(1, 1)")
    found = engagements(plan, start=set())
    assert [(e.block, e.face, e.index, e.pushes, e.count, e.timeout) for e in found] == [
        (0, "left", 1, True, 2, 10), (1, "up", 6, True, None, 0)]  # the push after move(up) is not followed


# --- reach --------------------------------------------------------------------------------------------


def test_reach_fires_for_a_face_off_the_grid():
    v = review(context(MAP, partners=FREE), "move_to_block(1, left); rendezvous(1, left, 2, 20); push_block(1, 5)")
    assert (v.check, v.block, v.face, v.action_index) == ("reach", 1, "left", 0)
    assert "outside the grid" in v.detail


def test_reach_fires_for_a_face_no_path_leads_to():
    ctx = context(POCKET)
    # block a (id 0) at (6, 1); its left face cell (6, 0) is walled in by block b (id 1) and the edges
    v = review(ctx, "move_to_block(0, left); push_block(0, 3)")
    assert (v.check, v.block, v.face) == ("reach", 0, "left")
    assert "no path" in v.detail


def test_reach_fires_for_a_push_from_no_face():
    v = review(context(MAP, partners=FREE), "push_block(0, 3)")
    assert (v.check, v.block, v.face, v.action_index) == ("reach", 0, None, 0)
    assert "aligned with a face of block 0" in v.detail and "move_to_block" in v.detail
    v = review(context(MAP, partners=FREE), "move_to_block(0, left); rendezvous(0, up, 2, 10); push_block(0, 3)")
    assert (v.check, v.block, v.face, v.action_index) == ("reach", 0, "up", 1)
    # the plan's first failing action is the one reported
    v = review(context(MAP, partners=FREE), "move_to_block(0, left); rendezvous(0, up, 2, 10); move_to_block(1, left)")
    assert (v.check, v.action_index) == ("reach", 1)


# --- quorum -------------------------------------------------------------------------------------------


def test_quorum_fires_when_the_teammates_are_committed_elsewhere():
    busy = [partner(1, Stage.EXECUTING, "move_to_block(2, left); push_block(2, 5)", "push_block(block#2)"),
            partner(2, Stage.WAITING, "move_to_block(2, up); push_block(2, 1)", "push_block(block#2)")]
    v = review(context(MAP, partners=busy), "move_to_block(0, left); rendezvous(0, left, 2, 20); push_block(0, 5)")
    assert (v.check, v.block, v.face, v.action_index) == ("quorum", 0, "left", 1)
    assert "needs 2 agents" in v.detail and "only 1 can be" in v.detail


def test_quorum_fires_for_a_rendezvous_count_below_the_weight():
    v = review(context(MAP, partners=FREE), "move_to_block(0, left); rendezvous(0, left, 1, 20); push_block(0, 5)")
    assert (v.check, v.block, v.face) == ("quorum", 0, "left")
    assert "count 1 is below the 2 agents" in v.detail


def test_quorum_fires_when_the_timeout_is_too_short_for_a_free_teammate():
    # agent_2 is free but far away: the window is agent_0's walk to the face plus a timeout of 0
    far = [partner(1, Stage.EXECUTING, "move_to_block(2, up); push_block(2, 1)", "push_block(block#2)"),
           partner(2, Stage.REASONING)]
    v = review(context(MAP, partners=far), "move_to_block(0, left); rendezvous(0, left, 2, 0); push_block(0, 5)")
    assert v.check == "quorum" and "window of 4 step(s)" in v.detail
    # with time to arrive the same plan passes
    assert review(context(MAP, partners=far), "move_to_block(0, left); rendezvous(0, left, 2, 20); "
                                              "push_block(0, 5)") is None


# --- clash --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("face, how", [("right", "opposite side"), ("up", "another side")])
def test_clash_fires_for_a_teammate_committed_to_another_face(face, how):
    mates = [partner(1, Stage.EXECUTING, f"move_to_block(0, {face}); rendezvous(0, {face}, 2, 20); push_block(0, 2)",
                     "push_block(block#0)"), partner(2, Stage.REASONING)]
    v = review(context(MAP, partners=mates), "move_to_block(0, left); rendezvous(0, left, 2, 20); push_block(0, 5)")
    assert (v.check, v.block, v.face) == ("clash", 0, "left")
    assert f"agent_1 is committed to block 0 at its {face} face" in v.detail and how in v.detail


def test_a_finished_part_of_a_teammates_plan_does_not_clash():
    # agent_1 already pushed block 0 from the right; what is left of its plan works block 2
    mates = [partner(1, Stage.EXECUTING, "move_to_block(0, right); push_block(0, 1); move_to_block(2, up); "
                                         "push_block(2, 1)", "mixed", index=2), partner(2, Stage.REASONING)]
    assert review(context(MAP, partners=mates), "move_to_block(0, left); rendezvous(0, left, 2, 20); "
                                                "push_block(0, 5)") is None


def test_a_sound_plan_passes_every_check():
    mates = [partner(1, Stage.WAITING, "move_to_block(0, left); rendezvous(0, left, 2, 20); push_block(0, 5)",
                     "push_block(block#0)"),
             partner(2, Stage.EXECUTING, "move_to_block(2, up); push_block(2, 1)", "push_block(block#2)")]
    ctx = context(MAP, partners=mates)
    assert review(ctx, "move_to_block(0, left); rendezvous(0, left, 2, 20); push_block(0, 5)") is None
    assert review(ctx, "idle(3)") is None and review(ctx, "move(down, 2); push_block(0, 1)") is None


# --- the re-prompt through the client -----------------------------------------------------------------

SOLO = cube_jax.Scenario.from_ascii("""
......
0.....
..a...
1.....
......
......
""", name="solo", max_steps=20)


def plan_reply(text, spec="push_block(block#0)"):
    return json.dumps({"reasoning": "r", "spec": spec, "plan": text})


def test_a_violating_plan_is_sent_back_quoting_the_check_and_the_sound_one_runs():
    env = cube_jax.make(scenario=SOLO)
    bad = plan_reply("push_block(0, 3)")  # agent_0 stands at no face of block 0: reach
    good = plan_reply("move_to_block(0, left); push_block(0, 3)")
    with FakeOpenAI(replies=[bad, good], responder=responder) as server:
        agent = LLMAgent(ModelClient("fake-model", base_url=server.url, backoff_base=0.0), repair=True)
        result, records = play(env, [agent, heuristic_team(env)[1]])
        requests = [r.body["messages"] for r in server.completions]
    assert result.success
    assert records[0]["agents"]["agent_0"] == {"kind": "llm", "model": "fake-model", "repair": True}
    calls = of(records, "llm", agent="agent_0")
    assert calls[0]["valid"] and calls[0]["repair"]["check"] == "reach" and calls[0]["repair"]["resent"]
    assert calls[0]["repair"]["block"] == 0 and calls[0]["repair"]["action_index"] == 0
    assert "repair" not in calls[1]
    # the second request is the first one, the model's reply, and the re-prompt quoting the check
    assert requests[1][:2] == requests[0][:2] and requests[1][2] == {"role": "assistant", "content": bad}
    quoted = requests[1][3]["content"]
    assert '"reach" check' in quoted and "block 0" in quoted and "push_block(0, 3)" in quoted
    committed = of(records, "plan", agent="agent_0", event="committed")
    assert committed[0]["actions"] == ["move_to_block(0, left)", "push_block(0, 3)"]
    metrics = episode_metrics(records)
    assert (metrics["repairs"], metrics["repairs_reach"], metrics["repairs_unresolved"]) == (1, 1, 0)


def test_a_plan_still_failing_when_the_budget_is_spent_runs_as_it_is():
    env = cube_jax.make(scenario=SOLO)
    bad = plan_reply("push_block(0, 3)")
    with FakeOpenAI(replies=[bad, bad], responder=responder) as server:
        agent = LLMAgent(ModelClient("fake-model", base_url=server.url, backoff_base=0.0), max_repairs=1, repair=True)
        _, records = play(env, [agent, heuristic_team(env)[1]])
    calls = of(records, "llm", agent="agent_0")
    assert [c["repair"]["resent"] for c in calls[:2]] == [True, False]
    assert not calls[1]["fallback"]
    first = of(records, "plan", agent="agent_0", event="committed")[0]
    assert first["actions"] == ["push_block(0, 3)"] and not first.get("fallback")
    metrics = episode_metrics(records)
    assert (metrics["repairs"], metrics["repairs_unresolved"]) == (2, 1)
