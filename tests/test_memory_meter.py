"""The tensor-memory meter (issue 12): against hand counts, against torch's profiler, and in a measured run."""

import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from trainingcost.analytic.memory import memory_table
from trainingcost.config import RuleOptions, TrainSpec, canonical_model, configs_frame
from trainingcost.config.model import config_from_row
from trainingcost.measure.memory import CATEGORIES, TensorMeter, rule_tensors
from trainingcost.train.run import build_model, make_task

from test_train import TINY, run_here

FP32 = 4


def test_the_meter_counts_outputs_once_and_frees_them_by_hand():
    a, b, c = torch.randn(64, 32), torch.randn(32, 16), torch.randn(64, 16)
    meter = TensorMeter()
    with meter:
        meter.begin(persistent=[a, b, c])
        # what the step owns at its start (tensors an earlier test of this process left alive are outside it)
        assert meter.start - meter.outside == (64 * 32 + 32 * 16 + 64 * 16) * FP32
        product = a @ b  # 64 x 16
        total = product + c  # another 64 x 16 while the first is alive: the peak
        del product
        flat = total.view(-1)  # a view: no new storage
        total.add_(1.0)  # in place: no new storage
        del flat
    reading = meter.reading(persistent=[a, b, c])
    assert reading.peak - reading.start == 2 * 64 * 16 * FP32
    assert reading.end - reading.start == 64 * 16 * FP32  # `total` is still alive
    assert reading.peak_op == "add" and reading.peak_phase == "forward"
    assert reading.at_peak["other_persistent"] == reading.start  # the reading's start: the step's own bytes
    assert reading.at_peak["activations"] == 2 * 64 * 16 * FP32


def test_one_linear_layers_forward_and_backward_by_hand():
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 16)
    x = torch.randn(4, 8)
    meter = TensorMeter()
    with meter:
        meter.begin(layer, persistent=[x])
        with meter.in_phase("forward"):
            y = layer(x)  # addmm: 4 x 16
            loss = y.square().sum()  # square: 4 x 16, then a scalar
        with meter.in_phase("backward"):
            loss.backward()  # dW 16 x 8 and db 16 stay as .grad
    reading = meter.reading(layer, persistent=[x])
    params = (16 * 8 + 16) * FP32
    assert reading.start == params + 4 * 8 * FP32
    assert reading.phase_peaks["forward"] - reading.start == (4 * 16 + 4 * 16 + 1) * FP32
    # y² is freed as soon as it is summed (square saves its input, sum saves nothing): y and the loss stay
    # alive, and the backward leaves dW and db as .grad.
    assert reading.end - reading.start == (4 * 16 + 1) * FP32 + params
    assert reading.at_peak["parameters"] == params


def profiled(rule_name: str):
    cfg = canonical_model(dict(arch="decoder", layers=2, d_model=64, heads=4, d_ff=256, vocab=256, seq_len=64, batch=16), "")
    model, rule = build_model(TrainSpec(cfg=cfg, task="lm", rule=rule_name, steps=4, seed=0, options=RuleOptions()),
                              torch.device("cpu"))
    task = make_task("lm", cfg, None)
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        rule.step(task.batch(generator))
    batch = task.batch(generator)
    rule.optimizer.zero_grad(set_to_none=True)  # no block allocated before the profiler is freed inside it
    meter = TensorMeter()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with meter:
            meter.begin(model, rule.optimizer, rule_tensors(rule), [*batch.tokens.values(), batch.targets])
            start = meter.live
            rule.step(batch)
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns())
    running, peak = 0, 0
    for event in events:
        running += event.nbytes()
        peak = max(peak, running)
    return meter.peak - start, meter.live - start, peak, running


@pytest.mark.parametrize("rule", ["bp", "fa"])
def test_the_meter_equals_the_profilers_memory_events(rule):
    """Where both work, the peak and the net bytes of a step equal the profiler's allocator events to the byte."""
    meter_peak, meter_end, profiler_peak, profiler_end = profiled(rule)
    assert meter_end == profiler_end
    assert meter_peak == profiler_peak


