"""``trainingcost plan --layout search`` and ``--gpus`` lists: each rule at its own best layout, and how many GPUs.

The search itself is :mod:`trainingcost.analytic.layout` (no torch); this module turns the command line into its
inputs (the fields left ``auto``, the GPU counts), plans each rule at its best layout with the plan's own table
(:func:`trainingcost.analytic.plan.plan_table`, so every number is the plan's), and renders one screen per GPU
count, or the strong-scaling table and figure over several counts.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
from pathlib import Path

import pandas as pd

from .config import ConfigError

OBJECTIVES = {"time": "wall_clock_s", "gpu-hours": "gpu_hours", "cost": "cost", "energy": "energy_kwh"}
AUTO_FIELDS = {"tp": "tp", "pp": "pp", "interleave": "interleave", "ep": "ep", "micro_batch": "micro_batch",
               "checkpointing": "checkpointing", "sharding": "sharding", "sequence_parallel": "sequence_parallel",
               "replicate": "replicate", "schedule": "schedule"}
PLACEHOLDER = {"tp": 1, "pp": 1, "interleave": 1, "ep": 1, "micro_batch": None, "checkpointing": "none",
               "sharding": None, "sequence_parallel": None, "replicate": 1, "schedule": None}


@dataclasses.dataclass
class SearchPlan:
    """What ``plan --layout search`` (or several ``--gpus``) found: ``table`` the plan's rows (every rule at its
    best layout, per GPU count: a ``layout`` column, the compact form), ``layouts`` every rule's best few layouts
    per count (rank 1 the best), ``at_bp_layout`` each rule priced at BP's best layout, ``searches`` the raw
    :class:`..analytic.layout.Search` per count."""

    table: pd.DataFrame
    layouts: pd.DataFrame
    at_bp_layout: pd.DataFrame
    searches: dict
    free: frozenset
    counts: list
    objective: str
    best_count: dict  # rule -> the GPU count the objective picks


def free_fields(args: argparse.Namespace) -> frozenset:
    """The layout fields the search decides: every one not given with ``--layout search`` (but the HSDP replica
    groups, searched only with ``--replicate auto``: analytic/layout.py, SEARCH_ALL), else those given ``auto``."""
    from .analytic.layout import SEARCH_ALL

    if args.layout == "search":
        given = {name for name, value in _layout_values(args).items()
                 if value not in ("auto", PLACEHOLDER[name]) or (name == "micro_batch" and value not in (None, "auto"))}
        asked = {name for name, value in _layout_values(args).items() if value == "auto"}
        return (frozenset(SEARCH_ALL) - given) | (frozenset(AUTO_FIELDS) & asked)
    return frozenset(name for name, value in _layout_values(args).items() if value == "auto")


def _layout_values(args) -> dict:
    return {name: getattr(args, attr) for name, attr in AUTO_FIELDS.items()}


def fixed_args(args: argparse.Namespace, gpus: int) -> argparse.Namespace:
    """A copy of ``args`` for one GPU count, each ``auto`` field at its placeholder (the search overrides it)."""
    out = copy.copy(args)
    out.gpus = gpus
    for name, attr in AUTO_FIELDS.items():
        if getattr(out, attr) == "auto":
            setattr(out, attr, PLACEHOLDER[name])
    sp = out.sequence_parallel
    out.sequence_parallel = sp == "on" if isinstance(sp, str) else bool(sp)
    return out


def run(args, cfg, gpu, rules, models, spec_of) -> SearchPlan:
    """The search at every GPU count of ``args.gpus``; ``spec_of(args_for_one_count)`` is the plan's own
    PlanSpec builder (plan.spec_from_args)."""
    from .analytic.layout import search
    from .analytic.plan import check_precision, global_batch, plan_table, replicas

    free = free_fields(args)
    counts = list(args.gpus)
    if args.objective == "cost" and args.price is None:
        raise ConfigError("--objective: cost needs --price (money per GPU-hour)")
    if free and getattr(args, "mfu", None) is not None or free and getattr(args, "hfu", None) is not None or \
            free and getattr(args, "tokens_per_s", None) is not None or free and getattr(args, "calibration", None):
        raise ConfigError("--layout: the search ranks layouts by the predicted step time; leave out --mfu, --hfu, "
                          "--tokens-per-s and --calibration")
    # One global batch for every count (the default for the largest, a multiple of its GPUs), so counts compare
    _check_groups(args, counts, free, spec_of)
    base = spec_of(fixed_args(args, max(counts)))
    G = base.global_batch if base.global_batch is not None else global_batch(
        dataclasses.replace(base, tp=1, pp=1), cfg)[0]
    tables, layouts, at_bp, searches = [], [], [], {}
    check_precision(base.precision, gpu)  # before the search prices anything (plan_table checks it again)
    for n in counts:
        own = spec_of(fixed_args(args, n))
        spec = dataclasses.replace(own, global_batch=G)
        if not free and base.global_batch is None and G % max(1, replicas(own)) and own.global_batch is None:
            # the layout given, and the common default does not divide over this count's data-parallel degree:
            # this count's own default batch (the Run line names each)
            spec = dataclasses.replace(own, global_batch=global_batch(own, cfg)[0])
        if not free:
            found = None
            chosen = {r: spec for r in rules}
        else:
            found = search(cfg, spec, gpu, rules, free, tp_across_nodes=args.tp_across_nodes)
            searches[n] = found
            chosen = {r: (dataclasses.replace(spec, **found.rules[r].best.spec_fields()) if found.rules[r].best
                          else spec) for r in rules}
            for r in rules:
                for rank, c in enumerate(found.rules[r].top, 1):
                    layouts.append({"gpus": n, "rule": r, "rank": rank, "layout": c.compact(), "step_time_s": c.step_s,
                                    "memory_bytes": c.memory_bytes, **c.spec_fields(), "dp": c.dp, "cp": c.cp,
                                    "space": found.rules[r].space, "fitting": found.rules[r].fitting,
                                    "priced": found.rules[r].priced})
        for r in rules:
            try:
                part = plan_table(cfg, chosen[r], gpu, [r], models)
            except ConfigError as err:
                raise ConfigError(f"--gpus {n}: {err}") from None
            part.insert(0, "layout", _compact(part.iloc[0]) + ("" if not free or found.rules[r].best else " (none fits)"))
            tables.append(part)
        if free and "bp" in found.rules and found.rules["bp"].best is not None:
            bp_spec = dataclasses.replace(spec, **found.rules["bp"].best.spec_fields())
            one = _at_layout(cfg, bp_spec, gpu, rules, ["executed" if "executed" in models else models[0]])
            for r in rules:  # layout for every rule: one table (its model facts and FLOPs computed once)
                row = one[one["rule"] == r].iloc[0]
                at_bp.append({"gpus": n, "rule": r, "layout": _compact(row), "step_time_s": row["step_time_s"],
                              "wall_clock_s": row["wall_clock_s"], "fits": bool(row["fits"])})
    table = pd.concat(tables, ignore_index=True)
    if base.global_batch is None:  # the common default: where it comes from, not "given"
        source = global_batch(dataclasses.replace(base, tp=1, pp=1), cfg)[1]
        common = (table["global_batch"] == G) & (table["source_batch"] == "given")
        table.loc[common, "source_batch"] = source
    column = OBJECTIVES[args.objective]
    best_count = {}
    for r in rules:
        part = table[(table["rule"] == r) & table["fits"].astype(bool)].drop_duplicates("gpus")
        if not part.empty:
            best_count[r] = int(part.sort_values([column, "mem_total", "gpus"]).iloc[0]["gpus"])
    return SearchPlan(table, pd.DataFrame(layouts), pd.DataFrame(at_bp), searches, free, counts, args.objective,
                      best_count)


def _check_groups(args, counts, free, spec_of) -> None:
    """The layout fields given that a GPU count cannot hold at any layout of the search (tensor, pipeline and
    context parallelism: their product must divide it), and HSDP replica groups given (--replicate R) that it cannot
    split: refused for that count before any count is searched (the most replicas at n GPUs: tp and pp at 1 where
    searched)."""
    from .analytic.steptime.step import hsdp_problem

    for n in counts:
        spec = spec_of(fixed_args(args, n))
        given = {"tensor-parallel": 1 if "tp" in free else spec.tp, "pipeline-parallel": 1 if "pp" in free else spec.pp,
                 "context-parallel": spec.cp}
        fixed = math.prod(given.values())
        if n % fixed:
            factors = [f"{name} {value}" for name, value in given.items() if value > 1]
            named = " x ".join(factors) + (f" = {fixed}" if len(factors) > 1 else "")
            raise ConfigError(f"gpus: {n} GPU{'s do' if n != 1 else ' does'} not divide into {named} (the "
                              "data-parallel degree must be a whole number at every layout searched)")
        if "replicate" in free or spec.replicate == 1 or n % (spec.tp * spec.pp * spec.cp):
            continue
        problem = hsdp_problem(spec.replicate, n // (spec.tp * spec.pp * spec.cp), spec.cp,
                               "zero3" if "sharding" in free else spec.sharding)
        if problem:
            raise ConfigError(f"--gpus {n}: replicate: {problem}")


def _at_layout(cfg, spec, gpu, rules, models) -> pd.DataFrame:
    """Every rule priced at one layout: one table, but a rule that sends no backward stage by stage (DFA ...) runs a
    zero-bubble or DualPipe layout's pipeline as 1F1B (steptime/schedules.py)."""
    from .analytic.plan import plan_table
    from .analytic.steptime.schedules import SPLIT
    from .analytic.steptime.step import rule_work

    if spec.schedule not in SPLIT:
        return plan_table(cfg, spec, gpu, rules, models)
    work = rule_work(cfg, list(rules))
    split = [r for r in rules if work[r]["through"] and work[r]["backward"]]
    rest = [r for r in rules if r not in split]
    parts = [plan_table(cfg, spec, gpu, split, models)] if split else []
    parts += [plan_table(cfg, dataclasses.replace(spec, schedule=""), gpu, rest, models)] if rest else []
    return pd.concat(parts, ignore_index=True)


