"""Host-bound micro-steps: the host's seconds around the ops, per op of each host context and per host call.

A CPU step is its kernels plus the host work around them, which a replayed kernel (one op called again and
again, :mod:`trainingcost.findings.calibration`) does not carry: autograd recording a node per op in the
forward, the engine scheduling the backward's nodes, a Python ``torch.autograd.Function``'s forward and
backward, torch.optim's per-tensor Python loop, the modules' Python between ops. The trace
(:mod:`.trace`) says how many of each a step has: every op's host ``context`` and the pseudo-ops of
:data:`~.trace.HOST_CALLS`. The micro-steps here measure what each costs.

Each micro-step is a **segment** of real work on tiny tensors (a few elements: the kernels take next to no time,
so the segment is host-bound), timed in the calibration's interleaved rounds, and traced with the same meter
as a training step. A segment's **residual** is its time less its ops priced as the calibration prices a
step's ops (its kernels are replayed in the same rounds). The coefficients are the least-squares solution of

    residual(segment) = sum over host terms  count(segment, term) x seconds(term)

over all segments, with one term per op context (``plain``, ``record``, ``engine``), one per pseudo-op, and the
optimizer's per-call and per-tensor terms per optimizer class. The segments:

- a block of modules (linear, GELU, softmax, a residual sum and a LayerNorm, with views between), in
  two variants, its linears as ``F.linear`` (``native``) or as a Python autograd Function (``function``, as the
  model's linears are: :mod:`trainingcost.train.feedback_linear`); each variant's forward under no-grad
  (``plain``), its forward with grad (``record``) and its backward (``engine``);
- each optimizer class the runs use, stepping the sets of tensors of :data:`OPTIMIZER_SEGMENTS` (few and many
  tiny tensors, few large ones), each after a write of :data:`FLUSH_BYTES` that evicts its operands from the
  private caches, as the rest of a step does: the per-call, per-tensor terms of each class and the seconds per
  byte its kernels move beyond their warm replay (:data:`OPTIMIZER_BYTES`, one term for every class).

No training step is fitted: the coefficients come from these segments alone, so a configuration the
calibration never saw is priced from its trace's counts.
"""

from __future__ import annotations

import gc
import time

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from .trace import (FUNCTION_APPLY, FUNCTION_BACKWARD, OPTIMIZER_CALL, OPTIMIZER_TENSOR, TraceMeter,
                    host_calls)

WIDTH = 4  # features of the micro block's tensors
BLOCKS = 4  # blocks per micro forward
OPTIMIZER_SEGMENTS = ((4, WIDTH), (64, WIDTH), (4, 2**18))  # (parameter tensors, elements each) per segment
FLUSH_BYTES = 16 * 2**20  # written before each optimizer segment: its operands leave the private caches
OPTIMIZER_BYTES = "optimizer bytes"  # the term of the optimizer's kernels' bytes (read + written)
REPEATS = 8  # a segment runs this many times per timing (its time is their mean)
CONTEXT_TERMS = ("plain", "record", "engine")  # the optimizer context's ops are priced by its per-tensor term


class _Linear(torch.autograd.Function):
    """A linear layer as a Python autograd Function (the model's linears are one)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1])
        return grad @ weight, rows.t() @ x.reshape(-1, x.shape[-1]), rows.sum(0)


class _Block(torch.nn.Module):
    def __init__(self, function: bool, dtype):
        super().__init__()
        self.function = function
        self.up = torch.nn.Linear(WIDTH, 2 * WIDTH, dtype=dtype)
        self.down = torch.nn.Linear(2 * WIDTH, WIDTH, dtype=dtype)
        self.norm = torch.nn.LayerNorm(WIDTH, dtype=dtype)

    def linear(self, layer, x):
        return _Linear.apply(x, layer.weight, layer.bias) if self.function else layer(x)

    def forward(self, x):
        h = F.gelu(self.linear(self.up, x))
        h = h.view(*h.shape[:-1], 2, WIDTH).transpose(-1, -2).reshape(*h.shape)
        h = torch.softmax(h, dim=-1) * h
        return self.norm(x + self.linear(self.down, h))


class _Model(torch.nn.Module):
    def __init__(self, function: bool, dtype):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block(function, dtype) for _ in range(BLOCKS))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.sum()


class Segment:
    """One timed piece of host-bound work: :meth:`time` runs it and returns its seconds, :attr:`trace` its ops."""

    def __init__(self, name: str, run, setup=None):
        self.name, self.run, self.setup = name, run, setup or (lambda: None)
        self.trace = None
        self.whole = lambda: (self.setup(), self.run())  # one function per segment (a test's clock keys on it)

    def traced(self) -> pd.DataFrame:
        self.setup()
        meter = TraceMeter()
        with meter, host_calls(meter.optimizer_call, meter.function_apply):
            self.run()
        self.trace = meter.frame()
        return self.trace

    def time(self, clock=None) -> float:
        """Seconds of one run, the mean of :data:`REPEATS` (setup untimed); ``clock(fn, calls)``: a test's fake."""
        if clock is not None:
            return clock(self.whole, REPEATS)
        total = 0.0
        collecting = gc.isenabled()
        gc.disable()  # a cyclic collection lands in one segment or another at random: none while timing
        try:
            for _ in range(REPEATS):
                self.setup()
                begin = time.perf_counter()
                self.run()
                total += time.perf_counter() - begin
        finally:
            if collecting:
                gc.enable()
        return total / REPEATS


