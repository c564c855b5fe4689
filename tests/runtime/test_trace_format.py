"""The trace format of LLM.md section 5, declared once: the writer, the validator, the
analytics reader and the synthetic traces all follow the record types of cube_jax.trace."""
from __future__ import annotations

import doctest
import io
import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cube_jax.trace.records
import cube_jax.trace.validate
import cube_jax.trace.writer
from cube_jax import cli
from cube_jax.analytics.synthetic import random_trace
from cube_jax.analytics.traces import decode_records, load_trace, trace_paths
from cube_jax.trace import (
    RECORD_CLASSES,
    RECORD_TYPES,
    StageRecord,
    TraceError,
    TraceWriter,
    dumps,
    read_trace,
    record_views,
    validate_trace,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write_every_type(writer: TraceWriter, clock: Clock) -> list:
    """One episode of two agents with a record of every type, as the runtime writes it."""
    names = ["agent_0", "agent_1"]
    written = [writer.write("episode", 0, schema=1, env={"n": 2}, seed=7, topology="negotiation",
                            agents={a: {"kind": "llm", "model": "m"} for a in names},
                            layout={"t": 0, "agents": [[0, 1], [1, 1]], "blocks": [[3, 3, 2, True]]})]
    written.append(writer.write("stage", 0, agent="agent_0", stage="R"))
    clock.now += 0.5
    written.append(writer.write("llm", 0, agent="agent_0", purpose="proposal", model="m", attempts=1, latency_s=0.5,
                                prompt_tokens=120, completion_tokens=12, valid=True, fallback=False))
    written.append(writer.write("message", 0, id=0, sender="agent_0", recipients=["agent_1"], content="block 0",
                                kind="proposal"))
    written.append(writer.write("llm", 0, agent="agent_1", purpose="commitment", model="m", attempts=2,
                                latency_s=0.25, prompt_tokens=130, completion_tokens=9, valid=False, fallback=True,
                                error="server error 503"))
    written.append(writer.write("message", 0, id=1, sender="agent_1", recipients=["agent_0"], content="none",
                                kind="commitment"))
    written.append(writer.write("negotiation", 0, room=names, proposals={"agent_0": 0, "agent_1": None},
                                commitments={"agent_0": 0, "agent_1": None}, team_sizes={"0": 2},
                                allocation={}, quorum_failed=[0]))
    written.append(writer.write("plan", 0, agent="agent_0", plan_id=0, spec="quorum_wait(block#0)",
                                actions=["wait_agents(2, 3)"], event="committed"))
    written.append(writer.write("plan", 0, agent="agent_1", plan_id=1, spec="fallback(agent_1)", actions=["idle(1)"],
                                event="committed", fallback=True))
    written.append(writer.write("step", 0, actions={"agent_0": 0, "agent_1": 0},
                                symbolic={"agent_0": "wait_agents(2, 3)", "agent_1": "idle(1)"}, reward=[-0.01, -0.01],
                                agents=[[0, 1], [1, 1]], blocks=[[3, 3, 2, True]], delivered=[],
                                tasks={"0:left": {"required": 2, "spatial": 1, "temporal": 0, "participation": 1,
                                                  "joint": 0}}))
    written.append(writer.write("plan", 1, agent="agent_0", plan_id=0, spec="quorum_wait(block#0)",
                                actions=["wait_agents(2, 3)"], event="failed", reason="timeout"))
    written.append(writer.write("notice", 1, agent="agent_1", text="reply mode schema asked; the server refused "
                                                                   "schema (http_400: ...); replies use mode tools"))
    written.append(writer.end(1, terminated=False, truncated=True, reason="max_steps", steps=1, blocks_delivered=0,
                              blocks_total=1, weight_delivered=0, weight_total=2))
    return written


def test_docstring_examples_run():
    for module in (cube_jax.trace.records, cube_jax.trace.validate, cube_jax.trace.writer):
        assert doctest.testmod(module).failed == 0


def test_every_record_type_round_trips_writer_validator_reader():
    buffer, clock = io.StringIO(), Clock()
    with TraceWriter(buffer, clock=clock) as writer:
        written = write_every_type(writer, clock)
    assert sorted({r["type"] for r in written}) == sorted(RECORD_TYPES)
    text = buffer.getvalue()
    assert validate_trace(io.StringIO(text)) is None
    assert read_trace(io.StringIO(text)) == written == [json.loads(line) for line in text.splitlines()]
    assert load_trace(io.StringIO(text)) == written
    # the analytics' views decode every line with the same values
    views = decode_records(text.encode())
    assert [type(v).__struct_config__.tag for v in views] == [r["type"] for r in written]
    negotiation = next(v for v in views if type(v).__struct_config__.tag == "negotiation")
    assert (negotiation.room, negotiation.commitments, negotiation.quorum_failed) == (
        ["agent_0", "agent_1"], {"agent_0": 0, "agent_1": None}, [0])
    assert [r["wall"] for r in written][:3] == [0.0, 0.0, 0.5]


def test_keys_beyond_the_format_are_accepted_and_kept():
    buffer = io.StringIO()
    with TraceWriter(buffer, clock=Clock()) as writer:
        writer.write("episode", 0, schema=1, env={}, seed=0, topology="individual",
                     agents={"agent_0": {"kind": "heuristic", "model": None, "note": "greedy"}},
                     layout={"t": 0, "agents": [[0, 0]], "blocks": []}, host="lab-3")
        writer.write("stage", 0, agent="agent_0", stage="R", reason_text="start")
    records = read_trace(io.StringIO(buffer.getvalue()))
    assert records[0]["host"] == "lab-3" and records[0]["agents"]["agent_0"]["note"] == "greedy"
    assert records[1]["reason_text"] == "start" and records[2]["type"] == "end"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 6), steps=st.integers(1, 30),
       topology=st.sampled_from(["negotiation", "decentralized", "individual", "centralized"]),
       kind=st.sampled_from(["llm", "heuristic"]))
