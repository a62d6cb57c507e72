"""How the engine assembles layers and rules: stacks, depth, batch, names and the derived rules."""

import numpy as np
import pytest

from trainingcost.analytic import layer_table, phase_totals, rule_names
from trainingcost.analytic.layers import layer_plan
from trainingcost.config import canonical_model
from conftest import cell, costs, frame_of, phase_sum

ALL_MODELS = ("paper", "kaplan", "textbook", "survey")


def test_encoder_decoder_sums_its_parts():
    d, h, ff, V, N, M, n_enc, n_dec = 32, 4, 80, 60, 12, 5, 2, 3
    t = costs(
        dict(arch="encoder-decoder", enc_layers=n_enc, dec_layers=n_dec, d_model=d, heads=h, d_ff=ff, vocab=V, seq_len=N, tgt_len=M),
        rules=("bp", "pepita"),
    )
    kinds = t[(t.rule == "bp") & (t.phase == "forward")].layer_kind.value_counts()
    assert kinds["self_attention"] == n_enc
    assert kinds["masked_self_attention"] == n_dec
    assert kinds["cross_attention"] == n_dec
    assert kinds["add_norm"] == 2 * n_enc + 3 * n_dec
    # Forward MACCs by hand: embeddings, encoder blocks, decoder blocks (masked self + cross), head.
    attn = lambda q, k: 2 * q * d * d + 2 * q * k * d + 2 * k * d * d  # noqa: E731
    by_hand = (
        N * V * d + M * V * d
        + n_enc * (attn(N, N) + 2 * N * d * ff)
        + n_dec * (attn(M, M) + attn(M, N) + 2 * M * d * ff)
        + M * d * V
    )
    assert phase_sum(t, "forward", "bp") == by_hand
    assert phase_sum(t, "error_projection", "pepita") == 2 * N * M * V


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder-decoder"])
def test_costs_are_linear_in_batch(arch):
    entry = dict(arch=arch, layers=2, d_model=32, heads=4, d_ff=64, vocab=40, seq_len=9)
    one = costs(entry, rules=rule_names(), cost_models=ALL_MODELS)
    four = costs({**entry, "batch": 4}, rules=rule_names(), cost_models=ALL_MODELS)
    assert (four.maccs.to_numpy() == 4 * one.maccs.to_numpy()).all()
    assert (four.flops.to_numpy() == 4 * one.flops.to_numpy()).all()


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder-decoder"])
@pytest.mark.parametrize("rule", rule_names())
def test_n_layers_cost_n_blocks_plus_the_ends(arch, rule):
    def total(n):
        entry = dict(arch=arch, layers=n, d_model=24, heads=3, d_ff=40, vocab=30, seq_len=7, tgt_len=5) if arch == "encoder-decoder" else dict(arch=arch, layers=n, d_model=24, heads=3, d_ff=40, vocab=30, seq_len=7)
        t = costs(entry, rules=(rule,), cost_models=ALL_MODELS)
        return t.groupby("cost_model").flops.sum()

    t1, t2, t5 = total(1), total(2), total(5)
    block = t2 - t1
    assert (block > 0).all()
    assert (t5 == t1 + 4 * block).all()
    ends = t1 - block
    assert (ends >= 0).all()


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder-decoder"])
def test_layer_names_match_the_model_plan(arch):
    t = costs(dict(arch=arch, layers=3, d_model=16, heads=2, d_ff=32, vocab=11, seq_len=4))
    names = list(dict.fromkeys(t.layer))
    plan = [name for name, _ in layer_plan(canonical_model(dict(arch=arch, d_model=8, heads=2, d_ff=8, vocab=9, seq_len=4, **({'layers': 3})), ''))]
    assert names == plan
    kinds = dict(zip(t.layer, t.layer_kind))
    assert all(kinds[name] == kind for name, kind in layer_plan(canonical_model(dict(arch=arch, d_model=8, heads=2, d_ff=8, vocab=9, seq_len=4, **({'layers': 3})), '')))


def test_fa_costs_what_bp_costs_and_kp_wm_add_their_extras(tiny_encoder):
    t = costs(tiny_encoder, rules=("bp", "fa", "kp", "wm"), mirror_steps=2)
    bp = t[t.rule == "bp"].reset_index(drop=True)
    fa = t[t.rule == "fa"].reset_index(drop=True)
    assert (bp[["layer", "phase", "maccs", "flops"]] == fa[["layer", "phase", "maccs", "flops"]]).all().all()
    d, ff, V, T = 16, 32, 50, 8
    per_block = 4 * T * d * d + 2 * T * d * ff  # q, k, v, o and the two FFN matrices
    weight_products = 2 * per_block + T * d * V  # two blocks and the head
    assert phase_sum(t, "feedback_update", "kp") == weight_products
    assert phase_sum(t, "mirror", "wm") == 2 * (weight_products + weight_products)  # 2 steps x (forward + outer product)


