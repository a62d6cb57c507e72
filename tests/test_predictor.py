"""The trace-driven step-time predictor: tracing (against the FLOP meter, without arithmetic), pricing by hand,
and a calibration that converges or refuses."""

import dataclasses
import json
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from trainingcost.analytic import rule_names
from trainingcost.config import RuleOptions, TrainSpec, canonical_model
from trainingcost.findings import calibration as C
from trainingcost.findings.predictor import Pricer, accuracy, cell_totals, predict_steps, price
from trainingcost.measure.flops import analytic_phase, metering
from trainingcost.measure.trace import trace_step
from trainingcost.train.data import make_task
from trainingcost.train.run import build_model

RULES = ["bp", "pepita", "mempepita", "fa", "kp", "wm", "dfa"]


def tiny(arch="decoder", **sizes):
    fields = dict(arch=arch, layers=2, d_model=32, heads=4, d_ff=64, seq_len=16, batch=4, vocab=256)
    fields.update(sizes)
    return canonical_model(fields, "")


def spec(cfg, rule, optimizer="sgd"):
    task = "reverse" if cfg.arch == "encoder-decoder" else "lm"
    return TrainSpec(cfg=cfg, task=task, rule=rule, steps=3, seed=0, measure=True, options=RuleOptions(optimizer=optimizer))


def metered(s: TrainSpec) -> dict:
    """The FLOP meter's count of the second step of a real run, per (layer, analytic phase)."""
    model, rule = build_model(s, torch.device("cpu"))
    batch = make_task(s.task, s.cfg).batch(torch.Generator().manual_seed(s.seed + 2))
    rule.step(batch)
    with metering(model) as meter:
        rule.step(batch, meter.in_phase)
    counts: dict = {}
    for (layer, phase), n in meter.counts.items():
        counts[(layer, analytic_phase(phase))] = counts.get((layer, analytic_phase(phase)), 0) + n
    return {k: v for k, v in counts.items() if v}


@pytest.mark.parametrize("arch,optimizer", [("decoder", "adam"), ("encoder", "sgd"), ("encoder-decoder", "momentum")])
def test_trace_equals_the_meter_in_every_cell(arch, optimizer):
    cfg = tiny(arch)
    for rule in RULES:
        s = spec(cfg, rule, optimizer)
        cells = cell_totals(trace_step(s))
        traced = {(l, p): int(f) for l, p, f in cells[["layer", "phase", "flops"]].itertuples(index=False) if f}
        assert traced == metered(s), (arch, rule, optimizer)


def test_a_trace_records_bytes_classes_and_phases():
    trace = trace_step(spec(tiny(), "bp", "adam"))
    assert set(trace["cls"]) <= {"matmul", "attention", "elementwise", "view", "host"}
    mm = trace[trace["op"] == "aten.addmm.default"].iloc[0]
    args = json.loads(mm["signature"])[0]
    (bias, _, _), (a, _, _), (b, _, _) = (x["t"] for x in args[:3])
    assert mm["bytes_read"] == 4 * (np.prod(bias) + np.prod(a) + np.prod(b))
    assert mm["bytes_written"] == 4 * a[0] * b[1] and mm["flops"] == 2 * a[0] * a[1] * b[1]
    views = trace[trace["cls"] == "view"]
    assert (views["bytes_read"] == 0).all() and (views["bytes_written"] == 0).all()
    # BP's weight gradients count as weight_update (FLOPs) but run inside the timed backward phase.
    grads = trace[(trace["phase"] == "weight_update")]
    assert len(grads) and set(grads["timed_phase"]) == {"backward"}
    assert {"forward", "backward", "optimizer_step"} <= set(trace["timed_phase"])


def test_tracing_needs_no_arithmetic():
    """d_model 4096, 32 blocks, 4096 tokens: 6.4 billion parameters (26 GB in fp32) never allocated."""
    cfg = canonical_model(dict(arch="decoder", layers=32, d_model=4096, heads=32, d_ff=16384, seq_len=4096, batch=1,
                               vocab=50257), "")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    trace = trace_step(TrainSpec(cfg=cfg, task="lm", rule="bp", steps=2, seed=0, options=RuleOptions(optimizer="adam")))
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    flops = int((trace["flops"] * trace["count"]).sum())
    assert flops > 1.9e14  # 6 x 6.4e9 parameters x 4096 tokens, and attention
    assert grown < 2 * 2**30, grown  # its time: benchmarks/bench_tracing.py (a test bounds memory, never wall time)


