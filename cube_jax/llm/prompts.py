"""Prompts for language agents, from editable Jinja2 templates.

Templates make a prompt (LLM.md section 4):

* ``system.j2``: the rules of CUBE, the action vocabulary with its arguments (from
  ``cube_jax.symbolic.ACTION_SPECS``), the agent's role in the topology and the reply format,
  with examples fitted to the topology (no message example where the agent may send none);
* ``user.j2``: the step, the agent and its team, its partners' state (each teammate's
  position, stage, current plan spec and symbolic action: COBLOCK's partner-state
  prompting), a symbolic view of every block (id, weight, position, distance to goal, the
  agent's own distance to the block's pushing face, and per face the agents aligned, the
  force needed and the quorum deficit, and whether it is blocked), the agent's plan and its
  true status, its recent steps and decisions, the messages it received and those it sent,
  the feedback on its last plan or reply, and what this turn asks for;
* ``negotiation.j2`` (included by ``user.j2`` in a negotiation room and when planning after
  one): the room, the proposals and commitments so far, the suggested team sizes, the
  guidebook and, once allocated, the block and its plan library;
* ``tips.j2`` (with ``strategy_tips``): EmCoop's strategy advice (its Appendix H.4);
* ``demos.j2`` (included by ``system.j2`` with ``--demos K``): worked examples, each a state
  rendered by ``user.j2`` as the agent's own prompt shows one and a planner's reply there
  (:mod:`cube_jax.llm.demos`);
* ``constraints.j2`` (with ``feedback``): the cooperation constraints (spatial, temporal,
  participation) that the agent's last step left unmet at the block it worked on (EmCoop's
  RQ3 feedback).

The defaults live in ``cube_jax/llm/templates/``. To change them without touching code,
copy that folder (``cube-jax llm --write-prompts DIR`` does it), edit the copies, and pass
``--prompts DIR``: a template found in DIR wins over the default of the same name. The
variables each template receives are those of :meth:`PromptBook.variables`.

>>> import cube_jax
>>> book = PromptBook()
>>> sorted(book.template_names())
['constraints.j2', 'demos.j2', 'negotiation.j2', 'system.j2', 'tips.j2', 'user.j2']
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import jinja2

from cube_jax.agents.base import DecisionContext, Purpose, Reason, TopologyView
from cube_jax.core.types import ACTION_NAMES
from cube_jax.names import LLM_PURPOSES, agent_name
from cube_jax.llm.replies import ReplyContext, reply_example
from cube_jax.symbolic.actions import ACTION_SPECS

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATES = ("system.j2", "user.j2", "negotiation.j2", "tips.j2", "constraints.j2", "demos.j2")
STAGE_WORDS = {"R": "deciding", "W": "committed, waiting to start", "X": "executing", "I": "interrupted, deciding"}
# How much of the agent's own past a prompt shows.
HISTORY_STEPS = 8
RECENT_DECISIONS = 4
RECENT_SENT = 4

TURNS = {
    (Purpose.PLAN, Reason.START): "The episode starts: choose your first plan.",
    (Purpose.PLAN, Reason.ENDED): "Your plan ended: choose your next plan.",
    (Purpose.PLAN, Reason.REPLAN): "Choose a new plan.",
    (Purpose.PLAN, Reason.MESSAGE): "Choose your plan.",
}
INTERRUPT_TURN = "A message reached you while your plan was running: resume it or replan."
MESSAGE_TURN = "Send your message now; you will plan afterwards."
PROPOSAL_TURN = "Negotiation: propose one block for the team to work on (a live block id), or null for none."
COMMITMENT_TURN = "Negotiation: commit to one block you will push (a live block id), or null for none."
ALLOCATED_TURN = "Negotiation is over: plan for your allocated block {block}; your spec must be push_block(block#{block})."


def action_signatures() -> List[Dict[str, str]]:
    """``{"signature", "summary"}`` of every symbolic action, from ACTION_SPECS."""
    return [
        {"signature": f"{name}({', '.join(a.name for a in spec.args)})", "summary": spec.summary}
        for name, spec in ACTION_SPECS.items()
    ]


class PromptBook:
    """Renders the system and user prompts of a decision from the templates.

    ``directory``: a folder whose ``system.j2`` / ``user.j2`` override the defaults.
    Rendering is strict: a template that names a variable the book does not provide fails
    loudly.
    """

    def __init__(self, directory: Union[None, str, os.PathLike] = None):
        search = [str(TEMPLATE_DIR)]
        if directory is not None:
            directory = Path(directory)
            if not directory.is_dir():
                raise ValueError(f"prompts: {str(directory)!r} is not a folder of templates")
            search.insert(0, str(directory))
        self.directory = directory
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(search), undefined=jinja2.StrictUndefined,
                                      autoescape=False, keep_trailing_newline=False, trim_blocks=False)
        try:
            templates = {name: self.env.get_template(name) for name in TEMPLATES}  # every syntax checked now
            self._system, self._user = templates["system.j2"], templates["user.j2"]
        except jinja2.TemplateSyntaxError as err:
            raise ValueError(f"prompts: {err.filename or err.name}, line {err.lineno}: {err.message}") from None
        self._system_cache: Dict[tuple, str] = {}

    @classmethod
    @functools.lru_cache(maxsize=None)
    def default(cls) -> "PromptBook":
        """The book of the default templates, built (and its templates compiled) once."""
        return cls()

    def template_names(self) -> Sequence[str]:
        return TEMPLATES

    # -- the variables ------------------------------------------------------------------------
    def system_variables(self, ctx: DecisionContext) -> Dict[str, Any]:
        k = ctx.views.grid_size
        return {
            "me": ctx.name,
            "team_size": ctx.num_agents,
            "k": k,
            "max_steps": ctx.max_steps,
            "step_cost": ctx.step_cost,
            "actions": action_signatures(),
            "topology": ctx.topology.name,
            "role": ctx.topology.role,
            "examples": self.examples(ctx),
            "may_message": bool(ctx.topology.may_send and ctx.topology.allowed_recipients),
            "demos": [],
        }

    @staticmethod
    def examples(ctx: DecisionContext) -> Dict[str, str]:
        """One reply example per purpose, fitted to what the topology lets this agent do in this
        decision: messages to its recipients, or none at all."""
        recipients = frozenset(ctx.topology.allowed_recipients) if ctx.topology.may_send else frozenset()
        reply = ReplyContext(num_agents=ctx.num_agents, block_alive=(True,) * (max(1, len(ctx.views.blocks))),
                             agent=ctx.agent, allowed_recipients=recipients, message_budget=1 if recipients else 0)
        return {p: reply_example(p, reply) for p in LLM_PURPOSES}

    def user_variables(self, ctx: DecisionContext, decisions: Sequence[Dict[str, Any]] = (), *,
                       strategy_tips: bool = False, feedback: bool = False) -> Dict[str, Any]:
        negotiation = ctx.negotiation
        if ctx.purpose == Purpose.INTERRUPT:
            turn = INTERRUPT_TURN
        elif ctx.purpose == Purpose.MESSAGE:
            turn = MESSAGE_TURN
        elif ctx.purpose == Purpose.PROPOSAL:
            turn = PROPOSAL_TURN
        elif ctx.purpose == Purpose.COMMITMENT:
            turn = COMMITMENT_TURN
        elif negotiation is not None and negotiation.allocation is not None:
            turn = ALLOCATED_TURN.format(block=negotiation.allocation)
        else:
            turn = TURNS[(ctx.purpose, ctx.reason)]
        if ctx.topology.instructions:
            turn = f"{turn} {ctx.topology.instructions}"
        progress = ctx.progress
        plan = None
        if progress.plan is not None:
            plan = {"spec": progress.plan.spec, "actions": progress.plan.text_actions, "index": progress.index,
                    "status": plan_status(ctx),
                    "error": None if progress.error is None else progress.error.message}
        history = [
            {"t": r.t, "action": "no action" if r.action is None else str(r.action),
             "primitive": "-" if r.primitive is None else ACTION_NAMES[r.primitive], "status": r.status,
             "error": None if r.error is None else r.error.message}
            for r in ctx.history[-HISTORY_STEPS:]
        ]
        inbox = [{"t": m.t, "sender": agent_name(m.sender),
                  "recipients": ", ".join("you" if r == ctx.agent else agent_name(r) for r in m.recipients),
                  "content": m.content} for m in ctx.inbox]
        sent = [{"t": m.t, "recipients": ", ".join(agent_name(r) for r in m.recipients), "content": m.content}
                for m in ctx.sent[-RECENT_SENT:]]
        me = ctx.views.world.agent_pos[ctx.agent]
        blocks = [dict(b, **({"my_distance": _distance_to_face(me, b)} if b["alive"] else {}))
                  for b in _blocks(ctx.views)]
        partners = [{"name": agent_name(p.agent), "row": int(ctx.views.world.agent_pos[p.agent][0]),
                     "col": int(ctx.views.world.agent_pos[p.agent][1]),
                     "stage": STAGE_WORDS.get(getattr(p.stage, "value", p.stage), str(p.stage)),
                     "spec": p.spec, "action": p.action} for p in ctx.partners]
        return {
            "t": ctx.t,
            "max_steps": ctx.max_steps,
            "turn": turn,
            "purpose": ctx.purpose.value,
            "me": ctx.name,
            "agents": _team(ctx.views),
            "partners": partners,
            "blocks": blocks,
            "sent": sent,
            "negotiation": _negotiation(ctx),
            "strategy_tips": bool(strategy_tips),
            "constraints": constraint_feedback(ctx) if feedback else None,
            "plan": plan,
            "history": history,
            "decisions": list(decisions)[-RECENT_DECISIONS:],
            "inbox": inbox,
            "feedback": ctx.feedback,
            "may_send": ctx.topology.may_send and bool(ctx.topology.allowed_recipients),
            "budget": ctx.topology.message_budget,
            "recipients": [agent_name(r) for r in sorted(ctx.topology.allowed_recipients)],
        }

    # -- rendering ----------------------------------------------------------------------------
    def render(self, ctx: DecisionContext, decisions: Sequence[Dict[str, Any]] = (), *, strategy_tips: bool = False,
               feedback: bool = False, demos: Sequence[Any] = ()) -> List[Dict[str, str]]:
        """The chat messages ``[system, user]`` for this decision; ``strategy_tips`` and
        ``feedback`` switch on the sections of ``tips.j2`` and ``constraints.j2``; ``demos``
        (:class:`~cube_jax.llm.demos.DemoDecision`) are the worked examples of ``demos.j2``."""
        key = (ctx.agent, ctx.num_agents, ctx.views.grid_size, ctx.max_steps, ctx.step_cost, ctx.topology.name,
               ctx.topology.role, ctx.topology.may_send, frozenset(ctx.topology.allowed_recipients),
               len(ctx.views.blocks), tuple(d.key for d in demos), bool(demos) and (strategy_tips, feedback))
        system = self._system_cache.get(key)
        if system is None:
            variables = self.system_variables(ctx)
            variables["demos"] = [self.demo(ctx, d, strategy_tips=strategy_tips, feedback=feedback) for d in demos]
            system = self._system_cache[key] = self._render(self._system, variables)
        user = self._render(self._user, self.user_variables(ctx, decisions, strategy_tips=strategy_tips,
                                                            feedback=feedback))
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def demo(self, ctx: DecisionContext, demo: Any, *, strategy_tips: bool = False,
             feedback: bool = False) -> Dict[str, str]:
        """One worked example for the agent of ``ctx``: ``{"prompt", "reply"}``, the demo's
        state rendered by ``user.j2`` as this agent's prompts render a state (its topology
        view without this turn's instructions) and the planner's reply
        (:func:`cube_jax.llm.demos.demo_reply`)."""
        from cube_jax.llm.demos import demo_reply

        live = ctx.topology
        view = TopologyView(live.name, live.role, live.may_send, frozenset(live.allowed_recipients),
                            live.message_budget)
        shown = dataclasses.replace(demo.ctx, topology=view, inbox=(), sent=(), negotiation=None)
        prompt = self._render(self._user, self.user_variables(shown, demo.decisions, strategy_tips=strategy_tips,
                                                              feedback=feedback))
        return {"prompt": prompt.strip(), "reply": demo_reply(demo.ctx, demo.plan)}

    def _render(self, template: jinja2.Template, variables: Dict[str, Any]) -> str:
        try:
            return template.render(**variables).strip() + "\n"
        except jinja2.UndefinedError as err:
            raise ValueError(f"prompts: {template.filename}: {err.message}; variables are {sorted(variables)}") from None


@functools.lru_cache(maxsize=8)
def _team(view) -> List[Dict[str, Any]]:
    """The team section's variables, computed once per world view (shared by every agent)."""
    return [{"name": agent_name(i), "row": int(r), "col": int(c)} for i, (r, c) in enumerate(view.world.agent_pos)]


