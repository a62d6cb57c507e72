"""Why the single-device predictor misses on a GPU (issue 41, benchmarks/gpu/README.md): four measurements, ~2 min.

The first two device calls (benchmarks/gpu/results/) measured the same steps twice within 1% and predicted them at
1.00x and 1.28x (median): the calibration's replays and probes moved with the host's speed, and the predictor adds
the host's time (the probe) to the kernels' (the replays), as on a CPU, where a GPU overlaps them. This script
measures what a CUDA model of the step needs, on the runs those calls traced (their ``spec`` column):

1. **host vs device per step**: the host's time to issue one step (``perf_counter``, no synchronisation inside) and
   the device's (CUDA events), and the device's alone with the host's issue hidden behind a spin kernel
   (``torch.cuda._sleep`` enqueued first, so the step's kernels run back to back); the probe's host time (the same
   step at minimal sizes, measure/probe.py) beside them.
2. **synchronisations**: every operation of one step that makes the host wait for the device
   (``torch.cuda.set_sync_debug_mode("warn")``), counted by where in trainingcost it was called.
3. **a kernel's time, three ways**: the calibration's clock (events around back-to-back calls), the same calls
   queued behind a spin kernel (the device alone), and a CUDA graph of the calls replayed (no host per call); for
   the step's four costliest matrix products and its attention kernels.
4. **clocks**: the SM clock (NVML) sampled during training steps and during replays.

Run on a GPU: ``python benchmarks/gpu/diagnose.py`` (writes ``$OUT/diagnose.json``, prints one line per finding);
on a CPU, ``GPU_DRY_RUN=1`` runs the same code at the probe's sizes without the CUDA-only parts.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from trainingcost.findings.calibration import replay  # noqa: E402
from trainingcost.measure.probe import Probe, probe_spec, spec_from_json  # noqa: E402
from trainingcost.train.data import make_task  # noqa: E402
from trainingcost.train.run import build_model  # noqa: E402

DRY = os.environ.get("GPU_DRY_RUN") == "1"
RESULTS = ROOT / "benchmarks" / "gpu" / "results" / "2026-11-27-h200-call1"
RUNS = [("8fce4108db", "bp"), ("8fce4108db", "pepita"), ("8b986eddae", "bp"), ("531dec5d6e", "bp"),
        ("a308147ff0", "bp"), ("a308147ff0", "pepita")]


def traces() -> pd.DataFrame:
    return pd.concat([pd.read_parquet(RESULTS / s / "trace.parquet")
                      for s in ("stage1_sweep", "stage2_mfu", "stage3_ratios")], ignore_index=True)


def sm_clock():
    try:
        import pynvml  # noqa: PLC0415
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001 - no NVML: no clock column
        return lambda: None


def spin(seconds: float) -> None:
    """Keep the device busy for about ``seconds`` (2 GHz cycles), so the host's issue hides behind it."""
    if not DRY:
        torch.cuda._sleep(int(seconds * 2.0e9))


def events():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def step_times(rule, batch, device, clock) -> dict:
    """Median of 5 of: host issue seconds, device seconds (events), device seconds behind a spin; SM clock."""
    for _ in range(3):
        rule.step(batch)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    host, dev, hidden, clocks = [], [], [], []
    for _ in range(5):
        sync()
        if device.type == "cuda":
            a, b = events()
            a.record()
        begin = time.perf_counter()
        rule.step(batch)
        host.append(time.perf_counter() - begin)
        if device.type == "cuda":
            b.record()
            sync()
            dev.append(a.elapsed_time(b) / 1e3)
            clocks.append(clock())
            spin(max(0.2, 3 * host[-1]))
            a, b = events()
            a.record()
            rule.step(batch)
            b.record()
            sync()
            hidden.append(a.elapsed_time(b) / 1e3)
    med = lambda xs: float(pd.Series(xs).median()) if xs else None  # noqa: E731
    return {"host_issue_s": med(host), "device_s": med(dev), "device_hidden_host_s": med(hidden),
            "sm_clock_mhz_training": med([c for c in clocks if c is not None])}


def sync_census(rule, batch, device) -> dict:
    if device.type != "cuda":
        return {}
    seen: Counter = Counter()

    def show(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack() if "trainingcost" in f.filename and "diagnose" not in f.filename]
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} {frames[-1].line}" if frames else filename
        seen[where] += 1

    torch.cuda.set_sync_debug_mode("warn")
    old = warnings.showwarning
    warnings.showwarning = show
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            rule.step(batch)
    finally:
        warnings.showwarning = old
        torch.cuda.set_sync_debug_mode(0)
    return dict(seen.most_common(12))


