"""The batched rollout and its evaluation."""
