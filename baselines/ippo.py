"""IPPO on CUBE: one shared actor-critic, the critic sees each agent's own observation.

    python baselines/ippo.py                                   # CPU preset: learns "easy" in minutes
    python baselines/ippo.py --preset gpu env.scenario=hard    # thousands of envs on an accelerator
    python baselines/ippo.py env.scenario=null env.n=4 train.total_timesteps=20000000

Config: the preset ippo.yaml (cube_jax/rl/presets/, copied in configs/; every key: cube_jax/rl/schema.py); see docs/baselines.md.
"""
import sys

from launch import main

if __name__ == "__main__":
    main("ippo", sys.argv[1:])
