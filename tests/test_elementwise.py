"""Eager and fused elementwise kernels (docs/planning.md, "Eager and fused elementwise kernels"): a block's RMSNorm,
rotary embedding and gated activation run op by op in eager PyTorch (torchtitan's and Hugging Face's models without
torch.compile) or fused; the framework says which, --compile / plan.compile / a published row's ``elementwise``
column overrides it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from trainingcost import cli
from trainingcost.analytic.steptime import Layout, predict_step, runs
from trainingcost.analytic.steptime.device import DeviceModel
from trainingcost.analytic.steptime.step import block_times
from trainingcost.config import ConfigError
from trainingcost.config.frameworks import framework
from trainingcost.config.hardware import device
from trainingcost.config.model import canonical_model, preset_entry

H100 = device("h100-sxm")


def test_eager_llama_block_moves_the_bytes_of_its_ops_counted_by_hand():
    """Llama-style block (RMSNorm, rotary, SwiGLU), bf16 activations (2 bytes), fp32 intermediates (4 bytes).
    Per element, each kernel's reads + writes, from torchtitan's norms.py / model.py read op by op:
    RMSNorm forward: x.float() 2+4, pow 4+4, mean 4, x*rsqrt 4+4, type_as 4+2, *weight 2+2;
    backward: grad*y 2+2+2 and its sum 2, grad*w 2+2, float() 2+4, grad*x 4+4+4 and its sum 4, grad*rsqrt 4+4,
    mean's backward 4, pow's x^1 4+4, x 2 4+4, x grad 4+4+4, two paths' sum 4+4+4, to bf16 4+2. Rotary, per element of q and k: float() 2+4, complex product 4+4, type_as 4+2; backward
    the same. SwiGLU per element of the d_ff product: silu 2+2, *h3 2+2+2; backward grad*h3 2+2+2, grad*silu 2+2+2,
    silu's backward 2+2+2. Fused: norm 2+2, rotary 2+2, SwiGLU 2+2+2, each twice in the backward. The residual adds,
    the attention and every product are the same both ways."""
    cfg = canonical_model({**preset_entry("llama-2-7b"), "layers": 2, "seq_len": 1024})
    dev = DeviceModel.of(H100, "bf16")
    fused = Layout(gpus=8, global_batch=16, micro_batch=2, host_block_s=(0.0, 0.0))
    eager = dataclasses.replace(fused, elementwise="eager")
    one, two = block_times(cfg, fused, dev, 2), block_times(cfg, eager, dev, 2)
    m, d, ff = 2 * cfg.seq_len, cfg.d_model, cfg.d_ff
    qk = m * (cfg.attn_width + cfg.kv_width)
    rms_f, rms_b = [6, 8, 4, 8, 6, 4], [6, 2, 4, 6, 12, 4, 8, 4, 8, 8, 12, 12, 6]
    rot, glu_f, glu_b = [6, 8, 6], [4, 6], [6, 6, 6]
    mem = dev.memory
    eager_fwd = 2 * sum(mem(x * m * d) for x in rms_f) + sum(mem(x * qk) for x in rot) + \
        sum(mem(x * m * ff) for x in glu_f)
    fused_fwd = 2 * mem(4 * m * d) + mem(4 * qk) + mem(6 * m * ff)
    eager_bwd = 2 * sum(mem(x * m * d) for x in rms_b) + sum(mem(x * qk) for x in rot) + \
        sum(mem(x * m * ff) for x in glu_b)
    fused_bwd = 2 * 2 * mem(4 * m * d) + 2 * mem(4 * qk) + 2 * mem(6 * m * ff)
    assert two["fwd"]["memory"] - one["fwd"]["memory"] == pytest.approx(eager_fwd - fused_fwd, rel=1e-12)
    assert two["bwd"]["memory"] - one["bwd"]["memory"] == pytest.approx(eager_bwd - fused_bwd, rel=1e-12)
    for p in ("fwd", "bwd"):
        assert (two[p]["matmul"], two[p]["attention"]) == (one[p]["matmul"], one[p]["attention"])
    assert two["fwd"]["memory"] > one["fwd"]["memory"] and two["bwd"]["memory"] > one["bwd"]["memory"]


def test_some_ops_eager_and_the_others_fused_add_up():
    """A fused RMSNorm beside an eager rotary and SwiGLU (torchtitan's fused_rmsnorm of early 2024): each part's
    extra bytes are the eager model's for that part alone, and the three parts add up to the whole."""
    cfg = canonical_model({**preset_entry("llama-2-7b"), "layers": 2, "seq_len": 1024})
    dev = DeviceModel.of(H100, "bf16")
    lay = Layout(gpus=8, global_batch=16, micro_batch=2, host_block_s=(0.0, 0.0))
    mem = {x: block_times(cfg, dataclasses.replace(lay, elementwise=x), dev, 2) for x in
           ("fused", "eager", "norm", "rotary", "gated", "rotary+gated")}
    for p in ("fwd", "bwd"):
        extra = {x: mem[x][p]["memory"] - mem["fused"][p]["memory"] for x in mem}
        assert all(extra[x] > 0 for x in ("norm", "rotary", "gated"))
        assert extra["norm"] + extra["rotary"] + extra["gated"] == pytest.approx(extra["eager"], rel=1e-12)
        assert extra["rotary"] + extra["gated"] == pytest.approx(extra["rotary+gated"], rel=1e-12)


def test_layernorm_gelu_without_rotary_is_the_same_eager_or_fused():
    """torch's layer_norm and gelu are one kernel each even in eager mode; a model without rotary has none to fuse."""
    cfg = canonical_model({**preset_entry("gpt2-small"), "layers": 2})
    lay = Layout(gpus=8, global_batch=16, micro_batch=2)
    a = predict_step(cfg, lay, H100, "bp")
    b = predict_step(cfg, dataclasses.replace(lay, elementwise="eager"), H100, "bp")
    assert a.step_time_s == b.step_time_s


def test_eager_costs_more_in_the_step_and_in_each_recomputed_forward():
    cfg = canonical_model({**preset_entry("llama-2-7b"), "layers": 4, "seq_len": 2048})
    lay = Layout(gpus=8, global_batch=16, micro_batch=2, sharding="fsdp", host_block_s=(0.0, 0.0))
    for recompute in ("none", "full"):
        fused = dataclasses.replace(lay, recompute=recompute)
        eager = dataclasses.replace(fused, elementwise="eager")
        a, b = predict_step(cfg, fused, H100, "bp"), predict_step(cfg, eager, H100, "bp")
        assert b.parts["memory"] > a.parts["memory"] and b.step_time_s > a.step_time_s
        assert a.model_flops == b.model_flops  # the kernels move bytes; the FLOPs are the model's
    blocks = cfg.layers
    dev = DeviceModel.of(H100, "bf16")
    bt_f = block_times(cfg, lay, dev, 2)
    bt_e = block_times(cfg, dataclasses.replace(lay, elementwise="eager"), dev, 2)
    extra_fwd = bt_e["fwd"]["memory"] - bt_f["fwd"]["memory"]
    none = [predict_step(cfg, dataclasses.replace(lay, recompute="none", elementwise=x), H100, "bp").parts["memory"]
            for x in ("fused", "eager")]
    full = [predict_step(cfg, dataclasses.replace(lay, recompute="full", elementwise=x), H100, "bp").parts["memory"]
            for x in ("fused", "eager")]
    # full recompute repeats each block's forward, its eager kernels included: once more per block and micro-batch
    M = lay.accumulation
    assert (full[1] - full[0]) - (none[1] - none[0]) == pytest.approx(M * blocks * extra_fwd, rel=1e-9)


def test_the_framework_says_eager_or_fused_and_compile_overrides_it(capsys):
    import json

    assert framework("torchtitan").elementwise == "eager" and framework("fsdp2").elementwise == "eager"
    assert framework("nemo").elementwise == "fused" and framework("olmo-core").elementwise == "fused"
    assert framework("maxtext").elementwise == "fused" and framework("maxtext").attention == "cudnn"  # XLA fuses
    assert "torchtitan/models/norms.py" in framework("torchtitan").sources["elementwise"]
    base = ["plan", "--preset", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "16",
            "--micro-batch", "1", "--checkpointing", "full", "--rule", "bp", "--tokens", "1e9", "--format", "json"]

    def row(*flags):
        assert cli.main([*base, *flags]) == 0
        return json.loads(capsys.readouterr().out)[0]

    default, compiled, eager = (row("--framework", "torchtitan", *f) for f in ([], ["--compile"], ["--no-compile"]))
    assert default["step_time_s"] == eager["step_time_s"] > compiled["step_time_s"]
    assert default["step_memory_s"] > compiled["step_memory_s"]
    # (torchtitan's checkpoint repeats the whole block; compiled, its backward graph leaves out the down projection)
    assert default["step_matmul_s"] > compiled["step_matmul_s"]
    assert "--compile given" in compiled["source_framework"]
    assert "op by op" in default["source_framework"] and "--no-compile given" in eager["source_framework"]
    nemo, nemo_eager = row("--framework", "nemo"), row("--framework", "nemo", "--no-compile")
    assert "op by op" not in nemo["source_framework"] and nemo_eager["step_time_s"] > nemo["step_time_s"]


def test_a_published_row_may_state_its_kernels_and_a_bad_value_is_one_line():
    rows = runs.load(Path(__file__).resolve().parents[1] / "benchmarks" / "published_runs.csv")
    tiny = next(r for r in rows if r["source"] == "tinyllama")
    assert tiny["framework"] == "fsdp1" and runs.layout_of(tiny).elementwise == "fused"  # flash-attn's fused kernels
    titan = next(r for r in rows if r["source"] == "torchtitan")
    assert runs.layout_of(titan).elementwise == "eager"  # the framework's
    with pytest.raises(ConfigError, match=r"elementwise: 'compiled' is not allowed \(allowed: fused, eager, or some of "
                                          r"norm, rotary, gated"):
        runs.layout_of({**titan, "elementwise": "compiled"})


def test_the_catalogue_refuses_an_unknown_elementwise_value():
    from trainingcost.config.frameworks import parse_framework

    entry = {"label": "x", "dp_overlap": 1.0, "tp_overlap": 0.0, "zero3_granularity": "block", "zero3_gather": "block",
             "attention": "flash", "sharding": "fsdp", "dp_rails": True, "elementwise": "jit",
             "can": {"shardings": ["none"], "tensor": False, "pipeline": False, "interleave": False,
                     "sequence_parallel": False, "uneven": False},
             "cite": {k: "s" for k in ("dp_overlap", "tp_overlap", "zero3_granularity", "zero3_gather", "attention",
                                       "sharding", "dp_rails", "can", "elementwise")}}
    with pytest.raises(ConfigError, match=r"elementwise: 'jit' is not allowed \(allowed: fused, eager\)"):
        parse_framework("x", entry, {"s": "a source"}, "frameworks.x")


def test_the_workflow_plan_section_takes_compile():
    from trainingcost.pipeline import load, section_spec

    for given, expected in ((None, "eager"), (True, "fused"), (False, "eager")):
        plan = {"framework": "torchtitan", **({} if given is None else {"compile": given})}
        filled = load({"sweep": {"presets": ["llama-2-7b"]}, "plan": plan})
        cfg = canonical_model(preset_entry("llama-2-7b"))
        spec = section_spec(filled["plan"], cfg, device("a100-80gb"))
        assert spec.elementwise == expected
        assert ("plan.compile given" in spec.framework_source) == (given is not None)


def _traced_bytes(fn, *inputs):
    """The bytes each aten kernel reads and writes in fn's forward and in its backward, per element of the first
    input, traced with torch's dispatch mode on CPU (the same aten ops autograd runs on a GPU; views move nothing,
    and a broadcast input is read once, not per element)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def nbytes(t):
        n = 1
        for size, stride in zip(t.shape, t.stride()):
            n *= size if stride != 0 else 1
        return n * t.element_size()

    class Trace(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.kernels = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if torch.Tag.view_copy in func.tags or func.is_view or func._schema.name.split("::")[1] in ("detach",):
                return out
            tensors = [a for a in tree_flatten((args, kwargs, out))[0] if isinstance(a, torch.Tensor)]
            self.kernels.append(sum(nbytes(t) for t in tensors))
            return out

    elements = inputs[0].numel()
    fwd = Trace()
    with fwd:
        y = fn(*inputs)
    grad = torch.randn_like(y)
    bwd = Trace()
    with bwd:
        y.backward(grad)
    big = lambda ks: [round(k / elements, 1) for k in ks if k / elements >= 0.5]  # noqa: E731 (tiny kernels aside)
    return big(fwd.kernels), big(bwd.kernels)


def test_the_eager_byte_counts_are_the_kernels_torchs_autograd_runs():
    """eager_kernels against the aten kernels torch itself runs for torchtitan's RMSNorm, rotary embedding and
    SwiGLU, forward and backward, bf16 activations (torchtitan/models/norms.py and llama/model.py at 9dec370)."""
    import torch

    from trainingcost.analytic.steptime.step import eager_kernels

    eager = {k: [float(x) for x in v] for k, v in eager_kernels(2).items()}
    approx = lambda xs: pytest.approx(xs, abs=0.15)  # noqa: E731 (the rotary's frequencies: 4 / heads per element)
    n, d = 64, 512

    def rmsnorm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * w

    x = torch.randn(n, d, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(d, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = _traced_bytes(rmsnorm, x, w)
    assert fwd == approx(eager[("rmsnorm", "fwd")]) and sorted(bwd) == approx(sorted(eager[("rmsnorm", "bwd")]))

    freqs = torch.polar(torch.ones(n, 32), torch.randn(n, 32)).view(1, n, 1, 32)

    def rotary(q):
        q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(q_ * freqs).flatten(3).type_as(q)

    q = torch.randn(1, n, 32, 64, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = _traced_bytes(rotary, q)
    assert fwd == approx(eager[("rotary", "fwd")]) and bwd == approx(eager[("rotary", "bwd")])

    h1 = torch.randn(n, d, dtype=torch.bfloat16, requires_grad=True)
    h3 = torch.randn(n, d, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = _traced_bytes(lambda a, b: torch.nn.functional.silu(a) * b, h1, h3)
    assert fwd == approx(eager[("gated", "fwd")]) and sorted(bwd) == approx(sorted(eager[("gated", "bwd")]))


def test_compile_is_refused_where_the_rate_is_given_and_the_api_passes_false(capsys):
    import trainingcost

    base = ["plan", "--preset", "llama-2-7b", "--gpu", "a100-80gb", "--gpus", "8", "--rule", "bp", "--tokens", "1e9"]
    assert cli.main([*base, "--mfu", "0.4", "--compile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torch.compile's kernels are priced in the predicted step" in err
    kwargs = dict(preset="llama-2-7b", gpu="a100-80gb", gpus=8, framework="megatron", rule="bp", tokens=1e9)
    fused = trainingcost.plan(**kwargs).table.iloc[0]
    eager = trainingcost.plan(**kwargs, compile=False).table.iloc[0]
    assert eager.step_time_s > fused.step_time_s and "--no-compile given" in eager.source_framework


def test_sequence_parallel_divides_the_eager_norms_too():
    cfg = canonical_model({**preset_entry("llama-2-7b"), "layers": 2, "seq_len": 1024})
    dev = DeviceModel.of(H100, "bf16")
    lay = Layout(gpus=8, global_batch=8, micro_batch=2, tp=2, host_block_s=(0.0, 0.0))
    sp = dataclasses.replace(lay, sequence_parallel=True)
    norm = {x: {y: block_times(cfg, dataclasses.replace(x_lay, elementwise=y), dev, 2)["fwd"]["memory"]
                for y in ("fused", "norm")} for x, x_lay in (("tp", lay), ("sp", sp))}
    extra = {x: norm[x]["norm"] - norm[x]["fused"] for x in norm}
    m, d = 2 * cfg.seq_len, cfg.d_model
    rms_f = [6, 8, 4, 8, 6, 4]
    by_hand = {x: 2 * (sum(dev.memory(b * m * d / s) for b in rms_f) - dev.memory(4 * m * d / s))
               for x, s in (("tp", 1), ("sp", 2))}
    assert extra["tp"] == pytest.approx(by_hand["tp"], rel=1e-12) and extra["sp"] == pytest.approx(by_hand["sp"],
                                                                                                  rel=1e-12)
