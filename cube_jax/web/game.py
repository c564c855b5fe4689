"""The live side of the browser app: one episode at a time, its viewers and its people.

A :class:`Hub` holds the world, the team and the run folder. It plays episodes with the
CPU episode loop (:class:`~cube_jax.runtime.Episode`), one after the other (seed,
seed + 1, ... on the page's "new episode"), and:

- forwards every trace record, as it is written, to every connected page
  (``Episode(on_record=...)``), and keeps them for pages that connect later;
- paces the steps (``Episode(before_step=...)``, a :class:`Pacer`): paused, one step at a
  time, or running at a chosen number of steps per second;
- seats people at the team's ``human`` agents (:mod:`cube_jax.web.human`) and routes
  their inputs to them; a person who leaves ends the episode as truncated, with the reason;
- writes each episode's trace into the run folder (``episode-<seed>.jsonl``), and after
  each episode its timeline picture and the folder's ``metrics.json``, as ``cube-jax llm``
  does, so ``cube-jax report`` reads the folder.

Everything runs in the server's event loop; the methods called for a page's message
never raise on bad input (they answer with an error instead).
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional


from cube_jax.core.env import CubeEnv, layout
from cube_jax.runtime import DEFAULT_DIRECTIVE_TIMEOUT, DEFAULT_MAX_PHASES, Episode, EpisodeResult, Limits
from cube_jax.runtime.topologies import make_topology
from cube_jax.names import agent_name
from cube_jax import registry
from cube_jax.teams import Member, parse_team, team_agents
from cube_jax.web import protocol
from cube_jax.web.human import HumanAgent, human_factory, turn_info
from cube_jax.web.pacer import DEFAULT_SPEED, Pacer
from cube_jax.web.seats import Client, Seats

logger = logging.getLogger(__name__)

# Outgoing messages a slow page may have queued before it is dropped.
MAX_QUEUED = 20_000


@dataclasses.dataclass
class Settings:
    """What the served episodes are: the world (``make`` keywords), the team spec, the
    topology, the first seed, the run folder, the limits and the pace."""

    world: Dict[str, Any]
    team: str = "heuristic"
    topology: str = "individual"
    budget: Optional[int] = None
    max_phases: int = DEFAULT_MAX_PHASES
    directive_timeout: float = DEFAULT_DIRECTIVE_TIMEOUT
    seed: int = 0
    out: Path = Path("runs/serve")
    limits: Limits = dataclasses.field(default_factory=Limits)
    speed: Optional[float] = DEFAULT_SPEED
    paused: bool = False
    timelines: bool = True
    # extra agent kinds (``llm``): kind -> team_agents factory
    factories: Mapping[str, Callable] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Game:
    """One episode as the hub plays it."""

    id: int
    seed: int
    episode: Episode
    agents: List[Any]
    trace: Path
    pacer: Pacer
    records: List[dict] = dataclasses.field(default_factory=list)
    task: Optional[asyncio.Task] = None
    result: Optional[EpisodeResult] = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def humans(self) -> Dict[int, HumanAgent]:
        return {i: a for i, a in enumerate(self.agents) if isinstance(a, HumanAgent)}


class Hub:
    """The app's state: the world, the current game, the connected pages and the seats."""

    def __init__(self, env: CubeEnv, settings: Settings):
        self.env = env
        self.settings = settings
        kinds = registry.names(provided=("human", *settings.factories))
        self.members: List[Member] = parse_team(settings.team, env.num_agents, kinds=kinds)
        self.topology = make_topology(settings.topology, env.num_agents, settings.budget,
                                      directive_timeout=settings.directive_timeout)
        self.out = Path(settings.out)
        self.clients: Dict[int, Client] = {}
        self.seats = Seats(self)  # who holds each human agent's seat; the episode's turn listener
        self.game: Optional[Game] = None
        self.finished: List[EpisodeResult] = []
        self._client_ids = itertools.count(1)
        self._game_ids = itertools.count(1)
        self._next_seed = settings.seed
        self._speed = settings.speed
        self._paused = settings.paused
        self._outputs: Optional[asyncio.Task] = None

    # -- games ------------------------------------------------------------------------------
    def _trace_path(self, seed: int) -> Path:
        path = self.out / f"episode-{seed:06d}.jsonl"
        for k in itertools.count(1):
            if not path.exists():
                return path
            path = self.out / f"episode-{seed:06d}-{k}.jsonl"
        raise AssertionError("unreachable")

    def start_game(self) -> Game:
        """Starts the next episode (the current one must have ended)."""
        if self.game is not None and self.game.running:
            raise RuntimeError("an episode is still running")
        seed = self._next_seed
        self._next_seed += 1
        factories = {"human": human_factory(self.seats), **self.settings.factories}
        agents = team_agents(self.env, self.members, factories=factories)
        pacer = Pacer(self._speed, self._paused)
        trace = self._trace_path(seed)
        game_id = next(self._game_ids)
        episode = Episode(self.env, agents, seed=seed, topology=self.topology, trace=trace,
                          limits=self.settings.limits, max_phases=self.settings.max_phases,
                          env_kwargs=self.settings.world,
                          on_record=lambda record, _id=game_id: self._on_record(_id, record),
                          before_step=pacer.before_step)
        game = Game(game_id, seed, episode, agents, trace, pacer)
        self.game = game
        game.task = asyncio.create_task(self._play(game), name=f"cube-jax episode {seed}")
        self.broadcast({"type": "game", "game": self.game_info(), "controls": self.controls()})
        return game

    async def _play(self, game: Game) -> None:
        try:
            game.result = await game.episode.run()
        except Exception as err:  # noqa: BLE001 - a broken episode must not take the server with it
            logger.exception("episode %d failed", game.seed)
            self.broadcast({"type": "error", "error": f"the episode stopped: {type(err).__name__}: {str(err)[:200]}"})
        finally:
            for agent in game.agents:
                try:
                    await agent.aclose()
                except Exception:  # noqa: BLE001
                    logger.exception("closing an agent failed")
        if game.result is not None:
            self.finished.append(game.result)
            self.broadcast({"type": "ended", "game": game.id, "result": game.result.to_dict(),
                            "trace": game.trace.name})
            if self.game is game:
                self._outputs = asyncio.create_task(self._write_outputs(game))

    async def _write_outputs(self, game: Game) -> None:
        """The episode's timeline and the folder's metrics.json (in a thread: matplotlib is slow)."""
        def write():
            from cube_jax.analytics import render_timeline, write_metrics_json

            if self.settings.timelines:
                try:
                    render_timeline(game.records, game.trace.with_suffix(".png"))
                except Exception as err:  # noqa: BLE001 - a picture must not cost the metrics
                    logger.warning("timeline of %s not drawn: %s", game.trace, err)
            report = write_metrics_json([self.out], self.out / "metrics.json")
            for failure in report.failures:
                logger.warning("left out of the metrics: %s", failure)

        try:
            await asyncio.to_thread(write)
        except Exception as err:  # noqa: BLE001
            logger.warning("outputs of %s not written: %s", game.trace, err)

    async def stop_game(self, reason: str) -> None:
        """Ends the running episode as truncated with ``reason`` and waits for its end."""
        game = self.game
        if game is None or not game.running:
            return
        game.pacer.end(reason)
        for agent in game.humans().values():
            agent.leave(reason)
        await asyncio.wait({game.task})

    async def new_game(self) -> Game:
        await self.stop_game("stopped from the page to start a new episode")
        return self.start_game()

    async def aclose(self) -> None:
        """Stops the running episode (its trace ends with the reason) and waits for the outputs."""
        await self.stop_game("the server stopped")
        if self._outputs is not None:
            await asyncio.wait({self._outputs})

    def _on_record(self, game_id: int, record: dict) -> None:
        game = self.game
        if game is None or game.id != game_id:
            return
        game.records.append(record)
        self.broadcast({"type": "record", "game": game_id, "record": record})

    # -- what pages see -----------------------------------------------------------------------
    def game_info(self) -> Dict[str, Any]:
        game = self.game
        agents = {}
        for i, m in enumerate(self.members):
            agent = game.agents[i] if game is not None else None
            described = agent.describe() if agent is not None else {"kind": m.kind, "model": m.arg}
            agents[agent_name(i)] = {"kind": described.get("kind"), "model": described.get("model")}
        return {
            "id": None if game is None else game.id,
            "seed": None if game is None else game.seed,
            "trace": None if game is None else game.trace.name,
            "env": self.settings.world,
            "grid_size": int(self.env.grid_size),
            "max_steps": int(min(self.env.max_steps, self.settings.limits.max_steps or self.env.max_steps)),
            "topology": self.topology.name,
            "team": self.settings.team,
            "agents": agents,
            "humans": [agent_name(i) for i in self.seats.human_ids],
            "running": bool(game is not None and game.running),
        }

    def controls(self) -> Dict[str, Any]:
        game = self.game
        if game is not None:
            return game.pacer.state()
        return {"paused": self._paused, "speed": "max" if self._speed is None else self._speed}

    def open_turns(self) -> List[Dict[str, Any]]:
        game = self.game
        if game is None:
            return []
        return [turn_info(a.turn) for a in game.humans().values() if a.turn is not None]

    def welcome(self, client: Client) -> Dict[str, Any]:
        game = self.game
        return {"type": "welcome", "you": client.id, "game": self.game_info(), "controls": self.controls(),
                "records": [] if game is None else game.records, "seats": self.seats.info(),
                "turns": self.open_turns(),
                "result": None if game is None or game.result is None else game.result.to_dict()}

    def state(self) -> Dict[str, Any]:
        """The server's view of the live episode (for ``GET /api/state``)."""
        game = self.game
        episode = game.episode if game is not None else None
        world = layout(episode.state) if episode is not None and episode.state is not None else None
        stages = ({s.name: s.stage.value for s in episode.slots} if episode is not None else {})
        plans = ({s.name: (None if s.plan is None else str(s.plan)) for s in episode.slots} if episode is not None else {})
        return {"game": self.game_info(), "controls": self.controls(), "t": None if episode is None else episode.t,
                "layout": world, "stages": stages, "plans": plans, "seats": self.seats.info(),
                "turns": self.open_turns(), "clients": len(self.clients),
                "result": None if game is None or game.result is None else game.result.to_dict(),
                "finished": [r.to_dict() for r in self.finished]}

    # -- pages ----------------------------------------------------------------------------------
    def connect(self, send: Callable[[str], None]) -> Client:
        client = Client(next(self._client_ids), send)
        self.clients[client.id] = client
        self.send(client, self.welcome(client))
        return client

    async def disconnect(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        if client.seats:
            await self.seats.release(client, sorted(client.seats), left=True)

    def send(self, client: Client, message: Dict[str, Any]) -> None:
        client.send(json.dumps(message, allow_nan=False))

    def broadcast(self, message: Dict[str, Any]) -> None:
        text = json.dumps(message, allow_nan=False)
        for client in list(self.clients.values()):
            client.send(text)

    def reply(self, client: Client, request, kind: str, **fields) -> None:
        self.send(client, {"type": kind, "id": getattr(request, "id", None), **fields})

    async def handle(self, client: Client, text) -> None:
        """One message from a page: checked, then acted on; every problem gets an error reply."""
        message, error = protocol.parse_client_message(text)
        if error is not None:
            self.send(client, {"type": "error", "id": None, "error": error})
            return
        try:
            await self._dispatch(client, message)
        except Exception as err:  # noqa: BLE001 - no message may take the server down
            logger.exception("handling %s failed", type(message).__name__)
            self.reply(client, message, "error", error=f"the server could not handle it: {type(err).__name__}")

    async def _dispatch(self, client: Client, message) -> None:
        if isinstance(message, protocol.Ping):
            self.reply(client, message, "pong", t=time.time())
        elif isinstance(message, protocol.Hello):
            self.send(client, {**self.welcome(client), "id": message.id})
        elif isinstance(message, (protocol.Pause, protocol.RunOn, protocol.Step, protocol.SetSpeed)):
            self._control(message)
            self.broadcast({"type": "controls", "controls": self.controls()})
        elif isinstance(message, protocol.NewEpisode):
            await self.new_game()
        elif isinstance(message, protocol.Join):
            self.seats.join(client, message)
        elif isinstance(message, protocol.Release):
            await self.seats.give_back(client, message)
        elif isinstance(message, protocol.AGENT_INPUTS):
            self.seats.agent_input(client, message)

    def _control(self, message) -> None:
        if isinstance(message, protocol.SetSpeed):
            self._speed = None if message.speed == "max" else float(message.speed)
        elif isinstance(message, protocol.RunOn) and message.speed is not None:
            self._speed = None if message.speed == "max" else float(message.speed)
        if isinstance(message, protocol.Pause) or isinstance(message, protocol.Step):
            self._paused = True
        elif isinstance(message, protocol.RunOn):
            self._paused = False
        game = self.game
        if game is None:
            return
        if isinstance(message, protocol.Pause):
            game.pacer.pause()
        elif isinstance(message, protocol.RunOn):
            game.pacer.run(message.speed)
        elif isinstance(message, protocol.Step):
            game.pacer.step()
        else:
            game.pacer.set_speed(message.speed)


__all__ = ["Client", "Game", "Hub", "Pacer", "Settings"]
