"""Checkpoints with orbax: the full training state (to resume) and the policy (to play).

Layout of ``<run>/checkpoint/``::

    policy.json   algorithm, cube_jax.make keyword arguments, network, shapes, training progress
    policy/       the actor parameters of one seed (orbax)
    runner/       every seed's full training state: parameters, optimizer, environments, keys (orbax)

The runner holds everything the next update reads, so a run resumed from it (``output.resume``)
ends exactly where the same run never interrupted ends (tests/rl/test_rl_resume.py kills one).
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
# A checkpoint is written as <name>.tmp, then swapped in; the one it replaces is <name>.old
# until the swap ends.
STAGING_SUFFIX = ".tmp"
OLD_SUFFIX = ".old"


def _sync(name: str) -> None:
    """Waits for every process of a ``jax.distributed`` run (nothing to wait for in one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def _write_tree(path: Path, tree: Any) -> None:
    """Writes ``tree`` at the new path ``path`` (with several processes every one of them
    calls this: orbax writes each process's shards)."""
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, tree)
    checkpointer.wait_until_finished()
    checkpointer.close()


def readable(directory: Path) -> Path:
    """The checkpoint folder to read for ``directory``: itself, or the previous checkpoint
    (``<name>.old``) when a save was stopped between its two renames (see :func:`_swap`)."""
    directory = Path(directory)
    old = directory.with_name(directory.name + OLD_SUFFIX)
    return old if not directory.exists() and old.is_dir() else directory


def _repair(directory: Path) -> None:
    """Puts back what a save stopped by a kill left: the previous checkpoint in its place,
    no stale copy beside it. Afterwards ``directory`` (if any checkpoint exists) is complete."""
    old = directory.with_name(directory.name + OLD_SUFFIX)
    if old.exists():
        if directory.exists():
            shutil.rmtree(old)  # the last swap stopped before removing the copy
        else:
            old.rename(directory)  # the last swap stopped between its two renames


def _swap(staging: Path, directory: Path) -> None:
    """``staging`` (a complete checkpoint) becomes ``directory``. At every moment one complete
    checkpoint stands as ``directory`` or, between the two renames, as ``<name>.old``."""
    old = directory.with_name(directory.name + OLD_SUFFIX)
    if directory.exists():
        directory.rename(old)
    staging.rename(directory)
    if old.exists():
        shutil.rmtree(old)


def _restore_tree(path: Path, abstract: Any) -> Any:
    checkpointer = ocp.StandardCheckpointer()
    try:
        return checkpointer.restore(Path(path).resolve(), abstract)
    finally:
        checkpointer.close()


def save_checkpoint(directory: Path, runner: Any, actor_params: Any, meta: Dict[str, Any]) -> Path:
    """Saves the seed-batched ``runner``, one seed's ``actor_params`` and the policy metadata.

    The whole checkpoint is written beside the last one (``<name>.tmp``) and then swapped in,
    so a process killed at any point leaves a complete checkpoint to resume from: the last
    one, or this one (:func:`readable` finds it). With ``jax.distributed`` every process calls
    this (orbax writes each process's shards); process 0 alone moves folders, between barriers.
    """
    directory = Path(directory).resolve()
    staging = directory.with_name(directory.name + STAGING_SUFFIX)
    primary = jax.process_index() == 0
    if primary:
        _repair(directory)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
    _sync(f"checkpoint: {staging} cleared")
    _write_tree(staging / RUNNER_DIR, runner)
    _write_tree(staging / POLICY_DIR, actor_params)
    if primary:
        with open(staging / POLICY_META, "w") as f:
            json.dump(meta, f, indent=2)
    _sync(f"checkpoint: {staging} written")
    if primary:
        _swap(staging, directory)
    _sync(f"checkpoint: {directory} in place")
    return directory


def restore_runner(directory: Path, abstract_runner: Any = None) -> Any:
    """The saved training state laid out like ``abstract_runner`` (shapes, dtypes, shardings);
    without it, as it was written: nested dicts of host arrays, seeds first (another run's
    parameters, read by cube_jax/rl/transfer.py)."""
    path = readable(directory) / RUNNER_DIR
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist; was the run saved with output.checkpoint=true?")
    return _restore_tree(path, abstract_runner)


def read_meta(directory: Path) -> Dict[str, Any]:
    path = readable(directory) / POLICY_META
    if not path.is_file():
        raise FileNotFoundError(f"{directory}: not a cube_jax checkpoint folder (no {POLICY_META})")
    with open(path) as f:
        return json.load(f)


def restore_actor(directory: Path, abstract_params: Any = None) -> Any:
    """The saved policy's parameters laid out like ``abstract_params`` on the first device;
    without it, as written: nested dicts of host arrays (read by cube_jax/rl/transfer.py)."""
    if abstract_params is None:
        return _restore_tree(readable(directory) / POLICY_DIR, None)
    single = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=single), abstract_params)
    return _restore_tree(readable(directory) / POLICY_DIR, abstract)
