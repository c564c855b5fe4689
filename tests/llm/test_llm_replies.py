"""Reply formats, tolerant extraction, and the syntactic and semantic checks of replies."""
import doctest
import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cube_jax.llm.replies as replies
import cube_jax.llm.reply_formats as reply_formats
from cube_jax.llm import (
    MAX_NESTING,
    MAX_REPLY_CHARS,
    InterruptReply,
    MessageReply,
    PlanReply,
    ReplyContext,
    ReplyMessage,
    error_feedback,
    extract_json,
    parse_reply,
    reply_example,
    reply_schema,
)
from cube_jax.symbolic import FACES, PlanError, make_action, parse_plan

# Three agents; block 2 of three is delivered; agent 0 may message agents 1 and 2, twice.
CONTEXT = ReplyContext(num_agents=3, block_alive=(True, True, False), agent=0,
                       allowed_recipients=frozenset({1, 2}), message_budget=2)
SILENT = ReplyContext(num_agents=3, block_alive=(True, True, False), agent=0)
PLAN_TEXT = "move_to_block(1, left); rendezvous(1, left, 2, 10); push_block(1, 5)"
PLAN = tuple(parse_plan(PLAN_TEXT))


def plan_reply(**fields):
    return json.dumps({"spec": "push_block(block#1)", "plan": PLAN_TEXT, **fields})


def problem(text, purpose="plan", context=CONTEXT):
    with pytest.raises(PlanError) as info:
        parse_reply(text, purpose, context)
    assert info.value.kind == "plan_check"
    return info.value


def test_docstring_examples_run():
    assert doctest.testmod(replies).failed == 0
    assert doctest.testmod(reply_formats).failed == 0


# --- extract_json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"spec": "s", "plan": "idle(1)"}',
        '  \n{"spec": "s", "plan": "idle(1)"}\n',
        'Here is my answer:\n```json\n{"spec": "s", "plan": "idle(1)"}\n```\nGood luck.',
        '```\n{"spec": "s", "plan": "idle(1)"}\n```',
        'I will push. {"spec": "s", "plan": "idle(1)"} That is all.',
        '{"spec": "s", "plan": "idle(1)",}',
        '<think>maybe {"spec": "wrong", "plan": "x"} or not</think>{"spec": "s", "plan": "idle(1)"}',
        'Options like {braces} appear first, then {"spec": "s", "plan": "idle(1)"}',
    ],
    ids=["pure", "whitespace", "json-fence", "bare-fence", "prose", "trailing-comma", "think", "stray-braces"],
)
def test_extract_json_finds_the_object(text):
    assert extract_json(text, keys=("spec",)) == {"spec": "s", "plan": "idle(1)"}


def test_extract_json_prefers_an_object_with_the_expected_keys():
    text = 'Example action: {"action": "idle", "args": [1]}. My reply: {"decision": "resume"}'
    assert extract_json(text, keys=("decision",)) == {"decision": "resume"}
    assert extract_json(text) == {"action": "idle", "args": [1]}


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the reply is empty; answer with one JSON object"),
        ("<think>all thought, no answer</think>", "the reply is empty; answer with one JSON object"),
        ("I cannot decide.", "no JSON object found in the reply: 'I cannot decide.'"),
        ('{"spec": "s", "plan": ', "no JSON object found in the reply: '{\"spec\": \"s\", \"plan\":'"),
        ("[1, 2, 3]", "the reply must be a JSON object {...}, not a JSON array: '[1, 2, 3]'"),
        ('"just a string"', "the reply must be a JSON object {...}, not a JSON string: '\"just a string\"'"),
        ("x" * (MAX_REPLY_CHARS + 1), f"the reply has {MAX_REPLY_CHARS + 1} characters; at most {MAX_REPLY_CHARS} are read"),
        ("[" * 40_000 + "]" * 20_000, f"the reply nests brackets more than {MAX_NESTING} deep"),
        ('{"a": ' * 33 + "1" + "}" * 33, f"the reply nests brackets more than {MAX_NESTING} deep"),
    ],
    ids=["empty", "only-thinking", "prose", "truncated", "array", "string", "too-long", "deep-lists", "deep-objects"],
)
def test_extract_json_refuses_with_a_clear_error(text, message):
    with pytest.raises(PlanError) as info:
        extract_json(text)
    assert info.value.message == message
    assert (info.value.action_index, info.value.argument) == (None, None)


