"""The CPU episode loop: MAEIL stages, topologies, limits, fallbacks and traces.

Scripted agents give hand-built decision sequences whose stage, plan and message records
are checked one by one; planner teams check whole episodes. Every world here is small and
compiles once per module.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import cube_jax
from cube_jax.agents import (
    Agent,
    Decision,
    ModelCall,
    fallback_plan,
    OutgoingMessage,
    Plan,
    Purpose,
    RandomPolicy,
    ScriptedAgent,
    heuristic_team,
    policy_agents,
    team_planner_team,
)
from cube_jax.runtime import Episode, Limits, run_episodes
from cube_jax.trace import read_trace
from cube_jax.symbolic import parse_plan
from tests import interrupts
from tests.trace_helpers import of, play

STAY, UP, DOWN, LEFT, RIGHT = range(5)
# Where a stage may go next (LLM.md section 2).
ALLOWED = {"R": {"W"}, "W": {"X", "I"}, "X": {"R", "I"}, "I": {"W"}}

OPEN = cube_jax.Scenario.from_ascii("""
........
0.......
1.......
2.......
........
......a.
........
........
""", max_steps=12, name="open")


@pytest.fixture(scope="module")
def open_env():
    return cube_jax.make(scenario=OPEN)


@pytest.fixture(scope="module")
def hard():
    return cube_jax.make("hard")


def plan(spec: str, text: str) -> Plan:
    return Plan(spec, tuple(parse_plan(text)))




def stages(records, agent):
    return [(r["t"], r["stage"]) for r in of(records, "stage", agent=agent)]


def check_stage_machine(records):
    for name in records[0]["agents"]:
        sequence = [s for _, s in stages(records, name)]
        assert sequence[0] == "R", (name, sequence)
        for before, after in zip(sequence, sequence[1:]):
            assert after in ALLOWED[before], (name, before, after, sequence)


# --- whole episodes ------------------------------------------------------------------------------


@pytest.mark.parametrize("team", [heuristic_team, team_planner_team], ids=["heuristic", "team"])
def test_planner_teams_deliver_hard_and_trace_it(hard, team):
    result, records = play(hard, team(hard))
    assert result.terminated and result.blocks_delivered == 3 and result.reason == "all blocks delivered"
    end = records[-1]
    assert end["type"] == "end" and end["steps"] == result.steps == len(of(records, "step"))
    assert (end["weight_delivered"], end["weight_total"]) == (6, 6)
    assert records[0]["agents"]["agent_0"] == {"kind": team(hard)[0].kind, "model": None}
    check_stage_machine(records)
    # the pushes of the weight-3 block show its joint constraint met on the left face
    assert any(t.get("joint", 0) >= 3 for s in of(records, "step") for k, t in s["tasks"].items() if k == "0:left")


def test_traces_are_the_same_on_every_run(hard):
    def strip(records):
        return [{k: v for k, v in r.items() if k != "wall"} for r in records]

    first = strip(play(hard, heuristic_team(hard), seed=3)[1])
    second = strip(play(hard, heuristic_team(hard), seed=3)[1])
    assert first == second


def test_a_plan_that_ends_is_replaced_before_the_next_step(open_env):
    agent = ScriptedAgent([Decision(plan=plan("wait", "idle(2)")), Decision(plan=plan("walk", "move(right, 1)"))])
    result, records = play(open_env, [agent, ScriptedAgent([Decision(plan=plan("rest", "idle(20)"))]),
                                      ScriptedAgent([Decision(plan=plan("rest", "idle(20)"))])])
    assert stages(records, "agent_0")[:6] == [(0, "R"), (0, "W"), (0, "X"), (2, "R"), (2, "W"), (2, "X")]
    events = [(r["t"], r["spec"], r["event"]) for r in of(records, "plan", agent="agent_0")]
    assert events[:4] == [(0, "wait", "committed"), (2, "wait", "succeeded"), (2, "walk", "committed"),
                          (3, "walk", "succeeded")]
    steps = of(records, "step")
    assert [s["symbolic"]["agent_0"] for s in steps[:3]] == ["idle(2)", "idle(2)", "move(right, 1)"]
    assert steps[2]["actions"]["agent_0"] == RIGHT
    # the two others idle for the whole episode: their plan is still running at the end
    assert of(records, "plan", agent="agent_1")[-1]["event"] == "unfinished"
    assert result.truncated and result.reason == "max_steps (12) reached"


def test_a_failed_plan_reports_the_executor_reason(open_env):
    agents = [ScriptedAgent([Decision(plan=plan("reach", "rendezvous(0, left, 2, 3)")),
                             Decision(plan=plan("rest", "idle(20)"))])]
    agents += [ScriptedAgent([Decision(plan=plan("rest", "idle(20)"))]) for _ in range(2)]
    _, records = play(open_env, agents)
    failed = of(records, "plan", agent="agent_0", event="failed")
    # the precondition fails when the plan starts, in step 0 (the agent stays); the agent
    # learns it before step 1 and reasons again
    assert failed and failed[0]["t"] == 1 and "not aligned" in failed[0]["reason"]
    assert of(records, "step")[0]["actions"]["agent_0"] == STAY
    assert agents[0].contexts[1].t == 1 and "failed" in agents[0].contexts[1].feedback


# --- messages and interrupts -------------------------------------------------------------------


def say(text, *to):
    return OutgoingMessage(tuple(to), text)


def test_a_message_interrupts_an_executing_agent_who_resumes(open_env):
    sender = ScriptedAgent([Decision(plan=plan("one", "idle(1)")),
                            Decision(plan=plan("two", "idle(20)"), messages=(say("come left", 1),))])
    listener = ScriptedAgent([Decision(plan=plan("stay", "idle(20)"))])
    third = ScriptedAgent([Decision(plan=plan("stay", "idle(20)"))])
    _, records = play(open_env, [sender, listener, third], topology="decentralized")
    message = of(records, "message")[0]
    assert (message["t"], message["sender"], message["recipients"], message["content"]) == (1, "agent_0", ["agent_1"],
                                                                                          "come left")
    assert stages(records, "agent_1")[:6] == [(0, "R"), (0, "W"), (0, "X"), (1, "I"), (1, "W"), (1, "X")]
    assert [r["event"] for r in of(records, "plan", agent="agent_1")][:2] == ["committed", "resumed"]
    assert of(records, "plan", agent="agent_1", event="resumed")[0]["plan_id"] == \
        of(records, "plan", agent="agent_1", event="committed")[0]["plan_id"]
    interrupt = [c for c in listener.contexts if c.purpose == Purpose.INTERRUPT][0]
    assert [m.content for m in interrupt.inbox] == ["come left"] and interrupt.t == 1
    assert stages(records, "agent_2") == [(0, "R"), (0, "W"), (0, "X")]  # never addressed, never interrupted


def test_an_interrupted_agent_may_replan(open_env):
    sender = ScriptedAgent([Decision(plan=plan("one", "idle(1)")),
                            Decision(plan=plan("two", "idle(20)"), messages=(say("switch", 1),))])
    listener = ScriptedAgent([Decision(plan=plan("stay", "idle(20)")), Decision(plan=plan("go", "move(down, 1)"))],
                             resume_on_interrupt=False)
    rest = ScriptedAgent([Decision(plan=plan("stay", "idle(20)"))])
    _, records = play(open_env, [sender, listener, rest], topology="decentralized")
    events = [(r["t"], r["spec"], r["event"]) for r in of(records, "plan", agent="agent_1")]
    assert events[:4] == [(0, "stay", "committed"), (1, "stay", "replaced"), (1, "go", "committed"),
                          (2, "go", "succeeded")]
    assert of(records, "step")[1]["actions"]["agent_1"] == DOWN


def test_decentralized_delivers_at_most_n_messages_per_step(open_env):
    many = tuple(say(f"m{k}", 1) for k in range(3))
    shouts = [ScriptedAgent([Decision(plan=plan("idle", "idle(20)"), messages=many)]) for _ in range(2)]
    listener = ScriptedAgent([Decision(plan=plan("stay", "idle(20)"))])
    _, records = play(open_env, [shouts[0], listener, shouts[1]], topology="decentralized")
    assert len(of(records, "message", t=0)) == 6
    # all three decide at once: agent_1 hears nothing while it plans; when the phase ends,
    # three messages (the cap) reach it in W and interrupt it; the other three wait for t=1
    assert len(listener.contexts[0].inbox) == 0
    assert stages(records, "agent_1")[:6] == [(0, "R"), (0, "W"), (0, "I"), (0, "W"), (0, "X"), (1, "I")]
    interrupt = [c for c in listener.contexts if c.purpose == Purpose.INTERRUPT]
    assert [(c.t, len(c.inbox)) for c in interrupt] == [(0, 3), (1, 3)]


def test_debate_speakers_go_in_id_order_and_the_last_says_nothing(open_env):
    def speaker(i):
        def script(ctx):
            later = sorted(ctx.topology.allowed_recipients)
            messages = (say(f"proposal of {i}", *later),) if ctx.topology.may_send else ()
            return Decision(plan=plan("rest", "idle(20)"), messages=messages)
        return ScriptedAgent(script)

    agents = [speaker(i) for i in range(3)]
    _, records = play(open_env, agents, topology="debate")
    messages = of(records, "message")
    assert [(m["sender"], m["recipients"]) for m in messages] == [("agent_0", ["agent_1", "agent_2"]),
                                                                   ("agent_1", ["agent_2"])]
    # each proposal is the speaker's committed plan, then its own words
    assert [m.content for m in agents[2].contexts[0].inbox] == ["Proposal: rest: idle(20)\nproposal of 0",
                                                                "Proposal: rest: idle(20)\nproposal of 1"]
    assert agents[2].contexts[0].topology.may_send is False
    # records come in speaking order: each speaker commits, then its proposal goes out
    order = [(r["type"], r.get("agent") or r.get("sender")) for r in records if r["type"] in ("message", "plan")]
    assert order[:5] == [("plan", "agent_0"), ("message", "agent_0"), ("plan", "agent_1"), ("message", "agent_1"),
                         ("plan", "agent_2")]


def test_centralized_leader_directs_followers_ack_then_leader_plans(open_env):
    def leader_script(ctx):
        if ctx.purpose == Purpose.MESSAGE:
            return Decision(messages=(say("all push block 0", 1, 2),))
        return Decision(plan=plan("lead", "idle(1)"))

    def follower_script(i):
        def script(ctx):
            ack = (say(f"ack {i}", 0),) if ctx.topology.may_send else ()
            return Decision(plan=plan("follow", "idle(20)"), messages=ack)
        return script

    leader = ScriptedAgent(leader_script)
    followers = [ScriptedAgent(follower_script(i), resume_on_interrupt=False) for i in (1, 2)]
    _, records = play(open_env, [leader, *followers], topology="centralized")
    t0 = [(r["type"], r.get("agent") or r.get("sender"), r.get("event")) for r in records
          if r["type"] in ("message", "plan") and r["t"] == 0]
    assert t0 == [("message", "agent_0", None), ("message", "agent_1", None), ("plan", "agent_1", "committed"),
                  ("message", "agent_2", None), ("plan", "agent_2", "committed"), ("plan", "agent_0", "committed")]
    leader_plan = [c for c in leader.contexts if c.purpose == Purpose.PLAN][0]
    assert sorted(m.content for m in leader_plan.inbox) == ["ack 1", "ack 2"]
    # at t=1 the leader's plan ended: its new directive interrupts the executing followers
    assert (1, "I") in stages(records, "agent_1") and (1, "I") in stages(records, "agent_2")
    assert of(records, "plan", agent="agent_1", event="replaced")[0]["t"] == 1
    check_stage_machine(records)


# --- bad decisions and limits -----------------------------------------------------------------


def test_bad_decisions_fall_back_to_idle_and_say_why(open_env):
    bad = [
        Decision(plan=plan("chat", "idle(1)"), messages=(say("hello", 1),)),  # individual: no messages
        Decision(plan=Plan("ghost", tuple(parse_plan("push_block(7, 2)")))),  # block 7 does not exist
        "not a decision",
    ]
    agent = ScriptedAgent(bad + [Decision(plan=plan("rest", "idle(20)"))])
    others = [ScriptedAgent([Decision(plan=plan("rest", "idle(20)"))]) for _ in range(2)]
    result, records = play(open_env, [agent, *others])
    fallbacks = of(records, "plan", agent="agent_0", event="committed", spec="fallback(agent_0)")
    assert len(fallbacks) == 3
    assert "topology allows no message" in fallbacks[0]["note"]
    assert "unknown block 7" in fallbacks[1]["note"]
    assert "not a Decision" in fallbacks[2]["note"]
    assert not of(records, "message")
    assert "refused" in agent.contexts[1].feedback


class Chatty(Agent):
    """Reports one model call per decision; fails at the server when told to."""

    kind = "llm"
    model = "fake-model"

    def __init__(self, server_down=False, sleep=0.0):
        self.server_down, self.sleep = server_down, sleep

    async def decide(self, ctx):
        if self.sleep:
            await asyncio.sleep(self.sleep)
        refused = ctx.calls.permit()
        if refused is not None:
            return Decision(plan=fallback_plan(ctx.agent), fallback=True, note=refused)
        ctx.calls.record(ModelCall(self.model, attempts=3 if self.server_down else 1, latency_s=0.01,
                                   prompt_tokens=10, completion_tokens=5, valid=not self.server_down,
                                   fallback=self.server_down, error="connection refused" if self.server_down else None,
                                   server_failed=self.server_down))
        if self.server_down:
            return Decision(plan=fallback_plan(ctx.agent), fallback=True, note="connection refused")
        return Decision(plan=plan("wait", "idle(1)"))


def test_the_model_call_limit_ends_the_episode(open_env):
    result, records = play(open_env, [Chatty() for _ in range(3)], limits=Limits(max_calls=7))
    assert result.truncated and result.reason == "model call limit (7) reached"
    # hard: calls 1-7 are made (3 per step), the 8th and 9th are refused and fall back
    assert len(of(records, "llm")) == 7 and result.model_calls == 7
    assert [p["spec"] for p in of(records, "plan", t=2, event="committed")] == ["wait", "fallback(agent_1)",
                                                                             "fallback(agent_2)"]
    assert records[-1]["reason"] == "model call limit (7) reached"


def test_a_failing_server_ends_the_episode_instead_of_idling_on(open_env):
    result, records = play(open_env, [Chatty(server_down=True) for _ in range(3)])
    assert result.truncated and result.reason.startswith("model server failing")
    assert "connection refused" in result.reason
    assert all(r["fallback"] and not r["valid"] for r in of(records, "llm"))
    assert result.steps == 0


def test_the_wall_clock_limit_ends_a_slow_episode(open_env):
    result, records = play(open_env, [Chatty(sleep=0.2) for _ in range(3)], limits=Limits(max_wall_s=0.5))
    assert result.truncated and result.reason == "wall-clock limit (0.5 s) reached"
    assert result.steps < 12


class Broken(Agent):
    kind = "scripted"

    def __init__(self, error):
        self.error = error

    async def decide(self, ctx):
        if ctx.t >= 2:
            raise self.error
        return Decision(plan=plan("one", "idle(1)"))


def test_a_crashing_agent_leaves_a_valid_trace_and_the_run_goes_on(open_env, tmp_path):
    broken = Episode(open_env, [Broken(RuntimeError("boom")), *team_planner_team(open_env)[1:]], seed=0,
                     trace=tmp_path / "broken.jsonl")
    fine = Episode(open_env, heuristic_team(open_env), seed=0, trace=tmp_path / "fine.jsonl")
    results = run_episodes([broken, fine], concurrency=2)
    assert results[0].error == "RuntimeError: boom" and results[0].steps == 2
    assert results[1].error is None
    end = read_trace(tmp_path / "broken.jsonl")[-1]
    assert end["truncated"] and end["reason"] == "error: RuntimeError: boom" and end["steps"] == 2


CTRL_C_SCRIPT = """
import asyncio, sys
import cube_jax
from cube_jax.agents import Agent, Decision, Plan
from cube_jax.runtime import run_episode
from cube_jax.symbolic import parse_plan

