"""The calibrated efficiency of a whole-run plan: the step-time predictor's price of the model's matrix products.

A calibration (``trainingcost calibrate``, :mod:`.calibration`) times the kernels of traced steps on one device.
A plan's model is usually far larger than anything traced, so there is no trace to price; what the predictor
can price is every matrix product of the model's step at the plan's shapes (:class:`.predictor.Pricer`:
a calibrated signature exactly, any other product at the rate of its three nearest calibrated neighbours in
(log m, log n, log k)). The plan's rate is their FLOPs over their seconds, applied to all of the step's FLOPs;
what this leaves out (elementwise kernels, attention's own kernel, communication) is said in docs/planning.md.

No torch: the calibration is JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from .predictor import Pricer

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


KERNEL_KEYS = ("op", "cls", "signature", "flops", "bytes_read", "bytes_written", "seconds")


def _number_at_least_0(value, where: str) -> None:
    from ..config.errors import ConfigError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ConfigError(f"{where} must be a finite number of at least 0 (got {str(value)[:20]!r})")


MAX_KERNEL_S = 3600.0  # one timed kernel of a calibration takes micro- to milliseconds; an hour is not a timing
MAX_FLOPS_PER_S = 1e17  # 100 PFLOP/s: above any one device's dense peak at any precision (B300's FP4: 15 PFLOP/s)


def _physical(kernel: dict, where: str) -> None:
    """A timed kernel a device could have run (issue 66, N11): no zero time for work, no time beyond an hour, and no
    rate above any device's peak. A zero or absurd time otherwise gives an efficiency far above 1, or a division by
    zero, in the plan."""
    from ..config.errors import ConfigError

    seconds, flops = kernel["seconds"], kernel["flops"]
    if seconds > MAX_KERNEL_S:
        raise ConfigError(f"{where}: {seconds:.3g} s is more than {MAX_KERNEL_S:.0f} s for one kernel; not a timing")
    if flops > 0 and (seconds <= 0 or flops / seconds > MAX_FLOPS_PER_S):
        raise ConfigError(f"{where}: {seconds:.3g} s for {flops:.3g} FLOPs is faster than any device "
                          f"({MAX_FLOPS_PER_S:.0e} FLOP/s); not a timing")


def read_calibration(path) -> dict:
    """A calibration file, or a ConfigError naming ``--calibration``."""
    from ..config.errors import ConfigError, read_json

    data = read_json(path, "calibration", "a calibration JSON (trainingcost calibrate)")
    if not isinstance(data, dict):
        raise ConfigError(f"calibration: {path} is not a calibration (a JSON object; write one with trainingcost "
                          "calibrate)")
    missing = [k for k in ("launch_overhead_s", "view_overhead_s", "kernels", "copy_ladder") if k not in data]
    kernels = data.get("kernels", [])
    if not missing and (not isinstance(kernels, list) or not isinstance(data["copy_ladder"], list)):
        missing = ["kernels and copy_ladder as lists"]
    if not missing:
        for key in ("launch_overhead_s", "view_overhead_s"):
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"calibration: {path}: {key} must be a number of at least 0 (got {value!r})")
        for i, kernel in enumerate(kernels):
            lacking = [k for k in KERNEL_KEYS if not isinstance(kernel, dict) or k not in kernel]
            if lacking:
                raise ConfigError(f"calibration: {path}: kernels[{i}] lacks {', '.join(lacking)} (write one with "
                                  "trainingcost calibrate)")
            for key in ("flops", "bytes_read", "bytes_written", "seconds"):
                _number_at_least_0(kernel[key], f"calibration: {path}: kernels[{i}].{key}")
            _physical(kernel, f"calibration: {path}: kernels[{i}].seconds")
            for key in ("op", "cls", "signature"):
                if not isinstance(kernel[key], str):
                    raise ConfigError(f"calibration: {path}: kernels[{i}].{key} must be text (got {str(kernel[key])[:20]!r})")
            try:  # the tracer's signature: a JSON list of the arguments, then the keywords
                signature = json.loads(kernel["signature"])
                ok = isinstance(signature, list) and len(signature) == 2 and isinstance(signature[0], list)
            except ValueError:
                ok = False
            if not ok:
                raise ConfigError(f"calibration: {path}: kernels[{i}].signature is not a traced signature (write one "
                                  "with trainingcost calibrate)")
        if not data["copy_ladder"]:
            raise ConfigError(f"calibration: {path}: copy_ladder is empty (write one with trainingcost calibrate)")
        for i, rung in enumerate(data["copy_ladder"]):
            if not isinstance(rung, dict) or "bytes" not in rung or "seconds" not in rung:
                raise ConfigError(f"calibration: {path}: copy_ladder[{i}] lacks bytes or seconds")
            for key in ("bytes", "seconds"):
                _number_at_least_0(rung[key], f"calibration: {path}: copy_ladder[{i}].{key}")
    if missing or not any(k.get("cls") == "matmul" for k in kernels):
        raise ConfigError(f"calibration: {path} is not a calibration with timed matrix products "
                          f"({'missing ' + ', '.join(missing) if missing else 'no matmul kernels'}; "
                          "write one with trainingcost calibrate)")
    return data


def _signature(a: tuple, b: tuple, dtype: str) -> str:
    """An aten.mm signature of a (m, k) by (k, n) product; ``a``, ``b``: (shape, stride)."""
    return json.dumps([[{"t": [list(a[0]), list(a[1]), dtype]}, {"t": [list(b[0]), list(b[1]), dtype]}], {"kw": {}}])


def gemms(cfg, micro_batch: int, tp: int) -> list[tuple[int, int, int]]:
    """(m, k, n) of the weight products of one block per stack and of the head, forward, per GPU (each GPU holds
    1/tp of every weight's output or input features, Shoeybi et al. 2019)."""
    d, a = cfg.d_model, cfg.heads * cfg.head_dim
    kv = cfg.kv_heads * cfg.head_dim
    gated = cfg.ffn in ("swiglu", "geglu")
    out = []
    for stack in cfg.stacks:
        m = micro_batch * cfg.rows(stack)
        if cfg.latent:  # latent attention's products (analytic/steptime/step.py's latent_gemms, as (m, k, n))
            from ..analytic.steptime.step import latent_gemms

            attention = [(M, K, N) for M, N, K in latent_gemms(cfg, m, tp)]
        else:
            attention = [(m, d, a // tp), (m, d, kv // tp), (m, d, kv // tp), (m, a // tp, d)]
        block = [*attention, *[(m, d, cfg.d_ff // tp)] * (2 if gated else 1), (m, cfg.d_ff // tp, d)]
        out += block * cfg.depth(stack)
    rows = micro_batch * (1 if cfg.classes else cfg.tgt_len)
    out.append((rows, d, (cfg.classes or cfg.vocab) // tp))
    return out


def calibrated_rate(calibration: dict, cfg, compute_dtype: str, micro_batch: int, tp: int = 1) -> float:
    """FLOP/s per GPU of the step's matrix products as the calibration prices them: each forward product
    (x W^T, layout nt), its input gradient (g W, nn) and its weight gradient (g^T x, tn)."""
    pricer = Pricer(calibration)
    dtype = TORCH_DTYPES[compute_dtype]
    flops = seconds = 0.0
    priced: dict = {}
    for m, k, n in gemms(cfg, micro_batch, tp):
        key = (m, k, n)
        if key not in priced:
            products = (
                ((m, k), (k, 1)), ((k, n), (1, k)),  # forward: x (m x k) by W^T (k x n, a transposed view)
                ((m, n), (n, 1)), ((n, k), (k, 1)),  # input gradient: g (m x n) by W (n x k)
                ((k, m), (1, k)), ((m, n), (n, 1)),  # weight gradient: x^T (k x m, a view) by g (m x n)
            )
            total = 0.0
            for i in range(0, 6, 2):
                a, b = products[i], products[i + 1]
                work = 2.0 * a[0][0] * a[0][1] * b[0][1]
                total += pricer.seconds("aten.mm.default", "matmul", _signature(a, b, dtype), work, 0.0)
            priced[key] = total
        flops += 3 * 2.0 * m * k * n
        seconds += priced[key]
    return flops / seconds
