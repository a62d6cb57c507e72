"""The ``executed`` cost model equals the measured FLOPs, cell by cell, as integers.

Every configuration below runs one real training step under every rule with the
FLOP meter on (FlopCounterMode's formulas, attributed per layer and phase), and
the analytic table of the same configuration, computed from shapes alone, must
give the same integer in every (layer, phase) cell. A cell that one side lacks
counts as 0 there, and the non-zero cells must be the same on both sides.
"""

import pytest
import torch

from trainingcost.analytic import layer_table
from trainingcost.analytic.catalogue import rule as catalogue_rule, untrained
from trainingcost.analytic.engine import recipe
from trainingcost.config import canonical_model, configs_frame
from trainingcost.measure.flops import UNATTRIBUTED
from trainingcost.config import RuleOptions
from trainingcost.train.registry import make_rule, rule_names

from torch_helpers import batch_of, by_analytic_phase, count_step, model_of

E, D, ED = "encoder", "decoder", "encoder-decoder"
# Shapes vary on every axis: width, heads (d_k from 2 to 16), d_ff, depth, lengths, vocab, batch, classes.
CONFIGS = [
    dict(arch=E, layers=1, d_model=8, heads=1, d_ff=16, vocab=7, seq_len=4, batch=1),
    dict(arch=E, layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6, batch=3),
    dict(arch=E, layers=3, d_model=12, heads=3, d_ff=20, vocab=13, seq_len=5, batch=2),
    dict(arch=E, layers=1, d_model=32, heads=2, d_ff=8, vocab=5, seq_len=9, batch=2),
    dict(arch=E, layers=2, d_model=16, heads=8, d_ff=32, vocab=17, seq_len=3, batch=4),
    dict(arch=E, layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6, batch=3, classes=3),
    dict(arch=E, layers=1, d_model=8, heads=2, d_ff=12, vocab=9, seq_len=7, batch=2, classes=5),
    dict(arch=D, layers=1, d_model=8, heads=1, d_ff=16, vocab=7, seq_len=4, batch=1),
    dict(arch=D, layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6, batch=3),
    dict(arch=D, layers=3, d_model=24, heads=6, d_ff=48, vocab=19, seq_len=8, batch=2),
    dict(arch=D, layers=1, d_model=32, heads=4, d_ff=16, vocab=3, seq_len=10, batch=2),
    dict(arch=D, layers=2, d_model=12, heads=2, d_ff=36, vocab=23, seq_len=5, batch=5),
    dict(arch=D, layers=2, d_model=16, heads=2, d_ff=16, vocab=10, seq_len=6, batch=2, classes=2),
    dict(arch=D, layers=1, d_model=8, heads=4, d_ff=8, vocab=6, seq_len=3, batch=3, classes=4),
    dict(arch=ED, enc_layers=1, dec_layers=1, d_model=8, heads=1, d_ff=16, vocab=7, seq_len=4, tgt_len=4, batch=1),
    dict(arch=ED, enc_layers=2, dec_layers=2, d_model=16, heads=2, d_ff=24, vocab=11, seq_len=7, tgt_len=5, batch=3),
    dict(arch=ED, enc_layers=1, dec_layers=3, d_model=12, heads=3, d_ff=20, vocab=13, seq_len=3, tgt_len=8, batch=2),
    dict(arch=ED, enc_layers=3, dec_layers=1, d_model=16, heads=4, d_ff=32, vocab=9, seq_len=9, tgt_len=2, batch=2),
    dict(arch=ED, enc_layers=2, dec_layers=1, d_model=24, heads=8, d_ff=12, vocab=5, seq_len=6, tgt_len=6, batch=4),
    dict(arch=ED, enc_layers=1, dec_layers=2, d_model=32, heads=4, d_ff=64, vocab=21, seq_len=5, tgt_len=3, batch=2),
    dict(arch=E, layers=4, d_model=8, heads=2, d_ff=8, vocab=4, seq_len=2, batch=6),
    dict(arch=D, layers=4, d_model=8, heads=2, d_ff=8, vocab=4, seq_len=2, batch=6),
]


def _ids():
    return [f"{c['arch']}-d{c['d_model']}h{c['heads']}-{c.get('classes', 'lm')}-{i}" for i, c in enumerate(CONFIGS)]


