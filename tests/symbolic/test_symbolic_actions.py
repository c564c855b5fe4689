"""Plan parsing: text and JSON plans, and the errors that name the action and argument."""
from __future__ import annotations

import json

import pytest

from cube_jax.symbolic import PlanError, SymbolicAction, check_plan, make_action, parse_plan, parse_plan_json, plan_to_text


def test_text_plan_of_the_issue():
    plan = parse_plan("move_to_block(2, left); rendezvous(2, left, 2, 10); push_block(2, 5)")
    assert [(a.name, a.args) for a in plan] == [
        ("move_to_block", {"block": 2, "face": "left"}),
        ("rendezvous", {"block": 2, "face": "left", "count": 2, "timeout": 10}),
        ("push_block", {"block": 2, "steps": 5}),
    ]


def test_every_action_and_emcoop_spellings():
    text = """
        move(up, 3)
        idle(2); wait(4)
        push(block_id=1, steps=2)
        yield_block(0, 1); wait_agents(3, 7)
    """
    plan = parse_plan(text)
    assert [str(a) for a in plan] == [
        "move(up, 3)",
        "idle(2)",
        "idle(4)",
        "push_block(1, 2)",
        "yield_block(0, 1)",
        "wait_agents(3, 7)",
    ]
    assert parse_plan(plan_to_text(plan)) == plan


def test_keyword_arguments_and_case_of_faces():
    assert parse_plan("rendezvous(block=1, face=LEFT, count=2, timeout=0)")[0].args == {
        "block": 1,
        "face": "left",
        "count": 2,
        "timeout": 0,
    }


@pytest.mark.parametrize(
    "text, index, argument, words",
    [
        ("move_to_block(0, left); jump(3)", 1, None, "unknown action 'jump'"),
        ("idle(1); push_block(2)", 1, None, "takes 2 argument(s), got 1"),
        ("move_to_block(0, diagonal)", 0, "face", "face must be one of up, down, left, right"),
        ("move(north, 2)", 0, "direction", "direction must be one of"),
        ("idle(1); idle(2); push_block(1, -3)", 2, "steps", "steps must be >= 0, got -3"),
        ("push_block(x, 2)", 0, "block", "block must be an integer, got 'x'"),
        ("push_block(-1, 2)", 0, "block", "a block id must be >= 0"),
        ("rendezvous(0, left, 0, 5)", 0, "count", "count must be >= 1"),
        ("wait_agents(2, -1)", 0, "timeout", "timeout must be >= 0"),
        ("move_to_block(block=0, side=left)", 0, "side", "has no argument 'side'"),
        ("push_block 2 5", 0, None, "expected name(arg, ...)"),
    ],
)
def test_plan_check_errors_name_action_and_argument(text, index, argument, words):
    with pytest.raises(PlanError) as err:
        parse_plan(text)
    e = err.value
    assert (e.kind, e.action_index, e.argument) == ("plan_check", index, argument)
    assert words in e.message
    assert f"action {index}" in str(e)


def test_empty_plan_is_an_error():
    with pytest.raises(PlanError, match="empty"):
        parse_plan(" ; \n")


def test_json_plan_forms():
    doc = {
        "plan": [
            {"action": "move_to_block", "args": {"block": 2, "face": "left"}},
            {"action": "push", "args": [2, 5]},
            {"action": "idle", "args": {"steps": 1}},
        ]
    }
    expected = parse_plan("move_to_block(2, left); push_block(2, 5); idle(1)")
    assert parse_plan_json(doc) == expected
    assert parse_plan_json(json.dumps(doc)) == expected
    assert parse_plan_json(doc["plan"]) == expected
    assert parse_plan_json(json.dumps([a.to_json() for a in expected])) == expected


@pytest.mark.parametrize(
    "obj, index, argument, words",
    [
        ('{"plan": [', None, None, "not valid JSON"),
        ({"plan": []}, None, None, "at least 1"),
        ({"plan": [{"args": [1]}]}, 0, None, "plan.0.action"),
        ({"plan": [{"action": "idle", "args": [1], "when": 3}]}, 0, None, "plan.0.when"),
        ({"plan": [{"action": "idle", "args": "3"}]}, 0, None, "plan.0.args"),
        ([{"action": "idle", "args": [1]}, {"action": "push_block", "args": {"block": 1, "steps": [2]}}], 1, "steps", "steps must be an integer, got [2]"),
        ([{"action": "idle", "args": [1]}, {"action": "fly", "args": []}], 1, None, "unknown action 'fly'"),
        ([{"action": "move", "args": {"direction": "up", "steps": -2}}], 0, "steps", "steps must be >= 0"),
    ],
)
def test_json_errors(obj, index, argument, words):
    with pytest.raises(PlanError) as err:
        parse_plan_json(obj)
    assert (err.value.kind, err.value.action_index, err.value.argument) == ("plan_check", index, argument)
    assert words in err.value.message


def test_check_plan_against_a_world():
    plan = parse_plan("move_to_block(1, left); push_block(3, 2)")
    with pytest.raises(PlanError) as err:
        check_plan(plan, num_agents=2, block_alive=[True, True, True])
    assert (err.value.action_index, err.value.argument) == (1, "block")
    assert "unknown block 3; blocks are 0..2" in err.value.message
    with pytest.raises(PlanError, match="block 1 is already delivered") as err:
        check_plan(plan[:1], num_agents=2, block_alive=[True, False])
    assert err.value.kind == "plan_check"
    with pytest.raises(PlanError, match="count 3 exceeds the 2 agents") as err:
        check_plan(parse_plan("wait_agents(3, 1)"), num_agents=2, block_alive=[True])
    assert err.value.argument == "count"


def test_actions_are_values():
    a = make_action("push", block_id=1, steps=2)
    assert a == SymbolicAction("push_block", {"block": 1, "steps": 2})
    assert len({a, make_action("push_block", 1, 2)}) == 1
    with pytest.raises(PlanError, match="unknown action 'teleport'"):
        SymbolicAction("teleport", {})
