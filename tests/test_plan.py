"""Whole-run planning (issue 16): each formula by hand, the reproductions of published numbers, the fit boundary,
and bad input through the command line and the config, one line each. docs/planning.md documents the formulas."""

from __future__ import annotations

import dataclasses

import json
import subprocess
import sys

import pytest
import yaml

from trainingcost import cli
from trainingcost.analytic import rule_names
from trainingcost.analytic.engine import layer_table
from trainingcost.analytic.memory import memory_table
from trainingcost.analytic.plan import (
    Efficiency, PlanSpec, deepspeed_zero2_gpu_bytes, deepspeed_zero3_gpu_bytes, flops_per_sequence, memory_curve,
    memory_per_gpu, model_facts, plan_table,
)
from trainingcost.analytic.worked_examples import seed004_examples
from trainingcost.config import ConfigError, canonical_model, configs_frame, preset_entry
from trainingcost.config.hardware import device, with_user_devices

TINY = dict(arch="decoder", layers=4, d_model=8, heads=2, d_ff=32, vocab=10, seq_len=4)
A100 = device("a100-80gb")
MFU = Efficiency("mfu", 0.5, "test")


def preset(name, **change):
    return canonical_model({**preset_entry(name, "p"), **change}, "")


def spec(**kw):
    base = dict(tokens=1e9, gpus=1, efficiency=MFU, sharding="none", pue=1.0, carbon_intensity=0.5)
    return PlanSpec(**{**base, **kw})


def bp_row(table, model="executed"):
    return table[(table["rule"] == "bp") & (table["cost_model"] == model)].iloc[0]


# -- formulas against hand computations --------------------------------------------------------------------------


def test_the_element_counts_of_a_llama_shaped_model_by_hand():
    """d 8, d_ff 16, 2 blocks, vocab 10, RMSNorm, SwiGLU, no biases, untied: a block holds 4 d^2 (attention) +
    3 d d_ff (gated FFN) + 2 d (two norms) = 656; the ends 80 (embedding), 8 (final norm), 80 (head)."""
    cfg = canonical_model(dict(arch="decoder", layers=2, d_model=8, heads=2, d_ff=16, vocab=10, seq_len=4, norm="rmsnorm",
                               norm_position="pre", ffn="swiglu", positions="rotary", bias="none"), "")
    facts = model_facts(cfg, ["bp"], "adam")
    assert facts.parameters == 2 * 656 + 80 + 8 + 80
    assert facts.blocks_parameters == 2 * 656 and facts.stage_end_parameters == 88
    assert facts.largest_layer == 3 * 8 * 16  # the gated FFN
    p = spec(precision="bf16-mixed", tp=2, pp=2, gpus=4, sequence_parallel=True)
    share = (656 + 88) / 2 / 1480
    parts = memory_per_gpu(facts, p, "bp", 100)
    assert parts["parameters"] == pytest.approx(2 * 1480 * share)
    assert parts["optimizer_state"] == pytest.approx(8 * 1480 * share)
    assert parts["activations"] == pytest.approx(2 * 100 / 2)  # bf16, split over tp (sequence parallelism)
    # Without sequence parallelism each rank keeps the model-wide tensors whole (Korthikanti et al. 2022, 4.2.2):
    # per block, each of the 2 RMSNorms' saved input (s d = 4 x 8 = 32, and its s = 4 inverse norms) and the input
    # attention and the FFN each save for their products (32 each): 2 x 36 + 2 x 32 = 136; 2 blocks: 272 elements
    # per sequence, whole on both ranks: (100 - 272) / 2 + 272 = (100 + 272) / 2 elements, 2 bytes each
    assert facts.block_replicated == {"decoder": 136}
    off = memory_per_gpu(facts, dataclasses.replace(p, sequence_parallel=False), "bp", 100)
    assert off["activations"] == pytest.approx(2 * (100 + 272) / 2)
    full = dataclasses.replace(p, sequence_parallel=False, checkpointing="full")  # each block keeps its input, 32,
    # and the one recomputed block its 136
    assert memory_per_gpu(facts, full, "bp", 100)["activations"] == pytest.approx(2 * (100 + 2 * 32 + 136) / 2)


@pytest.mark.parametrize("precision, sharding, dp, expected", [
    # bytes per parameter: (weights, gradients, master, Adam's two slots), each sharded from its ZeRO stage on
    ("fp32", "none", 4, (4, 4, 0, 8)),
    ("bf16-mixed", "none", 4, (2, 2, 4, 8)),
    ("bf16-mixed", "zero1", 4, (2, 2, 1, 2)),
    ("fp16-mixed", "zero2", 4, (2, 0.5, 1, 2)),
    ("bf16-mixed", "zero3", 8, (0.25, 0.25, 0.5, 1)),
    ("bf16-mixed", "fsdp", 2, (1, 1, 2, 4)),
])
def test_model_states_per_gpu_by_hand(precision, sharding, dp, expected):
    cfg = canonical_model(TINY, "")
    facts = model_facts(cfg, ["bp"], "adam")
    P = facts.parameters
    parts = memory_per_gpu(facts, spec(precision=precision, sharding=sharding, gpus=dp), "bp", 0)
    weights, grads, master, state = expected
    assert parts["parameters"] == pytest.approx(weights * P)
    assert parts["gradients"] == pytest.approx(grads * P)
    assert parts["master_weights"] == pytest.approx(master * P)
    assert parts["optimizer_state"] == pytest.approx(state * P)
    gathered = (2 + 2 if precision != "fp32" else 8) * facts.largest_layer if sharding in ("zero3", "fsdp") else 0
    assert parts["gathered"] == pytest.approx(gathered)


def test_the_feedback_matrices_of_kp_are_trained_and_those_of_fa_are_not():
    cfg = canonical_model(TINY, "")
    facts = model_facts(cfg, ["fa", "kp"], "momentum")
    mem = memory_table(configs_frame([("", cfg)]), ["fa", "kp"], ["fp32"], ["sgd"]).set_index("rule")
    B = mem.loc["fa", "feedback"] // 4
    fa = memory_per_gpu(facts, spec(precision="bf16-mixed", optimizer="momentum"), "fa", 0)
    kp = memory_per_gpu(facts, spec(precision="bf16-mixed", optimizer="momentum"), "kp", 0)
    assert fa["feedback"] == kp["feedback"] == 2 * B
    assert kp["gradients"] - fa["gradients"] == 2 * B and kp["optimizer_state"] - fa["optimizer_state"] == 4 * B


def test_checkpointing_by_hand():
    """TINY (post-LN, GELU, LayerNorm), 4 tokens: one block saves attention M d + 2 M a + 2 N a + M h = 168,
    the FFN M d + 2 M d_ff = 288, two add & norms 2 (M d + 2 M) = 80: 536 elements; its input is M d = 32."""
    cfg = canonical_model(TINY, "")
    facts = model_facts(cfg, ["bp", "pepita"], "sgd")
    assert facts.block_saved == {"decoder": 536} and facts.block_input == {"decoder": 32}
    full = dict(checkpointing="full")
    kept = int(facts.per_rule.loc["bp", "activations"])
    table = plan_table(cfg, spec(precision="fp32", micro_batch=1, global_batch=1, **full), A100, ["bp", "pepita"],
                       ["executed", "kaplan"])
    bp = bp_row(table)
    assert bp["mem_activations"] == 4 * (kept - 4 * 536 + 4 * 32 + 536)
    selective = plan_table(cfg, spec(precision="fp32", micro_batch=1, global_batch=1, checkpointing="selective"), A100,
                           ["bp"], ["executed"]).iloc[0]
    assert selective["mem_activations"] == 4 * (kept - 2 * 536 + 2 * 32 + 536)  # every 2nd of 4 blocks
    # Recompute: the forward of the checkpointed blocks, under executed by layer, under kaplan a share of the forward.
    layers = layer_table(configs_frame([("", cfg.replace(batch=1))]), ["bp"], ["executed"])
    block0 = layers[(layers["block"] == 0) & (layers["phase"] == "forward")]["flops"].sum()
    sequences = 1e9 / 4
    assert bp["recompute_flops"] == pytest.approx(4 * block0 * sequences)
    assert selective["recompute_flops"] == pytest.approx(2 * block0 * sequences)
    flops = flops_per_sequence(cfg, ["bp"], ["kaplan"]).iloc[0]["model_flops_per_sequence"]
    assert bp_row(table, "kaplan")["recompute_flops"] == pytest.approx(flops / 3 * sequences)  # all 4 blocks' forward
    pepita = table[table["rule"] == "pepita"].iloc[0]
    assert pepita["recompute_flops"] == 0 and not pepita["checkpoint_applies"]  # no autograd graph to checkpoint
    assert pepita["mem_activations"] == 4 * facts.per_rule.loc["pepita", "activations"]
    assert bp["hfu"] > bp["mfu"] == pytest.approx(0.5)


