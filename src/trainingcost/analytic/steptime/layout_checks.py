"""What a layout may be, and the one line that refuses it: the recompute modes (per-operation recompute's product
names), the attention kernels, ZeRO-3's granularity, interleaving, context parallelism, HSDP's replica groups
(:func:`check_layout`). :mod:`.step` prices a layout these accept (docs/planning.md)."""

from __future__ import annotations

import math


from ...config.errors import ConfigError
from ...config.frameworks import GRAD_REDUCE, RECOMPUTE_TAILS, ZERO1_SYNC, ZERO_REDUCE
from ..plan_facts import PRECISIONS, ZERO_STAGE
from . import offload, schedules

# (``lay``: a step.Layout, read by attribute: not imported, step imports this module)


RECOMPUTE = ("none", "selective", "full", "attention")  # attention: Korthikanti et al. 2022's selective recompute


# ops:P+P+...: per-operation selective checkpointing (torchtitan's per-op policy, MaxText's named remat policies): the
# block's elementwise work is recomputed, and of its products those named (the rest are saved)
OP_PRODUCTS = ("q", "k", "v", "o", "gate", "up", "down", "core", "q_up", "kv_up")  # (latent attention's up projections:


# q_b and kv_b, what DeepSeek-V3 recomputes, its report's section 3.2.3)
ATTENTION_PRODUCTS = {"q", "k", "v", "o", "q_up", "kv_up"}


ALIASES = {"q_up": "q", "kv_up": "v"}  # a part of another product (named with it, counted once)


def recompute_ops(recompute: str):
    """The products an ``ops:`` recompute repeats (a frozenset; empty: the elementwise work alone), or None for the
    other modes. Raises ValueError on an unknown product."""
    if not recompute.startswith("ops:"):
        return None
    named = frozenset(x for x in recompute[4:].split("+") if x)
    if not named <= set(OP_PRODUCTS):
        raise ValueError(recompute)
    return named


ATTENTION = ("flash", "flash3", "cudnn", "unfused")  # flash: FlashAttention-2; flash3: FlashAttention-3 (Hopper);


# cudnn: cuDNN's fused attention (TransformerEngine's FusedAttention)
GRANULARITY = ("block", "tensor")  # ZeRO-3 gathers per wrapped block (FSDP) or per parameter tensor (DeepSpeed)


