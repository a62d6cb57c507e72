"""Communication findings of a data-parallel sweep (``train.parallel.nproc`` > 1; docs/distributed.md): per run,
the bytes the communication model gives and the meter saw per step, the collectives, the measured communication
seconds and their share of the step, the predicted seconds where a collectives calibration is given, and what the
rule communicates that BP does not.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..analytic.catalogue import rule
from ..analytic.comm import comm_seconds, mechanism, run_collectives

COMM_COLUMNS = ["config_id", "rule", "seed", "parallel", "nproc", "dtype", "status", "model_bytes_per_step",
                "measured_bytes_per_step", "bytes_exact", "model_collectives_per_step", "measured_collectives_per_step",
                "measured_comm_s_per_step", "predicted_comm_s_per_step", "step_time_s", "comm_share",
                "bytes_vs_bp", "beyond_bp"]


def beyond_bp(name: str, parallel: str = "ddp") -> str:
    """What rule ``name`` communicates that BP does not (from its declared feedback and mechanism)."""
    memory = rule(name).memory
    how = ("" if mechanism(name) == "hooks" else
           "; its updates bypass autograd's hooks, so one explicit all-reduce after the whole update (no overlap "
           "with a backward)")
    if memory.feedback == "weights" and memory.trains_feedback:
        extra = "the gradients of its trained feedback B, one per weight matrix: the weight matrices' bytes again"
    elif memory.feedback == "inverses":
        extra = "the gradients of its trained inverses V_l, c_l: blocks x (d^2 + d) elements"
    elif memory.feedback == "error_weights":
        extra = "the gradients of its trained error weights E_l, E_head: blocks x d^2 + out x d elements"
    elif memory.feedback == "none":
        extra = "nothing" if name == "bp" else "nothing more"
    elif name == "wm":  # mirror steps: replicated, every rank updates B alike
        extra = "nothing more: its B is updated by mirror steps that every rank repeats alike, never sent"
    else:  # fixed feedback: FA's B, DFA's projections, PEPITA's F
        extra = "nothing more: its feedback is fixed, never sent"
    return ("—" if name == "bp" else extra) + how


def _model_steps(cfg, name, parallel, nproc, dtype, first: int, last: int, replicate: int = 1):
    """The model's collectives of steps first..last (the steps the measured means cover), HSDP's replica groups
    included."""
    return [run_collectives(cfg, name, parallel, nproc, dtype, step, replicate) for step in range(first, last + 1)]


def replica_groups_of(run: dict) -> int:
    """A measured run's HSDP replica groups (1 where the column is absent or empty: runs before it existed)."""
    value = run.get("replicate", 1)
    return 1 if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def comm_table(measured: pd.DataFrame, configs: pd.DataFrame, calibration: dict | None = None) -> pd.DataFrame:
    """One row per distributed run of ``measured`` (``nproc`` > 1): model and meter bytes per step (means over the
    steps after warm-up, as the meter's), collectives per step, measured and predicted seconds per step, the share
    of the median step, the bytes relative to BP's on the same configuration and sharding, and ``beyond_bp``."""
    from ..config.model import config_from_row

    if "nproc" not in measured.columns:
        return pd.DataFrame(columns=COMM_COLUMNS)
    runs = measured[measured["nproc"].fillna(1) > 1]
    cfgs = {row["config_id"]: config_from_row(row) for row in configs.to_dict("records")}
    rows = []
    for run in runs.to_dict("records"):
        cfg, nproc = cfgs.get(run["config_id"]), int(run["nproc"])
        first, last = int(run.get("warmup", 0) or 0) + 1, int(run["steps"])
        out = {k: run.get(k) for k in ("config_id", "rule", "seed", "parallel", "dtype", "status")}
        out.update(nproc=nproc, measured_bytes_per_step=run.get("comm_bytes_per_step", math.nan),
                   measured_collectives_per_step=run.get("collectives_per_step", math.nan),
                   measured_comm_s_per_step=run.get("comm_s_slowest_per_step", run.get("comm_s_per_step", math.nan)),
                   step_time_s=run.get("step_time_median_s", math.nan), beyond_bp=beyond_bp(run["rule"]))
        if cfg is not None and last >= first:
            steps = _model_steps(cfg, run["rule"], run["parallel"], nproc, run["dtype"], first, last,
                                 replica_groups_of(run))
            n = len(steps)
            out["model_bytes_per_step"] = sum(c.bytes for s in steps for c in s) / n
            out["model_collectives_per_step"] = sum(len(s) for s in steps) / n
            if calibration is not None:
                out["predicted_comm_s_per_step"] = sum(comm_seconds(s, calibration) for s in steps) / n
        rows.append(out)
    table = pd.DataFrame(rows).reindex(columns=COMM_COLUMNS)
    if table.empty:
        return table
    table["bytes_exact"] = table["model_bytes_per_step"] == table["measured_bytes_per_step"]
    table["comm_share"] = table["measured_comm_s_per_step"] / table["step_time_s"]
    bp = table[table["rule"] == "bp"].groupby(["config_id", "parallel", "dtype"])["model_bytes_per_step"].first()
    keys = list(zip(table["config_id"], table["parallel"], table["dtype"]))
    table["bytes_vs_bp"] = [row / bp.get(key, np.nan) for row, key in zip(table["model_bytes_per_step"], keys)]
    return table


