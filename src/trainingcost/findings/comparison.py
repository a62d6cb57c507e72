"""Predicted against measured: every cost model joined with the measured runs, and rule-to-BP ratios.

Predicted and measured values stay in separate columns. Three granularities,
each the finest that a cost model and the measurement share:

- ``layer``: (config_id, rule, seed, layer, phase), for the per-layer cost
  models (``paper``, ``executed``). A cell that one side lacks is 0 there (the
  measurement has no row for a layer that runs no matrix product);
- ``phase``: (config_id, rule, seed, phase), for every cost model; the
  measured phase time sits beside it;
- ``step``: (config_id, rule, seed), the whole training step, for every cost
  model; with the measured step time and peak memory beside the memory models': ``predicted_memory_bytes``
  is the executed model's step peak (analytic/tape; a mixture of experts' replayed with the routing its run
  recorded), ``paper_memory_bytes`` the components summed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

KEYS = ["config_id", "rule", "seed"]
COMPARISON_COLUMNS = [
    "config_id", "rule", "seed", "cost_model", "granularity", "layer", "phase",
    "predicted_flops", "measured_flops", "flops_ratio", "flops_rel_error",
    "predicted_time_s", "measured_time_s", "predicted_memory_bytes", "measured_peak_memory_bytes", "memory_source",
    "measured_tensor_peak_bytes", "paper_memory_bytes", "timing_quality",
    "predicted_matmul_s", "predicted_attention_s", "predicted_elementwise_s", "predicted_launch_s", "dominant_class",
    "measured_matmul_s", "measured_attention_s", "measured_elementwise_s", "measured_launch_s", "miss_class",
    "bytes_moved", "ops",
    "arch", "d_model", "enc_layers", "dec_layers", "seq_len", "tgt_len", "batch", "dtype", "device_name", "status",
]
RUN_COLUMNS = ["arch", "d_model", "enc_layers", "dec_layers", "seq_len", "tgt_len", "batch", "dtype", "device_name", "status",
               "optimizer", "step_time_median_s", "peak_memory_bytes", "memory_source", "flops_per_step",
               "tensor_peak_bytes", "timing_quality",
               "measured_matmul_s", "measured_attention_s", "measured_elementwise_s", "measured_launch_s"]


def _ratios(frame: pd.DataFrame) -> pd.DataFrame:
    measured = frame["measured_flops"].astype("float64")
    predicted = frame["predicted_flops"].astype("float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(measured > 0, predicted / measured, np.nan)
    frame["flops_ratio"] = ratio
    frame["flops_rel_error"] = ratio - 1.0
    return frame


def runs_of(measured: pd.DataFrame) -> pd.DataFrame:
    """One row per measured run, with its run-level columns."""
    columns = [c for c in RUN_COLUMNS if c in measured.columns]
    return measured.groupby(KEYS, sort=False, as_index=False)[columns].first()


def routed_memory(step: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """A mixture of experts' runs: ``predicted_memory_bytes`` replayed with the routing each run recorded at its metered
    step (``tensor_routing``; analytic/tape/moe.py) in place of the memory table's token-balanced peak."""
    if "tensor_routing" not in measured or not measured["tensor_routing"].notna().any():
        return step
    import json

    from ..analytic.memory import memory_table
    from ..config import configs_frame
    from ..config.model import config_from_row

    step = step.copy()
    routed = measured[measured["tensor_routing"].notna()].groupby(KEYS, sort=False).first().reset_index()
    for _, run in routed.iterrows():
        cfg = config_from_row(run)
        row = memory_table(configs_frame([("", cfg)]), [run["rule"]], [run["dtype"]], [run["optimizer"]],
                           routing=json.loads(run["tensor_routing"])).iloc[0]
        at = (step["config_id"] == run["config_id"]) & (step["rule"] == run["rule"]) & (step["seed"] == run["seed"])
        step.loc[at, "predicted_memory_bytes"] = row["peak"]
    return step


