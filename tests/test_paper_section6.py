"""Paper section 6: the one-block encoder-only example, against its printed closed forms."""

import pytest

from trainingcost.analytic import layer_table
from conftest import frame_of, phase_sum

POINTS = [
    dict(d=512, h=8, ff=2048, V=37000, n=512),
    dict(d=64, h=4, ff=256, V=256, n=32),
    dict(d=96, h=3, ff=200, V=1000, n=17),
    dict(d=768, h=12, ff=3072, V=30522, n=128),
]


def closed_forms(d, h, ff, V, n):
    """Section 6 as printed, with M = N = n (MACCs, one sequence)."""
    M = N = n
    forward = M * V * d + 2 * M * d**2 + 2 * M * N * d + 2 * N * d**2 + 0 + 2 * M * d * ff + 0 + M * d * V
    backward = (
        0
        + 2 * M * d * d
        + 2 * N * d * d
        + 4 * M * N * d
        + M * N * M * h
        + M * d * d
        + 2 * M * d * ff
        + M * d * d
        + d * M * V
    )
    weight_update = M * V * d + 2 * M * d**2 + 2 * N * d**2 + M * d + 2 * M * d * ff + M * d + M * V * d
    weight_update_bp = weight_update - M * V * d  # "the first term ... shall be discarded when considering BP"
    return {
        "forward": forward,
        "backward": backward,
        "weight_update": weight_update,
        "weight_update_bp": weight_update_bp,
        "bp": forward + backward + weight_update_bp,
        "pepita": 2 * forward + weight_update,
        "mempepita": 3 * forward + weight_update,
    }


def one_block(p, batch=1):
    entry = dict(arch="encoder", layers=1, d_model=p["d"], heads=p["h"], d_ff=p["ff"], vocab=p["V"], seq_len=p["n"], batch=batch)
    return layer_table(frame_of(m=entry), ["bp", "pepita", "mempepita"], ["paper"])


@pytest.mark.parametrize("p", POINTS, ids=lambda p: f"d{p['d']}-n{p['n']}")
def test_phase_sums_equal_section6(p):
    table = one_block(p)
    expected = closed_forms(**p)
    assert phase_sum(table, "forward", "bp") == expected["forward"]
    assert phase_sum(table, "backward", "bp") == expected["backward"]
    assert phase_sum(table, "weight_update", "bp") == expected["weight_update_bp"]
    assert phase_sum(table, "weight_update", "pepita") == expected["weight_update"]
    assert phase_sum(table, "weight_update", "mempepita") == expected["weight_update"]
    # Table 2: two and three forward passes; no backward; no error projection for encoder-only (section 6).
    assert phase_sum(table, "forward", "pepita") == 2 * expected["forward"]
    assert phase_sum(table, "forward", "mempepita") == 3 * expected["forward"]
    assert phase_sum(table, "error_projection", "pepita") == 0
    assert "backward" not in set(table[table.rule != "bp"].phase)


@pytest.mark.parametrize("p", POINTS, ids=lambda p: f"d{p['d']}-n{p['n']}")
@pytest.mark.parametrize("rule", ["bp", "pepita", "mempepita"])
def test_rule_totals_equal_section6(p, rule):
    table = one_block(p)
    total = int(table[table.rule == rule].maccs.sum())
    assert total == closed_forms(**p)[rule]


def test_totals_scale_with_batch():
    p = POINTS[1]
    assert int(one_block(p, batch=5).maccs.sum()) == 5 * int(one_block(p).maccs.sum())
