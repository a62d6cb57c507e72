"""``trainingcost estimate``'s text: the cost tables per layer, phase and rule, and the memory table, with why a
rule's executed peak is not replayed (:mod:`.cli` prints them)."""

from __future__ import annotations

import pandas as pd

from .analytic import PHASES, rules
from .analytic.catalogue import REFERENCE_RULE
from .analytic.catalogue import rule as catalogue_rule
from .analytic.memory import COMPONENTS
from .analytic.tape import MAX_TAPE_BLOCKS, PEAK_PHASE_COLUMNS, replays
from .text import grid, human, human_bytes

AUTOGRAD = ("autograd", "targets")  # RuleMemory.activations that count autograd's saved tensors (analytic/spec.py)

PER_LAYER_LEGEND = (
    "A blank cell: the layer takes no part in that phase under this rule and cost model. "
    "0: it takes part and the cost model charges it nothing (e.g. the embedding's gather)."
)


def render_costs(table: pd.DataFrame, metric: str) -> str:
    """The per-layer view: one table per (rule, cost model), layers as rows, phases as columns."""
    out = [PER_LAYER_LEGEND, ""]
    unit = "FLOPs" if metric == "flops" else "MACCs"
    for (rule, model), part in table.groupby(["rule", "cost_model"], sort=False):
        phases = [p for p in PHASES if p in set(part["phase"])]
        wide = part.pivot_table(index="layer", columns="phase", values=metric, aggfunc="sum", sort=False)
        kinds = part.drop_duplicates("layer").set_index("layer")["layer_kind"]
        rows = []
        for layer in part["layer"].drop_duplicates():
            values = [wide.at[layer, p] if p in wide.columns and pd.notna(wide.at[layer, p]) else None for p in phases]
            rows.append([layer, kinds[layer], *("" if v is None else human(v) for v in values), human(sum(v or 0 for v in values))])
        totals = [part.loc[part["phase"] == p, metric].sum() for p in phases]
        rows.append(["total", "", *(human(v) for v in totals), human(sum(totals))])
        out.append(f"rule {rule} | cost model {model} | {unit} per training step")
        out.append(grid(["layer", "kind", *phases, "total"], rows))
        out.append("")
    return "\n".join(out)


def render_phases(table: pd.DataFrame, metric: str) -> str:
    """Per rule and cost model, the totals per phase and per step."""
    sums = table.groupby(["rule", "cost_model", "phase"], sort=False)[metric].sum()
    phases = [p for p in PHASES if p in set(table["phase"])]
    rows = []
    for (rule, model), part in sums.groupby(level=[0, 1], sort=False):
        values = part.droplevel([0, 1])
        rows.append([rule, model, *("" if p not in values else human(values[p]) for p in phases), human(values.sum())])
    unit = "FLOPs" if metric == "flops" else "MACCs"
    return (f"{unit} per training step by phase (blank: the rule has no such phase; --per-layer for every layer)\n"
            + grid(["rule", "cost model", *phases, "total"], rows) + "\n")


def render_summary(table: pd.DataFrame, metric: str) -> str:
    totals = table.groupby(["rule", "cost_model"], sort=False)[metric].sum().unstack("cost_model")
    models = list(dict.fromkeys(table["cost_model"]))
    rules = list(dict.fromkeys(table["rule"]))
    header = ["rule", ""] + models
    rows = []
    for rule in rules:
        cells = []
        for m in models:
            value = totals.at[rule, m]
            cell = human(value)
            if REFERENCE_RULE in totals.index and rule != REFERENCE_RULE:
                cell += f" ({value / totals.at[REFERENCE_RULE, m]:.2f}x {catalogue_rule(REFERENCE_RULE).label})"
            cells.append(cell)
        rows.append([rule, "", *cells])
    unit = "FLOPs" if metric == "flops" else "MACCs"
    return f"Total {unit} per training step, by rule and cost model\n" + grid(header, rows) + "\n"


def _not_replayed(moe: bool, rule: str = "", mtp: bool = False) -> str:
    """Why the tape gives no peak for a rule it replays: a mixture of experts (or multi-token prediction) under a
    rule that does not train it, or the model's depth (tape/table.py)."""
    if moe and rule and not catalogue_rule(rule).trains_experts:
        return f"not replayed ({rule} does not train a mixture of experts)"
    if mtp and rule and not catalogue_rule(rule).trains_mtp:
        return f"not replayed ({rule} does not train multi-token prediction)"
    return f"not replayed (over {MAX_TAPE_BLOCKS:,} blocks)"


UNTRAINED = (" does not train a mixture of experts)", " does not train multi-token prediction)")


