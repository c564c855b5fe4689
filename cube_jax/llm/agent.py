"""The language-model agent: an :class:`~cube_jax.agents.Agent` that asks a model.

At each decision point it renders the prompt (:class:`~cube_jax.llm.prompts.PromptBook`),
asks the model for the decision's purpose with :func:`~cube_jax.llm.ask.ask` (JSON schema,
tolerant extraction, syntactic and semantic checks against the state and the topology,
corrective re-prompts quoting the error, at most ``max_repairs``), and turns the checked
reply into a :class:`~cube_jax.agents.Decision`. When it cannot get a valid reply, the
server fails after its retries, or the runtime refuses a further call (a limit), it falls
back to ``idle(1)`` with the spec ``fallback(agent_k)`` (a message turn sends nothing; a
negotiation ``proposal`` or ``commitment`` chooses no block) and the decision says so. With ``repair`` every plan is checked before it is committed
(:mod:`cube_jax.llm.repair`), and with ``demos`` the system prompt shows worked examples
(:mod:`cube_jax.llm.demos`). Every model call is reported to the runtime as it ends
(``ctx.calls``), which writes its trace ``llm`` record and ends an episode whose server
keeps failing.

Any :class:`~cube_jax.llm.client.ChatModel` works: the real :class:`ModelClient`, a
:class:`RecordingClient` around it, or a :class:`ReplayClient` that serves a recording with
no server. One client per agent lets every agent use its own model.
"""
from __future__ import annotations

import collections
import logging
from typing import Any, Deque, Dict, Optional

import numpy as np

from cube_jax.agents.base import Agent, Decision, DecisionContext, OutgoingMessage, Plan, Purpose, fallback_plan
from cube_jax.llm.ask import SCHEMA_KINDS, ReplyOptions, ask
from cube_jax.llm.client import ChatModel
from cube_jax.llm.prompts import PromptBook
from cube_jax.llm.replies import ChoiceReply, InterruptReply, MessageReply, ReplyContext

log = logging.getLogger(__name__)

