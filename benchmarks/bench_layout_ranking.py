"""Does the step-time model rank layouts as measurements do? Published layout sweeps (benchmarks/layout_sweeps.csv).

A sweep is many layouts of one model timed on one cluster: the Hugging Face Ultra-Scale Playbook's nanotron runs
(1 to 64 nodes of 8 H100, four models, a fixed global batch of 1M tokens) and BigScience's BLOOM tuning runs on Jean
Zay (384 A100s, February 2022). For every timed layout the model predicts the step (BP, the row's framework and
cluster, analytic/steptime), and per sweep this prints:

- the Spearman rank correlation between predicted and measured time per sequence (the step over the global batch,
  so that rows of different batches compare);
- the regret of the model's pick: the measured time of the layout the model ranks first, over the measured best;
- whether the model ranks the measured best first, and where.

Goals (issue 38): Spearman >= 0.7 on every sweep; the pick within 5% of the measured best.

    python benchmarks/bench_layout_ranking.py [--csv PATH] [--min-rows 5] [--rows]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainingcost.analytic.steptime import predict_step, runs  # noqa: E402
from trainingcost.analytic.steptime.step import rule_work  # noqa: E402
from trainingcost.config.errors import ConfigError  # noqa: E402
from trainingcost.config.hardware import device  # noqa: E402

GOALS = {"spearman": 0.7, "regret": 5.0}


def evaluate(path: Path, min_rows: int, refused: list | None = None) -> pd.DataFrame:
    """One row per timed layout; a layout the model refuses is left out, its one line appended to ``refused``."""
    rows, works, memos = [], {}, {}
    for row in runs.load(path):
        try:
            cfg, lay = runs.model_of(row), runs.layout_of(row)
            dev = device(row["gpu"])
            work = works.setdefault(cfg.config_id, rule_work(cfg, ["bp"]))
            memo = memos.setdefault((cfg.config_id, dev.name), {})
            pred = predict_step(cfg, lay, dev, "bp", work, memo)
            measured = runs.measured_step_time(row)
        except ConfigError as err:
            if refused is not None:
                refused.append(f"{row.get('sweep', '?')} / {row.get('run', '?')}: {err}")
            continue
        G = lay.global_batch
        rows.append({"sweep": row["sweep"], "source": row["source"], "run": row["run"], "gpus": lay.gpus,
                     "layout": f"tp{lay.tp} pp{lay.pp} dp{lay.dp} mb{lay.micro_batch} {lay.sharding}",
                     "measured_per_seq": measured / G, "predicted_per_seq": pred.step_time_s / G})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    counts = table.groupby("sweep")["run"].transform("count")
    return table[counts >= min_rows]


def per_sweep(table: pd.DataFrame) -> pd.DataFrame:
    out = []
    for name, part in table.groupby("sweep", sort=False):
        rho = part["predicted_per_seq"].rank().corr(part["measured_per_seq"].rank())
        pick = part.loc[part["predicted_per_seq"].idxmin()]
        best = part["measured_per_seq"].min()
        rank_of_best = int(part["predicted_per_seq"].rank(method="min")[part["measured_per_seq"].idxmin()])
        out.append({"sweep": name, "source": part["source"].iloc[0], "layouts": len(part), "spearman": rho,
                    "regret_pct": 100 * (pick["measured_per_seq"] / best - 1), "pick": pick["layout"],
                    "measured_best": part.loc[part["measured_per_seq"].idxmin(), "layout"],
                    "rank_of_best": rank_of_best})
    return pd.DataFrame(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=ROOT / "benchmarks" / "layout_sweeps.csv")
    ap.add_argument("--min-rows", type=int, default=5, help="sweeps of fewer timed layouts are left out")
    ap.add_argument("--rows", action="store_true", help="print every layout")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    refused: list[str] = []
    table = evaluate(args.csv, args.min_rows, refused)
    if table.empty:
        print(f"no layout of {args.csv} could be priced ({len(refused)} refused):", *refused, sep="\n  ")
        return 1
    result = per_sweep(table)
    if args.rows:
        print(table.to_string(index=False))
        print()
    print(f"{'sweep':42} {'n':>4} {'Spearman':>8} {'regret':>7} {'best@':>5}  model's pick / measured best")
    for _, r in result.iterrows():
        print(f"{r['sweep'][:42]:42} {r['layouts']:4d} {r['spearman']:8.2f} {r['regret_pct']:6.1f}% {r['rank_of_best']:5d}  "
              f"{r['pick']} / {r['measured_best']}")
    met_rho = (result["spearman"] >= GOALS["spearman"]).sum()
    met_regret = (result["regret_pct"] <= GOALS["regret"]).sum()
    print(f"\n{len(result)} sweeps, {len(table)} layouts in {time.perf_counter() - start:.1f} s: Spearman median "
          f"{result['spearman'].median():.2f} (min {result['spearman'].min():.2f}), >= {GOALS['spearman']} on "
          f"{met_rho} of {len(result)}; regret median {result['regret_pct'].median():.1f}% (max "
          f"{result['regret_pct'].max():.1f}%), <= {GOALS['regret']:g}% on {met_regret} of {len(result)}")
    for source, part in result.groupby("source"):
        print(f"  {source}: {len(part)} sweeps, Spearman median {part['spearman'].median():.2f}, regret median "
              f"{part['regret_pct'].median():.1f}%, max {part['regret_pct'].max():.1f}%")
    if refused:
        print(f"{len(refused)} layouts refused (not in the figures above):", *refused, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
