"""Fine-tuning with a frozen base: LoRA (Hu et al. 2021) and QLoRA (Dettmers et al. 2023), as PEFT runs them.

No torch. What changes against full training (``full``, every parameter trained), for the plan and the step-time
model (docs/planning.md, "Fine-tuning"):

- **Trained**: only the adapters. Each targeted Linear (k inputs, n outputs) gets A (k x r) and B (r x n): r (k + n)
  parameters (PEFT's ``LoraLayer.update_layer``, huggingface/peft 5d602fd, src/peft/tuners/lora/layer.py; no adapter
  bias by default). Gradients and optimizer state exist for them alone (``_mark_only_adapters_as_trainable``).
- **Stored**: the frozen base in the weights' dtype (``lora``), or (``qlora``) the blocks' Linear weights in 4-bit
  NF4 with double quantization (bitsandbytes ``quantize_4bit``, blocksize 64, the absmax quantized again in blocks
  of 256: :func:`nf4_bytes`) and every other parameter in fp32, as PEFT's ``prepare_model_for_kbit_training`` casts
  them (src/peft/utils/other.py: every non-4-bit half-precision parameter to fp32). The adapters are fp32 either way
  (``get_peft_model``'s ``autocast_adapter_dtype``), so their weights, gradients and Adam moments take 4 bytes each.
- **FLOPs** per targeted Linear on T rows (torch's FlopCounterMode convention, checked against PEFT in
  tests/test_finetune.py): forward 2 T k n + 2 T r (k + n); backward the base's input gradient 2 T k n (no weight
  gradient) and the adapters' 4 T r (k + n) (B: input and weight gradients 2 T r n each; A: 2 T k r each). A frozen
  Linear not targeted costs its forward and its input gradient; the head the same; the embedding nothing.
- **The first block**: the embedding is frozen, so the first block's input carries no gradient (PEFT's default), and
  autograd skips the input gradients of the products that read it (q, k and v, and their adapters' A). PEFT's
  ``enable_input_require_grads`` (which ``prepare_model_for_kbit_training`` calls for reentrant checkpointing, the
  QLoRA recipe) makes the embedding's output require a gradient, and those products run again (``input_grad``).

Which learning rules train adapters: BP only. The other rules' feedback paths are defined for the weights they
update; none of the sources defines them for a low-rank adapter of a frozen weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config.errors import ConfigError

FINETUNES = ("full", "lora", "qlora")
LORA_TARGETS = ("q", "k", "v", "o", "qkv", "gate", "up", "down")
ATTENTION_TARGETS = ("q", "k", "v", "o", "qkv")
DEFAULT_TARGETS = ("q", "v")  # PEFT's default for llama, mistral, qwen2, gemma (TRANSFORMERS_MODELS_TO_LORA_...)
DEFAULT_RANK = 8  # PEFT's LoraConfig r
ADAPTER_RULES = ("bp",)
ADAPTER_BYTES = 4  # fp32 adapters (PEFT's autocast_adapter_dtype): weights, gradients and each optimizer slot
NF4_BLOCK = 64  # bitsandbytes quantize_4bit's default blocksize
NF4_STATS_BLOCK = 256  # double quantization: the absmax quantized again in blocks of 256
NF4_TENSOR_BYTES = 1024 + 64 + 4  # per tensor: the 256-entry fp32 map of the second level, the 16-entry NF4 code, the offset
SOURCE = ("Hu et al. 2021 (LoRA) and Dettmers et al. 2023 (QLoRA, section 3), as PEFT (huggingface/peft 5d602fd) and "
          "bitsandbytes (95f9af3) run them: docs/planning.md, \"Fine-tuning\"")


@dataclass(frozen=True)
class FineTune:
    """What is trained: ``full`` (every parameter), or ``lora``/``qlora`` adapters of rank ``rank`` on ``targets``
    (names of the blocks' Linears: q, k, v, o, qkv for a fused q/k/v projection, gate, up, down). ``input_grad``: the
    first block's input carries a gradient (PEFT's enable_input_require_grads); None: as the recipe does (qlora: yes,
    through prepare_model_for_kbit_training; lora: only with activation checkpointing, which PEFT runs reentrant)."""

    kind: str = "full"
    rank: int = DEFAULT_RANK
    targets: tuple = DEFAULT_TARGETS
    input_grad: bool | None = None

    @property
    def adapters(self) -> bool:
        return self.kind != "full"


FULL = FineTune()


def from_flags(kind: str = "full", rank: int | None = None, targets=None) -> FineTune:
    """The FineTune of --finetune, --lora-rank and --lora-targets (the last two only with adapters)."""
    if kind == "full":
        for flag, value in (("--lora-rank", rank), ("--lora-targets", targets)):
            if value is not None:
                raise ConfigError(f"{flag}: adapters' setting; it needs --finetune lora or qlora (got --finetune full)")
        return FULL
    return FineTune(kind, DEFAULT_RANK if rank is None else rank,
                    DEFAULT_TARGETS if targets is None else parse_targets(targets))


def parse_targets(text) -> tuple:
    """``q,v`` or ``all`` (every Linear of the blocks: PEFT's all-linear) into a tuple; one line for a bad name."""
    items = text if isinstance(text, (tuple, list)) else str(text).replace(" ", "").lower().split(",")
    items = tuple(dict.fromkeys(i for i in items if i))
    if items == ("all",):
        return items
    bad = [i for i in items if i not in LORA_TARGETS]
    if bad or not items:
        raise ConfigError(f"lora_targets: {', '.join(bad) or 'nothing'} is not a target (allowed: all, or names "
                          f"separated by commas from {', '.join(LORA_TARGETS)})")
    return items


def targets_of(cfg, ft: FineTune) -> tuple:
    """The targets with ``all`` expanded for this model: q, k, v, o and the FFN's gate (gated FFNs), up and down."""
    if ft.targets == ("all",):
        return ("q", "k", "v", "o", *(("gate",) if cfg.gated else ()), "up", "down")
    return tuple(ft.targets)


def check_finetune(ft: FineTune, cfg, rules=(), cost_models=(), precision: str = "bf16-mixed") -> None:
    """One line naming the field and what is allowed, before any arithmetic."""
    if ft.kind not in FINETUNES:
        raise ConfigError(f"finetune: {ft.kind!r} is not allowed (allowed: {', '.join(FINETUNES)})")
    if not ft.adapters:
        return
    if isinstance(ft.rank, bool) or not isinstance(ft.rank, int) or ft.rank < 1:
        raise ConfigError(f"lora_rank: must be a positive integer (got {ft.rank!r})")
    parse_targets(ft.targets)
    others = [r for r in rules if r not in ADAPTER_RULES]
    if others:
        raise ConfigError(f"rule: {', '.join(others)} cannot train adapters (--finetune {ft.kind}); allowed: "
                          f"{', '.join(ADAPTER_RULES)} (no source defines their feedback for an adapter)")
    priced = [m for m in cost_models if m != "executed"]
    if priced:
        raise ConfigError(f"cost_model: {', '.join(priced)} count full training; --finetune {ft.kind} is priced under "
                          "executed only (allowed: executed)")
    if cfg.encdec:
        raise ConfigError(f"finetune: {ft.kind} on an encoder-decoder is not priced (its cross-attention's adapters); "
                          "allowed: decoder-only and encoder-only models, or --finetune full")
    if cfg.mtp:
        raise ConfigError(f"finetune: {ft.kind} with multi-token prediction is not priced (PEFT adapts the model "
                          "transformers loads, which has no multi-token prediction modules); allowed: full, or mtp_depth 0")
    if cfg.latent:
        raise ConfigError(f"finetune: {ft.kind} adapters on latent attention are not priced (its q_a, q_b, kv_a, kv_b "
                          "Linears); allowed: full")
    targets = targets_of(cfg, ft)
    if "qkv" in targets and set(targets) & {"q", "k", "v"}:
        raise ConfigError("lora_targets: qkv is the fused q/k/v projection (GPT-2's c_attn, GPT-NeoX's "
                          "query_key_value); give it or q, k, v, not both")
    if "gate" in targets and not cfg.gated:
        raise ConfigError(f"lora_targets: gate needs a gated FFN (the model's is {cfg.ffn}); allowed: "
                          f"{', '.join(t for t in LORA_TARGETS if t != 'gate')}")
    if cfg.moe and (ft.targets == ("all",) or set(targets) - set(ATTENTION_TARGETS)):
        raise ConfigError("lora_targets: on a mixture of experts only attention projections are priced (the experts "
                          "are 3-D parameters in transformers 5, which PEFT's target_modules does not adapt); allowed: "
                          f"{', '.join(ATTENTION_TARGETS)}")
    if precision == "fp8-mixed":
        raise ConfigError(f"precision: fp8-mixed is not priced with --finetune {ft.kind} (allowed: fp32, bf16-mixed, "
                          "fp16-mixed)")
    if ft.kind == "qlora" and cfg.moe:
        raise ConfigError("finetune: qlora on a mixture of experts is not priced (bitsandbytes quantizes nn.Linear, not "
                          "transformers' 3-D expert parameters); allowed: lora, full")


def linear_shapes(cfg) -> dict:
    """(k, n) of each Linear a block may adapt: inputs and outputs (the attention's a = heads x head_dim, kv = kv_heads
    x head_dim; the FFN's d_ff)."""
    d, a, kv, ff = cfg.d_model, cfg.attn_width, cfg.kv_width, cfg.d_ff
    return {"q": (d, a), "k": (d, kv), "v": (d, kv), "qkv": (d, a + 2 * kv), "o": (a, d),
            "gate": (d, ff), "up": (d, ff), "down": (ff, d)}


def _blocks(cfg) -> list:
    """(blocks, rows per sequence) per stack."""
    return [(cfg.depth(s), cfg.rows(s)) for s in cfg.stacks]


def adapter_parameters(cfg, ft: FineTune) -> int:
    """The adapters' parameters: r (k + n) per targeted Linear of every block."""
    if not ft.adapters:
        return 0
    shapes = linear_shapes(cfg)
    per_block = sum(ft.rank * sum(shapes[t]) for t in targets_of(cfg, ft))
    return sum(n for n, _ in _blocks(cfg)) * per_block


def adapter_flops(cfg, ft: FineTune) -> dict:
    """The adapters' FLOPs per sequence, all blocks: forward 2 T r (k + n), backward (input gradients) 2 T r (k + n),
    weight gradients 2 T r (k + n), per targeted Linear."""
    shapes = linear_shapes(cfg)
    one = sum(2 * ft.rank * sum(shapes[t]) for t in targets_of(cfg, ft)) if ft.adapters else 0
    total = sum(n * rows * one for n, rows in _blocks(cfg))
    return {"forward": total, "backward": total, "weight_grad": total}


def input_grad(ft: FineTune, checkpointing: str = "none") -> bool:
    """Whether the first block's input carries a gradient (module docstring)."""
    if ft.input_grad is not None:
        return bool(ft.input_grad)
    return ft.kind == "qlora" or checkpointing != "none"


def resolved(ft: FineTune, checkpointing: str = "none") -> FineTune:
    """``ft`` with ``input_grad`` decided (:func:`input_grad`), for a layout's checkpointing."""
    if not ft.adapters or ft.input_grad is not None:
        return ft
    return FineTune(ft.kind, ft.rank, ft.targets, input_grad(ft, checkpointing))


def first_block_skipped(cfg, ft: FineTune, checkpointing: str = "none") -> int:
    """FLOPs per sequence autograd skips in the first block when its input carries no gradient: the input gradients
    of the products that read the block input (q, k, v, or the FFN's gate and up in a parallel block, or after an
    attention with no adapter), their adapters' A too; and where no product before them needs one, the attention
    core's backward with o's input gradient, or the down projection's."""
    if not ft.adapters or input_grad(ft, checkpointing) or not cfg.stacks:
        return 0
    shapes, r = linear_shapes(cfg), ft.rank
    targets = set(targets_of(cfg, ft))
    stack = cfg.stacks[0]
    T = cfg.rows(stack)
    qkv = ("qkv",) if "qkv" in targets else ("q", "k", "v")
    ffn_in = ("gate", "up") if cfg.gated else ("up",)

    def dgrad(names):  # the base's input gradients and the targeted ones' A input gradients
        return sum(2 * T * shapes[x][0] * shapes[x][1] + (2 * T * shapes[x][0] * r if x in targets else 0)
                   for x in names)

    skipped = dgrad(qkv)
    attention_grad = bool(targets & {"q", "k", "v", "qkv"})
    if not attention_grad:  # nothing before o needs a gradient: the core's backward and o's input gradient go too
        core = (8 if cfg.attention_softcap else 10) * T * T * cfg.attn_width
        skipped += core + dgrad(("o",))
    ffn_grad = bool(targets & {"gate", "up"})
    if cfg.parallel_block != "none" or not (attention_grad or "o" in targets):
        # the FFN reads the block input (a parallel block), or a residual stream nothing has given a gradient yet
        if cfg.moe:
            raise ConfigError("finetune: adapters on a parallel block with a mixture of experts are not priced")
        skipped += dgrad(ffn_in) + (0 if ffn_grad else dgrad(("down",)))
    return skipped


def finetune_flops(cfg, ft: FineTune, bp_forward: int, bp_backward: int, checkpointing: str = "none") -> int:
    """Model FLOPs per sequence of a fine-tuning step: BP's forward and input gradients (the engine's, executed
    convention), no weight gradient but the adapters', the first block's skipped products left out."""
    a = adapter_flops(cfg, ft)
    return (bp_forward + bp_backward + a["forward"] + a["backward"] + a["weight_grad"]
            - first_block_skipped(cfg, ft, checkpointing))


def adapter_forward_per_block(cfg, ft: FineTune) -> dict:
    """Per stack, one block's adapter forward FLOPs per sequence (what a checkpointed block's recompute adds)."""
    shapes = linear_shapes(cfg)
    one = sum(2 * ft.rank * sum(shapes[t]) for t in targets_of(cfg, ft)) if ft.adapters else 0
    return {s: cfg.rows(s) * one for s in cfg.stacks}


def nf4_bytes(n: int, double_quant: bool = True) -> int:
    """Bytes bitsandbytes stores for a weight of n elements in 4 bits (quantize_4bit, blocksize 64): the packed
    values, two per byte, and per block of 64 its absmax: fp32, or with double quantization one byte, the fp32
    absmax of every 256 of those, the second level's 256-entry fp32 map, the 16-entry NF4 code and an fp32 offset
    (0.5 + 8/64 + 32/(64 x 256) bits per parameter, Dettmers et al. 2023, section 3)."""
    blocks = math.ceil(n / NF4_BLOCK)
    if not double_quant:
        return math.ceil(n / 2) + 4 * blocks
    return math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / NF4_STATS_BLOCK) + NF4_TENSOR_BYTES


