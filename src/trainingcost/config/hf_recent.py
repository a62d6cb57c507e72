"""The 2025-26 families ``--hf-config`` reads, beside config/hf.py's: each ``model_type``'s config.json mapped onto a
model entry, from Hugging Face ``transformers``' ``configuration_*.py`` and ``modeling_*.py`` (5.25): key names, their
defaults, which products carry biases, which norms sit where, which layers attend through a window.

Every mapping is checked against transformers' own model of a small config (tests/test_hf_families.py: the same
parameters, the same forward and backward FLOPs at two lengths)."""

from __future__ import annotations

from .hf_keys import _decoder, _Keys, _layer_windows, _silu, _window

SEED_OSS_BIASES = {(False, False, False): "none", (True, False, False): "qkv", (True, True, False): "attention",
                   (True, True, True): "all", (False, False, True): "ffn"}


def seed_oss(k: _Keys) -> dict:
    # Seed-OSS (modeling_seed_oss.py; ByteDance Seed 2025): Llama's pre-RMSNorm block, a SwiGLU MLP, grouped-query
    # attention (num_key_value_heads 8, head_dim 128 by default), q, k and v biased where attention_bias (default true),
    # o where attention_out_bias (default false), the MLP where mlp_bias (default false); dropout after the attention's
    # output and the MLP's (residual_dropout, attention_dropout: elementwise, no FLOPs, not priced); an untied head.
    key = (k.bool("attention_bias", True), k.bool("attention_out_bias", False), k.bool("mlp_bias", False))
    if key not in SEED_OSS_BIASES:
        k._fail("attention_out_bias", f"attention_bias {key[0]}, attention_out_bias {key[1]} and mlp_bias {key[2]} "
                "together are not supported (trainingcost's bias option: none, qkv (q, k, v), attention (q, k, v, o), "
                "all, or ffn (the MLP's only))")
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), bias=SEED_OSS_BIASES[key],
                     tie_embeddings=k.bool("tie_word_embeddings", False))
    return entry  # rotary on the whole head (ROTARY, below)


def ernie4_5(k: _Keys) -> dict:
    # ERNIE 4.5's dense models (modeling_ernie4_5.py; Baidu 2025, ERNIE-4.5-0.3B): Llama's pre-RMSNorm block, a SwiGLU
    # MLP, grouped-query attention (num_key_value_heads 2, head_dim 128 by default), every product of attention and
    # MLP biased where use_bias (default false), the head tied by default. Its rotary embedding interleaves the turned
    # pairs: the same elementwise work.
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), bias="all" if k.bool("use_bias", False) else "none",
                     tie_embeddings=k.bool("tie_word_embeddings", True))
    return entry  # rotary on the whole head (ROTARY, below)


def hunyuan_v1_dense(k: _Keys) -> dict:
    # Hunyuan's dense models (modeling_hunyuan_v1_dense.py; Tencent 2025): Llama's pre-RMSNorm block with an RMSNorm of
    # head_dim on each head of q and of k after rotary (query_layernorm, key_layernorm: qk_norm head), q, k, v and o
    # biased where attention_bias, a SwiGLU MLP without biases, an untied head.
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), qk_norm="head",
                     bias="attention" if k.bool("attention_bias", False) else "none",
                     tie_embeddings=k.bool("tie_word_embeddings", False))
    return entry  # rotary on the whole head (ROTARY, below)


def ministral(k: _Keys) -> dict:
    # Ministral (modeling_ministral.py; Mistral AI 2024, Ministral 8B): Mistral's block (pre-RMSNorm, SwiGLU, no
    # biases, grouped-query attention: num_key_value_heads 8 by default, an untied head), each layer's attention
    # windowed as layer_types says (absent: every layer sliding_attention where sliding_window, default 4096).
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), bias="none", tie_embeddings=k.bool("tie_word_embeddings", False))
    window = k.data.get("sliding_window", 4096)
    kind = "sliding_attention" if window else "full_attention"
    _layer_windows(entry, k, 4096, [kind] * entry["layers"])
    return entry  # rotary on the whole head (ROTARY, below)


def ministral3(k: _Keys) -> dict:
    # Ministral 3 (modeling_ministral3.py; Mistral AI 2025): Mistral's block (pre-RMSNorm, SwiGLU, no biases,
    # grouped-query attention: num_key_value_heads 8 and head_dim 128 by default, an untied head), a window on every
    # layer where sliding_window (default null: none), the queries scaled by position (llama_4_scaling_beta:
    # elementwise, not priced) and YaRN's rotary frequencies (no cost).
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), bias="none", tie_embeddings=k.bool("tie_word_embeddings", False))
    _window(entry, k, None)
    return entry  # rotary on the whole head (ROTARY, below)


