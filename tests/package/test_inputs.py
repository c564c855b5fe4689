"""Bad input gets a clear error naming the argument or field, quoting at most a short excerpt.

The first part pins each case that used to be accepted silently or crash inside; the
second throws random malformed input (hypothesis) at ``make``, ``Scenario``, the YAML and
ASCII loaders, the plan parsers and the CLI. Nothing here compiles a JAX program inside a
hypothesis loop: every generated input is refused before anything is built, or builds a
curriculum world without compiling (``make(n=...)`` without a pool).
"""
from __future__ import annotations

import contextlib
import doctest
import io
import json
import string
import time
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cube_jax
from cube_jax import cli
from cube_jax.core.scenario import Scenario, load_scenario, parse_ascii
from cube_jax.symbolic import PlanError, PlanExecutor, parse_plan, parse_plan_json
from cube_jax.symbolic.jax_executor import compile_plans

# An error message quotes at most a short excerpt of the input; with the fixed text around
# it, no message is longer than this.
MAX_MESSAGE = 500
GOOD = dict(grid_size=8, agents=[(2, 1), (3, 1)], blocks=[(2, 2, 2)])


def short(value) -> str:
    """A test id: the start of the case's input."""
    return repr(value)[:40]


def error_of(call, kind=ValueError) -> str:
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    assert len(message) <= MAX_MESSAGE, message[:1000]
    return message


def test_checks_doctest():
    import cube_jax.core.checks

    assert doctest.testmod(cube_jax.core.checks).failed == 0


# --- make ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(scenario="easy", step_cost=float("nan")), "step_cost must be a finite number in float32 (|x| <= 3.4028235e+38), got nan"),
        (dict(scenario="easy", deliver_reward=float("inf")), "deliver_reward must be a finite number in float32 (|x| <= 3.4028235e+38), got inf"),
        (dict(n=2, step_cost=10**400), "step_cost must be a finite number"),
        # finite in float64 but inf in float32, the dtype rewards are computed in
        (dict(n=2, deliver_reward=1e39), "deliver_reward must be a finite number in float32 (|x| <= 3.4028235e+38), got 1e+39"),
        (dict(n=2, step_cost=-3.5e38), "step_cost must be a finite number in float32 (|x| <= 3.4028235e+38), got -3.5e+38"),
        (dict(n=2, step_cost=np.float64(1e300)), "step_cost must be a finite number in float32 (|x| <= 3.4028235e+38), got np.float64(1e+300)"),
        (dict(n=2, step_cost=True), "step_cost must be a number, got True"),
        (dict(scenario="easy", max_steps=2**31), "max_steps must be an integer <= 2147483646 (the step counter is int32)"),
        (dict(n=10**6), "n must be an integer <= 4096"),
        (dict(n=4.5), "n must be an integer, got 4.5"),
        (dict(n=True), "n must be an integer, got True"),
        (dict(scenario="easy", num_agents=1.5), "num_agents must be an integer, got 1.5"),
        (dict(n=4, num_agents="4"), "num_agents must be an integer, got '4'"),
        (dict(n=2, observation=["vector"]), "observation: got ['vector']"),
        (dict(n=2, pool_seed=2**32), "pool_seed must be an integer <= 4294967295"),
        (dict(n=2, pool_size=10**9), "pool_size: 1000000000 layouts"),
        (dict(n=400, observation="grid"), "use observation='egocentric'"),
        (dict(scenario=12), "scenario must be a name, a .yaml path or a Scenario, got 12"),
        (dict(scenario="x" * 10_000), "unknown scenario 'xxxxxxxxxx"),
    ],
    ids=short,
)
def test_make_refuses_bad_arguments(kwargs, message):
    assert message in error_of(lambda: cube_jax.make(**kwargs))


