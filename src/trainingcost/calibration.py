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

import pandas as pd
import torch

from .io import write_text
from .provenance import provenance
from .training import DTYPES


def gemm_shapes(configs: pd.DataFrame) -> list[tuple[int, int, int]]:
    """The distinct (m, n, k) of the linear layers that the configurations run (forward orientation).

    Rows are batch × tokens; attention projections are d×d, the FFN d×ff and ff×d, the
    LM head d×vocab (a classifier's head has one row per sequence).
    """
    shapes = set()
    for c in configs.itertuples():
        for stack_rows in {c.seq_len * (c.enc_layers > 0), c.tgt_len * (c.dec_layers > 0)} - {0}:
            rows = c.batch * stack_rows
            shapes |= {(rows, c.d_model, c.d_model), (rows, c.d_ff, c.d_model), (rows, c.d_model, c.d_ff)}
        head_rows = c.batch if c.classes else c.batch * c.tgt_len
        shapes.add((head_rows, c.classes or c.vocab, c.d_model))
    return sorted(shapes)


def attention_shapes(configs: pd.DataFrame) -> list[tuple[int, int, int, int, bool]]:
    """The distinct fused-attention shapes (batch·heads, M, N, d_k, causal) of the configurations."""
    shapes = set()
    for c in configs.itertuples():
        bh, dk = c.batch * c.heads, c.d_model // c.heads
        if c.enc_layers:
            shapes.add((bh, c.seq_len, c.seq_len, dk, False))
        if c.dec_layers:
            shapes.add((bh, c.tgt_len, c.tgt_len, dk, True))
            if c.arch == "encoder-decoder":
                shapes.add((bh, c.tgt_len, c.seq_len, dk, False))
    return sorted(shapes)


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


def device_slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name).strip("-").lower() or "device"


def write_calibration(calibration: dict, path) -> Path:
    return write_text(json.dumps(calibration, indent=1), path)


def read_calibration(path) -> dict:
    return json.loads(Path(path).read_text())
