"""Calibration of the collectives (``trainingcost calibrate --collectives``): all-reduce, reduce-scatter,
all-gather and broadcast timed over buffer sizes on this machine's backend, in rounds until two rounds agree,
and a line ``t = alpha + beta * bytes`` fitted per op (docs/distributed.md).

Bytes are counted as the meter counts them (:mod:`.comm`): the tensor of an all-reduce or broadcast, the gathered
output of an all-gather, the unscattered input of a reduce-scatter. Each timing starts after a barrier and ends
when the collective has completed on this rank; a round's time per (op, size) is the median of its repetitions,
the slowest rank's (a collective ends for the job when it ends on every rank).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from ..train.run import resolve_device
from .distributed import backend_for, run_ranks

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
MIN_BYTES = 4 * 2**10
MAX_BYTES = 256 * 2**20
CPU_MAX_BYTES = 16 * 2**20  # gloo on a CPU: larger buffers add seconds per round and nothing to the fit
REPEATS = 5


def sizes(max_bytes: int) -> list[int]:
    """4 KiB, 16 KiB, ... (powers of 4) up to ``max_bytes``."""
    out, size = [], MIN_BYTES
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out


def _collective(op: str, size: int, world: int, device: torch.device):
    elements = max(size // 4, world)
    elements -= elements % world
    if op == "all_reduce":
        buffer = torch.ones(elements, device=device)
        return lambda: dist.all_reduce(buffer)
    if op == "broadcast":
        buffer = torch.ones(elements, device=device)
        return lambda: dist.broadcast(buffer, src=0)
    big, small = torch.ones(elements, device=device), torch.ones(elements // world, device=device)
    if op == "all_gather":
        return lambda: dist.all_gather_single(big, small)
    return lambda: dist.reduce_scatter_single(small, big)


def _busy(seconds: float, work: torch.Tensor) -> torch.Tensor:
    """Compute on this rank's thread for ``seconds`` (small matrix products), as a training step does between two
    collectives."""
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        work = torch.tanh(work @ work)
    return work


def _round(ops, points, world, device, after_compute_s: float = 0.0) -> dict:
    times = {}
    work = torch.randn(128, 128, device=device) / 16
    for op in ops:
        for size in points:
            run = _collective(op, size, world, device)
            run()  # warm
            samples = []
            for _ in range(REPEATS):
                if after_compute_s:
                    work = _busy(after_compute_s, work)
                dist.barrier()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                run()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                samples.append(time.perf_counter() - start)
            slowest = torch.tensor([float(np.median(samples))], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            times[op, size] = float(slowest)
    return times


@record
def worker(device_name: str, backend: str, max_bytes: int, tolerance: float, time_cap_s: float,
           after_compute_s: float = 0.0) -> dict:
    torch.set_num_threads(1)
    device = resolve_device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend_for(device, backend))
    try:
        world, points = dist.get_world_size(), sizes(max_bytes)
        start, rounds, previous, change = time.perf_counter(), 0, None, float("inf")
        while True:
            current = _round(OPS, points, world, device, after_compute_s)
            rounds += 1
            if previous is not None:
                total = sum(current.values())
                change = sum(abs(current[k] - previous[k]) for k in current) / total
            stop = torch.tensor([float(change <= tolerance), float(time.perf_counter() - start > time_cap_s)])
            dist.broadcast(stop, src=0)  # every rank stops at the same round
            if stop[0] or stop[1]:
                break
            previous = current
        return {"world": world, "backend": dist.get_backend(), "after_compute_s": after_compute_s,
                "rounds": rounds, "converged": bool(stop[0]),
                "agreement": change, "seconds_spent": time.perf_counter() - start,
                "points": [{"op": op, "bytes": size, "seconds": t} for (op, size), t in current.items()]}
    finally:
        dist.destroy_process_group()


def fit(points: list[dict]) -> dict:
    """alpha (s) and beta (s per byte) per op: least squares on t = alpha + beta * bytes, weighted by 1/t (relative
    errors, so that the small sizes' latency counts as much as the large sizes' bandwidth); alpha at least 0."""
    out = {}
    for op in OPS:
        rows = [(p["bytes"], p["seconds"]) for p in points if p["op"] == op]
        x, t = np.array([r[0] for r in rows], float), np.array([r[1] for r in rows], float)
        w = 1.0 / t
        a = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
        alpha, beta = np.linalg.lstsq(a, t * w, rcond=None)[0]
        if alpha < 0:
            alpha, beta = 0.0, float(np.sum(w * w * x * t) / np.sum(w * w * x * x))
        out[op] = {"alpha_s": float(alpha), "beta_s_per_byte": float(beta)}
    return out


class CollectivesBusy(Exception):
    """The rounds did not agree within the time cap."""


def calibrate_collectives(nproc: int, device: str = "auto", backend: str = "auto", max_bytes: int | None = None,
                          tolerance: float = 0.05, time_cap_s: float = 120.0, after_compute_s: float = 0.0) -> dict:
    """Time the collectives until two rounds agree (else :class:`CollectivesBusy`). ``after_compute_s``: each timed
    collective follows that much computation on every rank (then a barrier), as a collective in a training step
    follows the step's compute; 0: back to back (the collective's own time)."""
    resolved = resolve_device(device)
    if max_bytes is None:
        max_bytes = MAX_BYTES if resolved.type == "cuda" else CPU_MAX_BYTES
    ranks, failure = run_ranks(worker, nproc, (device, backend, max_bytes, tolerance, time_cap_s, after_compute_s))
    if failure is not None:
        raise RuntimeError(failure)
    result = ranks[0]
    if not result["converged"]:
        raise CollectivesBusy(
            f"calibrate --collectives: the machine is busy: two rounds never agreed within {tolerance:.0%} in "
            f"{time_cap_s:g} s (last change {result['agreement']:.1%}); nothing written")
    return {**result, "fit": fit(result["points"]), "device": str(resolved), "max_bytes": max_bytes}