def interleave_blocks(blocks: int, pp: int) -> int:
    """The blocks of a full pipeline stage, which an interleaved schedule's v virtual stages must split evenly:
    blocks / pp, or where pp does not divide them the ceiling, the short stages' last virtual stage holding one block
    fewer (the Llama 3 405B run: 126 layers on 16 stages, the first and last one layer short, under the interleaved
    schedule; Dubey et al. 2024, section 3.3.2)."""
    return -(-blocks // pp)


def interleave_problem(blocks: int, pp: int, v: int) -> str:
    """Why v virtual stages per device cannot split ``blocks`` over ``pp`` stages, or "" where they can: v divides
    a full stage's blocks (:func:`interleave_blocks`), and under an uneven split each virtual stage keeps a block
    once the short stages' last loses one (at least two blocks per virtual stage)."""
    full = interleave_blocks(blocks, pp)
    if blocks % pp == 0:
        return "" if full % v == 0 else f"does not divide the {full} blocks per stage"
    if full % v:
        return f"does not divide the {full} blocks of a full stage (the others hold one fewer)"
    if full // v < 2:
        return (f"leaves a short stage's last virtual stage empty ({full // v} block per virtual stage, the short "
                f"stages hold one fewer)")
    return ""


def check_context_parallel(cfg, cp: int, attention: str, flag: str = "--cp") -> None:
    """Context parallelism as Megatron-Core runs it (TransformerEngine's attention, ``context_parallel_size``): a
    decoder's sequences split into 2 cp chunks, each GPU holding two (the causal load balance), so 2 cp divides the
    sequence; the key/value exchange runs inside a fused attention kernel."""
    if cfg.arch != "decoder" or cfg.classes:
        raise ConfigError(f"{flag}: context parallelism {cp} splits a decoder's sequences (the model is "
                          f"{'a classifier' if cfg.classes else 'an ' + cfg.arch})")
    if cfg.seq_len % (2 * cp):
        raise ConfigError(f"{flag}: context parallelism {cp} needs the sequence of {cfg.seq_len} tokens divisible by "
                          f"2 x {cp} = {2 * cp} (the sequence is cut into {2 * cp} chunks, two on each of the {cp} GPUs)")
    if attention == "unfused":
        raise ConfigError(f"{flag}: context parallelism {cp} runs inside a fused attention kernel (flash, flash3 or "
                          "cudnn), which the layout does not run (attention unfused)")
    if cfg.latent:
        raise ConfigError(f"{flag}: context parallelism {cp} of latent attention is not priced (what its ring passes, "
                          "the keys and values or the latent, depends on the framework); allowed: 1")


def hsdp_problem(replicate, dp: int, cp: int, sharding: str, zero1_sync: str = "overlapped", ep: int = 1,
                 tp: int = 1, etp: int | None = None) -> str:
    """Why ``replicate`` HSDP groups cannot split a layout's dp replicas (x cp), or "" where they can: a positive
    integer dividing dp, leaving each group at least 2 ranks to shard over, under a sharding (ZeRO-1, 2, 3 or FSDP;
    without one every rank already holds everything), and not nanotron's ZeRO-1 sync after the backward, which
    all-reduces over every data-parallel rank."""
    if isinstance(replicate, bool) or not isinstance(replicate, int) or replicate < 1:
        return f"a positive integer (got {replicate!r})"
    if replicate == 1:
        return ""
    if sharding == "none":
        return (f"{replicate} replica groups shard nothing under sharding none (allowed: --sharding zero1, zero2, "
                "zero3 or fsdp, or --replicate 1)")
    if dp % replicate:
        return f"{replicate} replica groups do not divide the {dp} data-parallel replicas"
    if dp // replicate * cp < 2:
        return (f"{replicate} replica groups of the {dp} data-parallel replicas leave each group one rank to shard "
                "over (allowed: --replicate 1, with --sharding none for plain data parallelism)")
    if sharding == "zero1" and zero1_sync == "after_backward":
        return ("the framework syncs ZeRO-1 after the backward over every data-parallel rank; it has no hybrid "
                "sharding (allowed: --replicate 1)")
    group = dp // replicate
    if ep > 1 and (etp is None or etp == tp) and group % ep:
        return (f"expert-parallel {ep} does not divide a replica group's {group} data-parallel replicas (each group "
                "holds every expert; torchtitan: dp_shard x cp divisible by ep)")
    if ep > 1 and etp is not None and etp != tp and (tp * cp * group) % (ep * etp):
        return (f"ep x etp = {ep * etp} does not divide a replica group's {tp * cp * group} GPUs of a stage (each "
                "group holds every expert)")
    return ""


def check_layout(cfg, lay: Layout) -> None:
    """One line per impossible value, naming the flag and what is allowed."""

    if lay.sharding not in ZERO_STAGE:
        raise ConfigError(f"sharding: {lay.sharding!r} is not allowed (allowed: {', '.join(ZERO_STAGE)})")
    if lay.precision not in PRECISIONS:
        raise ConfigError(f"precision: {lay.precision!r} is not allowed (allowed: {', '.join(PRECISIONS)})")
    if lay.interleave < 1 or int(lay.interleave) != lay.interleave:
        raise ConfigError(f"--interleave: a positive integer (got {lay.interleave!r})")
    if isinstance(lay.cp, bool) or not isinstance(lay.cp, int) or lay.cp < 1:
        raise ConfigError(f"--cp: a positive integer (got {lay.cp!r})")
    if lay.gpus % (lay.tp * lay.pp * lay.cp):
        raise ConfigError(f"--gpus: {lay.gpus} GPUs do not split into tensor x pipeline x context groups of "
                          f"{lay.tp} x {lay.pp} x {lay.cp}")
    if lay.cp > 1:
        check_context_parallel(cfg, lay.cp, lay.attention)
    problem = hsdp_problem(lay.replicate, lay.dp, lay.cp, lay.sharding, lay.zero1_sync, lay.ep, lay.tp, lay.etp)
    if problem:
        raise ConfigError(f"--replicate: {problem}")
    if lay.global_batch % (lay.dp * lay.micro_batch):  # else the step would be priced on a partial accumulation
        raise ConfigError(f"micro_batch: {lay.micro_batch} does not divide the {lay.global_batch / lay.dp:g} "
                          f"sequences each data-parallel replica takes per step (global batch / {lay.dp})")
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    if lay.interleave > 1:
        if lay.pp < 2:
            raise ConfigError(f"--interleave: {lay.interleave} needs pipeline stages (--pp 2 or more; got --pp {lay.pp})")
        if lay.pipeline_split != "even":
            raise ConfigError(f"--interleave: {lay.interleave} needs the even pipeline split (the framework's is "
                              f"{lay.pipeline_split})")
        problem = interleave_problem(blocks, lay.pp, lay.interleave)
        if problem:
            raise ConfigError(f"--interleave: {lay.interleave} {problem}")
        if lay.accumulation % lay.pp:
            raise ConfigError(f"--interleave: the interleaved schedule needs the {lay.accumulation} micro-batches per step "
                              f"to be a multiple of --pp {lay.pp}")
    schedules.check_schedule(schedules.effective(lay.schedule, lay.interleave), lay.pp, lay.interleave,
                             lay.accumulation, True)
    offload.check_offload(lay.offload, lay.sharding)
    if lay.sequence_parallel and lay.tp < 2:
        raise ConfigError("--sequence-parallel: needs tensor parallelism (--tp 2 or more)")
    if lay.gpus_per_node is not None and (lay.gpus_per_node < 1 or int(lay.gpus_per_node) != lay.gpus_per_node):
        raise ConfigError(f"--gpus-per-node: a positive integer (got {lay.gpus_per_node!r})")
    if lay.nic_gbps is not None and not (math.isfinite(lay.nic_gbps) and lay.nic_gbps > 0):
        raise ConfigError(f"--nic-gbps: a positive number of Gb/s per GPU (got {lay.nic_gbps!r})")
    if not 0 <= lay.dp_overlap <= 1:
        raise ConfigError(f"--dp-overlap: a fraction between 0 and 1 (got {lay.dp_overlap!r})")
    if lay.selective_dp_overlap is not None and not 0 <= lay.selective_dp_overlap <= 1:
        raise ConfigError(f"selective_dp_overlap: a fraction between 0 and 1 (got {lay.selective_dp_overlap!r})")
    if lay.zero_reduce not in ZERO_REDUCE:
        raise ConfigError(f"zero_reduce: {lay.zero_reduce!r} is not allowed (allowed: {', '.join(ZERO_REDUCE)})")
    if lay.zero1_sync not in ZERO1_SYNC:
        raise ConfigError(f"zero1_sync: {lay.zero1_sync!r} is not allowed (allowed: {', '.join(ZERO1_SYNC)})")
    if not isinstance(lay.gather_prefetch, bool):
        raise ConfigError(f"gather_prefetch: true or false (got {lay.gather_prefetch!r})")
    if lay.grad_reduce not in GRAD_REDUCE:
        raise ConfigError(f"grad_reduce: {lay.grad_reduce!r} is not allowed (allowed: {', '.join(GRAD_REDUCE)})")
    if not 0 <= lay.tp_overlap <= 1:
        raise ConfigError(f"--tp-overlap: a fraction between 0 and 1 (got {lay.tp_overlap!r})")
    if lay.tp_backward_overlap is not None and not 0 <= lay.tp_backward_overlap <= 1:
        raise ConfigError(f"tp_backward_overlap: a fraction between 0 and 1 (got {lay.tp_backward_overlap!r})")
    try:
        known = recompute_ops(lay.recompute) is not None or lay.recompute in RECOMPUTE
    except ValueError:
        known = False
    if not known:
        raise ConfigError(f"recompute: {lay.recompute!r} is not allowed (allowed: {', '.join(RECOMPUTE)}, or ops: and "
                          f"the recomputed products joined by '+', of {', '.join(OP_PRODUCTS)})")
    if lay.recompute_tail not in RECOMPUTE_TAILS:
        raise ConfigError(f"recompute_tail: {lay.recompute_tail!r} is not allowed (allowed: {', '.join(RECOMPUTE_TAILS)})")
    if lay.attention not in ATTENTION:
        raise ConfigError(f"attention: {lay.attention!r} is not allowed (allowed: {', '.join(ATTENTION)})")
    if lay.zero3_granularity not in GRANULARITY:
        raise ConfigError(f"zero3_granularity: {lay.zero3_granularity!r} is not allowed (allowed: {', '.join(GRANULARITY)})")


def tail_skipped(cfg, recompute_tail: str, fp8_products: bool) -> bool:
    """Whether a checkpointed block's recompute leaves out its last product, the FFN's down projection, and what
    follows it (its tensor-parallel reduction, the residual add): nothing in the backward reads its output where the
    block is pre-norm and dense (post-norm, an output norm or a post-branch norm reads it, and a mixture's combine
    keeps its experts' outputs for the router's gradient). torch's non-reentrant checkpoint stops early before an
    aten product, not before a custom autograd Function (fp8 linears); torch.compile's backward graph leaves it out
    either way (config/frameworks.py, recompute_tail; docs/planning.md, "What a recompute repeats"). Assumed: no
    dropout after the FFN (this project's models have none; a run with residual dropout rebuilds its mask from the
    down projection's output, so repeats it: plan --recompute-tail repeated)."""
    dense_tail = cfg.pre_norm and not cfg.post_norms and not cfg.moe
    if not dense_tail or recompute_tail == "repeated":
        return False
    return recompute_tail == "traced" or not fp8_products
