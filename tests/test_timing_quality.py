"""Timings that know when they cannot be trusted (issue 13): the verdict by hand, and a run beside CPU burners."""

import os
import subprocess
import sys
import time

import pytest
import torch

from trainingcost.config import RuleOptions, TrainSpec, canonical_model
from trainingcost.measure import load
from trainingcost.measure.run import train


def test_the_verdict_by_hand():
    assert load.quality(0.010, 0.001, 0.98, 1, 2, 0.0) == "ok"
    assert load.quality(0.010, 0.004, 0.98, 1, 2, 0.0) == "noisy"  # IQR 40% of the median
    assert load.quality(0.010, 0.001, 0.40, 1, 2, 0.0) == "contended"  # 0.4 of a core
    assert load.quality(0.010, 0.001, 0.98, 3, 2, 0.0) == "contended"  # three others runnable on two cores
    assert load.quality(0.010, 0.001, 0.98, 0, 2, 0.2) == "contended"  # a fifth of the time stolen
    assert load.quality(0.010, 0.001, float("nan"), float("nan"), 2, float("nan")) == "ok"  # CUDA: no CPU criteria
    assert load.quality(float("nan"), float("nan"), 1.0, 0, 2, 0.0) == "unknown"


def test_a_measured_run_records_its_load():
    cfg = canonical_model(dict(arch="decoder", layers=1, d_model=16, heads=2, d_ff=32, seq_len=8, batch=2, vocab=256), "")
    result = train(TrainSpec(cfg=cfg, task="lm", rule="bp", steps=8, seed=0, measure=True, options=RuleOptions()))
    summary = result.summary
    assert summary["timing_quality"] in load.QUALITIES
    assert summary["cpu_time_per_wall"] > 0 and summary["cores"] >= 1
    assert 0 <= summary["steal_fraction"] <= 1 and summary["step_time_min_s"] <= summary["step_time_median_s"]
    row = result.measured.iloc[0]
    assert row["timing_quality"] == summary["timing_quality"] and row["phase_time_min_s"] <= row["phase_time_median_s"]


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="Linux /proc")
def test_a_run_beside_cpu_burners_is_flagged():
    """Two busy loops per core on the cores this process may use: the run gets far less than a core and sees
    other runnable tasks. (The quiet case cannot be asserted on a shared machine.)"""
    cores = len(os.sched_getaffinity(0))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * cores)]
    threads = torch.get_num_threads()
    try:
        time.sleep(1.0)
        torch.set_num_threads(1)
        cfg = canonical_model(dict(arch="decoder", layers=2, d_model=64, heads=4, d_ff=256, seq_len=64, batch=8,
                                   vocab=256), "")
        result = train(TrainSpec(cfg=cfg, task="lm", rule="bp", steps=14, seed=0, measure=True, options=RuleOptions()))
    finally:
        torch.set_num_threads(threads)
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()
    summary = result.summary
    assert summary["timing_quality"] in ("contended", "noisy"), summary
    assert summary["cpu_time_per_wall"] < load.MIN_CPU_PER_WALL or summary["runnable_others_median"] > cores - 1
