"""The engine evaluates the formulas once, in float64, and takes the exact int64 values from those floats while every
configuration's costs stay below EXACT_FLOAT (2**50; float64 holds every integer below 2**53); a configuration at or
above it is evaluated again alone, in int64. Both paths must give the int64 evaluation's values exactly."""

from __future__ import annotations

import numpy as np

from trainingcost.analytic import cost_model_names, rule_names
from trainingcost.analytic.engine import evaluate, phase_costs, phase_totals
from trainingcost.config import canonical_model, configs_frame

SMALL = dict(arch="encoder-decoder", enc_layers=2, dec_layers=1, d_model=64, heads=4, d_ff=256, vocab=100, seq_len=32,
             tgt_len=16, batch=3)
LARGE = dict(arch="decoder", layers=96, d_model=12288, heads=96, d_ff=49152, vocab=50257, seq_len=2048, batch=8)


def test_float_and_int64_evaluations_agree_below_and_above_exact_floats():
    configs = configs_frame([("small", canonical_model(SMALL, "")), ("large", canonical_model(LARGE, "")),
                             ("small2", canonical_model(dict(SMALL, batch=5), ""))])
    totals = phase_totals(configs, rule_names(), cost_model_names())
    for model in cost_model_names():
        fast, exact = evaluate(model, configs), evaluate(model, configs, floats=False)
        assert fast.large is not None and list(fast.large[0]) == [1]  # the large configuration, alone in int64
        for name in exact.flops:
            assert np.array_equal(fast.flops[name], exact.flops[name]), (model, name)
            assert np.array_equal(fast.maccs[name], exact.maccs[name]), (model, name)
        for rule in rule_names():
            for phase, mask, maccs, flops, _ in phase_costs(exact, rule):
                expected = np.zeros(3, dtype=np.int64)
                np.add.at(expected, exact.templates.cfg, flops * exact.templates.count)
                assert np.array_equal(totals[(model, rule, phase)][1], expected), (model, rule, phase)