def _compact(row) -> str:
    """The layout of a plan row, compact: ``tp8 pp4 v2 dp32 mb1 sel sp z1``."""
    from .analytic.layout import Candidate

    return Candidate(int(row["tp"]), int(row["pp"]), int(row["interleave"]), int(row["micro_batch"]),
                     row["checkpointing"], row["sharding"], bool(row["sequence_parallel"]), int(row["ep"]),
                     int(row["dp"]), 0.0, 0.0, int(row.get("cp", 1)), int(row.get("etp", row["tp"])),
                     int(row.get("replicate", 1)), str(row.get("schedule") or "")).compact()


# ---------------------------------------------------------------------------
# Rendering


def untrained(cfg, rules) -> list[str]:
    """The rules of ``rules`` that the plan prices but that do not train ``cfg``: a mixture of experts under a rule
    whose spec says ``trains_experts=False`` (PEPITA, MEMPEPITA; docs/learning_rules.md), multi-token prediction
    under any rule but BP (analytic/catalogue.untrained)."""
    from .analytic.catalogue import untrained as untrained_part

    return [r for r in dict.fromkeys(rules) if untrained_part(r, cfg)]


def marked(rule: str, refused: list[str]) -> str:
    """A rule's name in a table, with * where it is priced but does not train the model."""
    return f"{rule}*" if rule in refused else rule


