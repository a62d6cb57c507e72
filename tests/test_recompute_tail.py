"""What a recompute repeats: torch's non-reentrant checkpoint stops early, and torch.compile's backward graph recomputes
only what it reads, so a pre-norm dense block's last product (the FFN's down projection, whose output only joins the
residual) is not repeated; Megatron's and DeepSpeed's checkpoints repeat the whole block (config/frameworks.yaml,
recompute_tail; analytic/steptime/step.py, tail_skipped).

Checked against torch itself: transformers' models checkpointed per layer as transformers does it
(``gradient_checkpointing_enable(use_reentrant=False)``), one training step counted by ``FlopCounterMode`` with and
without checkpointing; the difference is the recompute, which equals the plan's recompute FLOPs to the FLOP, with the
early stop on and off, for a dense pre-norm family (which leaves its tail out), a parallel-block one (the same), and
an output-norm one and a mixture of experts (whose tails the backward reads: nothing left out).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode

from trainingcost import cli
from trainingcost.analytic.plan import flops_per_sequence, model_facts, tail_flops_per_sequence
from trainingcost.analytic.steptime import Layout, predict_step, runs
from trainingcost.analytic.steptime.step import tail_skipped
from trainingcost.config import ConfigError, canonical_model
from trainingcost.config.frameworks import framework, parse_framework, recompute_tail_of, resolve_framework
from trainingcost.config.hardware import device
from trainingcost.config.hf import check_window, hf_entry, with_overrides
from trainingcost.config.presets import PRESETS
from trainingcost.measure.flops import CPU_SDPA_FORMULAS

transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]
B, LENGTH = 2, 12


def _raw(formula):
    def counted(*args, **kwargs):
        return formula(*args, **kwargs)
    counted._get_raw = True
    return counted


CPU_ATTENTION = {op: _raw(formula) for op, formula in CPU_SDPA_FORMULAS.items()}
COMMON = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=48, vocab_size=61,
              max_position_embeddings=64, attn_implementation="sdpa")
MODELS = {  # name: (config, model class, whether the recompute may leave the block's tail out)
    "llama": (lambda: transformers.LlamaConfig(**COMMON, num_key_value_heads=2), "LlamaForCausalLM", True),
    "gpt_neox": (lambda: transformers.GPTNeoXConfig(**COMMON), "GPTNeoXForCausalLM", True),  # parallel block
    "olmo2": (lambda: transformers.Olmo2Config(**COMMON, num_key_value_heads=2), "Olmo2ForCausalLM", False),
    "mixtral": (lambda: transformers.MixtralConfig(**COMMON, num_key_value_heads=2, num_local_experts=4,
                                                   num_experts_per_tok=2, experts_implementation="eager"),
                "MixtralForCausalLM", False),
}


def _step_flops(model, config, checkpointed: bool, early_stop: bool) -> int:
    torch.manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (B, LENGTH))
    model.train()
    if checkpointed:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    with set_checkpoint_early_stop(early_stop), FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_plans_recompute_flops_are_what_torchs_checkpoint_runs(name):
    build, model_class, leaves_tail = MODELS[name]
    config = build()
    model = getattr(transformers, model_class)(config)
    cfg = canonical_model(check_window(with_overrides(hf_entry(config.to_dict()), {"seq_len": LENGTH, "batch": B}),
                                       "test"))
    assert tail_skipped(cfg, "early-stop", False) == leaves_tail
    assert not tail_skipped(cfg, "repeated", False) and tail_skipped(cfg, "traced", True) == leaves_tail
    facts = model_facts(cfg, ["bp"], "adam")
    plain = _step_flops(model, config, False, True)
    for early_stop in (True, False):
        recompute = _step_flops(model, config, True, early_stop) - plain
        tail = tail_skipped(cfg, "early-stop" if early_stop else "repeated", False)
        planned = flops_per_sequence(cfg, ["bp"], ["executed"], "full", 2, 1, facts, tail)
        assert recompute == B * int(planned.recompute_flops_per_sequence.iloc[0]), (name, early_stop)
    if leaves_tail:  # what the early stop saves is each layer's down projection, 2 x rows x d_ff x d per sequence
        assert tail_flops_per_sequence(cfg) == {"decoder": 2 * LENGTH * config.intermediate_size * config.hidden_size}


def _block(w1, w2, linear):
    return lambda x: x + linear(F.silu(linear(x, w1)), w2)


class _SavingLinear(torch.autograd.Function):
    """A linear as an fp8 linear is written (Transformer Engine's te.Linear, torchao's float8): a custom Function
    whose saved tensors are packed when its forward returns."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x


