"""The layer vocabulary: every layer kind, declared once, and the structure of each arch.

Every table in trainingcost is keyed by a layer *instance* name such as
``encoder.3.self_attention`` and a layer *kind* such as ``self_attention``.
This module decides which layers a configuration has and what they are
called (the PyTorch model builds its modules from the same structure), and
declares each kind's parameters, activations, matrix products and kernels
(:class:`~.spec.LayerKind`). Cost formulas live in ``analytic/models/``, one
function per (cost model, kind). No torch.

Sources of the element counts: parameters and weights follow the modules of
``train/model.py``; ``saved`` is what autograd keeps for those modules (inputs
of products, Q, K, V, the fused attention's output and log-sum-exp, the
LayerNorm input and statistics, both FFN hidden tensors, the logits), as
documented in docs/cost_models.md (memory model).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .spec import LayerKind


def _kinds(*kinds: LayerKind) -> dict[str, LayerKind]:
    table: dict[str, LayerKind] = {}
    for kind in kinds:
        if kind.name in table:
            raise ValueError(f"layer kind {kind.name!r} is declared twice")
        table[kind.name] = kind
    return table


def _attention(name: str, description: str) -> LayerKind:
    # a = heads x head_dim (queries, attention output), kv = kv_heads x head_dim (keys, values). Grouped-query
    # attention expands k and v to every head before the fused kernel, which keeps the expanded copies. With qk_norm
    # an RMSNorm on q and on k: on each head (Qwen3, Gemma 3: s.qk_norm 1, two weights of dh, a statistic per head and
    # row) or on each whole projection (OLMo 2: 2, weights of a and kv, a statistic per row); each saves its input.
    return LayerKind(
        name, "attention", description,
        params=lambda s: 2 * s.d * s.a + 2 * s.d * s.kv + s.bq * (s.a + 2 * s.kv) + s.ba * s.d
        + (s.qk_norm == 1) * 2 * s.dh + (s.qk_norm == 2) * (s.a + s.kv),
        weights=lambda s: 2 * s.d * s.a + 2 * s.d * s.kv,
        saved=lambda s: s.M * s.d + 2 * s.M * s.a + 2 * s.N * s.a + s.M * s.h
        + (s.qk_norm > 0) * (s.M * s.a + s.N * s.kv) + (s.qk_norm == 1) * (s.M * s.h + s.N * s.kvh)
        + (s.qk_norm == 2) * (s.M + s.N),
        working=lambda s: 2 * s.M * s.d + 2 * s.M * s.a + 2 * s.N * s.a + (s.qk_norm > 0) * (s.M * s.a + s.N * s.kv),
        kept=lambda s: s.M * s.a + 2 * s.N * s.kv + s.M * s.d,
        param_tensors=lambda s: 4 + 3 * s.bq + s.ba + 2 * (s.qk_norm > 0),
        # train/model.py's Attention: q, k, v and o are one Linear each
        module_params=lambda s: np.maximum(np.maximum(s.d * s.a + s.bq * s.a, s.d * s.kv + s.bq * s.kv), s.a * s.d + s.ba * s.d),
    )


def _latent() -> LayerKind:
    # Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, section 2.1): dq = dh + dr per query and key head, dv
    # per value head; q through a latent of rq where rq > 0 (q_a, an RMSNorm, q_b), keys and values through kv_a (d ->
    # rkv + dr), an RMSNorm on rkv, kv_b (rkv -> h (dh + dv)); o (h dv -> d). Saved: x; q's latent, its statistic
    # and its normalised copy; kv_a's output (the norm's input is a view of it), its statistic, the normalised
    # latent; the queries and keys assembled with their rotary parts (h dq each); kv_b's output (the values are a view
    # of it); the attention output (o's input) and its log-sum-exp.
    low = lambda s: s.rq > 0  # noqa: E731
    q_params = lambda s: np.where(low(s), s.d * s.rq + s.rq * s.h * (s.dh + s.dr), s.d * s.h * (s.dh + s.dr))  # noqa: E731
    kv_params = lambda s: s.d * (s.rkv + s.dr) + s.rkv * s.h * (s.dh + s.dv)  # noqa: E731
    return LayerKind(
        "latent_attention", "attention",
        "multi-head latent attention (DeepSeek-V2, V3): keys and values from a low-rank latent (and queries, with "
        "q_lora_rank), a rotary part of each query head and one key part shared by the heads, fused attention",
        params=lambda s: q_params(s) + low(s) * s.rq + kv_params(s) + s.rkv + s.h * s.dv * s.d,
        weights=lambda s: q_params(s) + kv_params(s) + s.h * s.dv * s.d,
        saved=lambda s: s.M * s.d + low(s) * (2 * s.M * s.rq + s.M) + s.M * (s.rkv + s.dr) + s.M + s.M * s.rkv
        + 2 * s.M * s.h * (s.dh + s.dr) + s.M * s.h * (s.dh + s.dv) + s.M * s.h * s.dv + s.M * s.h,
        working=lambda s: 2 * s.M * s.d + low(s) * 2 * s.M * s.rq + s.M * (2 * s.rkv + s.dr)
        + 2 * s.M * s.h * (s.dh + s.dr) + s.M * s.h * (s.dh + s.dv) + s.M * s.h * s.dv,
        kept=lambda s: low(s) * s.M * s.rq + s.M * s.h * (s.dh + s.dr) + s.M * (s.rkv + s.dr)
        + s.M * s.h * (s.dh + s.dv) + s.M * s.d,
        param_tensors=lambda s: np.where(low(s), 3, 1) + 4,
        # train/model.py's LatentAttention: one Linear each (q or q_a and q_b, kv_a, kv_b, o)
        module_params=lambda s: np.maximum(np.maximum(np.where(low(s), np.maximum(s.d * s.rq, s.rq * s.h * (s.dh + s.dr)),
                                                               s.d * s.h * (s.dh + s.dr)),
                                                      np.maximum(s.d * (s.rkv + s.dr), s.rkv * s.h * (s.dh + s.dv))),
                                           s.h * s.dv * s.d),
    )


def _head(name: str, description: str) -> LayerKind:
    # A tied head multiplies by the input embedding's table: no weights of its own (its B, under FA, is its own);
    # shared 2: multi-token prediction's, the model's head's weight and bias both.
    return LayerKind(
        name, "head", description,
        params=lambda s: (s.shared == 0) * s.d * s.out + (s.shared < 2) * s.bh * s.out,
        weights=lambda s: s.d * s.out,
        saved=lambda s: s.M * s.d + s.M * s.out,
        working=lambda s: s.M * s.d + s.M * s.out,
        param_tensors=lambda s: (s.shared == 0) + (s.shared < 2) * s.bh,
    )


def _norm_kind(name: str, description: str, residual: bool) -> LayerKind:
    # LayerNorm has gamma and beta and saves its mean and rstd per row; RMSNorm gamma and rstd (s.g: 2 or 1, s.ns: 2
    # or 1); a non-parametric LayerNorm (OLMo) no parameters (s.g: 0), its mean and rstd.
    return LayerKind(
        name, "norm", description,
        params=lambda s: s.g * s.d,
        saved=lambda s: s.M * s.d + s.ns * s.M,
        working=lambda s: (3 if residual else 2) * s.M * s.d,
        kept=lambda s: s.M * s.d,
        param_tensors=lambda s: s.g,
    )


KINDS: dict[str, LayerKind] = _kinds(
    LayerKind(
        "embedding", "embedding", "token embedding, a gather (V x d table)",
        params=lambda s: (1 - s.shared) * s.V * s.d,
        working=lambda s: s.M * s.d,
        kept=lambda s: s.M * s.d,
        param_tensors=lambda s: 1 - s.shared,
    ),
    LayerKind(
        "token_type_embedding", "embedding", "token-type (segment) embedding, gathered and added (BERT)",
        params=lambda s: s.tv * s.d,
        working=lambda s: 2 * s.M * s.d,
        param_tensors=lambda s: 1 + s.zero,
    ),
    LayerKind(
        "positional_encoding", "positions", "positions added to the embedding: sinusoidal, or a learned table",
        params=lambda s: s.learned * s.pos_rows * s.d,
        working=lambda s: 2 * s.M * s.d,
        param_tensors=lambda s: s.learned,
    ),
    LayerKind(
        "relative_position", "positions",
        "T5's relative position bias: a (buckets x heads) table gathered into an M x N bias per head, added to the "
        "scores of every self-attention of the stack",
        params=lambda s: s.rb * s.h,
        working=lambda s: s.M * s.N * s.h,
        param_tensors=lambda s: 1 + s.zero,
    ),
    _attention("self_attention", "multi-head self-attention: q, k, v, o projections around fused attention"),
    _attention("masked_self_attention", "causal multi-head self-attention"),
    _attention("cross_attention", "multi-head attention of decoder rows (M) over encoder rows (N)"),
    _latent(),
    LayerKind(
        "ffn", "ffn", "position-wise feed-forward: d -> d_ff, activation, d_ff -> d; gated: act(x Wg) * (x Wu), then Wd",
        params=lambda s: (2 + s.gated) * s.d * s.ff + s.bo * ((1 + s.gated) * s.ff + s.d),
        weights=lambda s: (2 + s.gated) * s.d * s.ff,
        saved=lambda s: s.M * s.d + (2 + 2 * s.gated - s.relu) * s.M * s.ff,
        working=lambda s: 2 * s.M * s.d + (2 + 2 * s.gated) * s.M * s.ff,
        kept=lambda s: (1 + s.gated) * s.M * s.ff + s.M * s.d,
        param_tensors=lambda s: (2 + s.gated) * (1 + s.bo),
        module_params=lambda s: np.maximum(s.d * s.ff + s.bo * s.ff, s.ff * s.d + s.bo * s.d),  # up (gate), down: a Linear each
    ),
    LayerKind(
        "moe", "moe",
        "mixture of experts in place of the FFN: a router (d x E), softmax, the top-k experts of each token (each an "
        "FFN d_ff wide), their outputs weighted and summed; a shared expert (sff wide), gated by sigmoid(x w) "
        "(Qwen-MoE) or added as it is (DeepSeek-MoE, shared_expert_gate false). Parameters and weights count all E "
        "experts; rows, k of them per token (token-balanced: M k / E rows each)",
        params=lambda s: s.E * ((2 + s.gated) * s.d * s.ff + s.bo * ((1 + s.gated) * s.ff + s.d)) + s.d * s.E
        + (s.sff > 0) * ((2 + s.gated) * s.d * s.sff + s.bo * ((1 + s.gated) * s.sff + s.d) + s.sg * s.d),
        weights=lambda s: s.E * (2 + s.gated) * s.d * s.ff + s.d * s.E + (s.sff > 0) * ((2 + s.gated) * s.d * s.sff + s.sg * s.d),
        # the router's input and softmax; per routed row (M k) its gathered input, the FFN's hidden tensors, the
        # expert output and its weight; the shared expert's hidden tensors, and where gated its gate and output
        saved=lambda s: s.M * s.d + s.M * s.E + s.M * s.k * (2 * s.d + (2 + 2 * s.gated - s.relu) * s.ff + 1)
        + (s.sff > 0) * ((2 + 2 * s.gated - s.relu) * s.M * s.sff + s.sg * (s.M + s.M * s.d)),
        working=lambda s: 2 * s.M * s.d + s.M * s.E + s.M * s.k * (2 * s.d + (2 + 2 * s.gated) * s.ff)
        + (s.sff > 0) * ((2 + 2 * s.gated) * s.M * s.sff + s.M * s.d),
        kept=lambda s: s.M * s.d + s.M * s.E + (1 + s.gated) * s.M * s.k * s.ff + (s.sff > 0) * (1 + s.gated) * s.M * s.sff,
        param_tensors=lambda s: s.E * (2 + s.gated) * (1 + s.bo) + 1 + (s.sff > 0) * ((2 + s.gated) * (1 + s.bo) + s.sg),
        module_params=lambda s: np.maximum(np.maximum(s.d * s.ff + s.bo * s.ff, s.ff * s.d + s.bo * s.d),
                                           np.maximum(s.d * s.E, (s.sff > 0) * (s.d * s.sff + s.bo * np.maximum(s.sff, s.d)))),
    ),
    LayerKind(
        "mtp_projection", "linear",
        "multi-token prediction's projection (DeepSeek-V3, section 2.2): the module's normalised hidden state and "
        "next token's embedding, concatenated (2d), to d",
        params=lambda s: 2 * s.d * s.d,
        weights=lambda s: 2 * s.d * s.d,
        saved=lambda s: 2 * s.M * s.d,  # its input, the concatenation
        working=lambda s: 3 * s.M * s.d,
        kept=lambda s: s.M * s.d,
        param_tensors=lambda s: 1 + s.zero,
    ),
    _norm_kind("add_norm", "a residual and its norm: post-LN norm(x + f(x)), pre-LN x + f(norm(x)), or output-LN "
               "x + norm(f(x))", True),
    _norm_kind("norm", "a norm alone: a stack's final norm (pre-LN, output-LN), or the embedding's norm (BERT)", False),
    _head("lm_head", "linear layer over the vocabulary, softmax cross-entropy"),
    _head("classifier_head", "linear layer over C classes on one mean-pooled row per sequence"),
    LayerKind(
        "error_projection", "projection", "PEPITA's projection of the output error onto each stack's input",
        model_layer=False, places=("model",),
    ),
    LayerKind(
        "dfa_projection", "projection", "DFA's projection of the output error onto a block's output",
        model_layer=False, places=("embedding", "block"),
    ),
    LayerKind(
        "target_projection", "projection",
        "a block's d x d feedback map: TP's and DTP's affine inverse (h -> h V^T + c), or LRA's error weights E; "
        "it carries the block's target (error) to the unit below, and learns",
        model_layer=False, places=("block",),
    ),
    LayerKind(
        "head_feedback", "projection", "LRA's error weights at the head (the head's shape): the output error to the "
        "top unit",
        model_layer=False, places=("model",),
    ),
)
ATTENTION_KINDS = tuple(k for k, spec in KINDS.items() if spec.family == "attention")
HEAD_KINDS = tuple(k for k, spec in KINDS.items() if spec.family == "head")


def kind(name: str) -> LayerKind:
    return KINDS[name]


# ---------------------------------------------------------------------------
# Structure


@dataclass(frozen=True)
class Sublayer:
    """One sublayer of a transformer block, a layer of every table: a branch (attention, FFN) or a norm.

    ``block_entry`` is true when the sublayer's residual (or query) input is the block's input, so the
    gradient it sends to its input leaves the block (what direct feedback alignment does without);
    ``kv_entry`` when an attention's keys and values read the block's input or the encoder output.
    """

    name: str
    kind: str
    block_entry: bool
    kv_entry: bool = False
    role: str = "branch"  # "branch" or "norm"


@dataclass(frozen=True)
class Branch:
    """One residual branch of a block: the sublayer that computes it and the norm that goes with it.

    Post-LN: norm(x + f(x)); pre-LN: x + f(norm(x)); output-LN: x + norm(f(x)).
    """

    name: str  # the branch's sublayer: self_attention, cross_attention, ffn
    kind: str  # its layer kind
    norm: str  # the name of its norm's sublayer
    reads_memory: bool  # keys and values come from the encoder output (cross-attention)
    positional: bool  # the stack's positions act inside it: rotary turns its q and k, a relative bias adds to its scores
    post_norm: str = ""  # the name of a norm on its output, before the residual (post_norms: Gemma 2); "": none


@dataclass(frozen=True)
class BlockDescription:
    """The one description of a block of ``stack`` that the analytic engine's templates, the PyTorch model
    (``train/model.py``'s ``Block``) and the memory tape (``analytic/tape``) all read.

    ``branches`` run in order, each on the output of the one before; ``sublayers`` are the layers of the tables,
    in forward order (pre-LN: each norm before its branch; post-LN and ``output``-LN: after it, output-LN's on the
    branch's output alone, x + norm(f(x)), OLMo 2's). ``parallel``: the branches all read
    the block input and their outputs are added to it, x + attn(norm(x)) + ffn(norm(x)); branches that name the
    same norm share it (``parallel_block`` one_norm: one ``input_norm``).
    """

    arch: str
    stack: str
    pre: bool
    branches: tuple[Branch, ...]
    sublayers: tuple[Sublayer, ...]
    parallel: bool = False
    output: bool = False

    def sublayer(self, name: str) -> Sublayer:
        return next(sub for sub in self.sublayers if sub.name == name)


_ENCODER = (("self_attention", "self_attention"), ("ffn", "ffn"))
_DECODER_ONLY = (("self_attention", "masked_self_attention"), ("ffn", "ffn"))
_ENC_DEC_DECODER = (("self_attention", "masked_self_attention"), ("cross_attention", "cross_attention"), ("ffn", "ffn"))
EMBEDDING_NORM, FINAL_NORM = "embedding_norm", "final_norm"  # kind "norm"
SHARED_NORM = "input_norm"  # a parallel block's one norm (parallel_block one_norm), kind "add_norm"


@lru_cache(maxsize=None)
def describe_block(arch: str, stack: str, pre: bool = False, parallel: str = "none", moe: bool = False,
                   post_norms: bool = False, output: bool = False, latent: bool = False) -> BlockDescription:
    """The block of ``stack`` ('encoder' or 'decoder') in ``arch``, post-LN or ``pre``-LN, its branches in sequence
    or ``parallel`` (``ModelConfig.parallel_block``: one_norm, two_norms; pre-LN, no cross-attention); with ``moe``, a
    mixture of experts (kind ``moe``) in the FFN's place, under the FFN's name; with ``post_norms`` (pre-LN, in
    sequence), a norm (kind ``norm``, ``<branch>_post_norm``) on each branch's output before its residual (Gemma 2);
    with ``output`` (not ``pre``), each branch's own norm on its output, x + norm(f(x)), as post-LN orders them; with
    ``latent`` (a decoder), multi-head latent attention (kind ``latent_attention``) in the causal self-attention's place."""
    if stack == "encoder":
        pairs = _ENCODER
    elif arch == "encoder-decoder":
        pairs = _ENC_DEC_DECODER
    else:
        pairs = _DECODER_ONLY
    if moe:
        pairs = tuple((name, "moe" if kind == "ffn" else kind) for name, kind in pairs)
    if latent:
        pairs = tuple((name, "latent_attention" if kind == "masked_self_attention" else kind) for name, kind in pairs)
    branches, subs = [], []
    for name, kind in pairs:
        entry = not subs  # only the first branch reads the block input
        cross = kind == "cross_attention"
        attention = KINDS[kind].family == "attention"
        norm_name = SHARED_NORM if parallel == "one_norm" else f"{name}_norm"
        post = f"{name}_post_norm" if post_norms else ""
        branch = Branch(name, kind, norm_name, reads_memory=cross, positional=attention and not cross, post_norm=post)
        branches.append(branch)
        norm = Sublayer(branch.norm, "add_norm", entry or parallel != "none", role="norm")
        if parallel == "one_norm" and not entry:
            subs.append(Sublayer(name, kind, False, attention and cross))  # the norm is the first branch's
        elif pre:
            subs += [norm, Sublayer(name, kind, False, attention and cross)]
            if post:
                subs.append(Sublayer(post, "norm", False, role="norm"))
        else:
            subs += [Sublayer(name, kind, entry, attention and (entry or cross)), norm]
    return BlockDescription(arch, stack, pre, tuple(branches), tuple(subs), parallel != "none", output and not pre)


def block_sublayers(arch: str, stack: str, pre: bool = False, parallel: str = "none", moe: bool = False,
                    post_norms: bool = False, latent: bool = False) -> tuple[Sublayer, ...]:
    """The sublayers of one block of ``stack`` in ``arch``, in forward order (:func:`describe_block`; output-LN's
    are post-LN's)."""
    return describe_block(arch, stack, pre, parallel, moe, post_norms, False, latent).sublayers


def config_block(cfg, stack: str, index: int | None = None) -> BlockDescription:
    """The block ``index`` of ``stack`` of one model (a :class:`~trainingcost.config.ModelConfig`); a mixture of
    experts' first ``dense_blocks`` keep a dense FFN (None: the stack's mixture blocks)."""
    moe = cfg.moe if index is None else cfg.block_moe(index)
    return describe_block(cfg.arch, stack, cfg.pre_norm, cfg.parallel_block, moe, cfg.post_norms, cfg.output_norm,
                          cfg.latent)


def stack_ends(cfg) -> tuple[tuple[str, str], ...]:
    """The (name, kind) of the layers before a stack's first block that ``cfg`` has."""
    ends = [("embedding", "embedding")]
    if cfg.type_vocab:
        ends.append(("token_type_embedding", "token_type_embedding"))
    if cfg.added_positions:
        ends.append(("positional_encoding", "positional_encoding"))
    if cfg.embedding_norm:
        ends.append((EMBEDDING_NORM, "norm"))
    if cfg.positions == "relative":
        ends.append(("relative_position", "relative_position"))
    return tuple(ends)


def stacks(arch: str) -> tuple[str, ...]:
    """The stacks a model of ``arch`` has, input side first."""
    return {"encoder": ("encoder",), "decoder": ("decoder",), "encoder-decoder": ("encoder", "decoder")}[arch]


def block_layer_name(stack: str, index: int, sublayer: str) -> str:
    return f"{stack}.{index}.{sublayer}"


def end_layer_name(stack: str, layer: str) -> str:
    return f"{stack}.{layer}"


HEAD = "head"
ERROR_PROJECTION = "error_projection"  # PEPITA's projection of the output error onto the input
DFA_PROJECTION = "dfa_projection"  # DFA's per-block feedback: "<stack>.<i>.dfa_projection"
EMBEDDING_DFA_PROJECTION = "embedding.dfa_projection"  # DFA's feedback onto a stack's embedding output
TARGET_PROJECTION = "target_projection"  # TP's, DTP's inverse or LRA's error weights per block: "<stack>.<i>.target_projection"
HEAD_FEEDBACK = "head_feedback"  # LRA's error weights at the head


MTP = "mtp"  # multi-token prediction's modules: "mtp.<k>.<sublayer>", after the head
MTP_INPUT = (("embedding", "embedding"), ("embedding_norm", "norm"), ("hidden_norm", "norm"),
             ("projection", "mtp_projection"))  # module k's layers before its block (DeepSeek-V3's enorm, hnorm, eh_proj)
MTP_OUTPUT = ((FINAL_NORM, "norm"), (HEAD, "lm_head"))  # and after it (its shared head's norm, the shared head)


def mtp_block(cfg) -> BlockDescription:
    """The block of each multi-token prediction module: the decoder's own kind (a mixture where the decoder's last
    block has one)."""
    return describe_block(cfg.arch, "decoder", cfg.pre_norm, cfg.parallel_block, cfg.moe, cfg.post_norms,
                          cfg.output_norm, cfg.latent)


def mtp_layers(cfg) -> list[tuple[str, str]]:
    """Module k's layers (name within the module, kind), in forward order: its embedding (the model's table), two
    norms, the projection, its block's sublayers, a norm and the head (the model's)."""
    return [*MTP_INPUT, *((sub.name, sub.kind) for sub in mtp_block(cfg).sublayers), *MTP_OUTPUT]


def head_kind(classes: int) -> str:
    return "classifier_head" if classes else "lm_head"


def layer_plan(cfg) -> list[tuple[str, str]]:
    """Every layer of one model (a :class:`~trainingcost.config.ModelConfig`), in forward order, as (name, kind).

    The rule-specific layers (PEPITA's error projection, DFA's projections) are not part of the model
    and are not listed here.
    """
    plan: list[tuple[str, str]] = []
    for stack in cfg.stacks:
        for end, kind in stack_ends(cfg):
            plan.append((end_layer_name(stack, end), kind))
        for index in range(cfg.depth(stack)):
            for sub in config_block(cfg, stack, index).sublayers:
                plan.append((block_layer_name(stack, index, sub.name), sub.kind))
        if cfg.final_norm:
            plan.append((end_layer_name(stack, FINAL_NORM), "norm"))
    plan.append((HEAD, head_kind(cfg.classes)))
    for k in range(cfg.mtp_depth):
        plan += [(block_layer_name(MTP, k, name), kind) for name, kind in mtp_layers(cfg)]
    return plan


def rule_layers(cfg) -> list[tuple[str, str]]:
    """The rules' extra layers of one model, as (name, kind), where each kind's declaration places them
    (``LayerKind.places``): PEPITA's error projection, DFA's projections, the target projections of TP, DTP and
    LRA, and LRA's head feedback."""
    extra = [(name, name) for name, spec in KINDS.items() if "model" in spec.places]
    for stack in cfg.stacks:
        extra += [(end_layer_name(stack, f"embedding.{name}"), name) for name, spec in KINDS.items()
                  if "embedding" in spec.places]
        for index in range(cfg.depth(stack)):
            extra += [(block_layer_name(stack, index, name), name) for name, spec in KINDS.items()
                      if "block" in spec.places]
    return extra
