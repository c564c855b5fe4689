"""Trained policies shipped inside the package: ``builtin:NAME`` wherever a policy plays.

Each one is a folder ``cube_jax/rl/builtin/<name>/`` holding a learner's saved policy (the
``policy/`` and ``policy.json`` of a run's ``checkpoint/``, nothing of its training state)
and ``card.json``: the benchmark entry it comes from (label, command, commit, tier), the
task, the training seed chosen (the best on the task's held-out test layouts, greedy, then
sampled, then blocks delivered) and that seed's held-out scores. ``benchmarks/ship_policy.py``
makes one from an entry folder.

    cube-jax eval --policy builtin:ippo-hard --scenario hard
    cube-jax eval --team builtin:ippo-easy,heuristic,heuristic --scenario easy
    cube-jax bench run builtin:ippo-hard --tasks hard --out runs/bench/builtin-ippo-hard

The module imports nothing heavy: the registry resolves :func:`path` by name.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent
CARD_FILE = "card.json"


def names() -> List[str]:
    """The shipped policies, sorted."""
    return sorted(p.name for p in ROOT.iterdir() if (p / CARD_FILE).is_file() and (p / "policy.json").is_file())


def path(name: str) -> Path:
    """The checkpoint folder of the shipped policy ``name``; ValueError naming the shipped ones."""
    shipped = names()
    if name not in shipped:
        raise ValueError(f"no built-in policy {name!r}; the package ships {', '.join(shipped) or 'none'}")
    return ROOT / name


def card(name: str) -> Dict[str, Any]:
    """The card of the shipped policy ``name`` (see the module's docstring)."""
    return json.loads((path(name) / CARD_FILE).read_text())


__all__ = ["CARD_FILE", "ROOT", "card", "names", "path"]
