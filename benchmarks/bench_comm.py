"""Benchmark: predicted against measured communication time per step of data-parallel runs (docs/distributed.md).

Calibrates the collectives on this machine (``trainingcost calibrate --collectives``'s fit; or reads one with
--calibration), trains every rule under ddp on --nproc processes (a 2-block decoder, d_model 64: its gradients,
0.5 MB, fit DDP's first bucket), and prints per rule the collectives and bytes of one step, the comm time the
model predicts (analytic/comm.py: its collectives x the fitted alpha + beta * bytes) and the time the meter
measured (the median over the steps after warm-up), and their ratio. Goal: within 15% on gloo, 2 processes.
A benchmark prints figures; no test asserts a time.

    python benchmarks/bench_comm.py [--nproc 2] [--steps 12] [--calibration coll.json]
"""

from __future__ import annotations

import argparse
import json
import os

import pandas as pd

from trainingcost.analytic.catalogue import rule_names
from trainingcost.analytic.comm import comm_seconds, step_collectives
from trainingcost.config.model import canonical_model
from trainingcost.config.training import TrainSpec
from trainingcost.measure.collectives import calibrate_collectives
from trainingcost.measure.distributed import launch_each

MODEL = dict(arch="decoder", layers=2, d_model=64, heads=4, d_ff=256, vocab=256, seq_len=64, batch=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--calibration", help="a `calibrate --collectives` JSON (default: calibrate now)")
    args = parser.parse_args()
    if args.calibration:
        with open(args.calibration) as f:
            fit = json.load(f)["fit"]
    else:
        fit = calibrate_collectives(args.nproc, tolerance=0.1)["fit"]
    cfg = canonical_model(MODEL, "")
    rules = rule_names()
    specs = [TrainSpec(cfg=cfg, task="lm", rule=r, steps=args.steps, eval_batches=1) for r in rules]
    runs = launch_each(specs, args.nproc, "ddp")
    rows = []
    for rule, run in zip(rules, runs):
        comm = run.comm()
        steady = comm[comm.step > args.warmup]
        per_step = steady.groupby("step")["seconds"].sum()
        model = step_collectives(cfg, rule, "ddp", args.nproc, "fp32", args.warmup + 1)
        predicted = comm_seconds(model, fit)
        measured = float(per_step.median())
        rows.append({"rule": rule, "collectives": len(model), "bytes": sum(c.bytes for c in model),
                     "predicted_ms": predicted * 1e3, "measured_ms": measured * 1e3,
                     "predicted/measured": predicted / measured})
    table = pd.DataFrame(rows)
    print(f"gloo, {args.nproc} processes, {os.cpu_count()} CPUs; decoder 2 x d_model 64; ddp; steps after "
          f"{args.warmup} warm-up steps")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    error = (table["predicted/measured"] - 1).abs()
    print(f"mean |predicted/measured - 1| = {error.mean():.1%}; within 15%: {(error <= 0.15).sum()} of {len(table)} rules")


if __name__ == "__main__":
    main()
