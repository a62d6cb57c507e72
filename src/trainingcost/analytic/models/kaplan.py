"""The ``kaplan`` baseline: Kaplan et al. 2020, Table 1, as totals per phase in one layer named ``model``."""

from __future__ import annotations

import numpy as np

from ..registry import declare, register
from ..templates import Shapes
from ._baseline import attention_weights, decoder_ffn_weights, decoder_keys, feedback_flops, ffn_weights, phases, score_widths

declare("kaplan", order=30, granularity="model", description="Kaplan et al. 2020, Table 1: 2N + 2 n_layer n_ctx d_attn per token")


@register("kaplan", "model")
def kaplan(s: Shapes):
    # Kaplan et al. 2020, Table 1: C_forward = 2 N + 2 n_layer n_ctx d_attn per token, with N the
    # non-embedding parameters, 2 d_model n_layer (2 d_attn + d_ff); training C = 6 N per token plus the
    # attention term. d_attn = d_model. A token pays 2 FLOPs per weight it is multiplied by: the
    # self-attention and FFN weights on every row of their stack; a cross-attention's Q and O
    # (2 d^2) on the M target rows, its K and V (2 d^2) on the N source rows; its context is N.
    # Today's architectures (the options of config/model.py: GQA, head_dim, gated FFNs): d_attn = heads x head_dim
    # (a); grouped-query K and V are kv = kv_heads x head_dim wide; a gated FFN has three d x d_ff matrices.
    d, ff, N, M, a, kv = s.d, s.ff, s.src_len, s.tgt_len, s.a, s.kv
    block = attention_weights(s) + ffn_weights(s)  # self-attention and FFN weights (latent attention: its own)
    cross_q, cross_kv = s.encdec * 2 * d * a, s.encdec * 2 * d * kv  # a cross-attention's Q and O; its K and V
    weights = 2 * N * s.enc_layers * block + 2 * (M * (s.dec_layers * (attention_weights(s) + cross_q)
                                                       + decoder_ffn_weights(s)) + s.dec_layers * N * cross_kv)
    # A sliding window (decoder-only) of w positions: a windowed kernel's context is min(M, w) (Jiang et al. 2023).
    # (Gemma 2's window_period: every p-th layer global, decoder_keys)
    # (latent attention: QK^T and PV per key h (dq + dv), score_widths)
    attention = 2 * N * s.enc_layers * N * a + M * (decoder_keys(s, M) * score_widths(s) + 2 * s.dec_layers * s.encdec * N * a)
    return phases(weights, attention, feedback_flops(s))