def _backward_mms(fn, x) -> int:
    y = checkpoint(fn, x, use_reentrant=False)
    with FlopCounterMode(display=False) as counter:
        y.sum().backward()
    return counter.get_flop_counts()["Global"].get(torch.ops.aten.mm, 0)


def test_a_custom_function_repeats_its_product_and_compile_leaves_it_out():
    """The early stop halts before an aten product (its inputs are packed before it runs), not before a custom
    Function's; torch.compile's backward graph recomputes only what it reads, early stop or not."""
    torch.manual_seed(0)
    d, f, rows = 16, 24, 8
    w1, w2 = torch.randn(f, d, requires_grad=True), torch.randn(d, f, requires_grad=True)
    x = torch.randn(rows, d, requires_grad=True)
    product = 2 * rows * d * f  # each of the four products' FLOPs (one forward, recomputed, of each)
    backward = 4 * product  # the two products' input and weight gradients
    assert _backward_mms(_block(w1, w2, F.linear), x) == backward + product  # the down projection left out
    assert _backward_mms(_block(w1, w2, lambda a, w: _SavingLinear.apply(a, w)), x) == backward + 2 * product
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(gm, _):
        graphs.append(gm)
        return gm.forward

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep, partition_fn=min_cut_rematerialization_partition)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: checkpoint(_block(w1, w2, F.linear), t, use_reentrant=False, early_stop=False),
                             backend=backend)
    compiled(x).sum().backward()
    products = [sum(n.target is torch.ops.aten.mm.default for n in g.graph.nodes) for g in graphs]
    assert products == [2, 5]  # forward: two; backward: the first product recomputed and four gradients
    torch._dynamo.reset()


# -- the step model ---------------------------------------------------------------------------------------------------


def _llama(**over):
    row = next(r for r in runs.load(ROOT / "benchmarks" / "published_runs.csv")
               if r["source"] == "torchtitan" and "70b" in r["run"] and r["recompute"] == "full")
    return runs.model_of(row).replace(**over), row


@pytest.mark.parametrize("tp,sp", [(1, False), (4, False), (4, True)])
def test_a_recompute_that_stops_early_leaves_out_the_down_projection_and_its_reduction(tp, sp):
    cfg, _ = _llama()
    a100 = device("a100-80gb")
    lay = Layout(gpus=64, global_batch=64, micro_batch=1, tp=tp, sequence_parallel=sp, recompute="full",
                 sharding="fsdp")
    whole, early, traced = (predict_step(cfg, dataclasses.replace(lay, recompute_tail=t), a100)
                            for t in ("repeated", "early-stop", "traced"))
    assert early.step_time_s == traced.step_time_s < whole.step_time_s
    assert early.parts["matmul"] < whole.parts["matmul"] and early.parts["memory"] < whole.parts["memory"]
    assert early.parts["attention"] == whole.parts["attention"]  # the attention is recomputed all the same
    assert (early.parts["comm_tp"] < whole.parts["comm_tp"]) == (tp > 1)
    # the hardware FLOPs: the down projection's, per block and sequence, fewer (the step's HFU scales the model's
    # whole forward by the blocks recomputed, the head's share included: within 10%; the plan's FLOPs columns
    # count the recompute exactly, test_the_plans_recompute_flops_are_what_torchs_checkpoint_runs)
    left_out = lay.global_batch * cfg.layers * tail_flops_per_sequence(cfg)["decoder"]
    assert whole.hardware_flops - early.hardware_flops == pytest.approx(left_out, rel=0.1)
    none = dataclasses.replace(lay, recompute="none")
    assert predict_step(cfg, none, a100).step_time_s == \
        predict_step(cfg, dataclasses.replace(none, recompute_tail="early-stop"), a100).step_time_s


