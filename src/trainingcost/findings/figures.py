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

from ..analytic import PHASES, cost_model_names, layer_table  # noqa: E402
from ..analytic.tape import replays  # noqa: E402
from ..io import atomic_write  # noqa: E402
from .style import rule_styles  # noqa: E402

# Every rule and cost model of the catalogue, in table order; panels are laid out from their number.
STYLES = rule_styles()
RULES = tuple(STYLES)
RULE_COLORS = {rule: style.color for rule, style in STYLES.items()}
RULE_LABELS = {rule: style.label for rule, style in STYLES.items()}
RULE_MARKERS = {rule: style.marker for rule, style in STYLES.items()}
COST_MODELS = cost_model_names()
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


def _grid(panels: int, ncols: int = 3) -> tuple[int, int]:
    """(rows, columns) of a grid that holds ``panels`` panels, ``ncols`` wide at most."""
    ncols = max(1, min(ncols, panels))
    return -(-panels // ncols), ncols


def _pct(x: float) -> str:
    return f"{x:+.0%}" if np.isfinite(x) else "n/a"


# ---------------------------------------------------------------------------
# 1. Predicted against measured FLOPs


def predicted_vs_measured_flops(comparison: pd.DataFrame):
    steps = comparison[comparison["granularity"] == "step"]
    models = [m for m in COST_MODELS if m in set(steps["cost_model"])]
    rules = [r for r in RULES if r in set(steps["rule"])]
    nrows, ncols = _grid(len(models) + 1)  # one panel per cost model, one for the legend
    fig, axes = plt.subplots(nrows, ncols, figsize=(FULL, 2.2 * nrows), sharex=True, sharey=True, squeeze=False)
    errors = {}
    lo = steps[["measured_flops", "predicted_flops"]].replace(0, np.nan).min().min() / 1.3
    hi = steps[["measured_flops", "predicted_flops"]].max().max() * 1.3
    markers = {r: RULE_MARKERS[r] for r in rules}
    for ax, model in zip(axes.flat, models):
        part = steps[steps["cost_model"] == model]
        errors[model] = float(np.median(part["flops_rel_error"]))
        ax.plot([lo, hi], [lo, hi], color="0.3", linewidth=0.8, zorder=0)
        sns.scatterplot(data=part, x="measured_flops", y="predicted_flops", hue="rule", palette=RULE_COLORS, hue_order=rules,
                        style="rule", style_order=rules, markers=markers, s=18, ax=ax, legend=False, edgecolor="none", alpha=0.85)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=f"{model} (median error {_pct(errors[model])})",
               xlabel="measured FLOPs per step", ylabel="predicted FLOPs per step")
        _log_ticks(ax)
    legend_ax = axes.flat[len(models)]
    legend_ax.axis("off")
    handles = [plt.Line2D([], [], color=RULE_COLORS[r], marker=RULE_MARKERS[r], linestyle="", markersize=5) for r in rules]
    legend_ax.legend(handles, [RULE_LABELS[r] for r in rules], loc="center", frameon=False, title="rule", ncol=2)
    for ax in axes.flat[len(models) + 1:]:
        ax.axis("off")
    exact = [m for m, e in errors.items() if abs(e) < 1e-9]
    others = ", ".join(f"{m} {_pct(e)}" for m, e in errors.items() if m not in exact)
    lead = (f"Only the {' and '.join(exact)} model predicts the measured FLOPs exactly"
            if exact else "No cost model predicts the measured FLOPs")
    fig.suptitle(f"{lead};\nthe others miss by {others} (median over {len(steps) // max(len(models), 1)} runs)")
    fig.tight_layout()
    return fig


def _log_ticks(ax) -> None:
    """Log axes labelled at 1, 2 and 5 x 10^k over a short span, at decades over a long one."""
    from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter

    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if axis.get_scale() != "log":
            continue
        decades = np.log10(max(limits) / max(min(limits), 1e-300))
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades < 2.5 else (1.0,)))
        axis.set_major_formatter(EngFormatter(places=0, sep=""))
        axis.set_minor_formatter(NullFormatter())


# ---------------------------------------------------------------------------
# 2. Per-layer breakdown of one configuration


