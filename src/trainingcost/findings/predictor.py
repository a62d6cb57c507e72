"""The step-time predictor: the operations a step runs (its trace), each priced by the device's calibration.

Inputs: a trace (:mod:`trainingcost.measure.trace`: one row per distinct op of one step, with its class,
FLOPs, bytes, signature and count) and a calibration (:mod:`.calibration`: the replayed seconds of the
kernels, the overheads, a copy ladder). No constant depends on a layer kind or a rule: a new layer kind or
rule brings its own ops into the trace, and the calibration times whatever the trace contains.

One call of an op costs:

- a kernel the calibration timed (same op, same signature): its calibrated seconds;
- any other **matmul**: ``launch + FLOPs / rate``, the rate interpolated in log space between the calibrated
  products of the same op and operand layout, inverse-distance weighted over the nearest three in
  (log m, log n, log k);
- any other **attention** kernel: ``launch + FLOPs / rate``, the rate interpolated in log FLOPs between the
  calibrated calls of the same op;
- any other **elementwise** kernel (every op without a FLOP formula): ``launch + bytes / bandwidth``, the
  bandwidth interpolated in log bytes between the calibrated calls of the same op, or, for an op the
  calibration never timed, the copy ladder's bandwidth at that size. FlopCounterMode registers FLOPs only for
  matrix products and attention, so a ``FLOPs / vector rate`` term would be zero for these ops; the
  per-op calibrated bandwidth carries their arithmetic (a GELU moves the bytes of a copy and costs more);
- a **view**: ``view_overhead_s`` (a dispatch, no kernel); a **host** op (a device query, a scalar read): 0;
- the **host's work** around the ops (CPU calibrations: ``calibration["host"]``, :mod:`trainingcost.measure.host`):
  each op's host context (``plain``, ``record``: autograd records a node, ``engine``: the backward's engine runs
  it) at that context's seconds per op, and each host call of the trace (a Python autograd Function's apply
  and backward, an optimizer's step call and the parameter tensors its per-tensor loop updates) at its seconds
  per call. The coefficients are fitted by least squares to host-bound micro-steps timed in the calibration's
  rounds, never to training steps; ``optimizer`` ops are priced by their kernels and the per-tensor term.

The parts of a prediction: ``matmul_s``, ``attention_s`` and ``elementwise_s``, the seconds of the kernels of
each class (their launches included), and ``launch_s``, the dispatches that launch no kernel (views) and the
host's work (``host_s`` of each row). A run's profiled step splits the measured time the same way
(:func:`trainingcost.measure.trace.class_times`), so each miss has a class that dominates it.

What the prediction still leaves out: the allocator, Python the micro-steps do not resemble (a rule's own
loops between ops beyond the per-op terms), and caches warmed or flushed by the ops around each one (a replay
runs one op many times on the same operands), except the optimizer's: its host work is probed after the
step's gap and traffic and its updated tensors are read from DRAM (:func:`cold_update_seconds`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

PARTS = ["matmul_s", "attention_s", "elementwise_s", "launch_s"]
KERNEL_CLASSES = ("matmul", "attention", "elementwise")


def gemm_dims(op: str, signature: str):
    """(m, n, k, layout) of a matrix-product signature (bmm folds its batch into m); layout 'nn', 'tn', ..."""
    args = json.loads(signature)[0]
    tensors = [a["t"] for a in args if isinstance(a, dict) and "t" in a]
    if op.startswith(("aten.addmm", "aten.baddbmm")):
        tensors = tensors[1:]
    if len(tensors) < 2:
        return None
    (sa, ta, _), (sb, tb, _) = tensors[:2]
    batch = sa[0] if len(sa) == 3 else 1
    layout = ("t" if ta[-1] != 1 and sa[-1] > 1 else "n") + ("t" if tb[-1] != 1 and sb[-1] > 1 else "n")
    return batch * sa[-2], sb[-1], sa[-1], layout


def _interpolate_1d(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    """Linear in log x between the neighbours (the nearest value beyond the ends)."""
    order = np.argsort(xs)
    return float(np.interp(np.log(max(x, 1.0)), np.log(np.maximum(xs[order], 1.0)), ys[order]))


class Pricer:
    """Seconds per call of an op signature under one calibration."""

    def __init__(self, calibration: dict):
        self.launch = float(calibration["launch_overhead_s"])
        self.view = float(calibration["view_overhead_s"])
        k = pd.DataFrame(calibration["kernels"])
        if k.empty:
            k = pd.DataFrame(columns=["op", "signature", "cls", "flops", "bytes_read", "bytes_written", "seconds"])
        self.exact = dict(zip(zip(k["op"], k["signature"]), k["seconds"].astype(float)))
        k = k.assign(bytes=k["bytes_read"] + k["bytes_written"], body=np.maximum(k["seconds"] - self.launch, 1e-12))
        self.kernels = k
        ladder = pd.DataFrame(calibration["copy_ladder"])
        self.ladder_bytes = ladder["bytes"].to_numpy(float)
        self.ladder_rate = np.log(ladder["bytes"].to_numpy(float) / np.maximum(ladder["seconds"] - self.launch, 1e-12))
        gemms = k[k["cls"] == "matmul"]
        self.gemms = {}
        for op, sig, flops, body in zip(gemms["op"], gemms["signature"], gemms["flops"], gemms["body"]):
            dims = gemm_dims(op, sig)
            if dims:
                self.gemms.setdefault((op, dims[3]), []).append((np.log(np.maximum(dims[:3], 1)), np.log(flops / body)))

    def seconds(self, op: str, cls: str, signature: str, flops: float, nbytes: float) -> float:
        if cls == "view":
            return self.view
        if cls not in KERNEL_CLASSES:
            return 0.0
        known = self.exact.get((op, signature))
        if known is not None:
            return known
        same = self.kernels[self.kernels["op"] == op]
        if cls == "matmul" and flops > 0:
            dims = gemm_dims(op, signature)
            points = self.gemms.get((op, dims[3])) if dims else None
            if not points:
                points = [p for (o, _), ps in self.gemms.items() if o == op for p in ps] or \
                         [p for ps in self.gemms.values() for p in ps]
            if points:
                where = np.log(np.maximum(dims[:3], 1)) if dims else None
                coords = np.array([p[0] for p in points])
                rates = np.array([p[1] for p in points])
                distance = np.linalg.norm(coords - where, axis=1) if where is not None else np.zeros(len(points))
                nearest = np.argsort(distance)[:3]
                weights = 1.0 / np.maximum(distance[nearest], 1e-9)
                rate = float(np.exp(np.sum(weights * rates[nearest]) / weights.sum()))
                return self.launch + flops / rate
        if cls == "attention" and flops > 0 and len(same):
            rate = _interpolate_1d(flops, same["flops"].to_numpy(float),
                                   np.log(same["flops"].to_numpy(float) / same["body"].to_numpy(float)))
            return self.launch + flops / np.exp(rate)
        if len(same) and nbytes > 0:
            rate = _interpolate_1d(nbytes, same["bytes"].to_numpy(float),
                                   np.log(np.maximum(same["bytes"].to_numpy(float), 1.0) / same["body"].to_numpy(float)))
            return self.launch + nbytes / np.exp(rate)
        rate = _interpolate_1d(max(nbytes, 1.0), self.ladder_bytes, self.ladder_rate)
        return self.launch + nbytes / np.exp(rate)


def cell_totals(trace: pd.DataFrame, keys=("layer", "phase")) -> pd.DataFrame:
    """Per ``keys`` cell of a trace: FLOPs, bytes moved (read + written) and kernel ops (views and host ops
    launch none)."""
    t = trace.assign(flops=trace["flops"] * trace["count"],
                     bytes_moved=(trace["bytes_read"] + trace["bytes_written"]) * trace["count"],
                     ops=trace["count"].where(trace["cls"].isin(KERNEL_CLASSES), 0))
    return t.groupby(list(keys), as_index=False)[["flops", "bytes_moved", "ops"]].sum()


def price(trace: pd.DataFrame, calibration: dict) -> pd.DataFrame:
    """The trace's rows with ``seconds`` (all calls of the row) and its parts (:data:`PARTS`)."""
    pricer = Pricer(calibration)
    distinct = trace.drop_duplicates(["op", "cls", "signature"])
    per_call = {(op, sig): pricer.seconds(op, cls, sig, float(flops), float(r + w)) for op, cls, sig, flops, r, w in
                zip(distinct["op"], distinct["cls"], distinct["signature"], distinct["flops"], distinct["bytes_read"],
                    distinct["bytes_written"])}
    rows = trace.copy()
    call = np.array([per_call[(o, s)] for o, s in zip(rows["op"], rows["signature"])], dtype=float)
    count = rows["count"].to_numpy(float)
    cls = rows["cls"].to_numpy()
    rows["op_seconds"] = call * count
    from ..measure.host import host_seconds  # noqa: PLC0415 - torch only where a price is asked for

    rows["host_s"] = host_seconds(rows, calibration.get("host", {}).get("coefficients", {}))
    rows["seconds"] = rows["op_seconds"] + rows["host_s"]
    for name in KERNEL_CLASSES:
        rows[f"{name}_s"] = np.where(cls == name, rows["op_seconds"], 0.0)
    rows["launch_s"] = np.where(np.isin(cls, KERNEL_CLASSES), 0.0, rows["op_seconds"]) + rows["host_s"]
    return rows