@functools.lru_cache(maxsize=8)
def _blocks(view) -> List[Dict[str, Any]]:
    """The block section's variables, computed once per world view (shared by every agent)."""
    out = []
    for b in view.blocks:
        faces = [{"face": f.face, "aligned": [agent_name(i) for i in f.aligned], "required": f.required,
                  "deficit": f.deficit, "blocked": f.blocked} for f in b.faces.values()]
        out.append({"id": b.id, "weight": b.weight, "row": b.position[0], "col": b.position[1], "alive": b.alive,
                    "distance": b.distance_to_goal, "faces": faces})
    return out


def plan_status(ctx: DecisionContext) -> str:
    """What the agent's current (or last) plan is doing, in words: ``succeeded`` or ``failed``
    once it ended; while it runs, ``running`` once it has taken a step and ``committed, not
    started`` before (the executor's own status stays ``started`` for a plan's whole run)."""
    progress = ctx.progress
    if progress.status in ("succeeded", "failed", "done"):
        return progress.status
    if progress.index > 0:
        return "running"
    last = ctx.history[-1] if ctx.history else None
    if last is not None and last.action_index == 0 and last.status in ("started", "in_progress") and \
            progress.plan is not None and progress.plan.actions and last.action == progress.plan.actions[0]:
        return "running"
    return "committed, not started"


