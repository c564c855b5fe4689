"""How an episode went."""
from __future__ import annotations

from typing import Any, Dict, Optional

import msgspec

from cube_jax.trace import Outcome


class EpisodeResult(Outcome, kw_only=True):
    """How one episode went: its :class:`~cube_jax.trace.Outcome` (what the ``end`` record
    says) and what the run cost."""

    seed: int
    episode_return: float
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    trace: Optional[str] = None
    error: Optional[str] = None  # set when the episode stopped on an exception
    reasoning_tokens: int = 0  # of the completion tokens, those reasoning models thought with

    @property
    def success(self) -> bool:
        return self.terminated

    @property
    def outcome(self) -> Outcome:
        return Outcome.of(self)

    def to_dict(self) -> Dict[str, Any]:
        out = {"seed": self.seed}
        out.update(msgspec.structs.asdict(self))
        out["success"] = self.success
        return out
