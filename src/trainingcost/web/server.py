"""The planner page's server (``trainingcost serve``): a small FastAPI app that serves one static page and answers its
queries with the Python API, each in a process of its own.

Safe to leave running (docs/page.md):

- **Who may use it.** Every request carries the server's access token: the address ``serve`` prints holds it, the
  page's script reads it from the address and sends it in a header (``X-Trainingcost-Token``), its downloads and
  shareable link in the query. No cookie: a browser sends a cookie of 127.0.0.1 to every port there, so opening
  another user's server would hand it the token. Another local user, who can reach a port on 127.0.0.1, gets 403
  without it.
- **No server paths.** The page's inputs are the API's keywords, less those that name files (web/compute.py).
- **Limits.** A query over 16 KiB is refused (413); each plan runs in a process forked from a warm fork server and is
  killed at the time limit (one line, 504); at most ``workers`` plans run at once, the rest wait their turn or get
  503 after the time limit. Two visitors never share a process, so each gets their own answer.
"""

from __future__ import annotations

import errno
import hmac
import multiprocessing
import os
import secrets
import threading
from importlib import resources
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from . import worker
from .compute import MAX_QUERY_BYTES

HEADER = "x-trainingcost-token"  # the page's requests carry the token here
STATUS = {"ok": 200, "user": 422, "size": 413, "time": 504, "busy": 503, "internal": 500}


class Planner:
    """Runs each query in its own process, forked from a fork server that imported the API and planned once (warm
    caches), at most ``workers`` at a time, each killed at ``time_limit`` seconds."""

    def __init__(self, time_limit: float = 20.0, workers: int | None = None):
        self.time_limit = time_limit
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self.slots = threading.BoundedSemaphore(self.workers)
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(["trainingcost.web.warm"])

    def start(self) -> None:
        """Start the fork server now (its warm-up plan takes about a second) rather than on the first query."""
        from multiprocessing import forkserver

        forkserver.ensure_running()

    def run(self, kind: str, query: dict) -> dict:
        if not self.slots.acquire(timeout=self.time_limit):
            return {"ok": False, "status": "busy", "field": None,
                    "error": f"trainingcost plan: error: the server is busy ({self.workers} plans running); try again"}
        try:
            receive, send = self.context.Pipe(duplex=False)
            process = self.context.Process(target=worker.answer, args=(send, kind, query), daemon=True)
            process.start()
            send.close()
            try:
                if receive.poll(self.time_limit):
                    return receive.recv()
                return {"ok": False, "status": "time", "field": None,
                        "error": f"trainingcost plan: error: the plan took longer than {self.time_limit:g} s, the "
                                 "page's limit: give fewer GPU counts or rules, or fix part of the layout (the command "
                                 "line has no limit)"}
            except EOFError:  # the process died without an answer (killed for memory, say)
                return {"ok": False, "status": "internal", "field": None,
                        "error": f"trainingcost plan: error: the plan's process ended without an answer (exit "
                                 f"{process.exitcode})"}
            finally:
                receive.close()
                if process.is_alive():  # at the time limit; or, its answer sent, still tidying up
                    process.kill()
                process.join(5)
        finally:
            self.slots.release()


def create_app(token: str, planner: Planner | None = None):
    """The FastAPI app: the page, its script and style, ``/api/options`` and ``/api/plan`` (JSON, CSV, JSON table)."""
    from . import compute

    planner = planner or Planner()
    app = FastAPI(title="trainingcost planner", docs_url=None, redoc_url=None, openapi_url=None)
    static = resources.files("trainingcost.web") / "static"
    page = {name: (static / name).read_text(encoding="utf-8") for name in ("index.html", "page.js", "page.css")}
    secure = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                                         "script-src 'self'; frame-ancestors 'none'",
              "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}

    def allowed(request: Request) -> bool:
        # the page's own requests send the token in a header (its script reads it from the address), a link or a
        # download in the query; never a cookie: a browser sends a cookie of 127.0.0.1 to every port of it, another
        # user's server included (docs/page.md)
        given = request.headers.get(HEADER) or request.query_params.get("token") or ""
        return hmac.compare_digest(given.encode(), token.encode())

    @app.middleware("http")
    async def guard(request: Request, call_next):
        size = len(request.url.query.encode())
        body = request.headers.get("content-length") or "0"
        if size > MAX_QUERY_BYTES or not body.isdigit() or int(body) > MAX_QUERY_BYTES:
            return PlainTextResponse(f"trainingcost serve: error: the request is more than the {MAX_QUERY_BYTES:,} "
                                     "bytes the page reads", status_code=413)
        if request.method not in ("GET", "HEAD"):
            return PlainTextResponse("trainingcost serve: error: the page only reads (GET)", status_code=405)
        if not allowed(request):
            return PlainTextResponse("trainingcost serve: error: no access token; open the address that "
                                     "`trainingcost serve` printed (it holds the token)", status_code=403)
        response = await call_next(request)
        response.headers.update(secure)
        return response

    def query_of(request: Request) -> dict:
        return {k: v for k, v in request.query_params.items() if k != "token"}

    quoted = quote(token, safe="")
    html = page["index.html"].replace('href="/page.css"', f'href="/page.css?token={quoted}"').replace(
        'src="/page.js"', f'src="/page.js?token={quoted}"')

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request):
        return HTMLResponse(html)  # its style and script asked for with the token, as the address gave it

    @app.get("/page.js")
    def script():
        return Response(page["page.js"], media_type="text/javascript")

    @app.get("/page.css")
    def style():
        return Response(page["page.css"], media_type="text/css")

    @app.get("/api/options")
    def options():
        return JSONResponse({**compute.options(), "token": token})  # for the page's shareable link

    def reply(kind: str, request: Request, media: str | None = None, filename: str | None = None):
        answer = planner.run(kind, query_of(request))
        status = STATUS[answer.pop("status")]
        if media is None or not answer["ok"]:
            return JSONResponse(answer, status_code=status)
        return Response(answer["body"], media_type=media, status_code=status,
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    @app.get("/api/plan")
    def plan(request: Request):
        return reply("plan", request)

    @app.get("/api/plan.csv")
    def plan_csv(request: Request):
        return reply("csv", request, "text/csv", "plan.csv")

    @app.get("/api/plan.json")
    def plan_json(request: Request):
        return reply("json", request, "application/json", "plan.json")

    return app


def listening(host: str, port: int):
    """The server's socket, bound and listening, or one line naming the address that cannot be used."""
    import socket

    from ..config import ConfigError

    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"--host: {host[:60]!r} is not an address of this machine ({exc})") from None
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"--host: {host[:60]} is not an address of this machine") from None
        raise ConfigError(f"--port: cannot listen on {host}:{port} ({exc.strerror}); give another --port (0: any free "
                          "one)") from None
    return sock


def serve(host: str = "127.0.0.1", port: int = 8000, token: str | None = None, time_limit: float = 20.0,
          workers: int | None = None, announce=print) -> None:
    """Serve the planner page until interrupted; ``announce`` receives its address (with the access token)."""
    import uvicorn

    sock = listening(host, port)
    token = token or secrets.token_urlsafe(24)
    planner = Planner(time_limit, workers)
    planner.start()
    app = create_app(token, planner)
    config = uvicorn.Config(app, log_level="warning", h11_max_incomplete_event_size=MAX_QUERY_BYTES + 4096)
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    announce(f"trainingcost serve: the planner page is at http://{shown}:{sock.getsockname()[1]}/?token={quote(token, safe='')} "
             "(Ctrl-C stops it)", flush=True)
    server.run(sockets=[sock])
