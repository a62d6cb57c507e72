"""The allowed values the configuration decides: arches, architecture options and run settings.

Declared once here, imported by :mod:`.model` and :mod:`.training`, and filled into the schema's enums when
:mod:`.schema` loads it: the shipped schema file lists none of them. (The learning rules and cost models are
the catalogue's, :func:`trainingcost.analytic.catalogue.vocabulary`, passed in by callers that know it.)
"""

from __future__ import annotations

ARCHES = ("encoder", "decoder", "encoder-decoder")

# Architecture options. Each has a default that is the 2017 transformer (Vaswani et al. 2017), which trainingcost
# costed first (config/model.py's option declarations; a new option may write its values there instead).
NORMS = ("layernorm", "rmsnorm", "nonparametric", "layernorm_nobias")  # nonparametric: LayerNorm without gain or bias
# (OLMo); layernorm_nobias: LayerNorm with a gain and no bias (Cohere's Command R; torch's nn.LayerNorm(bias=False))
NORM_POSITIONS = ("post", "pre", "output")
FFNS = ("gelu", "relu", "swiglu", "geglu")
POSITIONS = ("sinusoidal", "learned", "rotary", "relative", "none")
# qkv: biases on the query, key and value projections only (Qwen2); attention: on q, k, v and o, none in the FFN
# (Llama's attention_bias without mlp_bias); ffn: on the FFN's matrices only (GPT-J; GPT-NeoX without attention_bias)
BIASES = ("all", "none", "qkv", "attention", "ffn")
# qk_norm: an RMSNorm on the queries and keys after their projections, over each head's head_dim (Qwen3, Gemma 3) or
# over each whole projection, heads x head_dim wide (OLMo 2)
QK_NORMS = ("none", "head", "projection")
# Parallel attention and FFN (GPT-J, GPT-NeoX, Phi-1/2, Falcon): x + attn(norm(x)) + ffn(norm(x)) with one norm
# read by both branches (one_norm), or a norm each (two_norms); none: the branches in sequence.
PARALLEL_BLOCKS = ("none", "one_norm", "two_norms")
# (Which option takes which values is its declaration's, config/model.py's option(): OPTION_CHOICES there.)

# What a training run may be asked for (config/training.py checks a run's settings against them).
TASKS = ("lm", "classify", "copy", "reverse")
DEVICES = ("auto", "cpu", "cuda")
TRAIN_DTYPES = ("fp32", "bf16")
OPTIMIZERS = ("sgd", "momentum", "adam")
PARALLEL = ("ddp", "zero2", "fsdp")  # data-parallel runs (docs/distributed.md)
BACKENDS = ("auto", "gloo", "nccl")

# How other tables, configs and command lines spell these values, as this project's names; letter case aside
# (:func:`spelling`). The published-runs reader (analytic/steptime/runs.py) and the plan's flags read them. A name
# that means more than one thing is not guessed: HYBRID_SHARD (HSDP) needs its replica groups (the reader takes it
# where a row's ``replicate`` gives them).
SPELLINGS = {
    # mixed precision keeps fp32 master weights whatever a table calls it (MosaicML's amp_bf16 / amp_fp8, NVIDIA's
    # BF16 / FP8, torch's dtype names bfloat16 / float16)
    "precision": {"bf16": "bf16-mixed", "amp_bf16": "bf16-mixed", "fp16": "fp16-mixed", "amp_fp16": "fp16-mixed",
                  "fp8": "fp8-mixed", "amp_fp8": "fp8-mixed", "bfloat16": "bf16-mixed", "float16": "fp16-mixed",
                  "bf16_mixed": "bf16-mixed", "fp16_mixed": "fp16-mixed", "fp8_mixed": "fp8-mixed",
                  "float32": "fp32"},
    # FSDP's ShardingStrategy names (torch.distributed.fsdp), DeepSpeed's stage spelled out, plain DDP
    "sharding": {"zero-1": "zero1", "zero_1": "zero1", "zero-2": "zero2", "zero_2": "zero2", "zero-3": "zero3",
                 "zero_3": "zero3", "full_shard": "fsdp", "fsdp2": "fsdp", "fsdp1": "fsdp",
                 "shard_grad_op": "zero2", "no_shard": "none", "ddp": "none"},
    # flash-attn 2 and torch's SDPA (whose flash backend is FlashAttention-2 on Ampere and Hopper in bf16/fp16),
    # FlashAttention-3, eager / math attention (the scores written out). xformers' memory_efficient_attention, which
    # dispatches to flash-attn's kernels where the inputs allow, and the Triton FlashAttention of llm-foundry
    # (attn_impl triton) are priced as FlashAttention-2, as the development set's MosaicML rows are (no per-length
    # measurement of either kernel is published: benchmarks/plan_accuracy.md). Transformer Engine's fused attention
    # (MaxText's cudnn_flash_te, NeMo's fused_attn) is cuDNN's; MaxText's dot_product writes the scores out.
    "attention": {"fa2": "flash", "flash2": "flash", "flash-attn": "flash", "flash_attn": "flash",
                  "flash-attention": "flash", "flash_attention_2": "flash", "flash-attention-2": "flash",
                  "sdpa": "flash", "fa3": "flash3", "flash-attention-3": "flash3", "flash_attention_3": "flash3",
                  "eager": "unfused", "math": "unfused", "xformers": "flash", "triton": "flash",
                  "triton_flash": "flash", "te": "cudnn", "transformer_engine": "cudnn", "fused_attn": "cudnn",
                  "cudnn_flash_te": "cudnn", "cudnn_flash": "cudnn", "dot_product": "unfused"},
    # a table's yes/no for activation checkpointing is whole blocks (Megatron's --checkpoint-activations)
    "recompute": {"": "none", "false": "none", "no": "none", "0": "none", "true": "full", "yes": "full",
                  "1": "full", "block": "full", "layer": "full", "full_layer": "full"},
    "positions": {"rope": "rotary", "alibi": "none"},  # ALiBi adds a bias to the scores, no position parameters
    "ffn": {"gated-gelu": "geglu", "gated_gelu": "geglu"},
    "norm": {"rms": "rmsnorm", "rms_norm": "rmsnorm", "layer_norm": "layernorm"},
    "arch": {"decoder-only": "decoder", "encoder-only": "encoder", "causal": "decoder"},
    "bias": {"true": "all", "false": "none"},
}


def spelling(field: str, value) -> str:
    """``value`` of ``field`` in this project's spelling: letter case and surrounding spaces aside, and the names
    :data:`SPELLINGS` lists for it; anything else comes back folded, for the caller's check to refuse. A recompute
    policy naming its products (``ops:...``) keeps its own case."""
    text = str(value).strip()
    if field == "recompute" and text.lower().startswith("ops:"):
        return "ops:" + text[4:]
    folded = text.lower()
    return SPELLINGS.get(field, {}).get(folded, folded)
