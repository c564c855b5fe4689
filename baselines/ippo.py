"""IPPO on CUBE: one shared actor-critic, the critic sees each agent's own observation.

    python baselines/ippo.py                                   # CPU preset: learns "easy" in minutes
    python baselines/ippo.py --preset gpu env.scenario=hard    # thousands of envs on an accelerator
    python baselines/ippo.py env.scenario=null env.n=4 train.total_timesteps=20000000

Config: configs/ippo.yaml (defaults in cube_jax/rl/config.py); see docs/baselines.md.
"""
import sys

from cube_jax.rl.config import parse_args

if __name__ == "__main__":
    config = parse_args("ippo", sys.argv[1:])  # bad input stops here, before the training stack loads
    from cube_jax.rl.run import train_and_report

    train_and_report(config)
