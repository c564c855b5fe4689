"""CUBE in the browser: a live view of episodes, replays of traces, and play (docs/browser.md).

- :mod:`~cube_jax.web.human`: :class:`HumanAgent`, the ``human`` agent kind: a person's
  keys, typed plans and messages as decisions of the episode loop.
- :mod:`~cube_jax.web.protocol`: what a page may send over the WebSocket, checked strictly.
- :mod:`~cube_jax.web.game`: :class:`Hub`, one episode at a time with its viewers;
  :class:`Settings`, what the served episodes are.
- :mod:`~cube_jax.web.seats`: :class:`Seats`, who holds each human agent;
  :mod:`~cube_jax.web.pacer`: :class:`Pacer`, the pace of an episode.
- :mod:`~cube_jax.web.replay`: the traces the replay view may open.
- :mod:`~cube_jax.web.server`: the Starlette app (``create_app``) and how it is served;
  it needs the ``web`` extra (starlette, uvicorn, websockets) and is imported on demand.

``cube-jax serve`` (:mod:`cube_jax.cli.serve`) is the command line.
"""
from cube_jax.web.game import Hub, Settings
from cube_jax.web.pacer import Pacer
from cube_jax.web.human import HumanAgent, TurnListener, human_factory
from cube_jax.web.protocol import parse_client_message

__all__ = ["HumanAgent", "Hub", "Pacer", "Settings", "TurnListener", "human_factory", "parse_client_message"]