def test_synthetic_traces_validate(seed, n, steps, topology, kind):
    records = random_trace(seed, n=n, steps=steps, topology=topology, kind=kind)
    assert validate_trace(io.StringIO(dumps(records))) is None


def test_synthetic_negotiation_traces_carry_rooms_and_message_kinds():
    records = random_trace(4, n=4, steps=30, topology="negotiation")
    rooms = [r for r in records if r["type"] == "negotiation"]
    kinds = {r.get("kind") for r in records if r["type"] == "message"}
    purposes = {r["purpose"] for r in records if r["type"] == "llm"}
    assert rooms and kinds == {"proposal", "commitment"} and {"proposal", "commitment"} <= purposes
    # a room closes with the allocation of the blocks that reached their quorum, and its members' plans follow
    first = rooms[0]
    after = records[records.index(first) + 1:]
    for name, block in first["allocation"].items():
        plan = next(r for r in after if r["type"] == "plan" and r["agent"] == name)
        assert plan["spec"] in (f"push_block(block#{block})", f"fallback({name})")


def test_a_key_added_to_a_record_type_shows_in_writer_validator_and_reader(monkeypatch):
    class MoodyStageRecord(StageRecord, tag="stage"):
        mood: str

    monkeypatch.setitem(RECORD_CLASSES, "stage", MoodyStageRecord)
    header = dict(schema=1, env={}, seed=0, topology="individual", agents={"agent_0": {"kind": "llm", "model": "m"}},
                  layout={"t": 0, "agents": [[0, 0]], "blocks": []})
    # the writer asks for the new key
    writer = TraceWriter(io.StringIO(), clock=Clock())
    writer.write("episode", 0, **header)
    with pytest.raises(TraceError, match=r"line 2, key 'mood': required key is missing"):
        writer.write("stage", 0, agent="agent_0", stage="R")
    record = writer.write("stage", 0, agent="agent_0", stage="R", mood="calm")
    # the validator checks it
    text = dumps([{"type": "episode", "t": 0, "wall": 0.0, **header}, {**record, "mood": 3}])
    assert str(validate_trace(io.StringIO(text))) == "line 2, key 'mood': Expected `str`, got `int`: 3"
    # and a reader's view can keep it
    view = record_views({"stage": ("mood",)})["stage"]
    assert msgspec.convert(record, view).mood == "calm"


# --- strictness: each rule and its message ----------------------------------------------------------


def good_trace() -> list:
    buffer, clock = io.StringIO(), Clock()
    with TraceWriter(buffer, clock=clock) as writer:
        return write_every_type(writer, clock)


def problem_of(records) -> str:
    return str(validate_trace(io.StringIO(dumps(records) if isinstance(records, list) else records)))


