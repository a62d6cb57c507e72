"""The step's data-parallel communication: the layout's collectives from analytic/comm.py (the code the meter is
checked against), their dtype, HSDP's replica groups, FSDP2's flat-buffer copies, and how much of them the compute
hides (:data:`OVERLAP_SLOWDOWN`); QLoRA's dequantization. :mod:`.step` prices the step with them
(docs/planning.md)."""

from __future__ import annotations


from ..finetune import quantized_linears
from ..plan_facts import PRECISIONS, model_facts, model_share, stage_split
from .device import DeviceModel
from .network import Network

# (``lay``: a step.Layout, read by attribute: not imported, step imports this module)


# Compute that runs beside an overlapped collective is slower than alone: NCCL's kernels hold SMs and memory bandwidth
# (Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning",
# arXiv 2507.03114: 18.9% on average, at most 40.0%, GPT and Llama models on 4 A100, H100, MI250 and MI210). Each
# second of data-parallel communication hidden behind compute costs that share of a second (dp_exposed).
OVERLAP_SLOWDOWN = 0.189


def qlora_dequantize_seconds(cfg, lay: Layout, dev: DeviceModel, w: dict, facts, share: float,
                             recomputed_blocks: float) -> float:
    """QLoRA's 4-bit base, per micro-batch: bitsandbytes dequantizes each Linear weight to the compute dtype before
    its product, in the forward, again for the input gradient (MatMul4Bit's backward) and in every recomputed
    forward; each pass reads the packed half byte and the one-byte absmax per 64 and writes the compute dtype's
    bytes (finetune.nf4_bytes), memory-bound. The GPU's share of the quantized weights (all of them under ZeRO-3 or
    FSDP, which gather before the product); 0 without QLoRA."""
    ft = w.get("finetune")
    if ft is None or ft.kind != "qlora":
        return 0.0
    quantized = sum(n * c for n, c in quantized_linears(cfg)) * share
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    passes = 2 + recomputed_blocks * lay.pp / max(1, blocks)
    per_element = 0.5 + 1 / 64 + PRECISIONS[lay.precision].weights
    return passes * dev.memory(per_element * quantized)


def data_parallel_collectives(cfg, lay: Layout, rule: str, w: dict | None = None, share: float | None = None):
    """The layout's data-parallel collectives on the critical GPU (:func:`..comm.plan_collectives`, the code the
    meter is checked against): the layout's sharding mapped onto DDP or FSDP2, in the gradients' dtype; under tensor
    or pipeline parallelism the listed tensors scaled to the GPU's share of the model (``model_share``: the stage's
    blocks and its heavier end, over t), and ZeRO-3's units cut to the stage's blocks."""
    from ..comm import PLAN_DTYPE, plan_collectives
    from ..plan_facts import fullest_stage, model_facts, model_share, stage_split

    split = stage_split(cfg, lay.pipeline_split)
    if share is None:
        share = model_share(model_facts(cfg, [rule], "adam"), lay.tp, lay.pp, split=split)
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    stage_blocks = None if lay.pp == 1 else fullest_stage(blocks, lay.pp, split)  # the fullest stage
    passes, backward = (w["passes"], w["backward"]) if w is not None else (1, True)
    dtype = PLAN_DTYPE[lay.precision]
    ops = plan_collectives(cfg, rule, lay.sharding, lay.shard, dtype, passes, backward,
                           1.0 if (lay.tp == 1 and lay.pp == 1) else share, stage_blocks,
                           reduce_dtype(lay.grad_reduce, dtype),
                           gather_fp8=lay.fp8_gather and PRECISIONS[lay.precision].linear is not None)
    if w is not None and "finetune" in w:
        ops = adapter_reductions(ops, w["trained"] / max(1, model_facts(cfg, [rule], "adam").parameters))
    if lay.sharding == "zero1" and lay.zero1_sync == "after_backward":
        return synced_after_backward(ops)
    if lay.sharding == "zero2" and lay.zero_reduce == "partition_reduce":
        ops = reduced_per_micro_batch(ops)
    return replicated(ops, lay.replicate)


