"""The cube-v1 leaderboard from synthetic entry folders: a heuristic agent (greedy), a random
one (sampled), a mixed team of the two and an IPPO agent of tier S (both modes), each on the
tasks ``easy`` (fixed layout) and ``n2``. The rows are ranked within their tier, the mixed
team's Δ is its success minus its members' mean (exactly: every score is a binary fraction),
the Markdown and HTML are the same bytes each time, user labels are escaped, and broken
folders are named. Headless Chromium opens the HTML page from disk; the screenshot goes to
``tests/artifacts/bench_board.png``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cube_jax.core import suite
from cube_jax.bench.board import (TASK_ORDER, board_rows, load_entries, render_html, render_markdown,
                                  render_png, task_commit, write_board)

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Per entry: agent fields, and per task {mode: (success, blocks)}; every score a binary fraction.
AGENTS = {
    "heuristic": (dict(kind="heuristic", spec="heuristic", label="heuristic"),
                  {"easy": {"greedy": (0.75, 0.875)}, "n2": {"greedy": (0.5, 0.75)}}),
    "random": (dict(kind="random", spec="random", label="random"),
               {"easy": {"sampled": (0.25, 0.5)}, "n2": {"sampled": (0.125, 0.25)}}),
    "mixed": (dict(kind="mixed", spec="heuristic,random", label="heuristic + random", team=["heuristic", "random"]),
              {"easy": {"greedy": (0.625, 0.75)}, "n2": {"greedy": (0.25, 0.5)}}),
    "ippo-s": (dict(kind="ippo", spec="ippo:runs/ippo", label="IPPO", learns=True, tier="S"),
               {"easy": {"greedy": (1.0, 1.0), "sampled": (0.875, 0.9375)},
                "n2": {"greedy": (0.625, 0.8125), "sampled": (0.5, 0.75)}}),
}
MIXED_COUNT = 4  # the mixed team played 4 of its 8 planned episodes


def stats(mean: float, low: float = 0.0, high: float = 1.0) -> dict:
    bounds = [max(low, mean - 0.125), min(high, mean + 0.125)]
    return {"mean": mean, "mean_ci": bounds, "iqm": mean, "iqm_ci": bounds}


def entry_document(name: str, **agent_changes) -> dict:
    agent_fields, scores = AGENTS[name]
    agent = {"learns": False, "tier": None, "topology": None, "team": None, **agent_fields, **agent_changes}
    unit = "runs" if agent["learns"] else "episodes"
    count = MIXED_COUNT if name == "mixed" else 8
    tasks = {task: {"fixed_layout": task == "easy", "unit": unit, "episodes_planned": 8, "episodes": [],
                    "aggregates": {mode: {"count": count, "success": stats(success), "blocks": stats(blocks),
                                          "return": stats(success - 0.5, low=-1.0)}
                                   for mode, (success, blocks) in modes.items()}}
             for task, modes in scores.items()}
    test_sets = {task: suite.TEST_SET_SHA256[task] for task in tasks}
    return {"suite": suite.VERSION, "format": 1, "test_sets": test_sets, "agent": agent,
            "bootstrap": {"seed": 0, "resamples": 1000, "confidence": 0.95}, "tasks": tasks,
            "provenance": {"git_commit": "0123456789abcdef", "git_dirty": name == "random"}, "evidence": {}}


def write_entries(folder: Path, names=tuple(AGENTS), **agent_changes) -> Path:
    for name in names:
        (folder / name).mkdir(parents=True)
        document = entry_document(name, **agent_changes.get(name, {}))
        (folder / name / "entry.json").write_text(json.dumps(document), encoding="utf-8")
    return folder


@pytest.fixture
def entries(tmp_path):
    return load_entries([write_entries(tmp_path / "entries")])


def test_load_entries_reads_entry_folders_and_folders_of_them_sorted_by_name(tmp_path):
    folder = write_entries(tmp_path / "entries")
    assert [e["id"] for e in load_entries([folder])] == ["heuristic", "ippo-s", "mixed", "random"]
    assert [e["id"] for e in load_entries([folder / "random", folder / "heuristic"])] == ["heuristic", "random"]
    assert load_entries([folder / "mixed"])[0]["agent"]["team"] == ["heuristic", "random"]


def test_load_entries_names_the_missing_or_broken_file(tmp_path):
    folder = write_entries(tmp_path / "entries", names=("heuristic",))
    (folder / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty/entry\.json"):
        load_entries([folder])
    (folder / "empty" / "entry.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty/entry\.json: not a JSON entry"):
        load_entries([folder])
    with pytest.raises(ValueError, match=r"nowhere/entry\.json"):
        load_entries([tmp_path / "nowhere"])


def test_rows_are_grouped_by_tier_and_ranked_within_it(entries):
    rows = board_rows(entries, verified={"heuristic": True, "random": False})
    assert [row["task"] for row in rows] == ["easy"] * 5 + ["n2"] * 5
    easy = [(row["tier"], row["id"], row["mode"], row["rank"], row["verified"]) for row in rows[:5]]
    assert easy == [("—", "heuristic", "greedy", 1, "✓"), ("—", "mixed", "greedy", 2, "–"),
                    ("—", "random", "sampled", 3, "✗"),
                    ("S", "ippo-s", "greedy", 1, "–"), ("S", "ippo-s", "sampled", 2, "–")]
    ippo = rows[3]
    assert (ippo["unit"], ippo["count"], ippo["success_mean"], ippo["success_ci"]) == ("runs", 8, 1.0, (0.875, 1.0))
    assert (ippo["success_iqm"], ippo["blocks_mean"], ippo["return_mean"]) == (1.0, 1.0, 0.5)
    assert [row["commit"] for row in rows[:3]] == ["0123456", "0123456", "0123456+dirty"]
    assert board_rows(list(reversed(entries))) == board_rows(entries)
    assert TASK_ORDER[:4] == ("easy", "hard", "n1", "n2")


def test_each_tasks_row_names_the_commit_of_the_run_that_made_it(tmp_path):
    folder = write_entries(tmp_path / "entries", names=("ippo-s",))
    document = json.loads((folder / "ippo-s" / "entry.json").read_text(encoding="utf-8"))
    # runs recorded before runs listed their tasks: the tasks their command named
    document["provenance"] = {"git_commit": "aaaaaaa1", "git_dirty": False, "command": "cube-jax bench run ippo "
                              "--tasks easy --out x", "continued": [
                                  {"git_commit": "bbbbbbb2", "git_dirty": True, "command": "cube-jax bench run "
                                   "ippo --tasks=n2 --out x"}]}
    (folder / "ippo-s" / "entry.json").write_text(json.dumps(document), encoding="utf-8")
    rows = board_rows(load_entries([folder]))
    assert {(row["task"], row["commit"]) for row in rows} == {("easy", "aaaaaaa"), ("n2", "bbbbbbb+dirty")}
    # a run that lists what it made wins over its command; one that made nothing names nothing
    document["provenance"] = {"git_commit": "aaaaaaa1", "command": "cube-jax bench run ippo", "tasks": ["easy", "n2"],
                              "continued": [{"git_commit": "bbbbbbb2", "command": "cube-jax bench run ippo",
                                             "tasks": ["n2"]},
                                            {"git_commit": "ccccccc3", "command": "cube-jax bench run ippo --tasks n2",
                                             "tasks": []}]}
    assert task_commit(document["provenance"], "easy") == "aaaaaaa"
    assert task_commit(document["provenance"], "n2") == "bbbbbbb"
    # no --tasks (or all): every task
    assert task_commit({"git_commit": "aaaaaaa1", "continued": [{"git_commit": "ddddddd4",
                                                                 "command": "cube-jax bench run ippo --tasks all"}]},
                       "hard") == "ddddddd"


def test_a_mixed_teams_delta_is_its_success_minus_its_members_mean(entries):
    rows = {(row["task"], row["id"]): row for row in board_rows(entries)}
    for task in ("easy", "n2"):
        heuristic, random = rows[task, "heuristic"]["success_mean"], rows[task, "random"]["success_mean"]
        mixed = rows[task, "mixed"]
        # the random entry has no greedy mode: its first mode (sampled) stands in
        assert mixed["delta"] == mixed["success_mean"] - (heuristic + random) / 2
        assert rows[task, "heuristic"]["delta"] is None
    assert rows["easy", "mixed"]["delta"] == 0.125 and rows["n2", "mixed"]["delta"] == -0.0625
    markdown = render_markdown(board_rows(entries))
    assert "| +0.125 |" in markdown and "| -0.062 |" in markdown


def test_delta_is_na_when_a_member_has_no_entry(tmp_path):
    entries = load_entries([write_entries(tmp_path / "entries", names=("heuristic", "mixed"))])
    mixed = next(row for row in board_rows(entries) if row["id"] == "mixed")
    assert mixed["delta"] is None
    assert "| n/a |" in render_markdown(board_rows(entries))


def test_markdown_says_what_it_is_and_shows_every_row(entries):
    markdown = render_markdown(board_rows(entries))
    assert markdown.startswith("# cube-v1 leaderboard\n")
    assert "`cube-jax bench board`" in markdown and "do not edit by hand" in markdown
    assert "![board](leaderboard.png)" in markdown
    easy, n2 = markdown.split("## easy")[1].split("## n2")
    assert "Scored on the task's one fixed layout." in easy and "fixed layout" not in n2
    assert easy.count("\n| ") == 1 + 1 + 5  # header, alignment, five rows
    assert "| 1 | heuristic | heuristic | — | greedy | 8 episodes | 0.750 [0.625, 0.875] |" in easy
    assert f"| {MIXED_COUNT} of 8 episodes |" in easy and "| 8 runs |" in easy


def test_markdown_and_html_are_the_same_bytes_each_time(entries, tmp_path):
    first = write_board(entries, tmp_path / "first", verified={"heuristic": True})
    second = write_board(list(reversed(entries)), tmp_path / "second", verified={"heuristic": True})
    # the mixed team (heuristic joining random) is a cross-play team: its matrix has a picture
    assert {path.name for path in first.values()} == {"leaderboard.md", "leaderboard.png", "leaderboard.html",
                                                      "leaderboard-crossplay.png"}
    for suffix in ("md", "html"):
        assert first[suffix].read_bytes() == second[suffix].read_bytes()
    assert first["png"].read_bytes().startswith(PNG_SIGNATURE) and first["png"].stat().st_size > 10_000


def test_user_labels_are_escaped(tmp_path):
    hostile = {"random": {"label": "<script>alert('x')</script> | & $5", "kind": "llm", "topology": "centralized"}}
    entries = load_entries([write_entries(tmp_path / "entries", **hostile)])
    rows = board_rows(entries)
    assert rows[2]["label"] == "<script>alert('x')</script> | & $5 (centralized)"
    page, markdown = render_html(rows, "leaderboard.png"), render_markdown(rows)
    for text in (page, markdown):
        assert "<script>" not in text and "&lt;script&gt;" in text
    assert "\\| &amp; $5 (centralized)" in markdown
    assert page.startswith("<!doctype html>") and '<meta charset="utf-8">' in page
    render_png(rows, tmp_path / "hostile.png")  # "$" and "<" in labels draw as text


def test_the_page_opens_from_disk_in_a_browser(entries, tmp_path, browser):
    paths = write_board(entries, tmp_path / "board", verified={"heuristic": True, "random": False})
    context = browser.new_context(viewport={"width": 1400, "height": 900}, offline=True)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(paths["html"].as_uri())
    assert page.title() == "cube-v1 leaderboard"
    tasks = page.locator("section:not(#crossplay)")
    assert tasks.locator("table").count() == 2
    assert tasks.locator("table tbody tr").count() == len(board_rows(entries)) == 10
    assert tasks.first.locator("tbody tr").first.locator("td").nth(1).inner_text() == "heuristic"
    # the mixed team is a cross-play team: a 2 x 2 matrix per task, under the tasks
    assert page.locator("#crossplay table").count() == 2 and page.locator("#crossplay tbody tr").count() == 4
    widths = page.evaluate("[...document.querySelectorAll('img')].map(img => img.naturalWidth)")
    assert len(widths) == 2 and min(widths) > 500  # the pictures, found beside the page
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "bench_board.png"
    page.screenshot(path=str(screenshot), full_page=True)
    context.close()
    assert errors == []
    assert screenshot.read_bytes().startswith(PNG_SIGNATURE) and screenshot.stat().st_size > 20_000


def test_a_language_models_tokens_per_call_show_its_reasoning_apart(tmp_path):
    folder = write_entries(tmp_path / "entries", names=("heuristic",))
    document = json.loads((folder / "heuristic" / "entry.json").read_text())
    for record in document["tasks"].values():  # 10 calls: 9000 prompt, 1000 completion of which 400 reasoning
        record["tokens"] = {"model_calls": 10, "prompt_tokens": 9000, "completion_tokens": 1000, "reasoning_tokens": 400}
    (folder / "heuristic" / "entry.json").write_text(json.dumps(document))
    rows = board_rows(load_entries([folder]))
    assert {row["tokens_per_call"] for row in rows} == {1000.0} and {row["reasoning_per_call"] for row in rows} == {40.0}
    assert "| 1000 (40) |" in render_markdown(rows)
    plain = board_rows(load_entries([write_entries(tmp_path / "plain", names=("heuristic",))]))
    assert all(row["tokens_per_call"] is None for row in plain)