def test_make_accepts_numpy_integers_and_the_step_limit():
    env = cube_jax.make(n=np.int64(4), num_agents=np.int32(4), max_steps=np.int64(2**31 - 2), step_cost=np.float32(0.5))
    assert (env.num_agents, env.grid_size, env.max_steps, env.cfg.step_cost) == (4, 20, 2**31 - 2, 0.5)
    assert type(env.cfg.num_agents) is int and type(env.cfg.max_steps) is int
    assert cube_jax.make(n=4.0).num_agents == 4  # integral floats are integers
    assert cube_jax.make(n=2, deliver_reward=3.4e38).cfg.deliver_reward == 3.4e38  # finite in float32
    assert cube_jax.make(n=4096, observation="egocentric").grid_size == 4096  # the cap itself builds


def test_make_refuses_huge_sizes_before_allocating():
    start = time.perf_counter()
    error_of(lambda: cube_jax.make(n=10**6))
    error_of(lambda: cube_jax.make(n=10**100))
    error_of(lambda: cube_jax.make(n=4096, observation="grid"))
    assert time.perf_counter() - start < 1.0  # refused from the shapes alone


# --- scenarios and YAML ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(agents=[(2.7, 1), (3, 1)]), "agent 0 row must be an integer, got 2.7"),
        (dict(blocks=[(2, 2, 1.9)]), "block 0 weight must be an integer, got 1.9"),
        (dict(agents=[(True, 1), (3, 1)]), "agent 0 row must be an integer, got True"),
        (dict(agents=[(2, 1), (3, None)]), "agent 1 col must be an integer, got None"),
        (dict(agents=[(2, 1), "ab"]), "agent 1 is 'ab'"),
        (dict(agents="ab"), "agents must be a list of (row, col) pairs, got 'ab'"),
        (dict(grid_size=8.5), "grid_size must be an integer, got 8.5"),
        (dict(grid_size=10**6), "grid_size must be an integer <= 4096"),
        (dict(step_cost=True), "step_cost must be a number, got True"),
        (dict(deliver_reward=float("nan")), "deliver_reward must be a finite number in float32 (|x| <= 3.4028235e+38), got nan"),
        (dict(step_cost=1e39), "step_cost must be a finite number in float32 (|x| <= 3.4028235e+38), got 1e+39"),
        (dict(max_steps=2**31), "max_steps must be an integer <= 2147483646"),
        (dict(name=["x"] * 10_000), "scenario name must be a string"),
        (dict(name="n" * 10_000, agents=[(2, 1), (2, 1)]), "agent 1 at (2, 1) overlaps agent 0"),
    ],
    ids=short,
)
def test_scenario_fields_are_checked(fields, message):
    assert message in error_of(lambda: Scenario(**{**GOOD, **fields}))


def test_integral_floats_are_integers_and_numpy_arrays_are_lists():
    sc = Scenario(grid_size=8.0, agents=np.array([[2, 1], [3, 1]]), blocks=[(2.0, 2, np.int8(2))])
    assert (sc.grid_size, sc.agents, sc.blocks) == (8, ((2, 1), (3, 1)), ((2, 2, 2),))
    assert all(type(v) is int for v in sc.agents[0] + sc.blocks[0])


