"""A short training run: one model, one task, one learning rule.

:func:`train` returns one row per step (loss, and the validation loss and
accuracy at evaluation steps) plus the columns that identify the run. With
``measure`` it also measures the run (:mod:`trainingcost.measurement`): time
per phase and step, memory, energy, and FLOPs per layer and phase.

Faults do not raise: an out-of-memory error ends the run with status ``oom``,
a non-finite loss with ``diverged``, any other exception with ``error`` and
its message, so that one bad configuration does not stop a sweep. Mistakes in
the specification itself (:class:`ConfigError`) do raise, before anything runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import pandas as pd
import torch

from .config import CANONICAL_FIELDS, ConfigError, config_id
from .data import make_task
from .model import Transformer
from .objective import Batch, correct, loss as loss_fn
from .measurement import StepRecorder, measured_rows, run_summary
from .provenance import provenance
from .rules import RuleOptions, make_rule, no_phases

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DEVICES = ("auto", "cpu", "cuda")
STATUS_OK, STATUS_DIVERGED, STATUS_OOM, STATUS_ERROR = "ok", "diverged", "oom", "error"
STATUS_FAILED = "failed"  # the process died (a crash, a kill): recorded afterwards by `train --record-failure`


@dataclass(frozen=True)
class TrainSpec:
    cfg: dict  # canonical model configuration
    task: str
    rule: str
    steps: int = 200
    seed: int = 0
    device: str = "auto"
    dtype: str = "fp32"
    corpus: str | None = None
    eval_batches: int = 4
    eval_every: int = 0  # 0: evaluate after the last step only
    options: RuleOptions = field(default_factory=RuleOptions)
    measure: bool = False
    warmup: int = 2  # steps before the counted step and the timed steps (with measure)

    def check(self) -> None:
        if self.steps <= 0:
            raise ConfigError(f"--steps: must be a positive number of steps (got {self.steps})")
        if self.eval_batches <= 0:
            raise ConfigError(f"--eval-batches: must be positive (got {self.eval_batches})")
        if self.eval_every < 0:
            raise ConfigError(f"--eval-every: must be 0 (end only) or positive (got {self.eval_every})")
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype: {self.dtype!r} is not allowed (allowed: {', '.join(DTYPES)})")
        if self.options.lr <= 0 or not math.isfinite(self.options.lr):
            raise ConfigError(f"--lr: must be a positive number (got {self.options.lr})")
        if self.options.mirror_steps < 0:
            raise ConfigError(f"--mirror-steps: must be 0 or more (got {self.options.mirror_steps})")
        if self.warmup < 0:
            raise ConfigError(f"--warmup: must be 0 or more (got {self.warmup})")
        if self.measure and self.steps < self.warmup + 2:
            raise ConfigError(
                f"--steps: measuring needs at least warmup + 2 = {self.warmup + 2} steps "
                f"(warm-up, one FLOP-counted step, timed steps); got {self.steps}"
            )
        if self.corpus is not None and self.task != "lm":
            raise ConfigError(f"--corpus: applies to task lm only (task is {self.task})")


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


def resolve_device(name: str) -> torch.device:
    if name not in DEVICES:
        raise ConfigError(f"--device: {name!r} is not allowed (allowed: {', '.join(DEVICES)})")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device cuda: no CUDA device is available to torch {torch.__version__}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@torch.no_grad()
def evaluate(model: Transformer, batches: list[Batch]) -> tuple[float, float]:
    """Validation loss (mean over target rows) and accuracy."""
    total_loss, hits, rows = 0.0, 0, 0
    for batch in batches:
        logits = model(batch.tokens)
        right, n = correct(logits, batch.targets)
        total_loss += float(loss_fn(logits, batch.targets)) * n
        hits += right
        rows += n
    return (total_loss / rows, hits / rows) if rows else (math.nan, math.nan)


def build_model(spec: TrainSpec, device: torch.device):
    torch.manual_seed(spec.seed)
    model = Transformer(spec.cfg).to(device=device, dtype=DTYPES[spec.dtype])
    rule = make_rule(spec.rule, model, spec.options, seed=spec.seed + 1)
    return model, rule


def tokens_per_step(cfg: dict) -> int:
    """Input tokens of one batch: both stacks' sequences for an encoder-decoder."""
    per_sequence = cfg["seq_len"] + (cfg["tgt_len"] if cfg["arch"] == "encoder-decoder" else 0)
    return cfg["batch"] * per_sequence


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500]