def comparison_table(analytic: pd.DataFrame, measured: pd.DataFrame, memory: pd.DataFrame | None = None) -> pd.DataFrame:
    """The predicted-against-measured table (see the module docstring)."""
    ok = measured[measured["status"] == "ok"]
    runs = runs_of(ok)
    if runs.empty:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    cells = ok[ok["layer"] != ""][KEYS + ["layer", "phase", "flops", "phase_time_median_s"]]
    predicted = analytic[analytic["config_id"].isin(runs["config_id"]) & analytic["rule"].isin(runs["rule"])]
    frames = []

    # Per layer: the per-layer cost models, each measured run against its configuration's rows.
    per_layer = predicted[predicted["layer"] != "model"]
    if len(per_layer):
        left = per_layer.merge(runs[KEYS], on=["config_id", "rule"])
        both = left.merge(cells[KEYS + ["layer", "phase", "flops"]], on=KEYS + ["layer", "phase"], how="outer",
                          suffixes=("", "_measured"))
        # A measured cell no per-layer model has (optimizer_step) is not a layer comparison.
        both = both[both["cost_model"].notna()]
        frame = pd.DataFrame({
            **{k: both[k] for k in KEYS}, "cost_model": both["cost_model"], "granularity": "layer",
            "layer": both["layer"], "phase": both["phase"],
            "predicted_flops": both["flops"].fillna(0).astype("int64"),
            "measured_flops": both["flops_measured"].fillna(0).astype("int64"),
        })
        frames.append(frame)

    # Per phase and per step: every cost model.
    phase_measured = cells.groupby(KEYS + ["phase"], as_index=False).agg(
        measured_flops=("flops", "sum"), measured_time_s=("phase_time_median_s", "first"))
    phase_predicted = predicted.groupby(["config_id", "rule", "cost_model", "phase"], as_index=False)["flops"].sum()
    phase = phase_predicted.merge(runs[KEYS], on=["config_id", "rule"]).merge(phase_measured, on=KEYS + ["phase"], how="left")
    # A measured phase no cost model has a row for (the optimizer step: no FLOPs) is a phase row of every cost
    # model too, at 0 FLOPs, so its time stands beside a predicted time.
    models = phase[KEYS + ["cost_model"]].drop_duplicates()
    extra = models.merge(phase_measured, on=KEYS).merge(phase[KEYS + ["cost_model", "phase"]], how="left", indicator=True,
                                                        on=KEYS + ["cost_model", "phase"])
    extra = extra[extra["_merge"] == "left_only"].drop(columns="_merge").assign(flops=0)
    phase = pd.concat([phase, extra], ignore_index=True).rename(columns={"flops": "predicted_flops"})
    phase["measured_flops"] = phase["measured_flops"].fillna(0).astype("int64")
    phase["granularity"], phase["layer"] = "phase", ""
    frames.append(phase)

    step_predicted = predicted.groupby(["config_id", "rule", "cost_model"], as_index=False)["flops"].sum()
    step = step_predicted.merge(runs, on=["config_id", "rule"])
    step = step.rename(columns={"flops": "predicted_flops", "flops_per_step": "measured_flops",
                                "step_time_median_s": "measured_time_s", "peak_memory_bytes": "measured_peak_memory_bytes",
                                "tensor_peak_bytes": "measured_tensor_peak_bytes"})
    step["measured_flops"] = step["measured_flops"].fillna(0).astype("int64")
    step["granularity"], step["layer"], step["phase"] = "step", "", ""
    if memory is not None and len(memory):
        executed = "peak" if "peak" in memory else "total"  # memory tables from before the executed model
        model = memory.assign(predicted_memory_bytes=memory[executed], paper_memory_bytes=memory["total"])[
            ["config_id", "rule", "optimizer", "dtype", "predicted_memory_bytes", "paper_memory_bytes"]]
        step = step.merge(model, on=["config_id", "rule", "optimizer", "dtype"], how="left")
        step = routed_memory(step, ok)
    frames.append(step)

    table = pd.concat(frames, ignore_index=True)
    table = table.drop(columns=[c for c in RUN_COLUMNS if c in table.columns and c not in COMPARISON_COLUMNS])
    table = table.merge(runs[KEYS + [c for c in RUN_COLUMNS if c in runs.columns and c in COMPARISON_COLUMNS]], on=KEYS,
                        how="left", suffixes=("_drop", ""))
    table = table.drop(columns=[c for c in table.columns if c.endswith("_drop")])
    for column in COMPARISON_COLUMNS:
        if column not in table.columns:
            table[column] = np.nan
    table = _ratios(table[COMPARISON_COLUMNS].copy())
    order = {"layer": 0, "phase": 1, "step": 2}
    table = table.sort_values(["config_id", "rule", "seed", "cost_model", "granularity"], key=lambda s: s.map(order) if s.name == "granularity" else s,
                              kind="stable").reset_index(drop=True)
    for column in ("predicted_flops", "measured_flops"):
        table[column] = table[column].astype("int64")
    return table


def other_device_runs(measured: pd.DataFrame, calibration: dict | None) -> pd.DataFrame:
    """The runs (``KEYS``) measured on another device than the calibration's: one calibration prices one device's
    kernels, and a SLURM partition may hold several GPU models (profiles/slurm, ``slurm_extra``)."""
    name = (calibration or {}).get("device_name")
    if not name or "device_name" not in measured:
        return measured.iloc[0:0][KEYS]
    runs = measured.drop_duplicates(KEYS)
    return runs.loc[runs["device_name"].notna() & (runs["device_name"] != name), KEYS + ["device_name"]]


