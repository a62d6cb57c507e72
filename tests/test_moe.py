"""Mixture of experts (Mixtral, Qwen-MoE): the configuration, the model, the counts against transformers and the
meter, the rules that train it and those that refuse it, the memory tape (token-balanced, and with a measured
step's recorded routing equal to the meter to the byte), and the plan's expert parallelism.

The analytic model counts FLOPs by the k experts each token uses and parameters by all experts. Its FLOPs are exact
for any routing, not only a balanced one: every expert is linear in its rows, so the sum over experts of
rows_e x d x d_ff is (rows routed in all) x d x d_ff = tokens x k x d x d_ff. The test below checks this claim with
the routing forced onto one expert.
"""

import pytest
import torch

from trainingcost.analytic import layer_table
from trainingcost.analytic.catalogue import check_architecture
from trainingcost.analytic.memory import memory_table
from trainingcost.analytic.plan import PlanSpec, Efficiency, all_to_all_bytes, check_spec, memory_per_gpu
from trainingcost.analytic.plan_facts import model_facts
from trainingcost.config import ConfigError, RuleOptions, canonical_model, configs_frame
from trainingcost.config.hardware import device as hardware_device
from trainingcost.config.hf import check_window, hf_entry, with_overrides
from trainingcost.config.presets import PRESETS
from trainingcost.train.registry import make_rule, rule_names
from trainingcost.analytic.catalogue import rule as rule_spec

from torch_helpers import batch_of, model_of
from test_executed import assert_cells_equal, measured, predicted

MIXTRAL_LIKE = dict(arch="decoder", layers=2, d_model=16, heads=4, kv_heads=2, d_ff=24, vocab=11, seq_len=6, batch=3,
                    norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none", experts=4,
                    experts_per_token=2)
QWEN_LIKE = dict(MIXTRAL_LIKE, bias="qkv", shared_expert_ff=20, router_norm=False, experts=5, experts_per_token=3)
# post-LN, GELU experts with biases, top-1 routing (Switch), in both stacks of an encoder-decoder
SWITCH_LIKE = dict(arch="encoder-decoder", enc_layers=1, dec_layers=2, d_model=16, heads=4, d_ff=24, vocab=11,
                   seq_len=7, tgt_len=5, batch=2, experts=3, experts_per_token=1)
# with the dense families' options: a parallel block (one norm), a sliding window, a shared expert
PARALLEL_LIKE = dict(MIXTRAL_LIKE, parallel_block="one_norm", sliding_window=4, shared_expert_ff=12)
# DeepSeek-MoE's shared experts (n_shared x moe_intermediate_size wide), added ungated
DEEPSEEK_LIKE = dict(MIXTRAL_LIKE, shared_expert_ff=16, shared_expert_gate=False, router_norm=False, experts=6,
                     experts_per_token=2)
TRAINING = [name for name in rule_names() if rule_spec(name).trains_experts]


# -- configuration -----------------------------------------------------------------------------------------------


def test_the_options_are_checked_in_one_line():
    for entry, field in ((dict(MIXTRAL_LIKE, experts=0), "experts_per_token"),
                         ({k: v for k, v in MIXTRAL_LIKE.items() if k != "experts_per_token"}, "experts_per_token"),
                         (dict(MIXTRAL_LIKE, experts_per_token=5), "experts_per_token"),
                         (dict(MIXTRAL_LIKE, experts=0, experts_per_token=0, shared_expert_ff=8), None)):
        with pytest.raises(ConfigError) as error:
            canonical_model(entry)
        assert "\n" not in str(error.value) and (field is None or field in str(error.value))


def test_a_dense_model_keeps_its_config_id_and_its_columns():
    dense = {k: v for k, v in MIXTRAL_LIKE.items() if k not in ("experts", "experts_per_token")}
    cfg = canonical_model(dense)
    assert not cfg.moe and canonical_model(dict(dense, experts=0)).config_id == cfg.config_id
    assert "experts" not in configs_frame([("", cfg)]).columns  # the default sweep's tables stay byte-identical
    moe = canonical_model(MIXTRAL_LIKE)
    frame = configs_frame([("dense", cfg), ("moe", moe)])
    assert list(frame["experts"]) == [0, 4] and moe.config_id != cfg.config_id


# -- the model and its counts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", [MIXTRAL_LIKE, QWEN_LIKE, SWITCH_LIKE, PARALLEL_LIKE, DEEPSEEK_LIKE],
                         ids=["mixtral", "qwen-moe", "switch", "parallel-windowed", "deepseek-moe"])
def test_parameters_and_executed_flops_equal_the_meter_under_every_training_rule(entry):
    cfg = canonical_model(entry)
    model = model_of(cfg)
    params = int(memory_table(configs_frame([("", cfg)]), ["bp"], ["fp32"], ["adam"]).parameter_count.iloc[0])
    assert params == sum(p.numel() for p in model.parameters())
    for rule in TRAINING:
        assert_cells_equal(predicted(cfg, rule), measured(cfg, rule, RuleOptions()), rule)


