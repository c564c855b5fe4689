"""``bench run``'s language-model members: the factory that builds the ``llm`` members of a
contender, with the packaged local model's server running while a member plays it."""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Optional, Sequence, Tuple

from cube_jax.core import suite


def language_models(contender, tasks: Sequence[suite.Task]) -> Tuple[Optional[Any], Any]:
    """``(factory, context)``: the :class:`~cube_jax.llm.factory.LanguageAgents` that builds
    ``contender``'s ``llm`` members (None when it has none) and a context in which the local
    model's server runs when a member plays it."""
    if "llm" not in [e.split(":", 1)[0] for e in contender.spec.split(",")]:
        return None, contextlib.nullcontext()
    from cube_jax.llm.client import ClientPool
    from cube_jax.llm.factory import LanguageAgents, model_defaults
    from cube_jax.llm.local import LocalServer, is_local
    from cube_jax.llm.prompts import PromptBook
    from cube_jax.runtime.watch import planner_decisions

    defaults = {**model_defaults(None, None, temperature=0.0, max_tokens=256, timeout=120.0, max_retries=2),
                **contender.model_defaults}
    api_key = defaults.pop("api_key", None)
    max_repairs = defaults.pop("max_repairs", 2)
    server = {"threads": defaults.pop("local_threads", 1), "port": defaults.pop("local_port", 0)}
    repair = {"repair": bool(defaults.pop("repair", False)), "demos": int(defaults.pop("demos", 0))}
    factory = LanguageAgents(ClientPool(api_key), defaults, PromptBook.default(), max_repairs=max_repairs, **repair,
                             demo_player=planner_decisions)
    members = contender.members(tasks[0].num_agents, tasks[0].name)
    local = sum(is_local(factory.settings(m).model) for m in members if m.kind == "llm")
    if local:
        in_flight = local * contender.concurrency
        factory = dataclasses.replace(factory, local=LocalServer(parallel=min(4, in_flight), **server))
    return factory, _serving(factory.local)


class _serving:
    """Runs the local model's server (when there is one) for a ``with`` block."""

    def __init__(self, server):
        self.server = server

    def __enter__(self):
        if self.server is not None:
            self.server.start()
        return self

    def __exit__(self, *exc):
        if self.server is not None:
            self.server.stop()
        return False
