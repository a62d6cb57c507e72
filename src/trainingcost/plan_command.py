"""``trainingcost plan``: what a whole training run costs, per rule and cost model.

The formulas are :mod:`trainingcost.analytic.plan` (no torch); this module reads the command line into a
:class:`~trainingcost.analytic.plan.PlanSpec` (the workflow's plan step, which reads the config's ``plan``
section, is :mod:`trainingcost.pipeline`), prices a calibration
through the predictor when one is given (:mod:`trainingcost.findings.plan_rate`), and prints or writes the
plan. Nothing here imports torch. docs/planning.md documents every formula and source.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from .analytic import cost_model_names, rule_names
from .analytic.memory import OPTIMIZER_SLOTS
from .analytic.plan import (
    CHECKPOINTING, PRECISIONS, PREDICTED_SOURCE, SHARDINGS, STEP_PARTS, ZERO3_GATHER, Efficiency, PlanSpec, plan_table,
    tokens_per_sequence,
)
from .args import (add_model_flags, count, count_max_or_auto, count_or_auto, gpu_counts, model_entry, number, rule_list,
                   spelled_as)
from .plan_search import OBJECTIVES, fixed_args, free_fields, marked, untrained, untrained_note
from .analytic.steptime.device import below_full_power, generic_numbers, power_label
from .analytic.steptime.step import ATTENTION
from .plan_search import run as search_plan
from .config import ConfigError
from .config.errors import regular_file
from .config.frameworks import (RECOMPUTE_TAILS, cluster, clusters, default_framework, families, framework,
                                frameworks, recompute_tail_of, resolve_framework)
from .text import _duration, _si, describe_config, grid, wrapped

CHINCHILLA_TOKENS_PER_PARAMETER = 20  # Hoffmann et al. 2022: compute-optimal D ~ 20 N
DEFAULT_MFU = 0.40
DEFAULT_MFU_SOURCE = (f"default MFU {DEFAULT_MFU:.2f} (assumed; large runs report 0.21-0.46: Chowdhery et al. 2022, "
                      "Table 3)")


def add_parser(sub) -> None:
    """The ``plan`` subcommand (cli.build_parser calls this)."""
    p = sub.add_parser("plan", help="what a whole training run costs on named GPUs: time, GPU-hours, money, energy, "
                                    "CO2e and memory, per rule and cost model")
    add_model_flags(p)
    p.add_argument("--rule", default="all", type=rule_list, metavar="RULE[,RULE...]|all",
                   help=f"one rule, several separated by commas, or all (default): {', '.join(rule_names())}")
    p.add_argument("--cost-model", default="executed", choices=[*cost_model_names(), "all"],
                   help="default executed, one row per rule in one screen; all: every cost model, the predicted step's "
                        "parts, the memory parts and every source")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--tokens", type=number, help="training tokens (e.g. 2e12)")
    budget.add_argument("--epochs", type=number, help="passes over --dataset-tokens")
    budget.add_argument("--chinchilla", action="store_true", help="20 tokens per parameter (Hoffmann et al. 2022)")
    p.add_argument("--dataset-tokens", type=number, help="tokens in the dataset (with --epochs)")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", type=count, help="sequences per optimizer step (default: about 4M tokens)")
    batch.add_argument("--global-batch-tokens", type=number, help="tokens per optimizer step")
    p.add_argument("--micro-batch", type=count_max_or_auto, default=None, metavar="N|max|auto",
                   help="sequences per GPU per forward-backward (default max: the largest that fits and divides the "
                        "replica's batch; the rest is gradient accumulation; auto: searched)")
    p.add_argument("--gpu", help="a device of the hardware catalogue (trainingcost hardware); required without --cluster")
    p.add_argument("--gpus", type=gpu_counts, default=[1], metavar="N|N,N,...|LO-HIxF",
                   help="GPUs; several (64,128,256) or a range (64-1024x2: 64 to 1024, times 2 each) give a "
                        "strong-scaling table, each count at its best layout with --layout search")
    p.add_argument("--layout", default="given", choices=["given", "search"],
                   help="search: every layout field not given is searched per rule (docs/planning.md, 'The layout "
                        "search'); a single field is searched with auto")
    p.add_argument("--objective", default="time", choices=list(OBJECTIVES),
                   help="what the best GPU count minimises over --gpus (default time); at one count every objective "
                        "ranks layouts by step time")
    p.add_argument("--explain", action="store_true", help="say why the search left parts of the space out")
    p.add_argument("--tp-across-nodes", action="store_true", help="let the search put tensor parallelism across nodes")
    p.add_argument("--figure", metavar="PATH", help="with several --gpus: write the strong-scaling figure (.png, .pdf or .svg)")
    p.add_argument("--tp", type=count_or_auto, default=1, metavar="N|auto", help="tensor-parallel degree")
    p.add_argument("--pp", type=count_or_auto, default=1, metavar="N|auto", help="pipeline-parallel degree")
    p.add_argument("--cp", type=count, default=1, metavar="N",
                   help="context-parallel degree: each of N GPUs holds 1/N of every sequence and the attention "
                        "passes keys and values around a ring (Megatron-Core's context parallelism; a decoder, a fused "
                        "attention kernel); gpus = tp x cp x pp x dp; not searched")
    p.add_argument("--replicate", type=count_or_auto, default=1, metavar="N|auto",
                   help="hybrid sharded data parallelism (HSDP): the data-parallel replicas in N groups, ZeRO/FSDP "
                        "sharding inside each, the gradient shards all-reduced across them (FSDP's HYBRID_SHARD, "
                        "torchtitan's data_parallel_replicate_degree, MaxText's dcn_data_parallelism); N divides dp, "
                        "needs a --sharding; default 1; auto: searched (every N the framework's hybrid sharding "
                        "allows, with each layout; --layout search alone keeps it as given)")
    p.add_argument("--ep", type=count_or_auto, default=1, metavar="N|auto", help="expert-parallel degree (a mixture "
                   "of experts; divides the experts and the data-parallel degree)")
    p.add_argument("--etp", type=int, default=None, metavar="N",
                   help="the experts' tensor-parallel degree (a mixture of experts; default tp); below tp the "
                        "expert-parallel groups fold over the tensor-parallel GPUs too (Megatron-Core's MoE parallel "
                        "folding): ep x etp divides tp x cp x dp; not searched")
    p.add_argument("--framework", default=None, metavar="NAME",
                   help=f"the training framework (config/frameworks.yaml: {', '.join(frameworks())}; default "
                        f"{default_framework()}), or a family ({', '.join(families())}) for its newest entry, or "
                        "FAMILY@YEAR (or @YYYY-MM[-DD]) for the entry of that time: what it overlaps, what a ZeRO-3 "
                        "gather moves, its attention kernel and its default sharding")
    p.add_argument("--attention", default=None, type=spelled_as("attention"), choices=list(ATTENTION),
                   help="the attention kernel: flash (FlashAttention-2), flash3 (FlashAttention-3, Hopper only: "
                        "FlashAttention-2 elsewhere), cudnn (cuDNN's fused attention, TransformerEngine's on Hopper) or "
                        "unfused (batched products, softmax in memory); default: the framework's")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile on the blocks: their norms, rotary embeddings and gated activations fused into "
                        "few kernels (docs/planning.md, 'Eager and fused elementwise kernels'); --no-compile: run "
                        "them op by op as the model's PyTorch code writes them; default: the framework's")
    p.add_argument("--recompute-tail", default=None, choices=list(RECOMPUTE_TAILS),
                   help="what the checkpointed blocks' recompute leaves out (docs/planning.md, 'What a recompute "
                        "repeats'): repeated (the whole block again: Megatron's, DeepSpeed's, torch's reentrant "
                        "checkpoint, Hugging Face transformers 4's default), early-stop (torch's non-reentrant "
                        "checkpoint, transformers 5's default: not the block's last product) or traced (torch.compile); default: the framework's")
    p.add_argument("--cluster", default=None, metavar="NAME",
                   help=f"a named system (config/clusters.yaml: {', '.join(clusters())}): its GPU (unless --gpu), "
                        "GPUs per node and NIC bandwidth per GPU")
    p.add_argument("--sharding", default=None, type=spelled_as("sharding"), choices=[*SHARDINGS, "auto"],
                   help="data-parallel sharding: none (DDP), ZeRO stage 1-3, fsdp (FULL_SHARD = ZeRO-3); default: "
                        "the framework's")
    p.add_argument("--zero3-gather", default=None, choices=list(ZERO3_GATHER),
                   help="what ZeRO-3/FSDP gathers whole at a time: module (DeepSpeed ZeRO-3, its estimator's accounting), "
                        "sublayer (FSDP wrapping attention and FFN modules) or block (FSDP wrapping each block); "
                        "default: the framework's")
    p.add_argument("--precision", type=spelled_as("precision"), choices=list(PRECISIONS),
                   help="default: the device's best mixed precision (bf16-mixed where it has bf16 arithmetic, else "
                        "fp16-mixed, as GPT-3 was trained on V100s); fp8-mixed: bf16-mixed with the blocks' linear "
                        "products in fp8 (devices with fp8 tensor cores: Ada, Hopper, Blackwell, MI300X)")
    p.add_argument("--checkpointing", default="none", type=str.lower, choices=[*CHECKPOINTING, "auto"],
                   help="activation checkpointing: selective checkpoints every --checkpoint-every-th block")
    p.add_argument("--checkpoint-every", type=count, default=2)
    p.add_argument("--optimizer", default="adam", choices=list(OPTIMIZER_SLOTS))
    p.add_argument("--interleave", type=count_or_auto, default=1, metavar="N|auto",
                   help="virtual pipeline stages per GPU (interleaved 1F1B)")
    p.add_argument("--sequence-parallel", nargs="?", const="on", default=None, choices=["on", "off", "auto"],
                   help="sequence parallelism with --tp (Korthikanti 2022); auto: searched")
    p.add_argument("--gpus-per-node", type=count, help="GPUs per node (default: the device's usual system)")
    p.add_argument("--nic-gbps", type=number, help="network between nodes, Gb/s per GPU (default: the device's system)")
    p.add_argument("--dp-overlap", type=number, default=None,
                   help="share of data-parallel communication hidden behind compute, the parameter all-gathers "
                        "included (default: the framework's)")
    p.add_argument("--tp-overlap", type=number, default=None,
                   help="share of tensor-parallel communication hidden behind compute, the backward's input-gradient "
                        "collectives included (default: the framework's)")
    speed = p.add_mutually_exclusive_group()
    speed.add_argument("--mfu", type=number, help="model FLOPs utilisation, end to end (default: predicted by the step-time model)")
    speed.add_argument("--hfu", type=number, help="hardware FLOPs utilisation (recompute counted), end to end")
    speed.add_argument("--tokens-per-s", type=number, help="a measured run's tokens per second per GPU")
    speed.add_argument("--calibration", metavar="JSON", help="a calibration of this GPU (trainingcost calibrate): the "
                                                              "predictor prices the model's matrix products")
    speed.add_argument("--measured-run", metavar="DIR", help="a measured run (train --out-dir DIR, or its measured.parquet): "
                                                             "its achieved FLOP/s, and its joules per FLOP where it "
                                                             "measured energy")
    p.add_argument("--device-model", metavar="JSON",
                   help="the device's own numbers for the predicted step time (trainingcost calibrate --device-model, "
                        "run on that GPU): they replace the catalogue's GEMM ceiling, bandwidth, attention and launch")
    p.add_argument("--measured-rule", default="bp", choices=rule_names(),
                   help="the rule --tokens-per-s and --joules-per-token were measured under (default bp)")
    p.add_argument("--joules-per-token", type=number, help="measured energy per token per GPU (default: TDP)")
    p.add_argument("--power-utilisation", type=number, default=1.0, help="share of the TDP drawn (default 1.0)")
    p.add_argument("--power-limit", type=number, metavar="W",
                   help="the GPUs' power limit in watts (nvidia-smi -pl), for a device with a published power curve "
                        "(h100-sxm, h100-hbm2e): its predicted compute slows along the curve, its energy is counted at "
                        "the limit "
                        "(default: the catalogue's power, e.g. 700 W for h100-sxm, 500 W for h100-hbm2e)")
    p.add_argument("--goodput", type=number, default=1.0,
                   help="share of the wall-clock spent in training steps (default 1.0: step time only; Llama 3's "
                        "405B run kept more than 90%% through 466 interruptions, Dubey et al. 2024, section 3.3.4)")
    p.add_argument("--pue", type=number, help="power usage effectiveness (default 1.1)")
    p.add_argument("--carbon-intensity", type=number, help="kg CO2e per kWh (default 0.429)")
    p.add_argument("--price", type=number, help="money per GPU-hour (no default: money is left out)")
    p.add_argument("--mirror-steps", type=count, default=1, help="weight-mirror steps per training step (WM)")
    p.add_argument("--target-loss", type=number,
                   help="plan at equal quality: each rule gets the compute its frontier needs to reach this validation "
                        "loss, as a multiple of BP's (with --frontiers; docs/planning.md)")
    p.add_argument("--frontiers", metavar="PARQUET",
                   help="the scaling study's frontiers (results/tables/frontiers.parquet) that --target-loss reads")
    p.add_argument("--require-fit", action="store_true",
                   help="exit with status 1 where a rule does not fit (default: 0, the costs printed and marked)")
    p.add_argument("--format", default="table", choices=["table", "csv", "json"])
    p.set_defaults(func=cmd_plan)


# ---------------------------------------------------------------------------
# From flags or a config section to a PlanSpec


# The most tokens a plan prices: the largest model's FLOPs per token times more would leave float64 (1e308) and print
# inf (issue 40: --tokens 1e308).
MAX_TOKENS = 1e100


def token_budget(tokens, epochs, dataset_tokens, chinchilla: bool, parameters: int, prefix: str) -> tuple[float, str]:
    """The training tokens and where they come from."""
    if dataset_tokens is not None and epochs is None:
        raise ConfigError(f"{prefix}epochs: --dataset-tokens needs --epochs (or give --tokens)")
    if epochs is not None:
        if dataset_tokens is None:
            raise ConfigError(f"{prefix}dataset_tokens: --epochs needs the dataset's size in tokens")
        for name, value in (("epochs", epochs), ("dataset_tokens", dataset_tokens)):
            if not value > 0:
                raise ConfigError(f"{prefix}{name}: must be a positive number (got {value})")
        if not epochs * dataset_tokens <= MAX_TOKENS:
            raise ConfigError(f"{prefix}epochs, {prefix}dataset_tokens: {epochs:g} x {dataset_tokens:g} tokens is beyond "
                              f"what a plan prices (at most {MAX_TOKENS:g} tokens)")
        return epochs * dataset_tokens, f"{epochs:g} epochs x {dataset_tokens:.4g} dataset tokens"
    if chinchilla:
        return (CHINCHILLA_TOKENS_PER_PARAMETER * parameters,
                f"Chinchilla: 20 tokens x {parameters:,} parameters (Hoffmann et al. 2022)")
    if tokens is None:
        raise ConfigError(f"{prefix}tokens: give --tokens, --epochs with --dataset-tokens, or --chinchilla")
    if not tokens <= MAX_TOKENS:
        raise ConfigError(f"{prefix}tokens: {tokens:g} is beyond what a plan prices (at most {MAX_TOKENS:g} tokens)")
    return tokens, "given"


def measured_run(path: str, gpu) -> tuple[Efficiency, float | None, str]:
    """A measured run's achieved FLOP/s (its FLOP-counted step over its median step time) and joules per FLOP
    (its median step energy over its FLOPs per step; None where it measured none), with their source."""
    from pathlib import Path

    file = Path(path) / "measured.parquet" if Path(path).is_dir() else Path(path)
    try:
        runs = pd.read_parquet(file)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user mistake
        raise ConfigError(f"measured_run: cannot read {file} as a run's measured.parquet ({exc.__class__.__name__})") \
            from None
    needed = {"rule", "status", "achieved_flops_per_s", "flops_per_step", "energy_per_step_j", "device_name"}
    if not needed <= set(runs.columns) or runs.empty:
        raise ConfigError(f"measured_run: {file} is not a measured run's table (train --out-dir writes one)")
    run = runs.drop_duplicates([c for c in ("config_id", "rule", "seed") if c in runs.columns])
    if len(run) != 1:
        raise ConfigError(f"measured_run: {file} holds {len(run)} runs; give one run's directory")
    row = run.iloc[0]
    for column in ("achieved_flops_per_s", "flops_per_step", "energy_per_step_j"):
        value = row[column]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"measured_run: {file}: {column} holds {str(value)[:20]!r}, not a number")
    rate = float(row["achieved_flops_per_s"])
    if row["status"] != "ok" or not math.isfinite(rate) or rate <= 0:
        raise ConfigError(f"measured_run: {file} has no timed, FLOP-counted steps (status {row['status']})")
    note = "" if any(m in str(row["device_name"]) for m in gpu.match) else f", not on {gpu.name}"
    source = (f"measured run {path}: {row['rule']} on {row['device_name']}{note}, {rate:.4g} FLOP/s achieved (its "
              "FLOP-counted step over its median step time), pipeline bubble added")
    energy = float(row["energy_per_step_j"])
    joules = energy / float(row["flops_per_step"]) if math.isfinite(energy) and energy > 0 else None
    return Efficiency("rate", rate, source), joules, (f"measured: {joules:.4g} J per FLOP (the run's median step energy, "
                                                      f"NVML, over its FLOPs per step){note}" if joules else "")


def efficiency_of(args, cfg, precision: str, tp: int, gpu) -> Efficiency:
    chosen = [k for k in ("mfu", "hfu", "tokens_per_s") if getattr(args, k, None) is not None]
    if PRECISIONS[precision].linear:  # our runs and calibrations time the products in the compute dtype
        for flag, given in (("--measured-run", getattr(args, "measured_run", None)),
                            ("--calibration", getattr(args, "calibration", None))):
            if given:
                raise ConfigError(f"{flag}: times the products in {PRECISIONS[precision].compute}; {precision} runs "
                                  f"them in {PRECISIONS[precision].linear}: leave {flag} out (the predicted step time)")
    if getattr(args, "measured_run", None):
        return measured_run(args.measured_run, gpu)[0]
    if args.calibration:
        from .findings.plan_rate import calibrated_rate, read_calibration

        if getattr(args, "cp", 1) > 1:
            raise ConfigError(f"--calibration: prices each GPU's products on whole sequences; with --cp {args.cp} "
                              "each GPU runs 1/cp of them: leave --calibration out (the predicted step time)")

        calibration = read_calibration(args.calibration)
        compute = PRECISIONS[precision].compute
        provenance = calibration.get("provenance") if isinstance(calibration.get("provenance"), dict) else {}
        name = provenance.get("device_name")
        name = name if isinstance(name, str) else "an unnamed device"
        matches = any(m in name for m in gpu.match)
        note = "" if matches else f"; it was made on {name}, not on {gpu.name}"
        rate = lambda micro: calibrated_rate(calibration, cfg, compute, micro, tp)  # noqa: E731
        return Efficiency("rate", rate(1), f"calibration {args.calibration}: the predictor's price of the model's "
                                             f"matrix products at each micro-batch{note}", rate_at=rate)
    if not chosen:
        return Efficiency("predicted", 1.0, PREDICTED_SOURCE)
    kind = chosen[0]
    value = getattr(args, kind)
    of = f" (of the {PRECISIONS[precision].peak_dtype} peak)" if PRECISIONS[precision].linear else ""
    source = {"mfu": f"given MFU{of}", "hfu": f"given HFU{of}",
              "tokens_per_s": f"measured: {value:g} tokens/s per GPU under {args.measured_rule}, its achieved FLOP/s "
                              "carried to the other rules"}[kind]
    return Efficiency(kind, value, source, rule=args.measured_rule)


def best_precision(gpu) -> str:
    """The device's best mixed precision: bf16-mixed where it has bf16 arithmetic, else fp16-mixed, else fp32."""
    for name in ("bf16-mixed", "fp16-mixed"):
        if gpu.peak(PRECISIONS[name].compute) is not None:
            return name
    return "fp32"


