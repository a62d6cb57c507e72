"""A model's own ``config.json`` (as shipped with a Hugging Face model), read as a model entry.

Plain JSON, no ``transformers``: each supported ``model_type`` maps its keys onto
trainingcost's fields and options. What the mapping cannot express (a mixture of
experts outside Mixtral, Qwen-MoE, Qwen3-MoE, OLMoE and DeepSeek-V2/V3, a sliding window on some layers only, an unknown ``model_type``, keys of
the wrong type) is refused in one line that names it,
never counted silently wrong. The result is an entry like a preset's: command-line
flags and a sweep entry's other keys override its fields.

Sources of each mapping: the ``configuration_*.py`` and ``modeling_*.py`` of
Hugging Face ``transformers`` for GPT-2, BERT, T5, Llama, Mistral, Qwen2, GPT-NeoX,
GPT-J, Phi, Falcon, StableLM, OLMo, OLMo 2, OLMoE, StarCoder2, Phi-3, Gemma, Gemma 2, Gemma 3, Mixtral, Qwen-MoE,
Qwen3, DeepSeek-V2/V3, Granite, SmolLM3 and GLM-4 (the 2025-26 families in hf_recent.py) (key names, their defaults, which
layers carry biases, which heads are tied, which blocks are parallel, how much of a head rotary turns, the experts).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from .errors import ConfigError, read_json
from .model import HF_OPTIONS
from .hf_recent import HEAD_DIM as RECENT_HEAD_DIM, IGNORED as RECENT_IGNORED, KV_HEADS as RECENT_KV_HEADS, \
    MAPPERS as RECENT
from .hf_keys import (  # noqa: F401  (the families' shared pieces; hf_recent.py's too)
    _decoder, _full_rotary, _Keys, _partial_rotary, _qwen2_window, _rotary_fraction, _silu, _window,
)
from .hf_entries import (  # noqa: F401  (re-exported: callers read them from here)
    CLASS_HEAD_DIM, CLASS_KV_HEADS, FALCON_FUSED_FROM, GEMMA3_TEXT_SHAPES, HUB_NAME, check_window, config_path,
    drop_lm_head, drop_short_table, hub_config, transformers_attention, with_overrides,
)

SUPPORTED = ("gpt2", "bert", "t5", "llama", "mistral", "qwen2", "gpt_neox", "gptj", "phi", "falcon", "stablelm", "olmo",
             "olmo2", "starcoder2", "phi3", "gemma", "gemma2", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe",
             "gemma3_text", "olmoe", "deepseek_v2", "deepseek_v3", "granite", "smollm3", "glm4", *RECENT)
# Keys that announce an architecture trainingcost does not cost (mixture of experts, shared KV caches ...).
UNSUPPORTED_KEYS = {
    "num_local_experts": "mixture of experts",
    "num_experts": "mixture of experts",
    "n_routed_experts": "mixture of experts",
    "moe_intermediate_size": "mixture of experts",
    "num_kv_shared_layers": "a KV cache shared across layers",
    "kv_sharing": "a KV cache shared across layers",
    "cross_layer_attention": "a KV cache shared across layers",
}
# transformers' MistralConfig(sliding_window=4096): the window a config.json without the key gets.
MISTRAL_SLIDING_WINDOW = 4096
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu", "relu": "relu"}


def read_hf_config(path: str | Path, where: str = "--hf-config") -> dict:
    """The model entry of a ``config.json`` (or of a folder holding one), at the length its training ran
    (:func:`training_length`), not the context it serves."""
    data, file = read_hf_data(path, where)
    entry = hf_entry(data, f"{where} {file}")
    length, _ = training_length(data, entry.get("seq_len"), entry.get("positions"), entry)
    return entry if length is None else {**entry, "seq_len": length}


def read_hf_data(path: str | Path, where: str = "--hf-config") -> tuple[dict, Path]:
    """A ``config.json`` (or a folder holding one), parsed, and the file read."""
    file = config_path(path, where)
    data = read_json(file, where, "a config.json")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {file}: expected a JSON object, not {type(data).__name__}")
    return data, file


def attention_note(path: str | Path, cfg, step_flops: int | None = None) -> str | None:
    """One line for ``estimate --hf-config``: which attention kernel the executed model prices, where transformers'
    model of the same file runs another, and the FLOPs by which its training step differs (2 M N a per attention
    layer and batch element: the fused backward's recomputed scores)."""
    if isinstance(path, dict) or hasattr(path, "to_dict"):  # the Python API: the config itself
        data = path.to_dict() if hasattr(path, "to_dict") else path
    else:
        try:
            data = read_json(config_path(path, "--hf-config"), "--hf-config")
        except ConfigError:
            return None
    path_taken = transformers_attention(data) if isinstance(data, dict) else None
    if path_taken is None:
        return None
    rows = cfg.tgt_len if cfg.encdec else cfg.seq_len
    fewer = 2 * cfg.batch * rows * rows * cfg.attn_width * cfg.dec_layers
    share = f", {fewer / step_flops:.1%} of BP's executed step" if step_flops else ""
    return (f"attention: priced as torch's fused SDPA kernel (backward 10 M N a per layer); transformers runs "
            f"{path_taken}, 8 M N a: its BP step has {fewer:.3g} fewer FLOPs{share}")


def hf_entry(data: dict, where: str = "config.json") -> dict:
    """Map one parsed ``config.json`` onto a model entry."""
    model_type = data.get("model_type")
    if model_type is None:
        raise ConfigError(f"{where}: model_type: missing; give one of the {len(SUPPORTED)} supported "
                          "(`trainingcost estimate --help` lists them)")
    if model_type == "gemma3":  # Gemma 3 4B-27B: a vision tower beside the language model, which is text_config
        raise ConfigError(f"{where}: model_type: 'gemma3' is Gemma 3's multimodal model, whose vision tower is not "
                          "costed; give its text_config (model_type gemma3_text) as the config.json")
    if model_type not in SUPPORTED:
        raise ConfigError(f"{where}: model_type: {str(model_type)[:30]!r} is not supported (`trainingcost estimate --help` "
                          f"lists the {len(SUPPORTED)} supported)")
    for key, feature in UNSUPPORTED_KEYS.items():
        allowed = (*MOE_KEYS.get(model_type, ()), *RECENT_IGNORED.get(model_type, ()))
        if data.get(key) not in (None, 0, False) and key not in allowed:
            raise ConfigError(f"{where}: {key}: {feature} is not supported (model_type {model_type})")
    if model_type == "gemma3_text":
        data = {**GEMMA3_TEXT_SHAPES, **data}
    for key, table in (("num_key_value_heads", {**CLASS_KV_HEADS, **RECENT_KV_HEADS}),
                       ("head_dim", {**CLASS_HEAD_DIM, **RECENT_HEAD_DIM})):
        if key not in data and model_type in table:
            data = {**data, key: table[model_type]}
            heads = data.get("num_attention_heads")
            if key == "num_key_value_heads" and isinstance(heads, int) and heads % table[model_type]:
                raise ConfigError(f"{where}: num_key_value_heads: absent, so the class's {table[model_type]}, which does "
                                  f"not divide num_attention_heads {heads}; write the key (model_type {model_type})")
    keys = _Keys(data, where, model_type)
    entry = {"gpt2": _gpt2, "bert": _bert, "t5": _t5, "llama": _llama, "mistral": _llama, "qwen2": _llama,
            "gpt_neox": _gpt_neox, "gptj": _gptj, "phi": _phi, "falcon": _falcon, "stablelm": _stablelm, "olmo": _olmo, "olmo2": _olmo2,
            "starcoder2": _starcoder2, "phi3": _phi3, "gemma": _gemma, "gemma2": _gemma2, "mixtral": _moe, "qwen2_moe": _moe,
            "qwen3": _llama, "qwen3_moe": _moe, "gemma3_text": _gemma2, "olmoe": _olmoe, "deepseek_v2": _deepseek,
            "deepseek_v3": _deepseek, "granite": _llama, "smollm3": _llama, "glm4": _glm4, **RECENT}[model_type](keys)
    return _declared_keys(entry, keys)


# The longest sequence the pretraining of the families read here ran before any long-context stage: Llama 3's 8,192
# (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.4.1: pretrained at 8K, extended to 128K at the end).
# A config.json's max_position_embeddings is the context the model serves after such a stage (131,072 for Llama 3.1),
# not the length its training steps ran: planning a run at it prices 16x longer sequences (issue 63).
PRETRAINING_LENGTH = 8192


def preset_of(entry: dict | None) -> str | None:
    """The preset whose shape ``entry`` (a config.json's model entry) is, all but its lengths; None if none is."""
    if not entry:
        return None
    from .model import canonical_model
    from .presets import PRESETS

    try:
        cfg = canonical_model(dict(entry))
    except (ConfigError, TypeError, ValueError):
        return None
    for name in PRESETS:
        preset = _preset_model(name)
        if preset is not None and preset.replace(seq_len=cfg.seq_len, tgt_len=cfg.tgt_len) == cfg:
            return name
    return None


@lru_cache(maxsize=None)
def _preset_model(name: str):
    from .model import canonical_model
    from .presets import PRESETS

    try:
        return canonical_model(dict(PRESETS[name]))
    except (ConfigError, TypeError, ValueError):
        return None


def training_length(data: dict, served: int | None, positions: str | None,
                    entry: dict | None = None) -> tuple[int | None, str]:
    """The sequence length a plan of this config.json trains at, and why, where it is not the context the model
    serves (``served``, the family's max_position_embeddings or n_positions): the file's own
    original_max_position_embeddings (in rope_scaling or rope_parameters, or at the top level: the length before the
    context was extended), else the length of the preset of the same shape (``entry``: config/presets.py cites
    each), else PRETRAINING_LENGTH for a longer context; (None, "") where the served
    length stands (a learned position table is its training length)."""
    if not served or positions == "learned":
        return None, ""
    # rope_scaling (transformers 4's files) or rope_parameters (transformers 5's, flat or one dict per layer type)
    for name in ("rope_scaling", "rope_parameters"):
        container = data.get(name)
        if not isinstance(container, dict):
            continue
        for part in (container, *(v for v in container.values() if isinstance(v, dict))):
            original = part.get("original_max_position_embeddings")
            if isinstance(original, int) and not isinstance(original, bool) and 0 < original < served:
                return original, (f"seq_len {original}: {name}.original_max_position_embeddings, the length before "
                                  f"the context was extended to max_position_embeddings {served} (--seq-len to change)")
    original = data.get("original_max_position_embeddings")  # Phi-3's long-context files keep it at the top level
    if isinstance(original, int) and not isinstance(original, bool) and 0 < original < served:
        return original, (f"seq_len {original}: original_max_position_embeddings, the length before the context was "
                          f"extended to max_position_embeddings {served} (--seq-len to change)")
    name = preset_of(entry)
    if name is not None:
        from .presets import PRESETS

        length = PRESETS[name]["seq_len"]
        if length == served:  # the preset trains at the served context (Mixtral's 32k)
            return None, ""
        if length < served:
            return length, (f"seq_len {length}: the pretraining length of {name}, the preset of this shape "
                            f"(config/presets.py cites it), not max_position_embeddings {served} (--seq-len to change)")
    if served > PRETRAINING_LENGTH:
        return PRETRAINING_LENGTH, (f"seq_len {PRETRAINING_LENGTH}: a pretraining length (Llama 3's, Dubey et al. 2024), "
                                    f"not max_position_embeddings {served}, the context the model serves (--seq-len "
                                    "to change)")
    return None, ""


def length_note(path, seq_len_given) -> str | None:
    """The assumption behind a config.json's training length, for estimate's and plan's notes; None where the flag
    --seq-len was given or the file's own length stands."""
    if seq_len_given is not None or path is None:
        return None
    if isinstance(path, dict) or hasattr(path, "to_dict"):
        data = path.to_dict() if hasattr(path, "to_dict") else path
    else:
        try:
            data = read_json(config_path(path, "--hf-config"), "--hf-config")
        except ConfigError:
            return None
    try:
        entry = hf_entry(dict(data))
    except (ConfigError, TypeError, ValueError):
        return None
    return training_length(data, entry.get("seq_len"), entry.get("positions"), entry)[1] or None


def table_note(preset: str | None, path, cfg, seq_len_given) -> str | None:
    """One line where --seq-len runs past the learned position table of the preset or config.json (GPT-2's 1,024,
    BERT's 512): the table grows to the sequence, rows the published model does not have; None otherwise."""
    if seq_len_given is None or cfg.positions != "learned":
        return None
    if preset:
        from .presets import PRESETS

        base = PRESETS.get(preset, {})
        rows = base.get("max_positions", base.get("seq_len"))
    elif path is not None:
        data = path.to_dict() if hasattr(path, "to_dict") else path if isinstance(path, dict) else None
        try:
            entry = hf_entry(dict(data)) if data is not None else read_hf_config(path)
        except (ConfigError, TypeError, ValueError):
            return None
        rows = entry.get("max_positions", entry.get("seq_len"))
    else:
        return None
    if not rows or cfg.seq_len <= rows:
        return None
    return (f"positions: a learned table of {cfg.seq_len:,} positions for --seq-len {cfg.seq_len:,}, "
            f"{cfg.seq_len - rows:,} more than the model's {rows:,}: rows (and parameters) the published model does "
            "not have")


def _declared_keys(entry: dict, k: _Keys) -> dict:
    """The options whose declaration names config.json keys (config/model.py's option(hf=...)), for any model_type:
    the first key present and not null, converted by the declaration's ``hf_value``, where the family's mapping has
    not set the option itself."""
    for name, meta in HF_OPTIONS.items():
        if name in entry:
            continue
        for key in meta["hf"]:
            if k.data.get(key) is None:
                continue
            value = k.data[key]
            if meta["kind"] == "bool":
                value = k.bool(key, False)
            elif meta["kind"] == "int":
                value = k.int(key, minimum=meta["minimum"])
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                k._fail(key, f"{value!r} is not a number of at least 0")
            entry[name] = meta["hf_value"](value) if meta["hf_value"] else value
            break
    return entry


def _gpt2(k: _Keys) -> dict:
    # GPT-2 (modeling_gpt2.py): pre-LN with ln_f, learned positions (n_positions), Conv1D layers with biases,
    # lm_head without bias and tied to wte; n_inner None means 4 x n_embd.
    if k.bool("add_cross_attention", False):
        k._fail("add_cross_attention", "cross-attention in a decoder-only model is not supported")
    d = k.int("n_embd")
    positions = k.int("n_positions")
    return dict(
        arch="decoder", layers=k.int("n_layer"), d_model=d, heads=k.int("n_head"),
        d_ff=k.int("n_inner", 4 * d) or 4 * d, vocab=k.int("vocab_size"), seq_len=positions,
        norm="layernorm", norm_position="pre", ffn=k.activation("activation_function", "gelu_new", ACTIVATIONS),
        positions="learned", max_positions=positions, tie_embeddings=k.bool("tie_word_embeddings", True),
        bias="all", head_bias=False,
    )


def _bert(k: _Keys) -> dict:
    # BERT (modeling_bert.py, BertForMaskedLM): post-LN; word + token-type + learned position embeddings, then a
    # LayerNorm; the MLM decoder tied to the word embeddings, with its own bias. The MLM transform (a d x d dense
    # layer, its activation and a LayerNorm) and the pooler are not modelled (docs/cost_models.md).
    if k.str("position_embedding_type", "absolute") != "absolute":
        k._fail("position_embedding_type", f"{k.data['position_embedding_type']!r} is not supported (supported: absolute)")
    if k.bool("is_decoder", False):
        k._fail("is_decoder", "BERT as a decoder is not supported")
    positions = k.int("max_position_embeddings")
    return dict(
        arch="encoder", layers=k.int("num_hidden_layers"), d_model=k.int("hidden_size"),
        heads=k.int("num_attention_heads"), d_ff=k.int("intermediate_size"), vocab=k.int("vocab_size"),
        seq_len=positions, norm="layernorm", norm_position="post",
        ffn=k.activation("hidden_act", "gelu", ACTIVATIONS), positions="learned", max_positions=positions,
        type_vocab=k.int("type_vocab_size", 2, minimum=0) or 0, embedding_norm=True,
        tie_embeddings=k.bool("tie_word_embeddings", True), bias="all", head_bias=True,
    )


T5_FFN = {"relu": "relu", "gelu": "gelu", "gated-gelu": "geglu", "gated-silu": "swiglu"}


def _t5(k: _Keys) -> dict:
    # T5 and T5 v1.1 (modeling_t5.py, T5ForConditionalGeneration): pre-RMSNorm (T5LayerNorm, no bias) with a final norm
    # per stack, no biases, a relative position bias per stack (first block's self-attention, shared by the stack), heads d_kv
    # wide, encoder and decoder embeddings shared and tied to the head. Sequence length: n_positions (512).
    if not k.bool("is_encoder_decoder", True):
        k._fail("is_encoder_decoder", "T5's encoder alone is not supported")
    layers = k.int("num_layers")
    heads = k.int("num_heads")
    d = k.int("d_model")
    entry = dict(
        arch="encoder-decoder", enc_layers=layers, dec_layers=k.int("num_decoder_layers", layers) or layers,
        d_model=d, heads=heads, d_ff=k.int("d_ff"), vocab=k.int("vocab_size"),
        seq_len=k.int("n_positions", 512), norm="rmsnorm", norm_position="pre",
        ffn=k.activation("feed_forward_proj", "relu", T5_FFN), positions="relative",
        relative_buckets=k.int("relative_attention_num_buckets", 32),
        relative_max_distance=k.int("relative_attention_max_distance", 128),
        bias="none", head_bias=False,
    )
    # T5 v1.1 (tie_word_embeddings false): the stacks still share one table, the head has its own. transformers 5's
    # T5Config forces tie_word_embeddings True and keeps what the file said as scale_decoder_outputs (False for
    # v1.1): a config object's to_dict() says so there
    if k.bool("tie_word_embeddings", True) and k.data.get("scale_decoder_outputs") is not False:
        entry["tie_embeddings"] = True
    else:
        entry["shared_embedding"] = True
    head_dim = k.int("d_kv", d // heads) if "d_kv" in k.data else k.int("head_dim", d // heads)  # T5Config's alias
    if head_dim * heads != d:
        entry["head_dim"] = head_dim
    return entry


def _llama(k: _Keys) -> dict:
    # Llama, Mistral, Qwen2 (modeling_llama.py, modeling_mistral.py, modeling_qwen2.py): pre-RMSNorm with a final
    # norm, a SwiGLU MLP (hidden_act silu), grouped-query attention (num_key_value_heads), rotary positions, an
    # untied head without bias unless tie_word_embeddings. Biases: Llama's attention_bias (q, k, v, o) and mlp_bias;
    # Qwen2's q, k, v always; Mistral none. Qwen3 (modeling_qwen3.py, modeling_qwen3_moe.py): Llama's block with an
    # RMSNorm of head_dim on each head of q and of k (q_norm, k_norm: qk_norm), q, k, v and o biased where
    # attention_bias, Qwen2's window keys. Granite (modeling_granite.py; IBM Granite 3): Llama's block and biases with
    # four scalars: embedding_multiplier on the embedding's output (priced as Gemma's embedding scale: one elementwise
    # product), residual_multiplier on each branch's output and logits_scaling dividing the logits (elementwise
    # products not priced: no FLOPs, two passes over d per token and layer and one over the vocabulary per token),
    # attention_multiplier the scores' scale (no cost). SmolLM3 (modeling_smollm3.py; Hugging Face 2025): Llama's block
    # and biases, the head tied by default, no rotary positions on every no_rope_layer_interval-th layer
    # (no_rope_layers; priced with rotary on every layer: its elementwise work on those layers, no FLOPs, overstated).
    model_type = k.model_type
    heads = k.int("num_attention_heads")
    d = k.int("hidden_size")
    act = k.str("hidden_act", "silu")
    if act not in ("silu", "gelu", "gelu_pytorch_tanh"):
        k._fail("hidden_act", f"{act!r} is not supported (supported: silu, gelu)")
    entry = dict(
        arch="decoder", layers=k.int("num_hidden_layers"), d_model=d, heads=heads,
        d_ff=k.int("intermediate_size"), vocab=k.int("vocab_size"), seq_len=k.int("max_position_embeddings"),
        norm="rmsnorm", norm_position="pre", ffn="swiglu" if act == "silu" else "geglu",
        kv_heads=k.int("num_key_value_heads", heads) or heads, positions="rotary",  # null: every head its own
        tie_embeddings=k.bool("tie_word_embeddings", model_type == "smollm3"), head_bias=False,
    )
    head_dim = k.int("head_dim", 0, minimum=0) or 0  # absent or null: hidden_size / heads
    if head_dim and head_dim * heads != d:
        entry["head_dim"] = head_dim
    if model_type in ("llama", "granite", "smollm3"):
        attention, mlp = k.bool("attention_bias", False), k.bool("mlp_bias", False)
        if mlp and not attention:
            k._fail("mlp_bias", "mlp_bias true with attention_bias false is not supported "
                    "(trainingcost's bias option: all, none, qkv (q, k, v only) or attention (q, k, v, o))")
        entry["bias"] = ("all" if mlp else "attention") if attention else "none"
    elif model_type == "qwen2_moe":  # Qwen2MoeAttention: q, k and v biased where qkv_bias (the default)
        entry["bias"] = "qkv" if k.bool("qkv_bias", True) else "none"
    elif model_type in ("qwen3", "qwen3_moe"):  # Qwen3Attention: q, k, v and o biased where attention_bias
        entry["bias"] = "attention" if k.bool("attention_bias", False) else "none"
        entry["qk_norm"] = "head"
    else:
        entry["bias"] = "qkv" if model_type == "qwen2" else "none"
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        _qwen2_window(entry, k)
    if model_type == "mistral":
        _window(entry, k, MISTRAL_SLIDING_WINDOW)  # absent: MistralConfig's default, as transformers loads the file
    if model_type == "granite":
        scale = k.data.get("embedding_multiplier", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            k._fail("embedding_multiplier", f"{scale!r} is not a number")
        if scale != 1:
            entry["embedding_scale"] = True
    if model_type == "smollm3":
        if k.data.get("layer_types") is not None:
            _qwen2_window(entry, k)
        elif k.bool("use_sliding_window", False) and k.data.get("sliding_window"):
            k._fail("use_sliding_window", "a sliding window on the layers without rotary positions only is not "
                    "supported (supported: on every layer or on none)")
    return entry


def _glm4(k: _Keys) -> dict:
    # GLM-4 (modeling_glm4.py; GLM-4-0414): a norm before and after each branch, x + post_self_attn_layernorm(attn(
    # input_layernorm(x))) and x + post_mlp_layernorm(mlp(post_attention_layernorm(x))), RMSNorm (post_norms), q, k and v
    # biased where attention_bias (default true; o never), grouped-query attention (num_key_value_heads 2, head_dim 128
    # by default), a fused gate_up_proj SwiGLU MLP without biases, rotary positions on partial_rotary_factor (default
    # 0.5) of each head (interleaved; the same work), an untied head without bias.
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), post_norms=True,
                     bias="qkv" if k.bool("attention_bias", True) else "none",
                     tie_embeddings=k.bool("tie_word_embeddings", False))
    if "head_dim" in k.data and k.data["head_dim"] is None:
        k._fail("head_dim", "null is not supported (GLM-4's is a number: 128 where the key is absent)")
    head_dim = entry.get("head_dim", entry["d_model"] // entry["heads"])
    fraction = _rotary_fraction(k, ("partial_rotary_factor",), 0.5)
    return _partial_rotary(entry, k, int(head_dim * fraction), "partial_rotary_factor")


def _gpt_neox(k: _Keys) -> dict:
    # GPT-NeoX (modeling_gpt_neox.py; Black et al. 2022): pre-LayerNorm, a fused query_key_value and a dense output
    # (biases: attention_bias, default true), an MLP with biases, rotary positions on rotary_pct (default 0.25) of each
    # head, use_parallel_residual (default true): x + attn(ln1(x)) + mlp(ln2(x)); a final LayerNorm; embed_out
    # without bias, untied by default.
    d, heads = k.int("hidden_size"), k.int("num_attention_heads")
    entry = dict(
        arch="decoder", layers=k.int("num_hidden_layers"), d_model=d, heads=heads, d_ff=k.int("intermediate_size"),
        vocab=k.int("vocab_size"), seq_len=k.int("max_position_embeddings"), norm="layernorm", norm_position="pre",
        ffn=k.activation("hidden_act", "gelu", ACTIVATIONS), positions="rotary",
        parallel_block="two_norms" if k.bool("use_parallel_residual", True) else "none",
        bias="all" if k.bool("attention_bias", True) else "ffn", head_bias=False,
        tie_embeddings=k.bool("tie_word_embeddings", False),
    )
    fraction = _rotary_fraction(k, ("rotary_pct", "partial_rotary_factor"), 0.25)
    return _partial_rotary(entry, k, int(d // heads * fraction), "rotary_pct")


def _gptj(k: _Keys) -> dict:
    # GPT-J (modeling_gptj.py; Wang & Komatsuzaki 2021): one LayerNorm per block read by attention and MLP in parallel,
    # x + attn(ln(x)) + mlp(ln(x)); q, k, v and out_proj without biases, fc_in and fc_out with; rotary positions on
    # rotary_dim features of each head (default 64; null: all); ln_f; lm_head with a bias, untied.
    d = k.int("n_embd")
    entry = dict(
        arch="decoder", layers=k.int("n_layer"), d_model=d, heads=k.int("n_head"), d_ff=k.int("n_inner", 4 * d) or 4 * d,
        vocab=k.int("vocab_size"), seq_len=k.int("n_positions"), norm="layernorm", norm_position="pre",
        ffn=k.activation("activation_function", "gelu_new", ACTIVATIONS), positions="rotary",
        parallel_block="one_norm", bias="ffn", head_bias=True, tie_embeddings=k.bool("tie_word_embeddings", False),
    )
    if "rotary_dim" in k.data and k.data["rotary_dim"] is None:
        return entry  # null: the whole head
    return _partial_rotary(entry, k, k.int("rotary_dim", 64), "rotary_dim")


def _phi(k: _Keys) -> dict:
    # Phi-1, Phi-1.5, Phi-2 (modeling_phi.py; Gunasekar et al. 2023, Li et al. 2023): one LayerNorm per block read by
    # attention and MLP in parallel; q, k, v (num_key_value_heads) and dense with biases, fc1 and fc2 with biases;
    # rotary positions on partial_rotary_factor (default 0.5) of each head; final_layernorm; lm_head with a bias.
    if k.bool("qk_layernorm", False):
        k._fail("qk_layernorm", "norms on the queries and keys are not supported")
    d, heads = k.int("hidden_size"), k.int("num_attention_heads")
    entry = dict(
        arch="decoder", layers=k.int("num_hidden_layers"), d_model=d, heads=heads, d_ff=k.int("intermediate_size"),
        vocab=k.int("vocab_size"), seq_len=k.int("max_position_embeddings"), norm="layernorm", norm_position="pre",
        ffn=k.activation("hidden_act", "gelu_new", ACTIVATIONS), positions="rotary",
        kv_heads=k.int("num_key_value_heads", heads) or heads, parallel_block="one_norm", bias="all", head_bias=True,
        tie_embeddings=k.bool("tie_word_embeddings", False),
    )
    # PhiAttention: head_dim = config.head_dim or hidden_size // num_attention_heads (transformers 5)
    head_dim = k.int("head_dim") if k.data.get("head_dim") is not None else d // heads
    if head_dim * heads != d:
        entry["head_dim"] = head_dim
    fraction = _rotary_fraction(k, ("partial_rotary_factor",), 0.5)
    return _partial_rotary(entry, k, int(head_dim * fraction), "partial_rotary_factor")


def _falcon(k: _Keys) -> dict:
    # Falcon (modeling_falcon.py; Almazrouei et al. 2023): rotary positions on the whole head (alibi refused), a fused
    # query_key_value and a dense output, an MLP of ffn_hidden_size (default 4 d), biases on all or none (bias), a
    # final LayerNorm and an lm_head without bias, tied by default. Old architecture (falcon-7b): multi_query (one
    # key/value head, default true) or full heads; parallel_attn (default true) with one input_layernorm, else two
    # norms in sequence. new_decoder_architecture (falcon-40b): num_kv_heads key/value heads, attention and MLP in
    # parallel with num_ln_in_parallel_attn norms (default 2: ln_attn, ln_mlp).
    if k.bool("alibi", False):
        k._fail("alibi", "ALiBi positions are not supported (supported: rotary, alibi false)")
    d, heads = k.int("hidden_size"), k.int("num_attention_heads")
    parallel = k.bool("parallel_attn", True)
    if k.bool("new_decoder_architecture", False):
        if not parallel:
            k._fail("parallel_attn", "false with new_decoder_architecture is not supported (transformers' Falcon "
                    "runs it in parallel)")
        kv_heads = k.int("num_kv_heads", heads) or heads
        norms = k.int("num_ln_in_parallel_attn", 2) or 2
        if norms not in (1, 2):
            k._fail("num_ln_in_parallel_attn", f"{norms} is not supported (supported: 1, 2)")
        block = "two_norms" if norms == 2 else "one_norm"
    else:
        kv_heads = 1 if k.bool("multi_query", True) else heads
        block = "one_norm" if parallel else "none"
    return dict(
        arch="decoder", layers=k.int("num_hidden_layers"), d_model=d, heads=heads, kv_heads=kv_heads,
        d_ff=k.int("ffn_hidden_size", 4 * d) or 4 * d, vocab=k.int("vocab_size"),
        seq_len=k.int("max_position_embeddings", 2048), norm="layernorm", norm_position="pre",
        ffn=k.activation("activation", "gelu", ACTIVATIONS), positions="rotary", parallel_block=block,
        bias="all" if k.bool("bias", False) else "none", head_bias=False,
        tie_embeddings=k.bool("tie_word_embeddings", True),
    )


def _stablelm(k: _Keys) -> dict:
    # StableLM (modeling_stablelm.py; Stability AI 2023-24): LayerNorm with bias, a SwiGLU MLP without biases, q, k, v
    # biased where use_qkv_bias (o never), grouped-query attention, rotary positions on partial_rotary_factor (default
    # 0.25) of each head, use_parallel_residual (default false): x + attn(ln(x)) + mlp(ln(x)) with the one
    # input_layernorm; a final LayerNorm, an untied head without bias.
    if k.bool("qk_layernorm", False):
        k._fail("qk_layernorm", "per-head norms on the queries and keys are not supported")
    entry = _decoder(k, norm="layernorm", ffn=_silu(k), bias="qkv" if k.bool("use_qkv_bias", False) else "none",
                     parallel_block="one_norm" if k.bool("use_parallel_residual", False) else "none",
                     tie_embeddings=k.bool("tie_word_embeddings", False))
    # StableLmAttention's projections are hidden_size // num_attention_heads per head whatever head_dim says, and its
    # rotary embedding reads head_dim (modeling_stablelm.py, transformers 5): a different head_dim does not run there
    head_dim = entry["d_model"] // entry["heads"]
    if entry.pop("head_dim", head_dim) != head_dim:
        k._fail("head_dim", f"{k.data['head_dim']!r} is not supported: StableLM's attention is hidden_size / "
                "num_attention_heads wide per head (transformers' StableLmAttention); drop head_dim or give "
                f"{head_dim}")
    fraction = _rotary_fraction(k, ("partial_rotary_factor",), 0.25)
    return _partial_rotary(entry, k, int(head_dim * fraction), "partial_rotary_factor")


def _olmo(k: _Keys) -> dict:
    # OLMo (modeling_olmo.py; Groeneveld et al. 2024): Llama's block with a non-parametric LayerNorm (OlmoLayerNorm:
    # no weight, no bias), q, k, v and o biased where attention_bias; clip_qkv clamps q, k and v in place (elementwise
    # work, not modelled); an untied head without bias.
    entry = _decoder(k, norm="nonparametric", ffn=_silu(k), tie_embeddings=k.bool("tie_word_embeddings", False),
                     bias="attention" if k.bool("attention_bias", False) else "none")
    return _full_rotary(entry, k)


def _olmo2(k: _Keys) -> dict:
    # OLMo 2 (modeling_olmo2.py; Team OLMo 2024, "2 OLMo 2 Furious", arXiv 2501.00656): the norm on each branch's
    # output and none on its input, x + norm(f(x)) (post_attention_layernorm, post_feedforward_layernorm:
    # norm_position output), a final RMSNorm; an RMSNorm over the whole q and k projections before rotary (q_norm of
    # heads x head_dim, k_norm of kv_heads x head_dim: qk_norm projection); a SwiGLU MLP without biases, q, k, v and o
    # biased where attention_bias, grouped-query attention, an untied head without bias.
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), qk_norm="projection",
                     tie_embeddings=k.bool("tie_word_embeddings", False),
                     bias="attention" if k.bool("attention_bias", False) else "none")
    entry["norm_position"] = "output"
    return _full_rotary(entry, k)


def _starcoder2(k: _Keys) -> dict:
    # StarCoder2 (modeling_starcoder2.py; Lozhkov et al. 2024): LayerNorm with bias, a non-gated MLP (c_fc, c_proj) with
    # GELU (gelu_pytorch_tanh), biases on every linear layer where use_bias (default true), grouped-query attention,
    # rotary positions, a final LayerNorm, the head tied by default and without bias; sliding_window (default null).
    entry = _decoder(k, norm="layernorm", ffn=k.activation("hidden_act", "gelu_pytorch_tanh", ACTIVATIONS),
                     bias="all" if k.bool("use_bias", True) else "none",
                     tie_embeddings=k.bool("tie_word_embeddings", True))
    _window(entry, k, None)
    return _full_rotary(entry, k)


def _phi3(k: _Keys) -> dict:
    # Phi-3 (modeling_phi3.py; Abdin et al. 2024): Llama's block with a fused qkv_proj and a fused gate_up_proj, each
    # one product of the widths it joins (the same FLOPs and parameters as trainingcost's separate ones), RMSNorm, no
    # biases, rotary on partial_rotary_factor (default 1) of each head, an untied head; sliding_window (default null).
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), bias="none", tie_embeddings=k.bool("tie_word_embeddings", False))
    _window(entry, k, None)
    head_dim = entry.get("head_dim", entry["d_model"] // entry["heads"])
    fraction = _rotary_fraction(k, ("partial_rotary_factor",), 1.0)
    return _partial_rotary(entry, k, int(head_dim * fraction), "partial_rotary_factor")


def _gemma(k: _Keys) -> dict:
    # Gemma (modeling_gemma.py; Gemma Team 2024): the embedding's output times sqrt(hidden_size), GeGLU (gelu_pytorch_tanh:
    # GELU's tanh form, elementwise), RMSNorm with the gain as (1 + w) (the same d parameters, a reparametrisation:
    # trainingcost's RMSNorm multiplies by w), heads head_dim wide whatever hidden_size, one key/value head on the 2B,
    # the head tied to the embedding, biases on q, k, v and o where attention_bias.
    if k.data.get("use_bidirectional_attention"):
        k._fail("use_bidirectional_attention", "bidirectional attention is not supported")
    act = k.str("hidden_act", "gelu_pytorch_tanh")
    if act not in ("gelu", "gelu_pytorch_tanh", "gelu_new"):
        k._fail("hidden_act", f"{act!r} is not supported (supported: gelu_pytorch_tanh, gelu)")
    entry = _decoder(k, norm="rmsnorm", ffn="geglu", embedding_scale=True,
                     bias="attention" if k.bool("attention_bias", False) else "none",
                     tie_embeddings=k.bool("tie_word_embeddings", True))
    return _full_rotary(entry, k)


GEMMA2_DEFAULTS = dict(attn_logit_softcapping=50.0, final_logit_softcapping=30.0, query_pre_attn_scalar=256,
                      sliding_window=4096, sliding_window_pattern=2)  # configuration_gemma2.py's, for a file without the key
# configuration_gemma3.py's Gemma3TextConfig: no soft-capping, five local layers to one global (sliding_window_pattern,
# written _sliding_window_pattern by transformers 5)
GEMMA3_DEFAULTS = dict(attn_logit_softcapping=None, final_logit_softcapping=None, query_pre_attn_scalar=256,
                      sliding_window=4096, sliding_window_pattern=6)


def _gemma2(k: _Keys) -> dict:
    # Gemma 2 (modeling_gemma2.py; Gemma Team 2024, arXiv 2408.00118): Gemma's block (above; hidden_activation, not
    # hidden_act) with a norm on each branch's output too (post_attention_layernorm, post_feedforward_layernorm, beside
    # input_layernorm and pre_feedforward_layernorm), attention scores soft-capped (attn_logit_softcapping) and scaled
    # by query_pre_attn_scalar^-1/2, the logits soft-capped (final_logit_softcapping), and local and global layers
    # alternating (layer_types; absent: sliding_attention where (i + 1) % 2, that is layers 0, 2, 4 ...). The keys
    # the options declare (config/model.py) are read there; a file without them gets Gemma2Config's defaults here.
    # Gemma 3's text model (gemma3_text: modeling_gemma3.py; Gemma Team 2025, arXiv 2503.19786) is Gemma 2's block with
    # an RMSNorm of head_dim on each head of q and of k (q_norm, k_norm: qk_norm), no soft-capping by default, and one
    # global layer in sliding_window_pattern (6); its local and global layers' rotary bases differ, at no cost.
    gemma3 = k.model_type == "gemma3_text"
    defaults = GEMMA3_DEFAULTS if gemma3 else GEMMA2_DEFAULTS
    if k.data.get("use_bidirectional_attention"):
        k._fail("use_bidirectional_attention", "bidirectional attention is not supported")
    act = k.str("hidden_activation", "gelu_pytorch_tanh")
    if act not in ("gelu", "gelu_pytorch_tanh", "gelu_new"):
        k._fail("hidden_activation", f"{act!r} is not supported (supported: gelu_pytorch_tanh, gelu)")
    entry = _full_rotary(_decoder(k, norm="rmsnorm", ffn="geglu", embedding_scale=True, post_norms=True,
                                  bias="attention" if k.bool("attention_bias", False) else "none",
                                  tie_embeddings=k.bool("tie_word_embeddings", True)), k)
    layers = entry["layers"]
    if gemma3:
        entry["qk_norm"] = "head"
    for key, option in (("attn_logit_softcapping", "attention_softcap"), ("final_logit_softcapping", "logit_softcap")):
        value = k.data.get(key, defaults[key])
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                k._fail(key, f"{value!r} is not a positive number (or null: none)")
            entry[option] = float(value)
    entry["query_scale"] = k.int("query_pre_attn_scalar", defaults["query_pre_attn_scalar"])
    window = k.int("sliding_window", defaults["sliding_window"], minimum=0) or 0
    types = k.data.get("layer_types")
    if types is None:
        pattern_key = next((key for key in ("sliding_window_pattern", "_sliding_window_pattern")
                            if k.data.get(key) is not None), "sliding_window_pattern")
        pattern = k.int(pattern_key, defaults["sliding_window_pattern"]) if gemma3 else 2
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or not all(t in ("full_attention", "sliding_attention") for t in types) \
            or len(types) != layers:
        k._fail("layer_types", f"{types!r} is not a list of {layers} full_attention and sliding_attention")
    full = [i for i, kind in enumerate(types) if kind == "full_attention"]
    if window and len(full) < layers:
        entry["sliding_window"] = window
        if full:
            period = full[0] + 1
            if full != [i for i in range(layers) if (i + 1) % period == 0]:
                k._fail("layer_types", "global layers other than every n-th are not supported (supported: "
                        "full_attention on layers n - 1, 2n - 1 ..., sliding_attention elsewhere)")
            entry["window_period"] = period
            if period == 1:
                del entry["sliding_window"], entry["window_period"]  # every layer global
    return entry


# The keys of a mixture of experts that each MoE model_type maps (hf_entry refuses them elsewhere).
MOE_KEYS = {"mixtral": ("num_local_experts", "num_experts"), "qwen2_moe": ("num_experts", "moe_intermediate_size"),
            "qwen3_moe": ("num_experts", "num_local_experts", "moe_intermediate_size"),
            "olmoe": ("num_experts", "num_local_experts"), "deepseek_v2": ("n_routed_experts", "moe_intermediate_size"),
            "deepseek_v3": ("n_routed_experts", "moe_intermediate_size")}


def _moe(k: _Keys) -> dict:
    # Mixtral (modeling_mixtral.py, MixtralSparseMoeBlock) and Qwen-MoE (modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock):
    # Llama's blocks (above) with a mixture of experts in place of the MLP: a router (hidden_size x experts, no bias),
    # softmax, top num_experts_per_tok, SwiGLU experts without biases. Mixtral: num_local_experts experts of
    # intermediate_size, the top-k weights renormalised; its sliding_window defaults to none. Qwen-MoE: num_experts
    # of moe_intermediate_size, renormalised only where norm_topk_prob, and a shared expert of
    # shared_expert_intermediate_size gated by sigmoid(x w); every layer sparse (decoder_sparse_step 1, no
    # mlp_only_layers), the dense layers of other settings being refused. Qwen3-MoE (modeling_qwen3_moe.py,
    # Qwen3MoeSparseMoeBlock): Qwen3's attention (q_norm, k_norm), Qwen-MoE's experts (num_experts, written
    # num_local_experts by transformers 5; default 128 of moe_intermediate_size 768, top 8) without a shared expert.
    mixtral = k.model_type == "mixtral"
    qwen3 = k.model_type == "qwen3_moe"
    entry = _llama(k)
    if mixtral:
        _window(entry, k, None)  # absent or null: MixtralConfig's default, no window
    if k.data.get("router_jitter_noise", 0):
        k._fail("router_jitter_noise", "multiplicative noise on the router's input in training is not supported")
    if not mixtral:
        if k.int("decoder_sparse_step", 1) != 1 or k.data.get("mlp_only_layers"):
            key = "decoder_sparse_step" if k.int("decoder_sparse_step", 1) != 1 else "mlp_only_layers"
            k._fail(key, "dense MLP layers among the sparse ones are not supported (every layer a mixture of experts: "
                    "decoder_sparse_step 1, mlp_only_layers empty)")
    if qwen3:
        key = "num_experts" if k.data.get("num_experts") is not None else "num_local_experts"
        experts, top_k = k.int(key, 128), k.int("num_experts_per_tok", 8)
    elif mixtral:  # MixtralConfig's attribute_map reads num_experts as num_local_experts
        experts = k.int("num_experts" if k.data.get("num_local_experts") is None and k.data.get("num_experts")
                        is not None else "num_local_experts", 8)
        top_k = k.int("num_experts_per_tok", 2)
    else:
        experts = k.int("num_experts", 60)
        top_k = k.int("num_experts_per_tok", 4)
    entry.update(experts=experts, experts_per_token=top_k)
    if not mixtral:
        entry["d_ff"] = k.int("moe_intermediate_size", 768 if qwen3 else 1408)
        if not qwen3:
            entry["shared_expert_ff"] = k.int("shared_expert_intermediate_size", 5632, minimum=0)
        entry["router_norm"] = k.bool("norm_topk_prob", False)
    return entry


def _olmoe(k: _Keys) -> dict:
    # OLMoE (modeling_olmoe.py; Muennighoff et al. 2024, "OLMoE: Open Mixture-of-Experts Language Models", arXiv
    # 2409.02060): Llama's pre-RMSNorm block with an RMSNorm over the whole q and k projections (q_norm of
    # hidden_size, k_norm of the keys' width: qk_norm projection) and a mixture of experts in place of the MLP: a router
    # (hidden_size x num_experts, no bias), softmax, top num_experts_per_tok (default 8 of 64), renormalised only where
    # norm_topk_prob (default false), SwiGLU experts of intermediate_size without biases (one fused gate_up product:
    # the same FLOPs), no shared expert; q, k, v and o biased where attention_bias; clip_qkv clamps q, k, v in place
    # (elementwise, not modelled); an untied head without bias.
    entry = _decoder(k, norm="rmsnorm", ffn=_silu(k), qk_norm="projection",
                     tie_embeddings=k.bool("tie_word_embeddings", False),
                     bias="attention" if k.bool("attention_bias", False) else "none")
    if k.data.get("router_jitter_noise", 0):
        k._fail("router_jitter_noise", "multiplicative noise on the router's input in training is not supported")
    key = "num_experts" if k.data.get("num_experts") is not None else "num_local_experts"
    entry.update(experts=k.int(key, 64), experts_per_token=k.int("num_experts_per_tok", 8),
                 router_norm=k.bool("norm_topk_prob", False))
    return _full_rotary(entry, k)


def _deepseek(k: _Keys) -> dict:
    # DeepSeek-V2 and V3 (modeling_deepseek_v2.py, modeling_deepseek_v3.py; DeepSeek-AI 2024, arXiv 2405.04434 and
    # 2412.19437): pre-RMSNorm blocks with multi-head latent attention (kv_lora_rank, q_lora_rank (null: one q
    # projection), qk_rope_head_dim, qk_nope_head_dim: head_dim, v_head_dim; no biases) and DeepSeek-MoE: the first
    # first_k_dense_replace blocks a dense SwiGLU MLP of intermediate_size, the others n_routed_experts SwiGLU experts
    # of moe_intermediate_size (top num_experts_per_tok) and n_shared_experts x moe_intermediate_size of shared
    # expert, added ungated. The router's scoring (V3 sigmoid with a bias for the choice, group-limited; V2 softmax),
    # its scaling and group limits are elementwise; V3 renormalises the top-k weights where norm_topk_prob, V2's
    # router (transformers 5) does not. The multi-token prediction layer (num_nextn_predict_layers) is not run by
    # transformers' training forward and is not loaded: not costed. An untied head without bias.
    heads = k.int("num_attention_heads")
    if k.int("num_key_value_heads", heads) != heads:
        k._fail("num_key_value_heads", "latent attention has every head its own (num_key_value_heads = "
                "num_attention_heads)")
    for key in ("attention_bias", "mlp_bias"):
        if k.bool(key, False):
            k._fail(key, "biases in latent attention or the MLP are not supported")
    if k.int("moe_layer_freq", 1) != 1:
        k._fail("moe_layer_freq", "mixture-of-experts layers other than every layer after the dense ones are not "
                "supported (moe_layer_freq 1)")
    if k.str("hidden_act", "silu") != "silu":
        k._fail("hidden_act", f"{k.data.get('hidden_act')!r} is not supported (supported: silu)")
    # (absent keys take transformers' DeepseekV3Config / DeepseekV2Config defaults)
    v3 = k.model_type == "deepseek_v3"
    layers = k.int("num_hidden_layers")
    experts = k.int("n_routed_experts", 256 if v3 else 64, minimum=0) or 0
    entry = dict(arch="decoder", layers=layers, d_model=k.int("hidden_size"), heads=heads,
                 vocab=k.int("vocab_size"), seq_len=k.int("max_position_embeddings"), norm="rmsnorm",
                 norm_position="pre", ffn="swiglu", positions="rotary", bias="none", head_bias=False,
                 tie_embeddings=k.bool("tie_word_embeddings", False),
                 head_dim=k.int("qk_nope_head_dim", 128), kv_lora_rank=k.int("kv_lora_rank", 512),
                 qk_rope_head_dim=k.int("qk_rope_head_dim", 64), v_head_dim=k.int("v_head_dim", 128))
    q_rank = k.int("q_lora_rank", 1536, minimum=0)  # null: one q projection
    if q_rank:
        entry["q_lora_rank"] = q_rank
    dense = k.int("intermediate_size", 18432 if v3 else 11008)
    if not experts:
        entry["d_ff"] = dense
        return entry
    first = k.int("first_k_dense_replace", 3 if v3 else 0, minimum=0) or 0
    width = k.int("moe_intermediate_size", 2048 if v3 else 1407)
    entry.update(d_ff=width, experts=experts, experts_per_token=k.int("num_experts_per_tok", 8 if v3 else None),
                 router_norm=k.bool("norm_topk_prob", True) if v3 else False)
    shared = k.int("n_shared_experts", 1 if v3 else 2, minimum=0) or 0
    if shared:
        entry.update(shared_expert_ff=shared * width, shared_expert_gate=False)
    if first:
        entry.update(dense_blocks=first, dense_ff=dense)
    # group-limited routing (V3's noaux_tc, V2's group_limited_greedy): at most topk_group of n_group groups a token
    if v3 or k.str("topk_method", "greedy") == "group_limited_greedy":
        groups, limit = k.int("n_group", 8 if v3 else 1), k.int("topk_group", 4 if v3 else 1)
        if limit < groups:
            entry.update(expert_groups=groups, group_limit=limit)
    return entry
