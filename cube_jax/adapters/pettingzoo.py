"""A PettingZoo ``ParallelEnv`` over a CUBE world.

>>> import cube_jax
>>> env = cube_jax.parallel_env("easy")
>>> obs, infos = env.reset(seed=0)
>>> env.agents
['agent_0', 'agent_1']
>>> obs, rewards, terminations, truncations, infos = env.step({"agent_0": 4, "agent_1": 0})
>>> round(rewards["agent_0"], 6), terminations["agent_0"], infos["agent_0"]["moved"]
(-0.01, False, True)

Agent ``i`` of the JAX world is ``"agent_i"``. All agents share one episode: they finish
together (every block delivered, or ``max_steps`` reached), after which ``agents`` is empty
and the next call must be ``reset``; there is no auto-reset.

``infos[agent]`` holds the agent's events of the last step: ``"engaged"`` (in a pushing
chain), ``"moved"`` (changed cell), and the team's ``"blocks_delivered"`` (ids delivered
this step), ``"delivered_weight"`` and ``"t"`` (steps taken). ``reset`` reports the same keys
with nothing happened.

Each ``step`` runs the world's jitted ``step`` once, packs what the dicts need into one array
(a second, tiny jitted call) and copies that to the host in one transfer. ``jax_state``
exposes the JAX ``State`` for symbolic tools; ``state()`` is the five-channel grid.
Observation spaces are ``Box`` spaces with the bounds the observation form declares
(``env.world.observation_bounds``); ``state_space`` bounds the grid's channels.

**Plans.** With ``plans=True`` an agent's action is either a primitive (an int in 0..4) or
a symbolic plan: text such as ``"move_to_block(0, left); push_block(0, 5)"`` or JSON (a
string, a list of actions or ``{"plan": [...]}``; see :mod:`cube_jax.symbolic.actions`). The
plan executor turns running plans into primitives; an agent whose plan is still running
needs no new input (leave it out of the dict, or give None) until its info says
``"needs_input": True``. A plan that cannot be read or does not fit the world comes back as
``infos[agent]["plan_error"]`` (the :class:`~cube_jax.symbolic.PlanError` as a dict) and the
agent stays in place this step; the episode goes on. A primitive, or a new plan, replaces a
running plan. Every info in this mode also has ``"plan_status"`` (``started``,
``in_progress``, ``succeeded``, ``failed`` or ``done``) and ``"plan_action"`` (the symbolic
action that emitted this step's primitive, as text, or None).

>>> env = cube_jax.parallel_env("easy", plans=True)
>>> obs, infos = env.reset(seed=0)
>>> obs, rewards, terminations, truncations, infos = env.step(
...     {"agent_0": "move_to_block(0, left); push_block(0, 9)", "agent_1": "idle(3)"})
>>> infos["agent_0"]["plan_action"], infos["agent_1"]["needs_input"]
('move_to_block(0, left)', False)
>>> obs, rewards, terminations, truncations, infos = env.step({"agent_1": "push_block(7, 1)"})
>>> infos["agent_1"]["plan_error"]["message"]
'push_block: unknown block 7; blocks are 0..2'
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from pettingzoo import ParallelEnv

from cube_jax.adapters.actions import PlanActionSpace, PlanMode, primitive_actions
from cube_jax.adapters.render import render_rgb, render_text
from cube_jax.core.env import make
from cube_jax.core.observations import grid_bounds, grid_observation
from cube_jax.core.types import NUM_ACTIONS, State, TimeStep
from cube_jax.names import agent_name
from cube_jax.symbolic.executor import PlanExecutor

RENDER_MODES = ("human", "ansi", "rgb_array")
# PRNGKey keeps only the low 32 bits of a seed (without x64), so larger or negative seeds
# would silently repeat smaller ones; they are refused instead.
MAX_SEED = 2**32 - 1

# The grid state for centralised critics; jitted once per grid size.
_grid_observation = jax.jit(grid_observation)


@jax.jit
def _pack_step_result(ts: TimeStep, t: jax.Array) -> jax.Array:
    """float32[N * obs + 3N + B + 4]: what the adapter reads after a step, in one array.

    One host copy of one array costs a fraction of copying the timestep's dozen leaves one
    by one. Layout: observations (flattened), reward[N], engaged[N], agent_moved[N],
    block_delivered[B], then terminated, truncated, delivered_weight, t (all small integers,
    exact in float32).
    """
    events = ts.events
    scalars = jnp.stack([ts.terminated, ts.truncated, events.delivered_weight, t]).astype(jnp.float32)
    parts = [ts.observation.reshape(-1), ts.reward, events.engaged, events.agent_moved, events.block_delivered]
    return jnp.concatenate([part.astype(jnp.float32) for part in parts] + [scalars])


def _host_result(world, names, ts: TimeStep, state: State):
    """Per-agent dicts of plain Python values, from a single device-to-host copy."""
    n, b = len(names), world.num_blocks
    flat = np.asarray(_pack_step_result(ts, state.t))  # float32[N * obs + 3N + B + 4]
    obs_size = flat.size - 3 * n - b - 4
    obs = flat[:obs_size].reshape((n,) + world.observation_shape[1:]).copy()  # writable rows
    reward, engaged, moved, delivered_mask, flags = np.split(
        flat[obs_size:], np.cumsum([n, n, n, b])
    )
    terminated, truncated = bool(flags[0]), bool(flags[1])
    delivered = tuple(int(j) for j in np.flatnonzero(delivered_mask))
    delivered_weight, t = int(flags[2]), int(flags[3])
    observations = {name: obs[i] for i, name in enumerate(names)}
    rewards = dict(zip(names, reward.tolist()))
    terminations = dict.fromkeys(names, terminated)
    truncations = dict.fromkeys(names, truncated)
    infos = {
        name: {
            "engaged": e,
            "moved": m,
            "blocks_delivered": delivered,
            "delivered_weight": delivered_weight,
            "t": t,
        }
        for name, e, m in zip(names, (engaged > 0).tolist(), (moved > 0).tolist())
    }
    return observations, rewards, terminations, truncations, infos


class CubeParallelEnv(ParallelEnv):
    """CUBE as a PettingZoo ``ParallelEnv``; ``make_args``/``make_kwargs`` go to :func:`cube_jax.make`."""

    metadata = {
        "name": "cube_jax_v0",
        "render_modes": list(RENDER_MODES),
        "render_fps": 4,
        "is_parallelizable": True,
    }

    def __init__(self, *make_args, render_mode: Optional[str] = None, plans: bool = False, **make_kwargs):
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode: got {render_mode!r}, expected None or one of {RENDER_MODES}")
        if not isinstance(plans, bool):
            raise ValueError(f"plans: expected True or False, got {plans!r}")
        self.render_mode = render_mode
        self.plans = plans
        self.world = make(*make_args, **make_kwargs)
        cfg = self.world.cfg
        self.possible_agents = [agent_name(i) for i in range(cfg.num_agents)]
        self.agents = []
        self._agent_index = {name: i for i, name in enumerate(self.possible_agents)}
        low, high = self.world.observation_bounds
        self.observation_spaces = {
            name: gymnasium.spaces.Box(low, high, dtype=np.float32) for name in self.possible_agents
        }
        if plans:
            self.action_spaces = {name: PlanActionSpace(cfg.num_blocks) for name in self.possible_agents}
        else:
            self.action_spaces = {name: gymnasium.spaces.Discrete(NUM_ACTIONS) for name in self.possible_agents}
        self.plan_mode: Optional[PlanMode] = None
        self.state_space = gymnasium.spaces.Box(*grid_bounds(cfg, self.world.max_weight), dtype=np.float32)
        # Seeds episodes started with reset(seed=None); reset(seed=s) re-seeds it from s, so a
        # seeded run of several episodes repeats exactly.
        self._seed_rng = np.random.default_rng()
        self._state: Optional[State] = None

    # -- spaces ----------------------------------------------------------------------------
    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        return self.observation_spaces[self._check_agent_name(agent, "observation_space")]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.action_spaces[self._check_agent_name(agent, "action_space")]

    # -- episode ---------------------------------------------------------------------------
    def reset(
        self, seed: Optional[int] = None, options: Optional[dict] = None
    ) -> Tuple[Dict[str, np.ndarray], Dict[str, dict]]:
        """Starts an episode; ``seed`` becomes ``jax.random.PRNGKey(seed)``. ``options`` is unused."""
        if seed is None:
            seed = int(self._seed_rng.integers(0, MAX_SEED, endpoint=True))
        else:
            if (
                not isinstance(seed, (int, np.integer))
                or isinstance(seed, (bool, np.bool_))
                or not 0 <= seed <= MAX_SEED
            ):
                raise ValueError(f"reset: seed must be None or an integer in 0..{MAX_SEED}, got {seed!r}")
            seed = int(seed)
            self._seed_rng = np.random.default_rng(seed)
        self._state, ts = self.world.reset(jax.random.PRNGKey(seed))
        self.agents = self.possible_agents[:]
        obs, _, _, _, infos = _host_result(self.world, self.possible_agents, ts, self._state)
        if self.plans:
            self.plan_mode = PlanMode(self.world, self.possible_agents)
            self.plan_mode.reset_infos(infos)
        if self.render_mode == "human":
            self.render()
        return obs, infos

    def step(self, actions: Dict[str, Any]):
        """One step for ``actions`` ``{agent: int in 0..4}`` covering every live agent."""
        if not self.agents:
            raise RuntimeError(
                "step: no live agents: the episode has ended or reset() was never called; call reset() first"
            )
        if self.plans:
            action_array, plan_infos = self.plan_mode.joint_action(actions, self.agents, self._state)
        else:
            action_array = primitive_actions(actions, self.agents, self._agent_index, self.possible_agents)
        self._state, ts = self.world.step(self._state, action_array)
        result = _host_result(self.world, self.possible_agents, ts, self._state)
        if self.plans:
            self.plan_mode.add_infos(result[4], plan_infos, self._state)
        if result[2][self.agents[0]] or result[3][self.agents[0]]:
            self.agents = []
        if self.render_mode == "human":
            self.render()
        return result

    # -- views -----------------------------------------------------------------------------
    @property
    def executor(self) -> Optional[PlanExecutor]:
        """Plan mode's CPU plan executor (None before the first reset or without plans)."""
        return None if self.plan_mode is None else self.plan_mode.executor

    @property
    def jax_state(self) -> State:
        """The underlying (unbatched) JAX ``State`` of the current episode."""
        return self._require_state("jax_state")

    def state(self) -> np.ndarray:
        """float32[K, K, 5]: the papers' five-channel grid (``cube_jax.grid_observation``)."""
        return np.asarray(_grid_observation(self._require_state("state")))

    def render(self):
        if self.render_mode is None:
            gymnasium.logger.warn(
                "You are calling render method without specifying any render mode. You can specify the render_mode "
                f'at initialization, e.g. cube_jax.parallel_env(..., render_mode="rgb_array"); modes: {RENDER_MODES}'
            )
            return None
        state = self._require_state("render")
        if self.render_mode == "rgb_array":
            return render_rgb(state)
        text = render_text(state)
        if self.render_mode == "ansi":
            return text
        print(text + "\n")
        return None

    def close(self) -> None:
        # Nothing is held open: rendering draws into fresh arrays and prints.
        self._state = None
        self.plan_mode = None
        self.agents = []

    def __repr__(self) -> str:
        return f"CubeParallelEnv({self.world!r}, render_mode={self.render_mode!r}, plans={self.plans})"

    def _require_state(self, what: str) -> State:
        if self._state is None:
            raise RuntimeError(f"{what}: no episode yet; call reset() first")
        return self._state

    def _check_agent_name(self, agent: str, what: str) -> str:
        if agent not in self._agent_index:
            raise ValueError(f"{what}: unknown agent {agent!r}; agents are {self.possible_agents}")
        return agent


