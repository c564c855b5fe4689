"""The devices of a training run: the processes of a distributed run (``jax.distributed``),
the host devices the CPU is split into (``train.cpu_devices``) and the 1-D mesh (axis
``"env"``) that splits the env batch. The driver (:mod:`cube_jax.rl.run`) uses them and
re-exports them."""
from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any, Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from cube_jax.cpus import usable_cpus
from cube_jax.rl import algorithms
from cube_jax.rl.config import Config
from cube_jax.rl.trainer import Trainer, splits_over

log = logging.getLogger(__name__)


class DistributedError(RuntimeError):
    """A process could not join the others (the message names the coordinator's address)."""


def init_distributed(config: Config) -> None:
    """Joins the run's other processes through ``jax.distributed`` when ``distributed.coordinator``
    is set: ``host:port`` with ``num_processes`` and ``process_id``, or ``auto`` for what a
    cluster launcher (SLURM, Open MPI, ...) puts in the environment. Every wait is bounded by
    ``distributed.timeout_s``; DistributedError says which address could not be reached."""
    dist = config.distributed
    if dist.coordinator is None:
        return
    auto = dist.coordinator == "auto"
    where = "the coordinator named by the launcher's environment" if auto else f"the coordinator at {dist.coordinator}"
    # XLA's client ends the process (abort, no exception) when the coordinator never answers:
    # what can be checked beforehand is, so that the usual mistakes get a message.
    if not auto:
        _check_coordinator(dist.coordinator, dist.process_id, dist.num_processes, dist.timeout_s)
    who = "this process" if auto else f"process {dist.process_id} of {dist.num_processes}"
    log.info("%s: joining %s (waiting up to %d s for every process)", who, where, dist.timeout_s)
    try:
        jax.distributed.initialize(
            coordinator_address=None if auto else dist.coordinator,
            num_processes=None if auto else dist.num_processes,
            process_id=None if auto else dist.process_id,
            initialization_timeout=dist.timeout_s,
            heartbeat_timeout_seconds=max(10, dist.timeout_s),
            shutdown_timeout_seconds=dist.timeout_s,
        )
    except Exception as err:  # jax raises RuntimeError or XlaRuntimeError, with pages of detail
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DistributedError(
            f"distributed: {who} could not join {where} within "
            f"{dist.timeout_s} s (distributed.timeout_s): {first[:300]}"
        ) from None
    log.info("process %d of %d joined %s: %d devices in all, %d here", jax.process_index(), jax.process_count(),
             where, jax.device_count(), jax.local_device_count())


def _check_coordinator(address: str, process_id: int, num_processes: int, timeout_s: float) -> None:
    """Process 0 must be able to listen on the address's port; every other process must reach
    it within ``timeout_s``. DistributedError otherwise, naming the address."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if process_id == 0:
        try:
            with socket.create_server(("", int(port))):
                pass
        except OSError as err:
            raise DistributedError(f"distributed: process 0 cannot serve the coordinator at {address}: port {port} "
                                   f"is not free here ({err.strerror or err}); choose another distributed.coordinator "
                                   "port") from None
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(2.0, timeout_s)):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise DistributedError(
                    f"distributed: process {process_id} of {num_processes} could not reach the coordinator at {address} "
                    f"within {timeout_s} s (distributed.timeout_s): {err.strerror or err}; is process 0 running there?"
                ) from None
            time.sleep(0.5)


def is_primary() -> bool:
    """True in the process that writes the run folder (process 0; the only one without ``jax.distributed``)."""
    return jax.process_index() == 0


MESH_AXIS = "env"


def make_mesh(config: Config) -> Mesh:
    """1-D mesh over the devices that split the env batch."""
    devices = jax.devices()
    wanted = config.train.num_devices or len(devices)
    if wanted > len(devices):
        raise ValueError(f"train.num_devices={wanted} but only {len(devices)} devices are visible: {devices}")
    num_envs = config.train.num_envs
    if num_envs % wanted:
        raise ValueError(f"train.num_envs={num_envs} must be divisible by the {wanted} devices of the mesh")
    return Mesh(np.asarray(devices[:wanted]), (MESH_AXIS,))


def state_shardings(mesh: Mesh, trainer: Trainer, abstract: Any) -> Any:
    """Shardings for a seed-batched state: env-batched leaves split on axis 1 (after seeds), the rest replicated."""
    replicated = NamedSharding(mesh, PartitionSpec())
    by_env = NamedSharding(mesh, PartitionSpec(None, MESH_AXIS))
    one_seed = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), abstract)
    return jax.tree.map(lambda batched: by_env if batched else replicated, trainer.env_batched(one_seed))


MAX_AUTO_CPU_DEVICES = 8
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def cpu_device_count(config: Config, cores: int) -> int:
    """How many host devices ``train.cpu_devices`` asks for on a machine of ``cores`` usable
    cores: the number itself, or for 0 the most, up to ``min(cores, MAX_AUTO_CPU_DEVICES)``,
    that split ``train.num_envs`` into equal shares of whole minibatches (recurrent networks:
    whole environments per minibatch), so that every algorithm's data-parallel copy fits."""
    t = config.train
    if t.cpu_devices:
        return t.cpu_devices
    minibatches = algorithms.of(config).minibatches(config)
    unit = minibatches if config.network.recurrent else 1  # recurrent minibatches are whole environments
    for count in range(max(1, min(cores, MAX_AUTO_CPU_DEVICES)), 1, -1):
        # samples per environment: its steps (PPO's batch also counts agents, which only helps)
        if splits_over(count, t.num_envs, t.num_steps, minibatches, unit):
            return count
    return 1


def configure_cpu_devices(config: Config) -> Optional[int]:
    """Splits the CPU into ``cpu_device_count`` host devices (``jax_num_cpu_devices``) before
    JAX starts its backends; returns the count, or None where it was left alone: XLA_FLAGS
    already sets the host device count, or the backends were started (a caller that used
    JAX before). The baseline scripts call it first thing; a program of its own calls it
    before its first JAX operation (it sets the process's devices for good)."""
    if HOST_DEVICES_FLAG in os.environ.get("XLA_FLAGS", ""):
        return None
    count = cpu_device_count(config, usable_cpus())
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError as err:  # the backends are up: their devices stay as they are
        log.debug("train.cpu_devices left alone: %s", err)
        return None
    return count
