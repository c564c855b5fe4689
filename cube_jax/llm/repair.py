"""Plan repair (``--repair``): every plan a language agent commits is checked before it runs,
and a plan that fails a check goes back to the model with the violation quoted.

COBLOCK (``coblock.txt``, section 3, step 3) checks an agent's work with an external program
and sends the error back so the agent corrects it; here the program checks a plan *before*
it runs, against the state the agent decided on and its teammates' committed plans. The
checks read a plan as the faces it works at: an **engagement** is one ``(block, face)``
where the plan pushes (``push_block``) or meets its teammates (``rendezvous``), found by
walking the plan from where the agent stands (:func:`engagements`):

* ``move_to_block(b, f)`` takes the agent to face ``f`` of ``b``; ``rendezvous(b, f, c, T)``
  and ``push_block(b, s)`` happen at the face it was taken to, or, before any move, at the
  face it is aligned with now; ``move`` and ``yield_block`` leave it somewhere the walk does
  not follow (later pushes are then not checked); ``idle`` and ``wait_agents`` keep it where
  it is. A ``rendezvous`` followed by a ``push_block`` of the same block at the same face is
  one engagement, with that rendezvous' ``count`` and ``timeout``.

The three checks, in this order, engagement by engagement (the first violation is the one
reported; the state is the one the agent decided on, a plan's later pushes included):

1. **reach**: every ``move_to_block(b, f)`` has somewhere to go and a way there: a target
   cell of the face exists (the face's queue tails, :func:`cube_jax.symbolic.pathing.queue_targets`:
   inside the grid, not under a block) and a path of cells free of blocks leads from the
   agent to one (agents are not obstacles: they move; this is the executor's own fallback
   path, :func:`~cube_jax.symbolic.pathing.path_step`). And every ``rendezvous(b, f, ...)``
   or ``push_block(b, ...)`` happens at a face of ``b`` the agent stands at (its
   precondition, docs/symbolic.md).
2. **quorum**: the face needs ``r`` agents pushing at once: its ``required`` force, the
   weight of the block and of every block it would shove (``r = w`` when nothing is ahead;
   the prompt's "needs r"). With a rendezvous of count ``c``, the plan needs
   ``max(r, c)`` agents there (``c`` alone for a rendezvous with no push), and ``c < r`` is
   a violation of its own (the group would leave the rendezvous too small to move the
   block). The agents that can be there are the agent itself, its teammates **committed**
   to the same face (in W or X, their remaining plan has that engagement), and its
   **free** teammates (deciding now, in R or I, or holding a plan that works at no face)
   whose path distance to the face (as for reach; 0 when aligned) is at most the window
   ``d + T``: the agent's own distance ``d`` plus the rendezvous' timeout ``T`` (0 with no
   rendezvous). Teammates committed to another face or block are not counted. Fewer than
   needed: violation.
3. **clash**: no teammate committed (in W or X) to the same block at another face: its
   remaining plan has an engagement ``(b, g)`` with ``g != f``. The opposite face pushes
   against the agent; a side face splits the team so that neither face gathers its quorum.
   Committed plans run now, so any two of them overlap in time.

Teammates' plans are read from the partner states of the decision's context (the phase's
snapshot: LLM.md 2.1, agents deciding in the same phase do not see each other's new plans).

:func:`ask_with_repair` runs the ask-check-repair loop around :func:`cube_jax.llm.ask.ask`.
The repair budget is ``max_repairs``, shared with the corrective re-prompts of invalid
replies: a decision makes at most ``1 + max_repairs`` calls whatever went wrong, so the
runtime's bound on calls per step (LLM.md 2.1) holds with ``--repair`` too. A plan that
still fails a check when the budget is spent runs as it is (it is valid; the checks judge
feasibility, not form), and so does the last such plan when a later reply was invalid.
The ``llm`` record of every call whose plan failed a check carries ``repair``: ``{"check",
"block", "face", "action_index", "detail", "resent"}``, ``resent`` false for the one that
ran unrepaired (:class:`cube_jax.trace.RepairInfo`); the metrics count them
(``repairs``, ``repairs_<check>``, ``repairs_unresolved``).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from cube_jax.agents.base import CallLedger, DecisionContext, ModelCall, OpenLedger, PartnerState, Stage
from cube_jax.llm.ask import AskOutcome, ReplyOptions, ask
from cube_jax.llm.client import ChatModel
from cube_jax.llm.replies import InterruptReply, PlanReply, Reply, ReplyContext
from cube_jax.names import agent_name
from cube_jax.symbolic.actions import SymbolicAction
from cube_jax.symbolic.pathing import NO_PATH, World, distance_field, free_cells, queue_targets
from cube_jax.symbolic.vocabulary import FACE_IDS, face_cell

CHECKS = ("reach", "quorum", "clash")
OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}
HINTS = {
    "reach": "Choose a face you can reach (the left face pushes a block toward the goal), or another block.",
    "quorum": "Choose a block your team can move now (a lighter one), make the rendezvous count the force the face "
              "needs, give the rendezvous a timeout long enough for your teammates to arrive, or join a face where "
              "teammates are already committed.",
    "clash": "Join your teammate at the same face of that block, or work on another block.",
}


@dataclasses.dataclass(frozen=True)
class Engagement:
    """One face a plan works at: ``block``, ``face``, the index of its first action there,
    whether it pushes, and the rendezvous (``count``, ``timeout``) it meets in, if any."""

    block: int
    face: str
    index: int
    pushes: bool = False
    count: Optional[int] = None
    timeout: int = 0


@dataclasses.dataclass(frozen=True)
class Violation:
    """A check a plan failed: ``check`` (reach, quorum, clash), where (``block``, ``face``,
    the plan's ``action_index`` and the ``action`` as text) and why (``detail``)."""

    check: str
    block: Optional[int]
    face: Optional[str]
    action_index: Optional[int]
    action: Optional[str]
    detail: str

    def record(self, resent: bool) -> Dict[str, object]:
        """The ``llm`` record's ``repair`` value."""
        return {"check": self.check, "block": self.block, "face": self.face, "action_index": self.action_index,
                "detail": self.detail, "resent": bool(resent)}

    def where(self) -> str:
        parts = []
        if self.face is not None and self.block is not None:
            parts.append(f"the {self.face} face of block {self.block}")
        elif self.block is not None:
            parts.append(f"block {self.block}")
        if self.action_index is not None:
            parts.append(f"action {self.action_index}" + (f" {self.action}" if self.action else ""))
        return ", ".join(parts)

    def feedback(self) -> str:
        """The corrective re-prompt: which check, where, why, and what would pass."""
        return (f"Plan repair: your plan failed the \"{self.check}\" check at {self.where()}: {self.detail}. "
                f"{HINTS[self.check]} Reply with a corrected plan, one JSON object in the same format.")

    def __str__(self) -> str:
        return f"{self.check} ({self.where()}): {self.detail}"


# --- reading plans -----------------------------------------------------------------------------------


def aligned_faces(view, agent: int) -> Set[Tuple[int, str]]:
    """The ``(block, face)`` pairs ``agent`` is aligned with now (at most one per face)."""
    out = set()
    for f, face in enumerate(("up", "down", "left", "right")):
        block = int(view.alignment[f, agent])
        if block >= 0:
            out.add((block, face))
    return out


def engagements(actions: Sequence[SymbolicAction], start: Set[Tuple[int, str]],
                problems: Optional[List[Tuple[int, SymbolicAction, str]]] = None) -> List[Engagement]:
    """The faces ``actions`` work at, walked from the alignments ``start`` (see the module
    docstring). ``problems`` receives ``(index, action, why)`` for every ``rendezvous`` or
    ``push_block`` that would happen at no face of its block (a reach violation)."""
    at: Optional[Set[Tuple[int, str]]] = set(start)  # None: somewhere the walk does not follow
    found: List[Engagement] = []
    meeting: Optional[int] = None  # the index in ``found`` of the rendezvous the agent is at, awaiting its push
    for i, action in enumerate(actions):
        name, args = action.name, action.args
        if name == "move_to_block":
            at, meeting = {(args["block"], args["face"])}, None
        elif name in ("move", "yield_block"):
            at, meeting = None, None
        elif name == "rendezvous":
            b, f = args["block"], args["face"]
            if at is not None and (b, f) not in at:
                if problems is not None:
                    problems.append((i, action, f"rendezvous needs you aligned with the {f} face of block {b}, but "
                                                f"{_standing(at, b)}"))
                continue
            found.append(Engagement(b, f, i, pushes=False, count=args["count"], timeout=args["timeout"]))
            meeting = len(found) - 1
            at = {(b, f)}
        elif name == "push_block":
            b = args["block"]
            if at is None:
                continue
            faces = sorted(face for block, face in at if block == b)
            if not faces:
                if problems is not None:
                    problems.append((i, action, f"push_block needs you aligned with a face of block {b}, but "
                                                f"{_standing(at, b)}"))
                continue
            f = faces[0]
            if meeting is not None and (found[meeting].block, found[meeting].face) == (b, f):
                found[meeting] = dataclasses.replace(found[meeting], pushes=True)
            elif not (found and (found[-1].block, found[-1].face) == (b, f) and found[-1].pushes):
                found.append(Engagement(b, f, i, pushes=True))
            meeting = None
            at = {(b, f)}
    return found


def _standing(at: Set[Tuple[int, str]], block: int) -> str:
    if not at:
        return "at that point of the plan you stand at no block's face (add move_to_block first)"
    shown = ", ".join(f"the {f} face of block {b}" for b, f in sorted(at))
    return f"at that point of the plan you stand at {shown} (add move_to_block({block}, <face>) first)"


def remaining(partner: PartnerState) -> Tuple[SymbolicAction, ...]:
    """The actions of a teammate's plan still to run."""
    if partner.plan is None:
        return ()
    return tuple(partner.plan.actions[max(0, int(partner.plan_index)):])


def committed(partner: PartnerState) -> bool:
    """A teammate holds a committed plan: it waits to start it (W) or executes it (X)."""
    return _stage(partner.stage) in (Stage.WAITING.value, Stage.EXECUTING.value) and partner.plan is not None


def _stage(stage) -> str:
    return getattr(stage, "value", stage)


# --- distances -----------------------------------------------------------------------------------------


class _Reach:
    """Path distances to faces on one state (agents are not obstacles), cached per face."""

    def __init__(self, view):
        self.view = view
        self.world: World = view.world
        self.free = free_cells(self.world)
        self._fields: Dict[Tuple[int, int, str], Optional[np.ndarray]] = {}

    def targets(self, agent: int, block: int, face: str) -> List[Tuple[int, int]]:
        return queue_targets(self.world, agent, block, face)

    def face_cells(self, block: int, face: str) -> List[Tuple[int, int]]:
        """The cells right outside the face that are inside the grid and under no block."""
        w = self.world
        weight = int(w.block_weight[block])
        cells = face_cell(w.block_pos[block], weight, FACE_IDS[face], np.arange(weight))
        return [(int(r), int(c)) for r, c in cells if w.inside((int(r), int(c))) and w.block_at[int(r), int(c)] < 0]

    def distance(self, agent: int, block: int, face: str) -> Optional[int]:
        """Moves from ``agent`` to the face (0 when aligned with it); None when there is no
        target or no path."""
        if (block, face) in aligned_faces(self.view, agent):
            return 0
        key = (agent, block, face)
        if key not in self._fields:
            targets = self.targets(agent, block, face)
            self._fields[key] = distance_field(self.free, targets) if targets else None
        field = self._fields[key]
        if field is None:
            return None
        d = int(field[self.world.agent_cell(agent)])
        return None if d >= NO_PATH else d


# --- the checks ------------------------------------------------------------------------------------------


def review_plan(ctx: DecisionContext, actions: Sequence[SymbolicAction]) -> Optional[Violation]:
    """The first check ``actions`` (the plan agent ``ctx.agent`` would commit now) fails, or
    None when it passes them all (see the module docstring)."""
    view = ctx.views
    me = ctx.agent
    reach = _Reach(view)
    problems: List[Tuple[int, SymbolicAction, str]] = []
    mine = engagements(actions, aligned_faces(view, me), problems)
    # reach: every move_to_block has a target and a path; every meeting and push a face (the
    # first failing action of the plan is the one reported)
    failing = [Violation("reach", action.args.get("block"), action.args.get("face"), i, str(action), why)
               for i, action, why in problems]
    for i, action in enumerate(actions):
        if action.name != "move_to_block":
            continue
        b, f = action.args["block"], action.args["face"]
        if reach.distance(me, b, f) is not None:
            continue
        if not reach.targets(me, b, f):
            if reach.face_cells(b, f):
                why = ("there is no free place to stand: every line of agents behind that face runs up to the edge "
                       "of the grid or a block")
            else:
                why = "there is no cell to stand at: every cell of that face is outside the grid or under a block"
        else:
            why = "no path leads there: blocks wall that face off from where you stand"
        failing.append(Violation("reach", b, f, i, str(action), why))
    if failing:
        return min(failing, key=lambda v: v.action_index)

    partners = {p.agent: p for p in ctx.partners}
    theirs = {j: engagements(remaining(p), aligned_faces(view, j)) if committed(p) else []
              for j, p in partners.items()}
    faces_of = {j: {(e.block, e.face) for e in es} for j, es in theirs.items()}
    for e in mine:
        action = str(actions[e.index])
        face_view = view.blocks[e.block].faces.get(e.face) if 0 <= e.block < len(view.blocks) else None
        if face_view is None:
            continue  # a delivered block: the reply checks refuse it before any review
        required = int(face_view.required)
        # quorum
        if e.pushes and e.count is not None and e.count < required:
            return Violation("quorum", e.block, e.face, e.index, action,
                             f"the rendezvous count {e.count} is below the {required} agents block {e.block} needs "
                             f"pushing its {e.face} face at once, so the group would leave it too small to move the block")
        need = max(required if e.pushes else 0, e.count or 0)
        mine_d = reach.distance(me, e.block, e.face) or 0
        window = mine_d + (e.timeout if e.count is not None else 0)
        joined, could = [], []
        for j, p in sorted(partners.items()):
            if (e.block, e.face) in faces_of[j]:
                joined.append(j)
            elif not faces_of[j]:
                d = reach.distance(j, e.block, e.face)
                if d is not None and d <= window:
                    could.append(j)
        available = 1 + len(joined) + len(could)
        if available < need:
            counted = ["you"] + [f"{agent_name(j)} (committed there)" for j in joined] + \
                      [f"{agent_name(j)} (free, can arrive in time)" for j in could]
            return Violation("quorum", e.block, e.face, e.index, action,
                             f"it needs {need} agents there at once, but within the window of {window} step(s) "
                             f"(your {mine_d} to get there + a rendezvous timeout of "
                             f"{e.timeout if e.count is not None else 0}) only {available} can be: "
                             f"{', '.join(counted)}; teammates committed elsewhere do not count")
        # clash
        for j, es in sorted(theirs.items()):
            other = next((x for x in es if x.block == e.block and x.face != e.face), None)
            if other is None:
                continue
            spec = partners[j].plan.spec if partners[j].plan is not None else "?"
            how = ("from the opposite side, pushing against you" if OPPOSITE[e.face] == other.face
                   else "from another side, splitting the team so that neither face gathers its quorum")
            return Violation("clash", e.block, e.face, e.index, action,
                             f"{agent_name(j)} is committed to block {e.block} at its {other.face} face "
                             f"(its plan {spec}: {remaining(partners[j])[other.index]}), {how}")
    return None


def plan_of(reply: Reply):
    """The actions of a reply that commits a plan (a plan reply, or an interrupt that
    replans), else None."""
    if isinstance(reply, PlanReply):
        return reply.plan
    if isinstance(reply, InterruptReply) and reply.decision == "replan":
        return reply.plan
    return None


# --- the ask-check-repair loop ---------------------------------------------------------------------------


class _HoldingLedger:
    """A ledger that writes each call's record once the next call starts, or when told:
    the last call's record can then be completed (its ``repair`` key) before it is written.
    Nothing it holds is lost: :func:`ask_with_repair` flushes it on every way out."""

    def __init__(self, inner: CallLedger):
        self.inner = inner
        self.held: Optional[ModelCall] = None

    def permit(self) -> Optional[str]:
        self.flush()
        return self.inner.permit()

    def record(self, call: ModelCall) -> None:
        self.flush()
        self.held = call

    def flush(self, **changes) -> None:
        if self.held is not None:
            call, self.held = self.held, None
            self.inner.record(dataclasses.replace(call, **changes) if changes else call)


async def ask_with_repair(
    client: ChatModel,
    messages: Sequence[Mapping[str, str]],
    purpose: str,
    context: ReplyContext,
    review: Callable[[Reply], Optional[Violation]],
    *,
    max_repairs: int = 2,
    ledger: Optional[CallLedger] = None,
    schema_kind: str = "state",
    options: ReplyOptions = ReplyOptions(),
) -> Tuple[AskOutcome, List[Violation]]:
    """:func:`~cube_jax.llm.ask.ask`, then ``review`` of each valid reply, re-prompting with
    a violation's :meth:`Violation.feedback` while the budget lasts (see the module
    docstring). Returns the outcome (the reply that runs; ``fallback`` only when no valid
    reply came at all) and every violation found, in order."""
    ledger = ledger if ledger is not None else OpenLedger()
    budget = max_repairs + 1  # calls in all
    conversation = [dict(m) for m in messages]
    calls: List[ModelCall] = []
    found: List[Violation] = []
    flagged: Optional[AskOutcome] = None  # the latest valid reply that failed a check
    holding = _HoldingLedger(ledger)
    try:
        while True:
            outcome = await ask(client, conversation, purpose, context, max_repairs=max(0, budget - len(calls) - 1),
                                ledger=holding, schema_kind=schema_kind, options=options)
            calls += outcome.calls
            if outcome.fallback:
                if flagged is None:
                    holding.flush()
                    return dataclasses.replace(outcome, calls=tuple(calls)), found
                # a valid plan that failed a check beats idling: it runs as it is
                holding.flush(fallback=False)
                return dataclasses.replace(flagged, calls=tuple(calls), error=outcome.error), found
            actions = plan_of(outcome.reply)
            violation = review(outcome.reply) if actions is not None else None
            if violation is None:
                holding.flush()
                return dataclasses.replace(outcome, calls=tuple(calls)), found
            found.append(violation)
            resend = len(calls) < budget
            holding.flush(extra={**dict(outcome.calls[-1].extra or {}), "repair": violation.record(resend)})
            if not resend:
                return dataclasses.replace(outcome, calls=tuple(calls)), found
            flagged = outcome
            conversation = [dict(m) for m in outcome.transcript] + [{"role": "user", "content": violation.feedback()}]
    finally:
        holding.flush()


__all__ = ["CHECKS", "Engagement", "Violation", "aligned_faces", "ask_with_repair", "engagements", "plan_of",
           "review_plan"]
