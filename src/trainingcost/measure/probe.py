"""The host's overhead on a run's step: the same step at minimal sizes, timed.

A step's time on CPU is its kernels plus everything around them: the Python of the model, the rules and
torch.optim, autograd's recording and its engine, the dispatcher, the allocator. The trace
(:mod:`.trace`) sees the kernels; it cannot see the rest. The **probe** runs the very same step (the same
arch, depth, heads, head, task, rule, optimizer and dtype: the same ops in the same order, through the same
Python) with every size at its minimum (one sequence of two tokens, one feature per head, a 256-symbol
vocabulary at most), so that its kernels take next to no time and its step time is the overhead. The
predictor (:mod:`trainingcost.findings.predictor`) adds the bodies of the real step's kernels (their
calibrated time less the launch overhead) to the probe's time, phase by phase.

The probe is part of the calibration (:mod:`trainingcost.findings.calibration`): it runs there, after the
training jobs, interleaved in the calibration's rounds, never on the measured runs themselves.

**The caches the real step leaves behind.** A phase that runs a ``torch.optim`` optimizer (the trace's
:data:`~.trace.OPTIMIZER_CALL` row) touches its code and its per-parameter state once per step; between two of
its runs the real step's other phases run for the rest of the step and stream their operands through the
caches. At minimal sizes they take next to no time and stream next to nothing, so a bare probe times the
optimizer warm: on the AMD EPYC of benchmarks/bench_predictor.md, 0.10 ms for config 0's SGD step alone,
0.36 ms inside the real step, 0.34 ms after a 64 MiB write, 0.32 ms after 3 ms of Python touching nothing
(caches decay with time too, where a core's cache sharers are not ours). So before such a phase the probe,
untimed, first runs its own forward (no grad) for the **gap**, the real step's time outside the phase
(``gaps``, from the calibration: its kernels' single-call times and the probe's other phases), which keeps the
code the phases share warm while the rest decays, and then **displaces** the caches: it writes as many bytes as
the real step's other phases move (the trace's bytes read and written, exact), at most twice the last-level
cache (:func:`last_level_cache_bytes`). Only there: timing every phase after a gap of the real step's
length over-predicted the phases whose code the step's other phases keep warm (error projection 1.7x).
The kernels' side of the same effect (the tensors the optimizer updates read from DRAM) is the predictor's
(:func:`trainingcost.findings.predictor.predict_phases`). On a GPU the probe displaces nothing: there the
host's work overlaps the kernels.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, replace
from functools import lru_cache

import pandas as pd
import torch

from ..config.model import config_from_row
from ..config.training import RuleOptions, TrainSpec
from ..train.data import make_task
from ..train.run import build_model
from .flops import analytic_phase
from .timer import PhaseTimer
from .trace import BETWEEN, KERNEL_CLASSES, OPTIMIZER_CALL

PROBE_LR = 1e-4  # small: the probe's weights hardly move over its steps
DEFAULT_LAST_LEVEL_CACHE = 32 * 2**20  # where sysfs does not say (the AMD EPYC's L3 of bench_predictor.md)
DISPLACE_CACHES = 2  # a displacement writes at most this many last-level caches' worth of bytes


@lru_cache(maxsize=1)
def last_level_cache_bytes() -> int:
    """The largest CPU cache of cpu0 (Linux sysfs ``cache/index*/size``), or :data:`DEFAULT_LAST_LEVEL_CACHE`."""
    root, sizes = "/sys/devices/system/cpu/cpu0/cache", []
    try:
        for entry in os.listdir(root):
            if entry.startswith("index"):
                with open(f"{root}/{entry}/size") as f:
                    text = f.read().strip().upper()
                scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
                sizes.append(int(text.rstrip("KMG")) * scale)
    except (OSError, ValueError):
        sizes = []
    return max(sizes) if sizes else DEFAULT_LAST_LEVEL_CACHE


def displaced_bytes(trace: pd.DataFrame, cache_bytes: int | None = None) -> dict[str, int]:
    """For one run's trace: each timed phase that steps an optimizer, with the bytes the step's other phases move
    (read + written by their kernels), at most :data:`DISPLACE_CACHES` last-level caches."""
    cache_bytes = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    kernel = trace[trace["cls"].isin(KERNEL_CLASSES)]
    moved = ((kernel["bytes_read"] + kernel["bytes_written"]) * kernel["count"]).groupby(kernel["timed_phase"]).sum()
    stepping = set(trace.loc[trace["op"] == OPTIMIZER_CALL, "timed_phase"])
    return {phase: int(min(moved.drop(phase, errors="ignore").sum(), DISPLACE_CACHES * cache_bytes))
            for phase in sorted(stepping) if phase != BETWEEN}


_scratch: list[torch.Tensor] = []


def displace(nbytes: int) -> None:
    """Write ``nbytes`` of one scratch buffer (shared by every probe, grown as needed): what a step's traffic
    does to the caches."""
    count = -(-int(nbytes) // 4)
    if count <= 0:
        return
    if not _scratch or _scratch[0].numel() < count:
        _scratch[:] = [torch.empty(count, dtype=torch.float32)]
    _scratch[0][:count].fill_(1.0)


class _Displacing:
    """A phase factory that, before each phase of ``probe.displaced``, untimed: runs ``filler`` (the probe's
    forward, no grad) until the phase's ``probe.gaps`` less the last displacement's seconds have passed, then
    displaces the caches by its bytes."""

    def __init__(self, timer: PhaseTimer, probe: Probe):
        self.timer, self.probe, self.spent = timer, probe, 0.0

    def __call__(self, name: str):
        phase = analytic_phase(name)
        if self.probe.displaced.get(phase):
            begin = time.perf_counter()
            until = begin + self.probe.gaps.get(phase, 0.0) - self.probe.displace_s
            with torch.no_grad():
                while time.perf_counter() < until:
                    self.probe.filler()
            started = time.perf_counter()
            displace(self.probe.displaced[phase])
            end = time.perf_counter()
            self.probe.displace_s = end - started
            self.spent += end - begin
        return self.timer(name)


def probe_spec(spec: TrainSpec) -> TrainSpec:
    """``spec`` with every size at its minimum and the structure unchanged."""
    cfg = spec.cfg
    width = 2 if cfg.positions == "rotary" else 1  # rotary positions turn pairs of features
    small = cfg.replace(d_model=cfg.heads * width, head_dim=width, d_ff=1, seq_len=2, tgt_len=2, batch=1,
                        vocab=min(cfg.vocab, 256), max_positions=2 if cfg.max_positions else 0)
    options = RuleOptions(optimizer=spec.options.optimizer, lr=PROBE_LR, weight_decay=spec.options.weight_decay,
                          mirror_steps=spec.options.mirror_steps)
    return replace(spec, cfg=small, options=options, measure=False, steps=1)


def spec_json(spec: TrainSpec) -> str:
    """What a probe needs of a run, as JSON (the trace keeps it, so the calibration can rebuild the step)."""
    return json.dumps({"cfg": asdict(spec.cfg), "task": spec.task, "rule": spec.rule, "seed": spec.seed,
                       "dtype": spec.dtype, "options": asdict(spec.options)}, sort_keys=True)


def spec_from_json(text: str) -> TrainSpec:
    data = json.loads(text)
    return TrainSpec(cfg=config_from_row(data["cfg"]), task=data["task"], rule=data["rule"], seed=data["seed"],
                     dtype=data["dtype"], options=RuleOptions(**data["options"]))


class Probe:
    """A built probe: :meth:`__call__` runs one step and returns seconds per analytic phase (and
    :data:`~.trace.BETWEEN`). ``displaced``: bytes written before each named phase (:func:`displaced_bytes`; CPU)."""

    def __init__(self, spec: TrainSpec, device: torch.device, displaced: dict[str, int] | None = None):
        self.spec = probe_spec(spec)
        self.device = device
        self.displaced = dict(displaced or {}) if device.type == "cpu" else {}
        self.gaps: dict[str, float] = {}  # seconds of the real step outside each displaced phase (the calibration's)
        self.displace_s = 0.0  # the last displacement's seconds
        self.model, self.rule = build_model(self.spec, device)
        task = make_task(self.spec.task, self.spec.cfg, self.spec.corpus)
        self.batch = task.batch(torch.Generator().manual_seed(self.spec.seed + 2)).to(device)

    def __call__(self) -> dict[str, float]:
        timer = PhaseTimer(self.device)
        phase = _Displacing(timer, self)
        with timer.step():
            self.rule.step(self.batch, phase)
        seconds, step, _ = timer.finish()
        phases: dict[str, float] = {}
        for name, value in seconds.items():
            phases[analytic_phase(name)] = phases.get(analytic_phase(name), 0.0) + value
        phases[BETWEEN] = max(step - phase.spent - sum(phases.values()), 0.0)
        return phases

    def filler(self) -> None:
        """The probe's forward (no grad): what keeps the code the step's phases share warm over a gap."""
        self.model(self.batch.tokens)
