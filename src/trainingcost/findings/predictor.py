"""A roofline step-time predictor: the ``executed`` model's work, priced with a device's calibrated rates.

For each (configuration, rule, layer, phase) row of the ``executed`` model:

    time = matmul FLOPs / matmul rate of the layer's GEMM shape
         + attention FLOPs / fused-attention rate of the layer's attention shape
         + elementwise bytes / memory bandwidth
         + kernels × launch overhead

- the matmul rate is the calibrated FLOP/s of the layer's own GEMM shape
  (attention projections B·M × d × d, FFN B·T × d × ff, head B·rows × d × out,
  projections of PEPITA and DFA at the head's and d × d shapes); a shape the
  calibration lacks takes the rate of the nearest calibrated size;
- fused attention (QKᵀ and PV: 4·B·M·N·d per forward pass, 10·B·M·N·d
  backward, torch's count) takes the calibrated rate of fused attention at the
  layer's (batch, heads, M, N, d_k); the backward is priced at the forward's rate;
- elementwise work is memory-bound: each elementwise FLOP is taken to read and
  write one element (2 × dtype bytes; an upper bound, since fused kernels do
  several FLOPs per element);
- kernels per layer and phase are each layer kind's declared ``kernels``
  (analytic/layers.py: what our code launches per layer instance and pass; an estimate);
- the optimizer step streams parameters, gradients and optimizer state.

Nothing is fitted to measured training steps: the only inputs are shapes, the
rule recipes and the calibration.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from ..analytic.catalogue import rule
from ..analytic.engine import instance_shapes
from ..analytic.layers import ATTENTION_KINDS, KINDS, layer_plan
from ..analytic.memory import DTYPE_BYTES, memory_table
from ..config.sweep import frame_configs

OPTIMIZER_STREAMS = {"sgd": 3, "momentum": 5, "adam": 8}  # tensors of parameter size read or written per element


def forward_passes(rule_name: str) -> int:
    """Full passes in a rule's executed forward phase (PEPITA 2, MEMPEPITA 3; the head runs once)."""
    parts = rule(rule_name).recipe_for("executed", {"mirror_steps": 1}).get("forward", [])
    return sum(times for quantity, times in parts if quantity in ("forward", "forward_modulated")) or 1


def _nearest(table: pd.DataFrame, keys: list[str], wanted: np.ndarray, rate: str) -> np.ndarray:
    """The rate of each wanted shape: exact where calibrated, else of the calibrated shape of nearest work."""
    if table.empty or len(wanted) == 0:
        return np.full(len(wanted), np.nan)
    calibrated = table[keys].to_numpy(dtype=float)
    work_c = np.log(np.prod(calibrated, axis=1))
    work_w = np.log(np.prod(np.maximum(wanted.astype(float), 1), axis=1))
    exact = (calibrated[None, :, :] == wanted[:, None, :]).all(axis=2)
    distance = np.abs(work_w[:, None] - work_c[None, :]) + np.where(exact, -1e9, 0)
    return table[rate].to_numpy()[np.argmin(distance, axis=1)]


def layer_shapes(rows: pd.DataFrame, configs: pd.DataFrame) -> pd.DataFrame:
    """Per executed row: its GEMM shape (m, n, k), the first its layer kind declares, and its
    attention shape (batch·heads, M, N, d_k)."""
    shapes = instance_shapes(configs)
    merged = rows[["config_id", "layer"]].merge(shapes, on=["config_id", "layer"], how="left").merge(
        configs, on="config_id", how="left")
    c = {column: merged[column].to_numpy() for column in merged.columns}  # positional: rows' own order
    m, n, k = (np.zeros(len(merged), dtype=np.int64) for _ in range(3))
    for kind in dict.fromkeys(c["layer_kind"]):
        spec = KINDS.get(kind)
        if spec is None or spec.gemms is None:
            continue
        index = np.nonzero(c["layer_kind"] == kind)[0]
        s = SimpleNamespace(d=c["d_model"][index], h=c["heads"][index], ff=c["d_ff"][index], V=c["vocab"][index],
                            classes=c["classes"][index], M=c["M"][index], N=c["N"][index], out=c["out"][index])
        rows_, n[index], k[index] = (np.broadcast_to(v, len(index)) for v in spec.gemms(s)[0])
        m[index] = c["batch"][index] * rows_
    return pd.DataFrame({
        "m": m, "n": n, "k": k,
        "att_bh": c["batch"] * c["heads"], "att_m": c["M"], "att_n": c["N"], "att_dk": c["d_model"] // c["heads"],
        "batch": c["batch"], "d_model": c["d_model"],
    }, index=rows.index)


