"""What a plan and the step-time model both read of a model and a precision: the precisions, the ZeRO stages,
a model's parameter and activation facts, and the share of it on the most loaded GPU (no torch).

:mod:`.plan` (memory, fit, cost) and :mod:`.steptime` (the predicted step) import these, so neither imports the
other's module to get them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd

from . import templates as T
from .catalogue import rule
from ..config.errors import ConfigError
from .layers import HEAD_KINDS, KINDS, MTP
from .memory import _per_layer, memory_table, shapes_namespace

@dataclass(frozen=True)
class Precision:
    name: str
    compute: str  # the dtype of the device peak the matrix products run at
    weights: int  # bytes per parameter of the working copy
    grads: int  # bytes per gradient element
    master: int  # bytes per fp32 master weight (0: the working copy is the master)
    state: int  # bytes per optimizer slot element
    activations: int  # bytes per saved activation element
    source: str
    linear: str | None = None  # the dtype of the blocks' linear products where not ``compute`` (fp8-mixed: fp8)

    @property
    def peak_dtype(self) -> str:
        """The dtype whose peak the plan's MFU is of: the blocks' linear products' (NVIDIA's convention for its FP8
        runs, dgxc-benchmarking's READMEs: 'peak theoretical throughput for H100 FP8 is 1979 TFLOPS')."""
        return self.linear or self.compute


PRECISIONS = {
    "fp32": Precision("fp32", "fp32", 4, 4, 0, 4, 4, "fp32 throughout: 4 + 4 bytes per parameter and 4 per optimizer slot "
                      "(Rajbhandari et al. 2020, section 3.1)"),
    "bf16-mixed": Precision("bf16-mixed", "bf16", 2, 2, 4, 4, 2, "bf16 weights, gradients and activations, fp32 master "
                            "weights and optimizer state: 2 + 2 + (4 + 4 x slots) bytes per parameter (Rajbhandari et al. "
                            "2020, section 3.1: 16 bytes with Adam; Deep Learning and Transformers 2026, section 11.5)"),
    "fp16-mixed": Precision("fp16-mixed", "fp16", 2, 2, 4, 4, 2, "fp16 weights, gradients and activations with loss "
                            "scaling, fp32 master weights and optimizer state (Micikevicius et al. 2018; Rajbhandari et "
                            "al. 2020, section 3.1)"),
    "fp8-mixed": Precision("fp8-mixed", "bf16", 2, 2, 4, 4, 2, "bf16-mixed with the blocks' linear products in fp8 "
                           "(per-tensor scaling: Transformer Engine's recipe, Micikevicius et al. 2022, FP8 Formats "
                           "for Deep Learning; torchao's float8 training): attention, norms, the LM head and the "
                           "optimizer as bf16-mixed, so bf16-mixed's bytes: 2 + 2 + (4 + 4 x slots) per parameter, and where the "
                           "framework caches the fp8 weights (Megatron-Core) 2 more per block parameter (each "
                           "weight's fp8 copy and its transpose; none where they replace bf16 weights kept in fp8, "
                           "NeMo's fp8_params). Not counted: the linear inputs saved in fp8 rather "
                           "than bf16 (counted at 2 bytes)", linear="fp8"),
}
SHARDINGS = ("none", "zero1", "zero2", "zero3", "fsdp")  # fsdp: FULL_SHARD, ZeRO-3's sharding (Zhao et al. 2023)
ZERO_STAGE = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}


def check_precision(name: str, device) -> None:
    """One line where ``device`` lacks the arithmetic the precision needs (fp8-mixed: bf16 and fp8)."""
    if name not in PRECISIONS:
        raise ConfigError(f"precision: {name!r} is not allowed (allowed: {', '.join(PRECISIONS)})")
    precision = PRECISIONS[name]
    needed = [d for d in (precision.compute, precision.linear) if d]
    lacking = [d for d in needed if device.peak(d) is None]
    if lacking:
        allowed = [p for p, q in PRECISIONS.items() if all(device.peak(d) is not None for d in (q.compute, q.linear) if d)]
        missing = f", no {' or '.join(lacking)}" if len(needed) > 1 else ""
        raise ConfigError(f"precision: {name} needs {' and '.join(needed)} arithmetic, which {device.name} has not"
                          f"{missing} (allowed on {device.name}: {', '.join(allowed)})")