def test_a_huge_block_is_checked_quickly():
    start = time.perf_counter()
    sc = Scenario(grid_size=4096, agents=[(0, 0)], blocks=[(0, 1, 4000)])
    message = error_of(lambda: Scenario(grid_size=4096, agents=[(5, 5)], blocks=[(0, 1, 4000)]))
    assert sc.blocks == ((0, 1, 4000),) and "block 0 at (0, 1) covers cell (5, 5) of agent 0" in message
    assert time.perf_counter() - start < 2.0


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize(
    "content, message",
    [
        ("grid_size: 8\nagents: [[0, 0]]\nblocks: [[2, 2, 1]]\nstep_cost: yes\n", "step_cost must be a number, got True"),
        ("grid_size: 8\nagents: [[0.5, 0]]\nblocks: [[2, 2, 1]]\n", "agent 0 row must be an integer, got 0.5"),
        ("grid_size: 8\nagents: [[no, 0]]\nblocks: [[2, 2, 1]]\n", "agent 0 row must be an integer, got False"),
        ("map: 12\n", "map must be text"),
        (b"grid_size: 8\nname: \xff\xfe\n", "is not UTF-8 text (byte 19, line 2)"),
        ("grid_size: 8\nagents: [[0, 0]\n", "not valid YAML"),
        ("grid_size: " + "9" * 5000 + "\n", "not valid YAML"),
        ("grid_size: 8\n" + "x: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 16 levels"),
        ("a: &x [1]\nb: *x\n", "aliases (*name) are not allowed"),
        ("{1: 2, [3]: 4}\n", "not valid YAML"),
        ("{1: 2, x: 3}\n", "unknown field(s) [1, 'x']"),
        ("- 1\n- 2\n", "expected a mapping of scenario fields, got list"),
    ],
    ids=short,
)
def test_yaml_errors_name_the_file(tmp_path, content, message):
    path = write(tmp_path, "bad.yaml", content)
    text = error_of(lambda: Scenario.from_yaml(path))
    assert message in text and "bad.yaml" in text


def test_yaml_file_that_is_a_folder_missing_or_too_big(tmp_path):
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    assert "is a folder, not a YAML file" in error_of(lambda: Scenario.from_yaml(folder))
    assert "is a folder, not a YAML file" in error_of(lambda: cube_jax.make(scenario=str(folder)))
    assert "does not exist" in error_of(lambda: load_scenario(str(tmp_path / "missing.yaml")))
    assert "cannot be read" in error_of(lambda: Scenario.from_yaml("bad\0name.yaml"))
    big = write(tmp_path, "big.yaml", "# " + "x" * (2**21) + "\n")
    assert "scenario files are at most 2097152" in error_of(lambda: Scenario.from_yaml(big))


def alias_bomb(levels: int) -> str:
    """A scenario whose agents list stands for 9**levels pairs through nested aliases."""
    items = ["&a0 [0, 0]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "grid_size: 8\nblocks: [[2, 2, 1]]\nagents: [" + ", ".join(items) + "]\n"


def test_yaml_alias_bomb_is_refused_at_once(tmp_path):
    # 462 bytes; formatting the parsed value into an error message took ~20 s and 400 MB
    path = write(tmp_path, "bomb.yaml", alias_bomb(9))
    start = time.perf_counter()
    message = error_of(lambda: Scenario.from_yaml(path))
    assert time.perf_counter() - start < 2.0  # guards a denial-of-service bug, not a speed goal
    assert "aliases (*name) are not allowed in scenario files" in message


def test_errors_inside_a_named_yaml_scenario_still_name_the_file(tmp_path):
    path = write(tmp_path, "named.yaml", "name: demo\ngrid_size: 8\nagents: [[0, 1.5]]\nblocks: [[2, 2, 1]]\n")
    message = error_of(lambda: Scenario.from_yaml(path))
    assert "named.yaml" in message and "scenario 'demo': agent 0 col must be an integer, got 1.5" in message


# --- env.step and env.reset --------------------------------------------------------------------


@pytest.fixture(scope="module")
def hard():
    env = cube_jax.make("hard")
    state, _ = env.reset(jax.random.PRNGKey(0))
    return env, state


@pytest.mark.parametrize(
    "actions, message",
    [
        (jnp.array([4]), "actions must have shape (3,), got shape (1,); this world has 3 agents"),
        (4, "actions must have shape (3,), got shape ()"),
        (np.int64(4), "actions must have shape (3,), got shape ()"),
        (jnp.array([4, 4]), "actions must have shape (3,), got shape (2,)"),
        ([[4, 4, 4]], "actions must have shape (3,), got shape (1, 3)"),
        (jnp.array([4.7, 4.2, 0.0]), "actions must be integers (0 STAY, 1 UP, 2 DOWN, 3 LEFT, 4 RIGHT), got dtype float32"),
        (np.array([True, False, True]), "got dtype bool"),
        ([4, 4.0, 0], "actions must be integers (0 STAY, 1 UP, 2 DOWN, 3 LEFT, 4 RIGHT), got 4.0"),
        ([True, 0, 0], "got True"),
        ([[4, 4], [4]], "got [4, 4]"),
        ("RIGHT", "actions must be an integer array of shape (3,) (one action per agent), got 'RIGHT'"),
        (None, "got None"),
    ],
    ids=short,
)
def test_step_checks_actions(hard, actions, message):
    env, state = hard
    assert message in error_of(lambda: env.step(state, actions))


def test_batched_step_needs_the_batch_shape(hard):
    env, _ = hard
    states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 2))
    message = error_of(lambda: env.step(states, jnp.array([4, 4, 4])))
    assert "actions must have shape (2, 3) (the state's batch axes (2,) + one action per agent), got shape (3,)" in message


