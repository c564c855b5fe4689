"""PQN-VDN on CUBE: one shared Q-network with LayerNorm, the team's Q the sum of the
agents', trained on Q(lambda) targets over vectorised rollouts, without replay buffer or
target network (cube_jax/rl/pqn.py).

    python baselines/pqn_vdn.py                                   # CPU preset: "easy"
    python baselines/pqn_vdn.py --preset gpu env.scenario=hard    # thousands of envs on an accelerator
    python baselines/pqn_vdn.py pqn.lambda_=0.65 pqn.epsilon_finish=0.01

Config: configs/pqn_vdn.yaml (every key: cube_jax/rl/config.py); see docs/baselines.md.
"""
import sys

from launch import main

if __name__ == "__main__":
    main("pqn_vdn", sys.argv[1:])