def test_the_count_is_exact_however_unbalanced_the_routing():
    """Every token routed to the same k experts (the router's weights zeroed, its bias-free logits all 0: top-k takes
    the first k): the meter counts the same FLOPs as for a balanced routing, tokens x k rows in all."""
    cfg = canonical_model(MIXTRAL_LIKE)
    model = model_of(cfg, dtype=torch.float32)
    rows = {}
    for name, module in model.named_modules():
        if name.endswith(".router"):
            torch.nn.init.zeros_(module.weight)
        if ".experts." in name and name.endswith(".up"):
            module.register_forward_hook(lambda m, args, out, name=name: rows.__setitem__(name, args[0].shape[0]))
    from torch_helpers import count_step, by_analytic_phase

    counts = by_analytic_phase(count_step(make_rule("bp", model, RuleOptions()), batch_of(cfg)))
    assert_cells_equal(predicted(cfg, "bp"), counts, "bp, every token on experts 0 and 1")
    tokens = cfg.batch * cfg.seq_len
    per_block = {}
    for name, n in rows.items():
        per_block.setdefault(name.split(".experts.")[0], []).append(n)
    assert all(sorted(n) == [tokens, tokens] for n in per_block.values()), per_block  # k = 2 experts, all tokens


def test_the_router_is_softmax_then_top_k_renormalised_as_transformers_mixtral():
    cfg = canonical_model(MIXTRAL_LIKE)
    moe = model_of(cfg, dtype=torch.float32).get_submodule("decoder.0.ffn")
    x = torch.randn(7, cfg.d_model)
    chosen, weights = moe.route(x)
    p = torch.softmax(x @ moe.router.weight.t(), dim=-1)
    top, index = p.topk(2, dim=-1)
    assert torch.equal(chosen, index) and torch.allclose(weights, top / top.sum(-1, keepdim=True))
    y = moe(x[None])[0]
    by_hand = torch.stack([sum(w * moe.experts[int(e)](row[None])[0] for e, w in zip(es, ws))
                           for row, es, ws in zip(x, chosen, weights)])
    assert torch.allclose(y, by_hand, atol=1e-6)


# -- against transformers ----------------------------------------------------------------------------------------


def _hf(model_type: str, implementation: str):
    transformers = pytest.importorskip("transformers")
    common = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=2, vocab_size=61, max_position_embeddings=64, attn_implementation="sdpa",
                  experts_implementation=implementation)
    if model_type == "mixtral":
        config = transformers.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **common)
        return config, transformers.MixtralForCausalLM(config)
    if model_type == "qwen3_moe":  # Qwen3's attention (q and k normalised per head), experts without a shared one
        config = transformers.Qwen3MoeConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                             norm_topk_prob=True, head_dim=12, **common)
        return config, transformers.Qwen3MoeForCausalLM(config)
    if model_type == "olmoe":  # q and k normalised over each whole projection, experts of intermediate_size, top-2
        config = transformers.OlmoeConfig(num_experts=4, num_experts_per_tok=2, **common)
        return config, transformers.OlmoeForCausalLM(config)
    config = transformers.Qwen2MoeConfig(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                         shared_expert_intermediate_size=40, **common)
    return config, transformers.Qwen2MoeForCausalLM(config)


def _hf_step(model, config, batch: int, length: int) -> int:
    from torch.utils.flop_counter import FlopCounterMode
    from test_hf_models import CPU_ATTENTION

    torch.manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch, length))
    model.train()
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe"])
@pytest.mark.parametrize("length", [12, 20])
def test_parameters_and_executed_flops_equal_the_hugging_face_model(model_type, length):
    """transformers' experts_implementation "eager" runs each expert on its gathered rows (modeling_mixtral.py's
    MixtralExperts): FlopCounterMode counts those products and the router's; the dispatch (one_hot, topk, where,
    index_add_) does no counted work. "grouped_mm" (its default where torch has it) runs the experts in one
    torch._grouped_mm, for which FlopCounterMode has no formula: blind to the experts, it counts the rest, and the
    experts' products by hand (forward, input and weight gradients: 3 x (4 + 2) T k d ff per layer) make it whole."""
    batch = 2
    config, model = _hf(model_type, "eager")
    cfg = canonical_model(check_window(with_overrides(hf_entry(config.to_dict()), {"seq_len": length, "batch": batch}),
                                       "test"))
    frame = configs_frame([("", cfg)])
    assert int(memory_table(frame, ["bp"]).parameter_count.iloc[0]) == model.num_parameters()
    executed = int(layer_table(frame, ["bp"], ["executed"]).flops.sum())
    assert _hf_step(model, config, batch, length) == executed
    config, model = _hf(model_type, "grouped_mm")
    if config._experts_implementation != "grouped_mm":
        return  # no grouped_mm in this torch: transformers fell back to eager, counted above
    blind = 3 * 6 * batch * length * cfg.experts_per_token * cfg.d_model * cfg.d_ff * cfg.layers
    assert _hf_step(model, config, batch, length) + blind == executed


