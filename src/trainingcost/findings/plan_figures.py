"""The plan's figures (workflow ``plan`` steps, docs/planning.md): what a training run costs per rule, memory per
GPU against micro-batch with the device's capacity, and the strong-scaling figure of ``plan --gpus LIST --layout
search``. They read the plan tables only."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .figures import COLUMN, FULL, RULE_COLORS, RULE_LABELS, RULE_MARKERS, RULES

GiB = 2**30


def _figure_rows(plan: pd.DataFrame) -> pd.DataFrame:
    """The rows of the figure's configuration: the first planned one."""
    first = plan["config_id"].iloc[0]
    return plan[plan["config_id"] == first]


def plan_cost(plan: pd.DataFrame):
    """Per rule: GPU-hours, money (where a price is given) and CO2e of the whole run; bars under ``executed``
    (else the first cost model in scope), the other cost models as points."""
    rows = _figure_rows(plan)
    models = list(dict.fromkeys(rows["cost_model"]))
    main = "executed" if "executed" in models else models[0]
    rules = [r for r in RULES if r in set(rows["rule"])]
    panels = [("gpu_hours", "GPU-hours"), ("cost", "money (price per GPU-hour given)"), ("co2e_t", "t CO$_2$e")]
    fig, axes = plt.subplots(1, 3, figsize=(FULL, 2.6))
    first = rows.iloc[0]
    for ax, (column, label) in zip(axes, panels):
        if rows[column].isna().all():
            ax.text(0.5, 0.5, "no price given\n(plan.price)", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(label)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        bars = rows[rows["cost_model"] == main].set_index("rule").reindex(rules)
        ax.bar(range(len(rules)), bars[column], color=[RULE_COLORS[r] for r in rules], alpha=0.85,
               label=f"{main} (bar)")
        for model in models:
            if model == main:
                continue
            part = rows[rows["cost_model"] == model].set_index("rule").reindex(rules)
            ax.scatter(range(len(rules)), part[column], marker="_",
                       s=120, color="0.2", linewidths=1.2, zorder=3)
        ax.set_xticks(range(len(rules)), [RULE_LABELS[r] for r in rules], rotation=45, ha="right")
        ax.set_title(label)
        ax.set_ylim(bottom=0)
    ratio = rows[rows["cost_model"] == main].set_index("rule")["gpu_hours"].dropna()
    cheapest, dearest = ratio.idxmin(), ratio.idxmax()
    quality = str(first.get("source_quality", ""))
    equal = not quality or quality.startswith("equal tokens")
    # per step, not per quality, unless the plan budgets each rule the tokens it needs to reach a loss
    basis = ("equal tokens per rule\n(no learning-quality data: the cheapest per step, not per quality)" if equal
             else "each rule the tokens it needs to reach the target loss")
    hours = rows.pivot_table(index="rule", columns="cost_model", values="gpu_hours")
    same = len(models) > 1 and np.allclose(hours.to_numpy(), hours[[main]].to_numpy(), rtol=1e-9)
    # the step-time model times the kernels that run: a cost model changes the FLOPs counted (and MFU), not the time
    others = ("the other cost models' dashes on them (time is priced from what runs: they change FLOPs and MFU only)"
              if same else "dashes the other cost models" if len(models) > 1 else "")
    fig.suptitle(
        f"{first.get('name') or first['config_id']}: {first['tokens']:.3g} tokens on {first['gpus']} x {first['gpu']} — "
        f"{main}: {RULE_LABELS[cheapest]} cheapest ({ratio[cheapest]:.3g} GPU-h), {RULE_LABELS[dearest]} dearest "
        f"({ratio[dearest] / ratio[cheapest]:.2f}x)\nbars {main}{', ' + others if others else ''}; {basis}", fontsize=8)
    fig.tight_layout()
    return fig


def plan_memory(curves: pd.DataFrame):
    """Per rule, bytes per GPU against the micro-batch, with the device's memory as a line."""
    fig, ax = plt.subplots(figsize=(COLUMN * 1.6, 2.8))
    rules = [r for r in RULES if r in set(curves["rule"])]
    data = curves.assign(GiB=curves["mem_total"] / GiB, rule_label=curves["rule"].map(RULE_LABELS))
    sns.lineplot(data=data, x="micro_batch", y="GiB", hue="rule_label", style="rule_label",
                 hue_order=[RULE_LABELS[r] for r in rules], style_order=[RULE_LABELS[r] for r in rules],
                 palette={RULE_LABELS[r]: RULE_COLORS[r] for r in rules},
                 markers={RULE_LABELS[r]: RULE_MARKERS[r] for r in rules}, dashes=False, ax=ax)
    capacity = float(curves["memory_capacity"].iloc[0]) / GiB
    ax.axhline(capacity, color="0.2", linestyle="--", linewidth=1)
    ax.text(curves["micro_batch"].min(), capacity * 1.05, f"{curves['gpu'].iloc[0]}: {capacity:.1f} GiB", fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("micro-batch (sequences per GPU)")
    ax.set_ylabel("memory per GPU (GiB)")
    most = curves.drop_duplicates("rule").set_index("rule")["max_micro_batch"]
    fits = [f"{RULE_LABELS[r]} {int(most[r])}" for r in rules]
    name = curves["name"].iloc[0] if "name" in curves and curves["name"].iloc[0] else curves["config_id"].iloc[0]
    ax.set_title(f"{name}: the largest micro-batch that fits —\n" + ", ".join(fits), fontsize=7)
    ax.legend(title=None, fontsize=6, ncol=2)
    fig.tight_layout()
    return fig



def strong_scaling(table: pd.DataFrame, title: str = ""):
    """Each rule at its best layout per GPU count (``plan --gpus 64-1024x2 --layout search``): wall-clock against
    GPUs, and GPU-hours against wall-clock, a line per rule. ``table`` is the search's plan table (``gpus``,
    ``rule``, ``wall_clock_s``, ``gpu_hours``, ``fits``); counts where a rule fits no layout are left out."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    data = table.drop_duplicates(["rule", "gpus"])
    data = data[data["fits"].astype(bool)]
    unit, seconds = ("days", 86400) if data["wall_clock_s"].max() >= 3 * 86400 else ("hours", 3600)
    data = data.assign(days=data["wall_clock_s"] / seconds)
    rules = [r for r in RULES if r in set(data["rule"])]
    labels = [RULE_LABELS[r] for r in rules]
    data = data.assign(rule_label=data["rule"].map(RULE_LABELS))
    style = dict(hue="rule_label", hue_order=labels, style="rule_label", style_order=labels,
                 palette={RULE_LABELS[r]: RULE_COLORS[r] for r in rules},
                 markers={RULE_LABELS[r]: RULE_MARKERS[r] for r in rules}, dashes=False)
    fig, axes = plt.subplots(1, 2, figsize=(FULL, 3.0))
    sns.lineplot(data=data, x="gpus", y="days", ax=axes[0], **style)
    axes[0].set(xscale="log", yscale="log", xlabel="GPUs", ylabel=f"wall-clock ({unit})",
                title="Time against GPUs\n(each rule at its best layout)")
    counts = sorted(data["gpus"].unique())
    sns.lineplot(data=data.sort_values("days"), x="days", y="gpu_hours", sort=False, ax=axes[1], legend=False,
                 **style)
    axes[1].set(xscale="log", xlabel=f"wall-clock ({unit})", ylabel="GPU-hours",
                title="GPU-hours against time\n(a point per GPU count)")
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:.2g}")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log" and axis is not axes[0].xaxis:
                axis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())
    axes[0].set_xticks(counts)
    axes[0].legend(title=None, fontsize=6, ncol=2)
    dropped = sorted(set(table["rule"]) - set(rules))
    if dropped:
        fig.text(0.5, 0.0, "fits no layout at any count: " + ", ".join(RULE_LABELS.get(r, r) for r in dropped),
                 ha="center", va="bottom", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return fig
