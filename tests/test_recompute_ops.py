"""Per-operation recompute (a published row's ``recompute`` ``ops:...``; docs/planning.md, "Per-operation
recompute"): torchtitan's per-op selective checkpointing and MaxText's named remat policies, priced product by
product against hand computations."""

from __future__ import annotations

import dataclasses

import pytest

from trainingcost.analytic.steptime import Layout, predict_step
from trainingcost.analytic.steptime.device import DeviceModel
from trainingcost.analytic.steptime.step import block_times, check_layout
from trainingcost.config import ConfigError
from trainingcost.config.hardware import device
from trainingcost.config.model import canonical_model, preset_entry

H100 = device("h100-sxm")


def llama():
    return canonical_model({**preset_entry("llama-2-7b"), "layers": 4, "seq_len": 2048})


def base(**changes):
    return Layout(gpus=8, global_batch=16, micro_batch=2, sharding="fsdp", host_block_s=(0.0, 0.0), **changes)


def test_a_bad_product_is_one_line():
    with pytest.raises(ConfigError) as err:
        check_layout(llama(), base(recompute="ops:k+mlp"))
    assert str(err.value).startswith("recompute: 'ops:k+mlp' is not allowed") and "\n" not in str(err.value)
    check_layout(llama(), base(recompute="ops:"))  # the elementwise work alone
    check_layout(llama(), base(recompute="ops:k+o+up"))


def test_torchtitans_every_second_product_by_hand():
    """ops:k+o+up (torchtitan's per-op policy on a Llama block): the backward repeats wk (m x kv x d), wo (m x d x a)
    and w3 (m x d_ff x d) at their own shapes, every elementwise kernel, and not the attention."""
    cfg = llama()
    dev = DeviceModel.of(H100, "bf16")
    none, ops = base(), base(recompute="ops:k+o+up")
    bt = block_times(cfg, none, dev, 2)
    m, d, a, kv, ff = 2 * cfg.seq_len, cfg.d_model, cfg.attn_width, cfg.kv_width, cfg.d_ff
    gemms = dev.gemm(m, kv, d) + dev.gemm(m, d, a) + dev.gemm(m, ff, d)
    a_step, b_step = predict_step(cfg, none, H100, "bp"), predict_step(cfg, ops, H100, "bp")
    M, L = none.accumulation, cfg.layers
    assert b_step.parts["matmul"] - a_step.parts["matmul"] == pytest.approx(M * L * gemms, rel=1e-9)
    assert b_step.parts["attention"] == a_step.parts["attention"]
    assert b_step.parts["memory"] - a_step.parts["memory"] == pytest.approx(M * L * bt["fwd"]["memory"], rel=1e-9)
    # the hardware FLOPs: the three products' share of the block's forward FLOPs (attention core included)
    core = 4.0 * 2 * cfg.seq_len * cfg.seq_len * a * 0.5
    block = 2.0 * m * d * (a + 2 * kv) + 2.0 * m * a * d + 3 * 2.0 * m * d * ff + core
    share = (2.0 * m * kv * d + 2.0 * m * d * a + 2.0 * m * ff * d) / block
    extra = b_step.hardware_flops - a_step.hardware_flops
    full = predict_step(cfg, base(recompute="full"), H100, "bp")
    assert extra == pytest.approx(share * (full.hardware_flops - a_step.hardware_flops), rel=1e-9)


def test_every_product_and_the_core_is_a_full_recompute_up_to_the_fused_shapes():
    cfg = llama()
    everything = "ops:" + "+".join(("q", "k", "v", "o", "gate", "up", "down", "core"))
    full, ops = predict_step(cfg, base(recompute="full"), H100, "bp"), predict_step(cfg, base(recompute=everything),
                                                                                     H100, "bp")
    assert ops.parts["memory"] == pytest.approx(full.parts["memory"], rel=1e-12)
    assert ops.parts["attention"] == pytest.approx(full.parts["attention"], rel=1e-12)
    assert ops.hardware_flops == pytest.approx(full.hardware_flops, rel=1e-12)
    assert ops.parts["matmul"] == pytest.approx(full.parts["matmul"], rel=0.03)  # q, k, v and gate, up priced apart
    elementwise = predict_step(cfg, base(recompute="ops:"), H100, "bp")
    none = predict_step(cfg, base(), H100, "bp")
    assert elementwise.parts["matmul"] == none.parts["matmul"] and elementwise.parts["memory"] > none.parts["memory"]


