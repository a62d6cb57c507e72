"""One recorded run: training (:mod:`trainingcost.train.run`) plus its tables.

:func:`train` returns one row per step (loss, validation loss and accuracy,
the columns that identify the run and where it ran). With ``spec.measure``
each step runs through a :class:`~.recorder.StepRecorder`, and the result also
holds one row per (layer, phase): measured FLOPs, time per phase and step,
memory and energy. :func:`failed_run` writes the same tables for a process
that died before writing them.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field

import pandas as pd
import torch

from ..config.errors import reraise_interrupt
from ..config.model import CANONICAL_FIELDS
from ..config.training import TrainSpec
from ..train.rule import no_phases
from ..train.run import STATUS_FAILED, resolve_device, run_steps
from .provenance import provenance
from .recorder import StepRecorder, measured_rows, run_summary
from .probe import spec_json
from .trace import TRACE_COLUMNS, class_times, trace_step

STEP_COLUMNS = ["step", "loss", "val_loss", "val_accuracy"]
CANONICAL_SIZES = tuple(name for name in CANONICAL_FIELDS if name != "arch")  # the configuration columns of a run


@dataclass
class TrainResult:
    steps: pd.DataFrame
    status: str
    first_loss: float
    final_loss: float
    val_loss: float
    val_accuracy: float
    device: str
    task_description: str
    message: str | None = None
    measured: pd.DataFrame | None = None  # with measure: one row per (layer, phase)
    summary: dict = field(default_factory=dict)  # with measure: run-level measurements
    trace: pd.DataFrame | None = None  # with measure: the ops of one step (measure/trace.py)


def train(spec: TrainSpec, phase=no_phases) -> TrainResult:
    """Train ``spec`` and tabulate it (measured too, with ``spec.measure``)."""
    # The last step is profiled (split by class of work) where at least two timed steps remain.
    profile_step = spec.steps if spec.steps >= spec.warmup + 4 else None
    observe = (lambda rule, device: StepRecorder(rule, device, spec.warmup, profile_step)) if spec.measure else None
    done = run_steps(spec, observe, phase)
    columns = run_columns(spec, done.status, done.message, done.device, done.weight_decay)
    recorder = done.observer
    frame = steps_frame(done.records, recorder, columns)
    measured, summary, trace = None, {}, None
    if spec.measure:
        trace = traced(spec, done.device)
        measured, summary = measured_frame(recorder, done.model, spec, columns, done.records, done.val_loss,
                                           done.val_accuracy, trace)
    return TrainResult(
        steps=frame,
        status=done.status,
        first_loss=done.losses[0] if done.losses else math.nan,
        final_loss=done.losses[-1] if done.losses else math.nan,
        val_loss=done.val_loss,
        val_accuracy=done.val_accuracy,
        device=str(done.device),
        task_description=done.task_description,
        message=done.message,
        measured=measured,
        summary=summary,
        trace=trace,
    )


def traced(spec: TrainSpec, device) -> pd.DataFrame:
    """The ops of one step of the run (:mod:`.trace`), keyed by run; empty, with a warning, if it cannot trace."""
    try:
        trace = trace_step(spec, device)
    except Exception as exc:  # noqa: BLE001 - a run's measurements do not depend on its trace; the predictor skips it
        reraise_interrupt(exc)
        warnings.warn(f"no trace of the step ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})", stacklevel=2)
        trace = pd.DataFrame(columns=TRACE_COLUMNS)
    return trace.assign(config_id=spec.cfg.config_id, rule=spec.rule, seed=spec.seed, spec=spec_json(spec))


def failed_run(spec: TrainSpec, exit_code: int) -> TrainResult:
    """The tables of a run whose process died before writing them: status ``failed`` and its exit code."""
    spec.check()
    device = resolve_device(spec.device)
    message = f"the training process exited with status {exit_code} before writing its tables (see train.log)"
    columns = run_columns(spec, STATUS_FAILED, message, device, spec.options.weight_decay)
    frame = steps_frame([], None, columns)
    measured, _ = measured_frame(None, None, spec, columns, [], math.nan, math.nan) if spec.measure else (None, {})
    return TrainResult(steps=frame, status=STATUS_FAILED, first_loss=math.nan, final_loss=math.nan, val_loss=math.nan,
                       val_accuracy=math.nan, device=str(device), task_description="", message=message, measured=measured)


def run_columns(spec: TrainSpec, status: str, message: str | None, device: torch.device, weight_decay) -> dict:
    """The columns that identify a run and where it ran, on every row it writes."""
    options = asdict(spec.options)
    return {
        "config_id": spec.cfg.config_id,
        "rule": spec.rule,
        "task": spec.task,
        "seed": spec.seed,
        "status": status,
        "message": message,
        "arch": spec.cfg.arch,
        "optimizer": options["optimizer"],
        "lr": options["lr"],
        "weight_decay": float(weight_decay) if weight_decay is not None else math.nan,
        "mirror_steps": options["mirror_steps"],
        "dtype": spec.dtype,
        "steps": spec.steps,
        "warmup": spec.warmup if spec.measure else 0,
        **provenance(device),
    }


def steps_frame(records: list[dict], recorder, columns: dict) -> pd.DataFrame:
    """One row per step run; a run that ended before its first step gets one row, step 0, that records how."""
    if not records:
        records = [{"step": 0, "loss": math.nan, "val_loss": math.nan, "val_accuracy": math.nan}]
    frame = pd.DataFrame.from_records(records, columns=STEP_COLUMNS)
    if recorder is not None and recorder.rows:
        timing = pd.DataFrame(recorder.rows)
        frame = frame.merge(timing, on="step", how="left")
    frame["step"] = frame["step"].astype("int64")
    for column, value in columns.items():
        frame[column] = value
    return frame


def measured_frame(recorder, model, spec: TrainSpec, columns: dict, records, val_loss, val_accuracy, trace=None):
    """One row per (layer, phase): measured FLOPs and phase times, with run-level columns."""
    summary = {}
    if recorder is not None:
        summary = run_summary(recorder, spec.cfg.tokens_per_step, spec.dtype, columns["device_name"])
        if recorder.profile is not None and trace is not None and len(trace):
            summary.update(class_times(recorder.profile, trace, recorder.profiled_s, summary["step_time_median_s"]))
        else:
            summary.update({f"measured_{c}_s": math.nan for c in ("matmul", "attention", "elementwise", "launch")})
    if recorder is None or recorder.flops is None:  # the run ended before its counted step: one row for the run
        rows = pd.DataFrame({"layer": [""], "layer_kind": [""], "phase": [""]})
    else:
        rows = measured_rows(recorder, model)
    losses = [r["loss"] for r in records]
    run = {
        **summary,
        "steps_run": len(records),
        "first_loss": losses[0] if losses else math.nan,
        "final_loss": losses[-1] if losses else math.nan,
        "val_loss": val_loss,
        "val_accuracy": val_accuracy,
        **{k: getattr(spec.cfg, k) for k in CANONICAL_SIZES},
        **columns,
    }
    for column, value in run.items():
        rows[column] = value
    if "flops" in rows:
        rows["flops"] = rows["flops"].astype("Int64")
    else:
        rows["flops"] = pd.array([pd.NA] * len(rows), dtype="Int64")
    return rows, summary
