"""Data-parallel communication of one training step, from shapes alone (no torch): which mechanism each rule
uses, which shardings admit it, and the collectives of one step with their bytes (docs/distributed.md).

Mechanisms, derived from each rule's declared phases (``RuleSpec.phases``):

- ``hooks``: the rule's step is one forward through the model, one autograd backward and the optimizer (BP, FA,
  KP; WM adds its mirror steps, which every rank repeats identically and communicate nothing). torch's own
  machinery reduces the gradients: DistributedDataParallel's bucketed all-reduce under ``ddp``, FSDP2's
  (``fully_shard``) all-gathers and reduce-scatters under ``zero2`` and ``fsdp``.
- ``explicit``: the step builds its updates outside one model forward and backward (PEPITA and MEMPEPITA write
  ``.grad`` by hand; DFA, TP, DTP and LRA run the model stage by stage with several backward calls), so no
  framework hook sees it; before the optimizer step every gradient the optimizer holds (trained feedback
  included: TP's and DTP's inverses, LRA's error weights) is averaged by one all-reduce of one flat buffer.
  DFA's fixed projections and PEPITA's fixed F are no parameters of the optimizer, so they are never sent.

The collectives of one step (:func:`step_collectives`), exact in bytes against the meter: the explicit
all-reduce; DDP's buckets (:func:`ddp_buckets`, from the per-tensor listing :func:`parameter_tensors` in
gradient-ready order); FSDP2's per-unit all-gathers and reduce-scatters with dim-0 padding
(:func:`fsdp_collectives`). Their seconds: :func:`comm_seconds` under a collectives calibration. The same functions
give ``trainingcost plan`` its data-parallel traffic (:func:`plan_collectives`, priced on the plan's network model).
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass

from ..config.choices import BACKENDS, PARALLEL
from ..config.errors import ConfigError
from . import layers as L
from .catalogue import rule, rule_names

HOOK_PHASES = frozenset({"forward", "backward", "optimizer_step", "mirror"})
SHARDED_PHASES = frozenset({"forward", "backward", "optimizer_step"})  # a mirror step reads whole weights


def mechanism(name: str) -> str:
    """``hooks`` (torch's DDP / FSDP2 reduce the gradients) or ``explicit`` (one all-reduce before the step)."""
    return "hooks" if set(rule(name).phases) <= HOOK_PHASES else "explicit"


def admitted(name: str, parallel: str) -> bool:
    """Whether ``parallel`` can run rule ``name``: ddp runs every rule; the shardings need a rule whose
    parameters are only read inside one forward and backward through the model (FSDP2 gathers them there)."""
    if parallel == "ddp":
        return True
    return set(rule(name).phases) <= SHARDED_PHASES


def sharded_rules() -> tuple[str, ...]:
    return tuple(n for n in rule_names() if admitted(n, "zero2"))


def check_parallel(name: str, parallel: str, nproc: int, backend: str = "auto", replicate: int = 1) -> None:
    """One-line errors naming the field, before any process starts."""

    if nproc < 1:
        raise ConfigError(f"nproc: must be at least 1 (got {nproc})")
    if isinstance(replicate, bool) or not isinstance(replicate, int) or replicate < 1:
        raise ConfigError(f"replicate: a positive integer (got {replicate!r})")
    if replicate > 1 and parallel not in ("zero2", "fsdp"):
        raise ConfigError(f"replicate: {replicate} replica groups shard inside each group: parallel zero2 or fsdp "
                          f"(got {parallel})")
    if replicate > 1 and (nproc % replicate or nproc // replicate < 2):
        allowed = [str(r) for r in range(2, nproc // 2 + 1) if nproc % r == 0]
        raise ConfigError(f"replicate: {replicate} replica groups of the {nproc} processes must each hold two or "
                          f"more (allowed with nproc {nproc}: {', '.join(['1', *allowed])})")
    if parallel not in PARALLEL:
        raise ConfigError(f"parallel: {parallel!r} is not allowed (allowed: {', '.join(PARALLEL)})")
    if backend not in BACKENDS:
        raise ConfigError(f"backend: {backend!r} is not allowed (allowed: {', '.join(BACKENDS)})")
    if not admitted(name, parallel):
        raise ConfigError(
            f"parallel: {parallel} shards parameters through FSDP2's forward and backward hooks, which rule {name}'s "
            f"step bypasses (phases {', '.join(rule(name).phases)}); allowed with {parallel}: "
            f"{', '.join(sharded_rules())}; every rule runs under ddp")


def check_parallel_model(cfg, parallel: str, nproc: int) -> None:
    """A mixture of experts across processes: an expert that gets no token on one rank has no gradient there, so
    DDP's buckets (and the explicit rules' flat all-reduce) wait for it forever (a deadlock, seen under gloo); FSDP2's
    reduce-scatters fill such gradients with zeros. One line before any process starts."""
    if nproc > 1 and getattr(cfg, "moe", False) and parallel == "ddp":
        raise ConfigError(f"parallel: ddp with a mixture of experts ({cfg.experts} experts) is not supported across "
                          f"{nproc} processes: an expert that gets no token on one rank leaves its gradient missing "
                          "there and the all-reduce waits for it; allowed: fsdp or zero2 (rules "
                          f"{', '.join(sharded_rules())}), or --nproc 1")


@dataclass(frozen=True)
class Collective:
    """One collective of a step: its op, the bytes of the buffer each rank passes (all-reduce and broadcast: the
    tensor; all-gather: the gathered output; reduce-scatter: the unscattered input), the group size and dtype."""

    op: str
    bytes: int
    group: int
    dtype: str
    phase: str


# DistributedDataParallel's defaults (torch/nn/parallel/distributed.py): 25 MiB buckets, a first bucket of 1 MiB
# (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES) when the buckets are rebuilt after the first iteration.
BUCKET_CAP_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 2**20
INDEX_BYTES = 4  # the rebuilt bucket indices are broadcast as int32
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}


def gradient_bytes(cfg, name: str, dtype: str) -> tuple[int, int]:
    """(bytes, tensors) of the gradients rule ``name`` produces in one step: the memory model's ``gradients``
    (every trained parameter, trained feedback included; PEPITA's frozen relative tables excluded) and the number
    of trained tensors (from Adam's per-tensor step scalars in the same model). One memory table of every rule per
    model and dtype, kept."""
    return _gradients(cfg, dtype)[name]


@lru_cache(maxsize=64)
def _gradients(cfg, dtype: str) -> dict:
    from ..config.sweep import configs_frame
    from .memory import STEP_SCALAR_BYTES, memory_table

    table = memory_table(configs_frame([("comm", cfg)]), list(rule_names()), dtypes=(dtype,), optimizers=("adam",),
                         executed=False)
    out = {}
    for _, row in table.iterrows():
        grads = int(row["gradients"])
        out[row["rule"]] = (grads, (int(row["optimizer_state"]) - 2 * grads) // STEP_SCALAR_BYTES["adam"])
    return out


# -- the parameters, tensor by tensor ----------------------------------------------------------------------------
# What bucketing (DDP) and sharding (FSDP2) act on: each parameter tensor's shape, in the order the model registers
# it (``Transformer.parameters()``: train/model.py builds its modules from the same layer plan, analytic/layers.py).


def _linear(name: str, d_in: int, d_out: int, bias: bool, feedback: bool) -> list[tuple[str, tuple[int, ...]]]:
    """``nn.Linear``'s weight [out, in] and bias [out]; then KP's B, a parameter of W's shape registered after
    them (rules/kp/step.py)."""
    out = [(f"{name}.weight", (d_out, d_in))]
    if bias:
        out.append((f"{name}.bias", (d_out,)))
    if feedback:
        out.append((f"{name}.feedback", (d_out, d_in)))
    return out


def _ffn(cfg, layer: str, width: int, feedback: bool) -> list[tuple[str, tuple[int, ...]]]:
    ups = ("gate", "up") if cfg.gated else ("up",)
    return ([t for up in ups for t in _linear(f"{layer}.{up}", cfg.d_model, width, cfg.out_bias, feedback)]
            + _linear(f"{layer}.down", width, cfg.d_model, cfg.out_bias, feedback))


def _layer_tensors(cfg, layer: str, kind: str, stack: str, feedback: bool) -> list[tuple[str, tuple[int, ...]]]:
    d = cfg.d_model
    # a block's norms are AddNorm modules (train/model.py: the branch norms, and Gemma 2's post norms of kind norm),
    # holding the norm as .norm; a stack's final and embedding norms are the norm module itself
    parts = layer.split(".")
    in_block = len(parts) > 2 and parts[1].isdigit() and not (parts[0] == L.MTP and kind == "norm")  # (multi-token
    # prediction's own norms are norm modules, as a stack's final norm)
    norm = [(f"{layer}.norm.weight" if kind == "add_norm" or in_block else f"{layer}.weight", (d,))]
    if cfg.norm == "layernorm":  # LayerNorm: gamma and beta; RMSNorm: gamma; OLMo's non-parametric norm: none
        norm.append((norm[0][0].replace(".weight", ".bias"), (d,)))
    if kind in ("add_norm", "norm"):
        return norm if cfg.norm != "nonparametric" else []
    if kind == "embedding":
        return [(f"{layer}.weight", (cfg.vocab, d))]
    if kind == "token_type_embedding":
        return [(f"{layer}.table.weight", (cfg.type_vocab, d))]
    if kind == "positional_encoding":
        return [(f"{layer}.table.weight", (cfg.position_rows(stack), d))] if cfg.positions == "learned" else []
    if kind == "relative_position":
        return [(f"{layer}.table.weight", (cfg.relative_buckets, cfg.heads))]
    if kind == "latent_attention":  # train/model.py's LatentAttention, in its registration order
        h, rq, rkv, rope = cfg.heads, cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_rope_head_dim
        q = (_linear(f"{layer}.q_a", d, rq, False, feedback) + [(f"{layer}.q_norm.weight", (rq,))]
             + _linear(f"{layer}.q_b", rq, h * cfg.q_head, False, feedback)) if rq else \
            _linear(f"{layer}.q", d, h * cfg.q_head, False, feedback)
        return (q + _linear(f"{layer}.kv_a", d, rkv + rope, False, feedback) + [(f"{layer}.kv_norm.weight", (rkv,))]
                + _linear(f"{layer}.kv_b", rkv, h * (cfg.head_dim + cfg.v_head), False, feedback)
                + _linear(f"{layer}.o", h * cfg.v_head, d, False, feedback))
    if kind in L.ATTENTION_KINDS:
        a, kv = cfg.attn_width, cfg.kv_width
        return (_linear(f"{layer}.q", d, a, cfg.qkv_bias, feedback)
                + _linear(f"{layer}.k", d, kv, cfg.qkv_bias, feedback)
                + _linear(f"{layer}.v", d, kv, cfg.qkv_bias, feedback)
                + _linear(f"{layer}.o", a, d, cfg.o_bias, feedback)
                + ([(f"{layer}.q_norm.weight", (cfg.head_dim,)), (f"{layer}.k_norm.weight", (cfg.head_dim,))]
                   if cfg.qk_norm == "head" else [])
                + ([(f"{layer}.q_norm.weight", (a,)), (f"{layer}.k_norm.weight", (kv,))]
                   if cfg.qk_norm == "projection" else []))
    if kind == "ffn":  # (a mixture of experts' dense first blocks: dense_ff wide)
        return _ffn(cfg, layer, cfg.dense_width if cfg.moe else cfg.d_ff, feedback)
    if kind == "mtp_projection":  # multi-token prediction's projection, 2d -> d, no bias
        return _linear(layer, 2 * d, d, False, feedback)
    if kind == "moe":  # train/model.py's MixtureOfExperts: the router, each expert, the shared expert and its gate
        out = _linear(f"{layer}.router", d, cfg.experts, False, feedback)
        for i in range(cfg.experts):
            out += _ffn(cfg, f"{layer}.experts.{i}", cfg.d_ff, feedback)
        if cfg.shared_expert_ff:
            out += _ffn(cfg, f"{layer}.shared_expert", cfg.shared_expert_ff, feedback)
            out += _linear(f"{layer}.shared_expert_gate", d, 1, False, feedback) if cfg.shared_expert_gate else []
        return out
    raise ConfigError(f"model: layer kind {kind!r} has no parameter listing in the communication model")


def parameter_units(cfg, name: str) -> list[tuple[str, list[tuple[str, tuple[int, ...]]]]]:
    """(A fresh list each call of the listing below, computed once per model and rule.)"""
    return [(unit, list(tensors)) for unit, tensors in _parameter_units(cfg, name)]


@lru_cache(maxsize=256)
def _parameter_units(cfg, name: str) -> tuple:
    """The trained parameters of rule ``name``'s model, by FSDP2 unit, each in registration order: ``""`` (the
    root: every stack's embedding tables and norms, the final norms, the head; a tied table once) and then each
    block (``encoder.0``, ...; train/distributed.py shards each block apart), in forward order. Listed for the rules
    whose gradients torch's hooks reduce (``mechanism == "hooks"``): the model's parameters plus KP's B per weight
    matrix (FA's and WM's B are buffers, never sent)."""
    memory = rule(name).memory
    feedback = memory.feedback == "weights" and memory.trains_feedback
    root: list = []
    blocks: dict[str, list] = {}
    for layer, kind in L.layer_plan(cfg):
        parts = layer.split(".")
        stack = parts[0] if parts[0] in ("encoder", "decoder") else ""
        if parts[0] == L.MTP and kind in ("embedding", *L.HEAD_KINDS):
            continue  # multi-token prediction's embedding and head hold the model's tables
        if kind in L.HEAD_KINDS:  # a tied head's weight is the first stack's table
            tensors = [] if cfg.tie_embeddings else [(f"{layer}.weight", (cfg.out_width, cfg.d_model))]
            if cfg.head_bias:
                tensors.append((f"{layer}.bias", (cfg.out_width,)))
            if feedback:
                tensors.append((f"{layer}.feedback", (cfg.out_width, cfg.d_model)))
            root += tensors
        elif kind == "embedding" and (cfg.tie_embeddings or cfg.shared_embedding) and stack != cfg.stacks[0]:
            continue  # the first stack's table, shared (tied, or T5 v1.1's shared embedding)
        elif len(parts) > 2 and parts[1].isdigit() and parts[0] != L.MTP:  # (multi-token prediction's modules: the root's)
            blocks.setdefault(f"{parts[0]}.{parts[1]}", []).extend(_layer_tensors(cfg, layer, kind, stack, feedback))
        else:
            root += _layer_tensors(cfg, layer, kind, stack, feedback)
    return tuple((unit, tuple(tensors)) for unit, tensors in [("", root), *blocks.items()])


def parameter_tensors(cfg, name: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every trained parameter in ``model.parameters()`` order (DDP's parameter order). The root's tensors
    interleave with the blocks' there: the stacks' end layers, then their blocks, then the head."""
    return _registration_order(cfg, parameter_units(cfg, name))


def _registration_order(cfg, units) -> list[tuple[str, tuple[int, ...]]]:
    """The tensors layer by layer in the plan's order, each layer's in their listed order: a tensor belongs to every
    layer whose name is the tensor's or a dotted prefix of it."""
    everything = {n: shape for _, tensors in units for n, shape in tensors}
    index = {layer: i for i, (layer, _) in reversed(list(enumerate(L.layer_plan(cfg))))}  # first index per name
    keyed = []
    for position, n in enumerate(everything):
        parts = n.split(".")
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            if prefix in index:
                keyed.append((index[prefix], position, n))
    return [(n, everything[n]) for _, _, n in sorted(keyed)]


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def padded_numel(shape: tuple[int, ...], world: int) -> int:
    """FSDP2's elements of one parameter across ``world`` ranks: dim 0 padded up to a multiple of ``world``
    (``FSDPParam``: each rank holds ``ceil(dim0 / world)`` rows; torch/distributed/fsdp/_fully_shard/_fsdp_param.py)."""
    return world * -(-shape[0] // world) * numel(shape[1:])


def step_collectives(cfg, name: str, parallel: str, world: int, dtype: str, step: int,
                     scale: float = 1.0, blocks: int | None = None) -> list[Collective]:
    """The collectives one rank issues in training step ``step`` (1-based) of rule ``name`` under ``parallel``
    on ``world`` ranks, in order, with their bytes (equal to the meter: tests/test_distributed.py).

    - explicit rules: one all-reduce of every gradient, flat, before the optimizer step;
    - DDP: step 1 reduces every gradient in one bucket (DDP disables bucketing until it has seen the backward's
      order, ``find_unused_parameters=False``); at the start of step 2 it broadcasts the rebuilt buckets (the
      parameter indices and one more int32, then one int32 per bucket), and from then on reduces one bucket
      per all-reduce: a first of 1 MiB, then 25 MiB each, in the order gradients become ready.

    ``scale`` and ``blocks``: the plan's share of the listed tensors on one GPU under tensor and pipeline
    parallelism (:func:`plan_collectives`); 1 and None (the whole model, what a measured run holds) by default.
    """
    check_parallel(name, parallel, world)
    if world == 1:
        return []
    if mechanism(name) == "explicit":
        return [Collective("all_reduce", round(scale * gradient_bytes(cfg, name, dtype)[0]), world, dtype,
                           "optimizer_step")]
    if parallel != "ddp":
        return fsdp_collectives(cfg, name, parallel, world, dtype, scale, blocks)
    if step >= 3:  # the steady state: neither the whole-gradient bucket nor the rebuild's broadcasts
        return [Collective("all_reduce", size, world, dtype, "backward")
                for size in ddp_buckets(cfg, name, dtype, scale=scale)]
    grads, tensors = gradient_bytes(cfg, name, dtype)
    buckets = [round(scale * grads)] if step == 1 else ddp_buckets(cfg, name, dtype, scale=scale)
    out = []
    if step == 2:
        out += [Collective("broadcast", (tensors + 1) * INDEX_BYTES, world, "int32", "forward"),
                Collective("broadcast", len(buckets) * INDEX_BYTES, world, "int32", "forward")]
    out += [Collective("all_reduce", size, world, dtype, "backward") for size in buckets]
    return out


def ready_order(cfg, name: str) -> list[tuple[str, tuple[int, ...]]]:
    """(A fresh list each call of the order below, computed once per model and rule.)"""
    return list(_ready_order(cfg, name))


@lru_cache(maxsize=256)
def _ready_order(cfg, name: str) -> tuple:
    """The parameters in the order their gradients are accumulated in a backward (DDP's rebuilt order): the
    modules in reverse registration order (autograd runs the backward from the head down to the embeddings, and
    inside a layer from its last product to its first: o, v, k, q; down, up, gate), and inside one module its
    tensors in registration order (weight, bias, KP's B: the accumulations of one backward node run in the order of
    its outputs). A table tied to the head is ready when its last use, the first stack's embedding, is done."""
    modules: dict[str, list] = {}
    for tensor, shape in parameter_tensors(cfg, name):
        modules.setdefault(tensor.rsplit(".", 1)[0], []).append((tensor, shape))
    return tuple(t for module in reversed(list(modules)) for t in modules[module])


def ddp_buckets(cfg, name: str, dtype: str, first_cap: int = FIRST_BUCKET_BYTES,
                cap: int = BUCKET_CAP_BYTES, scale: float = 1.0) -> list[int]:
    """The bytes of DDP's rebuilt buckets, in the order they are all-reduced (from step 2 on).

    ``Reducer::rebuild_buckets`` (torch/csrc/distributed/c10d/reducer.cpp) assigns the parameters, in the order
    their gradients became ready in step 1's backward, with ``compute_bucket_assignment_by_size`` and the limits
    ``[first_bucket_bytes_cap, bucket_bytes_cap]`` (1 MiB and 25 MiB when ``bucket_cap_mb`` is left unset, as
    train/distributed.py leaves it; set, it is both limits: ``_BucketCapacityConfig`` in
    torch/nn/parallel/distributed.py): a tensor joins the open bucket (one per dtype and device), and the
    bucket closes as soon as its bytes reach the limit (so it may exceed it by its last tensor); after the first,
    every bucket has the second limit; the last one holds what is left. Buckets keep the ready order (no sort) and
    are all-reduced in it. The ready order (:func:`ready_order`) is checked against the meter on models of several
    buckets (tests/test_comm_model.py).

    ``scale`` (the plan under tensor or pipeline parallelism, :func:`plan_collectives`): every tensor's bytes
    times the GPU's share of the model, so the buckets are those of the shard a GPU holds (approximately: the
    shard's tensors in the whole model's ready order); 1 (exact) by default."""
    size = DTYPE_BYTES[dtype] * scale
    buckets, current, limit = [], 0, first_cap
    for _, shape in ready_order(cfg, name):
        current += numel(shape) * size
        if current >= limit:
            buckets.append(round(current))
            current, limit = 0, cap
    return buckets + ([round(current)] if current else [])


def fsdp_collectives(cfg, name: str, parallel: str, world: int, dtype: str, scale: float = 1.0,
                     blocks: int | None = None, gather_fp8: bool = False) -> list[Collective]:
    """FSDP2's collectives of one step (every step alike) under ``zero2`` (``reshard_after_forward=False``) or
    ``fsdp`` (``True``), one rank's, in the order it issues them (docs/distributed.md):

    - forward: one all-gather per unit, the root first (its pre-forward hook runs before any block's), then the
      blocks in forward order;
    - backward, ``fsdp`` only: the units were resharded after their forward and are gathered again, the root first
      (explicitly ``reshard_after_forward=True``, so FSDP2 does not keep it), then the blocks in reverse forward
      order, each gathered one unit ahead (FSDP2's implicit backward prefetch: a unit's pre-backward gathers the
      next unit of the reversed post-forward order), so the all-gather of unit i+1 precedes unit i's reduce-scatter;
    - backward: one reduce-scatter per unit when its gradients are done (post-backward), the blocks in reverse
      order, the root last (its embeddings are the last gradients).

    Each all-gather's output and each reduce-scatter's input is the unit's parameters with every dim 0 padded to
    a multiple of ``world`` (:func:`padded_numel`), in the training dtype: the runner casts the whole model to
    bf16 (no ``MixedPrecisionPolicy``), so parameters are gathered and gradients reduced in the parameters'
    dtype. Padding changes bytes wherever a dim 0 (d_model, d_ff, a kv width, the vocabulary, the classes, a
    bias) is not a multiple of ``world``.

    ``scale`` and ``blocks`` (the plan under tensor or pipeline parallelism, :func:`plan_collectives`): the GPU
    holds the root and the first ``blocks`` block units, their bytes scaled so that they sum to ``scale`` times
    the whole model's padded bytes; 1 and None (every unit, exact) by default.

    ``gather_fp8`` (the plan under fp8-mixed where the framework gathers fp8 weights: torchao's
    ``enable_fsdp_float8_all_gather``, Transformer Engine's fp8 parameters; config/frameworks.yaml ``fp8_gather``):
    the all-gathers carry the blocks' linear weights in fp8, one byte each (:func:`fp8_linear_weight`), and the
    rest of each unit in ``dtype`` (dtype ``"fp8"`` on the listing); the reduce-scatters are unchanged. Not measured:
    this project's trainer runs no fp8."""
    units = _parameter_units(cfg, name)
    nbytes = dict(_unit_bytes(cfg, name, world, dtype))
    gbytes = dict(_unit_bytes(cfg, name, world, dtype, True)) if gather_fp8 else nbytes
    root, kept = units[0][0], [unit for unit, tensors in units[1:] if tensors]
    if scale != 1.0 or blocks is not None:
        kept = kept[:blocks] if blocks is not None else kept
        # one factor from the units' bytes in the dtype, applied to their fp8 gathers too: each unit keeps its own
        # mix (the root's gathers its reduce-scatter's bytes)
        factor = scale * sum(nbytes.values()) / (nbytes[root] + sum(nbytes[u] for u in kept))
        nbytes, gbytes = ({u: round(b * factor) for u, b in listed.items()} for listed in (nbytes, gbytes))
    blocks = kept
    gdtype = "fp8" if gather_fp8 else dtype

    def gather(unit, phase):
        return Collective("all_gather", gbytes[unit], world, gdtype if unit != root else dtype, phase)

    def scatter(unit):
        return Collective("reduce_scatter", nbytes[unit], world, dtype, "backward")

    out = [gather(root, "forward")] + [gather(unit, "forward") for unit in blocks]
    backward = blocks[::-1]
    if parallel == "fsdp":
        out += [gather(root, "backward")] + [gather(unit, "backward") for unit in backward[:1]]
        for i, unit in enumerate(backward):
            out += [gather(backward[i + 1], "backward")] if i + 1 < len(backward) else []
            out.append(scatter(unit))
    else:
        out += [scatter(unit) for unit in backward]
    return out + [scatter(root)]


@lru_cache(maxsize=1024)
def _unit_bytes(cfg, name: str, world: int, dtype: str, fp8: bool = False) -> tuple:
    """(unit, its padded bytes) of :func:`parameter_units`, dim 0 padded to a multiple of ``world``; ``fp8``: the
    blocks' linear weights (:func:`fp8_linear_weight`) one byte per element, the rest in ``dtype``."""
    size = DTYPE_BYTES[dtype]
    return tuple((unit, sum(padded_numel(shape, world) * (FP8_BYTES if fp8 and unit and fp8_linear_weight(n, shape)
                                                          else size) for n, shape in tensors))
                 for unit, tensors in _parameter_units(cfg, name))


FP8_BYTES = 1


def fp8_linear_weight(tensor: str, shape: tuple[int, ...]) -> bool:
    """Whether a block's parameter is a linear layer's weight that fp8 training converts (torchtitan's
    ``module_filter_fn``, torchtitan/components/quantization/utils.py: an ``nn.Linear`` whose two dims are multiples
    of 16): a 2-d ``.weight`` whose dims are multiples of 16, not a mixture's router or its shared expert's gate
    (they stay in the compute dtype, as the step model prices them; analytic/steptime/step.py), nor a routed
    expert's (torchao's float8 all-gather covers its ``Float8Linear`` layers, which torchtitan's grouped experts are
    not: priced in the compute dtype, also where a framework's fp8 weights would gather them in fp8)."""
    last = tensor.rsplit(".", 2)
    return (len(shape) == 2 and tensor.endswith(".weight") and shape[0] % 16 == 0 and shape[1] % 16 == 0
            and last[-2] not in ("router", "shared_expert_gate") and ".experts." not in tensor)


@lru_cache(maxsize=64)
def _model_numel(cfg) -> int:
    """The model's parameters, the elements of its FSDP units (:func:`parameter_units` of BP)."""
    return sum(numel(shape) for _, tensors in parameter_units(cfg, "bp") for _, shape in tensors)


# -- the plan's data-parallel traffic ----------------------------------------------------------------------------
# ``trainingcost plan`` (analytic/steptime/step.py) prices the collectives below on its network model; the mapping
# of its shardings onto the measured ones is in docs/planning.md and docs/distributed.md.

PLAN_PARALLEL = {"none": "ddp", "zero1": "zero2", "zero2": "zero2", "zero3": "fsdp", "fsdp": "fsdp"}
# gradients' and weights' dtype (fp8-mixed keeps bf16 weights and gradients: only the products' operands are fp8)
PLAN_DTYPE = {"fp32": "fp32", "bf16-mixed": "bf16", "fp16-mixed": "fp16", "fp8-mixed": "bf16"}


@dataclass(frozen=True)
class PlanCollectives:
    """A plan's data-parallel collectives on one GPU: ``micro_batch`` is issued for every micro-batch (ZeRO-3's
    gathers and reduce-scatters), ``step`` once per optimizer step. Each one's ``phase`` says what compute it can
    hide behind: ``forward`` and ``backward`` (their micro-batch's, or the step's last backward), or none
    (``optimizer_step``: it waits for the whole update)."""

    micro_batch: tuple
    step: tuple

    def all(self, micro_batches: int = 1) -> list[Collective]:
        return [*self.micro_batch] * micro_batches + [*self.step]


def run_collectives(cfg, name: str, parallel: str, world: int, dtype: str, step: int, replicate: int = 1) -> tuple:
    """One rank's collectives of step ``step`` in a measured run (``trainingcost train --nproc world``), HSDP's
    ``replicate`` groups included: the group's :func:`step_collectives` over world / replicate ranks with
    :func:`replica_all_reduces`; replicate 1, :func:`step_collectives` itself."""
    return replica_all_reduces(step_collectives(cfg, name, parallel, world // replicate, dtype, step), replicate)


def replica_all_reduces(listed, replicate: int) -> tuple:
    """HSDP (``replicate`` R replica groups, each sharding over its own ranks; FSDP's HYBRID_SHARD, FSDP2 on a 2-D
    device mesh): ``listed``, the collectives of one group's sharding, with every reduce-scatter followed by an
    all-reduce of its output, the rank's shard (1 / group of the scattered buffer), over the R groups, in the same
    phase and dtype: FSDP2's ``foreach_reduce`` issues the reduce-scatter over the shard dimension, then the
    all-reduce over the replicate dimension (tests/test_comm_model.py checks it against FSDP2 on a 2-D mesh). The
    gathers stay inside the group. R = 1: ``listed`` unchanged."""
    if replicate <= 1:
        return tuple(listed)
    out = []
    for c in listed:
        out.append(c)
        if c.op == "reduce_scatter":
            out.append(Collective("all_reduce", c.bytes // c.group, replicate, c.dtype, c.phase))
    return tuple(out)


def plan_collectives(cfg, name: str, sharding: str, world: int, dtype: str, passes: int = 1, backward: bool = True,
                     scale: float = 1.0, blocks: int | None = None, reduce_dtype: str | None = None,
                     gather_fp8: bool = False) -> PlanCollectives:
    """The collectives a plan's data-parallel axis of ``world`` ranks issues for rule ``name`` under the plan's
    ``sharding`` (none, zero1, zero2, zero3, fsdp), built by the functions the meter is checked against:

    - ``none``: DDP's steady step (:func:`step_collectives`, step 3): the rule's buckets all-reduced in the backward
      (hooks rules), or its one flat all-reduce before the optimizer step (explicit rules); once per step.
    - ``zero1``, ``zero2``: FSDP2's per-unit collectives under ``zero2`` (:func:`fsdp_collectives`): each unit's
      reduce-scatter (backward) and all-gather, bytes alike; but once per step, as ZeRO-1/2 do (gradients
      accumulated over the micro-batches, reduce-scattered after the last backward, the updated shards gathered
      after the optimizer step: the gathers' phase is ``optimizer_step``), where FSDP2 with
      ``reshard_after_forward=False`` gathers at each micro-batch's forward.
    - ``zero3``, ``fsdp``: FSDP2's per-unit collectives under ``fsdp``, per micro-batch.

    Rules the measured shardings refuse (``admitted``) keep the same pieces: WM (a hooks rule) its units as BP's;
    the explicit rules their flat gradient buffer (trained feedback included, as the all-reduce has it), padded to
    a multiple of ``world``, reduce-scattered before the optimizer step and, under ZeRO-1/2, gathered after it;
    under ZeRO-3 the model's units are gathered per forward pass (``passes``) and for the backward
    (``backward``), and the trained feedback the units do not hold is gathered once per step with the update.

    ``scale`` (the share of the model on the GPU) and ``blocks`` (the block units it holds) adapt the listing to
    tensor and pipeline parallelism (docs/planning.md): 1 and None, the whole model, are exact.

    ``reduce_dtype``: the dtype the framework reduces gradients in where it is not the weights' ``dtype``
    (torchtitan's fp32 ``reduce_dtype``, Megatron-LM's fp32 all-reduce under bf16; config/frameworks.yaml,
    ``grad_reduce``): DDP's buckets are cut from the gradients in that dtype, and every reduce-scatter carries the
    same elements at its size; the all-gathers keep ``dtype``.

    ``gather_fp8``: the units' all-gathers carry the blocks' linear weights in fp8 (:func:`fsdp_collectives`);
    the explicit rules' flat buffer under ZeRO-1/2 and their trained feedback stay in ``dtype``."""
    if world <= 1:
        return PlanCollectives((), ())
    parallel = PLAN_PARALLEL[sharding]
    if reduce_dtype is not None and reduce_dtype != dtype:
        ops = plan_collectives(cfg, name, sharding, world, dtype, passes, backward, scale, blocks,
                               gather_fp8=gather_fp8)
        if parallel == "ddp":
            return PlanCollectives((), tuple(step_collectives(cfg, name, "ddp", world, reduce_dtype, 3, scale,
                                                              blocks)))
        ratio = DTYPE_BYTES[reduce_dtype] // DTYPE_BYTES[dtype]

        def widened(listed):
            return tuple(Collective(c.op, c.bytes * ratio, c.group, reduce_dtype, c.phase)
                         if c.op in ("all_reduce", "reduce_scatter") else c for c in listed)
        return PlanCollectives(widened(ops.micro_batch), widened(ops.step))
    if parallel == "ddp":
        return PlanCollectives((), tuple(step_collectives(cfg, name, "ddp", world, dtype, 3, scale, blocks)))
    if mechanism(name) == "hooks":
        ops = fsdp_collectives(cfg, name, parallel, world, dtype, scale, blocks, gather_fp8)
        if parallel == "fsdp":
            return PlanCollectives(tuple(ops), ())
        return PlanCollectives((), tuple(c if c.op != "all_gather" else
                                         Collective(c.op, c.bytes, c.group, c.dtype, "optimizer_step") for c in ops))
    size = DTYPE_BYTES[dtype]
    grads = gradient_bytes(cfg, name, dtype)[0]
    flat = round(scale * world * -(-grads // (size * world)) * size)
    scatter = Collective("reduce_scatter", flat, world, dtype, "optimizer_step")
    if parallel == "zero2":
        return PlanCollectives((), (scatter, Collective("all_gather", flat, world, dtype, "optimizer_step")))
    units = fsdp_collectives(cfg, "bp", "zero2", world, dtype, scale, blocks, gather_fp8)  # the model's units
    gathers = [c for c in units if c.op == "all_gather"]
    micro = gathers * passes + ([Collective(c.op, c.bytes, c.group, c.dtype, "backward") for c in gathers]
                                if backward else [])
    model = _model_numel(cfg) * size
    feedback = round(scale * max(0, grads - model))
    step = [scatter] + ([Collective("all_gather", feedback, world, dtype, "optimizer_step")] if feedback else [])
    return PlanCollectives(tuple(micro), tuple(step))


def collective_seconds(op: str, nbytes: int, group: int, calibration: dict) -> float:
    """One collective's seconds under ``trainingcost calibrate --collectives``'s result.

    With the calibrated points (``points``: seconds per op and size on ``world`` ranks), α and β per size range:
    between two neighbouring calibrated sizes, the line through them (gloo and NCCL change algorithm with the size,
    so one line over 4 KiB .. 16 MiB misses the middle by up to 2x); below the smallest size its time (latency
    bound); above the largest, the last range's line. With only a ``fit`` (α, β per op, or a bare fit dict), that
    line. A group of another size than the calibration's scales the bandwidth term by the ring's bus factors
    (:func:`..steptime.network.bus_factor`: 2(n-1)/n for an all-reduce, (n-1)/n for a gather or a scatter)."""
    from .steptime.network import bus_factor

    world = int(calibration.get("world", group))
    scale = bus_factor(op, group) / bus_factor(op, world) if world != group and world > 1 else 1.0
    points = sorted((p["bytes"], p["seconds"]) for p in calibration.get("points", ()) if p["op"] == op)
    if len(points) >= 2:
        sizes = [b for b, _ in points]
        if nbytes <= sizes[0]:
            return points[0][1]
        k = next((i for i in range(1, len(points)) if nbytes <= sizes[i]), len(points) - 1)
        (b0, t0), (b1, t1) = points[k - 1], points[k]
        beta = (t1 - t0) / (b1 - b0)
        alpha = t0 - beta * b0
        return alpha + scale * beta * nbytes
    fit = calibration.get("fit", calibration)[op]
    return fit["alpha_s"] + scale * fit["beta_s_per_byte"] * nbytes


def comm_seconds(collectives: list[Collective], calibration: dict) -> float:
    """The time of these collectives, one after another (the meter waits for each), under a collectives
    calibration (:func:`collective_seconds`)."""
    return sum(collective_seconds(c.op, c.bytes, c.group, calibration) for c in collectives)
