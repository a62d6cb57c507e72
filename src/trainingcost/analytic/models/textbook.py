"""The ``textbook`` baseline: seed 004, section 10.5.1, as totals per phase in one layer named ``model``."""

from __future__ import annotations

from ..registry import declare, register
from ..templates import Shapes
from ._baseline import phases

declare("textbook", order=40, granularity="model", description="seed 004, eqs. 10.82-10.90: 24 B n d^2 + 4 B n^2 d per layer")


@register("textbook", "model")
def textbook(s: Shapes):
    # Seed 004, section 10.5.1, eqs. 10.82-10.90: per layer, Q, K, V and output projections
    # 4 x 2 B n d^2, scores and weighted sum 2 x 2 B n^2 d, FFN 2 x 2 B n d d_ff; that is
    # 24 B n d^2 + 4 B n^2 d at d_ff = 4 d. A cross-attention has Q and O on M rows, K and V on N.
    d, ff, N, M = s.d, s.ff, s.src_len, s.tgt_len
    enc_weights = s.enc_layers * (8 * N * d * d + 4 * N * d * ff)
    enc_scores = s.enc_layers * (4 * N * N * d)
    dec_weights = s.dec_layers * (8 * M * d * d + 4 * M * d * ff + s.encdec * (4 * M * d * d + 4 * N * d * d))
    dec_scores = s.dec_layers * (4 * M * M * d + s.encdec * 4 * M * N * d)
    return phases(enc_weights + dec_weights, enc_scores + dec_scores)
