"""Whole-run planning: what training one model on D tokens costs on named hardware, per rule and cost model.

No torch. Inputs: a :class:`~trainingcost.config.ModelConfig`, a :class:`PlanSpec` (tokens, batch, GPUs,
parallelism, precision, checkpointing, efficiency, energy and money assumptions, each with its source) and a
:class:`~trainingcost.config.hardware.Device`. Output: one row per (rule, cost model) with the run's FLOPs,
step time, wall-clock, GPU-hours, energy, CO2e, money and the per-GPU memory, whether it fits and the largest
micro-batch that fits. Every formula, assumption and source is in docs/planning.md; the short version:

- **FLOPs** per sequence per rule and cost model: the engine's phases (:mod:`.engine`), summed. Activation
  checkpointing recomputes the forward of the checkpointed blocks (rules with a backward only): hardware
  FLOPs = model FLOPs + recompute (HFU beside MFU, Chowdhery et al. 2022, appendix B).
- **Time**: an end-to-end MFU or HFU you give, or a measured run's tokens/s per GPU (the achieved FLOP/s of the
  measured rule carried to the others), or a calibrated rate (the step-time predictor's price of the model's
  matrix products, :mod:`trainingcost.findings.predictor`, computed above this layer and passed in), to which
  the pipeline bubble (p - 1) / m is added (Narayanan et al. 2021, section 2.2).
- **Energy**: GPUs x TDP x utilisation x wall-clock, or measured joules per token, x PUE; CO2e = energy x grid
  carbon intensity; money = GPU-hours x price.
- **Memory per GPU** (the most loaded GPU): weights, feedback matrices, gradients, fp32 master weights and
  optimizer state in the precision's bytes (Rajbhandari et al. 2020, section 3.1: 2 + 2 + 12 bytes per
  parameter with mixed-precision Adam), divided by the tensor and pipeline degrees and by the ZeRO stage's
  sharding over the data-parallel degree (ZeRO-3 / FSDP adds the gathered largest layer); activations from
  the memory model (:mod:`.memory`) per micro-batch, in the activation dtype, divided by the tensor degree
  (sequence parallelism, Korthikanti et al. 2022) and not by the pipeline degree (1F1B keeps p micro-batches
  of L/p layers in flight on the first stage, Korthikanti et al. 2022, section 4.2.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from .catalogue import rule, rule_names, untrained
from .engine import build_for, evaluate, phase_costs
from .memory import OPTIMIZER_SLOTS
from .registry import cost_model
from .finetune import SOURCE as FINETUNE_SOURCE, describe as describe_finetune
from .finetune import FULL, FineTune, adapter_forward_per_block, check_finetune, finetune_flops, resolved
from .steptime import offload as host_offload, schedules
from ..config.errors import ConfigError


from .plan_facts import PRECISIONS, SHARDINGS, ZERO_STAGE, ModelFacts, Precision, _configs, check_precision, fullest_stage, model_facts, model_share, facts_split, stage_split, stages  # noqa: F401
# The memory per GPU lives in plan_memory (imported here: the plan's callers read it from this module too)
from .plan_memory import (MEMORY_PARTS, UNFUSED_SCORE_BYTES, activations_per_sequence, checkpointed,  # noqa: F401
                          deepspeed_zero2_gpu_bytes, deepspeed_zero2_offload_gpu_bytes, deepspeed_zero3_gpu_bytes,
                          deepspeed_zero3_offload_gpu_bytes, divisors, expert_tp, gathered_unit_bytes, host_bytes,
                          largest_divisor_at_most, largest_micro_batch, lora_activations, memory_per_gpu, replicas,
                          retained, shard_ranks, unfused_scores)

CHECKPOINTING = ("none", "selective", "full")
# What ZeRO-3 (and FSDP's FULL_SHARD) gathers whole at a time, and the framework that does so (docs/planning.md):
ZERO3_GATHER = {
    "module": "DeepSpeed ZeRO-3: each torch module's own parameters, gathered by its hooks (the largest: one Linear or "
              "the embedding), its gradient partition in fp32 (estimate_zero3_model_states_mem_needs: 4 bytes x the "
              "largest module + 18 per parameter / N with Adam)",
    "sublayer": "FSDP wrapping attention and FFN modules: an auto-wrap policy that names them (one sublayer, the "
                "embedding or the head at a time)",
    "block": "FSDP wrapping each block: transformer_auto_wrap_policy, as Hugging Face Accelerate and torchtitan do (one "
             "block, or the ends outside the blocks: the root unit)",
}
EFFICIENCIES = ("mfu", "hfu", "tokens_per_s", "rate", "predicted")
PREDICTED_SOURCE = ("predicted: the step-time model (analytic/steptime; device, network and schedule models, every number "
                    "cited in config/hardware.yaml; docs/planning.md)")
DEFAULT_BATCH_TOKENS = 2**22  # Touvron et al. 2023 (Llama 2), Table 1: a 4M-token global batch
GiB = 2**30


@dataclass(frozen=True)
class Efficiency:
    """How fast the run goes. ``mfu``/``hfu``: a share of the device peak, end to end (model or hardware FLOPs);
    ``tokens_per_s``: a measured run's tokens per second per GPU under ``rule``; ``rate``: achieved FLOP/s per
    GPU on the executed work (the calibrated predictor's price of the model's products), pipeline bubble added."""

    kind: str
    value: float
    source: str
    rule: str = "bp"  # tokens_per_s: the rule the run was measured under
    rate_at: Callable[[int], float] | None = None  # rate: FLOP/s per GPU at a micro-batch (value: at micro-batch 1)


@dataclass(frozen=True)
class PlanSpec:
    tokens: float
    gpus: int
    efficiency: Efficiency
    tokens_source: str = "given"
    tp: int = 1
    pp: int = 1
    sharding: str = "zero3"
    precision: str = "bf16-mixed"
    checkpointing: str = "none"
    checkpoint_every: int = 2  # selective: every k-th block of a stack is checkpointed
    optimizer: str = "adam"
    global_batch: int | None = None  # sequences per optimizer step; None: about 4M tokens (DEFAULT_BATCH_TOKENS)
    micro_batch: int | None = None  # sequences per GPU per forward-backward; None: the largest that fits
    power_utilisation: float = 1.0
    power_source: str = "TDP x 1.0 (the published power, as Touvron et al. 2023, Table 2 count it)"
    joules_per_token: float | None = None  # measured, per GPU, under efficiency.rule's work; None: TDP
    joules_per_flop: float | None = None  # measured (a run's energy per step / its FLOPs per step); None: TDP
    pue: float = 1.1
    pue_source: str = "default 1.1 (Patterson et al. 2021, Table 4: the PUE of the GPT-3 datacenter)"
    carbon_intensity: float = 0.429  # kg CO2e per kWh
    carbon_source: str = "default 0.429 kg/kWh (Patterson et al. 2021, Table 4: the US average grid, used for GPT-3)"
    price: float | None = None  # per GPU-hour
    price_source: str = "not given (--price)"
    mirror_steps: int = 1
    goodput: float = 1.0  # share of the wall-clock spent in training steps (restarts, failures, evaluation: the rest)
    goodput_source: str = "1.0: step time only (no restarts, failures, evaluation or checkpointing; --goodput)"
    notes: tuple = field(default_factory=tuple)
    precision_source: str = ""  # how the precision was chosen, where not given (the plan's output says it)
    zero3_gather: str = "sublayer"  # what ZeRO-3 / FSDP gathers whole at a time (ZERO3_GATHER; docs/planning.md)
    interleave: int = 1  # virtual pipeline stages per device (predicted mode)
    sequence_parallel: bool = False
    gpus_per_node: int | None = None  # None: the device's usual system (config/hardware.yaml)
    nic_gbps: float | None = None
    dp_overlap: float = 1.0
    selective_dp_overlap: float | None = None  # dp_overlap under a per-operation recompute (config/frameworks.yaml)
    # The framework (config/frameworks.yaml): what it overlaps, what a ZeRO-3 gather moves, its attention kernel
    framework: str = "fsdp2"
    can: tuple = ()  # ((key, value), ...) of the framework's layout abilities (config/frameworks.yaml); () every layout
    fabric: tuple | None = None  # the cluster's fabric latencies; None: the device's usual system
    framework_source: str = "default: fsdp2 (config/frameworks.yaml)"
    network_source: str = "the device's usual system (config/hardware.yaml)"
    tp_overlap: float = 0.0
    tp_backward_overlap: float | None = None  # the backward's input-gradient collectives' share (None: tp_overlap)
    zero3_granularity: str = "block"
    dp_rails: bool = True
    gather_prefetch: bool = True  # the framework prefetches its parameter all-gathers (config/frameworks.yaml)
    grad_reduce: str = "compute"  # the dtype its gradient reductions run in (config/frameworks.yaml)
    zero1_sync: str = "overlapped"  # how it syncs ZeRO-1's gradients (config/frameworks.yaml)
    zero_reduce: str = "reduce_scatter"  # how its ZeRO-1/2 reduce the gradients (config/frameworks.yaml)
    fp8_weight_cache: bool = False  # fp8-mixed: it casts the weights once per step (config/frameworks.yaml)
    fp8_params: bool = False  # fp8-mixed: its weights are kept in fp8 (config/frameworks.yaml)
    elementwise: str = "fused"  # the blocks' norms, rotary and gated activations (config/frameworks.yaml, --compile)
    shard_copies: bool = False  # its sharded collectives copy through flat buffers (config/frameworks.yaml)
    fp8_gather: bool = False  # fp8-mixed: its parameter all-gathers carry fp8 linear weights (config/frameworks.yaml)
    fp8_tp_gather: bool = False  # fp8-mixed: its sequence-parallel all-gathers carry fp8 (config/frameworks.yaml)
    recompute_tail: str = "repeated"  # what its recompute leaves out (config/frameworks.yaml, --compile)
    attention: str = "flash"
    # The plan at equal quality: (rule, compute multiplier against BP) pairs, NaN where the rule never reaches the
    # target; a rule absent trains on ``tokens``. Each rule then gets the tokens that buy M x BP's compute at its
    # executed FLOPs per token (docs/planning.md, "The plan at equal quality").
    compute_multipliers: tuple = ()
    quality_source: str = "equal tokens per rule; no learning-quality data (give --target-loss with --frontiers)"
    ep: int = 1  # expert-parallel degree (a mixture of experts: experts / ep per GPU, carved out of dp)
    etp: int | None = None  # the experts' tensor-parallel degree (None: tp); below tp, MoE parallel folding
    cp: int = 1  # context-parallel degree: s / cp tokens of every sequence per GPU (Megatron-Core's CP)
    replicate: int = 1  # HSDP: the dp replicas in this many groups, ZeRO sharding inside each (--replicate)
    pipeline_split: str = "even"  # how the blocks are split over pipeline stages (the framework's; plan_facts.stages)
    schedule: str = ""  # the pipeline schedule (steptime/schedules.py); "": 1F1B, interleaved with interleave > 1
    offload: str = "none"  # the optimizer, or the parameters too, on the host (steptime/offload.py)
    split_backward: str = "freed"  # what a zero-bubble schedule keeps between B and W (config/frameworks.yaml)
    finetune: FineTune = FULL  # what trains: every parameter, or LoRA/QLoRA adapters on a frozen base (finetune.py)


# ---------------------------------------------------------------------------
# Checks: one line naming the field and the allowed values


MAX_MIRROR_STEPS = 1000  # weight-mirror steps per training step (WM): Akrout et al. 2019 use a handful


def check_run_length(spec: PlanSpec, cfg) -> None:
    """At least one sequence and one optimizer step of the global batch (issue 66, D15: no "0 steps", no run shorter
    than its one step); one line naming tokens otherwise."""
    G, _ = global_batch(spec, cfg)
    n = tokens_per_sequence(cfg)
    if spec.tokens / n < 1:
        raise ConfigError(f"tokens: {spec.tokens:g} tokens make less than one sequence of {n} tokens; a run trains "
                          "on at least one")
    if spec.tokens / n / G < 1:
        raise ConfigError(f"tokens: {spec.tokens:g} tokens are less than one optimizer step of {G} sequences of {n} "
                          f"tokens ({G * n:,}); give more tokens or a smaller global batch")


def check_spec(spec: PlanSpec, cfg, device) -> None:
    """Refuse an impossible plan before any arithmetic (ConfigError naming the field)."""
    def positive(name, value, integer=False):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0 \
                or (integer and int(value) != value):
            kind = "a positive integer" if integer else "a positive number"
            raise ConfigError(f"{name}: must be {kind} (got {value!r})")

    positive("tokens", spec.tokens)
    if not (isinstance(spec.goodput, (int, float)) and 0 < spec.goodput <= 1):
        raise ConfigError(f"goodput: a share of the wall-clock in (0, 1] (got {spec.goodput!r})")
    for name in ("gpus", "tp", "pp", "cp", "checkpoint_every"):
        positive(name, getattr(spec, name), integer=True)
    if spec.precision not in PRECISIONS:
        raise ConfigError(f"precision: {spec.precision!r} is not allowed (allowed: {', '.join(PRECISIONS)})")
    if spec.zero3_gather not in ZERO3_GATHER:
        raise ConfigError(f"zero3_gather: {spec.zero3_gather!r} is not allowed (allowed: {', '.join(ZERO3_GATHER)})")
    host_offload.check_offload(spec.offload, spec.sharding)
    if spec.finetune.adapters and spec.offload != "none":
        raise ConfigError(f"offload: --offload {spec.offload} with --finetune {spec.finetune.kind} is not priced (the "
                          "adapters' optimizer is small; allowed: none)")
    if spec.schedule not in ("", *schedules.SCHEDULES):
        raise ConfigError(f"--schedule: {spec.schedule!r} is not allowed (allowed: {', '.join(schedules.SCHEDULES)})")
    if spec.sharding not in SHARDINGS:
        raise ConfigError(f"sharding: {spec.sharding!r} is not allowed (allowed: {', '.join(SHARDINGS)})")
    if spec.checkpointing not in CHECKPOINTING:
        raise ConfigError(f"checkpointing: {spec.checkpointing!r} is not allowed (allowed: {', '.join(CHECKPOINTING)})")
    if spec.optimizer not in OPTIMIZER_SLOTS:
        raise ConfigError(f"optimizer: {spec.optimizer!r} is not allowed (allowed: {', '.join(OPTIMIZER_SLOTS)})")
    e = spec.efficiency
    if e.kind not in EFFICIENCIES:
        raise ConfigError(f"efficiency: {e.kind!r} is not allowed (allowed: {', '.join(EFFICIENCIES)})")
    if e.kind != "predicted":
        positive(e.kind, e.value)
    if e.kind in ("mfu", "hfu") and e.value > 1:
        raise ConfigError(f"{e.kind}: a share of the device peak, between 0 and 1 (got {e.value})")
    if spec.mirror_steps > MAX_MIRROR_STEPS:
        raise ConfigError(f"mirror_steps: at most {MAX_MIRROR_STEPS} weight-mirror steps per training step "
                          f"(got {spec.mirror_steps:g})")
    if not 0 < spec.power_utilisation <= 1:
        raise ConfigError(f"power_utilisation: a share of the TDP, between 0 and 1 (got {spec.power_utilisation})")
    for name in ("joules_per_token", "joules_per_flop"):
        if getattr(spec, name) is not None:
            positive(name, getattr(spec, name))
    if not (math.isfinite(spec.pue) and spec.pue >= 1):
        raise ConfigError(f"pue: power usage effectiveness is 1 or more (got {spec.pue})")
    if not (math.isfinite(spec.carbon_intensity) and spec.carbon_intensity >= 0):
        raise ConfigError(f"carbon_intensity: kg CO2e per kWh, 0 or more (got {spec.carbon_intensity})")
    if spec.price is not None and not (math.isfinite(spec.price) and spec.price >= 0):
        raise ConfigError(f"price: per GPU-hour, 0 or more (got {spec.price})")
    for name, value in spec.compute_multipliers:
        if not (math.isnan(value) or (math.isfinite(value) and value > 0)):
            raise ConfigError(f"compute_multipliers: {name}'s must be positive or NaN (never reaches; got {value})")
    check_precision(spec.precision, device)
    check_expert_parallel(spec, cfg)
    if spec.gpus % (spec.tp * spec.pp * spec.cp):
        cp = f" x context-parallel {spec.cp}" if spec.cp > 1 else ""
        raise ConfigError(f"gpus: {spec.gpus} GPUs do not divide into tensor-parallel {spec.tp} x pipeline-parallel "
                          f"{spec.pp}{cp} = {spec.tp * spec.pp * spec.cp} (the data-parallel degree must be a whole "
                          "number)")
    if spec.cp > 1:
        from .steptime.step import check_context_parallel

        check_context_parallel(cfg, spec.cp, device.attention_kernel(spec.attention), "cp")
    from .steptime.step import hsdp_problem

    problem = hsdp_problem(spec.replicate, replicas(spec), spec.cp, spec.sharding, spec.zero1_sync, spec.ep, spec.tp,
                           spec.etp)
    if problem:
        raise ConfigError(f"replicate: {problem}")
    widths = (("heads", cfg.heads), ("kv_heads", cfg.kv_heads), ("d_ff", cfg.d_ff),
              *((("dense_ff", cfg.dense_width),) if cfg.dense_blocks else ()))  # (a mixture's dense first blocks)
    for name, value in widths:
        if value % spec.tp:
            raise ConfigError(f"tp: tensor-parallel degree {spec.tp} does not divide {name} {value} (each GPU holds "
                              f"{name} / tp)")
    blocks = sum(cfg.depth(stack) for stack in cfg.stacks)
    deepest = max(cfg.depth(stack) for stack in cfg.stacks)
    if spec.checkpointing == "selective" and spec.checkpoint_every > deepest:
        raise ConfigError(f"checkpoint_every: every {spec.checkpoint_every}th block of stacks of at most {deepest} "
                          f"blocks checkpoints none (allowed: 1 to {deepest}; --checkpointing none for no recompute)")
    if spec.pp > blocks:
        raise ConfigError(f"pp: pipeline-parallel degree {spec.pp} exceeds the {blocks} blocks (each stage holds at "
                          "least one block)")
    dp = replicas(spec)
    if spec.global_batch is not None:
        positive("global_batch", spec.global_batch, integer=True)
        if spec.global_batch % dp:
            raise ConfigError(f"global_batch: {spec.global_batch} sequences do not divide over the data-parallel degree "
                              f"{dp} (gpus / (tp x pp{' x cp' if spec.cp > 1 else ''})); give a multiple of {dp}")
    if spec.micro_batch is not None:
        positive("micro_batch", spec.micro_batch, integer=True)
        per_replica = global_batch(spec, cfg)[0] // dp
        if per_replica % spec.micro_batch:
            raise ConfigError(f"micro_batch: {spec.micro_batch} does not divide the {per_replica} sequences each "
                              f"data-parallel replica takes per step (global batch / {dp})")


def check_expert_parallel(spec: PlanSpec, cfg) -> None:
    """--ep: each GPU of an expert-parallel group holds experts / ep of every mixture of experts; the groups are
    carved out of the data-parallel replicas (DeepSpeed-MoE; GShard), so ep divides the experts and dp."""
    if isinstance(spec.ep, bool) or not isinstance(spec.ep, int) or spec.ep < 1:
        raise ConfigError(f"ep: must be a positive integer (got {spec.ep!r})")
    if spec.etp is not None:
        check_etp(spec, cfg)
    if spec.ep == 1:
        return
    if not cfg.moe:
        raise ConfigError(f"ep: expert parallelism {spec.ep} needs a mixture of experts (the model has no experts)")
    if cfg.experts % spec.ep:
        raise ConfigError(f"ep: expert-parallel degree {spec.ep} does not divide the {cfg.experts} experts (each GPU "
                          "holds experts / ep)")
    if spec.gpus % spec.ep:
        raise ConfigError(f"ep: expert-parallel degree {spec.ep} does not divide the {spec.gpus} GPUs")
    dp = replicas(spec) if spec.gpus % (spec.tp * spec.pp * spec.cp) == 0 else 0
    if spec.etp is None or spec.etp == spec.tp:
        if dp and dp % spec.ep:
            raise ConfigError(f"ep: expert-parallel degree {spec.ep} does not divide the data-parallel degree {dp} "
                              f"(gpus / (tp x pp{' x cp' if spec.cp > 1 else ''})); the expert-parallel groups are made "
                              "of data-parallel replicas (--etp below tp folds them over the tensor-parallel GPUs too)")
        return
    check_expert_tensor_parallel(spec, cfg, dp)


def check_etp_value(etp, cfg) -> None:
    """--etp's value: a positive integer, for a mixture of experts."""
    if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1:
        raise ConfigError(f"etp: must be a positive integer (got {etp!r})")
    if not cfg.moe:
        raise ConfigError("etp: the experts' tensor-parallel degree needs a mixture of experts (the model has no "
                          "experts)")


