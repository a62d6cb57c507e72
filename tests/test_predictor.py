"""The roofline step-time predictor on synthetic calibrations with known answers."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from trainingcost.analytic import layer_table
from trainingcost.findings.calibration import attention_shapes, calibrate, gemm_shapes
from trainingcost.config import canonical_model, configs_frame
from trainingcost.analytic.layers import KINDS
from trainingcost.findings.predictor import accuracy, predict_layer_times, predict_steps

CFG = canonical_model(dict(arch="decoder", layers=2, d_model=16, heads=2, d_ff=32, vocab=40, seq_len=8, batch=2), "")
CONFIGS = configs_frame([("", CFG)])
B, T, D, FF, V, H = 2, 8, 16, 32, 40, 2


def synthetic(rate=1e9, attention_rate=None, bandwidth=1e12, launch=0.0):
    shapes = gemm_shapes(CONFIGS)
    calibration = {"dtype": "fp32", "bandwidth_bytes_per_s": bandwidth, "launch_overhead_s": launch,
                   "matmul": [{"m": m, "n": n, "k": k, "flops_per_s": rate} for m, n, k in shapes]}
    if attention_rate:
        calibration["attention"] = [{"bh": bh, "m": m, "n": n, "dk": dk, "flops_per_s": attention_rate}
                                    for bh, m, n, dk, _ in attention_shapes(CONFIGS)]
    return calibration


def executed(rule="bp"):
    return layer_table(CONFIGS, [rule], ["executed"])


def test_shapes_of_the_sweep():
    assert gemm_shapes(CONFIGS) == sorted({(B * T, D, D), (B * T, FF, D), (B * T, D, FF), (B * T, V, D)})
    assert attention_shapes(CONFIGS) == [(B * H, T, T, D // H, True)]


def test_pure_matmul_time_is_flops_over_rate():
    rows = predict_layer_times(executed(), CONFIGS, synthetic(rate=1e9, bandwidth=float("inf")))
    assert rows["predicted_time_s"].sum() == pytest.approx(rows["flops"].sum() / 1e9)
    ffn = rows[(rows.layer == "decoder.0.ffn") & (rows.phase == "forward")].iloc[0]
    assert ffn.predicted_time_s == pytest.approx(4 * B * T * D * FF / 1e9)


def test_attention_priced_at_its_own_rate():
    rows = predict_layer_times(executed(), CONFIGS, synthetic(rate=1e9, attention_rate=1e8, bandwidth=float("inf")))
    att = rows[(rows.layer == "decoder.0.self_attention")].set_index("phase")["predicted_time_s"]
    sdpa = 4 * B * T * T * D
    projections = 8 * B * T * D * D
    assert att["forward"] == pytest.approx(projections / 1e9 + sdpa / 1e8)
    assert att["backward"] == pytest.approx((2 * B * T * D * D + 2 * B * T * D * D + 4 * B * T * D * D) / 1e9 + 2.5 * sdpa / 1e8)
    assert att["weight_update"] == pytest.approx(projections / 1e9)


def test_memory_and_launch_terms():
    rows = predict_layer_times(executed(), CONFIGS, synthetic(rate=float("inf"), bandwidth=1e9, launch=1e-6))
    norm = rows[(rows.layer == "decoder.0.ffn_norm") & (rows.phase == "forward")].iloc[0]
    # Residual + LayerNorm: 9 FLOPs per element of the output, 4.5 per element moved (2 per output), 4 bytes read + 4 written.
    assert norm.predicted_memory_s == pytest.approx(2 * B * T * D * 2 * 4 / 1e9)
    att = rows[(rows.layer == "decoder.0.self_attention") & (rows.phase == "forward")].iloc[0]
    assert att.predicted_memory_s == pytest.approx(4 * B * T * D * 2 * 4 / 1e9)  # the biases; the softmax stays in the kernel
    assert norm.predicted_launch_s == pytest.approx(KINDS["add_norm"].kernels["forward"] * 1e-6)
    pepita = predict_layer_times(executed("pepita"), CONFIGS, synthetic(rate=float("inf"), launch=1e-6))
    fwd = pepita[(pepita.layer == "decoder.0.ffn") & (pepita.phase == "forward")].iloc[0]
    assert fwd.predicted_launch_s == pytest.approx(2 * KINDS["ffn"].kernels["forward"] * 1e-6)  # two passes


def test_step_adds_the_optimizer_and_rules_rank_by_work():
    calibration = synthetic(rate=1e9, bandwidth=1e9, launch=0.0)
    steps = pd.concat([predict_steps(executed(r), CONFIGS, calibration) for r in ("bp", "wm")]).set_index("rule")
    layers = predict_layer_times(executed("bp"), CONFIGS, calibration)["predicted_time_s"].sum()
    assert steps.at["bp", "predicted_time_s"] > layers  # the SGD step streams 3 x parameters
    assert steps.at["wm", "predicted_time_s"] > steps.at["bp", "predicted_time_s"]


def test_accuracy_scores():
    score = accuracy([1.1, 2.2, 2.7], [1.0, 2.0, 3.0])
    assert score["mape"] == pytest.approx((0.1 + 0.1 + 0.1) / 3) and score["spearman"] == 1.0 and score["n"] == 3
    assert accuracy([1.0, np.nan], [0.0, 1.0])["n"] == 0


def test_calibration_on_this_machine_is_positive_and_finite():
    result = calibrate(torch.device("cpu"), "fp32", gemm_shapes(CONFIGS), repeats=3, copy_mib=8, attention=attention_shapes(CONFIGS))
    rates = [m["flops_per_s"] for m in result["matmul"]] + [a["flops_per_s"] for a in result["attention"]]
    assert all(math.isfinite(r) and r > 0 for r in rates)
    assert result["bandwidth_bytes_per_s"] > 0 and 0 < result["launch_overhead_s"] < 0.01
    assert result["provenance"]["device"] == "cpu"
