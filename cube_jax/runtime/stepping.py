"""One environment step of the runtime, and the plan ends around it (LLM.md sections 2 and 5).

:func:`step_environment` turns every W into X, compiles the plans into one joint primitive
action (agents acting with primitives alone answer for themselves), steps the JAX world and
writes the ``step`` record with its ``tasks``. :func:`close_ended_plans` then sends every
agent whose plan has nothing more to emit back to R, and :func:`close_plans_at_end` writes
the last plan events when the episode ends.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from cube_jax.agents.base import Agent, Purpose, Reason, Stage
from cube_jax.agents.views import WorldView
from cube_jax.core.env import layout
from cube_jax.runtime.decisions import EpisodeState, build_context
from cube_jax.names import is_action
from cube_jax.runtime.slot import AgentSlot
from cube_jax.symbolic.executor import DONE, FAILED
from cube_jax.symbolic.vocabulary import FACE_PUSH_DIRECTION


def step_environment(es: EpisodeState, plan_view) -> Tuple[bool, bool, float]:
    """Steps the world once; returns (terminated, truncated, agent_0's reward)."""
    for slot in es.slots:
        if slot.stage == Stage.WAITING:
            es.recorder.stage(slot, Stage.EXECUTING)
    view = es.view
    before = len(es.executor.history)
    primitives = es.executor.act(es.state)
    running = {}
    for record in es.executor.history[before:]:
        es.slots[record.agent].history.append(record)
        if record.primitive is not None and record.action is not None:
            running[record.agent] = record.action
    # agents acting with primitives alone: policies, and a primitive given as a plan (a key)
    alone = [s.agent.acts_with_primitives or (s.plan is not None and s.plan.primitive) for s in es.slots]
    for i, is_alone in enumerate(alone):
        if is_alone:
            running.pop(i, None)
    for slot in es.slots:
        if slot.agent.acts_with_primitives:
            ctx = build_context(es, slot, Purpose.PLAN, plan_view(slot.index), consume=False)
            primitives[slot.index] = checked_primitive(slot, slot.agent.primitive(ctx))
    tasks = step_tasks(view, primitives, running, alone)
    for slot in es.slots:
        slot.last_task = last_task(view, slot.index, running.get(slot.index), tasks, es.recorder.t)
    es.state, ts = es.env.step(es.state, primitives)
    reward = [float(str(x)) for x in np.asarray(ts.reward, np.float32)]  # float32 values, shortest text
    delivered = [int(j) for j in np.flatnonzero(np.asarray(ts.events.block_delivered))]
    lay = layout(es.state)
    for slot in es.slots:
        slot.action = str(running[slot.index]) if slot.index in running else None
    es.recorder.write(
        "step",
        actions={s.name: int(primitives[s.index]) for s in es.slots},
        symbolic={s.name: s.action for s in es.slots},
        reward=reward,
        agents=[list(p) for p in lay["agents"]],
        blocks=[list(b) for b in lay["blocks"]],
        delivered=delivered,
        tasks=tasks,
    )
    es.recorder.t += 1
    return bool(ts.terminated), bool(ts.truncated), reward[0]


def close_ended_plans(es: EpisodeState, plan_view) -> None:
    """X -> R for every agent whose plan has nothing more to emit at the new state (or that
    drops its plan itself, ``Agent.wants_replan``)."""
    ended = es.executor.peek(es.state)
    for slot in es.slots:
        if slot.stage != Stage.EXECUTING or slot.agent.acts_with_primitives:
            continue
        status, error = ended[slot.index]
        if status not in (DONE, FAILED):
            continue
        if status == DONE:
            slot.last_status, slot.last_error = "succeeded", None
            es.recorder.plan(slot, "succeeded")
            slot.feedback.append(f"Your plan {slot.plan.spec!r} succeeded.")
        else:
            slot.last_status, slot.last_error = "failed", error
            es.recorder.plan(slot, "failed", reason=error.message if error is not None else "failed")
            slot.feedback.append(f"Your plan {slot.plan.spec!r} failed: {error}.")
        back_to_reasoning(es, slot, Reason.ENDED)
    for slot in es.slots:
        if slot.stage != Stage.EXECUTING or slot.agent.acts_with_primitives or not may_drop_plans(slot.agent):
            continue
        if slot.agent.wants_replan(build_context(es, slot, Purpose.PLAN, plan_view(slot.index), consume=False)):
            es.recorder.plan(slot, "replaced")
            back_to_reasoning(es, slot, Reason.REPLAN)


def back_to_reasoning(es: EpisodeState, slot: AgentSlot, reason: Reason) -> None:
    slot.plan, slot.plan_id, slot.action = None, None, None
    slot.reason = reason
    es.recorder.stage(slot, Stage.REASONING)


def close_plans_at_end(es: EpisodeState) -> None:
    """Plans still held at the end: those the last step completed count as succeeded or
    failed (what the executor would find next), the others as unfinished."""
    if not any(s.plan is not None for s in es.slots):
        return
    ended = es.executor.peek(es.state)
    for slot in es.slots:
        if slot.plan is None:
            continue
        status, error = ended[slot.index] if not slot.agent.acts_with_primitives else (None, None)
        if status == DONE and slot.stage == Stage.EXECUTING:
            es.recorder.plan(slot, "succeeded")
        elif status == FAILED and slot.stage == Stage.EXECUTING:
            es.recorder.plan(slot, "failed", reason=error.message if error is not None else "failed")
        else:
            es.recorder.plan(slot, "unfinished")


def outcome(es: EpisodeState) -> Dict[str, int]:
    """The ``end`` record's counts at the current state."""
    alive = np.asarray(es.state.block_alive)
    weight = np.asarray(es.state.block_weight)
    return {
        "steps": es.t,
        "blocks_delivered": int((~alive).sum()),
        "blocks_total": int(alive.size),
        "weight_delivered": int(weight[~alive].sum()),
        "weight_total": int(weight.sum()),
    }


def may_drop_plans(agent: Agent) -> bool:
    """Whether the agent's class overrides :meth:`Agent.wants_replan` (only those are asked)."""
    return type(agent).wants_replan is not Agent.wants_replan


def checked_primitive(slot: AgentSlot, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not is_action(int(value)):
        raise ValueError(f"{slot.name} ({slot.agent.kind}): primitive must be an int in 0..4, got {value!r}")
    return int(value)


def last_task(view: WorldView, agent: int, action: Any, tasks: Mapping[str, Any], t: int) -> Optional[Dict[str, Any]]:
    """The task the agent's step from ``t`` worked on, as its ``--feedback`` shows it (EmCoop's
    RQ3): the block of its symbolic action, the face it was aligned with before the step (the
    left face when none), and that face's counts in the step record's ``tasks`` (zeros when
    the record has no entry for it); ``violated`` lists the counts below the block's weight.
    None when the step worked on no live block."""
    if action is None or "block" not in action.args:
        return None
    block = int(action.args["block"])
    if block >= len(view.blocks) or not view.blocks[block].alive:
        return None
    face = view.aligned_face(agent, block) or "left"
    entry = tasks.get(f"{block}:{face}", {})
    weight = view.blocks[block].weight
    counts = {k: int(entry.get(k, 0)) for k in ("spatial", "temporal", "participation")}
    return {"t": t, "action": str(action), "block": block, "face": face, "required": weight, "counts": counts,
            "violated": [k for k, n in counts.items() if n < weight]}


def step_tasks(view: WorldView, primitives: np.ndarray, running: Mapping[int, Any], primitive_agents: Sequence[bool]):
    """The ``tasks`` of a step record (LLM.md section 5) for the step from ``view``'s state.

    ``running`` maps agent id -> the symbolic action that emitted its primitive;
    ``primitive_agents[i]`` is True for agents acting with primitives alone.
    """
    tasks = {}
    for block in view.blocks:
        if not block.alive:
            continue
        for face, fv in block.faces.items():
            spatial = set(fv.aligned)
            push = FACE_PUSH_DIRECTION[face]
            temporal = set()
            for i in range(len(primitives)):
                if int(primitives[i]) != push:
                    continue
                action = running.get(i)
                if action is not None and action.name == "push_block" and action.args["block"] == block.id:
                    temporal.add(i)
                elif primitive_agents[i] and i in spatial:
                    temporal.add(i)
            if spatial or temporal:
                tasks[f"{block.id}:{face}"] = {
                    "required": block.weight,
                    "spatial": len(spatial),
                    "temporal": len(temporal),
                    "participation": len(spatial),
                    "joint": len(spatial & temporal),
                }
    return tasks
