"""The IPPO/MAPPO training core on tiny budgets: critic inputs, bootstrapping inputs,
shaping, the learning-rate schedule, the driver with a trainer other than PPO, the
library's manners (logging, no exits), and (in one subprocess with two host devices)
determinism of ``make_train`` and the sharded chunked driver."""
import ast
import json
import logging
import os
import textwrap
import time

import numpy as np
import pytest

pytest.importorskip("optax")

import chex  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import cube_jax  # noqa: E402
from cube_jax.rl import config as C  # noqa: E402
from cube_jax.rl.ppo import PPO, critic_input, world_vector  # noqa: E402
from tests.rl_tiny import REPO, json_from_script  # noqa: E402

TINY = [
    "train.num_envs=8",
    "train.num_steps=8",
    "train.total_timesteps=192",  # 3 updates
    "train.update_epochs=2",
    "train.num_minibatches=2",
    "network.hidden=16",
    "network.layers=1",
    "eval.episodes=4",
    "train.updates_per_call=3",
    "train.target_success=null",
]


def test_world_vector_lists_the_whole_world():
    env = cube_jax.make("hard")
    state, ts = env.reset(jax.random.PRNGKey(0))
    world = np.asarray(world_vector(env.cfg, state))
    # hard: agents (1,2) (3,2) (5,0)... read them from the state, scaled by K-1 = 7
    np.testing.assert_allclose(world[:6], np.asarray(state.agent_pos).reshape(-1) / 7.0, rtol=1e-6)
    np.testing.assert_allclose(world[12:15], [1.0, 2 / 3, 1 / 3], rtol=1e-6)  # weights 3, 2, 1 over max 3
    np.testing.assert_allclose(world[15:18], [1.0, 1.0, 1.0])  # all alive
    assert world[18] == 0.0  # t / max_steps at reset
    mappo_in = np.asarray(critic_input("world", env.cfg, state, ts.observation))
    assert mappo_in.shape == (3, 19 + 3)
    np.testing.assert_array_equal(mappo_in[:, 19:], np.eye(3))  # the agent's id after the shared world
    ippo_in = np.asarray(critic_input("obs", env.cfg, state, ts.observation))
    np.testing.assert_array_equal(ippo_in, np.asarray(ts.observation))
    # MAPPO's default: the agent's own observation, then the shared world vector.
    both = np.asarray(critic_input("obs_world", env.cfg, state, ts.observation))
    d = ts.observation.shape[-1]
    assert both.shape == (3, d + 19)
    np.testing.assert_array_equal(both[:, :d], np.asarray(ts.observation))
    np.testing.assert_array_equal(both[:, d:], np.broadcast_to(world, (3, 19)))
    with pytest.raises(ValueError, match="unknown kind 'pixels'"):
        critic_input("pixels", env.cfg, state, ts.observation)


def test_truncated_steps_carry_the_pre_reset_critic_input():
    # A 3-step limit: the third step truncates; its final critic input must show t = 3 (the
    # pre-reset world), while the observation it returns is the new episode's (t = 0).
    cfg = C.build("mappo", overrides=TINY + ["env.max_steps=3", "network.critic_input=world"])
    ppo = PPO(cfg)
    state, ts = jax.jit(ppo.train_env.reset)(jax.random.PRNGKey(1))
    stay = jnp.zeros(ppo.env.num_agents, jnp.int32)
    step = jax.jit(ppo.train_env.step)  # one compile instead of many op-by-op dispatches
    for _ in range(3):
        state, ts = step(state, stay)
    assert bool(ts.truncated) and not bool(ts.terminated)
    final = np.asarray(ts.extras["final_critic_input"])
    t_index = 2 * 2 + 4 * 3  # after agent (2N) and block (4B) features in the easy world vector
    assert final[0, t_index] == pytest.approx(1.0)  # t / max_steps = 3 / 3
    now = np.asarray(critic_input("world", ppo.env.cfg, state.env_state, ts.observation))
    assert now[0, t_index] == 0.0


def test_truncated_values_are_read_at_the_truncated_steps_only():
    # A 3-step limit: each env truncates at most ceil(8 / 3) = 3 times in a rollout of 8 steps,
    # so the critic reads 8 x 3 = 24 gathered rows instead of all 64 steps; at every truncated
    # step the value is the critic's value of that step's final input.
    cfg = C.build("ippo", overrides=TINY + ["env.max_steps=3"])
    ppo = PPO(cfg)
    runner, traj, _ = jax.jit(ppo.collect)(jax.jit(ppo.init)(jax.random.PRNGKey(0)))
    truncated = np.asarray(traj.truncated)
    assert truncated.sum() >= 16  # most envs were cut at least twice
    got = np.asarray(jax.jit(ppo._final_values)(runner.params["critic"], traj))
    want = np.asarray(ppo.critic.apply(runner.params["critic"], traj.final_critic_in))
    np.testing.assert_allclose(got[truncated], want[truncated], rtol=1e-6, atol=1e-6)


def test_rollout_actions_are_samples_of_the_policy():
    # Each step's actions are argmax(logits + Gumbel noise): their frequencies match the
    # policy's probabilities (averaged over the visited observations), and the stored
    # log-probabilities are the policy's.
    cfg = C.build("ippo", overrides=TINY + ["train.num_envs=64", "train.num_steps=16", "train.total_timesteps=1024"])
    ppo = PPO(cfg)
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(3))
    # a policy far from uniform, so that a wrong sampler shows
    actor = jax.tree.map(lambda x: 40.0 * x, runner.params["actor"])
    runner = runner.replace(params=dict(runner.params, actor=actor))
    _, _, samples = jax.jit(ppo.collect)(runner)
    logits, _ = ppo.replay(runner.params, samples)
    probs = np.asarray(jax.nn.softmax(logits))
    actions = np.asarray(samples["action"])
    freq = np.bincount(actions, minlength=probs.shape[1]) / len(actions)
    assert probs.mean(0).max() < 0.9  # not a single action
    np.testing.assert_allclose(freq, probs.mean(0), atol=0.04)  # 2048 samples: about 4 standard errors
    log_probs = np.log(probs[np.arange(len(actions)), actions])
    np.testing.assert_allclose(np.asarray(samples["log_prob"]), log_probs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [1, 2, 5, 1000, 1023, 1024, 1025, 3000, 12288, 16384])
