"""A learning curve: the validation loss against the training compute of one run (the scaling study).

The run is a plain training run (:func:`trainingcost.train.run.run_steps`) whose first step runs under the
FLOP meter (:mod:`.flops`); every step of a run does the same work (the shapes, the rule's passes and its
feedback updates do not change from step to step), so the compute after step s is s times the metered
step. Beside it stands the executed model's count for the same step, which the meter equals (tests
check it); the table keeps both, so that a reader sees that the compute axis is measured.

Nothing is timed: the scaling study's axis is FLOPs, which a busy machine does not change.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from ..analytic import phase_totals
from ..analytic.plan_facts import model_facts
from ..config import TrainSpec, configs_frame
from ..train.run import run_steps
from .flops import metering
from .provenance import provenance

CURVE_COLUMNS = [
    "config_id", "rule", "seed", "lr", "optimizer", "d_model", "layers", "heads", "seq_len", "batch",
    "parameter_count", "block_parameters", "step", "tokens", "flops", "flops_per_step", "executed_flops_per_step",
    "train_loss", "val_loss", "val_accuracy", "status", "message",
]


class FirstStepMetered:
    """Runs step 1 under the FLOP meter and every other step plainly."""

    def __init__(self, rule):
        self.rule = rule
        self.flops: int | None = None

    def run(self, step: int, batch) -> torch.Tensor:
        if step != 1:
            return self.rule.step(batch)
        with metering(self.rule.model) as meter:
            loss = self.rule.step(batch, meter.in_phase)
        self.flops = int(sum(meter.counts.values()))
        return loss


def executed_flops_per_step(spec: TrainSpec) -> int:
    """The executed cost model's FLOPs of one training step of ``spec`` (every phase of its rule)."""
    totals = phase_totals(configs_frame([("", spec.cfg)]), [spec.rule], ["executed"], spec.options.mirror_steps)
    return int(sum(int(flops[0]) for (_, rule, _), (_, flops) in totals.items() if rule == spec.rule))


def learning_curve(spec: TrainSpec) -> pd.DataFrame:
    """One row per evaluation of ``spec`` (its ``eval_at`` steps and its last): the step, the tokens and the
    measured FLOPs trained so far, the mean training loss since the previous evaluation, and the validation
    loss and accuracy. A run that fails keeps the rows it evaluated and says how it ended on every row; one
    that failed before any evaluation gets one row, step 0."""
    done = run_steps(spec, lambda rule, device: FirstStepMetered(rule))
    metered = done.observer.flops if done.observer is not None else None
    cfg = spec.cfg
    facts = model_facts(cfg, ["bp"], spec.options.optimizer)
    rows, since = [], []
    for record in done.records:
        since.append(record["loss"])
        if math.isnan(record["val_loss"]):
            continue
        rows.append({"step": record["step"], "train_loss": sum(since) / len(since), "val_loss": record["val_loss"],
                     "val_accuracy": record["val_accuracy"]})
        since = []
    if not rows:
        rows = [{"step": 0, "train_loss": math.nan, "val_loss": math.nan, "val_accuracy": math.nan}]
    frame = pd.DataFrame.from_records(rows)
    frame["tokens"] = frame["step"] * cfg.tokens_per_step
    frame["flops_per_step"] = pd.array([metered] * len(frame), dtype="Int64")
    frame["flops"] = (frame["step"] * frame["flops_per_step"]).astype("Int64")
    frame["executed_flops_per_step"] = executed_flops_per_step(spec)
    frame = frame.assign(
        config_id=cfg.config_id, rule=spec.rule, seed=spec.seed, lr=float(spec.options.lr),
        optimizer=spec.options.optimizer, d_model=cfg.d_model, layers=cfg.dec_layers, heads=cfg.heads,
        seq_len=cfg.seq_len, batch=cfg.batch,
        parameter_count=sum(p.numel() for p in done.model.parameters()) if done.model is not None else facts.parameters,
        block_parameters=facts.blocks_parameters, status=done.status, message=done.message,
    )
    extra = {k: v for k, v in provenance(done.device).items() if k in ("torch_version", "device_name", "git_commit")}
    return frame[CURVE_COLUMNS].assign(**extra)
