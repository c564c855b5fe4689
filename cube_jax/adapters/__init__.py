"""Adapters over the core: the PettingZoo ``ParallelEnv`` and rendering (text, RGB, GIF)."""
