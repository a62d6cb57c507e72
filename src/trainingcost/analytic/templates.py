"""Layer templates: the distinct layers of every configuration, vectorised.

All blocks of a stack have the same shapes, so the engine evaluates each
distinct (configuration, layer) once, as a *template* with a repeat ``count``,
and names the instances (``encoder.0.ffn`` ... ``encoder.11.ffn``) only when
it writes a table. Templates come from the block structure in
:mod:`.layers`, so the names match the model's.

Shapes, per template and per sequence:
- ``M``: query rows of an attention layer, or the rows of any other layer;
- ``N``: key/value rows of an attention layer (``M`` elsewhere);
- ``out``: the output width of the head and error projection (vocab or classes);
- ``err_rows``: rows of the output error that a DFA projection maps per sequence.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..config.model import ARCHES, COLUMN_OPTIONS, FLOAT_FIELDS, OPTION_DEFAULTS, PARALLEL_BLOCKS
from . import layers as L

STACK_RANK = {"encoder": 0, "decoder": 1, "": 2, "mtp": 3}  # (mtp: multi-token prediction's modules, after the head)
END_RANK = {"embedding": 0, "token_type_embedding": 1, "positional_encoding": 2, L.EMBEDDING_NORM: 3, "relative_position": 4}
EMBEDDING_DFA_RANK = 5  # '<stack>.embedding.dfa_projection' follows the stack's ends
BLOCK_SUB_OFFSET = 2  # sublayer ranks inside a block start here
DFA_SUB_RANK = 50  # a block's DFA projection is listed after its sublayers
TARGET_SUB_RANK = 51  # then its target projection (TP, DTP, LRA)
TAIL_RANK = 900  # ranks from here on follow the stack's blocks (its final norm)
HEAD_RANK, ERROR_PROJECTION_RANK, HEAD_FEEDBACK_RANK, MODEL_RANK = 0, 1, 2, 0

CONFIG_INT_COLUMNS = ("d_model", "heads", "d_ff", "enc_layers", "dec_layers", "seq_len", "tgt_len", "vocab", "batch", "classes")


# Shape columns the formulas read, gathered per template once (config columns and per-template rows).
SHAPE_COLUMNS = {"d": "d_model", "h": "heads", "V": "vocab", "B": "batch", "classes": "classes",
                 "src_len": "seq_len", "tgt_len": "tgt_len", "enc_layers": "enc_layers", "dec_layers": "dec_layers",
                 # architecture options, as integers (see option_columns)
                 "a": "attn_width", "kv": "kv_width", "kvh": "kv_heads", "dh": "head_dim", "gated": "gated",
                 "relu": "relu", "silu": "silu", "g": "norm_vectors", "ns": "norm_stats", "rms": "rms", "pre": "pre", "tied": "tied", "bq": "qkv_bias",
                 "bo": "out_bias", "ba": "o_bias", "bh": "head_bias", "learned": "learned", "rotary": "rotary", "tv": "type_vocab",
                 "max_pos": "max_positions", "relative": "relative", "rb": "relative_buckets",
                 "w": "sliding_window", "es": "embedding_scale", "default_arch": "default_arch",
                 "E": "experts", "k": "experts_per_token", "sff": "shared_expert_ff", "qk_norm": "qk_norm",
                 "sg": "shared_expert_gate", "rkv": "kv_lora_rank", "rq": "q_lora_rank", "dr": "qk_rope_head_dim",
                 "dv": "v_head"}
# per template: rows, key rows, the head's width, DFA's error rows, a shared table, and ff, the FFN's (an expert's)
# width: d_ff, or a mixture of experts' dense first blocks' dense_ff (dense_blocks)
TEMPLATE_COLUMNS = ("M", "N", "out", "err_rows", "shared", "ff")


def _numpy(series: pd.Series) -> np.ndarray:
    """A column as numpy: strings as a unicode array, converted once per distinct value (not per row)."""
    if isinstance(series.dtype, pd.StringDtype) and not series.hasnans:
        codes, uniques = pd.factorize(series)
        return np.asarray(uniques, dtype=str)[codes] if len(uniques) else np.zeros(len(series), dtype=str)
    return series.to_numpy()


def option_columns(configs: pd.DataFrame) -> dict[str, np.ndarray]:
    """The architecture options of each configuration as the int64 columns the formulas read.

    A frame without an option's column (written before the option existed) has its default.
    """
    n = len(configs)
    read: dict[str, np.ndarray] = {}

    def column(name):  # each column read once (the defaults' check reads them again)
        if name not in read:
            read[name] = _column(name)
        return read[name]

    def _column(name):
        if name in configs:
            return _numpy(configs[name])
        default = OPTION_DEFAULTS[name]
        if name == "kv_heads":
            return configs["heads"].to_numpy(dtype=np.int64)
        if name == "head_dim":
            return configs["d_model"].to_numpy(dtype=np.int64) // configs["heads"].to_numpy(dtype=np.int64)
        if name == "head_bias":
            return column("bias") == "all"
        return np.full(n, default)  # a string default: a unicode array (its own width)

    i64 = lambda v: np.asarray(v).astype(np.int64)  # noqa: E731
    heads, head_dim, kv_heads = i64(configs["heads"]), i64(column("head_dim")), i64(column("kv_heads"))
    norm, ffn, positions, bias = (column(k).astype(str) for k in ("norm", "ffn", "positions", "bias"))
    cols = {
        "attn_width": heads * head_dim, "kv_width": kv_heads * head_dim, "kv_heads": kv_heads, "head_dim": head_dim,
        "gated": i64(np.isin(ffn, ("swiglu", "geglu"))), "relu": i64(ffn == "relu"), "silu": i64(ffn == "swiglu"),
        "rms": i64(norm == "rmsnorm"), "norm_vectors": i64(np.select([norm == "rmsnorm", norm == "nonparametric", norm == "layernorm_nobias"],
                                                                [1, 0, 1], 2)),
        "norm_stats": i64(np.where(norm == "rmsnorm", 1, 2)),  # saved per row: LayerNorm's mean and rstd, RMSNorm's rstd
        "pre": i64(column("norm_position").astype(str) == "pre"), "tied": i64(column("tie_embeddings").astype(bool)),
        # output-LN (OLMo 2): post-LN's sublayers, x + norm(f(x)); it and pre-LN end each stack with a norm
        "output_norm": i64(column("norm_position").astype(str) == "output"),
        "final_norm": i64(np.isin(column("norm_position").astype(str), ("pre", "output"))),
        "qkv_bias": i64(np.isin(bias, ("all", "qkv", "attention"))), "out_bias": i64(np.isin(bias, ("all", "ffn"))),
        "o_bias": i64(np.isin(bias, ("all", "attention"))), "head_bias": i64(column("head_bias").astype(bool)),
        "learned": i64(positions == "learned"), "rotary": i64(positions == "rotary"),
        "relative": i64(positions == "relative"),
        "added_positions": i64(np.isin(positions, ("sinusoidal", "learned"))),
        "parallel_block": column("parallel_block").astype(str),
        # qk_norm: 1 on each head (head_dim wide), 2 on each whole projection (heads x head_dim), 0 none
        "qk_norm": i64(np.select([column("qk_norm").astype(str) == "head", column("qk_norm").astype(str) == "projection"],
                                 [1, 2], 0)),
        # features of a head that rotary positions turn (rotary_dim; 0: the whole head)
        "rotary_dim": np.where(i64(column("rotary_dim")) > 0, i64(column("rotary_dim")), head_dim),
        # latent attention: a value head's width (v_head_dim; 0: head_dim)
        "v_head": np.where(i64(column("v_head_dim")) > 0, i64(column("v_head_dim")), head_dim),
    }
    # Every other integer, boolean or float option as declared (config/model.py's option(column=True)): its value as
    # an integer (a float: 1 where set), read by the formulas as s.<name> (sliding_window 0: none, experts 0: dense...)
    for name in COLUMN_OPTIONS:
        value = np.asarray(column(name))
        cols[name] = i64(value.astype(float) > 0) if name in FLOAT_FIELDS else i64(value.astype(np.int64))
    default = np.ones(n, dtype=bool)
    for name, value in OPTION_DEFAULTS.items():
        if name in ("kv_heads", "head_dim", "head_bias"):
            continue
        default &= column(name) == value
    default &= (kv_heads == heads) & (heads * head_dim == i64(configs["d_model"])) & (cols["head_bias"] == cols["out_bias"])
    cols["default_arch"] = i64(default)
    return cols


@dataclass
class Templates:
    """Column arrays, one entry per template.

    Rows come in *parts* (one ``add`` of :func:`build`: one layer kind, stack and sublayer for a
    subset of configurations); the string columns ``kind``, ``stack`` and ``sub`` are expanded
    from the parts' labels only when a table names layers.
    """

    configs: pd.DataFrame
    cfg: np.ndarray  # index into configs
    part: np.ndarray  # index into labels
    labels: tuple  # per part: (kind, stack, sub)
    count: np.ndarray  # instances of this template
    is_block: np.ndarray  # bool: one instance per block
    block_entry: np.ndarray  # bool: residual input is the block input
    kv_entry: np.ndarray  # bool: an attention's keys and values read the block input or the encoder output
    rank: np.ndarray  # order of the layer inside its stack
    M: np.ndarray
    N: np.ndarray
    out: np.ndarray
    err_rows: np.ndarray
    shared: np.ndarray  # 1 where the layer's weight table is another layer's (tied embeddings)
    ff: np.ndarray  # the FFN's (an expert's) width: d_ff, or a mixture's dense first blocks' dense_ff
    first: np.ndarray  # the index of its first block (a mixture's blocks after its dense_blocks first ones); 0
    config_columns: dict = field(default_factory=dict)
    kind_slices: dict = field(default_factory=dict)  # layer kind -> slice of its rows
    _cache: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.cfg)

    def _label(self, position: int) -> np.ndarray:
        key = ("label", position)
        if key not in self._cache:
            self._cache[key] = np.array([label[position] for label in self.labels], dtype=object)[self.part]
        return self._cache[key]

    @property
    def kind(self) -> np.ndarray:  # layer kind (str)
        return self._label(0)

    @property
    def stack(self) -> np.ndarray:  # 'encoder', 'decoder' or '' for model-level layers
        return self._label(1)

    @property
    def sub(self) -> np.ndarray:  # sublayer name (block layers) or layer name (end layers)
        return self._label(2)

    def kind_index(self) -> dict[str, slice]:
        """The template rows of each layer kind: :func:`build` keeps each kind's rows contiguous."""
        return self.kind_slices

    def config_column(self, name: str) -> np.ndarray:
        """A configuration parameter, gathered per template."""
        return self.config_columns[name][self.cfg]

    def shape_column(self, name: str, dtype) -> np.ndarray:
        """One shape a formula reads (a :data:`SHAPE_COLUMNS` or :data:`TEMPLATE_COLUMNS` name, ``encoder_only``,
        ``decoder_only``, ``encdec`` or ``pos_rows``), per template, in ``dtype``, read-only (computed once)."""
        key = ("shape", name, np.dtype(dtype).str)
        if key not in self._cache:
            if name in SHAPE_COLUMNS or name in COLUMN_OPTIONS:  # per configuration, then gathered per template
                column = self.config_columns[SHAPE_COLUMNS.get(name, name)]
                values = (column if column.dtype == bool else column.astype(dtype, copy=False))[self.cfg]
            elif name in TEMPLATE_COLUMNS:
                values = getattr(self, name).astype(dtype)
            elif name in ("encoder_only", "decoder_only", "encdec"):
                arch = {"encoder_only": "encoder", "decoder_only": "decoder", "encdec": "encoder-decoder"}[name]
                values = (self.config_columns["arch"] == arch)[self.cfg]  # compared per configuration, then gathered
            elif name == "pos_rows":  # the rows of a learned position table: max_positions, or the layer's rows
                max_pos = self.shape_column("max_pos", np.int64)
                values = np.where(max_pos > 0, max_pos, self.M)
            else:
                raise AttributeError(f"no shape {name!r} (shapes: {', '.join([*SHAPE_COLUMNS, *TEMPLATE_COLUMNS])})")
            values = values if values.dtype == bool else values.astype(dtype, copy=False)
            values.setflags(write=False)
            self._cache[key] = values
        return self._cache[key]


