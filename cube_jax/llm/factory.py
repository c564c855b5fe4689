"""The factory of ``llm`` team members: one :class:`~cube_jax.llm.LLMAgent` per agent.

``team_agents(env, members, factories={"llm": LanguageAgents(...)})`` builds the language
agents of a team; ``cube-jax llm``, ``cube-jax serve`` and ``cube-jax bench run`` share it.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional


@dataclasses.dataclass(frozen=True)
class LanguageAgents:
    """The factory of ``llm`` members (``team_agents(..., factories={"llm": ...})``) for
    ``cube-jax llm`` and ``serve``: one :class:`~cube_jax.llm.LLMAgent` per agent, whose client
    comes from ``pool`` for the member's settings over ``defaults`` (or replays ``replay_from``,
    with no server; or records every exchange to ``record_to``)."""

    pool: Any  # cube_jax.llm.ClientPool
    defaults: Dict[str, Any]  # ModelSettings fields from the command's options
    prompts: Any  # cube_jax.llm.prompts.PromptBook
    max_repairs: int
    record_to: Optional[Path] = None
    replay_from: Optional[Path] = None
    local: Any = None  # cube_jax.llm.local.LocalServer, when a member plays the local model
    strategy_tips: bool = False
    feedback: bool = False
    schema_kind: str = "state"
    resume_from: Optional[List[Any]] = None  # exchanges an unfinished episode recorded, to serve again

    def settings(self, member):
        """The member's :class:`~cube_jax.llm.ModelSettings` (its own over the defaults), as
        declared: the local model is ``model="local"`` with no base URL."""
        from cube_jax.llm.client import ModelSettings
        from cube_jax.llm.local import is_local

        settings = ModelSettings(**{**self.defaults, **{k: v for k, v in member.options if k in self.defaults}})
        if is_local(settings.model):
            settings = dataclasses.replace(settings, model="local", base_url="")
        return settings

    def client_settings(self, member):
        """The settings a client is built with: the local model's name and address filled in."""
        from cube_jax.llm.local import MODEL_NAME, is_local

        settings = self.settings(member)
        if is_local(settings.model):
            if self.local is None or self.local.base_url is None:
                raise RuntimeError("the local model server is not running; start it first (LanguageAgents.local)")
            settings = dataclasses.replace(settings, model=MODEL_NAME, base_url=self.local.base_url)
        return settings

    def uses_local(self, members) -> int:
        """How many members play the local model."""
        from cube_jax.llm.local import is_local

        return sum(1 for m in members if m.kind == "llm" and is_local(self.settings(m).model))

    def for_episode(self, record_to: Optional[Path], replay_from: Optional[Path],
                    resume_from: Optional[List[Any]] = None) -> "LanguageAgents":
        return dataclasses.replace(self, record_to=record_to, replay_from=replay_from, resume_from=resume_from)

    def __call__(self, env, member, ids):
        from cube_jax.llm.agent import LLMAgent
        from cube_jax.llm.recording import RecordingClient, ReplayClient
        from cube_jax.names import agent_name

        agents = []
        for i in ids:
            if self.replay_from is not None:
                client = ReplayClient(self.replay_from, agent=agent_name(i))
            else:
                client = self.pool.get(self.client_settings(member))
                if self.record_to is not None:
                    earlier = [e for e in (self.resume_from or ()) if e.agent == agent_name(i)]
                    client = RecordingClient(client, self.record_to, agent=agent_name(i), reuse=earlier)
            agents.append(LLMAgent(client, prompts=self.prompts, max_repairs=self.max_repairs,
                                   strategy_tips=self.strategy_tips, feedback=self.feedback,
                                   schema_kind=self.schema_kind))
        return agents


__all__ = ["LanguageAgents"]
