"""The quick-start notebook runs as written, and each of its claims holds."""
import json
from pathlib import Path

import matplotlib
from PIL import Image

matplotlib.use("Agg")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs_and_shows_what_it_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the notebook writes its GIF and trace next to itself
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    namespace = {}
    for cell in cells:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{NOTEBOOK.name}", "exec"), namespace)
    # a push by hand: three agents move the weight-3 block one cell right
    assert namespace["moved"] and namespace["after"][:2] == (1, 3)
    # 4096 worlds at once, one observation per agent
    assert namespace["big_observation"].shape[:2] == (4096, 4)
    # a symbolic plan compiled and executed delivers block 0
    assert namespace["plan_delivered"]
    # the heuristic's GIF: one frame per step of its first episode (solved)
    gif = Image.open(tmp_path / "heuristic_hard.gif")
    assert gif.n_frames == namespace["steps"] + 1 and namespace["result"]["success_rate"] == 1.0
    # a mixed team on the CPU loop, with a trace
    assert namespace["kinds"] == ["heuristic", "heuristic", "random"]
    assert namespace["records"][-1]["type"] == "end" and namespace["mixed"].blocks_delivered >= 1