def test_out_of_range_actions_are_stay_at_any_width(hard):
    env, state = hard
    stay = cube_jax.layout(env.step(state, jnp.zeros(3, jnp.int32))[0])
    right = cube_jax.layout(env.step(state, jnp.array([4, 0, 0], jnp.int32))[0])
    assert stay["agents"] != right["agents"]
    wide = [2**32 + 1, 2**32 + 4, -(2**40)]  # int32 truncation would make these UP, RIGHT, STAY
    for actions in (np.array(wide, np.int64), np.array([2**32 + 1, 2**32 + 4, 2**40], np.uint64), wide, [2**70, -1, 5]):
        assert cube_jax.layout(env.step(state, actions)[0]) == stay, actions
    assert cube_jax.layout(env.step(state, np.array([4, 2**32 - 1, 2**31 + 1], np.uint32))[0]) == right
    assert cube_jax.layout(env.step(state, [4, 2**40, -(2**40)])[0]) == right
    assert cube_jax.layout(env.step(state, [jnp.int32(4), np.int64(0), jnp.array(7)])[0]) == right


def test_wide_integers_are_stay_inside_jit_with_x64(hard):
    env, state = hard
    stay = cube_jax.layout(env.step(state, jnp.zeros(3, jnp.int32))[0])
    right = cube_jax.layout(env.step(state, jnp.array([4, 0, 0], jnp.int32))[0])
    step = jax.jit(env.step)
    with jax.enable_x64(True):
        assert cube_jax.layout(step(state, jnp.array([2**32 + 1, 2**32 + 4, 2**33], jnp.int64))[0]) == stay
        assert cube_jax.layout(step(state, jnp.array([4, 2**32 + 4, 2**33 + 3], jnp.int64))[0]) == right


def test_traced_actions_must_be_integers(hard):
    env, state = hard
    message = error_of(lambda: jax.jit(env.step)(state, jnp.array([4.0, 0.0, 0.0])))
    assert "actions must be integers" in message and "float32" in message


def test_reset_checks_the_key(hard):
    env, _ = hard
    assert "reset: key must be one PRNG key (jax.random.PRNGKey(seed), uint32[2]), got 0" in error_of(lambda: env.reset(0))
    message = error_of(lambda: env.reset(jax.random.split(jax.random.PRNGKey(0), 3)))
    assert "got an array of shape (3, 2) and dtype uint32; for a batch use jax.vmap(env.reset)(keys)" in message
    assert "dtype int32" in error_of(lambda: env.reset(jnp.array([0, 1])))


