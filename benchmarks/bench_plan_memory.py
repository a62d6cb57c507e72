"""Peak memory per GPU: the plan's against what published runs measured (the rows of benchmarks/published_runs*.csv
that state a ``measured_memory_gib``).

Each row is planned through the Python API as a user would plan it (``trainingcost.api.plan``: the row's model,
layout, micro-batch, precision, attention, schedule and framework; BP, Adam), and the plan's total bytes on its most
loaded GPU are set beside the measured peak. Measured peaks are the frameworks' own reports: Megatron-LM prints
``torch.cuda.max_memory_allocated()`` in units of 2^20 bytes labelled "MB" (megatron/training/utils.py,
``report_memory``), so a source's "GB" from a Megatron-based run is read as GiB; the allocator's reserved but unused
memory is not in it.

    python benchmarks/bench_plan_memory.py [--csv PATH ...] [--rows]

Prints per row (--rows) and per source and schedule: the mean absolute and signed error of the plan's GiB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainingcost import api  # noqa: E402
from trainingcost.analytic.steptime import runs  # noqa: E402
from trainingcost.config.errors import ConfigError  # noqa: E402

TABLES = [ROOT / "benchmarks" / name for name in ("published_runs.csv", "published_runs_blackwell.csv",
                                                  "published_runs_moe.csv", "published_runs_amd.csv",
                                                  "published_runs_schedules.csv", "published_runs_offload.csv")]
GIB = 2 ** 30
MODEL = ("arch", "layers", "d_model", "heads", "kv_heads", "d_ff", "ffn", "norm", "bias", "positions", "vocab",
         "seq_len")
LAYOUT = ("gpu", "gpus", "tp", "pp", "cp", "interleave", "sharding", "global_batch", "micro_batch", "precision",
          "attention", "framework", "schedule")
CHECKPOINTING = {"none": "none", "full": "full", "selective": "selective"}


def plan_kwargs(row: dict) -> dict:
    """``api.plan``'s arguments for a published row (its model and layout as stated; BP with Adam)."""
    row = runs.spelled(row)
    kwargs = {}
    for key in MODEL + LAYOUT:
        value = row.get(key)
        if value in (None, ""):
            continue
        kwargs[key] = int(value) if key in ("layers", "d_model", "heads", "kv_heads", "d_ff", "vocab", "seq_len",
                                             "gpus", "tp", "pp", "cp", "interleave", "global_batch",
                                             "micro_batch") else value
    recompute = (row.get("recompute") or "none").strip()
    if recompute not in CHECKPOINTING:
        raise ConfigError(f"published run {row.get('run', '?')!r}: recompute: {recompute!r} is not priced by this "
                          f"bench (allowed: {', '.join(CHECKPOINTING)})")
    kwargs["checkpointing"] = CHECKPOINTING[recompute]
    if row.get("sequence_parallel") not in (None, ""):
        kwargs["sequence_parallel"] = "on" if int(row["sequence_parallel"]) else "off"
    return {**kwargs, "rule": "bp", "optimizer": "adam", "tokens": 1e9}



def readable_table(text: str) -> Path:
    """--csv: an existing file (argparse's one line otherwise, exit 2)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file" if not path.exists() else f"{text}: not a file")
    return path

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=readable_table, action="append", help="a published-runs table (default: every one)")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args(argv)
    groups, refused = defaultdict(list), []
    if args.rows:
        print(f"{'source':24s} {'run':40s} {'measured GiB':>12s} {'plan GiB':>9s} {'err %':>7s}")
    for path in args.csv or TABLES:
        for row in runs.load(path):
            if not (row.get("measured_memory_gib") or "").strip():
                continue
            measured = float(row["measured_memory_gib"])
            try:
                plan = api.plan(**plan_kwargs(row)).table.iloc[0]
            except ConfigError as err:
                refused.append(f"{row['source']} / {row['run']}: {err}")
                continue
            predicted = float(plan["mem_total"]) / GIB
            err = 100.0 * (predicted - measured) / measured
            schedule = (row.get("schedule") or "").strip() or "1f1b"
            groups[(row["source"], schedule)].append(err)
            if args.rows:
                print(f"{row['source']:24s} {row['run']:40s} {measured:12.1f} {predicted:9.1f} {err:+7.1f}")
    if not groups:
        print("no row states a measured_memory_gib")
        return 1
    print(f"{'source':24s} {'schedule':9s} {'rows':>4s} {'mean |err|':>10s} {'signed':>7s} {'max |err|':>9s}")
    every = []
    for (source, schedule), errs in sorted(groups.items()):
        every += errs
        print(f"{source:24s} {schedule:9s} {len(errs):4d} {statistics.mean(map(abs, errs)):9.1f}% "
              f"{statistics.mean(errs):+6.1f}% {max(map(abs, errs)):8.1f}%")
    print(f"{'all':24s} {'':9s} {len(every):4d} {statistics.mean(map(abs, every)):9.1f}% "
          f"{statistics.mean(every):+6.1f}% {max(map(abs, every)):8.1f}%")
    for line in refused:
        print("refused:", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