class Slow(Agent):
    kind = "scripted"
    async def decide(self, ctx):
        if ctx.t >= 2:
            print("waiting", flush=True)
            await asyncio.sleep(60)
        return Decision(plan=Plan("one", tuple(parse_plan("idle(1)"))))

env = cube_jax.make("easy")
run_episode(env, [Slow(), Slow()], seed=0, trace=sys.argv[1])
"""


def test_ctrl_c_still_ends_the_trace(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    path = tmp_path / "stopped.jsonl"
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    process = interrupts.start([sys.executable, "-c", CTRL_C_SCRIPT, str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout.readline().strip() == "waiting"  # the episode is two steps in, awaiting a decision
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode != 0 and "KeyboardInterrupt" in err
    end = read_trace(path)[-1]
    # asyncio turns Ctrl-C into a cancellation of the running episode
    assert end["reason"] == "interrupted (cancelled)" and end["truncated"] and end["steps"] == 2


# --- constraint counts and mixed teams ---------------------------------------------------------

PUSH = cube_jax.Scenario.from_ascii("""
........
1aa.....
0aa.....
........
2.......
........
........
........
""", max_steps=20, name="push")


def test_step_tasks_count_the_face_constraints():
    env = cube_jax.make(scenario=PUSH)
    pushers = [ScriptedAgent([Decision(plan=plan("push_block(block#0)", "push_block(0, 1)"))]) for _ in range(2)]
    walker = ScriptedAgent([Decision(plan=plan("rest", "idle(20)"))])
    _, records = play(env, [*pushers, walker])
    first = of(records, "step")[0]
    assert first["actions"] == {"agent_0": RIGHT, "agent_1": RIGHT, "agent_2": STAY}
    assert first["tasks"] == {"0:left": {"required": 2, "spatial": 2, "temporal": 2, "participation": 2, "joint": 2}}
    assert first["blocks"][0] == [1, 2, 2, True]


def test_one_pusher_alone_is_temporal_but_not_joint_enough():
    env = cube_jax.make(scenario=PUSH)
    agents = [ScriptedAgent([Decision(plan=plan("push_block(block#0)", "push_block(0, 1)"))]),
              ScriptedAgent([Decision(plan=plan("rest", "idle(20)"))]),
              ScriptedAgent([Decision(plan=plan("rest", "idle(20)"))])]
    _, records = play(env, agents)
    tasks = of(records, "step")[0]["tasks"]["0:left"]
    assert (tasks["spatial"], tasks["temporal"], tasks["joint"], tasks["required"]) == (2, 1, 1, 2)


def test_a_policy_agent_acts_with_primitives_beside_planners(hard):
    agents = heuristic_team(hard)[:2] + policy_agents(RandomPolicy(3), 1, kind="random")
    result, records = play(hard, agents)
    assert records[0]["agents"]["agent_2"] == {"kind": "random", "model": None, "policy": "random"}
    policy_plans = of(records, "plan", agent="agent_2")
    assert [(p["t"], p["spec"], p["event"]) for p in policy_plans] == [
        (0, "policy(random)", "committed"), (result.steps, "policy(random)", "unfinished")]
    assert stages(records, "agent_2") == [(0, "R"), (0, "W"), (0, "X")]
    assert all(s["symbolic"]["agent_2"] is None for s in of(records, "step"))
    actions = [s["actions"]["agent_2"] for s in of(records, "step")]
    assert len(set(actions)) > 1  # random, not a constant


def test_episode_arguments_are_checked(open_env):
    with pytest.raises(ValueError, match="2 agents given for a world of 3"):
        Episode(open_env, heuristic_team(open_env)[:2], seed=0)
    with pytest.raises(ValueError, match="seed"):
        Episode(open_env, heuristic_team(open_env), seed=2**32)
    with pytest.raises(ValueError, match="unknown 'star'"):
        Episode(open_env, heuristic_team(open_env), seed=0, topology="star")
    with pytest.raises(ValueError, match="max_calls"):
        Limits(max_calls=0)


def test_a_key_press_plan_pushes_as_a_primitive():
    env = cube_jax.make(scenario=PUSH)
    key = Plan("key: right", tuple(parse_plan("move(right, 1)")), primitive=True)
    agents = [ScriptedAgent([Decision(plan=key)]),
              ScriptedAgent([Decision(plan=plan("push_block(block#0)", "push_block(0, 1)"))]),
              ScriptedAgent([Decision(plan=plan("rest", "idle(20)"))])]
    _, records = play(env, agents)
    first = of(records, "step")[0]
    # the key press shows no symbolic action, and its push counts like a primitive agent's
    assert first["symbolic"]["agent_0"] is None and first["symbolic"]["agent_1"] == "push_block(0, 1)"
    assert first["tasks"]["0:left"] == {"required": 2, "spatial": 2, "temporal": 2, "participation": 2, "joint": 2}
    assert first["blocks"][0] == [1, 2, 2, True]
