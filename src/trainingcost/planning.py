"""``trainingcost plan``'s computation: from its inputs to the plan's rows (the command line, plan_command.py, prints
them; the Python API, api.py, returns them).

The formulas are :mod:`trainingcost.analytic.plan` (no torch); this module reads the inputs (flags.py declares them)
into a :class:`~trainingcost.analytic.plan.PlanSpec` (the workflow's plan step, which reads the config's ``plan``
section, is :mod:`trainingcost.pipeline`), prices a calibration through the predictor when one is given
(:mod:`trainingcost.findings.plan_rate`), and searches layouts (:mod:`trainingcost.plan_search`). Nothing here imports
torch or prints. docs/planning.md documents every formula and source.
"""


from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .analytic import cost_model_names, rule_names
from .analytic.finetune import FineTune, check_finetune, from_flags
from .analytic.plan import PRECISIONS, PREDICTED_SOURCE, Efficiency, PlanSpec, plan_table, tokens_per_sequence
from .args import model_entry, rule_list
from .plan_search import fixed_args, free_fields
from .plan_search import run as search_plan
from .config import ConfigError
from .config.errors import regular_file
from .config.frameworks import cluster, framework, recompute_tail_of, resolve_framework

CHINCHILLA_TOKENS_PER_PARAMETER = 20  # Hoffmann et al. 2022: compute-optimal D ~ 20 N
DEFAULT_MFU = 0.40
DEFAULT_MFU_SOURCE = (f"default MFU {DEFAULT_MFU:.2f} (assumed; large runs report 0.21-0.46: Chowdhery et al. 2022, "
                      "Table 3)")


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
                          f"and this plan runs without torch.compile ({how}); give repeated or early-stop, or turn on "
                          f"{names.get('compile', '--compile').replace('--no-compile', '--compile')}")
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
    if fw.zero_reduce == "partition_reduce":
        fw_source += "; under ZeRO-1/2 each gradient bucket is reduced to its partitions' owners, one reduce per " \
                     "bucket and partition (DeepSpeed's average_tensor)"
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
                recompute_tail=tail, split_backward=fw.split_backward,
                selective_dp_overlap=fw.selective_dp_overlap, zero_reduce=fw.zero_reduce)


def spec_from_args(args, cfg, gpu) -> PlanSpec:
    from .analytic.plan import model_facts

    precision = args.precision or best_precision(gpu)

    parameters = model_facts(cfg, ["bp"], args.optimizer).parameters if args.chinchilla else 0
    tokens, tokens_source = token_budget(args.tokens, args.epochs, args.dataset_tokens, args.chinchilla, parameters, "")
    global_batch = args.global_batch
    if args.global_batch_tokens is not None:
        if not args.global_batch_tokens > 0:
            raise ConfigError(f"global_batch_tokens: must be positive (got {args.global_batch_tokens:g})")
        if args.global_batch_tokens < tokens_per_sequence(cfg):
            raise ConfigError(f"global_batch_tokens: {args.global_batch_tokens:g} tokens are less than one sequence of "
                              f"{tokens_per_sequence(cfg)} tokens; give at least that many")
        global_batch = max(1, round(args.global_batch_tokens / tokens_per_sequence(cfg)))
        tp, pp = (v if isinstance(v, int) else 1 for v in (args.tp, args.pp))
        dp = args.gpus // (tp * pp * args.cp) if args.gpus % (tp * pp * args.cp) == 0 else 0
        if dp and global_batch % dp:
            n = tokens_per_sequence(cfg)
            raise ConfigError(f"global_batch_tokens: {args.global_batch_tokens:g} tokens make {global_batch} sequence"
                              f"{'s' if global_batch != 1 else ''} of {n} tokens, which do not divide over the data-parallel degree {dp}; give a multiple "
                              f"of {dp * n:,} tokens")
    n = tokens_per_sequence(cfg)
    for name, given, per_step in (("global_batch_tokens", args.global_batch_tokens, (global_batch or 0) * n),
                                  ("global_batch", args.global_batch, (args.global_batch or 0) * n)):
        if given is not None and math.isfinite(tokens) and per_step > tokens:  # issue 66, D15: no run below one step
            raise ConfigError(f"{name}: {given:g} makes steps of {per_step:.4g} tokens, more than the run's {tokens:.4g}; "
                              "give a smaller global batch or more tokens")
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
    if args.dp_overlap is not None:  # a given --dp-overlap holds under every recompute
        system["selective_dp_overlap"] = None
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
        precision=precision, checkpointing=args.checkpointing, checkpoint_every=checkpoint_every(args),
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
        schedule=args.schedule or "", offload=args.offload, finetune=finetune_of(args),
        ep=args.ep, etp=args.etp, cp=args.cp, replicate=args.replicate, dp_overlap=fw.dp_overlap if args.dp_overlap is None else args.dp_overlap,
        **quality_of(args),
    )


