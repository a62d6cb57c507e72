"""One model configuration: validated once into a frozen, typed object that everything reads.

:func:`canonical_model` checks a model entry (from a sweep, a preset or the
command line) and returns a :class:`ModelConfig`. Sizes derived from the
configuration (rows per stack, the head's rows and width, the rows of the
cross-attention keys) are its properties, computed here and nowhere else.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from functools import cached_property

from .choices import ARCHES, BIASES, FFNS, NORM_POSITIONS, NORMS, PARALLEL_BLOCKS, POSITIONS, QK_NORMS  # noqa: F401
from .errors import ConfigError, not_in
from .presets import PRESETS
from .schema import declare_options, validate

# Architecture options: each is ONE declaration, a field of ModelConfig made by option() below. Its default is the
# 2017 transformer trainingcost costed first; only options that differ from their defaults enter the config_id, so
# the configurations written before an option existed keep their ids. From the declarations come OPTION_DEFAULTS,
# OPTION_CHOICES, LATE_OPTIONS, BOOL_FIELDS, the schema's keys (a model's and a grid's properties, and the enum of a
# string option: config/schema.py), the command line's flags (args.py), the config.json keys read for any model_type
# (config/hf.py) and the integer column the formulas read (analytic/templates.py's option_columns).
GATED_FFNS = ("swiglu", "geglu")  # three matrices: act(x W_gate) * (x W_up), then W_down
ADDED_POSITIONS = ("sinusoidal", "learned")  # a table added to the token embedding


def option(default, help: str, *, choices: tuple = (), minimum: int = 1, late: bool = True, hf: tuple = (),
           hf_value=None, column: bool = True, tape: bool = False):
    """An architecture option of :class:`ModelConfig`, declared once.

    ``default``: the 2017 transformer's value (its type is the option's: str with ``choices``, bool, int, float;
    None for a bool derived from others). ``help``: the schema's description and the flag's help. ``choices``: a
    string option's allowed values. ``minimum``: an integer option's least value (1 or 0). ``late``: added after the
    default sweep's tables were written (a configs frame has its column only where a row sets it, so those frames
    keep their bytes); every new option is late. ``hf``: config.json keys that carry it, read for any model_type
    (the first present and not null), through ``hf_value`` (a function of the value; default: as written).
    ``column``: an integer column ``<name>`` in templates.option_columns (a float: 1 where set), that the formulas
    read as ``s.<name>``. ``tape``: it changes which ops a step runs, so the memory tape's GroupKey carries its
    column (analytic/tape/group.py), read there as ``g.<name>``."""
    kind = "str" if choices else "bool" if default is None or isinstance(default, bool) else type(default).__name__
    return field(default=default, metadata=dict(
        option=True, help=help, kind=kind, choices=tuple(choices), minimum=minimum, late=late, hf=tuple(hf),
        hf_value=hf_value, column=column and kind in ("bool", "int", "float"), tape=tape))


@dataclass(frozen=True)
class ModelConfig:
    """The canonical parameters of a transformer; the config_id is a hash of exactly these, in this order."""

    arch: str
    d_model: int
    heads: int
    d_ff: int
    enc_layers: int
    dec_layers: int
    seq_len: int  # the source length of an encoder-decoder
    tgt_len: int  # equal to seq_len outside encoder-decoder
    vocab: int
    batch: int
    classes: int  # 0: an LM head over the vocabulary
    # -- architecture options (defaults: the 2017 transformer) ----------------------------
    norm: str = option("layernorm", "LayerNorm, RMSNorm, nonparametric: a LayerNorm without gain or bias (OLMo, "
                       "Groeneveld et al. 2024), or layernorm_nobias: a LayerNorm with a gain and no bias (Cohere's "
                       "Command R)", choices=NORMS, late=False)
    norm_position: str = option("post", "post: norm(x + f(x)) as in Vaswani et al. 2017; pre: x + f(norm(x)), and a "
                                "final norm per stack; output: x + norm(f(x)), the norm on each branch's output before "
                                "its residual, none on its input, and a final norm per stack (OLMo 2: Team OLMo 2024, "
                                "arXiv 2501.00656)", choices=NORM_POSITIONS, late=False)
    ffn: str = option("gelu", "gelu and relu have two matrices; swiglu and geglu three (d_ff is the gated width)",
                      choices=FFNS, late=False)
    kv_heads: int = option(0, "key/value heads (grouped-query attention); must divide heads (default: heads)",
                           late=False, column=False)
    head_dim: int = option(0, "the width of one head (default d_model / heads)", late=False, column=False)
    positions: str = option("sinusoidal", "sinusoidal, learned (a table), rotary (on q and k), relative (T5's bucketed "
                            "bias on the attention scores, one table per stack: Raffel et al. 2020) or none",
                            choices=POSITIONS, late=False)
    max_positions: int = option(0, "rows of a learned position table (default: the sequence length)", late=False)
    tie_embeddings: bool = option(False, "the head (and an encoder-decoder's two embeddings) share one V x d table",
                                  late=False, column=False)
    bias: str = option("all", "biases of the blocks' linear layers: all, none, qkv (q, k, v only), attention (q, k, v "
                       "and o, none in the FFN) or ffn (the FFN's matrices only)", choices=BIASES, late=False)
    head_bias: bool | None = option(None, "the head's bias (default: as the blocks', bias all)", late=False,
                                    column=False)
    type_vocab: int = option(0, "token types added to the token embedding (BERT: 2)", late=False)
    embedding_norm: bool = option(False, "a norm on the embedding output (BERT)", late=False)
    relative_buckets: int = option(32, "positions relative: T5's buckets of relative distance", late=False)
    relative_max_distance: int = option(128, "positions relative: the distance from which all share the last bucket",
                                        late=False, column=False)
    # (options added later go at the end of this list: late, their column only where a row sets them)
    parallel_block: str = option("none", "parallel attention and FFN, x + attn(norm(x)) + ffn(norm(x)): one_norm read "
                                 "by both branches (GPT-J, Phi-1/2, Falcon-7B) or two_norms (GPT-NeoX, Falcon-40B); "
                                 "pre-LN, encoder or decoder; none: the branches in sequence", choices=PARALLEL_BLOCKS,
                                 column=False)
    rotary_dim: int = option(0, "positions rotary: features of each head turned (GPT-NeoX's rotary_pct, Phi's "
                             "partial_rotary_factor, GPT-J's rotary_dim; default all)", column=False)
    sliding_window: int = option(0, "a decoder's queries attend to the last N positions only (Mistral, Qwen2, "
                                 "StarCoder2, Phi-3); executed: SDPA with a mask, the dense product")
    embedding_scale: bool = option(False, "the token embedding's output times sqrt(d_model) (Gemma)")
    shared_embedding: bool = option(False, "encoder-decoder: both stacks read one table, the head its own (T5 v1.1); "
                                    "tie_embeddings shares it with the head too")
    # mixture of experts (Mixtral, Qwen-MoE): each block's FFN becomes `experts` FFNs of d_ff (the expert width) and a
    # router (d x experts); each token runs through its experts_per_token (top-k) best, weighted by the router's softmax
    experts: int = option(0, "mixture of experts: routed FFNs per block, each d_ff wide; 0: a dense FFN", minimum=0)
    experts_per_token: int = option(0, "mixture of experts: the top-k experts each token runs through")
    shared_expert_ff: int = option(0, "mixture of experts: a shared expert this wide that every token runs, gated by "
                                   "sigmoid(x w) (Qwen-MoE)", minimum=0)
    router_norm: bool = option(True, "mixture of experts: the top-k weights renormalised to sum to 1 (Mixtral); "
                               "false: the softmax's (Qwen-MoE)")
    # Gemma 2 (Gemma Team 2024, arXiv 2408.00118; transformers' modeling_gemma2.py)
    post_norms: bool = option(False, "a norm on each branch's output too, before its residual: x + norm'(f(norm(x))) "
                              "(Gemma 2's post_attention_layernorm, post_feedforward_layernorm); pre-LN, in sequence",
                              tape=True)
    attention_softcap: float = option(0.0, "attention scores soft-capped, c tanh(scores / c) (Gemma 2's "
                                      "attn_logit_softcapping); executed: attention written out (two batched products "
                                      "and a softmax, as transformers' eager path), since fused kernels cannot cap; "
                                      "0: none", hf=("attn_logit_softcapping",), tape=True)
    logit_softcap: float = option(0.0, "the head's logits soft-capped, c tanh(logits / c) (Gemma 2's "
                                  "final_logit_softcapping); 0: none", hf=("final_logit_softcapping",), tape=True)
    window_period: int = option(0, "sliding_window on some layers only: a decoder's layer i (from 0) attends to every "
                                "earlier position where i + 1 is a multiple of this period, within the window "
                                "elsewhere (Gemma 2: 2, local and global layers alternating); 0: every layer "
                                "windowed", minimum=2)
    query_scale: int = option(0, "scores scaled by query_scale^-1/2 instead of head_dim^-1/2 (Gemma 2's "
                              "query_pre_attn_scalar): a number, no cost; 0: head_dim", hf=("query_pre_attn_scalar",))
    # Qwen3, Gemma 3 and OLMo 2 (transformers' modeling_qwen3.py, modeling_gemma3.py, modeling_olmo2.py: q_norm, k_norm)
    qk_norm: str = option("none", "an RMSNorm on the queries and on the keys, after their projections and before rotary "
                          "positions: head, on each head (one head_dim weight per norm shared by the heads: Qwen3, "
                          "Gemma 3); projection, on each whole projection (heads x head_dim wide: OLMo 2); none",
                          choices=QK_NORMS)
    # DeepSeek-MoE (Dai et al. 2024; DeepSeek-V2/V3): the shared experts' output added to the routed ones', ungated
    shared_expert_gate: bool = option(True, "mixture of experts: the shared expert's output gated by sigmoid(x w) "
                                      "(Qwen-MoE); false: added as it is (DeepSeek-MoE's shared experts)", tape=True)
    # Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2, arXiv 2405.04434, section 2.1; transformers'
    # modeling_deepseek_v3.py): keys and values from a low-rank latent, queries optionally too, a rotary part apart
    kv_lora_rank: int = option(0, "multi-head latent attention (DeepSeek-V2, V3): keys and values from a latent this "
                               "wide (kv_a: d -> kv_lora_rank + qk_rope_head_dim, an RMSNorm, kv_b: -> heads x "
                               "(head_dim + v_head_dim)); head_dim is each head's non-rotary query and key part; 0: "
                               "standard attention", minimum=0, tape=True)
    q_lora_rank: int = option(0, "latent attention: queries through a latent this wide (q_a, an RMSNorm, q_b); 0: one "
                              "projection d -> heads x (head_dim + qk_rope_head_dim)", minimum=0)
    qk_rope_head_dim: int = option(0, "latent attention: the rotary part of each query head, and of the one key part "
                                   "every head shares", minimum=0)
    v_head_dim: int = option(0, "latent attention: each value head's width (0: head_dim)", minimum=0)
    # DeepSeek-V2/V3's first blocks keep a dense FFN (first_k_dense_replace; intermediate_size wide)
    dense_blocks: int = option(0, "mixture of experts: the decoder's first N blocks keep a dense FFN, dense_ff wide "
                               "(DeepSeek's first_k_dense_replace); 0: every block a mixture", minimum=0, tape=True)
    dense_ff: int = option(0, "mixture of experts: the width of the first blocks' dense FFNs (0: d_ff)", minimum=0)
    # DeepSeek-V3's node-limited routing (n_group, topk_group): no FLOPs, fewer bytes between nodes
    expert_groups: int = option(0, "mixture of experts: the experts fall in this many groups (DeepSeek-V3's n_group; "
                                "each a node's experts where the expert-parallel group spans as many nodes)", minimum=0)
    group_limit: int = option(0, "mixture of experts: each token's experts come from at most this many groups "
                              "(DeepSeek-V3's topk_group: node-limited routing); 0: any", minimum=0)
    # DeepSeek-V3's multi-token prediction (DeepSeek-V3 Technical Report, section 2.2); transformers neither loads nor
    # trains it, so config.json's num_nextn_predict_layers is not read: give it where a run trains it
    mtp_depth: int = option(0, "multi-token prediction (DeepSeek-V3): this many modules after a pre-LN decoder's blocks, "
                            "module k an RMSNorm of the (k-1)-th hidden state and one of token i+k's embedding, a "
                            "2d x d projection of the two, one block and the shared head, predicting token i+k+1; "
                            "trained under bp only; 0: none", minimum=0, tape=True)

    def __post_init__(self):
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.d_model // self.heads)
        if self.head_bias is None:
            object.__setattr__(self, "head_bias", self.bias == "all")

    # -- derived sizes ------------------------------------------------------------------
    @property
    def encdec(self) -> bool:
        return self.arch == "encoder-decoder"

    @property
    def stacks(self) -> tuple[str, ...]:
        """The stacks, input side first."""
        return {"encoder": ("encoder",), "decoder": ("decoder",), "encoder-decoder": ("encoder", "decoder")}[self.arch]

    def depth(self, stack: str) -> int:
        return self.enc_layers if stack == "encoder" else self.dec_layers

    def rows(self, stack: str) -> int:
        """Token rows per sequence of a stack: the source for the encoder, the target for the decoder."""
        return self.seq_len if stack == "encoder" else self.tgt_len

    @property
    def blocks(self) -> int:
        return self.enc_layers + self.dec_layers

    @property
    def layers(self) -> int:
        """Blocks of the one stack of an encoder-only or decoder-only model."""
        return self.enc_layers or self.dec_layers

    @property
    def d_head(self) -> int:
        return self.head_dim

    @property
    def attn_width(self) -> int:
        """The width of the queries and of the attention output: heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """The width of the keys and of the values: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def pre_norm(self) -> bool:
        """The norm on each branch's input: x + f(norm(x))."""
        return self.norm_position == "pre"

    @property
    def output_norm(self) -> bool:
        """The norm on each branch's output, none on its input: x + norm(f(x)) (OLMo 2)."""
        return self.norm_position == "output"

    @property
    def final_norm(self) -> bool:
        """A norm after each stack's last block (pre-LN and output-LN: the residual stream is never normalised)."""
        return self.norm_position in ("pre", "output")

    @property
    def gated(self) -> bool:
        return self.ffn in GATED_FFNS

    @property
    def dense_width(self) -> int:
        """The width of a mixture's first blocks' dense FFNs (dense_ff, or d_ff)."""
        return self.dense_ff or self.d_ff

    @property
    def mtp(self) -> bool:
        """Multi-token prediction modules after the decoder (mtp_depth > 0)."""
        return self.mtp_depth > 0

    def block_moe(self, index: int) -> bool:
        """Whether block ``index`` (from 0) of a stack has a mixture of experts (not one of the dense first blocks)."""
        return self.moe and index >= self.dense_blocks

    @property
    def latent(self) -> bool:
        """Multi-head latent attention (kv_lora_rank > 0)."""
        return self.kv_lora_rank > 0

    @property
    def q_head(self) -> int:
        """A query (and key) head's width: head_dim, and under latent attention its rotary part too."""
        return self.head_dim + self.qk_rope_head_dim

    @property
    def v_head(self) -> int:
        """A value head's width: v_head_dim under latent attention, else head_dim."""
        return self.v_head_dim or self.head_dim

    @property
    def added_positions(self) -> bool:
        return self.positions in ADDED_POSITIONS

    def position_rows(self, stack: str) -> int:
        """Rows of a stack's position table: max_positions, or the stack's length."""
        return self.max_positions or self.rows(stack)

    @property
    def parallel(self) -> bool:
        return self.parallel_block != "none"

    @property
    def rotary_width(self) -> int:
        """Features of each head that rotary positions turn (rotary_dim, or the whole head)."""
        return self.rotary_dim or self.head_dim

    @property
    def qkv_bias(self) -> bool:
        return self.bias in ("all", "qkv", "attention")

    @property
    def o_bias(self) -> bool:
        """A bias on the attention output projection."""
        return self.bias in ("all", "attention")

    @property
    def out_bias(self) -> bool:
        """Biases on the FFN's matrices."""
        return self.bias in ("all", "ffn")

    @property
    def default_architecture(self) -> bool:
        """Whether every architecture option is at its default (the 2017 transformer)."""
        return not self.options()

    def options(self) -> dict:
        """The architecture options that differ from their defaults (what enters the config_id)."""
        derived = {"kv_heads": self.heads, "head_bias": self.bias == "all",
                   "head_dim": self.d_model // self.heads if self.d_model % self.heads == 0 else None}
        out = {}
        for name, default in OPTION_DEFAULTS.items():
            value = getattr(self, name)
            if value != derived.get(name, default):
                out[name] = value
        return out

    @property
    def moe(self) -> bool:
        """A mixture of experts in place of each block's FFN."""
        return self.experts > 0

    @property
    def out_width(self) -> int:
        """The head's output width (and the output error's): classes, or the vocabulary."""
        return self.classes or self.vocab

    @property
    def head_rows(self) -> int:
        """Rows per sequence that reach the head: one pooled row for a classifier, every target position otherwise."""
        return 1 if self.classes else self.tgt_len

    @property
    def kv_rows(self) -> int:
        """Key/value rows per sequence of a cross-attention (the encoder output)."""
        return self.seq_len

    def error_aligned(self, stack: str) -> bool:
        """Whether the output error has one row per position of ``stack``: an LM head on the stack that
        produces the output; not a classifier (one pooled row), nor the encoder of an encoder-decoder."""
        return not self.classes and not (self.encdec and stack == "encoder")

    @property
    def tokens_per_step(self) -> int:
        """Input tokens of one batch: both stacks' sequences for an encoder-decoder."""
        return self.batch * (self.seq_len + (self.tgt_len if self.encdec else 0))

    @cached_property
    def config_id(self) -> str:
        """A stable 10-hex-digit id: the hash of the sizes and of the options that differ from their defaults."""
        identity = {name: getattr(self, name) for name in SIZE_FIELDS} | self.options()
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes) -> "ModelConfig":
        """A copy with ``changes``. Widths derived from others follow them: a head width that was d_model / heads
        stays so, key/value heads that were as many as the heads stay so, unless the changes set them."""
        if "head_dim" not in changes and self.head_dim * self.heads == self.d_model:
            d_model, heads = changes.get("d_model", self.d_model), changes.get("heads", self.heads)
            changes["head_dim"] = max(1, d_model // heads)
        if "kv_heads" not in changes and self.kv_heads == self.heads:
            changes["kv_heads"] = changes.get("heads", self.heads)
        return replace(self, **changes)


CANONICAL_FIELDS = tuple(f.name for f in fields(ModelConfig))
# What the declarations give (option() above): read these, never a list written by hand.
OPTIONS = {f.name: f.metadata for f in fields(ModelConfig) if f.metadata.get("option")}
OPTION_DEFAULTS = {f.name: f.default for f in fields(ModelConfig) if f.name in OPTIONS}
OPTION_CHOICES = {name: meta["choices"] for name, meta in OPTIONS.items() if meta["kind"] == "str"}
LATE_OPTIONS = tuple(name for name, meta in OPTIONS.items() if meta["late"])
OPTION_FIELDS = tuple(OPTIONS)
SIZE_FIELDS = tuple(name for name in CANONICAL_FIELDS if name not in OPTIONS)
BOOL_FIELDS = tuple(name for name, meta in OPTIONS.items() if meta["kind"] == "bool")
INT_OPTIONS = tuple(name for name, meta in OPTIONS.items() if meta["kind"] == "int")
FLOAT_FIELDS = tuple(name for name, meta in OPTIONS.items() if meta["kind"] == "float")
STR_FIELDS = ("arch", *OPTION_CHOICES)
COLUMN_OPTIONS = tuple(name for name, meta in OPTIONS.items() if meta["column"])  # templates.option_columns
TAPE_OPTIONS = tuple(name for name, meta in OPTIONS.items() if meta["tape"] and meta["column"])  # tape's GroupKey
HF_OPTIONS = {name: meta for name, meta in OPTIONS.items() if meta["hf"]}  # config/hf.py, for any model_type


def _option_schema(name: str, meta) -> tuple[dict, dict, dict | None]:
    """An option's property in a model entry, in a grid, and its enum's $defs entry (a string option's)."""
    if meta["kind"] == "str":
        ref = {"$ref": f"#/$defs/{name}"}
        return ref, {"type": "array", "minItems": 1, "items": ref}, {"description": meta["help"], "enum": list(meta["choices"])}
    if meta["kind"] == "bool":
        one = {"type": "boolean"}
    elif meta["kind"] == "float":
        one = {"type": "number", "minimum": 0}
    elif OPTION_DEFAULTS[name] == 0 and meta["minimum"] > 0:  # 0 is the default (off), else at least the minimum
        one = {"type": "integer", "minimum": 0}  # the least non-zero value is checked with the model (canonical_model)
    elif meta["minimum"] == 1:
        return {"$ref": "#/$defs/size"}, {"$ref": "#/$defs/axis"}, None
    else:
        one = {"type": "integer", "minimum": meta["minimum"]}
    return {**one, "description": meta["help"]}, {"type": "array", "minItems": 1, "items": one}, None


declare_options({name: _option_schema(name, meta) for name, meta in OPTIONS.items()})


def field_value(name: str, value):
    """A canonical field's value in its Python type (a frame's numpy scalars back to str, bool, int)."""
    if name in STR_FIELDS:
        return str(value)
    if name in BOOL_FIELDS:
        return bool(value)
    if name in FLOAT_FIELDS:
        return float(value)
    return int(value)


def config_from_row(row) -> "ModelConfig":
    """The configuration of a mapping with every canonical field (a configs-frame row, a run's columns)."""
    return ModelConfig(**{name: field_value(name, row[name]) for name in CANONICAL_FIELDS if name in row})


def config_id(cfg: ModelConfig) -> str:
    return cfg.config_id


def _describe(entry: dict) -> str:
    keys = ("arch", "d_model", "heads", "layers", "enc_layers", "dec_layers", "seq_len")
    return ", ".join(f"{k}={entry[k]}" for k in keys if k in entry)


def _field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def canonical_model(entry: dict, where: str = "", *, strict: bool = True) -> ModelConfig:
    """Check one model entry and return its canonical configuration.

    ``strict`` entries (explicit models, command-line flags) reject fields that
    do not apply to their arch; grid combinations drop them instead.
    """
    if strict:  # grid combinations were validated as part of their grid
        validate(entry, where, "#/$defs/model")
    e = dict(entry)
    arch = e["arch"]
    encdec = arch == "encoder-decoder"
    if not encdec:
        for key in ("enc_layers", "dec_layers", "tgt_len"):
            if key in e:
                if strict:
                    raise ConfigError(f"{_field(where, key)}: applies only to arch encoder-decoder (arch is {arch})")
                del e[key]
        if "layers" not in e:
            raise ConfigError(f"{_field(where, 'layers')}: required for arch {arch}")
        enc_layers, dec_layers = (e["layers"], 0) if arch == "encoder" else (0, e["layers"])
    else:
        if strict and "layers" in e and ("enc_layers" in e or "dec_layers" in e):
            raise ConfigError(f"{_field(where, 'layers')}: give either layers or enc_layers and dec_layers, not both")
        enc_layers = e.get("enc_layers", e.get("layers"))
        dec_layers = e.get("dec_layers", e.get("layers"))
        for key, value in (("enc_layers", enc_layers), ("dec_layers", dec_layers)):
            if value is None:
                raise ConfigError(f"{_field(where, key)}: encoder-decoder needs both stacks (give {key} or layers)")
    if ("d_ff" in e) == ("ff_mult" in e):
        raise ConfigError(f"{_field(where, 'd_ff')}: give exactly one of d_ff and ff_mult")
    d_model, heads = int(e["d_model"]), int(e["heads"])
    if d_model % heads and "head_dim" not in e:
        raise ConfigError(f"{_field(where, 'heads')}: {heads} does not divide d_model {d_model} ({_describe(e)}); "
                          "or give head_dim")
    d_ff = int(e["d_ff"]) if "d_ff" in e else int(e["ff_mult"]) * d_model
    classes = int(e.get("classes", 0))
    if classes and encdec:
        raise ConfigError(f"{_field(where, 'classes')}: a classification head needs arch encoder or decoder")
    seq_len = int(e["seq_len"])
    tgt_len = int(e.get("tgt_len", seq_len)) if encdec else seq_len
    options = _options(e, where, heads=heads, d_model=d_model, classes=classes, lengths=(seq_len, tgt_len), arch=arch)
    if options.get("dense_blocks"):
        if arch != "decoder":
            raise ConfigError(f"{_field(where, 'dense_blocks')}: applies only to arch decoder (DeepSeek's first dense "
                              f"blocks; arch is {arch})")
        if options["dense_blocks"] >= int(dec_layers):
            raise ConfigError(f"{_field(where, 'dense_blocks')}: {options['dense_blocks']} dense blocks leave none of the "
                              f"{dec_layers} a mixture of experts (give fewer, or no experts)")
        if options.get("dense_ff") == d_ff:
            del options["dense_ff"]  # d_ff: the default, one config_id
    return ModelConfig(
        arch=arch,
        d_model=d_model,
        heads=heads,
        d_ff=d_ff,
        enc_layers=int(enc_layers),
        dec_layers=int(dec_layers),
        seq_len=seq_len,
        tgt_len=tgt_len,
        vocab=int(e["vocab"]),
        batch=int(e.get("batch", 1)),
        classes=classes,
        **options,
    )


def _options(e: dict, where: str, *, heads: int, d_model: int, classes: int, lengths: tuple[int, int],
             arch: str = "decoder") -> dict:
    """The architecture options of an entry, checked against each other (one line per mistake)."""
    out = {}
    for name, choices in OPTION_CHOICES.items():
        if name in e:
            value = e[name]
            if name == "bias" and isinstance(value, bool):  # bias: true / false in YAML
                value = "all" if value else "none"
            if value not in choices:
                raise ConfigError(f"{_field(where, name)}: {value!r} is not allowed (allowed: {', '.join(choices)})")
            out[name] = value
    for name in BOOL_FIELDS:
        if name in e:
            if not isinstance(e[name], bool):
                raise ConfigError(f"{_field(where, name)}: {e[name]!r} is not a boolean (true or false)")
            out[name] = e[name]
    for name in INT_OPTIONS:
        if name in e:
            value = e[name]
            if isinstance(value, bool) or not isinstance(value, int) or (
                    value < OPTIONS[name]["minimum"] and value != OPTION_DEFAULTS[name]):
                least = OPTIONS[name]["minimum"]
                raise ConfigError(f"{_field(where, name)}: {value!r} is not " + (
                    f"0 (off) or at least {least}" if OPTION_DEFAULTS[name] == 0 and least > 0 else
                    "a positive integer"))
            out[name] = value
    for name in FLOAT_FIELDS:
        if name in e:
            value = e[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ConfigError(f"{_field(where, name)}: {value!r} is not a finite number of at least 0")
            out[name] = float(value)
    if out.get("kv_heads") and heads % out["kv_heads"]:  # 0: the default, every head its own
        raise ConfigError(f"{_field(where, 'kv_heads')}: {out['kv_heads']} does not divide heads {heads} "
                          "(each key/value head serves heads / kv_heads query heads)")
    positions = out.get("positions", OPTION_DEFAULTS["positions"])
    if "max_positions" in out:
        if positions != "learned":
            raise ConfigError(f"{_field(where, 'max_positions')}: applies only to positions learned (positions is {positions})")
        if out["max_positions"] < max(lengths):
            raise ConfigError(f"{_field(where, 'max_positions')}: {out['max_positions']} rows cannot hold a sequence of "
                              f"{max(lengths)} positions")
        if set(lengths) == {out["max_positions"]}:
            del out["max_positions"]  # each stack's own length: the default, one config_id
    for name in ("relative_buckets", "relative_max_distance"):
        if name in out and positions != "relative":
            raise ConfigError(f"{_field(where, name)}: applies only to positions relative (positions is {positions})")
    if positions == "relative" and out.get("relative_buckets", 32) < 4:
        raise ConfigError(f"{_field(where, 'relative_buckets')}: at least 4 buckets (half exact, half logarithmic, "
                          "each side of a bidirectional bias)")
    head_dim = out.get("head_dim", d_model // heads)
    if positions == "rotary" and head_dim % 2:
        raise ConfigError(f"{_field(where, 'head_dim' if 'head_dim' in out else 'positions')}: rotary positions turn "
                          f"pairs of features, so a head's width must be even (it is {head_dim})")
    if "rotary_dim" in out:
        if positions != "rotary":
            raise ConfigError(f"{_field(where, 'rotary_dim')}: applies only to positions rotary (positions is {positions})")
        if out["rotary_dim"] % 2 or out["rotary_dim"] > head_dim:
            raise ConfigError(f"{_field(where, 'rotary_dim')}: {out['rotary_dim']} features cannot be turned in pairs "
                              f"within a head of {head_dim} (give an even number up to head_dim)")
        if out["rotary_dim"] == head_dim:
            del out["rotary_dim"]  # the whole head: the default, one config_id
    if "sliding_window" in out:
        if arch != "decoder":
            raise ConfigError(f"{_field(where, 'sliding_window')}: applies only to arch decoder (a causal "
                              f"self-attention; arch is {arch})")
        if positions == "relative":
            raise ConfigError(f"{_field(where, 'sliding_window')}: does not combine with positions relative (T5's bias "
                              "carries its own mask)")
        if out["sliding_window"] >= lengths[0]:
            del out["sliding_window"]  # the window covers the sequence: it masks nothing (the default, one config_id)
    if out.get("shared_embedding"):
        if arch != "encoder-decoder":
            raise ConfigError(f"{_field(where, 'shared_embedding')}: applies only to arch encoder-decoder (two stacks "
                              f"to share a table; arch is {arch})")
        if out.get("tie_embeddings"):
            del out["shared_embedding"]  # tied: the stacks share the head's table already (one config_id)
    parallel = out.get("parallel_block", "none")
    if parallel != "none":
        if arch == "encoder-decoder":
            raise ConfigError(f"{_field(where, 'parallel_block')}: {parallel} applies only to arch encoder or decoder "
                              "(a block with cross-attention has no parallel form)")
        if out.get("norm_position", OPTION_DEFAULTS["norm_position"]) != "pre":
            raise ConfigError(f"{_field(where, 'parallel_block')}: {parallel} needs norm_position pre (the branches "
                              "read the normalised block input)")
    _experts(out, where)
    _gemma2(out, where, positions=positions, head_dim=head_dim, window_given="sliding_window" in e)
    _latent(out, where, arch=arch, positions=positions, head_dim=head_dim)
    _mtp(out, where, arch=arch, classes=classes, positions=positions)
    if out.get("tie_embeddings") and classes:
        raise ConfigError(f"{_field(where, 'tie_embeddings')}: a classification head has no vocabulary to share "
                          f"(classes is {classes}); tie only an LM head")
    return out


def _gemma2(out: dict, where: str, *, positions: str, head_dim: int, window_given: bool) -> None:
    """Gemma 2's options, checked against the others; a value that changes nothing is dropped (one config_id)."""
    if out.get("post_norms"):
        if out.get("norm_position", OPTION_DEFAULTS["norm_position"]) != "pre" or out.get("parallel_block", "none") != "none":
            raise ConfigError(f"{_field(where, 'post_norms')}: needs norm_position pre and parallel_block none (a norm "
                              "on each branch's input and one on its output)")
    if out.get("attention_softcap") and positions == "relative":
        raise ConfigError(f"{_field(where, 'attention_softcap')}: does not combine with positions relative (T5's bias "
                          "is added to uncapped scores)")
    for name in ("attention_softcap", "logit_softcap", "window_period", "query_scale"):
        if name in out and not out[name]:
            del out[name]  # 0: none, the default
    if "window_period" in out and "sliding_window" not in out:
        if not window_given:
            raise ConfigError(f"{_field(where, 'window_period')}: applies only with sliding_window (the layers "
                              "between the global ones are windowed)")
        del out["window_period"]  # the window covers the sequence: no layer is windowed in effect
    if out.get("query_scale") == head_dim:
        del out["query_scale"]  # head_dim: the default scale, one config_id


LATENT_OPTIONS = ("q_lora_rank", "qk_rope_head_dim", "v_head_dim")


def _latent(out: dict, where: str, *, arch: str, positions: str, head_dim: int) -> None:
    """Multi-head latent attention's options, checked against the others: a decoder's causal self-attention with rotary
    positions on its own part, every head its own (no grouped-query attention), no biases or q/k norms in it."""
    if not out.get("kv_lora_rank"):
        out.pop("kv_lora_rank", None)
        for name in LATENT_OPTIONS:
            if out.get(name):
                raise ConfigError(f"{_field(where, name)}: applies only to latent attention (give kv_lora_rank)")
            out.pop(name, None)
        return
    if arch != "decoder":
        raise ConfigError(f"{_field(where, 'kv_lora_rank')}: latent attention applies only to arch decoder (DeepSeek's "
                          f"causal self-attention; arch is {arch})")
    if positions != "rotary" or not out.get("qk_rope_head_dim"):
        missing = "qk_rope_head_dim" if out.get("qk_rope_head_dim") is None else "positions"
        fields = f"{_field(where, 'kv_lora_rank')}, {_field(where, missing)}"  # what was given, and what it needs
        raise ConfigError(f"{fields}: latent attention turns a part of each head of its own "
                          "(give positions rotary and qk_rope_head_dim, an even width)")
    if out["qk_rope_head_dim"] % 2:
        raise ConfigError(f"{_field(where, 'qk_rope_head_dim')}: {out['qk_rope_head_dim']} features cannot be turned in "
                          "pairs (give an even number)")
    for name, allowed in (("kv_heads", None), ("bias", ("none", "ffn")), ("qk_norm", ("none",)),
                          ("sliding_window", None), ("attention_softcap", None), ("parallel_block", ("none",)),
                          ("rotary_dim", None), ("query_scale", None)):
        value = out.get(name)
        if value in (None, 0, 0.0) or (allowed and value in allowed):
            continue
        raise ConfigError(f"{_field(where, name)}: {value!r} does not combine with latent attention (kv_lora_rank)"
                          + (f"; allowed: {', '.join(allowed)}" if allowed else ""))
    if out.get("v_head_dim") == head_dim:
        del out["v_head_dim"]  # head_dim: the default, one config_id


def _mtp(out: dict, where: str, *, arch: str, classes: int, positions: str) -> None:
    """Multi-token prediction, checked against the others: DeepSeek-V3's modules follow a pre-LN decoder-only LM's
    last block (the hidden state before its final norm), each a block of the decoder's own kind."""
    if not out.get("mtp_depth"):
        out.pop("mtp_depth", None)
        return
    why = ("arch decoder" if arch != "decoder" else "an LM head (classes 0)" if classes else
           "norm_position pre" if out.get("norm_position", OPTION_DEFAULTS["norm_position"]) != "pre" else "")
    if why:
        raise ConfigError(f"{_field(where, 'mtp_depth')}: multi-token prediction needs {why} (DeepSeek-V3's modules "
                          "read a causal LM's hidden state before its final norm)")
    for name in ("sliding_window", "parallel_block", "post_norms", "embedding_scale", "type_vocab", "embedding_norm"):
        value = out.get(name, OPTION_DEFAULTS[name])
        if value != OPTION_DEFAULTS[name]:
            raise ConfigError(f"{_field(where, name)}: {value!r} does not combine with multi-token prediction "
                              f"(mtp_depth; allowed: {OPTION_DEFAULTS[name]!r})")
    if positions in ("relative", "sinusoidal", "learned"):
        raise ConfigError(f"{_field(where, 'positions')}: {positions} does not combine with multi-token prediction "
                          "(mtp_depth; allowed: rotary, none)")


# The most routed experts per block priced: 2.7x Kimi K2's 384 (Kimi Team 2025, "Kimi K2: Open Agentic Intelligence",
# arXiv 2507.20534), the most of any published model we know; `estimate` of qwen3-30b-a3b at 1,024 takes about 10 s
# on a quiet 2-core machine, and its time grows with the count (4,096: 72 s on a busy one).
MAX_EXPERTS = 1024


def _experts(out: dict, where: str) -> None:
    """Mixture-of-experts options, checked against each other; zero experts is the dense FFN (the default)."""
    experts = out.get("experts", 0)
    if not experts:
        out.pop("experts", None)
        for name in ("experts_per_token", "shared_expert_ff", "router_norm", "shared_expert_gate", "dense_blocks",
                     "dense_ff", "expert_groups", "group_limit"):
            if out.get(name, OPTION_DEFAULTS[name]) != OPTION_DEFAULTS[name]:
                raise ConfigError(f"{_field(where, name)}: applies only to a mixture of experts (give experts)")
        return
    if experts > MAX_EXPERTS:  # bounded before any work: a plan's rows and time grow with the count (issue 66, N6)
        raise ConfigError(f"{_field(where, 'experts')}: {experts} is more than {MAX_EXPERTS}, the most experts per block "
                          "this tool prices (published models route among up to 384)")
    top_k = out.get("experts_per_token")
    if top_k is None:
        raise ConfigError(f"{_field(where, 'experts_per_token')}: required with experts (the top-k experts each token "
                          f"runs through, 1 to {experts})")
    if top_k > experts:
        raise ConfigError(f"{_field(where, 'experts_per_token')}: {top_k} is more than the {experts} experts")
    if not out.get("shared_expert_ff", 1):
        del out["shared_expert_ff"]  # no shared expert: the default
    groups, limit = out.get("expert_groups", 0), out.get("group_limit", 0)
    if bool(groups) != bool(limit):
        name = "group_limit" if groups else "expert_groups"
        raise ConfigError(f"{_field(where, name)}: node-limited routing needs expert_groups and group_limit both")
    if groups:
        if experts % groups:
            raise ConfigError(f"{_field(where, 'expert_groups')}: {groups} groups do not divide the {experts} experts")
        if limit > groups:
            raise ConfigError(f"{_field(where, 'group_limit')}: {limit} is more than the {groups} groups")
        if limit == groups or groups == 1:
            out.pop("expert_groups"), out.pop("group_limit")  # every group allowed: no limit (one config_id)
    if not out.get("dense_blocks"):
        out.pop("dense_blocks", None)
        if out.get("dense_ff"):
            raise ConfigError(f"{_field(where, 'dense_ff')}: applies only with dense_blocks (the first blocks' dense "
                              "FFNs)")
        out.pop("dense_ff", None)
    if not out.get("shared_expert_ff") and out.get("shared_expert_gate", True) is False:
        raise ConfigError(f"{_field(where, 'shared_expert_gate')}: applies only with a shared expert (give "
                          "shared_expert_ff)")


def preset_entry(name: str, where: str = "preset") -> dict:
    name = name if name in PRESETS else name.strip().lower()  # LLAMA-3-8B names llama-3-8b
    if name not in PRESETS:
        raise not_in(where, name, "a preset", PRESETS, "`trainingcost estimate --help`")
    return dict(PRESETS[name])


__all__ = ["ARCHES", "CANONICAL_FIELDS", "ModelConfig", "canonical_model", "config_id", "preset_entry"]
