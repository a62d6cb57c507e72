"""What a training run measures: FLOPs per layer and phase, time, memory and energy per step.

Steps ``1 .. warmup`` are warm-up: run, timed, and marked so, never in the
statistics. Step ``warmup + 1`` is the *counted* step: it runs under the FLOP
meter (:mod:`.flops`), which slows it, so it is not timed either.
Every later step is *timed* (:mod:`.timer`): time per
execution phase, the whole step, peak memory per phase on CUDA, and energy
from NVML where available. Statistics are medians and interquartile ranges
over the timed steps.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch

from ..analytic import layers as L
from ..config.hardware import match_device
from ..train.model import primed_experts, recording_routing
from .energy import EnergyCounter, clock_reasons
from .flops import analytic_phase, metering
from .load import LoadWatch
from .memory import CATEGORIES, MemoryReading, TensorMeter, rule_tensors
from .timer import PhaseTimer, process_peak_rss

WARMUP, COUNTED, TIMED, PROFILED = "warmup", "counted", "timed", "profiled"
OPTIMIZER_LAYER = "optimizer"  # the row that carries the optimizer step's time (no FLOPs)

def dense_bf16_peak(device_name: str, multiprocessors: int | None = None) -> float | None:
    """The dense bf16 peak FLOP/s of the catalogue device torch's name (and SM count, where the name fits several)
    names (config/hardware.yaml, cited), or None: the MFU column divides measured FLOPs per second by it, and is
    null for other devices and dtypes."""
    found = match_device(device_name, multiprocessors)
    return found.peak("bf16") if found is not None else None


class StepRecorder:
    """Runs each step of a training loop as a warm-up, counted or timed step and keeps what it saw."""

    def __init__(self, rule, device: torch.device, warmup: int, profile_step: int | None = None):
        self.rule = rule
        self.profile_step = profile_step  # a step run under torch.profiler, not timed (the last, where 2+ remain timed)
        self.profile: pd.DataFrame | None = None  # its self time per profiler event name
        self.profiled_s = math.nan
        self.device = device
        self.warmup = warmup
        self.energy = EnergyCounter(device)
        self.rows: list[dict] = []  # one per step
        self.flops: dict[tuple[str, str], int] | None = None  # (layer, execution phase) -> FLOPs
        self.memory: MemoryReading | None = None  # the counted step's tensor memory
        self.load = LoadWatch()  # CPU time, runnable tasks and steal around the timed steps

    def kind(self, step: int) -> str:
        if step <= self.warmup:
            return WARMUP
        if step == self.profile_step:
            return PROFILED
        return COUNTED if step == self.warmup + 1 else TIMED

    def run(self, step: int, batch) -> torch.Tensor:
        kind = self.kind(step)
        if kind == COUNTED:
            tensors = TensorMeter()
            own = (self.rule.model, self.rule.optimizer, rule_tensors(self.rule))
            primed = primed_experts(self.rule.model, self.rule.optimizer)  # (Python bools: before the meter starts)
            with metering(self.rule.model) as meter, recording_routing(self.rule.model) as routing, tensors:
                tensors.begin(*own, batch=[*batch.tokens.values(), batch.targets])

                @contextmanager
                def in_phase(name):
                    with meter.in_phase(name), tensors.in_phase(name):
                        yield

                loss = self.rule.step(batch, in_phase)
            self.flops = dict(meter.counts)
            self.memory = tensors.reading(*own)
            self.memory.routing = list(routing)
            self.memory.primed = primed if self.memory.routing else {}
            self.rows.append({"step": step, "kind": kind})
            return loss
        if kind == PROFILED:
            return self.profiled(step, batch)
        timer = PhaseTimer(self.device)
        if not any(r["kind"] == TIMED for r in self.rows):
            self.load.begin()
        before = self.energy.read()
        self.load.step_start()
        with timer.step():
            loss = self.rule.step(batch, timer)
        seconds, step_seconds, peaks = timer.finish()
        self.load.step_end(clock_reasons(self.energy))
        self.load.end()  # the last timed step's reading stands
        after = self.energy.read()
        row = {"step": step, "kind": kind, "step_time_s": step_seconds}
        row.update({f"time_{name}_s": value for name, value in seconds.items()})
        if peaks:
            row["peak_memory_bytes"] = max(peaks.values())
            row.update({f"peak_memory_{name}_bytes": value for name, value in peaks.items()})
        if before is not None and after is not None:
            row["energy_j"] = after - before
        self.rows.append(row)
        return loss

    def profiled(self, step: int, batch) -> torch.Tensor:
        """One step under torch.profiler: every aten op's total time (on CUDA the device time of the kernels it
        launched) and the aten ops it ran inside, to split the step by class of work (:func:`.trace.class_times`)."""
        from torch.profiler import ProfilerActivity, profile

        cuda = self.device.type == "cuda"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        clock = PhaseTimer(self.device)
        with _without_profiler_debug_lines(), profile(activities=activities) as prof:
            with clock.step():
                loss = self.rule.step(batch)
            _, self.profiled_s, _ = clock.finish()
        rows = []
        for e in prof.events():  # aten ops, with the aten ops they run inside (the hierarchy that self times lose)
            if not e.name.startswith("aten::"):
                continue
            inside, parent = [], e.cpu_parent
            while parent is not None:
                if parent.name.startswith("aten::"):
                    inside.append(parent.name)
                parent = parent.cpu_parent
            total = getattr(e, "device_time_total", 0.0) if cuda else e.cpu_time_total
            rows.append({"name": e.name, "total_s": total / 1e6, "inside": "|".join(inside)})
        self.profile = pd.DataFrame(rows, columns=["name", "total_s", "inside"])
        self.rows.append({"step": step, "kind": PROFILED})
        return loss

    # -- statistics ---------------------------------------------------------------------
    def timed(self) -> pd.DataFrame:
        return pd.DataFrame([r for r in self.rows if r["kind"] == TIMED])

    def analytic_phase_times(self) -> pd.DataFrame:
        """Seconds per timed step and analytic phase (execution phases merged, e.g. PEPITA's two passes)."""
        timed = self.timed()
        out = {}
        for column in timed.columns if len(timed) else []:
            if column.startswith("time_") and column.endswith("_s"):
                name = analytic_phase(column[len("time_") : -len("_s")])
                out[name] = out.get(name, 0.0) + timed[column].fillna(0.0)
        return pd.DataFrame(out)

    def analytic_phase_peaks(self) -> dict[str, int]:
        peaks: dict[str, int] = defaultdict(int)
        for row in self.rows:
            if row["kind"] != TIMED:
                continue
            for key, value in row.items():
                if key.startswith("peak_memory_") and key != "peak_memory_bytes":
                    name = analytic_phase(key[len("peak_memory_") : -len("_bytes")])
                    peaks[name] = max(peaks[name], int(value))
        return dict(peaks)


def median_iqr(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return math.nan, math.nan
    q25, q50, q75 = np.percentile(values, [25, 50, 75])
    return float(q50), float(q75 - q25)


def layer_kinds(model) -> dict[str, str]:
    """Every layer a measured step may attribute work to, in forward order, with its kind."""
    kinds = dict(model.layer_plan())
    kinds.update(L.rule_layers(model.cfg))
    kinds[OPTIMIZER_LAYER] = OPTIMIZER_LAYER
    return kinds


def run_summary(recorder: StepRecorder, tokens_per_step: int, dtype: str, device_name: str) -> dict:
    """Run-level measurements: step time, throughput, memory, energy, FLOPs per step, MFU."""
    timed = recorder.timed()
    step_median, step_iqr = median_iqr(timed["step_time_s"]) if len(timed) else (math.nan, math.nan)
    flops_per_step = sum(recorder.flops.values()) if recorder.flops is not None else None
    summary = {
        "timed_steps": len(timed),
        "step_time_median_s": step_median,
        "step_time_iqr_s": step_iqr,
        "step_time_min_s": float(timed["step_time_s"].min()) if len(timed) else math.nan,
        **recorder.load.columns(step_median, step_iqr, recorder.device.type),
        "tokens_per_s": tokens_per_step / step_median if step_median > 0 else math.nan,
        "flops_per_step": flops_per_step,
        "achieved_flops_per_s": flops_per_step / step_median if flops_per_step and step_median > 0 else math.nan,
    }
    peak = (dense_bf16_peak(device_name, torch.cuda.get_device_properties(recorder.device).multi_processor_count)
            if recorder.device.type == "cuda" and dtype == "bf16" else None)
    summary["peak_flops_per_s"] = peak if peak else math.nan
    summary["mfu"] = summary["achieved_flops_per_s"] / peak if peak else math.nan
    if recorder.device.type == "cuda":
        summary["peak_memory_bytes"] = float(timed["peak_memory_bytes"].max()) if "peak_memory_bytes" in timed else math.nan
        summary["memory_source"] = "cuda_max_memory_allocated"
    else:
        summary["peak_memory_bytes"] = float(process_peak_rss())
        summary["memory_source"] = "cpu_process_max_rss"
    summary.update(tensor_memory_columns(recorder.memory))
    energy = timed["energy_j"] if "energy_j" in timed else pd.Series(dtype=float)
    # the mean, not the median: NVML's counter advances in steps of ~10 ms or more, so a short step's reading is 0 or
    # a whole update; the median of such readings is one of those, their mean the energy per step (their sum telescopes)
    summary["energy_per_step_j"] = float(energy.dropna().mean()) if len(energy.dropna()) else math.nan
    summary["energy_source"] = "nvml_total_energy" if recorder.energy.available else None
    summary.update(energy_quality(energy))
    return summary


ENERGY_ADVANCES = 10  # timed steps on which NVML's counter must advance for a per-step energy to within ~1/10


def energy_quality(readings: pd.Series) -> dict:
    """How far a run's energy per step can be trusted: its resolution is one advance of NVML's counter (an H200
    left 202 of 417 readings of 5-30 ms steps at 0 J, benchmarks/gpu/README.md), so the mean over k steps on which it
    advanced is within about 1/k; fewer than :data:`ENERGY_ADVANCES` such steps make the reading ``coarse``, which
    the energy figure leaves out. No readings (a CPU run): null."""
    readings = readings.dropna()
    if readings.empty:
        return {"energy_advances": math.nan, "energy_quality": None}
    advances = int((readings > 0).sum())
    quality = "ok" if advances >= ENERGY_ADVANCES else (
        f"coarse: NVML's energy counter advanced on {advances} of {len(readings)} timed steps "
        f"(fewer than {ENERGY_ADVANCES}: the per-step energy is within no better than 1/{max(advances, 1)})")
    return {"energy_advances": advances, "energy_quality": quality}


def tensor_memory_columns(reading: MemoryReading | None) -> dict:
    """Run-level columns of the counted step's tensor memory (null when the run ended before it)."""
    columns = {"tensor_start_bytes": math.nan, "tensor_peak_bytes": math.nan, "tensor_end_bytes": math.nan,
               "tensor_peak_layer": None, "tensor_peak_phase": None, "tensor_peak_op": None, "tensor_routing": None}
    columns.update({f"tensor_peak_{name}_bytes": math.nan for name in CATEGORIES})
    if reading is not None:
        columns.update(tensor_start_bytes=reading.start, tensor_peak_bytes=reading.peak, tensor_end_bytes=reading.end,
                       tensor_peak_layer=reading.peak_layer, tensor_peak_phase=analytic_phase(reading.peak_phase),
                       tensor_peak_op=reading.peak_op)
        if reading.routing:  # a mixture of experts: the rows each expert got, per call, and the experts primed when
            columns["tensor_routing"] = json.dumps(reading.routing_record())  # the step began (JSON; the tape replays it)
        columns.update({f"tensor_peak_{name}_bytes": value for name, value in reading.at_peak.items()})
    return columns


def measured_rows(recorder: StepRecorder, model) -> pd.DataFrame:
    """One row per (layer, analytic phase) with FLOPs, plus the optimizer step's time row."""
    kinds = layer_kinds(model)
    flops: dict[tuple[str, str], int] = defaultdict(int)
    for (layer, phase), value in (recorder.flops or {}).items():
        flops[(layer, analytic_phase(phase))] += value
    times = recorder.analytic_phase_times()
    peaks = recorder.analytic_phase_peaks()
    tensor_peaks: dict[str, int] = defaultdict(int)
    for phase, value in (recorder.memory.phase_peaks if recorder.memory else {}).items():
        tensor_peaks[analytic_phase(phase)] = max(tensor_peaks[analytic_phase(phase)], value)
    phases_timed = list(times.columns)
    order = {name: i for i, name in enumerate(kinds)}
    cells = sorted(flops, key=lambda k: (order.get(k[0], len(order)), k[1]))
    if "optimizer_step" in phases_timed or not cells:
        cells.append((OPTIMIZER_LAYER, "optimizer_step"))
    rows = []
    for layer, phase in cells:
        median, iqr = median_iqr(times[phase]) if phase in times else (math.nan, math.nan)
        fastest = float(times[phase].min()) if phase in times and len(times[phase]) else math.nan
        rows.append(
            {
                "layer": layer,
                "layer_kind": kinds.get(layer, ""),
                "phase": phase,
                "flops": flops.get((layer, phase), 0),
                "phase_time_median_s": median,
                "phase_time_iqr_s": iqr,
                "phase_time_min_s": fastest,
                "phase_peak_memory_bytes": float(peaks[phase]) if phase in peaks else math.nan,
                "phase_tensor_peak_bytes": float(tensor_peaks[phase]) if phase in tensor_peaks else math.nan,
            }
        )
    return pd.DataFrame(rows)


# The profiler's native side (kineto) prints "USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52]
# profiler_start" and "... profiler_stop" to stderr on every profiled step, with no switch to silence them (issue 40).
_PROFILER_DEBUG = re.compile(r"^USDT:.*\] profiler_(start|stop)\s*$")


@contextmanager
def _without_profiler_debug_lines():
    """Run the block with the process's stderr (fd 2) captured, then write back every line but kineto's two debug
    lines, so that a real message still reaches the log."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (a test's capture): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines()
                    if not _PROFILER_DEBUG.match(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
