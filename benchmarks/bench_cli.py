"""Benchmark: `trainingcost estimate` as a whole process, interpreter start-up included.

Runs ``trainingcost estimate --preset gpt2-small --rule all --cost-model all``
(the default table: phase totals, ratios to BP and memory) --repeats times in a
fresh process each, and prints the median wall time, the machine and its load
average. Goal: <= 1.0 s on an otherwise idle machine. A second figure times
``--help``; both must never import torch (also checked by the tests).

    python benchmarks/bench_cli.py [--repeats 5] [--args "estimate --preset t5-small"]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from trainingcost.measure.provenance import cpu_name

DEFAULT = "estimate --preset gpt2-small --rule all --cost-model all"


def wall(command: list[str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"{shlex.join(command)} failed:\n{result.stderr}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--args", default=DEFAULT, help=f"the trainingcost arguments (default: {DEFAULT})")
    args = parser.parse_args()

    executable = Path(sys.executable).with_name("trainingcost")
    command = [str(executable)] if executable.exists() else [sys.executable, "-m", "trainingcost"]
    load_before = os.getloadavg()
    wall(command + ["--help"], 1)  # warm the file cache once
    estimate = wall(command + shlex.split(args.args), args.repeats)
    helped = wall(command + ["--help"], args.repeats)
    load_after = os.getloadavg()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {cpu_name()}, Python {platform.python_version()}; "
          f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"trainingcost {args.args}: median {statistics.median(estimate):.2f} s wall over {args.repeats} runs "
          f"(min {min(estimate):.2f}, max {max(estimate):.2f}); goal <= 1.0 s")
    print(f"trainingcost --help: median {statistics.median(helped):.2f} s wall over {args.repeats} runs")


if __name__ == "__main__":
    main()