def reduced_per_micro_batch(ops):
    """DeepSpeed's ZeRO-2 (partition_gradients): each micro-batch's backward reduces its gradient buckets to their
    partitions' owners, which accumulate only their own partition (stage_1_and_2.py
    reduce_ready_partitions_and_remove_grads runs in every backward under partition_gradients, ZeRO-1 only at the
    accumulation boundary): ``ops``' step-level gradient reductions of the backward (the hooks' buckets) move to the
    micro-batch listing; the updated shards' all-gathers and an explicit rule's reduction before its optimizer step
    (phase ``optimizer_step``: once per step) stay."""
    from ..comm import PlanCollectives

    def per_micro_batch(c):
        return c.op in ("all_reduce", "reduce_scatter") and c.phase == "backward"

    return PlanCollectives((*ops.micro_batch, *filter(per_micro_batch, ops.step)),
                           tuple(c for c in ops.step if not per_micro_batch(c)))


def adapter_reductions(ops, fraction: float):
    """``ops`` when only adapters train: each gradient reduction carries the adapters' share of its tensors, in fp32
    (PEFT's adapters), the parameter all-gathers unchanged (ZeRO-3 and FSDP still gather the frozen base). The
    number of collectives is kept (a bucket or a unit each), so their latencies are a bound from above."""
    from ..comm import DTYPE_BYTES, Collective, PlanCollectives

    def one(c):
        if c.op not in ("all_reduce", "reduce_scatter"):
            return c
        return Collective(c.op, int(round(c.bytes * fraction * 4 / DTYPE_BYTES[c.dtype])), c.group, "fp32", c.phase)

    return PlanCollectives(tuple(map(one, ops.micro_batch)), tuple(map(one, ops.step)))


def replicated(ops, replicate: int):
    """HSDP (``replicate`` groups, each sharding over ``shard`` ranks; PyTorch FSDP's HYBRID_SHARD, FSDP2 on a 2-D
    mesh, torchtitan's ``data_parallel_replicate_degree``, MaxText's ``dcn_data_parallelism``): every gradient
    reduce-scatter inside a group is followed by an all-reduce of its output, the rank's shard (1 / shard of the
    scattered buffer), across the ``replicate`` groups, in the same phase (FSDP2's ``foreach_reduce``:
    reduce-scatter, then all-reduce over the replicate dimension). The gathers stay inside the group."""
    from ..comm import PlanCollectives, replica_all_reduces

    if replicate <= 1:
        return ops
    return PlanCollectives(replica_all_reduces(ops.micro_batch, replicate), replica_all_reduces(ops.step, replicate))


def shard_copy_bytes(c, precision: str) -> int:
    """Bytes one sharded collective's copies move on the compute stream under FSDP2 (``shard_copies``,
    config/frameworks.yaml): an all-gather's output read and written into the parameters' storage
    (``split_with_sizes_copy``), twice its bytes; a reduce-scatter's input written in the reduce dtype from the
    gradients read in the weights' (``chunk_cat``). The all-gather's copy-in and the post-reduce cast run on their own
    streams, and an HSDP all-reduce works in place: none of them."""
    from ..comm import DTYPE_BYTES, PLAN_DTYPE

    if c.op == "all_gather":
        return 2 * c.bytes
    if c.op == "reduce_scatter":
        return c.bytes + c.bytes * DTYPE_BYTES[PLAN_DTYPE[precision]] // DTYPE_BYTES[c.dtype]
    return 0


def shard_copy_seconds(listed, dev, precision: str) -> float:
    """Seconds of the copies of ``listed`` collectives (:func:`shard_copy_bytes`), each its own memory-bound kernel."""
    return sum(dev.memory(shard_copy_bytes(c, precision)) for c in listed)


