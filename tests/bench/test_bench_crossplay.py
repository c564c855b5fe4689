"""Cross-play: one entry per ordered pair of members (agent 0 the newcomer, the others the team
it joins), played by ``cube-jax bench crossplay``, read back from entries alone as a matrix
per task, and drawn on the board (Markdown, HTML and a picture)."""
from __future__ import annotations

import json

import pytest

from cube_jax import cli
from cube_jax.bench import crossplay
from cube_jax.bench.board import load_entries, write_board
from cube_jax.bench.verify import verify
from cube_jax.core import suite


def test_teams_pair_every_newcomer_with_every_team():
    found = crossplay.teams(["builtin:ippo-hard", "heuristic", "team"], num_agents=3)
    assert len(found) == 9 and len({t.name for t in found}) == 9
    by_cell = {(t.row, t.column): t for t in found}
    assert by_cell[("heuristic", "builtin:ippo-hard")].spec == "builtin:ippo-hard,heuristic,heuristic"
    assert by_cell[("heuristic", "builtin:ippo-hard")].name == "ippo-hard-joins-heuristic"
    assert by_cell[("team", "team")].spec == "team"  # the diagonal is the member alone
    assert crossplay.cell_of(by_cell[("heuristic", "team")].spec.split(",")) == ("heuristic", "team")
    assert crossplay.cell_of(["heuristic", "heuristic", "team"]) is None  # the newcomer is agent 0
    assert crossplay.cell_of(["team", "heuristic", "random"]) is None


@pytest.mark.parametrize("members, agents, message", [
    (["heuristic", "heuristic"], 3, "at least two distinct members"),
    (["heuristic", "team,random"], 3, "one agent spec"),
    (["heuristic", "team"], 1, "at least two agents"),
])
def test_teams_refuse_what_is_not_cross_play(members, agents, message):
    with pytest.raises(ValueError, match=message):
        crossplay.teams(members, agents)


def _entry(folder, spec: str, success: float, modes=("greedy",), task: str = "hard") -> None:
    team = spec.split(",")
    mixed = len(set(team)) > 1
    stats = {"mean": success, "mean_ci": [success, success], "iqm": success, "iqm_ci": [success, success]}
    aggregate = {"count": 4, "success": stats, "blocks": stats, "return": stats}
    document = {"suite": suite.VERSION, "format": 1, "test_sets": {task: suite.TEST_SET_SHA256[task]},
                "agent": {"kind": "mixed" if mixed else team[0].split(":")[0], "spec": spec, "label": spec,
                          "learns": False, "tier": None, "topology": None, "team": team if mixed else None},
                "bootstrap": {"seed": 0, "resamples": 1000, "confidence": 0.95},
                "tasks": {task: {"fixed_layout": task == "hard", "unit": "episodes", "episodes_planned": 4,
                                 "episodes": [], "aggregates": {mode: aggregate for mode in modes}}},
                "provenance": {"git_commit": "0123456789abcdef", "git_dirty": False}, "evidence": {}}
    folder.mkdir(parents=True)
    (folder / "entry.json").write_text(json.dumps(document), encoding="utf-8")


