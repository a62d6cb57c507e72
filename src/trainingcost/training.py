"""A short training run: one model, one task, one learning rule.

:func:`train` returns one row per step (loss, and the validation loss and
accuracy at evaluation steps) plus the columns that identify the run.
The phase factory of :mod:`trainingcost.rules.base` passes through, so a
measurement layer can wrap each phase of each step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import pandas as pd
import torch

from . import __version__
from .config import ConfigError, config_id
from .data import make_task
from .model import Transformer
from .objective import Batch, correct, loss as loss_fn
from .rules import RuleOptions, make_rule, no_phases

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DEVICES = ("auto", "cpu", "cuda")
STATUS_OK, STATUS_DIVERGED = "ok", "diverged"


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


def build(spec: TrainSpec):
    """Model, rule, task and device of a run (checked, seeded, on the device)."""
    spec.check()
    device = resolve_device(spec.device)
    task = make_task(spec.task, spec.cfg, spec.corpus)
    torch.manual_seed(spec.seed)
    model = Transformer(spec.cfg).to(device=device, dtype=DTYPES[spec.dtype])
    rule = make_rule(spec.rule, model, spec.options, seed=spec.seed + 1)
    return model, rule, task, device


def train(spec: TrainSpec, phase=no_phases) -> TrainResult:
    model, rule, task, device = build(spec)
    data = torch.Generator().manual_seed(spec.seed + 2)
    validation = [b.to(device) for b in task.validation(spec.seed, spec.eval_batches)]
    records = []
    status = STATUS_OK
    val_loss = val_accuracy = math.nan
    for step in range(1, spec.steps + 1):
        batch = task.batch(data).to(device)
        loss = float(rule.step(batch, phase))
        record = {"step": step, "loss": loss, "val_loss": math.nan, "val_accuracy": math.nan}
        records.append(record)
        if not math.isfinite(loss):
            status = STATUS_DIVERGED
            break
        if step == spec.steps or (spec.eval_every and step % spec.eval_every == 0):
            val_loss, val_accuracy = evaluate(model, validation)
            record.update(val_loss=val_loss, val_accuracy=val_accuracy)
    frame = steps_frame(records, spec, status, device, rule.weight_decay)
    return TrainResult(
        steps=frame,
        status=status,
        first_loss=records[0]["loss"],
        final_loss=records[-1]["loss"],
        val_loss=val_loss,
        val_accuracy=val_accuracy,
        device=str(device),
        task_description=task.description,
    )


def steps_frame(records: list[dict], spec: TrainSpec, status: str, device: torch.device, weight_decay: float) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=["step", "loss", "val_loss", "val_accuracy"])
    frame["step"] = frame["step"].astype("int64")
    options = asdict(spec.options)
    identity = {
        "rule": spec.rule,
        "config_id": config_id(spec.cfg),
        "task": spec.task,
        "seed": spec.seed,
        "status": status,
        "arch": spec.cfg["arch"],
        "optimizer": options["optimizer"],
        "lr": options["lr"],
        "weight_decay": float(weight_decay),
        "mirror_steps": options["mirror_steps"],
        "dtype": spec.dtype,
        "device": str(device),
        "trainingcost_version": __version__,
        "torch_version": torch.__version__,
    }
    for column, value in identity.items():
        frame[column] = value
    return frame