def kernel_three_ways(op: str, signature: str, device, clock, calls: int = 50) -> dict:
    fn = replay(op, signature, device)
    fn()
    if device.type != "cuda":
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        return {"events_s": (time.perf_counter() - begin) / calls}
    torch.cuda.synchronize()
    a, b = events()  # the calibration's clock
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    torch.cuda.synchronize()
    plain = a.elapsed_time(b) / 1e3 / calls
    spin(0.05)
    a, b = events()
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    torch.cuda.synchronize()
    hidden = a.elapsed_time(b) / 1e3 / calls
    mhz = clock()
    graph_s = None
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        a, b = events()
        a.record()
        graph.replay()
        b.record()
        torch.cuda.synchronize()
        graph_s = a.elapsed_time(b) / 1e3 / calls
    except Exception as exc:  # noqa: BLE001 - an op that cannot be captured: say so
        graph_s = f"not captured: {type(exc).__name__}"
    return {"events_s": plain, "hidden_host_s": hidden, "graph_s": graph_s, "sm_clock_mhz_replay": mhz}


def main() -> int:
    device = torch.device("cpu" if DRY else "cuda")
    out = Path(os.environ.get("OUT") or ROOT / ".gpu-results" / "diagnose")
    out.mkdir(parents=True, exist_ok=True)
    clock = sm_clock() if device.type == "cuda" else (lambda: None)
    trace = traces()
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (dry run)", "runs": []}
    budget = float(os.environ.get("DIAGNOSE_BUDGET", "150"))
    started = time.perf_counter()
    for config_id, rule_name in RUNS:
        if time.perf_counter() - started > budget:
            print(f"budget of {budget:g} s spent: {config_id} {rule_name} and after not run")
            break
        part = trace[(trace["config_id"] == config_id) & (trace["rule"] == rule_name)]
        if part.empty:
            continue
        spec = spec_from_json(part["spec"].dropna().iloc[0])
        if DRY:
            spec = probe_spec(spec)
        row = {"config_id": config_id, "rule": rule_name}
        try:
            model, rule = build_model(spec, device)
            batch = make_task(spec.task, spec.cfg, spec.corpus).batch(torch.Generator().manual_seed(spec.seed + 2)).to(device)
            row.update(step_times(rule, batch, device, clock))
            row["syncs"] = sync_census(rule, batch, device)
            probe = Probe(spec, device)
            readings = [sum(probe().values()) for _ in range(5)]
            row["probe_s"] = float(pd.Series(readings[2:]).median())
            matmuls = part[part["cls"] == "matmul"].assign(work=lambda t: t["flops"] * t["count"])
            top = matmuls.drop_duplicates(["op", "signature"]).nlargest(4, "work")
            attention = part[part["cls"] == "attention"].drop_duplicates(["op", "signature"]).head(2)
            row["kernels"] = []
            for op, sig, flops in zip(pd.concat([top, attention])["op"], pd.concat([top, attention])["signature"],
                                      pd.concat([top, attention])["flops"]):
                if DRY:
                    continue  # the traced shapes are the GPU's, too large for a CPU dry run
                k = kernel_three_ways(op, sig, device, clock)
                k.update(op=op, flops=float(flops))
                row["kernels"].append(k)
            del model, rule, batch, probe
            if device.type == "cuda":
                torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 - one run's failure is its line, the next run goes on
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        report["runs"].append(row)
        host, dev, hidden = row.get("host_issue_s"), row.get("device_s"), row.get("device_hidden_host_s")
        print(f"{config_id} {rule_name}: host issue {host}, device {dev}, device behind a spin {hidden}, "
              f"probe {row.get('probe_s')}, syncs {sum(row.get('syncs', {}).values())}, "
              f"kernels {[(k['op'].split('.')[1], k['flops'] / k['events_s'] / 1e12 if isinstance(k['events_s'], float) else None, k['flops'] / k['graph_s'] / 1e12 if isinstance(k['graph_s'], float) else k['graph_s']) for k in row.get('kernels', [])]}"
              + (f"; error {row['error']}" if "error" in row else ""), flush=True)
        (out / "diagnose.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"done in {time.perf_counter() - started:.0f} s -> {out / 'diagnose.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