def changed(index: int, **fields) -> list:
    records = good_trace()
    records[index] = {**records[index], **fields}
    return records


def without(index: int, key: str) -> list:
    records = good_trace()
    records[index] = {k: v for k, v in records[index].items() if k != key}
    return records


LINE = {kind: next(i for i, r in enumerate(good_trace()) if r["type"] == kind) for kind in RECORD_TYPES}


@pytest.mark.parametrize("records, message", [
    (lambda: changed(LINE["stage"], wall="soon"), "line 2, key 'wall': Expected `float`, got `str`: \"soon\""),
    (lambda: changed(LINE["stage"], t="0"), "line 2, key 't': Expected `int`, got `str`: \"0\""),
    (lambda: changed(LINE["stage"], t=True), "line 2, key 't': Expected `int`, got `bool`: true"),
    (lambda: changed(LINE["end"], steps=1.0), "line 13, key 'steps': Expected `int`, got `float`: 1.0"),
    (lambda: changed(LINE["llm"], valid=1), "line 3, key 'valid': Expected `bool`, got `int`: 1"),
    (lambda: changed(LINE["stage"], t=-1), "line 2, key 't': Expected `int` >= 0: -1"),
    (lambda: changed(LINE["stage"], stage="Q"), "line 2, key 'stage': Invalid enum value 'Q'"),
    (lambda: changed(LINE["llm"], purpose="chat"), "line 3, key 'purpose': Invalid enum value 'chat'"),
    (lambda: changed(LINE["message"], kind="gossip"), "line 4, key 'kind': Invalid enum value 'gossip'"),
    (lambda: changed(LINE["step"], reward=["a lot", 0.0]), "line 10, key 'reward.0': Expected `float`, got `str`: \"a lot\""),
    (lambda: changed(LINE["step"], agents=[[0, 1], [1, False]]),
     "line 10, key 'agents.1.1': Expected `int`, got `bool`: false"),
    (lambda: changed(LINE["step"], tasks={"0:left": {"required": 2, "spatial": -1, "temporal": 0, "participation": 0,
                                                     "joint": 0}}),
     "line 10, key 'tasks.0:left.spatial': Expected `int` >= 0: -1"),
    (lambda: changed(LINE["step"], tasks={"0:top": {"required": 2, "spatial": 1, "temporal": 0, "participation": 1,
                                                    "joint": 0}}),
     "line 10, key 'tasks': task key '0:top' is not '<block>:<face>' with face up, down, left or right"),
    (lambda: changed(LINE["episode"], agents={"agent_0": {"kind": "llm"}, "agent_1": {"kind": "llm", "model": "m"}}),
     "line 1, key 'agents.agent_0.model': required key is missing"),
    (lambda: changed(LINE["episode"], layout={"t": 0, "agents": [], "blocks": [], "walls": []}),
     "line 1, key 'layout.walls': unknown key"),
    (lambda: changed(LINE["episode"], schema=2), "line 1, key 'schema': Invalid enum value 2"),
    (lambda: without(LINE["stage"], "agent"), "line 2, key 'agent': required key is missing"),
    (lambda: changed(len(good_trace()) - 3, reason=None),
     "line 11, key 'reason': a plan record with event 'failed' needs a non-empty 'reason'"),
    (lambda: changed(LINE["negotiation"], commitments={"agent_0": 0, "agent_5": None}),
     "line 7, key 'commitments': 'agent_5' is not a member of the room"),
    (lambda: changed(LINE["negotiation"], proposals={"agent_0": -1}), "line 7, key 'proposals.agent_0': Expected `int` >= 0: -1"),
    (lambda: changed(LINE["negotiation"], team_sizes={"block0": 2}), "line 7, key 'team_sizes': key 'block0' is not a block id"),
    (lambda: changed(LINE["negotiation"], team_sizes={"0": 0}), "line 7, key 'team_sizes.0': Expected `int` >= 1: 0"),
    (lambda: changed(LINE["negotiation"], room=["agent_0", "agent_0"], proposals={}, commitments={}, allocation={}),
     "line 7, key 'room': names an agent twice"),
    (lambda: changed(LINE["negotiation"], room=["agent_0", "agent_9"], proposals={}, commitments={}, allocation={}),
     "line 7, key 'room': unknown agent 'agent_9'"),
    (lambda: changed(LINE["message"], recipients=["agent_9"]), "line 4, key 'recipients': unknown agent 'agent_9'"),
    (lambda: changed(LINE["negotiation"], wall=0.1), "line 7, key 'wall': wall went back from 0.5 to 0.1"),
    (lambda: changed(LINE["negotiation"], type="haggle"),
     "line 7, key 'type': unknown record type 'haggle'; types are ('episode', 'stage', 'plan', 'message', 'llm', "
     "'notice', 'step', 'negotiation', 'end')"),
    (lambda: changed(LINE["llm"], starved=True), "line 3, key 'starved': a starved reply (no answer at the token "
                                                 "limit) cannot be valid"),
    (lambda: changed(LINE["llm"], reply_mode="json"), "line 3, key 'reply_mode': Invalid enum value 'json'"),
    (lambda: without(LINE["notice"], "text"), "line 12, key 'text': required key is missing"),
    (lambda: good_trace()[1:], "line 1, key 'type': the first record must be 'episode', got 'stage'"),
    (lambda: good_trace()[:-1], "line 12, key 'type': the last record must be 'end'"),
    (lambda: "", "line 1: the trace is empty"),
    (lambda: "[1, 2]\n", "line 1: a record must be a JSON object, got list"),
])
def test_each_strictness_rule_names_line_and_key(records, message):
    assert problem_of(records()) == message


