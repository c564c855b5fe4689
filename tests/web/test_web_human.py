"""The ``human`` agent in the episode loop: keys, typed plans, messages, refusals, leaving."""
from __future__ import annotations

import asyncio
import doctest

import pytest

import cube_jax
from cube_jax.agents import Agent, Decision, OutgoingMessage, Plan, ScriptedAgent
from cube_jax.runtime import Episode, Limits
from cube_jax.trace import validate_trace
from cube_jax.trace import read_trace
from cube_jax.symbolic import parse_plan
from cube_jax.web import human as human_module
from cube_jax.web.human import HumanAgent, TurnListener, turn_info
from cube_jax.web.protocol import Key, OutgoingText, PlanInput, Resume, Say


@pytest.fixture(scope="module")
def easy():
    return cube_jax.make("easy")  # agent_0 at (2, 0), agent_1 at (5, 0); blocks at (1, 2), (3, 4), (6, 2)


def idle(steps: int = 1, messages=()) -> Decision:
    return Decision(plan=Plan("idle", tuple(parse_plan(f"idle({steps})"))), messages=tuple(messages))


class Log(TurnListener):
    def __init__(self):
        self.opened, self.refusals, self.taken = [], [], []

    def turn_opened(self, agent, ctx):
        self.opened.append(turn_info(ctx))

    def refused(self, agent, item, error):
        self.refusals.append(str(error))

    def accepted(self, agent, item, decision):
        self.taken.append(item)


def key(k: str, agent: str = "agent_0") -> Key:
    return Key(type="key", agent=agent, key=k)


def plan(text, spec=None, messages=(), agent: str = "agent_0") -> PlanInput:
    return PlanInput(type="plan", agent=agent, plan=text, spec=spec,
                     messages=[OutgoingText(to=list(to), content=c) for to, c in messages])


async def turn_of(agent: HumanAgent, task: asyncio.Task):
    while agent.turn is None:
        if task.done():
            return None
        await asyncio.sleep(0.002)
    return agent.turn


def play(env, agents, person, tmp_path, inputs, topology="individual", max_steps=3, name="trace.jsonl"):
    """Runs an episode; ``inputs(turn)`` gives the person's inputs for each open turn
    (a list: all are submitted in order, the refused ones first)."""
    path = tmp_path / name
    records = []

    async def run():
        episode = Episode(env, agents, seed=0, topology=topology, limits=Limits(max_steps=max_steps), trace=path,
                          on_record=records.append)
        task = asyncio.create_task(episode.run())
        while True:
            ctx = await turn_of(person, task)
            if ctx is None:
                return await task
            for item in inputs(ctx):
                while person.turn is None and not task.done():  # the previous input is being checked
                    await asyncio.sleep(0.002)
                if task.done():
                    break
                person.submit(item)
            while person.turn is ctx and not task.done():
                await asyncio.sleep(0.002)

    result = asyncio.run(run())
    assert validate_trace(path) is None
    return result, read_trace(path)


def test_docstring_example_runs():
    assert doctest.testmod(human_module).failed == 0


def test_keys_move_the_persons_agent_one_step_each(easy, tmp_path):
    person = HumanAgent()
    keys = iter(["right", "right", "down"])
    result, records = play(easy, [person, ScriptedAgent([idle()])], person, tmp_path, lambda ctx: [key(next(keys))])
    assert result.steps == 3 and result.reason == "max_steps (3) reached"
    assert records[0]["agents"]["agent_0"] == {"kind": "human", "model": None}
    steps = [r for r in records if r["type"] == "step"]
    assert [s["agents"][0] for s in steps] == [[2, 1], [2, 2], [3, 2]]
    assert [s["actions"]["agent_0"] for s in steps] == [4, 4, 2]
    committed = [r for r in records if r["type"] == "plan" and r["agent"] == "agent_0" and r["event"] == "committed"]
    assert [(p["spec"], p["actions"]) for p in committed] == [
        ("key: right", ["move(right, 1)"]), ("key: right", ["move(right, 1)"]), ("key: down", ["move(down, 1)"])]
    assert all("note" not in p for p in committed)  # no fallback: every decision was the person's


def test_bad_inputs_are_refused_with_the_reason_and_the_turn_stays_open(easy, tmp_path):
    log = Log()
    person = HumanAgent(log)
    first = [key("left"), plan("push_block(9, 3)"), plan("fly(2)"), plan("[{\"action\": \"idle\"}]"),
             Resume(type="resume", agent="agent_0"), Say(type="say", agent="agent_0", messages=[
                 OutgoingText(to=["agent_1"], content="hi")]), plan("move(right, 2)")]
    turns = iter([first, [key("stay")]])
    result, records = play(easy, [person, ScriptedAgent([idle()])], person, tmp_path, lambda ctx: next(turns),
                           max_steps=2)
    assert len(log.refusals) == 6
    wall, unknown_block, syntax, json_args, resume, say = log.refusals
    assert "agent_0 at (2, 0) cannot move left: that is the wall" in wall
    assert "block 9" in unknown_block and "argument 'block'" in unknown_block
    assert "fly" in syntax
    assert "idle" in json_args and "steps" in json_args
    assert "no interrupted plan to resume" in resume
    assert "must commit a plan now" in say
    committed = [r for r in records if r["type"] == "plan" and r["event"] == "committed" and r["agent"] == "agent_0"]
    assert committed[0]["spec"] == "move(right, 2)" and committed[0]["actions"] == ["move(right, 2)"]
    assert [r["agents"][0] for r in records if r["type"] == "step"] == [[2, 1], [2, 2]]
    assert result.steps == 2