def finetune_of(args) -> FineTune:
    """The FineTune of --finetune, --lora-rank and --lora-targets."""
    return from_flags(getattr(args, "finetune", "full"), getattr(args, "lora_rank", None),
                      getattr(args, "lora_targets", None))


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
    from .findings.scaling import multiplier_at

    if isinstance(path, pd.DataFrame):  # the Python API: the table itself
        frontiers, path = path, "the frontiers given"
    else:
        regular_file(path, "--frontiers", "the scaling study's results/tables/frontiers.parquet")
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


@dataclasses.dataclass
class PlanOutcome:
    """What ``plan`` computed, before printing: the plan's rows, and with a search its layouts."""

    table: pd.DataFrame
    cfg: object
    gpu: object
    spec: PlanSpec | None = None  # the given layout's spec (None under a search)
    verdict: str | None = None  # what does not fit and the smallest change that does (the given layout)
    search: object = None  # plan_search.SearchPlan under --layout search, auto fields or several --gpus
    notes: list = dataclasses.field(default_factory=list)  # assumptions about the model (a config.json's length)


def with_currency(table: pd.DataFrame, args) -> pd.DataFrame:
    """The plan's rows with the currency of their ``cost`` (issue 63: money carries its currency)."""
    return table.assign(currency=getattr(args, "currency", None) or "USD")


def plan_outcome(args: argparse.Namespace) -> PlanOutcome:
    """``trainingcost plan``'s computation (the command line prints it; trainingcost.plan() returns it)."""
    from .config.hardware import device

    if args.batch is not None:
        raise ConfigError("--batch: plan takes --global-batch (sequences per optimizer step) and --micro-batch")
    cfg = model_entry(args)
    from .config.hf import length_note, table_note

    notes = [note for note in [length_note(getattr(args, "hf_config", None), args.seq_len),
                               table_note(args.preset, getattr(args, "hf_config", None), cfg, args.seq_len)] if note]
    if args.gpu is None and args.cluster is None:
        raise ConfigError("--gpu: required (a device of the hardware catalogue: trainingcost hardware), or give --cluster")
    table = None
    if getattr(args, "hardware", None) is not None:  # one's own devices (a file, or the API's mapping)
        from .config.hardware import user_devices

        table = user_devices(args.hardware)
    if isinstance(args.gpu, dict):  # the API: one device, in the catalogue's format
        from .config.hardware import user_devices

        spec = dict(args.gpu)
        name = str(spec.pop("name", "custom"))
        table = user_devices({name: spec}, "gpu")
        args.gpu = name
    gpu = device(args.gpu if args.gpu is not None else cluster(args.cluster).gpu, table)
    if args.framework is not None:
        notes += framework_notes(framework(args.framework), args)
    per_node = args.gpus_per_node or (cluster(args.cluster).gpus_per_node if args.cluster else
                                      int(gpu.steptime.get("gpus_per_node", 8)))
    partial = [n for n in args.gpus if n > per_node and n % per_node]
    if partial:
        notes.append(f"--gpus {', '.join(map(str, partial))}: not whole nodes of {per_node} GPUs "
                     f"({partial[0] / per_node:.3g} nodes); the network is priced as if every node were full "
                     "(--gpus-per-node)")
    if args.gpu is not None and args.cluster is not None and cluster(args.cluster).gpu != gpu.name:
        notes.append(f"--gpu {gpu.name} on --cluster {args.cluster}, whose nodes hold {cluster(args.cluster).gpu}: "
                     f"the cluster's nodes and network priced around the {gpu.name}s given")
    if args.figure is not None and not args.figure.strip():
        raise ConfigError("--figure: a path to write (.png, .pdf or .svg); got an empty one")
    if getattr(args, "power_limit", None) is not None:
        if args.device_model is not None:
            raise ConfigError("--power-limit: a device measurement (--device-model) ran under its own power limit; give "
                              "one or the other")
        from .analytic.steptime.device import power_limited

        gpu = power_limited(gpu, args.power_limit)
    rules = args.rule if isinstance(args.rule, list) else rule_list(args.rule)
    if getattr(args, "mirror_steps", 1) != 1 and "wm" not in rules:
        raise ConfigError(f"--mirror-steps: weight mirror's (wm) steps per training step; --rule {','.join(rules)} "
                          "has no wm")
    models = list(cost_model_names()) if args.cost_model == "all" else [args.cost_model]
    finetune = finetune_of(args)
    if finetune.adapters:  # adapters train under BP, priced under executed: "all" means all that can
        rules = ["bp"] if set(rules) == set(rule_names()) else rules
        models = ["executed"] if args.cost_model == "all" else models
        check_finetune(finetune, cfg, rules, models)
    if args.schedule not in (None, "1f1b", "auto") and args.pp == 1 and "pp" not in free_fields(args):  # needs a pipeline
        raise ConfigError(f"--schedule: {args.schedule} needs pipeline stages (--pp 2 or more, or --pp auto; got --pp 1)")
    if free_fields(args) or len(args.gpus) > 1:
        if any(n < 1 for n in args.gpus):
            raise ConfigError(f"--gpus: must be a positive integer (got {min(args.gpus)})")
        if args.device_model is not None:
            gpu = measured_device(args, gpu, spec_from_args(fixed_args(args, args.gpus[0]), cfg, gpu))
        if args.figure and len(args.gpus) == 1:
            raise ConfigError("--figure: the strong-scaling figure needs several --gpus (e.g. --gpus 64-1024x2)")
        result = search_plan(args, cfg, gpu, rules, models, lambda a: spec_from_args(a, cfg, gpu))
        result.table = with_currency(result.table, args)
        return PlanOutcome(result.table, cfg, gpu, search=result, notes=notes + utilisation_notes(result.table))
    if args.figure:
        raise ConfigError("--figure: the strong-scaling figure needs several --gpus (e.g. --gpus 64-1024x2)")
    if args.objective != "time":
        raise ConfigError(f"--objective: {args.objective} picks the best of several --gpus counts (e.g. --gpus "
                          "64-1024x2); one count at a given layout leaves nothing to pick")
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
    table = with_currency(plan_table(cfg, spec, gpu, rules, models), args)
    return PlanOutcome(table, cfg, gpu, spec, fit_verdict(table, cfg, spec, gpu), notes=notes + utilisation_notes(table))