def test_time_energy_co2_and_money_by_hand():
    cfg = preset("gpt2-small")
    gpu = device("h100-sxm")
    s = spec(tokens=2e10, gpus=16, sharding="zero1", global_batch=512, pue=1.2, carbon_intensity=0.3, price=2.5,
             power_utilisation=0.8)
    row = bp_row(plan_table(cfg, s, gpu, ["bp"], ["executed"]))
    F = flops_per_sequence(cfg, ["bp"], ["executed"]).iloc[0]["model_flops_per_sequence"]
    step = 512 * F / (16 * 989.5e12 * 0.5)
    steps = 2e10 / 1024 / 512
    wall = steps * step
    kwh = 16 * 700 * 0.8 * wall / 3.6e6 * 1.2
    assert row["step_time_s"] == pytest.approx(step) and row["wall_clock_s"] == pytest.approx(wall)
    assert row["gpu_hours"] == pytest.approx(16 * wall / 3600)
    assert row["energy_kwh"] == pytest.approx(kwh) and row["co2e_t"] == pytest.approx(kwh * 0.3 / 1000)
    assert row["cost"] == pytest.approx(16 * wall / 3600 * 2.5)
    assert row["model_flops"] == pytest.approx(2e10 / 1024 * F)
    # HFU given: the same step at this precision without recompute; tokens/s per GPU: tokens over GPUs and seconds.
    hfu = bp_row(plan_table(cfg, spec(**{**s.__dict__, "efficiency": Efficiency("hfu", 0.5, "t")}), gpu, ["bp"], ["executed"]))
    assert hfu["step_time_s"] == pytest.approx(step)
    measured = Efficiency("tokens_per_s", 40_000, "t", rule="bp")
    t = plan_table(cfg, spec(**{**s.__dict__, "efficiency": measured}), gpu, ["bp", "wm"], ["executed"])
    assert bp_row(t)["step_time_s"] == pytest.approx(512 * 1024 / (16 * 40_000))
    wm = t[t["rule"] == "wm"].iloc[0]  # the measured rule's FLOP/s, carried to WM's FLOPs
    assert wm["step_time_s"] / bp_row(t)["step_time_s"] == pytest.approx(wm["model_flops"] / bp_row(t)["model_flops"])


def test_a_calibrated_rate_adds_the_pipeline_bubble():
    cfg = preset("gpt2-small")
    rate = Efficiency("rate", 1e14, "t")
    s = spec(gpus=8, pp=2, global_batch=32, micro_batch=4, efficiency=rate)
    row = bp_row(plan_table(cfg, s, A100, ["bp"], ["executed"]))
    F = flops_per_sequence(cfg, ["bp"], ["executed"]).iloc[0]["model_flops_per_sequence"]
    # 4 replicas x 8 sequences each, 2 micro-batches of 4: bubble (p - 1) / m = 1/2 (Narayanan et al. 2021)
    assert row["grad_accumulation"] == 2 and row["dp"] == 4
    assert row["step_time_s"] == pytest.approx(32 * F / 8 / 1e14 * 1.5)


def test_the_calibration_prices_the_models_products():
    from trainingcost.findings.plan_rate import calibrated_rate, gemms

    def mm(m, k, n, rate):
        sig = json.dumps([[{"t": [[m, k], [k, 1], "bfloat16"]}, {"t": [[k, n], [1, k], "bfloat16"]}], {"kw": {}}])
        return {"op": "aten.mm.default", "signature": sig, "cls": "matmul", "flops": 2 * m * k * n, "bytes_read": 0,
                "bytes_written": 0, "seconds": 2 * m * k * n / rate}

    calibration = {"launch_overhead_s": 0.0, "view_overhead_s": 0.0, "copy_ladder": [{"bytes": 1, "seconds": 1e-9}],
                   "kernels": [mm(64, 64, 64, 2e13), mm(1024, 768, 3072, 2e13)]}
    cfg = preset("gpt2-small")
    assert calibrated_rate(calibration, cfg, "bf16", 1) == pytest.approx(2e13)
    assert len(gemms(cfg, 2, 1)) == 12 * 6 + 1 and gemms(cfg, 2, 2)[0] == (2048, 768, 384)


# -- the fit boundary -----------------------------------------------------------------------------------------------


def test_the_largest_micro_batch_fits_and_one_more_does_not():
    cfg = preset("llama-2-7b")
    s = spec(gpus=8, sharding="zero3", precision="bf16-mixed")
    best = plan_table(cfg, s, A100, ["bp", "mempepita"], ["executed"])
    for rule in ("bp", "mempepita"):
        m = int(best[best["rule"] == rule]["max_micro_batch"].iloc[0])
        assert m >= 1
        fits = plan_table(cfg, spec(**{**s.__dict__, "micro_batch": m, "global_batch": 8 * m}), A100, [rule], ["executed"])
        over = plan_table(cfg, spec(**{**s.__dict__, "micro_batch": m + 1, "global_batch": 8 * (m + 1)}), A100, [rule],
                          ["executed"])
        assert fits["fits"].iloc[0] and fits["mem_total"].iloc[0] <= A100.memory_bytes
        assert not over["fits"].iloc[0] and over["mem_total"].iloc[0] > A100.memory_bytes
    bp, mem = (int(best[best["rule"] == r]["max_micro_batch"].iloc[0]) for r in ("bp", "mempepita"))
    assert mem > 10 * bp  # MEMPEPITA keeps a layer's working set, not the graph: a far larger micro-batch
    curve = memory_curve(cfg, s, A100, ["bp"])
    assert curve["mem_total"].is_monotonic_increasing and (curve["mem_total"] > A100.memory_bytes).any()


def test_a_plan_that_fits_under_no_rule_is_priced_at_micro_batch_1_and_marked():
    table = plan_table(preset("llama-2-70b"), spec(), A100, ["bp", "mempepita"], ["executed"])
    assert not table["fits"].any() and (table["micro_batch"] == 1).all() and (table["gpu_hours"] > 0).all()
    assert (table["mem_total"] > A100.memory_bytes).all()


def test_the_smallest_change_that_fits_fits_and_no_change_of_fewer_flags_does():
    from dataclasses import replace

    from trainingcost.analytic.plan import fits_at_micro_batch_1, smallest_fit

    cfg, s = preset("gpt3-175b"), spec(gpus=1024, sharding="none")
    assert not fits_at_micro_batch_1(cfg, s, A100, ["bp"])["bp"]
    change, fitted = smallest_fit(cfg, s, A100, ["bp"])
    assert fits_at_micro_batch_1(cfg, fitted, A100, ["bp"])["bp"]
    assert all(getattr(fitted, k) == v for k, v in change.items())
    # by hand, every change of fewer flags fails: one flag at a time over its whole range
    if len(change) > 1:
        singles = [dict(sharding="zero3"), dict(checkpointing="full"),
                   *(dict(tp=t) for t in (2, 4, 8)), *(dict(pp=p) for p in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96))]
        for one in singles:
            candidate = replace(s, **one)
            if 1024 % (candidate.tp * candidate.pp) or cfg.depth("decoder") % candidate.pp:
                continue
            assert not fits_at_micro_batch_1(cfg, candidate, A100, ["bp"])["bp"], one