def calibration(kernels, launch=1e-6, view=5e-7, ladder=((1_000, 1e-6 + 1e-6), (1_000_000, 1e-6 + 1e-4))):
    return {"launch_overhead_s": launch, "view_overhead_s": view, "kernels": kernels,
            "copy_ladder": [{"bytes": b, "seconds": s} for b, s in ladder]}


def mm_sig(m, k, n):
    return json.dumps([[{"t": [[m, k], [k, 1], "float32"]}, {"t": [[k, n], [n, 1], "float32"]}], {"kw": {}}])


def test_the_pricing_by_hand():
    """A calibrated matmul, an elementwise op the calibration never saw, and a view."""
    mm = {"op": "aten.mm.default", "signature": mm_sig(8, 16, 32), "cls": "matmul", "flops": 2 * 8 * 16 * 32,
          "bytes_read": 4 * (8 * 16 + 16 * 32), "bytes_written": 4 * 8 * 32, "seconds": 7e-6}
    cal = calibration([mm])
    gelu = {"op": "aten.gelu.default", "signature": "[]", "cls": "elementwise", "flops": 0, "bytes_read": 10_000,
            "bytes_written": 10_000}
    view = {"op": "aten.view.default", "signature": "[]", "cls": "view", "flops": 0, "bytes_read": 0, "bytes_written": 0}
    trace = pd.DataFrame([{**mm, "count": 3}, {**gelu, "count": 2}, {**view, "count": 5}]).drop(columns="seconds")
    trace = trace.assign(layer="x", phase="forward", timed_phase="forward", config_id="c", rule="bp", seed=0)
    # The ladder's bandwidth, linear in log bytes between 1e3 B at 1e-6 s and 1e6 B at 1e-4 s (launch taken off):
    # at 2e4 B, log rate = log(1e9) + (log 2e4 - log 1e3) / (log 1e6 - log 1e3) * (log 1e10 - log 1e9).
    rate = np.exp(np.log(1e9) + np.log(20) / np.log(1000) * np.log(10))
    expected = 3 * 7e-6 + 2 * (1e-6 + 20_000 / rate) + 5 * 5e-7
    priced = price(trace, cal)
    assert priced["seconds"].sum() == pytest.approx(expected, rel=1e-12)
    assert priced["launch_s"].sum() == pytest.approx(5 * 5e-7)  # dispatches without a kernel
    assert priced["matmul_s"].sum() == pytest.approx(3 * 7e-6)
    assert priced["elementwise_s"].sum() == pytest.approx(2 * (1e-6 + 20_000 / rate))
    step = predict_steps(trace, cal).iloc[0]
    assert step["predicted_time_s"] == pytest.approx(expected, rel=1e-12)


def test_an_uncalibrated_matmul_takes_the_rate_of_its_neighbours():
    """Two calibrated products at 1 and 4 GFLOP/s; one between them (equally far in log space) gets the geometric
    mean of their rates, 2 GFLOP/s, plus the launch."""
    small, large = (16, 16, 16), (64, 64, 64)
    kernels = [{"op": "aten.mm.default", "signature": mm_sig(m, k, n), "cls": "matmul", "flops": 2 * m * n * k,
                "bytes_read": 0, "bytes_written": 0, "seconds": 1e-6 + 2 * m * n * k / r}
               for (m, k, n), r in ((small, 1e9), (large, 4e9))]
    pricer = Pricer(calibration(kernels))
    flops = 2 * 32 ** 3
    assert pricer.seconds("aten.mm.default", "matmul", mm_sig(32, 32, 32), flops, 0) == pytest.approx(1e-6 + flops / 2e9)


def test_sanity_refuses_a_larger_gemm_that_runs_much_slower_per_flop():
    rows = [{"op": "aten.mm.default", "signature": mm_sig(m, m, m), "cls": "matmul", "flops": 2 * m ** 3,
             "seconds": 2 * m ** 3 / rate} for m, rate in ((16, 1e9), (64, 2e8))]
    assert len(C.sanity_violations(pd.DataFrame(rows))) == 1  # 64^3 at 5x slower per FLOP than 16^3
    rows[1]["seconds"] = 2 * 64 ** 3 / 5e8
    assert C.sanity_violations(pd.DataFrame(rows)) == []  # 2x: allowed


