"""Device calibration: the time of every kernel a sweep's steps run, measured until it converges.

The shapes come from the traces of the sweep's steps (:mod:`trainingcost.measure.trace`), not from a list of
layer kinds: each distinct kernel the traces contain (an aten op with its argument layout, the ``signature``)
is **replayed** on the device with real tensors of the traced shapes, strides and dtypes (floats uniform in
[0.5, 1): no NaN from a square root or a log; integers 0: a valid index and class everywhere). Besides:

- ``launch_overhead_s``: one call of the smallest kernel (``aten.add`` of two one-element tensors), the fixed
  cost every dispatched op pays (on GPU, the launch; on CPU, the dispatch);
- ``view_overhead_s``: one call of a view op (no kernel, the dispatch alone);
- a **copy ladder** (``aten.copy_`` at 4 KiB to 64 MiB, or to two last-level caches where that is more): the
  bandwidth at which an op the calibration never saw is priced, by the size of its operands (caches make small
  copies faster than DRAM); its top rung is the DRAM bandwidth at which the predictor prices the tensors an
  optimizer updates when the step has displaced them from the caches.

**Convergence.** Rounds are interleaved: each round times every signature once (each timing averages enough
calls to last ``timing_s``), so a slow spell of the machine hits all shapes alike rather than a few. A
signature's time is its median over the rounds so far. After each round from the third on, the medians are
compared with the previous round's: the calibration has converged when their time-weighted relative change
is at most ``tolerance`` (default 5%) and the sanity check passes. It stops at ``time_cap_s`` otherwise and
raises :class:`CalibrationBusy`, one line that says the machine is busy, and nothing is written.

**The host's work** (on a CPU, by default): the host-bound micro-steps of :mod:`trainingcost.measure.host` (a
block of modules under no-grad, with grad and backward, with its linears as ``F.linear`` and as a Python
autograd Function; each optimizer class the traces' runs use, on few and many tiny tensors and few large ones)
are timed in the same rounds, and their own rounds must agree within ``tolerance`` too. Their residuals (time
less their ops, priced like a step's) fitted on their host terms give the seconds per op of each host context and
per host call (``"host"``: ``coefficients`` and ``segments``), which the predictor adds to every traced step.
``neighbours``: processes that train the traced runs' steps beside the rounds (the workflow's timed jobs' own
concurrency, less one).

**Probes** (``probe=True``): for every run of the trace, the same step at minimal sizes
(:mod:`trainingcost.measure.probe`), timed in the same rounds, its optimizer's phase after the real step's gap
outside it and its traffic (``gap_s`` and ``displaced_bytes`` of each probe row); the predictor then adds
the real kernels' bodies to the probe's time. The workflow's and the benchmark's default
(benchmarks/bench_predictor.md).

**Sanity.** A matrix product at least as large as another in every dimension (m, n, k), with the same op
and operand layout, may not run more than :data:`MAX_SLOWDOWN_PER_FLOP` times slower per FLOP: larger
GEMMs use the cores at least as well, and a violation means a timing caught the machine busy.

The file records every signature's seconds and its spread (the IQR of its per-round timings over their
median), the rounds, their final agreement, the machine's load during the calibration
(:mod:`trainingcost.measure.load`: a ``timing_quality`` of the calibration itself) and the provenance.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..io import write_text
from ..measure.load import LoadWatch
from ..measure.host import neighbours as host_neighbours
from ..measure.host import segments as host_segments
from ..measure.host import solve as solve_host
from ..measure.host import term_counts as host_term_counts
from ..measure.probe import last_level_cache_bytes
from ..measure.provenance import provenance
from ..measure.trace import KERNEL_CLASSES
from ..train.run import DTYPES
from .predictor import gemm_dims

MAX_SLOWDOWN_PER_FLOP = 3.0
TOLERANCE = 0.05
MIN_ROUNDS = 3
MIN_HOST_ROUNDS = 7  # with the host micro-steps: each host term is a difference of two segments' medians
COPY_LADDER = [2**k for k in range(12, 27, 2)]  # bytes copied: 4 KiB ... 64 MiB
aten = torch.ops.aten


def copy_ladder(device: torch.device) -> list[int]:
    """The copy ladder's sizes (bytes read and written): :data:`COPY_LADDER`, and on a CPU whose last-level cache
    is over half its top, one rung of two last-level caches, so that its top rung streams from DRAM (the
    predictor's price of the bytes an optimizer reads cold, findings/predictor.py)."""
    top = 2 * last_level_cache_bytes() if device.type == "cpu" else 0
    return COPY_LADDER + ([top] if top > COPY_LADDER[-1] else [])


class CalibrationBusy(RuntimeError):
    """The calibration did not converge within its time cap: the machine was too busy to time it."""


def _op(name: str):
    """``aten.mm.default`` -> the OpOverload."""
    namespace, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)


