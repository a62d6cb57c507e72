"""The plan's memory per GPU: what each GPU holds at micro-batch 1, part by part, and what a micro-batch adds
(docs/planning.md, "Memory"). No torch.

Weights, feedback matrices, gradients, fp32 master weights and optimizer state in the precision's bytes
(Rajbhandari et al. 2020, section 3.1), divided by the tensor and pipeline degrees and by the ZeRO stage's sharding
over the data-parallel ranks (ZeRO-3 / FSDP adds the gathered unit); activations from the memory model per
sequence, in the activation dtype, on the fullest pipeline stage with the micro-batches its schedule keeps in flight
(Korthikanti et al. 2022, section 4.2.3; steptime/schedules.py), divided by the tensor and context degrees; an
offload's host bytes; a frozen base's adapters (finetune.py). :mod:`.plan` builds the plan on these; the spec is
its :class:`~.plan.PlanSpec`.
"""

from __future__ import annotations

import math

from .finetune import ADAPTER_BYTES
from .memory import OPTIMIZER_SLOTS
from .plan_facts import PRECISIONS, ZERO_STAGE, ModelFacts, facts_split, fullest_stage, model_share
from .steptime import offload as host_offload, schedules

# (``spec``: the plan's PlanSpec, read by attribute; not imported, plan imports this module)


MEMORY_PARTS = ("parameters", "feedback", "gradients", "master_weights", "optimizer_state", "gathered", "activations")


def replicas(spec: PlanSpec) -> int:
    """The data-parallel degree: replicas that each take their own sequences, gpus / (tp x pp x cp); the gradients
    are reduced (and ZeRO shards) over dp x cp ranks, which hold the same weights."""
    return spec.gpus // (spec.tp * spec.pp * spec.cp)


def shard_ranks(spec: PlanSpec) -> int:
    """The ranks ZeRO shards over: dp x cp, or under HSDP (--replicate R) one replica group's dp / R x cp."""
    return replicas(spec) // spec.replicate * spec.cp


def expert_tp(spec: PlanSpec) -> int:
    """The experts' tensor-parallel degree: tp unless --etp gives another (MoE parallel folding)."""
    return spec.tp if spec.etp is None else spec.etp


