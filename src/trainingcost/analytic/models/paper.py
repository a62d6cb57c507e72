"""The ``paper`` cost model: Pau & Aymone 2024, section 5, taken literally.

Each function returns, per sequence, the MACCs and FLOPs of one layer kind as
*quantities* (see :mod:`trainingcost.analytic.engine`); the engine multiplies
by the batch and composes quantities into each rule's phases (Table 2).

Notation as in the paper: M query (target) rows, N key/value (source) rows,
d = d_model, h heads, ff = d_ff, V = voc_size. For layers outside attention the
rows are the layer's own tokens, held in ``s.M``. Every departure from a
literal reading is listed in docs/cost_models.md.
"""

from __future__ import annotations

from ..registry import cost, declare, register
from ..templates import Shapes

declare("paper", order=10, description="Pau & Aymone 2024, section 5, taken literally", scope="default")


@register("paper", "embedding")
def embedding(s: Shapes):
    # 5.1.1: a dense product of the one-hot token matrix (M x V) with W_emb (V x d).
    fwd = cost(s.M * s.V * s.d, 2 * s.M * s.V * s.d)
    return {
        "forward": fwd,
        # 5.1.2: BP updates only the rows of the tokens seen: no cost.
        "backward": cost(s.zero, s.zero),
        "weight_grad": cost(s.zero, s.zero),
        # 5.1.2: PEPITA and MEMPEPITA update the embedding by a matrix product, as costly as the forward.
        "weight_grad_dense": fwd,
    }


@register("paper", "positional_encoding")
def positional_encoding(s: Shapes):
    # 5.2: an addition, taken as already included in the embedding layer.
    nothing = cost(s.zero, s.zero)
    return {"forward": nothing, "backward": nothing, "weight_grad": nothing}


def _attention(s: Shapes):
    M, N, d, h = s.M, s.N, s.d, s.h
    return {
        # 5.3.1, the boxed totals of eqs. 2-4: projections, softmax(QK^T/sqrt(d_k))V with
        # softmax at 5 FLOPs per element plus one scaling FLOP, and the output projection.
        "forward": cost(2 * M * d * d + 2 * M * N * d + 2 * N * d * d, 4 * M * d * d + 4 * M * N * d + 4 * N * d * d + 6 * M * N * h),
        # 5.3.2, the boxed backward total split by where each gradient goes:
        # eqs. 22 (dConcat), 24 (dV), 29 (dQK^T, with the explicit softmax Jacobian M*N*M*h as
        # printed), 30 (dQ) and 34 (dK) stay inside the layer ...
        "backward": cost(
            M * d * d + 4 * M * N * d + M * N * M * h,
            2 * M * d * d + 8 * M * N * d + 2 * M * N * M * h + M * N * h,
        ),
        # ... eqs. 31-32 reach the query input ...
        "backward_q": cost(M * d * d, 2 * M * d * d),
        # ... and eqs. 25-26 and 35-36 reach the key/value input.
        "backward_kv": cost(2 * N * d * d, 4 * N * d * d),
        # 5.3.2, boxed weight update: eqs. 23, 27, 33, 37.
        "weight_grad": cost(2 * M * d * d + 2 * N * d * d, 4 * M * d * d + 4 * N * d * d),
        # The weight matrices alone (for feedback-matrix updates and weight mirroring).
        "linear_forward": cost(2 * M * d * d + 2 * N * d * d, 4 * M * d * d + 4 * N * d * d),
        "linear_weight_grad": cost(2 * M * d * d + 2 * N * d * d, 4 * M * d * d + 4 * N * d * d),
    }


# The mask is not counted (5.3.1); a cross-attention has M target rows and N source rows (eq. 5).
register("paper", "self_attention", "masked_self_attention", "cross_attention")(_attention)


@register("paper", "ffn")
def ffn(s: Shapes):
    T, d, ff = s.M, s.d, s.ff
    return {
        # 5.4.1: two matrix products, GELU at 8 FLOPs and a bias on the hidden layer, a bias on the output.
        "forward": cost(2 * T * d * ff, 4 * T * d * ff + 9 * T * ff + T * d),
        # 5.4.2: two input gradients and the GELU derivative at 13 FLOPs.
        "backward": cost(2 * T * ff * d, 4 * T * d * ff + 13 * T * ff),
        # 5.4.3
        "weight_grad": cost(2 * T * ff * d, 4 * T * ff * d),
        "linear_forward": cost(2 * T * d * ff, 4 * T * d * ff),
        "linear_weight_grad": cost(2 * T * d * ff, 4 * T * d * ff),
    }