def test_every_rule_of_the_catalogue_is_planned():
    table = plan_table(preset("gpt2-small"), spec(gpus=8, sharding="zero3"), A100, rule_names(), ["executed"])
    assert list(table["rule"]) == list(rule_names())


# -- reproductions ------------------------------------------------------------------------------------------------


def test_gpt3_175b_on_300b_tokens_under_kaplan():
    """Brown et al. 2020, Table D.1: 3.64e3 petaflop/s-days = 3.145e23 FLOPs (the text's 3.14e23)."""
    table = plan_table(preset("gpt3-175b"), spec(tokens=3e11, gpus=1024, tp=8, sharding="zero3"), A100, ["bp"],
                       ["kaplan", "executed"])
    kaplan, executed = bp_row(table, "kaplan")["model_flops"], bp_row(table, "executed")["model_flops"]
    assert kaplan == pytest.approx(3.64e3 * 1e15 * 86400, rel=0.01)
    assert kaplan == pytest.approx(3.14e23, rel=0.011)
    assert executed / kaplan == pytest.approx(1.022, abs=0.002)  # the head, norms; causal attention counted as executed


LLAMA2 = [("llama-2-7b", 184_320, 31.22), ("llama-2-13b", 368_640, 62.44), ("llama-2-70b", 1_720_320, 291.42)]
LLAMA2_INTENSITY = 31.22e3 / (184_320 * 0.4)  # kg CO2e per kWh, PUE folded in: derived from the 7B row


@pytest.mark.parametrize("name, gpu_hours, tco2", LLAMA2)
def test_llama2_co2e_from_its_gpu_hours_and_the_implied_mfu(name, gpu_hours, tco2):
    """Touvron et al. 2023, Table 2: 2T tokens on A100-80GB at 400 W. The published GPU-hours as a throughput per
    GPU; 0.4234 kg CO2e per kWh (derived from the 7B row) reproduces all three rows."""
    per_gpu = 2e12 / (gpu_hours * 3600)
    s = spec(tokens=2e12, gpus=2048, tp=8, sharding="zero3", efficiency=Efficiency("tokens_per_s", per_gpu, "Table 2"),
             pue=1.0, carbon_intensity=LLAMA2_INTENSITY)
    row = bp_row(plan_table(preset(name), s, A100, ["bp"], ["executed"]))
    assert row["gpu_hours"] == pytest.approx(gpu_hours)
    assert row["co2e_t"] == pytest.approx(tco2, rel=2e-4)
    assert row["mfu"] == pytest.approx(row["model_flops"] / (gpu_hours * 3600 * 312e12))
    assert 0.3 < row["mfu"] < 0.6


def test_seed004_worked_examples_as_printed_and_corrected():
    rows = seed004_examples().set_index(["example", "quantity"])
    printed, evaluated, correct = rows["book_printed"], rows["book_evaluated"], rows["correct"]
    # The book's expressions give its printed numbers, except the two slips of arithmetic and units.
    for key in rows.index:
        if key not in (("BERT-base", "time per step"), ("GPT-2 XL", "forward FLOPs per token")):
            assert evaluated[key] == pytest.approx(printed[key], rel=0.05), key
    assert printed[("BERT-base", "time per step")] / evaluated[("BERT-base", "time per step")] == pytest.approx(1000, rel=0.02)
    assert evaluated[("GPT-2 XL", "forward FLOPs per token")] == pytest.approx(3.34e12, rel=0.01)
    # The correct numbers: the textbook cost model (the book's own count) per sequence, divided by the tokens.
    textbook = {n: flops_per_sequence(preset(n), ["bp"], ["textbook"]).iloc[0]["model_flops_per_sequence"]
                for n in ("bert-base", "gpt2-xl", "gpt3-175b")}
    assert correct[("BERT-base", "training FLOPs per step")] == pytest.approx(4096 * textbook["bert-base"])
    assert correct[("BERT-base", "time per step")] == pytest.approx(0.848, rel=1e-3)
    assert correct[("GPT-2 XL", "total compute")] == pytest.approx(1e10 * textbook["gpt2-xl"] / 1024)
    assert correct[("GPT-3", "total compute")] == pytest.approx(3e11 * textbook["gpt3-175b"] / 2048)
    assert correct[("GPT-3", "total compute")] == pytest.approx(3.14e23, rel=0.03)  # the reported total
    assert printed[("GPT-3", "total compute")] / correct[("GPT-3", "total compute")] == pytest.approx(2048 * 0.956, rel=0.01)
    named = rows["slip"].str.len() > 0  # every quantity the book gets wrong names its slip; the forward is right
    assert list(named) == [key != ("BERT-base", "forward FLOPs") for key in rows.index]
    assert rows.loc[("BERT-base", "time per step"), "slip"].startswith("ms written as s")


def test_deepspeed_zero_estimators_published_output_and_the_plans_accounting():
    """DeepSpeed's estimate_zero3_model_states_mem_needs_all_live for t5-small (60M parameters, 16M in the largest
    layer) on one GPU prints 1.08GB per GPU without offload; ours are ZeRO's 16 bytes per parameter (Rajbhandari et
    al. 2020) where DeepSpeed's estimators count fp16 and fp32 gradients (2 + 4 bytes)."""
    t5 = model_facts(preset("t5-small"), ["bp"], "adam")
    assert t5.parameters == 60_506_624 and t5.largest_layer == 32128 * 512
    assert round(deepspeed_zero3_gpu_bytes(t5.parameters, t5.largest_layer, 1) / 2**30, 2) == 1.08
    for name, ds_largest in (("gpt2-small", 50257 * 768), ("llama-2-7b", 32000 * 4096)):
        facts = model_facts(preset(name), ["bp"], "adam")
        P, N = facts.parameters, 8
        states = {}
        for stage in ("zero2", "zero3"):
            parts = memory_per_gpu(facts, spec(precision="bf16-mixed", sharding=stage, gpus=N), "bp", 0)
            states[stage] = sum(v for k, v in parts.items() if k != "activations")
        assert deepspeed_zero2_gpu_bytes(P, N) - states["zero2"] == pytest.approx(2 * P + 2 * P / N, abs=2)
        assert deepspeed_zero3_gpu_bytes(P, ds_largest, N) - states["zero3"] == pytest.approx(
            2 * P / N + 4 * (ds_largest - facts.largest_layer), abs=2)


# -- the command line -------------------------------------------------------------------------------------------


