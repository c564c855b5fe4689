"""The core: the step rules against the reference, the env, layouts, observations, batching."""
