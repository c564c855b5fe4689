"""Teams: one member kind per agent, mixed freely, from a spec or a team file.

A team spec is a comma-separated list with one entry per agent (a single entry applies to
every agent)::

    heuristic,heuristic,policy:runs/ippo-easy-20250101-000000
    team
    llm:qwen@http://127.0.0.1:8001/v1,heuristic,llm:llama@http://127.0.0.1:8002/v1

An entry is ``kind`` or ``kind:argument``; the kinds, their arguments and what they mean are
the registry's (:mod:`cube_jax.registry`). A team file (YAML or JSON) lists the same entries,
each a spec entry or a mapping of ``kind`` and that kind's settings::

    team:
      - {kind: llm, model: qwen, base_url: "http://127.0.0.1:8001/v1", api_key_env: QWEN_KEY,
         temperature: 0.2, max_tokens: 256, timeout: 30}
      - heuristic
      - llm:llama@http://127.0.0.1:8002/v1

A team is *batched* when every member has a batched JAX form (``heuristic``, ``random``,
``policy``): then :func:`batched_team` gives one :class:`~cube_jax.agents.TeamPolicy` for the
vmapped rollout. Any team can be played by the CPU episode loop: :func:`team_agents` gives
one :class:`~cube_jax.agents.Agent` per agent; members of the same kind and settings share
one brain or one policy run.

>>> import cube_jax
>>> env = cube_jax.make("hard")
>>> members = parse_team("heuristic,heuristic,random", env.num_agents)
>>> is_batched(members), [m.kind for m in team_agents(env, members)]
(True, ['heuristic', 'heuristic', 'random'])
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from cube_jax import registry
from cube_jax.agents import Agent, TeamPolicy
from cube_jax.core.env import CubeEnv
from cube_jax.registry import Member

# What an entry may look like: a kind, optionally ":" and an argument (a model name or a path).
_ENTRY = re.compile(r"^([a-z_]+)(?::(.+))?$", re.S)
MAX_SPEC_CHARS = 4000
MAX_TEAM_FILE_BYTES = 1_000_000

AgentFactory = Callable[[CubeEnv, Member, Sequence[int]], List[Agent]]


class TeamSpecError(ValueError):
    """A team spec or file that cannot be read or built; the message names the entry."""


def _shown(entry: Any) -> str:
    text = entry if isinstance(entry, str) else json.dumps(entry, default=str)
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _check_kind(kind: str, position: int, kinds: Sequence[str]) -> registry.AgentKind:
    try:
        known = registry.get(kind)
    except KeyError:
        raise TeamSpecError(f"team: entry {position} has unknown kind {kind!r}; kinds are {', '.join(kinds)}") from None
    if kind not in kinds:
        raise TeamSpecError(f"team: entry {position}: kind {kind!r} plays only in {known.built_by}; kinds here are "
                            f"{', '.join(kinds)}")
    return known


def _member(kind: registry.AgentKind, arg: Optional[str], settings: Mapping[str, Any], position: int) -> Member:
    if kind.argument_required and not settings:
        raise TeamSpecError(f"team: entry {position} needs a {kind.argument}: {kind.name}:<{kind.argument}>")
    return Member(kind.name, arg, tuple(sorted(settings.items())))


def parse_entry(entry: str, position: int, kinds: Sequence[str]) -> Member:
    """The member for one spec entry (``kind`` or ``kind:argument``)."""
    entry = entry.strip()
    m = _ENTRY.match(entry)
    if not m:
        raise TeamSpecError(f"team: entry {position} ({_shown(entry)}) is not kind or kind:argument")
    kind = _check_kind(m.group(1), position, kinds)
    arg = m.group(2)
    if arg is not None and kind.read_argument is None:
        raise TeamSpecError(f"team: entry {position}: {kind.name} takes no argument, got {_shown(entry)}")
    settings: Dict[str, Any] = {}
    if arg is not None:
        try:
            settings = kind.read_argument(arg)
        except ValueError as err:
            raise TeamSpecError(f"team: entry {position} ({_shown(entry)}): {err}") from None
    return _member(kind, arg, settings, position)


def _mapping_entry(entry: Mapping[str, Any], position: int, kinds: Sequence[str]) -> Member:
    if not isinstance(entry.get("kind"), str):
        raise TeamSpecError(f"team: entry {position} ({_shown(entry)}) needs \"kind\": one of {', '.join(kinds)}")
    kind = _check_kind(entry["kind"], position, kinds)
    settings: Dict[str, Any] = {}
    for key, value in entry.items():
        if key == "kind":
            continue
        option = kind.option(key) if isinstance(key, str) else None
        if option is None:
            keys = ", ".join(o.name for o in kind.options) or "none"
            raise TeamSpecError(f"team: entry {position}: {kind.name} has no setting {key!r}; its settings: {keys}")
        try:
            settings[key] = option.read(value)
        except ValueError as err:
            raise TeamSpecError(f"team: entry {position}: {key}: {err}") from None
    return _member(kind, None, settings, position)


def _one_per_agent(members: List[Member], num_agents: int) -> List[Member]:
    if len(members) == 1:
        members = members * num_agents
    if len(members) != num_agents:
        raise TeamSpecError(f"team: {len(members)} members for a world of {num_agents} agents; give one per agent "
                            "(or a single kind for all)")
    return members


def parse_team(text: str, num_agents: int, kinds: Optional[Sequence[str]] = None) -> List[Member]:
    """One :class:`Member` per agent from the spec ``text``; :class:`TeamSpecError` saying which
    entry is wrong. ``kinds``: the kinds allowed (default: every kind built without help,
    :func:`cube_jax.registry.names`)."""
    kinds = registry.names() if kinds is None else tuple(kinds)
    if not isinstance(text, str) or not text.strip():
        raise TeamSpecError("team: empty spec; give one kind per agent, e.g. heuristic,heuristic,random")
    if len(text) > MAX_SPEC_CHARS:
        raise TeamSpecError(f"team: the spec is {len(text)} characters long; at most {MAX_SPEC_CHARS}")
    members = [parse_entry(entry, position, kinds) for position, entry in enumerate(text.split(","))]
    return _one_per_agent(members, num_agents)


def team_from_entries(entries: Any, num_agents: int, kinds: Optional[Sequence[str]] = None) -> List[Member]:
    """One :class:`Member` per agent from a team file's content: a list of entries, or
    ``{"team": [...]}``; each entry a spec entry or a mapping with ``kind`` and its settings."""
    kinds = registry.names() if kinds is None else tuple(kinds)
    if isinstance(entries, Mapping):
        if set(entries) != {"team"}:
            raise TeamSpecError(f"team: expected a list of members or {{\"team\": [...]}}, got the keys "
                                f"{', '.join(map(str, entries))[:100]}")
        entries = entries["team"]
    if not isinstance(entries, list) or not entries:
        raise TeamSpecError(f"team: expected a non-empty list of members, got {_shown(entries)}")
    members = []
    for position, entry in enumerate(entries):
        if isinstance(entry, str):
            members.append(parse_entry(entry, position, kinds))
        elif isinstance(entry, Mapping):
            members.append(_mapping_entry(entry, position, kinds))
        else:
            raise TeamSpecError(f"team: entry {position} ({_shown(entry)}) is neither kind[:argument] nor a mapping "
                                "with \"kind\"")
    return _one_per_agent(members, num_agents)


def read_team_file(path: Union[str, Path], num_agents: int, kinds: Optional[Sequence[str]] = None) -> List[Member]:
    """:func:`team_from_entries` of the YAML or JSON file at ``path``; TeamSpecError naming the
    file and the entry."""
    import yaml

    path = Path(path)
    try:
        if path.stat().st_size > MAX_TEAM_FILE_BYTES:
            raise TeamSpecError(f"{path}: larger than {MAX_TEAM_FILE_BYTES} bytes")
        content = yaml.safe_load(path.read_text(encoding="utf-8"))  # YAML reads JSON too
    except OSError as err:
        raise TeamSpecError(f"{path}: cannot read it: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise TeamSpecError(f"{path}: not YAML or JSON: {' '.join(str(err).split())[:200]}") from None
    try:
        return team_from_entries(content, num_agents, kinds)
    except TeamSpecError as err:
        raise TeamSpecError(f"{path}: {err}") from None


def is_batched(members: Sequence[Member]) -> bool:
    """Whether every member has a batched JAX form."""
    return all(registry.get(m.kind).batched is not None for m in members)


def check_team(env: CubeEnv, members: Sequence[Member]) -> None:
    """Raises TeamSpecError naming the first entry that cannot play in ``env``'s world (a
    missing or unfitting checkpoint), so that a command fails before any episode."""
    for member, ids in _groups(members).items():
        check = registry.get(member.kind).check
        if check is not None:
            try:
                check(env, member)
            except ValueError as err:
                raise TeamSpecError(f"team: entry {ids[0]} ({member}): {err}") from None


def _groups(members: Sequence[Member]) -> Dict[Member, List[int]]:
    """The agent ids of each distinct member, in order of first appearance."""
    groups: Dict[Member, List[int]] = {}
    for i, m in enumerate(members):
        groups.setdefault(m, []).append(i)
    return groups


def batched_team(env: CubeEnv, members: Sequence[Member]) -> TeamPolicy:
    """One batched policy for a team whose members all have a batched form; TeamSpecError
    naming the entry whose policy cannot be built (a missing or unfitting checkpoint)."""
    groups = _groups(members)
    built = []
    for member, ids in groups.items():
        kind = registry.get(member.kind)
        if kind.batched is None:
            batched = ", ".join(k.name for k in registry.kinds() if k.batched is not None)
            raise TeamSpecError(f"team: entry {ids[0]} ({member}) has no batched form; batched kinds are {batched}")
        try:
            built.append(kind.batched(env, member))
        except ValueError as err:
            raise TeamSpecError(f"team: entry {ids[0]} ({member}): {err}") from None
    if len(built) == 1:
        return built[0]
    distinct = list(groups)
    return TeamPolicy(tuple(built), tuple(distinct.index(m) for m in members))


def team_agents(env: CubeEnv, members: Sequence[Member], factories: Optional[Mapping[str, AgentFactory]] = None) -> List[Agent]:
    """One :class:`~cube_jax.agents.Agent` per agent for the CPU episode loop.

    Members with the same kind and settings are built together (one call of their kind's
    factory with all their ids), so they share one brain (``team``) or one policy run
    (``random``, ``policy``). ``factories`` gives ``factory(env, member, agent_ids) -> agents``
    for the kinds built above this layer (``llm``, ``human``), and may replace any other.
    TeamSpecError names the entry that cannot be built.
    """
    factories = dict(factories or {})
    out: List[Optional[Agent]] = [None] * len(members)
    for member, ids in _groups(members).items():
        kind = registry.get(member.kind)
        build = factories.get(member.kind, kind.build)
        if build is None:
            raise TeamSpecError(f"team: entry {ids[0]}: {member.kind} agents are built by {kind.built_by}, not here")
        try:
            agents = build(env, member, ids)
        except ValueError as err:
            raise TeamSpecError(f"team: entry {ids[0]} ({member}): {err}") from None
        if len(agents) != len(ids):
            raise RuntimeError(f"team: the {member.kind} factory built {len(agents)} agents for {len(ids)}")
        for i, agent in zip(ids, agents):
            out[i] = agent
    return out  # type: ignore[return-value]


def load_checkpoint_policy(path: str, env: CubeEnv):
    """The checkpoint at ``path`` as a batched policy for ``env`` (greedy); TeamSpecError when
    there is none or its observations do not fit this world."""
    try:
        return registry.checkpoint_policy(env, Member("policy", path, (("checkpoint", path),)))
    except ValueError as err:
        raise TeamSpecError(f"team: policy:{path}: {err}") from None


__all__ = ["Member", "TeamSpecError", "batched_team", "check_team", "is_batched", "load_checkpoint_policy", "parse_entry",
           "parse_team", "read_team_file", "team_agents", "team_from_entries"]