def check_etp(spec: PlanSpec, cfg) -> None:
    """--etp, whatever ep: a positive integer, for a mixture of experts, dividing tp and d_ff; below tp (folding)
    with sequence parallelism, as Megatron-Core requires of a mixture of experts under tensor parallelism (each GPU
    then holds and dispatches its own b s / tp tokens)."""
    check_etp_value(spec.etp, cfg)
    if spec.tp % spec.etp:
        raise ConfigError(f"etp: the experts' tensor-parallel degree {spec.etp} does not divide tp {spec.tp}")
    if cfg.d_ff % spec.etp:
        raise ConfigError(f"etp: the experts' tensor-parallel degree {spec.etp} does not divide d_ff {cfg.d_ff}")
    if spec.etp != spec.tp and not spec.sequence_parallel:
        raise ConfigError(f"etp: the experts' tensor-parallel degree {spec.etp} below tp {spec.tp} needs "
                          "--sequence-parallel (Megatron-Core runs a mixture of experts under tensor parallelism "
                          "with sequence parallelism only)")


def check_expert_tensor_parallel(spec: PlanSpec, cfg, dp: int) -> None:
    """--etp below tp (Megatron-Core's MoE parallel folding, Liu et al. 2025): the experts get their own tensor
    parallelism, etp dividing tp, and their expert-parallel groups fold over the tp x cp x dp GPUs of a stage, so
    ep x etp divides them; each GPU dispatches its own tokens (sequence parallel over tp) to the experts."""
    stage = spec.tp * spec.cp * dp
    if dp and stage % (spec.ep * spec.etp):
        raise ConfigError(f"ep: ep x etp = {spec.ep * spec.etp} does not divide the {stage} GPUs of a pipeline stage "
                          "(tp x cp x dp), over which the experts fold")