def test_extract_json_accepts_nesting_up_to_the_limit():
    text = '{"a": ' * (MAX_NESTING - 1) + "{}" + "}" * (MAX_NESTING - 1)
    assert extract_json(text) is not None


def test_brackets_inside_strings_do_not_count_as_nesting():
    assert extract_json(json.dumps({"reasoning": "[" * 100, "spec": "s"})) == {"reasoning": "[" * 100, "spec": "s"}


# --- plan replies --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plan",
    [
        PLAN_TEXT,
        "move_to_block(1, left)\nrendezvous(1, left, 2, 10)\npush_block(1, 5)",
        [
            {"action": "move_to_block", "args": {"block": 1, "face": "left"}},
            {"action": "rendezvous", "args": [1, "left", 2, 10]},
            {"action": "push", "args": {"block_id": 1, "num_steps": 5}},
        ],
        ["move_to_block(1, left)", "rendezvous(1, left, 2, 10)", "push_block(1, 5)"],
        ["move_to_block(1, left)", {"action": "rendezvous", "args": [1, "LEFT", 2, 10]}, "push_block(block=1, steps=5)"],
        json.dumps([{"action": "move_to_block", "args": [1, "left"]}, "rendezvous(1, left, 2, 10)", "push_block(1, 5)"]),
    ],
    ids=["text", "lines", "json", "text-list", "mixed-list", "json-in-a-string"],
)
def test_plan_reply_in_every_accepted_form(plan):
    reply = parse_reply(json.dumps({"reasoning": "block 1 needs two", "spec": " push_block(block#1) ", "plan": plan}), "plan", CONTEXT)
    assert reply == PlanReply("push_block(block#1)", PLAN, (), "block 1 needs two")


def test_plan_reply_messages_are_normalised():
    messages = [
        {"to": ["agent_2", "Agent 1", 2], "content": "  meet at the left face of block 1  "},
        {"to": "all", "content": "I push block 1"},
    ]
    reply = parse_reply(plan_reply(messages=messages), "plan", CONTEXT)
    assert reply.messages == (
        ReplyMessage((1, 2), "meet at the left face of block 1"),
        ReplyMessage((1, 2), "I push block 1"),
    )
    single = parse_reply(plan_reply(messages={"to": ["1"], "content": "hi"}), "plan", CONTEXT)
    assert single.messages == (ReplyMessage((1,), "hi"),)
    assert parse_reply(plan_reply(messages=None), "plan", SILENT).messages == ()


def test_extra_keys_are_ignored():
    assert parse_reply(plan_reply(confidence=0.9), "plan", CONTEXT).plan == PLAN


