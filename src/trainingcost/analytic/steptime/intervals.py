"""The error bar on a predicted step: an interval from the step-time model's own misses on published runs like the
one planned (docs/planning.md, "The error bar").

Every row of benchmarks/published_runs*.csv was predicted with the kernel efficiency refitted without the row's own
source (leave-one-source-out, as benchmarks/bench_plan_accuracy.py scores it), and its ratio measured / predicted is
kept in config/plan_residuals.csv with the row's regime: its sharding, its GPU's generation, its scale (GPUs) and its
model's size (parameters). benchmarks/bench_plan_intervals.py writes that file, and tests/test_intervals.py checks
that the model still predicts what it holds.

For a plan, the published rows are ranked by how many of the four regime fields they share with it; the most alike
are taken, whole tiers at a time, until there are at least :data:`MIN_ROWS` of them from :data:`MIN_SOURCES` sources.
The interval is their ratios' 7.5th and 92.5th percentiles (:data:`TAIL`), each source weighing the same, times the
prediction: an 80% interval, the level checked leave-one-source-out by benchmarks/bench_plan_intervals.py. The rows are the model's misses on sources it was
not fitted to, so the interval is what the model's error has been out of sample on runs like this one, not a
statistical guarantee: a regime none of the published runs shares (a GPU generation or a scale never measured) gets
the widest spread of the rows taken, and :func:`interval` says how many fields they share.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

RESIDUALS = Path(__file__).resolve().parents[2] / "config" / "plan_residuals.csv"
MIN_ROWS = 30  # the fewest published rows an interval is read from
MIN_SOURCES = 8  # and the fewest sources (a source's misses share its cluster and framework)
COVERAGE = 0.80  # the interval's nominal coverage
# The share of the alike rows' ratios left out at each end. The rows' misses are the model's on sources it saw while
# it was built (only its kernel efficiency is refitted without them), so they may understate a new source's: the level
# is the one at which the intervals hold about 80% of the published rows leave-one-source-out, and of each source's
# rows on average (python benchmarks/bench_plan_intervals.py; on the 271 rows of 2026-12-06: at 10% 78.6% of rows but
# 71.7% per source on average, at 7.5% 81.9% and 78.5%, at 5% 86.0% and 82.1%; benchmarks/HISTORY.md)
TAIL = 0.075
FIELDS = ("sharding", "generation", "scale", "size")
GENERATIONS = {  # a catalogue GPU's generation, by its name's prefix (config/hardware.yaml's parts)
    "v100": "volta", "a100": "ampere", "a10g": "ampere", "a40": "ampere", "h100": "hopper", "h200": "hopper",
    "gh200": "hopper", "h800": "hopper", "b200": "blackwell", "gb200": "blackwell", "b300": "blackwell",
    "l4": "ada", "l40": "ada", "rtx-4090": "ada", "mi2": "cdna2", "mi3": "cdna3",
}
COLUMNS = ("source", "run", "framework", "gpu", "gpus", "sharding", "parameters", "efficiency", "measured_s",
           "predicted_s", "ratio")


def generation(gpu: str) -> str:
    """The GPU's generation (``hopper`` for ``h100-sxm``), or ``other`` for a part not listed."""
    for prefix in sorted(GENERATIONS, key=len, reverse=True):
        if gpu.startswith(prefix):
            return GENERATIONS[prefix]
    return "other"


def regime(gpu: str, sharding: str, gpus: int, parameters: float) -> dict:
    """The four fields a plan is matched on: sharding (replicated, ZeRO-1/2, ZeRO-3/FSDP), the GPU's generation,
    the scale (under 64 GPUs, 64-511, 512 and more) and the model's size (under 1B parameters, 1-20B, 20B and
    more)."""
    shard = {"none": "replicated", "zero1": "zero1/2", "zero2": "zero1/2", "zero3": "zero3/fsdp",
             "fsdp": "zero3/fsdp"}.get(sharding, sharding)
    scale = "< 64 GPUs" if gpus < 64 else "64-511 GPUs" if gpus < 512 else ">= 512 GPUs"
    size = "< 1B" if parameters < 1e9 else "1-20B" if parameters < 20e9 else ">= 20B"
    return {"sharding": shard, "generation": generation(gpu), "scale": scale, "size": size}


