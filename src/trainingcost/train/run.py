"""A short training run: one model, one task, one learning rule.

:func:`run_steps` trains and returns each step's loss (and the validation loss
and accuracy at evaluation steps). An *observer* may run each step instead of
calling the rule directly: measurement (:mod:`trainingcost.measure.run`)
passes one that times, meters and records steps; training itself knows
nothing about measurement.

Faults do not raise: an out-of-memory error ends the run with status ``oom``,
a non-finite loss with ``diverged``, any other exception with ``error`` and
its message, so that one bad configuration does not stop a sweep. Mistakes in
the specification itself (:class:`ConfigError`) do raise, before anything runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from ..analytic.catalogue import check_architecture
from ..config.errors import ConfigError, reraise_interrupt
from ..config.training import DEVICES, TrainSpec
from .data import make_task
from .model import Transformer
from .objective import IGNORE, Batch, correct, loss as loss_fn
from .registry import make_rule
from .rule import Rule, no_phases

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
STATUS_OK, STATUS_DIVERGED, STATUS_OOM, STATUS_ERROR = "ok", "diverged", "oom", "error"
STATUS_FAILED = "failed"  # the process died (a crash, a kill): recorded afterwards by `train --record-failure`


class Observer(Protocol):
    def run(self, step: int, batch: Batch) -> torch.Tensor: ...


@dataclass
class Trained:
    """What a run did: one record per step, how it ended, and the objects a measurement reads."""

    records: list[dict]
    status: str
    message: str | None
    device: torch.device
    task_description: str
    weight_decay: float | None
    val_loss: float = math.nan
    val_accuracy: float = math.nan
    model: Transformer | None = None
    rule: Rule | None = None
    observer: Observer | None = None
    losses: list[float] = field(default_factory=list)


def resolve_device(name: str) -> torch.device:
    if name not in DEVICES:
        raise ConfigError(f"device: {name!r} is not allowed (allowed: {', '.join(DEVICES)})")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device: cuda, but no CUDA device is available to torch {torch.__version__}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@torch.no_grad()
def evaluate(model: Transformer, batches: list[Batch]) -> tuple[float, float]:
    """Validation loss (mean over target rows) and accuracy. A model sharded by FSDP2 is resharded after it: under
    ``reshard_after_forward=False`` (zero2) the evaluation's forward would leave its parameters gathered, and the next
    training step's forward would gather nothing (its metered bytes short of the model's)."""
    total_loss, hits, rows = 0.0, 0, 0
    try:
        for batch in batches:
            logits = model(batch.tokens)
            right, n = correct(logits, batch.targets)
            total_loss += float(loss_fn(logits, batch.targets)) * n
            hits += right
            rows += n
    finally:
        _reshard(model)
    return (total_loss / rows, hits / rows) if rows else (math.nan, math.nan)


def _reshard(model: torch.nn.Module) -> None:
    """Free the gathered parameters of every FSDP2 module of ``model`` (none outside torch.distributed)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch built without distributed
        return
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def build_model(spec: TrainSpec, device: torch.device) -> tuple[Transformer, Rule]:
    torch.manual_seed(spec.seed)
    model = Transformer(spec.cfg).to(device=device, dtype=DTYPES[spec.dtype])
    rule = make_rule(spec.rule, model, spec.options, seed=spec.seed + 1)
    return model, rule


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500]


# How the CPU allocator says it is out of memory (torch raises a plain RuntimeError there).
CPU_OOM_MESSAGES = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")


def _out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in CPU_OOM_MESSAGES)


def _divergence(step: int, loss: float, model: Transformer | None, spec: TrainSpec) -> str:
    """Where a run went non-finite: the loss at ``step``, and the first parameter that is no longer finite."""
    text = f"the training loss is {loss} at step {step} (lr {spec.options.lr}, optimizer {spec.options.optimizer})"
    if model is not None:
        bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            text += f"; {len(bad)} parameter tensors are non-finite, first {bad[0]}"
        else:
            text += "; the parameters are still finite (the forward pass overflowed)"
    return text


def run_steps(spec: TrainSpec, observe: Callable[[Rule, torch.device], Observer] | None = None,
              phase=no_phases, parallel=None) -> Trained:
    """Train ``spec``; ``observe(rule, device)`` builds the observer that runs each step, if given; ``parallel``
    (:class:`.distributed.Parallel`): this process is one rank of a data-parallel run."""
    spec.check()
    check_architecture(spec.rule, spec.cfg)
    device = resolve_device(spec.device)
    task = make_task(spec.task, parallel.global_cfg(spec.cfg) if parallel else spec.cfg, spec.corpus)
    done = Trained([], STATUS_OK, None, device, task.description, spec.options.weight_decay)
    try:
        done.model, done.rule = build_model(spec, device)
        if parallel is not None:
            parallel.wrap(done.rule)
        done.weight_decay = done.rule.weight_decay
        done.observer = observe(done.rule, device) if observe else None
        data = torch.Generator().manual_seed(spec.seed + 2)
        validation = [b.to(device) for b in task.validation(spec.seed, spec.eval_batches)]
        for step in range(1, spec.steps + 1):
            batch = task.batch(data)
            batch = (parallel.shard(batch) if parallel is not None else batch).to(device)
            if parallel is not None and not bool((batch.targets != IGNORE).any()):
                # a mean over no loss term is nan on this rank alone: fail the job (measure/distributed.py) rather
                # than call it diverged
                raise RuntimeError(f"step {step}: this rank's shard of the batch has no target (masked-token "
                                   "modelling masks some tokens at random); give a larger --batch or --seq-len")
            loss = float(done.observer.run(step, batch) if done.observer else done.rule.step(batch, phase))
            record = {"step": step, "loss": loss, "val_loss": math.nan, "val_accuracy": math.nan}
            done.records.append(record)
            if not math.isfinite(loss):
                done.status, done.message = STATUS_DIVERGED, _divergence(step, loss, done.model, spec)
                break
            if step == spec.steps or (spec.eval_every and step % spec.eval_every == 0) or step in spec.eval_at:
                done.val_loss, done.val_accuracy = evaluate(done.model, validation)
                record.update(val_loss=done.val_loss, val_accuracy=done.val_accuracy)
                if not math.isfinite(done.val_loss):  # the step's weights give a non-finite loss: diverged too
                    done.status = STATUS_DIVERGED
                    done.message = _divergence(step, done.val_loss, done.model, spec).replace(
                        "the training loss", "the validation loss", 1)
                    break
    except (torch.OutOfMemoryError, MemoryError) as exc:
        done.status, done.message = STATUS_OOM, _one_line(exc)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as the run's status, so the sweep goes on
        reraise_interrupt(exc)  # a signal wrapped in another exception is still a signal
        done.status = STATUS_OOM if _out_of_memory(exc) else STATUS_ERROR
        done.message = _one_line(exc)
    if done.status in (STATUS_OOM, STATUS_ERROR) and device.type == "cuda":
        torch.cuda.empty_cache()
    done.losses = [r["loss"] for r in done.records]
    return done
