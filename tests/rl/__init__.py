"""The learners: PPO, PQN, their configs, runs, seeds, transfer and the baselines' scripts."""
