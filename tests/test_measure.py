"""The FLOP meter: FlopCounterMode's count, split per analytic layer and phase."""

import pytest
import torch

from trainingcost.analytic.layers import rule_layers
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from trainingcost.measure.flops import UNATTRIBUTED
from trainingcost.train.registry import make_rule, rule_names

from torch_helpers import batch_of, cfg_of, count_step, model_of

aten = torch.ops.aten
CPU_SDPA = {  # FlopCounterMode has no CPU flash-attention formula in torch 2.13; the fused kernels' formulas apply
    aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[aten._scaled_dot_product_flash_attention].__wrapped__,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_registry[aten._scaled_dot_product_flash_attention_backward].__wrapped__,
}


def metered_step(rule, batch):
    return count_step(rule, batch)


@pytest.mark.parametrize("name", ["decoder", "classifier", "encoder-decoder"])
def test_meter_total_equals_flop_counter_mode_and_everything_is_attributed(name):
    cfg = cfg_of(name)
    batch = batch_of(cfg)
    for rule_name in rule_names():
        model = model_of(cfg, dtype=torch.float32)
        rule = make_rule(rule_name, model)
        counts = metered_step(rule, batch)
        with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as reference:
            rule.step(batch)
        assert sum(counts.values()) == reference.get_total_flops() > 0, rule_name
        assert not [key for key in counts if key[0] == UNATTRIBUTED], (rule_name, counts)
        layers = {layer for layer, _ in counts}
        assert layers <= {n for n, _ in model.layer_plan()} | {n for n, _ in rule_layers(model.cfg)}, rule_name
        assert {phase for _, phase in counts} <= set(rule.phases) | {"weight_update"}, rule_name


def test_linear_flops_by_hand():
    """One encoder block, BP: q, k, v, o and the FFN, forward, backward and weight gradients."""
    cfg = cfg_of("encoder", layers=1)
    b, n, d, ff = cfg.batch, cfg.seq_len, cfg.d_model, cfg.d_ff
    counts = metered_step(make_rule("bp", model_of(cfg, dtype=torch.float32)), batch_of(cfg))
    rows = b * n
    assert counts[("encoder.0.ffn", "forward")] == 2 * rows * d * ff * 2
    assert counts[("encoder.0.ffn", "backward")] == 2 * rows * d * ff * 2
    assert counts[("encoder.0.ffn", "weight_update")] == 2 * rows * d * ff * 2
    sdpa = 4 * b * n * n * d  # QKᵀ and PV over all heads
    assert counts[("encoder.0.self_attention", "forward")] == 4 * 2 * rows * d * d + sdpa
    assert counts[("encoder.0.self_attention", "backward")] == 4 * 2 * rows * d * d + 5 * sdpa // 2
    assert counts[("encoder.0.self_attention", "weight_update")] == 4 * 2 * rows * d * d
    assert counts[("head", "forward")] == 2 * rows * d * cfg.vocab