def layer_breakdown(analytic: pd.DataFrame, config_id: str, describe: str):
    from matplotlib.ticker import EngFormatter

    rows = analytic[(analytic["config_id"] == config_id) & analytic["cost_model"].isin(["paper", "executed"])]
    sums = rows.groupby(["cost_model", "rule", "phase", "layer_kind"], as_index=False)["flops"].sum()
    kinds = [k for k in dict.fromkeys(rows["layer_kind"]) if sums.loc[sums["layer_kind"] == k, "flops"].sum() > 0]
    colors = dict(zip(kinds, sns.color_palette("Set2", len(kinds))))
    phases = PHASES
    short = {"forward": "fwd", "backward": "bwd", "error_projection": "proj", "target_propagation": "tgt",
             "weight_update": "W", "feedback_update": "fb", "mirror": "mir"}
    fig, axes = plt.subplots(2, 1, figsize=(FULL, 4.6), sharey=True)
    totals = {}
    for ax, model in zip(axes, ["paper", "executed"]):
        part = sums[sums["cost_model"] == model]
        bars = part.pivot_table(index=["rule", "phase"], columns="layer_kind", values="flops", aggfunc="sum", fill_value=0)
        order = [(r, p) for r in RULES for p in phases if (r, p) in bars.index]
        bars = bars.reindex(order)[[k for k in kinds if k in bars.columns]]
        rule_index = [RULES.index(r) for r, _ in bars.index]
        x = np.arange(len(bars)) + 0.8 * np.array(rule_index)  # a gap between rules
        bottom = np.zeros(len(bars))
        for kind in bars.columns:
            ax.bar(x, bars[kind].to_numpy(), bottom=bottom, color=colors[kind], width=0.85)
            bottom += bars[kind].to_numpy()
        ax.set_xticks(x, [short[p] for _, p in bars.index], fontsize=5.5, rotation=90)
        for rule in dict.fromkeys(r for r, _ in bars.index):
            where = x[[r == rule for r, _ in bars.index]]
            ax.text(where.mean(), 1.0, RULE_LABELS[rule], transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                    color=RULE_COLORS[rule], fontsize=6, fontweight="bold")
        ax.set_ylabel(f"{model} model\nFLOPs per step")
        if part.empty:  # the paper's model covers the 2017 transformer only (docs/cost_models.md)
            ax.text(0.5, 0.5, f"out of scope: the {model} model defines the 2017 transformer only",
                    transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.35")
        ax.yaxis.set_major_formatter(EngFormatter(places=0, sep=""))
        ax.grid(axis="x", visible=False)
        totals[model] = part.groupby("rule")["flops"].sum()
    ratio = {m: totals[m].get("pepita", np.nan) / totals[m].get("bp", np.nan) for m in totals}
    paper = (f"{ratio['paper']:.2f} under the paper model" if np.isfinite(ratio["paper"])
             else "the paper model out of scope")
    fig.suptitle(f"Where the FLOPs go ({describe}):\nPEPITA/BP = {paper}, {ratio['executed']:.2f} as executed")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in kinds]
    fig.legend(handles, [k.replace("_", " ") for k in kinds], ncol=len(kinds), frameon=False, loc="lower center",
               bbox_to_anchor=(0.5, -0.04))
    fig.text(0.99, 0.005, "fwd forward, bwd backward, proj error projection, tgt target propagation, W weight update, fb feedback update, mir mirror",
             ha="right", va="bottom", fontsize=6, color="0.3")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# ---------------------------------------------------------------------------
# 3-4. Scaling with sequence length and width; rule-to-BP ratios


def _ratio(totals: pd.Series, rule: str, model: str) -> float:
    """rule / BP under ``model`` from totals indexed by (rule, cost_model); NaN where either is missing."""
    try:
        return float(totals[rule, model] / totals["bp", model])
    except KeyError:
        return np.nan