def quantized_linears(cfg) -> list:
    """(elements, count) of every Linear weight bitsandbytes quantizes: each block's q, k, v, o and FFN matrices
    (not the head, which transformers' quantizer keeps in full precision, nor the embeddings, norms or biases)."""
    shapes = linear_shapes(cfg)
    names = ("q", "k", "v", "o", *(("gate",) if cfg.gated else ()), "up", "down")
    blocks = sum(n for n, _ in _blocks(cfg))
    return [(shapes[x][0] * shapes[x][1], blocks) for x in names]


def base_bytes(cfg, ft: FineTune, parameters: int, weight_bytes: int) -> float:
    """Bytes of the frozen base (``parameters`` elements): in the weights' dtype (lora), or the blocks' Linear weights
    in NF4 and the rest in fp32 (qlora, prepare_model_for_kbit_training)."""
    if ft.kind != "qlora":
        return float(parameters * weight_bytes)
    linears = quantized_linears(cfg)
    quantized = sum(n * c for n, c in linears)
    return float(sum(nf4_bytes(n) * c for n, c in linears) + 4 * (parameters - quantized))


def describe(ft: FineTune, cfg, checkpointing: str = "none") -> str:
    """The fine-tuning in words, for the plan's assumptions."""
    if not ft.adapters:
        return "full: every parameter trained"
    targets = ",".join(targets_of(cfg, ft))
    grad = "the first block's input with a gradient (enable_input_require_grads)" if input_grad(ft, checkpointing) \
        else "no gradient into the first block's input (the embedding frozen)"
    base = ("the base frozen: its blocks' Linear weights in 4-bit NF4 with double quantization, the rest in fp32"
            if ft.kind == "qlora" else "the base frozen in the weights' dtype")
    return (f"{ft.kind}: rank-{ft.rank} adapters on {targets} of every block ({adapter_parameters(cfg, ft):,} "
            f"parameters, trained in fp32), {base}; {grad}")