@pytest.mark.parametrize(
    "reply, message, index, argument",
    [
        ('{"plan": "idle(1)"}', "field 'spec' is missing", None, None),
        ('{"spec": "s"}', "field 'plan' is missing", None, None),
        ('{"spec": "", "plan": "idle(1)"}', "field 'spec': String should have at least 1 character; got \"\"", None, None),
        (json.dumps({"spec": "x" * 201, "plan": "idle(1)"}), "field 'spec': String should have at most 200 characters; got \"" + "x" * 76 + "...", None, None),
        ('{"spec": ["s"], "plan": "idle(1)"}', "field 'spec': Input should be a valid string; got [\"s\"]", None, None),
        ('{"spec": "s", "plan": []}', "field 'plan' is empty; give at least one action", None, None),
        ('{"spec": "s", "plan": "  "}', "field 'plan' is empty; give at least one action", None, None),
        ('{"spec": "s", "plan": 7}', "field 'plan' must be a list of actions or a text plan, got 7", None, None),
        ('{"spec": "s", "plan": "idle(1); teleport(3)"}',
         "unknown action 'teleport'; known actions: idle, move, move_to_block, push, push_block, rendezvous, wait, wait_agents, yield_block", 1, None),
        ('{"spec": "s", "plan": [{"action": "move_to_block", "args": {"block": 0, "face": "top"}}]}',
         "move_to_block: face must be one of up, down, left, right; got 'top'", 0, "face"),
        ('{"spec": "s", "plan": [{"action": "idle", "args": [1]}, {"act": "idle"}]}',
         "JSON plan does not match the schema at plan.1.action: Field required", 1, None),
        ('{"spec": "s", "plan": ["idle(1)", "idle(1.5)"]}', "idle: steps must be an integer, got '1.5'", 1, "steps"),
        ('{"spec": "s", "plan": "push_block(2, 5)"}', "push_block: block 2 is already delivered", 0, "block"),
        ('{"spec": "s", "plan": "idle(1); move_to_block(3, up)"}', "move_to_block: unknown block 3; blocks are 0..2", 1, "block"),
        ('{"spec": "s", "plan": "rendezvous(0, left, 4, 10)"}', "rendezvous: count 4 exceeds the 3 agents of this world", 0, "count"),
        ('{"spec": "s", "plan": "idle(5000)"}', "idle: steps 5000 is above the limit of 1000", 0, "steps"),
        ('{"spec": "s", "plan": "wait_agents(2, 1001)"}', "wait_agents: timeout 1001 is above the limit of 1000", 0, "timeout"),
        (json.dumps({"spec": "s", "plan": "; ".join(["idle(1)"] * 33)}), "the plan has 33 actions; at most 32 are accepted", None, None),
        ('{"spec": "s", "plan": "idle(' + "9" * 5000 + ')"}',
         "idle: steps must be <= 2147483647 (2**31 - 1), got a number of 5000 digits", 0, "steps"),
    ],
    ids=[
        "no-spec", "no-plan", "empty-spec", "long-spec", "spec-not-text", "empty-plan", "blank-plan", "plan-number",
        "unknown-action", "bad-face", "item-schema", "not-integer", "delivered", "unknown-block", "count", "long-idle",
        "long-timeout", "too-many-actions", "huge-number",
    ],
)
def test_plan_reply_problems_name_what_and_where(reply, message, index, argument):
    err = problem(reply)
    assert (err.message, err.action_index, err.argument) == (message, index, argument)


@pytest.mark.parametrize(
    "messages, context, message",
    [
        ([{"to": [1], "content": "hi"}], SILENT, 'you may not send messages now; reply with "messages": []'),
        ([{"to": [1], "content": "a"}] * 3, CONTEXT, "3 messages; you may send at most 2 now"),
        ([{"to": [], "content": "hi"}], CONTEXT, "messages.0.to: name at least one recipient"),
        ([{"to": None, "content": "hi"}], CONTEXT, "messages.0.to: name at least one recipient"),
        ([{"to": ["agent_7"], "content": "hi"}], CONTEXT, "messages.0.to: there is no agent 7; agents are agent_0 .. agent_2"),
        ([{"to": ["bob"], "content": "hi"}], CONTEXT, 'messages.0.to: unknown recipient "bob"; write "agent_<id>", <id> or "all"'),
        ([{"to": [True], "content": "hi"}], CONTEXT, 'messages.0.to: unknown recipient true; write "agent_<id>", <id> or "all"'),
        ([{"to": [1], "content": "a"}, {"to": ["agent_0"], "content": "b"}], CONTEXT, "messages.1.to: agent_0 is yourself"),
        ([{"to": [1], "content": "   "}], CONTEXT, "messages.0.content is empty"),
        ([{"to": [1], "content": "x" * 2001}], CONTEXT, "messages.0.content has 2001 characters; at most 2000"),
        ([{"to": [1]}], CONTEXT, "field 'messages.0.content' is missing"),
    ],
    ids=["not-allowed", "over-budget", "no-recipient", "null-recipient", "unknown-id", "unknown-name", "bool",
         "self", "empty-content", "long-content", "no-content"],
)
def test_message_problems_name_what_and_where(messages, context, message):
    assert problem(plan_reply(messages=messages), context=context).message == message


def test_a_recipient_the_topology_forbids():
    leader_only = ReplyContext(num_agents=3, block_alive=(True,), agent=2, allowed_recipients=frozenset({0}), message_budget=1)
    reply = plan_reply(messages=[{"to": ["agent_1"], "content": "hi"}]).replace("block#1", "block#0").replace("(1,", "(0,")
    assert problem(reply, context=leader_only).message == "messages.0.to: you may not message agent_1 now; you may message: agent_0"