def predict_phases(traces: pd.DataFrame, calibration: dict, keys=("config_id", "rule", "seed")) -> pd.DataFrame:
    """Predicted seconds per run and timed phase (the phase a timer times the work in), with the parts.

    A run the calibration probed (``calibration["probes"]``, measure/probe.py: the same step at minimal sizes)
    is predicted as the bodies of its kernels (each call less the launch overhead) plus the probe's time of the
    phase, the host's overhead, which is then its ``launch_s`` (on a GPU, :func:`overlaps`, the longer of the two:
    ``launch_s`` is the host's time beyond the kernels'); in a phase whose probe displaced at least a
    last-level cache (an optimizer's, measure/probe.py), each optimizer kernel's body also reads what it writes
    (the parameters and the optimizer's state, :func:`cold_update_seconds`) at DRAM bandwidth. Any other run:
    the ops' seconds as priced.
    """
    priced = price(traces, calibration)
    keys = [k for k in keys if k in priced.columns]
    launch = float(calibration["launch_overhead_s"])
    kernel = priced["cls"].isin(KERNEL_CLASSES).to_numpy()
    body = np.where(kernel, np.maximum(priced["op_seconds"] - priced["count"] * launch, 0.0), 0.0)
    group = keys + ["timed_phase"]
    plain = priced.groupby(group, as_index=False)[["seconds", *PARTS]].sum()
    probes = pd.DataFrame(calibration.get("probes") or [], columns=["config_id", "rule", "seed", "phase", "seconds"])
    if calibration.get("probes") and "displaced_bytes" in calibration["probes"][0]:
        probes["displaced_bytes"] = [row.get("displaced_bytes", 0) for row in calibration["probes"]]
    if probes.empty or not {"config_id", "rule", "seed"} <= set(priced.columns):
        return plain.rename(columns={"timed_phase": "phase", "seconds": "predicted_time_s"})
    run_keys = ["config_id", "rule", "seed"]
    body = body + cold_update_seconds(priced, probes, calibration)
    bodies = priced.assign(**{f"{c}_s": np.where(priced["cls"] == c, body, 0.0) for c in KERNEL_CLASSES})
    probed = bodies.merge(probes[run_keys].drop_duplicates(), on=run_keys)
    if probed.empty:
        return plain.rename(columns={"timed_phase": "phase", "seconds": "predicted_time_s"})
    parts = probed.groupby(run_keys + ["timed_phase"], as_index=False)[[f"{c}_s" for c in KERNEL_CLASSES]].sum()
    parts = parts.merge(probes[run_keys + ["phase", "seconds"]].rename(columns={"phase": "timed_phase", "seconds": "launch_s"}),
                        on=run_keys + ["timed_phase"],
                        how="outer").fillna({f"{c}_s": 0.0 for c in (*KERNEL_CLASSES, "launch")})
    if overlaps(calibration):  # a GPU: the host issues while the device runs; the host's part is what the kernels
        device = parts[[f"{c}_s" for c in KERNEL_CLASSES]].sum(axis=1)  # do not hide, so the phase is the longer
        parts["launch_s"] = np.maximum(parts["launch_s"] - device, 0.0)  # of the two
    parts["seconds"] = parts[PARTS].sum(axis=1)
    if any(k not in run_keys for k in keys):  # a caller's extra keys (a benchmark's run label) follow the run
        labels = priced[list(dict.fromkeys(run_keys + keys))].drop_duplicates()
        parts = parts.merge(labels, on=run_keys)
    parts = parts.groupby(group, as_index=False)[["seconds", *PARTS]].sum()
    probed_runs = probed[keys].drop_duplicates()
    rest = plain.merge(probed_runs, on=keys, how="left", indicator=True)
    rest = rest[rest["_merge"] == "left_only"].drop(columns="_merge")
    return pd.concat([parts, rest], ignore_index=True).rename(columns={"timed_phase": "phase", "seconds": "predicted_time_s"})


