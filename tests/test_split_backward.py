"""The backward split into input and weight gradients (analytic/tape/split.py) against torch's own split: the
last pipeline stage of our model run through torch.distributed.pipelining's stage_backward_input and
stage_backward_weight under the tensor meter, to the byte, phase by phase."""

from __future__ import annotations

import numpy as np
import pytest

from trainingcost.analytic.tape import Tape
from trainingcost.analytic.tape.group import Group, groups
from trainingcost.analytic.tape.split import last_stage_step, split_stage_bytes, supported
from trainingcost.config import canonical_model
from trainingcost.config.sweep import configs_frame

torch = pytest.importorskip("torch")

BASE = dict(arch="decoder", layers=2, d_model=16, heads=4, d_ff=24, seq_len=7, batch=2, vocab=300)
CASES = {  # (options, dtype): every kind of weight node (linear, LayerNorm, RMSNorm's gain) and what surrounds them
    "post-ln": (dict(), "fp32"),
    "pre-ln": (dict(norm_position="pre"), "bf16"),
    "llama": (dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none", kv_heads=2),
              "bf16"),
    "llama-fp32": (dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none"), "fp32"),
    "qk-norm": (dict(norm="rmsnorm", norm_position="pre", qk_norm="head"), "fp32"),
    "relu": (dict(ffn="relu", layers=3), "bf16"),
    "parallel": (dict(norm_position="pre", parallel_block="one_norm"), "fp32"),
    "output-norm": (dict(norm_position="output"), "bf16"),
    "window": (dict(norm_position="pre", sliding_window=3), "fp32"),
    "nonparametric": (dict(norm="nonparametric", norm_position="pre", logit_softcap=20.0), "bf16"),
    "classifier": (dict(classes=3), "fp32"),
    "encoder": (dict(arch="encoder", norm_position="pre", ffn="geglu", heads=2, d_model=32, d_ff=40), "bf16"),
}
DTYPES = {"fp32": (torch.float32, 4), "bf16": (torch.bfloat16, 2)}


def metered(cfg, dtype):
    """Bytes beyond the step's start (the parameters and the stage's input) at each phase's peak."""
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

    from trainingcost.measure.memory import TensorMeter
    from trainingcost.train.model import Stream, Transformer

    torch.manual_seed(0)
    model = Transformer(cfg).to(dtype)
    stack = cfg.stacks[0]
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.rows(stack)))
    targets = torch.randint(0, cfg.out_width, (cfg.batch,) if cfg.classes else (cfg.batch, cfg.rows(stack)))
    stages = [stage for stage in model.stages() if stage.kind != "embedding"]  # the last stage: the rest
    weights = [p for name, p in model.named_parameters() if not name.startswith(f"{stack}.embedding")]
    with torch.no_grad():
        x = getattr(model, stack).embed(tokens).clone().requires_grad_(True)  # what the previous stage sent
    meter = TensorMeter()
    with meter:
        meter.begin(model, None, persistent=[x])
        s = Stream({stack: tokens})
        s.x = x
        for mask in (getattr(model, stack).window_mask, getattr(model, stack).attention_masks):
            if mask is not None:  # (the stack's buffers, read by every block)
                s.position_bias = mask
        with meter.in_phase("forward"):
            for stage in stages:
                stage.run(s)
            logits = s.logits
            del s
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, -2) if not cfg.classes else
                                                     logits.float(), targets.flatten() if not cfg.classes else targets)
            del logits
        with meter.in_phase("backward_input"):
            grads, param_groups = stage_backward_input([loss], None, [x], iter(weights))
        with meter.in_phase("backward_weight"):
            stage_backward_weight(iter(weights), param_groups)
            del param_groups, grads
        del loss
    reading = meter.reading(model, None, persistent=[x])
    assert set(reading.phase_peaks) == {"forward", "backward_input", "backward_weight"}
    assert all(p.grad is not None for p in weights)  # W made every weight's gradient
    return {phase: peak - reading.start for phase, peak in reading.phase_peaks.items()}


