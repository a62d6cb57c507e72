"""The error bar on a predicted step: an interval from the step-time model's own misses on published runs like the
one planned (docs/planning.md, "The error bar").

Every row of benchmarks/published_runs*.csv was predicted with the kernel efficiency refitted without the row's own
source (leave-one-source-out, as benchmarks/bench_plan_accuracy.py scores it), and its ratio measured / predicted is
kept in config/plan_residuals.csv with the row's regime: its sharding, its GPU's generation, its scale (GPUs) and its
model's size (parameters). benchmarks/bench_plan_intervals.py writes that file, and tests/test_intervals.py checks
that the model still predicts what it holds.

For a plan, the published rows are ranked by how many of the four regime fields they share with it; the most alike
are taken, whole tiers at a time, until there are at least :data:`MIN_ROWS` of them from :data:`MIN_SOURCES` sources.
The interval is their ratios' 10th and 90th percentiles (:data:`TAIL`), each source weighing the same, times the
prediction: an 80% interval, the level checked leave-one-source-out by benchmarks/bench_plan_intervals.py. The rows are the model's misses on sources it was
not fitted to, so the interval is what the model's error has been out of sample on runs like this one, not a
statistical guarantee, and :func:`interval` says how many fields they share.

Two fields are widened apart, because the model's misses follow them most (benchmarks/plan_accuracy.md: NVIDIA's
GB200 rows 20% too fast, where the alike rows of other generations miss by a few percent):

- the GPU's generation: the interval reaches at least as far as the same percentiles of the published runs on that
  generation, whatever their other fields; a generation no published run measured (an AMD MI300X, an L40S) reaches
  as far as the widest of the generations measured, since the plan cannot know which it behaves like;
- the scale: a plan on more GPUs than the largest published run reaches as far as the widest of the scales measured;
- the sequence: a plan of :data:`LONG` tokens or more per sequence reaches as far as the published runs that long
  (MosaicML's 32k-token rows and torchtitan's 131k-262k context-parallel rows miss by up to 40%).

:attr:`Interval.note` says which widening applied.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
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
# rows on average (python benchmarks/bench_plan_intervals.py; on the 271 rows of 2026-12-06, before the widenings
# below: at 10% 78.6% of rows but 71.7% per source on average, at 7.5% 81.9% and 78.5%; on the 352 rows of
# 2026-12-07 with them: at 10% 82.1% and 83.4%, at 8% 84.4% and 84.5%, at 7.5% 84.9% and 84.6%: the plain 10th-90th
# percentiles again; benchmarks/HISTORY.md)
TAIL = 0.10
FIELDS = ("sharding", "generation", "scale", "size")
GENERATIONS = {  # a catalogue GPU's generation, by its name's prefix (config/hardware.yaml's parts)
    "v100": "volta", "a100": "ampere", "a10g": "ampere", "a40": "ampere", "h100": "hopper", "h200": "hopper",
    "gh200": "hopper", "h800": "hopper", "b200": "blackwell", "gb200": "blackwell", "b300": "blackwell",
    "l4": "ada", "l40": "ada", "rtx-4090": "ada", "mi2": "cdna2", "mi3": "cdna3",
}
COLUMNS = ("source", "run", "framework", "gpu", "gpus", "sharding", "parameters", "tokens_per_sequence", "efficiency",
           "measured_s", "predicted_s", "ratio")
LONG = 16384  # tokens per sequence from which a plan's interval reaches the long published runs' misses
WIDEN_SOURCES = 2  # the fewest sources the plan's own generation's or length's rows widen its interval from
# the fewest sources a generation's or a scale's rows need to count among the widest (a group of two sources, one of
# them a single run, would set every unmeasured GPU's bar: Volta's, whose top is one offloaded GPT-2 run's)
WIDEST_SOURCES = 3


def generation(gpu: str) -> str:
    """The GPU's generation (``hopper`` for ``h100-sxm``), or ``other`` for a part not listed."""
    for prefix in sorted(GENERATIONS, key=len, reverse=True):
        if gpu.startswith(prefix):
            return GENERATIONS[prefix]
    return "other"


def regime(gpu: str, sharding: str, gpus: int, parameters: float, seq_len: int = 0) -> dict:
    """The four fields a plan is matched on: sharding (replicated, ZeRO-1/2, ZeRO-3/FSDP), the GPU's generation,
    the scale (under 64 GPUs, 64-511, 512 and more) and the model's size (under 1B parameters, 1-20B, 20B and
    more); and, not matched on but widened by, the GPU count (``gpus``: beyond the largest published run) and the
    tokens per sequence (``seq_len``, where known: :data:`LONG` or more)."""
    shard = {"none": "replicated", "zero1": "zero1/2", "zero2": "zero1/2", "zero3": "zero3/fsdp",
             "fsdp": "zero3/fsdp"}.get(sharding, sharding)
    scale = "< 64 GPUs" if gpus < 64 else "64-511 GPUs" if gpus < 512 else ">= 512 GPUs"
    size = "< 1B" if parameters < 1e9 else "1-20B" if parameters < 20e9 else ">= 20B"
    return {"sharding": shard, "generation": generation(gpu), "scale": scale, "size": size, "gpus": int(gpus),
            "seq_len": int(seq_len)}