@lru_cache(maxsize=4)
def residuals(path: Path = RESIDUALS) -> tuple[dict, ...]:
    """The published rows' ratios with their regimes (config/plan_residuals.csv)."""
    with open(path, newline="") as fh:
        rows = []
        for row in csv.DictReader(fh):
            row = {**row, "gpus": int(row["gpus"]), "parameters": float(row["parameters"]),
                   "ratio": float(row["ratio"])}
            row["regime"] = regime(row["gpu"], row["sharding"], row["gpus"], row["parameters"])
            rows.append(row)
    return tuple(rows)


@dataclass(frozen=True)
class Interval:
    low: float  # the interval's lower end as a multiple of the prediction
    high: float  # its upper end
    rows: tuple  # the published rows it was read from: "source / run"
    shared: int  # how many of the regime's fields the least alike of those rows shares with the plan
    regime: dict  # the plan's regime

    def describe(self) -> str:
        """One line: the bounds as multiples and where they come from."""
        fields = ", ".join(self.regime[f] for f in FIELDS)
        alike = ("every field" if self.shared == len(FIELDS) else
                 f"at least {self.shared} of its {len(FIELDS)} fields" if self.shared else "none of its fields")
        return (f"80% interval x{self.low:.2f}-{self.high:.2f} of the predicted step: the model's misses (measured / "
                f"predicted, leave-one-source-out) on {len(self.rows)} published runs sharing {alike} with this "
                f"plan's regime ({fields})")


def interval(reg: dict, exclude_source: str | None = None, rows=None) -> Interval:
    """The 80% interval for a plan of regime ``reg`` (:func:`regime`): the ratios of the :data:`MIN_ROWS` or more
    published rows most alike, whole tiers of alikeness at a time; ``exclude_source``: leave that source's rows out
    (the coverage check scores each source on the others' rows)."""
    rows = residuals() if rows is None else rows
    pool = [r for r in rows if r["source"] != exclude_source]
    if not pool:
        raise ValueError("no published rows to read an interval from")
    score = [sum(r["regime"][f] == reg[f] for f in FIELDS) for r in pool]
    taken, shared = [], len(FIELDS)
    for tier in range(len(FIELDS), -1, -1):
        taken += [r for r, s in zip(pool, score) if s == tier]
        shared = tier
        if len(taken) >= MIN_ROWS and len({r["source"] for r in taken}) >= MIN_SOURCES:
            break
    tail = TAIL
    low, high = weighted_quantiles([r["ratio"] for r in taken], [r["source"] for r in taken], (tail, 1 - tail))
    return Interval(float(low), float(high), tuple(f"{r['source']} / {r['run']}" for r in taken), shared, dict(reg))


def weighted_quantiles(values, sources, qs) -> tuple:
    """Quantiles of ``values`` with each source weighing the same however many rows it has (a source's rows share one
    cluster and one framework, so their misses are not independent): each value weighs 1 / its source's rows, and
    quantile q is read off the weights' cumulative midpoints, linearly between them (the Hazen rule)."""
    counts = {}
    for s in sources:
        counts[s] = counts.get(s, 0) + 1
    order = np.argsort(values, kind="stable")
    v = np.asarray(values, dtype=float)[order]
    w = np.array([1.0 / counts[sources[i]] for i in order])
    mid = (np.cumsum(w) - w / 2) / w.sum()
    return tuple(float(np.interp(q, mid, v)) for q in qs)


def covers(iv: Interval, ratio: float) -> bool:
    return iv.low <= ratio <= iv.high and not math.isnan(ratio)
