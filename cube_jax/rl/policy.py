"""Loading a trained policy from a checkpoint, for evaluation and the PettingZoo adapter.

A policy is a network from one agent's observation to one score per action, shared by
every agent: an actor's logits (IPPO, MAPPO) or a Q-network's action values (PQN-VDN).
Greedy play takes the best-scored action either way; sampled play draws from the logits,
or is epsilon-greedy over the action values (:func:`sample_actions`).

>>> policy = load_policy("runs/ippo-easy-20250101-000000")   # doctest: +SKIP
>>> env = cube_jax.make(**policy.env_kwargs)                    # doctest: +SKIP
>>> actions = policy.act(ts.observation, key)                   # int32[N], greedy by default  # doctest: +SKIP

A recurrent (GRU) actor (``network.recurrent``) also reads its hidden state: ``step`` takes
and returns it (``initial_carry()`` at an episode's start), and its batched policy
(:class:`RecurrentActorPolicy`) keeps it in the policy state. ``step`` plays either kind:

>>> carry = policy.initial_carry()                              # float32[N, H] zeros  # doctest: +SKIP
>>> actions, carry = policy.step(ts.observation, carry, key)    # doctest: +SKIP

An actor trained with ``network.blocked_moves`` also reads, after its observation, which
move of each agent's last step left it on its cell (:func:`blocked_features`); its batched
policies keep the last actions and positions in their state (:class:`MoveMemory`), and
``act``/``step`` take the observation with those features appended.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cube_jax.core.observations import observation_shape, observe
from cube_jax.core.types import NUM_ACTIONS, EnvConfig, State
from cube_jax.rl import algorithms
from cube_jax.rl.checkpoint import POLICY_META, read_meta, readable, restore_actor
from cube_jax.rl.networks import RecurrentActor, build_networks, build_q_network, init_recurrent


@struct.dataclass
class QPolicyParams:
    """What acting needs, and what a checkpoint saves as the policy."""

    q_network: Any  # the Q-network's parameters, shared by every agent
    eval_epsilon: jax.Array  # float32[] sampled play's epsilon (pqn.eval_epsilon)



def epsilon_greedy(key: jax.Array, values: jax.Array, epsilon) -> jax.Array:
    """int32[...]: for action values float32[..., A], each agent's best action, or with
    probability ``epsilon`` (a float or a traced float32[]) a uniformly random one, drawn
    independently for every agent."""
    k_explore, k_action = jax.random.split(key)
    explore = jax.random.uniform(k_explore, values.shape[:-1]) < epsilon
    random = jax.random.randint(k_action, values.shape[:-1], 0, values.shape[-1])
    return jnp.where(explore, random, jnp.argmax(values, axis=-1)).astype(jnp.int32)


def sample_actions(scores: jax.Array, key: jax.Array, epsilon=None) -> jax.Array:
    """int32[...]: sampled play from scores float32[..., A]: drawn from the scores as logits
    when ``epsilon`` is None (an actor), epsilon-greedy over them as action values otherwise
    (a Q-network)."""
    if epsilon is None:
        return jax.random.categorical(key, scores).astype(jnp.int32)
    return epsilon_greedy(key, scores, epsilon)


BLOCKED_FEATURES = NUM_ACTIONS - 1  # one per direction: UP, DOWN, LEFT, RIGHT


def blocked_features(last_actions: jax.Array, moved: jax.Array) -> jax.Array:
    """float32[..., N, 4]: for each agent, the one-hot direction (UP, DOWN, LEFT, RIGHT) of
    its last action when that action was a move and the agent ended the step on the cell
    it started it on (the move was blocked, or a push failed); zeros after a STAY, after a
    move or push that took the agent elsewhere, and at an episode's first step.

    ``last_actions`` int32[..., N] (0..4, DYNAMICS.md's ids), ``moved`` bool[..., N]
    (``StepEvents.agent_moved``, or positions compared).

    >>> blocked_features(jnp.array([0, 2, 4]), jnp.array([False, False, True])).tolist()
    [[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    """
    one_hot = jax.nn.one_hot(last_actions, NUM_ACTIONS, dtype=jnp.float32)[..., 1:]
    return one_hot * (~jnp.asarray(moved, bool))[..., None]


@struct.dataclass
class MoveMemory:
    """What a policy trained with ``network.blocked_moves`` remembers between steps: every
    agent's position before the last step and the action it took there."""

    position: jax.Array  # int32[N, 2]
    action: jax.Array  # int32[N], STAY (0) before the first step

    @classmethod
    def start(cls, num_agents: int) -> "MoveMemory":
        """An episode's start: no last action, so no blocked move."""
        return cls(jnp.zeros((num_agents, 2), jnp.int32), jnp.zeros((num_agents,), jnp.int32))

    def features(self, state: State) -> jax.Array:
        """float32[N, 4]: :func:`blocked_features` of the last step, which reached ``state``."""
        return blocked_features(self.action, jnp.any(state.agent_pos != self.position, axis=-1))


class _MemoryMixin:
    """The policy state's optional last item, a :class:`MoveMemory` (``blocked_moves``)."""

    def _start(self, head: tuple, batch: Optional[int] = None) -> tuple:
        if not self.blocked_moves:
            return head
        memory = MoveMemory.start(self.cfg.num_agents)
        if batch is not None:
            memory = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), memory)
        return head + (memory,)

    def _after(self, head: tuple, state: State, actions: jax.Array) -> tuple:
        return head + (MoveMemory(state.agent_pos, actions),) if self.blocked_moves else head

    def observation(self, state: State, policy_state) -> jax.Array:
        """The network's input for ``state``: its observation form, followed (``blocked_moves``)
        by :func:`blocked_features` of the step that reached it."""
        observation = observe(self.cfg, state)
        if not self.blocked_moves:
            return observation
        return jnp.concatenate([observation, policy_state[-1].features(state)], axis=-1)


@dataclasses.dataclass(frozen=True)
class ActorPolicy(_MemoryMixin):
    """A policy network as a batched policy (:class:`cube_jax.agents.BatchedPolicy`).

    It computes the observation it reads from the state (``cfg``'s form) and acts for every
    agent; its policy state is ``(key, greedy)``: greedy takes the best-scored action,
    otherwise actions are sampled with the key (:func:`sample_actions`: from an actor's
    logits, or epsilon-greedy over a Q-network's values when ``epsilon`` is set). ``params``
    and ``epsilon`` may be traced (training's evaluation builds one inside its jitted program).
    With ``blocked_moves`` the state gains a :class:`MoveMemory`: ``(key, greedy, memory)``.
    """

    actor: Any  # the flax module: observations float32[..., *F] -> scores float32[..., A]
    params: Any  # its parameters
    cfg: EnvConfig  # whose observation form the network reads
    name: str = "policy"
    epsilon: Any = None  # None: the scores are logits; a float (or float32[]): action values, sampled epsilon-greedy
    blocked_moves: bool = False  # the network also reads blocked_features (network.blocked_moves)

    def init(self, key: jax.Array):
        return self._start((key, jnp.array(True)))

    def states(self, keys: jax.Array, greedy: jax.Array):
        """Policy states of a batch of episodes: keys uint32[E, 2], greedy bool[E]."""
        return self._start((keys, greedy), keys.shape[0])

    def scores(self, state: State, policy_state) -> jax.Array:
        """float32[N, A]: the network's scores for every agent in ``state``."""
        return self.actor.apply(self.params, self.observation(state, policy_state))

    def act(self, state: State, policy_state):
        key, greedy = policy_state[:2]
        key, sub = jax.random.split(key)
        scores = self.scores(state, policy_state)
        actions = jnp.where(greedy, jnp.argmax(scores, axis=-1), sample_actions(scores, sub, self.epsilon))
        actions = actions.astype(jnp.int32)
        return actions, self._after((key, greedy), state, actions)


@dataclasses.dataclass(frozen=True)
class RecurrentActorPolicy(_MemoryMixin):
    """A recurrent actor (:class:`~cube_jax.rl.networks.RecurrentActor`) as a batched policy.

    Its policy state is ``(key, greedy, hidden float32[N, H])``; ``init`` starts an episode
    with the hidden state zeroed, as training does where an episode starts. Otherwise like
    :class:`ActorPolicy` (greedy: argmax of the logits; else sampled from them), a
    :class:`MoveMemory` included with ``blocked_moves``: ``(key, greedy, hidden, memory)``.
    """

    actor: Any  # RecurrentActor
    params: Any  # its parameters
    cfg: EnvConfig  # whose observation form the actor reads
    name: str = "policy"
    blocked_moves: bool = False  # the actor also reads blocked_features (network.blocked_moves)

    def initial_hidden(self) -> jax.Array:
        """float32[N, H]: every agent's hidden state at an episode's start."""
        return jnp.zeros((self.cfg.num_agents, self.actor.gru_hidden), jnp.float32)

    def init(self, key: jax.Array):
        return self._start((key, jnp.array(True), self.initial_hidden()))

    def states(self, keys: jax.Array, greedy: jax.Array):
        """Policy states of a batch of episodes: keys uint32[E, 2], greedy bool[E]."""
        hidden = jnp.broadcast_to(self.initial_hidden(), (keys.shape[0],) + self.initial_hidden().shape)
        return self._start((keys, greedy, hidden), keys.shape[0])

    def act(self, state: State, policy_state):
        key, greedy, hidden = policy_state[:3]
        key, sub = jax.random.split(key)
        observation = self.observation(state, policy_state)[None]  # one time step
        hidden, logits = self.actor.apply(self.params, hidden, observation, jnp.zeros(observation.shape[:2], bool))
        logits = logits[0]
        actions = jnp.where(greedy, jnp.argmax(logits, axis=-1), sample_actions(logits, sub)).astype(jnp.int32)
        return actions, self._after((key, greedy, hidden), state, actions)


@dataclasses.dataclass(frozen=True)
class LoadedPolicy:
    """A trained policy network. ``act`` is pure, so ``jax.jit`` and ``jax.vmap`` over it work."""

    params: Any  # network parameters (flax), shared by all agents
    actor: Any  # the flax module: the Actor, or the Q-network of PQN-VDN
    env_kwargs: Dict[str, Any]  # keyword arguments of cube_jax.make for the world it was trained on
    observation_size: int  # D, the per-agent observation length it expects (flattened)
    meta: Dict[str, Any]  # everything in the checkpoint's policy.json
    feature_shape: Tuple[int, ...] = ()  # one agent's observation shape; () means (observation_size,)
    epsilon: Optional[float] = None  # None: an actor's logits; a float: Q-values, sampled play epsilon-greedy

    @property
    def recurrent(self) -> bool:
        """Whether the actor is a GRU (its actions depend on a hidden state: use :meth:`step`)."""
        return isinstance(self.actor, RecurrentActor)

    @property
    def blocked_moves(self) -> bool:
        """Whether the network reads :func:`blocked_features` after the observation
        (``network.blocked_moves``): ``act`` and ``step`` then take the observation with the
        four features of every agent's last step appended, ``feature_shape`` counting them."""
        return bool(self.meta.get("network", {}).get("blocked_moves", False))

    def act(self, observation: jax.Array, key: jax.Array, greedy: bool = True) -> jax.Array:
        """int32[N] actions for per-agent observations float32[N, *F] (any leading axes work).

        ``F`` is ``feature_shape`` (``(D,)`` for the vector forms, ``(K, K, 6)`` for the grid;
        ``(D + 4,)`` with :attr:`blocked_moves`: the observation, then :func:`blocked_features`).
        ``greedy`` picks the best-scored action; otherwise actions are sampled with ``key``
        (:func:`sample_actions`). ``greedy`` may be a traced bool. A recurrent policy acts
        through :meth:`step`.
        """
        if self.recurrent:
            raise ValueError("LoadedPolicy.act: this policy is recurrent (network.recurrent); play it with "
                             "step(observation, carry, key), carry = initial_carry() at each episode's start")
        observation = self._checked(observation, "act")
        scores = self.actor.apply(self.params, observation)
        sampled = sample_actions(scores, key, self.epsilon)
        return jnp.where(greedy, jnp.argmax(scores, axis=-1), sampled).astype(jnp.int32)

    def initial_carry(self, batch_shape: Tuple[int, ...] = (), num_agents: Optional[int] = None) -> jax.Array:
        """float32[*batch_shape, N, H]: the hidden state of every agent at an episode's start
        (H = 0 for a feedforward policy, which has none); N is the team it trained with unless
        ``num_agents`` says otherwise (an observation form that does not depend on n plays any team)."""
        num_agents = int(self.meta["observation_shape"][0]) if num_agents is None else int(num_agents)
        size = self.actor.gru_hidden if self.recurrent else 0
        return jnp.zeros(tuple(batch_shape) + (num_agents, size), jnp.float32)

    def step(self, observation: jax.Array, carry: jax.Array, key: jax.Array,
             greedy: bool = True) -> Tuple[jax.Array, jax.Array]:
        """``(actions int32[..., N], carry)`` for observations float32[..., N, *F] and the hidden
        state ``carry`` float32[..., N, H] (:meth:`initial_carry` at an episode's start): one
        step of either kind of policy (a feedforward one passes ``carry`` through)."""
        if not self.recurrent:
            return self.act(observation, key, greedy), carry
        observation = self._checked(observation, "step")[None]  # one time step
        carry, logits = self.actor.apply(self.params, carry, observation, jnp.zeros(carry.shape[:-1], bool)[None])
        logits = logits[0]
        actions = jnp.where(greedy, jnp.argmax(logits, axis=-1), sample_actions(logits, key))
        return actions.astype(jnp.int32), carry

    def _checked(self, observation, method: str) -> jax.Array:
        observation = jnp.asarray(observation, jnp.float32)
        expected = self.feature_shape or (self.observation_size,)
        if tuple(observation.shape[observation.ndim - len(expected):]) != tuple(expected):
            got = observation.shape[-1] if len(expected) == 1 else tuple(observation.shape[-len(expected):])
            want = expected[0] if len(expected) == 1 else tuple(expected)
            blocked = (f": the world's observation followed by the {BLOCKED_FEATURES} blocked_features of the agent's "
                       "last step (network.blocked_moves)" if self.blocked_moves else "")
            raise ValueError(
                f"LoadedPolicy.{method}: observation has {got} features per agent, the policy "
                f"expects {want}{blocked} (trained with cube_jax.make(**{self.env_kwargs}))"
            )
        return observation

    def for_world(self, env, name: str = "policy"):
        """This policy as a batched policy on ``env``'s world (greedy by default): it reads the
        observation form it was trained with; ValueError when that does not fit ``env``."""
        cfg = dataclasses.replace(env.cfg, observation=self.env_kwargs.get("observation", "vector"),
                                  view_radius=self.env_kwargs.get("view_radius", env.cfg.view_radius))
        expected = tuple(int(d) for d in self.meta["observation_shape"][1:])  # the world's part of the input
        got = tuple(observation_shape(cfg)[1:])
        if got != expected:
            raise ValueError(
                f"the policy reads observations of shape {tuple(expected)} per agent (trained on "
                f"cube_jax.make(**{self.env_kwargs})); this world gives {got} in its {cfg.observation!r} form "
                f"({env.num_agents} agents, {env.num_blocks} blocks): use a world of the same size")
        if self.recurrent:
            return RecurrentActorPolicy(self.actor, self.params, cfg, name, blocked_moves=self.blocked_moves)
        return ActorPolicy(self.actor, self.params, cfg, name, self.epsilon, blocked_moves=self.blocked_moves)


def checkpoint_dir(path: Union[str, Path]) -> Path:
    """Accepts a run folder or its ``checkpoint/`` folder."""
    path = Path(path)
    if (readable(path) / POLICY_META).is_file():
        return path
    if (readable(path / "checkpoint") / POLICY_META).is_file():
        return path / "checkpoint"
    raise FileNotFoundError(
        f"{str(path)!r} holds no checkpoint: no {POLICY_META} in it or in its checkpoint/ folder; train one with: "
        "python baselines/ippo.py"
    )


def load_policy(path: Union[str, Path]) -> LoadedPolicy:
    """The policy saved by ``baselines/ippo.py``, ``baselines/mappo.py`` or ``baselines/pqn_vdn.py`` at ``path``."""
    directory = checkpoint_dir(path)
    meta = read_meta(directory)
    feature_shape = tuple(int(d) for d in meta["observation_shape"][1:])  # observation_shape is [N, *F]
    if meta.get("network", {}).get("blocked_moves", False):  # the network's input: the observation, then 4 more
        feature_shape = feature_shape[:-1] + (feature_shape[-1] + BLOCKED_FEATURES,)
    network, params, epsilon = _restore_network(directory, meta, feature_shape)
    return LoadedPolicy(params=params, actor=network, env_kwargs=dict(meta["env_kwargs"]),
                        observation_size=int(np.prod(feature_shape)), meta=meta, feature_shape=feature_shape,
                        epsilon=epsilon)


def _restore_network(directory: Path, meta: Dict[str, Any], feature_shape: Tuple[int, ...]):
    """``(module, params, epsilon)`` of a checkpoint's policy: the actor (epsilon None), or
    for PQN-VDN the Q-network and the exploration of its sampled evaluation."""
    sample = jnp.zeros(feature_shape, jnp.float32)
    if algorithms.of_meta(meta).q_values:
        network = build_q_network(meta["network"], meta["num_actions"], len(feature_shape))
        abstract = QPolicyParams(jax.eval_shape(network.init, jax.random.PRNGKey(0), sample),
                                 jax.ShapeDtypeStruct((), jnp.float32))
        saved = restore_actor(directory, abstract)
        return network, saved.q_network, float(saved.eval_epsilon)
    actor, _ = build_networks(meta["network"], meta["num_actions"], len(feature_shape))
    if isinstance(actor, RecurrentActor):
        abstract = jax.eval_shape(lambda key: init_recurrent(actor, key, sample), jax.random.PRNGKey(0))
    else:
        abstract = jax.eval_shape(actor.init, jax.random.PRNGKey(0), sample)
    return actor, restore_actor(directory, abstract), None
