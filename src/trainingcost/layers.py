"""The layer vocabulary shared by the analytic engine and the PyTorch model.

Every table in trainingcost is keyed by a layer *instance* name such as
``encoder.3.self_attention`` and a layer *kind* such as ``self_attention``.
This module is the single place that decides which layers a configuration
has and what they are called; it knows nothing about costs or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

ARCHES = ("encoder", "decoder", "encoder-decoder")

# Layer kinds, in the order of the paper's section 5.
LAYER_KINDS = (
    "embedding",
    "positional_encoding",
    "self_attention",
    "masked_self_attention",
    "cross_attention",
    "ffn",
    "add_norm",
    "lm_head",
    "classifier_head",
    "error_projection",
    "dfa_projection",
)
ATTENTION_KINDS = ("self_attention", "masked_self_attention", "cross_attention")


@dataclass(frozen=True)
class Sublayer:
    """One sublayer of a transformer block.

    ``block_entry`` is true when the sublayer's residual input is the block's
    input, so the gradient it sends to its input leaves the block (this is
    what direct feedback alignment does without).
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


def layer_plan(arch: str, enc_layers: int, dec_layers: int, classes: int = 0) -> list[tuple[str, str]]:
    """Every parametrised or costed layer of one model, in forward order, as (name, kind).

    The rule-specific layers (the PEPITA error projection and the DFA per-block
    projections) are not part of the model and are not listed here.
    """
    plan: list[tuple[str, str]] = []
    depth = {"encoder": enc_layers, "decoder": dec_layers}
    for stack in stacks(arch):
        plan.append((end_layer_name(stack, "embedding"), "embedding"))
        plan.append((end_layer_name(stack, "positional_encoding"), "positional_encoding"))
        for index in range(depth[stack]):
            for sub in block_sublayers(arch, stack):
                plan.append((block_layer_name(stack, index, sub.name), sub.kind))
    plan.append((HEAD, head_kind(classes)))
    return plan