# --- plans -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plan, argument, words",
    [
        ("idle(" + "9" * 400 + ")", "steps", "steps must be <= 2147483647 (2**31 - 1), got a number of 400 digits"),
        ("idle(" + "9" * 6000 + ")", "steps", "got a number of 6000 digits"),
        ("idle(2147483648)", "steps", "steps must be <= 2147483647 (2**31 - 1), got 2147483648"),
        ("idle(1e300)", "steps", "steps must be an integer, got '1e300'"),
        ("idle(١٢)", "steps", "steps must be an integer, got '١٢'"),
        ("idle(steps=1, steps=2)", "steps", "argument 'steps' is given twice"),
        ("push(block_id=1, block=2, steps=3)", "block", "argument 'block' is given twice"),
        ("idle(" + "x" * 10_000 + ")", "steps", "steps must be an integer, got 'xxxxxxxx"),
        ("jump" + "x" * 10_000 + "(1)", None, "unknown action 'jumpxxxx"),
    ],
    ids=short,
)
def test_text_plan_arguments(plan, argument, words):
    message = error_of(lambda: parse_plan(plan), PlanError)
    with pytest.raises(PlanError) as info:
        parse_plan(plan)
    assert info.value.argument == argument and words in message


@pytest.mark.parametrize(
    "obj, words",
    [
        ([{"action": "idle", "args": [1e300]}], "steps must be <= 2147483647 (2**31 - 1), got 1e+300"),
        ([{"action": "idle", "args": [float("nan")]}], "steps must be an integer, got nan"),
        ([{"action": "idle", "args": [2.5]}], "steps must be an integer, got 2.5"),
        ([{"action": "idle", "args": [True]}], "steps must be an integer, got True"),
        ('[{"action": "idle", "args": [1e300]}]', "got 1e+300"),
        ('[{"action": "idle", "args": {"steps": 1, "steps": 2}}]', "JSON object has the key 'steps' twice"),
        ({"plan": [{"action": "push", "args": {"block_id": 1, "block": 2, "steps": 1}}]}, "argument 'block' is given twice"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("[" * 100 + "]" * 100, "nested deeper than 16 levels"),
        ("[" + " " * (2**20) + "]", "plans are at most 1048576"),
        (b"[\xff]", "not valid JSON"),
        ('[{"action": "idle", "args": [' + "9" * 5000 + "]}]", "not valid JSON"),
        ('[{"action": "idle", "args": [' + "9" * 1000 + "]}]", "steps must be <= 2147483647 (2**31 - 1), got an integer of 1000 digits"),
    ],
    ids=short,
)
def test_json_plan_values_and_documents(obj, words):
    assert words in error_of(lambda: parse_plan_json(obj), PlanError)


def test_json_plan_objects_that_are_deep_cyclic_or_shared():
    deep = 1
    for _ in range(5000):
        deep = [deep]
    assert "nested deeper than 16" in error_of(lambda: parse_plan_json([{"action": "idle", "args": [deep]}]), PlanError)
    cyclic = []
    cyclic.append(cyclic)
    assert "nested deeper than 16" in error_of(lambda: parse_plan_json(cyclic), PlanError)
    shared = [1] * 9
    for _ in range(12):
        shared = [shared] * 9  # 9**12 leaves, 13 levels
    assert "more than 100000 values" in error_of(lambda: parse_plan_json({"plan": shared}), PlanError)


def test_compile_plans_names_agent_and_action_of_a_value_that_does_not_fit():
    plan = parse_plan("idle(1); idle(2)")
    plan[1].args["steps"] = 2**40  # args is a plain dict: a caller can change it after the checks
    message = error_of(lambda: compile_plans([parse_plan("idle(1)"), plan]))
    assert "compile_plans: agent 1 action 1 (idle) has the value 1099511627776" in message
    assert "compile_plans: agent 0's plan must be a list" in error_of(lambda: compile_plans(["idle(1)"]))
    assert "max_len must be an integer" in error_of(lambda: compile_plans([plan], max_len=2.5))


def test_set_plan_checks_agent_and_plan():
    ex = PlanExecutor(cube_jax.make(n=2))
    assert "set_plan: agent must be an integer 0..1, got 1.5" in error_of(lambda: ex.set_plan(1.5, "idle(1)"))
    assert "got True" in error_of(lambda: ex.set_plan(True, "idle(1)"))
    assert "a plan must be text, JSON or a list of SymbolicAction, got 5" in error_of(lambda: ex.set_plan(0, 5), PlanError)
    assert [a.name for a in ex.set_plan(np.int64(1), "idle(1)")] == ["idle"]


# --- the CLI -------------------------------------------------------------------------------------


@contextlib.contextmanager
def no_evaluation():
    """Building a world is the first piece of work ``eval`` does: make it fail loudly."""

    def refuse(*args, **kwargs):
        raise AssertionError("the arguments were accepted and work started")

    with mock.patch.object(cube_jax, "make", refuse):
        yield


def cli_error(argv) -> str:
    stderr = io.StringIO()
    with no_evaluation(), contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        with pytest.raises(SystemExit) as info:
            cli.main(["eval", *argv])
    assert info.value.code == 2
    message = stderr.getvalue().strip().splitlines()[-1]
    assert len(message) <= MAX_MESSAGE, message
    return message


def test_cli_json_path_is_checked_before_any_work(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    base = ["--policy", "random", "--scenario", "easy"]
    assert f"argument --json: {tmp_path} is a folder; give a file path" in cli_error(base + ["--json", str(tmp_path)])
    message = cli_error(base + ["--json", str(afile / "out.json")])
    assert f"argument --json: cannot create {afile / 'out.json'}: {afile} is not a folder" in message
    assert "File name too long" in cli_error(base + ["--json", str(tmp_path / ("x" * 300))])
    # a missing parent that can be created passes the checks (and reaches the world)
    with no_evaluation(), pytest.raises(AssertionError, match="work started"):
        cli.main(["eval", *base, "--json", str(tmp_path / "new" / "dir" / "out.json"), "--no-progress"])
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--seed", str(2**32)], "argument --seed: must be <= 4294967295 (PRNGKey keeps 32 bits), got 4294967296"),
        (["--seed", str(2**32 - 2), "--episodes", "3"], "episode seeds run from 4294967294 to 4294967296"),
        (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
        (["--seed", "１"], "argument --seed: expected an integer >= 0"),
        (["--n", "100000"], "argument --n: must be <= 4096"),
        (["--max-steps", str(2**31)], "argument --max-steps: must be <= 2147483646"),
        (["--episodes", "9" * 5000], "argument --episodes: expected an integer >= 1"),
    ],
    ids=short,
)
def test_cli_numbers(argv, words):
    world = [] if "--n" in argv else ["--scenario", "easy"]
    assert words in cli_error(["--policy", "random", *world, *argv])


def test_cli_accepts_the_last_seeds():
    with no_evaluation(), pytest.raises(AssertionError, match="work started"):
        cli.main(["eval", "--policy", "random", "--n", "2", "--seed", str(2**32 - 4), "--episodes", "4"])


# --- random malformed input ------------------------------------------------------------------

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=-3, max_value=12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.sampled_from([np.int64(3), np.int8(-1), np.float32(2.5), np.bool_(True), np.uint64(2**63), 10**400, 2.0]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=12)
# what yaml.safe_dump can write (no NumPy scalars)
yaml_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), st.binary(max_size=8)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


