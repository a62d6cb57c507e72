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

import numpy as np

from ..registry import cost, declare, half, register
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
RELU, RELU_BACKWARD = 1, 1  # max(x, 0); the gradient masked by the output's sign
SILU = 5  # x sigmoid(x): negate, exp, add 1, divide, multiply
SILU_BACKWARD = 9  # sigmoid recomputed (4), g s (1 + x (1 - s)) (5)
GATE, GATE_BACKWARD = 1, 2  # act(x Wg) * (x Wu); its gradient to each factor
ROTARY = 3  # x cos + rotate_half(x) sin, per element of q and k (and the same backward)
LAYER_NORM = 8  # paper section 5.5.1
LAYER_NORM_BACKWARD = 8  # the fused input gradient (1/sigma)(g - mean(g) - x_hat mean(g x_hat)), g = gamma dy
LAYER_NORM_PARAMS = 3  # gamma and beta gradients (paper eqs. 41-42)
RMS_NORM = 4  # square, mean, scale by the reciprocal root, gamma
RMS_NORM_BACKWARD = 6  # (1/rms)(g - x_hat mean(g x_hat)), g = gamma dy
RMS_NORM_PARAMS = 2  # the gamma gradient: dy x_hat, summed over rows
SOFTCAP = 3  # c tanh(x / c): divide, tanh, multiply (Gemma 2's attention scores and logits)
SOFTCAP_BACKWARD = 4  # the gradient times c, (1 - t^2) (two), divided by c
LOSS = 5  # log-softmax of each logit in the loss
LOSS_BACKWARD = 1  # softmax - onehot


def _matmul(flops, elementwise=0, where=None):
    return cost(half(flops), flops, elementwise, where)


@register("executed", "embedding")
def embedding(s: Shapes):
    # A gather forward; the weight gradient is a scatter-add of the output gradient (BP) or
    # PEPITA's index-add of the modulation: d additions per token, no product. Gemma's scale by sqrt(d_model): one
    # product per element forward, and one on its gradient.
    scaled = s.es * SCALE * s.M * s.d
    return {
        "forward": _matmul(s.zero, scaled),
        "backward": _matmul(s.zero, scaled),
        "weight_grad": _matmul(s.zero, RESIDUAL * s.M * s.d),
        "forward_modulated": _matmul(s.zero, RESIDUAL * s.M * s.d + scaled),  # PEPITA adds the modulation
    }


@register("executed", "token_type_embedding")
def token_type_embedding(s: Shapes):
    # A gather added to the token embedding; its gradient a scatter-add (PEPITA: an index-add).
    added = _matmul(s.zero, RESIDUAL * s.M * s.d)
    return {"forward": added, "backward": _matmul(s.zero), "weight_grad": added, "forward_modulated": added}


@register("executed", "positional_encoding")
def positional_encoding(s: Shapes):
    added = _matmul(s.zero, RESIDUAL * s.M * s.d)
    return {"forward": added, "backward": _matmul(s.zero), "forward_modulated": added,
            # a learned table's gradient: a scatter-add of the output gradient (sinusoidal: no parameters)
            "weight_grad": _matmul(s.zero, RESIDUAL * s.M * s.d, where=s.learned > 0)}


@register("executed", "relative_position")
def relative_position(s: Shapes):
    # T5's bias: bucket indices (integer work) and a gather of h values per (query, key) pair, per forward; its
    # gradient a scatter-add of the scores' gradient summed over the batch. No product.
    gather = _matmul(s.zero, s.M * s.N * s.h)
    return {"forward": gather, "forward_modulated": gather, "backward": _matmul(s.zero), "weight_grad": gather}


