"""One optimizer step at scale, composed from the model's shapes, per learning rule (docs/planning.md).

Per micro-batch on the critical pipeline stage (blocks / p, plus the head on the last stage), BP's kernels are
priced on the device model: the block's four matrix products (q/k/v, output, FFN up, FFN down; each GPU holds
1/t of their features) forward, and their input- and weight-gradient products backward; the attention core
(FlashAttention, or Megatron's unfused batched products with a softmax and dropout in memory); the memory-bound
kernels (norms, residual adds, the activation, the loss over the vocabulary); no kernel shorter than a launch, and no
block faster than the host issues its kernels (:data:`HOST_BLOCK_S`, eager PyTorch's, measured on an H200's host).

A rule's phases are priced from the same per-layer shapes (:func:`rule_work`, :func:`kernel_rates`): each of the
engine's ``executed`` quantities (a forward pass, an input gradient, a weight gradient, a product with the weights
alone) of each layer kind is priced at the rate of that kind's own kernels of that class on the device model -- a
forward through attention at the rate of its projections and fused core, a weight gradient at the rate of the
weight-gradient products alone (no attention core), a mirror step or an inverse's forward at the projections' rate;
the rule's own layers at their own GEMM shapes (PEPITA's F and LRA's head feedback from the output-wide error to d;
DFA's d x d projections; TP's and DTP's d x d inverses, LRA's error weights). BP's own step is unchanged by
construction: its rates are its kernels' times over its FLOPs. Memory-bound kernels and launches follow the rule's
forward and backward FLOPs at BP's mix. The rule's dependency structure decides what the pipeline serialises
(:func:`rule_work`): BP, FA, KP and WM send the error back stage by stage; DFA broadcasts the output error to every
stage, whose backward is then local; TP, DTP and LRA carry a target (a d x d product per block) down the stages and
update locally; PEPITA and MEMPEPITA run a second forward sweep that needs the first's error.

Communication: tensor parallelism's all-reduces (2 per block per forward pass, 2 per backward through the blocks,
2 more per recomputed forward; with sequence parallelism an all-gather and a reduce-scatter of the same bytes),
data parallelism's collectives from analytic/comm.py (:func:`..comm.plan_collectives`, the model equal to the meter:
DDP's buckets; ZeRO-1/2 the FSDP2 units' reduce-scatters and all-gathers once per step; ZeRO-3/FSDP the units
gathered per forward and backward and reduce-scattered per micro-batch; the explicit rules' one flat all-reduce),
each priced on the network model with its own latency, overlapped with compute by a stated fraction; pipeline
point-to-point sends and the 1F1B bubble: the fill and drain of the stages other than the critical one (for p equal
stages (p - 1) / (v m) of the serialised per-micro-batch time; a head on the last stage does not lengthen the others').
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..finetune import FULL, FineTune, adapter_flops, adapter_parameters, finetune_flops, linear_shapes, targets_of
from ..plan_facts import PRECISIONS, ZERO_STAGE, check_precision, model_facts, model_share, stage_split
from .device import DeviceModel
from . import offload, schedules
from .network import Network
from .layout_checks import (ALIASES, ATTENTION, ATTENTION_PRODUCTS, GRANULARITY, OP_PRODUCTS, RECOMPUTE,  # noqa: F401
                            check_context_parallel, check_layout, hsdp_problem, interleave_blocks, interleave_problem,
                            recompute_ops, tail_skipped)
from .kernels import (EAGER_OPS, _floor, block_times, dualpipe_overlap, eager_kernels, eager_ops, end_times,  # noqa: F401
                      head_times, latent_gemms, mixture_share, stack_block_times)
from .data_parallel import (DP_KINDS, OVERLAP_SLOWDOWN, _contended, _exposed, adapter_reductions,  # noqa: F401
                            data_parallel_collectives, dp_exposed, dp_overlap_of, dp_phase_seconds, dp_seconds,
                            qlora_dequantize_seconds,
                            reduce_dtype, replicated, shard_copy_bytes, shard_copy_seconds, synced_after_backward)


DEFAULT_OVERLAP = 1.0
DEFAULT_OVERLAP_SOURCE = ("data-parallel communication overlapped with compute where frameworks overlap it "
                          "(PyTorch DDP's bucketed all-reduce during backward, Li et al. 2020; FSDP/ZeRO-3 prefetch, "
                          "Zhao et al. 2023): fraction 1.0 of the overlappable compute, override with --dp-overlap")
# The host's seconds to issue one block's kernels per micro-batch in eager PyTorch (forward, backward): no block runs
# faster than its host issues it, so a block whose kernels take less (small micro-batches, high tensor parallelism)
# takes this long. Measured on an NVIDIA H200's host (torch 2.11, benchmarks/gpu/README.md, section 8): the calibration
# probes of BP on the decoder d2048 at 8 blocks less at 4, per block, the mean of two machines (forward 0.66 and
# 1.15 ms, backward 0.80 and 0.92 ms). Every framework in config/frameworks.yaml runs eagerly (none captures CUDA graphs).
HOST_BLOCK_S = (0.90e-3, 0.86e-3)
HOST_BLOCK_SOURCE = ("eager PyTorch's host time per block and micro-batch, 0.90 ms forward and 0.86 ms backward: the "
                     "calibration probes of BP on an NVIDIA H200's host, 8 blocks less 4 (benchmarks/gpu/README.md, "
                     "section 8)")
RULE_PHASES = ("forward", "backward", "error_projection", "target_propagation", "weight_update", "feedback_update",
               "mirror")  # analytic/engine.py's PHASES
BREAKDOWN = ("matmul", "attention", "memory", "launch", "comm_tp", "comm_dp", "comm_pp", "bubble", "optimizer", "comm_ep",
             "comm_cp")


@dataclass(frozen=True)
class Layout:
    gpus: int
    global_batch: int  # sequences per optimizer step
    micro_batch: int
    tp: int = 1
    pp: int = 1
    interleave: int = 1  # virtual stages per device (Narayanan et al. 2021)
    sequence_parallel: bool = False
    sharding: str = "none"
    recompute: str = "none"
    checkpoint_every: int = 2
    precision: str = "bf16-mixed"
    attention: str = "flash"
    dp_overlap: float = DEFAULT_OVERLAP
    selective_dp_overlap: float | None = None  # dp_overlap under a per-operation recompute (the framework's); None: same
    tp_overlap: float = 0.0  # share of the tensor-parallel collectives hidden behind the products (the framework's)
    tp_backward_overlap: float | None = None  # the backward's input-gradient collectives' share; None: tp_overlap
    zero3_granularity: str = "block"
    dp_rails: bool = True  # data-parallel collectives spread over every NIC of the node (the framework's)
    gather_prefetch: bool = True  # parameter all-gathers overlap the compute (the framework's); False: they block it
    grad_reduce: str = "compute"  # the gradients' reduction dtype (the framework's): compute, fp32, fp32-if-bf16
    zero1_sync: str = "overlapped"  # ZeRO-1's gradient sync (the framework's): ZERO1_SYNC
    zero_reduce: str = "reduce_scatter"  # how ZeRO-1/2 reduce the gradients (the framework's): ZERO_REDUCE
    shard_copies: bool = False  # the sharded collectives copy through flat buffers on the compute stream (FSDP2's)
    gpus_per_node: int | None = None
    nic_gbps: float | None = None
    fabric: tuple | None = None  # ((key, value), ...) of the cluster's fabric latencies (config/clusters.yaml)
    optimizer_slots: int = 2
    fp8_weight_cache: bool = False  # fp8-mixed: the framework casts the weights to fp8 once per step, not per micro-batch
    fp8_gather: bool = False  # fp8-mixed: the parameter all-gathers (ZeRO, FSDP) carry the linear weights in fp8
    fp8_tp_gather: bool = False  # fp8-mixed: the sequence-parallel all-gathers carry fp8 activations and gradients
    ep: int = 1  # expert-parallel degree (a mixture of experts), inside the data-parallel replicas
    etp: int | None = None  # the experts' tensor-parallel degree; None: tp (Megatron-Core's default; MoE folding)
    cp: int = 1  # context-parallel degree: each of cp GPUs holds s / cp of every sequence (Megatron-Core's CP)
    replicate: int = 1  # HSDP: the dp replicas in this many groups, each sharding over dp / replicate x cp ranks
    pipeline_split: str = "even"  # how the blocks are split over the stages (the framework's; plan_facts.stages)
    host_block_s: tuple | None = None  # the host's seconds to issue one block's forward and backward (HOST_BLOCK_S)
    elementwise: str = "fused"  # the blocks' norms, rotary and gated activations: fused, eager or some (eager_ops)
    recompute_tail: str = "repeated"  # what the recompute leaves out (config/frameworks.py RECOMPUTE_TAILS)
    schedule: str = ""  # the pipeline schedule (schedules.SCHEDULES); "": 1F1B, interleaved with interleave > 1
    offload: str = "none"  # the optimizer, or the parameters too, kept on the host (offload.OFFLOADS)

    def __post_init__(self):
        if self.host_block_s is None:
            object.__setattr__(self, "host_block_s", HOST_BLOCK_S)

    @property
    def dp(self) -> int:
        """Data-parallel replicas (each takes its own sequences); the gradients are reduced over dp x cp ranks."""
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def accumulation(self) -> int:
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def shard(self) -> int:
        """The ranks ZeRO shards over: dp x cp, or under HSDP (``replicate`` > 1) dp / replicate x cp; the
        replica groups hold the same shards, ``shard`` x tp GPUs apart."""
        return self.dp // self.replicate * self.cp

    @property
    def expert_tp(self) -> int:
        """The experts' tensor-parallel degree: tp unless given (Megatron-Core's MoE parallel folding)."""
        return self.tp if self.etp is None else self.etp


@dataclass
class StepPrediction:
    step_time_s: float
    parts: dict  # BREAKDOWN -> seconds per step
    model_flops: float  # per step, all GPUs
    hardware_flops: float
    mfu: float
    hfu: float
    sources: dict = field(default_factory=dict)
    dp_bytes: int = 0  # data-parallel collectives' bytes per step on one GPU (analytic/comm.py's accounting)
    dp_collectives: int = 0  # data-parallel collectives per step on one GPU
    stage_split: str = ""  # how the blocks are split over the pipeline stages (critical_stage)


# ---------------------------------------------------------------------------
# The rules' work and dependency structure, from their declared phases


def rule_work(cfg, rules, finetune: FineTune = FULL) -> dict:
    """Per rule: FLOPs per sequence of its forward passes, of the work it serialises backward through the stages,
    of its stage-local work, the number of forward passes and sequential forward sweeps, whether it has a backward
    through the blocks, and the elements of feedback it trains (their gradients are reduced like the weights').
    ``finetune`` with adapters: BP's work on a frozen base (:func:`finetune_work`)."""
    out = _rule_work(cfg, tuple(rules))
    if finetune.adapters:
        out = {**out, "bp": finetune_work(cfg, out["bp"], finetune)}
    return out


def finetune_work(cfg, w: dict, ft: FineTune) -> dict:
    """BP's work when only adapters train (analytic/finetune.py): its weight gradients gone, the adapters' products
    added as a family of their own (priced at their shapes, :func:`adapter_seconds`), the trained elements the
    adapters'. The first block's skipped input gradients (finetune.first_block_skipped) stay in the priced backward
    (a block's q, k and v input gradients of the whole model's; the FLOPs, ``total``, leave them out)."""
    a = adapter_flops(cfg, ft)
    entries = {k: v for k, v in w["entries"].items() if k[0] != "weight_update"}
    for phase, name, amount in (("forward", "adapter_forward", a["forward"]),
                                ("backward", "adapter_backward", a["backward"]),
                                ("weight_update", "adapter_weight_grad", a["weight_grad"])):
        if amount:
            entries[(phase, name, "adapter", True)] = float(amount)
    total = float(finetune_flops(cfg, ft, int(w["forward"]), int(w["chain"])))
    return {**w, "entries": entries, "families": {**w["families"], "adapter": "adapter"},
            "forward": w["forward"] + a["forward"], "chain": w["chain"] + a["backward"], "local": float(a["weight_grad"]),
            "total": total, "trained": adapter_parameters(cfg, ft), "finetune": ft}


def adapter_seconds(cfg, lay: Layout, dev: DeviceModel, ft: FineTune, cls: str) -> float:
    """Seconds of one block's adapter products per micro-batch on one GPU, of a class (fwd: A then B; bin: their
    input gradients; wgrad: their weight gradients): each a skinny product of rank r on the block's rows, its wide
    side split over the tensor-parallel GPUs as its base Linear's (column-parallel q, k, v, gate, up; row-parallel o,
    down). The adapters' scaling and add (elementwise) are not priced."""
    m = lay.micro_batch * cfg.seq_len // lay.cp
    r, t = ft.rank, lay.tp
    shapes = linear_shapes(cfg)
    total = 0.0
    for x in targets_of(cfg, ft):
        k, n = shapes[x]
        k, n = (max(1, k // t), n) if x in ("o", "down") else (k, max(1, n // t))
        products = {"fwd": ((m, r, k), (m, n, r)), "bin": ((m, r, n), (m, k, r)), "wgrad": ((n, r, m), (r, k, m))}[cls]
        total += sum(dev.products.gemm(*g) for g in products)
    return total


def _rule_work(cfg, rules: tuple) -> dict:
    from ..catalogue import rule as rule_spec
    from ..engine import build_for, evaluate, phase_costs, recipe
    from ..plan_facts import _configs
    from ..registry import cost_model

    from .. import layers as L

    configs = _configs(cfg)
    templates = build_for(cost_model("executed"), configs)
    q = evaluate("executed", configs, 1, templates)
    kinds = templates.kind
    # where a template's work runs: True in a block (spread over the stages), False at an end (the head's stage),
    # "mtp" in multi-token prediction's modules (the head's stage, whole)
    places = np.where(templates.stack == L.MTP, "mtp", np.where(templates.is_block, "block", "end"))
    out = {}
    for r in dict.fromkeys(["bp", *rules]):
        parts = recipe(r, 1, "executed")
        phases = {phase: float((flops * templates.count).sum()) for phase, _, _, flops, _ in phase_costs(q, r)}
        entries = {}  # (phase, quantity, layer kind, in a block) -> FLOPs per sequence (all blocks)
        for phase, items in parts.items():
            for name, times in items:
                if name not in q.declared:
                    continue
                flops = times * q.flops[name] * templates.count
                for i in np.nonzero(q.declared[name] & (flops > 0))[0]:
                    key = (phase, name, str(kinds[i]), {"block": True, "end": False, "mtp": "mtp"}[places[i]])
                    entries[key] = entries.get(key, 0.0) + float(flops[i])
        backward = parts.get("backward", ())
        names = {name for name, _ in backward}
        through = "backward_total" in names  # the error goes back block by block, stage by stage
        forward_parts = parts.get("forward", ())
        modulated = sum(int(t) for name, t in forward_parts if name == "forward_modulated")
        passes = sum(int(t) for name, t in forward_parts if name in ("forward", "forward_modulated"))
        chain = phases.get("backward", 0.0) if through else phases.get("target_propagation", 0.0)
        local = sum(v for k, v in phases.items() if k != "forward") - chain
        spec = rule_spec(r)
        changes_feedback = bool(spec.memory.trains_feedback) or "mirror" in parts
        out[r] = {"forward": phases.get("forward", 0.0), "chain": chain, "local": local, "passes": max(1, passes),
                  "sweeps": 2 if modulated else 1, "backward": bool(backward), "through": through,
                  "broadcast": "error_projection" in parts and not through and bool(backward),
                  "changes_feedback": changes_feedback, "total": sum(phases.values()), "entries": entries,
                  "families": {k: L.kind(k).family for _, _, k, _ in entries}, "rule": r}
    return out


# ---------------------------------------------------------------------------
# BP's kernels per micro-batch and block


# ---------------------------------------------------------------------------
# Pricing a rule's quantities on the device model

QUANTITY_CLASS = {  # the engine's quantities (analytic/engine.py) by the kernels they run
    "fwd": ("forward", "forward_modulated", "forward_unit"),
    "bin": ("backward", "backward_q", "backward_kv", "backward_skip", "backward_total", "backward_dfa", "backward_local"),
    "wgrad": ("weight_grad", "weight_grad_dense", "linear_weight_grad", "feedback_weight_grad"),
    "linear": ("linear_forward", "feedback_forward", "target_projection", "head_projection", "dfa_projection",
               "error_projection", "feedback_copy", "head_feedback_copy"),
}
CLASS_OF = {q: c for c, qs in QUANTITY_CLASS.items() for q in qs}
FAMILY_RATES = {"moe": "ffn"}  # a mixture of experts is the block's FFN on the device model (block_times' products)


def quantity_class(name: str) -> str:
    """fwd, bin (input gradients), wgrad (weight gradients) or linear (products with the weights alone); a
    quantity this table does not know is priced as an input gradient (a backward-like pass through the layer)."""
    return CLASS_OF.get(name, "bin")


def projection_gemm(cfg, lay: Layout, kind: str, cls: str):
    """The (m, n, k) of a rule's own layer per micro-batch on one GPU, and its full-width FLOPs (analytic/models/
    executed.py): PEPITA's F and LRA's head feedback take the output-wide error to d (their k, the output, split
    over the t GPUs as the head's); DFA's B (the error at the head's input, d wide) and TP's, DTP's and LRA's block
    maps are d x d (their n split over t). Rows: one per output position, or one per sequence under a classifier."""
    b, t, d = lay.micro_batch, lay.tp, cfg.d_model
    rows = b * (1 if cfg.classes else cfg.tgt_len // lay.cp)
    if kind in ("error_projection", "head_feedback"):
        out = cfg.classes or cfg.vocab
        shape, full = (rows, d, max(1, out // t)), 2.0 * rows * d * out
    else:
        shape, full = (rows, max(1, d // t), d), 2.0 * rows * d * d
    if cls == "wgrad":
        shape = (shape[1], shape[2], shape[0])
    return shape, full


def kernel_rates(cfg, lay: Layout, dev: DeviceModel, bt: dict, ht: dict, bp: dict) -> dict:
    """Seconds per FLOP of the engine's count, per (layer family, class): BP's kernels of that family and class on
    the device model over BP's FLOPs of them (so BP's step is its kernels' time), the products with the weights alone
    over their own FLOPs; {matmul, attention} each."""
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    b = lay.micro_batch / lay.cp  # sequences' worth of tokens per micro-batch on this GPU
    bp_flops = {}
    for (phase, name, kind, in_block), flops in bp["entries"].items():
        if in_block == "mtp":  # (multi-token prediction's modules: priced at the rates of the blocks' own kernels)
            continue
        fam = FAMILY_RATES.get(bp["families"][kind], bp["families"][kind])
        key = (fam, quantity_class(name))
        bp_flops[key] = bp_flops.get(key, 0.0) + flops * b / (blocks if in_block else 1)
    rates = {}
    for source in (bt, ht):
        for (fam, cls), times in source["classes"].items():
            flops = bp_flops.get((fam, cls), 0.0) if cls != "linear" else 0.0
            if flops <= 0:  # the products with the weights alone (or BP has no such work): their own FLOPs
                flops = source["linear_flops"][fam]  # an input or weight gradient of a product costs as many
            zero = {"matmul": 0.0, "attention": 0.0}
            rates[(fam, cls)] = {c: v / flops for c, v in times.items()} if flops > 0 else zero
    return rates


def critical_stage(blocks: int, p: int, bt: dict, ht: dict, split: tuple = ("even", 1, 0),
                   balance_end: bool = False) -> tuple[int | float, bool, str]:
    """The pipeline stage that sets the pace: (its blocks, whether it holds the head, the split in words).

    p dividing the blocks: blocks / p and the head (the last stage). Otherwise the stages hold the ceiling or the
    floor of blocks / p (Megatron-Core's --decoder-first/last-pipeline-num-layers, the Llama 3 405B run's 126
    layers on 16 stages: two stages of 7, the rest 8, Dubey et al. 2024, section 3.3.2): the last stage, with the
    head, holds the floor, and the pace is the slower of a full stage (the ceiling) and the last (the floor plus
    the head), compared by BP's kernel time per micro-batch. A balanced split (nanotron's, plan_facts.stages): the
    stage whose blocks, and the head where it holds it, take the longest."""
    if split[0] != "even" and p > 1:
        from ..plan_facts import stages

        full = sum(bt["fwd"].values()) + sum(bt["bwd"].values())
        head = sum(ht["fwd"].values()) + sum(ht["bwd"].values())
        split_stages = stages(blocks, p, split)
        n, with_head = max(split_stages, key=lambda st: st[0] * full + (head if st[1] else 0.0))
        counts = "/".join(str(k) for k, _ in split_stages)
        return n, with_head, f"balanced by compute (nanotron): blocks per stage {counts}, the head on stage " \
                             f"{next(i for i, st in enumerate(split_stages) if st[1]) + 1}"
    if balance_end and p > 1:  # multi-token prediction's modules make the head's stage heavier than a block or two:
        # it holds the blocks that balance it (Megatron-Core's --decoder-last-pipeline-num-layers; DeepSeek-V3's
        # layout balanced its ends, report section 3.2.1), the other stages the rest, as evenly as they divide
        full = sum(bt["fwd"].values()) + sum(bt["bwd"].values())
        head = sum(ht["fwd"].values()) + sum(ht["bwd"].values())
        best = min(range(0, -(-blocks // p) + 1),
                   key=lambda last: (max(-(-(blocks - last) // (p - 1)) * full, last * full + head), -last))
        rest = -(-(blocks - best) // (p - 1))
        split = f"the head's stage (with multi-token prediction) holds {best} blocks, the others up to {rest}"
        return (rest, False, split) if rest * full >= best * full + head else (best, True, split)
    if blocks % p == 0:
        return blocks / p, True, f"{blocks // p} blocks per stage"
    low, high = blocks // p, blocks // p + 1
    full = sum(bt["fwd"].values()) + sum(bt["bwd"].values())
    head = sum(ht["fwd"].values()) + sum(ht["bwd"].values())
    split = (f"uneven: {blocks % p} stages of {high} blocks, {p - blocks % p} of {low}, the head on a stage of "
             f"{low}")
    return (high, False, split) if high * full >= low * full + head else (low, True, split)


def price(cfg, lay: Layout, dev: DeviceModel, rates: dict, w: dict, phases=None, stage=None) -> dict:
    """{matmul, attention} seconds per micro-batch on the critical stage of the rule's quantities (of ``phases``):
    block layers' FLOPs times the stage's share of the blocks, the model's other layers (head, projections of the
    output error) whole where the stage holds the head. ``stage``: (blocks on it, holds the head); default an even
    split (blocks / p and the head)."""
    b = lay.micro_batch / lay.cp  # sequences' worth of tokens per micro-batch on this GPU
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    on_stage, with_head = stage if stage is not None else (blocks / lay.pp, True)
    out = {"matmul": 0.0, "attention": 0.0}
    for (phase, name, kind, in_block), flops in w["entries"].items():
        if phases is not None and phase not in phases:
            continue
        if in_block is not True and not with_head:  # an end's work, and multi-token prediction's: the head's stage
            continue
        share = flops * b * (on_stage / blocks if in_block is True else 1)
        fam, cls = FAMILY_RATES.get(w["families"][kind], w["families"][kind]), quantity_class(name)
        if fam == "adapter":  # LoRA's rank-r products, at their own shapes, on the stage's blocks
            out["matmul"] += on_stage * adapter_seconds(cfg, lay, dev, w["finetune"], cls)
            continue
        if fam == "projection":
            (M, N, K), full = projection_gemm(cfg, lay, kind, cls)
            out["matmul"] += share * dev.gemm(M, N, K) / full
            continue
        r = rates.get((fam, cls)) or rates.get(("ffn", cls))  # a family without kernels of its own: a product
        for c in out:
            out[c] += share * r[c]
    return out


# ---------------------------------------------------------------------------
# The step


class MicroBatch(NamedTuple):
    """One micro-batch on the critical pipeline stage (:func:`micro_batch`): the first half of :func:`predict_step`,
    which reads the rule, the kernels' layout fields (tensor parallelism, micro-batch, sequence and context
    parallelism, attention, experts, precision, host), the pipeline's depth and split, the recompute and the
    framework's tensor-parallel overlap, and not the data-parallel degree, the sharding, the interleave or the
    batch."""
    dev: DeviceModel
    net: Network
    per_stage: float  # blocks on the critical stage
    ends: float  # 1.0 where the critical stage holds the head
    split: str  # the stage split, in words (critical_stage)
    fwd: dict  # cats -> seconds of the forward
    bwd: dict  # cats -> seconds of the backward (the rule's phases other than the forward)
    rec: dict  # cats -> seconds of the recomputed forwards
    compute_fwd: float
    compute_bwd: float  # the backward's and the recompute's
    tp_fwd: float  # exposed tensor-parallel seconds of the forward
    tp_bwd: float
    ep_fwd: float  # expert-parallel all-to-alls
    ep_bwd: float
    cp_fwd: float  # context-parallel rings, exposed
    cp_bwd: float
    seconds: float  # the micro-batch's seconds on the critical stage (compute and exposed communication)
    tp_bytes: int  # one block's tensor-parallel collective's bytes (b s d activations)
    weight_cast: float  # fp8: one cast of the stage's weights
    recomputed_blocks: float  # blocks' worth of forward recomputed in the backward
    per_block: float  # one block's serialised seconds (the pipeline's fill and drain); 0 without a pipeline
    head_seq: float  # the head's
    fw_block: tuple = (0.0, 0.0)  # of per_block: the forward's seconds and the weight-gradient products' (schedules)
    fw_head: tuple = (0.0, 0.0)  # of head_seq: the same


def micro_batch(cfg, lay: Layout, device, rule: str = "bp", work: dict | None = None,
                memo: dict | None = None) -> MicroBatch:
    """One micro-batch of ``rule`` on the critical stage (:class:`MicroBatch`), kept in ``memo`` under a key naming
    every layout field it reads (:func:`predict_step`'s memo): the layouts of a search that differ only in dp, the
    sharding, the interleave or the batch share it, and its compute is the search's lower bound
    (analytic/layout.py)."""
    memo = {} if memo is None else memo
    key = ("micro", rule, device.name, device.power_w, lay.precision, lay.tp, lay.micro_batch, lay.sequence_parallel, lay.attention,
           lay.ep, lay.host_block_s, lay.cp, lay.elementwise, lay.expert_tp, lay.pp, lay.pipeline_split, lay.recompute,
           lay.checkpoint_every, lay.fp8_weight_cache, lay.tp_overlap, lay.tp_backward_overlap, lay.gpus_per_node,
           lay.nic_gbps, lay.fabric, lay.fp8_tp_gather, lay.recompute_tail, dualpipe_overlap(cfg, lay))
    if key not in memo:
        memo[key] = _micro_batch(cfg, lay, device, rule, work, memo)
    return memo[key]


def _micro_batch(cfg, lay: Layout, device, rule: str, work: dict | None, memo: dict) -> MicroBatch:
    def once(key, compute):
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    prec = PRECISIONS[lay.precision]
    dev = once(("device", device.name, device.power_w, prec.compute, prec.linear),
               lambda: DeviceModel.of(device, prec.compute, prec.linear))
    net = once(("network", device.name, prec.compute, lay.gpus_per_node, lay.nic_gbps, lay.fabric),
               lambda: Network.of(dev.params, lay.gpus_per_node, lay.nic_gbps, dict(lay.fabric) if lay.fabric else None))
    work = work if work is not None else rule_work(cfg, [rule])
    w, bp = work[rule], work["bp"]
    e = prec.activations
    t, p = lay.tp, lay.pp
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    kernels = (device.name, device.power_w, prec.compute, prec.linear, t, lay.micro_batch, lay.sequence_parallel, lay.attention, lay.ep,
               lay.host_block_s, lay.cp, lay.elementwise, lay.expert_tp)

    def kernel_times():
        bt, ht = stack_block_times(cfg, lay, dev, e), head_times(cfg, lay, dev, e)
        return bt, ht, kernel_rates(cfg, lay, dev, bt, ht, bp)

    bt, ht, rates = once(("kernels", *kernels), kernel_times)
    ht = end_times(cfg, bt, ht)  # (the head's stage: with multi-token prediction, its modules too)
    pp_split = stage_split(cfg, lay.pipeline_split)
    per_stage, with_head, split = once(("stage", *kernels, p, pp_split),
                                       lambda: critical_stage(blocks, p, bt, ht, pp_split, cfg.mtp))
    stage = (per_stage, with_head)
    ends = 1.0 if with_head else 0.0
    cats = ("matmul", "attention", "memory", "launch")
    # BP per micro-batch on the critical stage (the last, with the head, unless an uneven split makes a fuller one)
    fwd_bp = {c: per_stage * bt["fwd"][c] + ends * ht["fwd"][c] for c in cats}
    bwd_bp = {c: per_stage * bt["bwd"][c] + ends * ht["bwd"][c] for c in cats}
    # The rule's products priced at their own shapes and classes; memory-bound kernels and launches at BP's mix
    f_ratio = w["forward"] / bp["forward"]
    bwd_total_bp = bp["chain"] + bp["local"]
    chain_ratio = w["chain"] / bwd_total_bp
    local_ratio = w["local"] / bwd_total_bp
    chain_phase = "backward" if w["through"] else "target_propagation"

    def priced():
        return (price(cfg, lay, dev, rates, w, ("forward",), stage),
                price(cfg, lay, dev, rates, w, tuple(ph for ph in RULE_PHASES if ph != "forward"), stage))

    fwd_priced, bwd_priced = once(("price", rule, *kernels, p, pp_split), priced)
    # One block's and the head's own priced phases (the bubble sums the stages other than the critical one)
    def priced_alone(stage_alone):
        return (sum(price(cfg, lay, dev, rates, w, ("forward",), stage_alone).values()),
                sum(price(cfg, lay, dev, rates, w, tuple(ph for ph in RULE_PHASES if ph != "forward"),
                          stage_alone).values()),
                sum(price(cfg, lay, dev, rates, w, (chain_phase,), stage_alone).values()))

    fwd = {c: f_ratio * fwd_bp[c] for c in ("memory", "launch")}
    fwd.update(fwd_priced)
    # fp8 products: the weights cast to fp8 in every micro-batch's forward, or once per step where the framework
    # caches them over the micro-batches (Megatron-Core's is_first_microbatch; Layout.fp8_weight_cache)
    weight_cast = per_stage * bt["weight_cast"]
    if not lay.fp8_weight_cache:
        fwd["memory"] += weight_cast
    bwd = {c: (chain_ratio + local_ratio) * bwd_bp[c] for c in ("memory", "launch")}
    bwd.update(bwd_priced)
    # Recompute (rules with a backward keep an autograd graph; PEPITA and MEMPEPITA keep none)
    rec = {c: 0.0 for c in cats}
    recomputed_share = 0.0  # of each block's forward, recomputed in the backward
    if w["backward"]:
        if lay.recompute == "full":
            recomputed_share = 1.0
        elif lay.recompute == "selective":
            recomputed_share = (blocks // lay.checkpoint_every) / blocks
    rec_block = {c: recomputed_share * bt["fwd"][c] for c in cats}  # one block's recompute
    if w["backward"] and lay.recompute == "attention":
        rec_block["attention"] = bt["core_fwd"]
    recomputed_blocks = recomputed_share * per_stage
    rec_ring_blocks = recomputed_blocks  # blocks whose attention (and context-parallel ring) the recompute repeats
    # A parallel block (x + attn(norm x) + ffn(norm' x)) sums its branches' partial outputs before one reduction
    # (GPT-NeoX's gpt_j_residual: reduce_from_model_parallel_region once per layer, or its reduce-scatter under
    # sequence parallelism); its backward still all-reduces each branch's input gradient (each column-parallel
    # layer's own copy_to_model_parallel_region): one pair per block forward, two backward
    fwd_pairs = 1 if cfg.parallel else 2
    rec_pairs = fwd_pairs * recomputed_share  # tensor-parallel pairs (all-reduces) per block in the recomputed forwards
    rec_core = w["backward"] and lay.recompute == "attention"  # the recompute repeats the attention core alone
    ops = recompute_ops(lay.recompute)
    # A recompute that stops before the block's last product (tail_skipped) leaves out its seconds, the memory-bound
    # work after it and its tensor-parallel reduction (the all-reduce, or the reduce-scatter under sequence
    # parallelism; rec_tp_one below), per block whose forward is recomputed
    tail = w["backward"] and tail_skipped(cfg, lay.recompute_tail, prec.linear is not None)
    flops = {x: f for x, (_, f) in bt["ops_fwd"].items()}
    block_flops = sum(f for x, f in flops.items() if x not in ALIASES)  # (the up projections are parts of q and v)
    rec_tail_blocks = 0.0  # per block, the tails left out of the recomputed forwards
    down_s, after_s, down_flops = bt["tail_fwd"]
    if tail and lay.recompute in ("full", "selective"):
        rec_tail_blocks = recomputed_share
        recomputed_blocks *= 1.0 - down_flops / block_flops
    elif tail and ops is not None:
        ops = ops - {"down"}  # its output is never read: the recompute stops (or the backward graph ends) before it
        rec_tail_blocks = 1.0 if ops & set(bt["ops_fwd"]) & {"gate", "up"} else 0.0  # the FFN's side recomputed,
        # up to its tail (a product the model lacks repeats nothing, so counts no pair to leave out)
    if w["backward"] and ops is not None:  # per-operation: the named products, the core if named, every elementwise
        # kernel (their memory-bound passes and launches); each side's tensor-parallel pair where one of its products
        # repeats; its share of the block's forward FLOPs (the hardware FLOPs below)
        # (a product the model lacks, e.g. gate without a gated FFN, repeats nothing)
        rec_block = {"matmul": sum(bt["ops_fwd"][x][0] for x in ops if x != "core" and x in bt["ops_fwd"]
                                   and not (x in ALIASES and ALIASES[x] in ops)),
                     "attention": bt["fwd"]["attention"] if "core" in ops else 0.0,
                     "memory": bt["fwd"]["memory"], "launch": bt["fwd"]["launch"]}
        recomputed_share = sum(flops.get(x, 0.0) for x in ops if not (x in ALIASES and ALIASES[x] in ops)) / block_flops
        recomputed_blocks = recomputed_share * per_stage
        present = ops & set(bt["ops_fwd"])
        rec_pairs = min(fwd_pairs, (1 if present & ATTENTION_PRODUCTS else 0) +
                        (1 if present & {"gate", "up", "down"} else 0))
        rec_core = "core" in ops
    if rec_tail_blocks:
        rec_block["matmul"] -= (rec_tail_blocks if ops is None else 0.0) * down_s  # (ops: down already dropped)
        rec_block["memory"] -= rec_tail_blocks * after_s
    rec = {c: per_stage * rec_block[c] for c in cats}
    # Tensor parallel: all-reduces (or all-gather + reduce-scatter pairs) of b s d activations per block; under
    # fp8-mixed a framework whose sequence-parallel linears gather fp8 (torchao's Float8ColwiseParallel and
    # Float8RowwiseParallel: the forward's inputs and the backward's output gradients cast before the all-gather,
    # the reduce-scatters in the compute dtype; Layout.fp8_tp_gather) gathers one byte per element
    # (torchtitan's mixture of experts gathers its input through a plain PrepareModuleInputOutput: bf16)
    tp_bytes = lay.micro_batch * cfg.seq_len // lay.cp * cfg.d_model * e
    gathered = tp_bytes // e if (lay.fp8_tp_gather and prec.linear and lay.sequence_parallel) else tp_bytes
    one = net.all_reduce(tp_bytes, t, 1) if not lay.sequence_parallel else \
        net.all_gather(gathered, t, 1) + net.reduce_scatter(tp_bytes, t, 1)
    if cfg.moe and lay.expert_tp != t:  # MoE folding: the mixture's pair runs over its etp GPUs (none at etp 1), on
        et = lay.expert_tp               # the etp / t of the tokens they gather; the attention's pair over t
        ffn_pair = 0.0 if et == 1 else net.all_gather(tp_bytes * et // t, et, 1) + \
            net.reduce_scatter(tp_bytes * et // t, et, 1)
        one = (one + ffn_pair) / 2  # the mean of a block's two pairs (the counts below are two per block)
    elif cfg.moe and gathered != tp_bytes:  # the mixture's pair in bf16 beside the attention's fp8 gather
        one = (one + net.all_gather(tp_bytes, t, 1) + net.reduce_scatter(tp_bytes, t, 1)) / 2
    # multi-token prediction's blocks (mtp_depth) on the head's stage: their pairs and all-to-alls too, not recomputed
    comm_blocks = per_stage + ends * cfg.mtp_depth
    ar_fwd = fwd_pairs * w["passes"] * comm_blocks
    ar_bwd = 2 * comm_blocks if w["backward"] else 0  # the column-parallel layers' input gradients
    # the recomputed forwards', inside the backward, per block: their pairs less the reductions of the tails left out
    rec_tp_one = max(0.0, rec_pairs * one - rec_tail_blocks * (net.reduce_scatter(tp_bytes, t, 1)
                                                               if lay.sequence_parallel else net.all_reduce(tp_bytes, t, 1)))
    tp_fwd_all = ar_fwd * one

    # Expert parallelism: two all-to-alls per mixture-of-experts block and pass (dispatch, combine), two backward,
    # two per recomputed forward; each GPU sends its tokens' k copies but the 1 / ep kept (Lepikhin et al. 2021)
    # (under MoE folding, etp < t, each GPU dispatches its own m / t tokens (sequence parallel) to expert groups of
    # consecutive GPUs, etp apart)
    folded = lay.expert_tp != t
    ep_bytes = (lay.micro_batch * cfg.seq_len // lay.cp * cfg.experts_per_token * cfg.d_model * e * lay.expert_tp // t
                if cfg.moe else 0)
    ep_stride = lay.expert_tp if folded else t * lay.cp  # expert groups of data-parallel replicas, t x cp apart
    ep_one = net.limited_all_to_all(ep_bytes, lay.ep, ep_stride, cfg.experts_per_token, cfg.group_limit,
                                    cfg.expert_groups) if cfg.group_limit else net.all_to_all(ep_bytes, lay.ep, ep_stride)
    # (node-limited routing: each token to at most group_limit groups' nodes, once each, Network.limited_all_to_all)
    # per average block: a mixture's dense first blocks dispatch nothing; multi-token prediction's blocks (mixtures
    # where the decoder's are) each as a mixture block
    mixture_blocks = per_stage * mixture_share(cfg) + ends * cfg.mtp_depth
    ep_fwd = 2 * w["passes"] * mixture_blocks * ep_one if cfg.moe else 0.0
    ep_rec = (2 * per_stage if ops & set(bt["ops_fwd"]) & {"gate", "up", "down"} else 0) \
        if (ops is not None and w["backward"]) else \
        2 * recomputed_blocks  # a recomputed mixture dispatches and combines again
    ep_bwd = ((2 * mixture_blocks if w["backward"] else 0) + ep_rec * mixture_share(cfg)) * ep_one if cfg.moe else 0.0

    # Context parallelism: per block and pass, a ring of cp - 1 steps passing each GPU's keys and values (its s / cp
    # tokens, the kv heads on this GPU) to the next; the backward passes them again with their gradients (twice the
    # bytes). TransformerEngine overlaps each step's send with the attention of the chunk in hand, so only what
    # outlasts the pass's attention is exposed. A ring over GPUs that span nodes waits at its node boundary: every
    # step at a point-to-point send between nodes.
    cp_fwd_one = cp_bwd_one = 0.0
    if lay.cp > 1:
        kv_bytes = 2 * lay.micro_batch * (cfg.seq_len // lay.cp) * (cfg.kv_width // t) * e
        ring = (lay.cp - 1) * net.p2p(kv_bytes, net.spans_nodes(lay.cp, t))
        cp_fwd_one = max(0.0, ring - bt["fwd"]["attention"])
        cp_bwd_one = max(0.0, 2 * ring - bt["bwd"]["attention"])
    cp_fwd = w["passes"] * per_stage * cp_fwd_one
    # the recomputed forwards' rings: whole blocks', or the attention core's alone (Korthikanti's selective)
    cp_rec_blocks = per_stage if rec_core else (0.0 if ops is not None else rec_ring_blocks)
    cp_bwd = (per_stage * cp_bwd_one if w["backward"] else 0.0) + cp_rec_blocks * cp_fwd_one

    compute_fwd = sum(fwd.values())
    compute_bwd = sum(bwd.values()) + sum(rec.values())
    # A framework that overlaps tensor-parallel communication (NeMo's userbuffers, async TP) hides a share of it
    # behind the products of the same pass (Layout.tp_overlap, from config/frameworks.yaml)
    # Megatron-LM (since 2021-09) launches the backward's input-gradient all-reduce (with sequence parallelism, its
    # reduce-scatter) asynchronously and computes the weight gradient meanwhile: those alone hide, not the recomputed
    # forwards' (Layout.tp_backward_overlap, from config/frameworks.yaml)
    tp_fwd = _exposed(tp_fwd_all, compute_fwd, lay.tp_overlap)
    hidden = lay.tp_overlap if lay.tp_backward_overlap is None else max(lay.tp_overlap, lay.tp_backward_overlap)

    def tp_backward_exposed(grads, recomputed, window):
        """The backward's exposed tensor-parallel seconds: the input gradients' collectives and the recomputed
        forwards' hide together where the framework overlaps both alike, else each at its own share."""
        if hidden == lay.tp_overlap:
            return _exposed(grads + recomputed, window, lay.tp_overlap)
        return _exposed(grads, window, hidden) + _exposed(recomputed, window, lay.tp_overlap)

    tp_bwd = tp_backward_exposed(ar_bwd * one, per_stage * rec_tp_one, compute_bwd)
    if dualpipe_overlap(cfg, lay) and ep_fwd + ep_bwd > 0:  # DualPipe hides them behind the paired chunk's compute
        scale = _contended(ep_fwd + ep_bwd, compute_fwd + compute_bwd, 1.0) / (ep_fwd + ep_bwd)
        ep_fwd, ep_bwd = ep_fwd * scale, ep_bwd * scale
    per_micro = compute_fwd + compute_bwd + tp_fwd + tp_bwd + ep_fwd + ep_bwd + cp_fwd + cp_bwd

    # The pipeline's fill and drain: every stage other than the critical one once, each at its serialised
    # seconds per micro-batch (predict_step's bubble)
    per_block = head_seq = 0.0
    if p > 1:
        def serialised(kt, alone, rec_one, passes, back, recomputed, rec_tp):
            """One block's (or the head's) serialised seconds per micro-batch, as the stage's micro-batch is composed."""
            fwd_one = alone[0] + f_ratio * (kt["fwd"]["memory"] + kt["fwd"]["launch"]) + \
                (kt.get("weight_cast", 0.0) if not lay.fp8_weight_cache else 0.0)  # fp8 weights cast per micro-batch
            ring = kt is bt  # the head has no attention, so no context-parallel ring
            out = fwd_one + _exposed(passes * one, fwd_one, lay.tp_overlap) + \
                (passes / fwd_pairs * cp_fwd_one if ring else 0)  # (a ring per pass, fwd_pairs pairs per pass)
            forward = out
            if w["through"]:
                bwd_one = alone[1] + (chain_ratio + local_ratio) * (kt["bwd"]["memory"] + kt["bwd"]["launch"]) + \
                    sum(rec_one.values())
                out += bwd_one + tp_backward_exposed(back * one, rec_tp, bwd_one)
                if ring:
                    rec_rings = 1.0 if (back and rec_core) else (0.0 if ops is not None else recomputed / fwd_pairs)
                    out += (cp_bwd_one if back else 0.0) + rec_rings * cp_fwd_one
            elif w["chain"]:
                out += alone[2] + chain_ratio * (kt["bwd"]["memory"] + kt["bwd"]["launch"])
            wgrad = sum(c["matmul"] for (_, kind), c in kt["classes"].items() if kind == "wgrad") \
                if w["through"] and w["backward"] else 0.0  # the weight-gradient products (a split backward's W)
            return out, (forward, min(wgrad, out - forward))

        block_priced = once(("price-block", rule, *kernels), lambda: priced_alone((1, False)))
        head_priced = once(("price-head", rule, *kernels), lambda: priced_alone((0, True)))
        per_block, fw_block = serialised(bt, block_priced, rec_block, fwd_pairs * w["passes"],
                                         2 if w["backward"] else 0, rec_pairs if w["backward"] else 0,
                                         rec_tp_one if w["backward"] else 0.0)
        head_seq, fw_head = serialised(ht, head_priced, {}, 0, 0, 0, 0.0)
    else:
        fw_block = fw_head = (0.0, 0.0)
    return MicroBatch(dev, net, per_stage, ends, split, fwd, bwd, rec, compute_fwd, compute_bwd, tp_fwd, tp_bwd,
                      ep_fwd, ep_bwd, cp_fwd, cp_bwd, per_micro, tp_bytes, weight_cast, recomputed_blocks,
                      per_block, head_seq, fw_block, fw_head)


def pipeline_seconds(cfg, lay: Layout, one: MicroBatch, w: dict, interleave: int | None = None) -> tuple:
    """(point-to-point seconds, bubble seconds) per step of the pipeline of ``lay`` (0, 0 without one), from its
    micro-batch ``one`` (:func:`micro_batch`) and the rule's work ``w``; ``interleave`` in place of the layout's
    (the layout search's lower bound prices a group's fewest sends and smallest bubble)."""
    t, p, dp = lay.tp, lay.pp, lay.dp
    if p == 1:
        return 0.0, 0.0
    v = lay.interleave if interleave is None else interleave
    M = lay.accumulation
    net = one.net
    inter = net.spans_nodes(2, t * lay.cp * dp) or t * lay.cp * dp >= net.gpus_per_node
    send = net.p2p(one.tp_bytes / t, inter)  # Megatron's scatter/gather: each of the t GPUs sends 1/t
    directions = 1 + (1 if w["through"] else 0)
    pp_comm = M * v * directions * send
    if w["broadcast"]:  # DFA: the output error to every stage, a tree broadcast
        pp_comm += M * math.ceil(math.log2(p)) * send
    # 1F1B over stages of unequal times t_i per micro-batch: the first micro-batch fills and the last drains
    # every stage once, the rest pass at the pace of the slowest, so the step is m t_max + sum of the other
    # stages' t_i (with v interleaved chunks per GPU, a fill and drain of 1 / v of that). The stages other than
    # the critical one hold the remaining blocks, and the head unless the critical stage holds it: a head that
    # makes the last stage the slowest does not lengthen the fill and drain of the others.
    # Another schedule idles each other stage at its own rate (schedules.rate: the forward F, the weight gradients W
    # and the rest of the backward B of a stage's micro-batch), DualPipe fewer of them from both ends
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    schedule = schedules.effective(lay.schedule, lay.interleave)
    if schedule in ("1f1b", "interleaved"):
        bubble = ((blocks - one.per_stage) * one.per_block + (1.0 - one.ends) * one.head_seq) / v
        return pp_comm, bubble
    schedules.check_schedule(schedule, p, v, M, w["through"] and w["backward"], w.get("rule", "this rule"))

    def at_rate(total, fw):
        f, wg = fw
        return schedules.rate(schedule, f, total - f - wg, wg)

    pp_comm *= schedules.sends(schedule)
    bubble = schedules.others_scale(schedule, p) * ((blocks - one.per_stage) * at_rate(one.per_block, one.fw_block)
                                                    + (1.0 - one.ends) * at_rate(one.head_seq, one.fw_head))
    return pp_comm, bubble


def predict_step(cfg, lay: Layout, device, rule: str = "bp", work: dict | None = None,
                 memo: dict | None = None) -> StepPrediction:
    """The predicted step of ``rule`` with this layout on ``device`` (a catalogue Device).

    ``memo``: a dict shared by calls on the same ``cfg`` and ``device`` (the layout search, analytic/layout.py):
    the pieces that depend on a few layout fields only (the kernels' times per tensor-parallel degree and
    micro-batch, each rule's priced phases per stage, the data-parallel collectives' seconds per phase) are kept
    there under keys naming every field they read, so that a search over thousands of layouts computes each once.
    The result is the same number with or without it (tests/test_layout.py)."""
    memo = {} if memo is None else memo

    def once(key, compute):
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    check_layout(cfg, lay)
    check_precision(lay.precision, device)
    work = work if work is not None else rule_work(cfg, [rule])
    w = work[rule]
    one_micro = micro_batch(cfg, lay, device, rule, work, memo)
    (dev, net, _, _, split, fwd, bwd, rec, compute_fwd, compute_bwd, tp_fwd, tp_bwd, ep_fwd, ep_bwd, cp_fwd, cp_bwd,
     per_micro, _, weight_cast, recomputed_blocks, _, _, _, _) = one_micro
    prec = PRECISIONS[lay.precision]
    t, p, dp = lay.tp, lay.pp, lay.dp
    M = lay.accumulation
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    cats = ("matmul", "attention", "memory", "launch")
    pp_split = stage_split(cfg, lay.pipeline_split)
    pp_comm, bubble = pipeline_seconds(cfg, lay, one_micro, w)  # the pipeline's sends and bubble

    # Data parallel (and ZeRO) over dp ranks, stride t
    facts, trained = once(("facts", rule), lambda: (lambda f: (f, float(w.get("trained", f.per_rule.loc[rule, "trained"]))))(
        model_facts(cfg, [rule], "adam")))
    share = once(("share", rule, t, p, lay.ep, lay.expert_tp, pp_split),
                 lambda: model_share(facts, t, p, lay.ep * lay.expert_tp / t, pp_split))
    params_gpu = facts.parameters * share
    trained_gpu = trained * share
    if not w["changes_feedback"]:
        trained_gpu = min(trained_gpu, params_gpu)
    stage = ZERO_STAGE[lay.sharding]
    dp_comm, dp_bytes, dp_count, copies = 0.0, 0, 0, 0.0
    if dp * lay.cp > 1:  # the gradients are reduced over the dp x cp ranks that hold the same weights
        def collectives_priced():
            ops = data_parallel_collectives(cfg, lay, rule, w, share)
            copied = lay.shard_copies and lay.sharding != "none"
            return (ops, dp_phase_seconds(ops, net, lay),
                    (sum(c.bytes for c in ops.micro_batch), sum(c.bytes for c in ops.step)),
                    (shard_copy_seconds(ops.micro_batch, dev, lay.precision) if copied else 0.0,
                     shard_copy_seconds(ops.step, dev, lay.precision) if copied else 0.0))

        collectives, sums, (micro_bytes, step_bytes), (copy_micro, copy_step) = once(
            ("dp", rule, device.name, prec.compute, lay.precision, t, p, dp, lay.cp, lay.ep, lay.expert_tp,
             lay.sharding, lay.dp_rails, lay.replicate, lay.shard_copies, lay.grad_reduce, lay.zero1_sync, lay.zero_reduce, pp_split,
             lay.gpus_per_node, lay.nic_gbps, lay.fabric, lay.fp8_gather), collectives_priced)
        dp_comm = dp_exposed(sums, M, compute_fwd, compute_bwd, dp_overlap_of(lay), lay.gather_prefetch)
        dp_bytes = M * micro_bytes + step_bytes
        dp_count = M * len(collectives.micro_batch) + len(collectives.step)
        copies = M * copy_micro + copy_step  # FSDP2's copies through its collectives' buffers (shard_copies)
    # Optimizer: a memory-bound pass over this GPU's (ZeRO-1+: sharded) master weights, state, gradients, weights
    opt_params = trained_gpu / (lay.shard if stage >= 1 else 1)
    opt_bytes = opt_params * (2 * prec.master + 2 * prec.state * lay.optimizer_slots + prec.grads + prec.weights)
    optimizer = dev.memory(opt_bytes) + (weight_cast if lay.fp8_weight_cache else 0.0)
    if lay.offload != "none":  # the optimizer on the host: its PCIe copies and the CPU's step in place of the GPU's pass
        # (the GPUs sharing the host: a node's, or fewer where the run has fewer)
        per_node = min(lay.gpus, int(lay.gpus_per_node or dev.params["gpus_per_node"]))
        host = {**dev.params, **{k: v for k, v in (lay.fabric or ()) if k in offload.HOST_KEYS}}  # a cluster's own
        moved = offload.seconds(lay.offload, opt_params, params_gpu / lay.shard, per_node, prec, lay.optimizer_slots,
                                host, M, compute_fwd, compute_bwd)
        optimizer = sum(moved.values()) + (weight_cast if lay.fp8_weight_cache else 0.0)

    parts = {c: M * (fwd[c] + bwd[c] + rec[c]) for c in cats}
    parts["memory"] += copies  # FSDP2's copies into and out of its collectives' flat buffers
    dequantize = M * qlora_dequantize_seconds(cfg, lay, dev, w, facts, share, recomputed_blocks)
    parts["memory"] += dequantize
    parts.update({"comm_tp": M * (tp_fwd + tp_bwd), "comm_dp": dp_comm, "comm_pp": pp_comm, "bubble": bubble,
                  "optimizer": optimizer, "comm_ep": M * (ep_fwd + ep_bwd), "comm_cp": M * (cp_fwd + cp_bwd)})
    step = M * per_micro + bubble + dp_comm + pp_comm + optimizer + copies + dequantize
    peak = dev.products.peak  # fp8-mixed: the fp8 peak (Precision.peak_dtype)
    model_flops = lay.global_batch * w["total"]
    hw_flops = model_flops + (lay.global_batch * w["forward"] / max(1, w["passes"]) *
                              (recomputed_blocks * p / max(1, blocks)) if w["backward"] else 0.0)
    return StepPrediction(step, parts, model_flops, hw_flops, model_flops / (step * lay.gpus * peak),
                          hw_flops / (step * lay.gpus * peak), {**dev.sources, "host_block_s": HOST_BLOCK_SOURCE},
                          dp_bytes, dp_count, split if p > 1 else "")


