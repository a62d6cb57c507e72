"""The ``kaplan`` baseline: Kaplan et al. 2020, Table 1, as totals per phase in one layer named ``model``."""

from __future__ import annotations

from ..registry import declare, register
from ..templates import Shapes
from ._baseline import phases

declare("kaplan", order=30, granularity="model", description="Kaplan et al. 2020, Table 1: 2N + 2 n_layer n_ctx d_attn per token")


@register("kaplan", "model")
def kaplan(s: Shapes):
    # Kaplan et al. 2020, Table 1: C_forward = 2 N + 2 n_layer n_ctx d_attn per token, with N the
    # non-embedding parameters, 2 d_model n_layer (2 d_attn + d_ff); training C = 6 N per token plus the
    # attention term. d_attn = d_model. A token pays 2 FLOPs per weight it is multiplied by: the
    # self-attention and FFN weights on every row of their stack; a cross-attention's Q and O
    # (2 d^2) on the M target rows, its K and V (2 d^2) on the N source rows; its context is N.
    d, ff, N, M = s.d, s.ff, s.src_len, s.tgt_len
    block = 4 * d * d + 2 * d * ff  # self-attention and FFN weights
    cross_half = s.encdec * 2 * d * d  # Q and O, or K and V, of a cross-attention
    weights = 2 * N * s.enc_layers * block + 2 * s.dec_layers * (M * (block + cross_half) + N * cross_half)
    attention = 2 * N * s.enc_layers * N * d + 2 * M * s.dec_layers * (M + s.encdec * N) * d
    return phases(weights, attention)
