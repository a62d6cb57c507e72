"""``trainingcost estimate``'s computation: one model's FLOPs per phase (or per layer), rule and cost model, and the
memory model's parts (the command line, cli.py, prints them; the Python API, api.py, returns them). No torch."""

from __future__ import annotations

import argparse
import dataclasses

import pandas as pd

from .analytic import PHASES, cost_model_names, layer_rows, layer_table, phase_totals
from .analytic.catalogue import REFERENCE_RULE
from .analytic.engine import out_of_scope
from .analytic import rule_names
from .analytic.finetune import (ADAPTER_BYTES, adapter_flops, adapter_parameters, base_bytes, check_finetune, describe,
                                first_block_skipped, from_flags, resolved)
from .analytic.memory import DTYPE_BYTES, OPTIMIZER_SLOTS, memory_table
from .args import model_entry, rule_list
from .config import ConfigError, configs_frame

# The most rows --per-layer, csv and json may print: a per-layer table of a million rows is about 300 MB
# in memory and unreadable on a terminal; the phase totals (the default view) have no such limit.
MAX_TABLE_ROWS = 1_000_000


def phase_table(configs: pd.DataFrame, rules: list[str], models: list[str], mirror_steps: int) -> pd.DataFrame:
    """The per-phase totals of one configuration, without building its per-layer table."""
    totals = phase_totals(configs, rules, models, mirror_steps)
    rows = [{"rule": rule, "cost_model": model, "phase": phase, "maccs": int(totals[(model, rule, phase)][0][0]),
             "flops": int(totals[(model, rule, phase)][1][0])}
            for rule in rules for model in models for phase in PHASES if (model, rule, phase) in totals]
    return pd.DataFrame(rows)


def adapter_phases(table: pd.DataFrame, cfg, ft) -> pd.DataFrame:
    """BP's phases under executed with a frozen base (analytic/finetune.py), for the configuration's batch: the
    forward with the adapters', the input gradients with the adapters' (the first block's skipped ones left out), the
    adapters' weight gradients alone."""
    a, skipped = adapter_flops(cfg, ft), first_block_skipped(cfg, ft)
    b = cfg.batch
    table = table.copy()
    for phase, value in (("forward", None), ("backward", None), ("weight_update", b * a["weight_grad"])):
        at = (table["rule"] == "bp") & (table["cost_model"] == "executed") & (table["phase"] == phase)
        if phase == "forward":
            value = int(table.loc[at, "flops"].iloc[0]) + b * a["forward"]
        elif phase == "backward":
            value = int(table.loc[at, "flops"].iloc[0]) + b * (a["backward"] - skipped)
        table.loc[at, "flops"] = value
        table.loc[at, "maccs"] = value // 2
    return table


def adapter_memory(memory: pd.DataFrame, cfg, ft, dtype: str, optimizer: str) -> pd.DataFrame:
    """The memory model's parts of BP with a frozen base: the base in ``dtype`` (lora) or NF4 and fp32 (qlora), fp32
    adapters with their gradients and optimizer state; activations as BP's; no tape replay (peaks -1)."""
    memory = memory.copy()
    at = memory["rule"] == "bp"
    adapters = adapter_parameters(cfg, ft)
    base = base_bytes(cfg, ft, int(memory.loc[at, "parameter_count"].iloc[0]), DTYPE_BYTES[dtype])
    memory.loc[at, "parameters"] = int(base) + adapters * ADAPTER_BYTES
    memory.loc[at, "gradients"] = adapters * ADAPTER_BYTES
    memory.loc[at, "optimizer_state"] = adapters * ADAPTER_BYTES * OPTIMIZER_SLOTS[optimizer]
    memory.loc[at, "total"] = memory.loc[at, ["parameters", "gradients", "feedback", "optimizer_state",
                                              "activations"]].sum(axis=1)
    for column in [c for c in memory.columns if c.startswith("peak") or c == "step_start"]:
        memory.loc[at, column] = -1
    return memory.assign(finetune=ft.kind, trained_parameters=memory["parameter_count"].where(~at, adapters))


@dataclasses.dataclass
class EstimateOutcome:
    """What ``estimate`` computed, before printing."""

    cfg: object
    table: "pd.DataFrame"  # per phase (or per layer), rule and cost model
    memory: "pd.DataFrame"  # per rule: the memory model's parts and peaks
    models: list
    notes: list