def test_the_matrix_is_read_back_from_entries_nested_by_task(tmp_path):
    results = tmp_path / "results"
    _entry(results / "heuristic", "heuristic", 1.0)
    _entry(results / "random", "random", 0.0)  # plays in no cross-play team: not a member
    _entry(results / "crossplay" / "hard" / "policy", "builtin:p", 0.75, modes=("greedy", "sampled"))
    _entry(results / "crossplay" / "hard" / "p-joins-heuristic", "builtin:p,heuristic,heuristic", 0.5,
           modes=("greedy", "sampled"))
    _entry(results / "crossplay" / "hard" / "heuristic-joins-p", "heuristic,builtin:p,builtin:p", 0.25,
           modes=("sampled",))
    entries = load_entries([results])
    assert [e["id"] for e in entries] == ["crossplay/hard/heuristic-joins-p", "crossplay/hard/p-joins-heuristic",
                                          "crossplay/hard/policy", "heuristic", "random"]
    (matrix,) = crossplay.matrices(entries)
    assert matrix.task == "hard" and matrix.members == ["builtin:p", "heuristic"]
    assert matrix.success("heuristic", "builtin:p") == 0.5 and matrix.cells[("heuristic", "builtin:p")]["mode"] == "greedy"
    assert matrix.success("builtin:p", "heuristic") == 0.25  # its only mode
    assert matrix.success("heuristic", "heuristic") == 1.0 and matrix.success("builtin:p", "builtin:p") == 0.75
    paths = write_board(entries, tmp_path / "board")
    md = paths["md"].read_text(encoding="utf-8")
    section = md[md.index("## Cross-play"):]
    assert "| team joined ↓ · newcomer → | builtin:p | heuristic |" in section
    assert "| heuristic | 0.500 | 1.000 |" in section and "| builtin:p | 0.750 | 0.250 |" in section
    assert "<h2>Cross-play</h2>" in paths["html"].read_text(encoding="utf-8")
    assert paths["crossplay.png"].read_bytes().startswith(b"\x89PNG")
    # the cross-play entries gone, so is their picture
    paths = write_board([e for e in entries if not e["id"].startswith("crossplay")], tmp_path / "board")
    assert "crossplay.png" not in paths and not (tmp_path / "board" / "leaderboard-crossplay.png").exists()
    assert "Cross-play" not in paths["md"].read_text(encoding="utf-8")


def test_the_command_plays_one_entry_per_team_and_resumes(tmp_path, capsys):
    out = tmp_path / "crossplay" / "easy"
    argv = ["bench", "crossplay", "--task", "easy", "--members", "team,negotiator", "--episodes", "2",
            "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "cross-play on easy: 2 members, 4 teams to play" in printed
    names = sorted(p.name for p in out.iterdir())
    assert names == ["negotiator", "negotiator-joins-team", "team", "team-joins-negotiator"]
    mixed = json.loads((out / "negotiator-joins-team" / "entry.json").read_text())
    assert mixed["agent"]["team"] == ["negotiator", "team"] and mixed["agent"]["label"] == "negotiator joins team"
    assert "bench crossplay" not in " ".join(mixed["provenance"]["command"])  # each entry says how to replay it alone
    for name in names:
        assert verify(out / name).tasks["easy"]["replayed"] == 2
    (matrix,) = crossplay.matrices(load_entries([out]))
    assert set(matrix.cells) == {(r, c) for r in ("negotiator", "team") for c in ("negotiator", "team")}
    # again, with the members alone taken from other entries: nothing is played twice
    assert cli.main(argv + ["--entries", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 teams to play (2 members alone taken from --entries)" in printed
    assert printed.count("kept from the earlier run") == 2


@pytest.mark.parametrize("argv, message", [
    (["--task", "n1", "--members", "team,heuristic"], "at least two agents"),
    (["--task", "easy", "--members", "team,llm:local"], "without a model server"),
    (["--task", "easy", "--members", "team,ippo"], "without a model server or training"),
    (["--task", "easy", "--members", "team,nobody"], "unknown agent 'nobody'"),
    (["--task", "n5", "--members", "team,heuristic"], "unknown task 'n5'"),
])
def test_bad_cross_play_arguments_are_one_clear_error(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["bench", "crossplay", *argv, "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_member_names_are_escaped_in_the_matrix_as_in_the_board(tmp_path):
    hostile = "policy:<b>x|y</b>&$1"
    results = tmp_path / "results"
    _entry(results / "crossplay" / "easy" / "solo", hostile, 0.5)
    _entry(results / "crossplay" / "easy" / "joins", f"heuristic,{hostile}", 0.25)
    paths = write_board(load_entries([results]), tmp_path / "board")
    md = paths["md"].read_text(encoding="utf-8")
    section = md[md.index("## Cross-play"):]
    assert "| policy:&lt;b&gt;x\\|y&lt;/b&gt;&amp;$1 | 0.250 | 0.500 |" in section and "<b>" not in section
    assert "| heuristic | – | – |" in section  # heuristic alone has no entry here
    assert "<b>" not in paths["html"].read_text(encoding="utf-8")