@pytest.fixture(scope="module")
def small_trace():
    return pd.concat([trace_step(spec(tiny(layers=1, d_model=16, seq_len=8, batch=2), r)) for r in RULES])


def test_calibration_converges_with_a_steady_clock(small_trace):
    def clock(fn, calls):
        return 1e-5
    result = C.calibrate(torch.device("cpu"), "fp32", small_trace, clock=clock)
    assert result["rounds"] == C.MIN_HOST_ROUNDS and result["round_agreement"] == 0.0  # the host micro-steps: 7
    alone = C.calibrate(torch.device("cpu"), "fp32", small_trace, clock=clock, host=False)
    assert alone["rounds"] == C.MIN_ROUNDS
    assert len(result["kernels"]) == len(C.kernels(small_trace)) and result["launch_overhead_s"] == 1e-5


def test_calibration_refuses_on_a_busy_machine(small_trace, tmp_path):
    """A machine that gets 30% busier with every round: the rounds never agree, and the calibration stops at its cap."""
    calls: dict = {}

    def clock(fn, n):
        calls[id(fn)] = calls.get(id(fn), 0) + 1
        return 1e-5 * 1.3 ** calls[id(fn)]
    with pytest.raises(C.CalibrationBusy, match="machine is busy.*no calibration written"):
        C.calibrate(torch.device("cpu"), "fp32", small_trace, clock=clock, time_cap_s=0.5)


def test_the_calibrate_command_writes_nothing_when_busy(small_trace, tmp_path, monkeypatch, capsys):
    from trainingcost.cli import main

    trace_path = tmp_path / "trace.parquet"
    small_trace.to_parquet(trace_path)

    def busy(*args, **kwargs):
        raise C.CalibrationBusy("calibration: the machine is busy: test; no calibration written")
    monkeypatch.setattr(C, "calibrate", busy)
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--trace", str(trace_path), "--device", "cpu", "--out", str(out)]) == 1
    assert not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "machine is busy" in err[0]


def test_a_real_calibration_times_every_kernel_and_prices_its_trace_exactly(small_trace):
    torch.set_num_threads(1)
    result = C.calibrate(torch.device("cpu"), "fp32", small_trace, tolerance=0.5, time_cap_s=60, keep_untrusted=True)
    timed = pd.DataFrame(result["kernels"])
    assert (timed["seconds"] > 0).all() and len(timed) == len(C.kernels(small_trace))
    assert set(timed["cls"]) == {"matmul", "attention", "elementwise"}
    priced = price(small_trace, result)
    kernel = priced[priced["cls"].isin(["matmul", "attention", "elementwise"])]
    exact = dict(zip(zip(timed["op"], timed["signature"]), timed["seconds"]))
    assert np.allclose(kernel["op_seconds"], [exact[(o, s)] * n for o, s, n in
                                           zip(kernel["op"], kernel["signature"], kernel["count"])])


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="Linux /proc")
def test_calibration_beside_cpu_burners_is_flagged_or_refused(small_trace):
    cores = len(os.sched_getaffinity(0))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * cores)]
    try:
        time.sleep(1.0)
        try:
            result = C.calibrate(torch.device("cpu"), "fp32", small_trace, time_cap_s=20)
        except C.CalibrationBusy:
            return
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()
    assert result["load"]["timing_quality"] in ("contended", "noisy"), result["load"]


def test_accuracy_scores():
    score = accuracy([1.1, 2.2, 2.7], [1.0, 2.0, 3.0])
    assert score["mape"] == pytest.approx((0.1 + 0.1 + 0.1) / 3) and score["spearman"] == 1.0 and score["n"] == 3


