"""Measure the step-time model's device numbers on this machine's device (``trainingcost calibrate --device-model``).

The plan's device model (analytic/steptime/device.py, docs/planning.md) prices a step from a few numbers per device,
each cited in config/hardware.yaml: the large-GEMM ceiling, the achievable memory bandwidth by kernel size, the fused
attention's forward and backward throughput, and the launch overhead. This module measures the same quantities on the
device torch runs on, with ``torch.utils.benchmark.Timer`` (medians of blocked runs, CUDA synchronised), so that
``plan --device-model FILE`` replaces the catalogue's numbers by the device's own:

- **GEMM:** square products n x n x n at the compute dtype, the best FLOP/s over the sizes (Bekman's MAMF method:
  the achievable ceiling is the best large product, not the datasheet peak);
- **memory-bound kernels:** ``copy_`` of one buffer into another, 2 x size bytes moved, per size;
- **fused attention:** ``scaled_dot_product_attention`` forward (4 b h s^2 d_head FLOPs) and backward (2.5 x the
  forward's FLOPs, the convention of FlashAttention-2's benchmark, Dao 2023, which the catalogue's shares follow);
- **launch:** one in-place add on a one-element tensor: the time of the smallest kernel (dispatch and launch).

Sizes follow the device: on a GPU products up to 8192 and buffers up to 1 GB; on a CPU products up to 1024 and buffers
up to 100 MB (a CPU is no catalogue device: its file documents the machine, and ``plan`` refuses to use it for a GPU).
"""

from __future__ import annotations

import datetime
import platform

import torch
from torch.utils.benchmark import Timer

from .provenance import device_name

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SIZES = {  # (GEMM n, copy bytes, attention (batch, heads, seq, head_dim))
    "cuda": ((2048, 4096, 8192), (10**6, 10**7, 10**8, 10**9), (4, 16, 2048, 128)),
    "cpu": ((256, 512, 1024), (10**6, 10**7, 10**8), (1, 4, 256, 64)),
}
MIN_RUN_S = {"cuda": 0.2, "cpu": 0.1}
SPREAD_LIMIT = 0.10  # a median whose interquartile range exceeds this share of it is untrusted (a busy device)


def _time(stmt: str, env: dict, kind: str) -> tuple[float, float]:
    """Median seconds of ``stmt`` and its interquartile range as a share of the median."""
    m = Timer(stmt=stmt, globals=env, num_threads=torch.get_num_threads()).blocked_autorange(
        min_run_time=MIN_RUN_S[kind])
    return float(m.median), float(m.iqr / m.median) if m.median > 0 else 0.0


def measure_device_model(device: torch.device, dtype: str) -> dict:
    """The device numbers of docs/planning.md's device model, measured here: a JSON-ready dict."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}")
    kind = "cuda" if device.type == "cuda" else "cpu"
    dt = DTYPES[dtype]
    gemm_sizes, copy_sizes, (b, h, s, dh) = SIZES[kind]
    spreads = {}
    gemm = []
    for n in gemm_sizes:
        x = torch.randn(n, n, device=device, dtype=dt)
        y = torch.randn(n, n, device=device, dtype=dt)
        t, spread = _time("torch.mm(x, y)", {"torch": torch, "x": x, "y": y}, kind)
        gemm.append([n, 2.0 * n**3 / t])
        spreads[f"gemm {n}"] = spread
        del x, y
    bandwidth = []
    for size in copy_sizes:
        elements = size // 4
        src = torch.empty(elements, device=device, dtype=torch.float32).uniform_()
        dst = torch.empty_like(src)
        t, spread = _time("dst.copy_(src)", {"dst": dst, "src": src}, kind)
        bandwidth.append([2 * elements * 4, 2 * elements * 4 / t])  # bytes moved (read + write), bytes/s
        spreads[f"copy {size}"] = spread
        del src, dst
    q, k, v = (torch.randn(b, h, s, dh, device=device, dtype=dt, requires_grad=True) for _ in range(3))
    env = {"torch": torch, "q": q, "k": k, "v": v, "F": torch.nn.functional}
    fwd, spreads["attention forward"] = _time("F.scaled_dot_product_attention(q, k, v)", env, kind)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    env.update(out=out, g=torch.ones_like(out))
    bwd, spreads["attention backward"] = _time("out.backward(g, retain_graph=True)", env, kind)
    core = 4.0 * b * h * s * s * dh
    one = torch.zeros(1, device=device)
    launch, spreads["launch"] = _time("one.add_(1)", {"one": one}, kind)
    name = device_name(device)
    untrusted = {k: round(v, 3) for k, v in spreads.items() if v > SPREAD_LIMIT}
    return {
        "kind": "device_model",
        "device_type": kind,
        "device_name": name,
        "dtype": dtype,
        "gemm_flops": max(f for _, f in gemm),
        "gemm": gemm,
        "bandwidth": bandwidth,
        "flash_forward_flops": core / fwd,
        "flash_backward_flops": 2.5 * core / bwd,
        "attention_shape": [b, h, s, dh],
        "launch_s": launch,
        "spreads": spreads,
        "trusted": not untrusted,
        "untrusted": untrusted,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
