"""CUBE as a JaxMARL ``MultiAgentEnv``: the one line to change in a JaxMARL training script.

>>> import jax, jax.numpy as jnp
>>> from cube_jax.adapters.jaxmarl import make_jaxmarl
>>> env = make_jaxmarl("easy")              # a task of cube-v1, or a spec as cube_jax.make takes it
>>> env.agents, env.num_agents, env.name
(['agent_0', 'agent_1'], 2, 'cube-v1-easy')
>>> obs, state = env.reset(jax.random.PRNGKey(0))
>>> obs["agent_0"].shape, env.observation_space("agent_0").shape, env.action_space("agent_0").n
((24,), (24,), 5)
>>> actions = {"agent_0": jnp.int32(4), "agent_1": jnp.int32(0)}
>>> obs, state, rewards, dones, infos = env.step(jax.random.PRNGKey(1), state, actions)
>>> round(float(rewards["agent_0"]), 6), bool(dones["__all__"]), bool(infos["moved"][0])
(-0.01, False, True)

``reset(key) -> (obs, state)`` and ``step(key, state, actions) -> (obs, state, rewards,
dones, infos)`` follow JaxMARL's contract: dicts keyed by agent name (``agent_i``, the
project's names), ``dones["__all__"]``, and auto-reset inside ``step`` by JaxMARL's own
``MultiAgentEnv.step`` around :meth:`CubeJaxMARL.step_env` (a finished episode's next state
is ``reset`` of a key split from the step's key). The state is the core's
:class:`~cube_jax.core.types.State` itself and ``step_env`` is the core's step, so a
transition equals ``cube_jax`` bit for bit.

**Worlds.** A task of the suite ``cube-v1`` (``"easy"``, ``"hard"``, ``"n1"`` .. ``"n8"``,
``"coop2-3"``, ``"coop2-6"``, or a :class:`~cube_jax.core.suite.Task`) is built as the RL
trainer builds it for that task: the task's world and episode length and, for a world that
draws its layouts, the trainer's pool of :data:`TRAINING_POOL_SIZE` layouts drawn from
``pool_seed`` 0, which never holds a layout of the task's held-out test set
(``pool_size=0`` draws a fresh layout at every reset instead, as ``cube_jax.make`` does;
``docs/benchmark.md`` gives the measured chance that such a draw is a test layout). Anything
else is a spec of :func:`cube_jax.make`: a scenario name, path or
:class:`~cube_jax.core.scenario.Scenario`, a mapping of make's keyword arguments, keyword
arguments alone (``make_jaxmarl(n=4)``), or a built :class:`~cube_jax.core.env.CubeEnv`.

**Observations** are the core's per-agent forms (``observation="vector"``, the default and
the IPPO preset's; ``"egocentric"`` and ``"egocentric_noid"`` with ``view_radius``; ``"grid"``),
``Box`` spaces with the
bounds the form declares; actions are ``Discrete(5)`` (STAY, UP, DOWN, LEFT, RIGHT). Rewards
are the papers' team reward, the same for every agent.

**Dones and infos.** ``dones[agent]`` and ``dones["__all__"]`` are ``terminated |
truncated`` (every block delivered, or ``max_steps`` reached), as JaxMARL's scripts read
them. ``infos`` keeps the two apart, for a learner that bootstraps truncated steps: every
entry is an array with the agent axis first (shape ``(N,)``), so JaxMARL's baselines can
reshape it to their actors: ``terminated``, ``truncated``, ``engaged`` (the agent was in a
pushing chain), ``moved`` (it changed cell), ``blocks_delivered`` (blocks delivered this
step) and ``delivered_weight`` (their summed weight), the team's values repeated per agent.
JaxMARL's ``LogWrapper`` adds its ``returned_episode*`` entries to this dict.
"""
from __future__ import annotations

import sys
from functools import partial
from typing import Any, Dict, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp

_streams = sys.stdout, sys.stderr
try:
    from jaxmarl.environments import spaces
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv
except ModuleNotFoundError as err:
    missing = (err.name or "jaxmarl").split(".")[0]  # jaxmarl, or a package of its own that is missing
    raise ImportError(f"cube_jax.adapters.jaxmarl needs the jaxmarl package (no module named {missing!r}): "
                      "pip install 'cube_jax[jaxmarl]'") from None