def replayed(cfg, size):
    frame = configs_frame([("", cfg)])
    (rows, key), = groups(frame)
    t = Tape(np.zeros(1, dtype=np.int64))
    last_stage_step(t, Group.of(frame, rows, key, size))
    return {phase: int(peak[0]) for phase, peak in t.phase_peaks.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_split_backward_equals_torchs_to_the_byte(case):
    options, dtype = CASES[case]
    cfg = canonical_model({**BASE, **options}, "")
    torch_dtype, size = DTYPES[dtype]
    assert replayed(cfg, size) == metered(cfg, torch_dtype)


def test_what_a_micro_batch_holds_between_its_input_and_weight_gradients():
    """After B the stage keeps its whole graph (retain_graph), every weight node's output gradient and the input's
    gradient; W frees them. A Llama 2 7B stage of 4 blocks and the head at 4,096 tokens in bf16: 44% more than after
    its forward (zero-bubble's last rank holds p micro-batches so in torch's ZB-H1 order)."""
    cfg = canonical_model(dict(arch="decoder", layers=4, d_model=4096, heads=32, d_ff=11008, seq_len=4096, batch=1,
                               vocab=32000, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary",
                               bias="none"), "")
    out = {k: int(v[0]) for k, v in split_stage_bytes(configs_frame([("", cfg)]), 2).items()}
    assert out["after_input"] > out["after_forward"] > 0
    assert out["peak_backward_input"] >= out["after_input"] and out["peak_forward"] >= out["after_forward"]
    assert out["after_input"] / out["after_forward"] == pytest.approx(1.44, abs=0.01)
    # by hand, beyond the forward's: each weight node's output gradient (q, k, v, o, down: d wide, gate and up: d_ff,
    # in bf16; the two RMSNorms' gains and the final norm's in float32, their written-out form), the head's (V wide),
    # the input's gradient, less the loss's float32 log-probabilities and total weight, gone with the detached output
    M, d, ff, V = 4096, 4096, 11008, 32000
    blocks = 4 * ((5 * M * d + 2 * M * ff) * 2 + 2 * M * d * 4)
    assert out["after_input"] - out["after_forward"] == blocks + M * d * 4 + M * V * 2 + M * d * 2 - M * V * 4 - 4


def test_a_stage_the_split_does_not_replay_says_why():
    frame = configs_frame([("", canonical_model({**BASE, "experts": 4, "experts_per_token": 2}, ""))])
    (rows, key), = groups(frame)
    assert "mixture of experts" in supported(Group.of(frame, rows, key, 4))
    assert (split_stage_bytes(frame, 4)["after_input"] == -1).all()


def test_the_ratio_a_block_keeps_between_b_and_w_is_the_same_for_every_block():
    """retained_ratio reads one block from the difference of two stages (two blocks less one); three less two gives
    the same to the byte (each block keeps what the next keeps), on Llama's and GPT-2's blocks."""
    from dataclasses import replace

    from trainingcost.analytic.tape.split import retained_ratio
    from trainingcost.config import preset_entry

    for preset in ("llama-2-7b", "gpt2-xl"):
        cfg = replace(canonical_model(preset_entry(preset, "p"), ""), tie_embeddings=False, batch=1)
        frame = configs_frame([(str(n), replace(cfg, dec_layers=n)) for n in (1, 2, 3)])
        out = split_stage_bytes(frame, 2)
        kept, held = np.diff(out["after_forward"]), np.diff(out["after_input"])
        assert kept[0] == kept[1] and held[0] == held[1]
        assert retained_ratio(cfg, 2) == pytest.approx(held[0] / kept[0], rel=1e-12) and held[0] > kept[0]


def test_a_framework_that_runs_torchs_split_keeps_more_under_a_zero_bubble_schedule(capsys):
    """torchtitan (split_backward: retained, torch.distributed.pipelining) keeps retained_ratio times the activations
    a framework that frees at B keeps under ZB-H1, ZB-V and DualPipe; under 1F1B the same; a bad value in a framework
    entry is one line."""
    import trainingcost as tc
    from trainingcost.analytic.tape.split import retained_ratio
    from trainingcost.config import preset_entry
    from trainingcost.config.errors import ConfigError
    from trainingcost.config.frameworks import parse_framework

    common = dict(preset="llama-2-7b", tokens=1e10, gpu="h100-sxm", gpus=64, tp=2, pp=4, rule="bp", micro_batch=1,
                  global_batch=64, sharding="none")
    ratio = retained_ratio(canonical_model(preset_entry("llama-2-7b", "p"), ""), 2)
    for schedule, factor in (("zb-h1", ratio), ("zb-v", ratio), ("dualpipe", ratio), ("1f1b", 1.0)):
        titan, core = (tc.plan(**common, schedule=schedule, framework=fw).table.iloc[0]
                       for fw in ("torchtitan", "megatron-core"))
        assert titan["mem_activations"] == pytest.approx(core["mem_activations"] * factor, rel=1e-9), schedule
        # the plan says so where it applies (its pipeline assumption)
        assert (f"split backward: a micro-batch between its input and weight gradients keeps its graph and its weight "
                f"nodes' output gradients, {ratio:.2f}x its activations" in titan["pipeline_split"]) == (factor != 1.0)
        assert "split backward" not in core["pipeline_split"]
    entry = {"label": "x", "dp_overlap": 1.0, "tp_overlap": 0.0, "zero3_granularity": "block", "zero3_gather": "block",
             "attention": "flash", "sharding": "fsdp", "dp_rails": True, "split_backward": "kept",
             "can": {"shardings": ["none"], "tensor": False, "pipeline": False, "interleave": False,
                     "sequence_parallel": False, "uneven": False, "replicate": []},
             "cite": {k: "s" for k in ("dp_overlap", "tp_overlap", "zero3_granularity", "zero3_gather", "attention",
                                       "sharding", "dp_rails", "can", "split_backward")}}
    with pytest.raises(ConfigError, match=r"^frameworks.x.split_backward: 'kept' is not allowed \(allowed: freed, "
                                          r"retained\)$"):
        parse_framework("x", entry, {"s": "a source"}, "frameworks.x")