def untrained_note(refused: list[str], cfg=None) -> list[str]:
    """The footnote of :func:`marked`: none where every rule trains the model."""
    if not refused:
        return []
    from .analytic.catalogue import untrained as untrained_part

    what = untrained_part(refused[0], cfg) if cfg is not None else "a mixture of experts"
    what = what if all(untrained_part(r, cfg) == what for r in refused) or cfg is None else \
        "a mixture of experts or multi-token prediction"
    return [f"* {', '.join(refused)}: priced, not trained: {'they do' if len(refused) > 1 else 'it does'} not train "
            f"{what} (docs/learning_rules.md)"]


def search_cells(result: SearchPlan, cfg) -> tuple[list[str], list[list]]:
    """The search's table as :func:`render` prints it: its header and rows of cells (each rule at its best layout; per
    GPU count with several, the best count by the objective marked *)."""
    from .text import _duration, _duration_range, _si

    def days(r):
        return _duration_range(r["wall_clock_s"], r["wall_clock_days_low"] * 86400, r["wall_clock_days_high"] * 86400)

    t = result.table
    if "executed" in set(t["cost_model"]):
        t = t[t["cost_model"] == "executed"]
    refused = untrained(cfg, t["rule"])
    if len(result.counts) == 1:
        rows = [[marked(r["rule"], refused), r["layout"], _duration(r["step_time_s"]), days(r),
                 _si(r["gpu_hours"]), f"{r['mfu']:.3f}", f"{r['mem_total'] / 2**30:.1f}",
                 "yes" if r["fits"] else "NO"] for _, r in t.drop_duplicates("rule").iterrows()]
        return ["rule", "layout", "step", "time", "GPU-h", "MFU", "GiB/GPU", "fits"], rows
    money = t["cost"].notna().any()
    energy = result.objective == "energy"  # the column the best count is picked by (issue 66, N25)
    rows = []
    order = {rule: i for i, rule in enumerate(dict.fromkeys(t["rule"]))}
    by_rule = t.drop_duplicates(["rule", "gpus"]).sort_values(["rule", "gpus"], key=lambda c: c.map(order)
                                                                if c.name == "rule" else c)
    for _, r in by_rule.iterrows():
        mark = "*" if result.best_count.get(r["rule"]) == r["gpus"] else ""
        rows.append([marked(r["rule"], refused), f"{r['gpus']}{mark}", r["layout"], _duration(r["step_time_s"]),
                     days(r), _si(r["gpu_hours"]), *([_si(r["cost"])] if money else []),
                     *([_si(r["energy_kwh"])] if energy else []), f"{r['mfu']:.3f}", "yes" if r["fits"] else "NO"])
    unit = str(t["currency"].iloc[0]) if "currency" in t else "cost"
    return ["rule", "GPUs", "layout", "step", "time", "GPU-h", *([unit] if money else []),
            *(["kWh"] if energy else []), "MFU", "fits"], rows


