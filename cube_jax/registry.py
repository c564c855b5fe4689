"""Agent kinds: one registry, read by everything that builds a team.

Each kind is registered once, as an :class:`AgentKind`: its name, a one-line description,
the argument it takes in a team spec (``policy:<checkpoint folder>``) and what that
argument means, the keys a team file may give it, how to build its CPU agents, and its
batched JAX form when it has one. :mod:`cube_jax.teams` parses and builds teams from this
table; ``cube-jax eval``, ``llm``, ``serve`` and the web app ask it which kinds they can
play. A new kind is one :func:`register` call.

Kinds whose agents live in a layer above this one are registered here too, with their
argument and keys, so that every command reads and checks the same team specs. The ``llm``
kind names its factory by path (:func:`imported`: ``cube_jax.llm.factory:llm_agents``,
imported when a team is built, never with this module); ``human`` has ``build=None`` and
the web app hands its factory to :func:`cube_jax.teams.team_agents` (``factories=``), as
the commands do for ``llm`` with their own settings. Either way no module below imports
one above it. ``built_by`` names the commands a kind plays in when not everywhere.

The ``policy`` kind plays a learner's checkpoint: the learners sit above this layer, so the
kind names its loader by entry point (:data:`POLICY_LOADER`, ``"module:function"``, the way
jumanji's registration names an environment) and imports it only when a checkpoint is read.

>>> [k.name for k in kinds() if k.batched is not None]
['heuristic', 'random', 'policy', 'builtin']
>>> get("llm").read_argument("qwen@http://127.0.0.1:8001/v1")
{'model': 'qwen', 'base_url': 'http://127.0.0.1:8001/v1'}
>>> names(), names(provided=["llm"])
(('heuristic', 'team', 'negotiator', 'random', 'policy', 'builtin'), ('heuristic', 'team', 'negotiator', 'random', 'policy', 'builtin', 'llm'))
"""
from __future__ import annotations

import dataclasses
import math
import pkgutil
import re
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from cube_jax.agents import (Agent, BatchedPolicy, HeuristicAgent, HeuristicPolicy, NegotiatorAgent, RandomPolicy, TeamAgent,
                             TeamBrain)
from cube_jax.agents import policy_agents
from cube_jax.core.env import CubeEnv
from cube_jax.names import REASONING_EFFORTS, REASONING_HISTORIES, REPLY_MODES, excerpt

# The longest text value a team spec or file may give (a model name, a path, a URL).
MAX_VALUE_CHARS = 1000


@dataclasses.dataclass(frozen=True)
class Member:
    """One team member: its kind, the argument written after ``kind:`` (if any), and its
    settings (``options``: ``(key, value)`` pairs, sorted, from the argument or a team file)."""

    kind: str
    arg: Optional[str] = None
    options: Tuple[Tuple[str, Any], ...] = ()

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

    def to_dict(self) -> Dict[str, Any]:
        """``{"kind": ..., <settings>}``: a team file's entry for this member."""
        return {"kind": self.kind, **dict(self.options)}

    def __str__(self) -> str:
        return self.kind if self.arg is None else f"{self.kind}:{self.arg}"


@dataclasses.dataclass(frozen=True)
class Option:
    """A key a team file may give a member: ``read(value)`` returns the checked value or
    raises ValueError saying what is wrong."""

    name: str
    meaning: str
    read: Callable[[Any], Any]


Build = Callable[[CubeEnv, Member, Sequence[int]], List[Agent]]
Batched = Callable[[CubeEnv, Member], BatchedPolicy]