def test_a_profiled_step_splits_by_the_traces_classes():
    """Ops the trace sees count at their total; ops inside them (a copy_ inside _to_copy) and ops the trace does
    not have (linear's glue) do not; the rest of the median step is launch."""
    from trainingcost.measure.trace import class_times

    trace = pd.DataFrame({"op": ["aten.addmm.default", "aten._to_copy.default", "aten.view.default"],
                          "cls": ["matmul", "elementwise", "view"]})
    profile = pd.DataFrame([("aten::linear", 4.0, ""), ("aten::addmm", 3.0, "aten::linear"),
                            ("aten::_to_copy", 1.5, ""), ("aten::copy_", 1.0, "aten::_to_copy"), ("aten::view", 0.2, "")],
                           columns=["name", "total_s", "inside"])
    split = class_times(profile, trace, profiled_s=10.0, step_s=8.0)
    assert split == {"measured_matmul_s": 3.0, "measured_attention_s": 0.0, "measured_elementwise_s": 1.5,
                     "measured_launch_s": 3.5}


def test_a_measured_run_splits_its_step_by_class():
    from trainingcost.measure.run import train

    result = train(dataclasses.replace(spec(tiny(), "wm"), steps=8))  # 2 warm-up, counted, 4 timed, profiled
    s = result.summary
    parts = [s[f"measured_{c}_s"] for c in ("matmul", "attention", "elementwise", "launch")]
    assert all(p >= 0 for p in parts) and s["measured_matmul_s"] > 0
    assert sum(parts) == pytest.approx(s["step_time_median_s"], rel=1e-9) or s["measured_launch_s"] == 0
    assert result.trace is not None and set(result.trace["rule"]) == {"wm"}


def test_probes_add_the_host_overhead_to_the_kernel_bodies():
    """calibrate(probe=True) times each run's step at minimal sizes; a probed run is predicted as its kernels'
    bodies (calibrated call less the launch) plus the probe's time, phase by phase."""
    from trainingcost.findings.predictor import predict_phases
    from trainingcost.measure.run import traced

    trace = traced(spec(tiny(layers=1, d_model=16, seq_len=8, batch=2), "dfa"), torch.device("cpu"))
    cal = C.calibrate(torch.device("cpu"), "fp32", trace, tolerance=0.5, probe=True, keep_untrusted=True)
    probes = pd.DataFrame(cal["probes"])
    assert {"forward", "backward", "error_projection", "optimizer_step"} <= set(probes["phase"])
    phases = predict_phases(trace, cal).set_index("phase")
    priced = price(trace, cal)
    kernel = priced[priced["cls"].isin(["matmul", "attention", "elementwise"])]
    for phase, seconds in probes.set_index("phase")["seconds"].items():
        mine = kernel[kernel["timed_phase"] == phase]
        bodies = np.maximum(mine["op_seconds"] - mine["count"] * cal["launch_overhead_s"], 0).sum()
        assert phases.at[phase, "predicted_time_s"] == pytest.approx(bodies + seconds)
        assert phases.at[phase, "launch_s"] == pytest.approx(seconds)
    alone = predict_phases(trace, {**cal, "probes": []})
    assert alone["predicted_time_s"].sum() == pytest.approx(priced["seconds"].sum())


def test_on_a_gpu_a_probed_phase_is_the_longer_of_host_and_kernels():
    """On a CUDA calibration (provenance device cuda) the host issues while the device runs: a probed phase is
    max(probe, kernel bodies), its launch_s the host's time beyond the kernels'; on a CPU the sum (above). Phases
    made host-bound (the probe 10x the bodies) and device-bound (the probe a tenth) by hand take each branch."""
    from trainingcost.findings.predictor import overlaps, predict_phases
    from trainingcost.measure.run import traced

    trace = traced(spec(tiny(layers=1, d_model=16, seq_len=8, batch=2), "bp"), torch.device("cpu"))
    cal = C.calibrate(torch.device("cpu"), "fp32", trace, tolerance=0.5, probe=True, keep_untrusted=True)
    priced = price(trace, cal)
    kernel = priced[priced["cls"].isin(["matmul", "attention", "elementwise"])]
    bodies = {phase: float(np.maximum(g["op_seconds"] - g["count"] * cal["launch_overhead_s"], 0).sum())
              for phase, g in kernel.groupby("timed_phase")}
    factor = {"forward": 10.0, "backward": 0.1}
    probes = [{**p, "seconds": bodies[p["phase"]] * factor[p["phase"]]} if p["phase"] in factor else p
              for p in cal["probes"]]
    gpu = {**cal, "probes": probes, "provenance": {**cal["provenance"], "device": "cuda:0"}}
    assert overlaps(gpu) and not overlaps(cal)
    on_gpu = predict_phases(trace, gpu).set_index("phase")
    on_cpu = predict_phases(trace, {**gpu, "provenance": cal["provenance"]}).set_index("phase")
    for phase, f in factor.items():
        host = bodies[phase] * f
        assert on_gpu.at[phase, "predicted_time_s"] == pytest.approx(max(host, bodies[phase]))
        assert on_gpu.at[phase, "launch_s"] == pytest.approx(max(host - bodies[phase], 0.0))
        assert on_cpu.at[phase, "predicted_time_s"] == pytest.approx(host + bodies[phase])