def axis_configs(base, axis: str, values: list[int]) -> pd.DataFrame:
    """``base`` (a ModelConfig) with one axis varied (tgt_len follows seq_len; d_model values its heads do not divide are skipped)."""
    from ..config import configs_frame

    pairs = []
    for value in values:
        changes = {axis: int(value)}
        if axis == "seq_len":
            changes["tgt_len"] = int(value)
        if axis == "d_model":
            if value % base.heads:
                continue
            changes["d_ff"] = int(base.d_ff * value // base.d_model)
        pairs.append(("", base.replace(**changes)))
    return configs_frame(pairs)


def scaling_curves(base, axes: dict[str, list[int]], rules=None) -> pd.DataFrame:
    frames = []
    for axis, values in axes.items():
        configs = axis_configs(base, axis, values)
        table = layer_table(configs, list(rules or RULES), ["paper", "executed"])
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
            mask &= runs[key].to_numpy() == getattr(base, key)
    return runs[mask]


def scaling(curves: pd.DataFrame, runs: pd.DataFrame, base: dict, describe: str):
    axes_names = list(dict.fromkeys(curves["axis"]))
    rules = [r for r in RULES if r in set(curves["rule"])]
    fig, axes = plt.subplots(len(axes_names), 2, figsize=(FULL, 2.3 * len(axes_names) + 0.6), squeeze=False, sharey="row")
    labels = {"seq_len": "sequence length (tokens)", "d_model": "d_model"}
    for row, axis in enumerate(axes_names):
        points = _on_axis(runs, base, axis)
        for col, model in enumerate(["paper", "executed"]):
            ax = axes[row, col]
            part = curves[(curves["axis"] == axis) & (curves["cost_model"] == model)].sort_values("value")
            for rule in rules:
                line = part[part["rule"] == rule]
                ax.plot(line["value"], line["flops"], color=RULE_COLORS[rule], linestyle=MODEL_LINES[model], linewidth=1.1,
                        marker=RULE_MARKERS[rule], markersize=2.5)
            if len(points):
                ax.scatter(points[axis], points["flops_per_step"], c=[RULE_COLORS[r] for r in points["rule"]], s=22, zorder=3,
                           edgecolor="black", linewidth=0.5)
            ax.set(xscale="log", yscale="log", xlabel=labels[axis], ylabel="FLOPs per training step" if col == 0 else "",
                   title=f"{model} model" + (", with the measured runs (black edge)" if len(points) else ""))
            _log_ticks(ax)
    part = curves[curves["axis"] == "seq_len"]
    if len(part):
        top = part[part["value"] == part["value"].max()].set_index(["rule", "cost_model"])["flops"]
        paper, executed = _ratio(top, "pepita", "paper"), _ratio(top, "pepita", "executed")
        title = (f"At {int(part['value'].max())} tokens PEPITA costs {paper:.2f}x BP under the paper model,\n"
                 f"{executed:.2f}x as executed (varying one axis of: {describe})")
    else:
        title = f"Training cost against width ({describe})"
    fig.suptitle(title)
    handles = [plt.Line2D([], [], color=RULE_COLORS[r], marker=RULE_MARKERS[r], markersize=4) for r in rules]
    fig.legend(handles, [RULE_LABELS[r] for r in rules], ncol=len(rules), frameon=False, loc="lower center", bbox_to_anchor=(0.5, 0))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def ratio_to_bp(curves: pd.DataFrame, runs: pd.DataFrame, base: dict, describe: str):
    part = curves[curves["axis"] == "seq_len"]
    bp = part[part["rule"] == "bp"][["value", "cost_model", "flops"]].rename(columns={"flops": "bp"})
    part = part.merge(bp, on=["value", "cost_model"])
    part["ratio"] = part["flops"] / part["bp"]
    measured = _on_axis(runs, base, "seq_len")
    if len(measured):
        if "timing_quality" not in measured:
            measured = measured.assign(timing_quality="ok")
        base_runs = measured[measured["rule"] == "bp"][["seq_len", "flops_per_step", "step_time_median_s", "timing_quality"]]
        measured = measured.merge(base_runs, on="seq_len", suffixes=("", "_bp"))
        flagged = (measured["timing_quality"].isin(["noisy", "contended"])
                   | measured["timing_quality_bp"].isin(["noisy", "contended"]))
        measured = measured.assign(flops_ratio=measured["flops_per_step"] / measured["flops_per_step_bp"],
                                   time_ratio=measured["step_time_median_s"] / measured["step_time_median_s_bp"],
                                   flagged=flagged)
    rules = [r for r in RULES if r != "bp" and r in set(part["rule"])]
    nrows, ncols = _grid(len(rules))
    fig, axes = plt.subplots(nrows, ncols, figsize=(FULL, 2.1 * nrows), sharex=True, squeeze=False)
    for ax, rule in zip(axes.flat, rules):
        for model, line in part[part["rule"] == rule].sort_values("value").groupby("cost_model"):
            ax.plot(line["value"], line["ratio"], color=RULE_COLORS[rule], linestyle=MODEL_LINES[model], linewidth=1.2)
        if len(measured):
            mine = measured[measured["rule"] == rule]
            ax.scatter(mine["seq_len"], mine["flops_ratio"], color=RULE_COLORS[rule], edgecolor="black", s=16, zorder=3, linewidth=0.4)
            trusted, flagged = mine[~mine["flagged"]], mine[mine["flagged"]]
            ax.scatter(trusted["seq_len"], trusted["time_ratio"], color="white", edgecolor=RULE_COLORS[rule], marker="s",
                       s=14, zorder=3)
            ax.scatter(flagged["seq_len"], flagged["time_ratio"], color="0.55", marker="x", s=14, zorder=3, linewidth=0.8)
        ax.axhline(1.0, color="0.5", linewidth=0.6)
        ax.set(xscale="log", title=RULE_LABELS[rule], xlabel="sequence length (tokens)", ylabel="cost / BP")
    for ax in list(axes.flat)[len(rules):]:
        ax.axis("off")
    top = part[part["value"] == part["value"].max()].set_index(["rule", "cost_model"])["ratio"]
    fig.suptitle(f"Under the paper model PEPITA's saving grows far faster with context than in what runs:\n"
                 f"{top.get(('pepita', 'paper'), np.nan):.2f}x BP (paper) against {top.get(('pepita', 'executed'), np.nan):.2f}x "
                 f"(executed) at "
                 f"{int(part['value'].max())} tokens ({describe}, varying the length)", y=1.0)
    handles = [plt.Line2D([], [], color="0.2", linestyle=MODEL_LINES[m]) for m in ("paper", "executed")]
    handles += [plt.Line2D([], [], color="0.2", marker="o", linestyle=""),
                plt.Line2D([], [], color="0.2", marker="s", markerfacecolor="white", linestyle=""),
                plt.Line2D([], [], color="0.55", marker="x", linestyle="")]
    fig.legend(handles, ["paper model", "executed model", "measured FLOPs", "measured step time",
                         "step time, noisy or contended (untrusted)"], ncol=5, frameon=False,
               loc="lower center", bbox_to_anchor=(0.5, 0))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def nothing_measured(what: str):
    """A figure of measured points when no training run finished: it says so in words (issue 66, N9)."""
    fig, ax = plt.subplots(figsize=(COLUMN, 2.0))
    ax.axis("off")
    ax.text(0.5, 0.5, f"{what}:\nno training run finished, so nothing was measured\n(results/summary.md lists the "
            "runs and why)", ha="center", va="center", wrap=True)
    return fig


# ---------------------------------------------------------------------------
# 5. Step time


def step_time(comparison: pd.DataFrame, calibration_trusted: bool = True):
    """Predicted against measured step time, per device; scored on the trusted runs only, and not at all where the
    device calibration is not trusted (the summary's rule: "No trusted calibration")."""
    from .predictor import accuracy

    steps = comparison[(comparison["granularity"] == "step") & (comparison["cost_model"] == "executed")]
    rules = [r for r in RULES if r in set(steps["rule"])]
    devices = list(dict.fromkeys(steps["device_name"].astype(str)))
    fig, axes = plt.subplots(1, len(devices), figsize=(COLUMN * 1.4 * len(devices), 3.2), squeeze=False)
    scores = []
    flagged_all = (steps["timing_quality"].isin(["noisy", "contended"]) if "timing_quality" in steps
                   else pd.Series(False, index=steps.index))
    if not calibration_trusted:  # every run untrusted, as the summary counts them
        flagged_all = pd.Series(True, index=steps.index)
    for ax, device in zip(axes[0], devices):
        part = steps[steps["device_name"].astype(str) == device]
        trusted = part[~flagged_all.loc[part.index]]
        score = accuracy(trusted["predicted_time_s"], trusted["measured_time_s"])
        scores.append(score)
        data = part.assign(predicted_ms=part["predicted_time_s"] * 1e3, measured_ms=part["measured_time_s"] * 1e3)
        lo = np.nanmin(data[["predicted_ms", "measured_ms"]].to_numpy()) / 1.3
        hi = np.nanmax(data[["predicted_ms", "measured_ms"]].to_numpy()) * 1.3
        ax.plot([lo, hi], [lo, hi], color="0.3", linewidth=0.8, zorder=0)
        for rule in rules:
            mine = data[data["rule"] == rule]
            bad = flagged_all.loc[mine.index]
            ax.scatter(mine.loc[~bad, "measured_ms"], mine.loc[~bad, "predicted_ms"], color=RULE_COLORS[rule],
                       marker=RULE_MARKERS[rule], s=18)
            ax.scatter(mine.loc[bad, "measured_ms"], mine.loc[bad, "predicted_ms"], facecolors="none",
                       edgecolors=RULE_COLORS[rule], marker=RULE_MARKERS[rule], s=18, linewidths=0.8)  # hollow: flagged
        left_out = int(flagged_all.loc[part.index].sum())
        rank = f"{score['spearman']:.2f}" if np.isfinite(score["spearman"]) else "n/a"
        scored = (f"MAPE {score['mape']:.0%}, Spearman {rank} ({score['n']} run{'s' * (score['n'] != 1)}"
                  + (f"; {left_out} noisy or contended, hollow, left out)" if left_out else ")")
                  if score["n"] and np.isfinite(score["mape"]) else
                  f"no trusted run ({left_out} flagged, hollow)" if calibration_trusted else
                  "calibration not trusted: no accuracy claimed")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured step time (ms, median)",
               ylabel="predicted step time (ms)", title=f"{device}\n{scored}")
        _log_ticks(ax)
    scored = [s for s in scores if s["n"] and np.isfinite(s["mape"]) and np.isfinite(s["spearman"])]
    if scored:
        worst = max(scored, key=lambda s: s["mape"])
        fig.suptitle(f"The trace-driven predictor, calibrated on the device and never fitted to training steps,\n"
                     f"misses the measured step time by {worst['mape']:.0%} on average and ranks runs at "
                     f"Spearman {worst['spearman']:.2f}")
    elif not calibration_trusted:  # as results/summary.md: "No trusted calibration"
        fig.suptitle("No trusted calibration (results/device): the predictor's step times are drawn,\nno accuracy "
                     "is claimed (hollow: every run untrusted)")
    else:  # every run flagged (a busy machine): say so in words, never "nan%" (issue 63)
        fig.suptitle("No trusted step time to score the predictor:\nevery run was noisy or contended (a busy machine)")
    handles = [plt.Line2D([], [], color=RULE_COLORS[r], marker=RULE_MARKERS[r], linestyle="", markersize=5) for r in rules]
    ncol = min(len(rules), 5)
    fig.legend(handles, [RULE_LABELS[r] for r in rules], ncol=ncol, frameon=False, loc="lower center", bbox_to_anchor=(0.5, 0))
    fig.tight_layout(rect=(0, 0.03 + 0.065 * -(-len(rules) // ncol), 1, 1))  # room for the legend's rows below the axis label
    return fig


# ---------------------------------------------------------------------------
# 6-8. Memory, learning, energy


def run_label(frame: pd.DataFrame) -> pd.Series:
    """A short label per configuration: arch, blocks, tokens, and the head when it is a classifier."""
    arch = frame["arch"].map({"encoder": "enc", "decoder": "dec", "encoder-decoder": "enc-dec"}).fillna(frame["arch"])
    blocks = (frame["enc_layers"] + frame["dec_layers"]).astype(int).astype(str)
    label = arch + " L" + blocks + " T" + frame["seq_len"].astype(int).astype(str) + " d" + frame["d_model"].astype(int).astype(str)
    if "classes" in frame:
        label = label + np.where(frame["classes"].fillna(0).astype(int) > 0, " cls", "")
    return label + options_tag(frame)


# Short names of the architecture options away from their defaults, for labels.
OPTION_TAGS = {"norm": {"rmsnorm": "rms", "nonparametric": "plain-ln", "layernorm_nobias": "ln-nobias"}, "norm_position": {"pre": "pre", "output": "out-ln"},
               "ffn": {"relu": "relu", "swiglu": "swiglu", "geglu": "geglu"},
               "positions": {"learned": "learned", "rotary": "rope", "relative": "rel", "none": "nope"},
               "bias": {"none": "no-bias", "qkv": "qkv-bias", "ffn": "ffn-bias"},
               "parallel_block": {"one_norm": "parallel", "two_norms": "parallel2"}}


def options_tag(frame: pd.DataFrame) -> pd.Series:
    """' rms pre swiglu kv2 rope tied' for a configuration with options; '' for the 2017 transformer."""
    tag = pd.Series("", index=frame.index)
    for column, names in OPTION_TAGS.items():
        if column in frame:
            tag = tag + frame[column].map(lambda v, n=names: f" {n[v]}" if v in n else "").fillna("")
    if "kv_heads" in frame and "heads" in frame:
        fewer = frame["kv_heads"].notna() & (frame["kv_heads"] < frame["heads"])
        tag = tag + np.where(fewer, " kv" + frame["kv_heads"].fillna(0).astype(int).astype(str), "")
    if "tie_embeddings" in frame:
        tag = tag + np.where(frame["tie_embeddings"].fillna(False).astype(bool), " tied", "")
    return tag


def peak_memory(comparison: pd.DataFrame, runs: pd.DataFrame):
    steps = comparison[(comparison["granularity"] == "step") & (comparison["cost_model"] == "executed")].copy()
    described = ["classes", "heads", "kv_heads", "tie_embeddings", *OPTION_TAGS]  # what a label names
    steps = steps.merge(runs[["config_id", "rule", "seed", *(c for c in described if c in runs)]],
                        on=["config_id", "rule", "seed"], how="left")
    steps["label"] = run_label(steps)
    steps = steps.sort_values(["arch", "enc_layers", "dec_layers", "seq_len", "label"])
    cuda = steps["memory_source"].eq("cuda_max_memory_allocated").any()
    metered = steps["measured_tensor_peak_bytes"].notna().any() if "measured_tensor_peak_bytes" in steps else False
    sources = [("predicted_memory_bytes", "executed memory model: peak of one step, from shapes")]
    if metered:
        sources.append(("measured_tensor_peak_bytes", "measured tensor peak of one step (tensor meter)"))
    if "paper_memory_bytes" in steps and steps["paper_memory_bytes"].notna().any():
        sources.append(("paper_memory_bytes", "components summed, as if alive together (the paper's accounting)"))
    if cuda:
        sources.append(("measured_peak_memory_bytes", "measured peak (torch.cuda.max_memory_allocated)"))
    fig, axes = plt.subplots(len(sources), 1, figsize=(FULL, 2.4 * len(sources) + 0.6), squeeze=False)
    rules = [r for r in RULES if r in set(steps["rule"])]
    untaped = [r for r in rules if not replays(r)]  # rules the executed tape does not replay yet (TP, DTP, LRA)
    for ax, (column, title) in zip(axes[:, 0], sources):
        data = steps.assign(MiB=steps[column].where(steps[column] >= 0) / 2**20)  # -1: not replayed
        if column == "predicted_memory_bytes" and untaped:
            title += f" (no tape yet for {', '.join(RULE_LABELS[r] for r in untaped)})"
        sns.barplot(data=data, x="label", y="MiB", hue="rule", hue_order=rules, palette=RULE_COLORS, ax=ax, legend=False,
                    errorbar=None)
        ax.set(title=title, xlabel="", ylabel="MiB")
        missing = sorted(set(data.loc[data["MiB"].isna() & data["rule"].map(replays), "label"]))
        if missing:
            ax.text(0.5, 0.5, "not replayed: " + ", ".join(missing) + "\n(more blocks than the tape replays)", transform=ax.transAxes, ha="center", va="center",
                    fontsize=7, color="0.35")
        ax.tick_params(axis="x", rotation=30, labelsize=6)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
    source = "measured_tensor_peak_bytes" if metered else "measured_peak_memory_bytes" if cuda else "predicted_memory_bytes"
    per_config = steps.pivot_table(index="config_id", columns="rule", values=source, aggfunc="median")
    def median_ratio(rule, base):
        if rule not in per_config or base not in per_config:
            return np.nan
        return float((per_config[rule] / per_config[base]).median())

    ratio, ratio_p = median_ratio("mempepita", "bp"), median_ratio("mempepita", "pepita")
    what = ("measured tensor peaks" if metered else "measured on the GPU" if cuda
            else "by the memory model (these runs predate the tensor meter)")
    if np.isnan(ratio) and np.isnan(ratio_p):
        fig.suptitle(f"Peak memory of one training step per rule,\n{what}")
    else:
        fig.suptitle(f"MEMPEPITA needs {ratio:.2f}x BP's memory and {ratio_p:.2f}x PEPITA's (median over configurations),\n{what}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=RULE_COLORS[r]) for r in rules]
    fig.legend(handles, [RULE_LABELS[r] for r in rules], ncol=len(rules), frameon=False, loc="lower center", bbox_to_anchor=(0.5, 0))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def loss_by_depth(runs: pd.DataFrame, steps_run: int, unfinished: dict | None = None):
    """``unfinished``: rule -> status, for the rules none of whose runs finished (no line to draw; the title
    names them)."""
    runs = runs.assign(depth=runs["enc_layers"] + runs["dec_layers"])
    rules = [r for r in RULES if r in set(runs["rule"])]
    fig, axes = plt.subplots(1, 2, figsize=(FULL, 2.7), sharex=True)
    for ax, (column, label) in zip(axes, [("val_loss", "validation loss (nats per target)"), ("val_accuracy", "validation accuracy")]):
        per = runs.groupby(["rule", "depth"], as_index=False)[column].median()
        for rule in rules:
            line = per[per["rule"] == rule].sort_values("depth")
            ax.plot(line["depth"], line[column], color=RULE_COLORS[rule], marker=RULE_MARKERS[rule], markersize=4,
                    linestyle=(0, (3, 2)) if rule == "mempepita" else "solid", linewidth=1.2)
        ax.set(xlabel="blocks", ylabel=label)
        ax.set_xticks(sorted(runs["depth"].unique()))
    deepest = runs[runs["depth"] == runs["depth"].max()].groupby("rule")["val_loss"].median()
    best = deepest.idxmin() if len(deepest) else "bp"
    same = ""
    if {"pepita", "mempepita"} <= set(deepest.index) and np.isclose(deepest["pepita"], deepest["mempepita"]):
        same = "; MEMPEPITA (dashed) learns exactly as PEPITA"
    fig.suptitle(f"After {steps_run} training steps, {RULE_LABELS[best]} has the lowest validation loss at depth "
                 f"{int(runs['depth'].max())}{same}\n("
                 + ", ".join(f"{RULE_LABELS[r]} {deepest[r]:.2f}" for r in rules if r in deepest) + ")"
                 + "".join(f"; {RULE_LABELS.get(r, r)}: every run {status}" for r, status in (unfinished or {}).items()))
    handles = [plt.Line2D([], [], color=RULE_COLORS[r], marker=RULE_MARKERS[r], markersize=4,
                          linestyle=(0, (3, 2)) if r == "mempepita" else "solid") for r in rules]
    fig.legend(handles, [RULE_LABELS[r] for r in rules], ncol=len(rules), frameon=False, loc="lower center", bbox_to_anchor=(0.5, 0))
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    return fig


def energy(runs: pd.DataFrame):
    """Energy per step relative to BP on the same configuration, one box per rule (NVML); runs whose counter
    advanced on too few steps (``energy_quality`` coarse, measure/recorder.py) are left out, and the title says how
    many."""
    data = runs.dropna(subset=["energy_per_step_j"])
    coarse = data["energy_quality"].fillna("ok").ne("ok") if "energy_quality" in data else pd.Series(False, data.index)
    left_out, data = int(coarse.sum()), data[~coarse]
    bp = data[data["rule"] == "bp"].groupby("config_id")["energy_per_step_j"].median().rename("bp")
    data = data.merge(bp, left_on="config_id", right_index=True)
    data = data.assign(ratio=data["energy_per_step_j"] / data["bp"], label=data["rule"].map(RULE_LABELS))
    rules = [r for r in RULES if r in set(data["rule"])]
    fig, ax = plt.subplots(figsize=(COLUMN * 1.3, 2.6))
    order = [RULE_LABELS[r] for r in rules]
    sns.barplot(data=data, x="label", y="ratio", order=order, hue="rule", hue_order=rules, palette=RULE_COLORS, ax=ax,
                legend=False, estimator="median", errorbar=None, alpha=0.6)
    sns.stripplot(data=data, x="label", y="ratio", order=order, hue="rule", hue_order=rules, palette=RULE_COLORS, ax=ax,
                  legend=False, size=3, edgecolor="black", linewidth=0.3, jitter=0.15)
    ax.axhline(1.0, color="0.4", linewidth=0.7)
    ax.set(xlabel="", ylabel="energy per step / BP's")
    per_rule = data.groupby("rule")["ratio"].median()
    fig.suptitle(f"Energy per training step (NVML): PEPITA {per_rule.get('pepita', np.nan):.2f}x BP, "
                 f"MEMPEPITA {per_rule.get('mempepita', np.nan):.2f}x\n(median over {data['config_id'].nunique()} configurations"
                 + (f"; {left_out} runs left out: NVML's counter advanced on too few of their steps)" if left_out
                    else ")"))
    fig.tight_layout()
    return fig


def memory_curves(base, seq_lens: list[int], depth_base, depths: list[int], dtype: str = "fp32",
                  optimizer: str = "sgd", rules=None) -> pd.DataFrame:
    """The executed memory model's step peak along sequence length (from ``base``) and along depth (from
    ``depth_base``)."""
    from ..analytic.memory import memory_table

    depth_axis = "dec_layers" if depth_base.dec_layers else "enc_layers"
    frames = []
    for start, axis, values in ((base, "seq_len", seq_lens), (depth_base, depth_axis, depths)):
        configs = axis_configs(start, axis, values)
        table = memory_table(configs, list(rules or RULES), [dtype], [optimizer])
        table = table.merge(configs[["config_id", axis]].rename(columns={axis: "value"}), on="config_id")
        frames.append(table[["config_id", "rule", "peak", "step_start", "value"]].assign(axis=axis, base=[start] * len(table)))
    return pd.concat(frames, ignore_index=True)


def memory_scaling(curves: pd.DataFrame, runs: pd.DataFrame, describe: str):
    """Peak tensor memory of one step against sequence length and depth: the executed model as lines, the
    measured tensor peaks as points."""
    axes_names = list(dict.fromkeys(curves["axis"]))
    rules = [r for r in RULES if r in set(curves["rule"])]
    fig, axes = plt.subplots(1, len(axes_names), figsize=(FULL, 2.9), squeeze=False)
    labels = {"seq_len": "sequence length (tokens)", "dec_layers": "blocks", "enc_layers": "blocks"}
    matched = total = 0
    for ax, axis in zip(axes[0], axes_names):
        part = curves[curves["axis"] == axis].sort_values("value")
        for rule in rules:
            line = part[part["rule"] == rule]
            ax.plot(line["value"], line["peak"] / 2**20, color=RULE_COLORS[rule], marker=RULE_MARKERS[rule],
                    markersize=2.5, linewidth=1.1, linestyle=(0, (3, 2)) if rule == "mempepita" else "solid")
        base = part["base"].iloc[0]
        points = _on_axis(runs, base, axis) if len(runs) and "tensor_peak_bytes" in runs else pd.DataFrame()
        if len(points):
            points = points.dropna(subset=["tensor_peak_bytes"])
            ax.scatter(points[axis], points["tensor_peak_bytes"] / 2**20, c=[RULE_COLORS[r] for r in points["rule"]],
                       s=22, zorder=3, edgecolor="black", linewidth=0.5)
            model = part.set_index(["rule", "value"])["peak"]
            for _, p in points.iterrows():
                key = (p["rule"], p[axis])
                if key in model.index:
                    total += 1
                    matched += int(model[key] == p["tensor_peak_bytes"])
        ax.set(xlabel=labels[axis], ylabel="step peak, tensor MiB", xscale="log" if axis == "seq_len" else "linear",
               yscale="log", title=f"{labels[axis]} varied", )
        if axis != "seq_len":
            ax.set_xticks(sorted(part["value"].unique()))
    longest = curves[(curves["axis"] == "seq_len") & (curves["value"] == curves.loc[curves["axis"] == "seq_len", "value"].max())]
    peak = longest.set_index("rule")["peak"]
    ratio = peak.get("mempepita", np.nan) / peak.get("bp", np.nan)
    ratio_p = peak.get("mempepita", np.nan) / peak.get("pepita", np.nan)
    agree = f"; the model equals {matched} of {total} measured points to the byte" if total else ""
    fig.suptitle(f"Executed memory model (lines) and measured tensor peaks (points){agree}\n"
                 f"at {int(longest['value'].max())} tokens MEMPEPITA needs {ratio:.2f}x BP's peak and {ratio_p:.2f}x "
                 f"PEPITA's ({describe})", fontsize=8)
    handles = [plt.Line2D([], [], color=RULE_COLORS[r], marker=RULE_MARKERS[r], markersize=4,
                          linestyle=(0, (3, 2)) if r == "mempepita" else "solid") for r in rules]
    fig.legend(handles, [RULE_LABELS[r] for r in rules], ncol=len(rules), frameon=False, loc="lower center",
               bbox_to_anchor=(0.5, 0))
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    return fig
