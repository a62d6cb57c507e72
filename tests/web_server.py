"""A planner page server (``trainingcost serve``) in a subprocess for the tests, and plain HTTP against it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager

TOKEN = "test-token-0123456789abcdef"


@contextmanager
def served(*flags: str, token: str = TOKEN):
    """``trainingcost serve --port 0`` running; yields its base address (no token)."""
    process = subprocess.Popen([sys.executable, "-m", "trainingcost", "serve", "--port", "0", "--token", token, *flags],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
        assert found, (line, process.stderr.read() if process.poll() is not None else "")
        assert found.group(2) == token
        yield found.group(1)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def get(base: str, path: str, query: dict | None = None, token: str | None = TOKEN, timeout: float = 120):
    """(status, headers, body text) of a GET."""
    params = dict(query or {})
    if token is not None:
        params["token"] = token
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    request = urllib.request.Request(url)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def plan(base: str, query: dict, **kw) -> tuple[int, dict]:
    status, _, body = get(base, "/api/plan", query, **kw)
    return status, json.loads(body)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None
