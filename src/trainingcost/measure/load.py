"""Whether a run's timings can be trusted: the machine's load around the timed steps, and the verdict.

Timings on a shared machine are only as good as the CPU the process got. For the timed steps of a run this
module records:

- the process's CPU time against the wall time (``time.process_time``, every thread of the process): a process
  that waited for a core runs less than its wall time;
- how many other tasks were runnable (``/proc/loadavg``'s running count, sampled after every timed step, minus
  the sampling thread itself), the one-minute load average before and after, and the share of CPU time the
  hypervisor stole (``/proc/stat``'s ``steal`` over the timed interval).

The verdict, ``timing_quality``:

- ``contended`` when the process got clearly less CPU than it asked for, or other work held the cores:
  on CPU, CPU time below :data:`MIN_CPU_PER_WALL` of the wall time (a runnable process gets close to 1.0 of a
  core or more); the median number of other runnable tasks above the cores the run leaves free
  (``cores - 1``: the run's own first thread is the sampler, its other threads may be spinning); or more than
  :data:`MAX_STEAL` of the machine's time stolen; on CUDA, when NVML reports a clock slowdown for a cause outside
  the run (hardware slowdown, thermal slowdown, power brake: ``energy.SLOWDOWN_REASONS``) after any timed step
  (every reason seen is kept in ``gpu_clock_reasons``);
- ``noisy`` when the step time's IQR exceeds :data:`MAX_IQR_PER_MEDIAN` of its median;
- ``ok`` otherwise; ``unknown`` without timed steps.

The thresholds are wide on purpose: they flag a machine that is clearly busy, not the normal jitter of a few
percent. Why these values: two single-threaded jobs on two cores (the default sweep) leave each one core,
CPU/wall about 0.95 and one other runnable task; four CPU burners on two cores give a single-threaded job about
0.4 of a core and four other runnable tasks (tests/test_timing_quality.py).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field

MIN_CPU_PER_WALL = 0.7
MAX_STEAL = 0.10
MAX_IQR_PER_MEDIAN = 0.25
QUALITIES = ("ok", "noisy", "contended", "unknown")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # not Linux: no /proc
        return None


def load_average() -> float:
    text = _read("/proc/loadavg")
    return float(text.split()[0]) if text else float(os.getloadavg()[0]) if hasattr(os, "getloadavg") else float("nan")


def runnable_others() -> int | None:
    """Tasks runnable now on the whole machine, less this sampling thread (``/proc/loadavg``'s 4th field)."""
    text = _read("/proc/loadavg")
    return int(text.split()[3].split("/")[0]) - 1 if text else None


def cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) jiffies since boot, over every CPU (``/proc/stat``'s first line)."""
    text = _read("/proc/stat")
    if not text:
        return None
    values = [int(v) for v in text.splitlines()[0].split()[1:]]
    return values[7] if len(values) > 7 else 0, sum(values[:8])


@dataclass
class LoadWatch:
    """Samples around and during the timed steps of one run."""

    cores: int = field(default_factory=lambda: len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    load_before: float = float("nan")
    load_after: float = float("nan")
    ticks_before: tuple[int, int] | None = None
    ticks_after: tuple[int, int] | None = None
    runnable: list[int] = field(default_factory=list)
    gpu_reasons: int | None = None  # NVML clock event reasons seen after any timed step (OR of the masks)
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    _cpu: float = 0.0
    _wall: float = 0.0

    def begin(self) -> None:
        self.load_before, self.ticks_before = load_average(), cpu_ticks()

    def end(self) -> None:
        self.load_after, self.ticks_after = load_average(), cpu_ticks()

    def step_start(self) -> None:
        self._cpu, self._wall = time.process_time(), time.perf_counter()

    def step_end(self, gpu_reasons: int | None = None) -> None:
        if gpu_reasons is not None:
            self.gpu_reasons = (self.gpu_reasons or 0) | gpu_reasons
        self.cpu_seconds += time.process_time() - self._cpu
        self.wall_seconds += time.perf_counter() - self._wall
        others = runnable_others()
        if others is not None:
            self.runnable.append(others)

    @property
    def steal(self) -> float:
        if not self.ticks_before or not self.ticks_after:
            return float("nan")
        total = self.ticks_after[1] - self.ticks_before[1]
        return (self.ticks_after[0] - self.ticks_before[0]) / total if total > 0 else 0.0

    @property
    def cpu_per_wall(self) -> float:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else float("nan")

    def columns(self, step_median: float, step_iqr: float, device_type: str) -> dict:
        from .energy import SLOWDOWN_REASONS, reason_names

        others = statistics.median(self.runnable) if self.runnable else float("nan")
        reasons = reason_names(self.gpu_reasons)
        slowed = bool(reasons) and any(r in reasons.split(",") for r in SLOWDOWN_REASONS)
        return {
            "cpu_time_per_wall": self.cpu_per_wall,
            "runnable_others_median": float(others),
            "load_before": self.load_before,
            "load_after": self.load_after,
            "steal_fraction": self.steal,
            "cores": self.cores,
            "gpu_clock_reasons": reasons,
            "timing_quality": quality(step_median, step_iqr, self.cpu_per_wall if device_type == "cpu" else float("nan"),
                                      others, self.cores, self.steal, slowed),
        }


def quality(median: float, iqr: float, cpu_per_wall: float, others: float, cores: int, steal: float,
            gpu_slowed: bool = False) -> str:
    """The verdict on one run's timings (see the module's docstring)."""
    if not median > 0:
        return "unknown"
    if cpu_per_wall < MIN_CPU_PER_WALL or others > cores - 1 or steal > MAX_STEAL or gpu_slowed:
        return "contended"
    if iqr / median > MAX_IQR_PER_MEDIAN:
        return "noisy"
    return "ok"
