"""The plan for people: the command line's tables (``trainingcost plan``'s default view, ``--cost-model all``'s
and the layout search's), the compact table's cells, and the plan as the text the command line prints. Read by the
command line (plan_command.py), the Python API (``PlanResult.text``) and the planner page (web/); imports neither.
"""

from __future__ import annotations

import math

import pandas as pd

from .analytic.plan import PRECISIONS, STEP_PARTS, ZERO3_GATHER
from .analytic.steptime.device import below_full_power, generic_numbers, power_label
from .plan_search import error_bar_rows, interval_note, marked, untrained, untrained_note
from .text import _duration, _duration_range, _si, describe_config, grid, wrapped


def _gib(value: float) -> str:
    return f"{value / 2**30:.2f}" if value else "0"


def render(table: pd.DataFrame, cfg, describe, gpu) -> str:
    first = table.iloc[0]
    out = [describe(cfg).replace(f", batch {cfg.batch} (", " ("), ""]
    out.append(f"Run: {first['tokens']:.3g} tokens ({first['source_tokens']}) = {first['tokens'] / first['tokens_per_sequence']:,.0f} "
               f"sequences of {first['tokens_per_sequence']}; global batch {first['global_batch']} sequences "
               f"({first['source_batch']}); {first['optimizer_steps']:,.0f} optimizer steps")
    peak = first["peak_flops_per_gpu"] / 1e12
    out.append(f"Hardware: {first['gpus']} x {gpu.name} ({gpu.label}: {peak:g} TFLOP/s dense {PRECISIONS[first['precision']].peak_dtype}, "
               f"{gpu.memory_bytes / 1e9:g} GB, {gpu.power_w:g} W); {_degrees(first)}; sharding {_sharding(first)}; {first['precision']}; activation "
               f"checkpointing {first['checkpointing']}; optimizer {first['optimizer']}" + _experts(first))
    out.append(f"Efficiency: {first['source_efficiency']}")
    if table["compute_multiplier"].notna().any() and table["source_quality"].iloc[0].startswith("to reach"):
        out.append(tokens_per_rule(table))
    else:
        out.append(f"Tokens per rule: {first['source_quality']}")
    out.append("")
    header, rows = full_cells(table, cfg)
    refused = untrained(cfg, table["rule"])
    out.append("What the run costs, per rule and cost model (FLOPs: the model's; recompute: checkpointing's extra forward; "
               "MWh: GPU energy x PUE)")
    out.append(grid(header, rows))
    out.extend(untrained_note(refused, cfg))
    out.append("")
    if table[f"step_{STEP_PARTS[0]}_s"].notna().any():
        labels = {"matmul": "matmul", "attention": "attention", "memory": "memory", "launch": "launch",
                  "comm_tp": "TP comm", "comm_dp": "DP comm", "comm_pp": "PP comm", "bubble": "bubble",
                  "optimizer": "optimizer", **({"comm_ep": "EP comm"} if (table["ep"] > 1).any() else {}),
                  **({"comm_cp": "CP comm"} if (table["cp"] > 1).any() else {})}
        steps = table.drop_duplicates("rule")
        header = ["rule", "step", *labels.values(), "MFU"]
        rows = [[r["rule"], _duration(r["step_time_s"]), *(_duration(r[f"step_{k}_s"]) if r[f"step_{k}_s"] else "0"
                                                            for k in labels), f"{r['mfu']:.3f}"]
                for _, r in steps.iterrows()]
        out.append("Predicted step, per rule (seconds per optimizer step; communication and bubble as exposed on the "
                   "critical path; MFU under the first cost model)")
        out.append(grid(header, rows))
        out.append("")
    lines = []
    for model, part in table.groupby("cost_model", sort=False):
        lines.append(f"{model}: " + "; ".join(f"{r['rule'].upper()} {_si(r['gpu_hours'])} GPU-hours" for _, r in part.iterrows()))
    out.append("Side by side: " + lines[0])
    out.extend("              " + line for line in lines[1:])
    out.append("")
    memory = table.drop_duplicates("rule")
    header = ["rule", "", "weights", "feedback", "gradients", "master", "optimizer", "gathered", "activations", "total",
              "capacity", "fits", "micro-batch", "accumulation", "largest fit"]
    rows = [[r["rule"], "", _gib(r["mem_parameters"]), _gib(r["mem_feedback"]), _gib(r["mem_gradients"]),
             _gib(r["mem_master_weights"]), _gib(r["mem_optimizer_state"]), _gib(r["mem_gathered"]),
             _gib(r["mem_activations"]) + ("" if r["checkpoint_applies"] or first["checkpointing"] == "none" else " (no graph)"),
             _gib(r["mem_total"]), _gib(r["memory_capacity"]), "yes" if r["fits"] else "NO", r["micro_batch"],
             r["grad_accumulation"], r["max_micro_batch"]] for _, r in memory.iterrows()]
    out.append("Memory per GPU, GiB (the most loaded GPU; activations at the micro-batch; largest fit: the most sequences "
               "per micro-batch that fit)")
    out.append(grid(header, rows))
    out.append("")
    out.append("Assumptions and their sources:")
    if first.get("finetune", "full") != "full":
        out.append(f"- fine-tuning: {first['source_finetune']}")
    for key, label in (("source_precision", "precision"), ("source_peak", "peak FLOP/s"),
                       ("source_memory_capacity", "memory"), ("source_power", "power"), ("source_pue", "PUE"),
                       ("source_carbon", "carbon intensity"), ("source_price", "price"),
                       ("source_efficiency", "step time"), ("source_interval", "error bar"),
                       ("source_framework", "framework"), ("source_network", "network")):
        if first[key]:
            out.append(f"- {label}: {first[key]}")
    out.append("- memory model: docs/planning.md (activations: analytic/memory.py's per-rule accounting; "
               f"tp {'with' if first.get('sequence_parallel') else 'without'} sequence parallelism; "
               f"{first.get('schedule') or '1F1B'} with pp)")
    if first["source_efficiency"].startswith("predicted") and generic_numbers(gpu):
        out.append(f"- device model: {_generic_note(gpu)}")
    return "\n".join(out) + "\n"


