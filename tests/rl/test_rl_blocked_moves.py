"""``network.blocked_moves``: PPO's networks read, after each agent's observation, which move
of its last step left it on its cell. Training computes the features from the step's events,
the batched policies from the positions they remember: both agree with an independent count
of where the agents stood, resets included; a run saves a policy that replays its own greedy
evaluation; bad combinations are refused naming the keys."""
import numpy as np
import pytest

pytest.importorskip("optax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import cube_jax  # noqa: E402
from cube_jax.rl import config as C  # noqa: E402
from cube_jax.rl.policy import ActorPolicy, blocked_features  # noqa: E402
from cube_jax.rl.ppo import PPO  # noqa: E402
from tests.rl_tiny import TINY_PPO  # noqa: E402

TINY = list(TINY_PPO) + ["network.blocked_moves=true"]


def expected_blocked(actions: np.ndarray, before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """float32[..., N, 4], counted in plain numpy: the direction of a move that left the agent where it was."""
    out = np.zeros(actions.shape + (4,), np.float32)
    stayed = (before == after).all(-1)
    for direction in range(1, 5):
        out[..., direction - 1] = (actions == direction) & stayed
    return out


def test_training_observations_end_with_the_moves_that_left_agents_in_place():
    # max_steps 6: the rollout crosses resets (truncations), whose first observations have no blocked move.
    ppo = PPO(C.build("ippo", overrides=TINY + ["env.max_steps=6", "train.stagger_start=false"]))
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    width = ppo.env.observation_shape[-1]
    assert runner.obs.shape == (8, 2, width + 4) and not np.asarray(runner.obs[..., width:]).any()
    step = jax.jit(ppo._env_step)
    blocked_seen = 0
    for t in range(14):
        before = np.asarray(runner.env_state.env_state.agent_pos)
        uniform = jax.random.uniform(jax.random.PRNGKey(t), (8, 2))
        runner, transition = step(runner, uniform)
        after_step = np.asarray(transition.final_critic_in[..., width:])  # the pre-reset state's features
        fresh = np.asarray(transition.truncated | transition.terminated)
        actions = np.asarray(transition.action)
        # Where no episode ended, the post-step positions are the base state's; where one did, the
        # pre-reset features must still match, and the new episode's observation carries zeros.
        expected = expected_blocked(actions, before, np.asarray(runner.env_state.env_state.agent_pos))
        np.testing.assert_array_equal(after_step[~fresh], expected[~fresh])
        np.testing.assert_array_equal(np.asarray(runner.obs[..., width:])[~fresh], expected[~fresh])
        assert not np.asarray(runner.obs[..., width:])[fresh].any()
        blocked_seen += int(expected[~fresh].sum())
        # The world's part of the observation is the environment's own observation.
        np.testing.assert_array_equal(
            np.asarray(runner.obs[..., :width]),
            np.asarray(jax.vmap(ppo.env.observe)(runner.env_state.env_state)))
    assert blocked_seen > 0  # random actions on a small grid hit walls and teammates


def test_the_batched_policy_remembers_what_training_computes():
    env = cube_jax.make(scenario="easy")
    ppo = PPO(C.build("ippo", overrides=TINY))
    params = jax.jit(ppo.init)(jax.random.PRNGKey(1)).params["actor"]
    policy = ActorPolicy(ppo.actor, params, env.cfg, blocked_moves=True)
    state, _ = env.reset(jax.random.PRNGKey(2))
    policy_state = policy.init(jax.random.PRNGKey(3))
    policy_state = (policy_state[0], jnp.array(False)) + policy_state[2:]  # sampled: the agents wander
    act, env_step = jax.jit(policy.act), jax.jit(env.step)
    observation = jax.jit(policy.observation)
    assert not np.asarray(observation(state, policy_state)[:, -4:]).any()  # an episode's first step
    seen = 0
    for _ in range(30):
        actions, policy_state = act(state, policy_state)
        state, ts = env_step(state, actions)
        features = np.asarray(observation(state, policy_state))
        np.testing.assert_array_equal(features[:, :-4], np.asarray(ts.observation))
        np.testing.assert_array_equal(features[:, -4:],
                                      np.asarray(blocked_features(actions, ts.events.agent_moved)))
        seen += int(features[:, -4:].sum())
    assert seen > 0


def test_mappo_critic_inputs_end_with_the_blocked_features():
    ppo = PPO(C.build("mappo", overrides=TINY))
    runner = jax.eval_shape(ppo.init, jax.random.PRNGKey(0))
    plain = PPO(C.build("mappo", overrides=list(TINY_PPO)))  # the same without blocked_moves
    plain_runner = jax.eval_shape(plain.init, jax.random.PRNGKey(0))
    critic = jax.eval_shape(ppo.critic_inputs, runner.env_state, runner.obs)
    plain_critic = jax.eval_shape(plain.critic_inputs, plain_runner.env_state, plain_runner.obs)
    assert runner.obs.shape[-1] == plain_runner.obs.shape[-1] + 4
    assert critic.shape[-1] == plain_critic.shape[-1] + 4


@pytest.mark.parametrize("recurrent", [False, True], ids=["feedforward", "recurrent"])
def test_a_run_saves_a_policy_that_replays_its_greedy_evaluation(tmp_path, recurrent):
    from cube_jax.evaluation.batched import rollout, summarize
    from cube_jax.rl import run
    from cube_jax.rl.policy import RecurrentActorPolicy, load_policy

    gru = ["network.recurrent=true", "network.gru_hidden=16"] if recurrent else []
    cfg = C.build("ippo", overrides=TINY + gru + ["num_seeds=1", "env.max_steps=30", f"output.root={tmp_path}",
                                                  "output.name=blocked", "output.gif=false", "output.plot=false"])
    summary = run.train_and_report(cfg)
    policy = load_policy(tmp_path / "blocked")
    assert policy.blocked_moves and policy.recurrent == recurrent
    env = cube_jax.make(**policy.env_kwargs)
    width = env.observation_shape[-1]
    assert policy.feature_shape == (width + 4,)
    batched = policy.for_world(env)
    assert isinstance(batched, RecurrentActorPolicy if recurrent else ActorPolicy) and batched.blocked_moves
    # The driver's evaluation: PRNGKey(seed + 10000) split per seed, then into reset and play keys.
    k_reset, _ = jax.random.split(jax.random.split(jax.random.PRNGKey(cfg.seed + 10_000), 1)[0])
    stats, _ = jax.jit(lambda keys: rollout(env, batched, keys))(jax.random.split(k_reset, 4))
    replay = jax.device_get(summarize(stats))
    for name in ("success_rate", "blocks_delivered_frac", "return_mean"):
        assert float(replay[name]) == pytest.approx(summary["eval"][name], abs=1e-5), name

    # The step-by-step interface takes the observation with the features appended.
    with pytest.raises(ValueError, match=f"expects {width + 4}: the world's observation followed by the 4 "
                                         "blocked_features"):
        policy.step(np.zeros((2, width), np.float32), policy.initial_carry(), jax.random.PRNGKey(0))
    state, ts = env.reset(jax.random.PRNGKey(7))
    policy_state, carry = batched.init(jax.random.PRNGKey(0)), policy.initial_carry()
    last, moved = jnp.zeros(2, jnp.int32), jnp.ones(2, bool)
    step, batched_act = jax.jit(policy.step), jax.jit(batched.act)
    for _ in range(6):
        observation = jnp.concatenate([ts.observation, blocked_features(last, moved)], axis=-1)
        actions, carry = step(observation, carry, jax.random.PRNGKey(1))
        expected, policy_state = batched_act(state, policy_state)
        np.testing.assert_array_equal(np.asarray(actions), np.asarray(expected))
        state, ts = env.step(state, actions)
        last, moved = actions, ts.events.agent_moved
    if recurrent:  # the hidden state is the third item, the move memory the last; two programs
        # compute the same GRU and may round differently (see tests/rl/test_rl_recurrent.py)
        np.testing.assert_allclose(np.asarray(carry), np.asarray(policy_state[2]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algo, extra, words", [
    ("pqn_vdn", [], ["network.blocked_moves=true is for ippo and mappo", "pqn_vdn"]),
    ("ippo", ["env.observation=grid"], ["network.blocked_moves=true", "env.observation=grid", "vector or egocentric"]),
])
def test_blocked_moves_refuses_what_it_cannot_feed(algo, extra, words):
    with pytest.raises(C.ConfigError) as error:
        C.build(algo, overrides=["network.blocked_moves=true"] + extra)
    for word in words:
        assert word in str(error.value)


def test_a_bad_blocked_moves_value_names_the_key():
    with pytest.raises(C.ConfigError, match="network.blocked_moves"):
        C.build("ippo", overrides=["network.blocked_moves=sometimes"])