def _block_segments(function: bool, device: torch.device, dtype) -> list[Segment]:
    torch.manual_seed(0)
    model = _Model(function, dtype).to(device)
    x = torch.rand(2, 3, WIDTH, dtype=dtype, device=device)
    state = {}
    variant = "function" if function else "native"

    def plain():
        with torch.no_grad():
            model(x)

    def record():
        state["loss"] = model(x)

    def engine_setup():
        model.zero_grad(set_to_none=True)
        state["loss"] = model(x)

    return [Segment(f"{variant}/plain", plain), Segment(f"{variant}/record", record, lambda: state.pop("loss", None)),
            Segment(f"{variant}/engine", lambda: state["loss"].backward(), engine_setup)]


def _optimizer_segments(kind: str, device: torch.device, dtype) -> list[Segment]:
    from ..config.training import RuleOptions
    from ..train.rule import make_optimizer

    segments = []
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    for tensors, size in OPTIMIZER_SEGMENTS:
        params = [torch.nn.Parameter(torch.rand(size, dtype=dtype, device=device)) for _ in range(tensors)]
        for p in params:
            p.grad = torch.rand_like(p) * 1e-3
        optimizer = make_optimizer(params, RuleOptions(optimizer=kind, lr=1e-4), 0.0)
        optimizer.step()  # its state comes into being
        # in a step, the optimizer's operands were last touched long before (the backward's other layers ran
        # since): they come from beyond the private caches, which the flush empties
        segments.append(Segment(f"optimizer/{kind}/{tensors}x{size}", optimizer.step, lambda f=flush: f.fill_(1.0)))
    return segments


def segments(device: torch.device, dtype, optimizers=("sgd",)) -> list[Segment]:
    """The micro-steps, traced (each segment's ``trace``); optimizers: the runs' torch.optim kinds."""
    out = _block_segments(False, device, dtype) + _block_segments(True, device, dtype)
    for kind in sorted(set(optimizers)):
        out += _optimizer_segments(kind, device, dtype)
    for segment in out:
        segment.traced()
    return out


def term_counts(trace: pd.DataFrame) -> pd.Series:
    """The host terms of a trace (op contexts and pseudo-ops) with their counts: the design of the fit, and of a
    prediction. A pseudo-op of an optimizer is named with its class (``torch.optim.Optimizer.step[SGD]``)."""
    terms = host_terms(trace)
    return terms.groupby("term")["count"].sum() if len(terms) else pd.Series(dtype=float)


def host_terms(trace: pd.DataFrame) -> pd.DataFrame:
    """Each trace row's host term (a context of an op, or a pseudo-op), or none (a device query, a scalar read)."""
    if "context" not in trace.columns or trace.empty:
        return pd.DataFrame({"term": pd.Series(dtype=object), "count": pd.Series(dtype=float)}, index=trace.index[:0])
    op, cls, context = trace["op"], trace["cls"], trace["context"].fillna("plain")
    term = pd.Series(None, index=trace.index, dtype=object)
    ops = (cls != "host") & context.isin(CONTEXT_TERMS)
    term[ops] = context[ops]
    function = op.isin([FUNCTION_APPLY, FUNCTION_BACKWARD])
    term[function] = op[function] + "[" + context[function] + "]"
    optimizer = op.isin([OPTIMIZER_CALL, OPTIMIZER_TENSOR])
    term[optimizer] = op[optimizer] + "[" + trace["signature"][optimizer].astype(str) + "]"
    keep = term.notna()
    out = pd.DataFrame({"term": term[keep], "count": trace["count"][keep].astype(float)})
    moved = (context == "optimizer") & cls.isin(["matmul", "attention", "elementwise"])
    if moved.any():  # the optimizer's kernels' bytes: from beyond the private caches in a step, warm in a replay
        nbytes = (trace["bytes_read"] + trace["bytes_written"]).astype(float) * trace["count"].astype(float)
        out = pd.concat([out, pd.DataFrame({"term": OPTIMIZER_BYTES, "count": nbytes[moved]})])
    return out