BLOCKING_GATHERS = "; parameter all-gathers not prefetched (they block the compute)"


def system_fields(framework_name: str | None, cluster_name: str | None, gpus_per_node: int | None,
                  nic_gbps: float | None, gpu, names: dict, attention_name: str | None = None,
                  compiled: bool | None = None, recompute_tail: str | None = None) -> dict:
    """The PlanSpec fields that the framework (config/frameworks.yaml) and the cluster (config/clusters.yaml) decide,
    each with its source: the command line's --framework/--cluster and the workflow's plan.framework/plan.cluster
    (``names`` maps framework, gpus_per_node and nic_gbps to how the caller calls them); ``attention_name`` (the
    command line's --attention, the workflow's plan.attention) replaces the framework's attention kernel;
    ``compiled`` (--compile / --no-compile, plan.compile) the framework's eager or fused elementwise kernels;
    ``recompute_tail`` (--recompute-tail, plan.recompute_tail) what its recompute leaves out."""
    fw, read_as = resolve_framework(framework_name)
    given = f"given; {read_as}" if read_as else "given"  # e.g. "the fsdp family's newest entry"
    named = f"{fw.name} for {framework_name!r}" if read_as else fw.name  # a family or another spelling
    fw_source = f"{named}: {fw.label} ({given if framework_name else 'default'}; config/frameworks.yaml)"
    wanted = attention_name or fw.attention
    attention = gpu.attention_kernel(wanted)
    if attention_name:
        fw_source += f"; attention {attention_name} ({names.get('attention', '--attention')} given)"
    if attention != wanted:
        why = "FlashAttention-3 runs on Hopper only" if wanted == "flash3" and attention == "flash" else \
            "fused attention does not run there"
        whose = "" if attention_name else "its "
        fw_source += f"; {whose}{wanted} attention runs {attention} on {gpu.name} ({why}; config/hardware.yaml)"
    elementwise = fw.elementwise if compiled is None else ("fused" if compiled else "eager")
    if compiled is not None:
        fw_source += (f"; torch.compile ({names.get('compile', '--compile')} given): norms, rotary and gated activations "
                      "fused" if compiled else f"; no torch.compile ({names.get('compile', '--no-compile')} given): "
                      "norms, rotary and gated activations run op by op")
    elif elementwise == "eager":
        fw_source += "; its model's norms, rotary and gated activations run op by op in eager PyTorch (--compile fuses them)"
    tail = recompute_tail_of(fw, elementwise) if recompute_tail is None else recompute_tail
    if recompute_tail == "traced" and elementwise == "eager":  # issue 66, N24: torch.compile's backward graph
        how = f"{names.get('compile', '--no-compile')} given" if compiled is False else f"{fw.name} runs eager"
        raise ConfigError(f"{names.get('recompute_tail', '--recompute-tail')}: traced is torch.compile's recompute, "
                          f"and this plan runs without torch.compile ({how}); give repeated or early-stop, or --compile")
    if recompute_tail is not None:
        fw_source += f"; recompute {recompute_tail} ({names.get('recompute_tail', '--recompute-tail')} given)"
    elif tail != "repeated":
        fw_source += ("; its checkpointed blocks' recompute stops before their last product (the FFN's down "
                      "projection: " + ("torch's non-reentrant checkpoint stops early; not before fp8 linears)"
                                        if tail == "early-stop" else "torch.compile's backward graph)"))
    if fw.grad_reduce != "compute":
        fw_source += "; gradients reduced in fp32" + (" under bf16" if fw.grad_reduce == "fp32-if-bf16" else "")
    if fw.zero1_sync == "after_backward":
        fw_source += "; ZeRO-1 all-reduces the gradients after the backward and all-gathers the parameters after " \
                     "the step, neither overlapped"
    if not fw.gather_prefetch:
        fw_source += BLOCKING_GATHERS
    if fw.fp8_gather or fw.fp8_tp_gather:  # config/frameworks.yaml: fp8_gather, fp8_tp_gather
        fw_source += "; under fp8-mixed it gathers " + " and ".join(
            x for x, on in (("the parameters' linear weights", fw.fp8_gather),
                            ("the sequence-parallel activations and gradients", fw.fp8_tp_gather)) if on) + " in fp8"
    per_node, nic, network = gpus_per_node, nic_gbps, f"{gpu.name}'s usual system (config/hardware.yaml)"
    fabric_latencies = None
    if cluster_name is not None:
        system = cluster(cluster_name)
        per_node = per_node if per_node is not None else system.gpus_per_node
        nic = nic if nic is not None else system.nic_gbps
        network = f"cluster {system.name}: {system.label} ({system.source}; {system.fabric}: {system.latency_source})"
        fabric_latencies = tuple(sorted(system.latencies.items()))
    if nic_gbps is not None and fabric_latencies is not None and "nic_efficiency" in dict(fabric_latencies):
        # the cluster's measured efficiency was of its own NICs, not of the ones given
        fabric_latencies = tuple((k, v) for k, v in fabric_latencies if k != "nic_efficiency")
        network += "; its measured NIC efficiency dropped for the given --nic-gbps"
    if gpus_per_node is not None or nic_gbps is not None:
        network += "; " + ", ".join(f"{names[key]} {value:g} (given)" for key, value in
                                    (("gpus_per_node", gpus_per_node), ("nic_gbps", nic_gbps)) if value is not None)
    return dict(framework=fw.name, framework_source=fw_source, fabric=fabric_latencies, can=tuple(sorted(fw.can.items())),
                network_source=network, zero3_granularity=fw.zero3_granularity, attention=attention,
                dp_rails=fw.dp_rails, gpus_per_node=per_node, nic_gbps=nic, pipeline_split=fw.pipeline_split,
                tp_backward_overlap=fw.tp_backward_overlap, gather_prefetch=fw.gather_prefetch,
                grad_reduce=fw.grad_reduce, zero1_sync=fw.zero1_sync, fp8_weight_cache=fw.fp8_weight_cache,
                fp8_params=fw.fp8_params, elementwise=elementwise, shard_copies=fw.shard_copies,
                fp8_gather=fw.fp8_gather, fp8_tp_gather=fw.fp8_tp_gather,
                recompute_tail=tail)