def test_config_json_mappings_and_refusals():
    mixtral = dict(model_type="mixtral", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100, max_position_embeddings=128,
                   num_local_experts=8, num_experts_per_tok=2, sliding_window=None)
    entry = hf_entry(mixtral)
    assert entry["experts"] == 8 and entry["experts_per_token"] == 2 and entry["d_ff"] == 96
    for key, value in (("router_jitter_noise", 0.1),):
        with pytest.raises(ConfigError, match=key):
            hf_entry(dict(mixtral, **{key: value}))
    windowed = canonical_model(check_window(hf_entry(dict(mixtral, sliding_window=64)), "x"))  # a window: an option
    assert windowed.sliding_window == 64 and windowed.moe
    qwen = dict(model_type="qwen2_moe", hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                shared_expert_intermediate_size=80, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                vocab_size=100, max_position_embeddings=128, num_experts=6, num_experts_per_tok=2)
    entry = hf_entry(qwen)
    assert (entry["d_ff"], entry["shared_expert_ff"], entry["router_norm"], entry["bias"]) == (32, 80, False, "qkv")
    for key, value in (("decoder_sparse_step", 2), ("mlp_only_layers", [0])):
        with pytest.raises(ConfigError, match=key):
            hf_entry(dict(qwen, **{key: value}))
    llama = dict(mixtral, model_type="llama")
    with pytest.raises(ConfigError, match="num_local_experts: mixture of experts is not supported"):
        hf_entry(llama)


# -- learning rules ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", TRAINING)
def test_every_training_rule_updates_the_router_and_the_experts(rule):
    cfg = canonical_model(QWEN_LIKE)
    model = model_of(cfg, dtype=torch.float32)
    names = ("decoder.0.ffn.router.weight", "decoder.1.ffn.experts.0.down.weight", "decoder.0.ffn.shared_expert_gate.weight")
    before = {n: p.detach().clone() for n, p in model.named_parameters() if n in names}
    step = make_rule(rule, model, RuleOptions(lr=0.1))
    for seed in range(2):
        step.step(batch_of(cfg, seed))
    after = dict(model.named_parameters())
    assert all(not torch.equal(before[n], after[n]) for n in names), rule


def test_pepita_and_mempepita_refuse_in_one_line_before_anything_runs():
    cfg = canonical_model(MIXTRAL_LIKE)
    refused = [name for name in rule_names() if not rule_spec(name).trains_experts]
    assert refused == ["pepita", "mempepita"]
    for name in refused:
        with pytest.raises(ConfigError) as error:
            check_architecture(name, cfg, "--rule")
        text = str(error.value)
        assert "\n" not in text and text.startswith(f"--rule: {name} does not train a mixture of experts")
        assert text.endswith("allowed with experts: " + ", ".join(TRAINING))
    from trainingcost.config.training import TrainSpec
    from trainingcost.train.run import run_steps

    with pytest.raises(ConfigError, match="pepita does not train"):
        run_steps(TrainSpec(cfg=cfg.replace(vocab=256), task="lm", rule="pepita", steps=1))
    dense = {k: v for k, v in MIXTRAL_LIKE.items() if k not in ("experts", "experts_per_token")}
    check_architecture("pepita", canonical_model(dense))  # a dense model: PEPITA trains it


# -- memory ------------------------------------------------------------------------------------------------------


def test_the_tape_replays_a_mixture_token_balanced_under_every_training_rule():
    """The analytic table's tape: token-balanced routing (tape/moe.py); PEPITA and MEMPEPITA, which refuse a mixture,
    have no peaks (-1)."""
    frame = configs_frame([("", canonical_model(MIXTRAL_LIKE)), ("", canonical_model(QWEN_LIKE))])
    table = memory_table(frame, list(rule_names()), ["fp32"], ["adam"])
    trained = table.rule.isin(TRAINING)
    assert (table[trained].peak > table[trained].step_start).all() and (table[trained].peak_forward > 0).all()
    assert (table[~trained].peak == -1).all() and (table.total > 0).all()
    qwen = canonical_model(QWEN_LIKE)
    model = model_of(qwen)
    row = table[(table.config_id == qwen.config_id) & (table.rule == "bp")].iloc[0]
    assert row.optimizer_state == 4 * (2 * row.parameter_count + len(list(model.parameters())))


def test_token_balanced_routing_spreads_the_remainder_over_the_first_experts():
    from trainingcost.analytic.tape.moe import Routing

    assert [int(n) for n in Routing.balanced(18, 2, 4)] == [9, 9, 9, 9]
    assert [int(n) for n in Routing.balanced(7, 3, 5)] == [5, 4, 4, 4, 4]  # 21 rows: 4 each, one more for the first
    assert [int(n) for n in Routing.balanced(1, 2, 8)] == [1, 1, 0, 0, 0, 0, 0, 0]


# Mixtures wide enough that experts with the same rows come in runs of five or more (token-balanced: 36 rows over 13
# experts, 3 rows for the first 10; a shared expert; two stacks; an encoder; experts with no rows at all).
WIDE_CASES = [dict(MIXTRAL_LIKE, experts=13), dict(QWEN_LIKE, experts=17), dict(SWITCH_LIKE, experts=11),
              dict(PARALLEL_LIKE, experts=9), dict(QWEN_LIKE, arch="encoder", classes=3, positions="none", kv_heads=4,
                                                   experts=12), dict(MIXTRAL_LIKE, experts=40, experts_per_token=1,
                                                                     batch=1)]


