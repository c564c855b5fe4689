"""Teams from a command-line spec: one member kind per agent, mixed freely.

A team spec is a comma-separated list with one entry per agent (a single entry applies to
every agent)::

    heuristic,heuristic,policy:runs/ippo-easy-20250101-000000
    team
    llm:qwen2.5-7b,heuristic,llm:llama3.1-8b

Kinds: ``heuristic`` (the cube paper's planner), ``team`` (the team planner), ``random``,
``policy:<checkpoint folder>`` (a trained policy, greedy), and whatever kinds a caller
registers (the language-agent CLI adds ``llm[:<model>]``, the browser adds ``human``).

A team is *batched* when every member has a batched JAX form (``heuristic``, ``random``,
``policy``): then :func:`batched_team` gives one :class:`~cube_jax.agents.TeamPolicy` for the
vmapped rollout. Any team can be played by the CPU episode loop: :func:`team_agents` gives
one :class:`~cube_jax.agents.Agent` per agent; members of the same kind and argument share
one brain or one policy run.

>>> import cube_jax
>>> env = cube_jax.make("hard")
>>> members = parse_team("heuristic,heuristic,random", env.num_agents)
>>> is_batched(members), [m.kind for m in team_agents(env, members)]
(True, ['heuristic', 'heuristic', 'random'])
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence


from cube_jax.agents import Agent, HeuristicPolicy, RandomPolicy, TeamPolicy, heuristic_team, policy_agents
from cube_jax.agents.planners import TeamAgent, TeamBrain
from cube_jax.core.env import CubeEnv

BATCHED_KINDS = ("heuristic", "random", "policy")
BUILTIN_KINDS = ("heuristic", "team", "random", "policy")
# What an entry may look like: a kind, optionally ":" and an argument (a model name or a path).
_ENTRY = re.compile(r"^([a-z_]+)(?::(.+))?$")
MAX_SPEC_CHARS = 4000


class TeamSpecError(ValueError):
    """A team spec that cannot be read; the message names the entry."""


@dataclasses.dataclass(frozen=True)
class Member:
    """One team member: its kind and optional argument (``policy:<path>``, ``llm:<model>``)."""

    kind: str
    arg: Optional[str] = None

    def __str__(self) -> str:
        return self.kind if self.arg is None else f"{self.kind}:{self.arg}"


def parse_team(text: str, num_agents: int, kinds: Sequence[str] = BUILTIN_KINDS) -> List[Member]:
    """One :class:`Member` per agent from ``text``; :class:`TeamSpecError` saying which entry is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise TeamSpecError("team: empty spec; give one kind per agent, e.g. heuristic,heuristic,random")
    if len(text) > MAX_SPEC_CHARS:
        raise TeamSpecError(f"team: the spec is {len(text)} characters long; at most {MAX_SPEC_CHARS}")
    entries = [e.strip() for e in text.split(",")]
    members = []
    for position, entry in enumerate(entries):
        m = _ENTRY.match(entry)
        shown = entry if len(entry) <= 60 else entry[:60] + "..."
        if not m:
            raise TeamSpecError(f"team: entry {position} ({shown!r}) is not kind or kind:argument")
        kind, arg = m.group(1), m.group(2)
        if kind not in kinds:
            raise TeamSpecError(f"team: entry {position} has unknown kind {kind!r}; kinds are {', '.join(kinds)}")
        if kind == "policy" and not arg:
            raise TeamSpecError(f"team: entry {position} needs a checkpoint folder: policy:<folder>")
        if kind in ("heuristic", "team", "random") and arg:
            raise TeamSpecError(f"team: entry {position}: {kind} takes no argument, got {shown!r}")
        members.append(Member(kind, arg))
    if len(members) == 1:
        members = members * num_agents
    if len(members) != num_agents:
        raise TeamSpecError(f"team: {len(members)} members for a world of {num_agents} agents; give one per agent "
                            "(or a single kind for all)")
    return members


def is_batched(members: Sequence[Member]) -> bool:
    """Whether every member has a batched JAX form."""
    return all(m.kind in BATCHED_KINDS for m in members)


def load_checkpoint_policy(path: str, env: CubeEnv):
    """The checkpoint at ``path`` as a batched policy for ``env`` (greedy); TeamSpecError when
    there is none or its observations do not fit this world."""
    from cube_jax.rl.policy import load_policy

    try:
        return load_policy(Path(path)).for_world(env, name=f"policy:{Path(path).name}")
    except (FileNotFoundError, ValueError) as err:
        raise TeamSpecError(f"team: policy:{path}: {err}") from None


def _batched_member(env: CubeEnv, member: Member, policies: Dict[str, object]):
    if member.kind == "heuristic":
        return HeuristicPolicy(env)
    if member.kind == "random":
        return RandomPolicy(env.num_agents)
    if member.kind == "policy":
        if member.arg not in policies:
            policies[member.arg] = load_checkpoint_policy(member.arg, env)
        return policies[member.arg]
    raise TeamSpecError(f"team: {member} has no batched form; batched kinds are {', '.join(BATCHED_KINDS)}")


def batched_team(env: CubeEnv, members: Sequence[Member]) -> TeamPolicy:
    """One batched policy for a team whose members all have a batched form."""
    distinct: List[Member] = []
    for m in members:
        if m not in distinct:
            distinct.append(m)
    policies: Dict[str, object] = {}
    built = [_batched_member(env, m, policies) for m in distinct]
    if len(built) == 1:
        return built[0]
    return TeamPolicy(tuple(built), tuple(distinct.index(m) for m in members))


AgentFactory = Callable[[CubeEnv, Member, Sequence[int]], List[Agent]]


def team_agents(env: CubeEnv, members: Sequence[Member], factories: Optional[Dict[str, AgentFactory]] = None) -> List[Agent]:
    """One :class:`~cube_jax.agents.Agent` per agent for the CPU episode loop.

    ``factories`` maps extra kinds to ``factory(env, member, agent_ids) -> agents`` (one per
    id); members with the same kind and argument are built together, so they share one
    brain (``team``) or one policy run (``random``, ``policy``).
    """
    factories = dict(factories or {})
    groups: Dict[Member, List[int]] = {}
    for i, m in enumerate(members):
        groups.setdefault(m, []).append(i)
    out: List[Optional[Agent]] = [None] * len(members)
    policies: Dict[str, object] = {}
    for member, ids in groups.items():
        if member.kind in factories:
            agents = factories[member.kind](env, member, ids)
        elif member.kind == "heuristic":
            agents = heuristic_team(env)[: len(ids)]
        elif member.kind == "team":
            brain = TeamBrain()
            agents = [TeamAgent(brain) for _ in ids]
        elif member.kind in ("random", "policy"):
            agents = policy_agents(_batched_member(env, member, policies), len(ids), kind=member.kind)
        else:
            raise TeamSpecError(f"team: no way to build a {member.kind!r} agent here")
        if len(agents) != len(ids):
            raise RuntimeError(f"team: the {member.kind} factory built {len(agents)} agents for {len(ids)}")
        for i, agent in zip(ids, agents):
            out[i] = agent
    return out  # type: ignore[return-value]


__all__ = ["BATCHED_KINDS", "Member", "TeamSpecError", "batched_team", "is_batched",
           "load_checkpoint_policy", "parse_team", "team_agents"]