class LLMAgent(Agent):
    """One agent driven by a chat model behind ``client``."""

    kind = "llm"

    def __init__(self, client: ChatModel, prompts: Optional[PromptBook] = None, max_repairs: int = 2, *,
                 strategy_tips: bool = False, feedback: bool = False, schema_kind: str = "state",
                 reply: ReplyOptions = ReplyOptions(), repair: bool = False, demos: int = 0,
                 demo_pool: Any = None):
        if max_repairs < 0:
            raise ValueError(f"LLMAgent: max_repairs must be >= 0, got {max_repairs!r}")
        if schema_kind not in SCHEMA_KINDS:
            raise ValueError(f"LLMAgent: schema_kind must be one of {', '.join(SCHEMA_KINDS)}, got {schema_kind!r}")
        self.client = client
        self.model = client.model
        self.prompts = prompts or PromptBook.default()
        self.max_repairs = max_repairs
        # The prompt switches (EmCoop's Appendix H.4 advice; its RQ3 constraint feedback) and
        # the reply schema kind; all three are recorded in the trace's episode record.
        self.strategy_tips = bool(strategy_tips)
        self.feedback = bool(feedback)
        self.schema_kind = schema_kind
        self.reply = reply  # the reply mode and what is kept of a reasoning model's thinking
        self.decisions: Deque[Dict[str, Any]] = collections.deque(maxlen=8)
        self.last_prompt = None  # the messages of the latest request (for inspection and docs)
        # Plan repair (cube_jax.llm.repair) and worked examples (cube_jax.llm.demos): both are
        # recorded in the trace's episode record when on.
        self.repair = bool(repair)
        if demos and demo_pool is None:
            raise ValueError("LLMAgent: demos need the world's demo_pool (cube_jax.llm.demos.demo_pool)")
        self.demos = int(demos)
        self.demo_pool = demo_pool
        self.examples: Optional[list] = None  # this episode's examples, chosen at its first decision

    def reset(self, agent: int, num_agents: int, seed: int) -> None:
        self.decisions.clear()
        self.examples = None

    def reply_context(self, ctx: DecisionContext) -> ReplyContext:
        return ReplyContext(
            num_agents=ctx.num_agents,
            block_alive=tuple(bool(a) for a in np.asarray(ctx.state.block_alive)),
            agent=ctx.agent,
            allowed_recipients=frozenset(ctx.topology.allowed_recipients) if ctx.topology.may_send else frozenset(),
            message_budget=ctx.topology.message_budget if ctx.topology.may_send else 0,
            # generous: a long wait is allowed, an absurd one not
            max_action_steps=max(1000, 4 * ctx.max_steps, 4 * ctx.views.grid_size),
            required_spec=ctx.topology.required_spec,
        )

    def describe(self) -> Dict[str, Any]:
        """``{"kind", "model"}``, plus each prompt switch that is on (``strategy_tips``,
        ``feedback``: true), ``reply_schema: "plain"`` when the plain schema is used, and the
        reply options that are not the defaults (``reply_mode``, ``reasoning_history``,
        ``drop_reasoning``): a key that is absent means the default."""
        out: Dict[str, Any] = {"kind": self.kind, "model": self.model}
        if self.strategy_tips:
            out["strategy_tips"] = True
        if self.feedback:
            out["feedback"] = True
        if self.schema_kind != "state":
            out["reply_schema"] = self.schema_kind
        out.update(self.reply.describe())
        if self.repair:
            out["repair"] = True
        if self.demos:
            out["demos"] = self.demos
        return out

    def _examples(self, ctx: DecisionContext) -> list:
        """This episode's worked examples: chosen at its first decision (at t = 0, whose state
        is the episode's layout, which no example may show)."""
        if not self.demos:
            return []
        if self.examples is None:
            from cube_jax.llm.demos import layout_key

            self.examples = self.demo_pool.examples(ctx.agent, self.demos, layout_key(ctx.state))
        return self.examples

    async def decide(self, ctx: DecisionContext) -> Decision:
        messages = self.prompts.render(ctx, list(self.decisions), strategy_tips=self.strategy_tips,
                                       feedback=self.feedback, demos=self._examples(ctx))
        self.last_prompt = messages
        if self.repair:
            from cube_jax.llm.repair import ask_with_repair, plan_of, review_plan

            outcome, _ = await ask_with_repair(
                self.client, messages, ctx.purpose.value, self.reply_context(ctx),
                lambda reply: review_plan(ctx, plan_of(reply)), max_repairs=self.max_repairs, ledger=ctx.calls,
                schema_kind=self.schema_kind, options=self.reply)
        else:
            outcome = await ask(self.client, messages, ctx.purpose.value, self.reply_context(ctx),
                                max_repairs=self.max_repairs, ledger=ctx.calls, schema_kind=self.schema_kind,
                                options=self.reply)
        if outcome.fallback:
            if ctx.purpose in (Purpose.PROPOSAL, Purpose.COMMITMENT):
                decision = Decision(block=None, fallback=True, note=outcome.error)
            elif ctx.purpose == Purpose.MESSAGE:
                decision = Decision(fallback=True, note=outcome.error)
            else:
                decision = Decision(plan=fallback_plan(ctx.agent), fallback=True, note=outcome.error)
            self._remember(ctx, f"fell back ({outcome.error})")
            return decision
        reply = outcome.reply
        if isinstance(reply, ChoiceReply):
            choice = "none" if reply.block is None else f"block {reply.block}"
            self._remember(ctx, f"{ctx.purpose.value}: {choice}")
            return Decision(block=reply.block, rationale=reply.rationale)
        sent = tuple(OutgoingMessage(tuple(m.recipients), m.content) for m in reply.messages)
        if isinstance(reply, MessageReply):
            self._remember(ctx, f"sent {len(sent)} message(s)")
            return Decision(messages=sent)
        if isinstance(reply, InterruptReply) and reply.decision == "resume":
            self._remember(ctx, "resumed its plan")
            return Decision(resume=True, messages=sent)
        plan = Plan(reply.spec, tuple(reply.plan))
        self._remember(ctx, f"committed {plan}")
        return Decision(plan=plan, messages=sent)

    async def aclose(self) -> None:
        close = getattr(self.client, "aclose", None)
        if close is not None:
            await close()

    def _remember(self, ctx: DecisionContext, text: str) -> None:
        self.decisions.append({"t": ctx.t, "text": text})


__all__ = ["LLMAgent"]