def spec_from_args(args, cfg, gpu) -> PlanSpec:
    from .analytic.plan import model_facts

    precision = args.precision or best_precision(gpu)

    parameters = model_facts(cfg, ["bp"], args.optimizer).parameters if args.chinchilla else 0
    tokens, tokens_source = token_budget(args.tokens, args.epochs, args.dataset_tokens, args.chinchilla, parameters, "")
    global_batch = args.global_batch
    if args.global_batch_tokens is not None:
        if not args.global_batch_tokens > 0:
            raise ConfigError(f"global_batch_tokens: must be positive (got {args.global_batch_tokens:g})")
        global_batch = max(1, round(args.global_batch_tokens / tokens_per_sequence(cfg)))
        tp, pp = (v if isinstance(v, int) else 1 for v in (args.tp, args.pp))
        dp = args.gpus // (tp * pp * args.cp) if args.gpus % (tp * pp * args.cp) == 0 else 0
        if dp and global_batch % dp:
            n = tokens_per_sequence(cfg)
            raise ConfigError(f"global_batch_tokens: {args.global_batch_tokens:g} tokens make {global_batch} sequences of "
                              f"{n} tokens, which do not divide over the data-parallel degree {dp}; give a multiple "
                              f"of {dp * n:,} tokens")
    defaults = PlanSpec(tokens=1, gpus=1, efficiency=Efficiency("mfu", DEFAULT_MFU, ""))
    joules_per_flop, flop_source = measured_run(args.measured_run, gpu)[1:] if args.measured_run else (None, "")
    if args.joules_per_token is not None:
        joules_per_flop = None  # the flag given wins over the run's measurement
    power_source = (f"TDP x {args.power_utilisation:g} (given)" if args.power_utilisation != 1.0 else defaults.power_source)
    if args.joules_per_token is not None:
        power_source = f"measured: {args.joules_per_token:g} J per token per GPU under {args.measured_rule} (given)"
    elif joules_per_flop is not None:
        power_source = flop_source
    system = system_fields(args.framework, args.cluster, args.gpus_per_node, args.nic_gbps, gpu,
                           {"framework": "--framework", "gpus_per_node": "--gpus-per-node", "nic_gbps": "--nic-gbps",
                            "attention": "--attention", "compile": "--compile" if args.compile else "--no-compile"},
                           args.attention, args.compile, args.recompute_tail)
    fw = framework(args.framework)
    efficiency = efficiency_of(args, cfg, precision, args.tp, gpu)
    if args.compile is not None and efficiency.kind != "predicted":
        raise ConfigError("compile: torch.compile's kernels are priced in the predicted step; with --mfu, --hfu, "
                          "--tokens-per-s, --measured-run or --calibration the step's rate is given, so drop one")
    if args.tp_overlap is not None:  # a given --tp-overlap holds for the backward's collectives too
        system["tp_backward_overlap"] = None
    if args.dp_overlap is not None:  # a given --dp-overlap holds for the parameter all-gathers too
        system["gather_prefetch"] = True
        system["framework_source"] = system["framework_source"].replace(BLOCKING_GATHERS, "")
    return PlanSpec(
        tokens=tokens, tokens_source=tokens_source, gpus=args.gpus, tp=args.tp, pp=args.pp,
        sharding=args.sharding or fw.sharding, **system,
        tp_overlap=fw.tp_overlap if args.tp_overlap is None else args.tp_overlap,
        precision=precision, checkpointing=args.checkpointing, checkpoint_every=args.checkpoint_every,
        precision_source="" if args.precision else f"default: {gpu.name}'s best mixed precision",
        zero3_gather=args.zero3_gather or fw.zero3_gather,
        optimizer=args.optimizer, global_batch=global_batch, micro_batch=args.micro_batch,
        efficiency=efficiency,
        power_utilisation=args.power_utilisation, power_source=power_source, goodput=args.goodput,
        goodput_source=(f"{args.goodput:g} (given)" if args.goodput != 1.0 else PlanSpec.goodput_source),
        joules_per_token=args.joules_per_token, joules_per_flop=joules_per_flop,
        pue=defaults.pue if args.pue is None else args.pue,
        pue_source=defaults.pue_source if args.pue is None else "given",
        carbon_intensity=defaults.carbon_intensity if args.carbon_intensity is None else args.carbon_intensity,
        carbon_source=defaults.carbon_source if args.carbon_intensity is None else "given",
        price=args.price, price_source="given" if args.price is not None else defaults.price_source,
        mirror_steps=args.mirror_steps, interleave=args.interleave, sequence_parallel=args.sequence_parallel,
        ep=args.ep, etp=args.etp, cp=args.cp, replicate=args.replicate, dp_overlap=fw.dp_overlap if args.dp_overlap is None else args.dp_overlap,
        **quality_of(args),
    )


