"""Ships the best training seed of a learner's benchmark entry inside the package, as ``builtin:NAME``.

    python benchmarks/ship_policy.py runs/bench/ippo-S --task hard --name ippo-hard --shipped-entry results/ippo-default-S

Reads the entry (``entry.json``) and its training runs (``work/train/<task>/seed-<k>/``, kept
by ``cube-jax bench run``), chooses the seed whose policy scored best on the task's held-out
test layouts (greedy success, then sampled success, then greedy blocks delivered; ties to the
lower seed), copies that run's saved policy (``checkpoint/policy/`` and ``policy.json``, not
its training state) to ``cube_jax/rl/builtin/<name>/`` and writes its ``card.json``: the
entry's label, command, commit, tier and budget, the task, the seed and its held-out scores,
the policy's size and, with ``--shipped-entry``, the repository folder where the entry
ships (checked to hold the same entry). Refuses an entry that does not learn, was made from a dirty tree, or
lacks the task or the run folder, naming what is missing.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from cube_jax.bench.entry import read_entry

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ROOT / "cube_jax" / "rl" / "builtin"
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")


def seed_scores(episodes: Sequence[Dict[str, Any]]) -> Dict[int, Dict[str, float]]:
    """Per training seed: greedy and sampled success and greedy blocks delivered (means over its episodes).

    >>> eps = [{"training_seed": 3, "mode": "greedy", "success": True, "blocks": 1.0},
    ...        {"training_seed": 3, "mode": "sampled", "success": False, "blocks": 0.5}]
    >>> seed_scores(eps)[3]
    {'greedy_success': 1.0, 'sampled_success': 0.0, 'greedy_blocks': 1.0, 'episodes': 1}
    """
    out: Dict[int, Dict[str, List[float]]] = {}
    for e in episodes:
        seed = out.setdefault(int(e["training_seed"]), {"greedy": [], "sampled": [], "blocks": []})
        seed[e["mode"]].append(float(e["success"]))
        if e["mode"] == "greedy":
            seed["blocks"].append(float(e["blocks"]))

    def mean(values):
        return sum(values) / len(values) if values else 0.0

    return {k: {"greedy_success": mean(v["greedy"]), "sampled_success": mean(v["sampled"]),
                "greedy_blocks": mean(v["blocks"]), "episodes": len(v["greedy"])} for k, v in sorted(out.items())}


def best_seed(scores: Dict[int, Dict[str, float]]) -> int:
    """The seed with the best held-out scores (greedy success, sampled success, greedy blocks); ties: the lower."""
    return max(sorted(scores), key=lambda k: (scores[k]["greedy_success"], scores[k]["sampled_success"],
                                              scores[k]["greedy_blocks"], -k))


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def ship(entry_dir: Path, task: str, name: str, shipped_entry: Optional[str] = None) -> Dict[str, Any]:
    entry = read_entry(entry_dir)
    if shipped_entry is not None:  # the same run's entry, in the repository (an upgrade leaves both of these)
        shipped = read_entry(ROOT / shipped_entry)
        if (shipped["agent"], shipped["tasks"], shipped["provenance"]["git_commit"]) != \
                (entry["agent"], entry["tasks"], entry["provenance"]["git_commit"]):
            raise ValueError(f"{shipped_entry}: its entry.json is not the entry of {entry_dir}")
    agent, provenance = entry["agent"], entry["provenance"]
    if not agent.get("learns"):
        raise ValueError(f"{entry_dir}: the entry's agent {agent['spec']!r} does not learn; only trained policies ship")
    if provenance.get("git_dirty"):
        raise ValueError(f"{entry_dir}: the entry was made from a tree with uncommitted changes; it cannot name its code")
    if task not in entry["tasks"]:
        raise ValueError(f"{entry_dir}: no task {task!r} in the entry (it has {', '.join(entry['tasks'])})")
    scores = seed_scores(entry["tasks"][task]["episodes"])
    seed = best_seed(scores)
    checkpoint = entry_dir / "work" / "train" / task / f"seed-{seed}" / "checkpoint"
    if not (checkpoint / "policy.json").is_file() or not (checkpoint / "policy").is_dir():
        raise ValueError(f"{checkpoint}: no saved policy (policy.json and policy/) of training seed {seed}")
    target = BUILTIN / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copytree(checkpoint / "policy", target / "policy")
    shutil.copy2(checkpoint / "policy.json", target / "policy.json")
    card = {
        "name": name,
        "task": task,
        "suite": entry["suite"],
        "algo": agent["kind"],
        "label": agent["label"],
        "tier": agent["tier"],
        "env_steps_per_seed": agent["settings"]["env_steps_per_seed"],
        "overrides": agent["settings"]["overrides"],
        "training_seed": seed,
        "held_out": scores[seed],
        "every_seed": scores,
        "entry": {"command": provenance["command"], "commit": provenance["git_commit"],
                  "started": provenance["started"], "device": provenance["device"], "shipped_as": shipped_entry},
        "size_bytes": folder_size(target),
    }
    (target / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entry", type=Path, help="a learner's entry folder (cube-jax bench run --out)")
    parser.add_argument("--task", required=True, help="the task whose best seed ships")
    parser.add_argument("--name", required=True, help="the builtin name, e.g. ippo-hard (lowercase, digits, '-')")
    parser.add_argument("--shipped-entry", default=None,
                        help="the repository folder (results/<name>) where the same entry ships, named on the card")
    args = parser.parse_args(argv)
    if not NAME.match(args.name):
        parser.error(f"--name {args.name!r}: lowercase letters, digits and '-', at most 41 characters")
    if not (args.entry / "entry.json").is_file():
        parser.error(f"{args.entry}: no entry.json (an entry folder of cube-jax bench run)")
    try:
        card = ship(args.entry, args.task, args.name, args.shipped_entry)
    except ValueError as err:
        parser.error(str(err))
    held = card["held_out"]
    print(f"builtin:{card['name']}: {card['label']} on {card['task']}, training seed {card['training_seed']}; held-out "
          f"greedy success {held['greedy_success']:.3f}, sampled {held['sampled_success']:.3f}, blocks "
          f"{held['greedy_blocks']:.3f} ({held['episodes']} episodes); {card['size_bytes'] / 1024:.0f} KiB; commit "
          f"{card['entry']['commit'][:7]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