def test_a_measured_run_records_tensor_memory_for_every_rule(tmp_path, capsys):
    for rule in ("bp", "pepita", "mempepita", "dfa"):
        out = tmp_path / rule
        status, stdout, stderr = run_here(capsys, "train", *TINY, "--steps", "6", "--rule", rule, "--out-dir", str(out))
        assert status == 0, stderr
        measured = pd.read_parquet(out / "measured.parquet")
        run = measured.iloc[0]
        breakdown = sum(run[f"tensor_peak_{name}_bytes"] for name in CATEGORIES)
        assert run["tensor_peak_bytes"] == breakdown > run["tensor_start_bytes"] > 0
        # The parameters alive at the peak are exactly the memory model's parameter bytes.
        cfg = config_from_row(run)
        model = memory_table(configs_frame([("", cfg)]), [rule], ["fp32"], ["sgd"]).iloc[0]
        assert run["tensor_peak_parameters_bytes"] == model["parameters"]
        assert run["tensor_peak_op"] and run["tensor_peak_phase"] in set(measured["phase"]) | {"forward", "backward"}
        phases = measured.dropna(subset=["phase_tensor_peak_bytes"])
        assert phases["phase_tensor_peak_bytes"].max() == run["tensor_peak_bytes"]


@pytest.mark.parametrize("flag,value", [("--dtype", "fp8"), ("--optimizer", "lion")])
def test_an_unknown_dtype_or_optimizer_for_the_memory_table_is_one_line(capsys, flag, value):
    status, stdout, stderr = run_here(capsys, "estimate", "--preset", "paper-example", "--memory", "--format", "csv", flag, value)
    lines = stderr.splitlines()
    assert status == 2 and stdout == "" and len(lines) == 1
    assert f"argument {flag}: invalid choice: '{value}'" in lines[0]


PERSISTENT_ARCHES = {
    "decoder": (dict(arch="decoder", layers=2, vocab=256), "lm"),
    "encoder": (dict(arch="encoder", layers=2, vocab=16, classes=3), "classify"),
    "encoder-decoder": (dict(arch="encoder-decoder", layers=1, vocab=32), "copy"),
}
PERSISTENT_CASES = [(arch, rule, "sgd", "fp32") for arch in PERSISTENT_ARCHES for rule in
                    ("bp", "pepita", "mempepita", "fa", "kp", "wm", "dfa", "tp", "dtp", "lra")]
PERSISTENT_CASES += [(arch, rule, "adam", "fp32") for arch in PERSISTENT_ARCHES for rule in ("bp", "pepita", "kp", "dtp", "lra")]
PERSISTENT_CASES += [(arch, rule, optimizer, "bf16") for arch in PERSISTENT_ARCHES for rule in ("bp", "dfa")
                     for optimizer in ("sgd", "adam")]


def test_the_bytes_held_between_steps_equal_the_memory_model():
    """Parameters, gradients, feedback matrices and optimizer state at a step's start, as metered, equal the memory
    model to the byte: 3 arches x 10 rules with SGD, Adam (with its float32 `step` scalar per parameter tensor) on
    BP, PEPITA, KP, DTP and LRA (whose trained feedback matrices, inverses and error weights have step scalars
    too), and bf16."""
    from trainingcost.measure.recorder import StepRecorder
    from trainingcost.train.run import run_steps

    mismatches = []
    for arch, rule, optimizer, dtype in PERSISTENT_CASES:
        fields, task = PERSISTENT_ARCHES[arch]
        cfg = canonical_model(dict(d_model=16, heads=2, d_ff=32, seq_len=8, batch=2, **fields), "")
        spec = TrainSpec(cfg=cfg, task=task, rule=rule, steps=4, seed=0, measure=True, dtype=dtype,
                         options=RuleOptions(optimizer=optimizer))
        recorders = []
        done = run_steps(spec, lambda r, d: recorders.append(StepRecorder(r, d, 2)) or recorders[-1])
        assert done.status == "ok", (arch, rule, done.message)
        metered = recorders[0].memory.at_start
        model = memory_table(configs_frame([("", cfg)]), [rule], [dtype], [optimizer]).iloc[0]
        for part in ("parameters", "gradients", "feedback", "optimizer_state"):
            if metered[part] != int(model[part]):
                mismatches.append((arch, rule, optimizer, dtype, part, metered[part], int(model[part])))
    assert not mismatches, mismatches