def render(result: SearchPlan, cfg, describe, gpu, all_models: bool, explain: bool, width: int) -> str:
    from .text import _duration, grid, wrapped

    t = result.table
    if "executed" in set(t["cost_model"]):  # the screen shows the executed model (the table has every one asked)
        t = t[t["cost_model"] == "executed"]
    first = t.iloc[0]
    refused = untrained(cfg, t["rule"])
    out = [wrapped(describe(cfg).replace(f", batch {cfg.batch} (", " ("), width), ""]
    fields = ", ".join(sorted(result.free)) if result.free else "none (the layout given)"
    batches = t.drop_duplicates("gpus").set_index("gpus")["global_batch"]
    batch = (f"{first['global_batch']} sequences" if batches.nunique() == 1 else
             "; ".join(f"{int(g)} sequences on {n} GPUs" for n, g in batches.items()) +
             " (the largest count's default where it divides over a count's data-parallel degree, else that "
             "count's own; a global batch given serves every count)")
    out.append(wrapped(f"Run: {first['tokens']:.3g} tokens in steps of {batch} of "
                       f"{first['tokens_per_sequence']} tokens, on {gpu.name} ({gpu.memory_bytes / 1e9:g} GB); "
                       f"searched: {fields}", width))
    source = str(first["source_batch"])
    if batches.nunique() == 1 and len(result.counts) > 1 and source.startswith("default"):
        out.append(wrapped(f"Batch: the largest count's default ({max(result.counts):,} GPUs: "
                           f"{source.removeprefix('default: ')}), kept at every count so that the counts compare",
                           width))
    if first.get("finetune", "full") != "full":
        out.append(wrapped("Trains: " + first["source_finetune"].split("; Hu et al.")[0], width))
    if len(result.counts) == 1:
        n = result.counts[0]
        found = result.searches.get(n)
        if found is not None:
            sizes = {rs.space for rs in found.rules.values()}
            out.append(wrapped(f"Each rule at its own best layout on {n} GPUs: {'/'.join(map(str, sorted(sizes)))} "
                               f"layouts per rule; over the {len(found.rules)} rule{'s' * (len(found.rules) > 1)}, "
                               f"{sum(rs.fitting for rs in found.rules.values()):,} fit, "
                               f"{sum(rs.priced for rs in found.rules.values()):,} priced (the rest proved slower), in "
                               f"{found.seconds:.2f} s; objective: step time, ties to the smaller memory", width))
        out.append("")
        out.append(grid(*search_cells(result, cfg)))
        out.append(wrapped("layout: tp, pp, v (interleaved stages), dp, mb (micro-batch), ep; sel/full: "
                           "checkpointing; sp: sequence parallel; z1-z3: ZeRO stage" +
                           ("; r: HSDP replica groups" if int(t["replicate"].iloc[0]) > 1 else ""), width))
        if all_models and not result.layouts.empty:
            out += ["", "Runner-up layouts per rule (step time; the best first):"]
            for r, part in result.layouts.groupby("rule", sort=False):
                line = "; ".join(f"{row['layout']} {_duration(row['step_time_s'])}" for _, row in part.iterrows())
                out.append(wrapped(f"- {r}: {line}", width))
        if all_models and not result.at_bp_layout.empty:
            out += ["", "Each rule at BP's best layout (the part of a rule's advantage its own layout makes):"]
            own = t.drop_duplicates("rule").set_index("rule")
            rows = []
            for _, row in result.at_bp_layout.iterrows():
                mine = own.loc[row["rule"], "step_time_s"]
                rows.append([row["rule"], row["layout"], _duration(row["step_time_s"]),
                             "yes" if row["fits"] else "NO", _duration(mine), f"{row['step_time_s'] / mine:.2f}"])
            out.append(grid(["rule", "BP's layout", "step", "fits", "own best", "x own"], rows))
    else:
        same = t.drop_duplicates("gpus")["global_batch"].nunique() == 1
        out.append(wrapped(f"{'Strong scaling' if same else 'Scaling (the batch differs between counts, above)'}: "
                           f"each rule at its best layout per GPU count; best count by {result.objective} marked *",
                           width))
        out.append("")
        out.append(grid(*search_cells(result, cfg)))
    out += [wrapped(line, width) for line in untrained_note(refused, cfg)]
    if explain:
        lines = [line for s in result.searches.values() for line in s.rejected]
        out += ["", "Left out of the space:" if lines else "Nothing was left out of the space."]
        out += [wrapped(f"- {line}", width) for line in dict.fromkeys(lines)]
    from .analytic.steptime.device import below_full_power

    speed = below_full_power(gpu)
    # the schedule of the rules' layouts with a pipeline: one name where they share it, else each rule's
    piped = t[t["pp"] > 1] if "schedule" in t else t.iloc[0:0]
    named = {rule: "/".join(dict.fromkeys(part["schedule"].replace("", "1f1b")))
             for rule, part in piped.groupby("rule", sort=False)}
    together = set(named.values())
    schedule = ("" if not named else
                f"{together.pop()} where a layout has pp > 1" if len(together) == 1 else
                ", ".join(f"{rule} {name}" for rule, name in named.items()) + " (where a layout has pp > 1)")
    limit = (f"; compute at {speed:.3g} of full power at the {gpu.power_w:g} W power limit (the part's published "
             "power curve; --power-limit)" if speed < 1 else "")
    out += ["", wrapped(f"framework: {first['source_framework'].split(' (')[0]}; network: "
                        f"{first['source_network'].split(' (')[0]}; precision {first['precision']}; "
                        + (f"pipeline schedule {schedule}; " if schedule else "")
                        + f"step time predicted (docs/planning.md){limit}", width)]
    out += interval_lines(t, width, explain)
    return "\n".join(out) + "\n"