def quality_of(args) -> dict:
    """PlanSpec's compute multipliers and their source, from --target-loss and --frontiers (both or neither)."""
    target, path = getattr(args, "target_loss", None), getattr(args, "frontiers", None)
    if target is None and path is None:
        return {}
    if target is None or path is None:
        given, missing = ("--target-loss", "--frontiers") if path is None else ("--frontiers", "--target-loss")
        raise ConfigError(f"{missing}: {given} needs it (the plan at equal quality reads a target loss on the scaling "
                          "study's frontiers; docs/planning.md)")
    if not (math.isfinite(target) and target > 0):
        raise ConfigError(f"--target-loss: must be a positive validation loss (got {target:g})")
    regular_file(path, "--frontiers", "the scaling study's results/tables/frontiers.parquet")
    from .findings.scaling import multiplier_at

    try:
        frontiers = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - a file that is not a parquet table: one line
        raise ConfigError(f"--frontiers: {path} is not a parquet table ({type(exc).__name__})") from None
    if not {"kind", "rule", "compute", "loss"} <= set(frontiers.columns):
        raise ConfigError(f"--frontiers: {path} is not a frontiers table (columns kind, rule, compute, loss)")
    for column in ("compute", "loss"):
        values = frontiers[column]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            raise ConfigError(f"--frontiers: {path}: column {column} holds {values.dtype}, not numbers")
    front = frontiers[frontiers["kind"] == "frontier"]
    if front.empty:
        raise ConfigError(f"--frontiers: {path} holds no frontier rows (kind frontier): run the scaling study "
                          "(make scaling) or name its frontiers.parquet")
    bad = front[~(pd.to_numeric(front["compute"], errors="coerce").gt(0) &
                  pd.to_numeric(front["loss"], errors="coerce").map(lambda v: math.isfinite(v) and v > 0))]
    if not bad.empty:
        row = bad.iloc[0]
        raise ConfigError(f"--frontiers: {path}: rule {row['rule']}'s frontier has compute {row['compute']} and loss "
                          f"{row['loss']}; each must be a positive finite number")
    if "bp" not in set(front["rule"]):
        raise ConfigError(f"--frontiers: {path} has no frontier of bp (the multipliers are against BP's compute)")
    studied = sorted(set(front["rule"]))
    multipliers = []
    for rule in studied:
        try:
            multipliers.append((rule, float(multiplier_at(frontiers, rule, target))))
        except ValueError as exc:
            raise ConfigError(f"--target-loss: {exc}") from None
    return {"compute_multipliers": tuple(multipliers),
            "quality_source": f"to reach validation loss {target:g} on the study's frontiers ({path})"}