def check_message(err: Exception, *names: str) -> None:
    message = str(err)
    assert len(message) <= MAX_MESSAGE, message[:1000]
    assert any(name in message for name in names), (names, message)


MAKE_ARGUMENTS = ("n", "num_agents", "max_steps", "step_cost", "deliver_reward", "observation", "view_radius", "pool_seed")


@FUZZ
@given(
    kwargs=st.dictionaries(st.sampled_from(MAKE_ARGUMENTS), values, max_size=4),
    scenario=st.one_of(st.none(), values, st.sampled_from(["nowhere", "x.yaml", "/", "\0.yaml", "e" * 300])),
    pool_size=st.one_of(st.just(0), st.integers(max_value=-1), st.floats(), st.text(max_size=3)),
)
def test_make_fuzz(kwargs, scenario, pool_size):
    # Valid scenarios and pools would compile: only invalid ones are drawn, so every accepted
    # call is a curriculum world built without compiling.
    if isinstance(scenario, str) and scenario in ("easy", "hard", "easy3"):
        scenario = "nowhere"
    try:
        env = cube_jax.make(scenario, pool_size=pool_size, **kwargs)
    except ValueError as err:
        check_message(err, "make", "scenario", "pool_size", *kwargs)
    else:
        assert scenario is None and env.num_agents == kwargs.get("n")


