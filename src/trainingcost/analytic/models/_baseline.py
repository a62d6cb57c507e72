"""What the published whole-model baselines share: a forward cost split into phases.

Each baseline gives a forward cost per sequence; its own convention puts the
backward pass at twice the forward. We split that evenly between the input
gradient (``backward``) and the weight gradient (``weight_update``) so that the
phases line up with the paper's. Under the other rules the same multiples
apply (Table 2 generalised: PEPITA 2F + W, MEMPEPITA 3F + W, KP adds one more
weight-gradient product, WM adds forward and weight-gradient products of the
weight matrices per mirror step; TP and DTP F + B + W + a second F (the noisy forward) + three d x d products
per block row, LRA F + B + W + two; derived, see docs/cost_models.md). The baselines cannot see error projections or
what DFA leaves out; see docs/cost_models.md.

Shapes: N source tokens (``src_len``), M target tokens (``tgt_len``); outside
encoder-decoder both are the sequence length and only one stack exists.
"""

from __future__ import annotations

import numpy as np

from ..registry import cost, half


def decoder_keys(s, M) -> object:
    """The keys a decoder query attends to, summed over the decoder's layers, under a windowed kernel: min(w, M) per
    layer with a sliding window of w (Jiang et al. 2023), M without; with a window_period p (Gemma 2), every p-th
    layer is global (M keys)."""
    glob = np.where(s.window_period > 0, s.dec_layers // np.maximum(s.window_period, 1), 0)
    # (multi-token prediction's modules, mtp_depth blocks of the decoder's kind, no window: M keys each)
    return (s.dec_layers - glob) * np.where(s.w > 0, np.minimum(s.w, M), M) + glob * M + s.mtp_depth * M


def attention_weights(s) -> object:
    """The self-attention weights one token is multiplied by: Q and O d x a, K and V d x kv; under latent attention
    (DeepSeek-V2) its own: q (or q_a and q_b), kv_a, kv_b and o."""
    dq = s.dh + s.dr
    latent = np.where(s.rq > 0, s.d * s.rq + s.rq * s.h * dq, s.d * s.h * dq) + s.d * (s.rkv + s.dr) \
        + s.rkv * s.h * (s.dh + s.dv) + s.h * s.dv * s.d
    return np.where(s.rkv > 0, latent, 2 * s.d * s.a + 2 * s.d * s.kv)


def score_widths(s) -> object:
    """The widths of QK^T and PV together per key, twice the baseline's d_attn: 2 a, or under latent attention h (dq +
    dv) (queries and keys dq = head_dim + qk_rope_head_dim wide per head, values dv)."""
    return np.where(s.rkv > 0, s.h * (s.dh + s.dr + s.dv), 2 * s.a)


def ffn_weights(s) -> object:
    """The FFN weights one token is multiplied by: a dense FFN's (2 + gated) d d_ff; a mixture of experts' router
    (d E), its k experts' and its shared expert's with their gate (the baseline's convention applied to the weights
    a token uses, the experts' parameters not all counted; docs/cost_models.md)."""
    dense = (2 + s.gated) * s.d * s.ff
    return np.where(s.E > 0, s.k * dense + s.d * s.E + (s.sff > 0) * ((2 + s.gated) * s.d * s.sff + s.sg * s.d), dense)


def decoder_ffn_weights(s) -> object:
    """:func:`ffn_weights` summed over the decoder's blocks: a mixture of experts' first dense_blocks a dense FFN of
    dense_ff (or d_ff) each (DeepSeek's first_k_dense_replace); with multi-token prediction (DeepSeek-V3, section
    2.2) each module's weights too, a block's attention and FFN and its 2d x d projection (its head, like the
    model's, left out)."""
    dense = (2 + s.gated) * s.d * np.where(s.dense_ff > 0, s.dense_ff, s.ff)
    first = np.where(s.E > 0, s.dense_blocks, 0)
    mtp = s.mtp_depth * (attention_weights(s) + ffn_weights(s) + 2 * s.d * s.d)
    return (s.dec_layers - first) * ffn_weights(s) + first * dense + mtp


def feedback_flops(s) -> object:
    """TP, DTP and LRA (derived; no baseline defines them): one d x d product per row of every block, in the
    baseline's own convention of 2 FLOPs per weight a token is multiplied by: 2 d^2 (enc_layers N + dec_layers M).
    A baseline leaves the head out, and so LRA's product with the head's error weights."""
    return 2 * s.d * s.d * (s.enc_layers * s.src_len + s.dec_layers * s.tgt_len)


def phases(weights_flops, attention_flops, feedback=None) -> dict:
    """Quantities from a forward split into products with weights and attention scores; ``feedback``: the
    FLOPs of one product with every block's d x d feedback map (:func:`feedback_flops`)."""
    forward = weights_flops + attention_flops
    forward_maccs, weights_maccs = half(forward), half(weights_flops)
    derived = {} if feedback is None else {
        name: cost(half(feedback), feedback) for name in ("target_projection", "feedback_forward", "feedback_weight_grad")}
    return {**derived,
        "forward": cost(forward_maccs, forward),
        "backward": cost(forward_maccs, forward),
        "weight_grad": cost(forward_maccs, forward),
        "linear_forward": cost(weights_maccs, weights_flops),
        "linear_weight_grad": cost(weights_maccs, weights_flops),
    }