def test_dfa_drops_gradients_that_leave_a_block():
    d, h, ff, V, N, M = 16, 2, 24, 20, 6, 4
    entry = dict(arch="encoder-decoder", enc_layers=1, dec_layers=1, d_model=d, heads=h, d_ff=ff, vocab=V, seq_len=N, tgt_len=M)
    t = costs(entry, rules=("bp", "dfa"))
    # Self-attention: both input gradients leave the block; cross-attention keeps its query gradient.
    enc_self = cell(t, "encoder.0.self_attention", "backward", "bp")[0] - cell(t, "encoder.0.self_attention", "backward", "dfa")[0]
    assert enc_self == N * d * d + 2 * N * d * d
    cross = cell(t, "decoder.0.cross_attention", "backward", "bp")[0] - cell(t, "decoder.0.cross_attention", "backward", "dfa")[0]
    assert cross == 2 * N * d * d
    # The norm after the entry sublayer loses its skip addition (FLOPs only); later norms keep it.
    assert cell(t, "encoder.0.self_attention_norm", "backward", "bp")[1] - cell(t, "encoder.0.self_attention_norm", "backward", "dfa")[1] == N * d
    assert cell(t, "encoder.0.ffn_norm", "backward", "bp") == cell(t, "encoder.0.ffn_norm", "backward", "dfa")
    # Each block receives the error through a d x d projection: per target row in the decoder,
    # one (broadcast) row per sequence in the encoder of an encoder-decoder.
    assert cell(t, "decoder.0.dfa_projection", "error_projection", "dfa") == (M * d * d, 2 * M * d * d)
    assert cell(t, "encoder.0.dfa_projection", "error_projection", "dfa") == (d * d, 2 * d * d)
    # Each stack's embedding output is a feedback point too.
    assert cell(t, "decoder.embedding.dfa_projection", "error_projection", "dfa") == (M * d * d, 2 * M * d * d)
    assert cell(t, "encoder.embedding.dfa_projection", "error_projection", "dfa") == (d * d, 2 * d * d)


def test_classifier_head_has_one_row_per_sequence():
    d, C, V, n = 16, 3, 40, 10
    t = costs(dict(arch="encoder", layers=1, d_model=d, heads=2, d_ff=32, vocab=V, seq_len=n, classes=C), rules=("bp", "pepita"))
    assert set(t[t.layer == "head"].layer_kind) == {"classifier_head"}
    assert cell(t, "head", "forward") == (d * C, 2 * d * C + 5 * C)
    assert cell(t, "error_projection", "error_projection", "pepita") == (n * C * V, 2 * n * C * V)


def test_phase_totals_match_the_long_table():
    frame = frame_of(
        a=dict(arch="encoder", layers=3, d_model=32, heads=4, d_ff=64, vocab=50, seq_len=16, batch=2),
        b=dict(arch="encoder-decoder", layers=2, d_model=16, heads=2, d_ff=48, vocab=30, seq_len=5, tgt_len=7),
        c=dict(arch="decoder", layers=1, d_model=16, heads=2, d_ff=48, vocab=30, seq_len=5, classes=4),
    )
    totals = phase_totals(frame, rule_names(), ALL_MODELS)
    table = layer_table(frame, rule_names(), ALL_MODELS)
    for (model, rule, phase), (maccs, flops) in totals.items():
        part = table[(table.cost_model == model) & (table.rule == rule) & (table.phase == phase)]
        by_config = part.groupby("config_id", sort=False)[["maccs", "flops"]].sum().reindex(frame.config_id, fill_value=0)
        assert np.array_equal(by_config.maccs.to_numpy(), maccs)
        assert np.array_equal(by_config.flops.to_numpy(), flops)


def test_overflow_is_refused():
    frame = frame_of(big=dict(arch="decoder", layers=96, d_model=12288, heads=96, d_ff=49152, vocab=50257, seq_len=65536, batch=4096))
    with pytest.raises(OverflowError, match="64-bit"):
        layer_table(frame, ["bp"], ["paper"])