def overlaps(calibration: dict) -> bool:
    """Whether the calibration's device runs kernels asynchronously to the host (CUDA): there a probed phase is the
    longer of the host's work (the probe) and its kernels' bodies, on a CPU their sum. Measured on an H200
    (benchmarks/gpu/README.md, section 7): the host's issue and the device's time per step were 23.3 and 9.1 ms
    (the step 23.4), 20.0 and 73.3 ms (the step 79.6)."""
    return str((calibration.get("provenance") or {}).get("device", "cpu")).startswith("cuda")


def dram_bandwidth(calibration: dict) -> float:
    """Bytes per second of the copy ladder's top rung (its copy's bytes read and written over its body): the
    calibration's DRAM bandwidth where that rung exceeds the last-level cache (calibration.copy_ladder)."""
    top = max(calibration["copy_ladder"], key=lambda rung: rung["bytes"])
    return top["bytes"] / max(top["seconds"] - float(calibration["launch_overhead_s"]), 1e-12)


def cold_update_seconds(priced: pd.DataFrame, probes: pd.DataFrame, calibration: dict) -> np.ndarray:
    """Per trace row: the seconds its optimizer kernel (``context`` optimizer) spends reading from DRAM the tensors
    it writes (``bytes_written × count`` at :func:`dram_bandwidth`), where the run's probe displaced at least the
    last-level cache before that phase (the step's other phases moved that much: the parameters and the
    optimizer's state were last touched a step ago, measure/probe.py); 0 elsewhere. A replay re-reads them warm."""
    cache = calibration.get("last_level_cache_bytes")
    keys = ["config_id", "rule", "seed", "timed_phase"]
    if not cache or "displaced_bytes" not in probes.columns or "context" not in priced.columns or \
            not set(keys) <= set(priced.columns):
        return np.zeros(len(priced))
    cold = probes[probes["displaced_bytes"] >= cache].rename(columns={"phase": "timed_phase"})
    where = pd.MultiIndex.from_frame(priced[keys]).isin(pd.MultiIndex.from_frame(cold[keys]))
    update = where & (priced["context"] == "optimizer").to_numpy() & priced["cls"].isin(KERNEL_CLASSES).to_numpy()
    nbytes = priced["bytes_written"].to_numpy(float) * priced["count"].to_numpy(float)
    return np.where(update, nbytes / dram_bandwidth(calibration), 0.0)


