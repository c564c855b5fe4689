"""`cube-jax report`: metrics.json, bad traces, validation, tables, plots and timelines."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from cube_jax import cli
from cube_jax.analytics.balance import BALANCE_KEYS, BALANCE_METRICS
from cube_jax.analytics.compare import (compare_runs, csv_text, drawable_metrics, markdown_table, radar_values,
                                       table_metrics)
from cube_jax.analytics.intervals import summarize
from cube_jax.analytics.metrics import EPISODE_ONLY_METRICS, METRICS, REPORTED_METRICS, episode_metrics
from cube_jax.analytics.report import build_report, measure_traces, validate_traces, write_metrics_json
from cube_jax.analytics.synthetic import random_trace
from cube_jax.analytics.timeline import render_timeline, timeline_axis
from cube_jax.analytics.traces import load_trace, stratum, team_label
from cube_jax.trace import TraceError, dumps
from tests.analytics.test_analytics_metrics import TraceBuilder


def write(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(records) if isinstance(records, list) else records, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs_folder(tmp_path_factory):
    """Two topologies on two scenarios, four episodes each."""
    root = tmp_path_factory.mktemp("runs")
    for topology in ("debate", "individual"):
        for scenario, n in (("easy", 2), ("hard", 3)):
            for seed in range(4):
                records = random_trace(seed + 10 * n, n=n, steps=25, topology=topology, env={"scenario": scenario})
                write(root / topology / scenario / f"episode_{seed}.jsonl", records)
    return root


def test_metrics_json_has_every_metric_per_episode_and_in_the_aggregate(runs_folder, tmp_path, capsys):
    out = tmp_path / "out" / "metrics.json"
    assert cli.main(["report", str(runs_folder), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc) == {"episodes", "aggregate", "failure_attribution"}
    assert len(doc["episodes"]) == 16
    for episode in doc["episodes"]:
        assert set(episode) == {"trace", "seed", *REPORTED_METRICS, *EPISODE_ONLY_METRICS, *BALANCE_KEYS, "plan_failures",
                                "failures_by_constraint"}
        assert Path(episode["trace"]).exists() and isinstance(episode["seed"], int)
    first = doc["episodes"][0]
    assert {k: first[k] for k in REPORTED_METRICS + EPISODE_ONLY_METRICS} == episode_metrics(load_trace(first["trace"]))
    assert set(REPORTED_METRICS) <= set(doc["aggregate"]) <= set(REPORTED_METRICS) | set(BALANCE_METRICS)
    for metric in METRICS:
        summary = doc["aggregate"][metric]
        assert set(summary) == {"mean", "ci_low", "ci_high"}
        values = [float(e[metric]) for e in doc["episodes"]]
        assert summary["mean"] == pytest.approx(np.mean(values))
        assert min(values) - 1e-9 <= summary["ci_low"] <= summary["mean"] <= summary["ci_high"] <= max(values) + 1e-9
    printed = capsys.readouterr().out
    assert "16 episodes from 16 trace files; scenarios: easy, hard (intervals stratified by scenario)" in printed
    assert "P_coherence" in printed and f"wrote {out}" in printed


def test_the_aggregate_is_stratified_by_scenario(runs_folder):
    report = build_report([runs_folder], resamples=2000)
    assert sorted(set(report.strata)) == ["easy", "hard"]
    assert report.aggregate == summarize(report.episodes, REPORTED_METRICS, report.strata, resamples=2000)


def test_processes_give_the_same_report(tmp_path):
    for seed in range(64):  # enough files for the pool to start
        write(tmp_path / f"e{seed:02d}.jsonl", random_trace(seed, n=2, steps=3))
    paths = sorted(tmp_path.glob("*.jsonl"))
    assert measure_traces(paths, jobs=2) == measure_traces(paths, jobs=1)


def bad_traces(folder: Path) -> dict:
    good = random_trace(1, n=2, steps=5)
    stage_line = next(i for i, r in enumerate(good) if r["type"] == "stage")
    wrong_wall = [dict(r) for r in good]
    wrong_wall[stage_line]["wall"] = "soon"
    unknown_agent = [dict(r) for r in good]
    unknown_agent[stage_line]["agent"] = "agent_9"
    no_end = good[:-1]
    lines = dumps(good).splitlines()
    return {
        write(folder / "wall.jsonl", wrong_wall): f"line {stage_line + 1}, key 'wall'",
        write(folder / "agent.jsonl", unknown_agent): f"line {stage_line + 1}, key 'agent': unknown agent 'agent_9'",
        write(folder / "no_end.jsonl", no_end): f"line {len(no_end)}, key 'type': the last record must be 'end'",
        write(folder / "blank.jsonl", "\n".join(lines[:3] + [""] + lines[3:]) + "\n"): "line 4: empty line",
        write(folder / "empty.jsonl", ""): "line 1: the trace is empty",
        write(folder / "prose.jsonl", "hello\n"): "line 1: not JSON",
    }


def test_bad_traces_are_reported_with_line_and_key_and_the_rest_is_measured(tmp_path, capsys):
    expected = bad_traces(tmp_path / "runs")
    write(tmp_path / "runs" / "good.jsonl", random_trace(2, n=2, steps=5))
    out = tmp_path / "metrics.json"
    assert cli.main(["report", str(tmp_path / "runs"), "--json", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    for path, where in expected.items():
        assert f"left out {path}: {where}" in err, err
    assert "6 of 7 trace files are not valid traces and were left out" in err
    assert [Path(e["trace"]).name for e in json.loads(out.read_text())["episodes"]] == ["good.jsonl"]


def test_no_valid_trace_exits_1_and_a_missing_path_is_an_argument_error(tmp_path, capsys):
    bad_traces(tmp_path)
    assert cli.main(["report", str(tmp_path)]) == 1
    assert "none of the 6 trace files is valid" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", str(tmp_path / "empty")]) == 1
    assert "no trace files (*.jsonl)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["report", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2 and "no such trace file or folder" in capsys.readouterr().err


def test_validate_names_each_bad_file_and_exits_1(tmp_path, capsys):
    expected = bad_traces(tmp_path / "runs")
    good = write(tmp_path / "runs" / "good.jsonl", random_trace(2, n=2, steps=5))
    assert cli.main(["report", "--validate", str(tmp_path / "runs")]) == 1
    captured = capsys.readouterr()
    for path, where in expected.items():
        assert f"{path}: {where}" in captured.err
    assert str(good) not in captured.err and "1 of 7 trace files are valid" in captured.out
    assert cli.main(["report", "--validate", str(good)]) == 0
    assert [f.path for f in validate_traces([tmp_path / "runs"])] == sorted(expected)


def test_strict_mode_rejects_what_the_fast_checks_let_through(tmp_path):
    records = random_trace(3, n=2, steps=5)
    step = next(r for r in records if r["type"] == "step")
    step["reward"] = ["a lot", 0.0]  # the metrics never read rewards
    path = write(tmp_path / "reward.jsonl", records)
    fast, _ = measure_traces([path])
    strict, failures = measure_traces([path], validate=True)
    assert len(fast) == 1 and strict == [] and "key 'reward.0" in failures[0].message


def test_the_fast_reader_reports_like_the_validator(tmp_path):
    path = write(tmp_path / "t.jsonl", dumps(random_trace(0, n=2, steps=3)) + '{"type": "step"}\n')
    with pytest.raises(TraceError, match=r"t.jsonl: line \d+, key 'type': a record after the 'end' record"):
        load_trace(path)


def test_run_fields_from_the_header():
    header = random_trace(0, n=2, steps=1, env={"scenario": "hard", "max_steps": 50})[0]
    assert stratum(header) == "hard" and team_label(header) == "llm:synthetic"
    assert stratum({"env": {"n": 4}}) == "n=4" and stratum({"env": {"grid_size": 8, "seed": 1}}) == "grid_size=8,seed=1"


def test_tables_group_runs_and_give_every_metric_an_interval(runs_folder, tmp_path, capsys):
    table, table_csv, plots, doc = tmp_path / "t.md", tmp_path / "t.csv", tmp_path / "plots", tmp_path / "m.json"
    assert cli.main(["report", str(runs_folder), "--table", str(table), "--csv", str(table_csv),
                     "--plots", str(plots), "--json", str(doc), "--quiet"]) == 0
    lines = table.read_text().splitlines()
    assert lines[0] == ("| metric | debate / llm:synthetic / easy (N=4) | debate / llm:synthetic / hard (N=4) | "
                        "individual / llm:synthetic / easy (N=4) | individual / llm:synthetic / hard (N=4) |")
    assert lines[2].startswith("| `success` | ")
    assert all(line.count("|") == 6 for line in lines)
    # every metric of metrics.json's aggregate has its row, in its order, then the per-agent pushes
    rows_named = [line.split("`")[1] for line in lines[2:]]
    aggregate = list(json.loads(doc.read_text())["aggregate"])
    assert rows_named[:len(aggregate)] == aggregate and "workload_balance" in rows_named
    assert set(METRICS) <= set(rows_named) and "pushes.agent_0" in rows_named and "pushes.agent_2" in rows_named
    # agent_2 exists on hard (three agents) only: undefined on easy
    agent_2 = next(line for line in lines if line.startswith("| `pushes.agent_2` |")).split(" | ")
    assert agent_2[1] == "undefined" and agent_2[2] != "undefined"
    rows = list(csv.DictReader(io.StringIO(table_csv.read_text())))
    assert len(rows) == 4 * len(rows_named)
    assert {(r["topology"], r["scenario"]) for r in rows} == {(t, s) for t in ("debate", "individual")
                                                              for s in ("easy", "hard")}
    individual = [r for r in rows if r["topology"] == "individual" and r["metric"] == "L_tot"]
    assert [(r["mean"], r["ci_low"], r["ci_high"]) for r in individual] == [("0.0", "0.0", "0.0")] * 2
    for name in ("bars.png", "radar.png"):
        assert (plots / name).stat().st_size > 20_000


def test_a_metric_defined_in_some_episodes_says_in_how_many(runs_folder):
    report = build_report([runs_folder], resamples=200)
    report.episodes[0]["workload_balance"] = None
    runs = compare_runs(report, metrics=["workload_balance"], resamples=200)
    first = runs[0]
    count = sum(e["workload_balance"] is not None for e, r in zip(report.episodes, report.runs)
                if (r["topology"], r["scenario"]) == ("debate", "easy"))
    assert first.defined["workload_balance"] == count < 4
    assert markdown_table(runs).splitlines()[2].split(" | ")[1].endswith(f"({count} of 4 episodes)")


def test_tables_follow_whatever_metrics_json_holds(runs_folder):
    """A metric that metrics.json gains (here one added by hand to every episode and the
    aggregate) reaches the table with no list to update."""
    report = build_report([runs_folder], resamples=200)
    for number, episode in enumerate(report.episodes):
        episode["negotiation_rounds"] = number % 3
    report.aggregate["negotiation_rounds"] = summarize(report.episodes, ["negotiation_rounds"], resamples=200)["negotiation_rounds"]
    assert "negotiation_rounds" in table_metrics(report)
    lines = markdown_table(compare_runs(report, resamples=200)).splitlines()
    assert any(line.startswith("| `negotiation_rounds` | ") for line in lines)
    assert not any(line.startswith(("| `trace`", "| `seed`")) for line in lines)


def test_plots_leave_out_metrics_that_are_zero_in_every_run(runs_folder, tmp_path):
    report = build_report([runs_folder / "individual"], resamples=200)
    runs = compare_runs(report, resamples=200)
    drawn, zero = drawable_metrics(runs, ["success", "L_tot", "L_avg", "Z_gain_rate"])
    assert drawn == ["success"] and zero == ["L_tot", "L_avg", "Z_gain_rate"]
    assert drawable_metrics(runs, ["workload_balance_kinds"]) == ([], [])  # undefined: not drawn either
    from cube_jax.analytics.compare import plot_bars

    # nothing left to draw still gives a picture that says why
    assert plot_bars(runs, tmp_path / "zero.png", ["L_tot", "Z_gain_rate"]).stat().st_size > 5_000


def test_runs_by_topology_pool_scenarios_with_stratified_intervals(runs_folder):
    report = build_report([runs_folder], resamples=2000)
    runs = compare_runs(report, by=["topology"], resamples=2000)
    assert [(r.label, r.episodes) for r in runs] == [("debate", 8), ("individual", 8)]
    members = [i for i, run in enumerate(report.runs) if run["topology"] == "debate"]
    expected = summarize([report.episodes[i] for i in members], METRICS, [report.strata[i] for i in members],
                         resamples=2000)
    assert {m: runs[0].summary[m] for m in METRICS} == expected
    assert markdown_table(runs, ["L_tot"]).splitlines()[2].startswith("| `L_tot` | ")
    assert csv_text(runs, ["L_tot"]).splitlines()[0] == "topology,episodes,metric,mean,ci_low,ci_high"
    with pytest.raises(ValueError, match="grouped by some of"):
        compare_runs(report, by=["model"])


def test_radar_values_normalise_counts_and_keep_ratios(runs_folder):
    runs = compare_runs(build_report([runs_folder], resamples=200), resamples=200)
    values = radar_values(runs, ["L_avg", "P_coherence"])
    assert values[:, 0].max() == 1.0 and values.min() >= 0.0
    assert list(values[:, 1]) == [run.summary["P_coherence"]["mean"] for run in runs]


def test_write_metrics_json_for_the_harness(tmp_path):
    path = write(tmp_path / "episode_0.jsonl", random_trace(5, n=3, steps=10))
    report = write_metrics_json(path, tmp_path / "metrics.json")
    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert doc == report.document() and doc["episodes"][0]["trace"] == str(path)
    # one episode: every interval is its value
    assert all(s["mean"] == s["ci_low"] == s["ci_high"] for s in doc["aggregate"].values())


# --- timelines -------------------------------------------------------------------------------------


def test_the_timeline_axis_gives_each_cognitive_phase_a_column():
    b = TraceBuilder(n=2)
    b.stage(0, "R").stage(1, "R")            # phase before step 0: one stage change per agent
    b.step().step()
    b.plan(0, 0, "idle(1)", "committed")     # phase before step 2: no stage change
    b.step()
    b.stage(0, "R").stage(0, "W").stage(0, "X")  # three changes of one agent: three widths
    b.step()
    records = b.end()
    axis = timeline_axis(records, phase_width=0.5)
    assert axis.step_left == [0.5, 1.5, 3.0, 5.5] and axis.end == 6.5
    assert axis.position[1:3] == [0.125, 0.375] and axis.position[5] == 2.75
    assert axis.position[7:10] == [4.25, 4.75, 5.25]


@pytest.mark.parametrize("n, steps", [(2, 30), (8, 60)])
def test_timelines_render(n, steps, tmp_path):
    path = render_timeline(random_trace(n, n=n, steps=steps), tmp_path / f"n{n}.png")
    from PIL import Image

    with Image.open(path) as image:
        width, height = image.size
        pixels = np.asarray(image.convert("RGB"))
    assert width == 1650 and height > 600
    # the stage colours of executing and reasoning agents are in the picture
    colours = {tuple(p) for p in pixels.reshape(-1, 3)[::7]}
    assert (0x59, 0xA1, 0x4F) in colours and (0x4C, 0x72, 0xB0) in colours


def test_cli_writes_a_timeline_per_trace(runs_folder, tmp_path, capsys):
    traces = sorted((runs_folder / "debate" / "easy").glob("*.jsonl"))[:2]
    assert cli.main(["report", *map(str, traces), "--timelines", str(tmp_path), "--steps", "0:10", "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["episode_0.png", "episode_1.png"]


def test_trace_paths_search_folders_and_take_each_file_once(runs_folder):
    from cube_jax.analytics.traces import trace_paths

    easy = runs_folder / "debate" / "easy"
    paths = trace_paths([easy / "episode_1.jsonl", runs_folder / "debate", easy / "episode_1.jsonl"])
    assert paths[0] == easy / "episode_1.jsonl" and len(paths) == len(set(paths)) == 8
    with pytest.raises(FileNotFoundError, match="no such trace file or folder: '.*nowhere'"):
        trace_paths([runs_folder / "nowhere"])