def test_the_fast_replay_of_experts_and_of_adam_equals_the_op_by_op_replay(monkeypatch):
    """tape/moe.py replays a run of experts with the same rows by its two first and two last experts, and
    programs.optimizer_step takes AdamW's loop at its highest point; with the tape's event log on, both replay op by
    op. Every peak, every phase's and the step's start equal to the byte under every rule that trains a mixture,
    token-balanced and with a recorded routing of uneven runs."""
    from trainingcost.analytic.tape import buffers, moe

    skipped = []
    original = moe._skipped
    monkeypatch.setattr(moe, "_skipped", lambda *a: skipped.append(a[2:]) or original(*a))
    frame = configs_frame([("", canonical_model(entry)) for entry in WIDE_CASES])
    uneven = canonical_model(dict(MIXTRAL_LIKE, experts=16, experts_per_token=2))  # 36 rows: runs of 6, 1, 5, 4
    layers = [name for name, _ in cfg_layers(uneven) if name.endswith(".ffn")]
    record = [(layer, [3] * 6 + [1] + [2] * 5 + [1, 1, 0, 0]) for layer in layers]

    def tables():
        return [memory_table(frame, TRAINING, [dtype], [optimizer]) for dtype, optimizer in
                [("fp32", "sgd"), ("bf16", "adam"), ("fp32", "momentum")]] + \
            [memory_table(configs_frame([("", uneven)]), [rule], ["fp32"], ["adam"], routing=record)
             for rule in ("bp", "dfa")]  # (one call per mixture: TP's and DTP's reruns call it again)

    fast = tables()
    assert len(skipped) > 100 and {(first, last) for first, last in skipped} >= {(0, 9), (0, 5), (7, 11)}
    init = buffers.Tape.__init__

    def logged(self, start):
        init(self, start)
        self.events = []

    monkeypatch.setattr(buffers.Tape, "__init__", logged)
    skipped.clear()
    slow = tables()
    assert not skipped
    for a, b in zip(fast, slow):
        columns = [c for c in a.columns if c.startswith("peak") or c == "step_start"]
        assert (a[columns] >= -1).all().all() and a[columns].equals(b[columns])


MOE_CASES = {"mixtral": MIXTRAL_LIKE, "qwen-moe": QWEN_LIKE, "switch": SWITCH_LIKE, "deepseek-moe": DEEPSEEK_LIKE,
             # DeepSeek-MoE's first block dense (first_k_dense_replace), its FFN dense_ff wide
             "deepseek-dense-first": dict(DEEPSEEK_LIKE, layers=3, dense_blocks=1, dense_ff=28),
             # a pre-LN classifier without rotary: DFA's per-sequence error reaches a mixture's output through the
             # residual, expanded, and the mixture's reshape copies it; every allocation checked equal while written
             "classifier": dict(QWEN_LIKE, arch="encoder", classes=3, positions="none", kv_heads=4)}


def _metered_with_routing(entry, rule: str, optimizer: str, dtype: str, zero_router=False):
    """A measured step's meter reading (with the routing it recorded) of ``entry`` under ``rule``."""
    from trainingcost.config.training import TrainSpec
    from trainingcost.measure.recorder import StepRecorder
    from trainingcost.train.run import run_steps

    task = "copy" if entry["arch"] == "encoder-decoder" else "classify" if entry.get("classes") else "lm"
    cfg = canonical_model(dict(entry, vocab=entry["vocab"] + (0 if task == "classify" else 256)))  # bytes: 256 ids
    spec = TrainSpec(cfg=cfg, task=task, rule=rule, steps=3, seed=0, measure=True, dtype=dtype, warmup=1,
                     options=RuleOptions(optimizer=optimizer))
    recorders = []

    def observe(r, device):
        recorder = StepRecorder(r, device, 1)
        recorders.append(recorder)
        if zero_router:  # before every step, every router's logits 0: top k takes the first k experts for every token
            routers = [m.weight for name, m in r.model.named_modules() if name.endswith(".router")]
            run = recorder.run

            def zeroed(step, batch):
                with torch.no_grad():
                    for weight in routers:
                        weight.zero_()  # (in place: nothing the meter sees, and before it starts)
                return run(step, batch)

            recorder.run = zeroed
        return recorder

    torch.set_num_threads(1)
    done = run_steps(spec, observe)
    assert done.status == "ok", (rule, done.message)
    return cfg, recorders[0].memory


def _tape_and_meter(cfg, rule, optimizer, dtype, reading, routing):
    from trainingcost.analytic.tape import STEP_PHASES

    row = memory_table(configs_frame([("", cfg)]), [rule], [dtype], [optimizer], routing=routing).iloc[0]
    got = {"start": int(row.step_start), "peak": int(row.peak),
           **{p: int(row[f"peak_{p}"]) for p in STEP_PHASES if row[f"peak_{p}"] >= 0}}
    return got, {"start": reading.start, "peak": reading.peak, **reading.phase_peaks}


