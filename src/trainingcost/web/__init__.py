"""The planner page (``trainingcost serve``, the web extra): a FastAPI app serving one static page whose answers come
from :func:`trainingcost.plan` (docs/page.md). ``compute`` needs no web framework; ``server`` imports FastAPI and
uvicorn when it runs."""

from __future__ import annotations


def serve(host: str = "127.0.0.1", port: int = 8000, token: str | None = None, time_limit: float = 20.0,
          workers: int | None = None) -> None:
    """Serve the planner page until interrupted, printing its address (which holds the access token)."""
    from .server import serve as run

    run(host, port, token, time_limit, workers)