def predicted(cfg: dict, rule: str, mirror_steps: int = 1) -> dict:
    return predicted_rules(cfg, [rule], mirror_steps)[rule]


def predicted_rules(cfg: dict, rules: list[str], mirror_steps: int = 1) -> dict[str, dict]:
    """Each rule's executed FLOPs per (layer, phase), from one table of all ``rules`` (one engine call, not one each)."""
    table = layer_table(configs_frame([("", cfg)]), rules, ["executed"], mirror_steps)
    cells = {rule: {} for rule in rules}
    for rule, layer, phase, flops in zip(table.rule, table.layer, table.phase, table.flops):
        cells[rule][layer, phase] = int(flops)
    return cells


def measured(cfg: dict, rule: str, options: RuleOptions) -> dict:
    model = model_of(cfg, dtype=torch.float32)
    counts = count_step(make_rule(rule, model, options), batch_of(cfg))
    assert UNATTRIBUTED not in {layer for layer, _ in counts}
    return by_analytic_phase(counts)


def assert_cells_equal(pred: dict, meas: dict, what: str) -> None:
    nonzero = lambda cells: {k for k, v in cells.items() if v}  # noqa: E731
    assert nonzero(pred) == nonzero(meas), f"{what}: cells differ: {sorted(nonzero(pred) ^ nonzero(meas))}"
    wrong = {k: (pred.get(k, 0), meas.get(k, 0)) for k in set(pred) | set(meas) if pred.get(k, 0) != meas.get(k, 0)}
    assert not wrong, f"{what}: (executed, measured) differ: {wrong}"


@pytest.mark.parametrize("entry", CONFIGS, ids=_ids())
def test_executed_equals_measured_in_every_cell(entry):
    cfg = canonical_model(entry, "test")
    pred = predicted_rules(cfg, list(rule_names()))
    for rule in rule_names():
        meas = measured(cfg, rule, RuleOptions())
        assert_cells_equal(pred[rule], meas, rule)
        # Every phase of the recipe that runs a product is seen by the meter.
        phases = {phase for (_, phase), v in meas.items() if v}
        assert phases == {p for (_, p), v in pred[rule].items() if v} and phases <= set(recipe(rule, 1, "executed")), rule


def test_coverage_of_the_exactness_test():
    archs = {c["arch"] for c in CONFIGS}
    assert len(CONFIGS) >= 20 and archs == {E, D, ED}
    assert {bool(c.get("classes")) for c in CONFIGS if c["arch"] != ED} == {False, True}


@pytest.mark.parametrize("steps", [0, 2, 3])
def test_weight_mirror_steps(steps):
    cfg = canonical_model(CONFIGS[15], "test")
    assert_cells_equal(predicted(cfg, "wm", steps), measured(cfg, "wm", RuleOptions(mirror_steps=steps)), f"wm x{steps}")


def test_executed_differs_from_the_paper_where_the_code_does():
    """The executed model is not the paper's: no explicit softmax Jacobian, no dense embedding update."""
    cfg = canonical_model(CONFIGS[8], "test")
    frame = configs_frame([("", cfg)])
    table = layer_table(frame, ["bp", "pepita"], ["paper", "executed"])
    total = table.groupby(["rule", "cost_model", "phase"])["flops"].sum()
    # The paper's attention backward carries the M^2 N h softmax Jacobian and the FLOPs of elementwise work.
    assert total["bp", "paper", "backward"] > total["bp", "executed", "backward"]
    # The paper's PEPITA updates the embedding densely (M V d MACCs); the code index-adds.
    emb = table[(table.layer == "decoder.embedding") & (table.phase == "weight_update") & (table.rule == "pepita")]
    assert emb.set_index("cost_model")["flops"].to_dict() == {"paper": 2 * cfg.batch * 6 * 11 * 16, "executed": 0}
    # Only the executed model separates elementwise work.
    assert table.loc[table.cost_model == "paper", "elementwise_flops"].isna().all()
    assert (table.loc[table.cost_model == "executed", "elementwise_flops"] >= 0).all()


