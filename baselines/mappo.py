"""MAPPO on CUBE: one shared actor on each agent's observation, a centralised critic on
the world state (by default the compact world vector plus the agent's id;
network.critic_input=obs_world or grid for the agent's observation next to the world
vector, or the five-channel grid).

    python baselines/mappo.py
    python baselines/mappo.py --preset gpu env.scenario=hard

Config: configs/mappo.yaml (every key: cube_jax/rl/config.py); see docs/baselines.md.
"""
import sys

from launch import main

if __name__ == "__main__":
    main("mappo", sys.argv[1:])
