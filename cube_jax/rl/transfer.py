"""Starting a run from another run's parameters (``train.init_from=RUN``): a curriculum over n.

The vector and egocentric observations grow with the team (``N`` one-hot agent ids, ``B``
block slots, ``N`` teammate slots: :mod:`cube_jax.core.observations`), so a network trained at
n = 3 does not fit n = 4 as it is. Every layer but the first has the same shape at every n
(the network section fixes them); the first layer's kernel has one row per input feature.
:func:`embed_first_layer` gives each input of the new world the row of the same feature in
the old one (agent id ``i``, block slot ``b`` and its five features, teammate slot ``j``, own
position, time, blocked moves) and a row of zeros to a feature the old world did not have,
so the started network acts on the new world as the old one did, blind at first to the new
agents' ids, block slots and teammates, and learns their rows from there.

Seed ``i`` of the new run starts from seed ``i mod S`` of the old run's ``S`` seeds (a
ten-seed run started from a ten-seed run keeps its seeds independent). The optimizer's
state and the update count start afresh, and the budget, annealing and everything else are
the new run's own.

Only networks that read the agent's observation alone are carried over: IPPO's actor and
critic (feedforward or recurrent) and PQN-VDN's Q-network. MAPPO's critic reads the world
vector, whose layout is another matter, and is refused.

A source may also be a saved policy alone, with no training state: a shipped one
(``train.init_from=builtin:ippo-n3``, :mod:`cube_jax.rl.builtin`) or a checkpoint folder
without its ``runner/``. Then the policy network alone is carried over, to every seed (the
actor; PQN-VDN's Q-network, which is its policy), and a PPO critic starts fresh, so MAPPO
can start this way too.

>>> observation_labels("vector", num_agents=2, num_blocks=1)
[('id', 0), ('id', 1), ('own', 'row'), ('own', 'col'), ('time',), ('block', 0, 0), ('block', 0, 1), \
('block', 0, 2), ('block', 0, 3), ('block', 0, 4), ('agent', 0, 'row'), ('agent', 0, 'col'), ('agent', 1, 'row'), \
('agent', 1, 'col')]
>>> import numpy as np
>>> old = np.arange(6.0).reshape(3, 2)          # three inputs, two hidden units
>>> embed_first_layer(old, [("a",), ("b",), ("c",)], [("c",), ("new",), ("a",)])
array([[4., 5.],
       [0., 0.],
       [0., 1.]])
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np

from cube_jax.core.observations import EGO_CHANNELS
from cube_jax.rl import algorithms
from cube_jax.rl.checkpoint import (POLICY_DIR, POLICY_META, RUNNER_DIR, read_meta, readable, restore_actor,
                                   restore_runner)
from cube_jax.rl.policy import BLOCKED_FEATURES

__all__ = ["SUPPORTED_ALGOS", "TransferError", "observation_labels", "embed_first_layer", "init_from", "policy_only",
           "read_source"]

Label = Tuple[Any, ...]
# config.algo values whose networks read the agent's own observation only
SUPPORTED_ALGOS = tuple(a.name for a in algorithms.ALGORITHMS if a.transfers and not a.is_variant)
BLOCK_FEATURES = 5  # per block slot in the vector form


class TransferError(ValueError):
    """``train.init_from`` names a run whose parameters cannot start this one (says why)."""


def observation_labels(form: str, num_agents: int, num_blocks: int, view_radius: int = 3,
                       blocked_moves: bool = False) -> Optional[List[Label]]:
    """One label per input feature of the network, in the order the network reads them
    (``None`` for the grid form, whose size depends on the grid, not on the team)."""
    n, b = num_agents, num_blocks
    own = [("own", "row"), ("own", "col"), ("time",)]
    ids = [("id", i) for i in range(n)]
    if form == "vector":
        labels = (ids + own + [("block", j, f) for j in range(b) for f in range(BLOCK_FEATURES)]
                  + [("agent", j, axis) for j in range(n) for axis in ("row", "col")])
    elif form in ("egocentric", "egocentric_noid"):
        side = 2 * view_radius + 1
        labels = [("window", c) for c in range(EGO_CHANNELS * side * side)] + own + (ids if form == "egocentric" else [])
    elif form == "grid":
        return None
    else:
        raise ValueError(f"unknown observation form {form!r}")
    if blocked_moves:
        labels += [("blocked", d) for d in range(BLOCKED_FEATURES)]
    return labels


def embed_first_layer(kernel: np.ndarray, old: Sequence[Label], new: Sequence[Label]) -> np.ndarray:
    """``kernel`` float[..., len(old), H] -> float[..., len(new), H]: each new input takes the
    row of the same label in ``old``, or zeros (leading axes, e.g. seeds, kept)."""
    kernel = np.asarray(kernel)
    if kernel.shape[-2] != len(old):
        raise TransferError(f"a first layer of {kernel.shape[-2]} inputs cannot read {len(old)} features")
    where = {label: row for row, label in enumerate(old)}
    out = np.zeros(kernel.shape[:-2] + (len(new), kernel.shape[-1]), kernel.dtype)
    for row, label in enumerate(new):
        if label in where:
            out[..., row, :] = kernel[..., where[label], :]
    return out


def _path_text(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def _labels_of(meta: Dict[str, Any], num_agents: int, num_blocks: int) -> Optional[List[Label]]:
    kwargs = meta["env_kwargs"]
    return observation_labels(kwargs.get("observation", "vector"), num_agents, num_blocks,
                              int(kwargs.get("view_radius", 3)), bool(meta["network"].get("blocked_moves", False)))


BUILTIN_PREFIX = "builtin:"


def read_source(path) -> Tuple[Path, Dict[str, Any]]:
    """The checkpoint folder of run ``path`` (a run folder, its ``checkpoint/``, or
    ``builtin:NAME``) and its policy metadata; raises :class:`TransferError` with the path
    when there is none."""
    text = str(path)
    if text.startswith(BUILTIN_PREFIX):
        from cube_jax.rl import builtin

        try:
            path = builtin.path(text[len(BUILTIN_PREFIX):])
        except ValueError as err:
            raise TransferError(f"train.init_from={text!r}: {err}") from None
    path = Path(str(path))
    folder = path / "checkpoint" if readable(path / "checkpoint").is_dir() else path
    if not (readable(folder) / POLICY_META).is_file() or not (
            (readable(folder) / RUNNER_DIR).is_dir() or (readable(folder) / POLICY_DIR).is_dir()):
        raise TransferError(f"train.init_from={text!r}: no checkpoint there (expected {folder / POLICY_META} "
                            f"and {folder / RUNNER_DIR}/ or {folder / POLICY_DIR}/; was the run saved with "
                            "output.checkpoint=true?)")
    return folder, read_meta(folder)


def policy_only(folder: Path) -> bool:
    """Whether the checkpoint ``folder`` holds a policy alone (no training state to carry)."""
    return not (readable(folder) / RUNNER_DIR).is_dir()


def check_compatible(source_meta: Dict[str, Any], algo: str, network: Dict[str, Any], observation: str,
                     where: str, view_radius: int = 3, policy_alone: bool = False) -> None:
    """Raises :class:`TransferError` unless the source run's algorithm, network and
    observation form can start a run of ``algo`` with ``network`` on ``observation``
    (``policy_alone``: the source is a policy without training state, whose critic is not
    carried over)."""
    if not algorithms.get(algo).transfers and not policy_alone:
        raise TransferError(f"train.init_from: algo={algo} is not supported; {', '.join(SUPPORTED_ALGOS)} are "
                            "(MAPPO's critic reads the world vector, whose layout is not carried over)")
    if source_meta["algo"] != algo:
        raise TransferError(f"train.init_from={where!r}: that run trained {source_meta['algo']}, this one {algo}")
    form = source_meta["env_kwargs"].get("observation", "vector")
    if form != observation:
        raise TransferError(f"train.init_from={where!r}: that run observed {form!r}, this one env.observation="
                            f"{observation!r}")
    radius = int(source_meta["env_kwargs"].get("view_radius", 3))
    if form.startswith("egocentric") and radius != view_radius:
        raise TransferError(f"train.init_from={where!r}: that run's window had env.view_radius={radius}, this one "
                            f"{view_radius}")
    keys = ("hidden", "layers", "activation", "recurrent", "gru_hidden", "blocked_moves")
    for key in keys:
        theirs, ours = source_meta["network"].get(key, False), network.get(key, False)
        if key == "gru_hidden" and not network.get("recurrent", False):
            continue
        if theirs != ours:
            raise TransferError(f"train.init_from={where!r}: that run's network.{key} is {theirs!r}, this one's "
                                f"{ours!r}; the networks must match but for the first layer's inputs")


def init_from(path, runner: Any, *, algo: str, network: Dict[str, Any], observation: str, num_agents: int,
              num_blocks: int, view_radius: int = 3) -> Tuple[Any, str]:
    """``runner`` (seed-batched, as the trainer's ``init`` made it) with its parameters taken
    from the run at ``path`` (see the module docstring); returns it and a line for the log."""
    import cube_jax

    folder, meta = read_source(path)
    alone = policy_only(folder)
    check_compatible(meta, algo, network, observation, str(path), view_radius, policy_alone=alone)
    source_env = cube_jax.make(**meta["env_kwargs"])
    old = _labels_of(meta, source_env.cfg.num_agents, source_env.cfg.num_blocks)
    new = _labels_of({"env_kwargs": {"observation": observation, "view_radius": view_radius}, "network": network},
                     num_agents, num_blocks)
    if alone:
        return _init_policy_from(path, folder, meta, runner, old, new)
    saved = restore_runner(folder)["params"]
    flat_target, treedef, flat_saved = _matched(path, runner.params, saved, "its parameters")
    sources = np.arange(flat_target[0][1].shape[0]) % jax.tree_util.tree_leaves(saved)[0].shape[0]  # i mod S
    leaves, embedded = [], 0
    for p, leaf in flat_target:
        name = _path_text(p)
        value, reindexed = _carried(path, name, np.asarray(flat_saved[name])[sources], leaf, old, new)
        embedded += reindexed
        leaves.append(jax.device_put(value.astype(leaf.dtype), leaf.sharding))
    params = jax.tree_util.tree_unflatten(treedef, leaves)
    world = _world_of(meta)
    kept = len(set(new) & set(old)) if old and new else None
    line = (f"parameters from {folder} ({meta['algo']} on {world}, {meta.get('env_steps', 0):,} env steps; "
            f"seeds {', '.join(map(str, sources))}); "
            + (f"{embedded} first layer(s) re-indexed: {kept} of {len(new)} inputs carried over, the rest start at 0"
               if embedded else "every layer carried over as it was"))
    return runner.replace(params=params), line


def _matched(path, target: Any, saved: Any, what: str):
    """``(target's leaves with their paths, its treedef, saved leaves by path name)``; raises
    :class:`TransferError` unless both trees name the same parameters."""
    flat_target, treedef = jax.tree_util.tree_flatten_with_path(target)
    flat_saved = dict((_path_text(p), leaf) for p, leaf in jax.tree_util.tree_flatten_with_path(saved)[0])
    if set(flat_saved) != {_path_text(p) for p, _ in flat_target}:
        raise TransferError(f"train.init_from={str(path)!r}: {what} are not this network's "
                            f"({sorted(flat_saved)[:3]}... against {[_path_text(p) for p, _ in flat_target][:3]}...)")
    return flat_target, treedef, flat_saved


def _world_of(meta: Dict[str, Any]) -> str:
    return meta["env_kwargs"].get("scenario") or f"n = {meta['env_kwargs'].get('n')}"


def _carried(path, name: str, value: np.ndarray, leaf: Any, old, new) -> Tuple[np.ndarray, bool]:
    """The saved ``value`` laid out as the target ``leaf`` (its first layer re-indexed when the
    inputs differ), and whether it was re-indexed."""
    if value.shape == leaf.shape:
        return value, False
    if old is None or new is None or not name.endswith("kernel") or value.shape[-1] != leaf.shape[-1]:
        raise TransferError(f"train.init_from={str(path)!r}: parameter {name} has shape "
                            f"{tuple(value.shape[1:])} there and {tuple(leaf.shape[1:])} here")
    return embed_first_layer(value, old, new), True


def _init_policy_from(path, folder: Path, meta: Dict[str, Any], runner: Any, old, new) -> Tuple[Any, str]:
    """``runner`` with its policy network (a PPO actor; PQN-VDN's Q-network) taken from the
    policy saved in ``folder``, the same for every seed; everything else as it was."""
    q_values = algorithms.of_meta(meta).q_values
    target = runner.params if q_values else runner.params["actor"]
    saved = restore_actor(folder, None)  # as written: nested dicts of host arrays, no seed axis
    saved = saved["q_network"] if q_values else saved
    flat_target, treedef, flat_saved = _matched(path, target, saved, "its policy's parameters")
    leaves, embedded = [], 0
    for p, leaf in flat_target:
        name = _path_text(p)
        seeds = leaf.shape[0]
        value = np.broadcast_to(np.asarray(flat_saved[name]), (seeds,) + np.shape(flat_saved[name]))
        value, reindexed = _carried(path, name, value, leaf, old, new)
        embedded += reindexed
        leaves.append(jax.device_put(np.ascontiguousarray(value).astype(leaf.dtype), leaf.sharding))
    policy = jax.tree_util.tree_unflatten(treedef, leaves)
    params = policy if q_values else {**runner.params, "actor": policy}
    kept = len(set(new) & set(old)) if old and new else None
    line = (f"policy from {folder} ({meta['algo']} on {_world_of(meta)}, {meta.get('env_steps', 0):,} env steps, "
            f"its seed {meta.get('seed', '?')}) for every seed; "
            + ("" if q_values else "the critic starts fresh; ")
            + (f"{embedded} first layer(s) re-indexed: {kept} of {len(new)} inputs carried over, the rest start at 0"
               if embedded else "every policy layer carried over as it was"))
    return runner.replace(params=params), line
