"""Recurrent (GRU) IPPO and MAPPO on tiny budgets: the hidden state resets where an episode
starts, the update replays the rollout's hidden states exactly (ratio 1 before any
gradient step), a run through the driver saves a policy that replays its own greedy
evaluation, and bad network values are refused naming the key."""
import distrax
import numpy as np
import pytest

pytest.importorskip("optax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import cube_jax  # noqa: E402
from cube_jax.rl import config as C  # noqa: E402
from cube_jax.rl.networks import RecurrentActor, init_recurrent  # noqa: E402
from cube_jax.rl.ppo import PPO, RecurrentRunner  # noqa: E402
from tests.rl_tiny import TINY_GRU, TINY_PPO  # noqa: E402

TINY = list(TINY_PPO + TINY_GRU)


def test_the_hidden_state_is_zeroed_where_an_episode_starts():
    actor = RecurrentActor(num_actions=5, hidden=16, layers=1, gru_hidden=8)
    params = init_recurrent(actor, jax.random.PRNGKey(0), jnp.zeros(6))
    apply = jax.jit(actor.apply)
    observations = jax.random.normal(jax.random.PRNGKey(1), (7, 3, 6))  # [T, agents, features]
    carried = jnp.ones((3, 8))  # a hidden state left over from an earlier episode
    reset_at_4 = jnp.zeros((7, 3), bool).at[4].set(True)
    _, logits = apply(params, carried, observations, reset_at_4)
    fresh_hidden, fresh = apply(params, jnp.zeros((3, 8)), observations[4:], jnp.zeros((3, 3), bool))
    np.testing.assert_allclose(np.asarray(logits[4:]), np.asarray(fresh), rtol=1e-6, atol=1e-7)
    # Without the reset the same steps read the old episode's memory and act differently.
    _, remembering = apply(params, carried, observations, jnp.zeros((7, 3), bool))
    assert np.abs(np.asarray(remembering[4:]) - np.asarray(fresh)).max() > 1e-3
    # A reset at the first step forgets the hidden state it was given.
    hidden, restarted = apply(params, carried, observations[4:], jnp.ones((3, 3), bool).at[1:].set(False))
    np.testing.assert_allclose(np.asarray(restarted), np.asarray(fresh), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(hidden), np.asarray(fresh_hidden), rtol=1e-6, atol=1e-7)


def test_the_update_replays_the_rollouts_log_probs_and_values():
    # MAPPO: the critic reads the world, not the observation. max_steps 5: every rollout of
    # 8 steps crosses episode boundaries, truncations included.
    ppo = PPO(C.build("mappo", overrides=TINY + ["env.max_steps=5"]))
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    assert isinstance(runner, RecurrentRunner) and runner.hidden["actor"].shape == (8, 2, 16)
    collect = jax.jit(ppo.collect)
    runner, _, _ = collect(runner)
    # The second rollout starts from the hidden states the first one left, not from zeros.
    assert float(jnp.abs(runner.hidden["actor"]).max()) > 1e-3
    started_from = runner.hidden
    runner, traj, samples = collect(runner)
    assert bool(traj.start.any()) and bool(traj.truncated.any())
    for net in ("actor", "critic"):  # the samples keep the hidden states the rollout started from
        np.testing.assert_array_equal(np.asarray(samples["hidden"][net]), np.asarray(started_from[net]))
    minibatches = ppo.minibatches(jax.random.PRNGKey(3), samples)
    assert minibatches["obs"].shape == (2, 8, 4, 2, 24)  # [minibatch, T, envs, N, D]: whole sequences
    assert minibatches["hidden"]["critic"].shape == (2, 4, 2, 16)

    @jax.jit
    def replayed(batch):
        logits, value = ppo.replay(runner.params, batch)
        return distrax.Categorical(logits=logits).log_prob(batch["action"]), value

    for batch in (samples, jax.tree.map(lambda x: x[1], minibatches)):
        log_prob, value = replayed(batch)
        np.testing.assert_allclose(np.asarray(log_prob), np.asarray(batch["log_prob"]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(value), np.asarray(batch["value"]), rtol=1e-5, atol=1e-6)
    # Replayed from zeros instead of the stored hidden states, the first steps come out different.
    zeroed = dict(samples, hidden=jax.tree.map(jnp.zeros_like, samples["hidden"]))
    log_prob, _ = replayed(zeroed)
    assert np.abs(np.asarray(log_prob[0]) - np.asarray(samples["log_prob"][0])).max() > 1e-6


def test_a_recurrent_run_saves_a_policy_that_replays_its_greedy_evaluation(tiny_recurrent_run):
    from cube_jax.evaluation.batched import rollout, summarize
    from cube_jax.rl.policy import RecurrentActorPolicy, load_policy

    cfg, summary, run_dir = tiny_recurrent_run
    assert summary["updates"] == 2 and (run_dir / "metrics.jsonl").is_file() and (run_dir / "summary.json").is_file()
    policy = load_policy(run_dir)
    assert policy.recurrent and policy.meta["network"]["recurrent"] is True
    env = cube_jax.make(**policy.env_kwargs)
    batched = policy.for_world(env)
    assert isinstance(batched, RecurrentActorPolicy)
    # The driver's evaluation: PRNGKey(seed + 10000) split per seed, then into reset and play keys.
    k_reset, _ = jax.random.split(jax.random.split(jax.random.PRNGKey(cfg.seed + 10_000), 1)[0])
    stats, _ = jax.jit(lambda keys: rollout(env, batched, keys))(jax.random.split(k_reset, 4))
    replay = jax.device_get(summarize(stats))
    for name in ("success_rate", "blocks_delivered_frac", "return_mean"):
        assert float(replay[name]) == pytest.approx(summary["eval"][name], abs=1e-5), name

    # The step-by-step interface (PettingZoo, CPU loops) acts as the batched policy does.
    with pytest.raises(ValueError, match="recurrent"):
        policy.act(np.zeros((2, 24), np.float32), jax.random.PRNGKey(0))
    state, ts = env.reset(jax.random.PRNGKey(7))
    carry, policy_state = policy.initial_carry(), batched.init(jax.random.PRNGKey(0))
    assert carry.shape == (2, 16)
    step, act = jax.jit(policy.step), jax.jit(batched.act)
    for _ in range(6):
        actions, carry = step(ts.observation, carry, jax.random.PRNGKey(1))
        expected, policy_state = act(state, policy_state)
        np.testing.assert_array_equal(np.asarray(actions), np.asarray(expected))
        state, ts = env.step(state, actions)
    # Two programs compute the same GRU; XLA may fuse them differently, so the carries agree to
    # float32 rounding (one element of 32 differed by 1.1e-7 on one CPU), not bit for bit.
    np.testing.assert_allclose(np.asarray(carry), np.asarray(policy_state[2]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "override, key",
    [("network.gru_hidden=0", "network.gru_hidden"), ("network.recurrent=maybe", "network.recurrent"),
     ("network.gru_hiden=8", "network.gru_hidden")],
)
def test_bad_network_values_name_the_key(override, key):
    with pytest.raises(C.ConfigError, match=key.replace(".", r"\.")):
        C.build("ippo", overrides=[override])


def test_recurrent_minibatches_must_split_the_envs():
    # 6 envs x 8 steps = 48 steps split into 4 minibatches, but 6 envs cannot be: refused
    # when the config is built, before a run folder exists.
    with pytest.raises(C.ConfigError, match=r"train\.num_minibatches = 4 must divide train\.num_envs = 6 with "
                                            r"network\.recurrent"):
        C.build("mappo", overrides=TINY + ["train.num_envs=6", "train.num_minibatches=4"])


def test_pqn_vdn_refuses_a_recurrent_network():
    with pytest.raises(C.ConfigError, match=r"network\.recurrent=true is for ippo and mappo"):
        C.build("pqn_vdn", overrides=["network.recurrent=true"])