_ENUMS = {str(v): v for v in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                              torch.bool, torch.uint8, torch.int8, torch.strided, torch.contiguous_format,
                              torch.preserve_format, torch.channels_last)}


def _decode(value, device: torch.device):
    if isinstance(value, list):
        return [_decode(v, device) for v in value]
    if isinstance(value, dict):
        if "t" in value:
            shape, stride, dtype = value["t"]
            dtype = getattr(torch, dtype)
            extent = 1 + sum((size - 1) * step for size, step in zip(shape, stride)) if all(shape) else 0
            base = torch.empty(extent, dtype=dtype, device=device)  # the storage, filled once (strides may repeat it)
            base.uniform_(0.5, 1.0) if dtype.is_floating_point else base.zero_()
            return base.as_strided(shape, stride)
        if "kw" in value:
            return {k: _decode(v, device) for k, v in value["kw"].items()}
        if "nan" in value:
            return math.nan
        text = value["e"]
        if text in _ENUMS:
            return _ENUMS[text]
        if text.startswith("<torch._C.Generator"):
            return torch.Generator(device=device).manual_seed(0)
        return torch.device(text) if text.split(":")[0] in ("cpu", "cuda", "meta") else text
    return value


def replay(op: str, signature: str, device: torch.device):
    """A call of ``op`` on fresh tensors of the traced signature, with the same non-tensor arguments."""
    args, kwargs = json.loads(signature)
    func = _op(op)
    args, kwargs = _decode(args, device), _decode(kwargs, device)
    return lambda: func(*args, **kwargs)


def kernels(trace: pd.DataFrame) -> pd.DataFrame:
    """The distinct kernels of a trace (one row per op and signature) with their FLOPs and bytes."""
    k = trace[trace["cls"].isin(KERNEL_CLASSES)]
    return k.groupby(["op", "signature"], as_index=False).agg(
        cls=("cls", "first"), flops=("flops", "first"), bytes_read=("bytes_read", "first"),
        bytes_written=("bytes_written", "first"), count=("count", "sum"))


# The device's busy spell before each CUDA timing: longer than the host takes to queue the calls (an H200's host
# issued about 20 us per op, benchmarks/gpu/README.md; 60 us a call leaves three times that)
SPIN_S, SPIN_PER_CALL_S = 2e-3, 60e-6


def _clock(device: torch.device):
    if device.type == "cuda":
        def timed(fn, calls):
            # The device spins while the host queues the calls, so the events time the kernels back to back and not the
            # host's issue: timed around calls of an idle device, a kernel shorter than its launch measured the host
            # (an H200: a product at 296-495 TFLOP/s that a CUDA graph ran at 616, benchmarks/gpu/README.md). The
            # host's work is the probes' (measure/probe.py), and the predictor overlaps the two on a GPU.
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(int((SPIN_S + calls * SPIN_PER_CALL_S) * 2.0e9))  # cycles: at about a 2 GHz SM clock
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1000.0 / calls
    else:
        def timed(fn, calls):
            begin = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - begin) / calls
    return timed


def build_probes(trace: pd.DataFrame, device: torch.device, per_call: dict | None = None) -> dict:
    """A warmed-up probe (measure/probe.py) per run of the trace that says how to rebuild its step; before a phase
    it displaces, the gap of the real step outside that phase: the run's other kernels at ``per_call`` seconds
    (op, signature -> one call, the calibration's warm-up) and the probe's own other phases."""
    from ..measure.probe import Probe, displaced_bytes, spec_from_json

    if "spec" not in trace.columns:
        return {}
    probes, per_call = {}, per_call or {}
    for (config_id, rule, seed), part in trace.groupby(["config_id", "rule", "seed"]):
        run = Probe(spec_from_json(part["spec"].dropna().iloc[0]), device, displaced_bytes(part))
        for _ in range(3):
            reading = run()
        kernel = part[part["cls"].isin(KERNEL_CLASSES)]
        seconds = kernel["count"].to_numpy(float) * np.array([per_call.get(k, 0.0) for k in zip(kernel["op"], kernel["signature"])])
        for phase in run.displaced:
            run.gaps[phase] = float(seconds[(kernel["timed_phase"] != phase).to_numpy()].sum()
                                    + sum(v for p, v in reading.items() if p != phase))
        probes[(config_id, rule, seed)] = run
    return probes


