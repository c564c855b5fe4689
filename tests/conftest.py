"""Shared test setup: a persistent JAX compilation cache.

Many tests (and the scripts they run as subprocesses) compile the same programs; the
on-disk cache lets xdist workers and subprocesses reuse each other's compilations.
"""
import os
from pathlib import Path

CACHE_DIR = Path(os.environ.get("CUBE_JAX_TEST_CACHE", Path(__file__).resolve().parents[1] / ".jax_cache"))
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(CACHE_DIR))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import jax  # noqa: E402  (after the cache variables, so subprocesses and this process agree)

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