def _generic_note(gpu) -> str:
    return (f"{gpu.name} has no published {', '.join(generic_numbers(gpu))} in the catalogue: generic defaults (an "
            "A100-like part, analytic/steptime/device.py) priced in their place")


SCREEN_WIDTH = 100  # the compact view (the default: one cost model) fits 100 columns x 40 lines


def _degrees(row) -> str:
    """``data x tensor x pipeline = 4 x 8 x 2``, with context parallelism where the plan has it, and the pipeline's
    schedule where it is not 1F1B."""
    schedule = row.get("schedule") or ""
    tail = f" ({schedule} schedule)" if schedule not in ("", "1f1b") else ""
    if int(row.get("tp", 1)) > 1 and "sequence_parallel" in row:  # it changes the activations each rank keeps
        tail += " with sequence parallelism" if row["sequence_parallel"] else " without sequence parallelism"
    if row.get("cp", 1) > 1:
        return (f"data x context x tensor x pipeline = {row['dp']} x {row['cp']} x {row['tp']} x {row['pp']}{tail} "
                f"(each sequence split over {row['cp']} GPUs)")
    return f"data x tensor x pipeline = {row['dp']} x {row['tp']} x {row['pp']}{tail}"


def _sharding(row) -> str:
    """The sharding, with its HSDP replica groups where the plan has them."""
    r = int(row.get("replicate", 1))
    if r <= 1:
        return str(row["sharding"])
    return (f"{row['sharding']} inside {r} replica groups of {row['dp'] // r * row.get('cp', 1)} ranks (HSDP: gradient "
            f"shards all-reduced across the groups)")


def _experts(row) -> str:
    """The expert-parallel degree and its all-to-all traffic, where the plan has one (docs/planning.md)."""
    if row["ep"] <= 1:
        return ""
    where = "inside data-parallel" if row["etp"] == row["tp"] else \
        f"folded over tensor x data-parallel, experts' tensor-parallel {row['etp']}"
    return (f"; expert-parallel {row['ep']} {where}, all-to-all {row['ep_all_to_all_bytes'] / 1e9:.3g} GB "
            f"sent per GPU per step ({row['rule']})")