def sanity_violations(table: pd.DataFrame) -> list[str]:
    """Pairs of matrix products where the larger one (in every dimension) is over MAX_SLOWDOWN_PER_FLOP slower per FLOP."""
    gemms = table[table["cls"] == "matmul"].copy()
    if gemms.empty:
        return []
    dims = [gemm_dims(o, s) for o, s in zip(gemms["op"], gemms["signature"])]
    gemms["dims"] = dims
    gemms = gemms[gemms["dims"].notna()]
    bad = []
    for (op, layout), part in gemms.groupby([gemms["op"], gemms["dims"].map(lambda d: d[3])]):
        d = np.array([x[:3] for x in part["dims"]], dtype=float)
        per_flop = part["seconds"].to_numpy() / np.maximum(part["flops"].to_numpy(), 1)
        larger = (d[:, None, :] >= d[None, :, :]).all(axis=2) & ~(d[:, None, :] == d[None, :, :]).all(axis=2)
        worse = larger & (per_flop[:, None] > MAX_SLOWDOWN_PER_FLOP * per_flop[None, :])
        for i, j in zip(*np.nonzero(worse)):
            bad.append(f"{op} {layout} {tuple(int(v) for v in d[i])} is {per_flop[i] / per_flop[j]:.1f}x slower per "
                       f"FLOP than {tuple(int(v) for v in d[j])}")
    return bad


def calibrate(device: torch.device, dtype: str, trace: pd.DataFrame, *, tolerance: float = TOLERANCE,
              time_cap_s: float = 60.0, timing_s: float = 2e-4, max_calls: int = 64, clock=None,
              probe: bool = False, keep_untrusted: bool = False, host: bool | None = None,
              neighbours: int = 0) -> dict:
    """Time every kernel of ``trace`` (and the overheads and copy ladder) in interleaved rounds until two
    rounds agree within ``tolerance``; raise :class:`CalibrationBusy` at ``time_cap_s``, or with ``keep_untrusted``
    (the workflow: its findings come out on a busy machine) return the rounds so far with ``trusted`` False and
    the reason in ``untrusted``.

    ``clock(fn, calls)`` returns the seconds of one call (default: the device's clock); tests pass a fake.
    ``host`` (default: on a CPU): the host micro-steps (:mod:`trainingcost.measure.host`), timed in the same
    rounds, whose fit prices the host's work around the ops (``"host"``: coefficients and segments). Off on a GPU,
    where the host's work overlaps the kernels rather than adding to them. ``neighbours``: that many processes
    train the traced runs' steps beside the rounds (:class:`trainingcost.measure.host.neighbours`), so that the
    calibration shares the caches and the memory bus as the timed jobs, run that many more at a time, did.
    """
    specs = list(trace["spec"].dropna().unique()) if "spec" in trace.columns else []
    with host_neighbours(neighbours, specs):
        result = _calibrate(device, dtype, trace, tolerance=tolerance, time_cap_s=time_cap_s, timing_s=timing_s,
                            max_calls=max_calls, clock=clock, probe=probe, keep_untrusted=keep_untrusted, host=host)
    result["neighbours"] = neighbours if specs else 0
    return result