def test_the_readme_example_prints_every_rule_without_torch():
    code = ("import sys\nfrom trainingcost import cli\nrc = cli.main(['plan', '--preset', 'llama-2-7b', '--tokens', '2e12', "
            "'--gpu', 'a100-80gb', '--gpus', '1024', '--rule', 'all', '--cost-model', 'all'])\n"
            "print('torch' in sys.modules, rc)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("False 0")
    for rule in rule_names():
        assert f"{rule.upper()} " in result.stdout
    assert "Memory per GPU" in result.stdout and "Assumptions and their sources" in result.stdout


def test_csv_and_json_carry_the_sources(capsys):
    args = ["plan", "--preset", "gpt2-small", "--chinchilla", "--gpu", "h100-sxm", "--rule", "bp", "--cost-model",
            "executed", "--price", "2", "--checkpointing", "full"]
    assert cli.main([*args, "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)[0]
    assert record["tokens"] == 20 * 124_439_808 and record["source_tokens"].startswith("Chinchilla")
    assert record["source_price"] == "given" and record["hfu"] > record["mfu"]
    assert cli.main([*args, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("config_id,rule,cost_model")


def test_the_plans_flags_take_other_tables_spellings(capsys):
    """--sharding FULL_SHARD, --precision BF16, --attention sdpa, --gpu as nvidia-smi names it and --norm RMSNorm
    plan exactly as fsdp, bf16-mixed, flash, h100-sxm and rmsnorm; a name that could mean two things stays refused."""
    base = ["plan", "--preset", "gpt2-small", "--chinchilla", "--gpus", "16", "--rule", "bp", "--format", "json"]
    assert cli.main([*base, "--gpu", "h100-sxm", "--sharding", "fsdp", "--precision", "bf16-mixed", "--attention",
                     "flash", "--norm", "rmsnorm", "--positions", "rotary"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert cli.main([*base, "--gpu", "NVIDIA H100 80GB HBM3", "--sharding", "FULL_SHARD", "--precision", "BF16",
                     "--attention", "sdpa", "--norm", "RMSNorm", "--positions", "RoPE"]) == 0
    assert json.loads(capsys.readouterr().out) == ours
    assert cli.main([*base, "--gpu", "H100", "--sharding", "fsdp"]) == 2
    assert "gpu: 'H100' names more than one catalogue entry (h100-sxm, h100-pcie, h100-hbm2e): give one" in \
        capsys.readouterr().err


def test_a_calibration_and_an_hf_config_through_the_cli(tmp_path, capsys):
    from trainingcost.findings.plan_rate import calibrated_rate

    sig = json.dumps([[{"t": [[512, 768], [768, 1], "bfloat16"]}, {"t": [[768, 768], [1, 768], "bfloat16"]}], {"kw": {}}])
    calibration = {"launch_overhead_s": 1e-6, "view_overhead_s": 1e-7, "copy_ladder": [{"bytes": 1, "seconds": 1e-6}],
                   "provenance": {"device_name": "NVIDIA A100-SXM4-80GB"},
                   "kernels": [{"op": "aten.mm.default", "signature": sig, "cls": "matmul", "flops": 2 * 512 * 768 * 768,
                                "bytes_read": 0, "bytes_written": 0, "seconds": 1e-6 + 2 * 512 * 768 * 768 / 1e14}]}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(calibration))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12,
                                                      "n_positions": 1024, "vocab_size": 50257, "n_inner": None,
                                                      "activation_function": "gelu_new"}))
    args = ["plan", "--hf-config", str(tmp_path / "config.json"), "--tokens", "1e9", "--gpu", "a100-80gb", "--rule",
            "bp", "--cost-model", "executed", "--calibration", str(path), "--micro-batch", "4", "--global-batch", "8",
            "--format", "json"]
    assert cli.main(args) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["source_efficiency"].startswith(f"calibration {path}") and "made on" not in row["source_efficiency"]
    rate = calibrated_rate(calibration, preset("gpt2-small"), "bf16", 4)
    assert 0.9e14 < rate < 1e14  # the calibrated rate less the launches
    F = flops_per_sequence(preset("gpt2-small"), ["bp"], ["executed"]).iloc[0]["model_flops_per_sequence"]
    assert row["step_time_s"] == pytest.approx(8 * F / rate) and row["cost"] is None


def test_a_measured_run_gives_the_rate_and_the_joules_per_flop(tmp_path, capsys):
    import pandas as pd

    run = {"config_id": "c", "rule": "bp", "seed": 0, "status": "ok", "achieved_flops_per_s": 2e14,
           "flops_per_step": 1e12, "energy_per_step_j": 3.0, "device_name": "NVIDIA H100 80GB HBM3"}
    pd.DataFrame([{**run, "layer": layer} for layer in ("a", "b")]).to_parquet(tmp_path / "measured.parquet")
    args = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "h100-sxm", "--gpus", "4", "--pp", "2",
            "--global-batch", "8", "--micro-batch", "2", "--rule", "bp", "--cost-model", "executed", "--pue", "1.25",
            "--measured-run", str(tmp_path), "--format", "json"]
    assert cli.main(args) == 0
    row = json.loads(capsys.readouterr().out)[0]
    F = flops_per_sequence(preset("gpt2-small"), ["bp"], ["executed"]).iloc[0]["model_flops_per_sequence"]
    # 2 replicas x 4 sequences, 2 micro-batches of 2 through 2 stages: bubble 1/2
    assert row["step_time_s"] == pytest.approx(8 * F / 4 / 2e14 * 1.5)
    assert row["energy_kwh"] == pytest.approx(1e9 / 1024 * F * 3e-12 / 3.6e6 * 1.25)
    assert "J per FLOP" in row["source_power"] and "measured run" in row["source_efficiency"]
    pd.DataFrame([run, {**run, "rule": "fa"}]).to_parquet(tmp_path / "two.parquet")
    assert cli.main([*args[:-4], "--measured-run", str(tmp_path / "two.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--measured-run: " in err and "holds 2 runs; give one run's directory" in err


GPT2 = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb"]


@pytest.mark.parametrize("args, message", [
    (["--gpus", "8", "--tp", "3"], "--gpus: 8 GPUs do not divide into tensor-parallel 3 x pipeline-parallel 1"),
    (["--gpus", "10", "--tp", "5"], "--tp: tensor-parallel degree 5 does not divide heads 12"),
    (["--gpus", "13", "--pp", "13"], "--pp: pipeline-parallel degree 13 exceeds the 12 blocks (each stage holds at least one block)"),
    (["--gpu", "h900"], "--gpu: 'h900' is not in the hardware catalogue (closest: h200"),
    (["--gpu", "v100", "--precision", "bf16-mixed"], "--precision: bf16-mixed needs bf16 arithmetic, which v100 has not"),
    (["--mfu", "1.5"], "--mfu: a share of the device peak, between 0 and 1"),
    # issue 40: a throughput above the peak, less than one step of tokens, unbounded mirror steps
    (["--tokens-per-s", "1e30"], "--tokens-per-s: 1e+30 tokens/s per GPU would run bp's work at"),
    (["--tokens", "0.5"], "--tokens: 0.5 tokens make less than one sequence of 1024 tokens"),
    (["--mirror-steps", "1e8"], "--mirror-steps: must be 0 to 1000 weight-mirror steps per training step"),
    (["--gpus", "4", "--global-batch", "6"], "--global-batch: 6 sequences do not divide over the data-parallel degree 4"),
    (["--global-batch", "8", "--micro-batch", "3"], "--micro-batch: 3 does not divide the 8 sequences"),
    (["--pue", "0.9"], "--pue: power usage effectiveness is 1 or more"),
    (["--batch", "4"], "--batch: plan takes --global-batch"),
    (["--tokens", "-1"], "--tokens: must be a positive number"),
    (["--calibration", "/nonexistent.json"], "--calibration: no such file: /nonexistent.json"),
])
def test_bad_flags_are_one_line(args, message, capsys):
    base = list(GPT2)
    if "--gpu" in args:
        base[base.index("--gpu"):base.index("--gpu") + 2] = []
    if "--tokens" in args:
        base[base.index("--tokens"):base.index("--tokens") + 2] = []
    assert cli.main([*base, *args]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "Traceback" not in out.err
    assert out.err.startswith("trainingcost plan: error: ") and message in out.err, out.err


def test_missing_budget_and_no_fit_through_the_cli(capsys):
    assert cli.main(["plan", "--preset", "gpt2-small", "--gpu", "a100-80gb"]) == 2
    assert "--tokens: give --tokens, --epochs with --dataset-tokens, or --chinchilla" in capsys.readouterr().err
    assert cli.main(["plan", "--preset", "gpt2-small", "--epochs", "2", "--gpu", "a100-80gb"]) == 2
    assert "--dataset-tokens: --epochs needs the dataset's size" in capsys.readouterr().err
    base = ["plan", "--preset", "gpt3-175b", "--tokens", "1e9", "--gpu", "a100-80gb", "--gpus", "1024", "--sharding",
            "none"]
    assert cli.main(base) == 0  # the costs, marked, and what fits
    out = capsys.readouterr().out
    assert "Does not fit: BP" in out and "The smallest change that fits: --" in out and "GPU-h" in out
    assert cli.main([*base, "--require-fit", "--format", "csv"]) == 1
    out = capsys.readouterr()
    assert out.out.startswith("config_id,") and "Does not fit" in out.err and out.err.count("\n") == 1
    assert cli.main(["plan", "--preset", "gpt2-small", "--epochs", "2", "--dataset-tokens", "5e8", "--gpu",
                     "a100-80gb", "--format", "json", "--rule", "bp", "--cost-model", "kaplan"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["tokens"] == 1e9


# -- the config ---------------------------------------------------------------------------------------------------


def config(**plan):
    return {"sweep": {"presets": ["gpt2-small"]}, "plan": plan}


@pytest.mark.parametrize("plan, extra, message", [
    (dict(gpu="h900"), {}, "plan.gpu: 'h900' is not in the hardware catalogue (closest: "),
    (dict(efficiency={"mfu": 0.4, "hfu": 0.5}), {}, "plan.efficiency: give at most one of mfu, hfu, tokens_per_s"),
    (dict(tokens="lots"), {}, "plan.tokens: 'lots' is not allowed (allowed: a positive number of tokens, or chinchilla)"),
    (dict(micro_batch="most"), {}, "plan.micro_batch: 'most' is not allowed (allowed: a positive integer, or max)"),
    (dict(sharding="zero4"), {}, "plan.sharding: 'zero4' is not allowed (allowed: none, zero1, zero2, zero3, fsdp)"),
    (dict(gpus=8, tp=8), {}, "tp: tensor-parallel degree 8 does not divide heads 12"),
    (dict(figure="bert-base"), {}, "plan.figure: 'bert-base' is not a planned configuration"),
    (dict(select=["nope"]), {}, "plan.select"),
    (dict(mfu=0.4), {}, "plan: unknown key 'mfu'"),
    (dict(attention="flash4"), {}, "plan.attention: 'flash4' is not allowed (allowed: flash, flash3, cudnn, unfused)"),
    (dict(compile="yes"), {}, "plan.compile: 'yes' is not of type 'boolean'"),
    (dict(gpu="mine"), {"hardware": {"mine": {"peak_tflops": {"bf16": 100}, "memory_gb": 16, "bandwidth_gbs": 500}}},
     "hardware.mine.power_w: missing"),
    (dict(gpu="a100-80gb", power_limit=300), {},
     "plan.power_limit: no published power curve for gpu a100-80gb (allowed for: h100-sxm, h100-hbm2e, h800-sxm)"),
    (dict(gpu="h100-sxm", power_limit=900), {}, "plan.power_limit: 900 W is outside h100-sxm's published power curve"),
    (dict(gpu="h100-sxm", power_limit="low"), {}, "plan.power_limit: 'low' is not of type ['number', 'null']"),
    (dict(gpu="h100-sxm", power_limit=500, efficiency={"mfu": 0.4}), {},
     "plan.power_limit: slows the predicted step (the step-time model); with plan.efficiency.mfu the step's rate"),
])
def test_bad_plan_config_is_one_line(plan, extra, message):
    from trainingcost.pipeline import load

    with pytest.raises(ConfigError) as err:
        load({**config(**plan), **extra})
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


def test_the_workflows_power_limit_is_the_commands(tmp_path):
    """plan.power_limit is `plan --power-limit`: the same rows (a slower step, energy at the limit)."""
    import pandas as pd

    import trainingcost
    from trainingcost.pipeline import load, write_plan

    filled = load(config(gpu="h100-sxm", gpus=8, tokens=1e10, power_limit=500, rules=["bp", "dfa"]))
    write_plan(filled, tmp_path / "plan.parquet", tmp_path / "curves.parquet",
               {"plan_cost": tmp_path / "cost.png", "plan_memory": tmp_path / "memory.png"})
    table = pd.read_parquet(tmp_path / "plan.parquet")
    table = table[table["cost_model"] == "executed"].sort_values("rule").reset_index(drop=True)
    api = trainingcost.plan(preset="gpt2-small", gpu="h100-sxm", gpus=8, tokens=1e10, power_limit=500,
                            rule=["bp", "dfa"], cost_model="executed").table.sort_values("rule").reset_index(drop=True)
    columns = ["rule", "step_time_s", "energy_kwh"]
    pd.testing.assert_frame_equal(table[columns], api[columns])
    full = trainingcost.plan(preset="gpt2-small", gpu="h100-sxm", gpus=8, tokens=1e10, rule=["bp", "dfa"],
                             cost_model="executed").table.sort_values("rule").reset_index(drop=True)
    assert (table["step_time_s"] > full["step_time_s"]).all()


def test_the_workflow_step_writes_the_table_and_the_figures(tmp_path):
    from trainingcost.pipeline import load, write_plan

    mine = {"label": "a test card", "peak_tflops": {"fp32": 20, "bf16": 100}, "memory_gb": 16, "bandwidth_gbs": 500,
            "power_w": 250, "source": "a user's own measurements"}
    filled = load({**config(gpu="mine", gpus=2, tokens=1e9, price=1.5), "hardware": {"mine": mine}})
    figures = {"plan_cost": tmp_path / "cost.png", "plan_memory": tmp_path / "memory.png"}
    write_plan(filled, tmp_path / "plan.parquet", tmp_path / "curves.parquet", figures)
    import pandas as pd

    plan = pd.read_parquet(tmp_path / "plan.parquet")
    assert set(plan["rule"]) == set(rule_names()) and (plan["gpu"] == "mine").all()
    assert plan["source_peak"].iloc[0] == "a user's own measurements"
    assert all(p.exists() and p.with_suffix(".pdf").exists() for p in figures.values())
    assert yaml.safe_load(yaml.safe_dump(filled["plan"]))["gpu"] == "mine"
    assert with_user_devices({"mine": mine})["mine"].memory_bytes == 16e9


def test_the_schemas_plan_defaults_are_the_catalogue():
    """The file lists no rule or cost model; the loaded schema's plan defaults are every one of the catalogue's."""
    from trainingcost.analytic import cost_model_names, vocabulary
    from trainingcost.config.schema import file_schema, schema

    assert "default" not in file_schema()["properties"]["plan"]["properties"]["rules"]
    plan = schema(vocabulary())["properties"]["plan"]["properties"]
    assert plan["rules"]["default"] == list(rule_names())
    assert plan["cost_models"]["default"] == list(cost_model_names())


def test_micro_batch_max_under_interleaving_leaves_micro_batches_in_multiples_of_pp():
    """Interleaved 1F1B needs the micro-batches per step to be a multiple of pp (Narayanan et al. 2021, 2.2):
    micro-batch max picks the largest that fits and allows it (here 2 of 8 per replica, 4 micro-batches), where
    the largest that fits alone (8: one micro-batch) was refused."""
    cfg = canonical_model(preset_entry("gpt2-small", "p"), "")
    gpu = device("a100-80gb")
    spec = PlanSpec(tokens=1e10, gpus=16, pp=4, interleave=3, global_batch=32,
                    efficiency=Efficiency("predicted", 1.0, "predicted"))
    row = plan_table(cfg, spec, gpu, ["bp"], ["executed"]).iloc[0]
    assert row.micro_batch == 2 and row.grad_accumulation == 4 and row.max_micro_batch >= 8


@pytest.mark.parametrize("gpu,precision", [("v100", "fp16-mixed"), ("a100-80gb", "bf16-mixed")])
def test_the_default_precision_is_the_devices_best_mixed_precision_and_says_so(gpu, precision, capsys):
    """GPT-3 on V100s (Brown et al. 2020 trained it so): fp16-mixed, where bf16 would be refused; bf16-mixed where
    the device has bf16 arithmetic. The choice is among the plan's assumptions."""
    base = list(GPT2)
    base[base.index("--gpu") + 1] = gpu
    assert cli.main([*base, "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert f"{precision},none" in out and f"{precision} (default: {gpu}'s best mixed precision)" in out


# -- what ZeRO-3 gathers, and the views for people ----------------------------------------------------------------


def test_the_zero3_gathered_unit_by_hand():
    """The llama-shaped model of the first test (d 8, d_ff 16, 2 blocks, vocab 10): a module is one Linear or table,
    the largest the FFN's 8 x 16 (q, k, v, o are 8 x 8; embedding and head 10 x 8); a sublayer the gated FFN, 3 x 8 x 16;
    a block 656 (4 d^2 + 3 d d_ff + 2 d), larger than the ends outside the blocks (80 + 8 + 80)."""
    cfg = canonical_model(dict(arch="decoder", layers=2, d_model=8, heads=2, d_ff=16, vocab=10, seq_len=4, norm="rmsnorm",
                               norm_position="pre", ffn="swiglu", positions="rotary", bias="none"), "")
    facts = model_facts(cfg, ["bp"], "adam")
    assert (facts.largest_module, facts.largest_layer, facts.largest_block) == (8 * 16, 3 * 8 * 16, 656)
    for unit, params in (("module", 128), ("sublayer", 384), ("block", 656)):
        parts = memory_per_gpu(facts, spec(precision="bf16-mixed", sharding="zero3", gpus=4, zero3_gather=unit), "bp", 0)
        assert parts["gathered"] == 4 * params  # bf16 weights and gradients of the unit, whole
        assert parts["gradients"] == pytest.approx((4 if unit == "module" else 2) * 1480 / 4)
    with pytest.raises(ConfigError, match=r"zero3_gather: 'layer' is not allowed \(allowed: module, sublayer, block\)"):
        plan_table(cfg, spec(zero3_gather="layer"), A100, ["bp"], ["executed"])


@pytest.mark.parametrize("name, gpus", [("gpt3-175b", 1024), ("llama-2-7b", 8), ("gpt2-small", 64)])
def test_under_module_the_plan_equals_deepspeeds_zero3_estimator(name, gpus):
    """DeepSpeed's deepspeed/runtime/zero/stage3.py (github.com/microsoft/DeepSpeed):
    ``estimate_zero3_model_states_mem_needs(total_params, largest_layer_params, ..., cpu_offload=False)`` returns
    ``gpu_mem = 4 * largest_layer_params + int(18 * total_params / total_gpus)``, and ``model_to_params`` takes
    ``largest_layer_params = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())``: the
    largest module's own parameters. Written out here by hand for each model's modules, independently of the plan's
    layer kinds. The plan's model states (bf16-mixed, Adam, ZeRO-3, --zero3-gather module) must equal it."""
    d, L, V, n = {"gpt3-175b": (12288, 96, 50257, 2048), "llama-2-7b": (4096, 32, 32000, 4096),
                  "gpt2-small": (768, 12, 50257, 1024)}[name]
    if name == "llama-2-7b":  # q, k, v, o (d x d), gate, up, down (d x 11008), two RMSNorms; embedding, final norm, head
        ff = 11008
        P = L * (4 * d * d + 3 * d * ff + 2 * d) + V * d + d + V * d
        modules = [V * d, d * ff, d * d, d]
    else:  # GPT-2's blocks (tied head, learned positions): q, k, v, o (d x d + d), fc (d x 4d + 4d), proj (4d x d + d)
        ff = 4 * d
        P = L * (4 * (d * d + d) + d * ff + ff + ff * d + d + 4 * d) + V * d + n * d + 2 * d
        modules = [V * d, n * d, d * ff + ff, ff * d + d, d * d + d]
    largest_layer_params = max(modules)
    deepspeed = 4 * largest_layer_params + int(18 * P / gpus)
    cfg = preset(name)
    facts = model_facts(cfg, ["bp"], "adam")
    assert facts.parameters == P and facts.largest_module == largest_layer_params
    parts = memory_per_gpu(facts, spec(precision="bf16-mixed", sharding="zero3", gpus=gpus, optimizer="adam",
                                       zero3_gather="module"), "bp", 0)
    states = sum(v for k, v in parts.items() if k != "activations")
    assert states == pytest.approx(deepspeed, abs=1)  # DeepSpeed's int() drops under one byte
    if name == "gpt3-175b":  # the figure: 5.16 GiB per GPU on 1,024 GPUs
        assert round(states / 2**30, 2) == 5.16


DEFAULT_PLANS = [
    ["--preset", "llama-2-7b", "--tokens", "2e12", "--gpu", "a100-80gb", "--gpus", "1024", "--price", "2"],
    ["--preset", "gpt3-175b", "--tokens", "3e11", "--gpu", "v100", "--gpus", "1024"],  # does not fit: the verdict
    ["--preset", "t5-small", "--chinchilla", "--gpu", "h100-sxm", "--gpus", "16", "--tp", "2", "--checkpointing", "full"],
    ["--preset", "qwen2.5-0.5b", "--tokens", "1e10", "--gpu", "l4", "--gpus", "8", "--sharding", "zero2", "--mfu", "0.3"],
]


@pytest.mark.parametrize("args", DEFAULT_PLANS, ids=[a[1] for a in DEFAULT_PLANS])
def test_the_default_plan_answers_in_one_screen(args, capsys):
    """Under the executed model, one row per rule, in 100 columns and 40 lines; --cost-model all gives the full view."""
    assert cli.main(["plan", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 100, (len(lines), max(map(len, lines)))
    assert [line.split()[0] for line in lines if line.split() and line.split()[0] in rule_names()] == list(rule_names())
    assert any(line.startswith("- precision: ") for line in lines)
    assert cli.main(["plan", *args, "--cost-model", "all"]) == 0
    out = capsys.readouterr().out
    assert "Memory per GPU" in out and "Assumptions and their sources" in out


def test_gpt3_on_v100s_answers_in_fp16_and_names_what_fits(capsys):
    """The issue's case: fp16-mixed by default on a V100 (no bf16), the costs printed and marked, exit status 0."""
    assert cli.main(["plan", "--preset", "gpt3-175b", "--tokens", "3e11", "--gpu", "v100", "--gpus", "1024"]) == 0
    out = capsys.readouterr().out
    assert "fp16-mixed (default: v100's best mixed precision" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and line.split()[0] in rule_names()}
    assert rows["bp"][-2] == "NO" and "Does not fit: BP" in out and "The smallest change that fits: --" in out


def test_huge_runs_print_short_numbers_and_zero_options_mean_off(capsys):
    """Issue 40, defects 17 and 26: --tokens 1e30 printed a 20-digit day count and a table wider than 100 columns;
    --window-period 0 and --query-scale 0, documented as off, were refused."""
    assert cli.main(["plan", "--preset", "gpt2-small", "--gpu", "a100-80gb", "--tokens", "1e30", "--rule", "bp"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 100 and "e19 d" in out
    for flag in ("--window-period", "--query-scale"):
        assert cli.main(["estimate", "--preset", "gpt2-small", flag, "0", "--rule", "bp"]) == 0
        capsys.readouterr()
    assert cli.main(["estimate", "--preset", "gpt2-small", "--window-period", "1"]) == 2
    assert "--window-period: 1 is not 0 (off) or at least 2" in capsys.readouterr().err


@pytest.mark.parametrize("data, message", [
    ({"launch_overhead_s": 1, "view_overhead_s": 1, "kernels": [{"cls": "matmul"}], "copy_ladder": []},
     "kernels[0] lacks op, signature, flops, bytes_read, bytes_written, seconds"),
    ([1, 2], "is not a calibration (a JSON object"),
    ({"launch_overhead_s": "x", "view_overhead_s": 1, "kernels": [], "copy_ladder": []},
     "launch_overhead_s must be a number of at least 0 (got 'x')"),
])
def test_a_calibration_of_the_wrong_shape_is_one_line(tmp_path, capsys, data, message):
    """Issue 40, defect 7: the right keys with the wrong shape gave KeyError: 'op'."""
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    assert cli.main([*GPT2, "--calibration", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_the_workflows_strong_scaling_is_the_commands_search(tmp_path):
    """plan.strong_scaling in the config is `trainingcost plan --gpus LIST --layout search` for the figure's
    configuration, with the section's device, tokens, precision and price: the same layouts, step times and
    GPU-hours as the command (the Python API) gives, row for row; the tables and the figure are written."""
    import pandas as pd

    import trainingcost
    from trainingcost.pipeline import load, write_strong_scaling

    filled = load({**config(gpu="a100-80gb", gpus=8, tokens=1e9, price=2.0, precision="bf16-mixed",
                            rules=["bp", "dfa", "mempepita"],
                            strong_scaling={"gpus": [2, 16, 64], "objective": "gpu-hours"})})
    out = {name: tmp_path / f"{name}.parquet" for name in ("table", "layouts")}
    write_strong_scaling(filled, out["table"], out["layouts"], tmp_path / "scaling.png")
    table = pd.read_parquet(out["table"])
    api = trainingcost.plan(preset="gpt2-small", gpu="a100-80gb", gpus=[2, 16, 64], tokens=1e9, price=2.0,
                            precision="bf16-mixed", layout="search", rule=["bp", "dfa", "mempepita"],
                            objective="gpu-hours")
    columns = ["gpus", "rule", "layout", "step_time_s", "wall_clock_s", "gpu_hours", "cost", "mem_total", "fits"]
    def rows(frame, keys=("gpus", "rule")):
        return frame.sort_values(list(keys)).reset_index(drop=True)

    pd.testing.assert_frame_equal(rows(table[columns]), rows(api.table[columns]))
    assert set(table["cost_model"]) == {"executed"} and (table["name"] == "gpt2-small").all()
    layouts = pd.read_parquet(out["layouts"])
    assert layouts.groupby(["gpus", "rule"])["rank"].max().eq(5).all()
    keys = ("gpus", "rule", "rank")
    pd.testing.assert_frame_equal(rows(layouts[[*keys, "layout"]], keys), rows(api.layouts[[*keys, "layout"]], keys))
    assert (tmp_path / "scaling.png").stat().st_size and (tmp_path / "scaling.pdf").stat().st_size


def test_the_workflows_strong_scaling_may_search_the_replica_groups(tmp_path):
    """plan.strong_scaling.search_replicate is `--replicate auto`: the same rows as the API's search with the replica
    groups free, under a framework that runs hybrid sharding (torchtitan)."""
    import pandas as pd

    import trainingcost
    from trainingcost.pipeline import load, write_strong_scaling

    filled = load({**config(gpu="h100-sxm", gpus=64, tokens=1e10, framework="torchtitan", sharding="zero3",
                            rules=["bp", "dfa"], strong_scaling={"gpus": [64, 256], "search_replicate": True})})
    out = {name: tmp_path / f"{name}.parquet" for name in ("table", "layouts")}
    write_strong_scaling(filled, out["table"], out["layouts"], tmp_path / "scaling.png")
    table = pd.read_parquet(out["table"]).sort_values(["gpus", "rule"]).reset_index(drop=True)
    api = trainingcost.plan(preset="gpt2-small", gpu="h100-sxm", gpus=[64, 256], tokens=1e10, framework="torchtitan",
                            layout="search", replicate="auto", rule=["bp", "dfa"])
    expected = api.table.sort_values(["gpus", "rule"]).reset_index(drop=True)
    columns = ["gpus", "rule", "layout", "step_time_s", "gpu_hours"]
    pd.testing.assert_frame_equal(table[columns], expected[columns])
    assert table["layout"].str.contains(r" r\d").any()  # some count's best layout holds replica groups
    kept = trainingcost.plan(preset="gpt2-small", gpu="h100-sxm", gpus=[64, 256], tokens=1e10, framework="torchtitan",
                             layout="search", rule=["bp", "dfa"]).table
    assert (table["step_time_s"].values <= kept.sort_values(["gpus", "rule"])["step_time_s"].values + 1e-12).all()


@pytest.mark.parametrize("scaling, extra, message", [
    ({"gpus": [8]}, {}, "plan.strong_scaling.gpus: [8] is too short"),
    ({"gpus": [8, 0]}, {}, "plan.strong_scaling.gpus[1]: 0 is less than the minimum of 1"),
    ({"gpus": [8, 16], "objective": "cost"}, {}, "plan.strong_scaling.objective: cost needs plan.price"),
    ({"gpus": [8, 16], "objective": "speed"}, {}, "plan.strong_scaling.objective: 'speed' is not allowed"),
    ({"gpus": [8, 16]}, {"figure": "bert-base"}, "plan.figure: 'bert-base' is not a planned configuration"),
    ({"count": [8, 16]}, {}, "plan.strong_scaling: unknown key 'count'"),
    ({"gpus": [4, 16, 64]}, {"gpus": 16, "sharding": "zero3", "replicate": 4},
     "plan.strong_scaling.gpus: 4 GPUs do not split into plan.replicate 4 replica groups of two ranks or more at any "
     "layout (allowed: counts whose GPUs are a multiple of 4, at least 8 GPUs, or plan.replicate 1)"),
    ({"gpus": [12, 16]}, {"gpus": 16, "sharding": "zero3", "replicate": 8},
     "plan.strong_scaling.gpus: 12 GPUs do not split into plan.replicate 8 replica groups"),
    ({"gpus": [16, 32], "search_replicate": True}, {"gpus": 16, "sharding": "zero3", "replicate": 2},
     "plan.strong_scaling.search_replicate: searches the replica groups; plan.replicate 2 would fix them"),
    ({"gpus": [16, 32], "search_replicate": "yes"}, {}, "plan.strong_scaling.search_replicate: 'yes' is not of type 'boolean'"),
])
def test_bad_strong_scaling_is_one_line(scaling, extra, message):
    from trainingcost.pipeline import load

    with pytest.raises(ConfigError) as err:
        load(config(strong_scaling=scaling, **extra))
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


def test_the_smallest_change_that_fits_is_one_the_framework_runs(capsys):
    """A framework without tensor or pipeline parallelism keeps tp and pp as given; one that does not shard keeps
    the sharding: OLMo-core (FSDP2, no model parallelism) is told to shard, plain DDP is told no layout it runs fits,
    and never 'more GPUs', which cannot help a framework that neither shards nor splits the model."""
    from dataclasses import replace

    from trainingcost.analytic.plan import smallest_fit
    from trainingcost.config.frameworks import framework

    cfg = preset("llama-2-7b")
    base = spec(gpus=64, sharding="none")
    free = smallest_fit(cfg, base, A100, ["bp"])[0]
    assert free  # without a framework, some change of the four fits
    olmo = replace(base, can=tuple(sorted(framework("olmo-core").can.items())), framework="olmo-core")
    change, fitted = smallest_fit(cfg, olmo, A100, ["bp"])
    assert change == {"sharding": "zero3"} and fitted.tp == fitted.pp == 1
    ddp = replace(base, can=tuple(sorted(framework("ddp").can.items())), framework="ddp")
    assert smallest_fit(cfg, ddp, A100, ["bp"]) is None
    assert cli.main(["plan", "--preset", "llama-2-7b", "--tokens", "1e11", "--gpu", "a100-80gb", "--gpus", "64",
                     "--framework", "pytorch-ddp"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("No layout that ddp runs of --tp, --pp, --sharding and --checkpointing on 64 GPUs fits: a larger --gpu "
            "or another --framework.") in out
    assert "more GPUs" not in out


def test_the_workflow_plans_with_the_attention_kernel_it_names(tmp_path):
    """plan.attention replaces the framework's kernel as --attention does: FlashAttention-3 on an H100 prices the
    attention below FlashAttention-2, and the table says which kernel ran and why."""
    from trainingcost.pipeline import load, write_plan

    import pandas as pd

    tables = {}
    for kernel in ("flash", "flash3"):
        filled = load(config(gpu="h100-sxm", gpus=8, tokens=1e9, attention=kernel))
        figures = {"plan_cost": tmp_path / f"{kernel}-cost.png", "plan_memory": tmp_path / f"{kernel}-memory.png"}
        write_plan(filled, tmp_path / f"{kernel}.parquet", tmp_path / f"{kernel}-curves.parquet", figures)
        tables[kernel] = pd.read_parquet(tmp_path / f"{kernel}.parquet")
    assert (tables["flash3"]["attention"] == "flash3").all()
    assert "attention flash3 (plan.attention given)" in tables["flash3"]["source_framework"].iloc[0]
    bp = {k: t[(t["rule"] == "bp") & (t["cost_model"] == "executed")].iloc[0] for k, t in tables.items()}
    assert bp["flash3"]["step_attention_s"] < bp["flash"]["step_attention_s"]


def test_a_calibration_priced_on_whole_sequences_is_refused_under_context_parallelism(capsys):
    """--calibration prices each GPU's products on whole sequences; under --cp each GPU runs 1 / cp of them, so the
    two are refused together, in one line, before anything is read."""
    assert cli.main(["plan", "--preset", "llama-2-7b", "--tokens", "1e11", "--gpu", "h100-sxm", "--gpus", "16",
                     "--cp", "2", "--calibration", "no-such-file.json"]) == 2
    err = capsys.readouterr().err
    assert "--calibration: prices each GPU's products on whole sequences; with --cp 2" in err and err.count("\n") == 1


def test_counts_of_a_given_layout_that_one_default_batch_cannot_serve_each_take_their_own():
    """--gpus 1024,1536 with the layout given: no default batch near 4M tokens divides over both data-parallel
    degrees, so each count plans at its own default (a multiple of its GPUs), and the Run line names both; a batch
    the user gives is kept and refused where it does not divide."""
    import trainingcost as tc

    result = tc.plan(preset="llama-3-8b", tokens=1e12, rule="bp", gpu="h100-sxm", gpus=[1024, 1536])
    batches = result.table.drop_duplicates("gpus").set_index("gpus")["global_batch"].to_dict()
    assert batches == {1024: 1024, 1536: 1536}
    assert "1024 sequences on 1024 GPUs; 1536 sequences on 1536 GPUs" in " ".join(result.text.split())
    assert "Scaling (the batch differs between counts, above)" in result.text
    alike = tc.plan(preset="llama-3-8b", tokens=1e12, rule="bp", gpu="h100-sxm", gpus=[256, 512])
    assert set(alike.table["global_batch"]) == {512}  # one default serves both: counts compare at one batch
    with pytest.raises(tc.Error, match="global_batch: 1536 sequences do not divide over the data-parallel degree 1024"):
        tc.plan(preset="llama-3-8b", tokens=1e12, rule="bp", gpu="h100-sxm", gpus=[1024, 1536], global_batch=1536)


def test_a_default_batch_of_one_sequence_per_rank_says_how_many_tokens_it_is():
    """At 4,096 data-parallel ranks the default batch is 4,096 sequences of 8,192 tokens, 33.6M tokens: the Run line
    says so (it said 'about 4M tokens'); a run of fewer than 100 steps prints them to three figures."""
    import trainingcost as tc

    text = " ".join(tc.plan(preset="llama-3-8b", tokens=1e13, rule="bp", gpu="h100-sxm", gpus=4096).text.split())
    assert "4096 sequences of 8192 tokens (global batch default: one sequence per data-parallel rank, 33.6M tokens)" in text
    short = tc.plan(preset="llama-3-8b", tokens=3e7, rule="bp", gpu="h100-sxm", gpus=8)
    assert short.table["optimizer_steps"].iloc[0] == pytest.approx(3e7 / 8192 / 512)
    assert "in 7.15 steps of 512 sequences" in " ".join(short.text.split())


def test_a_selective_checkpoint_that_checkpoints_no_block_is_refused():
    import trainingcost as tc

    with pytest.raises(tc.Error, match=r"--checkpoint-every: every 64th block of stacks of at most 32 blocks "
                                       r"checkpoints none \(allowed: 1 to 32"):
        tc.plan(preset="llama-3-8b", tokens=1e12, rule="bp", gpu="h100-sxm", gpus=64, checkpointing="selective",
                checkpoint_every=64)
    assert len(tc.plan(preset="llama-3-8b", tokens=1e12, rule="bp", gpu="h100-sxm", gpus=64,
                       checkpointing="selective", checkpoint_every=32).table) == 1


def test_the_search_prices_each_layouts_memory_with_its_own_sequence_parallelism():
    """The search priced every layout's memory without sequence parallelism (its spec's default) and kept it for both
    choices: an sp layout's memory_bytes then exceeded the plan's own, and faster sp layouts were judged not to fit."""
    import trainingcost as tc

    result = tc.plan(preset="llama-2-70b", tokens=2e12, gpu="h100-sxm", gpus=32, rule="bp", layout="search")
    best, row = result.layouts.iloc[0], result.table.iloc[0]
    assert best["layout"] == row["layout"] and best["sequence_parallel"]
    assert best["memory_bytes"] == pytest.approx(row["mem_total"])
    given = tc.plan(preset="llama-2-70b", tokens=2e12, gpu="h100-sxm", gpus=32, rule="bp", layout="search",
                    sequence_parallel="on")
    assert given.table.iloc[0]["step_time_s"] == pytest.approx(row["step_time_s"])  # the search found it unasked


def test_the_smallest_change_that_fits_may_be_sequence_parallelism():
    """Llama 2 70B at TP 8 without sequence parallelism needs 75.5 GiB on an H100 (74.5); with it, 58 GiB: one flag."""
    import trainingcost as tc

    result = tc.plan(preset="llama-2-70b", tokens=2e12, gpu="h100-sxm", gpus=64, rule="bp", tp=8, pp=1,
                     sharding="zero1", micro_batch=1)
    assert "The smallest change that fits: --sequence-parallel on." in result.verdict
    fixed = tc.plan(preset="llama-2-70b", tokens=2e12, gpu="h100-sxm", gpus=64, rule="bp", tp=8, pp=1,
                    sharding="zero1", micro_batch=1, sequence_parallel="on")
    assert bool(fixed.table["fits"].iloc[0]) and fixed.verdict is None


def test_a_wall_clock_of_a_thousand_days_or_more_prints_whole_days():
    from trainingcost.text import _duration, _duration_range

    assert _duration(999.94 * 86400) == "999.9 d" and _duration(1452.5 * 86400) == "1452 d"  # round half to even
    assert _duration_range(1452.5 * 86400, 1256 * 86400, 1661 * 86400) == "1452 d (1256-1661)"


def test_the_activations_tensor_parallelism_keeps_whole_by_hand_for_an_encoder_decoder():
    """d 8, source 4 and target 6 tokens, LayerNorm (its saved input and its mean and inverse deviation per row).
    Encoder block: 2 norms x (4 x 8 + 2 x 4) = 80, and the inputs attention and the FFN save, 32 each: 144. Decoder
    block: 3 norms x (6 x 8 + 2 x 6) = 180, self-attention's and the FFN's inputs 48 each, and cross-attention's:
    its queries' input 48 and the encoder's output, 4 x 8 = 32, for its keys and values: 356."""
    cfg = canonical_model(dict(arch="encoder-decoder", enc_layers=2, dec_layers=2, d_model=8, heads=2, d_ff=16,
                               vocab=10, seq_len=4, tgt_len=6, norm="layernorm", positions="learned", bias="all"), "")
    facts = model_facts(cfg, ["bp"], "adam")
    assert facts.block_replicated == {"encoder": 144, "decoder": 356}
    from trainingcost.analytic.plan_memory import activations_per_sequence, replicated_per_sequence

    kept = activations_per_sequence(facts, "bp", "none", 2)
    whole = replicated_per_sequence(facts, "bp", "none", 2)
    assert whole == 2 * 144 + 2 * 356 and whole < kept  # the whole-kept part of what autograd saves
    p = spec(precision="bf16-mixed", tp=2, gpus=2, sequence_parallel=False)
    assert memory_per_gpu(facts, p, "bp", kept)["activations"] == pytest.approx(2 * ((kept - whole) / 2 + whole))
