"""The workflow's figures: predicted against measured, rule by rule, in one consistent style.

Every figure is written as PNG and PDF, atomically. One colour per rule in every
figure (seaborn's colour-blind-safe palette), the ``executed`` model drawn
solid, the ``paper`` model dashed, measurements as points. Titles state the
finding, computed from the data they show. Sizes suit a paper column (3.4 in)
or the full width (7 in).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .analytic import COST_MODELS, RULES, layer_table  # noqa: E402
from .io import atomic_write  # noqa: E402

RULE_COLORS = dict(zip(RULES, sns.color_palette("colorblind", len(RULES))))
RULE_LABELS = {"bp": "BP", "pepita": "PEPITA", "mempepita": "MEMPEPITA", "fa": "FA", "kp": "KP", "wm": "WM", "dfa": "DFA"}
MODEL_LINES = {"paper": (0, (4, 2)), "executed": "solid"}
COLUMN, FULL = 3.4, 7.0


def style() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=0.85)
    plt.rcParams.update({"axes.titlesize": 8, "figure.titlesize": 9, "legend.fontsize": 7, "pdf.fonttype": 42})


def save(fig, png: str | Path) -> list[Path]:
    """Write ``png`` and the PDF beside it, each atomically."""
    png = Path(png)
    written = [atomic_write(path, lambda tmp, fmt=path.suffix[1:]: fig.savefig(tmp, format=fmt, dpi=200, bbox_inches="tight"))
               for path in (png, png.with_suffix(".pdf"))]
    plt.close(fig)
    return written


def _rule_legend(fig, rules, **kwargs):
    handles = [plt.Line2D([], [], color=RULE_COLORS[r], marker="o", linestyle="", markersize=4) for r in rules]
    fig.legend(handles, [RULE_LABELS[r] for r in rules], ncol=len(rules), frameon=False, **kwargs)


def _pct(x: float) -> str:
    return f"{x:+.0%}" if np.isfinite(x) else "n/a"


# ---------------------------------------------------------------------------
# 1. Predicted against measured FLOPs


def predicted_vs_measured_flops(comparison: pd.DataFrame):
    steps = comparison[comparison["granularity"] == "step"]
    models = [m for m in COST_MODELS if m in set(steps["cost_model"])]
    fig, axes = plt.subplots(1, len(models), figsize=(FULL, 1.9), sharex=True, sharey=True, squeeze=False)
    errors = {}
    for ax, model in zip(axes[0], models):
        part = steps[steps["cost_model"] == model]
        errors[model] = float(np.median(part["flops_rel_error"]))
        sns.scatterplot(data=part, x="measured_flops", y="predicted_flops", hue="rule", palette=RULE_COLORS,
                        hue_order=[r for r in RULES if r in set(part["rule"])], s=12, ax=ax, legend=False, edgecolor="none")
        ax.set(xscale="log", yscale="log", title=f"{model}: median error {_pct(errors[model])}",
               xlabel="measured FLOPs per step")
        ax.set_ylabel("predicted FLOPs per step")
    lo = steps[["measured_flops", "predicted_flops"]].replace(0, np.nan).min().min()
    hi = steps[["measured_flops", "predicted_flops"]].max().max()
    for ax in axes[0]:
        ax.plot([lo, hi], [lo, hi], color="0.3", linewidth=0.8, zorder=0)
    exact = [m for m, e in errors.items() if abs(e) < 1e-9]
    others = ", ".join(f"{m} {_pct(e)}" for m, e in errors.items() if m not in exact)
    lead = f"Only the {' and '.join(exact)} model predicts the measured FLOPs exactly" if exact else "No model predicts the measured FLOPs"
    fig.suptitle(f"{lead}; the others miss by {others} (median per step)", y=1.1)
    _rule_legend(fig, [r for r in RULES if r in set(steps["rule"])], loc="lower center", bbox_to_anchor=(0.5, -0.18))
    return fig


# ---------------------------------------------------------------------------
# 2. Per-layer breakdown of one configuration


def layer_breakdown(analytic: pd.DataFrame, config_id: str, describe: str):
    rows = analytic[(analytic["config_id"] == config_id) & analytic["cost_model"].isin(["paper", "executed"])]
    sums = rows.groupby(["cost_model", "rule", "phase", "layer_kind"], as_index=False)["flops"].sum()
    kinds = [k for k in dict.fromkeys(rows["layer_kind"]) if sums.loc[sums["layer_kind"] == k, "flops"].sum() > 0]
    colors = dict(zip(kinds, sns.color_palette("Set2", len(kinds))))
    fig, axes = plt.subplots(1, 2, figsize=(FULL, 2.8), sharey=True)
    totals = {}
    for ax, model in zip(axes, ["paper", "executed"]):
        part = sums[sums["cost_model"] == model]
        bars = part.pivot_table(index=["rule", "phase"], columns="layer_kind", values="flops", aggfunc="sum", fill_value=0)
        order = [(r, p) for r in RULES for p in ("forward", "backward", "error_projection", "weight_update", "feedback_update", "mirror")
                 if (r, p) in bars.index]
        bars = bars.reindex(order)[[k for k in kinds if k in bars.columns]]
        bottom = np.zeros(len(bars))
        x = np.arange(len(bars))
        for kind in bars.columns:
            ax.bar(x, bars[kind].to_numpy(), bottom=bottom, color=colors[kind], width=0.8, label=kind)
            bottom += bars[kind].to_numpy()
        ax.set_xticks(x, [f"{RULE_LABELS[r]} {p.replace('_', ' ')}" for r, p in bars.index], rotation=90, fontsize=6)
        for tick, (rule, _) in zip(ax.get_xticklabels(), bars.index):
            tick.set_color(RULE_COLORS[rule])
        ax.set(title=f"{model} model", ylabel="FLOPs per step")
        totals[model] = part.groupby("rule")["flops"].sum()
    ratio = {m: totals[m].get("pepita", np.nan) / totals[m].get("bp", np.nan) for m in totals}
    fig.suptitle(f"Where the FLOPs go ({describe}): PEPITA/BP = {ratio['paper']:.2f} under the paper model, "
                 f"{ratio['executed']:.2f} as executed", y=1.02)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in kinds]
    fig.legend(handles, [k.replace("_", " ") for k in kinds], ncol=4, frameon=False, loc="lower center", bbox_to_anchor=(0.5, -0.32))
    return fig


# ---------------------------------------------------------------------------
# 3-4. Scaling with sequence length and width; rule-to-BP ratios


def axis_configs(base: dict, axis: str, values: list[int]) -> pd.DataFrame:
    """``base`` with one axis varied (tgt_len follows seq_len; heads kept where they divide d_model)."""
    from .config import configs_frame

    pairs = []
    for value in values:
        cfg = dict(base, **{axis: int(value)})
        if axis == "seq_len":
            cfg["tgt_len"] = int(value)
        if axis == "d_model":
            if value % cfg["heads"]:
                continue
            cfg["d_ff"] = int(base["d_ff"] * value // base["d_model"])
        pairs.append(("", cfg))
    return configs_frame(pairs)


def scaling_curves(base: dict, axes: dict[str, list[int]], rules=RULES) -> pd.DataFrame:
    frames = []
    for axis, values in axes.items():
        configs = axis_configs(base, axis, values)
        table = layer_table(configs, rules, ["paper", "executed"])
        totals = table.groupby(["config_id", "rule", "cost_model"], as_index=False)["flops"].sum()
        totals = totals.merge(configs[["config_id", axis]].rename(columns={axis: "value"}), on="config_id")
        frames.append(totals.assign(axis=axis))
    return pd.concat(frames, ignore_index=True)


def _on_axis(runs: pd.DataFrame, base: dict, axis: str) -> pd.DataFrame:
    """Measured runs whose configuration is ``base`` but for ``axis``."""
    fixed = [k for k in ("arch", "heads", "enc_layers", "dec_layers", "vocab", "batch", "classes", "d_model", "seq_len") if k != axis]
    if axis == "d_model":
        fixed.remove("heads")
    mask = np.ones(len(runs), dtype=bool)
    for key in fixed:
        if key in runs.columns:
            mask &= runs[key].to_numpy() == base[key]
    return runs[mask]


def scaling(curves: pd.DataFrame, runs: pd.DataFrame, base: dict, describe: str):
    axes_names = list(dict.fromkeys(curves["axis"]))
    fig, axes = plt.subplots(1, len(axes_names), figsize=(FULL, 2.6), squeeze=False)
    for ax, axis in zip(axes[0], axes_names):
        part = curves[curves["axis"] == axis]
        for (rule, model), line in part.groupby(["rule", "cost_model"], sort=False):
            ax.plot(line["value"], line["flops"], color=RULE_COLORS[rule], linestyle=MODEL_LINES[model], linewidth=1)
        points = _on_axis(runs, base, axis)
        if len(points):
            ax.scatter(points[axis], points["flops_per_step"], c=[RULE_COLORS[r] for r in points["rule"]], s=14, zorder=3,
                       edgecolor="black", linewidth=0.4)
        ax.set(xscale="log", yscale="log", xlabel={"seq_len": "sequence length (tokens)", "d_model": "d_model"}[axis],
               ylabel="FLOPs per training step")
    last = curves[curves["axis"] == "seq_len"]
    if len(last):
        top = last[last["value"] == last["value"].max()].set_index(["rule", "cost_model"])["flops"]
        paper, executed = top["pepita", "paper"] / top["bp", "paper"], top["pepita", "executed"] / top["bp", "executed"]
        title = (f"At {int(last['value'].max())} tokens PEPITA costs {paper:.2f}x BP under the paper model "
                 f"but {executed:.2f}x as executed ({describe})")
    else:
        title = f"Training cost against width ({describe})"
    fig.suptitle(title, y=1.04)
    handles = [plt.Line2D([], [], color="0.2", linestyle=MODEL_LINES[m]) for m in ("paper", "executed")]
    handles.append(plt.Line2D([], [], color="0.2", marker="o", linestyle="", markeredgecolor="black", markersize=4))
    fig.legend(handles, ["paper model", "executed model", "measured"], ncol=3, frameon=False, loc="lower center",
               bbox_to_anchor=(0.3, -0.12))
    _rule_legend(fig, list(dict.fromkeys(curves["rule"])), loc="lower center", bbox_to_anchor=(0.5, -0.2))
    return fig


def ratio_to_bp(curves: pd.DataFrame, runs: pd.DataFrame, base: dict, describe: str):
    part = curves[curves["axis"] == "seq_len"]
    bp = part[part["rule"] == "bp"][["value", "cost_model", "flops"]].rename(columns={"flops": "bp"})
    part = part.merge(bp, on=["value", "cost_model"])
    part["ratio"] = part["flops"] / part["bp"]
    measured = _on_axis(runs, base, "seq_len")
    if len(measured):
        base_runs = measured[measured["rule"] == "bp"][["seq_len", "flops_per_step", "step_time_median_s"]]
        measured = measured.merge(base_runs, on="seq_len", suffixes=("", "_bp"))
        measured = measured.assign(flops_ratio=measured["flops_per_step"] / measured["flops_per_step_bp"],
                                   time_ratio=measured["step_time_median_s"] / measured["step_time_median_s_bp"])
    rules = [r for r in RULES if r != "bp" and r in set(part["rule"])]
    fig, axes = plt.subplots(2, 3, figsize=(FULL, 3.8), sharex=True, squeeze=False)
    for ax, rule in zip(axes.flat, rules):
        for model, line in part[part["rule"] == rule].groupby("cost_model"):
            ax.plot(line["value"], line["ratio"], color=RULE_COLORS[rule], linestyle=MODEL_LINES[model], linewidth=1.2)
        if len(measured):
            mine = measured[measured["rule"] == rule]
            ax.scatter(mine["seq_len"], mine["flops_ratio"], color=RULE_COLORS[rule], edgecolor="black", s=16, zorder=3, linewidth=0.4)
            ax.scatter(mine["seq_len"], mine["time_ratio"], color="white", edgecolor=RULE_COLORS[rule], marker="s", s=14, zorder=3)
        ax.axhline(1.0, color="0.5", linewidth=0.6)
        ax.set(xscale="log", title=RULE_LABELS[rule], xlabel="sequence length (tokens)", ylabel="cost / BP")
    top = part[part["value"] == part["value"].max()].set_index(["rule", "cost_model"])["ratio"]
    fig.suptitle(f"PEPITA's saving over BP is a convention: {top['pepita', 'paper']:.2f}x under the paper model, "
                 f"{top['pepita', 'executed']:.2f}x as executed, at {int(part['value'].max())} tokens ({describe})", y=1.02)
    handles = [plt.Line2D([], [], color="0.2", linestyle=MODEL_LINES[m]) for m in ("paper", "executed")]
    handles += [plt.Line2D([], [], color="0.2", marker="o", linestyle=""),
                plt.Line2D([], [], color="0.2", marker="s", markerfacecolor="white", linestyle="")]
    fig.legend(handles, ["paper model", "executed model", "measured FLOPs", "measured step time"], ncol=4, frameon=False,
               loc="lower center", bbox_to_anchor=(0.5, -0.06))
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# 6-8. Memory, learning, energy


def peak_memory(comparison: pd.DataFrame):
    steps = comparison[(comparison["granularity"] == "step") & (comparison["cost_model"] == "executed")].copy()
    steps["label"] = steps["arch"] + " L" + (steps["enc_layers"] + steps["dec_layers"]).astype(int).astype(str) + " T" + \
        steps["seq_len"].astype(int).astype(str)
    cuda = steps["memory_source"].eq("cuda_max_memory_allocated").any()
    sources = [("predicted_memory_bytes", "memory model (bytes of one step)")]
    if cuda:
        sources.append(("measured_peak_memory_bytes", "measured peak (torch.cuda.max_memory_allocated)"))
    fig, axes = plt.subplots(1, len(sources), figsize=(COLUMN * len(sources), 2.6), squeeze=False, sharey=True)
    rules = [r for r in RULES if r in set(steps["rule"])]
    for ax, (column, title) in zip(axes[0], sources):
        data = steps.assign(MiB=steps[column] / 2**20)
        sns.barplot(data=data, x="label", y="MiB", hue="rule", hue_order=rules, palette=RULE_COLORS, ax=ax, legend=False,
                    errorbar=None)
        ax.set(title=title, xlabel="", ylabel="MiB")
        ax.tick_params(axis="x", rotation=90, labelsize=6)
    source = "measured_peak_memory_bytes" if cuda else "predicted_memory_bytes"
    per_rule = steps.groupby("rule")[source].median()
    ratio = per_rule.get("mempepita", np.nan) / per_rule.get("bp", np.nan)
    ratio_p = per_rule.get("mempepita", np.nan) / per_rule.get("pepita", np.nan)
    what = "measured" if cuda else "by the memory model (CPU runs measure no tensor memory)"
    fig.suptitle(f"MEMPEPITA needs {ratio:.2f}x BP's memory and {ratio_p:.2f}x PEPITA's, {what}", y=1.03)
    _rule_legend(fig, rules, loc="lower center", bbox_to_anchor=(0.5, -0.25))
    return fig


def loss_by_depth(runs: pd.DataFrame, steps_run: int):
    runs = runs.assign(depth=runs["enc_layers"] + runs["dec_layers"])
    rules = [r for r in RULES if r in set(runs["rule"])]
    fig, axes = plt.subplots(1, 2, figsize=(FULL, 2.4), sharex=True)
    for ax, (column, label) in zip(axes, [("val_loss", "validation loss (nats per target)"), ("val_accuracy", "validation accuracy")]):
        sns.lineplot(data=runs, x="depth", y=column, hue="rule", hue_order=rules, palette=RULE_COLORS, marker="o", ax=ax,
                     legend=False, errorbar=None, markersize=4)
        ax.set(xlabel="blocks", ylabel=label)
        ax.set_xticks(sorted(runs["depth"].unique()))
    deepest = runs[runs["depth"] == runs["depth"].max()].groupby("rule")["val_loss"].median()
    best = deepest.idxmin() if len(deepest) else "bp"
    fig.suptitle(f"After {steps_run} steps, {RULE_LABELS[best]} has the lowest validation loss at depth "
                 f"{int(runs['depth'].max())} ({', '.join(f'{RULE_LABELS[r]} {deepest[r]:.2f}' for r in rules if r in deepest)})",
                 y=1.04)
    _rule_legend(fig, rules, loc="lower center", bbox_to_anchor=(0.5, -0.12))
    return fig


def energy(runs: pd.DataFrame):
    data = runs.dropna(subset=["energy_per_step_j"])
    rules = [r for r in RULES if r in set(data["rule"])]
    fig, ax = plt.subplots(figsize=(COLUMN, 2.4))
    sns.barplot(data=data, x="rule", y="energy_per_step_j", order=rules, hue="rule", palette=RULE_COLORS, ax=ax, legend=False,
                errorbar=None)
    ax.set(xlabel="", ylabel="energy per step (J)")
    per_rule = data.groupby("rule")["energy_per_step_j"].median()
    fig.suptitle(f"Energy per step, median over configurations: PEPITA {per_rule.get('pepita', np.nan) / per_rule.get('bp', np.nan):.2f}x BP",
                 y=1.02)
    return fig
