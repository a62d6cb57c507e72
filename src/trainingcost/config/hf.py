"""A model's own ``config.json`` (as shipped with a Hugging Face model), read as a model entry.

Plain JSON, no ``transformers``: each supported ``model_type`` maps its keys onto
trainingcost's fields and options. What the mapping cannot express (a mixture of
experts outside Mixtral and Qwen-MoE, sliding-window attention over a longer sequence, an unknown
``model_type``, keys of the wrong type) is refused in one line that names it,
never counted silently wrong. The result is an entry like a preset's: command-line
flags and a sweep entry's other keys override its fields.

Sources of each mapping: the ``configuration_*.py`` and ``modeling_*.py`` of
Hugging Face ``transformers`` for GPT-2, BERT, Llama, Mistral, Qwen2, Mixtral and Qwen-MoE (key names,
their defaults, which layers carry biases, which heads are tied).
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import ConfigError

SUPPORTED = ("gpt2", "bert", "t5", "llama", "mistral", "qwen2", "mixtral", "qwen2_moe")
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


def config_path(path: str | Path, where: str) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"{where}: no such file: {path}")
    return path


def read_hf_config(path: str | Path, where: str = "--hf-config") -> dict:
    """The model entry of a ``config.json`` (or of a folder holding one)."""
    file = config_path(path, where)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: {file}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: {file}: invalid JSON at line {exc.lineno}, column {exc.colno}") from None
    except OSError as exc:
        raise ConfigError(f"{where}: {file}: cannot be read ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {file}: expected a JSON object, not {type(data).__name__}")
    return hf_entry(data, f"{where} {file}")


class _Keys:
    """Typed access to a config.json's keys, each mistake one line naming the key."""

    def __init__(self, data: dict, where: str, model_type: str):
        self.data, self.where, self.model_type = data, where, model_type

    def _fail(self, key: str, what: str):
        raise ConfigError(f"{self.where}: {key}: {what} (model_type {self.model_type})")

    def int(self, key: str, default=None, *, minimum: int = 1):
        value = self.data.get(key, default)
        if value is None:
            if default is None and key not in self.data:
                self._fail(key, "missing")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self._fail(key, f"{value!r} is not an integer")
        if value < minimum:
            self._fail(key, f"{value} is less than {minimum}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self._fail(key, f"{value!r} is not a boolean")
        return value

    def str(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            self._fail(key, f"{value!r} is not a string")
        return value

    def activation(self, key: str, default: str, allowed: dict) -> str:
        value = self.str(key, default)
        if value not in allowed:
            self._fail(key, f"{value!r} is not supported (supported: {', '.join(allowed)})")
        return allowed[value]


def hf_entry(data: dict, where: str = "config.json") -> dict:
    """Map one parsed ``config.json`` onto a model entry."""
    model_type = data.get("model_type")
    if model_type is None:
        raise ConfigError(f"{where}: model_type: missing (supported: {', '.join(SUPPORTED)})")
    if model_type not in SUPPORTED:
        raise ConfigError(f"{where}: model_type: {model_type!r} is not supported (supported: {', '.join(SUPPORTED)})")
    for key, feature in UNSUPPORTED_KEYS.items():
        if data.get(key) not in (None, 0, False) and key not in MOE_KEYS.get(model_type, ()):
            raise ConfigError(f"{where}: {key}: {feature} is not supported (model_type {model_type})")
    keys = _Keys(data, where, model_type)
    return {"gpt2": _gpt2, "bert": _bert, "t5": _t5, "llama": _llama, "mistral": _llama, "qwen2": _llama,
            "mixtral": _moe, "qwen2_moe": _moe}[model_type](keys)


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
    # T5 (modeling_t5.py, T5ForConditionalGeneration): pre-RMSNorm (T5LayerNorm, no bias) with a final norm per stack,
    # no biases, a relative position bias per stack (first block's self-attention, shared by the stack), heads d_kv
    # wide, encoder and decoder embeddings shared and tied to the head. Sequence length: n_positions (512).
    if not k.bool("is_encoder_decoder", True):
        k._fail("is_encoder_decoder", "T5's encoder alone is not supported")
    if not k.bool("tie_word_embeddings", True):
        k._fail("tie_word_embeddings", "an untied head with shared encoder and decoder embeddings (T5 v1.1) is not "
                "supported")
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
        tie_embeddings=True, bias="none", head_bias=False,
    )
    head_dim = k.int("d_kv", d // heads)
    if head_dim * heads != d:
        entry["head_dim"] = head_dim
    return entry


def _llama(k: _Keys) -> dict:
    # Llama, Mistral, Qwen2 (modeling_llama.py, modeling_mistral.py, modeling_qwen2.py): pre-RMSNorm with a final
    # norm, a SwiGLU MLP (hidden_act silu), grouped-query attention (num_key_value_heads), rotary positions, an
    # untied head without bias unless tie_word_embeddings. Biases: Llama's attention_bias (q, k, v, o) and mlp_bias;
    # Qwen2's q, k, v always; Mistral none.
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
        kv_heads=k.int("num_key_value_heads", heads), positions="rotary",
        tie_embeddings=k.bool("tie_word_embeddings", False), head_bias=False,
    )
    head_dim = k.int("head_dim", 0, minimum=0) or 0  # absent or null: hidden_size / heads
    if head_dim and head_dim * heads != d:
        entry["head_dim"] = head_dim
    if model_type == "llama":
        attention, mlp = k.bool("attention_bias", False), k.bool("mlp_bias", False)
        if mlp and not attention:
            k._fail("mlp_bias", "mlp_bias true with attention_bias false is not supported "
                    "(trainingcost's bias option: all, none, qkv (q, k, v only) or attention (q, k, v, o))")
        entry["bias"] = ("all" if mlp else "attention") if attention else "none"
    elif model_type == "qwen2_moe":  # Qwen2MoeAttention: q, k and v biased where qkv_bias (the default)
        entry["bias"] = "qkv" if k.bool("qkv_bias", True) else "none"
    else:
        entry["bias"] = "qkv" if model_type == "qwen2" else "none"
    if model_type in ("qwen2", "qwen2_moe") and k.bool("use_sliding_window", False):
        k._fail("use_sliding_window", "sliding-window attention is not supported")
    if model_type == "mistral":
        # Absent, the key is MistralConfig's default (4096, as transformers loads the file); null: no window.
        window = k.int("sliding_window", MISTRAL_SLIDING_WINDOW, minimum=0)
        if window:
            # checked against the sequence length once flags or a sweep entry have overridden it (check_window)
            entry["sliding_window"] = (window, k.where + ("" if "sliding_window" in k.data else
                                                         " (no sliding_window key: transformers' default)"))
    return entry


# The keys of a mixture of experts that each MoE model_type maps (hf_entry refuses them elsewhere).
MOE_KEYS = {"mixtral": ("num_local_experts",), "qwen2_moe": ("num_experts", "moe_intermediate_size")}


def _moe(k: _Keys) -> dict:
    # Mixtral (modeling_mixtral.py, MixtralSparseMoeBlock) and Qwen-MoE (modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock):
    # Llama's blocks (above) with a mixture of experts in place of the MLP: a router (hidden_size x experts, no bias),
    # softmax, top num_experts_per_tok, SwiGLU experts without biases. Mixtral: num_local_experts experts of
    # intermediate_size, the top-k weights renormalised; its sliding_window defaults to none. Qwen-MoE: num_experts
    # of moe_intermediate_size, renormalised only where norm_topk_prob, and a shared expert of
    # shared_expert_intermediate_size gated by sigmoid(x w); every layer sparse (decoder_sparse_step 1, no
    # mlp_only_layers), the dense layers of other settings being refused.
    mixtral = k.model_type == "mixtral"
    entry = _llama(k)
    if mixtral and k.data.get("sliding_window") is not None:  # absent or null: MixtralConfig's default, no window
        window = k.int("sliding_window", minimum=0)
        if window:
            entry["sliding_window"] = (window, k.where)  # checked against the sequence length (check_window)
    if k.data.get("router_jitter_noise", 0):
        k._fail("router_jitter_noise", "multiplicative noise on the router's input in training is not supported")
    if not mixtral:
        if k.int("decoder_sparse_step", 1) != 1 or k.data.get("mlp_only_layers"):
            key = "decoder_sparse_step" if k.int("decoder_sparse_step", 1) != 1 else "mlp_only_layers"
            k._fail(key, "dense MLP layers among the sparse ones are not supported (every layer a mixture of experts: "
                    "decoder_sparse_step 1, mlp_only_layers empty)")
    experts = k.int("num_local_experts" if mixtral else "num_experts", 8 if mixtral else 60)
    entry.update(experts=experts, experts_per_token=k.int("num_experts_per_tok", 2 if mixtral else 4))
    if not mixtral:
        entry["d_ff"] = k.int("moe_intermediate_size", 1408)
        entry["shared_expert_ff"] = k.int("shared_expert_intermediate_size", 5632, minimum=0)
        entry["router_norm"] = k.bool("norm_topk_prob", False)
    return entry


def check_window(entry: dict, where: str) -> dict:
    """An entry from a config.json with sliding-window attention is costed exactly only where the window covers the
    whole sequence (then it masks nothing); otherwise one line naming the file. Returns the entry without the key."""
    entry = dict(entry)
    window, source = entry.pop("sliding_window", (0, where))
    if window and entry.get("seq_len", 0) > window:
        raise ConfigError(f"{source}: sliding_window: {window}-token sliding-window attention over {entry['seq_len']} "
                          f"positions is not supported; give seq_len of at most {window}, where the window masks nothing")
    return entry


def with_overrides(entry: dict, overrides: dict) -> dict:
    """A config.json's entry with a sweep entry's (or the flags') fields in place of its own."""
    out = dict(entry)
    if any(k in overrides for k in ("layers", "enc_layers", "dec_layers")):
        for key in ("layers", "enc_layers", "dec_layers"):
            out.pop(key, None)
    if "ff_mult" in overrides:
        out.pop("d_ff", None)
    drop_short_table(out, overrides)
    drop_lm_head(out, overrides)
    out.update(overrides)
    return out


def drop_short_table(entry: dict, overrides: dict) -> None:
    """A sequence longer than the entry's learned position table (``max_positions``) gets a table of its own length."""
    seq_len = overrides.get("seq_len")
    if seq_len and entry.get("max_positions", 0) and seq_len > entry["max_positions"] and "max_positions" not in overrides:
        entry.pop("max_positions")


def drop_lm_head(entry: dict, overrides: dict) -> None:
    """A classification head asked for (``classes``) replaces the entry's LM head: the preset's or the file's
    ``tie_embeddings`` (its LM head sharing the embedding's table) no longer applies, unless given as well."""
    if overrides.get("classes") and "tie_embeddings" not in overrides:
        entry.pop("tie_embeddings", None)