@pytest.mark.parametrize("family", sorted(MOE_CASES))
def test_the_tape_replayed_with_the_recorded_routing_equals_the_meter_to_the_byte(family):
    """Each rule that trains a mixture (its own tape program or autograd's), SGD fp32 and Adam bf16 alternating: the
    measured step records the rows each expert got in each call (``MemoryReading.routing``: TP's and DTP's reruns
    of a block included), and the tape replayed with them equals the tensor meter at the step's start, its peak and
    every phase's peak."""
    mismatches = []
    for index, rule in enumerate(TRAINING):
        optimizer, dtype = [("sgd", "fp32"), ("adam", "bf16")][index % 2]
        cfg, reading = _metered_with_routing(MOE_CASES[family], rule, optimizer, dtype)
        moe_layers = {name for name, kind in cfg_layers(cfg) if kind == "moe"}
        assert {layer for layer, _ in reading.routing} == moe_layers
        assert all(sum(counts) == rows_of(cfg, layer) * cfg.experts_per_token for layer, counts in reading.routing)
        got, want = _tape_and_meter(cfg, rule, optimizer, dtype, reading, reading.routing_record())
        if got != want:
            mismatches.append((family, rule, optimizer, dtype, got, want, reading.routing_record()))
    assert not mismatches, mismatches[:3]


def cfg_layers(cfg):
    from trainingcost.analytic.layers import layer_plan

    return layer_plan(cfg)


def rows_of(cfg, layer: str) -> int:
    return cfg.batch * cfg.rows(layer.split(".")[0])


