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
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import torch

from ..config.model import config_from_row
from ..config.training import RuleOptions, TrainSpec
from ..train.data import make_task
from ..train.run import build_model
from .flops import analytic_phase
from .timer import PhaseTimer
from .trace import BETWEEN

PROBE_LR = 1e-4  # small: the probe's weights hardly move over its steps


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
    """A built probe: :meth:`__call__` runs one step and returns (seconds per analytic phase, step seconds)."""

    def __init__(self, spec: TrainSpec, device: torch.device):
        self.spec = probe_spec(spec)
        self.device = device
        self.model, self.rule = build_model(self.spec, device)
        task = make_task(self.spec.task, self.spec.cfg, self.spec.corpus)
        self.batch = task.batch(torch.Generator().manual_seed(self.spec.seed + 2)).to(device)

    def __call__(self) -> dict[str, float]:
        timer = PhaseTimer(self.device)
        with timer.step():
            self.rule.step(self.batch, timer)
        seconds, step, _ = timer.finish()
        phases: dict[str, float] = {}
        for name, value in seconds.items():
            phases[analytic_phase(name)] = phases.get(analytic_phase(name), 0.0) + value
        phases[BETWEEN] = max(step - sum(phases.values()), 0.0)
        return phases