def _attention(s: Shapes, turned: int, causal_half: bool = False):
    # a = heads x head_dim (queries, output), kv = kv_heads x head_dim (keys, values; grouped-query attention
    # expands them to every head before the fused kernel, which then runs as for a heads).
    M, N, d, h, a, kv = s.M, s.N, s.d, s.h, s.a, s.kv
    weights = 4 * M * d * a + 4 * N * d * kv  # q and o on M rows, k and v on N rows
    scores = M * N * h
    products = 4 * M * N * a  # QK^T and PV over all heads; the backward 2.5 times that
    if causal_half:  # the `causal` convention: kernels that skip masked blocks run half of them ...
        # ... or, with a sliding window of w (shorter than the sequence), the keys each query sees: w (w + 1) / 2 over
        # the first w queries, then w each (a windowed kernel: Beltagy et al. 2020, Jiang et al. 2023)
        # (Gemma 2's window_period: every p-th layer global, M (M + 1) / 2 keys; per block, the stack's mean, rounded
        # down where it is not whole)
        w = s.w
        glob = np.where(s.window_period > 0, s.dec_layers // np.maximum(s.window_period, 1), 0)
        keys = ((s.dec_layers - glob) * (w * (w + 1) // 2 + (M - w) * w) + glob * (M * (M + 1) // 2)) \
            // np.maximum(s.dec_layers, 1)
        scores = np.where(w > 0, h * keys, scores // 2)
        products = np.where(w > 0, 4 * keys * s.dh * h, products // 2)
    biases = s.bq * (M * a + 2 * N * kv) + s.ba * M * d
    rotary = turned * s.rotary * ROTARY * (M * a + N * kv)  # rotary and relative positions act on self-attention
    qk = (s.qk_norm > 0) * (M * a + N * kv)  # an RMSNorm on q and k (qk_norm: per head or per projection)
    # A relative position bias that needs its gradient takes torch off the fused kernels: the math path's four
    # batched products backward (8 M N a) instead of the fused backward's 10 M N a; the bias added to every score.
    biased = turned * s.relative
    # Soft-capped scores (Gemma 2's attention_softcap) cannot go through a fused kernel: attention is written out,
    # two batched products each way (8 M N a backward, as the math path), the cap and the mask on every score.
    capped = s.attention_softcap
    backward_products = np.where((biased > 0) | (capped > 0), products * 2, products * 5 // 2)
    forward = _matmul(weights + products, BIAS * biases + (SOFTMAX + SCALE + biased + capped * (SOFTCAP + RESIDUAL))
                      * scores + rotary + RMS_NORM * qk)
    expand_backward = 2 * N * (a - kv)  # the expanded keys' and values' gradients summed per group
    return {
        "forward": forward,
        "forward_modulated": forward,
        # Input gradients inside the layer: o's (2 M a d) and the fused attention backward.
        "backward": _matmul(2 * M * a * d + backward_products, (SDPA_BACKWARD + capped * SOFTCAP_BACKWARD) * scores
                            + rotary + expand_backward + RMS_NORM_BACKWARD * qk),
        # q's input gradient; k's and v's (absent under DFA where their input is detached).
        "backward_q": _matmul(2 * M * d * a),
        "backward_kv": _matmul(4 * N * d * kv, RESIDUAL * N * d),
        "weight_grad": _matmul(weights, BIAS * biases + RMS_NORM_PARAMS * qk),
        "linear_forward": _matmul(weights),
        "linear_weight_grad": _matmul(weights),
        "feedback_copy": _matmul(s.zero),
    }


def _self_attention(s: Shapes):
    return _attention(s, turned=1)  # rotary positions turn the queries and keys of self-attention ...


def _cross_attention(s: Shapes):
    return _attention(s, turned=0)  # ... not those of cross-attention (positions of two sequences)


# torch counts causal attention in full.
register("executed", "self_attention", "masked_self_attention")(_self_attention)
register("executed", "cross_attention")(_cross_attention)


def _latent_attention(s: Shapes, causal_half: bool = False):
    # Multi-head latent attention (DeepSeek-V2, V3; train/model.py's LatentAttention): queries d -> h dq (or through a
    # latent: d -> rq, an RMSNorm, rq -> h dq), keys and values through a latent (d -> rkv + dr, an RMSNorm on rkv,
    # rkv -> h (dh + dv)), each key's rotary part (dr) one for every head; attention on queries and keys of dq = dh +
    # dr per head and values of dv, 2 M N h (dq + dv) forward; o: h dv -> d. Backward, as torch 2.13 dispatches it on
    # the CPU: its flash kernel where dq = dv, 2 M N h (3 dq + 2 dv) (QK^T recomputed, dP, dV, dQ, dK); where they
    # differ (DeepSeek's 192 and 128) SDPA's math path, two batched products each way, 2 M N h (2 dq + 2 dv). (On CUDA
    # the memory-efficient kernel takes these shapes: 3 dq + 2 dv; docs/cost_models.md.)
    M, N, d, h, dh, dr, dv, rq, rkv = s.M, s.N, s.d, s.h, s.dh, s.dr, s.dv, s.rq, s.rkv
    dq = dh + dr
    low = rq > 0
    q_products = np.where(low, 2 * M * d * rq + 2 * M * rq * h * dq, 2 * M * d * h * dq)
    kv_products = 2 * N * d * (rkv + dr) + 2 * N * rkv * h * (dh + dv)
    o_products = 2 * M * h * dv * d
    weights = q_products + kv_products + o_products
    scores = M * N * h
    core = 2 * M * N * h * (dq + dv)
    core_backward = np.where(dq == dv, 2 * M * N * h * (3 * dq + 2 * dv), 2 * M * N * h * (2 * dq + 2 * dv))
    if causal_half:  # the `causal` convention: kernels that skip masked blocks run half of them
        scores, core, core_backward = scores // 2, core // 2, core_backward // 2
    rotary = ROTARY * (M * h * dr + N * dr)
    norms = M * rkv + low * M * rq  # the latents' RMSNorms
    forward = _matmul(weights + core, (SOFTMAX + SCALE) * scores + rotary + RMS_NORM * norms)
    return {
        "forward": forward,
        "forward_modulated": forward,
        # o's input gradient and the fused attention backward; the rotary part's gradient summed over the heads
        "backward": _matmul(o_products + core_backward, SDPA_BACKWARD * scores + rotary + N * dr * (h - 1)),
        "backward_q": _matmul(q_products, low * RMS_NORM_BACKWARD * M * rq),
        "backward_kv": _matmul(kv_products, RMS_NORM_BACKWARD * N * rkv + RESIDUAL * N * d),
        "weight_grad": _matmul(weights, RMS_NORM_PARAMS * norms),
        "linear_forward": _matmul(weights),
        "linear_weight_grad": _matmul(weights),
        "feedback_copy": _matmul(s.zero),
    }


register("executed", "latent_attention")(_latent_attention)


@register("executed", "ffn")
def ffn(s: Shapes):
    T, d, ff, gated = s.M, s.d, s.ff, s.gated
    products = (4 + 2 * gated) * T * d * ff  # two matrices, or three when gated, 2 T d ff each
    act = np.where(s.relu > 0, RELU, np.where(s.silu > 0, SILU, GELU))
    act_backward = np.where(s.relu > 0, RELU_BACKWARD, np.where(s.silu > 0, SILU_BACKWARD, GELU_BACKWARD))
    biases = s.bo * ((1 + gated) * T * ff + T * d)
    forward = _matmul(products, BIAS * biases + act * T * ff + gated * GATE * T * ff)
    return {
        "forward": forward,
        "forward_modulated": forward,
        "backward": _matmul(products, act_backward * T * ff + gated * (GATE_BACKWARD * T * ff + RESIDUAL * T * d)),
        "weight_grad": _matmul(products, BIAS * biases),
        "linear_forward": _matmul(products),
        "linear_weight_grad": _matmul(products),
        "feedback_copy": _matmul(s.zero),
    }


@register("executed", "mtp_projection")
def mtp_projection(s: Shapes):
    # Multi-token prediction's M_k (DeepSeek-V3, section 2.2; train/model.py's MultiTokenPrediction): [enorm(e);
    # hnorm(h)], 2d wide, to d, no bias: 2 M (2d) d each way; the concatenation is a copy, its gradient a split.
    product = 4 * s.M * s.d * s.d
    return {
        "forward": _matmul(product),
        "forward_modulated": _matmul(product),
        "backward": _matmul(product),
        "weight_grad": _matmul(product),
        "linear_forward": _matmul(product),
        "linear_weight_grad": _matmul(product),
        "feedback_copy": _matmul(s.zero),
    }


SIGMOID = 4  # negate, exp, add 1, divide (Qwen-MoE's shared-expert gate)
TOPK = 1  # one comparison per router probability to pick a token's k experts


@register("executed", "moe")
def moe(s: Shapes):
    # A mixture of experts (train/model.py's MixtureOfExperts; transformers' Mixtral and Qwen-MoE blocks): the router
    # (2 M d E), then each expert an FFN on the rows routed to it. torch counts each expert's products on its own rows;
    # for linear layers the sum over experts of rows_e x d x ff is (sum of rows_e) x d x ff = M k d ff whatever the
    # balance, so the expert products are exact for any routing, not only a balanced one. The dispatch (topk, the
    # gather of each expert's rows, index_add of its weighted output) does no counted work. The shared expert (sff
    # wide, every row) where sff > 0, and its gate (d x 1) unless added ungated (DeepSeek-MoE: shared_expert_gate false).
    T, d, ff, gated, E, k, sff = s.M, s.d, s.ff, s.gated, s.E, s.k, s.sff
    shared = sff > 0
    gate = shared * s.sg
    rows = T * k  # the routed rows, over all experts
    products = 2 * T * d * E + (4 + 2 * gated) * rows * d * ff + shared * (4 + 2 * gated) * T * d * sff + gate * 2 * T * d
    act = np.where(s.relu > 0, RELU, np.where(s.silu > 0, SILU, GELU))
    act_backward = np.where(s.relu > 0, RELU_BACKWARD, np.where(s.silu > 0, SILU_BACKWARD, GELU_BACKWARD))
    hidden = rows * ff + shared * T * sff  # the FFNs' hidden rows (routed and shared)
    biases = s.bo * ((1 + gated) * hidden + (rows + shared * T) * d)
    routing = (SOFTMAX + TOPK) * T * E + 2 * rows  # softmax and top-k over E; the top-k weights renormalised
    # weight and add each routed output; gate the shared one and add it (ungated: add it)
    combine = 2 * rows * d + gate * (SIGMOID * T + T * d) + shared * T * d
    forward = _matmul(products, BIAS * biases + act * hidden + gated * GATE * hidden + routing + combine)
    return {
        "forward": forward,
        "forward_modulated": forward,
        "backward": _matmul(products, act_backward * hidden + gated * (GATE_BACKWARD * hidden + RESIDUAL * (rows + shared * T) * d)
                            + 2 * rows * d + SOFTMAX * T * E + gate * (SIGMOID * T + 2 * T * d)),
        "weight_grad": _matmul(products, BIAS * biases),
        "linear_forward": _matmul(products),
        "linear_weight_grad": _matmul(products),
        "feedback_copy": _matmul(s.zero),
    }


def _norm_quantities(s: Shapes, residual: int):
    T, d, rms = s.M, s.d, s.rms
    gain_only = (rms == 0) & (s.g == 1)  # a LayerNorm with a gain and no bias (layernorm_nobias): no bias added
    norm = np.where(rms > 0, RMS_NORM, LAYER_NORM - gain_only)
    norm_backward = np.where(rms > 0, RMS_NORM_BACKWARD, LAYER_NORM_BACKWARD)
    # the gamma gradient (dy x_hat summed over rows) as RMSNorm's; beta's too for LayerNorm; none non-parametric
    params = np.where((rms > 0) | gain_only, RMS_NORM_PARAMS, np.where(s.g > 0, LAYER_NORM_PARAMS, 0))
    forward = _matmul(s.zero, (residual * RESIDUAL + norm) * T * d)
    quantities = {
        "forward": forward,
        "forward_modulated": forward,
        "backward": _matmul(s.zero, norm_backward * T * d),
        "weight_grad": _matmul(s.zero, params * T * d),
    }
    if residual:
        quantities["backward_skip"] = _matmul(s.zero, RESIDUAL * T * d)
    return quantities


@register("executed", "add_norm")
def add_norm(s: Shapes):
    return _norm_quantities(s, 1)


@register("executed", "norm")
def norm(s: Shapes):
    return _norm_quantities(s, 0)


def _head(s: Shapes):
    rows, d, out = s.M, s.d, s.out  # rows: every position, or one pooled row per sequence
    product = 2 * rows * d * out
    pooling = (s.classes > 0) * s.src_len * d  # a classifier's mean over positions (and its backward)
    capped = s.logit_softcap * SOFTCAP * rows * out  # Gemma 2's c tanh(logits / c), each way
    return {
        "forward": _matmul(product, (s.bh * BIAS + LOSS) * rows * out + pooling + capped),
        # PEPITA's modulated pass only pools the head's input; the modulated logits are never computed.
        "forward_modulated": _matmul(s.zero, pooling),
        "backward": _matmul(product, LOSS_BACKWARD * rows * out + pooling + s.logit_softcap * SOFTCAP_BACKWARD * rows * out),
        "weight_grad": _matmul(product, s.bh * BIAS * rows * out),
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



@register("executed", "target_projection")
def target_projection(s: Shapes):
    # A block's d x d feedback map on its M rows (rules/{tp,dtp,lra}, rules/_targets/):
    # - target_projection: the error (target) carried to the unit below, e V^T (DTP), (h - e) V^T + c (TP) or
    #   beta e E (LRA), one product 2 M d d; the subtraction or scaling around it M d;
    # - feedback_forward: TP's and DTP's inverse on the noisy block output, y V^T + c, minus the noisy input;
    # - feedback_weight_grad: the inverse's gradient r^T y (and c's, a row sum), or LRA's e^T h for E.
    product = 2 * s.M * s.d * s.d
    return {
        "target_projection": _matmul(product, RESIDUAL * s.M * s.d),
        "feedback_forward": _matmul(product, (BIAS + RESIDUAL) * s.M * s.d),
        "feedback_weight_grad": _matmul(product, BIAS * s.M * s.d),
    }


@register("executed", "head_feedback")
def head_feedback(s: Shapes):
    # LRA: the output error (M rows of out: every position, or one pooled row) through E_head, 2 M out d, times
    # beta; E_head's update copies W_head's gradient times gamma (no product).
    return {
        "head_projection": _matmul(2 * s.M * s.out * s.d, s.M * s.d),
        "head_feedback_copy": _matmul(s.zero, s.out * s.d),
    }
