"""The step as users call it, at two revisions: the same program, and the same results.

For every n of ``--ns`` (default 4 and 64) the script traces ``env.step`` of ``make(n=n)``
(jitted, as users call it, on one state) and ``jax.vmap(env.step)`` (a batch of states) at
the working tree and at ``--base`` (default 2086abb), each in a fresh Python process whose
``PYTHONPATH`` points at that revision's tree (``git archive`` into a temporary folder), and
compares the pretty-printed jaxprs as strings. Function objects print with their address
masked by JAX, so two traces of one program print equal; a renamed or moved function that a
``custom_vmap`` names as its rule would differ only in that name, which the table reports
apart ("equal but rule names").

It also steps random worlds at both revisions and compares every output array exactly:
``--worlds`` environments per n walked ``--walk`` steps by random actions (including values
outside 0..4, which are STAY) from fresh layouts, every visited state stepped once more by
``jax.vmap(env.step)`` with fresh random actions. The inputs are drawn once, here, and handed
to both processes.

    python benchmarks/kernel_identity.py                       # against 2086abb
    python benchmarks/kernel_identity.py --base HEAD~3 --ns 4,16,64

Writes ``benchmarks/results/kernel_identity.json`` (``--out``) and prints a table; exits 1
when an output differs.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench_common import host_info, markdown_table

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASE = "2086abb"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "kernel_identity.json"
JAXPR_BATCH = 8  # states in the traced vmapped step
RULE_NAME = re.compile(r"rule=<function [^>]*>")


def revision_tree(rev: str, into: Path) -> Path:
    """The tracked files of ``rev`` written under ``into`` (``git archive``); returns the folder."""
    import tarfile

    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], check=True, capture_output=True)
    with tempfile.TemporaryFile() as f:
        f.write(archive.stdout)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(into, filter="data")
    return into


def commit_of(rev: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], check=True, capture_output=True,
                          text=True).stdout.strip()


def working_tree() -> str:
    """HEAD's commit, with "+changes" when tracked files differ from it."""
    changed = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], check=True,
                             capture_output=True, text=True).stdout.strip()
    return commit_of("HEAD") + ("+changes" if changed else "")


# --- in the child process (one revision) ---------------------------------------------------------


def child(ns, inputs: Path, out: Path) -> None:
    """Writes ``jaxpr_{n}.txt``, ``jaxpr_vmap_{n}.txt`` and ``outputs_{n}.npz`` under ``out``
    for the revision this process imports."""
    import jax
    import jax.numpy as jnp

    import cube_jax
    from cube_jax.core.types import State

    for n in ns:
        env = cube_jax.make(n=n)
        state, _ = env.reset(jax.random.PRNGKey(0))
        (out / f"jaxpr_{n}.txt").write_text(str(jax.make_jaxpr(env.step)(state, jnp.zeros((n,), jnp.int32))))
        states, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), JAXPR_BATCH))
        batch = str(jax.make_jaxpr(jax.vmap(env.step))(states, jnp.zeros((JAXPR_BATCH, n), jnp.int32)))
        (out / f"jaxpr_vmap_{n}.txt").write_text(batch)
        given = np.load(inputs / f"inputs_{n}.npz")
        worlds = State(agent_pos=given["agent_pos"], block_pos=given["block_pos"], block_weight=given["block_weight"],
                       block_alive=given["block_alive"], t=given["t"], key=given["key"], grid_size=env.grid_size)
        after = jax.jit(jax.vmap(env.step))(worlds, given["actions"])
        leaves = jax.tree_util.tree_flatten_with_path(after)[0]
        np.savez(out / f"outputs_{n}.npz", **{jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves})


# --- in this process ---------------------------------------------------------------------------


