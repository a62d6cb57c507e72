"""``results/summary.md``: the headline numbers of a sweep in a few short tables."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analytic import cost_model_names, rule_names


def _table(frame: pd.DataFrame, floatfmt: str = ".2f") -> str:
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    lines = [header, rule]
    for _, row in frame.iterrows():
        cells = []
        for value in row:
            if isinstance(value, (float, np.floating)):
                cells.append("n/a" if not np.isfinite(value) else format(value, floatfmt))
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def model_errors(comparison: pd.DataFrame) -> pd.DataFrame:
    steps = comparison[comparison["granularity"] == "step"]
    rows = []
    for model in [m for m in cost_model_names() if m in set(steps["cost_model"])]:
        part = steps[steps["cost_model"] == model]["flops_rel_error"]
        rows.append({"cost model": model, "median error": f"{part.median():+.1%}", "median |error|": f"{part.abs().median():.1%}",
                     "worst |error|": f"{part.abs().max():.1%}", "runs": len(part)})
    return pd.DataFrame(rows)


def ratio_table(ratios: pd.DataFrame, measured_configs) -> pd.DataFrame:
    """Median rule/BP ratio over the measured configurations, by source."""
    part = ratios[ratios["config_id"].isin(measured_configs)]
    wide = part.assign(column=np.where(part["source"] == "measured", "measured " + part["metric"].str.replace("_", " "),
                                       part["source"] + " FLOPs"))
    table = wide.pivot_table(index="rule", columns="column", values="ratio_to_bp", aggfunc="median")
    columns = [c for c in ["paper FLOPs", "executed FLOPs", "kaplan FLOPs", "measured flops", "measured step time"] if c in table]
    table = table.reindex([r for r in rule_names() if r in table.index])[columns].reset_index()
    return table.rename(columns={"measured flops": "measured FLOPs"})


FLAGGED = ("noisy", "contended")


def _pct(v: float) -> str:
    return "n/a" if not np.isfinite(v) else f"{v:.0%}"


NO_TRUSTED_CALIBRATION = "No trusted calibration"


def untrusted_calibration(calibration: dict | None) -> str:
    """The line a summary opens its step-time section with when the calibration did not converge, or converged while
    its own process was contended (measure/load.py: it got clearly less CPU than it asked for, or other work held
    the cores; such a calibration priced every run slow, docs/measurement.md); '' otherwise."""
    if not calibration:
        return ""
    load = calibration.get("load") or {}
    if calibration.get("trusted", True) and load.get("timing_quality") != "contended":
        return ""
    if calibration.get("trusted", True):
        cpu, others = load.get("cpu_time_per_wall", float("nan")), load.get("runnable_others_median", float("nan"))
        return (f"**{NO_TRUSTED_CALIBRATION}**: the device's calibration converged, but its own timing was contended "
                f"(it got {cpu:.2f} of a core per second of wall-clock, beside a median of {others:g} other runnable "
                f"tasks on {load.get('cores', '?')} cores). The predicted times below come from it, so every run counts "
                "as untrusted and no accuracy is claimed; run the calibration again on a quiet machine.")
    return (f"**{NO_TRUSTED_CALIBRATION}**: the machine was busy while the device was calibrated "
            f"({calibration.get('untrusted', 'no convergence')}). The predicted times below come from its unconverged "
            "rounds, so every run counts as untrusted and no accuracy is claimed; run the calibration again on a "
            "quiet machine.")


def concurrency_line(timed_at_once: int | None, calibration: dict | None) -> str:
    """How many timed jobs ran at once and what the calibration ran beside: the concurrency bias, said."""
    if not timed_at_once:
        return ""
    neighbours = int((calibration or {}).get("neighbours", 0) or 0)
    beside = (f"the calibration ran beside {neighbours} training process{'es' if neighbours != 1 else ''}"
              if neighbours else "the calibration ran alone")
    if timed_at_once == 1:
        return (f"Timed runs: one at a time (`train.timed_at_once: 1`), so no timed step shared the machine with another "
                f"training job; {beside}.")
    return (f"Timed runs: up to {timed_at_once} at a time (`train.timed_at_once: {timed_at_once}`, the default 2); {beside}"
            + ("." if neighbours else ", where the timed steps shared the machine with each other (a bias either way: "
               "a calibration beside a neighbour scored worse, docs/measurement.md, \"The concurrency bias\")."))


def step_time_section(comparison: pd.DataFrame, calibration: dict | None = None,
                      timed_at_once: int | None = None) -> list[str]:
    from .predictor import accuracy

    executed = comparison[comparison["cost_model"] == "executed"]
    steps = executed[executed["granularity"] == "step"]
    if "predicted_time_s" not in steps or steps["predicted_time_s"].isna().all():
        return ["## Step-time prediction", "", "No device calibration or no traces: no predicted step times.", ""]
    quality = executed["timing_quality"].fillna("unknown") if "timing_quality" in executed else \
        pd.Series("ok", index=executed.index)
    trusted = ~quality.isin(FLAGGED)
    untrusted = untrusted_calibration(calibration)
    if untrusted:  # an unconverged calibration: no run's prediction is trusted
        trusted = pd.Series(False, index=executed.index)
    flagged = steps[~trusted.loc[steps.index]]
    rows = []
    for device, part in steps.groupby(steps["device_name"].astype(str)):
        for rule, mine in [("all", part), *((r, part[part["rule"] == r]) for r in rule_names() if r in set(part["rule"]))]:
            left_out = int((~trusted.loc[mine.index]).sum())
            mine = mine[trusted.loc[mine.index]]
            score = accuracy(mine["predicted_time_s"], mine["measured_time_s"])
            long = mine[mine["measured_time_s"] >= 1e-3]
            score_long = accuracy(long["predicted_time_s"], long["measured_time_s"])
            rows.append({"device": device, "rule": rule, "runs": score["n"], "left out": left_out, "MAPE": _pct(score["mape"]),
                         "Spearman": score["spearman"], "MAPE, steps >= 1 ms": _pct(score_long["mape"]),
                         "predicted / measured (median)": float(np.median(mine["predicted_time_s"] / mine["measured_time_s"]))
                         if len(mine) else float("nan")})
    concurrency = concurrency_line(timed_at_once, calibration)
    lines = ["## Step-time prediction", "", *([untrusted, ""] if untrusted else []),
             *([concurrency, ""] if concurrency else []),
             "The predictor (docs/measurement.md) prices the operations that a trace of each run's step contains with "
             "the device's calibration of those kernels; it is never fitted to training steps. MAPE = mean |predicted − "
             "measured| / measured. Runs whose timings were flagged `noisy` or `contended` (docs/measurement.md) are "
             "left out of MAPE and Spearman"
             + (f": {len(flagged)} here ({', '.join(f'{n} {q}' for q, n in quality[flagged.index].value_counts().items())})."
                if len(flagged) else "; none was flagged."), "",
             _table(pd.DataFrame(rows)), ""]
    timed = executed[(executed["granularity"] == "phase") & executed["predicted_time_s"].notna()
                     & executed["measured_time_s"].notna()]
    phases = timed[trusted.loc[timed.index]]
    lines += ["Per phase (each run's measured phase time against the predicted time of the ops traced in that "
              "phase; work between phases counts in the step only):", ""]
    if len(phases):
        rows = []
        for phase, part in phases.groupby("phase", sort=False):
            score = accuracy(part["predicted_time_s"], part["measured_time_s"])
            rows.append({"phase": phase, "cells": score["n"], "MAPE": _pct(score["mape"]), "Spearman": score["spearman"],
                         "predicted / measured (median)": float(np.median(part["predicted_time_s"] / part["measured_time_s"]))})
        lines += [_table(pd.DataFrame(rows)), ""]
    elif len(timed):  # a busy machine: the findings come out, the accuracy is not claimed
        runs = len(timed.drop_duplicates(["config_id", "rule"]))
        lines += [f"No trusted run: the timings of all {runs} timed runs were flagged (noisy or contended), so no "
                  "per-phase accuracy is claimed.", ""]
    else:
        lines += ["No phase was both timed and predicted.", ""]
    good = steps[trusted.loc[steps.index] & steps["predicted_time_s"].notna() & (steps["measured_time_s"] > 0)]
    classes = ("matmul", "attention", "elementwise", "launch")
    if len(good) and "measured_launch_s" in good and good["measured_launch_s"].notna().any():
        good = good[good["measured_launch_s"].notna()]
        rows = []
        for c in classes:
            predicted, measured = good[f"predicted_{c}_s"], good[f"measured_{c}_s"]
            rows.append({"class": c, "runs it misses most": int((good["miss_class"] == c).sum()),
                         "predicted, share of the step": _pct(float((predicted / good["predicted_time_s"]).median())),
                         "measured, share of the step": _pct(float((measured / good["measured_time_s"]).median())),
                         "predicted − measured, share of the step": f"{float(((predicted - measured) / good['measured_time_s']).median()):+.0%}"})
        lines += ["Where the misses come from. The last step of each run is profiled (torch.profiler) and split by "
                  "class of work, as the prediction is: the kernels of each class (their dispatch included), and "
                  "`launch`, everything around the kernels (views, autograd's nodes, the optimizer's Python, the "
                  "interpreter between ops), which the predictor prices as views and host terms (docs/measurement.md). Medians over runs:", "",
                  _table(pd.DataFrame(rows)), ""]
    return lines


def write_summary(comparison: pd.DataFrame, ratios: pd.DataFrame, measured: pd.DataFrame, path,
                  extra: str | None = None, calibration: dict | None = None, timed_at_once: int | None = None) -> str:
    """``extra``: a section written elsewhere (the scaling study's), appended as it is; ``calibration``: the device
    calibration the predictions used (one that did not converge marks the step-time section)."""
    from ..io import write_text

    runs = measured.groupby(["config_id", "rule", "seed"], as_index=False).first()
    ok = runs[runs["status"] == "ok"]
    lines = ["# trainingcost: summary of the sweep", ""]
    if len(runs):
        device = ", ".join(sorted(set(runs["device_name"].astype(str))))
        statuses = ", ".join(f"{n} {s}" for s, n in runs["status"].value_counts().items())
        lines += [f"{len(runs)} measured runs ({statuses}) of {runs['config_id'].nunique()} configurations on {device}; "
                  f"dtype {', '.join(sorted(set(runs['dtype'])))}; torch {runs['torch_version'].iloc[0]}.", ""]
    failed = runs[runs["status"] != "ok"]
    if len(failed):
        lines += ["## Runs that did not finish", "",
                  _table(failed[["config_id", "rule", "seed", "status", "message"]].fillna("")
                         .assign(message=lambda f: f["message"].astype(str).str.replace("|", "/"))), ""]
    if len(ok) == 0:
        lines += ["No run finished: nothing to compare.", ""]
        text = "\n".join(lines + ([extra] if extra else []))
        write_text(text, path)
        return text
    lines += ["## How close is each cost model to the measured FLOPs?", "",
              "Error = predicted / measured − 1 for a whole training step, over every measured run.", "",
              _table(model_errors(comparison)), ""]
    lines += ["## What does each rule cost relative to BP?", "",
              "Median over the measured configurations of rule / BP on the same configuration.", "",
              _table(ratio_table(ratios, ok["config_id"])), ""]
    steps = comparison[(comparison["granularity"] == "step") & (comparison["cost_model"] == "executed")]
    columns = ["predicted_memory_bytes", "measured_tensor_peak_bytes", "paper_memory_bytes", "measured_peak_memory_bytes"]
    columns = [c for c in columns if c in steps]
    per_config = steps.pivot_table(index="config_id", columns="rule", values=columns, aggfunc="median")

    def median_ratio(column: str, rule: str, base: str) -> float:
        if (column, rule) not in per_config or (column, base) not in per_config:
            return float("nan")
        return float((per_config[(column, rule)] / per_config[(column, base)]).median())

    if "bp" in set(steps["rule"]):
        source = str(steps["memory_source"].iloc[0])
        process = "process peak RSS" if source.startswith("cpu") else "CUDA max allocated"
        rows = []
        for rule in [r for r in ("bp", "pepita", "mempepita") if r in set(steps["rule"])]:
            row = {"rule": rule}
            names = {"predicted_memory_bytes": "executed model", "measured_tensor_peak_bytes": "measured tensor peak",
                     "paper_memory_bytes": "components summed", "measured_peak_memory_bytes": process}
            for column in columns:
                row[f"{names[column]} / BP"] = median_ratio(column, rule, "bp")
            row["measured tensor peak / PEPITA"] = median_ratio("measured_tensor_peak_bytes", rule, "pepita")
            rows.append(row)
        both = steps.dropna(subset=["predicted_memory_bytes", "measured_tensor_peak_bytes"])
        unreplayed = both[both["predicted_memory_bytes"] < 0]  # -1: a step the tape does not replay (yet)
        both = both[both["predicted_memory_bytes"] >= 0]
        exact = int((both["predicted_memory_bytes"] == both["measured_tensor_peak_bytes"]).sum())
        worst = float((both["predicted_memory_bytes"] / both["measured_tensor_peak_bytes"] - 1).abs().max()) if len(both) else 0.0
        untaped = (f" It does not replay the steps of {len(unreplayed)} runs yet "
                   f"({', '.join(sorted(set(unreplayed['rule'])))}; docs/cost_models.md)." if len(unreplayed) else "")
        lines += ["## Memory: MEMPEPITA against PEPITA and BP", "",
                  f"The executed memory model (analytic/tape) equals the measured tensor peak to the byte on "
                  f"{exact} of the {len(both)} measured runs whose step it replays (largest relative difference "
                  f"{worst:.2%}).{untaped}", "",
                  "Median over configurations of each rule's bytes / BP's on the same configuration. The measured "
                  "tensor peak is the counted "
                  "step's, from the tensor meter (docs/measurement.md), on every device; the executed model replays "
                  "the step's allocations and frees from shapes; the components summed are the paper's accounting "
                  f"(every component as if alive together); `{source}`"
                  + (" does not isolate the model's tensors." if source.startswith("cpu") else " includes allocator rounding."),
                  "", _table(pd.DataFrame(rows)), ""]
    depth, which = depth_series(ok)
    loss = depth.pivot_table(index="rule", columns="blocks", values="val_loss", aggfunc="median")
    loss = loss.reindex([r for r in rule_names() if r in loss.index])
    loss.columns = [f"{c} blocks" for c in loss.columns]
    lines += ["## Validation loss by depth and rule", "",
              f"Median over seeds, after {int(ok['steps'].max())} steps, of {which}.", "",
              _table(loss.reset_index()), ""]
    lines += step_time_section(comparison, calibration, timed_at_once)
    text = "\n".join(lines + ([extra] if extra else []))
    write_text(text, path)
    return text


# what a depth series holds fixed: every shape but the blocks, and the task (a loss compares within one task only)
SERIES_KEY = ("arch", "task", "d_model", "heads", "d_ff", "seq_len", "vocab", "batch", "classes")


def depth_series(ok: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs that differ in depth only (the series with the most depths; ties: the most runs), and what they are.
    A median across tasks or arches (a classifier's loss beside a language model's) would compare nothing."""
    runs = ok.assign(blocks=ok["enc_layers"] + ok["dec_layers"])
    key = [c for c in SERIES_KEY if c in runs]
    if runs.empty or not key:
        return runs, "the runs"
    groups = runs.groupby(key, dropna=False)
    best = max(groups.groups, key=lambda g: (groups.get_group(g)["blocks"].nunique(), len(groups.get_group(g))))
    chosen = groups.get_group(best)
    named = dict(zip(key, best if isinstance(best, tuple) else (best,)))
    return chosen, (f"the {named.get('arch', '')} runs that differ only in depth ({named.get('task', '')} task, "
                    f"d_model {named.get('d_model')}, {named.get('seq_len')} tokens)")


def flagged_runs_warning(measured_path) -> str | None:
    """One warning line when any run's timings were flagged noisy or contended (printed at the workflow's end)."""
    measured = pd.read_parquet(measured_path)
    if "timing_quality" not in measured:
        return None
    runs = measured.groupby(["config_id", "rule", "seed"], as_index=False)["timing_quality"].first()
    flagged = runs[runs["timing_quality"].isin(["noisy", "contended"])]
    if flagged.empty:
        return None
    counts = ", ".join(f"{n} {q}" for q, n in flagged["timing_quality"].value_counts().items())
    return (f"WARNING: {len(flagged)} of {len(runs)} runs have untrusted timings ({counts}): the machine was busy or "
            "the step times spread; they are left out of the step-time accuracy (results/summary.md)")