def test_the_writer_keeps_wall_non_decreasing_under_a_clock_that_goes_back():
    backwards = Clock()
    buffer = io.StringIO()
    writer = TraceWriter(buffer, clock=backwards)
    walls = []
    header = good_trace()[0]
    walls.append(writer.write("episode", 0, **{k: v for k, v in header.items() if k not in ("type", "t", "wall")})["wall"])
    for now in (101.0, 100.5, 99.0, 102.0):
        backwards.now = now
        walls.append(writer.write("stage", 0, agent="agent_0", stage="R")["wall"])
    writer.abort("stopped")
    assert walls == [0.0, 1.0, 1.0, 1.0, 2.0]
    assert validate_trace(io.StringIO(buffer.getvalue())) is None


def test_the_writer_refuses_a_record_that_breaks_its_type_and_writes_nothing():
    buffer = io.StringIO()
    writer = TraceWriter(buffer, clock=Clock())
    header = good_trace()[0]
    writer.write("episode", 0, **{k: v for k, v in header.items() if k not in ("type", "t", "wall")})
    with pytest.raises(TraceError, match=r"line 2, key 'latency_s': Expected `float`, got `str`: \"fast\""):
        writer.write("llm", 0, agent="agent_0", purpose="plan", model=None, attempts=1, latency_s="fast",
                     prompt_tokens=1, completion_tokens=1, valid=True, fallback=False)
    with pytest.raises(ValueError, match=r"unknown record type 'chat'"):
        writer.write("chat", 0)
    assert len(buffer.getvalue().splitlines()) == 1


# --- which files are traces ----------------------------------------------------------------------


def test_a_run_folder_yields_its_traces_and_skips_recorded_exchanges(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "exchanges").mkdir(parents=True)
    trace = run / "episode-000000.jsonl"
    trace.write_text(dumps(random_trace(0, n=2, steps=5)))
    exchange = {"schema": 1, "agent": "agent_0", "index": 0, "model": "m", "request_sha256": "0" * 64,
                "schema_name": "plan_reply", "messages": [], "completion": None,
                "error": {"kind": "timeout", "message": "timed out", "attempts": 3, "latency_s": 1.0}}
    exchanges = run / "exchanges" / "episode-000000.jsonl"
    exchanges.write_text(json.dumps(exchange) + "\n")
    (run / "run.json").write_text("{}")
    broken = run / "broken.jsonl"
    broken.write_text('{"type": "stage"}\n')
    prose = run / "notes.jsonl"
    prose.write_text("hello\n")
    assert trace_paths([run]) == [broken, trace, prose]
    # a file named on purpose is taken as it is
    assert trace_paths([exchanges]) == [exchanges]
    out = tmp_path / "metrics.json"
    assert cli.main(["report", str(run), "--json", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "exchanges" not in err and f"left out {broken}" in err and f"left out {prose}" in err
    assert [e["trace"] for e in json.loads(out.read_text())["episodes"]] == [str(trace)]