coordinates = st.one_of(st.integers(-2, 10), scalars)
entries = st.one_of(st.lists(coordinates, max_size=4), st.tuples(coordinates, coordinates), st.tuples(coordinates, coordinates, coordinates), values)
SCENARIO_FIELDS = ("grid_size", "agents", "blocks", "max_steps", "step_cost", "deliver_reward", "name")


@FUZZ
@given(
    grid_size=st.one_of(st.integers(1, 10), scalars),
    agents=st.one_of(st.lists(entries, max_size=4), values),
    blocks=st.one_of(st.lists(entries, max_size=3), values),
    options=st.dictionaries(st.sampled_from(("max_steps", "step_cost", "deliver_reward", "name")), values, max_size=2),
)
def test_scenario_fuzz(grid_size, agents, blocks, options):
    try:
        sc = Scenario(grid_size=grid_size, agents=agents, blocks=blocks, **options)
    except ValueError as err:
        check_message(err, "scenario", *SCENARIO_FIELDS)
    else:
        assert all(type(v) is int for v in (sc.grid_size, sc.max_steps, *sum(sc.agents + sc.blocks, ())))
        assert np.isfinite(np.float32([sc.step_cost, sc.deliver_reward])).all()


yaml_documents = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200),
    st.dictionaries(st.sampled_from(SCENARIO_FIELDS + ("map", "speed")), yaml_values, max_size=5).map(
        lambda d: yaml.safe_dump(d, allow_unicode=True)
    ),
    st.integers(1, 6).map(lambda levels: alias_bomb(levels)),
    st.text(alphabet=string.printable, max_size=300).map(lambda t: "map: |\n" + "".join("  " + line + "\n" for line in t.splitlines())),
)


@FUZZ
@given(document=yaml_documents)
def test_yaml_fuzz(tmp_path_factory, document):
    path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
    path.write_bytes(document if isinstance(document, bytes) else document.encode("utf-8", "surrogatepass"))
    try:
        Scenario.from_yaml(path)
    except ValueError as err:
        check_message(err, "fuzz.yaml")


map_text = st.one_of(
    st.text(alphabet="..:0123abcA#\n \t", max_size=120),
    st.text(max_size=60),
    st.lists(st.text(alphabet=".0a1b", min_size=3, max_size=3), min_size=3, max_size=3).map("\n".join),
)


@FUZZ
@given(text=st.one_of(map_text, values))
def test_ascii_fuzz(text):
    try:
        parse_ascii(text)
    except ValueError as err:
        check_message(err, "map")
    try:
        Scenario.from_ascii(text, name="fuzz")
    except ValueError as err:
        check_message(err, "map", "scenario 'fuzz'")