def predict_steps(traces: pd.DataFrame, calibration: dict, keys=("config_id", "rule", "seed"),
                  comm: pd.DataFrame | None = None) -> pd.DataFrame:
    """Predicted seconds per run (every phase and the work between phases), with the parts; with ``comm`` (one
    row per run: the keys and ``comm_s``, :func:`predict_comm`), plus each run's communication, in ``comm_s``."""
    phases = predict_phases(traces, calibration, keys)
    keys = [k for k in keys if k in phases.columns]
    steps = phases.groupby(keys, as_index=False)[["predicted_time_s", *PARTS]].sum()
    return steps if comm is None else add_comm(steps, comm, keys)


def predict_comm(runs: pd.DataFrame, collectives: dict, keys=("config_id", "rule", "seed")) -> pd.DataFrame:
    """Each data-parallel run's predicted communication seconds per step (``comm_s``): the communication model's
    collectives of a steady step (analytic/comm.py, exact in bytes), each priced by ``calibrate --collectives``'s
    α and β of its size range (:func:`trainingcost.analytic.comm.collective_seconds`). ``runs``: the keys,
    ``cfg`` (a ModelConfig), ``parallel``, ``nproc`` and ``dtype``. The meter waits for every collective, so
    nothing of it overlaps compute and the step's prediction is compute + communication."""
    from ..analytic.comm import comm_seconds, run_collectives
    from .comm import replica_groups_of

    rows = []
    for run in runs.to_dict("records"):
        steady = run_collectives(run["cfg"], run["rule"], run["parallel"], int(run["nproc"]), run["dtype"], 3,
                                 replica_groups_of(run))
        rows.append({**{k: run[k] for k in keys if k in run}, "comm_s": comm_seconds(steady, collectives)})
    return pd.DataFrame(rows)


