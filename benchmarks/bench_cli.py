"""Benchmark: `trainingcost estimate` and `trainingcost plan` as whole processes, interpreter start-up included.

Runs ``trainingcost estimate --preset gpt2-small --rule all --cost-model all``
(the default table: phase totals, ratios to BP and memory) and the README's
``trainingcost plan --preset llama-2-7b --tokens 2e12 --gpu a100-80gb --gpus 1024
--rule all`` (every rule under every cost model, memory and fit) --repeats times
each in a fresh process, and prints the median wall time, the machine and its
load average. Goal: <= 1.0 s each on an otherwise idle machine. A last figure
times ``--help``; none of them may import torch (also checked by the tests). Reported beside them, without
a goal: ``estimate`` of the largest mixture-of-experts preset, Qwen3-30B-A3B (128 experts per block, whose
memory tape replays each run of experts with the same rows by its ends; analytic/tape/moe.py).

    python benchmarks/bench_cli.py [--repeats 5] [--args "estimate --preset t5-small" [--args ...]]
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
DEFAULT_PLAN = "plan --preset llama-2-7b --tokens 2e12 --gpu a100-80gb --gpus 1024 --rule all"
MOE = "estimate --preset qwen3-30b-a3b --rule all"


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
    parser.add_argument("--args", action="append",
                        help=f"trainingcost arguments, repeatable (default: {DEFAULT!r} and {DEFAULT_PLAN!r})")
    args = parser.parse_args()
    commands = args.args or [DEFAULT, DEFAULT_PLAN]

    executable = Path(sys.executable).with_name("trainingcost")
    command = [str(executable)] if executable.exists() else [sys.executable, "-m", "trainingcost"]
    load_before = os.getloadavg()
    wall(command + ["--help"], 1)  # warm the file cache once
    timed = {text: wall(command + shlex.split(text), args.repeats) for text in commands}
    helped = wall(command + ["--help"], args.repeats)
    moe = wall(command + shlex.split(MOE), min(3, args.repeats)) if not args.args else None
    load_after = os.getloadavg()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {cpu_name()}, Python {platform.python_version()}; "
          f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    for text, times in timed.items():
        print(f"trainingcost {text}: median {statistics.median(times):.2f} s wall over {args.repeats} runs "
              f"(min {min(times):.2f}, max {max(times):.2f}); goal <= 1.0 s")
    print(f"trainingcost --help: median {statistics.median(helped):.2f} s wall over {args.repeats} runs")
    if moe:
        print(f"trainingcost {MOE}: median {statistics.median(moe):.2f} s wall over {len(moe)} runs (min {min(moe):.2f}, "
              f"max {max(moe):.2f}); reported, no goal")


if __name__ == "__main__":
    main()
