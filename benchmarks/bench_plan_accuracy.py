"""Step-time accuracy of the plan's predictor against published training runs (benchmarks/published_runs.csv).

For every row: the measured step time (the source's own figure converted with its own definition,
trainingcost.analytic.steptime.runs), the predicted step (trainingcost.analytic.steptime.predict_step, BP), and the
flat baseline the plan used before (model FLOPs / (GPUs x peak x 0.40), the executed cost model's BP FLOPs). Prints
the absolute percentage error per row, and the mean (MAPE) per source and overall, predicted beside flat.

    python benchmarks/bench_plan_accuracy.py [--csv PATH] [--rows]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainingcost.analytic.plan import PRECISIONS  # noqa: E402
from trainingcost.analytic.steptime import predict_step, runs  # noqa: E402
from trainingcost.analytic.steptime.step import rule_work  # noqa: E402
from trainingcost.config.hardware import device  # noqa: E402

FLAT_MFU = 0.40


def evaluate(path: Path) -> list[dict]:
    out = []
    for row in runs.load(path):
        cfg, lay = runs.model_of(row), runs.layout_of(row)
        dev = device(row["gpu"])
        work = rule_work(cfg, ["bp"])
        pred = predict_step(cfg, lay, dev, "bp", work)
        peak = dev.peak(PRECISIONS[lay.precision].compute)
        flat = lay.global_batch * work["bp"]["total"] / (lay.gpus * peak * FLAT_MFU)
        measured = runs.measured_step_time(row)
        out.append({"source": row["source"], "run": row["run"], "measured": measured, "predicted": pred.step_time_s,
                    "flat": flat, "err_pred": 100 * (pred.step_time_s / measured - 1),
                    "err_flat": 100 * (flat / measured - 1), "parts": pred.parts})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=ROOT / "benchmarks" / "published_runs.csv")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    results = evaluate(args.csv)
    if args.rows:
        print(f"{'source':24} {'run':40} {'measured s':>10} {'predicted s':>11} {'err %':>7} {'flat s':>9} {'err %':>7}")
        for r in results:
            print(f"{r['source']:24} {r['run'][:40]:40} {r['measured']:10.3f} {r['predicted']:11.3f} {r['err_pred']:+7.1f} "
                  f"{r['flat']:9.3f} {r['err_flat']:+7.1f}")
        print()
    print(f"{'source':24} {'rows':>4} {'MAPE predicted':>15} {'MAPE flat 0.40':>15} {'max |err| pred':>15}")
    groups = {}
    for r in results:
        groups.setdefault(r["source"], []).append(r)
    for name, rows in [*groups.items(), ("overall", results)]:
        mp = sum(abs(r["err_pred"]) for r in rows) / len(rows)
        mf = sum(abs(r["err_flat"]) for r in rows) / len(rows)
        mx = max(abs(r["err_pred"]) for r in rows)
        print(f"{name:24} {len(rows):4d} {mp:14.1f}% {mf:14.1f}% {mx:14.1f}%")
    print(f"\n{len(results)} rows in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
