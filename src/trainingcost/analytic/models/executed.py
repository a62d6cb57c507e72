"""The ``executed`` cost model: what our PyTorch implementation runs, counted as torch counts it.

Each formula gives, per sequence, the FLOPs of the matrix products that the
code in :mod:`trainingcost.train.model` and ``trainingcost/rules/*/step.py`` performs, in
``torch.utils.flop_counter``'s convention (the convention of
:class:`trainingcost.measure.flops.FlopMeter`):

- 2 FLOPs per multiply-accumulate, so MACCs are FLOPs / 2;
- ``mm``/``addmm``/``bmm`` and fused scaled-dot-product attention are counted;
  gathers, softmax, LayerNorm, GELU and other elementwise work are not;
- fused attention forward 4 M N d (QKᵀ and PV over all heads), whether causal
  or not; its backward 2.5 times that, 10 M N d, as torch's formula counts it.

The tests check these integers against the meter, cell by cell. The work the
FLOP count leaves out is given separately as ``elementwise`` FLOPs, with the
per-element constants below (documented in docs/cost_models.md); they are an
estimate, not a count.

Where the rules' code departs from a full pass, the rule's declaration says so
(``recipe_overrides["executed"]`` in ``rules/<name>/__init__.py``): PEPITA's modulated pass and MEMPEPITA's
recomputation stop before the head (``forward_modulated``); PEPITA's embedding
update is an index-add, not the paper's dense product; KP's feedback gradient
is a copy of the weight gradient.
"""

from __future__ import annotations

from ..registry import cost, declare, register
from ..templates import Shapes

declare("executed", order=20, description="the matrix products our PyTorch code runs, counted as torch counts them")

# Elementwise FLOPs per element (estimates; see docs/cost_models.md, "executed").
BIAS = 1  # a bias addition, or one term of a bias gradient's row sum
RESIDUAL = 1  # x + sublayer(x), or the positional-encoding addition
SOFTMAX = 5  # exp, max, sum, subtract, divide (the paper's convention, section 5.3.1)
SCALE = 1  # the 1/sqrt(d_k) scaling of each score
SDPA_BACKWARD = 10  # recomputing the softmax (6) and its gradient P (dP - rowsum(dP P)) (4), per score
GELU = 8  # paper section 5.4.1
GELU_BACKWARD = 13  # paper section 5.4.2
LAYER_NORM = 8  # paper section 5.5.1
LAYER_NORM_BACKWARD = 8  # the fused input gradient (1/sigma)(g - mean(g) - x_hat mean(g x_hat)), g = gamma dy
LAYER_NORM_PARAMS = 3  # gamma and beta gradients (paper eqs. 41-42)
LOSS = 5  # log-softmax of each logit in the loss
LOSS_BACKWARD = 1  # softmax - onehot


