"""Multi-token prediction (DeepSeek-V3 Technical Report, DeepSeek-AI 2024, section 2.2): the option, our PyTorch
modules against a reference written here from the report's equations 21-25, parameters against the published 685B,
the analytic model by hand, the plan, the communication model's tensors and the refusals.

transformers neither loads nor trains these modules (DeepseekV3ForCausalLM skips ``num_nextn_predict_layers``), so
the outside check of their FLOPs is the meter: tests/test_executed.py's option grid runs them (cases ``mtp`` and
``deepseek-v3``) and checks every (layer, phase) cell against torch's FlopCounterMode.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainingcost.analytic import layer_table
from trainingcost.analytic.catalogue import check_architecture, rule_names, untrained
from trainingcost.analytic.comm import parameter_tensors
from trainingcost.analytic.plan_facts import model_facts
from trainingcost.config import canonical_model, configs_frame
from trainingcost.config.errors import ConfigError
from trainingcost.config.model import preset_entry
from trainingcost.train.objective import IGNORE, MTP_WEIGHT, loss as main_loss, mtp_loss

from torch_helpers import batch_of, model_of

DENSE = dict(arch="decoder", layers=2, d_model=16, heads=4, d_ff=20, vocab=13, seq_len=6, batch=2, norm="rmsnorm",
             norm_position="pre", ffn="swiglu", positions="rotary", bias="none")


def cfg_of(**changes):
    return canonical_model({**DENSE, **changes}, "test")


def _rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_the_loss_equals_the_reports_equations_written_here():
    """Eq. 21: h'_i = M [RMSNorm(h_i^(k-1)); RMSNorm(Emb(t_(i+k)))], eq. 22 a block, eq. 23 the shared head, eq. 24
    the cross-entropy of token i+k+1 over the positions that have one, eq. 25 the main loss + lambda / D of their sum;
    written from the tensors alone, with the modules' weights, against objective.mtp_loss of the model's forward."""
    cfg = cfg_of(mtp_depth=2)
    model = model_of(cfg, dtype=torch.float64)
    batch = batch_of(cfg, ignore_some=False)
    logits, extra = model(batch.tokens, mtp=True)
    ours = mtp_loss(logits, extra, batch.targets)

    tokens, targets = batch.tokens["decoder"], batch.targets
    T = tokens.shape[1]
    # h^0: the residual stream after the decoder's last block, before its final norm
    x = model.decoder.embedding(tokens)
    for block in model.decoder.blocks():
        x = block(x)
    assert torch.allclose(model.head(model.decoder.final_norm(x)), logits)
    table, head = model.decoder.embedding.weight, model.head.weight
    total, h = F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1)), x
    for k in range(1, cfg.mtp_depth + 1):
        module = getattr(model.mtp, str(k - 1))
        eps = module.embedding_norm.eps
        emb = F.embedding(torch.cat([tokens[:, k:], tokens[:, :k]], dim=1), table)  # t_(i+k) at position i
        joined = torch.cat([_rms(emb, module.embedding_norm.weight, eps), _rms(h, module.hidden_norm.weight, eps)], -1)
        h = module(joined @ module.projection.weight.T)  # the block (MultiTokenPrediction is one)
        out = _rms(h, module.final_norm.weight, eps) @ head.T
        want = torch.full_like(targets, IGNORE)
        want[:, :T - k] = targets[:, k:]  # token i+k+1 is the target of position i+k
        total = total + MTP_WEIGHT / cfg.mtp_depth * F.cross_entropy(out.reshape(-1, cfg.vocab), want.reshape(-1),
                                                                      ignore_index=IGNORE)
    assert torch.allclose(ours, total, rtol=1e-12, atol=0)
    assert not torch.allclose(ours, main_loss(logits, targets))


def test_the_modules_share_the_tables_and_their_gradient_reaches_the_main_model():
    cfg = cfg_of(mtp_depth=1)
    model = model_of(cfg)
    module = model.mtp.get_submodule("0")
    assert module.embedding.weight is model.decoder.embedding.weight and module.head.weight is model.head.weight
    batch = batch_of(cfg)
    mtp_loss(*model(batch.tokens, mtp=True), batch.targets).backward()
    with_mtp = model.decoder.get_submodule("1").ffn.down.weight.grad.clone()
    model.zero_grad()
    main_loss(model(batch.tokens), batch.targets).backward()
    assert not torch.allclose(with_mtp, model.decoder.get_submodule("1").ffn.down.weight.grad)
    assert module.projection.weight.grad is None  # (the main loss alone does not reach the module)


@pytest.mark.parametrize("extra", [dict(mtp_depth=1), dict(mtp_depth=2, tie_embeddings=True, bias="all"),
                                   dict(mtp_depth=1, experts=4, experts_per_token=2, shared_expert_ff=8,
                                        shared_expert_gate=False, dense_blocks=1)])
def test_parameters_and_their_listing_equal_the_model(extra):
    """The analytic count equals the torch model's; the communication model lists its tensors in
    ``model.parameters()`` order, names and shapes (DDP's buckets, FSDP2's units read it)."""
    cfg = cfg_of(**extra)
    model = model_of(cfg)
    assert model_facts(cfg, ["bp"], "adam").parameters == sum(p.numel() for p in model.parameters())
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == [
        (n, tuple(s)) for n, s in parameter_tensors(cfg, "bp")]


def test_a_module_by_hand():
    """One module's FLOPs per sequence (executed: 2 FLOPs per multiply-accumulate; M rows, d wide): its projection
    2 M (2d) d each way, its block the decoder's, its head the main head's; the embedding and norms none."""
    cfg = cfg_of(mtp_depth=1)
    table = layer_table(configs_frame([("", cfg)]), ["bp"], ["executed"])
    f = {(r.layer, r.phase): r.flops for r in table.itertuples()}
    M, d, B = cfg.seq_len, cfg.d_model, cfg.batch
    assert f["mtp.0.projection", "forward"] == B * 2 * M * 2 * d * d
    assert f["mtp.0.projection", "backward"] == f["mtp.0.projection", "weight_update"] == B * 2 * M * 2 * d * d
    for sub in ("self_attention", "ffn"):
        for phase in ("forward", "backward", "weight_update"):
            assert f[f"mtp.0.{sub}", phase] == f[f"decoder.1.{sub}", phase]
    assert f["mtp.0.head", "forward"] == f["head", "forward"] == B * 2 * M * d * cfg.vocab
    assert not any(f.get((f"mtp.0.{n}", "forward"), 0) for n in ("embedding", "embedding_norm", "hidden_norm"))


def test_kaplans_count_adds_the_modules_weights():
    """Kaplan et al.'s 2N per token, N now with each module's attention, FFN and 2d x d projection, and the causal
    attention term of one more layer."""
    plain, more = cfg_of(), cfg_of(mtp_depth=2)
    def forward(cfg):
        t = layer_table(configs_frame([("", cfg)]), ["bp"], ["kaplan"])
        return int(t[t.phase == "forward"].flops.sum())
    d, ff, M, B, D = 16, 20, 6, 2, 2
    weights = 4 * d * d + 3 * d * ff + 2 * d * d  # q, k, v, o; gate, up, down; the projection
    assert forward(more) - forward(plain) == B * D * (2 * M * weights + M * M * 2 * d)  # (QK^T and PV: 2 a per key)


def test_deepseek_v3_with_its_module_matches_the_published_size():
    """The checkpoint's 685B (deepseek-ai/DeepSeek-V3's model card: 671B main model and 14B of the module, which
    stores its own copies of the embedding and the head): ours plus those two copies, within 0.1%."""
    entry = {**preset_entry("deepseek-v3"), "mtp_depth": 1, "batch": 1}
    cfg = canonical_model(entry, "test")
    ours = model_facts(cfg, ["bp"], "adam").parameters
    assert ours - 671_026_404_352 == 11_610_067_968  # one mixture block, the projection and three norms
    assert abs(ours + 2 * cfg.vocab * cfg.d_model - 685e9) / 685e9 < 1e-3


@pytest.mark.parametrize("changes,field", [
    (dict(arch="encoder"), "mtp_depth"), (dict(classes=3), "mtp_depth"), (dict(norm_position="post"), "mtp_depth"),
    (dict(positions="learned"), "positions"), (dict(sliding_window=3), "sliding_window"),
])
def test_refusals_name_the_field(changes, field):
    with pytest.raises(ConfigError) as e:
        cfg_of(mtp_depth=1, **changes)
    assert str(e.value).startswith(f"test: {field}") or f"{field}:" in str(e.value)
    assert "\n" not in str(e.value)


def test_only_bp_trains_the_modules():
    cfg = cfg_of(mtp_depth=1)
    assert [r for r in rule_names() if not untrained(r, cfg)] == ["bp"]
    with pytest.raises(ConfigError, match=r"^--rule: dfa does not train multi-token prediction .* allowed with "
                                          r"mtp_depth: bp$"):
        check_architecture("dfa", cfg, "--rule")
    check_architecture("bp", cfg, "--rule")


def test_the_plan_puts_the_modules_on_the_heads_stage():
    from trainingcost import plan

    base = dict(preset="llama-2-7b", gpu="h100-sxm", gpus=16, rule="bp", tp=1, pp=4, micro_batch=1, global_batch=64,
                tokens=1e9)
    one = plan(**base).table.iloc[0]
    two = plan(**base, mtp_depth=1).table.iloc[0]
    assert two["step_time_s"] > one["step_time_s"] and two["model_flops"] > one["model_flops"]
    d, ff = 4096, 11008  # a Llama 2 7B block (q, k, v, o; gate, up, down; two norms), the projection, three norms
    assert two["trained_parameters"] - one["trained_parameters"] == 4 * d * d + 3 * d * ff + 2 * d + 2 * d * d + 3 * d
    assert "multi-token prediction" in two["pipeline_split"] and two["mem_parameters"] > one["mem_parameters"]


TAPE_CASES = {
    "dense": dict(mtp_depth=1), "two-modules": dict(mtp_depth=2),
    "tied": dict(mtp_depth=1, tie_embeddings=True),  # the head's and the modules' embeddings one table
    "head-bias": dict(mtp_depth=2, bias="all", head_bias=True),  # the head's weight and bias read by three heads
    "layernorm-gelu": dict(mtp_depth=1, norm="layernorm", ffn="gelu", positions="none"),
}


@pytest.mark.parametrize("case", sorted(TAPE_CASES))
def test_the_memory_tape_equals_the_tensor_meter(case):
    """BP's step replayed on the executed memory tape (analytic/tape/mtp.py: the modules' forward, the summed loss
    of float32 scalars, the shared head's and table's gradients summed out of place once each node has released
    its inputs) equals the tensor meter at the step's start, its peak and every phase's peak, SGD fp32 and Adam
    bf16."""
    from test_peaks import meter_step, tape_and_meter

    cfg = canonical_model({**DENSE, "vocab": 300, "head_bias": False, **TAPE_CASES[case]}, "test")
    for optimizer, dtype in (("sgd", "fp32"), ("adam", "bf16")):
        got, want = tape_and_meter(cfg, "bp", optimizer, dtype, meter_step(cfg, "lm", "bp", optimizer, dtype))
        assert got == want and got["peak"] > 0, (optimizer, dtype, got, want)


def test_the_tape_replays_a_mixture_with_dense_first_blocks_and_a_module_with_its_routing():
    """DeepSeek-MoE's blocks (the first dense, shared experts ungated) and a module of the same kind: the measured
    step's routing (the module's mixture called last) replayed, equal to the meter."""
    from test_moe import DEEPSEEK_LIKE, _metered_with_routing, _tape_and_meter

    entry = dict(DEEPSEEK_LIKE, layers=3, dense_blocks=1, dense_ff=28, mtp_depth=1)
    for optimizer, dtype in (("sgd", "fp32"), ("adam", "bf16")):
        cfg, reading = _metered_with_routing(entry, "bp", optimizer, dtype)
        assert [layer for layer, _ in reading.routing][-1] == "mtp.0.ffn"
        got, want = _tape_and_meter(cfg, "bp", optimizer, dtype, reading, reading.routing_record())
        assert got == want, (optimizer, dtype, got, want)