finally:
    # jaxmarl.environments (0.2.0) sets sys.stdout and sys.stderr to the process's own streams
    # while it imports (its mabrax module), which would undo a caller's redirection or capture
    sys.stdout, sys.stderr = _streams

from cube_jax.core import suite
from cube_jax.core.env import CubeEnv, make
from cube_jax.core.types import NUM_ACTIONS, State
from cube_jax.names import agent_name

# The pool the RL trainer draws a task's layouts from (env.pool_size of cube_jax/rl/schema.py,
# pool_seed 0: the trainer never sets another); tests/adapters/test_jaxmarl.py keeps them equal.
TRAINING_POOL_SIZE = 4096
TRAINING_POOL_SEED = 0
# The per-agent observation form of the IPPO preset (cube_jax/rl/presets/ippo.yaml).
DEFAULT_OBSERVATION = "vector"

# a task (name or Task), a scenario (name, path or Scenario), a mapping of make's keyword
# arguments, a built CubeEnv, or None (make's keyword arguments alone)
Spec = Any


class CubeJaxMARL(MultiAgentEnv):
    """A CUBE world under JaxMARL's ``MultiAgentEnv`` interface; build it with :func:`make_jaxmarl`.

    ``world`` is the :class:`~cube_jax.core.env.CubeEnv` it steps, ``task`` the suite task it
    was built from (None for a plain spec).
    """

    def __init__(self, world: CubeEnv, name: str, task: Optional[suite.Task] = None):
        super().__init__(num_agents=world.num_agents)
        self.world = world
        self.task = task
        self._name = name
        self.agents = [agent_name(i) for i in range(world.num_agents)]
        low, high = world.observation_bounds  # float32[*F] each
        observation = spaces.Box(low, high, tuple(world.observation_shape[1:]), jnp.float32)
        action = spaces.Discrete(NUM_ACTIONS, dtype=jnp.int32)
        # one space object per kind, returned for every agent (the agents are alike)
        self.observation_spaces = {a: observation for a in self.agents}
        self.action_spaces = {a: action for a in self.agents}

    @property
    def name(self) -> str:
        return self._name

    @property
    def agent_classes(self) -> dict:
        return {"agent": list(self.agents)}

    @property
    def max_steps(self) -> int:
        return self.world.max_steps

    @partial(jax.jit, static_argnums=(0,))
    def reset(self, key: jax.Array) -> Tuple[Dict[str, jax.Array], State]:
        """A new episode from ``key`` (the core's ``reset``): ``(observations, state)``."""
        state, ts = self.world.reset(_raw_key(key))
        return self._per_agent(ts.observation), state

    @partial(jax.jit, static_argnums=(0,))
    def step_env(self, key: jax.Array, state: State, actions: Dict[str, jax.Array]):
        """One step of the core (``key`` is unused: the step draws nothing), no reset."""
        del key
        state, ts = self.world.step(state, self.stack_actions(actions))
        done = ts.terminated | ts.truncated
        rewards = self._per_agent(ts.reward)
        dones = {**{a: done for a in self.agents}, "__all__": done}
        n = self.num_agents
        events = ts.events
        infos = {
            "terminated": jnp.full((n,), ts.terminated),
            "truncated": jnp.full((n,), ts.truncated),
            "engaged": events.engaged,
            "moved": events.agent_moved,
            "blocks_delivered": jnp.full((n,), events.block_delivered.sum(dtype=jnp.int32)),
            "delivered_weight": jnp.full((n,), events.delivered_weight),
        }
        return self._per_agent(ts.observation), state, rewards, dones, infos

    def get_obs(self, state: State) -> Dict[str, jax.Array]:
        return self._per_agent(self.world.observe(state))

    @partial(jax.jit, static_argnums=(0,))
    def get_avail_actions(self, state: State) -> Dict[str, jax.Array]:
        """Every action is available to every agent at every step (a blocked move is a STAY)."""
        return {a: jnp.ones((NUM_ACTIONS,), bool) for a in self.agents}

    def stack_actions(self, actions: Mapping[str, jax.Array]) -> jax.Array:
        """int[N]: the actions dict in agent order, as the core's step takes it."""
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"step: actions has no entry for {missing}; give one action per agent of {self.agents}")
        return jnp.stack([jnp.asarray(actions[a]) for a in self.agents])

    def _per_agent(self, values: jax.Array) -> Dict[str, jax.Array]:
        """A dict of agent name -> row i of ``values`` (agent axis first)."""
        return {a: values[i] for i, a in enumerate(self.agents)}

    def __repr__(self) -> str:
        return f"CubeJaxMARL({self._name!r}, {self.world!r})"


