"""Measured training runs: `train --out-dir` tables, statistics, faults and the timer's logic."""

import math

import pandas as pd
import pytest
import torch

from trainingcost.analytic import layer_table
from trainingcost.config import configs_frame
from trainingcost.config.model import config_from_row
from trainingcost.measure.recorder import median_iqr
from trainingcost.measure.timer import CudaClock, PhaseTimer, clock_for
from trainingcost.analytic import rule_names
from trainingcost.rules.bp.step import Backprop

from test_train import run_here

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--batch", "4", "--eval-batches", "1"]
RUN_COLUMNS = ["config_id", "rule", "seed", "status", "dtype", "device", "device_name", "hostname", "timestamp_utc",
               "trainingcost_version", "git_commit", "torch_version", "cuda_version"]


def measured_run(tmp_path, capsys, *args, steps="7"):
    out = tmp_path / "run"
    status, stdout, stderr = run_here(capsys, "train", *TINY, "--steps", steps, "--out-dir", str(out), *args)
    return status, stdout, stderr, out


@pytest.mark.parametrize("arch,task,seq", [("encoder", "lm", "8"), ("decoder", "classify", "8"), ("encoder-decoder", "copy", "6")])
def test_measured_flops_equal_the_executed_model_and_times_are_positive(tmp_path, capsys, arch, task, seq):
    for rule in rule_names():
        status, stdout, stderr, out = measured_run(tmp_path, capsys, "--arch", arch, "--task", task, "--seq-len", seq, "--rule", rule)
        assert status == 0, stderr
        assert "ms (median of 3" in stdout  # 7 steps: 2 warm-up, 1 counted, 3 timed, the last one profiled
        measured = pd.read_parquet(out / "measured.parquet")
        steps = pd.read_parquet(out / "steps.parquet")
        assert set(measured["status"]) == {"ok"} and set(measured["rule"]) == {rule}
        assert measured[RUN_COLUMNS[:-1]].notna().all().all()  # cuda_version is null on CPU
        # FLOPs: the executed model of the same configuration, cell by cell.
        configs = configs_frame([("", config_from_row(measured.iloc[0]))])
        assert configs["config_id"].iloc[0] == measured["config_id"].iloc[0]
        table = layer_table(configs, [rule], ["executed"])
        predicted = {(layer, p): f for layer, p, f in zip(table.layer, table.phase, table.flops) if f}
        got = {(layer, p): f for layer, p, f in zip(measured.layer, measured.phase, measured.flops) if f}
        assert predicted == got, rule
        # Times: present, positive and finite, for every phase the rule runs and for the step.
        # Weight gradients computed inside autograd's backward (every rule but PEPITA's) have no time of
        # their own: it is part of the backward's. Every other row has a phase time.
        untimed = measured["phase"].eq("weight_update") & ~measured["rule"].isin(["pepita", "mempepita"])
        assert measured.loc[untimed, "phase_time_median_s"].isna().all()
        for column in ("phase_time_median_s", "phase_time_iqr_s", "step_time_median_s", "step_time_iqr_s", "tokens_per_s",
                       "peak_memory_bytes"):
            values = measured.loc[~untimed, column]
            assert values.notna().all() and (values >= 0).all() and values.map(math.isfinite).all(), (rule, column)
        assert (measured.loc[~untimed, "phase_time_median_s"] > 0).all() and (measured["step_time_median_s"] > 0).all()
        assert set(measured["memory_source"]) == {"cpu_process_max_rss"} and measured["energy_per_step_j"].isna().all()
        # Steps: warm-up, one counted step, timed steps with a time per phase, and the profiled last step.
        assert list(steps["kind"]) == ["warmup", "warmup", "counted"] + ["timed"] * 3 + ["profiled"]
        timed = steps[steps["kind"] == "timed"]
        phase_columns = [c for c in steps.columns if c.startswith("time_")]
        assert {f"time_{p}_s" for p in ("forward", "optimizer_step")} <= set(phase_columns)
        assert (timed[phase_columns].fillna(0) >= 0).all().all() and (timed["step_time_s"] > 0).all()
        # The phases add up to no more than the step (what lies between phases is the rest).
        assert (timed[phase_columns].sum(axis=1) <= timed["step_time_s"] * 1.0001).all()
        assert not list(out.glob("*.tmp")) and not list(out.glob(".*"))


