"""The layout search's speed: the whole ``trainingcost plan ... --layout search`` process, and the search alone.

Goal (issue 38): ``plan --preset llama-2-70b --gpus 1024 --rule all --layout search`` in <= 2 s as a whole process on
one core of a 2-core machine. Prints the median and range of 5 fresh processes (each pinned to one core where the
OS allows), the machine's load before and after, and, in process, the size of the space, how many layouts fit and how
many were priced per rule, and the search's own seconds.

    python benchmarks/bench_layout_search.py [--runs 5] [--gpus 1024]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

GOAL_S = 2.0


def command(gpus: int) -> list[str]:
    exe = Path(sys.executable).with_name("trainingcost")
    head = [str(exe)] if exe.exists() else [sys.executable, "-m", "trainingcost.cli"]
    return [*head, "plan", "--preset", "llama-2-70b", "--tokens", "2e12", "--gpu", "h100-sxm", "--gpus", str(gpus),
            "--rule", "all", "--layout", "search"]


def one_core():
    if hasattr(os, "sched_setaffinity"):
        return lambda: os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=1024)
    args = ap.parse_args(argv)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        done = subprocess.run(command(args.gpus), capture_output=True, text=True, preexec_fn=one_core())
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(" ".join(command(args.gpus)[1:]))
    print(f"whole process, one core: median {statistics.median(times):.2f} s over {args.runs} runs "
          f"(min {min(times):.2f}, max {max(times):.2f}); goal <= {GOAL_S:g} s: "
          f"{'met' if statistics.median(times) <= GOAL_S else 'NOT met'}")
    print(f"load average before {load_before:.2f}, after {load_after:.2f}; {os.cpu_count()} cores")

    from trainingcost.analytic import rule_names
    from trainingcost.analytic.layout import SEARCH_ALL, search
    from trainingcost.analytic.plan import PREDICTED_SOURCE, Efficiency, PlanSpec
    from trainingcost.config.hardware import device
    from trainingcost.config.model import canonical_model, preset_entry

    cfg = canonical_model(preset_entry("llama-2-70b"))
    spec = PlanSpec(tokens=2e12, gpus=args.gpus, efficiency=Efficiency("predicted", 1.0, PREDICTED_SOURCE))
    found = search(cfg, spec, device("h100-sxm"), list(rule_names()), SEARCH_ALL)
    print(f"\nthe search alone, in process: {found.seconds:.2f} s; global batch {found.global_batch} sequences")
    print(f"{'rule':10} {'space':>6} {'fit':>6} {'priced':>7}  best layout (step)")
    for r, s in found.rules.items():
        best = f"{s.best.compact()} ({s.best.step_s:.2f} s)" if s.best else "none fits"
        print(f"{r:10} {s.space:6d} {s.fitting:6d} {s.priced:7d}  {best}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
