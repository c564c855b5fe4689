"""benchmarks/throughput.py's tiles section: every tile size against one piece, paired in one process."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_tiles_pairs_every_size_with_one_piece_in_one_process():
    # A fresh process, as bench_tiles runs it: one small case, one size of tiles that splits its
    # batch in four and one that leaves it whole; the defaults are restored afterwards.
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "import throughput\n"
        "from cube_jax.core import batching\n"
        "throughput.TILE_CASES = ((16, 64),)\n"
        "throughput.TILE_SETTINGS = (0, 16 * 16, 16 * 64)\n"
        "before = batching.TILE_ELEMENTS, batching.TILE_MIN_AGENTS\n"
        "out = throughput.tiles_child(2)\n"
        "assert (batching.TILE_ELEMENTS, batching.TILE_MIN_AGENTS) == before\n"
        "print('RESULT ' + json.dumps(out))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(next(l for l in run.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    (row,) = out["rows"]
    assert (row["n"], row["envs"]) == (16, 64) and row["one_piece"] > 0
    assert [t["tile_envs"] for t in row["tiles"]] == [16, 64]
    for t in row["tiles"]:
        assert len(t["x_pairs"]) == 2 and all(x > 0 for x in t["x_pairs"])

    import throughput

    tiles = {"method": "pairs in one process", "rounds": 2, "default_elements": 16 * 16, "default_min_agents": 16,
             "rows": out["rows"]}
    text = throughput.render_tiles(tiles)
    assert "| 16 | 64 |" in text and "**" in text and "2 pairs per size" in text
