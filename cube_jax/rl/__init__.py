"""IPPO and MAPPO baselines for CUBE (flax, optax, distrax, orbax); see docs/baselines.md.

``make_train(config) -> train(key)`` (:mod:`cube_jax.rl.ppo`) is the whole training run as
one jitted program; ``load_policy(path)`` (:mod:`cube_jax.rl.policy`) loads a trained actor.
"""
