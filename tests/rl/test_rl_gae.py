"""GAE against a case worked out by hand, with one termination and one truncation."""
import numpy as np
import pytest

pytest.importorskip("optax")

from cube_jax.rl.gae import bootstrap_values, gae  # noqa: E402

# T = 4 steps of one environment; step 1 terminates, step 2 is truncated by the time limit.
REWARDS = np.array([1.0, 0.0, 2.0, 1.0], np.float32)
VALUES = np.array([0.5, 0.4, 0.3, 0.2], np.float32)
LAST_VALUE = np.float32(0.1)
FINAL_VALUES = np.array([9.0, 9.0, 0.7, 9.0], np.float32)  # V(pre-reset obs); only step 2's is used
TERMINATED = np.array([False, True, False, False])
TRUNCATED = np.array([False, False, True, False])
GAMMA, LAM = 0.9, 0.8


def test_bootstrap_values_by_hand():
    boot = bootstrap_values(VALUES, LAST_VALUE, FINAL_VALUES, TERMINATED, TRUNCATED)
    # step 0: next stored value 0.4; step 1: terminated -> 0; step 2: truncated -> V(final) 0.7;
    # step 3: the value after the rollout, 0.1.
    np.testing.assert_allclose(np.asarray(boot), [0.4, 0.0, 0.7, 0.1], rtol=1e-6)


def test_gae_by_hand():
    boot = bootstrap_values(VALUES, LAST_VALUE, FINAL_VALUES, TERMINATED, TRUNCATED)
    adv, target = gae(REWARDS, VALUES, boot, TERMINATED | TRUNCATED, GAMMA, LAM)
    # deltas: 1 + .9*.4 - .5 = .86;  0 + 0 - .4 = -.4;  2 + .9*.7 - .3 = 2.33;  1 + .9*.1 - .2 = .89
    # A3 = .89; A2 = 2.33 (cut: done); A1 = -.4 (cut: done); A0 = .86 + .9*.8*(-.4) = .572
    np.testing.assert_allclose(np.asarray(adv), [0.572, -0.4, 2.33, 0.89], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(target), [1.072, 0.0, 2.63, 1.09], rtol=1e-5)


def test_gae_without_episode_ends_is_discounted_sum():
    never = np.zeros(4, bool)
    boot = bootstrap_values(VALUES, LAST_VALUE, FINAL_VALUES, never, never)
    adv, _ = gae(REWARDS, VALUES, boot, never, GAMMA, 1.0)
    # lambda = 1: A_0 = sum_t gamma^t r_t + gamma^4 V_last - V_0
    expected0 = 1.0 + 0.0 * 0.9 + 2.0 * 0.81 + 1.0 * 0.729 + 0.6561 * 0.1 - 0.5
    assert float(adv[0]) == pytest.approx(expected0, rel=1e-5)


def test_gae_broadcasts_over_env_and_agent_axes():
    # [T, E=1, N=2]: both agents share the reward; flags broadcast from [T, E, 1].
    r = np.repeat(REWARDS[:, None, None], 2, axis=2)
    v = np.repeat(VALUES[:, None, None], 2, axis=2)
    fv = np.repeat(FINAL_VALUES[:, None, None], 2, axis=2)
    boot = bootstrap_values(v, np.full((1, 2), LAST_VALUE), fv, TERMINATED[:, None, None], TRUNCATED[:, None, None])
    adv, _ = gae(r, v, boot, (TERMINATED | TRUNCATED)[:, None, None], GAMMA, LAM)
    assert adv.shape == (4, 1, 2)
    np.testing.assert_allclose(np.asarray(adv[:, 0, 1]), [0.572, -0.4, 2.33, 0.89], rtol=1e-5)