class Shapes:
    """The shapes of a subset of templates, as the formulas see them (per sequence), gathered when first read.

    Attributes: ``d``, ``h``, ``ff``, ``V``, ``B``, ``classes``, ``src_len``, ``tgt_len``,
    ``enc_layers``, ``dec_layers`` (the configuration's), ``M``, ``N``, ``out``, ``err_rows``,
    ``shared`` (1 where the layer's table is another layer's: a tied head) (the template's),
    ``encoder_only``, ``decoder_only``, ``encdec`` (bool) and ``zero``; the architecture options
    as integers (:data:`SHAPE_COLUMNS`: ``a`` = heads x head_dim, ``kv`` = kv_heads x head_dim,
    ``gated``, ``g`` the norm's parameter vectors, ``bq``/``bo``/``bh`` biases ...), and
    ``pos_rows``, the rows of a learned position table. Read-only views where ``index`` is a slice.
    """

    def __init__(self, templates: Templates, index, dtype=np.int64):
        self._templates, self._index, self._dtype = templates, index, dtype
        self.zero = np.zeros(len(templates.cfg[index]), dtype=dtype)

    def __getattr__(self, name: str) -> np.ndarray:  # a shape not read yet
        if name.startswith("_"):
            raise AttributeError(name)
        values = self._templates.shape_column(name, self._dtype)[self._index]
        setattr(self, name, values)
        return values

    def __len__(self) -> int:
        return len(self.zero)