# --- interrupt and message replies ---------------------------------------------------------------


def test_interrupt_resume_keeps_no_plan_even_when_one_is_written():
    reply = parse_reply('{"decision": "Resume", "spec": "s", "plan": "teleport(1)"}', "interrupt", CONTEXT)
    assert reply == InterruptReply("resume", None, None, (), None)


def test_interrupt_replan_carries_the_new_plan_and_messages():
    text = json.dumps({"reasoning": "r", "decision": "replan", "spec": "push_block(block#1)", "plan": PLAN_TEXT,
                       "messages": [{"to": [2], "content": "switching to block 1"}]})
    assert parse_reply(text, "interrupt", CONTEXT) == InterruptReply(
        "replan", "push_block(block#1)", PLAN, (ReplyMessage((2,), "switching to block 1"),), "r"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"decision": "replan", "plan": "idle(1)"}', "field 'spec' is required with \"decision\": \"replan\""),
        ('{"decision": "replan", "spec": "s"}', "field 'plan' is required with \"decision\": \"replan\""),
        ('{"decision": "maybe"}', "field 'decision': Input should be 'resume' or 'replan'; got \"maybe\""),
        ('{"spec": "s", "plan": "idle(1)"}', "field 'decision' is missing"),
    ],
)
def test_interrupt_problems(text, message):
    assert problem(text, "interrupt").message == message


def test_message_reply_needs_a_message():
    reply = parse_reply('{"reasoning": "lead", "messages": [{"to": "all", "content": "take block 0"}]}', "message", CONTEXT)
    assert reply == MessageReply((ReplyMessage((1, 2), "take block 0"),), "lead")
    assert problem('{"messages": []}', "message").message == "field 'messages' needs at least 1 item(s)"


def test_unknown_purpose_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown purpose 'chat'; expected one of plan, interrupt, message"):
        parse_reply("{}", "chat", CONTEXT)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(num_agents=0, block_alive=(), agent=0), "num_agents must be >= 1, got 0"),
        (dict(num_agents=2, block_alive=(), agent=2), "agent must be in 0..1, got 2"),
        (dict(num_agents=2, block_alive=(), agent=0, allowed_recipients={0}), "allowed_recipients must be other agents' ids in 0..1; got 0"),
        (dict(num_agents=2, block_alive=(), agent=0, message_budget=-1), "message_budget must be >= 0, got -1"),
    ],
)
def test_reply_context_checks_itself(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        ReplyContext(**fields)


# --- schemas and feedback --------------------------------------------------------------------


@pytest.mark.parametrize("purpose", ["plan", "interrupt", "message"])
def test_reply_schemas_are_self_contained_and_accept_the_examples(purpose):
    schema = reply_schema(purpose)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "$ref" not in json.dumps(schema) and "$defs" not in schema
    assert list(schema["properties"])[0] == "reasoning"
    for example in reply_example(purpose).split("  or  "):
        jsonschema.validate(json.loads(example), schema)


def test_reply_schema_fields():
    plan, interrupt, message = (reply_schema(p) for p in ("plan", "interrupt", "message"))
    assert plan["required"] == ["spec", "plan"]
    assert interrupt["required"] == ["decision"] and interrupt["properties"]["decision"]["enum"] == ["resume", "replan"]
    assert message["required"] == ["messages"] and message["properties"]["messages"]["minItems"] == 1
    action = plan["properties"]["plan"]["anyOf"][0]["items"]
    assert action["properties"]["action"]["enum"] == [
        "idle", "move", "move_to_block", "rendezvous", "push_block", "yield_block", "wait_agents",
    ]
    recipient = plan["properties"]["messages"]["items"]["properties"]["to"]
    assert recipient["items"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    jsonschema.validate({"spec": "s", "plan": [{"action": "push_block", "args": [1, 5]}]}, plan)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"spec": "s", "plan": 3}, plan)
    plan["required"].append("changed by a caller")
    assert reply_schema("plan")["required"] == ["spec", "plan"]