@dataclasses.dataclass(frozen=True)
class AgentKind:
    """A kind of team member.

    * ``build(env, member, ids)``: the CPU agents for the agents ``ids`` (members with the same
      kind and settings are built together, so they may share a brain or a policy run); None
      when only a caller above this layer can build them, with its own factory;
    * ``built_by``: the commands the kind plays in, when not everywhere;
    * ``batched(env, member)``: the member's batched JAX policy, or None when it has none;
    * ``argument``: what ``kind:<argument>`` is (None: no argument; the description says more);
      ``argument_required``; ``read_argument(text)``: the settings the argument gives
      (ValueError when malformed);
    * ``options``: the keys a team file may give (the argument's settings among them);
    * ``check(env, member)``: raises ValueError, before any episode, when the member cannot
      play in ``env``'s world (a missing or unfitting checkpoint).
    """

    name: str
    description: str
    build: Optional[Build] = None
    batched: Optional[Batched] = None
    argument: Optional[str] = None
    argument_required: bool = False
    read_argument: Optional[Callable[[str], Dict[str, Any]]] = None
    options: Tuple[Option, ...] = ()
    built_by: Optional[str] = None
    check: Optional[Callable[[CubeEnv, Member], Any]] = None

    def option(self, name: str) -> Optional[Option]:
        return next((o for o in self.options if o.name == name), None)


_KINDS: Dict[str, AgentKind] = {}
_NAME = re.compile(r"^[a-z_]+$")


def register(kind: AgentKind) -> AgentKind:
    """Adds ``kind`` to the registry; ValueError for a malformed or already taken name."""
    if not _NAME.match(kind.name):
        raise ValueError(f"register: a kind name is lowercase letters and '_', got {kind.name!r}")
    if kind.name in _KINDS:
        raise ValueError(f"register: the kind {kind.name!r} is already registered")
    if kind.build is None and kind.built_by is None:
        raise ValueError(f"register: kind {kind.name!r} needs build, or built_by naming who builds it")
    _KINDS[kind.name] = kind
    return kind


def imported(path: str) -> Build:
    """The ``build`` of a kind whose factory lives in a layer above this one, named by its
    path ``"module:function"``: the module is imported when the first team is built."""
    def build(env: CubeEnv, member: Member, ids: Sequence[int]) -> List[Agent]:
        return pkgutil.resolve_name(path)(env, member, ids)

    build.__qualname__ = build.__name__ = path
    return build


def get(name: str) -> AgentKind:
    """The kind called ``name``; KeyError when there is none."""
    return _KINDS[name]


def kinds() -> List[AgentKind]:
    """Every registered kind, in registration order."""
    return list(_KINDS.values())


def names(provided: Iterable[str] = ()) -> Tuple[str, ...]:
    """The kinds a caller can play: those that play everywhere (no ``built_by``), and those
    named in ``provided`` (the kinds the caller brings a factory for or plays in)."""
    provided = set(provided)
    return tuple(k.name for k in _KINDS.values() if k.built_by is None or k.name in provided)


# --- checks of settings --------------------------------------------------------------------------


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {_shown(value)}")
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"at most {MAX_VALUE_CHARS} characters, got {len(value)}")
    return value.strip()


def read_base_url(value: Any) -> str:
    url = read_text(value)
    if not re.match(r"^https?://[^/\s]+\S*$", url):
        raise ValueError(f"expected a base URL such as http://127.0.0.1:8000/v1, got {_shown(url)}")
    return url


def read_env_name(value: Any) -> str:
    name = read_text(value)
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        raise ValueError(f"expected the name of an environment variable (letters, digits, '_'), got {_shown(name)}")
    return name


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {_shown(value)}")
    return float(value)


def read_temperature(value: Any) -> float:
    t = _number(value)
    if not 0.0 <= t <= 2.0:
        raise ValueError(f"must be in 0..2, got {_shown(value)}")
    return t


def read_positive_seconds(value: Any) -> float:
    t = _number(value)
    if t <= 0:
        raise ValueError(f"must be > 0 seconds, got {_shown(value)}")
    return t