def test_fp8_linears_post_norms_and_experts_keep_the_tail():
    cfg, _ = _llama()
    h100 = device("h100-sxm")
    lay = Layout(gpus=8, global_batch=8, micro_batch=1, recompute="full", sharding="fsdp", precision="fp8-mixed")
    step = {t: predict_step(cfg, dataclasses.replace(lay, recompute_tail=t), h100).step_time_s
            for t in ("repeated", "early-stop", "traced")}
    assert step["early-stop"] == step["repeated"] > step["traced"]  # custom Functions repeat; the graph does not
    for other in (cfg.replace(norm_position="output"), cfg.replace(post_norms=True),
                  cfg.replace(norm_position="post")):
        bf16 = dataclasses.replace(lay, precision="bf16-mixed")
        assert predict_step(other, bf16, h100).step_time_s == \
            predict_step(other, dataclasses.replace(bf16, recompute_tail="traced"), h100).step_time_s


def test_a_per_operation_recompute_drops_the_down_projection_it_never_reads():
    cfg, _ = _llama()
    h100 = device("h100-sxm")
    lay = Layout(gpus=8, global_batch=8, micro_batch=1, sharding="fsdp", recompute="ops:q+k+v+o+gate+up+down")
    without = dataclasses.replace(lay, recompute="ops:q+k+v+o+gate+up")
    traced = predict_step(cfg, dataclasses.replace(lay, recompute_tail="traced"), h100)
    assert traced.parts["matmul"] == predict_step(cfg, dataclasses.replace(without, recompute_tail="traced"),
                                                  h100).parts["matmul"]
    assert traced.parts["matmul"] < predict_step(cfg, lay, h100).parts["matmul"]


# -- the catalogue and the plan ---------------------------------------------------------------------------------------


def test_each_framework_says_what_its_recompute_repeats():
    assert framework("megatron-core").recompute_tail == "repeated" == framework("deepspeed").recompute_tail
    assert framework("fsdp2").recompute_tail == "early-stop" == framework("composer").recompute_tail
    assert framework("composer@2023").recompute_tail == "repeated"  # torch 1.13: no early stop
    # torchtitan turned the early stop off on 2025-08-29; the dated name reads the entry of its day
    assert resolve_framework("torchtitan@2025-06")[0].recompute_tail == "early-stop"
    assert resolve_framework("torchtitan")[0].recompute_tail == "repeated"
    assert "25413d224" in framework("torchtitan").sources["recompute_tail"]
    # compiled, a framework that runs its blocks eagerly traces them; OLMo-core, which compiles, run eagerly stops early
    assert recompute_tail_of(framework("torchtitan"), "fused") == "traced"
    assert recompute_tail_of(framework("megatron-core"), "fused") == "repeated"
    assert recompute_tail_of(framework("olmo-core"), "fused") == "traced"
    assert recompute_tail_of(framework("olmo-core"), "eager") == "early-stop"
    entry = {"dp_overlap": 1.0, "tp_overlap": 0.0, "zero3_granularity": "block", "zero3_gather": "block",
             "attention": "flash", "sharding": "fsdp", "dp_rails": True, "recompute_tail": "sometimes",
             "can": {"shardings": ["none"], "tensor": False, "pipeline": False, "interleave": False,
                     "sequence_parallel": False, "uneven": False, "replicate": []}}
    with pytest.raises(ConfigError, match=r"^x.recompute_tail: 'sometimes' is not allowed \(allowed: repeated, "
                                          r"early-stop, traced\)$"):
        parse_framework("x", entry, {}, "x")


