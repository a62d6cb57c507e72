"""A group of configurations that share one structure: the tape runs once per group, its sizes are arrays.

The structure is a :class:`GroupKey`, a frozen dataclass of the option columns that change which ops run
(:func:`..templates.option_columns`); the sizes of each configuration (batch, widths, rows) are arrays over
the group.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ...config.model import TAPE_OPTIONS
from .. import layers as L


@dataclass(frozen=True)
class GroupKey:
    """What decides which ops a step runs: the arch, the depths, the head, and the architecture options."""

    arch: str
    enc_layers: int
    dec_layers: int
    classifier: bool
    qkv_bias: bool  # biases of q, k, v ...
    o_bias: bool  # ... of o ...
    out_bias: bool  # ... of the FFN's matrices ...
    head_bias: bool  # ... and of the head
    tied: bool  # one V x d table: every stack's embedding and the head
    grouped: bool  # fewer key/value heads than heads: K and V repeated to every head (a copy each) ...
    single_kv: bool  # ... but for one key/value head (a view)
    relu: bool  # the FFN's activation is ReLU (saves its output) instead of GELU (saves its input)
    gated: bool  # a gated FFN (SwiGLU, GeGLU): act(x W_gate) * (x W_up), then W_down
    positions: str  # "sinusoidal" (a buffer added), "learned" (a table gathered), "none" (rotary and relative: "none")
    types: bool  # BERT's token-type table
    embedding_norm: bool  # a norm after the embedding's tables (BERT)
    pre: bool  # pre-LN: x + branch(norm(x)), and a final norm per stack
    output: bool  # output-LN (OLMo 2): x + norm(branch(x)), post-LN's order, and a final norm per stack
    final: bool  # a final norm per stack (pre-LN, output-LN)
    rms: bool  # RMSNorm (a weight, no bias) instead of LayerNorm
    rotary: bool  # rotary positions: q and k of every self-attention turned before SDPA
    relative: bool  # T5's relative bias
    parallel: str = "none"  # parallel_block: none, one_norm, two_norms (layers.describe_block)
    partial_rotary: bool = False  # rotary turns only the first rotary_dim features of a head (a third slice)
    plain_norm: bool = False  # a LayerNorm without gain and bias (norm nonparametric: OLMo)
    norm_bias: bool = True  # a LayerNorm's bias (false: layernorm_nobias, a gain alone; Cohere)
    embedding_scale: bool = False  # the embedding's output times sqrt(d_model) (Gemma)
    shared_table: bool = False  # the stacks' embeddings share one table, the head its own (T5 v1.1)
    experts: bool = False  # a mixture of experts in the FFN's place (tape/moe.py) ...
    expert_count: int = 0  # ... of this many experts ...
    shared_expert: bool = False  # ... with Qwen-MoE's shared expert and its gate ...
    router_norm: bool = False  # ... its top-k weights renormalised to sum to 1 (Mixtral)
    qk_norm: int = 0  # an RMSNorm on q and k: 1 on each head (Qwen3, Gemma 3), 2 on each projection (OLMo 2)
    q_latent: bool = False  # latent attention: queries through a latent (q_a, an RMSNorm, q_b) ...
    latent_fused: bool = False  # ... query and value heads alike wide (SDPA's fused kernel; else its math path)
    # The declared options that change which ops run (config/model.py's option(tape=True)), as (name, column value):
    # read as key.<name> (and g.<name>), so a new option needs no field here.
    options: tuple = ()

    @property
    def blocks(self) -> int:
        return self.enc_layers + self.dec_layers

    def __getattr__(self, name: str):  # a declared option: key.<name>
        if name.startswith("_"):
            raise AttributeError(name)
        for option, value in object.__getattribute__(self, "options"):
            if option == name:
                return value
        if name in TAPE_OPTIONS:
            return 0
        raise AttributeError(name)


def group_keys(configs) -> list[GroupKey]:
    """The :class:`GroupKey` of every configuration of the frame ``configs``."""
    from ..templates import option_columns

    o = {name: np.asarray(values) for name, values in option_columns(configs).items()}
    heads = configs["heads"].to_numpy()
    columns = dict(
        arch=configs["arch"].to_numpy(), enc_layers=configs["enc_layers"].astype(int).to_numpy(),
        dec_layers=configs["dec_layers"].astype(int).to_numpy(), classifier=configs["classes"].astype(int).to_numpy() > 0,
        qkv_bias=o["qkv_bias"] > 0, o_bias=o["o_bias"] > 0, out_bias=o["out_bias"] > 0, head_bias=o["head_bias"] > 0, tied=o["tied"] > 0,
        grouped=o["kv_heads"] < heads, single_kv=(o["kv_heads"] == 1) & (heads > 1), relu=o["relu"] > 0,
        gated=o["gated"] > 0,
        positions=np.where(o["learned"] > 0, "learned", np.where(o["added_positions"] > 0, "sinusoidal", "none")),
        types=o["type_vocab"] > 0, embedding_norm=o["embedding_norm"] > 0, pre=o["pre"] > 0,
        output=o["output_norm"] > 0, final=o["final_norm"] > 0, rms=o["rms"] > 0,
        rotary=o["rotary"] > 0, relative=o["relative"] > 0, parallel=o["parallel_block"],
        partial_rotary=(o["rotary"] > 0) & (o["rotary_dim"] < o["head_dim"]), plain_norm=o["norm_vectors"] == 0,
        norm_bias=o["norm_vectors"] == 2,
        embedding_scale=o["embedding_scale"] > 0, shared_table=o["shared_embedding"] > 0, experts=o["experts"] > 0,
        expert_count=o["experts"], shared_expert=(o["experts"] > 0) & (o["shared_expert_ff"] > 0),
        router_norm=(o["experts"] > 0) & (o["router_norm"] > 0), qk_norm=o["qk_norm"],
        q_latent=(o["kv_lora_rank"] > 0) & (o["q_lora_rank"] > 0),
        latent_fused=(o["kv_lora_rank"] > 0) & (o["head_dim"] + o["qk_rope_head_dim"] == o["v_head"]),
    )
    columns["options"] = np.empty(len(heads), dtype=object)
    columns["options"][:] = [tuple((name, int(o[name][i])) for name in TAPE_OPTIONS) for i in range(len(heads))]
    names = [f.name for f in fields(GroupKey)]
    rows = zip(*(columns[name].tolist() for name in names))
    return [GroupKey(**dict(zip(names, row))) for row in rows]


def groups(configs) -> list[tuple[np.ndarray, GroupKey]]:
    """Row indices of ``configs`` per structure."""
    out: dict[GroupKey, list[int]] = {}
    for i, key in enumerate(group_keys(configs)):
        out.setdefault(key, []).append(i)
    return [(np.array(rows), key) for key, rows in out.items()]


@dataclass
class Group:
    """Configurations of one structure (:class:`GroupKey`, whose fields read as the group's own: ``g.pre``):
    the sizes are arrays over the group."""

    key: GroupKey
    B: np.ndarray
    d: np.ndarray
    ff: np.ndarray
    h: np.ndarray
    V: np.ndarray
    C: np.ndarray
    rows: dict[str, np.ndarray]  # stack -> positions per sequence
    z: int  # bytes per element of the model's dtype
    a: np.ndarray  # heads x head_dim: queries and attention output
    kv: np.ndarray  # kv_heads x head_dim: keys and values
    max_pos: np.ndarray  # rows of a learned position table (0: the stack's rows)
    types: np.ndarray | None = None  # rows of BERT's token-type table (None: no token types)
    relative: np.ndarray | None = None  # T5's relative bias: the table's buckets (None: no relative bias)
    head_dim: np.ndarray | None = None  # the width of one head ...
    rotary_dim: np.ndarray | None = None  # ... and the features of it that rotary positions turn
    k: np.ndarray | None = None  # a mixture of experts: the experts each token is routed to ...
    sff: np.ndarray | None = None  # ... the shared expert's width ...
    routing: object = None  # ... and the rows each expert gets (a tape.moe.Routing; None: token-balanced)
    dense_ff: np.ndarray | None = None  # a dense FFN's width: d_ff, or a mixture's dense first blocks' dense_ff
    rope: np.ndarray | None = None  # latent attention: the rotary part of each query head and of the key ...
    v_head: np.ndarray | None = None  # ... each value head's width ...
    q_rank: np.ndarray | None = None  # ... and the queries' latent (0: one q projection)

    @classmethod
    def of(cls, configs, rows: np.ndarray, key: GroupKey, dtype_bytes: int) -> "Group":
        """The group of ``configs``' rows ``rows``, all of structure ``key``, in a dtype of ``dtype_bytes``."""
        from ..templates import option_columns

        options = option_columns(configs)
        col = {c: configs[c].to_numpy(dtype=np.int64)[rows] for c in
               ("batch", "d_model", "d_ff", "heads", "vocab", "classes", "seq_len", "tgt_len")}
        return cls(key, col["batch"], col["d_model"], col["d_ff"], col["heads"], col["vocab"], col["classes"],
                   {"encoder": col["seq_len"], "decoder": col["tgt_len"]}, dtype_bytes, options["attn_width"][rows],
                   options["kv_width"][rows], options["max_positions"][rows],
                   options["type_vocab"][rows] if key.types else None,
                   options["relative_buckets"][rows] if key.relative else None, options["head_dim"][rows],
                   options["rotary_dim"][rows], options["experts_per_token"][rows], options["shared_expert_ff"][rows],
                   dense_ff=np.where(options["dense_ff"][rows] > 0, options["dense_ff"][rows], col["d_ff"]),
                   rope=options["qk_rope_head_dim"][rows], v_head=options["v_head"][rows],
                   q_rank=options["q_lora_rank"][rows])

    def __getattr__(self, name: str):  # the structure's fields: g.pre, g.gated, g.arch ...
        if name.startswith("_") or name == "key":
            raise AttributeError(name)
        return getattr(self.key, name)

    def block_moe(self, index: int | None) -> bool:
        """Whether block ``index`` has a mixture of experts (not one of a mixture's dense first blocks; None: a
        mixture block)."""
        return bool(self.experts) and (index is None or index >= self.dense_blocks)

    def ffn_width(self, index: int | None) -> np.ndarray:
        """The width of block ``index``'s dense FFN: a mixture's dense first blocks' dense_ff, else d_ff."""
        return self.dense_ff if self.experts and self.dense_ff is not None else self.ff

    @property
    def depth(self) -> dict[str, int]:
        """Blocks per stack."""
        return {stack: self.key.enc_layers if stack == "encoder" else self.key.dec_layers for stack in self.stacks}

    @property
    def positions(self) -> str:
        return self.key.positions

    @property
    def q_width(self) -> np.ndarray:
        return self.a

    @property
    def kv_width(self) -> np.ndarray:
        return self.kv

    @property
    def norm_parameters(self) -> list[np.ndarray]:
        """A norm's parameter tensors: LayerNorm's gamma and beta (gamma alone without its bias), RMSNorm's weight."""
        return [] if self.plain_norm else [self.d] if self.rms or not self.norm_bias else [self.d, self.d]

    def position_rows(self, stack: str) -> np.ndarray:
        """Rows of a stack's learned position table (``ModelConfig.position_rows``)."""
        return np.where(self.max_pos > 0, self.max_pos, self.rows[stack])

    @property
    def stacks(self) -> tuple[str, ...]:
        return L.stacks(self.arch)

    @property
    def out(self) -> np.ndarray:
        return np.where(self.classifier, self.C, self.V)

    @property
    def out_stack(self) -> str:
        return self.stacks[-1]

    def M(self, stack: str) -> np.ndarray:
        return self.B * self.rows[stack]

    @property
    def out_rows(self) -> np.ndarray:
        """Rows of logits (and of targets): one per sequence for a classifier, else one per output position."""
        return self.B if self.classifier else self.M(self.out_stack)

    def aligned(self, stack: str) -> bool:
        """Whether the output error has one row per position of ``stack`` (ModelConfig.error_aligned)."""
        return not self.classifier and stack == self.out_stack

    def linears(self) -> list[tuple[int, int]]:
        """(in, out) of every weight matrix, in the order of ``model.parameters()``; sizes are arrays."""
        out: list[tuple] = []
        for stack in self.stacks:
            for index in range(self.depth[stack]):
                for sub in L.block_sublayers(self.arch, stack, self.pre, self.parallel, self.block_moe(index),
                                             bool(self.post_norms), bool(self.kv_lora_rank)):
                    family = L.KINDS[sub.kind].family
                    if sub.kind == "latent_attention":
                        out += [shape for shape, _ in self.latent_tensors() if len(shape) == 2]
                    elif family == "attention":
                        out += [(self.d, self.q_width), (self.d, self.kv_width), (self.d, self.kv_width),
                                (self.q_width, self.d)]
                    elif family == "ffn":
                        ff = self.ffn_width(index)
                        out += [(self.d, ff)] * (2 if self.gated else 1) + [(ff, self.d)]
                    elif family == "moe":  # the router, the experts, the shared expert and its gate
                        out += self._moe_linears()
        return out + [(self.d, self.out)]

    def latent_tensors(self) -> list[tuple[tuple, str]]:
        """Latent attention's parameter tensors in registration order (train/model.py's LatentAttention): (in, out)
        of each Linear, (width,) of each RMSNorm's weight, with its name."""
        h, rope, rkv = self.h, self.rope, self.kv_lora_rank
        dq = self.head_dim + rope
        q = ([((self.d, self.q_rank), "q_a"), ((self.q_rank,), "q_norm"), ((self.q_rank, h * dq), "q_b")]
             if self.q_latent else [((self.d, h * dq), "q")])
        return q + [((self.d, rkv + rope), "kv_a"), ((rkv,), "kv_norm"),
                    ((rkv, h * (self.head_dim + self.v_head)), "kv_b"), ((h * self.v_head, self.d), "o")]

    def _moe_linears(self) -> list[tuple]:
        def ffn(width):
            return [(self.d, width)] * (2 if self.gated else 1) + [(width, self.d)]

        out = [(self.d, self.expert_count)] + ffn(self.ff) * self.expert_count
        return out + (ffn(self.sff) + [(self.d, 1)] * self.shared_expert_gate if self.shared_expert else [])

    def parameters(self, feedback_parameters: bool = False, experts: dict | None = None) -> list[np.ndarray]:
        """Elements of every parameter tensor the step gives a gradient, in the order of ``model.parameters()`` (KP: W,
        b, B per linear): every one, but a mixture's experts that no row reached (``moe.used_experts``); or, given
        ``experts`` (mixture layer -> a flag per expert, e.g. ``moe.held_experts``), those of the flagged experts."""
        if experts is None and self.experts:
            from .moe import used_experts

            experts = used_experts(self)
        return [size for size, owner in self.parameter_owners(feedback_parameters)
                if owner is None or experts[owner[0]][owner[1]]]

    def parameter_owners(self, feedback_parameters: bool = False) -> list[tuple[np.ndarray, tuple[str, int] | None]]:
        """(elements, owner) of every parameter tensor of the model, in the order of ``model.parameters()`` (KP: W, b,
        B per linear), every expert's included: the owner is (mixture layer, expert) for an expert's, else None.
        Kept per group (the rules' programs read it twice a step)."""
        kept = self.__dict__.setdefault("_owners", {})
        if feedback_parameters not in kept:
            kept[feedback_parameters] = self._parameter_owners(feedback_parameters)
        return kept[feedback_parameters]

    def _parameter_owners(self, feedback_parameters: bool) -> list[tuple[np.ndarray, tuple[str, int] | None]]:
        sizes: list[tuple[np.ndarray, tuple[str, int] | None]] = []
        owner: tuple[str, int] | None = None

        def add(*elements):
            sizes.extend((n, owner) for n in elements)

        def linear(n_in, n_out, bias):
            add(n_in * n_out, *([n_out] if bias else []), *([n_in * n_out] if feedback_parameters else []))

        def expert(width):  # a mixture's FeedForward
            for _ in range(2 if self.gated else 1):
                linear(self.d, width, self.out_bias)
            linear(width, self.d, self.out_bias)

        def block(stack, index, name, moe):  # one block's parameters (pre-LN: norm, branch)
            for sub in L.block_sublayers(self.arch, stack, self.pre, self.parallel, moe, bool(self.post_norms),
                                         bool(self.kv_lora_rank)):
                family = L.KINDS[sub.kind].family
                if sub.kind == "latent_attention":  # (its Linears have no bias)
                    for shape, _ in self.latent_tensors():
                        if len(shape) == 2:
                            linear(*shape, False)
                        else:
                            add(shape[0])
                elif family == "attention":
                    linear(self.d, self.q_width, self.qkv_bias)
                    linear(self.d, self.kv_width, self.qkv_bias)
                    linear(self.d, self.kv_width, self.qkv_bias)
                    linear(self.q_width, self.d, self.o_bias)
                elif family == "ffn":
                    ff = self.ffn_width(index)
                    for _ in range(2 if self.gated else 1):  # (gated: the gate's matrix, then the up one)
                        linear(self.d, ff, self.out_bias)
                    linear(ff, self.d, self.out_bias)
                elif family == "moe":  # the router, each expert, the shared expert and its gate
                    linear(self.d, self.expert_count, False)
                    layer = name.format(sub.name)
                    start = len(sizes)
                    expert(self.ff)  # the first expert's tensors, then the others' of the same sizes
                    one = [n for n, _ in sizes[start:]]
                    del sizes[start:]
                    for e in range(self.expert_count):
                        sizes.extend((n, (layer, e)) for n in one)
                    if self.shared_expert:
                        expert(self.sff)
                        if self.shared_expert_gate:
                            linear(self.d, 1, False)
                else:
                    add(*self.norm_parameters)

        for stack in self.stacks:
            if not ((self.tied or self.shared_table) and stack != self.stacks[0]):
                add(self.V * self.d)  # token embedding (a tied table once, with the first stack)
            if self.types is not None:
                add(self.types * self.d)
            if self.positions == "learned":
                add(self.position_rows(stack) * self.d)
            if self.embedding_norm:
                add(*self.norm_parameters)
            for index in range(self.depth[stack]):
                block(stack, index, L.block_layer_name(stack, index, "{}"), self.block_moe(index))
            if self.final:
                add(*self.norm_parameters)  # the stack's final norm
        if self.tied:  # the head's weight is the table: only its bias (and KP's B) are its own
            add(*([self.out] if self.head_bias else []), *([self.d * self.out] if feedback_parameters else []))
        else:
            linear(self.d, self.out, self.head_bias)
        for k in range(self.mtp_depth):  # multi-token prediction's modules (their table and head the model's):
            add(*self.norm_parameters, *self.norm_parameters)  # the embedding's and the hidden state's norms,
            linear(2 * self.d, self.d, False)  # the projection,
            block("decoder", None, f"{L.MTP}.{k}.{{}}", self.experts)  # a block,
            add(*self.norm_parameters)  # the head's norm
        return sizes


# ---------------------------------------------------------------------------
# The model's ops, with or without autograd