@dataclass
class ModelFacts:
    """Per-sequence element counts of one configuration (batch 1), from the memory model and the layer kinds."""

    parameters: int
    blocks_parameters: int  # inside blocks (split over pipeline stages)
    stage_end_parameters: int  # the heavier pipeline end: embeddings, or head and final norm (a tied table copied)
    all_end_parameters: int
    largest_layer: int  # parameters of the largest layer instance (a sublayer, the embedding or the head)
    per_rule: pd.DataFrame  # index rule: feedback, trained, activations (elements per sequence), backward (bool)
    block_saved: dict  # stack -> autograd's saved elements of one block, per sequence
    block_input: dict  # stack -> elements of one block's input, per sequence
    depth: dict  # stack -> blocks
    largest_module: int = 0  # parameters of the largest torch module (its own: DeepSpeed ZeRO-3's unit)
    largest_block: int = 0  # parameters of the largest block, or of the ends outside the blocks (FSDP's units)
    one_block: int = 0  # parameters of the largest block alone (FSDP's block unit; the ends are the root unit)
    expert_parameters: int = 0  # a mixture of experts' routed experts (split over the expert-parallel degree)
    end_expert_parameters: int = 0  # of the ends' parameters, multi-token prediction's routed experts (/ ep too)
    moe_layers: dict = None  # stack -> blocks with a mixture of experts (each: two all-to-alls per pass)
    scores: dict = None  # stack -> attention score elements of one block per sequence (heads x queries x keys)
    split_costs: tuple = (1, 0)  # a block's and the LM head's cost in nanotron's balanced split (stage_split)
    finetune: object = None  # with adapters (analytic/finetune.py): FineTuneFacts; None: every parameter trained
    config: object = None  # the configuration itself (a replay of its blocks: tape/split.py retained_ratio)
    # stack -> of a block's saved elements per sequence, those of the model's width that tensor parallelism without
    # sequence parallelism keeps whole on every rank: the norms' saved inputs and each sublayer's saved input (the
    # column-parallel products' input; Korthikanti et al. 2022, section 4.2.2)
    block_replicated: dict = None
    _rows: dict = field(default_factory=dict, repr=False, compare=False)

    def row(self, rule_name: str) -> dict:
        """``per_rule``'s row of a rule as a dict (kept: a layout search reads it thousands of times)."""
        if rule_name not in self._rows:
            self._rows[rule_name] = self.per_rule.loc[rule_name].to_dict()
        return self._rows[rule_name]


@dataclass(frozen=True)
class FineTuneFacts:
    """A frozen base with adapters (analytic/finetune.py): its kind, the adapters' parameters, and (qlora) the
    base's bytes whole (NF4 Linears, the rest fp32); lora's base takes the precision's weight bytes."""

    kind: str
    adapters: int
    qlora_bytes: float = 0.0
    # bytes per sequence PEFT's saved tensors differ by from full training's, per activation width z:
    # ((z, block (all blocks), tail, first), ...) (finetune.activation_delta)
    activation_deltas: tuple = ()

    def activation_delta(self, z: int) -> tuple:
        """(all blocks, tail, first block) at ``z`` bytes per activation element (zeros where none is known)."""
        return next(((b, t, f) for width, b, t, f in self.activation_deltas if width == z), (0.0, 0.0, 0.0))


def model_facts(cfg, rules, optimizer: str, finetune=None) -> ModelFacts:
    """The facts of ``cfg`` under ``rules`` (cached: a plan reads them for every layout it searches, and they depend
    on the model, the rules and the optimizer only). Read-only: the same object is returned to every caller. Built
    once per model and optimizer for every rule of the catalogue (its ``per_rule`` holds each), whichever rules are
    asked for. ``finetune`` (a FineTune with adapters): BP trains the adapters alone."""
    from .catalogue import rule_names

    known = tuple(rule_names())
    asked = tuple(rules)
    chosen = known if set(asked) <= set(known) else asked
    if finetune is None or not finetune.adapters:
        return _model_facts(cfg, chosen, optimizer)
    return _finetune_facts(cfg, chosen, optimizer, finetune)


@lru_cache(maxsize=64)
def _finetune_facts(cfg, rules: tuple, optimizer: str, ft) -> ModelFacts:
    from dataclasses import replace

    from .finetune import activation_delta, adapter_parameters, base_bytes

    facts = _model_facts(cfg, rules, optimizer)
    adapters = adapter_parameters(cfg, ft)
    per_rule = facts.per_rule.copy()
    per_rule.loc["bp", "trained"] = adapters
    qlora = base_bytes(cfg, ft, facts.parameters, 4) if ft.kind == "qlora" else 0.0
    deltas = tuple((z, *(activation_delta(cfg, ft, z)[k] for k in ("block", "tail", "first"))) for z in (1, 2, 4))
    return replace(facts, per_rule=per_rule, finetune=FineTuneFacts(ft.kind, adapters, qlora, deltas), _rows={})


