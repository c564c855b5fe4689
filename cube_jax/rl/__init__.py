"""IPPO, MAPPO and PQN-VDN baselines for CUBE (flax, optax, orbax); see docs/baselines.md.

``build(algo, ...) -> Config`` (:mod:`cube_jax.rl.config`) is the typed training config;
``make_train(config) -> train(key)`` (:mod:`cube_jax.rl.ppo`) is the whole training run as
one jitted program; ``train_and_report(config)`` (:mod:`cube_jax.rl.run`) is the chunked
driver the baseline scripts use, for any :class:`~cube_jax.rl.trainer.Trainer` (PPO for
IPPO and MAPPO, :class:`~cube_jax.rl.pqn.PQN` for PQN-VDN);
``load_policy(path)`` (:mod:`cube_jax.rl.policy`) loads a trained actor.
"""