def test_the_plan_states_it_and_prices_it(capsys):
    base = ["plan", "--preset", "llama-2-7b", "--gpu", "h100-sxm", "--gpus", "8", "--tokens", "1e9", "--rule", "bp",
            "--checkpointing", "full", "--micro-batch", "1", "--format", "json"]
    rows = {}
    for fw in ("megatron", "fsdp2"):
        assert cli.main([*base, "--framework", fw]) == 0
        rows[fw] = json.loads(capsys.readouterr().out)[0]
    assert "stops before their last product" in rows["fsdp2"]["source_framework"]
    assert "last product" not in rows["megatron"]["source_framework"]
    cfg = canonical_model(PRESETS["llama-2-7b"])
    per_sequence = cfg.layers * tail_flops_per_sequence(cfg)["decoder"]
    sequences = 1e9 / cfg.seq_len
    assert rows["megatron"]["model_flops"] == rows["fsdp2"]["model_flops"]
    assert rows["megatron"]["recompute_flops"] - rows["fsdp2"]["recompute_flops"] == \
        pytest.approx(per_sequence * sequences, rel=1e-9)
    assert rows["megatron"]["hfu"] > rows["megatron"]["mfu"] and rows["fsdp2"]["hardware_flops"] == \
        pytest.approx(rows["fsdp2"]["model_flops"] + rows["fsdp2"]["recompute_flops"], rel=1e-12)


def test_the_user_may_say_what_the_recompute_repeats(capsys):
    """--recompute-tail (the API's recompute_tail, the workflow's plan.recompute_tail) replaces the framework's: a
    Hugging Face Trainer of transformers 4 on FSDP2 checkpoints reentrantly (its default use_reentrant=True): repeated."""
    import trainingcost
    from trainingcost.pipeline import load, plan_configs, plan_gpu, section_spec

    base = ["plan", "--preset", "llama-2-7b", "--gpu", "h100-sxm", "--gpus", "8", "--tokens", "1e9", "--rule", "bp",
            "--checkpointing", "full", "--micro-batch", "1", "--format", "json"]
    rows = {}
    for flags in ([], ["--recompute-tail", "repeated"], ["--framework", "megatron"]):
        assert cli.main([*base, *flags]) == 0
        rows[tuple(flags)] = json.loads(capsys.readouterr().out)[0]
    given = rows[("--recompute-tail", "repeated")]
    assert given["recompute_flops"] == rows[("--framework", "megatron")]["recompute_flops"] > rows[()]["recompute_flops"]
    assert "recompute repeated (--recompute-tail given)" in given["source_framework"]
    api = trainingcost.plan(preset="llama-2-7b", gpu="h100-sxm", gpus=8, tokens=1e9, rule="bp", checkpointing="full",
                            micro_batch=1, recompute_tail="repeated")
    assert api.table["step_time_s"].iloc[0] == given["step_time_s"]
    with pytest.raises(trainingcost.Error, match=r"argument --recompute-tail: invalid choice: 'sometimes'"):
        trainingcost.plan(preset="llama-2-7b", gpu="h100-sxm", gpus=8, tokens=1e9, recompute_tail="sometimes")
    plan = {"gpu": "h100-sxm", "gpus": 8, "tokens": 1e9, "checkpointing": "full", "recompute_tail": "traced",
            "compile": True}
    filled = load({"sweep": {"presets": ["gpt2-small"]}, "plan": plan})
    (_, cfg), = plan_configs(filled)
    assert section_spec(filled["plan"], cfg, plan_gpu(filled)).recompute_tail == "traced"
    # traced is torch.compile's recompute: refused where the plan runs eager (issue 66, N24)
    with pytest.raises(ConfigError, match=r"^plan.recompute_tail: traced is torch.compile's recompute.*turn on "
                                          r"plan.compile$"):
        load({"sweep": {"presets": ["gpt2-small"]}, "plan": {**plan, "compile": False}})
    with pytest.raises(ConfigError, match=r"^plan.recompute_tail: 'sometimes' is not allowed \(allowed: repeated, "
                                          r"early-stop, traced\)$"):
        load({"sweep": {"presets": ["gpt2-small"]}, "plan": {**plan, "recompute_tail": "sometimes"}})