def _matmul(flops, elementwise=0):
    return cost(flops // 2, flops, elementwise)


@register("executed", "embedding")
def embedding(s: Shapes):
    # A gather forward; the weight gradient is a scatter-add of the output gradient (BP) or
    # PEPITA's index-add of the modulation: d additions per token, no product.
    return {
        "forward": _matmul(s.zero),
        "backward": _matmul(s.zero),
        "weight_grad": _matmul(s.zero, RESIDUAL * s.M * s.d),
        "forward_modulated": _matmul(s.zero, RESIDUAL * s.M * s.d),  # PEPITA adds the modulation
    }


@register("executed", "positional_encoding")
def positional_encoding(s: Shapes):
    added = _matmul(s.zero, RESIDUAL * s.M * s.d)
    return {"forward": added, "backward": _matmul(s.zero), "forward_modulated": added}


def _attention(s: Shapes):
    M, N, d, h = s.M, s.N, s.d, s.h
    weights = 4 * M * d * d + 4 * N * d * d  # q and o on M rows, k and v on N rows, 2 d^2 each
    scores = M * N * h
    forward = _matmul(weights + 4 * M * N * d, BIAS * (2 * M + 2 * N) * d + (SOFTMAX + SCALE) * scores)
    return {
        "forward": forward,
        "forward_modulated": forward,
        # Input gradients inside the layer: o's (2 M d^2) and the fused attention backward.
        "backward": _matmul(2 * M * d * d + 10 * M * N * d, SDPA_BACKWARD * scores),
        # q's input gradient; k's and v's (absent under DFA: their inputs are detached).
        "backward_q": _matmul(2 * M * d * d),
        "backward_kv": _matmul(4 * N * d * d, RESIDUAL * N * d),
        "weight_grad": _matmul(weights, BIAS * (2 * M + 2 * N) * d),
        "linear_forward": _matmul(weights),
        "linear_weight_grad": _matmul(weights),
        "feedback_copy": _matmul(s.zero),
    }


# torch counts causal attention in full.
register("executed", "self_attention", "masked_self_attention", "cross_attention")(_attention)


@register("executed", "ffn")
def ffn(s: Shapes):
    T, d, ff = s.M, s.d, s.ff
    products = 4 * T * d * ff  # two matrices, 2 T d ff each
    forward = _matmul(products, BIAS * (T * ff + T * d) + GELU * T * ff)
    return {
        "forward": forward,
        "forward_modulated": forward,
        "backward": _matmul(products, GELU_BACKWARD * T * ff),
        "weight_grad": _matmul(products, BIAS * (T * ff + T * d)),
        "linear_forward": _matmul(products),
        "linear_weight_grad": _matmul(products),
        "feedback_copy": _matmul(s.zero),
    }


@register("executed", "add_norm")
def add_norm(s: Shapes):
    T, d = s.M, s.d
    forward = _matmul(s.zero, (RESIDUAL + LAYER_NORM) * T * d)
    return {
        "forward": forward,
        "forward_modulated": forward,
        "backward": _matmul(s.zero, LAYER_NORM_BACKWARD * T * d),
        "backward_skip": _matmul(s.zero, RESIDUAL * T * d),
        "weight_grad": _matmul(s.zero, LAYER_NORM_PARAMS * T * d),
    }


def _head(s: Shapes):
    rows, d, out = s.M, s.d, s.out  # rows: every position, or one pooled row per sequence
    product = 2 * rows * d * out
    pooling = (s.classes > 0) * s.src_len * d  # a classifier's mean over positions (and its backward)
    return {
        "forward": _matmul(product, (BIAS + LOSS) * rows * out + pooling),
        # PEPITA's modulated pass only pools the head's input; the modulated logits are never computed.
        "forward_modulated": _matmul(s.zero, pooling),
        "backward": _matmul(product, LOSS_BACKWARD * rows * out + pooling),
        "weight_grad": _matmul(product, BIAS * rows * out),
        "linear_forward": _matmul(product),
        "linear_weight_grad": _matmul(product),
        "feedback_copy": _matmul(s.zero),
    }


register("executed", "lm_head", "classifier_head")(_head)


@register("executed", "error_projection")
def error_projection(s: Shapes):
    # PEPITA's e F, one per stack (rules/pepita/step.py). The error has M = tgt_len rows per sequence;
    # the stack that produces the output takes one row per position, 2 M out d. A classifier's
    # error is one row per sequence, 2 out d; the encoder of an encoder-decoder takes the mean
    # error over target positions (M out additions), 2 out d.
    d, out, M = s.d, s.out, s.M
    aligned_rows = (s.classes == 0) * M
    per_sequence = (s.classes > 0) + s.encdec
    return {"error_projection": _matmul(2 * out * d * (aligned_rows + per_sequence), s.encdec * M * out)}


@register("executed", "dfa_projection")
def dfa_projection(s: Shapes):
    # e B per feedback point (rules/dfa/step.py): err_rows rows of width d. A per-sequence error is
    # divided by the block's length and broadcast over its M positions (M d divisions).
    spread = (s.err_rows != s.M) * s.M * s.d
    return {"dfa_projection": _matmul(2 * s.err_rows * s.d * s.d, spread)}