def test_a_measured_run_records_its_routing_and_the_comparison_replays_it():
    """The run's ``tensor_routing`` column (JSON: the calls and the experts primed), and the comparison's predicted
    peak for it: the tape replayed with
    that routing, equal to the run's tensor peak (the memory table's, token-balanced, is replaced: set to 0 here to
    show it)."""
    import json
    import warnings

    from trainingcost.analytic import layer_table as analytic_table
    from trainingcost.config.training import TrainSpec
    from trainingcost.findings.comparison import comparison_table
    from trainingcost.measure.run import train

    cfg = canonical_model(dict(QWEN_LIKE, vocab=QWEN_LIKE["vocab"] + 256))
    spec = TrainSpec(cfg=cfg, task="lm", rule="dfa", steps=3, seed=0, measure=True, warmup=1)
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (no op trace of a mixture's step: docs/cost_models.md)
        result = train(spec)
    assert result.status == "ok", result.message
    record = json.loads(result.measured["tensor_routing"].iloc[0])
    routing = record["calls"]
    assert [layer for layer, _ in routing] == ["decoder.0.ffn", "decoder.1.ffn"]
    assert all(sum(counts) == cfg.batch * cfg.seq_len * cfg.experts_per_token for _, counts in routing)
    assert list(record["primed"]) == ["decoder.0.ffn", "decoder.1.ffn"]  # (and the experts primed at its start)
    assert all(len(held["grad"]) == len(held["state"]) == cfg.experts for held in record["primed"].values())
    frame = configs_frame([("", cfg)])
    balanced = memory_table(frame, ["dfa"]).assign(peak=0)  # (here its step peak is the loss's, routing aside)
    comparison = comparison_table(analytic_table(frame, ["dfa"], ["executed"]), result.measured, balanced)
    step = comparison[comparison.granularity == "step"].iloc[0]
    assert step.predicted_memory_bytes == step.measured_tensor_peak_bytes == result.summary["tensor_peak_bytes"]


def test_the_routing_decides_the_peaks_and_unused_experts_have_no_gradient():
    """Every token routed to the same 2 of 4 experts (the routers zeroed before each step: top k of equal logits): the
    other two run nothing and have no gradient. The tape with the recorded routing, and the experts primed when the step
    began, equals the meter at its start and every peak; with the calls alone (an older run's record: every expert
    primed) the start counts the unused experts' gradients of the step before, by exactly their bytes. Token-balanced, the tape gives every expert a gradient: its optimizer phase is not the meter's here."""
    cfg, reading = _metered_with_routing(MIXTRAL_LIKE, "bp", "sgd", "fp32", zero_router=True)
    tokens = cfg.batch * cfg.seq_len
    assert all(sorted(counts) == [0, 0, tokens, tokens] for _, counts in reading.routing), reading.routing  # (ties)
    got, want = _tape_and_meter(cfg, "bp", "sgd", "fp32", reading, reading.routing_record())
    assert got == want  # (the experts primed when the step began recorded beside the routing)
    got, _ = _tape_and_meter(cfg, "bp", "sgd", "fp32", reading, reading.routing)  # the calls alone: all primed
    unused = 2 * cfg.layers * 3 * cfg.d_model * cfg.d_ff * 4  # 2 experts per layer, 3 fp32 matrices each
    assert got.pop("start") - want.pop("start") == unused
    assert got == want
    balanced, _ = _tape_and_meter(cfg, "bp", "sgd", "fp32", reading, None)
    balanced.pop("start")
    assert balanced["forward"] == want["forward"]  # the forward's bytes follow the rows routed in all (M k), however
    assert balanced["optimizer_step"] - want["optimizer_step"] == unused  # spread; balanced, every expert has a gradient


# An expert forced out of every token's top k (its router logit lowered by 1e4), or into it (raised), step by step:
# per step of a schedule, one flag per expert (-1 out, +1 in, 0 the router's choice). Three steps: two before the
# metered one (step 3), so that an expert may hold optimizer state but no gradient when the step begins.
SCHEDULES = {
    "late": [[0, 0, 0, -1], [0, 0, 0, -1], [-1, 0, 0, 1]],  # no rows before the metered step, then rows: state made
    "never": [[0, 0, 0, -1]] * 3,  # no rows at all: no gradient, no state, never stepped
    "lapsed": [[0, 0, 0, 1], [0, 0, 0, -1], [0, 0, 0, 1]],  # state, but no gradient at the start; stepped again
    "dropped": [[0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, -1]],  # a gradient and state at the start; not stepped
}
# Shapes beside the ones above: gated experts with biases (odd widths), top-1 over three experts in an
# encoder-decoder's two stacks, a shared expert; the schedule's last expert is each model's last.
SCHEDULE_CASES = {
    "gated-biased": dict(arch="decoder", layers=2, d_model=12, heads=3, d_ff=20, vocab=13, seq_len=5, batch=2,
                         norm="layernorm", norm_position="pre", ffn="geglu", positions="learned", bias="all",
                         experts=4, experts_per_token=2),
    "switch": SWITCH_LIKE,
    "qwen-moe": QWEN_LIKE,
}


def _metered_with_schedule(entry, rule, optimizer, dtype, schedule):
    """The metered third step of ``entry`` under ``rule``, each mixture's router logits offset per ``schedule`` (a
    forward hook, in place and without autograd: no tensor the meter counts, no node)."""
    from trainingcost.config.training import TrainSpec
    from trainingcost.measure.recorder import StepRecorder
    from trainingcost.train.run import run_steps

    task = "copy" if entry["arch"] == "encoder-decoder" else "classify" if entry.get("classes") else "lm"
    cfg = canonical_model(dict(entry, vocab=entry["vocab"] + (0 if task == "classify" else 256)))
    spec = TrainSpec(cfg=cfg, task=task, rule=rule, steps=4, seed=0, measure=True, dtype=dtype, warmup=2,
                     options=RuleOptions(optimizer=optimizer))
    recorders = []

    def observe(r, device):
        recorder = StepRecorder(r, device, 2)
        recorders.append(recorder)
        routers = [m for name, m in r.model.named_modules() if name.endswith(".router")]
        E = cfg.experts
        offsets = [torch.tensor([1e4 * f for f in ([0] * (E - len(flags)) + flags)[-E:]], dtype=routers[0].weight.dtype)
                   for flags in schedule]  # (made before any step: alive at the meter's start, not the step's)
        now = {}

        def hook(module, args, output):
            with torch.no_grad():
                output.add_(offsets[min(now["step"], 3) - 1])  # (the timed step after: as the metered)

        for router in routers:
            router.register_forward_hook(hook)
        run = recorder.run

        def scheduled(step, batch):
            now["step"] = step
            return run(step, batch)

        recorder.run = scheduled
        return recorder

    torch.set_num_threads(1)
    done = run_steps(spec, observe)
    assert done.status == "ok", (rule, done.message)
    return cfg, recorders[0].memory


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_experts_not_primed_before_the_metered_step_the_tape_equals_the_meter(schedule, optimizer):
    """An expert that no row reached in the steps before the metered one holds no gradient (and under momentum or Adam
    no optimizer state) when it begins: the recorder records which experts hold each (``MemoryReading.primed``), and the
    tape, replayed with it, leaves theirs out of the start and makes their state where torch.optim does (Adam before
    its loop, momentum's buffer in it), equal to the meter at the start, the peak and every phase's peak. Each shape
    under one rule that trains a mixture (autograd's program and their own), fp32 and bf16. Replayed with the calls
    alone (an older run's record), every expert counts as primed: the start is off by the unprimed experts' bytes."""
    flags = SCHEDULES[schedule]
    mismatches = []
    for index, (family, entry) in enumerate(sorted(SCHEDULE_CASES.items())):
        rule = TRAINING[(3 * index + sorted(SCHEDULES).index(schedule) + 2 * ["sgd", "momentum", "adam"].index(optimizer))
                        % len(TRAINING)]  # (every rule; KP, with weight decay, under momentum for "late")
        dtype = ["fp32", "bf16"][index % 2]
        cfg, reading = _metered_with_schedule(entry, rule, optimizer, dtype, flags)
        last = cfg.experts - 1
        before = [step[-1] for step in flags[:2]]  # the last expert's flag in the two steps before
        for layer, held in reading.primed.items():  # what the recorder saw, as the schedule makes it
            assert held["grad"][last] == (before[1] == 1), (layer, held)
            assert held["state"][last] == (optimizer != "sgd" and 1 in before), (layer, held)
        assert all((counts[last] > 0) == (flags[2][-1] > 0) for _, counts in reading.routing), reading.routing
        record = reading.routing_record()
        got, want = _tape_and_meter(cfg, rule, optimizer, dtype, reading, record)
        if got != want:
            mismatches.append((family, rule, optimizer, dtype, got, want, record))
        unprimed = any(not all(held["grad"]) or not all(held["state"]) and optimizer != "sgd"
                       for held in reading.primed.values())
        calls_only, _ = _tape_and_meter(cfg, rule, optimizer, dtype, reading, record["calls"])
        assert (calls_only["start"] > want["start"]) == unprimed, (family, rule, calls_only["start"], want["start"])
    assert not mismatches, mismatches[:3]


def test_the_routing_record_reads_back_from_json_and_the_old_list():
    """``tensor_routing`` holds {"calls", "primed"}; a list of calls alone (older runs) still replays, every expert
    primed; a primed layer of the wrong expert count is refused."""
    import json

    from trainingcost.analytic.tape.moe import Routing
    from trainingcost.measure.memory import MemoryReading
    from trainingcost.measure.recorder import tensor_memory_columns

    reading = MemoryReading(10, 20, "", "forward", "", 10, routing=[("decoder.0.ffn", (3, 0, 3, 0))],
                            primed={"decoder.0.ffn": {"grad": [True, False, True, False], "state": [True] * 4}})
    column = tensor_memory_columns(reading)["tensor_routing"]
    assert json.loads(column) == reading.routing_record()
    cfg = canonical_model(dict(MIXTRAL_LIKE, layers=1))
    frame = configs_frame([("", cfg)])
    new, old = (memory_table(frame, ["bp"], ["fp32"], ["adam"], routing=r).iloc[0]
                for r in (json.loads(column), [["decoder.0.ffn", [3, 0, 3, 0]]]))
    expert = 3 * cfg.d_model * cfg.d_ff  # a SwiGLU expert's three matrices
    assert old.step_start - new.step_start == 2 * expert * 4  # two experts without last step's gradient
    assert Routing(json.loads(column)).held(_group(cfg), "decoder.0.ffn", "grad") == [True, False, True, False]
    assert memory_table(frame, ["bp"]).step_start.iloc[0] == memory_table(frame, ["bp"], executed=False).step_start.iloc[0]
    with pytest.raises(ValueError, match="experts primed"):
        Routing({"calls": [], "primed": {"decoder.0.ffn": {"grad": [True], "state": [True]}}}).held(
            _group(cfg), "decoder.0.ffn", "grad")


def _group(cfg):
    import numpy as np

    from trainingcost.analytic.tape import Group, groups

    frame = configs_frame([("", cfg)])
    (rows, key), = groups(frame)
    return Group.of(frame, np.asarray(rows), key, 4)


def test_the_moe_presets_are_replayed_at_their_published_size():
    # (DeepSeek's presets: the tape has no latent attention or dense first blocks yet, tests/test_latent_attention.py)
    frame = configs_frame([(name, canonical_model(entry, name)) for name, entry in PRESETS.items()
                           if entry.get("experts") and not entry.get("kv_lora_rank")])
    table = memory_table(frame, ["bp", "dfa", "tp", "lra", "wm"])
    assert len(frame) >= 2 and (table.peak > table.step_start).all() and (table.peak_forward > 0).all()


def test_presets_have_their_published_parameter_counts():
    for name, count in (("mixtral-8x7b", 46_702_792_704), ("qwen1.5-moe-a2.7b", 14_315_784_192)):
        cfg = canonical_model(PRESETS[name])
        assert int(memory_table(configs_frame([("", cfg)]), ["bp"], executed=False).parameter_count.iloc[0]) == count


# -- plan: expert parallelism ------------------------------------------------------------------------------------


def _spec(**changes):
    return PlanSpec(**{"tokens": 1e9, "gpus": 16, "efficiency": Efficiency("mfu", 0.4, "given"), **changes})


def test_the_expert_parallel_degree_is_checked_in_one_line():
    cfg = canonical_model(PRESETS["mixtral-8x7b"])
    gpu = hardware_device("h100-sxm")
    for changes, words in ((dict(ep=3), "does not divide the 8 experts"), (dict(ep=8, gpus=12), "12 GPUs"),
                           (dict(ep=8, tp=4), "data-parallel degree 4"), (dict(ep=0), "positive integer")):
        with pytest.raises(ConfigError, match=words) as error:
            check_spec(_spec(**changes), cfg, gpu)
        assert str(error.value).startswith("ep: ") and "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="needs a mixture of experts"):
        check_spec(_spec(ep=2), canonical_model(PRESETS["llama-2-7b"]), gpu)
    check_spec(_spec(ep=8), cfg, gpu)


def test_all_to_all_bytes_and_expert_memory():
    cfg = canonical_model(PRESETS["mixtral-8x7b"]).replace(seq_len=4096)
    spec = _spec(ep=8, sharding="none", precision="bf16-mixed")
    assert all_to_all_bytes(cfg, spec, 2) == 2 * 4096 * 2 * 4096 * 2 * 7 / 8
    assert all_to_all_bytes(cfg, _spec(ep=1), 2) == 0
    facts = model_facts(cfg, ["bp"], "adam")
    one, eight = (memory_per_gpu(facts, _spec(ep=ep, sharding="none"), "bp", 0)["parameters"] for ep in (1, 8))
    experts = facts.expert_parameters
    assert one - eight == pytest.approx(2 * experts * 7 / 8)  # bf16 weights: 7/8 of the experts elsewhere
    sharded = [memory_per_gpu(facts, _spec(ep=ep, sharding="zero3"), "bp", 0)["parameters"] for ep in (1, 8)]
    assert sharded[0] == pytest.approx(sharded[1])  # ZeRO-3: 1/dp of everything either way


def test_the_workflow_refuses_pepita_on_a_mixture_of_experts_before_any_job():
    from trainingcost.pipeline import load, train_jobs

    model = dict(MIXTRAL_LIKE, name="moe", vocab=256)
    ok = {"sweep": {"models": [model]}, "train": {"select": ["moe"], "rules": ["bp", "dfa"]}}
    assert {job.rule for job in train_jobs(load(ok))} == {"bp", "dfa"}
    refused = {"sweep": {"models": [model]}, "train": {"select": ["moe"], "rules": ["bp", "pepita"]}}
    with pytest.raises(ConfigError) as error:
        train_jobs(load(refused))
    assert str(error.value).startswith("train.rules: sweep entry 'moe'") and "pepita does not train" in str(error.value)


def test_the_predicted_step_prices_the_all_to_alls_and_the_plan_reports_their_bytes():
    from trainingcost.analytic.plan import plan_table

    cfg = canonical_model(PRESETS["mixtral-8x7b"]).replace(seq_len=4096)
    gpu = hardware_device("h100-sxm")
    spec = dict(tokens=1e12, gpus=64, efficiency=Efficiency("predicted", 0.0, "predicted"), global_batch=128)
    rows = {ep: plan_table(cfg, PlanSpec(**spec, ep=ep), gpu, ["bp"], ["executed"]).iloc[0] for ep in (1, 8)}
    assert rows[1]["ep_all_to_all_bytes"] == 0 and rows[1]["step_comm_ep_s"] == 0
    one = rows[8]
    micro, accumulation = one["micro_batch"], one["grad_accumulation"]
    per_all_to_all = micro * 4096 * 2 * 4096 * 2 * 7 / 8  # tokens x k x d x bf16 x (ep - 1) / ep
    assert one["ep_all_to_all_bytes"] == pytest.approx(accumulation * 4 * 32 * per_all_to_all)  # 4 per layer, 32 layers
    assert one["step_comm_ep_s"] > 0 and one["mem_parameters"] == pytest.approx(rows[1]["mem_parameters"])  # ZeRO-3


@pytest.mark.parametrize("extra", [[], ["--cost-model", "all"], ["--layout", "search"],
                                   ["--layout", "search", "--gpus", "16,32"]])
def test_the_plan_marks_the_rules_that_price_a_mixture_but_do_not_train_it(capsys, extra):
    """PEPITA and MEMPEPITA refuse to train a mixture of experts (docs/learning_rules.md); the plan still prices them,
    so every view of it marks them (``pepita*`` and a footnote) and its table says so (``trains_model``); a dense
    model marks none."""
    from trainingcost import cli
    from trainingcost.analytic.plan import plan_table

    args = ["plan", "--preset", "mixtral-8x7b", "--seq-len", "2048", "--gpu", "h100-sxm", "--gpus", "16",
            "--rule", "bp,pepita,mempepita", "--tokens", "1e9", "--global-batch", "32", *extra]
    if "16,32" in extra:
        args[args.index("--gpus") + 1:args.index("--gpus") + 2] = []
        args.remove("--gpus")
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "pepita*" in out and "mempepita*" in out and "bp*" not in out
    assert "* pepita, mempepita: priced, not trained: they do not train a mixture of experts" in out
    cfg = canonical_model(PRESETS["mixtral-8x7b"]).replace(seq_len=2048)
    spec = PlanSpec(tokens=1e9, gpus=16, efficiency=Efficiency("predicted", 0.0, "predicted"), global_batch=32)
    table = plan_table(cfg, spec, hardware_device("h100-sxm"), ["bp", "pepita", "mempepita"], ["executed"])
    assert table.set_index("rule")["trains_model"].to_dict() == {"bp": True, "pepita": False, "mempepita": False}
    dense = plan_table(canonical_model(PRESETS["llama-2-7b"]), spec, hardware_device("h100-sxm"), ["pepita"],
                       ["executed"])
    assert dense["trains_model"].all()
    assert cli.main(["plan", "--preset", "llama-2-7b", "--gpu", "h100-sxm", "--gpus", "16", "--rule", "bp,pepita",
                     "--tokens", "1e9"]) == 0
    out = capsys.readouterr().out
    assert "pepita*" not in out and "priced, not trained" not in out
