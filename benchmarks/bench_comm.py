"""Benchmark: predicted against measured communication time per step of data-parallel runs (docs/distributed.md).

Calibrates the collectives on this machine (``trainingcost calibrate --collectives``; or reads one with
--calibration), trains every rule under ddp (and bp, fa, kp under --parallel zero2 / fsdp) on --nproc processes
(a 2-block decoder, d_model 64: 0.5 MB of gradients), and prints per rule the collectives and bytes of one step,
the comm time the model predicts (analytic/comm.py: its collectives, each priced by the calibration's α and β of
its size range) and the time the meter measured, each collective's on its slowest rank (the calibration's
statistic: a collective ends for the job when it ends on every rank), summed per step: the median over the steps
after warm-up and the fastest step. Goal: within 15% on gloo, 2 processes. It prints the load (``os.getloadavg``)
before and after: on a machine with more runnable processes than cores, a collective that follows compute waits
for the OS to run both ranks and gloo's threads again, which back-to-back calibration never sees
(``calibrate --collectives --after-compute-ms`` times that case). A benchmark prints figures; no test asserts a time.

    python benchmarks/bench_comm.py [--nproc 2] [--steps 12] [--calibration coll.json] [--after-compute-ms 0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import pandas as pd

from trainingcost.analytic.catalogue import rule_names
from trainingcost.analytic.comm import admitted, comm_seconds, step_collectives
from trainingcost.config.model import canonical_model
from trainingcost.config.training import TrainSpec
from trainingcost.measure.collectives import CollectivesBusy, calibrate_collectives
from trainingcost.measure.distributed import launch_each

MODEL = dict(arch="decoder", layers=2, d_model=64, heads=4, d_ff=256, vocab=256, seq_len=64, batch=8)


def slowest_rank(run) -> pd.DataFrame:
    """Each collective's seconds on its slowest rank (rank r's i-th collective is the same collective on every
    rank: they issue them in one order), per step."""
    frames = [pd.DataFrame(v["comm"]).reset_index().rename(columns={"index": "i"}) for v in run.ranks.values()]
    both = pd.concat(frames)
    return both.groupby(["i", "step"], as_index=False)["seconds"].max()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--parallel", default="ddp", help="comma-separated: ddp, zero2, fsdp")
    parser.add_argument("--calibration", help="a `calibrate --collectives` JSON (default: calibrate now)")
    parser.add_argument("--after-compute-ms", type=float, default=0.0, help="calibrate now with this protocol")
    parser.add_argument("--tolerance", type=float, default=0.1)
    args = parser.parse_args()
    load_before = os.getloadavg()
    if args.calibration:
        with open(args.calibration) as f:
            calibration = json.load(f)
    else:
        try:
            calibration = calibrate_collectives(args.nproc, tolerance=args.tolerance, time_cap_s=180,
                                                after_compute_s=args.after_compute_ms / 1e3)
        except CollectivesBusy as busy:  # nothing to trust: one line, as bench_predictor.py says it
            print(f"bench_comm: the collectives calibration did not converge ({busy}; load average "
                  f"{os.getloadavg()[0]:.2f}): nothing measured is trusted; rerun on a quiet machine")
            return 1
    cfg = canonical_model(MODEL, "")
    rows = []
    for parallel in args.parallel.split(","):
        rules = [r for r in rule_names() if admitted(r, parallel)]
        specs = [TrainSpec(cfg=cfg, task="lm", rule=r, steps=args.steps, eval_batches=1) for r in rules]
        for rule, run in zip(rules, launch_each(specs, args.nproc, parallel)):
            per = slowest_rank(run)
            per_step = per[per.step > args.warmup].groupby("step")["seconds"].sum()
            model = step_collectives(cfg, rule, parallel, args.nproc, "fp32", args.warmup + 1)
            predicted = comm_seconds(model, calibration)
            step_s = pd.Series(run.first["step_times"][args.warmup:]).median()
            rows.append({"parallel": parallel, "rule": rule, "collectives": len(model),
                         "bytes": sum(c.bytes for c in model), "predicted_ms": predicted * 1e3,
                         "measured_ms": per_step.median() * 1e3, "fastest_ms": per_step.min() * 1e3,
                         "step_ms": step_s * 1e3, "pred/median": predicted / per_step.median(),
                         "pred/fastest": predicted / per_step.min()})
    table = pd.DataFrame(rows)
    print(f"gloo, {args.nproc} processes, {os.cpu_count()} CPUs, load {load_before[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; calibration after {calibration.get('after_compute_s', 0) * 1e3:g} ms of "
          f"compute ({calibration.get('rounds')} rounds); decoder 2 x d_model 64; steps after {args.warmup} warm-up")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for column in ("pred/median", "pred/fastest"):
        error = (table[column] - 1).abs()
        print(f"{column}: mean |ratio - 1| = {error.mean():.1%}; within 15%: {(error <= 0.15).sum()} of {len(table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