def checkpointed(facts: ModelFacts, checkpointing: str, every: int) -> dict:
    """Blocks checkpointed per stack: none, every ``every``-th (selective, Deep Learning and Transformers 2026,
    section 11.7.2), or all (full)."""
    if checkpointing == "none":
        return {s: 0 for s in facts.depth}
    if checkpointing == "full":
        return dict(facts.depth)
    return {s: L // every for s, L in facts.depth.items()}


def activations_per_sequence(facts: ModelFacts, rule_name: str, checkpointing: str, every: int) -> int:
    """Elements a rule keeps per sequence under checkpointing (Chen et al. 2016): a checkpointed block keeps
    its input instead of autograd's saved tensors, and the backward recomputes one block at a time, whose saved
    tensors are then alive. Rules without a backward (no autograd graph: PEPITA, MEMPEPITA) are unchanged."""
    row = facts.row(rule_name)
    kept = int(row["activations"])
    if not row["backward"]:
        return kept
    counts = checkpointed(facts, checkpointing, every)
    if not any(counts.values()):
        return kept
    for stack, c in counts.items():
        kept += c * (facts.block_input[stack] - facts.block_saved[stack])
    return kept + max(facts.block_saved[s] for s, c in counts.items() if c)


def replicated_per_sequence(facts: ModelFacts, rule_name: str, checkpointing: str, every: int) -> int:
    """Of :func:`activations_per_sequence`'s elements, those tensor parallelism without sequence parallelism keeps
    whole on every rank (Korthikanti et al. 2022, section 4.2.2: activations sbh (10 + 24/t + 5as/(ht)) per layer
    against sbh (34/t + 5as/(ht)) with it; the 10 sbh bytes are the layer norms' inputs, the inputs of the first
    products of attention and of the MLP, and the dropout masks, none of which tensor parallelism splits): each
    block's norms' saved inputs and its sublayers' saved inputs (ModelFacts.block_replicated), a checkpointed
    block's input, and the recomputed block's. Rules without a backward: none counted (their kept outputs are
    priced as split)."""
    row = facts.row(rule_name)
    if not row["backward"] or not facts.block_replicated:
        return 0
    counts = checkpointed(facts, checkpointing, every)
    kept = sum((facts.depth[s] - counts[s]) * facts.block_replicated[s] + counts[s] * facts.block_input[s]
               for s in facts.depth)
    return kept + max((facts.block_replicated[s] for s, c in counts.items() if c), default=0)


def memory_per_gpu(facts: ModelFacts, spec: PlanSpec, rule_name: str, activations: int) -> dict:
    """Bytes per GPU of each part at micro-batch 1 (``activations``: elements per sequence); activations scale
    with the micro-batch, the rest does not."""
    p = PRECISIONS[spec.precision]
    row = facts.row(rule_name)
    split = facts_split(facts, spec.pipeline_split)
    share = model_share(facts, spec.tp, spec.pp, split=split)
    dp = shard_ranks(spec)  # ZeRO shards over the dp x cp ranks holding the same weights (a HSDP group's)
    stage = ZERO_STAGE[spec.sharding]
    params = facts.parameters * share
    feedback = row["feedback"] * share
    trained = row["trained"] * share
    # Expert parallelism: a GPU holds experts / ep of each mixture, unsharded; ZeRO shards the experts over the
    # dp / ep replicas of each (DeepSpeed-MoE, Rajbhandari et al. 2022), the rest over dp: 1 / dp of all either way.
    held = model_share(facts, spec.tp, spec.pp, spec.ep * expert_tp(spec) / spec.tp, split) / share if share else 1.0
    shard = lambda value, from_stage: value / dp if stage >= from_stage else value * held  # noqa: E731
    # DeepSpeed's ZeRO-3 keeps its gradient partition in fp32 for the optimizer (its estimator's 18 bytes per parameter:
    # fp16 weights 2, fp32 weights, gradients and Adam's two moments 16, as its offload branches split them)
    grads = max(p.grads, 4) if stage == 3 and spec.zero3_gather == "module" else p.grads
    # fp8-mixed under a framework that caches the fp8 weights over the micro-batches (Transformer Engine through
    # Megatron-Core): each block weight's fp8 copy and its transpose, 2 bytes per block parameter held, unless its
    # weights are kept in fp8 (NeMo's fp8_params: the copy and its transpose then replace the bf16 weights)
    fp8_cache = 2.0 * params * held * facts.blocks_parameters / facts.parameters \
        if (p.linear and spec.fp8_weight_cache and not spec.fp8_params and stage < 3 and facts.parameters) else 0.0
    # DualPipe holds two stages per GPU, one per direction: its parameters, their gradients and optimizer state twice
    schedule = schedules.effective(spec.schedule, spec.interleave) if spec.pp > 1 else "1f1b"
    copies = schedules.parameter_copies(schedule)
    # Offload (steptime/offload.py): the optimizer's partition on the host, the gradients too where ZeRO-2 or 3
    # partitions them (copied down as the backward makes them), and the parameters' shards with parameter offload
    on_gpu = {"parameters": not host_offload.parameters_off(spec.offload),
              "gradients": spec.offload == "none" or stage < 2,
              "optimizer": spec.offload == "none"}
    weights, grad_bytes, master, state = params * p.weights, trained * grads, trained * p.master, trained * p.state
    ft = facts.finetune
    if ft is not None:  # a frozen base (lora: the weights' dtype; qlora: NF4 and fp32) and fp32 adapters (finetune.py)
        base = ft.qlora_bytes if ft.kind == "qlora" else facts.parameters * p.weights
        weights = (base + ft.adapters * ADAPTER_BYTES) * share
        grad_bytes, master, state = trained * ADAPTER_BYTES, 0.0, trained * ADAPTER_BYTES
    return {
        "parameters": (copies * shard(weights, 3) + fp8_cache) * on_gpu["parameters"],
        "feedback": copies * shard(feedback * p.weights, 3) * on_gpu["parameters"],
        "gradients": copies * shard(grad_bytes, 2) * on_gpu["gradients"],
        "master_weights": copies * shard(master, 1) * on_gpu["optimizer"],
        "optimizer_state": copies * shard(state * OPTIMIZER_SLOTS[spec.optimizer], 1) * on_gpu["optimizer"],
        # ZeRO-3 gathers each layer whole before using it: its working weights and gradients (DeepSpeed's
        # estimate_zero3_model_states_mem_needs: 4 bytes x the largest layer's parameters, in fp16)
        "gathered": gathered_unit_bytes(facts, spec, p) / spec.tp if stage == 3 and dp > 1 else 0.0,
        # without sequence parallelism the replicated part is whole on each of the t ranks: (A - R) / t + R
        "activations": (((activations + (spec.tp - 1) * replicated_per_sequence(
            facts, rule_name, spec.checkpointing, spec.checkpoint_every) * (not spec.sequence_parallel))
                          * p.activations + lora_activations(facts, spec, p.activations))
                        * _in_flight(facts, spec.pp, split) + unfused_scores(facts, spec, row))
        * schedules.in_flight(schedule, spec.pp, spec.interleave) * retained(facts, spec, schedule, p.activations)
        / (spec.tp * spec.cp),
    }


def retained(facts: ModelFacts, spec: PlanSpec, schedule: str, z: int) -> float:
    """A zero-bubble or DualPipe schedule under a framework that runs torch.distributed.pipelining's split backward
    (``split_backward: retained``): in its order the last stage holds every micro-batch in flight between its B and
    its W, each with its retained graph and its weight nodes' output gradients: the tape's ratio per block
    (tape/split.py retained_ratio); 1 elsewhere (the schedules' papers' counts)."""
    if spec.split_backward != "retained" or schedule not in schedules.SPLIT or facts.config is None:
        return 1.0
    from .tape.split import retained_ratio

    return retained_ratio(facts.config, z)


def lora_activations(facts: ModelFacts, spec: PlanSpec, z: int) -> float:
    """Bytes per sequence a frozen base with adapters saves beyond full training's (finetune.activation_delta: PEFT's
    forms): every block's change where no block is checkpointed, else the one block recomputed at a time's."""
    ft = facts.finetune
    if ft is None or not ft.activation_deltas:
        return 0.0
    blocks_delta, tail, first = ft.activation_delta(z)
    blocks = sum(facts.depth.values())
    checkpointed_blocks = sum(checkpointed(facts, spec.checkpointing, spec.checkpoint_every).values())
    if not checkpointed_blocks:
        return blocks_delta + tail + first
    kept = blocks - checkpointed_blocks + 1
    return blocks_delta * kept / blocks + tail


def host_bytes(facts: ModelFacts, spec: PlanSpec, rule_name: str, per_node: int) -> float:
    """Bytes an offload keeps in one node's host memory (steptime/offload.py): each of its GPUs' optimizer partition
    (fp32 master weights, the moments and an fp32 gradient buffer, DeepSpeed's 16 bytes per parameter with Adam) and,
    with parameter offload, their bit16 parameter shards; on NVMe, their pinned swap buffers alone."""
    if spec.offload == "none":
        return 0.0
    p = PRECISIONS[spec.precision]
    row = facts.row(rule_name)
    share = model_share(facts, spec.tp, spec.pp, split=facts_split(facts, spec.pipeline_split))
    part = row["trained"] * share / shard_ranks(spec)
    shard = (facts.parameters + row["feedback"]) * share / shard_ranks(spec)
    return per_node * host_offload.host_bytes_per_gpu(spec.offload, part, shard, p, OPTIMIZER_SLOTS[spec.optimizer])


def gathered_unit_bytes(facts: ModelFacts, spec: PlanSpec, p) -> float:
    """Bytes of the unit ZeRO-3 / FSDP holds gathered at a time (before tensor parallelism): the largest unit's
    weights and gradients. Where the framework gathers fp8 weights (``fp8_gather`` under fp8-mixed, FSDP's block
    units), a block's weights count one byte each but its routed experts' (torchao's float8 all-gather covers its
    Float8Linear layers, not grouped experts; the block's norms, a few thousandths of it, counted at one byte too),
    and the root unit (embeddings, head, final norm: gathered in bf16) keeps its bytes; the larger of the two.
    Under expert parallelism a block unit gathers only the experts its GPU holds, experts / ep of each mixture (at
    the experts' own tensor-parallel degree; counted here before tensor parallelism, as the caller divides by tp)."""
    unit = {"module": facts.largest_module, "sublayer": facts.largest_layer,
            "block": facts.largest_block}[spec.zero3_gather]
    moe_blocks = sum(facts.moe_layers.values()) if facts.moe_layers else 0
    experts = facts.expert_parameters / moe_blocks if moe_blocks else 0.0  # one block's routed experts
    held = experts * spec.tp / (spec.ep * expert_tp(spec))  # of them, this GPU's (before tensor parallelism)
    root = facts.parameters - facts.blocks_parameters
    if spec.zero3_gather != "block":
        return (p.weights + p.grads) * unit
    if not (p.linear and spec.fp8_gather):
        return (p.weights + p.grads) * max(root, facts.one_block - experts + held)
    block = (facts.one_block - experts) * (1 + p.grads) + held * (p.weights + p.grads)
    return max(root * (p.weights + p.grads), block)


def _in_flight(facts: ModelFacts, pp: int, split: tuple) -> float:
    """The model's blocks of activations on the fullest stage: 1F1B keeps pp micro-batches of that stage's blocks
    in flight, so pp x its blocks over the model's; 1 for an even split (pp x L / pp), a balanced split's fullest
    stage more (nanotron's: the head's stage holds fewer blocks, the others more)."""
    depth = sum(facts.depth.values())
    if split[0] == "even" or pp == 1 or not depth:
        return 1.0
    return max(1.0, fullest_stage(depth, pp, split) * pp / depth)


# Megatron's unfused attention keeps, per layer and sequence, the softmax output (2 bytes per score), the dropout
# mask (1) and the dropout output (2): 5 a s^2 bytes (Korthikanti et al. 2022, section 4.1, eq. 2); a fused kernel
# (FlashAttention) keeps none of them, and the activations above are the fused kernel's.
UNFUSED_SCORE_BYTES = 5


def unfused_scores(facts: ModelFacts, spec: PlanSpec, row: dict) -> float:
    """Bytes per sequence of the attention scores an unfused attention keeps for the backward, on the fullest stage
    with 1F1B's pp micro-batches in flight: every block not checkpointed (one checkpointed block recomputed at a time) of rules with a backward."""
    if spec.attention != "unfused" or not row["backward"] or not facts.scores:
        return 0.0
    counts = checkpointed(facts, spec.checkpointing, spec.checkpoint_every)
    kept = {s: facts.depth[s] - counts[s] for s in facts.depth}
    per_block = {s: UNFUSED_SCORE_BYTES * facts.scores[s] for s in facts.depth}
    total = sum(kept[s] * per_block[s] for s in facts.depth) + (max(per_block.values()) if any(counts.values()) else 0)
    blocks = sum(facts.depth.values())
    # 1F1B's first stage keeps pp micro-batches of its blocks' scores in flight (the schedule's share on top)
    return total * fullest_stage(blocks, spec.pp, facts_split(facts, spec.pipeline_split)) * spec.pp / blocks


def largest_micro_batch(fixed: float, per_sequence: float, capacity: float) -> int:
    """The most sequences whose activations fit beside the fixed bytes (0: not even one)."""
    if fixed + per_sequence > capacity:
        return 0
    if per_sequence <= 0:
        return 2**31 - 1
    return int((capacity - fixed) // per_sequence)


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    return sorted({d for i in range(1, math.isqrt(n) + 1) if n % i == 0 for d in (i, n // i)})


def largest_divisor_at_most(n: int, limit: int, accumulation_multiple: int = 1) -> int:
    """The largest divisor d of ``n`` that is at most ``limit`` and leaves n / d micro-batches a multiple of
    ``accumulation_multiple`` (the interleaved 1F1B schedule's pp; Narayanan et al. 2021, section 2.2); 0 if none."""
    return max((d for d in divisors(n) if d <= limit and (n // d) % accumulation_multiple == 0), default=0)


# ---------------------------------------------------------------------------
# DeepSpeed's published model-state estimators (no offload), for comparison (docs/planning.md)


def deepspeed_zero2_gpu_bytes(total_params: int, gpus: int) -> int:
    """``estimate_zero2_model_states_mem_needs(..., cpu_offload=False)`` (deepspeed/runtime/zero/stage_1_and_2.py):
    4 bytes per parameter (fp16 weights and gradients) + 16 / N (fp32 master, gradient partition and Adam)."""
    return int(4 * total_params + int(16 * total_params / gpus))


def deepspeed_zero2_offload_gpu_bytes(total_params: int) -> int:
    """``estimate_zero2_model_states_mem_needs(..., cpu_offload=True)`` (deepspeedai/DeepSpeed edaa722,
    deepspeed/runtime/zero/stage_1_and_2.py line 3081): 2 bytes per parameter, the bit16 weights alone on the GPU."""
    return int(2 * total_params)


def deepspeed_zero3_offload_gpu_bytes(total_params: int, largest_layer_params: int, gpus: int,
                                      offload_params: bool) -> int:
    """``estimate_zero3_model_states_mem_needs(..., cpu_offload=True, cpu_offload_params=...)`` (deepspeedai/DeepSpeed
    edaa722, deepspeed/runtime/zero/stage3.py line 3744): 4 bytes x the largest layer, and 2 / N bytes per parameter
    unless the parameters are offloaded too."""
    return int(4 * largest_layer_params) + (0 if offload_params else int(2 * total_params / gpus))


def deepspeed_zero3_gpu_bytes(total_params: int, largest_layer_params: int, gpus: int) -> int:
    """``estimate_zero3_model_states_mem_needs(..., cpu_offload=False)`` (deepspeed/runtime/zero/stage3.py):
    4 bytes x the largest layer + 18 / N bytes per parameter."""
    return int(4 * largest_layer_params + int(18 * total_params / gpus))