def make_jaxmarl(task_or_env_spec: Spec = None, /, *, observation: Optional[str] = None,
                 view_radius: Optional[int] = None, pool_size: Optional[int] = None, pool_seed: Optional[int] = None,
                 **make_kwargs) -> CubeJaxMARL:
    """CUBE as a JaxMARL environment.

    ``task_or_env_spec``: a task of ``cube-v1`` (its name or :class:`~cube_jax.core.suite.Task`),
    a scenario name, path or ``Scenario``, a mapping of :func:`cube_jax.make`'s keyword
    arguments, a built ``CubeEnv``, or nothing (then ``make_kwargs`` are make's arguments, e.g.
    ``n=4``). ``observation`` (default ``"vector"``) and ``view_radius`` choose the per-agent
    observation form; ``pool_size``/``pool_seed`` default, for a task that draws its layouts,
    to the RL trainer's pool (:data:`TRAINING_POOL_SIZE` layouts from seed 0, none of them a test
    layout) and otherwise to make's own. A task fixes its world: ``make_kwargs`` that change it
    are refused with ValueError.
    """
    options = {"observation": observation, "view_radius": view_radius, "pool_size": pool_size, "pool_seed": pool_seed}
    options = {k: v for k, v in options.items() if v is not None}
    task = _task_of(task_or_env_spec)
    if task is not None:
        return CubeJaxMARL(_task_world(task, options, make_kwargs), f"{suite.VERSION}-{task.name}", task)
    if isinstance(task_or_env_spec, CubeEnv):
        if options or make_kwargs:
            raise ValueError(f"make_jaxmarl: {sorted({**options, **make_kwargs})} cannot change a built CubeEnv; "
                             "give cube_jax.make's arguments instead")
        world = task_or_env_spec
    elif isinstance(task_or_env_spec, Mapping):
        clash = sorted(set(task_or_env_spec) & (set(options) | set(make_kwargs)))
        if clash:
            raise ValueError(f"make_jaxmarl: {clash} given both in the spec and as keyword arguments")
        world = make(**{"observation": DEFAULT_OBSERVATION, **task_or_env_spec, **options, **make_kwargs})
    else:
        spec = () if task_or_env_spec is None else (task_or_env_spec,)
        world = make(*spec, **{"observation": DEFAULT_OBSERVATION, **options}, **make_kwargs)
    name = world.name if world.name.startswith("cube") else f"cube-{world.name}"
    return CubeJaxMARL(world, name)


def _task_of(spec) -> Optional[suite.Task]:
    if isinstance(spec, suite.Task):
        return spec
    if isinstance(spec, str) and spec in suite.TASK_NAMES:
        return suite.task(spec)
    return None


def _task_world(task: suite.Task, options: dict, make_kwargs: dict) -> CubeEnv:
    """The task's world as the RL trainer builds it: its own pool for a world that draws layouts."""
    options = {"observation": DEFAULT_OBSERVATION, **options}
    if task.fixed_layout:
        if options.get("pool_size"):
            raise ValueError(f"make_jaxmarl: task {task.name!r} has one fixed layout; pool_size does not apply")
        options.pop("pool_size", None)
        options.pop("pool_seed", None)
    else:
        options.setdefault("pool_size", TRAINING_POOL_SIZE)
        options.setdefault("pool_seed", TRAINING_POOL_SEED)
    return task.make(**options, **make_kwargs)  # a pool of make's leaves the test layouts out


def _raw_key(key: jax.Array) -> jax.Array:
    """uint32[2], the key form of the core's state, from a raw key or a typed ``jax.random.key``."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


__all__ = ["CubeJaxMARL", "DEFAULT_OBSERVATION", "TRAINING_POOL_SEED", "TRAINING_POOL_SIZE", "make_jaxmarl"]