@lru_cache(maxsize=4)
def residuals(path: Path = RESIDUALS) -> tuple[dict, ...]:
    """The published rows' ratios with their regimes (config/plan_residuals.csv)."""
    with open(path, newline="") as fh:
        rows = []
        for row in csv.DictReader(fh):
            row = {**row, "gpus": int(row["gpus"]), "parameters": float(row["parameters"]),
                   "ratio": float(row["ratio"])}
            row["regime"] = regime(row["gpu"], row["sharding"], row["gpus"], row["parameters"],
                                   int(row.get("tokens_per_sequence") or 0))
            rows.append(row)
    return tuple(rows)


@dataclass(frozen=True)
class Interval:
    low: float  # the interval's lower end as a multiple of the prediction
    high: float  # its upper end
    rows: tuple  # the published rows it was read from: "source / run"
    shared: int  # how many of the regime's fields the least alike of those rows shares with the plan
    regime: dict  # the plan's regime
    note: str = ""  # the widening applied, if any ("; widened to ...")
    widened: dict = field(default_factory=dict)  # widening ("generation", "scale", "sequence") -> its rows' names

    def describe(self) -> str:
        """One line: the bounds as multiples and where they come from; the regime's fields last, in parentheses, and
        the GPU count after them where the regime has one (plan_search.error_bar_rows reads them back)."""
        fields = ", ".join([self.regime[f] for f in FIELDS] +
                           ([f"{self.regime['gpus']} GPUs"] if self.regime.get("gpus") else []) +
                           ([f"{self.regime['seq_len']} tokens"] if self.regime.get("seq_len") else []))
        alike = ("every field" if self.shared == len(FIELDS) else
                 f"at least {self.shared} of its {len(FIELDS)} fields" if self.shared else "none of its fields")
        return (f"80% interval x{self.low:.2f}-{self.high:.2f} of the predicted step: the model's misses (measured / "
                f"predicted, leave-one-source-out) on {len(self.rows)} published runs sharing {alike} with this "
                f"plan's regime{self.note} ({fields})")


def interval(reg: dict, exclude_source: str | None = None, rows=None) -> Interval:
    """The 80% interval for a plan of regime ``reg`` (:func:`regime`): the ratios of the :data:`MIN_ROWS` or more
    published rows most alike, whole tiers of alikeness at a time, widened as the module says; ``exclude_source``:
    leave that source's rows out (the coverage check scores each source on the others' rows)."""
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
    low, high = spread(taken)
    notes, widened = [], {}

    def widen(name: str, group: list, note: str, ends: tuple | None = None) -> None:
        """Reach the group's spread (or ``ends``, read off it) where it is wider."""
        nonlocal low, high
        lo, hi = ends if ends is not None else spread(group)
        if lo < low or hi > high:
            low, high = min(low, lo), max(high, hi)
            notes.append(note)
            widened[name] = tuple(f"{r['source']} / {r['run']}" for r in group)

    own = [r for r in pool if r["regime"]["generation"] == reg["generation"]]
    if _sources(own) >= WIDEN_SOURCES:  # at least as wide as this generation's own misses
        widen("generation", own, f"widened to the {len(own)} runs on {reg['generation']} GPUs")
    elif not own:  # a generation never measured: as wide as the widest measured
        lo, hi, group = widest(pool, "generation")
        widen("generation", group,
              f"no published run on {reg['generation']} GPUs: widened to the widest of the generations measured",
              (lo, hi))
    largest = max(r.get("gpus", 0) for r in pool)
    if reg.get("gpus", 0) > largest:  # beyond the largest published run: as wide as the widest scale measured
        lo, hi, group = widest(pool, "scale")
        widen("scale", group,
              f"beyond the largest published run ({largest} GPUs): widened to the widest of the scales measured",
              (lo, hi))
    if reg.get("seq_len", 0) >= LONG:  # long sequences: as wide as the published runs that long
        long = [r for r in pool if r["regime"].get("seq_len", 0) >= LONG]
        if _sources(long) >= WIDEN_SOURCES:
            widen("sequence", long, f"widened to the {len(long)} runs of {LONG // 1024}k tokens or more per sequence")
    note = "".join(f"; {n}" for n in notes)
    return Interval(float(low), float(high), tuple(f"{r['source']} / {r['run']}" for r in taken), shared, dict(reg),
                    note, widened)


def _sources(rows) -> int:
    return len({r["source"] for r in rows})


def spread(rows) -> tuple:
    """The :data:`TAIL` and 1 - :data:`TAIL` quantiles of the rows' ratios, each source weighing the same."""
    return weighted_quantiles([r["ratio"] for r in rows], [r["source"] for r in rows], (TAIL, 1 - TAIL))


def widest(rows, field: str) -> tuple:
    """The lowest low and the highest high of the spreads of the rows grouped by ``field``'s value (each group of at
    least :data:`WIDEST_SOURCES` sources: a source's misses are its own cluster's and framework's), and the rows of
    the groups that set them; every row's spread where no group has so many."""
    groups = {}
    for r in rows:
        groups.setdefault(r["regime"][field], []).append(r)
    wide = [g for g in groups.values() if _sources(g) >= WIDEST_SOURCES]
    if not wide:
        return (*spread(rows), list(rows))
    ends = [spread(g) for g in wide]
    lowest = wide[min(range(len(wide)), key=lambda i: ends[i][0])]
    highest = wide[max(range(len(wide)), key=lambda i: ends[i][1])]
    return (min(e[0] for e in ends), max(e[1] for e in ends),
            lowest + [r for r in highest if r not in lowest])


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
