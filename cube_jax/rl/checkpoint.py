"""Checkpoints with orbax: the full training state (to resume) and the policy (to play).

Layout of ``<run>/checkpoint/``::

    policy.json   algorithm, cube_jax.make keyword arguments, network, shapes, training progress
    policy/       the actor parameters of one seed (orbax)
    runner/       every seed's full training state: parameters, optimizer, environments, keys (orbax)
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict

import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

POLICY_META = "policy.json"
POLICY_DIR = "policy"
RUNNER_DIR = "runner"


def _sync(name: str) -> None:
    """Waits for every process of a ``jax.distributed`` run (nothing to wait for in one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def _save_tree(path: Path, tree: Any) -> None:
    """Saves ``tree`` at ``path``. With several processes every one of them calls this (orbax
    writes each process's shards); process 0 alone moves folders, between barriers."""
    path = path.resolve()
    primary = jax.process_index() == 0
    # Write beside the old copy and swap, so an interrupted save never loses the last checkpoint.
    tmp = path.with_name(path.name + ".tmp")
    if primary and tmp.exists():
        shutil.rmtree(tmp)
    _sync(f"checkpoint: {tmp} cleared")
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp, tree)
    checkpointer.wait_until_finished()
    checkpointer.close()
    _sync(f"checkpoint: {tmp} written")
    if primary:
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
    _sync(f"checkpoint: {path} in place")


def _restore_tree(path: Path, abstract: Any) -> Any:
    checkpointer = ocp.StandardCheckpointer()
    try:
        return checkpointer.restore(Path(path).resolve(), abstract)
    finally:
        checkpointer.close()


def save_checkpoint(directory: Path, runner: Any, actor_params: Any, meta: Dict[str, Any]) -> Path:
    """Saves the seed-batched ``runner``, one seed's ``actor_params`` and the policy metadata
    (with ``jax.distributed``, every process calls it: see :func:`_save_tree`)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _save_tree(directory / RUNNER_DIR, runner)
    _save_tree(directory / POLICY_DIR, actor_params)
    if jax.process_index() == 0:
        with open(directory / POLICY_META, "w") as f:
            json.dump(meta, f, indent=2)
    return directory


def restore_runner(directory: Path, abstract_runner: Any = None) -> Any:
    """The saved training state laid out like ``abstract_runner`` (shapes, dtypes, shardings);
    without it, as it was written: nested dicts of host arrays, seeds first (another run's
    parameters, read by cube_jax/rl/transfer.py)."""
    path = Path(directory) / RUNNER_DIR
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist; was the run saved with output.checkpoint=true?")
    return _restore_tree(path, abstract_runner)


def read_meta(directory: Path) -> Dict[str, Any]:
    path = Path(directory) / POLICY_META
    if not path.is_file():
        raise FileNotFoundError(f"{directory}: not a cube_jax checkpoint folder (no {POLICY_META})")
    with open(path) as f:
        return json.load(f)


def restore_actor(directory: Path, abstract_params: Any) -> Any:
    single = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=single), abstract_params)
    return _restore_tree(Path(directory) / POLICY_DIR, abstract)