def render_compact(table: pd.DataFrame, cfg, describe, gpu, verdict: str | None) -> str:
    """The default view, one cost model: one row per rule (FLOPs, ratio to BP, step, wall-clock, GPU-hours, MFU,
    energy, CO2e, money where priced, memory per GPU, whether it fits, the micro-batch), the fit verdict, and the
    assumptions in short; ``--cost-model all`` prints :func:`render` with every source."""
    first = table.iloc[0]
    batch = ("given" if first["source_batch"] == "given" else "default: the run in one step"
             if first["source_batch"].startswith("default: the run's") else
             f"default: one sequence per data-parallel rank, "
             f"{first['global_batch'] * first['tokens_per_sequence'] / 1e6:.3g}M tokens"
             if first["source_batch"].startswith("default: one sequence per") else "default: about 4M tokens")
    steps = first["optimizer_steps"]
    shown = f"{steps:,.0f}" if steps >= 100 or steps == round(steps) else f"{steps:.3g}"  # 3.58 steps, not 4
    out = [wrapped(describe(cfg).replace(f", batch {cfg.batch} (", " ("), SCREEN_WIDTH), ""]
    out.append(wrapped(f"Run: {first['tokens']:.3g} tokens ({first['source_tokens'].split(' (')[0]}) in "
                       f"{shown} step{'' if steps == 1 else 's'} of {first['global_batch']} sequences of "
                       f"{first['tokens_per_sequence']} tokens (global batch {batch})", SCREEN_WIDTH))
    offloaded = (f" (offload {first['offload']}: {first['host_memory_per_node'] / 2**30:.0f} GiB in each node's host)"
                 if first.get("offload", "none") != "none" else "")
    out.append(wrapped(f"On {first['gpus']} x {gpu.name} ({gpu.memory_bytes / 1e9:g} GB): {_degrees(first)}, "
                       f"{_sharding(first)}{offloaded}, {first['precision']}, "
                       f"checkpointing {first['checkpointing']}, {first['optimizer']}" + _experts(first), SCREEN_WIDTH))
    if first.get("finetune", "full") != "full":
        out.append(wrapped("Trains: " + first["source_finetune"].split("; Hu et al.")[0], SCREEN_WIDTH))
    if table["compute_multiplier"].notna().any() and table["source_quality"].iloc[0].startswith("to reach"):
        out.append(wrapped(tokens_per_rule(table), SCREEN_WIDTH))
    else:  # the cheapest per step is not the cheapest per quality: say which this is
        out.append("Tokens: equal for every rule; no learning-quality data (--target-loss with --frontiers)")
    out.append("")
    header, rows = compact_cells(table, cfg)
    refused = untrained(cfg, table["rule"])
    bar = "wall-clock, 80% interval" if first["source_interval"] else "wall-clock, no interval"
    out.append(f"The run under the {first['cost_model']} cost model (time: {bar}; GiB: most loaded GPU)")
    out.append(grid(header, rows))
    out += [wrapped(line, SCREEN_WIDTH) for line in untrained_note(refused, cfg)]
    if verdict:  # what does not fit, then what would, each on its own lines
        out += ["", *(wrapped(part.strip(), SCREEN_WIDTH) for part in verdict.replace(". The smallest", ".\nThe smallest")
                      .replace(". No layout", ".\nNo layout").splitlines())]
    money = table["cost"].notna().any()
    out += ["", "Assumptions (--cost-model all: every cost model, the step's parts and every source):"]
    precision = (first["source_precision"].split("): ")[0] + "; --precision)" if "): " in first["source_precision"]
                 else f"{first['precision']} (--precision)")
    gathered = (f"; {first['sharding']} gathers a {first['zero3_gather']} at a time "
                f"({ZERO3_GATHER[first['zero3_gather']].split(':')[0]}; --zero3-gather)"
                if first["sharding"] in ("zero3", "fsdp") else "")
    measured = " on the device numbers of --device-model" if "calibrate --device-model" in first["source_efficiency"] else ""
    fallback = f"; attention unfused: neither FlashAttention nor cuDNN's fused attention runs on {gpu.name}" \
        if " runs unfused on " in first["source_framework"] else \
        f"; attention flash: FlashAttention-3 runs on Hopper only, not on {gpu.name}" \
        if " runs flash on " in first["source_framework"] else \
        f"; attention {first['attention']} (--attention)" if "--attention given" in first["source_framework"] else ""
    earliest = "; the family's earliest entry, read for any date before its successor's" \
        if "family's earliest entry" in first["source_framework"] else ""
    notes = [f"precision: {precision}",
             f"step time: {first['source_efficiency'].split(' (')[0]}{measured} (docs/planning.md; --mfu, "
             "--tokens-per-s, --calibration)",
             *([f"time (low-high): {interval_note(first)}"] if first["source_interval"] else []),
             f"energy: {power_label(gpu)} {gpu.power_w:g} W x {first['source_power'].split(' (')[0].removeprefix('TDP x ')}, PUE "
             f"{first['source_pue'].split(' (')[0].removeprefix('default ')}, {first['source_carbon'].split(' (')[0].removeprefix('default ')} "
             f"CO2e{'; money: ' + str(first['currency']) + ' (--price, --currency)' if money else '; money: --price'}",
             f"memory: ZeRO's bytes per parameter, activations of analytic/memory.py{gathered}",
             f"framework: {first['source_framework'].split(' (')[0]} (--framework{earliest}){fallback}; network: "
             f"{first['source_network'].split(' (')[0]} (--cluster, --nic-gbps)",
             *([f"pipeline: {first['pipeline_split']}"] if first["pipeline_split"] else []),
             *([f"device model: {len(generic_numbers(gpu))} numbers A100-like, none published for {gpu.name} "
                "(--cost-model all)"]
               if first["source_efficiency"].startswith("predicted") and generic_numbers(gpu) else []),
             *([f"device model: compute at {below_full_power(gpu):.3g} of full power at {gpu.power_w:g} W (the part's "
                "published power curve; --power-limit)"]
               if first["source_efficiency"].startswith("predicted") and below_full_power(gpu) < 1 else []),
             *([f"goodput: {first['source_goodput']} of the wall-clock in training steps"]
               if first["goodput"] != 1.0 else [])]
    out += [wrapped(f"- {note}", SCREEN_WIDTH) for note in notes]
    return "\n".join(out) + "\n"