def olmo3(k: _Keys) -> dict:
    # OLMo 3 (modeling_olmo3.py; Ai2 2025): OLMo 2's block (the norm on each branch's output: norm_position output;
    # an RMSNorm over the whole q and k projections: qk_norm projection; SwiGLU without biases; q, k, v and o biased
    # where attention_bias; an untied head) with three windowed layers to one global (layer_types; absent: full
    # attention on every fourth layer, sliding_window 4096).
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), qk_norm="projection",
                     tie_embeddings=k.bool("tie_word_embeddings", False),
                     bias="attention" if k.bool("attention_bias", False) else "none")
    entry["norm_position"] = "output"
    layers = entry["layers"]
    _layer_windows(entry, k, 4096, ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)])
    return entry  # rotary on the whole head (ROTARY, below)


def exaone4(k: _Keys) -> dict:
    # EXAONE 4.0 (modeling_exaone4.py; LG AI Research 2025): the norm on each branch's output (post_attention_layernorm,
    # post_feedforward_layernorm: norm_position output), an RMSNorm of head_dim on each head of q and of k (qk_norm
    # head), a SwiGLU MLP and attention without biases, grouped-query attention, an untied head; local and global
    # layers as layer_types says (absent: global where (i + 1) % sliding_window_pattern == 0, default 4; a null
    # sliding_window: every layer global). Its global layers turn no rotary positions where a window is set (priced
    # with rotary on every layer: elementwise work, no FLOPs, overstated).
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), qk_norm="head", bias="none",
                     tie_embeddings=k.bool("tie_word_embeddings", False))
    entry["norm_position"] = "output"
    layers = entry["layers"]
    window = k.int("sliding_window", 4096, minimum=0) or 0
    pattern = k.data.get("sliding_window_pattern", 4)
    if window and k.data.get("layer_types") is None:
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            k._fail("sliding_window_pattern", f"{pattern!r} is not supported (supported: a positive integer, or "
                    "layer_types)")
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    else:
        types = ["full_attention"] * layers
    _layer_windows(entry, k, 4096, types)
    return entry  # rotary on the whole head (ROTARY, below)


def cohere(k: _Keys) -> dict:
    # Cohere's Command R (modeling_cohere.py; Cohere 2024) and Command R7B / A (modeling_cohere2.py; Cohere 2024-25):
    # one LayerNorm with a gain and no bias per block (CohereLayerNorm: norm layernorm_nobias) read by attention and
    # the SwiGLU MLP in parallel (parallel_block one_norm), a final one, q, k, v and o biased where attention_bias, the
    # head tied by default and its logits scaled (logit_scale: elementwise, not priced), rotary turning interleaved
    # pairs (the same work). Command R: q and k normalised where use_qk_norm (refused: a LayerNorm per head with a
    # weight per head, which the model has not). Cohere2: three windowed layers to one global (layer_types; absent:
    # the file's sliding_window_pattern, default 4); its global layers turn no rotary positions (priced with rotary on
    # every layer: elementwise, no FLOPs, overstated).
    if k.bool("use_qk_norm", False):
        k._fail("use_qk_norm", "a LayerNorm per head of q and k, a weight per head, is not supported")
    entry = _decoder(k, norm="layernorm_nobias", ffn=_silu(k), parallel_block="one_norm",
                     bias="attention" if k.bool("attention_bias", False) else "none",
                     tie_embeddings=k.bool("tie_word_embeddings", True))
    if k.model_type == "cohere2":
        pattern = k.data.get("sliding_window_pattern", 4)
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            k._fail("sliding_window_pattern", f"{pattern!r} is not a positive integer")
        layers = entry["layers"]
        _layer_windows(entry, k, 4096, ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                        for i in range(layers)])
    return entry


# ROTARY: none of these families' modeling files reads partial_rotary_factor (its default rotary embedding turns the
# whole head_dim, modeling_*.py's compute_default_rope_parameters), so a file's factor is not read here either.
# IGNORED: keys hf.py would refuse as a mixture of experts that a family's model ignores (Tencent's dense Hunyuan
# files carry the MoE template's num_experts; HunYuanDenseV1 builds one dense MLP whatever it says).
IGNORED = {"hunyuan_v1_dense": ("num_experts",)}
MAPPERS = {"seed_oss": seed_oss, "ernie4_5": ernie4_5, "hunyuan_v1_dense": hunyuan_v1_dense, "ministral": ministral,
           "ministral3": ministral3, "olmo3": olmo3, "exaone4": exaone4, "cohere": cohere, "cohere2": cohere}
# The numbers their config classes give a file that leaves the key out (hf.py's CLASS_KV_HEADS, CLASS_HEAD_DIM)
KV_HEADS = {"seed_oss": 8, "ernie4_5": 2, "ministral": 8, "ministral3": 8, "exaone4": 32}
HEAD_DIM = {"seed_oss": 128, "ernie4_5": 128, "ministral3": 128}