def synced_after_backward(ops):
    """ZeRO-1 as nanotron runs it with fp32 gradient accumulation (``zero1_sync: after_backward``,
    config/frameworks.yaml): the gradient reductions of ``ops`` become one all-reduce of the whole (fp32) gradient
    buffer after the last backward, and the updated shards' all-gathers one all-gather, both waiting for the step
    (phase ``optimizer_step``: nothing hides them). The bytes are the listed ones: an all-reduce passes the buffer a
    reduce-scatter passes."""
    from ..comm import Collective, PlanCollectives

    listed = [*ops.micro_batch, *ops.step]
    out = []
    for kind in (("all_reduce", "reduce_scatter"), ("all_gather",)):
        chosen = [c for c in listed if c.op in kind]
        if chosen:
            out.append(Collective(kind[0], sum(c.bytes for c in chosen), chosen[0].group, chosen[0].dtype,
                                  "optimizer_step"))
    return PlanCollectives((), tuple(out))


def reduce_dtype(grad_reduce: str, dtype: str) -> str:
    """The dtype a framework reduces gradients in (config/frameworks.yaml, ``grad_reduce``) when the weights are
    ``dtype``: compute, the weights' own; fp32 always (torchtitan's ``reduce_dtype``); fp32 under bf16 only
    (Megatron-LM, which forces it for bf16 and keeps fp16 gradients fp16)."""
    if grad_reduce == "fp32" or (grad_reduce == "fp32-if-bf16" and dtype == "bf16"):
        return "fp32"
    return dtype


def dp_overlap_of(lay: Layout) -> float:
    """The share of the data-parallel collectives that the compute hides: the framework's ``dp_overlap``, or its
    ``selective_dp_overlap`` under a per-operation recompute (Korthikanti et al.'s attention recompute, an ``ops:``
    policy) where it states one (config/frameworks.yaml: XLA before jax 0.4.31 ran a layer loop's asynchronous
    collectives on the compute stream under such a policy)."""
    per_operation = lay.recompute == "attention" or lay.recompute.startswith("ops:")
    if per_operation and lay.selective_dp_overlap is not None:
        return lay.selective_dp_overlap
    return lay.dp_overlap


def dp_seconds(ops, net: Network, lay: Layout, M: int, compute_fwd: float, compute_bwd: float) -> float:
    """Exposed seconds per step of the data-parallel collectives ``ops`` (a ``PlanCollectives``), each priced on the
    network model's alpha-beta over the data-parallel axis (dp ranks, stride t): one latency per collective (per DDP
    bucket, per FSDP unit). A fraction ``dp_overlap`` of each micro-batch's forward (backward) collectives hides
    behind its forward (backward) compute; the step's backward collectives behind the last backward; collectives of
    the ``optimizer_step`` phase (the explicit rules' reduction, ZeRO-1/2's gathers of the updated shards) not at
    all. A framework that does not prefetch its parameter all-gathers (``gather_prefetch`` False: DeepSpeed's ZeRO-3
    of early 2021, config/frameworks.yaml) pays them whole, only its gradient reductions hide. A framework whose
    data-parallel collectives do not spread over the node's NICs (``dp_rails`` False: DeepSpeed's 2021
    per-submodule ZeRO-3 fetches) runs them at one NIC's share."""
    return dp_exposed(dp_phase_seconds(ops, net, lay), M, compute_fwd, compute_bwd, dp_overlap_of(lay),
                      lay.gather_prefetch)


DP_KINDS = ("gather", "reduce")  # parameter all-gathers; gradient reductions (all-reduce, reduce-scatter)


