"""Failed and replaced plans attributed to the constraint they violated (EmCoop's RQ2), in
``cube-jax report``'s metrics.json."""
from __future__ import annotations

import json

import cube_jax
from cube_jax.analytics.attribution import attribution_summary, attribution_table, plan_failures
from cube_jax.analytics.report import write_metrics_json
from cube_jax.runtime import run_episode
from cube_jax.llm import ModelClient
from cube_jax.llm.agent import LLMAgent
from cube_jax.testing.fake_openai import FakeOpenAI


def plan(t, agent, pid, spec, event, actions=(), reason=None):
    record = {"type": "plan", "t": t, "agent": agent, "plan_id": pid, "spec": spec, "actions": list(actions),
              "event": event}
    if reason:
        record["reason"] = reason
    return record


def step(t, **faces):
    return {"type": "step", "t": t, "tasks": {k.replace("_", ":"): v for k, v in faces.items()}}


def counts(required, spatial, joint):
    return {"required": required, "spatial": spatial, "temporal": joint, "participation": spatial, "joint": joint}


def test_each_failed_or_replaced_plan_names_its_constraint_and_its_window_messages():
    push = ["move_to_block(1, down)", "push_block(1, 4)"]
    records = [
        plan(0, "agent_0", 0, "push_block(block#1)", "committed", push),
        plan(0, "agent_1", 1, "push_block(block#1)", "committed", push),
        plan(0, "agent_2", 2, "fallback(agent_2)", "committed", ["idle(1)"]),
        {"type": "message", "t": 1, "id": 0, "sender": "agent_1", "recipients": ["agent_0"], "content": "go"},
        {"type": "message", "t": 9, "id": 1, "sender": "agent_1", "recipients": ["agent_0"], "content": "late"},
        step(1, **{"1_down": counts(2, 2, 1)}),
        step(2, **{"1_down": counts(2, 2, 0)}),
        plan(3, "agent_0", 0, "push_block(block#1)", "failed", reason="push_block: the block did not move"),
        plan(3, "agent_1", 1, "push_block(block#1)", "replaced"),
        plan(1, "agent_2", 2, "fallback(agent_2)", "failed"),
    ]
    failures = plan_failures(records)
    assert [(f["agent"], f["event"], f["block"], f["face"], f["constraint"]) for f in failures] == [
        ("agent_0", "failed", 1, "down", "temporal"),
        ("agent_1", "replaced", 1, "down", "temporal"),
        ("agent_2", "failed", None, "left", "no_task"),
    ]
    assert failures[0]["messages"] == [{"t": 1, "sender": "agent_1", "recipients": ["agent_0"], "content": "go"}]
    assert failures[0]["reason"] == "push_block: the block did not move"
    summary = attribution_summary([{"plan_failures": failures}])
    assert summary["temporal"] == {"plans": 2, "share": 0.6667, "messages_per_window": 1.0}
    assert summary["spatial"]["plans"] == 0 and summary["no_task"]["plans"] == 1
    table = attribution_table(summary).splitlines()
    assert table[0] == "| constraint violated | failed or replaced plans | share | messages in the window (mean) |"
    assert "| temporal | 2 | 0.67 | 1.00 |" in table


def test_metrics_json_carries_the_attribution_of_a_played_episode(tmp_path):
    env = cube_jax.make("hard")
    # every agent aims at block 0 (weight 3) alone: its rendezvous times out, never enough agents aligned
    lone = json.dumps({"spec": "push_block(block#0)",
                       "plan": "move_to_block(0, left); rendezvous(0, left, 3, 3); push_block(0, 4)"})
    idle = json.dumps({"spec": "idle", "plan": "idle(30)"})
    replies = iter([lone, idle, idle] + [idle] * 100)
    with FakeOpenAI(responder=lambda request: next(replies)) as server:
        client = ModelClient("fake-model", base_url=server.url)
        trace = tmp_path / "episode-000000.jsonl"
        run_episode(env, [LLMAgent(client) for _ in range(3)], seed=0, trace=trace, max_phases=1)
    report = write_metrics_json([trace], tmp_path / "metrics.json")
    doc = json.loads((tmp_path / "metrics.json").read_text())
    (episode,) = doc["episodes"]
    failed = [f for f in episode["plan_failures"] if f["block"] == 0]
    assert failed and failed[0]["constraint"] == "spatial" and "rendezvous" in failed[0]["reason"]
    assert episode["failures_by_constraint"]["spatial"] >= 1
    assert doc["failure_attribution"]["spatial"]["plans"] == episode["failures_by_constraint"]["spatial"]
    assert "| spatial |" in report.attribution_table()