def test_messages_only_where_the_topology_allows(easy, tmp_path):
    log = Log()
    person = HumanAgent(log)
    talk = plan("idle(1)", messages=[(["all"], "I hold here")])
    _, records = play(easy, [person, ScriptedAgent([idle()])], person, tmp_path, lambda ctx: [talk, key("stay")],
                      max_steps=1, name="individual.jsonl")
    assert log.refusals == ["plan_check: argument 'messages': the individual topology lets agent_0 send no message now"]
    assert not [r for r in records if r["type"] == "message"]

    log = Log()
    person = HumanAgent(log)
    too_many = plan("idle(1)", messages=[(["agent_1"], "a"), (["agent_1"], "b"), (["agent_1"], "c")])
    nobody = plan("idle(1)", messages=[(["agent_7"], "who?")])
    _, records = play(easy, [person, ScriptedAgent([idle()])], person, tmp_path,
                      lambda ctx: [too_many, nobody, talk], topology="decentralized", max_steps=1,
                      name="decentralized.jsonl")
    assert "3 messages exceed the budget of 2" in log.refusals[0]
    assert "there is no agent_7 in a team of 2" in log.refusals[1]
    assert log.opened[0]["may_send"] is True and log.opened[0]["recipients"] == ["agent_1"]
    sent = [r for r in records if r["type"] == "message"]
    assert [(m["sender"], m["recipients"], m["content"]) for m in sent] == [("agent_0", ["agent_1"], "I hold here")]


def test_an_interrupted_person_resumes_and_sees_the_message(easy, tmp_path):
    log = Log()
    person = HumanAgent(log)
    # agent_1 greets agent_0 at every decision; agent_0 commits a long idle and resumes on interrupts
    greeter = ScriptedAgent([idle(1, [OutgoingMessage((0,), "hello from agent_1")])])

    def inputs(ctx):
        if ctx.purpose.value == "interrupt":
            return [key("up"), Resume(type="resume", agent="agent_0")] if len(log.opened) == 2 else \
                [Resume(type="resume", agent="agent_0")]
        return [plan("idle(5)", spec="wait for the others")]

    _, records = play(easy, [person, greeter], person, tmp_path, inputs, topology="decentralized", max_steps=2)
    interrupt = log.opened[1]
    assert interrupt["purpose"] == "interrupt" and interrupt["inbox"][0]["content"] == "hello from agent_1"
    assert interrupt["plan"] == "wait for the others: idle(5)"
    events = [(r["event"], r["spec"]) for r in records if r["type"] == "plan" and r["agent"] == "agent_0"]
    # the first interrupt: a key press replans (the plan is replaced), the second one resumes
    assert events[:4] == [("committed", "wait for the others"), ("replaced", "wait for the others"),
                          ("committed", "key: up"), ("succeeded", "key: up")]
    assert ("resumed", "wait for the others") in events


def test_a_person_leading_a_centralized_team_sends_the_directive(easy, tmp_path):
    log = Log()
    person = HumanAgent(log)

    def inputs(ctx):
        if ctx.purpose.value == "message":
            return [key("right"), Say(type="say", agent="agent_0",
                                      messages=[OutgoingText(to=["all"], content="agent_1: push block 1")])]
        return [key("right")]

    follower = ScriptedAgent([idle()])
    _, records = play(easy, [person, follower], person, tmp_path, inputs, topology="centralized", max_steps=1)
    assert "carries messages only" in log.refusals[0]
    directive = [r for r in records if r["type"] == "message"][0]
    assert directive["sender"] == "agent_0" and directive["recipients"] == ["agent_1"]
    assert directive["content"] == "agent_1: push block 1"


class Waiting(Agent):
    """An agent whose decision never comes (a model that does not answer)."""

    kind = "scripted"

    def __init__(self):
        self.cancelled = False

    async def decide(self, ctx):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def test_a_person_who_leaves_ends_the_episode_as_truncated_with_the_reason(easy, tmp_path):
    person = HumanAgent()
    other = Waiting()
    path = tmp_path / "left.jsonl"

    async def run():
        episode = Episode(easy, [person, other], seed=0, trace=path)
        task = asyncio.create_task(episode.run())
        await turn_of(person, task)
        person.leave("the person at agent_0 left")
        result = await task
        await asyncio.sleep(0)
        return result

    result = asyncio.run(run())
    assert (result.truncated, result.terminated, result.reason) == (True, False, "the person at agent_0 left")
    assert other.cancelled  # the teammate's pending decision was dropped, not left running
    assert validate_trace(path) is None
    end = read_trace(path)[-1]
    assert end["type"] == "end" and end["reason"] == "the person at agent_0 left" and end["truncated"] is True
    assert person.submit(key("up")) == "the episode of agent_0 is over: the person at agent_0 left"
