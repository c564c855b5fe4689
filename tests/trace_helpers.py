"""Comparing traces as the agents lived them (the runtime writes records in time order)."""
from __future__ import annotations

import collections


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
