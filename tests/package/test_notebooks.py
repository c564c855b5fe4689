"""The quick-start notebook runs as written in a real Jupyter kernel, and each of its claims holds.

``nbclient`` executes every cell in an ``ipykernel`` kernel, as Jupyter does (so the kernel's
own running event loop is there, as it is for a reader); one extra cell, appended here and
never saved, reports the notebook's variables as JSON for the checks.
"""
import json
import shutil
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"

REPORT = """
import json as _json
print("REPORT " + _json.dumps({
    "out": str(out),
    "moved": bool(moved), "after": list(after[:2]),
    "big_observation_shape": list(big_observation.shape),
    "plan_delivered": bool(plan_delivered),
    "steps": int(steps), "success_rate": float(result["success_rate"]), "gif": str(gif),
    "kinds": kinds, "last_record": records[-1]["type"], "blocks_delivered": int(mixed.blocks_delivered),
}))
"""


def files_under(folder: Path) -> set:
    return {p for p in folder.rglob("*") if "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts}


def test_quickstart_notebook_runs_in_a_kernel_and_shows_what_it_says(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(REPORT))
    repo_before = files_under(REPO / "notebooks")
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError with the cell and its traceback if any cell fails

    text = "".join(o.get("text", "") for o in notebook.cells[-1].outputs if o.get("name") == "stdout")
    seen = json.loads(text.split("REPORT ", 1)[1])
    out = Path(seen["out"])
    try:
        # the notebook writes into its own temporary folder: not the kernel's working folder, not notebooks/
        assert not REPO in out.parents and out.is_dir()
        assert list(tmp_path.iterdir()) == []
        assert files_under(REPO / "notebooks") == repo_before
        # a push by hand: three agents move the weight-3 block one cell right
        assert seen["moved"] and seen["after"] == [1, 3]
        # 4096 worlds at once, one observation per agent
        assert seen["big_observation_shape"][:2] == [4096, 4]
        # a symbolic plan compiled and executed delivers block 0
        assert seen["plan_delivered"]
        # the heuristic's GIF: one frame per step of its first episode (solved), shown inline
        gif = Image.open(seen["gif"])
        assert Path(seen["gif"]).parent == out and gif.n_frames == seen["steps"] + 1 and seen["success_rate"] == 1.0
        shown = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/gif" in o.get("data", {})]
        assert len(shown) == 1
        # a mixed team on the CPU loop, with a trace in the run folder
        assert seen["kinds"] == ["heuristic", "heuristic", "random"]
        assert seen["last_record"] == "end" and seen["blocks_delivered"] >= 1
        assert (out / "mixed_team.jsonl").is_file()
    finally:
        shutil.rmtree(out, ignore_errors=True)
