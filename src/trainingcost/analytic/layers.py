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


from .spec import LayerKind


def _kinds(*kinds: LayerKind) -> dict[str, LayerKind]:
    table: dict[str, LayerKind] = {}
    for kind in kinds:
        if kind.name in table:
            raise ValueError(f"layer kind {kind.name!r} is declared twice")
        table[kind.name] = kind
    return table


def _attention(name: str, description: str) -> LayerKind:
    return LayerKind(
        name, "attention", description,
        params=lambda s: 4 * s.d * s.d + 4 * s.d,
        weights=lambda s: 4 * s.d * s.d,
        saved=lambda s: 3 * s.M * s.d + 2 * s.N * s.d + s.M * s.h,
        working=lambda s: 4 * s.M * s.d + 2 * s.N * s.d,
        kept=lambda s: 2 * s.M * s.d + 2 * s.N * s.d,
        param_tensors=8,
    )


def _head(name: str, description: str) -> LayerKind:
    return LayerKind(
        name, "head", description,
        params=lambda s: s.d * s.out + s.out,
        weights=lambda s: s.d * s.out,
        saved=lambda s: s.M * s.d + s.M * s.out,
        working=lambda s: s.M * s.d + s.M * s.out,
        param_tensors=2,
    )


KINDS: dict[str, LayerKind] = _kinds(
    LayerKind(
        "embedding", "embedding", "token embedding, a gather (V x d table)",
        params=lambda s: s.V * s.d,
        working=lambda s: s.M * s.d,
        kept=lambda s: s.M * s.d,
        param_tensors=1,
    ),
    LayerKind(
        "positional_encoding", "positions", "sinusoidal positions, added to the embedding",
        working=lambda s: 2 * s.M * s.d,
    ),
    _attention("self_attention", "multi-head self-attention: q, k, v, o projections around fused attention"),
    _attention("masked_self_attention", "causal multi-head self-attention"),
    _attention("cross_attention", "multi-head attention of decoder rows (M) over encoder rows (N)"),
    LayerKind(
        "ffn", "ffn", "position-wise feed-forward: d -> d_ff, GELU, d_ff -> d",
        params=lambda s: 2 * s.d * s.ff + s.ff + s.d,
        weights=lambda s: 2 * s.d * s.ff,
        saved=lambda s: s.M * s.d + 2 * s.M * s.ff,
        working=lambda s: 2 * s.M * s.d + 2 * s.M * s.ff,
        kept=lambda s: s.M * s.ff + s.M * s.d,
        param_tensors=4,
    ),
    LayerKind(
        "add_norm", "norm", "post-LN residual: LayerNorm(x + sublayer(x))",
        params=lambda s: 2 * s.d,
        saved=lambda s: s.M * s.d + 2 * s.M,
        working=lambda s: 3 * s.M * s.d,
        kept=lambda s: s.M * s.d,
        param_tensors=2,
    ),
    _head("lm_head", "linear layer over the vocabulary, softmax cross-entropy"),
    _head("classifier_head", "linear layer over C classes on one mean-pooled row per sequence"),
    LayerKind(
        "error_projection", "projection", "PEPITA's projection of the output error onto each stack's input",
        model_layer=False,
    ),
    LayerKind(
        "dfa_projection", "projection", "DFA's projection of the output error onto a block's output",
        model_layer=False,
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
    """One sublayer of a transformer block.

    ``block_entry`` is true when the sublayer's residual input is the block's
    input, so the gradient it sends to its input leaves the block (what direct
    feedback alignment does without).
    """

    name: str
    kind: str
    block_entry: bool


ENCODER_BLOCK = (
    Sublayer("self_attention", "self_attention", True),
    Sublayer("self_attention_norm", "add_norm", True),
    Sublayer("ffn", "ffn", False),
    Sublayer("ffn_norm", "add_norm", False),
)
DECODER_ONLY_BLOCK = (
    Sublayer("self_attention", "masked_self_attention", True),
    Sublayer("self_attention_norm", "add_norm", True),
    Sublayer("ffn", "ffn", False),
    Sublayer("ffn_norm", "add_norm", False),
)
ENC_DEC_DECODER_BLOCK = (
    Sublayer("self_attention", "masked_self_attention", True),
    Sublayer("self_attention_norm", "add_norm", True),
    Sublayer("cross_attention", "cross_attention", False),
    Sublayer("cross_attention_norm", "add_norm", False),
    Sublayer("ffn", "ffn", False),
    Sublayer("ffn_norm", "add_norm", False),
)
STACK_ENDS = ("embedding", "positional_encoding")  # each stack's first layers, by name = kind


def block_sublayers(arch: str, stack: str) -> tuple[Sublayer, ...]:
    """The sublayers of one block of ``stack`` ('encoder' or 'decoder') in ``arch``."""
    if stack == "encoder":
        return ENCODER_BLOCK
    if arch == "encoder-decoder":
        return ENC_DEC_DECODER_BLOCK
    return DECODER_ONLY_BLOCK


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


def head_kind(classes: int) -> str:
    return "classifier_head" if classes else "lm_head"


def layer_plan(cfg) -> list[tuple[str, str]]:
    """Every layer of one model (a :class:`~trainingcost.config.ModelConfig`), in forward order, as (name, kind).

    The rule-specific layers (PEPITA's error projection, DFA's projections) are not part of the model
    and are not listed here.
    """
    plan: list[tuple[str, str]] = []
    for stack in cfg.stacks:
        for end in STACK_ENDS:
            plan.append((end_layer_name(stack, end), end))
        for index in range(cfg.depth(stack)):
            for sub in block_sublayers(cfg.arch, stack):
                plan.append((block_layer_name(stack, index, sub.name), sub.kind))
    plan.append((HEAD, head_kind(cfg.classes)))
    return plan


def rule_layers(cfg) -> list[tuple[str, str]]:
    """The rules' extra layers of one model, as (name, kind): PEPITA's error projection and DFA's projections."""
    extra = [(ERROR_PROJECTION, "error_projection")]
    for stack in cfg.stacks:
        extra.append((end_layer_name(stack, EMBEDDING_DFA_PROJECTION), "dfa_projection"))
        for index in range(cfg.depth(stack)):
            extra.append((block_layer_name(stack, index, DFA_PROJECTION), "dfa_projection"))
    return extra