def test_error_feedback_quotes_the_error_and_the_format():
    err = problem('{"spec": "s", "plan": "idle(1); move_to_block(3, up)"}')
    assert error_feedback(err, "plan") == (
        "Your last reply could not be used. Error (plan_check) at action 1, argument 'block': "
        "move_to_block: unknown block 3; blocks are 0..2\n"
        "Correct it and answer again with one JSON object and nothing else, of this form:\n" + reply_example("plan")
    )
    assert error_feedback(PlanError("plan_check", "no JSON object found in the reply: 'hm'")) == (
        "Your last reply could not be used. Error (plan_check): no JSON object found in the reply: 'hm'\n"
        "Correct it and answer again with one JSON object and nothing else."
    )


# --- properties ------------------------------------------------------------------------------------

KEYS = ["spec", "plan", "messages", "to", "content", "decision", "reasoning", "action", "args", "block", "face", "steps"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**40) | st.floats(allow_nan=False) | st.sampled_from(
        ["all", "agent_1", "agent_0", "replan", "resume", "idle(1)", "push_block(0, 3)", "left", "", "teleport()"]
    ) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), children, max_size=5),
    max_leaves=20,
)
wrappers = st.sampled_from(["{}", "```json\n{}\n```", "Sure, here: {} hope it helps", "<think>{</think>{}", "{},"])


def wrap(wrapper: str, body: str) -> str:
    """``wrapper`` with its last "{}" replaced by ``body``."""
    head, _, tail = wrapper.rpartition("{}")
    return head + body + tail


def assert_plan_error_or_reply(text: str, purpose: str) -> None:
    try:
        reply = parse_reply(text, purpose, CONTEXT)
    except PlanError as err:
        assert err.kind == "plan_check" and len(err.message) <= 400
    else:
        assert isinstance(reply, (PlanReply, InterruptReply, MessageReply))


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300), purpose=st.sampled_from(["plan", "interrupt", "message"]))
def test_junk_text_is_a_plan_error_or_a_reply(text, purpose):
    assert_plan_error_or_reply(text, purpose)


@settings(max_examples=300, deadline=None)
@given(value=json_values, wrapper=wrappers, purpose=st.sampled_from(["plan", "interrupt", "message"]))
def test_junk_json_is_a_plan_error_or_a_reply(value, wrapper, purpose):
    assert_plan_error_or_reply(wrap(wrapper, json.dumps(value)), purpose)


def action_strategy(num_agents=3, alive_blocks=(0, 1)):
    block = st.sampled_from(alive_blocks)
    steps = st.integers(0, 1000)
    face = st.sampled_from(FACES)
    return st.one_of(
        st.builds(lambda s: make_action("idle", s), steps),
        st.builds(lambda d, s: make_action("move", d, s), face, steps),
        st.builds(lambda b, f: make_action("move_to_block", b, f), block, face),
        st.builds(lambda b, f, c, t: make_action("rendezvous", b, f, c, t), block, face, st.integers(1, num_agents), steps),
        st.builds(lambda b, s: make_action("push_block", b, s), block, steps),
        st.builds(lambda b, s: make_action("yield_block", b, s), block, steps),
        st.builds(lambda c, t: make_action("wait_agents", c, t), st.integers(1, num_agents), steps),
    )


@settings(max_examples=200, deadline=None)
@given(
    plan=st.lists(action_strategy(), min_size=1, max_size=32),
    form=st.sampled_from(["text", "json", "text-list"]),
    wrapper=wrappers,
)
def test_valid_plans_survive_every_form_and_wrapping(plan, form, wrapper):
    written = {
        "text": "; ".join(str(a) for a in plan),
        "json": [a.to_json() for a in plan],
        "text-list": [str(a) for a in plan],
    }[form]
    reply = parse_reply(wrap(wrapper, json.dumps({"spec": "push_block(block#0)", "plan": written})), "plan", CONTEXT)
    assert reply.plan == tuple(plan) and reply.spec == "push_block(block#0)"


# --- trailing commas, fences and prose: the whole object always wins ---------------------------

# The reply from a model that ends its object with a comma after a list of message objects:
# the inner message object used to win, and the re-prompt said "field 'spec' is missing".
TRAILING_COMMA_REPLY = ('{"spec": "push_block(block#1)", "plan": "move_to_block(1, left); push_block(1, 5)", '
                        '"messages": [{"to": ["agent_1"], "content": "I take the left face of block 1"}],}')


