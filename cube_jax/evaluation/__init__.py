"""Playing episodes: the batched JAX rollout, the CPU episode loop and episode traces."""