def dp_phase_seconds(ops, net: Network, lay: Layout) -> dict:
    """The seconds of ``ops``' collectives, unexposed, summed per (micro_batch or step, phase, kind): phase one of
    forward, backward, optimizer_step; kind gather (parameter all-gathers) or reduce (gradient all-reduces and
    reduce-scatters). What :func:`dp_exposed` hides behind the compute. Under DeepSpeed's ZeRO-1/2 (``zero_reduce``
    partition_reduce) each reduce-scatter is its bucket's reduces to the partitions' owners (Network.reduce): the
    step's dp - 1 partition boundaries add one reduce each, spread over the buckets by their bytes."""
    rails = lay.dp_rails
    dp, t = lay.shard, lay.tp  # the ranks sharding the same weights: dp x cp (or a HSDP group's), tp apart
    across = lay.tp * lay.shard  # HSDP: the replica groups' ranks, a group's GPUs apart
    # DeepSpeed's ZeRO-1/2 (zero_reduce: partition_reduce): each bucket's slices reduced to their partitions' owners,
    # one reduce per (bucket, partition): the dp - 1 partition boundaries spread over the buckets by their bytes
    partition_reduce = lay.zero_reduce == "partition_reduce" and lay.sharding in ("zero1", "zero2")
    scattered = {when: sum(c.bytes for c in getattr(ops, when) if c.op == "reduce_scatter") or 1
                 for when in ("micro_batch", "step")}  # each listing one round of the partitions

    def seconds(when, phase, kind):
        total = 0.0
        for c in getattr(ops, when):
            if (c.phase if c.phase in ("forward", "backward") else "optimizer_step") != phase:
                continue
            if (c.op == "all_gather") != (kind == "gather"):
                continue
            if c.op == "all_reduce" and lay.replicate > 1 and lay.sharding != "none":
                total += net.all_reduce(c.bytes, lay.replicate, across)  # the shard, across the replica groups
            elif c.op == "all_reduce":
                total += net.all_reduce(c.bytes, dp, t)
            elif c.op == "reduce_scatter" and partition_reduce:
                total += net.reduce(c.bytes, dp, t, rails, 1 + (dp - 1) * c.bytes / scattered[when])
            elif c.op in ("all_gather", "reduce_scatter"):
                total += net.all_gather(c.bytes, dp, t, rails)
            else:
                raise ValueError(f"op: {c.op!r} has no price on the data-parallel axis")
        return total

    return {(when, phase, kind): seconds(when, phase, kind) for when in ("micro_batch", "step")
            for phase in ("forward", "backward", "optimizer_step") for kind in DP_KINDS}


def dp_exposed(sums: dict, M: int, compute_fwd: float, compute_bwd: float, f: float, prefetch: bool = True) -> float:
    """Exposed seconds per step from :func:`dp_phase_seconds`' sums (see :func:`dp_seconds`), with the slowdown of
    the compute that hides them (OVERLAP_SLOWDOWN). Without ``prefetch`` the parameter all-gathers stay whole on the
    critical path and only the gradient reductions hide."""
    def phase(when, name, window):
        gather, reduce = sums[(when, name, "gather")], sums[(when, name, "reduce")]
        if name == "optimizer_step":
            return gather + reduce
        if prefetch:
            return _contended(gather + reduce, window, f)
        return gather + _contended(reduce, window, f)

    micro = phase("micro_batch", "forward", compute_fwd) + phase("micro_batch", "backward", compute_bwd) \
        + phase("micro_batch", "optimizer_step", 0.0)
    return M * micro + phase("step", "forward", compute_fwd) + phase("step", "backward", compute_bwd) \
        + phase("step", "optimizer_step", 0.0)


def _contended(comm: float, window: float, overlap: float) -> float:
    """A data-parallel collective's cost on the critical path: its exposed part, plus the slowdown of the compute it
    hid behind (OVERLAP_SLOWDOWN of the hidden seconds)."""
    hidden = overlap * min(comm, window)
    return comm - hidden + OVERLAP_SLOWDOWN * hidden


def _exposed(comm: float, window: float, overlap: float) -> float:
    """Communication left on the critical path: a fraction ``overlap`` of it hides behind the compute window."""
    return comm - overlap * min(comm, window)
