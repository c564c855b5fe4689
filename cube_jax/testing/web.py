"""What the web tests (and the browser benchmark) share: waiting for a condition, HTTP reads."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request


def until(predicate, timeout: float = 60.0, what: str = "the condition", poll: float = 0.02):
    """``predicate()``'s first truthy value, polled until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def get(server, path: str, headers=None):
    """``(status, body bytes, headers)`` of a GET on the server, error statuses included."""
    request = urllib.request.Request(server.url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers


def state(server) -> dict:
    """The server's ``/api/state``."""
    return json.loads(get(server, "/api/state")[1])