def test_a_side_repeats_its_tensor_parallel_pair_only_where_one_of_its_products_repeats():
    cfg = llama()
    lay = Layout(gpus=8, global_batch=16, micro_batch=2, tp=2, host_block_s=(0.0, 0.0))
    none, ffn, both = (predict_step(cfg, dataclasses.replace(lay, recompute=r), H100, "bp").parts["comm_tp"]
                       for r in ("none", "ops:up", "ops:k+up"))
    full = predict_step(cfg, dataclasses.replace(lay, recompute="full"), H100, "bp").parts["comm_tp"]
    assert none < ffn < both and both == pytest.approx(full, rel=1e-12)


def test_a_mixtures_experts_repeat_at_their_own_rows():
    """ops:gate+up on a mixture: each local expert's products at its token-balanced rows (m k / E x ep), E / ep of
    them; every product with the core is a full recompute up to the cut shapes, and the router is never repeated."""
    from trainingcost.config.presets import PRESETS

    cfg = canonical_model({**PRESETS["mixtral-8x7b"], "layers": 4}).replace(seq_len=2048)
    dev = DeviceModel.of(H100, "bf16")
    lay = Layout(gpus=8, global_batch=16, micro_batch=1, ep=2, sharding="fsdp", host_block_s=(0.0, 0.0))
    bt = block_times(cfg, lay, dev, 2)
    m, k, E, d, ff = cfg.seq_len, cfg.experts_per_token, cfg.experts, cfg.d_model, cfg.d_ff
    rows, held = m * k // E * 2, E // 2
    assert bt["ops_fwd"]["up"][1] == pytest.approx(held * 2.0 * rows * ff * d, rel=1e-12)
    assert bt["ops_fwd"]["up"][0] == pytest.approx(held * dev.gemm(rows, ff, d), rel=1e-12)
    everything = "ops:" + "+".join(("q", "k", "v", "o", "gate", "up", "down", "core"))
    full, ops = (predict_step(cfg, dataclasses.replace(lay, recompute=r), H100, "bp") for r in ("full", everything))
    assert ops.step_time_s == pytest.approx(full.step_time_s, rel=0.03)


def test_the_core_alone_repeats_no_tensor_parallel_pair_and_an_absent_gate_nothing():
    cfg = llama()
    lay = Layout(gpus=8, global_batch=16, micro_batch=2, tp=2, sequence_parallel=True, host_block_s=(0.0, 0.0))
    none, core = (predict_step(cfg, dataclasses.replace(lay, recompute=r), H100, "bp") for r in ("none", "ops:core"))
    assert core.parts["comm_tp"] == none.parts["comm_tp"] and core.parts["attention"] > none.parts["attention"]
    gpt2 = canonical_model({**preset_entry("gpt2-small"), "layers": 2})  # GELU: no gate product
    a, b = (predict_step(gpt2, base(recompute=r), H100, "bp") for r in ("ops:up", "ops:gate+up"))
    assert a.step_time_s == b.step_time_s


def test_latent_attentions_up_projections_by_hand():
    """ops:q_up+kv_up (DeepSeek-V3's recompute, its report's section 3.2.3: the MLA up-projections, and every
    RMSNorm, inside the block's elementwise work): the backward repeats q_b (m x h dq x rq) and kv_b (m x h (dh + dv)
    x rkv) at their own shapes; named with q and v, they are counted once."""
    cfg = canonical_model({**preset_entry("deepseek-v2-lite"), "layers": 2, "seq_len": 1024, "experts": 0,
                           "experts_per_token": 0, "shared_expert_ff": 0, "shared_expert_gate": True,
                           "router_norm": True, "dense_blocks": 0, "dense_ff": 0, "d_ff": 4096, "q_lora_rank": 384})
    dev = DeviceModel.of(H100, "bf16")
    none, ups = base(), base(recompute="ops:q_up+kv_up")
    bt = block_times(cfg, none, dev, 2)
    m, h = 2 * cfg.seq_len, cfg.heads
    gemms = dev.gemm(m, h * cfg.q_head, cfg.q_lora_rank) + dev.gemm(m, h * (cfg.head_dim + cfg.v_head), cfg.kv_lora_rank)
    a_step, b_step = predict_step(cfg, none, H100, "bp"), predict_step(cfg, ups, H100, "bp")
    M, L = none.accumulation, cfg.layers
    assert b_step.parts["matmul"] - a_step.parts["matmul"] == pytest.approx(M * L * gemms, rel=1e-9)
    assert b_step.parts["memory"] - a_step.parts["memory"] == pytest.approx(M * L * bt["fwd"]["memory"], rel=1e-9)
    both = predict_step(cfg, base(recompute="ops:q+v"), H100, "bp")
    named = predict_step(cfg, base(recompute="ops:q+v+q_up+kv_up"), H100, "bp")
    assert named.parts == both.parts and named.hardware_flops == both.hardware_flops