def _codes(values: np.ndarray, choices) -> np.ndarray:
    """The index of each value in ``choices`` (-1: none), one comparison per choice."""
    codes = np.full(len(values), -1, dtype=np.int64)
    for number, choice in enumerate(choices):
        codes[values == choice] = number
    return codes


def build(configs: pd.DataFrame, granularity: str, only: np.ndarray | None = None,
          options: dict[str, np.ndarray] | None = None) -> Templates:
    """Templates for every configuration (or the ``only`` ones): per layer ('layer') or one per model ('model').
    ``options``: :func:`option_columns` of ``configs``, where the caller has them."""
    n = len(configs)
    cols = {c: configs[c].to_numpy(dtype=np.int64) for c in CONFIG_INT_COLUMNS}
    cols["arch"] = configs["arch"].to_numpy(dtype=object)
    cols.update(option_columns(configs) if options is None else options)
    arch = cols["arch"]
    classes = cols["classes"]
    out_width = np.where(classes > 0, classes, cols["vocab"])
    parts: list[dict] = []

    def add(mask, kind, stack, sub, count, is_block, block_entry, rank, M, N=None, out=0, err_rows=0, kv_entry=False,
            shared=0, ff=None, first=0):
        idx = np.nonzero(mask if only is None else mask & only)[0]
        if len(idx) == 0:
            return

        def pick(v):
            return np.asarray(v)[idx] if np.ndim(v) else np.full(len(idx), v, dtype=np.int64)

        parts.append(
            dict(
                cfg=idx,
                label=(kind, stack, sub),
                count=pick(count),
                is_block=np.full(len(idx), is_block),
                block_entry=np.full(len(idx), block_entry),
                kv_entry=np.full(len(idx), kv_entry),
                rank=np.full(len(idx), STACK_RANK[stack] * 1000 + rank, dtype=np.int64),
                M=pick(M),
                N=pick(M if N is None else N),
                out=pick(out),
                err_rows=pick(err_rows),
                shared=pick(shared),
                ff=pick(cols["d_ff"] if ff is None else ff),
                first=pick(first),
            )
        )

    everything = np.ones(n, dtype=bool)
    if granularity == "model":
        add(everything, "model", "", "model", 1, False, False, MODEL_RANK, cols["seq_len"], out=out_width)
    elif granularity == "layer":
        encdec = arch == "encoder-decoder"
        tied = cols["tied"] > 0
        ends_of = {"embedding": everything, "token_type_embedding": cols["type_vocab"] > 0,
                   "positional_encoding": cols["added_positions"] > 0, L.EMBEDDING_NORM: cols["embedding_norm"] > 0,
                   "relative_position": cols["relative"] > 0}
        variants = list(itertools.product(ARCHES, (False, True), PARALLEL_BLOCKS, (False, True), (False, True),
                                          (False, True)))
        arch_code, parallel_code = _codes(arch, ARCHES), _codes(cols["parallel_block"], PARALLEL_BLOCKS)
        variant = ((((arch_code * 2 + (cols["pre"] > 0)) * len(PARALLEL_BLOCKS) + parallel_code) * 2
                    + (cols["experts"] > 0)) * 2 + (cols["post_norms"] > 0)) * 2 + (cols["kv_lora_rank"] > 0)
        variant = np.where((arch_code < 0) | (parallel_code < 0), -1, variant)  # no block of a variant below
        for stack in ("encoder", "decoder"):
            depth = cols["enc_layers"] if stack == "encoder" else cols["dec_layers"]
            rows = cols["seq_len"] if stack == "encoder" else cols["tgt_len"]
            has = depth > 0
            for end, rank in END_RANK.items():
                kind = "norm" if end == L.EMBEDDING_NORM else end
                # A tied encoder-decoder shares one table: the encoder's embedding owns it.
                shared = (((cols["shared_embedding"] > 0) | tied) & encdec & (stack == "decoder")).astype(np.int64) \
                    if end == "embedding" else 0
                add(has & ends_of[end], kind, stack, end, 1, False, False, rank, rows, shared=shared)
            # each configuration's block variant as one code (its arch, pre-LN, parallel block, MoE and post-norms), in the
            # order of the product below: each variant present is one pass over the codes, not five string compares
            code = np.where(has, variant, -1)
            present = np.bincount(code[code >= 0], minlength=len(variants)) if len(code) else np.zeros(len(variants))
            for number, (arch_name, pre, parallel, moe, post, latent) in enumerate(variants):
                if not present[number]:
                    continue
                mask = code == number
                for position, sub in enumerate(L.block_sublayers(arch_name, stack, pre, parallel, moe, post, latent)):
                    kv_rows = cols["seq_len"] if sub.kind == "cross_attention" else rows
                    dense = cols["dense_blocks"] if sub.kind == "moe" else 0  # a mixture's dense first blocks
                    add(mask, sub.kind, stack, sub.name, depth - dense, True, sub.block_entry, BLOCK_SUB_OFFSET + position,
                        rows, kv_rows, kv_entry=sub.kv_entry, first=dense)
                    if sub.kind == "moe":  # ... each a dense FFN of dense_ff (or d_ff), blocks 0 to dense_blocks - 1
                        width = np.where(cols["dense_ff"] > 0, cols["dense_ff"], cols["d_ff"])
                        add(mask & (cols["dense_blocks"] > 0), "ffn", stack, sub.name, cols["dense_blocks"], True,
                            sub.block_entry, BLOCK_SUB_OFFSET + position, rows, kv_rows, kv_entry=sub.kv_entry, ff=width)
            add(has & (cols["final_norm"] > 0), "norm", stack, L.FINAL_NORM, 1, False, False, TAIL_RANK, rows)
            # DFA: the output error reaches each block through its own projection. The error has
            # one row per output position for an LM head whose positions are the block's own;
            # otherwise (a pooled classifier error, or encoder blocks of an encoder-decoder, whose
            # positions are the source's) one row per sequence, broadcast over the block's positions.
            # The stack's embedding output is a feedback point too, so no gradient leaves a block.
            aligned = (classes == 0) & ~(encdec & (stack == "encoder"))
            err_rows = np.where(aligned, rows, 1)
            add(has, "dfa_projection", stack, L.DFA_PROJECTION, depth, True, False, DFA_SUB_RANK, rows, err_rows=err_rows)
            add(has, "dfa_projection", stack, L.EMBEDDING_DFA_PROJECTION, 1, False, False, EMBEDDING_DFA_RANK, rows,
                err_rows=err_rows)
            # TP, DTP, LRA: each block's d x d map that carries its target (error) to the unit below, M rows.
            add(has, "target_projection", stack, L.TARGET_PROJECTION, depth, True, False, TARGET_SUB_RANK, rows)
        head_rows = np.where(classes > 0, 1, cols["tgt_len"])  # tgt_len == seq_len outside encoder-decoder
        add(classes == 0, "lm_head", "", L.HEAD, 1, False, False, HEAD_RANK, head_rows, out=out_width,
            shared=cols["tied"])
        add(classes > 0, "classifier_head", "", L.HEAD, 1, False, False, HEAD_RANK, head_rows, out=out_width)
        add(everything, "error_projection", "", L.ERROR_PROJECTION, 1, False, False, ERROR_PROJECTION_RANK,
            cols["tgt_len"], cols["seq_len"], out=out_width)
        # LRA: the output error (head_rows rows of out) through the head's error weights
        add(everything, "head_feedback", "", L.HEAD_FEEDBACK, 1, False, False, HEAD_FEEDBACK_RANK, head_rows,
            out=out_width)
        # Multi-token prediction (DeepSeek-V3, section 2.2): mtp_depth modules of a decoder-only LM, "mtp.<k>.<layer>",
        # each over the sequence's rows: the model's table (shared), two norms, the projection, a block of the
        # decoder's variant, a norm and the model's head (shared)
        depth = cols["mtp_depth"]
        code = np.where(depth > 0, variant, -1)
        for number in np.unique(code[code >= 0]):
            arch_name, pre, parallel, moe, post, latent = variants[number]
            subs = L.block_sublayers(arch_name, "decoder", pre, parallel, moe, post, latent)
            layers = [*((name, kind, None) for name, kind in L.MTP_INPUT), *((sub.name, sub.kind, sub) for sub in subs),
                      *((name, kind, None) for name, kind in L.MTP_OUTPUT)]
            for position, (name, kind, sub) in enumerate(layers):
                add(code == number, kind, L.MTP, name, depth, True, bool(sub and sub.block_entry), position,
                    cols["tgt_len"], kv_entry=bool(sub and sub.kv_entry), out=out_width if kind == "lm_head" else 0,
                    shared={"embedding": 1, "lm_head": 2}.get(kind, 0))  # (the head's weight and bias both)
    else:  # pragma: no cover - guarded by the registry
        raise ValueError(f"unknown granularity {granularity!r}")

    # Group the rows by layer kind (stable), so each formula reads and writes one contiguous slice.
    kinds = list(dict.fromkeys(p["label"][0] for p in parts))
    grouped = sorted(parts, key=lambda p: kinds.index(p["label"][0]))
    keys = ("cfg", "count", "is_block", "block_entry", "kv_entry", "rank", "first", *TEMPLATE_COLUMNS)
    empty = {"is_block": bool, "block_entry": bool, "kv_entry": bool}  # no configuration in scope: no templates
    merged = {key: np.concatenate([p[key] for p in grouped]) if grouped else np.zeros(0, dtype=empty.get(key, np.int64))
              for key in keys}
    labels = tuple(p["label"] for p in grouped)
    merged["part"] = np.repeat(np.arange(len(grouped)), [len(p["cfg"]) for p in grouped])
    slices, start = {}, 0
    for kind in kinds:
        size = sum(len(p["cfg"]) for p in grouped if p["label"][0] == kind)
        slices[kind] = slice(start, start + size)
        start += size
    return Templates(configs=configs, config_columns=cols, kind_slices=slices, labels=labels, **merged)