# ---------------------------------------------------------------------------
# The table for people


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
               f"{gpu.memory_bytes / 1e9:g} GB, {gpu.power_w:g} W); {_degrees(first)} parallel; sharding {_sharding(first)}; {first['precision']}; activation "
               f"checkpointing {first['checkpointing']}; optimizer {first['optimizer']}" + _experts(first))
    out.append(f"Efficiency: {first['source_efficiency']}")
    if table["compute_multiplier"].notna().any() and table["source_quality"].iloc[0].startswith("to reach"):
        out.append(tokens_per_rule(table))
    else:
        out.append(f"Tokens per rule: {first['source_quality']}")
    out.append("")
    money = table["cost"].notna().any()
    header = ["rule", "cost model", "FLOPs", "x BP", "recompute", "step", "wall-clock", "GPU-hours", "MFU", "HFU",
              "MWh", "tCO2e", *(["cost"] if money else [])]
    rows = []
    refused = untrained(cfg, table["rule"])
    for _, r in table.iterrows():
        rows.append([marked(r["rule"], refused), r["cost_model"], "never" if math.isnan(r["model_flops"]) else f"{r['model_flops']:.3g}",
                     "" if math.isnan(r["flops_vs_bp"]) else f"{r['flops_vs_bp']:.2f}",
                     "-" if math.isnan(r["recompute_flops"]) else f"{r['recompute_flops']:.3g}" if r["recompute_flops"]
                     else "0", _duration(r["step_time_s"]),
                     _duration(r["wall_clock_s"]), _si(r["gpu_hours"]), f"{r['mfu']:.3f}", f"{r['hfu']:.3f}",
                     _si(r["energy_kwh"] / 1e3, 4), _si(r["co2e_t"], 4), *([_si(r["cost"])] if money else [])])
    out.append("What the run costs, per rule and cost model (FLOPs: the model's; recompute: checkpointing's extra forward; "
               "MWh: GPU energy x PUE)")
    out.append(grid(header, rows))
    out.extend(untrained_note(refused))
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
    for key, label in (("source_precision", "precision"), ("source_peak", "peak FLOP/s"),
                       ("source_memory_capacity", "memory"), ("source_power", "power"), ("source_pue", "PUE"),
                       ("source_carbon", "carbon intensity"), ("source_price", "price"),
                       ("source_efficiency", "step time"), ("source_framework", "framework"),
                       ("source_network", "network")):
        out.append(f"- {label}: {first[key]}")
    out.append("- memory model: docs/planning.md (activations: analytic/memory.py's per-rule accounting; "
               "sequence parallelism with tp; 1F1B with pp)")
    if first["source_efficiency"].startswith("predicted") and generic_numbers(gpu):
        out.append(f"- device model: {_generic_note(gpu)}")
    return "\n".join(out) + "\n"