# ---------------------------------------------------------------------------
# Activations: what PEFT's LoRA saves beside full training's (transformers' models, checked on Llama)

ACTIVATION_SOURCE = ("PEFT's LoRA on transformers' models: a frozen weight's product saves nothing for it (its input "
                     "only where an adapter reads it in fp32), an RMSNorm's frozen gain leaves its normalised input "
                     "unsaved, each adapter keeps its input cast to fp32 (a copy in a narrower dtype) and A's rank-r "
                     "output; checked to the byte against saved_tensors_hooks on transformers' Llama "
                     "(tests/test_finetune.py)")


def activation_delta(cfg, ft: FineTune, z: int) -> dict:
    """Bytes per sequence that a LoRA step's saved tensors differ by from full training's (negative: fewer), by part:
    ``block`` (one block: its adapters add A's rank-r output, 4 bytes each, and in a dtype narrower than fp32 a fp32
    copy of the adapted product's input; the inputs kept only for a frozen weight's gradient go: q/k/v's, the FFN's
    and down's, unless an adapter reads the same fp32 tensor; o's input is the attention kernel's own output, which it
    keeps anyway; each RMSNorm's normalised input to its frozen gain goes), ``tail`` (the frozen head's input and the
    final RMSNorm's, and the embedding's int64 ids), and ``first`` (without an input gradient, PEFT's default for
    lora, the first block's norm saves nothing: the fp32 input to its square and the reciprocal root go). ``z``: the
    activations' bytes per element. transformers' forms, measured with saved_tensors_hooks (docs/planning.md)."""
    if not ft.adapters:
        return {"block": 0.0, "tail": 0.0, "first": 0.0}
    shapes, r, d = linear_shapes(cfg), ft.rank, cfg.d_model
    targets = set(targets_of(cfg, ft))
    rms = cfg.norm == "rmsnorm"
    norms = 1 if cfg.parallel_block == "one_norm" else 2  # a block's norms with a gain
    groups = [(("q", "k", "v", "qkv"), d), (("gate", "up") if cfg.gated else ("up",), d), (("down",), cfg.d_ff)]
    out = {"block": 0.0, "tail": 0.0, "first": 0.0}
    for stack in cfg.stacks:
        T, blocks = cfg.rows(stack), cfg.depth(stack)
        freed = (norms * T * d * z if rms else 0) + sum(
            T * width * z for names, width in groups if not (z >= 4 and targets & set(names)))
        added = sum(T * r * 4 + (T * shapes[t][0] * 4 if z < 4 else 0) for t in targets)
        out["block"] += blocks * (added - freed)  # (whole model; per block: divided by the blocks below)
        out["tail"] -= T * 8  # the embedding's ids
    last = cfg.stacks[-1]
    T = cfg.rows(last) if not cfg.classes else 1
    out["tail"] -= T * d * z * (2 if rms and cfg.final_norm else 1)  # the head's input (and its norm's)
    if rms and not input_grad(ft):
        T = cfg.rows(cfg.stacks[0])
        out["first"] = -(T * (d * 4 + 4))
        if not targets & {"q", "k", "v", "qkv"}:  # nothing in the attention before o needs a gradient: the kernel
            # keeps neither q, k, v nor its log-sum-exp, nor its output unless o's adapter reads it in fp32
            out["first"] -= T * (cfg.attn_width + 2 * cfg.kv_width) * z + T * cfg.heads * 4
            if not (z >= 4 and "o" in targets):
                out["first"] -= T * cfg.attn_width * z
        if not targets & {"q", "k", "v", "qkv", "o"} and cfg.gated:  # nor does the residual stream after it: the
            # FFN's norm saves nothing, and the gated product keeps only what an adapted factor's gradient reads
            out["first"] -= T * (d * 4 + 4)
            if "gate" not in targets:  # the activation's input (gate's output) and up's output
                out["first"] -= 2 * T * cfg.d_ff * z
            if "up" not in targets:  # the activation's output
                out["first"] -= T * cfg.d_ff * z
    return out