@lru_cache(maxsize=64)
def _model_facts(cfg, rules: tuple, optimizer: str) -> ModelFacts:
    rules = list(rules)
    configs = _configs(cfg)
    memory = memory_table(configs, rules, ["fp32"], [optimizer], executed=False).set_index("rule")  # components
    t = T.build(configs, "layer")
    per = _per_layer(t)
    kinds = t.kind
    model_layer = np.array([KINDS[k].model_layer for k in kinds], dtype=bool)
    params = np.where(model_layer, per["params"], 0)
    stacks = t.stack
    mtp = stacks == MTP  # multi-token prediction's modules: with the head, on the last pipeline stage
    blocks = t.is_block & model_layer & ~mtp
    total = int((params * t.count).sum())
    in_blocks = int((params * t.count)[blocks].sum())
    tail = (t.rank % 1000 >= T.TAIL_RANK) | np.isin(kinds, HEAD_KINDS) | mtp
    out_end = int((params * t.count)[~blocks & tail].sum())
    in_end = int(params[~blocks & ~tail].sum())
    # the last stage's copy of the input table: a tied head's, or multi-token prediction's embedding (Megatron-Core
    # keeps both on the last pipeline stage)
    tied = (cfg.tie_embeddings or cfg.mtp) and not cfg.classes
    stage_end = max(in_end, out_end + (cfg.vocab * cfg.d_model if tied else 0))
    block_saved, block_input, depth = {}, {}, {}
    subs = t.sub

    def one_of_each(values, mine) -> int:
        """A block's sum of one instance of each sublayer: a sublayer of two templates (a mixture and its dense first
        blocks' FFN), the larger."""
        best: dict = {}
        for name, value in zip(subs[mine], values[mine]):
            best[name] = max(best.get(name, 0), int(value))
        return sum(best.values())

    block_replicated = {}
    norms = np.isin(kinds, ("add_norm", "norm"))
    for stack in cfg.stacks:
        mine = blocks & (stacks == stack)
        block_saved[stack] = one_of_each(per["saved"], mine)  # one instance of each sublayer of the block
        block_input[stack] = cfg.rows(stack) * cfg.d_model
        depth[stack] = cfg.depth(stack)
        # a norm's saved input, and the input each other sublayer saves for its products (d wide: whole per rank
        # without sequence parallelism); sublayers that save nothing (DFA's projections) hold none
        whole = np.where(norms, per["saved"], np.where(per["saved"] > 0, block_input[stack], 0))
        if cfg.encdec:  # cross-attention saves the encoder's output too (its keys' and values' input), source-long
            whole = whole + np.where((kinds == "cross_attention") & (per["saved"] > 0),
                                     cfg.rows("encoder") * cfg.d_model, 0)
        block_replicated[stack] = one_of_each(whole, mine)
    per_rule = pd.DataFrame({
        "feedback": memory["feedback"] // 4,
        "trained": memory["gradients"] // 4,
        "activations": memory["activations"] // 4,
        "backward": [bool(rule(r).recipe.get("backward")) for r in memory.index],
    }, index=memory.index)
    modules = params.copy()  # a layer of one module: its parameters; else its largest module's (LayerKind.module_params)
    for kind, index in t.kind_index().items():
        if KINDS[kind].module_params is not None:
            modules[index] = KINDS[kind].module_params(shapes_namespace(t, index))
    one_block = max((one_of_each(params, blocks & (stacks == s)) for s in cfg.stacks), default=0)
    moe = kinds == "moe"  # the routed experts: all but the router and the shared expert with its gate
    s = shapes_namespace(t, moe)
    shared = (s.sff > 0) * ((2 + s.gated) * s.d * s.sff + s.bo * ((1 + s.gated) * s.sff + s.d) + s.sg * s.d)
    routed = (params[moe] - s.d * s.E - shared) * t.count[moe]
    experts = int(routed[~mtp[moe]].sum())
    return ModelFacts(total, in_blocks, stage_end, total - in_blocks, int(params.max()), per_rule, block_saved,
                      block_input, depth, largest_module=int(np.where(model_layer, modules, 0).max()),
                      largest_block=max(one_block, total - in_blocks), one_block=one_block,
                      expert_parameters=experts, end_expert_parameters=int(routed[mtp[moe]].sum()),
                      moe_layers={stack: depth[stack] - cfg.dense_blocks if cfg.moe else 0 for stack in cfg.stacks},
                      block_replicated=block_replicated,
                      scores={stack: cfg.heads * (cfg.seq_len ** 2 if stack != "decoder" or not cfg.encdec else
                                                  cfg.tgt_len ** 2 + cfg.tgt_len * cfg.seq_len)
                              for stack in cfg.stacks},
                      split_costs=stage_split(cfg, "balanced")[1:], config=cfg)