def framework_notes(fw, args) -> list[str]:
    """A layout given with --framework that the framework does not run (config/frameworks.yaml, ``can``, each cited):
    priced as given (a given layout is the user's; docs/planning.md), and said in a note naming the field and what
    the framework runs."""
    can = dict(fw.can)
    if not can:
        return []
    out = []
    shardings = set(can["shardings"]) | ({"fsdp"} if "zero3" in can["shardings"] else set())
    if args.sharding not in (None, "auto") and args.sharding not in shardings:
        out.append(f"--sharding {args.sharding}: framework {fw.name} does not run it (it runs "
                   f"{', '.join(can['shardings'])}); priced as given")
    for value, ability, flag in ((args.tp, "tensor", "--tp"), (args.pp, "pipeline", "--pp"),
                                 (args.interleave, "interleave", "--interleave")):
        if isinstance(value, int) and value > 1 and not can.get(ability, True):
            what = "interleaved pipeline schedule" if ability == "interleave" else f"{ability} parallelism"
            out.append(f"{flag} {value}: framework {fw.name} has no {what}; priced as given")
    if args.sequence_parallel in (True, "on") and not can.get("sequence_parallel", True):
        out.append(f"--sequence-parallel: framework {fw.name} has no sequence parallelism; priced as given")
    return out


def checkpoint_every(args) -> int:
    """--checkpoint-every: every k-th block checkpointed under selective checkpointing (default 2); refused with
    another checkpointing, where it would be ignored."""
    if args.checkpoint_every is None:
        return 2
    if args.checkpointing not in ("selective", "auto"):
        raise ConfigError(f"--checkpoint-every: applies to --checkpointing selective (or auto), which checkpoints "
                          f"every k-th block; got --checkpointing {args.checkpointing}")
    return args.checkpoint_every


def utilisation_notes(table) -> list[str]:
    """A note where an MFU or HFU comes out above 1: a cost model that counts more FLOPs than the step's kernels run
    (the whole attention matrix of a causal decoder, whose fused kernels skip the masked half; analytic/steptime/kernels.py),
    not a GPU beyond its peak."""
    over = table[(table["mfu"] > 1) | (table["hfu"] > 1)]
    if over.empty:
        return []
    worst = over.loc[over[["mfu", "hfu"]].max(axis=1).idxmax()]
    causal = table[(table["rule"] == worst["rule"]) & (table["cost_model"] == "causal")]
    beside = f"; under the causal cost model its MFU is {causal['mfu'].iloc[0]:.3f}" if not causal.empty else ""
    others = [n for n in dict.fromkeys(f"{r} {m}" for r, m in zip(over["rule"], over["cost_model"]))
              if n != f"{worst['rule']} {worst['cost_model']}"]
    also = f"; also {', '.join(others)}" if others else ""
    return [f"MFU or HFU above 1 ({worst['rule']} under {worst['cost_model']}: MFU {worst['mfu']:.3f}, HFU "
            f"{worst['hfu']:.3f}{also}): that cost model counts FLOPs the step's kernels do not run, such as the masked half "
            f"of a causal decoder's attention, which fused attention skips{beside}; no GPU runs above its peak "
            "(docs/planning.md)"]


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
            f"GPU at micro-batch {int(worst['micro_batch'])} on {gpu.name} ({gpu.memory_bytes / 2**30:.1f} GiB); the "
            "costs above assume it ran. ")
    if spec.micro_batch is not None and spec.micro_batch > 1:  # the micro-batch given, before the layout
        from .analytic.plan import fits_at_micro_batch_1

        if all(fits_at_micro_batch_1(cfg, spec, gpu, list(over["rule"])).values()):
            return text + "The smallest change that fits: --micro-batch 1."
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
