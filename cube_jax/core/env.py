"""``CubeEnv`` and ``make``: the public, pure-functional environment.

``env.reset(key)`` and ``env.step(state, actions)`` are jitted once per static
configuration (grid size, agents, blocks, limits, observation form) and shared by every
environment with that configuration, so building many scenarios of one size compiles
once. Both are pure, so ``jax.jit`` and ``jax.vmap`` over them work as usual.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.core import generator, threefry
from cube_jax.core.layouts import (CountsLayouts, CurriculumLayouts, FixedLayout, Layout, LayoutGenerator,
                                   PoolLayouts)
from cube_jax.core.checks import (
    MAX_EPISODE_STEPS,
    MAX_GRID_SIZE,
    MAX_OBSERVATION_VALUES,
    MAX_SEED,
    as_int,
    as_real,
    excerpt,
)
from cube_jax.core.dynamics import batched_step, reward_and_flags
from cube_jax.core.observations import (OBSERVATION_FORM_NAMES, ObservationForm, observation_form, observation_shape,
                                        observe)
from cube_jax.core.scenario import Scenario, load_scenario, render_ascii
from cube_jax.core.types import NUM_ACTIONS, EnvConfig, State, StepEvents, TimeStep
from cube_jax.names import action_or_stay, actions_or_stay


@functools.partial(jax.jit, static_argnums=(0,))
def _step(cfg: EnvConfig, state: State, actions: jax.Array) -> Tuple[State, TimeStep]:
    state, delivered_weight, events = batched_step(cfg)(state, actions)
    reward, terminated, truncated = reward_and_flags(cfg, state, delivered_weight)
    return state, TimeStep(observe(cfg, state), reward, terminated, truncated, events)


def _start_state(cfg: EnvConfig, lay: Layout, key) -> State:
    return State(
        agent_pos=lay.agent_pos,
        block_pos=lay.block_pos,
        block_weight=lay.block_weight,
        block_alive=jnp.ones(lay.block_weight.shape, bool),
        t=jnp.zeros(lay.block_weight.shape[:-1], jnp.int32),
        key=key,
        grid_size=cfg.grid_size,
    )


@functools.partial(jax.jit, static_argnums=(0,))
def _first_observations(cfg: EnvConfig, layouts: Layout) -> jax.Array:
    """The t=0 observation of every layout of a batch, float32[P, ...]."""
    keys = jnp.zeros((layouts.agent_pos.shape[0], 2), jnp.uint32)
    return jax.vmap(lambda st: observe(cfg, st))(_start_state(cfg, layouts, keys))


def _first_timestep(cfg: EnvConfig, observation) -> TimeStep:
    return TimeStep(
        observation=observation,
        reward=jnp.zeros((cfg.num_agents,), jnp.float32),
        terminated=jnp.array(False),
        truncated=jnp.array(False),
        events=StepEvents.zeros(cfg.num_agents, cfg.num_blocks),
    )


@functools.partial(jax.jit, static_argnums=(0,))
def _reset(cfg: EnvConfig, source: LayoutGenerator, key: jax.Array) -> Tuple[State, TimeStep]:
    key, layout_key = threefry.split(key)  # jax.random.split(key), without the CPU's loop
    state = _start_state(cfg, source(layout_key), key)
    # Pool layouts carry their first observation, so a pooled reset is a gather: auto-reset
    # under vmap pays a reset at every step.
    first_obs = source.first_observation(layout_key)
    return state, _first_timestep(cfg, observe(cfg, state) if first_obs is None else first_obs)


@functools.partial(jax.jit, static_argnums=(0,))
def _reset_to(cfg: EnvConfig, lay: Layout, key: jax.Array) -> Tuple[State, TimeStep]:
    state = _start_state(cfg, lay, key)
    return state, _first_timestep(cfg, observe(cfg, state))


class CubeEnv:
    """A CUBE world family with fixed shapes. Build it with :func:`make`."""

    def __init__(self, cfg: EnvConfig, generator: LayoutGenerator, name: str, curriculum_n: int = 0):
        self.cfg = cfg
        self.generator = generator  # where reset's layouts come from (cube_jax.core.layouts)
        self.name = name
        self.curriculum_n = curriculum_n  # n for a world of the n-curriculum (fresh or pooled), else 0

    # -- the pure API ----------------------------------------------------------------------
    def reset(self, key: jax.Array) -> Tuple[State, TimeStep]:
        """A new episode from ``key``; the key is kept in the state for later resets."""
        _check_key(key)
        return _reset(self.cfg, self.generator, key)

    def reset_to(self, lay: Layout, key: jax.Array) -> Tuple[State, TimeStep]:
        """A new episode from the given layout (of this world's shapes), ``key`` kept in the state.

        ``env.reset(key)`` is ``env.reset_to(env.generator(layout_key), key)`` with the layout key
        split from ``key``; this one starts a test episode from its test layout."""
        _check_key(key)
        return _reset_to(self.cfg, lay, key)

    def step(self, state: State, actions: jax.Array) -> Tuple[State, TimeStep]:
        """One step of DYNAMICS.md for ``actions`` int32[N]; no key and no auto-reset.

        ``actions`` holds integers, one per agent: shape ``(N,)`` for one state, or the
        state's leading axes + ``(N,)`` for a batch of states. An integer outside 0..4 is
        STAY (DYNAMICS.md), whatever its width. Called on concrete values (outside
        ``jit``/``vmap``) the shape and dtype are checked and a mismatch raises ValueError;
        under tracing only the dtype is checked (it is static).
        """
        return _step(self.cfg, state, _checked_actions(state, actions, self.cfg.num_agents))

    def observe(self, state: State) -> jax.Array:
        return observe(self.cfg, state)

    # -- static facts ----------------------------------------------------------------------
    @property
    def num_agents(self) -> int:
        return self.cfg.num_agents

    @property
    def num_blocks(self) -> int:
        return self.cfg.num_blocks

    @property
    def grid_size(self) -> int:
        return self.cfg.grid_size

    @property
    def max_steps(self) -> int:
        return self.cfg.max_steps

    @property
    def max_weight(self) -> int:
        """The heaviest block weight any reset of this environment can produce."""
        return self.generator.max_weight

    @property
    def block_weights(self) -> Tuple[int, ...]:
        """Every block's weight, block id order (the same at every reset)."""
        return self.generator.weights

    @property
    def pool(self) -> dict:
        """A pool's layouts as a dict of arrays with a leading layout axis ({} when not pooled)."""
        if not isinstance(self.generator, PoolLayouts):
            return {}
        lay = self.generator.layouts
        return {"agent_pos": lay.agent_pos, "block_pos": lay.block_pos, "block_weight": lay.block_weight}

    @property
    def num_actions(self) -> int:
        return NUM_ACTIONS

    @property
    def observation_form(self) -> ObservationForm:
        """The declaration (name, shape, bounds) of this environment's observation form."""
        return observation_form(self.cfg.observation)

    @property
    def observation_shape(self) -> tuple:
        """``(N, *F)`` of one environment's observation."""
        return observation_shape(self.cfg)

    @property
    def observation_bounds(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` float32[*F]: every value one agent's observation can take lies between."""
        return self.observation_form.bounds(self.cfg, self.max_weight)

    def render(self, state: State) -> str:
        """ASCII map of one (unbatched) state, in the scenario map form."""
        lay = layout(state)
        return render_ascii(state.grid_size, lay["agents"], lay["blocks"])

    def __repr__(self) -> str:
        c = self.cfg
        return (
            f"CubeEnv({self.name!r}, grid={c.grid_size}x{c.grid_size}, agents={c.num_agents}, "
            f"blocks={c.num_blocks}, max_steps={c.max_steps}, observation={c.observation!r})"
        )


def layout(state: State) -> dict:
    """Plain-Python view of one state: ``{"t", "agents": [(r, c)], "blocks": [(r, c, w, alive)]}``."""
    agent_pos = np.asarray(state.agent_pos)
    if agent_pos.ndim != 2:
        raise ValueError(
            f"layout: expected one environment's state (agent_pos of shape [N, 2]), got shape {agent_pos.shape}; "
            "index a batched state first, e.g. jax.tree.map(lambda x: x[0], state)"
        )
    block_pos = np.asarray(state.block_pos)
    weight = np.asarray(state.block_weight)
    alive = np.asarray(state.block_alive)
    return {
        "t": int(state.t),
        "agents": [(int(r), int(c)) for r, c in agent_pos],
        "blocks": [(int(r), int(c), int(w), bool(a)) for (r, c), w, a in zip(block_pos, weight, alive)],
    }


# --- input checks ---------------------------------------------------------------------------


def _is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check_key(key) -> None:
    """A concrete reset key must be one PRNG key: uint32[2] (``PRNGKey``) or a typed key of shape ()."""
    if _is_traced(key):
        return
    if isinstance(key, (jax.Array, np.ndarray)):
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            if key.shape == ():
                return
        elif key.dtype == np.uint32 and key.shape == (2,):
            return
        got = f"an array of shape {key.shape} and dtype {key.dtype}"
    else:
        got = excerpt(key)
    raise ValueError(
        f"reset: key must be one PRNG key (jax.random.PRNGKey(seed), uint32[2]), got {got}; "
        "for a batch use jax.vmap(env.reset)(keys)"
    )


def _wide(dtype) -> bool:
    """Integer dtypes whose values can wrap into 0..4 when cast to int32."""
    return np.dtype(dtype).itemsize > 4


def _checked_actions(state: State, actions, num_agents: int):
    """``actions`` as the step takes them, or ValueError saying what is wrong with them.

    Out-of-range integers stay out of range (STAY): values of integer types wider than
    int32 are mapped to STAY here, before any cast to int32 could wrap them into 0..4.
    """
    if _is_traced(actions):
        _check_action_dtype(actions.dtype, f"shape {actions.shape}")
        return actions  # the jitted step maps wide integers itself (dynamics.step_state)
    lead = getattr(getattr(state, "t", None), "shape", None)
    if lead is None:
        raise ValueError(f"step: state must be a State from env.reset, got {excerpt(state)}")
    expected = tuple(lead) + (num_agents,)
    if isinstance(actions, jax.Array):
        shape, dtype = actions.shape, actions.dtype
    elif isinstance(actions, np.ndarray):
        shape, dtype = actions.shape, actions.dtype
    elif isinstance(actions, (list, tuple, int, np.integer)) and not isinstance(actions, bool):
        actions = _python_actions(actions)
        shape, dtype = actions.shape, actions.dtype
    else:
        raise ValueError(
            f"step: actions must be an integer array of shape {expected} (one action per agent), "
            f"got {excerpt(actions)}"
        )
    _check_action_dtype(dtype, f"shape {shape}")
    if tuple(shape) != expected:
        per = "" if not lead else f" (the state's batch axes {tuple(lead)} + one action per agent)"
        raise ValueError(
            f"step: actions must have shape {expected}{per}, got shape {tuple(shape)}; "
            f"this world has {num_agents} agents"
        )
    if isinstance(actions, np.ndarray) and dtype != np.int32:
        # host arrays become int32 here (one compiled step for every integer type)
        return actions_or_stay(actions, np).astype(np.int32)
    if _wide(dtype):
        return actions_or_stay(actions, jnp).astype(jnp.int32)
    return actions


def _check_action_dtype(dtype, what: str) -> None:
    if not jnp.issubdtype(dtype, jnp.integer):
        raise ValueError(
            f"step: actions must be integers (0 STAY, 1 UP, 2 DOWN, 3 LEFT, 4 RIGHT), got dtype {dtype} ({what})"
        )


def _python_actions(actions) -> np.ndarray:
    """Python ints (nested lists for a batch) as an int32 array, out-of-range values as STAY."""
    if isinstance(actions, (int, np.integer)):
        objects = np.empty((), object)
        objects[()] = actions
    else:
        try:
            objects = np.array(actions, dtype=object)
        except ValueError:  # ragged nesting
            raise ValueError(f"step: actions must be a rectangular list of integers, got {excerpt(actions)}") from None
    values = []
    for value in objects.reshape(-1):
        if isinstance(value, (jax.Array, np.ndarray)) and value.shape == () and jnp.issubdtype(value.dtype, jnp.integer):
            value = int(value)  # a list of integer array scalars, e.g. [a[0], a[1]]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(
                f"step: actions must be integers (0 STAY, 1 UP, 2 DOWN, 3 LEFT, 4 RIGHT), got {excerpt(value)} "
                f"in {excerpt(actions)}"
            )
        values.append(int(value))
    mapped = [action_or_stay(v) for v in values]
    return np.asarray(mapped, np.int32).reshape(objects.shape)


def _check_choice(name: str, value, allowed) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: got {excerpt(value)}, expected one of {tuple(allowed)}")


def _check_int(name: str, value, minimum: int, maximum: Optional[int] = None, why: str = "") -> int:
    return as_int(value, name, minimum=minimum, maximum=maximum, why=why)


COOP2 = "coop2"  # the named world of COOP²'s CUBE setting
COOP2_GRID = 15
COOP2_COUNTS = {3: 3, 2: 3, 1: 3}
COOP2_MAX_STEPS = 50

# A pool of pre-drawn layouts (with their first observations) is kept on the device.
MAX_POOL_BYTES = 2**31


def _check_sizes(observation: str, view_radius: int, k: int, n: int, b: int, pool_size: int) -> None:
    """Refuses worlds whose arrays cannot fit, from their shapes alone (nothing is allocated)."""
    shape = observation_shape(EnvConfig(k, n, b, 1, observation=observation, view_radius=view_radius))
    values = int(np.prod(shape, dtype=object))
    if values > MAX_OBSERVATION_VALUES:
        raise ValueError(
            f"observation: the {observation!r} observation of this world ({k}x{k} grid, {n} agents, {b} blocks) "
            f"has {values} values per environment, more than {MAX_OBSERVATION_VALUES} (1 GiB); "
            "use observation='egocentric', whose size does not grow with the grid"
        )
    layout_bytes = 4 * (values + 2 * n + 3 * b)
    if pool_size * layout_bytes > MAX_POOL_BYTES:
        raise ValueError(
            f"pool_size: {pool_size} layouts of {layout_bytes} bytes (with their first observations) exceed "
            f"{MAX_POOL_BYTES} bytes; at most {MAX_POOL_BYTES // layout_bytes} fit"
        )


def make(
    scenario: Union[str, Scenario, None] = None,
    *,
    n: Optional[int] = None,
    num_agents: Optional[int] = None,
    max_steps: Optional[int] = None,
    step_cost: Optional[float] = None,
    deliver_reward: Optional[float] = None,
    observation: str = "vector",
    view_radius: int = 3,
    pool_size: int = 0,
    pool_seed: int = 0,
    layouts: Optional[LayoutGenerator] = None,
) -> CubeEnv:
    """Builds a CUBE environment.

    ``make(n=4)``: the n-curriculum (k = max(20, n), n agents, blocks of weight n//2+1 .. 1),
    a fresh layout drawn from the key at every reset. ``pool_size=P`` instead draws P
    layouts once (from ``pool_seed``) and has reset pick one by the key, which makes reset
    a cheap gather (what auto-reset under ``vmap`` pays every step).

    ``make("coop2", num_agents=3)``: COOP²'s CUBE setting, a fresh 15 x 15 layout with three
    blocks of each weight 1-3 at every reset (placed by the curriculum's rules), 50 steps.
    ``make(layouts=generator)``: any :class:`~cube_jax.core.layouts.LayoutGenerator`. A pool
    (``pool_size``) of a world that draws its layouts never holds a test layout of the
    benchmark suite (:mod:`cube_jax.core.suite`): they are left out and replaced by further draws.

    ``make("easy")``, ``make(scenario="hard")``, ``make(scenario=Scenario(...))`` or
    ``make(scenario="configs/scenarios/x.yaml")``: an exact layout at every reset;
    ``num_agents`` keeps the scenario's first agents.

    ``observation`` picks the per-agent form (``"vector"``, ``"egocentric"``, ``"grid"``;
    see :mod:`cube_jax.core.observations`). Invalid input raises ``ValueError`` naming the
    argument, before anything is allocated: integers (``n``, ``num_agents``, ``max_steps``,
    ``view_radius``, ``pool_size``, ``pool_seed``) are ints, NumPy integers or integral
    floats; ``n`` and grid sides are at most 4096 and ``max_steps`` at most 2**31 - 2 (the
    step counter is int32); ``step_cost`` and ``deliver_reward`` are finite in float32; one
    environment's observation is at most 2**28 float32 values (use ``"egocentric"`` for
    large worlds) and a pool at most 2 GiB.
    """
    _check_choice("observation", observation, OBSERVATION_FORM_NAMES)
    view_radius = _check_int("view_radius", view_radius, 1, MAX_GRID_SIZE, "the largest grid side")
    pool_size = _check_int("pool_size", pool_size, 0)
    pool_seed = _check_int("pool_seed", pool_seed, 0, MAX_SEED, "PRNGKey keeps 32 bits")
    limits = _checked_limits(max_steps, step_cost, deliver_reward)
    if num_agents is not None:
        num_agents = _check_int("num_agents", num_agents, 1)
    if sum(x is not None for x in (n, scenario, layouts)) != 1:
        raise ValueError("make: give exactly one of n=<team size>, scenario=<name, path or Scenario> or "
                         "layouts=<a LayoutGenerator>")
    world = _world(scenario, n, num_agents, layouts, pool_size)
    source = world.source
    _check_sizes(observation, view_radius, source.grid_size, source.num_agents, source.num_blocks, pool_size)
    cfg = _config(world, limits, observation, view_radius)
    if pool_size:
        # a pool leaves out every test layout of the suite (cube_jax.core.suite)
        pool = PoolLayouts.draw(source, pool_size, pool_seed)
        source = pool.with_observations(_first_observations(cfg, pool.layouts))
    return CubeEnv(cfg, source, world.name, world.curriculum_n)


class _World(NamedTuple):
    """What a world family brings to :func:`make`: its layouts, its name, and the episode
    limits it has when make is not given them."""

    source: LayoutGenerator
    name: str
    limits: Tuple[int, float, float]  # max_steps, step_cost, deliver_reward
    curriculum_n: int = 0  # n of the n-curriculum, else 0


def _checked_limits(max_steps, step_cost, deliver_reward) -> Tuple[Optional[int], Optional[float], Optional[float]]:
    """make's episode limits checked (None: the world's own)."""
    if max_steps is not None:
        max_steps = _check_int("max_steps", max_steps, 1, MAX_EPISODE_STEPS, "the step counter is int32")
    if step_cost is not None:
        step_cost = as_real(step_cost, "step_cost")
    if deliver_reward is not None:
        deliver_reward = as_real(deliver_reward, "deliver_reward")
    return max_steps, step_cost, deliver_reward


def _world(scenario, n: Optional[int], num_agents: Optional[int], layouts, pool_size: int) -> _World:
    """The world family of make's one given source: n, "coop2", a generator, or a scenario."""
    if n is not None:
        n = _check_int("n", n, 1, MAX_GRID_SIZE, f"the grid side is max(20, n) and at most {MAX_GRID_SIZE}")
        if num_agents is not None and num_agents != n:
            raise ValueError(f"make: num_agents={num_agents} contradicts n={n}; the curriculum uses n agents")
        return _World(CurriculumLayouts.of(n), f"cube-n{n}", (generator.default_max_steps(n), 0.01, 1.0), n)
    if isinstance(scenario, str) and scenario == COOP2:
        agents = 3 if num_agents is None else num_agents
        if agents > COOP2_GRID:
            raise ValueError(f"make('coop2'): num_agents={agents} do not fit in column 0 of the {COOP2_GRID}x"
                             f"{COOP2_GRID} grid")
        source = CountsLayouts.of(COOP2_GRID, agents, COOP2_COUNTS)
        return _World(source, f"coop2-{agents}", (COOP2_MAX_STEPS, 0.01, 1.0))
    if layouts is not None:
        if not isinstance(layouts, LayoutGenerator):
            raise ValueError(f"make: layouts must be a cube_jax.LayoutGenerator, got {excerpt(layouts)}")
        if num_agents is not None and num_agents != layouts.num_agents:
            raise ValueError(f"make: num_agents={num_agents} contradicts the generator's {layouts.num_agents} agents")
        return _World(layouts, type(layouts).__name__, (4 * layouts.grid_size * layouts.num_blocks, 0.01, 1.0))
    if pool_size:
        raise ValueError("make: pool_size applies to the n-curriculum and the other worlds that draw their "
                         "layouts ('coop2'); a scenario has one layout")
    sc = load_scenario(scenario, num_agents=num_agents)
    source = FixedLayout.of(sc.agents, sc.blocks, sc.grid_size)
    return _World(source, sc.name, (sc.max_steps, sc.step_cost, sc.deliver_reward))


def _config(world: _World, limits: tuple, observation: str, view_radius: int) -> EnvConfig:
    """The static configuration of a world, make's limits over the world's own."""
    max_steps, step_cost, deliver_reward = (own if given is None else given for given, own in zip(limits, world.limits))
    return EnvConfig(
        grid_size=world.source.grid_size,
        num_agents=world.source.num_agents,
        num_blocks=world.source.num_blocks,
        max_steps=int(max_steps),
        step_cost=float(step_cost),
        deliver_reward=float(deliver_reward),
        observation=observation,
        view_radius=int(view_radius),
    )

