"""Playing a traced episode in tests, picking records, and comparing traces as the agents
lived them (the runtime writes records in time order)."""
from __future__ import annotations

import collections
import io
import json

from cube_jax.runtime import run_episode
from cube_jax.trace import TraceWriter, validate_trace


def play(env, agents, seed=0, **options):
    """Plays one episode into an in-memory trace; (result, records), the trace validated."""
    buffer = io.StringIO()
    result = run_episode(env, agents, seed=seed, trace=TraceWriter(buffer), **options)
    text = buffer.getvalue()
    assert validate_trace(io.StringIO(text)) is None, validate_trace(io.StringIO(text))
    return result, [json.loads(line) for line in text.splitlines()]


def of(records, record_type, **match):
    """The records of ``record_type`` whose keys equal ``match``."""
    return [r for r in records if r["type"] == record_type and all(r.get(k) == v for k, v in match.items())]


def per_agent(records, drop=("wall",)):
    """A trace as each agent lived it: every agent's own records in order, and the steps.

    Records of different agents that decide at the same time are written in the order their
    decisions complete, so they interleave differently from run to run against a real
    server; plan and message ids follow that order, so they are named per agent here.
    """
    names, counts, out = {}, collections.Counter(), {"steps": []}
    for record in records:
        r = {k: v for k, v in record.items() if k not in drop}
        owner = r.get("agent") or r.get("sender")
        key = {"plan": "plan_id", "message": "id"}.get(r["type"])
        if key is not None:
            if (key, r[key]) not in names:
                names[(key, r[key])] = f"{owner}#{counts[(key, owner)]}"
                counts[(key, owner)] += 1
            r[key] = names[(key, r[key])]
        (out.setdefault(owner, []) if owner else out["steps"]).append(r)
    return out