def full_cells(table: pd.DataFrame, cfg) -> tuple[list[str], list[list]]:
    """``--cost-model all``'s main table: its header and, per row of ``table`` (rule and cost model), its cells."""
    money = table["cost"].notna().any()
    header = ["rule", "cost model", "FLOPs", "x BP", "recompute", "step", "wall-clock", "GPU-hours", "MFU", "HFU",
              "MWh", "tCO2e", *([f"cost ({table['currency'].iloc[0]})"] if money else [])]
    rows = []
    refused = untrained(cfg, table["rule"])
    for _, r in table.iterrows():
        rows.append([marked(r["rule"], refused), r["cost_model"], "never" if math.isnan(r["model_flops"]) else f"{r['model_flops']:.3g}",
                     "" if math.isnan(r["flops_vs_bp"]) else f"{r['flops_vs_bp']:.2f}",
                     "-" if math.isnan(r["recompute_flops"]) else f"{r['recompute_flops']:.3g}" if r["recompute_flops"]
                     else "0", _duration(r["step_time_s"]),
                     _duration(r["wall_clock_s"]), _si(r["gpu_hours"]), f"{r['mfu']:.3f}", f"{r['hfu']:.3f}",
                     _si(r["energy_kwh"] / 1e3, 4), _si(r["co2e_t"], 4), *([_si(r["cost"])] if money else [])])
    return header, rows


