"""Recurrent MAPPO (MAPPO-RNN) on CUBE: GRU actor and critic, shared by every agent.

    python baselines/mappo_rnn.py                                  # CPU preset on "easy"
    python baselines/mappo_rnn.py --preset gpu env.scenario=hard   # presets and overrides as for mappo.py

The same as `python baselines/mappo.py --preset mappo_rnn ...`: configs/mappo.yaml, then
configs/mappo_rnn.yaml, then the command line's presets and overrides; see docs/baselines.md.
"""
import sys

from launch import main

if __name__ == "__main__":
    main("mappo_rnn", sys.argv[1:])
