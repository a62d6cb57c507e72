"""The PyTorch transformer: names, sizes and structure agree with the analytic side."""

import pytest
import torch

from trainingcost.analytic.memory import memory_table
from trainingcost.config import configs_frame
from trainingcost.analytic.layers import layer_plan
from trainingcost.train.model import Attention, Linear, sinusoidal_positions

from torch_helpers import ARCH_SHAPES, batch_of, cfg_of, model_of


@pytest.mark.parametrize("name", list(ARCH_SHAPES))
def test_every_analytic_layer_is_a_module_of_the_right_kind(name):
    cfg = cfg_of(name)
    model = model_of(cfg)
    modules = dict(model.named_modules())
    plan = layer_plan(cfg)
    expected = {"attention": Attention, "ffn": torch.nn.Module, "add_norm": torch.nn.Module, "lm_head": Linear, "classifier_head": Linear}
    for layer, kind in plan:
        assert layer in modules, layer
        if "attention" in kind:
            assert isinstance(modules[layer], Attention)
            assert modules[layer].causal == (kind == "masked_self_attention")
        elif kind in expected:
            assert isinstance(modules[layer], expected[kind])
    assert set(model.layer_modules()) == {layer for layer, _ in plan}


@pytest.mark.parametrize("name", list(ARCH_SHAPES))
def test_parameter_count_equals_the_memory_model(name):
    cfg = cfg_of(name)
    model = model_of(cfg)
    memory = memory_table(configs_frame([(name, cfg)]), ["bp"], ["fp32"], ["sgd"])
    assert sum(p.numel() for p in model.parameters()) == int(memory["parameter_count"].iloc[0])


@pytest.mark.parametrize("name", list(ARCH_SHAPES))
def test_output_shape(name):
    cfg = cfg_of(name)
    logits = model_of(cfg)(batch_of(cfg).tokens)
    expected = (cfg.batch, cfg.classes) if cfg.classes else (cfg.batch, cfg.tgt_len, cfg.vocab)
    assert tuple(logits.shape) == expected


def test_decoder_is_causal_and_encoder_is_not():
    for name, causal in (("decoder", True), ("encoder", False)):
        cfg = cfg_of(name)
        model = model_of(cfg)
        stack = cfg.arch
        tokens = batch_of(cfg).tokens
        changed = {stack: tokens[stack].clone()}
        changed[stack][:, -1] = (changed[stack][:, -1] + 1) % cfg.vocab  # change the last token only
        before, after = model(tokens), model(changed)
        same_prefix = torch.allclose(before[:, :-1], after[:, :-1])
        assert same_prefix == causal, name


def test_encoder_decoder_decoder_reads_the_source():
    cfg = cfg_of("encoder-decoder")
    model = model_of(cfg)
    tokens = batch_of(cfg).tokens
    changed = dict(tokens, encoder=(tokens["encoder"] + 1) % cfg.vocab)
    assert not torch.allclose(model(tokens), model(changed))


def test_sinusoidal_positions_by_hand():
    table = sinusoidal_positions(5, 6)
    pos, i = 3, 1  # features 2 and 3 use the rate 10000^(-2/6)
    rate = 10000 ** (-2 * i / 6)
    assert table[pos, 2].item() == pytest.approx(torch.sin(torch.tensor(pos * rate)).item(), abs=1e-6)
    assert table[pos, 3].item() == pytest.approx(torch.cos(torch.tensor(pos * rate)).item(), abs=1e-6)


def test_post_ln_block_by_hand():
    """LayerNorm(x + Sublayer(x)) twice, written out with torch.nn.functional."""
    cfg = cfg_of("encoder", layers=1)
    model = model_of(cfg)
    x = torch.randn(2, cfg.seq_len, cfg.d_model, dtype=torch.float64)
    block = model.encoder.get_submodule("0")
    att = block.self_attention
    b, t, d, h = 2, cfg.seq_len, cfg.d_model, cfg.heads

    def heads(y):
        return y.view(b, t, h, d // h).transpose(1, 2)

    q, k, v = heads(att.q(x)), heads(att.k(x)), heads(att.v(x))
    weights = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5, dim=-1)
    a = att.o((weights @ v).transpose(1, 2).reshape(b, t, d))
    n1 = torch.nn.functional.layer_norm(x + a, (d,), block.self_attention_norm.norm.weight, block.self_attention_norm.norm.bias)
    up = block.ffn.up
    f = block.ffn.down(torch.nn.functional.gelu(torch.nn.functional.linear(n1, up.weight, up.bias)))
    out = torch.nn.functional.layer_norm(n1 + f, (d,), block.ffn_norm.norm.weight, block.ffn_norm.norm.bias)
    assert torch.allclose(block(x), out, atol=1e-12)
