"""The HTTP and WebSocket server of the browser app (Starlette, served by uvicorn).

Routes:

- ``GET /``: the page (``static/index.html``); ``GET /static/<file>``: its script and
  style, from the package's ``static`` folder only;
- ``GET /api/state``: the live episode as the server sees it (positions, stages, plans,
  seats, open turns, the controls, finished episodes);
- ``GET /api/traces``: the traces that may be replayed (the run folder's and those given at
  start); ``GET /api/trace?name=N``: one of them for the replay view (records and grid
  side); ``GET /api/timeline?name=N``: its timeline picture (PNG);
- ``POST /api/replay``: a trace sent by the page (a file the person opened), checked and
  returned for the replay view with its timeline as a data URL;
- ``WS /ws``: the live protocol (docs/browser.md): the server pushes every trace record as
  it happens, open turns and control changes; the page sends controls and a person's
  inputs (:mod:`cube_jax.web.protocol`).

The app answers only pages of its own origin (a WebSocket whose ``Origin`` is another site
is refused, so a web page elsewhere cannot drive a local game) and, unless it is served
publicly, only requests addressed to a loopback host name.
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import threading
import time
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from cube_jax.core.env import CubeEnv
from cube_jax.web.game import MAX_QUEUED, Hub, Settings
from cube_jax.web.replay import MAX_UPLOAD_BYTES, TraceError, TraceShelf, data_url, records_from_text, replay_payload, timeline_png

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
# The transport's own limit on one WebSocket frame; the app refuses frames over
# protocol.MAX_FRAME_BYTES with an error reply and keeps the connection.
WS_MAX_BYTES = 1024 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; connect-src 'self'; "
                               "style-src 'self'; script-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, public: bool) -> Optional[str]:
    """None when serving on ``host`` is allowed; otherwise why not. Loopback hosts are
    allowed; any other needs ``public`` (the caller prints a warning then)."""
    if is_loopback(host) or public:
        return None
    return (f"--host {host!r} is not a loopback address: anyone who can reach this machine could watch and play. "
            "Add --public to serve it anyway")


def _json(data, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=SECURITY_HEADERS)


def _error(message: str, status: int) -> JSONResponse:
    return _json({"error": message}, status)


def create_app(env: CubeEnv, settings: Settings, replays: Sequence[Path] = (), public: bool = False,
               start: bool = True) -> Starlette:
    """The app for ``env`` and ``settings``; ``replays`` are extra trace files or folders
    offered for replay; ``start`` starts the first episode when the server starts."""
    hub = Hub(env, settings)
    shelf = TraceShelf(settings.out, replays)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})

    async def api_state(request: Request) -> Response:
        return _json(hub.state())

    async def api_traces(request: Request) -> Response:
        return _json({"folder": str(settings.out), "traces": shelf.entries()})

    async def from_shelf(read, name: str, hint: str = ""):
        """``(read(name), None)`` off the event loop, or ``(None, the error response)``."""
        try:
            return await asyncio.to_thread(read, name), None
        except KeyError:
            return None, _error(f"no trace named {name[:80]!r} here{hint}", 404)
        except TraceError as err:
            return None, _error(f"not a valid trace: {err.problem}", 422)

    async def api_trace(request: Request) -> Response:
        name = request.query_params.get("name", "")
        records, error = await from_shelf(shelf.records, name, "; GET /api/traces lists them")
        if error is not None:
            return error
        return _json(replay_payload(records, name, f"/api/timeline?name={_quote(name)}"))

    async def api_timeline(request: Request) -> Response:
        name = request.query_params.get("name", "")
        png, error = await from_shelf(shelf.timeline, name)
        if error is not None:
            return error
        return Response(png, media_type="image/png", headers=SECURITY_HEADERS)

    async def api_replay(request: Request) -> Response:
        text, error = await _read_upload(request)
        if error is not None:
            return error
        name = request.query_params.get("name", "upload")[:200]
        try:
            records = await asyncio.to_thread(records_from_text, text, name)
        except TraceError as err:
            return _error(f"not a valid trace: {err.problem}", 422)
        try:
            picture = data_url(await asyncio.to_thread(timeline_png, records))
        except Exception as err:  # noqa: BLE001 - the replay works without its picture
            logger.warning("timeline of an uploaded trace not drawn: %s", err)
            picture = None
        return _json(replay_payload(records, name, picture))

    async def ws_endpoint(websocket: WebSocket) -> None:
        await _page_session(hub, websocket)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if start:
            # the first step compiles the world's programs: do it before the first page comes
            await asyncio.to_thread(_warm_up, env)
            hub.start_game()
        try:
            yield
        finally:
            await hub.aclose()

    routes = [
        Route("/", index),
        Route("/api/state", api_state),
        Route("/api/traces", api_traces),
        Route("/api/trace", api_trace),
        Route("/api/timeline", api_timeline),
        Route("/api/replay", api_replay, methods=["POST"]),
        WebSocketRoute("/ws", ws_endpoint),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    hosts = ["*"] if public else ["localhost", "127.0.0.1", "[::1]", "::1"]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])
    app.state.hub = hub
    app.state.shelf = shelf
    return app


async def _read_upload(request: Request):
    """``(the body as text, None)``, or ``(None, the error response)``: too large, not UTF-8."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_UPLOAD_BYTES):
        return None, _error(f"a trace of at most {MAX_UPLOAD_BYTES} bytes", 413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_UPLOAD_BYTES:
            return None, _error(f"a trace of at most {MAX_UPLOAD_BYTES} bytes", 413)
    try:
        return body.decode("utf-8"), None
    except UnicodeDecodeError as err:
        return None, _error(f"not UTF-8 text (byte {err.start})", 422)


async def _page_session(hub: Hub, websocket: WebSocket) -> None:
    """One page's WebSocket: the hub's messages go out through a queue (a page too far
    behind is closed), and every frame that comes in is handed to the hub."""
    if not _same_origin(websocket):
        await websocket.close(code=1008, reason="cross-origin connections are refused")
        return
    await websocket.accept()
    queue: asyncio.Queue = asyncio.Queue()

    def send(text: str) -> None:
        if queue.qsize() > MAX_QUEUED:  # a page that stopped reading
            queue.put_nowait(None)
            return
        queue.put_nowait(text)

    async def sender() -> None:
        while True:
            text = await queue.get()
            if text is None:
                await websocket.close(code=1013, reason="too far behind")
                return
            await websocket.send_text(text)

    client = hub.connect(send)
    writer = asyncio.create_task(sender())
    try:
        while True:
            try:
                message = await websocket.receive()
            except (WebSocketDisconnect, RuntimeError):  # the transport is gone
                break
            if message["type"] == "websocket.disconnect":
                break
            # never raises: a bad frame gets an error reply and the connection stays open
            await hub.handle(client, message.get("text") if message.get("text") is not None
                             else message.get("bytes") or b"")
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await writer
        await hub.disconnect(client)


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _same_origin(websocket: WebSocket) -> bool:
    """A browser always sends ``Origin``; it must be this server. Clients that are not
    browsers (tests, scripts) send none and are let in."""
    origin = websocket.headers.get("origin")
    if origin is None:
        return True
    host = websocket.headers.get("host", "")
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc == host


def _warm_up(env: CubeEnv) -> None:
    import jax

    state, _ = env.reset(jax.random.PRNGKey(0))
    env.step(state, jax.numpy.zeros(env.num_agents, jax.numpy.int32))


class BackgroundServer:
    """The app served by uvicorn in a thread of this process (for tests, benchmarks and
    notebooks): ``with BackgroundServer(app) as server: server.url``. ``port=0`` takes a
    free port."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0, timeout: float = 120.0):
        import uvicorn

        self.app = app
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", ws_max_size=WS_MAX_BYTES,
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self.timeout = timeout
        self._thread = threading.Thread(target=self.server.run, name="cube-jax web", daemon=True)

    @property
    def url(self) -> str:
        sockets = self.server.servers[0].sockets
        host, port = sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def hub(self) -> Hub:
        return self.app.state.hub

    def __enter__(self) -> "BackgroundServer":
        self._thread.start()
        deadline = time.monotonic() + self.timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the web server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self._thread.join(self.timeout)


def bind(host: str, port: int):
    """A listening socket on ``host``:``port`` (port 0: a free one), so that the URL is known
    before serving starts."""
    import socket

    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)  # a page opened while the world compiles waits in the backlog instead of being refused
    return sock


def url_of(sock) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve(app: Starlette, sock) -> None:
    """Serves ``app`` on the bound socket ``sock`` until Ctrl-C (uvicorn)."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", ws_max_size=WS_MAX_BYTES, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


__all__ = ["BackgroundServer", "STATIC_DIR", "bind", "check_host", "create_app", "is_loopback", "serve", "url_of"]