def read_choice(choices: Sequence[str]) -> Callable[[Any], str]:
    """The reader of a setting that is one of ``choices``."""
    def read(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {_shown(value)}")
        return value

    return read


def read_flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {_shown(value)}")
    return value


def read_token_limit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**6:
        raise ValueError(f"expected an integer in 1..1000000, got {_shown(value)}")
    return value


# --- the kinds this layer builds -----------------------------------------------------------------


def _heuristic_agents(env: CubeEnv, member: Member, ids: Sequence[int]) -> List[Agent]:
    return [HeuristicAgent() for _ in ids]


def _negotiator_agents(env: CubeEnv, member: Member, ids: Sequence[int]) -> List[Agent]:
    return [NegotiatorAgent() for _ in ids]


def _team_agents(env: CubeEnv, member: Member, ids: Sequence[int]) -> List[Agent]:
    brain = TeamBrain()  # one assignment shared by the whole group
    return [TeamAgent(brain) for _ in ids]


def _random_policy(env: CubeEnv, member: Member) -> BatchedPolicy:
    return RandomPolicy(env.num_agents)


def _heuristic_policy(env: CubeEnv, member: Member) -> BatchedPolicy:
    return HeuristicPolicy(env)


# load_policy(path) -> a policy with for_world(env, name): supplied by the learners' package
POLICY_LOADER = "cube_jax.rl.policy:load_policy"


def checkpoint_policy(env: CubeEnv, member: Member) -> BatchedPolicy:
    """The checkpoint of a ``policy`` member as a greedy batched policy on ``env``'s world;
    ValueError (one line, no traceback needed) when there is none or it does not fit."""
    load_policy = pkgutil.resolve_name(POLICY_LOADER)
    path = Path(member.option("checkpoint"))
    try:
        return load_policy(path).for_world(env, name=f"policy:{path.name}")
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(_one_line(err)) from None
    except Exception as err:  # noqa: BLE001 - orbax and flax raise many types for a damaged checkpoint
        raise ValueError(f"cannot read the checkpoint in {str(path)!r}: {type(err).__name__}: {_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    return excerpt(" ".join(str(err).split()), 400, fit=True)


# builtin.path(name) -> the checkpoint folder of a policy shipped in the package
BUILTIN_PATH = "cube_jax.rl.builtin:path"
BUILTIN_NAMES = "cube_jax.rl.builtin:names"


def _read_builtin_argument(text: str) -> Dict[str, Any]:
    name = read_text(text)
    shipped = pkgutil.resolve_name(BUILTIN_NAMES)()
    if name not in shipped:
        raise ValueError(f"no built-in policy {_shown(name)}; the package ships {', '.join(shipped) or 'none'}")
    return {"name": name}


def builtin_policy(env: CubeEnv, member: Member) -> BatchedPolicy:
    """A policy shipped in the package (``builtin:NAME``) as a greedy batched policy on ``env``'s world."""
    name = member.option("name")
    load_policy = pkgutil.resolve_name(POLICY_LOADER)
    try:
        folder = pkgutil.resolve_name(BUILTIN_PATH)(name)
        return load_policy(folder).for_world(env, name=f"builtin:{name}")
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(_one_line(err)) from None


def _policy_agents_of(batched: Batched) -> Build:
    def build(env: CubeEnv, member: Member, ids: Sequence[int]) -> List[Agent]:
        return policy_agents(batched(env, member), len(ids), kind=member.kind)  # one shared policy run

    return build


def _read_checkpoint_argument(text: str) -> Dict[str, Any]:
    return {"checkpoint": read_text(text)}


# "model", "model@URL" or "@URL": the URL starts at the first "@" followed by a scheme.
_MODEL_AT_URL = re.compile(r"^(?P<model>.*?)(?:@(?P<url>https?://.*))?$", re.S)


def _read_llm_argument(text: str) -> Dict[str, Any]:
    match = _MODEL_AT_URL.match(text)
    model, url = match.group("model"), match.group("url")
    if url is None and "@" in model:
        raise ValueError(f"after '@' comes the server's base URL (http://host:port/v1), got {_shown(text)}")
    settings: Dict[str, Any] = {}
    if model:
        settings["model"] = read_text(model)
    if url is not None:
        settings["base_url"] = read_base_url(url)
    return settings


def read_demo_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 8:
        raise ValueError(f"expected an integer 0..8, got {_shown(value)}")
    return value


MODEL_OPTIONS = (
    Option("model", "the model name the server knows (default: --model)", read_text),
    Option("base_url", "the server's OpenAI-compatible base URL (default: --base-url or OPENAI_BASE_URL)",
           read_base_url),
    Option("api_key_env", "the environment variable holding this member's API key (default: --api-key or "
                          "OPENAI_API_KEY); the key itself is never written anywhere", read_env_name),
    Option("temperature", "sampling temperature, 0..2 (default: --temperature)", read_temperature),
    Option("max_tokens", "completion token limit per call (default: --max-tokens)", read_token_limit),
    Option("timeout", "seconds per HTTP request (default: --timeout)", read_positive_seconds),
    Option("reasoning_effort", f"what a reasoning model may spend: {', '.join(REASONING_EFFORTS)} (default: "
                               "--reasoning-effort, else not sent)", read_choice(REASONING_EFFORTS)),
    Option("reply_mode", f"how the reply is asked for: {', '.join(REPLY_MODES)} (default: --reply-mode)",
           read_choice(REPLY_MODES)),
    Option("reasoning_history", f"how past reasoning is sent back: {', '.join(REASONING_HISTORIES)} (default: "
                                "--reasoning-history)", read_choice(REASONING_HISTORIES)),
    Option("drop_reasoning", "true: the trace keeps the reasoning's length, not its text (default: "
                             "--drop-reasoning)", read_flag),
    Option("repair", "check every plan before it runs and re-prompt on a violation (default: --repair)", read_flag),
    Option("demos", "worked examples in the system prompt, 0..8 (default: --demos)", read_demo_count),
)

register(AgentKind("heuristic", "the cube paper's greedy planner (each agent plans for itself)",
                   build=_heuristic_agents, batched=_heuristic_policy))
register(AgentKind("team", "the team planner: one shared assignment of agents to blocks", build=_team_agents))
register(AgentKind("negotiator", "DR. WELL's negotiating planner: proposes and commits by the world model's "
                                 "guidebook (the heuristic's choice on ties), then plans like the heuristic",
                   build=_negotiator_agents))
register(AgentKind("random", "uniformly random primitive actions", build=_policy_agents_of(_random_policy),
                   batched=_random_policy))
register(AgentKind("policy", "a trained RL policy acting greedily, one primitive per step (the run folder of "
                             "baselines/ippo.py or mappo.py, or its checkpoint/)",
                   build=_policy_agents_of(checkpoint_policy), batched=checkpoint_policy,
                   argument="checkpoint folder",
                   argument_required=True, read_argument=_read_checkpoint_argument,
                   options=(Option("checkpoint", "the checkpoint folder", read_text),), check=checkpoint_policy))
register(AgentKind("builtin", "a trained RL policy shipped in the package, acting greedily (cube_jax/rl/builtin: "
                              "each with a card naming its benchmark entry)",
                   build=_policy_agents_of(builtin_policy), batched=builtin_policy, argument="name",
                   argument_required=True, read_argument=_read_builtin_argument,
                   options=(Option("name", "the shipped policy's name", lambda v: _read_builtin_argument(v)["name"]),),
                   check=builtin_policy))
register(AgentKind("llm", "a language model behind an OpenAI-compatible server (default model and server: "
                          "--model, --base-url)",
                   build=imported("cube_jax.llm.factory:llm_agents"),
                   argument="model[@base URL]", read_argument=_read_llm_argument,
                   options=MODEL_OPTIONS, built_by="cube-jax llm and cube-jax serve"))
register(AgentKind("human", "a person playing from the web app's page", built_by="cube-jax serve"))


__all__ = ["AgentKind", "BUILTIN_PATH", "MODEL_OPTIONS", "Member", "Option", "POLICY_LOADER", "builtin_policy",
           "checkpoint_policy", "get", "imported",
           "kinds", "names", "register"]