def _generic_note(gpu) -> str:
    return (f"{gpu.name} has no published {', '.join(generic_numbers(gpu))} in the catalogue: generic defaults (an "
            "A100-like part, analytic/steptime/device.py) priced in their place")


SCREEN_WIDTH = 100  # the compact view (the default: one cost model) fits 100 columns x 40 lines


def _degrees(row) -> str:
    """``data x tensor x pipeline = 4 x 8 x 2``, with context parallelism where the plan has it."""
    if row.get("cp", 1) > 1:
        return (f"data x context x tensor x pipeline = {row['dp']} x {row['cp']} x {row['tp']} x {row['pp']} (each "
                f"sequence split over {row['cp']} GPUs)")
    return f"data x tensor x pipeline = {row['dp']} x {row['tp']} x {row['pp']}"


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
    batch = "given" if first["source_batch"] == "given" else "default: about 4M tokens"
    out = [wrapped(describe(cfg).replace(f", batch {cfg.batch} (", " ("), SCREEN_WIDTH), ""]
    out.append(wrapped(f"Run: {first['tokens']:.3g} tokens ({first['source_tokens'].split(' (')[0]}) in "
                       f"{first['optimizer_steps']:,.0f} steps of {first['global_batch']} sequences of "
                       f"{first['tokens_per_sequence']} tokens (global batch {batch})", SCREEN_WIDTH))
    out.append(wrapped(f"On {first['gpus']} x {gpu.name} ({gpu.memory_bytes / 1e9:g} GB): {_degrees(first)}, "
                       f"{_sharding(first)}, {first['precision']}, "
                       f"checkpointing {first['checkpointing']}, {first['optimizer']}" + _experts(first), SCREEN_WIDTH))
    if table["compute_multiplier"].notna().any() and table["source_quality"].iloc[0].startswith("to reach"):
        out.append(wrapped(tokens_per_rule(table), SCREEN_WIDTH))
    else:  # the cheapest per step is not the cheapest per quality: say which this is
        out.append("Tokens: equal for every rule; no learning-quality data (--target-loss with --frontiers)")
    out.append("")
    money = table["cost"].notna().any()
    header = ["rule", "", "FLOPs", "x BP", "step", "time", "GPU-h", "MFU", "MWh", "tCO2e", *(["cost"] if money else []),
              "GiB/GPU", "fits", "micro"]
    refused = untrained(cfg, table["rule"])
    rows = [[marked(r["rule"], refused), "", "never" if math.isnan(r["model_flops"]) else f"{r['model_flops']:.3g}".replace("e+", "e"),
             "" if math.isnan(r["flops_vs_bp"]) else f"{r['flops_vs_bp']:.2f}", _duration(r["step_time_s"]),
             _duration(r["wall_clock_s"]), _si(r["gpu_hours"]), f"{r['mfu']:.3f}", _short(r["energy_kwh"] / 1e3),
             _short(r["co2e_t"]), *([_si(r["cost"])] if money else []), f"{r['mem_total'] / 2**30:.1f}",
             "yes" if r["fits"] else "NO", r["micro_batch"]] for _, r in table.iterrows()]
    out.append(f"The run under the {first['cost_model']} cost model (time: wall-clock; GiB/GPU: the most loaded GPU)")
    out.append(grid(header, rows))
    out += [wrapped(line, SCREEN_WIDTH) for line in untrained_note(refused)]
    if verdict:  # what does not fit, then what would, each on its own lines
        out += ["", *(wrapped(part.strip(), SCREEN_WIDTH) for part in verdict.replace(". The smallest", ".\nThe smallest")
                      .replace(". No layout", ".\nNo layout").splitlines())]
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
    notes = [f"precision: {precision}",
             f"step time: {first['source_efficiency'].split(' (')[0]}{measured} (docs/planning.md; --mfu, "
             "--tokens-per-s, --calibration)",
             f"energy: {power_label(gpu)} {gpu.power_w:g} W x {first['source_power'].split(' (')[0].removeprefix('TDP x ')}, PUE "
             f"{first['source_pue'].split(' (')[0].removeprefix('default ')}, {first['source_carbon'].split(' (')[0].removeprefix('default ')} "
             f"CO2e{'' if money else '; money: --price'}",
             f"memory: ZeRO's bytes per parameter, activations of analytic/memory.py{gathered}",
             f"framework: {first['source_framework'].split(' (')[0]} (--framework){fallback}; network: "
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


@dataclasses.dataclass
class PlanOutcome:
    """What ``plan`` computed, before printing: the plan's rows, and with a search its layouts."""

    table: pd.DataFrame
    cfg: object
    gpu: object
    spec: PlanSpec | None = None  # the given layout's spec (None under a search)
    verdict: str | None = None  # what does not fit and the smallest change that does (the given layout)
    search: object = None  # plan_search.SearchPlan under --layout search, auto fields or several --gpus


def plan_outcome(args: argparse.Namespace) -> PlanOutcome:
    """``trainingcost plan``'s computation (the command line prints it; trainingcost.plan() returns it)."""
    from .config.hardware import device

    if args.batch is not None:
        raise ConfigError("--batch: plan takes --global-batch (sequences per optimizer step) and --micro-batch")
    cfg = model_entry(args)
    if args.gpu is None and args.cluster is None:
        raise ConfigError("--gpu: required (a device of the hardware catalogue: trainingcost hardware), or give --cluster")
    gpu = device(args.gpu if args.gpu is not None else cluster(args.cluster).gpu)
    if getattr(args, "power_limit", None) is not None:
        if args.device_model is not None:
            raise ConfigError("--power-limit: a device measurement (--device-model) ran under its own power limit; give "
                              "one or the other")
        from .analytic.steptime.device import power_limited

        gpu = power_limited(gpu, args.power_limit)
    rules = args.rule if isinstance(args.rule, list) else rule_list(args.rule)
    models = list(cost_model_names()) if args.cost_model == "all" else [args.cost_model]
    if free_fields(args) or len(args.gpus) > 1:
        if any(n < 1 for n in args.gpus):
            raise ConfigError(f"--gpus: must be a positive integer (got {min(args.gpus)})")
        if args.device_model is not None:
            gpu = measured_device(args, gpu, spec_from_args(fixed_args(args, args.gpus[0]), cfg, gpu))
        if args.figure and len(args.gpus) == 1:
            raise ConfigError("--figure: the strong-scaling figure needs several --gpus (e.g. --gpus 64-1024x2)")
        result = search_plan(args, cfg, gpu, rules, models, lambda a: spec_from_args(a, cfg, gpu))
        return PlanOutcome(result.table, cfg, gpu, search=result)
    if args.figure:
        raise ConfigError("--figure: the strong-scaling figure needs several --gpus (e.g. --gpus 64-1024x2)")
    args = fixed_args(args, args.gpus[0])
    spec = spec_from_args(args, cfg, gpu)
    if args.device_model is not None:
        gpu = measured_device(args, gpu, spec)
        spec = dataclasses.replace(spec, efficiency=Efficiency(
            "predicted", 1.0, f"{PREDICTED_SOURCE}; GEMM ceiling, bandwidth, attention and launch "
                              f"{gpu.steptime_sources['gemm_ceiling']}"))
    if getattr(args, "power_limit", None) is not None and spec.efficiency.kind != "predicted":
        raise ConfigError("--power-limit: slows the predicted step (the step-time model); a given --mfu, --hfu, "
                          "--tokens-per-s, --calibration or --measured-run already holds its own power (give one or "
                          "the other)")
    table = plan_table(cfg, spec, gpu, rules, models)
    return PlanOutcome(table, cfg, gpu, spec, fit_verdict(table, cfg, spec, gpu))


def cmd_plan(args: argparse.Namespace) -> int:
    from . import plan_search

    out = plan_outcome(args)
    table, cfg, gpu, verdict = out.table, out.cfg, out.gpu, out.verdict
    if out.search is not None and args.figure:
        plan_search.figure(out.search, args.figure)
    if args.format == "json":
        records = table.astype(object).where(table.notna(), None).to_dict(orient="records")  # NaN -> null
        print(json.dumps(records, indent=1))
    elif args.format == "csv":
        table.to_csv(sys.stdout, index=False)
    elif out.search is not None:
        sys.stdout.write(plan_search.render(out.search, cfg, describe_config, gpu, args.cost_model == "all",
                                            args.explain, SCREEN_WIDTH))
    elif args.cost_model != "all":
        sys.stdout.write(render_compact(table, cfg, describe_config, gpu, verdict))
    else:
        sys.stdout.write(render(table, cfg, describe_config, gpu))
    if out.search is not None:
        return 1 if (args.require_fit and not table["fits"].astype(bool).all()) else 0
    if verdict:
        sys.stdout.flush()
        if args.format != "table" or args.cost_model == "all":
            print(verdict, file=sys.stderr if args.format != "table" else sys.stdout)
        return 1 if args.require_fit else 0
    return 0


def measured_device(args: argparse.Namespace, gpu, spec):
    """--device-model: the plan's device with the step-time numbers measured on it (analytic/steptime/device.py)."""
    from .analytic.plan_facts import PRECISIONS
    from .analytic.steptime.device import with_measurement

    if spec.efficiency.kind != "predicted":
        raise ConfigError("--device-model: feeds the predicted step time; leave out --mfu, --hfu, --tokens-per-s, "
                          "--calibration and --measured-run")
    from .config.errors import read_json

    path = Path(args.device_model)
    data = read_json(path, "--device-model", "a device measurement JSON (benchmarks/gpu)")
    return with_measurement(gpu, data, PRECISIONS[spec.precision].compute, str(path))


def fit_verdict(table: pd.DataFrame, cfg, spec, gpu) -> str | None:
    """None where every rule fits; else which rules do not, at micro-batch 1, and the smallest change of layout
    that makes them fit (analytic/plan.py, smallest_fit), as flags."""
    from .analytic.plan import smallest_fit

    per_rule = table.drop_duplicates("rule")
    over = per_rule[~per_rule["fits"].astype(bool)]
    if over.empty:
        return None
    names = ", ".join(r.upper() for r in over["rule"])
    worst = over.loc[over["mem_total"].idxmax()]
    text = (f"Does not fit: {names} need{'s' if len(over) == 1 else ''} up to {worst['mem_total'] / 2**30:.1f} GiB per "
            f"GPU at micro-batch 1 on {gpu.name} ({gpu.memory_bytes / 2**30:.1f} GiB); the costs above assume it ran. ")
    found = smallest_fit(cfg, spec, gpu, list(over["rule"]))
    if found is None:
        can = dict(spec.can)
        splits = not can or can["tensor"] or can["pipeline"] or set(can["shardings"]) - {"none"}
        remedies = (["more GPUs"] if splits else []) + ["a larger --gpu"] + (["another --framework"] if can else [])
        runs = f" that {spec.framework} runs" if can else ""
        return text + (f"No layout{runs} of --tp, --pp, --sharding and --checkpointing on {spec.gpus} "
                       f"GPU{'s' if spec.gpus != 1 else ''} fits: {', '.join(remedies[:-1])} or {remedies[-1]}.")
    change, _ = found
    flags = " ".join(f"--{k} {v}" for k, v in change.items())
    return text + f"The smallest change that fits: {flags}."