plan_text = st.one_of(
    st.text(max_size=80),
    st.lists(
        st.tuples(
            st.sampled_from(["idle", "move", "push", "push_block", "rendezvous", "wait_agents", "move_to_block", "yield_block", "x"]),
            st.lists(st.one_of(st.from_regex(r"[+-]?[0-9]{1,30}", fullmatch=True), st.sampled_from(["left", "up", "1e300", "١٢", "steps=1", "block_id=2", "block=3", "=", ""]), st.text(max_size=5)), max_size=5),
        ),
        max_size=4,
    ).map(lambda calls: "; ".join(f"{name}({', '.join(args)})" for name, args in calls)),
)
numbers = st.one_of(
    st.from_regex(r"[+-]?[0-9]{1,30}", fullmatch=True),
    st.integers(min_value=2**31 - 2, max_value=10**40).map(str),
    st.sampled_from(["1e300", "١٢", "٣", "2.5", "0x10", "1_000", "nan", "True"]),
    st.text(alphabet="0123456789٠١٢", min_size=1, max_size=4),
)
one_argument_calls = st.tuples(st.sampled_from(["idle", "wait", "wait_agents(1, ", "push_block(0, ", "yield_block("]), numbers).map(
    lambda call: f"{call[0]}{'' if call[0].endswith(' ') or call[0].endswith('(') else '('}{call[1]})"
)
plan_text = st.one_of(plan_text, one_argument_calls)
json_plans = st.one_of(
    values,
    st.tuples(st.sampled_from(["idle", "wait", "push"]), st.lists(st.one_of(scalars, st.integers()), min_size=1, max_size=2)).map(
        lambda call: [{"action": call[0], "args": call[1] if call[0] != "idle" else call[1][:1]}]
    ),
    st.lists(
        st.fixed_dictionaries({"action": st.one_of(st.sampled_from(["idle", "move", "push", "rendezvous"]), scalars)}, optional={"args": values, "when": values}),
        max_size=3,
    ),
)


@FUZZ
@given(plan=plan_text)
def test_text_plan_fuzz(plan):
    try:
        actions = parse_plan(plan)
    except PlanError as err:
        assert err.kind == "plan_check"
        check_message(err, "plan_check: ")
    else:
        assert all(0 <= v <= 2**31 - 1 for a in actions for v in a.args.values() if isinstance(v, int))
        # digits only ever appear in numbers, and numbers are written in ASCII digits
        assert all(ch in string.digits for ch in plan if ch.isdigit()), plan


@FUZZ
@given(plan=json_plans, as_text=st.booleans())
def test_json_plan_fuzz(plan, as_text):
    if as_text:
        with contextlib.suppress(TypeError, ValueError):  # numpy scalars and bytes stay objects
            plan = json.dumps(plan)
    try:
        actions = parse_plan_json(plan)
    except PlanError as err:
        assert err.kind == "plan_check"
        check_message(err, "plan_check: ")
    else:
        assert all(0 <= v <= 2**31 - 1 for a in actions for v in a.args.values() if isinstance(v, int))


bad_numbers = st.one_of(
    st.integers(max_value=0).map(str),
    st.integers(min_value=2**32).map(str),
    st.floats().map(str),
    st.text(alphabet="x١２ .e", min_size=1, max_size=8),
)
bad_arguments = st.one_of(
    st.tuples(st.sampled_from(["--n", "--episodes", "--max-steps", "--chunk"]), bad_numbers),
    st.tuples(st.just("--seed"), st.one_of(st.integers(max_value=-1).map(str), st.integers(min_value=2**32).map(str), st.text(alphabet="x-.e", min_size=1, max_size=5))),
    st.tuples(st.just("--json"), st.sampled_from([".", "/", "/proc/x/y.json", "x" * 300])),
    st.tuples(st.just("--scenario"), st.sampled_from(["nowhere", "missing.yaml", "/", "e" * 500])),
    st.tuples(st.sampled_from(["--bogus", "--policy="]), st.text(alphabet="abc", max_size=3)),
)


@FUZZ
@given(bad=bad_arguments, extra=st.lists(st.sampled_from([["--no-progress"], ["--episodes", "2"], ["--seed", "5"], ["--chunk", "3"]]), max_size=3))
def test_cli_fuzz(bad, extra):
    world = ["--scenario", "easy"] if bad[0] not in ("--n", "--scenario") else []
    argv = ["--policy", "random", *world, *sum(extra, []), bad[0], bad[1]]
    message = cli_error(argv)
    assert "error:" in message and ("argument" in message or "unrecognized arguments" in message), message