def _calibrate(device, dtype, trace, *, tolerance, time_cap_s, timing_s, max_calls, clock, probe, keep_untrusted,
               host) -> dict:
    fake_clock, clock = clock, clock or _clock(device)
    host = device.type == "cpu" if host is None else host
    table = kernels(trace).drop(columns="count")
    torch_dtype = DTYPES[dtype]
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    overheads = [  # the launch and view overheads and the copy ladder, timed in the same rounds
        {"op": "aten.add.Tensor", "signature": _sig([[1], [1], torch_dtype], [[1], [1], torch_dtype]), "cls": "launch",
         "bytes_read": 0, "bytes_written": 0},
        {"op": "aten.view.default", "cls": "view", "bytes_read": 0, "bytes_written": 0,
         "signature": json.dumps([[{"t": [[4, 4], [4, 1], str(torch_dtype).removeprefix("torch.")]}, [16]], {"kw": {}}])},
        *({"op": "aten.copy_.default", "cls": "copy", "bytes_read": nbytes // 2, "bytes_written": nbytes // 2,
           "signature": _sig([[nbytes // 2 // itemsize], [1], torch_dtype], [[nbytes // 2 // itemsize], [1], torch_dtype])}
          for nbytes in copy_ladder(device)),
    ]
    table = pd.concat([table, pd.DataFrame(overheads).assign(flops=0)], ignore_index=True)
    micro = host_segments(device, torch_dtype, _optimizers(trace)) if host else []
    if micro:  # the micro-steps' kernels are replayed with the rest, so that their residuals are the host's
        extra = kernels(pd.concat([m.trace for m in micro], ignore_index=True)).drop(columns="count")
        extra = extra[~extra.set_index(["op", "signature"]).index.isin(table.set_index(["op", "signature"]).index)]
        table = pd.concat([table, extra], ignore_index=True)
    calls = [_replayable(op, sig, device) for op, sig in zip(table["op"], table["signature"])]
    inner, per_call = [], {}
    for fn, key in zip(calls, zip(table["op"], table["signature"])):  # warm up; the calls per timing that make one
        fn()                                                            # timing last about timing_s
        once = max(clock(fn, 1), 1e-9)
        inner.append(int(min(max_calls, max(1, timing_s // once))))
        per_call[key] = once
    probes = build_probes(trace, device, per_call) if probe else {}
    watch = LoadWatch()
    watch.begin()
    started = time.perf_counter()
    timings: list[list[float]] = [[] for _ in calls]
    micro_timings: list[list[float]] = [[] for _ in micro]
    probe_timings: dict[tuple, list[dict]] = {key: [] for key in probes}
    previous, agreement, rounds, problems, untrusted = None, math.inf, 0, [], ""
    while True:
        watch.step_start()
        for i, fn in enumerate(calls):
            timings[i].append(clock(fn, inner[i]))
        for key, run in probes.items():
            probe_timings[key].append(run())
        for segment, readings in zip(micro, micro_timings):
            readings.append(segment.time(fake_clock))
        watch.step_end()
        rounds += 1
        medians = np.array([statistics.median(t) for t in timings] + [statistics.median(t) for t in micro_timings]
                           + [statistics.median(sum(p.values()) for p in probe_timings[key]) for key in probes])
        if previous is not None:
            agreement = float(np.abs(medians - previous).sum() / max(medians.sum(), 1e-30))
            if micro:  # the host's micro-steps agree on their own: a small share of the time, but all of the host fit
                part = slice(len(calls), len(calls) + len(micro))
                agreement = max(agreement, float(np.abs(medians[part] - previous[part]).sum()
                                                 / max(medians[part].sum(), 1e-30)))
        previous = medians
        if rounds >= (MIN_HOST_ROUNDS if micro else MIN_ROUNDS) and agreement <= tolerance:
            problems = sanity_violations(table.assign(seconds=medians[: len(calls)]))
            if not problems:
                break
        if time.perf_counter() - started > time_cap_s:
            watch.end()
            why = (f"{len(problems)} matmul sanity violations, e.g. {problems[0]}" if problems and agreement <= tolerance
                   else f"the last two rounds differ by {agreement:.0%} (tolerance {tolerance:.0%})")
            if keep_untrusted:
                untrusted = (f"no convergence after {rounds} rounds in {time_cap_s:g} s: {why}; CPU time / wall "
                             f"{watch.cpu_per_wall:.2f}, load {watch.load_after:.1f} on {watch.cores} cores")
                break
            raise CalibrationBusy(
                f"calibration: the machine is busy: no convergence after {rounds} rounds in {time_cap_s:g} s: {why}; "
                f"CPU time / wall {watch.cpu_per_wall:.2f}, load {watch.load_after:.1f} on {watch.cores} cores; "
                "no calibration written")
    medians = medians[: len(calls)]
    probe_rows = []
    host_fit = _host_fit(table.assign(seconds=medians), micro, micro_timings)
    for (config_id, rule, seed), readings in probe_timings.items():
        for phase in readings[0]:
            values = [r.get(phase, 0.0) for r in readings]
            median = statistics.median(values)
            probe_rows.append({"config_id": config_id, "rule": rule, "seed": int(seed), "phase": phase, "seconds": median,
                               "displaced_bytes": int(probes[(config_id, rule, seed)].displaced.get(phase, 0)),
                               "gap_s": float(probes[(config_id, rule, seed)].gaps.get(phase, 0.0)),
                               "spread": float(np.subtract(*np.percentile(values, [75, 25])) / median) if median > 0 else 0.0})
    watch.end()
    spread = [float(np.subtract(*np.percentile(t, [75, 25])) / statistics.median(t)) if statistics.median(t) > 0 else 0.0
              for t in timings]
    table = table.assign(seconds=medians, spread=spread)
    load = watch.columns(float(np.median(medians)) if len(medians) else math.nan, 0.0, device.type)
    special = table[table["cls"].isin(["launch", "view", "copy"])]
    micro_kernels = set(zip(extra["op"], extra["signature"])) if micro else set()
    traced_only = ~pd.Series([(o, s) in micro_kernels for o, s in zip(table["op"], table["signature"])], index=table.index)
    return {
        "dtype": dtype,
        "method": "replay",
        "kernels": table[~table["cls"].isin(["launch", "view", "copy"]) & traced_only].to_dict("records"),
        "copy_ladder": [{"bytes": int(r.bytes_read + r.bytes_written), "seconds": float(r.seconds)}
                        for r in special[special["cls"] == "copy"].itertuples()],
        "launch_overhead_s": float(special.loc[special["cls"] == "launch", "seconds"].iloc[0]),
        "view_overhead_s": float(special.loc[special["cls"] == "view", "seconds"].iloc[0]),
        "probes": probe_rows,
        "last_level_cache_bytes": last_level_cache_bytes(),
        "host": host_fit,
        "rounds": rounds,
        "trusted": not untrusted,  # converged; False: kept from a busy machine (keep_untrusted), the reason below
        "untrusted": untrusted,
        "round_agreement": agreement,
        "tolerance": tolerance,
        "seconds_spent": time.perf_counter() - started,
        "load": load,
        "provenance": provenance(device),
    }


def _optimizers(trace: pd.DataFrame) -> list[str]:
    """The torch.optim kinds the traced runs step (``sgd`` where the trace does not say)."""
    if "spec" not in trace.columns or trace.empty:
        return ["sgd"]
    return sorted({json.loads(text)["options"]["optimizer"] for text in trace["spec"].dropna().unique()}) or ["sgd"]


def _host_fit(table: pd.DataFrame, micro: list, timings: list[list[float]]) -> dict:
    """The host's seconds per term (measure/host.py), from the micro-steps' medians less their priced ops."""
    if not micro:
        return {"coefficients": {}, "segments": []}
    from .predictor import price

    special = table[table["cls"].isin(["launch", "view", "copy"])]
    priced_by = {"kernels": table[~table["cls"].isin(["launch", "view", "copy"])].to_dict("records"),
                 "copy_ladder": [{"bytes": int(r.bytes_read + r.bytes_written), "seconds": float(r.seconds)}
                                 for r in special[special["cls"] == "copy"].itertuples()],
                 "launch_overhead_s": float(special.loc[special["cls"] == "launch", "seconds"].iloc[0]),
                 "view_overhead_s": float(special.loc[special["cls"] == "view", "seconds"].iloc[0])}
    residuals, counts, rows = {}, {}, []
    for segment, readings in zip(micro, timings):
        seconds = statistics.median(readings)
        priced = float(price(segment.trace, priced_by)["op_seconds"].sum())
        residuals[segment.name] = seconds - priced
        counts[segment.name] = host_term_counts(segment.trace)
        rows.append({"segment": segment.name, "seconds": seconds, "priced_ops_s": priced,
                     "terms": {k: float(v) for k, v in counts[segment.name].items()}})
    return {"coefficients": solve_host(residuals, counts), "segments": rows}


def _sig(*tensors) -> str:
    return json.dumps([[{"t": [shape, stride, str(dtype).removeprefix("torch.")]} for shape, stride, dtype in tensors],
                       {"kw": {}}])


def _replayable(op: str, signature: str, device):
    """The call that replays one traced kernel, or one line naming the trace's row that this torch cannot replay (an
    op it does not have, a signature that is not one the tracer writes)."""
    from ..config.errors import ConfigError

    try:
        return replay(op, signature, device)
    except Exception as exc:  # noqa: BLE001 - a foreign or edited trace: one line, not a traceback
        raise ConfigError(f"--trace: op {str(op)[:40]!r} cannot be replayed here ({type(exc).__name__}); give a trace "
                          "that train --out-dir wrote") from None


def untraced_calibration(dtype: str, why: str) -> dict:
    """What calibrate writes for a sweep with nothing to time (every run failed): untrusted, with no kernels, so that
    the findings say why the step time is not predicted instead of stopping (issue 66, N9)."""
    return {"dtype": dtype, "method": "none", "kernels": [], "copy_ladder": [], "launch_overhead_s": math.nan,
            "view_overhead_s": math.nan, "probes": [], "host": {"coefficients": {}, "segments": []}, "rounds": 0,
            "trusted": False, "untrusted": why, "round_agreement": math.nan, "tolerance": math.nan,
            "seconds_spent": 0.0, "load": {}, "provenance": {"device_name": "none (no run traced a step)"}}


def write_calibration(calibration: dict, path) -> Path:
    return write_text(json.dumps(calibration, indent=1), path)


def read_calibration(path) -> dict:
    return json.loads(Path(path).read_text())
