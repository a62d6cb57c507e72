"""Benchmark: how long tracing one training step takes when the model is far too big to run (issue 66 moved this
out of the tests, which bound memory and never wall time).

Traces one BP step of a 6.4-billion-parameter decoder (d_model 4096, 32 blocks, 4,096 tokens; 26 GB in fp32) on
fake tensors, in 3 fresh processes, and prints each run's seconds and peak resident memory, then the median and
the spread. Goal: under 60 s and under 2 GiB on a quiet 2-core machine (tests/test_predictor.py checks the memory).

    python benchmarks/bench_tracing.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time


def once() -> None:
    from trainingcost.config import RuleOptions, TrainSpec, canonical_model
    from trainingcost.measure.trace import trace_step

    cfg = canonical_model(dict(arch="decoder", layers=32, d_model=4096, heads=32, d_ff=16384, seq_len=4096, batch=1,
                               vocab=50257), "")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    began = time.perf_counter()
    trace = trace_step(TrainSpec(cfg=cfg, task="lm", rule="bp", steps=2, seed=0, options=RuleOptions(optimizer="adam")))
    seconds = time.perf_counter() - began
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    print(json.dumps({"seconds": seconds, "grown_bytes": grown, "flops": int((trace["flops"] * trace["count"]).sum())}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.once:
        return once()
    print(f"# tracing a 6.4B-parameter BP step: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    runs = []
    for k in range(args.repeats):
        done = subprocess.run([sys.executable, __file__, "--once"], capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"run {k + 1}: {runs[-1]['seconds']:.1f} s, peak memory grew {runs[-1]['grown_bytes'] / 2**30:.2f} GiB, "
              f"{runs[-1]['flops']:.3e} FLOPs traced")
    seconds = [r["seconds"] for r in runs]
    grown = [r["grown_bytes"] / 2**30 for r in runs]
    print(f"median {statistics.median(seconds):.1f} s (range {min(seconds):.1f} to {max(seconds):.1f}; goal < 60 s), "
          f"memory median {statistics.median(grown):.2f} GiB (goal < 2 GiB); load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
