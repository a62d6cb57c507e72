"""Every boxed per-layer result of paper section 5, in MACCs and FLOPs, at two parameter points.

The expected values are the boxed expressions, written out here independently of the engine.
"""

import pytest

from conftest import cell, costs

POINTS = [
    dict(d=64, h=4, ff=256, V=300, src=24, tgt=10),
    dict(d=120, h=6, ff=330, V=1001, src=7, tgt=13),
]


def encdec(p):
    return dict(
        arch="encoder-decoder", enc_layers=1, dec_layers=1, d_model=p["d"], heads=p["h"], d_ff=p["ff"],
        vocab=p["V"], seq_len=p["src"], tgt_len=p["tgt"],
    )


@pytest.fixture(params=POINTS, ids=["point1", "point2"])
def point(request):
    p = request.param
    table = costs(encdec(p), rules=("bp", "pepita"))
    return p, table


def mha(M, N, d, h):
    return {
        "forward": (2 * M * d * d + 2 * M * N * d + 2 * N * d * d, 4 * M * d * d + 4 * M * N * d + 4 * N * d * d + 6 * M * N * h),
        "backward": (
            2 * M * d * d + 2 * N * d * d + 4 * M * N * d + M * N * M * h,
            4 * M * d * d + 4 * N * d * d + 8 * M * N * d + 2 * M * N * M * h + M * N * h,
        ),
        "weight_update": (2 * M * d * d + 2 * N * d * d, 4 * M * d * d + 4 * N * d * d),
    }


def test_embedding(point):
    p, t = point
    d, V = p["d"], p["V"]
    for layer, M in (("encoder.embedding", p["src"]), ("decoder.embedding", p["tgt"])):
        assert cell(t, layer, "forward") == (M * V * d, 2 * M * V * d)  # 5.1.1
        assert cell(t, layer, "weight_update") == (0, 0)  # 5.1.2: none under BP
        assert cell(t, layer, "weight_update", "pepita") == (M * V * d, 2 * M * V * d)  # 5.1.2
        assert cell(t, layer.replace("embedding", "positional_encoding"), "forward") == (0, 0)  # 5.2


@pytest.mark.parametrize(
    "layer,q,kv",
    [
        ("encoder.0.self_attention", "src", "src"),
        ("decoder.0.self_attention", "tgt", "tgt"),
        ("decoder.0.cross_attention", "tgt", "src"),
    ],
)
def test_multihead_attention(point, layer, q, kv):
    p, t = point
    expected = mha(p[q], p[kv], p["d"], p["h"])
    for phase, value in expected.items():
        assert cell(t, layer, phase) == value, phase


def test_ffn(point):
    p, t = point
    d, ff = p["d"], p["ff"]
    for layer, M in (("encoder.0.ffn", p["src"]), ("decoder.0.ffn", p["tgt"])):
        assert cell(t, layer, "forward") == (2 * M * d * ff, 4 * M * d * ff + 9 * M * ff + M * d)  # 5.4.1
        assert cell(t, layer, "backward") == (2 * M * ff * d, 4 * M * d * ff + 13 * M * ff)  # 5.4.2
        assert cell(t, layer, "weight_update") == (2 * M * ff * d, 4 * M * ff * d)  # 5.4.3


def test_add_and_norm(point):
    p, t = point
    d = p["d"]
    for layer, M in (("encoder.0.ffn_norm", p["src"]), ("decoder.0.cross_attention_norm", p["tgt"])):
        assert cell(t, layer, "forward") == (0, 9 * M * d)  # 5.5.1
        assert cell(t, layer, "backward") == (M * d * d, 11 * M * d * d + 2 * M * d)  # 5.5.2
        assert cell(t, layer, "weight_update") == (M * d, 3 * M * d)  # 5.5.2


def test_softmax_layer(point):
    p, t = point
    d, V, M = p["d"], p["V"], p["tgt"]
    assert cell(t, "head", "forward") == (M * d * V, 2 * M * d * V + 5 * M * V)  # 5.6.1
    assert cell(t, "head", "backward") == (M * V * d, 2 * M * V * d)  # 5.6.2
    assert cell(t, "head", "weight_update") == (d * M * V, 2 * d * M * V)  # 5.6.2


def test_error_projection(point):
    p, t = point
    N, M, V = p["src"], p["tgt"], p["V"]
    assert cell(t, "error_projection", "error_projection", "pepita") == (2 * N * M * V, 4 * N * M * V + 6 * N * M)  # eq. 48


def test_no_error_projection_for_decoder_only():
    t = costs(dict(arch="decoder", layers=1, d_model=32, heads=2, d_ff=64, vocab=77, seq_len=9), rules=("pepita",))
    assert cell(t, "error_projection", "error_projection", "pepita") == (0, 0)  # 5.7: same shape as the decoder input