def train(spec: TrainSpec, phase=no_phases) -> TrainResult:
    spec.check()
    device = resolve_device(spec.device)
    task = make_task(spec.task, spec.cfg, spec.corpus)
    records: list[dict] = []
    status, message = STATUS_OK, None
    val_loss = val_accuracy = math.nan
    recorder = model = rule = None
    weight_decay = spec.options.weight_decay
    try:
        model, rule = build_model(spec, device)
        weight_decay = rule.weight_decay
        recorder = StepRecorder(rule, device, spec.warmup) if spec.measure else None
        data = torch.Generator().manual_seed(spec.seed + 2)
        validation = [b.to(device) for b in task.validation(spec.seed, spec.eval_batches)]
        for step in range(1, spec.steps + 1):
            batch = task.batch(data).to(device)
            loss = float(recorder.run(step, batch) if recorder else rule.step(batch, phase))
            record = {"step": step, "loss": loss, "val_loss": math.nan, "val_accuracy": math.nan}
            records.append(record)
            if not math.isfinite(loss):
                status = STATUS_DIVERGED
                break
            if step == spec.steps or (spec.eval_every and step % spec.eval_every == 0):
                val_loss, val_accuracy = evaluate(model, validation)
                record.update(val_loss=val_loss, val_accuracy=val_accuracy)
    except torch.OutOfMemoryError as exc:
        status, message = STATUS_OOM, _one_line(exc)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as the run's status, so the sweep goes on
        status, message = STATUS_ERROR, _one_line(exc)
    if status in (STATUS_OOM, STATUS_ERROR) and device.type == "cuda":
        torch.cuda.empty_cache()
    columns = run_columns(spec, status, message, device, weight_decay)
    frame = steps_frame(records, recorder, columns)
    measured, summary = None, {}
    if spec.measure:
        measured, summary = measured_frame(recorder, model, spec, columns, records, val_loss, val_accuracy)
    loss_of = [r["loss"] for r in records]
    return TrainResult(
        steps=frame,
        status=status,
        first_loss=loss_of[0] if loss_of else math.nan,
        final_loss=loss_of[-1] if loss_of else math.nan,
        val_loss=val_loss,
        val_accuracy=val_accuracy,
        device=str(device),
        task_description=task.description,
        message=message,
        measured=measured,
        summary=summary,
    )


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
        "config_id": config_id(spec.cfg),
        "rule": spec.rule,
        "task": spec.task,
        "seed": spec.seed,
        "status": status,
        "message": message,
        "arch": spec.cfg["arch"],
        "optimizer": options["optimizer"],
        "lr": options["lr"],
        "weight_decay": float(weight_decay) if weight_decay is not None else math.nan,
        "mirror_steps": options["mirror_steps"],
        "dtype": spec.dtype,
        "steps": spec.steps,
        "warmup": spec.warmup if spec.measure else 0,
        **provenance(device),
    }


STEP_COLUMNS = ["step", "loss", "val_loss", "val_accuracy"]


def steps_frame(records: list[dict], recorder, columns: dict) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=STEP_COLUMNS)
    if recorder is not None and recorder.rows:
        timing = pd.DataFrame(recorder.rows)
        frame = frame.merge(timing, on="step", how="left")
    frame["step"] = frame["step"].astype("int64")
    for column, value in columns.items():
        frame[column] = value
    return frame


def measured_frame(recorder, model, spec: TrainSpec, columns: dict, records, val_loss, val_accuracy):
    """One row per (layer, phase): measured FLOPs and phase times, with run-level columns."""
    summary = {}
    if recorder is not None:
        summary = run_summary(recorder, tokens_per_step(spec.cfg), spec.dtype, columns["device_name"])
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
        **{k: spec.cfg[k] for k in CANONICAL_SIZES},
        **columns,
    }
    for column, value in run.items():
        rows[column] = value
    if "flops" in rows:
        rows["flops"] = rows["flops"].astype("Int64")
    else:
        rows["flops"] = pd.array([pd.NA] * len(rows), dtype="Int64")
    return rows, summary


CANONICAL_SIZES = tuple(name for name in CANONICAL_FIELDS if name != "arch")  # the configuration columns of a run
