"""The ``textbook`` baseline: Deep Learning and Transformers: Theory, Mathematics, and Implementation (2026), section
10.5.1, as totals per phase in one layer named ``model``.
"""

from __future__ import annotations

import numpy as np

from ..registry import declare, register
from ..templates import Shapes
from ._baseline import attention_weights, decoder_ffn_weights, decoder_keys, feedback_flops, ffn_weights, phases, score_widths

declare("textbook", order=40, granularity="model", description="Deep Learning and Transformers (2026), eqs. 10.82-10.90: 24 B n d^2 + 4 B n^2 d per layer")


@register("textbook", "model")
def textbook(s: Shapes):
    # The textbook, section 10.5.1, eqs. 10.82-10.90: per layer, Q, K, V and output projections
    # 4 x 2 B n d^2, scores and weighted sum 2 x 2 B n^2 d, FFN 2 x 2 B n d d_ff; that is
    # 24 B n d^2 + 4 B n^2 d at d_ff = 4 d. A cross-attention has Q and O on M rows, K and V on N.
    # Today's architectures (the options of config/model.py: GQA, head_dim, gated FFNs): Q and O are d x a (a = heads
    # x head_dim), K and V d x kv (grouped-query), the scores and weighted sum a wide; a gated FFN has a third d x
    # d_ff matrix.
    d, ff, N, M, a, kv = s.d, s.ff, s.src_len, s.tgt_len, s.a, s.kv
    ffn = 2 * ffn_weights(s)
    enc_weights = s.enc_layers * (4 * N * d * a + 4 * N * d * kv + N * ffn)
    enc_scores = s.enc_layers * (4 * N * N * a)
    dec_weights = s.dec_layers * (2 * M * attention_weights(s) + s.encdec * (4 * M * d * a + 4 * N * d * kv)) \
        + 2 * M * decoder_ffn_weights(s)
    # a sliding window (decoder-only): a windowed kernel's keys, on the windowed layers (decoder_keys)
    dec_scores = 2 * M * decoder_keys(s, M) * score_widths(s) + s.dec_layers * s.encdec * 4 * M * N * a
    return phases(enc_weights + dec_weights, enc_scores + dec_scores, feedback_flops(s))
