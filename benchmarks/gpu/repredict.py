"""Re-predict the GPU calls' measured steps with today's predictor, on the CPU (benchmarks/gpu/README.md, section 7).

Each call under ``benchmarks/gpu/results/`` kept its traces, its calibration and the profile of every run's last
step (``comparison.parquet``: each class's kernel seconds as measured). This prices the same traces with the same
calibrations through :func:`trainingcost.findings.predictor.predict_steps` as it is now, beside the prediction the
call itself made, and splits the runs into device-bound ones (the profile's kernels more than 70% of the measured
step: they repeat within 1% across machines) and host-bound ones (they do not). Steps of 1 ms and more whose
timing the load watch called ``ok``, as stage 7 scores them.

    python benchmarks/gpu/repredict.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from trainingcost.findings.predictor import predict_steps  # noqa: E402

RESULTS = ROOT / "benchmarks" / "gpu" / "results"
KEYS = ["config_id", "rule", "seed", "layer", "phase", "timed_phase", "op", "signature", "context"]
DEVICE_BOUND = 0.7  # the profiled kernels' share of the measured step above which a step is the device's


def calls() -> list[Path]:
    return sorted(p for p in RESULTS.iterdir() if (p / "stage7_predictor" / "calibration.json").exists())


def repredict(call: Path) -> pd.DataFrame:
    calibration = json.loads((call / "stage7_predictor" / "calibration.json").read_text())
    trace = pd.concat([pd.read_parquet(call / stage / "trace.parquet") for stage in
                       ("stage1_sweep", "stage2_mfu", "stage3_ratios") if (call / stage / "trace.parquet").exists()])
    now = predict_steps(trace.drop_duplicates(KEYS), calibration)
    table = pd.read_parquet(call / "stage7_predictor" / "comparison.parquet")
    steps = table[(table["granularity"] == "step") & (table["cost_model"] == "executed")].copy()
    steps["kernels_s"] = steps[["measured_matmul_s", "measured_attention_s", "measured_elementwise_s"]].sum(axis=1)
    steps = steps.merge(now[["config_id", "rule", "seed", "predicted_time_s"]].rename(
        columns={"predicted_time_s": "now_s"}), on=["config_id", "rule", "seed"])
    steps = steps[(steps["measured_time_s"] >= 1e-3) & (steps["timing_quality"] == "ok")]
    return steps.assign(device_bound=steps["kernels_s"] / steps["measured_time_s"] > DEVICE_BOUND)


def main() -> int:
    found = calls()
    if not found:
        print(f"no GPU results under {RESULTS}")
        return 1
    print("call                          predictor            all   device-bound      host-bound")
    for call in found:
        steps = repredict(call)
        for label, column in (("as the call predicted", "predicted_time_s"), ("today's predictor", "now_s")):
            error = (steps[column] / steps["measured_time_s"] - 1).abs() * 100
            dev = steps["device_bound"]
            print(f"{call.name:29s} {label:21s} {error.mean():5.1f}%  {error[dev].mean():5.1f}% (n={dev.sum():2d})"
                  f"   {error[~dev].mean():5.1f}% (n={(~dev).sum():2d})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
