"""The entries the repository ships (``results/``) and the board built from them.

Every shipped entry verifies on a sample of its episodes (a seeded sample per task, every
digest, every aggregate), the shipped board (``docs/leaderboard.md`` and ``.html``) is exactly
what ``cube-jax bench board`` renders from those entries, and the evidence keeps a clone light.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from cube_jax.bench import crossplay
from cube_jax.bench.board import board_rows, entry_folders, load_entries, render_html, render_markdown
from cube_jax.bench.verify import verify
from cube_jax.core import suite

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
DOCS = ROOT / "docs"
# every entry folder, cross-play's teams (results/crossplay/<task>/<team>) among them
SHIPPED = entry_folders(RESULTS) if RESULTS.is_dir() else []
ENTRIES = [folder for folder, _ in SHIPPED]
FIXED_AGENTS = ("random", "heuristic", "team", "negotiator")
SAMPLE = 4  # episodes replayed per task of each entry
MAX_RESULTS_BYTES = 50_000_000


def test_the_fixed_agents_have_entries_on_every_task():
    for spec in FIXED_AGENTS:
        entries = [e for e in load_entries([RESULTS]) if e["agent"]["spec"] == spec]
        assert len(entries) == 1, spec
        tasks = entries[0]["tasks"]
        assert list(tasks) == list(suite.TASK_NAMES), spec
        assert all(record["episodes_per_run"] == suite.TEST_LAYOUTS for record in tasks.values()), spec


@pytest.mark.parametrize("folder", ENTRIES, ids=[name for _, name in SHIPPED])
def test_every_shipped_entry_verifies_on_a_sample(folder):
    report = verify(folder, sample=SAMPLE, seed=0)
    assert report.tasks and all(v["replayed"] == min(SAMPLE, v["episodes"]) for v in report.tasks.values())


@pytest.fixture(scope="module")
def board():
    entries = load_entries([RESULTS])
    verified = {e["id"]: True for e in entries}  # each verifies (the test above); the board marks it so
    return board_rows(entries, verified), crossplay.matrices(entries)


def test_the_shipped_board_is_what_the_entries_give(board):
    rows, matrices = board
    picture = "leaderboard-crossplay.png" if matrices else None
    assert (DOCS / "leaderboard.md").read_text(encoding="utf-8") == render_markdown(rows, "leaderboard.png",
                                                                                    matrices, picture)
    assert (DOCS / "leaderboard.html").read_text(encoding="utf-8") == render_html(rows, "leaderboard.png",
                                                                                  matrices, picture)
    assert (DOCS / "leaderboard.png").stat().st_size > 10_000
    assert (DOCS / "leaderboard-crossplay.png").is_file() == bool(matrices)


def test_the_shipped_evidence_keeps_a_clone_light():
    size = sum(p.stat().st_size for p in RESULTS.rglob("*") if p.is_file() and "work" not in p.parts)
    assert size < MAX_RESULTS_BYTES
    assert not any(p.name == "work" for p in RESULTS.rglob("*")), "an entry's work/ folder is not shipped"