@pytest.mark.parametrize("tp,sp,recompute,share", [(1, False, "full", 1.0), (4, True, "full", 1.0),
                                                    (4, False, "selective", 0.5)])
def test_what_the_recompute_leaves_out_is_one_down_projection_per_recomputed_block(tp, sp, recompute, share):
    """By hand from the device model: per recomputed block, one product of (b s) x d_ff / tp by d on this GPU, one
    residual add (3 b s d / sp elements read and written), and, under tensor parallelism, one reduction (the
    all-reduce, or the reduce-scatter under sequence parallelism)."""
    from trainingcost.analytic.steptime import DeviceModel, Network
    from trainingcost.analytic.steptime.step import micro_batch

    cfg, _ = _llama()
    a100 = device("a100-80gb")
    lay = Layout(gpus=64, global_batch=64, micro_batch=1, tp=tp, sequence_parallel=sp, recompute=recompute,
                 sharding="fsdp")
    whole, early = (micro_batch(cfg, dataclasses.replace(lay, recompute_tail=t), a100) for t in ("repeated", "early-stop"))
    dev = DeviceModel.of(a100, "bf16", None)
    rows = lay.micro_batch * cfg.seq_len
    blocks = whole.per_stage * share  # the blocks recomputed on this stage
    assert whole.rec["matmul"] - early.rec["matmul"] == pytest.approx(
        blocks * dev.products.gemm(rows, cfg.d_model, cfg.d_ff // tp), rel=1e-12)
    assert whole.rec["memory"] - early.rec["memory"] == pytest.approx(
        blocks * dev.memory(3 * rows * cfg.d_model * 2 / (tp if sp else 1)), rel=1e-12)
    assert whole.rec["attention"] == early.rec["attention"] and whole.compute_fwd == early.compute_fwd
    net = Network.of(dev.params, None, None, None)
    tp_bytes = rows * cfg.d_model * 2
    reduction = 0.0 if tp == 1 else (net.reduce_scatter(tp_bytes, tp, 1) if sp else net.all_reduce(tp_bytes, tp, 1))
    assert whole.tp_bwd - early.tp_bwd == pytest.approx(whole.per_stage * share * reduction, rel=1e-9, abs=1e-15)


def test_a_product_the_model_lacks_leaves_nothing_out_and_rings_count_per_pass():
    """ops:gate on a model without a gated FFN repeats nothing, so no tail reduction is left out (none was counted);
    a parallel block's pipeline bubble holds one context-parallel ring per pass and per recomputed forward, as a
    sequential block's does (its tensor-parallel pairs differ, its rings do not)."""
    pythia = canonical_model({**PRESETS["pythia-1.4b"], "seq_len": 2048})
    assert pythia.parallel and not pythia.gated
    a100 = device("a100-80gb")
    lay = Layout(gpus=8, global_batch=8, micro_batch=1, tp=4, recompute="ops:gate")
    whole, early = (predict_step(pythia, dataclasses.replace(lay, recompute_tail=t), a100)
                    for t in ("repeated", "early-stop"))
    assert early.parts == whole.parts
    piped = Layout(gpus=8, global_batch=16, micro_batch=1, tp=1, pp=2, cp=2, recompute="full")
    sequential = pythia.replace(parallel_block="none")
    for tail in ("repeated", "early-stop"):
        lay = dataclasses.replace(piped, recompute_tail=tail)
        assert predict_step(pythia, lay, a100).parts["bubble"] == \
            pytest.approx(predict_step(sequential, lay, a100).parts["bubble"], rel=1e-12)


def test_compile_traces_only_a_non_reentrant_checkpoint():
    assert recompute_tail_of(framework("fsdp1"), "fused") == "repeated"  # a reentrant checkpoint is not traced
    assert recompute_tail_of(framework("fsdp2"), "fused") == "traced"
    assert recompute_tail_of(framework("torchtitan"), "eager") == "repeated"  # non-reentrant, early_stop=False
    assert recompute_tail_of(framework("torchtitan"), "fused") == "traced"
    assert recompute_tail_of(framework("composer"), "fused") == "early-stop"  # its blocks are fused, not compiled