def solve(residuals: dict[str, float], counts: dict[str, pd.Series]) -> dict[str, float]:
    """The host seconds per term: non-negative least squares of each segment's residual on its terms' counts (a call
    costs the host time, never gives it back: unconstrained, noisy rounds fitted an optimizer's per-tensor cost at
    -0.7 us, which priced a step of enough tensors below zero)."""
    names = sorted({t for c in counts.values() for t in c.index})
    design = np.array([[float(counts[s].get(t, 0.0)) for t in names] for s in residuals])
    target = np.array([residuals[s] for s in residuals])
    scale = np.maximum(np.abs(design).max(axis=0), 1e-30)  # columns of calls and of bytes: alike in size
    coefficients = nnls(design / scale, target)
    return dict(zip(names, map(float, coefficients / scale)))


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ||a x - b|| subject to x >= 0: Lawson and Hanson's active-set algorithm (Solving Least Squares Problems,
    1974, chapter 23), in numpy (scipy.optimize.nnls implements the same)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, bool)
    tol = 10 * max(a.shape) * np.finfo(float).eps * max(1.0, float(np.abs(a).sum(axis=0).max(initial=0.0)))
    for _ in range(3 * n + 1):
        gradient = a.T @ (b - a @ x)
        if passive.all() or np.where(passive, -np.inf, gradient).max() <= tol:
            break
        passive[int(np.argmax(np.where(passive, -np.inf, gradient)))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > tol).all():
                x = z
                break
            stepping = passive & (z <= tol) & (x - z > 0)
            alpha = float(np.min(x[stepping] / (x - z)[stepping])) if stepping.any() else 0.0
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
            if not passive.any():
                break
    return x


def host_seconds(trace: pd.DataFrame, coefficients: dict[str, float]) -> np.ndarray:
    """Each trace row's host seconds (all its calls): its term's coefficient times its count; 0 where the
    calibration has no coefficient for the term (an optimizer class it never stepped: the class-free mean)."""
    out = np.zeros(len(trace))
    terms = host_terms(trace.reset_index(drop=True))
    if terms.empty or not coefficients:
        return out
    fallback = {}
    for base in (OPTIMIZER_CALL, OPTIMIZER_TENSOR):
        same = [v for k, v in coefficients.items() if k.startswith(base + "[")]
        fallback[base] = float(np.mean(same)) if same else 0.0
    per_call = [coefficients.get(t, fallback.get(t.split("[")[0], 0.0)) for t in terms["term"]]
    np.add.at(out, terms.index.to_numpy(), np.asarray(per_call) * terms["count"].to_numpy())
    return out


def neighbour_loop(specs_json: list[str], steps_each: int = 5) -> None:
    """A neighbour's work, forever: each traced run's step in turn (built, ``steps_each`` steps, dropped), as a
    training job beside the timed one does. Run in its own process by :func:`neighbours`."""
    from ..train.data import make_task
    from ..train.run import build_model
    from .probe import spec_from_json

    torch.set_num_threads(1)
    device = torch.device("cpu")
    while True:
        for text in specs_json:
            spec = spec_from_json(text)
            model, rule = build_model(spec, device)
            batch = make_task(spec.task, spec.cfg, spec.corpus).batch(torch.Generator().manual_seed(spec.seed + 2))
            for _ in range(steps_each):
                rule.step(batch.to(device))


class neighbours:
    """``with neighbours(n, specs):`` ``n`` processes that train the traced runs' steps in a loop while inside (the
    calibration under the concurrency of the timed jobs: ``calibrate --neighbours``); each is killed by its PID on
    leaving, whatever happens."""

    def __init__(self, count: int, specs_json: list[str]):
        self.count, self.specs = count, list(specs_json)
        self.processes: list = []

    def __enter__(self):
        import json
        import subprocess
        import sys

        code = ("import json, sys; from trainingcost.measure.host import neighbour_loop; "
                "neighbour_loop(json.loads(sys.stdin.readline()))")
        for _ in range(self.count if self.specs else 0):
            process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, text=True)
            process.stdin.write(json.dumps(self.specs) + "\n")
            process.stdin.flush()
            self.processes.append(process)
        if self.processes:
            time.sleep(3.0)  # they import torch and build their first model before the rounds begin
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()
        return False
