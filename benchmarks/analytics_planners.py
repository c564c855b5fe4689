"""The full metric table of the planners, from their traces, for docs/analytics.md.

    python benchmarks/analytics_planners.py --doc          # play, measure, write the JSON, the PNGs and the doc
    python benchmarks/analytics_planners.py TRACES ...     # measure traces played before

Without ``TRACES``, the script first plays the heuristic and team planners on ``easy``,
``hard`` and ``make(n=4)``, ``--episodes`` (32) seeds each from seed 0, with the CPU episode
loop (``cube-jax eval --team KIND ... --traces``), into ``--folder`` (default: a temporary
folder); with ``TRACES`` (folders or files of episode traces, LLM.md section 5) it measures
those. Runs are told apart by the traces' own headers (the agents' kind and the scenario),
so the folder layout does not matter.

It writes

- ``benchmarks/results/analytics_planners.json`` (``--json``): per run (team and scenario)
  its episode count and every metric's mean and 95% bootstrap interval, the caption of the
  timeline, and the machine and its load while playing;
- ``--out`` (``docs/analytics``): ``planners_bars.png`` (outcomes and communication with
  their intervals) and ``planners_timeline.png`` (the first episode of the team planner on
  ``hard``, or of the first trace when there is none);

and, with ``--doc``, rewrites the generated block of ``docs/analytics.md`` from the JSON
(:func:`render`). It prints how many episodes each run has and warns about runs with fewer
than ``--episodes``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from cube_jax.analytics.compare import Run, markdown_table  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "analytics_planners.json"
DOC = ROOT / "docs" / "analytics.md"
TEAMS = ("heuristic", "team")
WORLDS = (("easy", ["--scenario", "easy"]), ("hard", ["--scenario", "hard"]), ("n=4", ["--n", "4"]))


def play(folder: Path, episodes: int) -> list:
    """Plays every planner on every world into ``folder``/<team>_<world>; the folders and the seconds each took."""
    played = []
    for team in TEAMS:
        for name, world in WORLDS:
            target = folder / f"{team}_{name.replace('=', '')}"
            command = [sys.executable, "-m", "cube_jax.cli", "eval", "--team", team, *world,
                       "--episodes", str(episodes), "--seed", "0", "--loop", "cpu", "--traces", str(target),
                       "--no-progress"]
            start = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            seconds = time.perf_counter() - start
            print(f"played {team} on {name}: {episodes} episodes in {seconds:.1f} s", flush=True)
            played.append({"team": team, "world": name, "seconds": round(seconds, 1)})
    return played


def render(data: dict) -> str:
    """The block of docs/analytics.md: the table of every metric per run, the bar plot and the timeline."""
    runs = [Run(run["fields"], run["episodes"], run["summary"], run.get("defined", {})) for run in data["runs"]]
    machine = data["machine"]
    load = machine["load_average"]
    figures = data["figures_from_doc"]
    lines = [
        f"{data['total_episodes']} episodes ({data['episodes_per_run']} seeds per run from seed 0, CPU episode "
        f"loop); runs by team and scenario; each cell: mean [95% bootstrap interval]. Decision and wait times "
        f"are seconds of each agent's own clock, measured on {machine['cpus']} CPUs shared with other jobs "
        f"(load average {load[0]:.1f} before playing, {load[1]:.1f} after), Python {machine['python']}.",
        "",
        markdown_table(runs, data["metrics"]).rstrip("\n"),
        "",
        f"![outcomes and communication]({figures}/planners_bars.png)",
        "",
        f"Timeline of one episode: {data['timeline']['caption']}.",
        "",
        f"![timeline]({figures}/planners_timeline.png)",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path, nargs="*", help="folders or files of planner traces (default: play them)")
    parser.add_argument("--episodes", type=int, default=32, help="seeds per planner and world (default 32)")
    parser.add_argument("--folder", type=Path, default=None,
                        help="where played traces go (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "analytics", help="folder of the PNGs")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"the JSON to write (default {RESULTS})")
    parser.add_argument("--doc", action="store_true", help="rewrite the generated block of docs/analytics.md")
    args = parser.parse_args(argv)

    from cube_jax.analytics.compare import compare_runs, plot_bars
    from cube_jax.analytics.report import build_report, default_jobs
    from cube_jax.analytics.timeline import render_timeline
    from cube_jax.analytics.traces import load_trace, stratum, team_label

    load_before = os.getloadavg()[0]
    played = None
    sources = args.traces
    if not sources:
        folder = args.folder or Path(tempfile.mkdtemp(prefix="cube-jax-planners-"))
        played = play(folder, args.episodes)
        sources = [folder]
    load_after = os.getloadavg()[0]

    report = build_report(sources, jobs=default_jobs())
    for failure in report.failures:
        print(f"left out {failure}", file=sys.stderr)
    runs = compare_runs(report, by=("team", "scenario"))
    for run in runs:
        note = "" if run.episodes >= args.episodes else f"  (fewer than {args.episodes})"
        print(f"{run.label:<40} {run.episodes:>4} episodes{note}")

    args.out.mkdir(parents=True, exist_ok=True)
    plot_bars(runs, args.out / "planners_bars.png")
    chosen = next((episode["trace"] for episode, run in zip(report.episodes, report.runs)
                   if run["team"] == "team" and run["scenario"] == "hard"), report.episodes[0]["trace"])
    chosen_records = load_trace(chosen)
    render_timeline(chosen_records, args.out / "planners_timeline.png")
    header_record = chosen_records[0]
    caption = (f"agents of kind {team_label(header_record)} on {stratum(header_record)}, seed "
               f"{header_record['seed']} ({chosen_records[-1]['steps']} steps, {chosen_records[-1]['reason']})")
    print(f"wrote {args.out}/planners_bars.png, planners_timeline.png (from {chosen})")

    doc_folder = DOC.parent
    data = {
        "episodes_per_run": args.episodes,
        "total_episodes": len(report.episodes),
        "metrics": list(runs[0].summary) if runs else [],
        "runs": [{"fields": run.fields, "label": run.label, "episodes": run.episodes, "summary": run.summary,
                  "defined": run.defined} for run in runs],
        "failures": [str(failure) for failure in report.failures],
        "timeline": {"caption": caption, "trace": Path(chosen).name},
        "figures_from_doc": Path(os.path.relpath(args.out.resolve(), doc_folder)).as_posix(),
        "played": played,
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average": [round(load_before, 2), round(load_after, 2)]},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    if args.doc:
        from bench_common import write_generated

        write_generated(DOC, "benchmarks/analytics_planners.py", args.json.resolve().relative_to(ROOT).as_posix())
        print(f"rewrote the planners block of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
