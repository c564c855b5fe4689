"""``benchmarks/bench_suite.py --new-only``: which entries' cost rows are kept and which are
measured again (verify is faked here; the shipped rows' figures are checked by the doc tests)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cube_jax.bench.entry import FORMAT
from cube_jax.core import suite
from tests.bench_scripts import load_benchmark


def _entry(folder: Path, commit: str, continued=()) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "actions.npz").write_bytes(b"12345")
    entry = {"suite": suite.VERSION, "format": FORMAT, "test_sets": {"easy": suite.TEST_SET_SHA256["easy"]},
             "bootstrap": {}, "agent": {"spec": "heuristic"}, "tasks": {"easy": {"episodes": [{}, {}]}},
             "provenance": {"git_commit": commit, "wall_seconds": 3.0,
                            "continued": [{"git_commit": c} for c in continued]},
             "evidence": {"actions.npz": "digest"}}
    (folder / "entry.json").write_text(json.dumps(entry), encoding="utf-8")


def test_new_only_measures_entries_whose_latest_run_or_evidence_changed(tmp_path, monkeypatch):
    suite_script = load_benchmark("bench_suite")
    verified = []

    def fake_run(command, **kwargs):
        verified.append(Path(command[-1]).name)
        return subprocess.CompletedProcess(command, 0, stdout="verified\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    results = tmp_path / "results"
    for name in ("same", "continued", "grown", "old-row"):
        _entry(results / name, "a" * 40)
    first = suite_script.measure_entries(results)
    assert sorted(verified) == ["continued", "grown", "old-row", "same"]
    rows = {row["entry"]: row for row in first["rows"]}
    assert rows["same"]["commit"] == "a" * 40 and rows["same"]["episodes"] == 2 and rows["same"]["evidence_bytes"] == 5

    _entry(results / "continued", "a" * 40, continued=["b" * 40])  # the same evidence, a later run's commit
    (results / "grown" / "actions.npz").write_bytes(b"1234567")
    del rows["old-row"]["commit"]  # a row measured before rows recorded their commit
    verified.clear()
    second = suite_script.measure_entries(results, kept=list(rows.values()))
    assert sorted(verified) == ["continued", "grown", "old-row"]
    again = {row["entry"]: row for row in second["rows"]}
    assert again["same"] is rows["same"] and again["continued"]["commit"] == "b" * 40