def add_trace_columns(comparison: pd.DataFrame, trace: pd.DataFrame, calibration: dict | None,
                      other_devices: pd.DataFrame | None = None) -> pd.DataFrame:
    """From the runs' traces (measure/trace.py): ``bytes_moved`` and ``ops`` (kernels) on the ``executed`` model's
    layer and phase rows, cell for cell with its FLOPs; with a calibration, the predicted time on every step and
    phase row (findings/predictor.py: every cost model's row gets the same prediction, the predictor prices what
    runs), its parts per class of work and the class with the largest part (``dominant_class``); none for the runs of
    ``other_devices`` (:func:`other_device_runs`), which that calibration does not describe."""
    from .predictor import PARTS, cell_totals, dominant_part, miss_class, predict_phases

    out = comparison.drop(columns=[c for c in ("bytes_moved", "ops", "predicted_time_s", *[f"predicted_{p}" for p in PARTS],
                                               "dominant_class") if c in comparison.columns])
    if trace.empty:
        return out.reindex(columns=COMPARISON_COLUMNS)
    layer_cells = cell_totals(trace, KEYS + ["layer", "phase"]).assign(granularity="layer")
    phase_cells = cell_totals(trace, KEYS + ["phase"]).assign(granularity="phase", layer="")
    cells = pd.concat([layer_cells, phase_cells], ignore_index=True).drop(columns="flops").assign(cost_model="executed")
    out = out.merge(cells, on=KEYS + ["cost_model", "granularity", "layer", "phase"], how="left")
    priced = trace
    if other_devices is not None and len(other_devices):
        other = trace[KEYS].merge(other_devices[KEYS].drop_duplicates(), how="left", indicator=True)["_merge"]
        priced = trace[(other == "left_only").to_numpy()]
    if calibration is not None and len(priced):
        phases = predict_phases(priced, calibration)
        renamed = {p: f"predicted_{p}" for p in PARTS}
        steps = phases.groupby(KEYS, as_index=False)[["predicted_time_s", *PARTS]].sum()
        steps["dominant_class"] = dominant_part(steps)
        phases["dominant_class"] = dominant_part(phases)
        predicted = pd.concat([phases.assign(granularity="phase"), steps.assign(granularity="step", phase="")],
                              ignore_index=True).rename(columns=renamed)
        out = out.merge(predicted, on=KEYS + ["granularity", "phase"], how="left")
        if "measured_launch_s" in out:
            step = out["granularity"] == "step"
            for name in PARTS:  # the profiled split is the step's: on step rows only
                out[f"measured_{name}"] = out[f"measured_{name}"].where(step)
            out["miss_class"] = miss_class(out, out).where(step)
    return out.reindex(columns=COMPARISON_COLUMNS)


def rule_ratios(analytic: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Each rule's cost relative to BP on the same configuration: per cost model, and as measured.

    ``source`` is a cost model's name (metric ``flops``) or ``measured`` (metrics ``flops``,
    ``step_time``, ``peak_memory`` and ``tensor_peak``, medians over seeds). Configurations without a BP row
    have no ratio.
    """
    totals = analytic.groupby(["config_id", "cost_model", "rule"], as_index=False)["flops"].sum()
    predicted = totals.rename(columns={"cost_model": "source", "flops": "value"}).assign(metric="flops")
    frames = [predicted]
    ok = measured[measured["status"] == "ok"]
    if len(ok):
        runs = runs_of(ok)
        if "tensor_peak_bytes" not in runs:  # tables from before the tensor meter
            runs = runs.assign(tensor_peak_bytes=np.nan)
        per_rule = runs.groupby(["config_id", "rule"], as_index=False).agg(
            flops=("flops_per_step", "median"), step_time=("step_time_median_s", "median"),
            peak_memory=("peak_memory_bytes", "median"), tensor_peak=("tensor_peak_bytes", "median"))
        for metric in ("flops", "step_time", "peak_memory", "tensor_peak"):
            frames.append(per_rule[["config_id", "rule", metric]].rename(columns={metric: "value"})
                          .assign(source="measured", metric=metric))
    table = pd.concat(frames, ignore_index=True)
    table["value"] = table["value"].astype("float64")
    bp = table[table["rule"] == "bp"][["config_id", "source", "metric", "value"]].rename(columns={"value": "bp_value"})
    table = table.merge(bp, on=["config_id", "source", "metric"], how="inner")
    table["ratio_to_bp"] = table["value"] / table["bp_value"]
    return table[["config_id", "rule", "source", "metric", "value", "bp_value", "ratio_to_bp"]].reset_index(drop=True)