def draw_worlds(n: int, worlds: int, walk: int, seed: int) -> dict:
    """Every state of ``worlds`` random walks of ``walk`` steps from fresh layouts, with a
    random joint action for each (values -1..6: 0..4 and out of range), as arrays."""
    import jax
    import jax.numpy as jnp

    import cube_jax

    env = cube_jax.make(n=n)
    key = jax.random.PRNGKey(seed)
    state, _ = jax.vmap(env.reset)(jax.random.split(key, worlds))
    step = jax.jit(jax.vmap(env.step))
    visited = []
    for i in range(walk):
        visited.append(state)
        actions = jax.random.randint(jax.random.fold_in(key, i), (worlds, n), -1, 7, dtype=jnp.int32)
        state, _ = step(state, actions)
    visited.append(state)
    stacked = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *visited)
    actions = jax.random.randint(jax.random.fold_in(key, walk + 1), (len(visited) * worlds, n), -1, 7, dtype=jnp.int32)
    return {"agent_pos": stacked.agent_pos, "block_pos": stacked.block_pos, "block_weight": stacked.block_weight,
            "block_alive": stacked.block_alive, "t": stacked.t, "key": stacked.key, "actions": np.asarray(actions)}


def run_child(tree: Path, ns, inputs: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
            "from pathlib import Path\nimport kernel_identity as k\n"
            f"k.child({list(ns)!r}, Path({str(inputs)!r}), Path({str(out)!r}))\n")
    env = dict(os.environ, PYTHONPATH=str(tree))
    run = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"the step at {tree} failed:\n{run.stderr[-3000:]}")


def compare_jaxprs(a: str, b: str) -> str:
    if a == b:
        return "identical"
    if RULE_NAME.sub("rule", a) == RULE_NAME.sub("rule", b):
        return "equal but rule names"
    return "different"


def compare_outputs(a: Path, b: Path) -> dict:
    """Per output array: equal or not (shapes, dtypes and every value)."""
    x, y = np.load(a), np.load(b)
    differ = sorted(k for k in x.files if k not in y.files or x[k].dtype != y[k].dtype or x[k].shape != y[k].shape
                    or not np.array_equal(x[k], y[k]))
    differ += sorted(k for k in y.files if k not in x.files)
    return {"arrays": len(x.files), "differ": differ}


def render(data: dict) -> str:
    columns = ["n", "env.step jaxpr", "vmap(env.step) jaxpr", "jaxpr lines", "states stepped", "outputs"]
    return markdown_table(f"env.step at the working tree against {data['base']} ({data['base_commit']})",
                          data["rows"], columns)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"the revision to compare with (default {DEFAULT_BASE})")
    parser.add_argument("--ns", default="4,64", help="team sizes, comma-separated (default 4,64)")
    parser.add_argument("--worlds", type=int, default=64, help="random walks per n (default 64)")
    parser.add_argument("--walk", type=int, default=24, help="steps per walk (default 24)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    ns = [int(v) for v in args.ns.split(",") if v]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kernel_identity_") as tmp:
        tmp = Path(tmp)
        for n in ns:
            np.savez(tmp / f"inputs_{n}.npz", **draw_worlds(n, args.worlds, args.walk, args.seed))
        base_tree = revision_tree(args.base, tmp / "base")
        for name, tree in (("now", ROOT), ("base", base_tree)):
            run_child(tree, ns, tmp, tmp / name)
            print(f"  traced and stepped at {name}", flush=True)
        for n in ns:
            now, base = ((tmp / side / f"jaxpr_{n}.txt").read_text() for side in ("now", "base"))
            now_v, base_v = ((tmp / side / f"jaxpr_vmap_{n}.txt").read_text() for side in ("now", "base"))
            outputs = compare_outputs(tmp / "now" / f"outputs_{n}.npz", tmp / "base" / f"outputs_{n}.npz")
            states = int(np.load(tmp / f"inputs_{n}.npz")["t"].shape[0])
            rows.append({"n": n, "env.step jaxpr": compare_jaxprs(now, base),
                         "vmap(env.step) jaxpr": compare_jaxprs(now_v, base_v),
                         "jaxpr lines": f"{now.count(chr(10))} / {base.count(chr(10))}",
                         "states stepped": states,
                         "outputs": "all equal" if not outputs["differ"] else f"differ: {', '.join(outputs['differ'])}",
                         "output_arrays": outputs["arrays"], "differ": outputs["differ"]})
    data = {"machine": host_info(), "base": args.base, "base_commit": commit_of(args.base),
            "now_commit": working_tree(), "worlds": args.worlds, "walk": args.walk, "seed": args.seed, "rows": rows}
    print(render(data))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2))
    print(f"\nwrote {args.out}")
    return 1 if any(r["differ"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
