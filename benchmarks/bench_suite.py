"""The benchmark's own figures: how often a training draw is a test layout, and what each
shipped entry costs (time to make it, time to verify it, size of its evidence).

    python benchmarks/bench_suite.py --doc docs/benchmark.md          # both sections
    python benchmarks/bench_suite.py --sections entries --doc docs/benchmark.md
    python benchmarks/bench_suite.py --sections entries --new-only --doc docs/benchmark.md   # added entries only

``collisions``: for ``n1`` and ``n2`` (the tasks with the fewest layouts), 10^6 fresh layouts
drawn as training's resets draw them (keys ``split(PRNGKey(0), 10^6)``), counted against the
task's 256 test layouts (``cube_jax.core.suite.collision_chance``). ``entries``: for every
entry folder under ``results/`` (and its folders of entries): its recorded wall seconds (the time ``bench run`` took to
score it), its episodes, the time of a full ``bench verify`` in a fresh process (every
episode replayed, compiles included) and the size of its evidence; and the size of ``results/`` in all. Each section writes its JSON
(``benchmarks/results/bench_collisions.json``, ``bench_entries.json``) and, with ``--doc``,
its generated block of the doc.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Sequence

from bench_common import ROOT, host_info, save_results

RESULTS = ROOT / "benchmarks" / "results"
OUTS = {"collisions": RESULTS / "bench_collisions.json", "entries": RESULTS / "bench_entries.json"}
SCRIPT = "benchmarks/bench_suite.py"
COLLISION_TASKS = ("n1", "n2")


def measure_collisions(draws: int) -> list:
    from cube_jax.core import suite

    rows = []
    for name in COLLISION_TASKS:
        t0 = time.perf_counter()
        measured = suite.collision_chance(suite.task(name), draws=draws)
        rows.append({"task": name, **measured, "seconds": round(time.perf_counter() - t0, 1)})
        print(f"{name}: {measured['collisions']} of {draws} draws are test layouts")
    return rows


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and "work" not in p.relative_to(folder).parts)


def measure_entries(results: Path, kept: Sequence[dict] = ()) -> dict:
    """Each entry verified in a fresh process (``cube-jax bench verify``, every episode: the time
    includes starting Python and compiling each task's replay), its recorded run time and the
    size of its evidence. ``kept``: rows measured before (``--new-only``), reused for the entries
    whose name, commit (of their latest run: a continuation counts), episodes and evidence are
    unchanged; the others, and rows that lack any of these, are measured."""
    import subprocess
    import sys

    from cube_jax.bench.board import entry_folders
    from cube_jax.bench.entry import read_entry, runs

    rows = []
    previous = {row["entry"]: row for row in kept}
    for folder, name in entry_folders(results):  # cross-play's teams: results/crossplay/<task>/<team>
        entry = read_entry(folder)
        same = {"commit": runs(entry["provenance"])[-1].get("git_commit"),
                "episodes": sum(len(r["episodes"]) for r in entry["tasks"].values()),
                "evidence_bytes": sum((folder / rel).stat().st_size for rel in entry["evidence"])}
        row = previous.get(name)
        if row is not None and all(key in row and row[key] == value for key, value in same.items()):
            print(f"kept {name}: measured {row.get('measured', 'before')}")
            rows.append(row)
            continue
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "cube_jax.cli", "bench", "verify", str(folder)],
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"{folder}: bench verify failed: {done.stderr.strip()}")
        print(done.stdout.strip())
        rows.append({"entry": name, "agent": entry["agent"]["spec"], "tasks": len(entry["tasks"]),
                     "episodes": same["episodes"], "run_seconds": entry["provenance"].get("wall_seconds"),
                     "verify_seconds": round(seconds, 1), "evidence_bytes": same["evidence_bytes"],
                     "commit": same["commit"], "measured": time.strftime("%Y-%m-%d %H:%M")})
    return {"rows": rows, "results_bytes": folder_bytes(results)}


def render(data: dict) -> str:
    blocks = []
    if data.get("collisions"):
        lines = ["| task | fresh draws | draws equal to a test layout | chance |", "|---|---|---|---|"]
        for r in data["collisions"]:
            chance = f"{r['chance']:.2e}" if r["collisions"] else f"below {1 / r['draws']:.0e} (none seen)"
            lines.append(f"| {r['task']} | {r['draws']:,} | {r['collisions']:,} | {chance} |")
        blocks.append("\n".join(lines))
    entries = data.get("entries")
    if entries:
        lines = ["| entry | agent | tasks | episodes | bench run (s) | bench verify, every episode, fresh process (s) | evidence |",
                 "|---|---|---|---|---|---|---|"]
        for r in entries["rows"]:
            lines.append(f"| {r['entry']} | `{r['agent']}` | {r['tasks']} | {r['episodes']:,} | {r['run_seconds']:.0f} "
                         f"| {r['verify_seconds']:.1f} | {r['evidence_bytes'] / 1e6:.2f} MB |")
        blocks.append("\n".join(lines))
        blocks.append(f"`results/` holds {entries['results_bytes'] / 1e6:.1f} MB in all.")
    machine = data.get("machine")
    if machine:
        blocks.append(f"Measured on {machine.get('cpu_model')} ({machine.get('cpus_usable')} usable cores), "
                      f"{machine.get('date')}.")
    return "\n\n".join(blocks) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default="collisions,entries", help="collisions, entries (comma-separated)")
    parser.add_argument("--draws", type=int, default=10**6, help="fresh draws per task (collisions)")
    parser.add_argument("--results", type=Path, default=ROOT / "results", help="the entry folders (entries)")
    parser.add_argument("--doc", type=Path, default=None, help="a doc whose generated blocks to rewrite")
    parser.add_argument("--new-only", action="store_true",
                        help="entries: keep the rows of bench_entries.json whose entry is unchanged, measure the rest")
    args = parser.parse_args()
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(OUTS)
    if unknown:
        parser.error(f"argument --sections: unknown {sorted(unknown)}; sections are {', '.join(OUTS)}")
    for section in sections:
        data = {"machine": host_info()}
        if section == "collisions":
            data[section] = measure_collisions(args.draws)
        else:
            kept = json.loads(OUTS[section].read_text())["entries"]["rows"] if args.new_only else []
            data[section] = measure_entries(args.results, kept)
        save_results(data, OUTS[section], render, doc=args.doc, script=SCRIPT)


if __name__ == "__main__":
    main()