def add_comm(steps: pd.DataFrame, comm: pd.DataFrame, keys) -> pd.DataFrame:
    """``predicted_time_s`` plus each run's ``comm_s`` (0 for a run of one process)."""
    out = steps.merge(comm[[*keys, "comm_s"]], on=list(keys), how="left").fillna({"comm_s": 0.0})
    out["predicted_time_s"] = out["predicted_time_s"] + out["comm_s"]
    return out


def dominant_part(frame: pd.DataFrame) -> pd.Series:
    """The class of work with the largest predicted share of each row ('matmul', 'attention', 'elementwise', 'launch')."""
    parts = frame[PARTS].astype(float)
    known = parts.notna().all(axis=1)
    out = pd.Series(None, index=frame.index, dtype=object)
    if known.any():
        out[known] = parts[known].idxmax(axis=1).str.removesuffix("_s")
    return out


def miss_class(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.Series:
    """The class whose predicted seconds miss its measured seconds by the most (``predicted_<class>_s`` against
    ``measured_<class>_s``, same index); null where the run has no profiled split."""
    names = [p.removesuffix("_s") for p in PARTS]
    miss = pd.DataFrame({n: (predicted[f"predicted_{n}_s"] - measured[f"measured_{n}_s"]).abs() for n in names},
                        index=predicted.index).astype(float)
    known = miss.notna().all(axis=1)
    out = pd.Series(None, index=predicted.index, dtype=object)
    if known.any():
        out[known] = miss[known].idxmax(axis=1)
    return out


def accuracy(predicted: np.ndarray, measured: np.ndarray) -> dict:
    """MAPE (mean |predicted − measured| / measured) and Spearman's rank correlation."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    keep = np.isfinite(predicted) & np.isfinite(measured) & (measured > 0)
    predicted, measured = predicted[keep], measured[keep]
    if len(measured) == 0:
        return {"n": 0, "mape": np.nan, "spearman": np.nan}
    mape = float(np.mean(np.abs(predicted - measured) / measured))
    spearman = float(pd.Series(predicted).rank().corr(pd.Series(measured).rank())) if len(measured) > 1 else np.nan
    return {"n": int(len(measured)), "mape": mape, "spearman": spearman}