# Every arch with each of its tasks' target shapes: next tokens, masked tokens (a batch may draw none), one class per
# sequence, a target sequence.
PROBE_MODELS = [
    ("decoder", "lm", {}), ("encoder", "lm", {}), ("encoder", "classify", {"classes": 3, "vocab": 16}),
    ("encoder-decoder", "copy", {"vocab": 32}),
]


@pytest.mark.parametrize("rule_name", rule_names())
def test_the_probe_runs_every_rule_at_its_minimal_sizes(rule_name):
    """The probe's one sequence of two tokens runs each rule's step and leaves its weights finite: a masked-token
    batch that drew no mask has no target (0/0 in the loss, and LRA's feedback divided by its zero terms)."""
    from trainingcost.measure.probe import Probe
    from trainingcost.train.objective import IGNORE

    for arch, task, extra in PROBE_MODELS:
        cfg = canonical_model({**dict(arch=arch, layers=1, d_model=16, heads=2, d_ff=32, vocab=256, seq_len=8, batch=2),
                               **extra}, "")
        for seed in range(2):  # seed 0: the masked-token batch drew no mask before each batch had one target
            probe = Probe(TrainSpec(cfg=cfg, task=task, rule=rule_name, seed=seed, options=RuleOptions()),
                          torch.device("cpu"))
            assert (probe.batch.targets != IGNORE).any(), (arch, task, seed)
            phases = probe()
            assert all(math.isfinite(v) and v >= 0 for v in phases.values()), (arch, task, phases)
            assert all(torch.isfinite(p).all() for p in probe.model.parameters()), (rule_name, arch, task, seed)


def _row(phase, op, cls, nbytes=(0, 0), count=1, context="plain"):
    return {"layer": "l", "phase": phase, "timed_phase": phase, "op": op, "cls": cls, "count": count, "flops": 0,
            "bytes_read": nbytes[0], "bytes_written": nbytes[1], "signature": "", "context": context,
            "config_id": "c", "rule": "bp", "seed": 0}


def test_the_probe_displaces_the_other_phases_traffic_before_the_optimizer_only():
    """displaced_bytes: for the phase holding the optimizer's step call, the bytes read and written by the kernels
    of every other phase (views and host rows move none), capped at two last-level caches; no other phase."""
    from trainingcost.measure.probe import displaced_bytes
    from trainingcost.measure.trace import OPTIMIZER_CALL

    trace = pd.DataFrame([
        _row("forward", "aten.mm.default", "matmul", (300, 100), count=2),        # 800
        _row("forward", "aten.view.default", "view", (0, 0), count=5),
        _row("backward", "aten.add.Tensor", "elementwise", (1000, 500), count=3),  # 4500
        _row("optimizer_step", OPTIMIZER_CALL, "host"),
        _row("optimizer_step", "aten.add_.Tensor", "elementwise", (64, 32), count=4, context="optimizer"),
    ])
    assert displaced_bytes(trace, cache_bytes=10_000) == {"optimizer_step": 800 + 4500}
    assert displaced_bytes(trace, cache_bytes=1_000) == {"optimizer_step": 2_000}  # two caches at most
    assert displaced_bytes(trace[trace["op"] != OPTIMIZER_CALL], cache_bytes=10_000) == {}


