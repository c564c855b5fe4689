"""How an episode went."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional


@dataclasses.dataclass
class EpisodeResult:
    """How one episode went (the ``end`` record's fields and a few more)."""

    seed: int
    steps: int
    terminated: bool
    truncated: bool
    reason: str
    blocks_delivered: int
    blocks_total: int
    weight_delivered: int
    weight_total: int
    episode_return: float
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    trace: Optional[str] = None
    error: Optional[str] = None  # set when the episode stopped on an exception

    @property
    def success(self) -> bool:
        return self.terminated

    def to_dict(self) -> Dict[str, Any]:
        out = dataclasses.asdict(self)
        out["success"] = self.success
        return out
