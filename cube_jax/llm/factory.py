"""The factory of ``llm`` team members: one :class:`~cube_jax.llm.LLMAgent` per agent.

The registry builds ``llm`` members with :func:`llm_agents` (each member's own model and
server, the rest at their defaults); ``cube-jax llm``, ``cube-jax serve`` and ``cube-jax
bench run`` configure a :class:`LanguageAgents` from their options and hand it to
``team_agents(env, members, factories={"llm": ...})`` instead.
"""
from __future__ import annotations

import dataclasses
import os
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
    # plan repair and worked examples (cube_jax.llm.repair, cube_jax.llm.demos): the command's
    # --repair and --demos K, which a member's own ``repair`` / ``demos`` (a team file) replace
    repair: bool = False
    demos: int = 0
    # play(env, layout, max_steps=...): a planner's episode on a demo layout, with its decisions
    # (cube_jax.runtime.watch.planner_decisions, handed in by the commands: see cube_jax.llm.demos)
    demo_player: Any = None

    def repair_settings(self, member) -> Dict[str, Any]:
        """``{"repair": bool, "demos": K}`` of ``member``: its own over the command's."""
        return {"repair": bool(member.option("repair", self.repair)), "demos": int(member.option("demos", self.demos))}

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

    def reply_options(self, member):
        """The member's :class:`~cube_jax.llm.ask.ReplyOptions` (its own settings over the defaults)."""
        from cube_jax.llm.ask import ReplyOptions

        settings = self.settings(member)
        return ReplyOptions(settings.reply_mode, settings.reasoning_history, settings.drop_reasoning)

    def __call__(self, env, member, ids):
        from cube_jax.llm.agent import LLMAgent
        from cube_jax.llm.demos import demo_pool
        from cube_jax.llm.recording import RecordingClient, ReplayClient
        from cube_jax.names import agent_name

        reply = self.reply_options(member)
        extra = self.repair_settings(member)
        pool = demo_pool(env, extra["demos"], self.demo_player) if extra["demos"] else None
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
                                   schema_kind=self.schema_kind, reply=reply, repair=extra["repair"],
                                   demos=extra["demos"], demo_pool=pool))
        return agents


def model_defaults(model: Optional[str], base_url: Optional[str], **settings: Any) -> Dict[str, Any]:
    """The :class:`~cube_jax.llm.ModelSettings` fields of members that give none of their own:
    ``base_url`` else ``OPENAI_BASE_URL``; with no server named anywhere and no model, the
    local model. ``settings``: further fields (``temperature``, ``max_tokens``, ...)."""
    from cube_jax.llm.client import ModelSettings
    from cube_jax.llm.local import LOCAL

    base_url = base_url or os.environ.get("OPENAI_BASE_URL")
    defaults = {f.name: f.default for f in dataclasses.fields(ModelSettings) if f.default is not dataclasses.MISSING}
    return {**defaults, "model": model if model is not None or base_url else LOCAL, "base_url": base_url, **settings}


def llm_agents(env, member, ids) -> List[Any]:
    """The registry's factory of ``llm`` members outside the commands: each agent talks to the
    member's model and server (``llm:<model>@<base URL>``, else ``OPENAI_BASE_URL``), with the
    default prompts and settings. ValueError when the member names no model or server (the
    local model plays under ``cube-jax llm`` and ``serve``, which start its server)."""
    from cube_jax.llm.client import ClientPool
    from cube_jax.llm.local import is_local
    from cube_jax.llm.prompts import PromptBook

    factory = LanguageAgents(ClientPool(), model_defaults(None, None), PromptBook.default(), max_repairs=2)
    settings = factory.settings(member)
    if is_local(settings.model):
        raise ValueError("the local model plays under cube-jax llm and cube-jax serve, which start its server; "
                         "elsewhere name a model and its server: llm:<model>@<base URL>")
    if not settings.model or not settings.base_url:
        raise ValueError("name the model and its server: llm:<model>@<base URL> (or set OPENAI_BASE_URL)")
    return factory(env, member, ids)


__all__ = ["LanguageAgents", "llm_agents", "model_defaults"]
