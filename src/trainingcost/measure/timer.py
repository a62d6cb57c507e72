"""Time and peak memory of each phase of a training step.

A :class:`PhaseTimer` is the phase factory a rule's ``step`` receives
(:mod:`trainingcost.train.rule`): ``with timer("backward"): ...`` marks the
phase's start and end. A phase entered several times in one step accumulates.

- On a CUDA device the marks are CUDA events, read after one synchronisation
  at the end of the step, so timing does not serialise the GPU inside a step.
  The peak of ``torch.cuda.max_memory_allocated`` is reset at every phase
  start and read at its end: the phase's own high-water mark of tensor memory.
- On CPU the marks are ``time.perf_counter`` readings (CPU kernels are
  synchronous). PyTorch's CPU allocator keeps no peak statistics, so phase
  memory is not recorded; the run reports the process's peak resident set
  size instead (:func:`process_peak_rss`).
"""

from __future__ import annotations

import resource
import sys
import time
from collections import defaultdict
from contextlib import contextmanager

import torch


class CpuClock:
    def mark(self) -> float:
        return time.perf_counter()

    @staticmethod
    def seconds(start: float, end: float) -> float:
        return end - start

    def synchronize(self) -> None:
        pass


class CudaClock:
    def __init__(self, device: torch.device):
        self.device = device

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def seconds(start, end) -> float:
        return start.elapsed_time(end) / 1000.0  # elapsed_time is in milliseconds

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


def clock_for(device: torch.device):
    return CudaClock(device) if device.type == "cuda" else CpuClock()


class PhaseTimer:
    """Times one step's phases; :meth:`finish` returns seconds and peak bytes per phase."""

    def __init__(self, device: torch.device, clock=None):
        self.device = device
        self.clock = clock or clock_for(device)
        self.track_memory = device.type == "cuda"
        self.spans: list[tuple[str, object, object]] = []
        self.peaks: dict[str, int] = {}
        self.step_span: tuple[object, object] | None = None

    def __call__(self, name: str):
        return self._phase(name)

    @contextmanager
    def _phase(self, name: str):
        if self.track_memory:
            torch.cuda.reset_peak_memory_stats(self.device)
        start = self.clock.mark()
        try:
            yield
        finally:
            self.spans.append((name, start, self.clock.mark()))
            if self.track_memory:
                self.peaks[name] = max(self.peaks.get(name, 0), torch.cuda.max_memory_allocated(self.device))

    @contextmanager
    def step(self):
        """Around the whole step: its wall time includes work between phases."""
        start = self.clock.mark()
        yield self
        self.step_span = (start, self.clock.mark())

    def finish(self) -> tuple[dict[str, float], float, dict[str, int]]:
        """(seconds per phase, seconds of the whole step, peak bytes per phase); synchronises once."""
        self.clock.synchronize()
        seconds: dict[str, float] = defaultdict(float)
        for name, start, end in self.spans:
            seconds[name] += self.clock.seconds(start, end)
        step = self.clock.seconds(*self.step_span) if self.step_span else sum(seconds.values())
        return dict(seconds), step, dict(self.peaks)


def process_peak_rss() -> int:
    """The process's peak resident set size in bytes (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