@register("paper", "add_norm")
def add_norm(s: Shapes):
    T, d = s.M, s.d
    return {
        # 5.5.1: 8 FLOPs per element for LayerNorm plus 1 for the residual addition.
        "forward": cost(s.zero, 9 * T * d),
        # 5.5.2, boxed backward total (M d^2 MACCs; 11 M d^2 + 2 M d FLOPs): eq. 43, the LayerNorm
        # Jacobian at 9 FLOPs per element of each d x d slice, eq. 44 ...
        "backward": cost(T * d * d, 11 * T * d * d + T * d),
        # ... and the addition of the skip-connection gradient, M d FLOPs.
        "backward_skip": cost(s.zero, T * d),
        # 5.5.2, boxed weight update: eqs. 41 (gamma) and 42 (beta).
        "weight_grad": cost(T * d, 3 * T * d),
    }


def _softmax_layer(s: Shapes):
    rows, d, out = s.M, s.d, s.out
    return {
        # 5.6.1: X W_S and a softmax at 5 FLOPs per element.
        "forward": cost(rows * d * out, 2 * rows * d * out + 5 * rows * out),
        # 5.6.2: target - s is free; eq. 46 ...
        "backward": cost(rows * out * d, 2 * rows * out * d),
        # ... and eq. 47.
        "weight_grad": cost(d * rows * out, 2 * d * rows * out),
        "linear_forward": cost(rows * d * out, 2 * rows * d * out),
        "linear_weight_grad": cost(d * rows * out, 2 * d * rows * out),
    }


# The classifier head is our extension: the same layer over C classes, on one pooled row per sequence.
register("paper", "lm_head", "classifier_head")(_softmax_layer)


@register("paper", "error_projection")
def error_projection(s: Shapes):
    # 5.7, eq. 48: an encoder-decoder projects the M x V output error onto the N source rows by
    # attention. A decoder needs no projection (the error has the decoder input's shape), nor does
    # an encoder-only LM (section 6). Our extension: a classification error (C per sequence) has no
    # input's shape, so it is projected densely onto each of the N one-hot input rows (N C V MACCs).
    M, N, out = s.M, s.N, s.out
    classifier = s.classes > 0
    maccs = s.encdec * (2 * N * M * out) + classifier * (N * out * s.V)
    flops = s.encdec * (4 * N * M * out + 6 * N * M) + classifier * (2 * N * out * s.V)
    return {"error_projection": cost(maccs, flops)}


@register("paper", "dfa_projection")
def dfa_projection(s: Shapes):
    # Derived for DFA (not in the paper): a fixed d x d matrix maps each row of the output
    # error, taken at d_model before the head, to the block's output (Launay et al. 2020).
    return {"dfa_projection": cost(s.err_rows * s.d * s.d, 2 * s.err_rows * s.d * s.d)}


@register("paper", "target_projection")
def target_projection(s: Shapes):
    # Derived for TP, DTP and LRA (not in the paper): a block's d x d feedback map on its M rows, priced as the
    # paper prices a linear layer (M d^2 MACCs, 2 M d^2 FLOPs) for each product: the target carried down, and
    # (TP, DTP) the inverse's forward on the noisy output and its gradient, (LRA) E's gradient.
    product = cost(s.M * s.d * s.d, 2 * s.M * s.d * s.d)
    return {"target_projection": product, "feedback_forward": product, "feedback_weight_grad": product}


@register("paper", "head_feedback")
def head_feedback(s: Shapes):
    # Derived for LRA: the output error (M rows of out) through the head's error weights, as a linear layer;
    # E_head's update is a copy of W_head's gradient.
    return {"head_projection": cost(s.M * s.out * s.d, 2 * s.M * s.out * s.d), "head_feedback_copy": cost(s.zero, s.zero)}