def test_a_displaced_optimizer_reads_what_it_updates_at_dram_bandwidth():
    """The predictor adds bytes_written x count / the ladder's top-rung bandwidth to each optimizer kernel of a
    phase whose probe displaced at least the last-level cache; nothing where it displaced less."""
    from trainingcost.findings.predictor import cold_update_seconds, dram_bandwidth

    calibration = {"launch_overhead_s": 1e-6, "last_level_cache_bytes": 1000,
                   "copy_ladder": [{"bytes": 4096, "seconds": 2e-6}, {"bytes": 8_000_000, "seconds": 1e-6 + 4e-4}]}
    assert dram_bandwidth(calibration) == pytest.approx(8_000_000 / 4e-4)  # 20 GB/s
    priced = pd.DataFrame([
        _row("backward", "aten.add.Tensor", "elementwise", (1000, 500), count=3),
        _row("optimizer_step", "aten.add_.Tensor", "elementwise", (64, 32), count=4, context="optimizer"),
        _row("optimizer_step", "aten.add_.Tensor", "elementwise", (6400, 3200), count=1, context="optimizer"),
    ])
    probes = pd.DataFrame([{"config_id": "c", "rule": "bp", "seed": 0, "phase": "optimizer_step", "seconds": 1e-4,
                            "displaced_bytes": 1000}])
    expected = [0.0, 4 * 32 / 2e10, 3200 / 2e10]
    assert cold_update_seconds(priced, probes, calibration) == pytest.approx(expected, abs=1e-18)
    assert not cold_update_seconds(priced, probes.assign(displaced_bytes=999), calibration).any()
    assert not cold_update_seconds(priced, probes, {**calibration, "last_level_cache_bytes": None}).any()


def test_the_probe_displaces_the_caches_before_its_optimizer_phase_untimed(monkeypatch):
    """A probe built with displaced bytes, before the optimizer's phase and after the forward and backward were
    timed: runs its forward for the phase's gap, then writes the bytes, once per step; neither is in a phase
    nor in the work between phases."""
    import trainingcost.measure.probe as P

    calls, order = [], []
    monkeypatch.setattr(P, "displace", lambda nbytes: (calls.append(nbytes), order.append("displace"), time.sleep(0.2)))
    probe = P.Probe(spec(tiny(layers=1, d_model=16, seq_len=8, batch=2), "bp"), torch.device("cpu"),
                    {"optimizer_step": 12345})
    phases = probe()  # no gap yet: no filler
    assert calls == [12345] and order == ["displace"]
    assert sum(phases.values()) < 0.2  # the 0.2 s of displacing counted nowhere
    assert set(phases) == {"forward", "backward", "optimizer_step", "between_phases"}
    filler = probe.filler
    monkeypatch.setattr(probe, "filler", lambda: (order.append("filler"), filler()))
    probe.gaps = {"optimizer_step": 0.5}
    order.clear()
    phases = probe()  # about 0.3 s of the probe's forward (the gap less the last displacement), then 0.2 s displacing
    assert order[-1] == "displace" and order.count("filler") >= 1 and set(order[:-1]) == {"filler"}
    assert sum(phases.values()) < 0.25


def test_the_calibration_records_each_probes_displacement_and_the_cache():
    """calibrate(probe=True): the probe rows of the optimizer's phase carry the bytes displaced before it (the
    other phases' traffic, measure/probe.py), the other rows 0, and the file names the last-level cache."""
    from trainingcost.measure.probe import displaced_bytes
    from trainingcost.measure.run import traced

    trace = traced(spec(tiny(layers=1, d_model=16, seq_len=8, batch=2), "bp"), torch.device("cpu"))
    cal = C.calibrate(torch.device("cpu"), "fp32", trace, tolerance=0.5, probe=True, keep_untrusted=True)
    probes = pd.DataFrame(cal["probes"]).set_index("phase")
    assert probes.at["optimizer_step", "displaced_bytes"] == displaced_bytes(trace)["optimizer_step"] > 0
    assert (probes.drop(index="optimizer_step")["displaced_bytes"] == 0).all()
    assert probes.at["optimizer_step", "gap_s"] > 0 and (probes.drop(index="optimizer_step")["gap_s"] == 0).all()
    assert cal["last_level_cache_bytes"] > 0
    assert max(r["bytes"] for r in cal["copy_ladder"]) >= 2 * cal["last_level_cache_bytes"]
