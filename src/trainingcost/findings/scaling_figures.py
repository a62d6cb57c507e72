"""The scaling study's figures: loss against compute, the frontiers, the multiplier against BP, and depth.

Read tables only (``scaling.parquet``, ``frontiers.parquet``); titles state what the data show.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .figures import FULL, RULE_COLORS, RULE_LABELS, RULE_MARKERS, RULES, _grid, plt, style
from .scaling import REFERENCE, SCALING_FIGURES  # noqa: F401 - the file names, re-exported


def _plain_y(ax) -> None:
    """A log axis over less than a decade: plain numbers, not powers of ten."""
    from matplotlib.ticker import FormatStrFormatter

    ax.yaxis.set_major_formatter(FormatStrFormatter("%.1f"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.1f"))


def _rules(frame: pd.DataFrame) -> list[str]:
    present = set(frame["rule"])
    return [r for r in RULES if r in present]


def _front(frontiers: pd.DataFrame, rule: str) -> pd.DataFrame:
    return frontiers[(frontiers["kind"] == "frontier") & (frontiers["rule"] == rule)].sort_values("compute")


def loss_vs_compute(scaling: pd.DataFrame, frontiers: pd.DataFrame):
    """One panel per rule: every run's validation loss against its measured training FLOPs (colour: width,
    dashes: depth), the rule's frontier (thick) and BP's (grey)."""
    style()
    rules = _rules(scaling)
    rows, cols = _grid(len(rules), 5)
    fig, axes = plt.subplots(rows, cols, figsize=(FULL, 1.55 * rows + 0.6), sharex=True, sharey=True, squeeze=False)
    widths = sorted(scaling["d_model"].unique())
    depths = sorted(scaling["layers"].unique())
    shades = plt.get_cmap("viridis")(np.linspace(0.1, 0.85, len(widths)))
    dashes = ["solid", (0, (3, 1.5)), (0, (1, 1)), (0, (5, 2, 1, 2))]
    curves = scaling[(scaling["step"] > 0) & scaling["val_loss"].notna()]
    bp = _front(frontiers, REFERENCE)
    for ax, rule in zip(axes.flat, rules):
        for (cid, seed), g in curves[curves["rule"] == rule].groupby(["config_id", "seed"]):
            g = g.sort_values("step")
            ax.plot(g["flops"], g["val_loss"], color=shades[widths.index(g["d_model"].iloc[0])], linewidth=0.6,
                    linestyle=dashes[depths.index(g["layers"].iloc[0]) % len(dashes)], alpha=0.8)
        f = _front(frontiers, rule)
        if rule != REFERENCE:
            ax.plot(bp["compute"], bp["loss"], color="0.45", linewidth=1.0, linestyle=(0, (4, 2)))
        ax.plot(f["compute"], f["loss"], color=RULE_COLORS[rule], linewidth=2.0)
        ax.set_xscale("log")
        ax.set_title(RULE_LABELS[rule])
    for ax in axes.flat[len(rules):]:
        ax.set_visible(False)
    # a diverging run's spikes would stretch the axis: the top is a little above the highest starting loss
    first = curves.sort_values("step").groupby(["rule", "config_id", "seed"])["val_loss"].first()
    top = float(first.max()) * 1.15 if len(first) else None
    if top is not None and float(curves["val_loss"].max()) > top:
        for ax in axes.flat:
            ax.set_ylim(top=top)
    fig.supxlabel("training FLOPs (measured)", y=0.1, fontsize=8)
    fig.supylabel("validation loss", fontsize=8)
    handles = [plt.Line2D([], [], color=shades[i], linewidth=1) for i in range(len(widths))]
    handles += [plt.Line2D([], [], color="0.3", linestyle=dashes[i % len(dashes)], linewidth=1) for i in range(len(depths))]
    handles += [plt.Line2D([], [], color="0.45", linestyle=(0, (4, 2))), plt.Line2D([], [], color="0.1", linewidth=2)]
    labels = [f"d {w}" for w in widths] + [f"{d} layer{'s' if d != 1 else ''}" for d in depths] + ["BP's frontier", "the rule's frontier"]
    fig.legend(handles, labels, ncol=min(len(labels), 8), frameon=False, loc="lower center", bbox_to_anchor=(0.5, 0))
    best = frontiers[(frontiers["kind"] == "frontier")].groupby("rule")["loss"].min()
    order = best.sort_values()
    fig.suptitle("Validation loss against measured training compute, every run; the lowest loss reached: "
                 + ", ".join(f"{RULE_LABELS[r]} {v:.2f}" for r, v in order.head(3).items()))
    fig.tight_layout(rect=(0.01, 0.1, 1, 0.97))
    return fig


def frontiers_figure(frontiers: pd.DataFrame):
    """Every rule's compute-optimal frontier on log-log axes with its bootstrap band and its fitted law
    (dotted, over the range fitted); BP in black."""
    style()
    fig, ax = plt.subplots(figsize=(FULL, 3.4))
    fits = frontiers[frontiers["kind"] == "fit"].set_index("rule")
    rules = _rules(frontiers[frontiers["kind"] == "frontier"])
    for rule in rules:
        f = _front(frontiers, rule)
        color = "black" if rule == REFERENCE else RULE_COLORS[rule]
        ax.plot(f["compute"], f["loss"], color=color, linewidth=2.2 if rule == REFERENCE else 1.2,
                label=RULE_LABELS[rule], marker=RULE_MARKERS[rule], markevery=8, markersize=3.5)
        if f["loss_lo"].notna().any():
            ax.fill_between(f["compute"], f["loss_lo"], f["loss_hi"], color=color, alpha=0.12, linewidth=0)
        if rule in fits.index and np.isfinite(fits.loc[rule, "b"]):
            a, b, c = fits.loc[rule, ["a", "b", "c"]]
            x = f["compute"][f["compute"] >= fits.loc[rule, "fit_from"]]
            ax.plot(x, a * x ** -b + c, color=color, linewidth=0.8, linestyle=(0, (1, 1.5)))
    ax.set(xscale="log", yscale="log", xlabel="training FLOPs (measured)", ylabel="lowest validation loss reached")
    _plain_y(ax)
    ax.legend(ncol=2, frameon=False, fontsize=6.5, loc="lower left")
    head = frontiers[(frontiers["kind"] == "multiplier") & frontiers["headline"].fillna(False)]
    cheaper = head[(head["rule"] != REFERENCE) & (head["multiplier"] < 1)]
    ax.set_title("Compute-optimal frontiers (dotted: L = a C^-b + c fitted); at BP's target loss "
                 + (f"{len(cheaper)} rule(s) need less compute than BP" if len(cheaper) else "no rule needs less compute than BP"))
    fig.tight_layout()
    return fig


def multiplier_figure(frontiers: pd.DataFrame):
    """Compute to reach each target loss under a rule / under BP, with its bootstrap band; in a strip above it, one
    row per rule, a cross at each target the rule never reaches in the measured range (no multiplier to plot)."""
    style()
    mult = frontiers[(frontiers["kind"] == "multiplier") & ~frontiers["headline"].fillna(False)]
    rules = [r for r in _rules(mult) if r != REFERENCE]
    unreached = [r for r in rules if not mult[mult["rule"] == r]["reaches"].fillna(False).all()]
    strip = 0.14 * len(unreached)  # inches: one row of crosses per rule that misses a target
    fig, axes = plt.subplots(2, 1, figsize=(FULL, 3.2 + strip), sharex=True, squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": [max(strip, 1e-3), 3.2]})
    top_ax, ax = axes[0][0], axes[1][0]
    finite = mult["multiplier"][np.isfinite(mult["multiplier"])]
    top = max(2.0, float(finite.max()) * 1.5) if len(finite) else 10.0
    bottom = min(0.5, float(finite.min()) / 1.5) if len(finite) else 0.5
    for rule in rules:
        m = mult[mult["rule"] == rule].sort_values("target_loss", ascending=False)
        color = RULE_COLORS[rule]
        ax.plot(m["target_loss"], m["multiplier"], color=color, marker=RULE_MARKERS[rule], markersize=3,
                linewidth=1.2, label=RULE_LABELS[rule])
        if m["multiplier_lo"].notna().any():
            ax.fill_between(m["target_loss"], m["multiplier_lo"], m["multiplier_hi"], color=color, alpha=0.12, linewidth=0)
        if rule in unreached:
            never = m[~m["reaches"].fillna(False)]
            top_ax.scatter(never["target_loss"], np.full(len(never), unreached.index(rule)), color=color, marker="x", s=14)
    ax.axhline(1, color="black", linewidth=1)
    ax.set(yscale="log", ylim=(bottom, top), xlabel="target validation loss (harder to the right)",
           ylabel="compute to reach it / BP's")
    ax.invert_xaxis()
    from matplotlib.ticker import FuncFormatter

    for which in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        which(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.6, 2, 3: plain multipliers, not powers of ten
    ax.legend(ncol=5, frameon=False, fontsize=6.5, loc="lower left")
    if unreached:
        top_ax.set_ylim(len(unreached) - 0.5, -0.5)
        top_ax.set_yticks(range(len(unreached)), [RULE_LABELS[r] for r in unreached], fontsize=5.5)
        for label, rule in zip(top_ax.get_yticklabels(), unreached):
            label.set_color(RULE_COLORS[rule])
        top_ax.grid(axis="y", visible=False)
        top_ax.tick_params(axis="x", labelbottom=False)
    else:
        top_ax.set_visible(False)
    never_all = [RULE_LABELS[r] for r in rules if not mult[mult["rule"] == r]["reaches"].fillna(False).any()]
    (top_ax if unreached else ax).set_title(
        "Compute multiplier against BP by target loss (crosses in the strip: never reached in the measured range)"
        + (f"; never reach any target: {', '.join(never_all)}" if never_all else ""))
    return fig


def depth_figure(frontiers: pd.DataFrame):
    """Each rule's lowest loss at one compute, per depth, with its bootstrap interval (Franceschi's (Backpropagation Free Transformers) depth claims)."""
    style()
    depth = frontiers[frontiers["kind"] == "depth"]
    fig, ax = plt.subplots(figsize=(FULL / 2 + 0.4, 2.9))
    rules = _rules(depth)
    layers = sorted(depth["layers"].dropna().unique())
    offsets = np.linspace(-0.12, 0.12, max(1, len(rules)))
    for off, rule in zip(offsets, rules):
        d = depth[depth["rule"] == rule].sort_values("layers")
        x = d["layers"].astype(float) * (1 + off / 4)
        err = [np.clip(d["loss"] - d["loss_lo"], 0, None).fillna(0), np.clip(d["loss_hi"] - d["loss"], 0, None).fillna(0)]
        ax.errorbar(x, d["loss"], yerr=err, color="black" if rule == REFERENCE else RULE_COLORS[rule],
                    marker=RULE_MARKERS[rule], markersize=3.5, linewidth=1.0, capsize=1.5, label=RULE_LABELS[rule])
    compute = float(depth["compute"].iloc[0]) if len(depth) else math.nan
    ax.set(xscale="log", xlabel="layers", ylabel="lowest validation loss")
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(layers)
    ax.set_xticklabels([str(int(v)) for v in layers])
    ax.legend(ncol=2, frameon=False, fontsize=6, bbox_to_anchor=(1.02, 1), loc="upper left")
    ax.set_title(f"Loss by depth at equal compute ({compute:.2g} FLOPs)")
    fig.tight_layout()
    return fig


def scaling_figures(scaling: pd.DataFrame, frontiers: pd.DataFrame) -> dict:
    """name -> figure, for every name of :data:`SCALING_FIGURES`."""
    return {"loss_vs_compute": loss_vs_compute(scaling, frontiers), "frontiers": frontiers_figure(frontiers),
            "multiplier": multiplier_figure(frontiers), "depth_equal_compute": depth_figure(frontiers)}
