"""The full metric table of the planners, from their traces, for docs/analytics.md.

    python benchmarks/analytics_planners.py TRACES [--out docs/analytics] [--doc docs/analytics.md]

``TRACES`` is a folder of episode traces (LLM.md section 5) of the heuristic and team
planners on ``easy``, ``hard`` and ``make(n=4)``, 32 seeds each, as the CPU episode loop
writes them; runs are told apart by the traces' own headers (the agents' kind and the
scenario), so the folder layout does not matter. The script writes into ``--out``:

- ``planners.md`` and ``planners.csv``: every metric with its mean and 95% bootstrap
  interval, one column (or row group) per planner and scenario;
- ``planners_bars.png``: outcomes and communication with their intervals;
- ``planners_timeline.png``: the timeline of the first episode of the team planner on
  ``hard`` (or of the first trace when there is none);

and, with ``--doc``, puts the table into that file between the lines
``<!-- planners table: start -->`` and ``<!-- planners table: end -->``. It prints how many
episodes each run has and warns about runs with fewer than ``--expect`` (32).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cube_jax.analytics.compare import compare_runs, markdown_table, plot_bars, write_tables
from cube_jax.analytics.metrics import METRICS
from cube_jax.analytics.report import build_report, default_jobs
from cube_jax.analytics.timeline import render_timeline
from cube_jax.analytics.traces import load_trace, stratum, team_label

START, END = "<!-- planners table: start -->", "<!-- planners table: end -->"


def put_into_doc(doc: Path, text: str) -> None:
    content = doc.read_text(encoding="utf-8")
    if START not in content or END not in content:
        raise SystemExit(f"{doc}: no {START!r} ... {END!r} section to fill")
    head, rest = content.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{text}{END}{tail}", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path, nargs="+", help="folders or files of planner traces")
    parser.add_argument("--out", type=Path, default=Path("docs/analytics"))
    parser.add_argument("--doc", type=Path, default=None, help="Markdown file whose planners section gets the table")
    parser.add_argument("--expect", type=int, default=32, help="episodes each run should have (default 32)")
    args = parser.parse_args()

    report = build_report(args.traces, jobs=default_jobs())
    for failure in report.failures:
        print(f"left out {failure}", file=sys.stderr)
    runs = compare_runs(report, by=("team", "scenario"))
    for run in runs:
        note = "" if run.episodes >= args.expect else f"  (fewer than {args.expect})"
        print(f"{run.label:<40} {run.episodes:>4} episodes{note}")

    args.out.mkdir(parents=True, exist_ok=True)
    write_tables(runs, markdown=args.out / "planners.md", csv_path=args.out / "planners.csv")
    plot_bars(runs, args.out / "planners_bars.png")
    chosen = next((episode["trace"] for episode, run in zip(report.episodes, report.runs)
                   if run["team"] == "team" and run["scenario"] == "hard"), report.episodes[0]["trace"])
    chosen_records = load_trace(chosen)
    render_timeline(chosen_records, args.out / "planners_timeline.png")
    header_record = chosen_records[0]
    caption = (f"agents of kind {team_label(header_record)} on {stratum(header_record)}, seed "
               f"{header_record['seed']} ({chosen_records[-1]['steps']} steps, {chosen_records[-1]['reason']})")
    print(f"wrote {args.out}/planners.md, planners.csv, planners_bars.png, planners_timeline.png (from {chosen})")
    if args.doc is not None:
        figures = Path(os.path.relpath(args.out, args.doc.parent)).as_posix()
        header = (f"{len(report.episodes)} episodes; runs by team and scenario; each cell: mean "
                  "[95% bootstrap interval].\n\n")
        pictures = (f"\n![outcomes and communication]({figures}/planners_bars.png)\n\n"
                    f"Timeline of one episode: {caption}.\n\n![timeline]({figures}/planners_timeline.png)\n")
        put_into_doc(args.doc, header + markdown_table(runs, METRICS) + pictures)
        print(f"filled the planners table of {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