def test_elementwise_flops_by_hand():
    """The documented per-element constants, at three shapes (docs/cost_models.md, `elementwise_flops`)."""
    for entry in (CONFIGS[1], CONFIGS[9], CONFIGS[16]):
        cfg = canonical_model(entry, "test")
        table = layer_table(configs_frame([("", cfg)]), ["bp", "pepita"], ["executed"])
        cell = table.set_index(["rule", "layer", "phase"])["elementwise_flops"]
        b, d, h, ff, v = cfg.batch, cfg.d_model, cfg.heads, cfg.d_ff, cfg.vocab
        stack = "decoder" if cfg.dec_layers else "encoder"
        t = cfg.tgt_len if stack == "decoder" else cfg.seq_len
        assert cell["bp", f"{stack}.0.ffn", "forward"] == b * (t * ff + t * d + 8 * t * ff)  # biases, GELU
        assert cell["bp", f"{stack}.0.ffn", "backward"] == b * 13 * t * ff  # GELU derivative
        assert cell["bp", f"{stack}.0.ffn_norm", "forward"] == b * 9 * t * d  # residual + LayerNorm
        assert cell["bp", f"{stack}.0.self_attention", "forward"] == b * (4 * t * d + 6 * t * t * h)  # biases, softmax
        assert cell["bp", f"{stack}.0.self_attention", "backward"] == b * (10 * t * t * h + t * d)  # SDPA bwd, k+v sum
        assert cell["bp", "head", "forward"] == b * 6 * t * v  # bias, log-softmax
        # PEPITA's forward: the full pass plus the modulated pass, whose head only pools (nothing for an LM head).
        assert cell["pepita", "head", "forward"] == b * 6 * t * v
        assert cell["pepita", f"{stack}.0.ffn", "forward"] == 2 * b * (t * ff + t * d + 8 * t * ff)