def comm_figure(table: pd.DataFrame):
    """Bytes and seconds of communication per step, per rule and sharding, and communication's share of the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from .style import rule_styles

    styles = rule_styles()
    order = [r for r in styles if r in set(table["rule"])]
    data = table.assign(label=table["rule"].map(lambda r: styles[r].label),
                        MB=table["measured_bytes_per_step"] / 1e6, ms=table["measured_comm_s_per_step"] * 1e3,
                        share=100 * table["comm_share"])
    labels = [styles[r].label for r in order]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), constrained_layout=True)
    panels = [("MB", "MB communicated per step (per rank)"), ("ms", "communication per step (ms, measured)"),
              ("share", "communication's share of the step (%)")]
    for ax, (column, title) in zip(axes, panels):
        sns.barplot(data=data, x="label", y=column, hue="parallel", order=labels, ax=ax, errorbar=None)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.tick_params(axis="x", rotation=45)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
    if "predicted_comm_s_per_step" in data and data["predicted_comm_s_per_step"].notna().any():
        predicted = data.groupby(["label", "parallel"])["predicted_comm_s_per_step"].mean() * 1e3
        parallels = list(dict.fromkeys(data["parallel"]))
        width = 0.8 / len(parallels)
        for j, parallel in enumerate(parallels):
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(labels))]
            ys = [predicted.get((label, parallel), np.nan) for label in labels]
            axes[1].scatter(xs, ys, marker="_", s=200, color="black", zorder=3,
                            label="predicted (calibration)" if j == 0 else None)
        axes[1].legend(fontsize=8)
    nproc = ", ".join(str(n) for n in sorted(set(data["nproc"])))
    fig.suptitle(f"Data-parallel communication per rule ({nproc} processes; bytes: the meter's, equal to the model's)",
                 fontsize=11)
    return fig


def comm_section(table: pd.DataFrame) -> str:
    """The summary's communication section: per rule and sharding, bytes and seconds, and what it sends beyond BP."""
    if table.empty:
        return ""
    lines = ["## Communication (data-parallel runs)", ""]
    exact = int(table["bytes_exact"].sum())
    lines += [f"The communication model's bytes equal the meter's on {exact} of {len(table)} runs "
              "(analytic/comm.py; docs/distributed.md).", ""]
    lines += ["| rule | parallel | N | MB/step | x BP | collectives/step | comm ms/step (measured) | predicted ms | "
              "share of step |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table.sort_values(["parallel", "rule"]).itertuples():
        lines.append(f"| {r.rule} | {r.parallel} | {r.nproc} | {r.measured_bytes_per_step / 1e6:.3f} | "
                     f"{r.bytes_vs_bp:.2f} | {r.measured_collectives_per_step:g} | "
                     f"{r.measured_comm_s_per_step * 1e3:.2f} | "
                     f"{'' if pd.isna(r.predicted_comm_s_per_step) else f'{r.predicted_comm_s_per_step * 1e3:.2f}'} | "
                     f"{r.comm_share:.0%} |")
    lines += ["", "What each rule communicates that BP does not:", ""]
    for name in dict.fromkeys(table["rule"]):
        lines.append(f"- **{name}**: {beyond_bp(name)}")
    return "\n".join(lines) + "\n"