def test_a_trailing_comma_after_the_messages_gives_the_whole_reply():
    assert extract_json(TRAILING_COMMA_REPLY, keys=["spec", "plan", "messages"]) == {
        "spec": "push_block(block#1)",
        "plan": "move_to_block(1, left); push_block(1, 5)",
        "messages": [{"to": ["agent_1"], "content": "I take the left face of block 1"}],
    }
    assert parse_reply(TRAILING_COMMA_REPLY, "plan", CONTEXT) == PlanReply(
        spec="push_block(block#1)",
        plan=(make_action("move_to_block", block=1, face="left"), make_action("push_block", block=1, steps=5)),
        messages=(ReplyMessage((1,), "I take the left face of block 1"),),
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}),
        ('{"a": [{"b": [{"c": 1,},],},],}', {"a": [{"b": [{"c": 1}]}]}),
        ('```jsonc\n{"a": 1,}\n```', {"a": 1}),
        ('```\n{"a": [1,],}\n```', {"a": [1]}),
        ('Sure. {"a": {"b": 2,}, "c": ", }",} Hope it helps {"d": 1}', {"a": {"b": 2}, "c": ", }"}),
    ],
)
def test_trailing_comma_cousins(text, expected):
    assert extract_json(text) == expected


_words = st.text(st.characters(codec="ascii", categories=["L", "N", "Zs", "P"], exclude_characters='{}[]<>`"\\'),
                 max_size=30)
_content = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="`<"), max_size=40)
_actions = st.lists(
    st.one_of(
        st.builds(lambda b, s: {"action": "push_block", "args": {"block": b, "steps": s}},
                  st.integers(0, 1), st.integers(1, 20)),
        st.builds(lambda b, f: {"action": "move_to_block", "args": [b, f]}, st.integers(0, 1), st.sampled_from(FACES)),
        st.builds(lambda n: {"action": "idle", "args": {"steps": n}}, st.integers(1, 9)),
    ),
    min_size=1, max_size=4,
)
_messages = st.lists(st.fixed_dictionaries({"to": st.lists(st.sampled_from(["agent_1", "agent_2", 1, 2, "all"]),
                                                           min_size=1, max_size=2),
                                            "content": _content}), max_size=2)
reply_objects = st.fixed_dictionaries(
    {"spec": _content.filter(str.strip), "plan": st.one_of(_actions, st.just(PLAN_TEXT)), "messages": _messages},
    optional={"reasoning": _content, "extra": st.dictionaries(_words, st.integers(), max_size=2)},
)


@st.composite
def loosely_written(draw, value):
    """``value`` as JSON with random spacing and a random trailing comma in any non-empty
    container, at any depth."""
    space = lambda: draw(st.sampled_from(["", " ", "\n", "  "]))  # noqa: E731
    comma = lambda items: "," + space() if items and draw(st.booleans()) else ""  # noqa: E731
    if isinstance(value, dict):
        items = [f"{json.dumps(k)}:{space()}{draw(loosely_written(v))}" for k, v in value.items()]
        return "{" + space() + ("," + space()).join(items) + comma(items) + "}"
    if isinstance(value, list):
        items = [draw(loosely_written(v)) for v in value]
        return "[" + space() + ("," + space()).join(items) + comma(items) + "]"
    return json.dumps(value, ensure_ascii=draw(st.booleans()))


wrappings = st.sampled_from([
    "{}", "{}\n", "```json\n{}\n```", "```JSON\n{}```", "```\n{}\n```", "```jsonc\n{}\n```",
    "Here is my plan:\n{}\nGood luck.", "<think>maybe {{\"spec\": 1}} or not</think>{}", "Reply:\n```json\n{}\n```\nDone.",
])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), reply=reply_objects, wrapping=wrappings, before=_words, after=_words)
def test_any_valid_reply_object_parses_back_however_it_is_written(data, reply, wrapping, before, after):
    text = data.draw(loosely_written(reply))
    wrapped = wrapping.replace("{}", text) if wrapping.startswith(("{", "`", "<")) else f"{before}{wrapping.replace('{}', text)}{after}"
    assert extract_json(wrapped, keys=["spec", "plan", "messages", "reasoning"]) == reply