def all_to_all_bytes(cfg, spec: PlanSpec, micro_batch: int) -> float:
    """Bytes one GPU sends in one all-to-all of a mixture of experts, per micro-batch: its tokens' k routed copies
    of width d (activation dtype), all but the 1 / ep that stay on it (token-balanced routing, docs/planning.md)."""
    if spec.ep == 1 or not cfg.moe:
        return 0.0
    tokens = micro_batch * tokens_per_sequence(cfg) / spec.cp
    if spec.etp is not None and spec.etp != spec.tp:  # MoE folding: each GPU dispatches its own tokens, gathered over etp
        tokens = tokens * spec.etp / spec.tp
    return tokens * cfg.experts_per_token * cfg.d_model * PRECISIONS[spec.precision].activations * (spec.ep - 1) / spec.ep


def all_to_alls_per_micro_batch(facts: ModelFacts, spec: PlanSpec, rule_name: str) -> int:
    """All-to-alls per micro-batch on the most loaded stage: two per mixture-of-experts layer and forward pass
    (dispatch, combine), two per backward through it, two per recomputed forward (checkpointing)."""
    split, depth = facts_split(facts, spec.pipeline_split), sum(facts.depth.values())
    layers = fullest_stage(sum((facts.moe_layers or {}).values()), spec.pp, split, depth)
    if not layers:
        return 0
    work = rule(rule_name).recipe
    passes = sum(int(t) if not isinstance(t, str) else 1 for name, t in work.get("forward", ())
                 if name in ("forward", "forward_modulated"))
    backward = bool(work.get("backward"))
    recomputed = fullest_stage(sum(checkpointed(facts, spec.checkpointing, spec.checkpoint_every).values()), spec.pp,
                               split, depth) \
        if backward else 0
    return 2 * max(1, passes) * layers + (2 * layers if backward else 0) + 2 * recomputed