def _distance_to_face(position, block: Dict[str, Any]) -> int:
    """Steps (Manhattan, walls and bodies ignored) from ``position`` to the nearest cell of the
    block's left face, where an agent stands to push it toward the goal."""
    r, c = int(position[0]), int(position[1])
    col = block["col"] - 1
    row = min(max(r, block["row"]), block["row"] + block["weight"] - 1)
    return abs(r - row) + abs(c - col)


def _negotiation(ctx: DecisionContext) -> Optional[Dict[str, Any]]:
    room = ctx.negotiation
    if room is None:
        return None

    def choice(value):
        return "none" if value is None else f"block {value}"

    return {
        "room": [agent_name(i) for i in room.room],
        "proposals": [{"agent": agent_name(i), "choice": choice(b)} for i, b in sorted(room.proposals.items())],
        "commitments": [{"agent": agent_name(i), "choice": choice(b)} for i, b in sorted(room.commitments.items())],
        "team_sizes": [{"block": b, "size": n} for b, n in sorted(room.team_sizes.items())],
        "executing": [{"block": b, "agents": n} for b, n in sorted(room.executing.items()) if n],
        "guidebook": room.guidebook.strip(),
        "allocation": room.allocation,
        "plan_library": room.plan_library.strip(),
    }


def constraint_feedback(ctx: DecisionContext) -> Optional[Dict[str, Any]]:
    """The cooperation constraints of the task the agent's last step worked on (EmCoop's RQ3
    feedback): the block of its symbolic action, the face it was aligned with, and that
    face's ``spatial``, ``temporal`` and ``participation`` counts from the step record's
    ``tasks`` (LLM.md section 5) against the block's weight, with the ones ``violated``
    (:func:`cube_jax.runtime.stepping.last_task`). None when that step worked on no live block."""
    return dict(ctx.last_task) if ctx.last_task is not None else None


def write_default_templates(directory: Union[str, os.PathLike]) -> List[Path]:
    """Copies the default templates into ``directory`` (created) for editing; returns the files."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in TEMPLATES:
        target = directory / name
        if target.exists():
            raise ValueError(f"prompts: {target} exists; not overwriting it")
        shutil.copyfile(TEMPLATE_DIR / name, target)
        written.append(target)
    return written
