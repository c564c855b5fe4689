"""Prompts for language agents, from editable Jinja2 templates.

Two templates make a prompt (LLM.md section 4):

* ``system.j2``: the rules of CUBE, the action vocabulary with its arguments (from
  ``cube_jax.symbolic.ACTION_SPECS``), the agent's role in the topology and the reply format;
* ``user.j2``: the step, the agent and its team, a symbolic view of every block (id, weight,
  position, distance to goal, and per face the agents aligned, the force needed and the
  quorum deficit, and whether it is blocked), the agent's plan and its progress, its recent
  steps and decisions, the messages it received and the feedback on its last plan or reply.

The defaults live in ``cube_jax/llm/templates/``. To change them without touching code,
copy that folder (``cube-jax llm --write-prompts DIR`` does it), edit the copies, and pass
``--prompts DIR``: a template found in DIR wins over the default of the same name. The
variables each template receives are those of :meth:`PromptBook.variables`.

>>> import cube_jax
>>> book = PromptBook()
>>> sorted(book.template_names())
['system.j2', 'user.j2']
"""
from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Sequence, Union

import jinja2

from cube_jax.agents.base import DecisionContext, Purpose, Reason
from cube_jax.core.types import ACTION_NAMES
from cube_jax.llm.replies import reply_example
from cube_jax.symbolic.actions import ACTION_SPECS

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATES = ("system.j2", "user.j2")
# How much of the agent's own past a prompt shows.
HISTORY_STEPS = 8
RECENT_DECISIONS = 4

TURNS = {
    (Purpose.PLAN, Reason.START): "The episode starts: choose your first plan.",
    (Purpose.PLAN, Reason.ENDED): "Your plan ended: choose your next plan.",
    (Purpose.PLAN, Reason.REPLAN): "Choose a new plan.",
    (Purpose.PLAN, Reason.MESSAGE): "Choose your plan.",
}
INTERRUPT_TURN = "A message reached you while your plan was running: resume it or replan."
MESSAGE_TURN = "Send your message now; you will plan afterwards."


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
            self._system = self.env.get_template("system.j2")
            self._user = self.env.get_template("user.j2")
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
            "examples": {p: reply_example(p) for p in ("plan", "interrupt", "message")},
        }

    def user_variables(self, ctx: DecisionContext, decisions: Sequence[Dict[str, Any]] = ()) -> Dict[str, Any]:
        if ctx.purpose == Purpose.INTERRUPT:
            turn = INTERRUPT_TURN
        elif ctx.purpose == Purpose.MESSAGE:
            turn = MESSAGE_TURN
        else:
            turn = TURNS[(ctx.purpose, ctx.reason)]
        if ctx.topology.instructions:
            turn = f"{turn} {ctx.topology.instructions}"
        progress = ctx.progress
        plan = None
        if progress.plan is not None:
            plan = {"spec": progress.plan.spec, "actions": progress.plan.text_actions, "index": progress.index,
                    "status": progress.status}
        history = [
            {"t": r.t, "action": "no action" if r.action is None else str(r.action),
             "primitive": "-" if r.primitive is None else ACTION_NAMES[r.primitive], "status": r.status,
             "error": None if r.error is None else r.error.message}
            for r in ctx.history[-HISTORY_STEPS:]
        ]
        inbox = [{"t": m.t, "sender": f"agent_{m.sender}",
                  "recipients": ", ".join("you" if r == ctx.agent else f"agent_{r}" for r in m.recipients),
                  "content": m.content} for m in ctx.inbox]
        return {
            "t": ctx.t,
            "max_steps": ctx.max_steps,
            "turn": turn,
            "purpose": ctx.purpose.value,
            "me": ctx.name,
            "agents": _team(ctx.views),
            "blocks": _blocks(ctx.views),
            "plan": plan,
            "history": history,
            "decisions": list(decisions)[-RECENT_DECISIONS:],
            "inbox": inbox,
            "feedback": ctx.feedback,
            "may_send": ctx.topology.may_send,
            "budget": ctx.topology.message_budget,
            "recipients": [f"agent_{r}" for r in sorted(ctx.topology.allowed_recipients)],
        }

    # -- rendering ----------------------------------------------------------------------------
    def render(self, ctx: DecisionContext, decisions: Sequence[Dict[str, Any]] = ()) -> List[Dict[str, str]]:
        """The chat messages ``[system, user]`` for this decision."""
        key = (ctx.agent, ctx.num_agents, ctx.views.grid_size, ctx.max_steps, ctx.step_cost, ctx.topology.name,
               ctx.topology.role)
        system = self._system_cache.get(key)
        if system is None:
            system = self._system_cache[key] = self._render(self._system, self.system_variables(ctx))
        user = self._render(self._user, self.user_variables(ctx, decisions))
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _render(self, template: jinja2.Template, variables: Dict[str, Any]) -> str:
        try:
            return template.render(**variables).strip() + "\n"
        except jinja2.UndefinedError as err:
            raise ValueError(f"prompts: {template.filename}: {err.message}; variables are {sorted(variables)}") from None


@functools.lru_cache(maxsize=8)
def _team(view) -> List[Dict[str, Any]]:
    """The team section's variables, computed once per world view (shared by every agent)."""
    return [{"name": f"agent_{i}", "row": int(r), "col": int(c)} for i, (r, c) in enumerate(view.world.agent_pos)]


@functools.lru_cache(maxsize=8)
def _blocks(view) -> List[Dict[str, Any]]:
    """The block section's variables, computed once per world view (shared by every agent)."""
    out = []
    for b in view.blocks:
        faces = [{"face": f.face, "aligned": [f"agent_{i}" for i in f.aligned], "required": f.required,
                  "deficit": f.deficit, "blocked": f.blocked} for f in b.faces.values()]
        out.append({"id": b.id, "weight": b.weight, "row": b.position[0], "col": b.position[1], "alive": b.alive,
                    "distance": b.distance_to_goal, "faces": faces})
    return out


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
