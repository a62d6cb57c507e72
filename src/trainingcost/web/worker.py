"""The planner page's worker: what runs in each query's process (web/server.py forks one per query from a fork server
that imported web/warm.py, which plans once with :func:`warm` so that every forked process starts with the modules
loaded and the catalogues' caches filled). It imports no web framework."""

from __future__ import annotations

import json
import time

from .. import api
from . import compute


def answer(send, kind: str, query: dict) -> None:
    """One query, in a forked process: the answer (or the table as CSV or JSON text) sent back, then exit."""
    began = time.perf_counter()
    try:
        if kind == "plan":
            reply = compute.answer(query)
            reply["status"] = "ok" if reply["ok"] else "user"
        else:
            try:
                table = compute.table_of(query)
            except compute.Error as err:
                reply = {"ok": False, "error": str(err), "field": compute.field_of(str(err)), "status": "user"}
            else:
                text = table.to_csv(index=False) if kind == "csv" else json.dumps(
                    compute.records(table), indent=1)
                reply = {"ok": True, "body": text, "status": "ok"}
    except Exception as exc:  # noqa: BLE001 - a bug: named, never a traceback on the page
        reply = {"ok": False, "error": f"trainingcost plan: internal error: {type(exc).__name__}: {str(exc)[:120]}",
                 "field": None, "status": "internal"}
    reply["seconds"] = round(time.perf_counter() - began, 4)  # the plan's own time, without the fork and the pipe
    send.send(reply)
    send.close()


def warm() -> None:
    """Plan once, as the page does (the search too), to load every module and fill the catalogues' caches."""
    api.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus="8-16x2", layout="search", rule=["bp", "dfa"])
    compute.answer({"preset": "gpt2-small", "tokens": "1e9", "gpu": "a100-80gb", "gpus": "8"})