def test_injected_out_of_memory_writes_an_oom_row_and_exits_0(tmp_path, capsys, monkeypatch):
    calls = {"n": 0}
    original = Backprop.step

    def step(self, batch, phase):
        calls["n"] += 1
        if calls["n"] == 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return original(self, batch, phase)

    monkeypatch.setattr(Backprop, "step", step)
    status, stdout, stderr, out = measured_run(tmp_path, capsys, "--arch", "decoder", "--seq-len", "8", "--rule", "bp")
    assert status == 0
    assert "status oom" in stdout and "out of memory" in stderr and "Traceback" not in stderr
    measured = pd.read_parquet(out / "measured.parquet")
    steps = pd.read_parquet(out / "steps.parquet")
    assert set(measured["status"]) == {"oom"} and measured["message"].str.contains("OutOfMemoryError").all()
    assert list(steps["step"]) == [1, 2, 3] and set(steps["status"]) == {"oom"}


def test_injected_nan_gives_diverged(tmp_path, capsys, monkeypatch):
    original = Backprop.step

    def step(self, batch, phase):
        loss = original(self, batch, phase)
        return loss * float("nan") if step.calls == 4 else loss

    def counting(self, batch, phase):
        step.calls += 1
        return step(self, batch, phase)

    step.calls = 0
    monkeypatch.setattr(Backprop, "step", counting)
    status, stdout, stderr, out = measured_run(tmp_path, capsys, "--arch", "decoder", "--seq-len", "8", "--rule", "bp")
    assert status == 0 and "status diverged" in stdout
    steps = pd.read_parquet(out / "steps.parquet")
    assert list(steps["step"]) == [1, 2, 3, 4] and math.isnan(steps["loss"].iloc[-1])
    measured = pd.read_parquet(out / "measured.parquet")
    assert set(measured["status"]) == {"diverged"} and measured["flops"].sum() > 0  # step 3 was counted
    message = measured["message"].iloc[0]
    assert message.startswith("the training loss is nan at step 4 (lr ") and "parameters are still finite" in message


def test_other_exceptions_give_error_with_the_message(tmp_path, capsys, monkeypatch):
    def step(self, batch, phase):
        raise RuntimeError("cuBLAS went\nsideways")

    monkeypatch.setattr(Backprop, "step", step)
    status, stdout, stderr, out = measured_run(tmp_path, capsys, "--arch", "decoder", "--seq-len", "8", "--rule", "bp")
    assert status == 0 and "status error" in stdout
    assert "RuntimeError: cuBLAS went sideways" in stderr
    measured = pd.read_parquet(out / "measured.parquet")
    assert list(measured["status"]) == ["error"] and list(measured["layer"]) == [""] and measured["message"].iloc[0] == "RuntimeError: cuBLAS went sideways"
    steps = pd.read_parquet(out / "steps.parquet")  # one row, step 0, so the steps table records how the run ended
    assert list(steps["step"]) == [0] and list(steps["status"]) == ["error"] and steps["loss"].isna().all()


def test_the_cpu_allocator_running_out_is_oom_not_error(tmp_path, capsys, monkeypatch):
    def step(self, batch, phase):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(Backprop, "step", step)
    status, stdout, stderr, out = measured_run(tmp_path, capsys, "--arch", "decoder", "--seq-len", "8", "--rule", "bp")
    assert status == 0 and "status oom" in stdout
    assert set(pd.read_parquet(out / "measured.parquet")["status"]) == {"oom"}


def test_an_interrupted_run_leaves_no_file(tmp_path, capsys, monkeypatch):
    def step(self, batch, phase):
        raise KeyboardInterrupt

    monkeypatch.setattr(Backprop, "step", step)
    status, stdout, stderr, out = measured_run(tmp_path, capsys, "--arch", "decoder", "--seq-len", "8", "--rule", "bp")
    assert status == 130 and stderr == "trainingcost train: interrupted; nothing written\n"
    assert not out.exists()