def tokens_per_sequence(cfg) -> int:
    return cfg.seq_len + (cfg.tgt_len if cfg.encdec else 0)


def global_batch(spec: PlanSpec, cfg) -> tuple[int, str]:
    """Sequences per optimizer step, and where the number comes from."""
    if spec.global_batch is not None:
        return spec.global_batch, "given"
    dp = replicas(spec)
    n = tokens_per_sequence(cfg)
    target = max(1, round(DEFAULT_BATCH_TOKENS / n))
    sequences = spec.tokens // n if spec.tokens and math.isfinite(spec.tokens) else math.inf
    if sequences < target:  # a run shorter than one default step: one step of what the run has (issue 66, D15)
        batch = dp * max(1, int(sequences) // dp)
        return batch, (f"default: the run's {int(sequences):,} sequences in one step (a 4M-token batch is more "
                       f"than the run), a multiple of the data-parallel degree {dp}")
    per_replica = splittable(max(1, math.ceil(target / dp)))
    batch = dp * per_replica
    if dp > target:  # more data-parallel ranks than a 4M-token batch has sequences: one sequence each
        return batch, (f"default: one sequence per data-parallel rank, {batch * n:,} tokens (the data-parallel degree "
                       f"{dp} is more than a 4M-token batch's {target} sequences; Touvron et al. 2023, Table 1)")
    return batch, (f"default: about {DEFAULT_BATCH_TOKENS:,} tokens (Touvron et al. 2023, Table 1: a 4M-token batch), "
                   f"a multiple of the data-parallel degree {dp}" + (f", {per_replica} sequences per replica (a multiple "
                   f"of {per_replica & -per_replica}, so that micro-batches divide it)" if per_replica >= 16 else ""))


def splittable(count: int) -> int:
    """The smallest count of sequences per replica at or above ``count`` that is a multiple of 2^m, m = floor(log2
    count) - 3: at most 12.5% more, and a power of two of at least count / 16 divides it. A replica's micro-batch
    must divide its sequences; a prime count (31 of a 4M-token batch over 136 replicas) left micro-batch 1 whatever fits,
    and GPU-hours up to 17x those of a neighbouring GPU count."""
    step = 2 ** max(0, count.bit_length() - 1 - 3)
    return -(-count // step) * step


# ---------------------------------------------------------------------------
# What the model is made of: element counts per sequence and per rule


# ---------------------------------------------------------------------------
# FLOPs per sequence


def tail_flops_per_sequence(cfg) -> dict:
    """Per stack, the FLOPs per sequence of one block's last product, the FFN's down projection (2 x rows x d_ff x
    d_model, as torch's FlopCounterMode counts a product), which a recompute that stops early leaves out
    (analytic/steptime/layout_checks.py, tail_skipped)."""
    return {s: 2 * cfg.rows(s) * cfg.d_ff * cfg.d_model for s in cfg.stacks}


def flops_per_sequence(cfg, rules, cost_models, checkpointing: str = "none", every: int = 2,
                       mirror_steps: int = 1, facts: ModelFacts | None = None, tail: bool = False,
                       finetune: FineTune = FULL) -> pd.DataFrame:
    """One row per (rule, cost model) in scope: model FLOPs per sequence (the rule's phases summed) and the
    recompute FLOPs of checkpointing (the checkpointed blocks' forward; rules with a backward only). ``tail``: the
    recompute leaves out each checkpointed block's down projection (step.tail_skipped), the same FLOPs under
    every cost model (what the hardware does not run). ``finetune`` (adapters: BP under executed only): the forward
    and input gradients, the adapters' work, no frozen weight's gradient (analytic/finetune.py)."""
    configs = _configs(cfg)
    depth = {s: cfg.depth(s) for s in cfg.stacks}
    counts = checkpointed(facts, checkpointing, every) if facts else {s: 0 for s in depth}
    tails = tail_flops_per_sequence(cfg)
    left_out = sum(c * tails[s] for s, c in counts.items()) if tail else 0
    rows = []
    for name in cost_models:
        model = cost_model(name)
        templates = build_for(model, configs)
        if len(templates) == 0:
            continue  # out of the cost model's scope
        q = evaluate(name, configs, mirror_steps, templates)
        count = templates.count
        forward = q.flops["forward"]
        if model.granularity == "model":
            recompute = int((forward * count).sum()) * sum(counts.values()) // max(1, sum(depth.values()))
        else:
            # c blocks' forward: the stack's block forward summed over its blocks, times c / depth (a mixture's dense
            # first blocks and its mixture blocks averaged; every block where all are checkpointed)
            recompute = sum(c * int((forward * count)[templates.is_block & (templates.stack == s)].sum()) // depth[s]
                            for s, c in counts.items() if c)
        recompute = max(0, recompute - left_out)
        for r in rules:
            phases = {phase: int((flops * count).sum()) for phase, _, _, flops, _ in phase_costs(q, r, mirror_steps)}
            total = sum(phases.values())
            backward = bool(rule(r).recipe.get("backward"))
            redone = recompute if backward else 0
            if finetune.adapters:  # the frozen base: BP's forward and input gradients, the adapters' three products
                total = finetune_flops(cfg, finetune, phases["forward"], phases["backward"], checkpointing)
                adapters = adapter_forward_per_block(cfg, finetune)
                redone += sum(c * adapters[s] for s, c in counts.items())
            rows.append({"rule": r, "cost_model": name, "model_flops_per_sequence": total,
                         "recompute_flops_per_sequence": redone})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------
# Memory per GPU


def fits_at_micro_batch_1(cfg, spec: PlanSpec, device, rules, facts: ModelFacts | None = None) -> dict[str, bool]:
    """rule -> whether one sequence per micro-batch fits on the device under ``spec`` (memory only, no time)."""
    facts = facts or model_facts(cfg, list(rules), spec.optimizer, resolved(spec.finetune, spec.checkpointing))
    out = {}
    for r in rules:
        parts = memory_per_gpu(facts, spec, r, activations_per_sequence(facts, r, spec.checkpointing,
                                                                         spec.checkpoint_every))
        out[r] = sum(parts.values()) <= float(device.memory_bytes)
    return out


def smallest_fit(cfg, spec: PlanSpec, device, rules, max_gpus_per_node: int = 8) -> tuple[dict, PlanSpec] | None:
    """The smallest change of the parallel layout that makes every rule of ``rules`` fit at micro-batch 1: fewest
    flags changed first (sharding zero3, activation checkpointing full, sequence parallelism where tp > 1, then TP
    within a node, then PP), then
    the smallest degrees; only layouts that ``check_spec`` accepts (degrees divide heads, d_ff and the GPUs, at most
    one pipeline stage per block, a given global batch divides over the data-parallel degree) and that the framework runs (``spec.can``: a framework without tensor or pipeline parallelism keeps tp or
    pp as given, one that does not shard keeps the sharding). ({flag: value}, the spec) or None where no such
    layout on these GPUs fits."""
    import itertools
    from dataclasses import replace

    facts = model_facts(cfg, list(rules), spec.optimizer, resolved(spec.finetune, spec.checkpointing))
    blocks = [cfg.depth(s) for s in cfg.stacks]
    can = dict(spec.can) if spec.can else {}
    tps = [t for t in (1, 2, 4, 8, 16) if t <= max_gpus_per_node and spec.gpus % t == 0]
    pps = [p for p in range(1, max(blocks) + 1) if spec.gpus % p == 0]  # uneven stages too (check_spec decides)
    if can and not can.get("tensor", True):
        tps = [spec.tp]
    if can and not can.get("pipeline", True):
        pps = [spec.pp]
    sharded = not can or {"zero3", "fsdp"} & set(can.get("shardings", ()))
    shardings = list(dict.fromkeys([spec.sharding, "zero3"] if sharded else [spec.sharding]))
    checkpoints = list(dict.fromkeys([spec.checkpointing, "full"]))
    # sequence parallelism (tensor parallelism of 2 or more): each rank keeps 1 / tp of the model-wide activations
    sps = list(dict.fromkeys([bool(spec.sequence_parallel), True])) if (not can or can.get("sequence_parallel")) \
        else [bool(spec.sequence_parallel)]
    candidates = []
    for sharding, checkpointing, tp, pp, sp in itertools.product(shardings, checkpoints, tps, pps, sps):
        if sp and tp == 1:
            continue
        change = {k: v for k, v, base in (("sharding", sharding, spec.sharding),
                                          ("checkpointing", checkpointing, spec.checkpointing),
                                          ("tp", tp, spec.tp), ("pp", pp, spec.pp),
                                          ("sequence-parallel", "on" if sp else "off",
                                           "on" if spec.sequence_parallel else "off")) if v != base}
        if not change or spec.gpus % (tp * pp * spec.cp):
            continue
        candidates.append((len(change), tp * pp, tp, "checkpointing" in change, change,
                           replace(spec, sharding=sharding, checkpointing=checkpointing, tp=tp, pp=pp,
                                   sequence_parallel=sp, interleave=1, micro_batch=None)))  # a given batch stays
    for *_, change, candidate in sorted(candidates, key=lambda c: c[:4]):
        try:
            check_spec(candidate, cfg, device)
        except ConfigError:
            continue
        if all(fits_at_micro_batch_1(cfg, candidate, device, rules, facts).values()):
            return change, candidate
    return None


# ---------------------------------------------------------------------------
# The plan


STEP_PARTS = ("matmul", "attention", "memory", "launch", "comm_tp", "comm_dp", "comm_pp", "bubble", "optimizer", "comm_ep",
              "comm_cp")
PLAN_COLUMNS = (
    "config_id", "rule", "cost_model", "gpu", "gpus", "dp", "tp", "pp", "sharding", "zero3_gather", "precision",
    "checkpointing",
    "optimizer", "tokens", "tokens_per_sequence", "global_batch", "micro_batch", "grad_accumulation", "optimizer_steps",
    "model_flops_per_token", "model_flops", "recompute_flops", "hardware_flops", "flops_vs_bp",
    "step_time_s", "wall_clock_s", "wall_clock_days", "gpu_hours", "mfu", "hfu", "peak_flops_per_gpu",
    "energy_kwh", "co2e_t", "cost",
    "step_time_low_s", "step_time_high_s", "wall_clock_days_low", "wall_clock_days_high", "gpu_hours_low",
    "gpu_hours_high", "cost_low", "cost_high", "energy_kwh_low", "energy_kwh_high", "co2e_t_low", "co2e_t_high",
    "source_interval",
    *(f"mem_{p}" for p in MEMORY_PARTS), "mem_total", "memory_capacity", "fits", "max_micro_batch",
    "checkpoint_applies",
    "source_tokens", "source_batch", "source_efficiency", "source_precision", "source_peak", "source_memory_capacity",
    "source_power", "source_pue", "source_carbon", "source_price",
    *(f"step_{k}_s" for k in STEP_PARTS), "step_dp_bytes", "step_dp_collectives",
    "compute_multiplier", "token_multiplier", "source_quality",
    "ep", "etp", "ep_all_to_all_bytes", "interleave", "sequence_parallel", "goodput", "source_goodput", "framework", "source_framework", "attention", "cp", "replicate", "source_network", "pipeline_split",
    "trains_model", "schedule", "offload", "host_memory_per_node", "finetune", "trained_parameters", "source_finetune",
)


def pipeline_split(cfg, pp: int, split: str = "even", interleave: int = 1) -> str:
    """The blocks on each pipeline stage, in words (analytic/steptime/step.py's critical_stage prices it), and with
    an interleaved schedule of an uneven split, how the virtual stages share them."""
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    if pp == 1:
        return ""
    if cfg.mtp and split == "even":  # (steptime/step.py's critical_stage picks the head's stage's blocks)
        return (f"the head and multi-token prediction's {cfg.mtp_depth} module(s) on the last stage, which holds the "
                "blocks that balance it, the other stages the rest; the pace is the slowest stage's, memory the "
                "fullest stage's")
    if split != "even":
        counts = stages(blocks, pp, stage_split(cfg, split))
        head = next(i for i, (_, h) in enumerate(counts) if h)
        return (f"balanced by compute (nanotron): blocks per stage {'/'.join(str(n) for n, _ in counts)}, the head "
                f"on stage {head + 1}; the pace is the slowest stage's, memory the fullest stage's")
    if blocks % pp == 0:
        return f"{blocks // pp} blocks on each of {pp} stages"
    low = blocks // pp
    virtual = (f"; {interleave} virtual stages of {(low + 1) // interleave} blocks each, the short stages' last one of "
               f"{(low + 1) // interleave - 1}") if interleave > 1 else ""
    return (f"uneven: {blocks % pp} stages of {low + 1} blocks and {pp - blocks % pp} of {low}, the head on one of "
            f"{low}; the pace is the slower of a stage of {low + 1} and the head's, memory the fullest stage's"
            f"{virtual}")


def split_backward_note(facts: ModelFacts, spec: PlanSpec, z: int) -> str:
    """What a zero-bubble or DualPipe schedule keeps between B and W under the framework's split backward, in words
    (plan_memory.retained), or ""."""
    schedule = schedules.effective(spec.schedule, spec.interleave) if spec.pp > 1 else ""
    if schedule not in schedules.SPLIT or spec.split_backward != "retained":
        return ""
    factor = retained(facts, spec, schedule, z)
    if factor == 1.0:
        return (f"; {spec.framework} runs torch.distributed.pipelining's split backward, not replayed for this model: "
                "the schedule's paper's activations")
    return (f"; {spec.framework} runs torch.distributed.pipelining's split backward: a micro-batch between its input "
            f"and weight gradients keeps its graph and its weight nodes' output gradients, {factor:.2f}x its "
            "activations (the memory tape's replay)")


def step_layout(spec: PlanSpec, G: int, micro_batch: int, interleave: int | None = None,
                sequence_parallel: bool | None = None, slots: int | None = None):
    """The step-time model's Layout of a plan (the plan's rows and the layout search price the same one)."""
    from .steptime import Layout

    return Layout(gpus=spec.gpus, global_batch=G, micro_batch=micro_batch, tp=spec.tp, pp=spec.pp, ep=spec.ep, cp=spec.cp,
                  etp=spec.etp, replicate=spec.replicate,
                  interleave=spec.interleave if interleave is None else interleave,
                  sequence_parallel=spec.sequence_parallel if sequence_parallel is None else sequence_parallel,
                  sharding=spec.sharding, recompute=spec.checkpointing, checkpoint_every=spec.checkpoint_every,
                  precision=spec.precision, dp_overlap=spec.dp_overlap,
                  selective_dp_overlap=spec.selective_dp_overlap, gpus_per_node=spec.gpus_per_node,
                  nic_gbps=spec.nic_gbps, tp_overlap=spec.tp_overlap, tp_backward_overlap=spec.tp_backward_overlap, fabric=spec.fabric, dp_rails=spec.dp_rails,
                  gather_prefetch=spec.gather_prefetch, grad_reduce=spec.grad_reduce, zero1_sync=spec.zero1_sync,
                  zero_reduce=spec.zero_reduce,
                  fp8_weight_cache=spec.fp8_weight_cache, elementwise=spec.elementwise,
                  shard_copies=spec.shard_copies, fp8_gather=spec.fp8_gather, fp8_tp_gather=spec.fp8_tp_gather,
                  recompute_tail=spec.recompute_tail, schedule=spec.schedule if spec.pp > 1 else "",
                  offload=spec.offload,
                  zero3_granularity=spec.zero3_granularity, attention=spec.attention,
                  pipeline_split=spec.pipeline_split, optimizer_slots=OPTIMIZER_SLOTS[spec.optimizer] if slots is None else slots)


def plan_table(cfg, spec: PlanSpec, device, rules, cost_models) -> pd.DataFrame:
    """The plan: one row per (rule, cost model in scope). Raises ConfigError for an impossible plan (no rule
    fits at micro-batch 1, degrees that do not divide)."""
    from .steptime.device import power_label

    check_spec(spec, cfg, device)
    rules = list(dict.fromkeys(rules))
    e = spec.efficiency
    # BP for the ratios, the measured rule for a measured throughput, beside the rules asked for
    extra = [r for r in ("bp", e.rule if e.kind == "tokens_per_s" or spec.joules_per_token is not None else "bp")
             if r in rule_names()]
    needed = list(dict.fromkeys(rules + extra))
    ft = resolved(spec.finetune, spec.checkpointing)
    check_finetune(ft, cfg, rules, cost_models, spec.precision)
    facts = model_facts(cfg, needed, spec.optimizer, ft)
    from .steptime.step import tail_skipped

    tail = tail_skipped(cfg, spec.recompute_tail, PRECISIONS[spec.precision].linear is not None)
    flops = flops_per_sequence(cfg, needed, cost_models, spec.checkpointing, spec.checkpoint_every, spec.mirror_steps,
                               facts, tail, ft)
    if flops.empty:
        raise ConfigError(f"cost_model: none of {', '.join(cost_models)} defines this architecture (the paper cost model "
                          "defines the 2017 transformer only)")
    p = PRECISIONS[spec.precision]
    dp = replicas(spec)
    G, batch_source = global_batch(spec, cfg)
    per_replica = G // dp
    n = tokens_per_sequence(cfg)
    sequences = spec.tokens / n
    steps = sequences / G
    check_run_length(spec, cfg)
    capacity = float(device.memory_bytes)
    peak = float(device.peak(p.peak_dtype))  # fp8-mixed: the fp8 peak (NVIDIA's MFU convention)
    fp8_note = ""
    if p.linear:  # where the fp8 products' ceiling comes from (a device without a published one keeps its bf16 one)
        from .steptime.device import DeviceModel

        key = f"gemm_ceiling_{p.linear}"
        fp8_note = f"; {p.linear} GEMM ceiling: {DeviceModel.of(device, p.compute, p.linear).sources[key]}"

    # Memory, per rule (no cost model enters it)
    memory, per_sequence, candidates = {}, {}, {}
    multiple = spec.pp if spec.interleave > 1 else 1
    for r in needed:
        acts = activations_per_sequence(facts, r, spec.checkpointing, spec.checkpoint_every)
        parts = memory_per_gpu(facts, spec, r, acts)
        fixed = sum(v for k, v in parts.items() if k != "activations")
        most = largest_micro_batch(fixed, parts["activations"], capacity)
        # micro-batch max: the largest that fits (and, interleaved, leaves micro-batches in multiples of pp)
        fitting = largest_divisor_at_most(per_replica, most, multiple)
        micro = spec.micro_batch or max(1, fitting or largest_divisor_at_most(per_replica, most))
        if spec.micro_batch is None and spec.pp > 1 and fitting and e.kind != "mfu" and e.kind != "hfu" \
                and e.kind != "tokens_per_s":
            # under a pipeline fewer, larger micro-batches lengthen the bubble ((pp - 1) / micro-batches of the
            # step, Narayanan et al. 2021, section 2.2): every fitting micro-batch is priced, the fastest kept
            candidates[r] = [m for m in divisors(per_replica) if m <= fitting and (per_replica // m) % multiple == 0]
        per_sequence[r] = parts["activations"]
        memory[r] = (parts, fixed, micro, most)

    def with_micro(r: str, micro: int):
        parts, fixed, _, most = memory[r]
        # (fewer micro-batches per step than the pipeline keeps in flight: as many as there are)
        parts = {**parts, "activations": per_sequence[r] * micro * schedules.kept_share(
            schedules.effective(spec.schedule, spec.interleave), spec.pp, spec.interleave, per_replica // micro)}
        memory[r] = (parts, fixed, micro, most)

    for r in needed:
        with_micro(r, memory[r][2])
    # A rule that does not fit at micro-batch 1 is still priced at micro-batch 1, its row marked fits False
    # (the command line names the smallest change that fits: smallest_fit)

    predicted, bar = {}, None
    if e.kind == "predicted":
        from .steptime import Layout, predict_step
        from .steptime.intervals import interval, regime
        from .steptime.step import check_layout, rule_work

        # the error bar: the model's misses on published runs like this one (steptime/intervals.py)
        bar = interval(regime(device.name, spec.sharding, spec.gpus, facts.parameters, cfg.seq_len))

        work = rule_work(cfg, rules, ft)
        for r in rules:
            tried = {}
            for m in candidates.get(r) or [memory[r][2]]:
                lay = step_layout(spec, G, m)
                check_layout(cfg, lay)
                tried[m] = predict_step(cfg, lay, device, r, work)
            best = min(tried, key=lambda m: (tried[m].step_time_s, m))  # ties: the smaller micro-batch, less memory
            if best != memory[r][2]:
                with_micro(r, best)
            predicted[r] = tried[best]
    elif e.kind not in ("mfu", "hfu", "tokens_per_s"):  # a calibrated rate: its bubble as priced below
        for r, ms in candidates.items():
            rate = e.rate_at if e.rate_at is not None else (lambda m: e.value)
            best = min(ms, key=lambda m: (1 + (spec.pp - 1) / (per_replica // m)) / rate(m))
            if best != memory[r][2]:
                with_micro(r, best)

    hw = flops.assign(hardware_flops_per_sequence=flops["model_flops_per_sequence"] + flops["recompute_flops_per_sequence"])
    hw = hw.set_index(["rule", "cost_model"])
    token_scale = token_multipliers(cfg, spec, needed, facts)
    # the GPUs sharing a host: a node's, or fewer where the run has fewer
    per_node = min(spec.gpus, int(spec.gpus_per_node or device.steptime.get("gpus_per_node", 8)))
    rows = []
    for (r, name), f in hw.iterrows():
        if r not in rules:
            continue
        scale = token_scale.get(r, 1.0)
        tokens = spec.tokens * scale
        sequences = tokens / n
        steps = sequences / G
        model_seq, hw_seq = float(f["model_flops_per_sequence"]), float(f["hardware_flops_per_sequence"])
        parts, fixed, micro, most = memory[r]
        accumulation = per_replica // micro
        work = G * hw_seq / spec.gpus  # hardware FLOPs per GPU per step
        if e.kind == "mfu":
            step = G * model_seq / (spec.gpus * peak * e.value)
        elif e.kind == "hfu":
            step = work / (peak * e.value)
        elif e.kind == "tokens_per_s":
            rate = e.value * float(hw.loc[(e.rule, name), "hardware_flops_per_sequence"]) / n  # FLOP/s per GPU
            if rate > peak:
                most = peak * n / float(hw.loc[(e.rule, name), "hardware_flops_per_sequence"])
                raise ConfigError(f"tokens_per_s: {e.value:g} tokens/s per GPU would run {e.rule}'s work at "
                                  f"{rate / peak:.3g}x the {device.name}'s peak (at most {most:,.0f} tokens/s per GPU)")
            step = work / rate
        elif e.kind == "predicted":  # the step-time model: one physical step, whatever the cost model counts
            step = predicted[r].step_time_s
        else:  # a calibrated rate of the products: the pipeline's bubble on top (Narayanan et al. 2021)
            rate = e.rate_at(micro) if e.rate_at is not None else e.value
            step = work / rate * (1 + (spec.pp - 1) / accumulation)
        wall = steps * step / spec.goodput
        gpu_hours = spec.gpus * wall / 3600
        if spec.joules_per_flop is not None:
            joules = sequences * hw_seq * spec.joules_per_flop
        elif spec.joules_per_token is not None:
            ref = float(hw.loc[(e.rule, name), "hardware_flops_per_sequence"])
            joules = tokens * spec.joules_per_token * hw_seq / ref
        else:
            joules = spec.gpus * device.power_w * spec.power_utilisation * wall
        kwh = joules / 3.6e6 * spec.pue
        bp = hw.loc[("bp", name), "model_flops_per_sequence"] if ("bp", name) in hw.index else math.nan
        total_memory = fixed + parts["activations"]
        rows.append({
            # False: priced, but the rule does not train this model (a mixture of experts under PEPITA or MEMPEPITA)
            "trains_model": not untrained(r, cfg),
            "config_id": cfg.config_id, "rule": r, "cost_model": name, "gpu": device.name, "gpus": spec.gpus, "dp": dp, "cp": spec.cp,
            "replicate": spec.replicate,
            "tp": spec.tp, "pp": spec.pp, "sharding": spec.sharding, "zero3_gather": spec.zero3_gather,
            "framework": spec.framework, "source_framework": spec.framework_source, "attention": spec.attention,
            "pipeline_split": pipeline_split(cfg, spec.pp, spec.pipeline_split, spec.interleave)
            + split_backward_note(facts, spec, p.activations),
            "schedule": schedules.effective(spec.schedule, spec.interleave) if spec.pp > 1 else "",
            "offload": spec.offload, "host_memory_per_node": host_bytes(facts, spec, r, per_node),
            "finetune": ft.kind, "trained_parameters": int(facts.row(r)["trained"]),
            "source_finetune": describe_finetune(ft, cfg, spec.checkpointing) + ("; " + FINETUNE_SOURCE if ft.adapters else ""),
            "interleave": spec.interleave,
            "sequence_parallel": bool(spec.sequence_parallel),
            "source_network": spec.network_source, "precision": spec.precision,
            "checkpointing": spec.checkpointing, "optimizer": spec.optimizer, "tokens": float(tokens),
            "tokens_per_sequence": n, "global_batch": G, "micro_batch": micro, "grad_accumulation": accumulation,
            "optimizer_steps": steps, "model_flops_per_token": model_seq / n, "model_flops": sequences * model_seq,
            "recompute_flops": sequences * (hw_seq - model_seq), "hardware_flops": sequences * hw_seq,
            "flops_vs_bp": model_seq / bp, "step_time_s": step, "wall_clock_s": wall, "wall_clock_days": wall / 86400,
            "gpu_hours": gpu_hours, "mfu": G * model_seq / (spec.gpus * peak * step),
            "hfu": G * hw_seq / (spec.gpus * peak * step), "peak_flops_per_gpu": peak, "energy_kwh": kwh,
            "co2e_t": kwh * spec.carbon_intensity / 1000,
            "cost": gpu_hours * spec.price if spec.price is not None else math.nan,
            **interval_columns(bar, step, wall, gpu_hours, spec.price),
            # energy in proportion to the wall-clock (power x time) takes its interval; a measured energy per token
            # or per FLOP does not depend on the step's time: NaN
            **interval_energy(bar, kwh, spec.carbon_intensity,
                              spec.joules_per_flop is None and spec.joules_per_token is None),
            **{f"mem_{k}": float(v) for k, v in parts.items()}, "mem_total": float(total_memory),
            "memory_capacity": capacity, "fits": bool(total_memory <= capacity), "max_micro_batch": most,
            "checkpoint_applies": bool(facts.per_rule.loc[r, "backward"]),
            "goodput": spec.goodput, "source_goodput": spec.goodput_source,
            "source_tokens": spec.tokens_source, "source_batch": batch_source, "source_efficiency": e.source,
            "source_precision": (f"{spec.precision} ({spec.precision_source}): " if spec.precision_source else "")
                                + p.source + fp8_note, "source_peak": device.sources.get("peak_tflops", ""),
            "source_memory_capacity": device.sources.get("memory_gb", ""),
            "source_power": spec.power_source + ("" if spec.joules_per_token is not None or spec.joules_per_flop is not None
                                                 else f"; {power_label(device)} {device.power_w:g} W: "
                                                      f"{device.sources.get('power_w', '')}"),
            "source_pue": spec.pue_source, "source_carbon": spec.carbon_source, "source_price": spec.price_source,
            **{f"step_{k}_s": (float(predicted[r].parts[k]) if r in predicted else math.nan) for k in STEP_PARTS},
            # the data-parallel collectives of one step on one GPU (analytic/comm.py's, predicted mode only)
            "step_dp_bytes": float(predicted[r].dp_bytes) if r in predicted else math.nan,
            "step_dp_collectives": float(predicted[r].dp_collectives) if r in predicted else math.nan,
            "compute_multiplier": dict(spec.compute_multipliers).get(r, math.nan if spec.compute_multipliers else 1.0),
            "token_multiplier": scale, "source_quality": quality_note(spec, r),
            # bytes each GPU sends in the step's all-to-alls (expert parallelism)
            "ep": spec.ep, "etp": expert_tp(spec), "ep_all_to_all_bytes": accumulation * all_to_alls_per_micro_batch(facts, spec, r)
            * all_to_all_bytes(cfg, spec, micro),
        })
    table = pd.DataFrame(rows, columns=list(PLAN_COLUMNS))
    order = {r: i for i, r in enumerate(rules)}
    models = {m: i for i, m in enumerate(cost_models)}
    table = table.sort_values(["rule", "cost_model"], key=lambda s: s.map(order if s.name == "rule" else models))
    return table.reset_index(drop=True)


def interval_columns(bar, step: float, wall: float, gpu_hours: float, price) -> dict:
    """The predicted step's 80% interval carried to the run (steptime/intervals.py): every figure proportional to the
    step (wall-clock, GPU-hours, money) gets the same multiples; NaN where the step was given, not predicted."""
    low, high = (bar.low, bar.high) if bar is not None else (math.nan, math.nan)
    cost = gpu_hours * price if price is not None else math.nan
    return {"step_time_low_s": step * low, "step_time_high_s": step * high,
            "wall_clock_days_low": wall / 86400 * low, "wall_clock_days_high": wall / 86400 * high,
            "gpu_hours_low": gpu_hours * low, "gpu_hours_high": gpu_hours * high,
            "cost_low": cost * low, "cost_high": cost * high,
            "source_interval": bar.describe() if bar is not None else ""}


def interval_energy(bar, kwh: float, carbon_intensity: float, by_time: bool) -> dict:
    """The energy's and the CO2e's 80% interval: the step's multiples where the energy is power x wall-clock; NaN
    where it was given per token or per FLOP, or where the step was not predicted."""
    low, high = (bar.low, bar.high) if bar is not None and by_time else (math.nan, math.nan)
    return {"energy_kwh_low": kwh * low, "energy_kwh_high": kwh * high,
            "co2e_t_low": kwh * carbon_intensity / 1000 * low, "co2e_t_high": kwh * carbon_intensity / 1000 * high}


def token_multipliers(cfg, spec: PlanSpec, rules, facts) -> dict[str, float]:
    """rule -> its tokens / BP's: the compute multiplier M (compute to reach the target loss under the rule / under
    BP, from the frontiers) times BP's executed FLOPs per token / the rule's, on the planned model. The multiplier is
    carried from the study's small models as it is (docs/planning.md states the limits); NaN: never reaches it."""
    given = dict(spec.compute_multipliers)
    if not given:
        return {}
    executed = flops_per_sequence(cfg, list(dict.fromkeys(["bp", *rules])), ["executed"], "none", 2, spec.mirror_steps,
                                  facts).set_index("rule")["model_flops_per_sequence"]
    return {r: float(given[r]) * float(executed["bp"]) / float(executed[r]) if r in given else math.nan
            for r in rules if r in executed.index}


def quality_note(spec: PlanSpec, rule: str) -> str:
    given = dict(spec.compute_multipliers)
    if not given:
        return spec.quality_source
    if rule not in given:
        return f"{spec.quality_source}: not in the study, so no budget"
    m = given[rule]
    return (f"{spec.quality_source}: never reaches the target in the measured range" if math.isnan(m)
            else f"{spec.quality_source}: {m:.3g}x BP's compute")


def memory_curve(cfg, spec: PlanSpec, device, rules, micro_batches=None) -> pd.DataFrame:
    """Per-GPU bytes per rule against the micro-batch (the workflow's memory figure), with the device capacity and
    each rule's largest micro-batch that fits. ``micro_batches`` None: powers of two up to the first at which no
    rule fits (at most 2^16)."""
    facts = model_facts(cfg, rules, spec.optimizer, resolved(spec.finetune, spec.checkpointing))
    capacity = float(device.memory_bytes)
    lines = {}
    for r in rules:
        acts = activations_per_sequence(facts, r, spec.checkpointing, spec.checkpoint_every)
        parts = memory_per_gpu(facts, spec, r, acts)
        fixed = sum(v for k, v in parts.items() if k != "activations")
        lines[r] = (fixed, parts["activations"], largest_micro_batch(fixed, parts["activations"], capacity))
    if micro_batches is None:
        most = max(line[2] for line in lines.values())
        micro_batches = [2**i for i in range(17) if 2**i <= 2 * max(most, 1)]
        micro_batches += [2 * micro_batches[-1]] if micro_batches[-1] <= most else []
    rows = [{"config_id": cfg.config_id, "rule": r, "micro_batch": int(m), "mem_total": float(fixed + m * per),
             "memory_capacity": capacity, "max_micro_batch": most, "gpu": device.name}
            for r, (fixed, per, most) in lines.items() for m in micro_batches]
    return pd.DataFrame(rows)