def _reasons(why: list[str]) -> str:
    """The distinct reasons, each once; the rules that do not train a mixture of experts (or multi-token
    prediction) named in one reason (each its own would overflow the screen's 100 columns)."""
    rest = [w for w in why if not w.endswith(UNTRAINED)]
    if any(w.endswith(UNTRAINED[1]) for w in why):
        trainers = ", ".join(spec.name for spec in rules() if spec.trains_mtp)
        rest.insert(0, f"not replayed (only {trainers} trains multi-token prediction)")
    names = [w.removeprefix("not replayed (").removesuffix(UNTRAINED[0]) for w in why if w.endswith(UNTRAINED[0])]
    if names:
        rest.insert(0, f"not replayed ({', '.join(dict.fromkeys(names))}: "
                       f"{'does' if len(set(names)) == 1 else 'do'} not train a mixture of experts)")
    return "; ".join(dict.fromkeys(rest))


def render_compact(table: pd.DataFrame, memory: pd.DataFrame, metric: str, model: str, moe: bool = False,
                   mtp: bool = False) -> str:
    """The default view: one row per rule under one cost model: the step's total, its ratio to BP, its forward,
    its backward, everything else, and the step's tensor-memory peak with its ratio to BP (the executed tape
    where it replays the step, else the components summed, marked *). Fits 100 columns."""
    sums = table.groupby(["rule", "phase"], sort=False)[metric].sum()
    totals = table.groupby("rule", sort=False)[metric].sum()
    peaks, why = {}, []
    for _, r in memory.iterrows():
        if r["peak"] >= 0:
            peaks[r["rule"]] = (float(r["peak"]), "")
        else:
            peaks[r["rule"]] = (float(r["total"]), "*")
            why.append("the tape replays full training, not adapters" if r.get("finetune", "full") != "full" else
                       _not_replayed(moe, r["rule"], mtp) if replays(r["rule"]) else
                       "no tape replays this rule's step yet")
    ref = REFERENCE_RULE if REFERENCE_RULE in totals.index else None
    label = catalogue_rule(REFERENCE_RULE).label
    rows = []
    for rule, total in totals.items():
        phases = sums.loc[rule]
        forward, backward = phases.get("forward", 0), phases.get("backward", 0)
        peak, star = peaks[rule]
        rows.append([rule, human(total), f"{total / totals[ref]:.2f}" if ref else "", human(forward),
                     human(backward) if "backward" in phases else "", human(total - forward - backward),
                     human_bytes(peak) + star, f"{peak / peaks[ref][0]:.2f}" if ref else ""])
    unit = "FLOPs" if metric == "flops" else "MACCs"
    first = memory.iloc[0]
    out = [f"{unit} and tensor memory of one training step, {model} cost model (--cost-model all: every model)",
           grid(["rule", unit, f"x {label}", "forward", "backward", "other", "memory", f"x {label}"], rows),
           "other: every phase but forward and backward (--per-layer, or --cost-model all, for each)",
           f"memory: {first['dtype']}, optimizer {first['optimizer']} (--dtype, --optimizer), the executed model's step "
           "peak" + (f";\n  * the components summed: {_reasons(why)}" if why else "")]
    return "\n".join(out) + "\n"


def render_memory(memory: pd.DataFrame, moe: bool = False, mtp: bool = False) -> str:
    first = memory.iloc[0]
    setting = f"{first['dtype']}, optimizer {first['optimizer']}; {first['parameter_count']:,} parameters"
    phases = [c for c in PEAK_PHASE_COLUMNS if (memory[c] >= 0).any()]
    rule_why = "not replayed yet for this rule (its tape is not written; the components below cover it)"
    rows = [[r["rule"], "", human_bytes(r["step_start"] - r["batch"]),
             *(human_bytes(r[c]) if r[c] >= 0 else "" for c in phases),
             human_bytes(r["peak"]) if r["peak"] >= 0 else (_not_replayed(moe, r["rule"], mtp) if replays(r["rule"])
                                                            else rule_why)]
            for _, r in memory.iterrows()]
    header = ["rule", "", "persistent", *(c.removeprefix("peak_") for c in phases), "step peak"]
    executed = (f"Tensor memory of one training step, executed model ({setting}; CPU, batch of ids excluded "
                f"from persistent)\n" + grid(header, rows) + "\n")
    rows = [[r["rule"], "", *(human_bytes(r[c]) for c in (*COMPONENTS, "total"))] for _, r in memory.iterrows()]
    own = [spec for spec in rules() if spec.name in set(memory["rule"]) and spec.memory.activations not in AUTOGRAD]
    accounting = ("; their sources' count for " + " and ".join(f"{spec.label} ({spec.source})" for spec in own)
                  if own else "")
    hand = (f"Components summed, the paper's accounting (activations: autograd's saved tensors{accounting})\n"
            + grid(["rule", "", *COMPONENTS, "total"], rows) + "\n")
    return executed + "\n" + hand


# ---------------------------------------------------------------------------
# Commands
