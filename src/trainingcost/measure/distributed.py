"""A data-parallel training run: ``nproc`` ranks started through torch.distributed's elastic launcher (torchrun's
engine), each training its shard (:mod:`trainingcost.train.distributed`) under the communication meter
(:mod:`.comm`). docs/distributed.md.

The parent process picks a free port, starts the ranks and waits. A rank that fails ends the run: the launcher
terminates the others (``max_restarts=0``) and the run is recorded with status ``failed`` and the failing rank's
error. Ctrl-C (or SIGTERM) reaches the launcher, which terminates every rank; the command then writes nothing.
"""

from __future__ import annotations

import math
import os
import socket
import time
import uuid
from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.distributed as dist

from torch.distributed.elastic.multiprocessing.errors import record

from ..config.training import TrainSpec
from ..train.distributed import Parallel
from ..train.run import STATUS_ERROR, STATUS_FAILED, STATUS_OOM, resolve_device, run_steps
from .comm import CommMeter

COMM_COLUMNS = ["step", "phase", "op", "bytes", "group", "dtype", "seconds", "wait_s"]


def free_port() -> int:
    """A port no process listens on now (the OS's choice), for the launcher's rendezvous store."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(device: torch.device, backend: str) -> str:
    if backend != "auto":
        return backend
    return "nccl" if device.type == "cuda" else "gloo"


class _Observer:
    """Runs each step under the meter and records the loss averaged over the ranks (outside the meter)."""

    def __init__(self, rule, meter: CommMeter, world: int):
        self.rule, self.meter, self.world = rule, meter, world
        self.times: list[float] = []

    def run(self, step, batch):
        self.meter.step = step
        start = time.perf_counter()
        with self.meter:
            loss = self.rule.step(batch, self.meter.phase)
        self.times.append(time.perf_counter() - start)
        total = loss.detach().double().reshape(1).cpu()
        dist.all_reduce(total)
        return total / self.world


def _full(tensor: torch.Tensor) -> torch.Tensor:
    full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
    return full.detach().cpu().clone()


def exact_dtype() -> None:
    """Train in float64 whatever the spec's dtype (the equivalence test's setting: its ranks and its one-process
    reference alike)."""
    from ..train import run

    run.DTYPES = {name: torch.float64 for name in run.DTYPES}


@record
def worker(specs: tuple[TrainSpec, ...], parallel: str, backend: str, threads: int | None, want_state: bool,
           exact: bool = False, replicate: int = 1) -> list[dict]:
    """One rank (the launcher's entry point): train each spec in turn in one process group, and return what the
    parent tabulates, per spec."""
    if exact:
        exact_dtype()
    if threads is not None:
        torch.set_num_threads(threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = resolve_device(specs[0].device)
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend_for(device, backend))
    try:
        return [_train_rank(spec, parallel, rank, world, want_state, replicate) for spec in specs]
    finally:
        dist.destroy_process_group()


def _train_rank(spec: TrainSpec, parallel: str, rank: int, world: int, want_state: bool, replicate: int = 1) -> dict:
    meter = CommMeter()
    observers = []

    def observe(rule, device):
        observers.append(_Observer(rule, meter, world))
        return observers[0]

    done = run_steps(spec, observe, parallel=Parallel(parallel, rank, world, replicate=replicate))
    if done.status in (STATUS_ERROR, STATUS_OOM):  # the other ranks may wait in a collective: fail the job
        raise RuntimeError(f"rank {rank}: {done.message}")
    state = None
    if want_state:
        rule = done.rule
        state = {f"param.{i}": _full(p) for i, p in
                 enumerate(p for g in rule.optimizer.param_groups for p in g["params"])}
        state.update({f"buffer.{n}": _full(b) for n, b in done.model.named_buffers()})
    return {"rank": rank, "world": world, "records": done.records, "status": done.status,
            "message": done.message, "device": str(done.device), "task": done.task_description,
            "val_loss": done.val_loss, "val_accuracy": done.val_accuracy, "weight_decay": done.weight_decay,
            "comm": meter.rows, "copies": meter.copies, "step_times": observers[0].times if observers else [], "state": state}


@dataclass
class DistributedRun:
    status: str
    message: str | None
    ranks: dict = field(default_factory=dict)  # rank -> what its worker returned

    @property
    def first(self) -> dict:
        return self.ranks.get(0, {})

    def comm(self) -> pd.DataFrame:
        """Rank 0's collectives, one row each."""
        return pd.DataFrame(self.first.get("comm", []), columns=COMM_COLUMNS)

    def copies(self) -> pd.DataFrame:
        """Rank 0's FSDP2 buffer copies (measure/comm.py, COPY_OPS), one row each: step, phase, op, read, written."""
        return pd.DataFrame(self.first.get("copies", []), columns=["step", "phase", "op", "read", "written"])

    def slowest_seconds(self) -> pd.Series:
        """Each of rank 0's collectives' seconds on its slowest rank (the ranks issue the same collectives in the
        same order; the collectives calibration's statistic: a collective ends for the job when it ends on every
        rank)."""
        times = [pd.Series([row["seconds"] for row in v.get("comm", [])]) for v in self.ranks.values()]
        if not times or len({len(t) for t in times}) != 1:
            return pd.Series(dtype=float)
        return pd.concat(times, axis=1).max(axis=1)


def run_ranks(entry, nproc: int, args: tuple) -> tuple[dict, str | None]:
    """Start ``entry(*args)`` on ``nproc`` ranks through torch.distributed's elastic launcher (torchrun's engine;
    its rendezvous store on a free port of this machine; no restarts); return ``({rank: value}, None)``, or
    ``({}, message)`` when a rank failed (the launcher has then terminated the others)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"trainingcost-{uuid.uuid4().hex}",
                          rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", max_restarts=0,
                          monitor_interval=0.1, start_method="spawn")
    try:
        return elastic_launch(config, entry)(*args), None
    except SignalException as exc:  # the launcher has terminated every rank; SIGTERM stays SIGTERM (exit 143)
        import signal

        from ..config.errors import Terminated

        raise (Terminated if exc.sigval == signal.SIGTERM else KeyboardInterrupt) from exc
    except ChildFailedError as exc:
        rank, failure = min(exc.failures.items())
        text = failure.message if isinstance(failure.message, str) else failure.message.get("message", str(failure.message))
        return {}, f"rank {rank} exited with status {failure.exitcode}: {' '.join(str(text).split())[:400]}"


def launch(spec: TrainSpec, nproc: int, parallel: str, backend: str = "auto", threads: int | None = 1,
           want_state: bool = False, exact: bool = False, replicate: int = 1) -> DistributedRun:
    """Run ``spec`` on ``nproc`` ranks of this machine."""
    return launch_each((spec,), nproc, parallel, backend, threads, want_state, exact, replicate)[0]


def launch_each(specs, nproc: int, parallel: str, backend: str = "auto", threads: int | None = 1,
                want_state: bool = False, exact: bool = False, replicate: int = 1) -> list[DistributedRun]:
    """Run each spec in turn on the same ``nproc`` ranks (one launch: the tests' and the benchmark's way);
    ``replicate`` R > 1 under zero2 / fsdp: HSDP, R replica groups of nproc / R ranks (train/distributed.py)."""
    ranks, failure = run_ranks(worker, nproc, (tuple(specs), parallel, backend, threads, want_state, exact,
                                               replicate))
    if failure is not None:
        return [DistributedRun(STATUS_FAILED, failure) for _ in specs]
    return [DistributedRun(ranks[0][i]["status"], ranks[0][i]["message"], {r: ranks[r][i] for r in ranks})
            for i in range(len(specs))]


def comm_summary(comm: pd.DataFrame, steps: int) -> dict:
    """Per step (mean over the steps run): bytes, seconds and collectives, and bytes and seconds per phase."""
    out = {"comm_bytes_per_step": math.nan, "comm_s_per_step": math.nan, "comm_wait_s_per_step": math.nan,
           "collectives_per_step": math.nan}
    if not steps:
        return out
    out.update(comm_bytes_per_step=float(comm["bytes"].sum()) / steps, comm_s_per_step=float(comm["seconds"].sum()) / steps,
               comm_wait_s_per_step=float(comm["wait_s"].sum()) / steps,
               collectives_per_step=len(comm) / steps)
    for phase, rows in comm.groupby("phase"):
        out[f"comm_bytes_{phase}"] = float(rows["bytes"].sum()) / steps
        out[f"comm_s_{phase}"] = float(rows["seconds"].sum()) / steps
    return out


def train_distributed(spec: TrainSpec, nproc: int, parallel: str, backend: str = "auto",
                      threads: int | None = 1, replicate: int = 1):
    """``train``'s result for a data-parallel run: one row per step (loss averaged over the ranks, the step's
    wall time and its communication), the collectives of rank 0 (``comm``), and with ``spec.measure`` one
    measured row for the run with the communication columns (docs/measurement.md)."""
    from .run import TrainResult, measured_frame, run_columns, steps_frame

    device = resolve_device(spec.device)
    run = launch(spec, nproc, parallel, backend, threads, replicate=replicate)
    first = run.first
    records = first.get("records", [])
    columns = {**run_columns(spec, run.status, run.message, device, first.get("weight_decay", spec.options.weight_decay)),
               "nproc": nproc, "parallel": parallel, "replicate": replicate, "backend": backend_for(device, backend),
               "global_batch": spec.cfg.batch * nproc}
    comm = run.comm()
    frame = steps_frame(records, None, columns)
    per_step = comm.groupby("step").agg(comm_bytes=("bytes", "sum"), comm_s=("seconds", "sum"),
                                        collectives=("op", "size")).reset_index()
    frame = frame.merge(per_step, on="step", how="left")
    times = first.get("step_times", [])
    frame["step_time_s"] = [times[i] if i < len(times) else math.nan for i in range(len(frame))]
    timed = times[spec.warmup:] if len(times) > spec.warmup else times
    counted = comm[comm.step > spec.warmup] if len(times) > spec.warmup else comm
    summary = comm_summary(counted, len(timed))
    slowest = run.slowest_seconds()
    if len(slowest) == len(comm) and len(timed):
        summary["comm_s_slowest_per_step"] = float(slowest[(comm.step > spec.warmup).to_numpy()
                                                          if len(times) > spec.warmup else slice(None)].sum()) / len(timed)
    if timed and run.status == "ok":  # the communication model's bytes over the same steps (analytic/comm.py)
        from ..analytic.comm import run_collectives

        first_step = len(times) - len(timed) + 1
        model = [run_collectives(spec.cfg, spec.rule, parallel, nproc, spec.dtype, step, replicate)
                 for step in range(first_step, len(times) + 1)]
        summary["comm_model_bytes_per_step"] = sum(c.bytes for s in model for c in s) / len(model)
    if timed:
        summary["step_time_median_s"] = float(pd.Series(timed).median())
    measured = None
    if spec.measure:
        measured, _ = measured_frame(None, None, spec, columns, records, first.get("val_loss", math.nan),
                                     first.get("val_accuracy", math.nan))
        for key, value in summary.items():
            measured[key] = value
    losses = [r["loss"] for r in records]
    result = TrainResult(steps=frame, status=run.status, first_loss=losses[0] if losses else math.nan,
                         final_loss=losses[-1] if losses else math.nan, val_loss=first.get("val_loss", math.nan),
                         val_accuracy=first.get("val_accuracy", math.nan), device=str(device),
                         task_description=first.get("task", ""), message=run.message, measured=measured)
    return result, comm, summary


def comm_line_text(nproc: int, parallel: str, summary: dict, replicate: int = 1) -> str:
    """The summary line's communication clause."""
    if replicate > 1:
        parallel = f"{parallel} in {replicate} replica groups"
    if not isinstance(summary.get("collectives_per_step"), float) or math.isnan(summary["collectives_per_step"]):
        return f"; {nproc} ranks ({parallel}): no step run"
    model = summary.get("comm_model_bytes_per_step")
    said = ("" if model is None else " (the model's: equal)" if model == summary["comm_bytes_per_step"]
            else f" (the model's: {model:,.0f})")
    return (f"; {nproc} ranks ({parallel}), communication per step: {summary['comm_bytes_per_step']:,.0f} bytes"
            f"{said} in {collectives_text(summary['collectives_per_step'])}, {summary['comm_s_per_step'] * 1e3:.2f} ms")


def collectives_text(count: float) -> str:
    """``6 collectives``, ``1 collective``, ``1.67 collectives`` (a mean over steps whose first holds one-off
    broadcasts)."""
    return f"{count:.3g} collective{'' if count == 1 else 's'}"