def check_estimate_flags(args: argparse.Namespace, rules: list[str]) -> None:
    """Flags that would do nothing with the others given: one line, before any work."""
    if args.memory and args.per_layer:
        raise ConfigError("--memory: prints the memory table, per rule; --per-layer prints the costs per layer; give "
                          "one of them")
    if args.metric != "flops" and args.memory:
        raise ConfigError(f"--metric: {args.metric} chooses the cost table's unit; --memory prints the memory table, "
                          "which counts bytes; give one of them")
    if args.metric != "flops" and args.format != "table":
        raise ConfigError(f"--metric: {args.metric} chooses the printed table's unit; --format {args.format} carries "
                          "both flops and maccs columns; leave --metric out")
    if args.mirror_steps != 1 and "wm" not in rules:
        raise ConfigError(f"--mirror-steps: weight mirror's (wm) steps per training step; --rule {','.join(rules)} "
                          "has no wm")


def estimate_outcome(args: argparse.Namespace) -> EstimateOutcome:
    """``trainingcost estimate``'s computation (the command line prints it; trainingcost.estimate() returns it)."""
    cfg = model_entry(args)
    configs = configs_frame([(args.preset or "", cfg)])
    rules = args.rule if isinstance(args.rule, list) else rule_list(args.rule)
    check_estimate_flags(args, rules)
    compact = args.cost_model is None and args.format == "table" and not args.per_layer and not args.memory
    chosen = args.cost_model or ("executed" if compact else "all")
    models = list(cost_model_names()) if chosen == "all" else [chosen]
    declined = [model for model in models if not out_of_scope(model, configs).empty]
    notes = [f"{model}: out of scope: the {model} cost model defines the 2017 transformer only, and this model sets "
             f"{', '.join(f'{k}={v}' for k, v in cfg.options().items())}; its rows are absent" for model in declined]
    if len(declined) == len(models):
        raise ConfigError("--cost-model " + notes[0])
    models = [model for model in models if model not in declined]
    finetune = from_flags(args.finetune, args.lora_rank, args.lora_targets)
    if finetune.adapters:  # adapters train under BP, counted under executed: "all" means all that can
        if set(rules) == set(rule_names()) and len(rules) > 1:
            notes = notes + [f"--finetune {finetune.kind}: adapters train under BP; the other rules of --rule all are "
                             "left out"]
        rules = ["bp"] if set(rules) == set(rule_names()) else rules
        models = ["executed"] if chosen == "all" else models
        check_finetune(finetune, cfg, rules, models)
        if args.per_layer:
            raise ConfigError(f"--per-layer: the per-layer table has no adapter rows; with --finetune {finetune.kind} "
                              "estimate gives the totals per phase and the memory (--memory)")
        finetune = resolved(finetune)
        notes = notes + [f"finetune {describe(finetune, cfg)}; memory: the parts summed with fp32 adapters (the "
                         "executed model's tape replays full training)"]
    memory = memory_table(configs, rules, [args.dtype], [args.optimizer])
    if finetune.adapters:
        memory = adapter_memory(memory, cfg, finetune, args.dtype, args.optimizer)
    per_layer = args.per_layer or (args.format != "table" and not args.memory and not finetune.adapters)
    if per_layer:
        rows = layer_rows(configs, rules, models)
        if rows > MAX_TABLE_ROWS:
            flag = "--per-layer" if args.per_layer else f"--format {args.format}"
            raise ConfigError(f"{flag}: the per-layer table would have {rows:,} rows, more than {MAX_TABLE_ROWS:,}; "
                              "name one --rule and one --cost-model, or fewer layers (the default table view prints the "
                              "totals per phase at any size)")
        table = layer_table(configs, rules, models, args.mirror_steps)
    else:
        table = phase_table(configs, rules, models, args.mirror_steps)
        if finetune.adapters:
            table = adapter_phases(table, cfg, finetune)
    from .config.hf import table_note

    notes = notes + [note for note in [table_note(args.preset, getattr(args, "hf_config", None), cfg, args.seq_len)]
                     if note]
    if getattr(args, "hf_config", None):  # transformers' own model may run another attention kernel: say which
        from .config.hf import attention_note, length_note

        notes = notes + [note for note in [length_note(args.hf_config, args.seq_len)] if note]
        ref = (table[(table["rule"] == REFERENCE_RULE) & (table["cost_model"] == "executed")] if "executed" in models
               else None)
        note = attention_note(args.hf_config, cfg, int(ref["flops"].sum()) if ref is not None and len(ref) else None)
        notes = notes + ([note] if note else [])
    return EstimateOutcome(cfg, table, memory, models, notes)
