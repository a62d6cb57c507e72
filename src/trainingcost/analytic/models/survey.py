"""The ``survey`` baseline: the counts of the DSBA Lab's slides on A Survey of Transformers (Lin et al. 2021), in
multiplications, as totals per phase in one layer named ``model``.
"""

from __future__ import annotations

import numpy as np

from ..registry import declare, register
from ..templates import Shapes
from ._baseline import attention_weights, decoder_ffn_weights, decoder_keys, feedback_flops, ffn_weights, phases, score_widths

declare("survey", order=50, granularity="model", description="survey slides (DSBA, on Lin et al. 2021): 4 n d^2 + 2 n^2 d + 8 n d^2 multiplications")


@register("survey", "model")
def survey(s: Shapes):
    # The survey slides (DSBA Lab, on Lin et al. 2021), counted in multiplications (MACCs): self-attention 4 n d^2 + 2 n^2 d,
    # position-wise FFN 8 n d^2 at d_ff = 4 d, i.e. 2 n d d_ff. FLOPs are twice the MACCs.
    # Today's architectures (the options of config/model.py: GQA, head_dim, gated FFNs): Q and O d x a (a = heads x
    # head_dim), K and V d x kv, a gated FFN's third matrix.
    d, ff, N, M, a, kv = s.d, s.ff, s.src_len, s.tgt_len, s.a, s.kv
    ffn = ffn_weights(s)
    enc_maccs_w = s.enc_layers * (2 * N * d * a + 2 * N * d * kv + N * ffn)
    enc_maccs_s = s.enc_layers * (2 * N * N * a)
    dec_maccs_w = s.dec_layers * (M * attention_weights(s) + s.encdec * (2 * M * d * a + 2 * N * d * kv)) \
        + M * decoder_ffn_weights(s)
    # a sliding window (decoder-only): a windowed kernel's keys, on the windowed layers (decoder_keys)
    dec_maccs_s = M * decoder_keys(s, M) * score_widths(s) + s.dec_layers * s.encdec * 2 * M * N * a
    return phases(2 * (enc_maccs_w + dec_maccs_w), 2 * (enc_maccs_s + dec_maccs_s), feedback_flops(s))