@pytest.mark.parametrize("args,message", [
    (["--steps", "3"], "--steps: measuring needs at least warmup + 2 = 4 steps"),
    (["--steps", "9", "--warmup", "-1"], "--warmup: must be 0 or more"),
])
def test_too_few_steps_to_measure_is_one_line(tmp_path, capsys, args, message):
    status, stdout, stderr = run_here(capsys, "train", *TINY, "--out-dir", str(tmp_path / "x"), *args)
    assert status == 2 and message in stderr and stderr.count("\n") == 1
    assert not (tmp_path / "x").exists()


# -- the timer's logic, on any machine --------------------------------------------------


class FakeEvent:
    """Stands in for torch.cuda.Event: 'records' a time read from a script, elapsed_time in ms."""

    script: list[float] = []

    def __init__(self, enable_timing=False):
        assert enable_timing

    def record(self):
        self.t = FakeEvent.script.pop(0)

    def elapsed_time(self, other):
        return (other.t - self.t) * 1000.0


def test_cuda_clock_accumulates_repeated_phases(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    clock = CudaClock(torch.device("cuda", 0))
    timer = PhaseTimer(torch.device("cpu"), clock=clock)  # cpu: no memory statistics to read
    #               step  fwd      bwd      fwd again   step end
    FakeEvent.script = [0.0, 0.5, 1.5, 1.5, 3.5, 4.0, 4.25, 5.0]
    with timer.step():
        with timer("forward"):
            pass
        with timer("backward"):
            pass
        with timer("forward"):
            pass
    seconds, step, peaks = timer.finish()
    assert seconds == {"forward": 1.0 + 0.25, "backward": 2.0} and step == 5.0 and peaks == {}
    assert synced == [torch.device("cuda", 0)]


def test_clock_follows_the_device():
    assert type(clock_for(torch.device("cpu"))).__name__ == "CpuClock"
    assert type(clock_for(torch.device("cuda", 0))).__name__ == "CudaClock"


def test_median_and_iqr():
    assert median_iqr([1, 2, 3, 4, 100]) == (3.0, 2.0)
    assert median_iqr([]) == (math.nan, math.nan) or all(math.isnan(v) for v in median_iqr([]))
    assert median_iqr([float("nan"), 2.0]) == (2.0, 0.0)


def test_phase_memory_is_reset_per_phase_and_kept_as_the_largest(monkeypatch):
    """The CUDA memory path, with the allocator statistics faked: the peak is reset at each phase start."""
    allocated = iter([100, 700, 300])  # peaks read at the end of forward, backward, forward again
    resets = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: resets.append(device))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: next(allocated))
    from trainingcost.measure.timer import CpuClock

    timer = PhaseTimer(torch.device("cuda", 0), clock=CpuClock())
    for name in ("forward", "backward", "forward"):
        with timer(name):
            pass
    _, _, peaks = timer.finish()
    assert peaks == {"forward": 300, "backward": 700} and len(resets) == 3


class FakeNvml:
    """pynvml's four calls, with an energy counter in millijoules that advances 2500 mJ per read."""

    def __init__(self, supported=True):
        self.energy, self.supported, self.index = 10_000, supported, None

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        self.index = index
        return "handle"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.supported:
            raise RuntimeError("Not Supported")
        self.energy += 2500
        return self.energy


def test_energy_counter_reads_nvml_in_joules_and_is_null_elsewhere(monkeypatch):
    import sys

    from trainingcost.measure.energy import EnergyCounter

    assert EnergyCounter(torch.device("cpu")).read() is None
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "_get_nvml_device_index", lambda i: 3)
    counter = EnergyCounter(torch.device("cuda", 1))
    assert counter.available and fake.index == 3
    first, second = counter.read(), counter.read()
    assert second - first == 2.5
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(supported=False))
    unsupported = EnergyCounter(torch.device("cuda", 0))
    assert not unsupported.available and unsupported.read() is None and "Not Supported" in unsupported.reason


def test_mfu_peaks_by_device_name():
    from trainingcost.measure.recorder import dense_bf16_peak

    assert dense_bf16_peak("NVIDIA H100 80GB HBM3") == 989.5e12  # 1,979 with sparsity, halved
    assert dense_bf16_peak("NVIDIA H100 PCIe") == 756.5e12
    assert dense_bf16_peak("NVIDIA H200") == 989.5e12
    assert dense_bf16_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert dense_bf16_peak("Intel(R) Xeon(R) Processor @ 2.10GHz") is None