# -- architecture options (issue 14): every option on every arch, under every rule -----------------------
OPTION_CASES = {
    "rmsnorm": dict(norm="rmsnorm"),
    "pre": dict(norm_position="pre"),
    "pre-rms": dict(norm_position="pre", norm="rmsnorm"),
    "relu": dict(ffn="relu"),
    "swiglu": dict(ffn="swiglu"),
    "geglu": dict(ffn="geglu"),
    "gqa": dict(kv_heads=2),
    "mqa": dict(kv_heads=1),
    "head_dim": dict(head_dim=6),
    "learned": dict(positions="learned", max_positions=12),
    "rotary": dict(positions="rotary"),
    "nope": dict(positions="none"),
    "relative": dict(positions="relative", relative_buckets=8, relative_max_distance=16),
    "tied": dict(tie_embeddings=True),
    "no-bias": dict(bias="none"),
    "qkv-bias": dict(bias="qkv"),
    "attention-bias": dict(bias="attention"),  # q, k, v and o biased, the FFN not (Llama's attention_bias)
    "head-bias": dict(bias="none", head_bias=True),
    "bert-embedding": dict(type_vocab=2, embedding_norm=True, positions="learned"),
    "nonparametric": dict(norm="nonparametric"),  # a LayerNorm without gain or bias (OLMo)
    # a LayerNorm with a gain and no bias (Cohere), read by both parallel branches
    "layernorm-nobias": dict(norm="layernorm_nobias", norm_position="pre", parallel_block="one_norm"),
    "ffn-bias": dict(bias="ffn"),  # the FFN's matrices biased, attention not (GPT-J)
    "parallel-one-norm": dict(norm_position="pre", parallel_block="one_norm"),  # GPT-J, Phi-1/2, Falcon-7B
    # GPT-NeoX: a norm per branch, rotary on half of each head
    "parallel-two-norms": dict(norm_position="pre", parallel_block="two_norms", positions="rotary", rotary_dim=2),
    "sliding-window": dict(sliding_window=3, positions="rotary"),
    "embedding-scale": dict(embedding_scale=True),  # Gemma's sqrt(d) on the embedding
    "shared-embedding": dict(shared_embedding=True),  # T5 v1.1: one table for both stacks, the head its own  # SDPA with the window's mask: the dense product
    "experts": dict(experts=3, experts_per_token=2, router_norm=False),  # GELU experts, biased where bias is all
    # Gemma 2's options: a norm on each branch's output; soft-capped scores (attention written out: 8 M N a backward)
    # and logits; local and global layers alternating; scores scaled by query_pre_attn_scalar (a number, no cost)
    "post-norms": dict(norm_position="pre", post_norms=True),
    "attention-softcap": dict(attention_softcap=20.0),
    "logit-softcap": dict(logit_softcap=5.0),
    "window-period": dict(sliding_window=3, window_period=2, positions="rotary"),
    "query-scale": dict(query_scale=9),
    # Qwen3's and Gemma 3's RMSNorm on each head of q and k (every attention, cross-attention too)
    "qk-norm": dict(qk_norm="head", positions="rotary", kv_heads=2),
    "qk-norm-projection": dict(qk_norm="projection", positions="rotary", kv_heads=2),  # OLMo 2's, on q's and k's widths
    "output-norm": dict(norm_position="output"),  # OLMo 2's x + norm(f(x)), and a final norm
}
# Models of today, whole: Llama/Mistral (pre-RMSNorm, SwiGLU, GQA, rotary, no biases), Qwen2 (and q/k/v biases,
# tied), GPT-2 (pre-LN, learned positions, tied, no head bias), BERT (post-LN, token types, embedding norm).
MODERN = {
    "llama": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", kv_heads=2, positions="rotary", bias="none"),
    "qwen2": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", kv_heads=1, positions="rotary", bias="qkv",
                  tie_embeddings=True),
    "gpt2": dict(norm_position="pre", positions="learned", max_positions=16, tie_embeddings=True, head_bias=False),
    "bert": dict(positions="learned", type_vocab=2, embedding_norm=True, tie_embeddings=True),
    "t5": dict(norm="rmsnorm", norm_position="pre", ffn="relu", positions="relative", bias="none", tie_embeddings=True),
    "wide-heads": dict(norm_position="pre", ffn="geglu", head_dim=10, kv_heads=2, positions="rotary"),
    # Mixtral (Llama's blocks, SwiGLU experts, top-2) and Qwen-MoE (q/k/v biases, a gated shared expert)
    "mixtral": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", kv_heads=2, positions="rotary", bias="none",
                    experts=4, experts_per_token=2),
    # Gemma 2 (tests/test_hf_families.py checks it against transformers)
    "gemma2": dict(norm="rmsnorm", norm_position="pre", ffn="geglu", kv_heads=2, head_dim=6, positions="rotary",
                   bias="none", embedding_scale=True, tie_embeddings=True, post_norms=True, attention_softcap=20.0,
                   logit_softcap=5.0, sliding_window=3, window_period=2),
    "qwen-moe": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="qkv", experts=4,
                     experts_per_token=3, shared_expert_ff=12, router_norm=False),
    # DeepSeek-MoE's shared experts, added ungated
    "deepseek-moe": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none", experts=4,
                         experts_per_token=2, shared_expert_ff=12, router_norm=False, shared_expert_gate=False),
    # Qwen3 (Llama's block, heads wider than d / heads, q and k normalised per head) and Gemma 3 (Gemma 2's block
    # without soft-capping, q and k normalised, one global layer in three here)
    "qwen3": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", kv_heads=2, head_dim=6, positions="rotary",
                  bias="none", qk_norm="head"),
    "gemma3": dict(norm="rmsnorm", norm_position="pre", ffn="geglu", kv_heads=1, head_dim=6, positions="rotary",
                   bias="none", embedding_scale=True, tie_embeddings=True, post_norms=True, qk_norm="head",
                   sliding_window=3, window_period=3),
    # OLMo 2: the norm on each branch's output (none on its input), q and k normalised over each whole projection
    "olmo2": dict(norm="rmsnorm", norm_position="output", ffn="swiglu", positions="rotary", bias="none",
                  qk_norm="projection"),
    # DeepSeek-V3's latent attention (queries through their own latent; query heads 6 + 4 wide, values 6: SDPA's
    # math path on the CPU), its first block dense, and DeepSeek-V2-Lite's (one q projection; query heads and values alike wide: the fused
    # kernel), with DeepSeek-MoE (tests/test_latent_attention.py checks both against transformers)
    "deepseek-v3": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                        head_dim=6, kv_lora_rank=8, q_lora_rank=6, qk_rope_head_dim=4, v_head_dim=6, experts=4,
                        experts_per_token=2, shared_expert_ff=8, shared_expert_gate=False, router_norm=False,
                        dense_blocks=1, dense_ff=12, expert_groups=2, group_limit=1, mtp_depth=1),
    # multi-token prediction on a dense Llama-style decoder, two modules (DeepSeek-V3's has one, above)
    "mtp": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none", mtp_depth=2),
    "deepseek-v2-lite": dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                             head_dim=4, kv_lora_rank=8, qk_rope_head_dim=2, v_head_dim=6),
}
OPTION_ARCHES = {
    "encoder": dict(arch=E, layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6, batch=3),
    "decoder": dict(arch=D, layers=2, d_model=16, heads=4, d_ff=20, vocab=13, seq_len=5, batch=2),
    "encoder-decoder": dict(arch=ED, enc_layers=2, dec_layers=1, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=7,
                            tgt_len=5, batch=2),
    "classifier": dict(arch=D, layers=2, d_model=16, heads=4, d_ff=16, vocab=9, seq_len=4, batch=3, classes=3),
}


