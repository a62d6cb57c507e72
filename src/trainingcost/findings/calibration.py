"""Device calibration: the rates a roofline step-time predictor needs, measured once per device.

- **matmul throughput** for each GEMM shape (m, n, k) the sweep runs, in FLOP/s
  (2·m·n·k per product);
- **memory bandwidth**, bytes per second of a large device-to-device copy
  (each element read once and written once);
- **launch overhead**, seconds per tiny operation: the fixed cost that every
  kernel (on GPU) or every dispatched op (on CPU) pays.

Every figure is the median of ``repeats`` timed runs after warm-up, timed with
CUDA events on GPU and ``perf_counter`` on CPU. The result is a JSON document
(:func:`write_calibration`) with the device and torch provenance.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..analytic import templates as T
from ..analytic.layers import KINDS
from ..analytic.memory import shapes_namespace
from ..io import write_text
from ..measure.provenance import provenance
from ..train.run import DTYPES


def _model_templates(configs: pd.DataFrame):
    """(kind spec, batch, shapes namespace) per layer kind of the configurations' models."""
    t = T.build(configs, "layer")
    for kind, index in t.kind_index().items():
        spec = KINDS[kind]
        if spec.model_layer:
            yield spec, t.config_column("batch")[index], shapes_namespace(t, index)


def gemm_shapes(configs: pd.DataFrame) -> list[tuple[int, int, int]]:
    """The distinct (m, n, k) of the matrix products that the configurations' layers declare
    (analytic/layers.py), forward orientation, m = batch × rows."""
    shapes = set()
    for spec, batch, s in _model_templates(configs):
        if spec.gemms is None:
            continue
        for rows, n, k in spec.gemms(s):
            m = batch * np.broadcast_to(rows, len(batch))
            shapes |= set(zip(m.tolist(), np.broadcast_to(n, len(batch)).tolist(), np.broadcast_to(k, len(batch)).tolist()))
    return sorted(shapes)


def attention_shapes(configs: pd.DataFrame) -> list[tuple[int, int, int, int, bool]]:
    """The distinct fused-attention shapes (batch·heads, M, N, d_k, causal) of the configurations."""
    shapes = set()
    for spec, batch, s in _model_templates(configs):
        if spec.family == "attention":
            causal = spec.name == "masked_self_attention"
            shapes |= {(b * h, m, n, d // h, causal) for b, h, m, n, d in zip(batch, s.h, s.M, s.N, s.d)}
    return sorted((int(a), int(b), int(c), int(d), e) for a, b, c, d, e in shapes)


def _calls_per_timing(flops: int, device: torch.device) -> int:
    """Enough calls per timing that small operations outlast the clock's resolution (1 to 50)."""
    budget = 2e9 if device.type == "cuda" else 2e7
    return max(1, min(50, int(budget // max(flops, 1))))


class _Timer:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn, repeats: int, inner: int = 1) -> float:
        """Median seconds of one call of ``fn`` (each timing averages ``inner`` calls)."""
        for _ in range(3):
            fn()
        times = []
        for _ in range(repeats):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1000.0 / inner)
            else:
                begin = time.perf_counter()
                for _ in range(inner):
                    fn()
                times.append((time.perf_counter() - begin) / inner)
        return statistics.median(times)


def calibrate(device: torch.device, dtype: str, shapes: list[tuple[int, int, int]], repeats: int = 7,
              copy_mib: int = 256, attention: list | None = None) -> dict:
    timer = _Timer(device)
    torch_dtype = DTYPES[dtype]
    matmul = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device=device, dtype=torch_dtype)
        b = torch.randn(k, n, device=device, dtype=torch_dtype)
        flops = 2 * m * n * k
        inner = _calls_per_timing(flops, device)
        seconds = timer(lambda: torch.matmul(a, b), repeats, inner)
        matmul.append({"m": m, "n": n, "k": k, "seconds": seconds, "flops_per_s": flops / seconds})
    fused = []
    for bh, m, n, dk, causal in attention or []:
        q = torch.randn(1, bh, m, dk, device=device, dtype=torch_dtype)
        kv = torch.randn(1, bh, n, dk, device=device, dtype=torch_dtype)
        flops = 4 * bh * m * n * dk  # torch's count: QK^T and PV, causal masks not discounted
        inner = _calls_per_timing(flops, device)
        seconds = timer(lambda: torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=causal), repeats, inner)
        fused.append({"bh": bh, "m": m, "n": n, "dk": dk, "causal": causal, "seconds": seconds, "flops_per_s": flops / seconds})
    elements = copy_mib * 2**20 // torch.empty((), dtype=torch_dtype).element_size()
    source = torch.randn(elements, device=device, dtype=torch_dtype)
    target = torch.empty_like(source)
    copy_seconds = timer(lambda: target.copy_(source), repeats)
    bandwidth = 2 * source.numel() * source.element_size() / copy_seconds
    tiny_a = torch.ones(1, device=device, dtype=torch_dtype)
    tiny_b = torch.ones(1, device=device, dtype=torch_dtype)
    launch = timer(lambda: torch.add(tiny_a, tiny_b), repeats, inner=200)
    return {
        "dtype": dtype,
        "matmul": matmul,
        "attention": fused,
        "bandwidth_bytes_per_s": bandwidth,
        "launch_overhead_s": launch,
        "repeats": repeats,
        "provenance": provenance(device),
    }


def write_calibration(calibration: dict, path) -> Path:
    return write_text(json.dumps(calibration, indent=1), path)


def read_calibration(path) -> dict:
    return json.loads(Path(path).read_text())
