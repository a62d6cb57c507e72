"""Multi-head latent attention (DeepSeek-V2, V3) and DeepSeek-MoE's ungated shared experts against transformers.

transformers' ``DeepseekV3ForCausalLM`` and ``DeepseekV2ForCausalLM``, built small with random weights (SDPA, the
experts run eagerly so that FlopCounterMode sees their products, every block a mixture: first_k_dense_replace 0),
count one training step under torch's FlopCounterMode; trainingcost's executed model of the same shape counts the
same FLOPs, and its memory model the same parameters, to the integer: with the queries' own latent (V3) and without
(V2-Lite), query heads wider than the values (SDPA's math path on the CPU) and alike (its fused kernel).
"""

from __future__ import annotations

import warnings

import pytest

import trainingcost as tc
from trainingcost import cli
from trainingcost.analytic import layer_table
from trainingcost.analytic.memory import memory_table
from trainingcost.config import ConfigError, canonical_model, configs_frame

B, S = 2, 12
BASE = dict(arch="decoder", layers=2, d_model=32, heads=4, d_ff=16, vocab=61, seq_len=S, batch=B, norm="rmsnorm",
            norm_position="pre", ffn="swiglu", positions="rotary", bias="none", experts=4, experts_per_token=2,
            shared_expert_ff=32, shared_expert_gate=False, router_norm=False, kv_lora_rank=16)

