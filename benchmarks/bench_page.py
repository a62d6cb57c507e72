"""Benchmark: the planner page (issue 64). For each of 3 fresh ``trainingcost serve`` processes: the seconds from its
start to its printed address and to its first answer, then the seconds the page waits for an answer after a change
(an HTTP GET of /api/plan, as the page's script sends it, the query changed each time) for

- a plan at one GPU count: the README's first example (goal: within 1 s on a 2-core machine);
- a layout search over ``--gpus 64-1024x2``, every rule (goal: within 3 s).

Prints each server's median, then the median of the 3 servers and their spread, the machine and its load.

    python benchmarks/bench_page.py [--repeats 3] [--asks 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request

TOKEN = "bench-token-0123456789abcdef"
ONE = {"preset": "llama-3-8b", "gpu": "h100-sxm", "gpus": "64", "rule": "bp,fa,dfa,pepita,mempepita"}
SEARCH = {"preset": "llama-3-8b", "gpu": "h100-sxm", "gpus": "64-1024x2", "layout": "search"}


def ask(base: str, query: dict) -> float:
    url = f"{base}/api/plan?{urllib.parse.urlencode({**query, 'token': TOKEN})}"
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as response:
        answer = json.loads(response.read())
    seconds = time.perf_counter() - began
    if not answer.get("ok"):
        raise SystemExit(f"bench_page: the page refused {query}: {answer.get('error')}")
    return seconds


def server(asks: int) -> dict:
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "trainingcost", "serve", "--port", "0", "--token", TOKEN],
                               stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.stdout.readline()
        printed = time.perf_counter() - began
        base = re.search(r"(http://127\.0\.0\.1:\d+)/", line).group(1)
        ask(base, {**ONE, "tokens": "1e12"})
        first = time.perf_counter() - began
        # A change each time (the token budget), as a visitor typing into the form.
        one = [ask(base, {**ONE, "tokens": f"{k + 2}e12"}) for k in range(asks)]
        search = [ask(base, {**SEARCH, "tokens": f"{k + 2}e12"}) for k in range(asks)]
        return {"printed": printed, "first": first, "one": statistics.median(one),
                "search": statistics.median(search)}
    finally:
        process.terminate()
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--asks", type=int, default=5)
    args = parser.parse_args()
    print(f"# trainingcost serve: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}")
    runs = []
    for k in range(args.repeats):
        run = server(args.asks)
        runs.append(run)
        print(f"server {k + 1}: address printed after {run['printed']:.2f} s, first answer after {run['first']:.2f} s; "
              f"median of {args.asks} answers after a change: one GPU count {run['one']:.3f} s, search over 64-1024x2 "
              f"{run['search']:.2f} s")
    for key, label, goal in (("printed", "start to the printed address", None), ("first", "start to the first answer", None),
                             ("one", "a plan at one GPU count", 1.0), ("search", "a search over 64-1024x2, every rule", 3.0)):
        values = [r[key] for r in runs]
        print(f"{label}: median {statistics.median(values):.3f} s (range {min(values):.3f} to {max(values):.3f})"
              + (f"; goal at most {goal:g} s" if goal else ""))
    print(f"# load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
