"""Published whole-model baselines, as totals per phase in one layer named ``model``.

Each baseline gives a forward cost per sequence; its own convention puts the
backward pass at twice the forward. We split that evenly between the input
gradient (``backward``) and the weight gradient (``weight_update``) so that the
phases line up with the paper's. Under the other rules the same multiples
apply (Table 2 generalised: PEPITA 2F + W, MEMPEPITA 3F + W, KP adds one more
weight-gradient product, WM adds forward and weight-gradient products of the
weight matrices per mirror step). The baselines cannot see error projections or
what DFA leaves out; see docs/cost_models.md.

Shapes: N source tokens (``src_len``), M target tokens (``tgt_len``); outside
encoder-decoder both are the sequence length and only one stack exists.
"""

from __future__ import annotations

from .engine import Shapes, cost, register


def _phases(weights_flops, attention_flops):
    """Quantities from a forward split into products with weights and attention scores."""
    forward = weights_flops + attention_flops
    return {
        "forward": cost(forward // 2, forward),
        "backward": cost(forward // 2, forward),
        "weight_grad": cost(forward // 2, forward),
        "linear_forward": cost(weights_flops // 2, weights_flops),
        "linear_weight_grad": cost(weights_flops // 2, weights_flops),
    }


@register("kaplan", "model", granularity="model")
def kaplan(s: Shapes):
    # Kaplan et al. 2020, Table 1: C_forward = 2 N + 2 n_layer n_ctx d_attn per token, with N the
    # non-embedding parameters, 2 d_model n_layer (2 d_attn + d_ff); training C = 6 N per token plus the
    # attention term. d_attn = d_model. A cross-attention adds its 4 d^2 weights and a context of N.
    d, ff, N, M = s.d, s.ff, s.src_len, s.tgt_len
    enc_params = s.enc_layers * (4 * d * d + 2 * d * ff)
    dec_params = s.dec_layers * (4 * d * d + 2 * d * ff + s.encdec * 4 * d * d)
    weights = 2 * N * enc_params + 2 * M * dec_params
    attention = 2 * N * s.enc_layers * N * d + 2 * M * s.dec_layers * (M + s.encdec * N) * d
    return _phases(weights, attention)


@register("textbook", "model", granularity="model")
def textbook(s: Shapes):
    # Seed 004, section 10.5.1, eqs. 10.82-10.90: per layer, Q, K, V and output projections
    # 4 x 2 B n d^2, scores and weighted sum 2 x 2 B n^2 d, FFN 2 x 2 B n d d_ff; that is
    # 24 B n d^2 + 4 B n^2 d at d_ff = 4 d. A cross-attention has Q and O on M rows, K and V on N.
    d, ff, N, M = s.d, s.ff, s.src_len, s.tgt_len
    enc_weights = s.enc_layers * (8 * N * d * d + 4 * N * d * ff)
    enc_scores = s.enc_layers * (4 * N * N * d)
    dec_weights = s.dec_layers * (8 * M * d * d + 4 * M * d * ff + s.encdec * (4 * M * d * d + 4 * N * d * d))
    dec_scores = s.dec_layers * (4 * M * M * d + s.encdec * 4 * M * N * d)
    return _phases(enc_weights + dec_weights, enc_scores + dec_scores)


@register("survey", "model", granularity="model")
def survey(s: Shapes):
    # Seed 002 (survey slides), counted in multiplications (MACCs): self-attention 4 n d^2 + 2 n^2 d,
    # position-wise FFN 8 n d^2 at d_ff = 4 d, i.e. 2 n d d_ff. FLOPs are twice the MACCs.
    d, ff, N, M = s.d, s.ff, s.src_len, s.tgt_len
    enc_maccs_w = s.enc_layers * (4 * N * d * d + 2 * N * d * ff)
    enc_maccs_s = s.enc_layers * (2 * N * N * d)
    dec_maccs_w = s.dec_layers * (4 * M * d * d + 2 * M * d * ff + s.encdec * (2 * M * d * d + 2 * N * d * d))
    dec_maccs_s = s.dec_layers * (2 * M * M * d + s.encdec * 2 * M * N * d)
    return _phases(2 * (enc_maccs_w + dec_maccs_w), 2 * (enc_maccs_s + dec_maccs_s))