CASES = {  # name: (transformers class prefix, q_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim)
    "v3-q-latent": ("DeepseekV3", 20, 4, 8, 6),
    "v3-no-q-latent": ("DeepseekV3", 0, 4, 8, 6),
    "v2-fused": ("DeepseekV2", 0, 4, 4, 8),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_parameters_and_executed_flops_equal_transformers_deepseek(case):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    from test_hf_models import CPU_ATTENTION

    prefix, q_rank, rope, nope, v = CASES[case]
    torch.manual_seed(0)
    config = getattr(transformers, f"{prefix}Config")(
        hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, n_shared_experts=2, n_routed_experts=4, num_experts_per_tok=2, vocab_size=61,
        kv_lora_rank=16, q_lora_rank=q_rank or None, qk_rope_head_dim=rope, qk_nope_head_dim=nope, v_head_dim=v,
        first_k_dense_replace=0, max_position_embeddings=64, attn_implementation="sdpa", n_group=1, topk_group=1,
        **({"topk_method": "greedy"} if prefix == "DeepseekV2" else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, f"{prefix}ForCausalLM")(config)
        model.set_experts_implementation("eager")  # grouped_mm has no FLOP formula (tests/test_moe.py)
    ids = torch.randint(0, 61, (B, S))
    model.train()
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        model(input_ids=ids, labels=ids).loss.backward()

    # n_shared_experts x moe_intermediate_size: one ungated shared SwiGLU expert 32 wide
    entry = dict(BASE, head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v, **({"q_lora_rank": q_rank} if q_rank else {}))
    frame = configs_frame([("", canonical_model(entry, "test"))])
    assert int(memory_table(frame, ["bp"]).parameter_count.iloc[0]) == model.num_parameters()
    assert int(layer_table(frame, ["bp"], ["executed"]).flops.sum()) == counter.get_total_flops()


def test_the_executed_model_runs_the_same_parameters_as_the_memory_model():
    pytest.importorskip("torch")
    from trainingcost.train.model import LatentAttention, Transformer

    cfg = canonical_model(dict(BASE, head_dim=8, q_lora_rank=12, qk_rope_head_dim=4, v_head_dim=6), "test")
    model = Transformer(cfg)
    assert isinstance(model.get_submodule("decoder.0.self_attention"), LatentAttention)
    frame = configs_frame([("", cfg)])
    assert sum(p.numel() for p in model.parameters()) == int(memory_table(frame, ["bp"]).parameter_count.iloc[0])
    names = {name for name, _ in model.get_submodule("decoder.1.self_attention").named_parameters()}
    assert names == {"q_a.weight", "q_norm.weight", "q_b.weight", "kv_a.weight", "kv_norm.weight", "kv_b.weight",
                     "o.weight"}


def test_the_formulas_by_hand():
    """One block of DeepSeek-V3's attention, per token: q_a 2 d rq, q_b 2 rq h dq, kv_a 2 d (rkv + dr), kv_b 2 rkv h (dh
    + dv), o 2 h dv d (DeepSeek-V2, arXiv 2405.04434, section 2.1.2-2.1.3); the forward attention 2 S h (dq + dv)."""
    d, h, rq, rkv, dh, dr, dv, seq = 7168, 128, 1536, 512, 128, 64, 128, 4096
    cfg = canonical_model(dict(arch="decoder", layers=1, d_model=d, heads=h, head_dim=dh, d_ff=18432, vocab=129280,
                               seq_len=seq, batch=1, norm="rmsnorm", norm_position="pre", ffn="swiglu",
                               positions="rotary", bias="none", kv_lora_rank=rkv, q_lora_rank=rq, qk_rope_head_dim=dr,
                               v_head_dim=dv), "test")
    table = layer_table(configs_frame([("", cfg)]), ["bp"], ["executed"])
    attention = table[(table.layer == "decoder.0.self_attention") & (table.phase == "forward")]
    per_token = 2 * d * rq + 2 * rq * h * (dh + dr) + 2 * d * (rkv + dr) + 2 * rkv * h * (dh + dv) + 2 * h * dv * d
    assert per_token == 374_210_560  # docs/notes/runs_of_2026.md, section A.5
    assert int(attention.flops.iloc[0]) == seq * per_token + 2 * seq * seq * h * (dh + dr + dv)
    params = int(memory_table(configs_frame([("", cfg)]), ["bp"]).parameter_count.iloc[0])
    attention_params = d * rq + rq + rq * h * (dh + dr) + d * (rkv + dr) + rkv + rkv * h * (dh + dv) + h * dv * d
    assert params == 129280 * d * 2 + d * 2 + attention_params + 3 * d * 18432 + d  # embeddings, norms, FFN


@pytest.mark.parametrize("extra,field", [
    (dict(q_lora_rank=8), "q_lora_rank: applies only to latent attention"),
    (dict(kv_lora_rank=8, qk_rope_head_dim=4, kv_heads=2), "kv_heads: 2 does not combine with latent attention"),
    (dict(kv_lora_rank=8, positions="learned"), "qk_rope_head_dim: latent attention turns a part"),
    (dict(kv_lora_rank=8, qk_rope_head_dim=3), "qk_rope_head_dim: 3 features cannot be turned"),
    (dict(kv_lora_rank=8, qk_rope_head_dim=4, arch="encoder"), "kv_lora_rank: latent attention applies only to arch"),
    (dict(shared_expert_gate=False), "shared_expert_gate: applies only to a mixture of experts"),
])
def test_bad_latent_options_are_one_line(extra, field):
    entry = {**dict(arch="decoder", layers=2, d_model=32, heads=4, d_ff=16, vocab=61, seq_len=S, batch=B,
                    positions="rotary"), **extra}
    with pytest.raises(ConfigError) as error:
        canonical_model(entry, "")
    assert field in str(error.value) and "\n" not in str(error.value)


FLAGS = ["--arch", "decoder", "--layers", "4", "--d-model", "1024", "--heads", "8", "--head-dim", "128", "--d-ff", "4096",
         "--vocab", "32000", "--seq-len", "1024", "--norm", "rmsnorm", "--norm-position", "pre", "--ffn", "swiglu",
         "--positions", "rotary", "--bias", "none", "--kv-lora-rank", "256", "--q-lora-rank", "384",
         "--qk-rope-head-dim", "64"]


def test_the_plan_prices_latent_attention_and_estimate_replays_it(capsys):
    row = tc.plan(**{k.lstrip("-").replace("-", "_"): v for k, v in zip(FLAGS[::2], FLAGS[1::2])}, gpu="h100-sxm",
                  gpus=8, tokens=1e9, rule="bp", tp=2).table.iloc[0]
    assert row["step_time_s"] > 0 and row["fits"]
    assert cli.main(["estimate", *FLAGS, "--rule", "bp"]) == 0
    out = capsys.readouterr().out
    assert "not replayed" not in out and "GiB*" not in out  # (the executed tape's step peak, no components summed)
    assert cli.main(["plan", *FLAGS, "--gpu", "h100-sxm", "--gpus", "8", "--tokens", "1e9", "--cp", "2"]) == 2
    assert "context parallelism 2 of latent attention is not priced" in capsys.readouterr().err


def test_the_baselines_count_latent_attentions_weights():
    """Kaplan et al. 2020's 6 N per token, with N the weights a token is multiplied by: latent attention's own."""
    args = {k.lstrip("-").replace("-", "_"): v for k, v in zip(FLAGS[::2], FLAGS[1::2])}
    table = tc.estimate(**args, rule="bp", cost_model="kaplan").table
    d, h, rq, rkv, dh, dr, layers, seq = 1024, 8, 384, 256, 128, 64, 4, 1024
    attention = d * rq + rq * h * (dh + dr) + d * (rkv + dr) + rkv * h * (dh + dh) + h * dh * d
    weights = layers * (attention + 3 * d * 4096)
    scores = layers * seq * h * (dh + dr + dh)  # 2 n_ctx d_attn per token, QK^T and PV at their own widths
    assert int(table[table.phase == "forward"].flops.sum()) == seq * (2 * weights + scores)


@pytest.mark.parametrize("model_type", ["deepseek_v3", "deepseek_v2"])
def test_a_deepseek_config_json_reads_as_transformers_builds_it(model_type):
    """The config.json of a small DeepSeek model with a dense first block (first_k_dense_replace 1) through
    --hf-config's mapping: the same parameters and the same FLOPs of one training step as transformers' model."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    from test_hf_models import CPU_ATTENTION

    from trainingcost.config.hf import hf_entry, with_overrides

    prefix = "DeepseekV3" if model_type == "deepseek_v3" else "DeepseekV2"
    torch.manual_seed(0)
    config = getattr(transformers, f"{prefix}Config")(
        hidden_size=32, intermediate_size=40, moe_intermediate_size=16, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2, vocab_size=61,
        kv_lora_rank=16, q_lora_rank=20 if prefix == "DeepseekV3" else None, qk_rope_head_dim=4, qk_nope_head_dim=8,
        v_head_dim=6, first_k_dense_replace=1, max_position_embeddings=64, attn_implementation="sdpa", n_group=1,
        topk_group=1, **({"topk_method": "greedy"} if prefix == "DeepseekV2" else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, f"{prefix}ForCausalLM")(config)
        model.set_experts_implementation("eager")
    ids = torch.randint(0, 61, (B, S))
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    cfg = canonical_model(with_overrides(hf_entry(config.to_dict()), {"seq_len": S, "batch": B}), "test")
    assert (cfg.dense_blocks, cfg.dense_ff, cfg.d_ff, cfg.shared_expert_ff, cfg.shared_expert_gate) == (1, 40, 16, 16, False)
    frame = configs_frame([("", cfg)])
    assert int(memory_table(frame, ["bp"]).parameter_count.iloc[0]) == model.num_parameters()
    table = layer_table(frame, ["bp"], ["executed"])
    assert int(table.flops.sum()) == counter.get_total_flops()
    assert set(table[table.block == 0].layer_kind) >= {"ffn"} and "moe" not in set(table[table.block == 0].layer_kind)
    assert "moe" in set(table[table.block == 2].layer_kind)


@pytest.mark.parametrize("key,value,message", [
    ("num_key_value_heads", 2, "latent attention has every head its own"),
    ("attention_bias", True, "biases in latent attention or the MLP are not supported"),
    ("moe_layer_freq", 2, "moe_layer_freq 1"),
])
def test_deepseek_variants_not_priced_are_one_line(key, value, message):
    from trainingcost.config.hf import hf_entry

    data = dict(model_type="deepseek_v3", hidden_size=32, intermediate_size=40, moe_intermediate_size=16,
                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                num_experts_per_tok=2, vocab_size=61, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=4,
                qk_nope_head_dim=8, v_head_dim=6, first_k_dense_replace=1, max_position_embeddings=64)
    with pytest.raises(ConfigError) as error:
        hf_entry({**data, key: value})
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("extra,message", [
    (dict(dense_blocks=2), "dense_blocks: 2 dense blocks leave none of the 2 a mixture of experts"),
    (dict(dense_ff=40), "dense_ff: applies only with dense_blocks"),
    (dict(dense_blocks=1, experts=0, experts_per_token=0), "dense_blocks: applies only to a mixture of experts"),
])
def test_bad_dense_blocks_are_one_line(extra, message):
    entry = {**dict(arch="decoder", layers=2, d_model=32, heads=4, d_ff=16, vocab=61, seq_len=S, experts=4,
                    experts_per_token=2), **extra}
    if not entry["experts"]:
        entry.pop("experts"), entry.pop("experts_per_token")
    with pytest.raises(ConfigError) as error:
        canonical_model(entry, "")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_deepseek_presets_plan_with_their_dense_blocks():
    """DeepSeek-V3: 3 dense blocks and 58 mixtures; the plan's all-to-alls run in the 58 only."""
    table = tc.plan(preset="deepseek-v3", gpu="h100-sxm", gpus=1024, pp=16, ep=64, tokens=1e12, rule="bp",
                    global_batch=4096, precision="fp8-mixed", checkpointing="full").table.iloc[0]
    assert table["ep_all_to_all_bytes"] > 0 and table["step_time_s"] > 0
    v2 = tc.estimate(preset="deepseek-v2-lite", rule="bp").table
    assert int(v2.flops.sum()) > 0


def test_node_limited_routing_crosses_to_each_node_once_by_hand():
    """DeepSeek-V3's report, section 3.2.2: each token reaches at most 4 nodes, crossing to each once over InfiniBand,
    then forwarded over NVLink to its experts. 64 expert-parallel GPUs on 8 nodes of 8, 8 copies of 1 MB of tokens:
    the copies bound for other nodes without the limit, 8 x 56 / 64 MB; with it, 4 x 7 / 8 MB."""
    from trainingcost.analytic.steptime.network import Network

    net = Network(gpus_per_node=8, intra_bw=400e9, intra_alpha=10e-6, inter_bw=50e9, inter_alpha=20e-6)
    one, k = 1e6, 8
    plain = net.all_to_all(k * one, 64, 1)
    limited = net.limited_all_to_all(k * one, 64, 1, k, 4, 8)
    assert plain == pytest.approx(20e-6 + max(k * one * 56 / 64 / 50e9, k * one * 7 / 64 / 400e9))
    assert limited == pytest.approx(20e-6 + max(one * 4 * 7 / 8 / 50e9, k * one * 7 / 8 / 400e9))
    assert net.limited_all_to_all(k * one, 8, 1, k, 4, 8) == net.all_to_all(k * one, 8, 1)  # inside one node


def test_deepseek_v3s_groups_come_from_its_config_and_are_checked():
    from trainingcost.config.hf import hf_entry

    entry = hf_entry(dict(model_type="deepseek_v3", hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                          vocab_size=61, max_position_embeddings=64, n_routed_experts=8))
    assert (entry["expert_groups"], entry["group_limit"]) == (8, 4)  # DeepseekV3Config's n_group and topk_group
    base = dict(arch="decoder", layers=2, d_model=32, heads=4, d_ff=16, vocab=61, seq_len=S, experts=8,
                experts_per_token=2)
    for extra, message in ((dict(expert_groups=4), "group_limit: node-limited routing needs expert_groups and"),
                           (dict(expert_groups=3, group_limit=1), "expert_groups: 3 groups do not divide the 8"),
                           (dict(expert_groups=4, group_limit=5), "group_limit: 5 is more than the 4 groups")):
        with pytest.raises(ConfigError) as error:
            canonical_model({**base, **extra}, "")
        assert message in str(error.value)
    assert canonical_model({**base, "expert_groups": 4, "group_limit": 4}, "").group_limit == 0  # no limit


# The memory tape (analytic/tape/latent.py) against the tensor meter: DeepSeek-V2-Lite's form (no query latent, query
# and value heads alike wide: SDPA's fused kernel) and DeepSeek-V3's (a query latent, value heads narrower: SDPA's math
# path on the CPU), each under every rule, SGD fp32 and Adam bf16 alternating.
LATENT_TAPE = {
    "v2-lite": dict(head_dim=4, kv_lora_rank=8, qk_rope_head_dim=2, v_head_dim=6),
    "v3": dict(head_dim=6, kv_lora_rank=8, q_lora_rank=6, qk_rope_head_dim=4, v_head_dim=6),
}


@pytest.mark.parametrize("case", sorted(LATENT_TAPE))
def test_the_memory_tape_replays_latent_attention_to_the_byte(case):
    from test_peaks import meter_step, tape_and_meter
    from trainingcost.analytic.catalogue import rule_names

    cfg = canonical_model(dict(arch="decoder", layers=2, d_model=16, heads=4, d_ff=24, vocab=300, seq_len=6, batch=2,
                               norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                               head_bias=False, **LATENT_TAPE[case]), "test")
    mismatches = []
    for index, rule in enumerate(rule_names()):
        optimizer, dtype = [("sgd", "fp32"), ("adam", "bf16")][index % 2]
        got, want = tape_and_meter(cfg, rule, optimizer, dtype, meter_step(cfg, "lm", rule, optimizer, dtype))
        if got != want or got["peak"] <= 0:
            mismatches.append((rule, optimizer, dtype, got, want))
    assert not mismatches, mismatches[:2]


def test_the_tape_replays_deepseek_v3s_form_whole_with_its_routing():
    """Latent attention (math path), DeepSeek-MoE with a dense first block and a multi-token prediction module: BP's
    measured step (its routing recorded) replayed, equal to the meter, both settings."""
    from test_moe import _metered_with_routing, _tape_and_meter

    entry = dict(arch="decoder", layers=3, d_model=16, heads=4, d_ff=8, vocab=11, seq_len=6, batch=2, norm="rmsnorm",
                 norm_position="pre", ffn="swiglu", positions="rotary", bias="none", **LATENT_TAPE["v3"], experts=4,
                 experts_per_token=2, shared_expert_ff=8, shared_expert_gate=False, dense_blocks=1, dense_ff=12,
                 mtp_depth=1)
    for optimizer, dtype in (("sgd", "fp32"), ("adam", "bf16")):
        cfg, reading = _metered_with_routing(entry, "bp", optimizer, dtype)
        got, want = _tape_and_meter(cfg, "bp", optimizer, dtype, reading, reading.routing_record())
        assert got == want, (optimizer, dtype, got, want)
