"""What the baseline scripts share: logging, the command line, and the guard against a
stalled XLA CPU runtime, the one place where a run ends the process on its own.

Each ``python baselines/<algorithm>.py`` calls :func:`main` with its name in the algorithm
registry (:mod:`cube_jax.rl.algorithms`), which says what ``config.algo`` it trains as and
which presets come first.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from cube_jax.rl import algorithms
from cube_jax.rl.config import Config, ConfigError, build
from cube_jax.rl.trackers import TrackerError, check_extras

log = logging.getLogger("baselines")

STALL_EXIT_CODE = 3
DISTRIBUTED_EXIT_CODE = 4  # a process could not join the others (distributed.*)


class _PlainFormatter(logging.Formatter):
    """The message alone for INFO records; warnings and errors say what they are."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if record.levelno == logging.INFO else f"{record.levelname.lower()}: {text}"


def configure_logging(level: int = logging.INFO) -> None:
    """The project's records at ``level`` on stdout, everyone's warnings and errors on stderr."""
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    for handler in (out, err):
        handler.setFormatter(_PlainFormatter("%(message)s"))
    root = logging.getLogger()
    root.handlers = [out, err]
    root.setLevel(logging.WARNING)  # libraries' own INFO chatter (orbax, absl) stays out
    for name in ("cube_jax", "baselines"):
        logging.getLogger(name).setLevel(level)


# --- the stall guard -------------------------------------------------------------------------
class RuntimeStall(RuntimeError):
    """The process used no CPU for ``stall_seconds`` while waiting for a result."""


def wait_for(fetch, what: str, stall_seconds: float, poll: float = 5.0):
    """``fetch()`` on a helper thread; RuntimeStall if the process stays idle ``stall_seconds``.

    XLA's CPU runtime can wedge: every worker of its intra-op thread pool waits for work
    while the host waits for a result that never comes (seen in 2 of about 15 MAPPO runs
    on a 2-core machine; ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` avoids the pool,
    and trained about 30 % slower there). A CPU computation keeps the process busy, so an
    idle process means a stall. Not for accelerators, whose computations leave the host
    idle by design.
    """
    done = threading.Event()
    box: Dict[str, Any] = {}

    def target():
        try:
            box["value"] = fetch()
        except BaseException as err:  # re-raised on the caller's thread
            box["error"] = err
        finally:
            done.set()

    threading.Thread(target=target, name=f"fetch {what}", daemon=True).start()
    idle, cpu = 0.0, time.process_time()
    while not done.wait(poll):
        now = time.process_time()
        idle = idle + poll if now - cpu < 0.01 * poll else 0.0
        cpu = now
        if idle >= stall_seconds:
            raise RuntimeStall(f"no CPU used for {idle:.0f} s while computing {what}")
    if "error" in box:
        raise box["error"]
    return box["value"]


def stall_guarded_fetch(stall_seconds: float):
    """The driver's ``fetch`` hook: ``jax.device_get`` under :func:`wait_for` on a
    single-process CPU run with ``stall_seconds > 0``; plain ``jax.device_get`` otherwise."""
    import jax

    if not stall_seconds or jax.default_backend() != "cpu" or jax.process_count() > 1:
        return lambda tree, what: jax.device_get(tree)
    return lambda tree, what: wait_for(lambda: jax.device_get(tree), what, stall_seconds)


def stall_message(err: RuntimeStall, config: Config, run_dir: Path) -> str:
    """What happened and the command that goes on, from the last checkpoint when there is one."""
    from cube_jax.rl import checkpoint, outputs

    script = f"baselines/{config.algo}.py"
    saved = (Path(run_dir) / outputs.CHECKPOINT_DIR / checkpoint.RUNNER_DIR).is_dir()
    again = f"output.resume={run_dir}" if saved else "<the same arguments>   (no checkpoint was saved yet)"
    return (
        f"training stopped: {err}. XLA's CPU thread pool stalled; this is not a problem of the config. "
        f"Go on with:\n  XLA_FLAGS=--xla_cpu_multi_thread_eigen=false python {script} {again}\n"
        f"(train.stall_seconds={config.train.stall_seconds} sets how long an idle process is waited for)"
    )


def _stop_stalled(err: RuntimeStall, config: Config, run_dir: Path) -> None:
    """Says how to go on, then ends the process: the stalled XLA threads can be neither joined nor stopped."""
    log.error(stall_message(err, config, run_dir))
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(STALL_EXIT_CODE)


# --- the scripts -------------------------------------------------------------------------------
def parse_args(algo: str, argv: Optional[List[str]] = None) -> Config:
    """The command line of the script of algorithm ``algo`` -> a validated config (the
    algorithm's presets first, then the command line's); bad input exits with status 2 and a message."""
    learner = algorithms.get(algo)
    parser = argparse.ArgumentParser(
        prog=f"baselines/{learner.config_algo}.py",
        description=f"Train {learner.config_algo.upper()} on CUBE. Overrides are key=value, e.g. env.scenario=hard "
        "train.num_envs=512.",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides key=value (keys: cube_jax/rl/config.py Config)")
    parser.add_argument("--config", action="append", default=[], help="extra YAML config file(s), applied in order")
    parser.add_argument(
        "--preset", action="append", default=[],
        help="a preset (a file of configs/), e.g. --preset hard --preset gpu (repeatable, applied in order)",
    )
    args = parser.parse_args(argv)
    try:
        config = build(learner.config_algo, args.config, [*learner.presets, *args.preset], args.overrides)
        check_extras(config)
    except (ConfigError, TrackerError) as err:
        parser.error(str(err))
    return config


def main(algo: str, argv: Optional[List[str]] = None) -> Dict[str, Any]:
    """Parses the command line, trains, evaluates and writes the run folder; returns the summary."""
    configure_logging()
    config = parse_args(algo, argv)  # bad input stops here, before the training stack loads
    from cube_jax.rl.run import DistributedError, configure_cpu_devices, open_run, train_and_report

    configure_cpu_devices(config)  # before JAX starts: one CPU device per core (train.cpu_devices)
    try:
        run_dir = open_run(config)
    except DistributedError as err:
        log.error(str(err))
        sys.exit(DISTRIBUTED_EXIT_CODE)
    try:
        return train_and_report(config, run_dir, fetch=stall_guarded_fetch(config.train.stall_seconds))
    except RuntimeStall as err:
        _stop_stalled(err, config, run_dir)
        raise  # not reached: _stop_stalled ends the process