def predict_layer_times(executed: pd.DataFrame, configs: pd.DataFrame, calibration: dict) -> pd.DataFrame:
    """``executed`` rows (one cost model's layer table) with ``predicted_time_s`` and its parts."""
    rows = executed.copy()
    shapes = layer_shapes(rows, configs)
    dtype_bytes = DTYPE_BYTES[calibration["dtype"]]
    matmuls = pd.DataFrame(calibration["matmul"])
    attention = pd.DataFrame(calibration.get("attention", []))
    kind, phase, rule = rows["layer_kind"].to_numpy(), rows["phase"].to_numpy(), rows["rule"].to_numpy()
    is_attention = np.isin(kind, ATTENTION_KINDS)
    passes = np.where(phase == "forward", pd.Series(rule).map({r: forward_passes(r) for r in set(rule)}).to_numpy(), 0)
    per_pass = 4 * shapes["batch"].to_numpy() * shapes["att_m"].to_numpy() * shapes["att_n"].to_numpy() * shapes["d_model"].to_numpy()
    attention_flops = np.where(is_attention, np.where(phase == "forward", passes * per_pass,
                                                      np.where(phase == "backward", 2.5 * per_pass, 0)), 0)
    attention_flops = np.minimum(attention_flops, rows["flops"].to_numpy())
    matmul_flops = rows["flops"].to_numpy() - attention_flops
    gemm_rate = _nearest(matmuls, ["m", "n", "k"], shapes[["m", "n", "k"]].to_numpy(), "flops_per_s")
    if len(attention):
        att_rate = _nearest(attention, ["bh", "m", "n", "dk"], shapes[["att_bh", "att_m", "att_n", "att_dk"]].to_numpy(),
                            "flops_per_s")
    else:
        att_rate = gemm_rate
    with np.errstate(divide="ignore", invalid="ignore"):
        matmul_time = np.where(matmul_flops > 0, matmul_flops / gemm_rate, 0.0)
        attention_time = np.where(attention_flops > 0, attention_flops / att_rate, 0.0)
    elementwise = rows["elementwise_flops"].fillna(0).to_numpy(dtype=float)
    # The softmax of fused attention runs inside the attention kernel (priced with it), not through memory.
    scores = per_pass / (4 * shapes["d_model"].to_numpy()) * shapes["att_bh"].to_numpy() / shapes["batch"].to_numpy()
    in_kernel = np.where(is_attention, np.where(phase == "forward", passes * 6 * scores,
                                                np.where(phase == "backward", 10 * scores, 0)), 0)
    per_element = {k: KINDS[k].flops_per_element if k in KINDS else 1.0 for k in set(kind)}
    elements = np.maximum(elementwise - in_kernel, 0) / pd.Series(kind).map(per_element).to_numpy()
    memory_time = elements * 2 * dtype_bytes / calibration["bandwidth_bytes_per_s"]
    kernels = np.array([KINDS[k].kernels.get(p, 0) if k in KINDS else 0 for k, p in zip(kind, phase)], dtype=float)
    head = np.array([k in KINDS and KINDS[k].family == "head" for k in kind], dtype=bool)
    kernels = kernels * np.where(phase == "forward", np.where(head, 1, np.maximum(passes, 1)), 1)
    launch_time = kernels * calibration["launch_overhead_s"]
    rows["predicted_matmul_s"] = matmul_time + attention_time
    rows["predicted_memory_s"] = memory_time
    rows["predicted_launch_s"] = launch_time
    rows["predicted_time_s"] = matmul_time + attention_time + memory_time + launch_time
    return rows


def optimizer_time(configs: pd.DataFrame, rule_name: str, optimizer: str, calibration: dict) -> pd.Series:
    """Seconds of one optimizer step per configuration: parameter-sized streams plus one launch per tensor.

    The parameter count is the memory model's (feedback matrices included for KP, whose B are parameters).
    """
    dtype_bytes = DTYPE_BYTES[calibration["dtype"]]
    memory = memory_table(configs, [rule_name], [calibration["dtype"]], [optimizer]).set_index("config_id")
    times = {}
    trains_feedback = rule(rule_name).memory.trains_feedback
    for c in frame_configs(configs):
        plan = layer_plan(c)
        tensors = sum(KINDS[kind].tensors for _, kind in plan)
        elements = int(memory.at[c.config_id, "parameter_count"])
        if trains_feedback:  # its feedback matrices are parameters too: one per weight matrix
            elements += int(memory.at[c.config_id, "feedback"]) // dtype_bytes
            tensors += sum(KINDS[kind].tensors for _, kind in plan if KINDS[kind].weights is not None) // 2
        streams = OPTIMIZER_STREAMS[optimizer] * elements * dtype_bytes
        times[c.config_id] = streams / calibration["bandwidth_bytes_per_s"] + tensors * calibration["launch_overhead_s"]
    return pd.Series(times)


def predict_steps(executed: pd.DataFrame, configs: pd.DataFrame, calibration: dict, optimizer: str = "sgd") -> pd.DataFrame:
    """Predicted seconds per (config_id, rule): the layers' phases plus the optimizer step."""
    timed = predict_layer_times(executed, configs, calibration)
    steps = timed.groupby(["config_id", "rule"], as_index=False)["predicted_time_s"].sum()
    extra = []
    for rule, part in steps.groupby("rule"):
        chosen = configs[configs["config_id"].isin(part["config_id"])]
        extra.append(optimizer_time(chosen, rule, optimizer, calibration).rename("optimizer").reset_index()
                     .rename(columns={"index": "config_id"}).assign(rule=rule))
    steps = steps.merge(pd.concat(extra), on=["config_id", "rule"], how="left")
    steps["predicted_time_s"] = steps["predicted_time_s"] + steps["optimizer"].fillna(0)
    return steps.drop(columns=["optimizer"])


def accuracy(predicted: np.ndarray, measured: np.ndarray) -> dict:
    """MAPE (mean |predicted − measured| / measured) and Spearman's rank correlation."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    keep = np.isfinite(predicted) & np.isfinite(measured) & (measured > 0)
    predicted, measured = predicted[keep], measured[keep]
    if len(measured) == 0:
        return {"n": 0, "mape": np.nan, "spearman": np.nan}
    mape = float(np.mean(np.abs(predicted - measured) / measured))
    spearman = float(pd.Series(predicted).rank().corr(pd.Series(measured).rank())) if len(measured) > 1 else np.nan
    return {"n": int(len(measured)), "mape": mape, "spearman": spearman}
