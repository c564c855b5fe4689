"""Recurrent IPPO (IPPO-RNN) on CUBE: GRU actor and critic, shared by every agent.

    python baselines/ippo_rnn.py                                  # CPU preset on "easy"
    python baselines/ippo_rnn.py --preset gpu env.scenario=hard   # presets and overrides as for ippo.py

The same as `python baselines/ippo.py --preset ippo_rnn ...`: configs/ippo.yaml, then
configs/ippo_rnn.yaml, then the command line's presets and overrides; see docs/baselines.md.
"""
import sys

from launch import main

if __name__ == "__main__":
    main("ippo_rnn", sys.argv[1:])