def _configs(cfg) -> pd.DataFrame:
    """The one-row configs frame of ``cfg`` at batch 1 (a copy of one kept per model)."""
    return _configs_kept(cfg).copy()


@lru_cache(maxsize=64)
def _configs_kept(cfg) -> pd.DataFrame:
    from ..config import configs_frame

    return configs_frame([("", cfg.replace(batch=1))])



EVEN = ("even", 1, 0)


def facts_split(facts: ModelFacts, name: str = "even") -> tuple:
    """:func:`stage_split` from a model's facts."""
    return EVEN if name == "even" else ("balanced", *facts.split_costs)


def stage_split(cfg, name: str = "even") -> tuple:
    """The split of a framework (config/frameworks.yaml, pipeline_split) for this model, as :func:`stages` takes it:
    ``("even", 1, 0)``, or ``("balanced", block cost, head cost)`` with nanotron's costs (models/llama.py,
    get_block_compute_costs: a block 4 d^2 + 3 d d_ff, the LM head V d)."""
    if name == "even":
        return EVEN
    d = cfg.d_model
    return ("balanced", 4 * d * d + 3 * cfg.d_ff * d, (cfg.classes or cfg.vocab) * d)


@lru_cache(maxsize=4096)
def stages(blocks: int, pp: int, split: tuple = EVEN) -> tuple:
    """Each pipeline stage's (blocks, holds the head), first to last.

    even (Megatron): blocks / pp each, or where pp does not divide them the first stages the ceiling and the rest
    the floor, the head on the last (docs/planning.md, "Uneven pipeline stages"). balanced (nanotron,
    models/base.py build_model): the blocks and then the head, in order, each on the current stage, which ends
    after the unit whose cumulative cost passes total x (stage + 1) / pp; a stage may end up empty."""
    name, block_cost, head_cost = split
    if name == "even" or pp == 1:
        low, extra = divmod(blocks, pp)
        return tuple((low + (1 if i < extra else 0), i == pp - 1) for i in range(pp))
    counts, head_on = [0] * pp, pp - 1
    total = blocks * block_cost + head_cost
    cumulative, stage = 0, 0
    for unit in range(blocks + 1):
        if unit < blocks:
            counts[stage] += 1
            cumulative += block_cost
        else:
            head_on = stage
            cumulative += head_cost
        if cumulative > total * (stage + 1) / pp:
            stage = min(stage + 1, pp - 1)
    return tuple((n, i == head_on) for i, n in enumerate(counts))


def fullest_stage(blocks: int, pp: int, split: tuple = EVEN, of: int | None = None) -> int:
    """Blocks on the fullest pipeline stage (:func:`stages`): blocks / pp, or, where pp does not divide them, the
    ceiling (docs/planning.md, "Uneven pipeline stages"). ``of``: the model's blocks where ``blocks`` counts some
    of them (its mixture-of-experts or checkpointed blocks), spread as the stage's share of the model's."""
    if split[0] == "even":
        return -(-blocks // pp)
    if of is None:
        return max(n for n, _ in stages(blocks, pp, split))
    return -(-blocks * max(n for n, _ in stages(of, pp, split)) // of) if of else 0


def model_share(facts: ModelFacts, tp: int, pp: int, ep: int = 1, split: tuple = EVEN) -> float:
    """The share of the model's parameters on the most loaded GPU: the fullest stage's blocks (blocks / pp, the
    ceiling where pp does not divide them) plus the heavier end, all / tp; the routed experts of the blocks also
    / ep (each GPU of an expert-parallel group holds experts / ep). Under MoE parallel folding (the experts' tensor
    parallelism etp other than tp) pass ep x etp / tp: the experts are then / (ep x etp)."""
    ends = (facts.all_end_parameters if pp == 1 else facts.stage_end_parameters) \
        - facts.end_expert_parameters * (1 - 1 / ep)  # (multi-token prediction's experts, on the last stage)
    blocks = facts.blocks_parameters - facts.expert_parameters * (1 - 1 / ep)
    depth = sum(facts.depth.values())
    fraction = fullest_stage(depth, pp, split) / depth if depth else 1 / pp
    return (blocks * fraction + ends) / (tp * facts.parameters)