def _grid_rules(entry, index: int, cfg) -> list:
    """The rules an option-grid case trains: every rule the model trains (others refused in one line:
    tests/test_moe.py, tests/test_mtp.py), a third of them in turn beyond the decoder LM."""
    rules = [rule for rule in rule_names() if not untrained(rule, cfg)]
    if entry["arch"] == D and not entry.get("classes"):
        return rules
    return rules[index % 3::3]


def _option_grid():
    for arch, shape in OPTION_ARCHES.items():
        index = 0
        for name, options in {**OPTION_CASES, **MODERN}.items():
            if arch == "classifier" and options.get("tie_embeddings"):
                continue  # refused: a classifier has no vocabulary to tie to (tests/test_config.py)
            if arch == "encoder-decoder" and options.get("parallel_block"):
                continue  # refused: a block with cross-attention has no parallel form
            if arch.startswith("encoder") and options.get("sliding_window"):
                continue  # refused: a window applies to a decoder's causal self-attention
            if arch != "encoder-decoder" and options.get("shared_embedding"):
                continue  # refused: one stack has no table to share
            if (shape["arch"] != D or shape.get("classes")) and options.get("mtp_depth"):
                continue  # refused: multi-token prediction follows a decoder-only LM's blocks
            if shape["arch"] != D and (options.get("kv_lora_rank") or options.get("dense_blocks")):
                continue  # refused: latent attention is a decoder's causal self-attention (and dense first blocks a
                # decoder's)
            yield pytest.param({**shape, **options}, index, id=f"{arch}-{name}")
            index += 1


@pytest.mark.parametrize("entry,index", list(_option_grid()))
def test_executed_equals_measured_under_every_option(entry, index):
    """Every option under every architecture: the decoder LM under every rule; the encoder, the encoder-decoder and
    the classifier each under a third of the rules in turn (option i under rules i mod 3, i + 3, ...), so that every
    option meets every rule and every architecture, and every rule every architecture many times (the suite's
    time: the whole product takes 290 s of it; test_option_grid_covers_every_rule_and_option_on_each_arch)."""
    cfg = canonical_model(entry, "test")
    assert not cfg.default_architecture
    rules = _grid_rules(entry, index, cfg)
    pred = predicted_rules(cfg, rules)
    for rule in rules:
        assert_cells_equal(pred[rule], measured(cfg, rule, RuleOptions()), f"{rule} {cfg.options()}")


def test_option_grid_covers_every_rule_and_option_on_each_arch():
    """The rotation above leaves no rule untrained under any architecture, and trains every option under every rule
    somewhere (the decoder LM's cases train them all)."""
    seen = {}
    for p in _option_grid():
        entry, index = p.values
        cfg = canonical_model(entry, "test")
        arch = p.id.split("-")[0] if not entry.get("classes") else "classifier"
        seen.setdefault(arch if entry["arch"] != ED else "encoder-decoder", set()).update(_grid_rules(entry, index, cfg))
    assert all(rules == set(rule_names()) for rules in seen.values()) and len(seen) == 4


def test_option_grid_covers_every_option_value():
    from trainingcost.config.model import OPTION_CHOICES, OPTION_DEFAULTS

    entries = [p.values[0] for p in _option_grid()]
    for name, choices in OPTION_CHOICES.items():
        assert set(choices) <= {e.get(name, OPTION_DEFAULTS[name]) for e in entries}, name
    for name in OPTION_DEFAULTS:
        assert any(name in e for e in entries), name
    assert {e["arch"] for e in entries} == {E, D, ED}