def test_shuffle_indices_is_a_permutation(n):
    # below FEISTEL_MIN one sort; from it on a Feistel network, with cycle walking unless n is a power of two
    from cube_jax.rl.trainer import shuffle_indices

    perm = np.asarray(jax.jit(shuffle_indices, static_argnums=1)(jax.random.PRNGKey(n), n))
    assert perm.dtype == np.int32 and sorted(perm.tolist()) == list(range(n))


def test_shuffle_indices_is_uniform():
    from cube_jax.rl.trainer import shuffle_indices

    draws = np.asarray(jax.jit(jax.vmap(lambda k: shuffle_indices(k, 4)))(jax.random.split(jax.random.PRNGKey(0), 24000)))
    counts = np.unique([tuple(p) for p in draws], axis=0, return_counts=True)[1]
    assert len(counts) == 24  # every order of 4 items, each about 1000 times
    assert counts.min() > 850 and counts.max() < 1150  # binomial(24000, 1/24): sd 31


@pytest.mark.parametrize("n, strides", [
    (16384, (1, 2, 4, 128, 512, 4096, 8192)),  # the default preset: 128 envs x 32 steps x 4 agents
    (12288, (1, 3, 128, 384, 4096, 6144)),  # n = 3: not a power of two (cycle walking)
    (1000, (1, 2, 10, 500)),  # one sort
])
def test_shuffle_indices_has_no_structure_between_neighbours(n, strides):
    # Minibatches are halves of the shuffled samples. Indices that are neighbours in the
    # rollout's order (the next agent, env or step: strides 1, 4, 128, 512 in the default
    # preset's 16384 samples) land in the same half as often as any two indices do.
    from cube_jax.rl.trainer import shuffle_indices

    draws = 64 if n > 4096 else 2048  # the eighths below: about 4 standard deviations either way
    perms = np.asarray(jax.jit(jax.vmap(lambda k: shuffle_indices(k, n)))(jax.random.split(jax.random.PRNGKey(5), draws)))
    position = np.argsort(perms, axis=1)  # where each index went
    first_half = position < n // 2
    expected = (n // 2 - 1) / (n - 1)
    for stride in strides:
        same = (first_half[:, :-stride] == first_half[:, stride:]).mean()
        assert abs(same - expected) < 0.01, (stride, same)
    # every index is as likely to land in any eighth of the order
    counts = np.stack([np.bincount(position[:, i] * 8 // n, minlength=8) for i in range(0, n, 97)])
    assert abs(counts.mean(0) / draws - 1 / 8).max() < 0.01
    # and two draws' orders are unrelated: the positions of one index in two draws
    rank = np.corrcoef(position[0], position[1])[0, 1]
    assert abs(rank) < 5 / np.sqrt(n), rank


def test_sample_categorical_inverts_the_cumulative_probabilities():
    from cube_jax.rl.ppo import sample_categorical

    logits = jnp.log(jnp.array([0.1, 0.0, 0.3, 0.6]))  # action 1 is impossible
    uniform = jnp.array([0.0, 0.05, 0.1, 0.2, 0.39, 0.4, 0.7, 0.999999])
    action, log_prob = sample_categorical(jnp.broadcast_to(logits, (8, 4)), uniform)
    assert action.tolist() == [0, 0, 2, 2, 2, 3, 3, 3]
    np.testing.assert_allclose(np.exp(np.asarray(log_prob)), np.array([0.1, 0.1, 0.3, 0.3, 0.3, 0.6, 0.6, 0.6]), rtol=1e-5)
    # over many draws, the frequencies are the probabilities
    u = jax.random.uniform(jax.random.PRNGKey(0), (40000,))
    freq = np.bincount(np.asarray(sample_categorical(jnp.broadcast_to(logits, (40000, 4)), u)[0]), minlength=4) / 40000
    np.testing.assert_allclose(freq, [0.1, 0.0, 0.3, 0.6], atol=0.01)


def test_policy_terms_are_distraxs_in_either_layout():
    import distrax

    from cube_jax.rl.ppo import policy_terms

    logits = 3.0 * jax.random.normal(jax.random.PRNGKey(0), (64, 5))
    action = jax.random.randint(jax.random.PRNGKey(1), (64,), 0, 5)
    pi = distrax.Categorical(logits=logits)
    for got in (policy_terms(logits, action), policy_terms(logits.T, action, axis=0)):
        np.testing.assert_allclose(got[0], pi.log_prob(action), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], pi.entropy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algo, observation", [("ippo", "vector"), ("mappo", "vector"), ("ippo", "grid")])
def test_minibatch_columns_give_the_rows_loss_and_gradient(algo, observation):
    # The update reads minibatches one sample per column (the fast layout of the weight
    # gradients on the CPU); loss and gradient are those of the networks applied row by row.
    import distrax

    from cube_jax.rl.ppo import policy_terms
    from cube_jax.rl.trainer import shuffle_indices

    cfg = C.build(algo, overrides=TINY + [f"env.observation={observation}"])
    ppo = PPO(cfg)
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    _, traj, samples = jax.jit(ppo.collect)(runner)
    minibatch = jax.tree.map(lambda x: x[1], ppo.minibatches(jax.random.PRNGKey(2), samples))
    perm = shuffle_indices(jax.random.PRNGKey(2), ppo.batch_size)
    rows = jax.tree.map(lambda x: x[perm][ppo.minibatch_size:], samples)  # the same samples, row by row
    assert "obs" not in minibatch and minibatch["obs_columns"].shape[1] == ppo.minibatch_size

    def rows_loss(params):
        logits, value = ppo.replay(params, rows)
        pi = distrax.Categorical(logits=logits)
        return pi.log_prob(rows["action"]).sum() + pi.entropy().sum() + value.sum()

    def columns_loss(params):
        logits, value, axis = ppo._replay_minibatch(params, minibatch)
        log_prob, entropy = policy_terms(logits, minibatch["action"], axis)
        return log_prob.sum() + entropy.sum() + value.sum()

    want, got = jax.value_and_grad(rows_loss)(runner.params), jax.value_and_grad(columns_loss)(runner.params)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    chex.assert_trees_all_close(got[1], want[1], rtol=1e-4, atol=1e-5)
    # the values of the rollout, read after it in one pass, are the critic's at each step
    critic_in = traj.obs if ppo.critic_reads_obs else traj.critic_in
    np.testing.assert_allclose(traj.value, ppo.critic.apply(runner.params["critic"], critic_in), rtol=1e-6, atol=1e-6)


def test_first_episodes_start_staggered():
    cfg = C.build("ippo", overrides=TINY + ["train.num_envs=64", "train.total_timesteps=512"])
    ppo = PPO(cfg)
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    t = np.asarray(runner.env_state.env_state.t)
    assert t.min() >= 0 and t.max() < ppo.env.max_steps
    assert len(np.unique(t)) > 20  # 64 envs spread over 100 start counts, not in lockstep
    # The observation is the staggered state's: its time feature is t / max_steps.
    np.testing.assert_allclose(np.asarray(runner.obs)[:, 0, ppo.env.num_agents + 2], t / ppo.env.max_steps, rtol=1e-6)
    lockstep = PPO(C.build("ippo", overrides=TINY + ["train.stagger_start=false"]))
    assert not np.asarray(jax.jit(lockstep.init)(jax.random.PRNGKey(0)).env_state.env_state.t).any()


def test_shaping_rewards_block_progress_only():
    from cube_jax.rl.shaping import ShapingWrapper, block_progress_potential

    env = cube_jax.make(scenario=cube_jax.Scenario(grid_size=6, agents=[(1, 0)], blocks=[(1, 1, 1)], max_steps=20))
    shaped = ShapingWrapper(env, gamma=1.0)
    state, _ = shaped.reset(jax.random.PRNGKey(0))
    # block at column 1 of a 6-wide grid: 4 columns to go, weight 1, K = 6 -> potential -4/6
    assert float(block_progress_potential(state)) == pytest.approx(-4 / 6)
    state, ts = shaped.step(state, jnp.array([cube_jax.RIGHT], jnp.int32))  # push it one column
    assert float(ts.extras["shaping"]) == pytest.approx(1 / 6)
    state, ts = shaped.step(state, jnp.array([cube_jax.UP], jnp.int32))  # walk away: no progress
    assert float(ts.extras["shaping"]) == pytest.approx(0.0)


def test_the_dense_term_is_a_distance_penalty_that_ends_with_the_task():
    from cube_jax.rl.shaping import ShapingWrapper

    env = cube_jax.make(scenario=cube_jax.Scenario(grid_size=6, agents=[(1, 0)], blocks=[(1, 2, 1)], max_steps=20))
    shaped = ShapingWrapper(env, gamma=1.0)
    state, _ = shaped.reset(jax.random.PRNGKey(0))
    right = jnp.array([cube_jax.RIGHT], jnp.int32)
    state, ts = shaped.step(state, right)  # next to the block: 3 columns still to go, K = 6
    assert float(ts.extras["potential"]) == pytest.approx(-3 / 6)
    state, ts = shaped.step(state, jnp.array([cube_jax.UP], jnp.int32))  # every step pays it again
    assert float(ts.extras["potential"]) == pytest.approx(-3 / 6)
    state, ts = shaped.step(state, jnp.array([cube_jax.DOWN], jnp.int32))
    for _ in range(3):
        state, ts = shaped.step(state, right)
    assert bool(ts.terminated) and float(ts.extras["potential"]) == 0.0


def test_reach_potential_measures_each_block_to_its_nearest_quorum():
    from cube_jax.rl.shaping import reach_potential

    env = cube_jax.make("easy")
    state, _ = jax.jit(env.reset)(jax.random.PRNGKey(0))
    # Agents (2,0), (5,0); blocks of weight 1 at (1,2), (3,4), (6,2), left faces (1,1), (3,3), (6,1).
    # Nearest agent per face: 2, 4 and 2 steps; 8 / (2K * sum w) = 8 / 48.
    assert float(reach_potential(state)) == pytest.approx(-8 / 48)
    hard = cube_jax.make("hard")
    state, _ = jax.jit(hard.reset)(jax.random.PRNGKey(0))
    # Agents (1,0), (3,0), (5,0). Weight 3 at (1,2): face column 1, rows 1-3, its 3 nearest agents
    # 1 + 1 + 3 away; weight 2 at (5,1): face (5,0), (6,0), nearest two 0 and 2; weight 1 at (5,5):
    # face (5,4), nearest 4. (3 * 5/3 + 2 * 1 + 1 * 4) / (2 * 8 * 6) = 11 / 96.
    assert float(reach_potential(state)) == pytest.approx(-11 / 96)


def test_nearest_reach_draws_each_agent_to_its_nearest_left_face():
    from cube_jax.rl.shaping import ShapingWrapper, reach_potential, shaping_potential

    env = cube_jax.make("easy")
    state, _ = jax.jit(env.reset)(jax.random.PRNGKey(0))
    # Agent (2,0): faces (1,1), (3,3), (6,1) are 2, 4 and 5 away; agent (5,0): 5, 5 and 2.
    # The mean of the nearest, 2, over 2K = 16.
    assert float(reach_potential(state, "nearest")) == pytest.approx(-2 / 16)
    assert float(shaping_potential(state, reach_weight=2.0, reach="nearest")) == pytest.approx(
        float(shaping_potential(state)) - 2 * 2 / 16)
    hard = cube_jax.make("hard")
    state, _ = jax.jit(hard.reset)(jax.random.PRNGKey(0))
    # Agents (1,0), (3,0), (5,0): nearest faces 1 (weight 3, column 1 rows 1-3), 1 (the same) and
    # 0 (weight 2, column 0 rows 5-6): mean 2/3 over 2K = 16.
    assert float(reach_potential(state, "nearest")) == pytest.approx(-(2 / 3) / 16)
    # Once every block is delivered the term is 0, like the others.
    done = state.replace(block_alive=jnp.zeros_like(state.block_alive))
    assert float(reach_potential(done, "nearest")) == 0.0
    with pytest.raises(ValueError, match="reach mode must be one of quorum, nearest, focus, got 'closest'"):
        ShapingWrapper(env, gamma=0.99, reach_weight=1.0, reach="closest")


def test_focus_reach_lets_the_heaviest_block_claim_its_quorum_first():
    from cube_jax.rl.shaping import reach_potential

    # Weight 2 at (5,5) (left face column 4, rows 5-6), weight 1 at (1,3) (face (1,2)), K = 10.
    # Agent (0,0): 9 from the heavy face, 3 from the light one; (5,2): 2 and 4; (2,2): 5 and 1.
    scenario = cube_jax.Scenario(grid_size=10, agents=[(0, 0), (5, 2), (2, 2)], blocks=[(5, 5, 2), (1, 3, 1)],
                                 max_steps=20)
    state, _ = jax.jit(cube_jax.make(scenario=scenario).reset)(jax.random.PRNGKey(0))
    # nearest: 3, 2, 1; focus: the heavy block's two nearest agents, (5,2) and (2,2), count 2 and 5.
    assert float(reach_potential(state, "nearest")) == pytest.approx(-(6 / 3) / 20)
    assert float(reach_potential(state, "focus")) == pytest.approx(-(10 / 3) / 20)
    # Equal weights: the lower index is the focus. Two blocks of weight 1: (2,2) is nearest to
    # the first block's face (1,2), so nothing changes from the nearest form ...
    light = cube_jax.Scenario(grid_size=10, agents=scenario.agents, blocks=[(1, 3, 1), (5, 5, 1)], max_steps=20)
    state, _ = jax.jit(cube_jax.make(scenario=light).reset)(jax.random.PRNGKey(0))
    assert float(reach_potential(state, "focus")) == pytest.approx(float(reach_potential(state, "nearest")))
    # ... and once the focus block is delivered the next heaviest claims: the light block alone.
    heavy_gone = jax.jit(cube_jax.make(scenario=scenario).reset)(jax.random.PRNGKey(0))[0]
    heavy_gone = heavy_gone.replace(block_alive=heavy_gone.block_alive.at[0].set(False))
    assert float(reach_potential(heavy_gone, "focus")) == pytest.approx(-(3 + 4 + 1) / 3 / 20)
    done = heavy_gone.replace(block_alive=jnp.zeros_like(heavy_gone.block_alive))
    assert float(reach_potential(done, "focus")) == 0.0


def _many_blocks_env():
    """45 blocks of weight 1 in rows of five, four of them touching (chains to push), 12 agents."""
    blocks = [(r, c, 1) for r in range(2, 20, 2) for c in (5, 6, 7, 8, 12)]
    agents = [(r, c) for r in range(1, 19, 3) for c in (1, 3)]
    return cube_jax.make(scenario=cube_jax.Scenario(grid_size=22, agents=agents, blocks=blocks, max_steps=60))


@pytest.mark.parametrize("world", ["n=4", "n=40", "45 blocks"])
def test_the_batched_potential_is_the_one_state_definition(world):
    # shaping_potential runs on environment-last arrays (whole batches under vmap); it gives
    # the values of the term-by-term definition on every state, under vmap and on a batch
    # with two leading axes. n = 40: more than 32 agents (ranks by a sort); 45 blocks: the
    # closure as a bool relation, with chains of blocks.
    from cube_jax.rl.shaping import potential_of_one_state, shaping_potential

    env = _many_blocks_env() if world == "45 blocks" else cube_jax.make(n=int(world[2:]))
    n = env.num_agents
    states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(n), 48))
    step = jax.jit(jax.vmap(env.step))
    for t in range(12):
        states, _ = step(states, jax.random.randint(jax.random.PRNGKey(t), (48, n), 0, 5))
    states = states.replace(block_alive=states.block_alive.at[::3, 0].set(False))  # some blocks delivered
    two_axes = jax.tree.map(lambda x: x.reshape((6, 8) + x.shape[1:]), states)
    modes = [(0.5, 1.0, "quorum"), (0.0, 1.0, "nearest"), (0.0, 1.0, "focus")] + (
        [(0.0, 2.0, "quorum")] if world == "n=4" else [])

    @jax.jit
    def both(states, two_axes):
        want = [jax.vmap(lambda s: potential_of_one_state(s, *m))(states) for m in modes]
        got = [jax.vmap(lambda s: shaping_potential(s, *m))(states) for m in modes]
        return want, got, [shaping_potential(two_axes, *m).reshape(-1) for m in modes]

    for mode, want, got, got_two in zip(modes, *both(states, two_axes)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=str(mode))
        np.testing.assert_allclose(got_two, want, rtol=1e-6, atol=1e-7, err_msg=str(mode))
    assert (env.num_blocks > 32) == (world == "45 blocks") and (n > 32) == (world == "n=40")


@pytest.mark.parametrize("agents", [5, 40], ids=["counted", "sorted"])
def test_rank_orders_agents_by_distance_with_ties_by_id(agents):
    from cube_jax.rl.shaping import SORT_MIN_AGENTS, _rank

    assert (agents > SORT_MIN_AGENTS) == (agents == 40)
    dist = np.random.default_rng(agents).integers(0, 4, size=(6, agents)).astype(np.float32)  # many ties
    want = np.argsort(np.argsort(dist, axis=1, kind="stable"), axis=1, kind="stable")
    np.testing.assert_array_equal(np.asarray(_rank(jnp.asarray(dist))), want)


def test_alignment_potential_counts_the_left_face_quorum():
    from cube_jax.rl.shaping import ShapingWrapper, alignment_potential

    # A weight-2 block at rows 1-2, cols 2-3 and a weight-1 block at (4, 3), in a 6x6 grid.
    scenario = cube_jax.Scenario(grid_size=6, agents=[(1, 0), (3, 0)], blocks=[(1, 2, 2), (4, 3, 1)], max_steps=20)
    env = cube_jax.make(scenario=scenario)
    shaped = ShapingWrapper(env, gamma=1.0, align_weight=1.0)
    state, _ = shaped.reset(jax.random.PRNGKey(0))
    step = jax.jit(shaped.step)
    # Nobody is aligned yet: agent 0's chain to the right ends on an empty cell.
    assert float(alignment_potential(state)) == pytest.approx(0.0)
    right, stay = cube_jax.RIGHT, cube_jax.STAY
    state, ts = step(state, jnp.array([right, stay], jnp.int32))  # agent 0 reaches the heavy block's face
    # Half of the weight-2 quorum: 2 * (1/2) / 3; progress is unchanged (nothing moved).
    assert float(alignment_potential(state)) == pytest.approx(1 / 3)
    assert float(ts.extras["shaping"]) == pytest.approx(1 / 3)
    state, ts = step(state, jnp.array([stay, cube_jax.DOWN], jnp.int32))  # agent 1 to (4, 0): not adjacent
    assert float(ts.extras["shaping"]) == pytest.approx(0.0)
    state, ts = step(state, jnp.array([stay, right], jnp.int32))
    state, ts = step(state, jnp.array([stay, right], jnp.int32))  # agent 1 at (4, 2), on the light block's face
    assert float(alignment_potential(state)) == pytest.approx(2 / 3)
    # Agent 1 delivers nothing yet but pushes the light block one column: progress 1 / (6 * 3) more.
    state, ts = step(state, jnp.array([stay, right], jnp.int32))
    assert float(ts.extras["shaping"]) == pytest.approx(1 / 18)
    # Delivering the light block keeps its share at 1 (a delivered block counts as done).
    state, ts = step(state, jnp.array([stay, right], jnp.int32))
    assert not bool(state.block_alive[1])
    assert float(alignment_potential(state)) == pytest.approx(2 / 3)


@pytest.mark.slow
def test_make_train_is_deterministic_and_the_driver_runs_data_parallel():
    """One subprocess with two host devices, so its programs are compiled once:

    * ``jax.vmap(make_train(config))`` over two seeds gives the same metrics twice, and
      different metrics for the two seeds;
    * the chunked driver (:class:`Session`) on a 2-device mesh runs data parallel: its
      metrics are those of :func:`data_parallel`'s copy of the trainer run on one device
      with ``jax.vmap`` over the two halves of the environments (the same collectives, by
      axis name), up to float tolerance, with its seeds mapped one after another
      (``train.seed_axis``'s CPU default) and vmapped, and the parameters it keeps are the
      same on both devices;
    * on one device the driver gives ``make_train``'s metrics;
    * a partial last chunk reuses the compiled chunk program (no second compile).
    """
    script = textwrap.dedent(
        f"""
        import json, jax, jax.numpy as jnp, numpy as np
        from cube_jax.rl import config as C
        from cube_jax.rl.ppo import PPO, make_train
        from cube_jax.rl.run import Session
        from cube_jax.rl.trainer import data_parallel
        cfg = C.build("mappo", overrides={TINY!r} + ["num_seeds=2", "train.num_devices=2"])
        keys = jax.random.split(jax.random.PRNGKey(cfg.seed), 2)
        train = jax.jit(jax.vmap(make_train(cfg)))
        first = jax.device_get(train(keys)["metrics"])  # {{name: [seeds, updates]}}
        second = jax.device_get(train(keys)["metrics"])
        single = Session(C.build("mappo", overrides={TINY!r} + ["num_seeds=2", "train.num_devices=1"]))
        single = single.run_updates(single.init(), 3)[1]

        ppo = PPO(cfg)
        local = data_parallel(ppo, "env", 2)

        def emulated(key):  # the data-parallel update of one seed on one device: vmap over the env halves
            runner = ppo.init(key)
            halves = jax.tree.map(lambda b, x: x.reshape((2, -1) + x.shape[1:]) if b else jnp.stack([x, x]),
                                  ppo.env_batched(runner), runner)
            step = jax.jit(jax.vmap(local.update, axis_name="env"))
            rows = []
            for _ in range(3):
                halves, m = step(halves)
                rows.append(jax.tree.map(lambda x: x[0], m))
            return jax.tree.map(lambda *xs: np.stack(xs), *rows)  # {{name: [updates]}}

        emul = [jax.device_get(emulated(k)) for k in keys]
        session = Session(cfg)
        runner, sharded = session.run_updates(session.init(), 3)  # {{name: [updates, seeds]}}
        devices = len(runner.obs.sharding.device_set)
        copies = [np.asarray(s.data) for s in jax.tree.leaves(runner.params)[0].addressable_shards]
        runner, partial = session.run_updates(runner, 1)
        vmapped = Session(C.build("mappo", overrides={TINY!r} + ["num_seeds=2", "train.num_devices=2",
                                                                "train.seed_axis=vmap"]))
        vmapped = vmapped.run_updates(vmapped.init(), 3)[1]
        out = {{
            "seed_axis": session.seed_axis,
            "data_parallel": session.data_parallel,
            "vmapped": {{k: np.asarray(v).T.tolist() for k, v in jax.device_get(vmapped).items()}},
            "first": {{k: np.asarray(v).tolist() for k, v in first.items()}},
            "second": {{k: np.asarray(v).tolist() for k, v in second.items()}},
            "single": {{k: np.asarray(v).T.tolist() for k, v in jax.device_get(single).items()}},
            "emulated": {{k: [np.asarray(e[k]).tolist() for e in emul] for k in emul[0]}},
            "sharded": {{k: np.asarray(v).T.tolist() for k, v in jax.device_get(sharded).items()}},
            "copies_equal": len(copies) == 2 and bool(np.array_equal(copies[0], copies[1])),
            "devices": devices,
            "partial_shape": list(np.shape(partial["policy_loss"])),
            "chunk_programs": session._chunk._cache_size(),
            "updates_done": np.asarray(runner.update).tolist(),
        }}
        print(json.dumps(out))
        """
    )
    out = json_from_script(script, os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2")
    first, second, sharded = out["first"], out["second"], out["sharded"]
    assert np.shape(first["policy_loss"]) == (2, 3)  # [seeds, updates]
    for name in first:
        np.testing.assert_array_equal(np.asarray(first[name], float), np.asarray(second[name], float), err_msg=name)
    assert not np.allclose(first["policy_loss"][0], first["policy_loss"][1])  # the seeds differ
    assert out["devices"] == 2 and out["data_parallel"] and out["copies_equal"]
    assert out["seed_axis"] == "map"
    for name in first:
        np.testing.assert_allclose(np.asarray(out["single"][name], float), np.asarray(first[name], float),
                                   rtol=1e-4, atol=1e-5, err_msg=name)
        for driver in (sharded, out["vmapped"]):
            np.testing.assert_allclose(np.asarray(driver[name], float), np.asarray(out["emulated"][name], float),
                                       rtol=1e-4, atol=1e-5, err_msg=name)
    # data parallel is not the one-device program: each device shuffles and samples its own share
    assert not np.allclose(np.asarray(sharded["policy_loss"], float), np.asarray(first["policy_loss"], float))
    assert out["partial_shape"] == [1, 2]  # one update, two seeds
    assert out["chunk_programs"] == 1
    assert out["updates_done"] == [4, 4]


def test_a_critic_warmup_holds_the_actor_still_and_trains_the_critic():
    ppo = PPO(C.build("ippo", overrides=TINY + ["train.critic_warmup=2"]))
    assert [float(ppo.actor_weight(jnp.int32(u))) for u in range(4)] == [0.0, 0.0, 1.0, 1.0]
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    _, _, samples = jax.jit(ppo.collect)(runner)
    batch = jax.tree.map(lambda x: x[0], jax.jit(ppo.minibatches)(jax.random.PRNGKey(1), samples))
    step = jax.jit(lambda c, b, on: ppo._minibatch_step(c, b, (jnp.float32(0.01), jnp.float32(0.05), on)))
    carry = (runner.params, runner.opt_state)
    held, _ = step(carry, batch, jnp.float32(0.0))
    moved, _ = step(carry, batch, jnp.float32(1.0))

    def same(a, b):
        return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

    assert same(held[0]["actor"], runner.params["actor"]) and not same(moved[0]["actor"], runner.params["actor"])
    assert same(held[0]["critic"], moved[0]["critic"]) and not same(held[0]["critic"], runner.params["critic"])
    assert same(held[1], moved[1])  # the optimizer's moments read the actor's gradients all the same


def test_data_parallel_gradient_is_the_whole_minibatch():
    """A data-parallel minibatch step (two halves of a minibatch, one per device, here the two
    members of a ``jax.vmap`` with the devices' axis name) moves the parameters exactly as one
    step on the whole minibatch: gradients and the advantages' normalisation are over both halves."""
    from cube_jax.rl.trainer import data_parallel

    ppo = PPO(C.build("ippo", overrides=TINY))
    local = data_parallel(ppo, "devices", 2)
    runner = jax.jit(ppo.init)(jax.random.PRNGKey(0))
    _, _, samples = jax.jit(ppo.collect)(runner)
    batch = jax.tree.map(lambda x: x[0], jax.jit(ppo.minibatches)(jax.random.PRNGKey(1), samples))
    coefs = (jnp.float32(0.01), jnp.float32(0.05), jnp.float32(1.0))
    carry = (runner.params, runner.opt_state)
    whole, _ = jax.jit(lambda c, b: ppo._minibatch_step(c, b, coefs))(carry, batch)

    def halve(name, x):  # the sample axis is last in the column layouts, first elsewhere
        axis = x.ndim - 1 if name.endswith("_columns") else 0
        return jnp.stack(jnp.split(x, 2, axis=axis))

    halves = {name: halve(name, x) for name, x in batch.items()}
    split, _ = jax.jit(jax.vmap(lambda b: local._minibatch_step(carry, b, coefs), axis_name="devices"))(halves)
    for a, b in zip(jax.tree.leaves(whole[0]), jax.tree.leaves(split[0])):
        np.testing.assert_array_equal(np.asarray(b[0]), np.asarray(b[1]))  # the same parameters on both devices
        np.testing.assert_allclose(np.asarray(b[0]), np.asarray(a), rtol=2e-5, atol=2e-6)
    # a copy per device only where the sizes split into whole minibatches
    assert (local.num_envs, local.batch_size, local.minibatch_size) == (
        ppo.num_envs // 2, ppo.batch_size // 2, ppo.minibatch_size // 2)
    assert data_parallel(ppo, "devices", 1) is ppo
    with pytest.raises(ValueError, match="does not split into 3 equal shares"):
        data_parallel(ppo, "devices", 3)


def test_learning_rate_anneals_over_the_budget():
    cfg = C.build("ippo", overrides=TINY + ["train.lr=0.01"])
    ppo = PPO(cfg)
    assert ppo.num_updates == 3
    rates = [float(ppo.learning_rate(jnp.int32(u), ppo.num_updates)) for u in range(5)]
    np.testing.assert_allclose(rates, [0.01, 0.01 * 2 / 3, 0.01 / 3, 0.0, 0.0], rtol=1e-6)
    flat = PPO(C.build("ippo", overrides=TINY + ["train.lr=0.01", "train.anneal_lr=false"]))
    assert float(flat.learning_rate(jnp.int32(2), 3)) == pytest.approx(0.01)


def test_entropy_coefficient_anneals_to_its_final_value_when_set():
    ppo = PPO(C.build("ippo", overrides=TINY + ["train.ent_coef=0.06", "train.ent_coef_final=0.003"]))
    coefs = [float(ppo.entropy_coef(jnp.int32(u), ppo.num_updates)) for u in range(5)]
    np.testing.assert_allclose(coefs, [0.06, 0.041, 0.022, 0.003, 0.003], rtol=1e-5)
    assert float(ppo.entropy_coef(jnp.int32(3), jnp.int32(6))) == pytest.approx(0.0315)  # a resumed, longer horizon
    flat = PPO(C.build("ippo", overrides=TINY + ["train.ent_coef=0.06"]))
    assert [float(flat.entropy_coef(jnp.int32(u), 3)) for u in (0, 2)] == pytest.approx([0.06, 0.06])


def test_the_loss_weighs_the_entropy_by_the_annealed_coefficient():
    """One update's parameters are those of a run whose constant ent_coef is the schedule's
    value at that update: the schedule reaches the loss, and nothing else changes."""
    common = TINY + ["train.ent_coef=0.2", "train.update_epochs=1"]
    annealed = PPO(C.build("ippo", overrides=common + ["train.ent_coef_final=0.0"]))
    runner = jax.jit(annealed.init)(jax.random.PRNGKey(0))
    runner = runner.replace(update=jnp.int32(2))  # two of three updates done: coefficient 0.2 / 3
    constant = PPO(C.build("ippo", overrides=common + [f"train.ent_coef={0.2 / 3!r}"]))
    update = jax.jit(annealed.update)
    (a, metrics), (b, _) = update(runner), jax.jit(constant.update)(runner)
    assert float(metrics["ent_coef"]) == pytest.approx(0.2 / 3)
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    # The same update at the first update (coefficient 0.2) moves the parameters elsewhere.
    c, first = update(runner.replace(update=jnp.int32(0)))
    assert float(first["ent_coef"]) == pytest.approx(0.2)
    assert any(not np.allclose(x, y) for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(c.params)))


class CountingTrainer:
    """A trainer that learns nothing: its training success is updates / budget and its
    "policy" is one number drawn at init, which is also its evaluated success rate. The
    driver knows it only through the Trainer interface."""

    def __init__(self, config):
        self.env = cube_jax.make("easy")
        self.env_kwargs = {"scenario": "easy"}
        self.num_updates = 6
        self.steps_per_update = 10

    def init(self, key):
        return {"count": jnp.int32(0), "envs": jnp.zeros(4), "skill": jax.random.uniform(key)}

    def update(self, state, num_updates):
        count = state["count"] + 1
        metrics = {"success_rate": count / num_updates, "episode_return": -count.astype(jnp.float32),
                   "blocks_delivered_frac": jnp.float32(0.5), "lr": jnp.float32(0.1)}
        return {**state, "count": count, "envs": state["envs"] + 1}, metrics

    def updates_done(self, state):
        return state["count"]

    def env_batched(self, state):
        return {"count": False, "envs": True, "skill": False}

    def policy_params(self, state):
        return {"skill": state["skill"]}

    def evaluate(self, policy_params, key, episodes):
        rates = {"success_rate": policy_params["skill"], "blocks_delivered_frac": policy_params["skill"],
                 "return_mean": jnp.float32(0.0), "block_delivery_rate": jnp.zeros(3)}
        return rates, rates, None


def test_the_driver_runs_any_trainer(tmp_path, caplog):
    from cube_jax.rl import run

    # The two seeds' skills (their evaluated success) are uniform draws from PRNGKey(0): 0.842 and 0.007.
    cfg = C.build("ippo", overrides=["num_seeds=2", "train.num_envs=4", "train.updates_per_call=2",
                                     "train.target_success=0.005", "train.target_check_every=2",
                                     f"output.root={tmp_path}", "output.name=counting",
                                     "output.gif=false", "output.plot=false", "eval.episodes=3"])
    fetched = []

    def fetch(tree, what):
        fetched.append(what)
        return jax.device_get(tree)

    with caplog.at_level(logging.INFO, logger="cube_jax"):
        summary = run.train_and_report(cfg, fetch=fetch, trainer=CountingTrainer(cfg))
    # The target is checked after every second call; both skills are >= 0.005 there: stop.
    assert fetched == ["updates 1-2", "updates 3-4", "the target check", "the evaluation"]
    assert summary["updates"] == 4 and summary["env_steps"] == 4 * 10 * 2
    skills = np.asarray(jax.vmap(lambda k: jax.random.uniform(k))(jax.random.split(jax.random.PRNGKey(0), 2)))
    np.testing.assert_allclose(skills, [0.8423, 0.0073], atol=1e-4)
    assert summary["policy_seed_index"] == 0
    assert summary["eval"]["success_rate"] == pytest.approx(float(skills[0]))
    np.testing.assert_allclose(summary["eval_per_seed"]["success_rate"], skills, rtol=1e-6)
    rows = [json.loads(line) for line in (tmp_path / "counting" / "metrics.jsonl").read_text().splitlines()]
    assert [r["episode_return"] for r in rows] == [-1.0, -2.0, -3.0, -4.0]
    meta = json.loads((tmp_path / "counting" / "checkpoint" / "policy.json").read_text())
    assert meta["updates"] == 4 and meta["seed_index"] == 0
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == f"run folder: {tmp_path / 'counting'}"
    assert [line.split()[1] for line in lines if line.startswith("update ")] == ["2/6", "4/6"]
    checks = [line for line in lines if line.startswith("greedy success")]
    assert len(checks) == 1 and checks[0].startswith(
        "greedy success (3 episodes, the papers' reward) per seed [0: 0.84, 1: 0.01]: every seed >= 0.005 after ")
    assert lines[-1] == (
        "eval (greedy, 3 episodes): seed 0 reported and saved: success 0.84, "
        "blocks delivered 0.84, return +0.000; success per seed: [0: 0.84, 1: 0.01]"
    )


def test_the_rl_library_neither_prints_nor_ends_the_process():
    """Library code reports through logging and raises; only the scripts (baselines/) exit."""
    banned = {"print", "exit", "quit", "os._exit", "sys.exit"}
    found = []
    for path in sorted((REPO / "cube_jax" / "rl").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in banned:
                    found.append(f"{path.name}:{node.lineno} {name}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                if "argparse" in modules:
                    found.append(f"{path.name}:{node.lineno} imports argparse")
    assert found == []


def test_the_outputs_examples_run():
    import doctest

    from cube_jax.rl import outputs

    assert doctest.testmod(outputs).attempted >= 1 and doctest.testmod(outputs).failed == 0


def test_the_run_stops_only_when_every_seed_reaches_the_target():
    from cube_jax.rl.run import every_seed_at_target

    nan = float("nan")
    assert not every_seed_at_target(np.array([1.0, 0.0, 0.95]), 0.9)  # seed 1 stalls: the run goes on
    assert every_seed_at_target(np.array([0.9, 0.95]), 0.9)
    assert not every_seed_at_target(np.array([1.0, nan]), 0.9)  # nothing measured is no success
    assert not every_seed_at_target(np.array([1.0, 1.0]), None)


class StallingTrainer(CountingTrainer):
    """Like CountingTrainer, but each seed's training success is its drawn skill, for good:
    the seed with the lower skill never reaches a target between the two."""

    def update(self, state, num_updates):
        state, metrics = super().update(state, num_updates)
        return state, {**metrics, "success_rate": state["skill"]}


def test_a_stalled_seed_keeps_the_run_going_and_shows_in_every_line(tmp_path, caplog):
    from cube_jax.rl import run

    # Skills 0.842 and 0.007 (CountingTrainer); the target lies between them.
    cfg = C.build("ippo", overrides=["num_seeds=2", "train.num_envs=4", "train.updates_per_call=2",
                                     "train.target_success=0.5", "train.target_check_every=1",
                                     f"output.root={tmp_path}", "output.name=stalling", "output.gif=false",
                                     "output.plot=false", "eval.episodes=3"])
    with caplog.at_level(logging.INFO, logger="cube_jax"):
        summary = run.train_and_report(cfg, trainer=StallingTrainer(cfg))
    assert summary["updates"] == 6 and summary["seconds_to_target_success"] is None  # the whole budget
    lines = [r.getMessage() for r in caplog.records]
    progress = [line for line in lines if line.startswith("update ")]
    assert len(progress) == 3 and all(line.endswith("success per seed [0: 0.84, 1: 0.01]") for line in progress)
    checks = [line for line in lines if line.startswith("greedy success")]
    assert checks == ["greedy success (3 episodes, the papers' reward) per seed [0: 0.84, 1: 0.01]"] * 3
    assert lines[-1].endswith("success per seed: [0: 0.84, 1: 0.01]")


class SlowTrainer(CountingTrainer):
    """Like CountingTrainer, but every update takes a fifth of a second of wall time."""

    def update(self, state, num_updates):
        state, metrics = super().update(state, num_updates)
        jax.debug.callback(lambda: time.sleep(0.2))
        return state, metrics


def test_a_wall_clock_limit_stops_the_run_then_evaluates_and_saves(tmp_path, caplog):
    from cube_jax.rl import run

    # Two updates per call take 0.4 s or more: the limit of 1 s is passed after the third call
    # at the latest (the first also compiles), long before the budget's 12 updates. The run
    # stops there, then evaluates and saves as at the budget's end.
    cfg = C.build("ippo", overrides=["num_seeds=2", "train.num_envs=4", "train.updates_per_call=2",
                                     "train.target_success=null", "train.max_seconds=1",
                                     f"output.root={tmp_path}", "output.name=limited", "output.gif=false",
                                     "output.plot=false", "eval.episodes=3"])
    trainer = SlowTrainer(cfg)
    trainer.num_updates = 12
    with caplog.at_level(logging.INFO, logger="cube_jax"):
        summary = run.train_and_report(cfg, trainer=trainer)
    assert summary["stopped"] == "max_seconds" and summary["seconds_to_target_success"] is None
    assert 2 <= summary["updates"] < 12 and summary["updates"] % 2 == 0
    meta = json.loads((tmp_path / "limited" / "checkpoint" / "policy.json").read_text())
    assert meta["updates"] == summary["updates"]
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.endswith(f"past train.max_seconds = 1; stopping at update {summary['updates']} of 12")
               for line in lines)
    assert json.loads((tmp_path / "limited" / "summary.json").read_text())["stopped"] == "max_seconds"
    # Without the limit the same trainer runs its whole budget.
    cfg = C.build("ippo", overrides=["num_seeds=2", "train.num_envs=4", "train.updates_per_call=6",
                                     "train.target_success=null", f"output.root={tmp_path}", "output.name=whole",
                                     "output.gif=false", "output.plot=false", "output.checkpoint=false",
                                     "eval.episodes=3"])
    assert run.train_and_report(cfg, trainer=CountingTrainer(cfg))["stopped"] == "budget"


def test_the_progress_line_shows_each_seeds_success():
    from cube_jax.rl import outputs

    rows = [
        {"update": 9, "env_steps": 900, "episode_return": 0.5, "success_rate": 0.5, "blocks_delivered_frac": 0.5,
         "success_rate_per_seed": [1.0, 0.0]},
        {"update": 10, "env_steps": 1000, "episode_return": None, "success_rate": 0.45,
         "blocks_delivered_frac": 0.6, "success_rate_per_seed": [0.9, None]},
    ]
    row = outputs.chunk_row(rows)
    assert row["success_rate_per_seed"] == [0.95, 0.0]
    assert outputs.progress_line(row, 20, 1234.0) == (
        "update    10/20  env-steps       1,000      1,234 steps/s  return +0.500  success 0.47  "
        "blocks delivered 0.55  success per seed [0: 0.95, 1: 0.00]"
    )


def _equations(jaxpr):
    """Every equation of a jaxpr, those of the jaxprs inside its equations included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


@pytest.mark.parametrize("algo, preset", [("ippo", None), ("mappo", "mappo_rnn"), ("pqn_vdn", None)])
def test_seeds_initialise_their_networks_one_qr_at_a_time(algo, preset):
    # Batched over the seeds, the orthogonal initializer's QR is one LAPACK call that splits
    # its batch over XLA's CPU thread pool and waits; two of them side by side hung a 2-core
    # machine (the first chunk of `--preset hard num_seeds=4` never returned). Every QR of
    # the seeds' initialisation must see a single matrix, with flax's values.
    from flax import linen as nn

    from cube_jax.rl import networks
    from cube_jax.rl.run import TRAINERS

    config = C.build(algo, preset=preset, overrides=["network.hidden=16", "network.gru_hidden=8"])
    trainer = TRAINERS[algo](config)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    qrs = [eqn for eqn in _equations(jax.make_jaxpr(jax.vmap(trainer.init))(keys).jaxpr)
           if eqn.primitive.name in ("qr", "geqrf", "geqp3", "householder_product")]
    assert all(eqn.invars[0].aval.ndim == 2 for eqn in qrs), [eqn.invars[0].aval for eqn in qrs]
    if algo != "pqn_vdn":  # its Q-network uses flax's default (lecun normal) kernels
        assert qrs
    init = networks.orthogonal(2.0)
    batched = jax.jit(jax.vmap(lambda k: init(k, (24, 16))))(keys)
    for key, matrix in zip(keys, batched):
        np.testing.assert_array_equal(np.asarray(matrix), np.asarray(nn.initializers.orthogonal(2.0)(key, (24, 16))))


def test_shuffle_indices_methods_and_their_errors():
    from cube_jax.rl.trainer import FEISTEL_MIN, shuffle_indices

    key = jax.random.PRNGKey(3)
    for method in ("sort", "feistel"):
        perm = np.asarray(shuffle_indices(key, 3000, method))
        assert sorted(perm.tolist()) == list(range(3000))
    # auto is the Feistel network from FEISTEL_MIN on, the sort below
    assert np.array_equal(shuffle_indices(key, 4096), shuffle_indices(key, 4096, "feistel"))
    assert np.array_equal(shuffle_indices(key, 100), shuffle_indices(key, 100, "sort"))
    assert not np.array_equal(shuffle_indices(key, 4096, "sort"), shuffle_indices(key, 4096, "feistel"))
    with pytest.raises(ValueError, match="method must be"):
        shuffle_indices(key, 4096, "random")
    with pytest.raises(ValueError, match=f"needs n >= {FEISTEL_MIN}"):
        shuffle_indices(key, 100, "feistel")
