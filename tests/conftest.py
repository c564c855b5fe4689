"""Shared test setup: a persistent JAX compilation cache, quicker compiles, and the browser the
browser tests drive.

Many tests (and the scripts they run as subprocesses) compile the same programs; the
on-disk cache lets xdist workers and subprocesses reuse each other's compilations.

The browser tests drive Debian's ``chromium``. The ``chromium`` fixture installs it with
apt-get on a machine that lacks it (as root, or through passwordless sudo), so the README's
test command alone passes on a fresh machine. The install starts in the background as soon
as a session that runs browser tests has collected them; a file lock keeps pytest-xdist's
workers from running apt-get twice at once.
"""
import fcntl
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

CACHE_DIR = Path(os.environ.get("CUBE_JAX_TEST_CACHE", Path(__file__).resolve().parents[1] / ".jax_cache"))
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(CACHE_DIR))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
# The suite's time is mostly compiling small programs that then run for milliseconds. With
# LLVM's optimisation off, XLA compiles them in about half the time; with the CPU backend's
# older loop emitters in place of its fusion emitters, a PPO update compiles in half the time
# again (10.5 s to 5.3 s for the tiny MAPPO trainer, tests/rl/test_rl_recurrent.py 98 s to
# 57 s) and runs as fast. The HLO is the same; floats may round differently, as they do from
# one CPU to another, so no test may depend on the rounding. Set here, before JAX starts, so
# the scripts the tests run inherit them; a flag that XLA_FLAGS already names is left as it is.
TEST_XLA_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
for _flag, _value in TEST_XLA_FLAGS.items():
    if _flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --{_flag}={_value}").strip()

import jax  # noqa: E402  (after the cache variables, so subprocesses and this process agree)

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))


CHROMIUM_NAMES = ("chromium", "chromium-browser")
# Debian's package, its download and its install take a few minutes on a fresh machine.
APT_TIMEOUT_S = 900


def find_chromium():
    """The path of an installed Chromium, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return Path(path)
    return None


def _apt_prefix():
    """How to run apt-get here: directly as root, through passwordless sudo, or None."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


LOCK_PATH = Path(tempfile.gettempdir()) / "cube_jax_chromium_install.lock"


def _apt_install_chromium() -> str | None:
    """Install Debian's ``chromium`` with apt-get unless it is there: None when it is, else
    what went wrong. Holds a file lock shared by every test process (and the early install
    below), so apt-get runs once and the others wait for it, then find it installed."""
    with open(LOCK_PATH, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if find_chromium():
                return None
            prefix = _apt_prefix()
            if prefix is None:
                return ("the browser tests need Debian's chromium, which is missing, and this user cannot run "
                        "apt-get: install it (sudo apt-get install -y chromium) and run the tests again")
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
                done = subprocess.run(prefix + command, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
                if done.returncode != 0:
                    return (f"installing Debian's chromium failed: {' '.join(command)} exited {done.returncode}: "
                            f"{(done.stderr or done.stdout)[-600:]}")
            if find_chromium() is None:
                return "apt-get installed chromium but no chromium command is on PATH"
            return None
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def install_chromium() -> Path:
    """Debian's ``chromium``, installed first if it is missing; a test that needs it fails
    with the reason when it cannot be installed."""
    problem = _apt_install_chromium()
    if problem:
        pytest.fail(problem, pytrace=False)
    return find_chromium()


def pytest_collection_finish(session):
    """The browser tests come last in the collection order, and apt-get takes about a minute
    on a fresh machine: when this session runs any of them and chromium is missing, its
    install starts now, in the background, so it overlaps the tests that come first. The
    ``chromium`` fixture then waits on the lock, and reports a failure itself."""
    if find_chromium() is None and any("chromium" in getattr(item, "fixturenames", ()) for item in session.items):
        threading.Thread(target=_apt_install_chromium, name="chromium-install", daemon=True).start()


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser(chromium):
    """Headless Chromium (Debian's, driven by playwright) for one test module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def chromium() -> Path:
    """The path of Debian's Chromium, installed first if it is missing (see the module docstring)."""
    return find_chromium() or install_chromium()


@pytest.fixture(scope="session")
def tiny_recurrent_run(tmp_path_factory):
    """``(config, summary, run folder)`` of one tiny recurrent IPPO run (tests/rl_tiny.py),
    trained once per test process for the modules that read a saved recurrent run."""
    from tests.rl_tiny import train_tiny_recurrent_run

    return train_tiny_recurrent_run(tmp_path_factory.mktemp("tiny_recurrent"))
