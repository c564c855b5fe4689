"""The pure-JAX core: state, step rules, curriculum, scenarios, observations, wrappers.

Nothing here imports anything above it (the symbolic layer, adapters, agents, RL, LLM or
CLI code); ``tests/package/test_layers.py`` checks the import contract.
"""