def compact_cells(table: pd.DataFrame, cfg) -> tuple[list[str], list[list]]:
    """The default view's table: its header and, per row of ``table``, its cells as printed."""
    money = table["cost"].notna().any()
    header = ["rule", "FLOPs", "x BP", "step", "time", "GPU-h", "MFU", "MWh", "tCO2e",
              *([str(table["currency"].iloc[0])] if money else []),  # the cost column, titled by its currency
              "GiB", "fits", "mb"]
    refused = untrained(cfg, table["rule"])
    rows = [[marked(r["rule"], refused), "never" if math.isnan(r["model_flops"]) else f"{r['model_flops']:.3g}".replace("e+", "e"),
             "" if math.isnan(r["flops_vs_bp"]) else f"{r['flops_vs_bp']:.2f}", _duration(r["step_time_s"]),
             _duration_range(r["wall_clock_s"], r["wall_clock_days_low"] * 86400, r["wall_clock_days_high"] * 86400),
             _si(r["gpu_hours"]), f"{r['mfu']:.3f}", _short(r["energy_kwh"] / 1e3),
             _short(r["co2e_t"]), *([_si(r["cost"])] if money else []), f"{r['mem_total'] / 2**30:.1f}",
             "yes" if r["fits"] else "NO", r["micro_batch"]] for _, r in table.iterrows()]
    return header, rows


def plan_cells(out, cost_model_all: bool = False) -> pd.DataFrame:
    """The plan's main table as :func:`plan_text` prints it, cell for cell: the search's (each rule at its best layout,
    per GPU count), ``--cost-model all``'s (a row per rule and cost model) or the default view's, one column per
    titled column, the cells as printed (text)."""
    from . import plan_search

    header, rows = (plan_search.search_cells(out.search, out.cfg) if out.search is not None
                    else full_cells(out.table, out.cfg) if cost_model_all else compact_cells(out.table, out.cfg))
    keep = [i for i, title in enumerate(header) if title]  # no column without a title
    return pd.DataFrame([[str(row[i]) for i in keep] for row in rows], columns=[header[i] for i in keep])


def plan_text(out, cost_model_all: bool = False, explain: bool = False) -> str:
    """What ``trainingcost plan`` prints (its table format) for the plan ``out`` (planning.PlanOutcome): the search's
    view with a layout search or several GPU counts, else the default view (or ``--cost-model all``'s), then the notes
    on the model, and a given layout's fit verdict."""
    from . import plan_search

    if out.search is not None:
        text = plan_search.render(out.search, out.cfg, describe_config, out.gpu, cost_model_all, explain, SCREEN_WIDTH)
    elif not cost_model_all:
        text = render_compact(out.table, out.cfg, describe_config, out.gpu, out.verdict)
        if explain and out.table["source_interval"].iloc[0]:
            text += "\n".join(error_bar_rows(out.table.iloc[0], SCREEN_WIDTH)) + "\n"
    else:
        text = render(out.table, out.cfg, describe_config, out.gpu)
    text += "".join(wrapped(f"Note: {note}", SCREEN_WIDTH) + "\n" for note in out.notes)
    if out.search is None and out.verdict and cost_model_all:
        text += out.verdict + "\n"
    return text


def _short(value: float) -> str:
    """Energy or CO2e in at most 7 characters: 4 significant digits, 2 in scientific notation below 0.01 or from a
    million."""
    if value == 0 or math.isnan(value):
        return "0" if value == 0 else "-"
    if abs(value) < 0.01 or abs(value) >= 1e6:
        return f"{value:.1e}".replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")
    return _si(value, 4)


def tokens_per_rule(table: pd.DataFrame) -> str:
    """The plan-at-equal-quality line: each rule's tokens and its compute as a multiple of BP's."""
    first = table.iloc[0]
    per = table.drop_duplicates("rule")
    return (f"Tokens per rule: {first['source_quality'].split(':')[0]}: " + "; ".join(
        f"{r['rule'].upper()} " + ("not in the study" if r["source_quality"].endswith("not in the study, so no budget")
                                  else "never reaches it" if math.isnan(r["token_multiplier"]) else
                                  f"{r['tokens']:.3g} ({r['compute_multiplier']:.3g}x BP's compute)")
        for _, r in per.iterrows()))