def interval_lines(t, width: int, explain: bool) -> list[str]:
    """The error bar's line, one per distinct interval among the rows (rules at their own layouts may be in different
    regimes: ZeRO-3 for one, ZeRO-2 for another; a strong-scaling table spans scales), each naming the rules and GPU
    counts it applies to where the rows differ; ``--explain``: the published runs behind each."""
    from .text import wrapped

    import re

    groups: dict = {}
    for _, row in t.iterrows():  # alike but for the GPU count the description ends with: one line
        if row["source_interval"]:
            groups.setdefault(re.sub(r", \d+ GPUs(?=(, \d+ tokens)?\)$)", "", row["source_interval"]), []).append(row)
    out = []
    for rows in groups.values():
        label = ""
        if len(groups) > 1:
            parts = []
            rules = list(dict.fromkeys(str(r["rule"]) for r in rows))
            gpus = list(dict.fromkeys(str(int(r["gpus"])) for r in rows))
            if len(rules) < t["rule"].nunique():  # named where the line is not every rule's
                parts.append(", ".join(rules))
            if len(gpus) < t["gpus"].nunique():
                parts.append("at " + ", ".join(gpus) + " GPUs")
            label = f" ({' '.join(parts)})"
        out.append(wrapped(f"time (low-high){label}: {interval_note(rows[0])}", width))
        if explain:
            out += error_bar_rows(rows[0], width)
    return out


