"""The pace of a served episode: pause, single steps, a speed, and the end (``before_step``)."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, Optional

from cube_jax.runtime import EpisodeEnded

DEFAULT_SPEED = 4.0


class Pacer:
    """The ``before_step`` hook: pause, single steps, a speed, and the end of an episode.

    ``speed`` is in steps per second (None: as fast as the episode goes). The time since
    the previous step counts toward the next one, so a step that waited for a person or a
    model is not delayed again.
    """

    def __init__(self, speed: Optional[float] = DEFAULT_SPEED, paused: bool = False):
        self.speed = speed
        self.paused = paused
        self.end_reason: Optional[str] = None
        self._steps_allowed = 0
        self._last_step: Optional[float] = None
        self._wake = asyncio.Event()

    def poke(self) -> None:
        self._wake.set()

    def pause(self) -> None:
        self.paused = True
        self.poke()

    def run(self, speed: Any = None) -> None:
        if speed is not None:
            self.set_speed(speed)
        self.paused = False
        self.poke()

    def step(self) -> None:
        self.paused = True
        self._steps_allowed += 1
        self.poke()

    def set_speed(self, speed: Any) -> None:
        self.speed = None if speed == "max" else float(speed)
        self.poke()

    def end(self, reason: str) -> None:
        if self.end_reason is None:
            self.end_reason = reason
        self.poke()

    async def _sleep(self, seconds: Optional[float]) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    async def before_step(self) -> None:
        while True:
            if self.end_reason is not None:
                raise EpisodeEnded(self.end_reason)
            if self.paused:
                if self._steps_allowed > 0:
                    self._steps_allowed -= 1
                    break
                await self._sleep(None)
                continue
            if self.speed is not None and self._last_step is not None:
                delay = 1.0 / self.speed - (time.perf_counter() - self._last_step)
                if delay > 0:
                    await self._sleep(delay)
                    continue
            break
        self._last_step = time.perf_counter()
        await asyncio.sleep(0)  # let the pages' messages go out between steps

    def state(self) -> Dict[str, Any]:
        return {"paused": self.paused, "speed": "max" if self.speed is None else self.speed}


__all__ = ["DEFAULT_SPEED", "Pacer"]
