"""The ways to play episodes: from a script, a notebook or async code.

:func:`run_episode` and :func:`run_episodes` are plain functions that work anywhere: from a
script they run their own event loop; from inside a running one (a Jupyter notebook, an
async application) they run it in a worker thread and wait for it. :func:`arun_episode` and
:func:`arun_episodes` are the coroutine forms for async callers.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import TYPE_CHECKING, Awaitable, Callable, List, Sequence, TypeVar

from cube_jax.runtime.loop import Episode
from cube_jax.runtime.results import EpisodeResult

if TYPE_CHECKING:  # pragma: no cover
    from cube_jax.agents.base import Agent
    from cube_jax.core.env import CubeEnv

logger = logging.getLogger(__name__)
T = TypeVar("T")


def run_sync(make_coroutine: Callable[[], Awaitable[T]]) -> T:
    """Runs a coroutine to the end from synchronous code, inside a running event loop or not."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coroutine())
    # A running loop (a notebook's kernel) cannot be re-entered: play in a thread of our own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cube-jax-episode") as pool:
        return pool.submit(lambda: asyncio.run(make_coroutine())).result()


async def arun_episode(env: "CubeEnv", agents: Sequence["Agent"], seed: int, **options) -> EpisodeResult:
    """Plays one episode (see :class:`~cube_jax.runtime.Episode` for ``options``); the agents'
    connections are closed when it ends."""
    try:
        return await Episode(env, agents, seed=seed, **options).run()
    finally:
        for agent in agents:
            await agent.aclose()


def run_episode(env: "CubeEnv", agents: Sequence["Agent"], seed: int, **options) -> EpisodeResult:
    """Plays one episode to the end, from a script or from inside a running event loop."""
    return run_sync(lambda: arun_episode(env, agents, seed, **options))


async def arun_episodes(episodes: Sequence[Episode], concurrency: int = 1, on_done=None) -> List[EpisodeResult]:
    """Runs ``episodes`` with at most ``concurrency`` at once; results in the given order.

    An episode that raises does not stop the others: its trace ends with the error and its
    result has ``error`` set. ``on_done(result)`` is called as each one finishes.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"run_episodes: concurrency must be an integer >= 1, got {concurrency!r}")
    gate = asyncio.Semaphore(concurrency)

    async def one(episode: Episode) -> EpisodeResult:
        async with gate:
            try:
                result = await episode.run()
            except Exception as err:  # noqa: BLE001 - one broken episode must not end the run
                logger.exception("episode with seed %d failed", episode.seed)
                result = episode.result(terminated=False, truncated=True, reason=f"error: {type(err).__name__}",
                                        error=f"{type(err).__name__}: {str(err)[:300]}")
            if on_done is not None:
                on_done(result)
            return result

    return list(await asyncio.gather(*(one(e) for e in episodes)))


def run_episodes(episodes: Sequence[Episode], concurrency: int = 1, on_done=None) -> List[EpisodeResult]:
    """:func:`arun_episodes` from synchronous code (a script or a notebook alike)."""
    return run_sync(lambda: arun_episodes(episodes, concurrency=concurrency, on_done=on_done))
