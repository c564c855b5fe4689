"""MAPPO on CUBE: one shared actor on each agent's observation, a centralised critic on
the world state (by default the agent's observation next to the compact world vector;
network.critic_input=world or grid for the world vector or the five-channel grid alone).

    python baselines/mappo.py
    python baselines/mappo.py --preset gpu env.scenario=hard

Config: configs/mappo.yaml (defaults in cube_jax/rl/config.py); see docs/baselines.md.
"""
import sys

from cube_jax.rl.config import parse_args

if __name__ == "__main__":
    config = parse_args("mappo", sys.argv[1:])  # bad input stops here, before the training stack loads
    from cube_jax.rl.run import train_and_report

    train_and_report(config)