def interval_note(row) -> str:
    """The error bar in one short line: its multiples and how many runs it comes from (``--explain`` names them)."""
    head, _, rest = row["source_interval"].partition(": ")
    runs = rest.split(" on ", 1)[1].split(" published runs")[0]
    notes = [n for n in rest.split("plan's regime", 1)[-1].rsplit(" (", 1)[0].split("; ") if n]
    # each widening in short: "no published run on cdna3 GPUs", "widened to the 194 runs on hopper GPUs", ...
    widened = "".join(f"; {n.split(':')[0]}" for n in notes)
    return (f"{head.removeprefix('80% interval ')}, an 80% interval from the model's misses on {runs} published runs "
            f"like this one{widened} (--explain names them)")


def interval_of(described: str):
    """The interval a row's ``source_interval`` describes (intervals.Interval.describe), read again from its regime's
    fields, and those fields as printed."""
    from .analytic.steptime.intervals import interval

    fields = described.rsplit(" (", 1)[1].rstrip(")").split(", ")
    reg = dict(zip(("sharding", "generation", "scale", "size"), fields))
    for extra in fields[4:]:  # the GPU count and the tokens per sequence, after the four fields
        number, _, unit = extra.partition(" ")
        reg[{"GPUs": "gpus", "tokens": "seq_len"}[unit]] = int(number)
    return interval(reg), fields


def error_bar_runs(table) -> "pd.DataFrame":
    """The published runs behind each distinct error bar of a plan's rows: its ``source_interval``, and each run's
    source, name and measured / predicted step (the API's PlanResult.error_bar_runs; ``--explain`` prints them)."""
    import pandas as pd

    from .analytic.steptime.intervals import residuals

    ratio = {f"{r['source']} / {r['run']}": r["ratio"] for r in residuals()}
    out = []
    for described in dict.fromkeys(x for x in table.get("source_interval", []) if x):
        bar, _ = interval_of(described)
        listed = set()
        for role, names in (("alike", bar.rows), *bar.widened.items()):
            for name in names:  # a run in the alike rows and a widening's: listed once, as alike
                if name in listed:
                    continue
                listed.add(name)
                source, run = name.split(" / ", 1)
                out.append({"source_interval": described, "role": role, "source": source, "run": run,
                            "ratio": ratio[name]})
    return pd.DataFrame(out, columns=["source_interval", "role", "source", "run", "ratio"])


def error_bar_rows(row, width: int) -> list[str]:
    """``--explain``: the published runs the row's interval was read from (steptime/intervals.py)."""
    from .text import wrapped

    bar, fields = interval_of(row["source_interval"])
    runs = {}
    for name in bar.rows:
        source, run = name.split(" / ", 1)
        runs.setdefault(source, []).append(run)
    out = ["", wrapped(f"The error bar's {len(bar.rows)} published runs (measured / predicted step, each source's "
                       f"model fitted without it; the regime: {', '.join(fields)}{bar.note}):", width)]
    out += [wrapped(f"- {source} ({len(names)}): {'; '.join(names)}", width) for source, names in runs.items()]
    for role, names in bar.widened.items():  # the runs a widening read (PlanResult.error_bar_runs lists each)
        counts = {}
        for name in names:
            source = name.split(" / ", 1)[0]
            counts[source] = counts.get(source, 0) + 1
        out.append(wrapped(f"Widened by its {role}'s {len(names)} runs: "
                           + "; ".join(f"{source} ({n})" for source, n in counts.items()), width))
    return out


def figure(result: SearchPlan, path: str) -> None:
    """Time against GPUs, and GPU-hours against time, a line per rule (findings/plan_figures.py)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .findings.plan_figures import strong_scaling
    from .io import atomic_write  # a kill or a full disk leaves the old figure or none, never half of one

    fig = strong_scaling(result.table)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=150, bbox_inches="tight",
                                               format=Path(path).suffix.lstrip(".") or "png"))
    plt.close(fig)


def check_counts(counts) -> None:
    if any(not isinstance(c, int) or c < 1 or math.isinf(c) for c in counts):
        raise ConfigError("--gpus: positive integers")
