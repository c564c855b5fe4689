"""The benchmark suite: entries, runs, verify and the board."""
