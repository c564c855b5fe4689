"""How ``entry.json`` is written: the same JSON, each leaf record on one line."""
from __future__ import annotations

import json

import pytest

from cube_jax.bench.entry import EntryError, dumps, episode_records, episode_table, write_json

EPISODE = {"layout": 3, "seed": 3, "mode": "greedy", "success": True, "blocks": 1.0, "return": 1.2900002002716064,
           "actions_digest": "ab" * 32}


@pytest.mark.parametrize("data", [{}, [], {"a": []}, [[1, 2], [3]], {"a": {"b": {}}}, "x", 1.5, None, [{"a": 1}],
                                  {"ü": "\u2713", "tasks": {"n2": {"episodes": [EPISODE, EPISODE]}}}])
def test_dumps_is_json_of_the_same_data(data):
    assert json.loads(dumps(data)) == data


def test_each_episode_record_takes_one_line(tmp_path):
    entry = {"suite": "cube-v1", "tasks": {"n2": {"aggregates": {"greedy": {"success": {"mean_ci": [0.0, 1.0]}}},
                                                  "episodes": [EPISODE] * 3}}}
    write_json(tmp_path / "entry.json", entry)
    lines = (tmp_path / "entry.json").read_text(encoding="utf-8").splitlines()
    assert json.loads("\n".join(lines)) == entry
    assert sum(line.strip().rstrip(",") == json.dumps(EPISODE) for line in lines) == 3
    assert '      "mean_ci": [0.0, 1.0]' in lines  # an interval stays on one line
    assert len(dumps(entry)) < len(json.dumps(entry, indent=1))


def test_episodes_are_stored_as_a_table_and_read_back_as_records():
    episodes = [dict(EPISODE, seed=s, layout=s) for s in range(3)]
    table = episode_table(episodes)
    assert table["columns"] == list(EPISODE) and table["rows"][2][:2] == [2, 2]
    assert episode_records(json.loads(json.dumps(table)), "here") == episodes
    assert episode_table([]) == {"columns": [], "rows": []} and episode_records(episode_table([]), "here") == []
    mixed = [EPISODE, dict(EPISODE, end_reason="stalled")]  # fields that differ stay records, exactly
    assert episode_table(mixed) == mixed and episode_records(mixed, "here") == mixed


@pytest.mark.parametrize("stored, message", [
    ({"columns": ["seed", "success"], "rows": [[0, True], [1]]}, "entry.json: task 'n2': episode row 1 does not hold "
                                                                  "one value per column"),
    ({"rows": []}, "neither a table"),
    ([EPISODE, 3], "an episode that is not a JSON object"),
])
def test_a_damaged_episode_table_is_named(stored, message):
    with pytest.raises(EntryError, match=message):
        episode_records(stored, "entry.json: task 'n2'")
