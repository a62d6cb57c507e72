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

What limits each sweep (issue 65): the measurement's own noise, from layouts a sweep timed more than once (the spread
of their log times, the median over the source's repeated layouts), gives the Spearman a perfect model
would reach against one noisy timing of each layout (the median of 400 draws of the measured times, each times
exp(sigma x a normal draw), ranked against the measured times themselves). A sweep whose ceiling is under the goal is
limited by noise; one whose model falls more than 0.1 short of its ceiling, by the model; a source without repeats
has no noise figure, and its sweeps say so.

    python benchmarks/bench_layout_ranking.py [--csv PATH] [--min-rows 5] [--rows]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
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
        per_node = lay.gpus_per_node or dev.steptime.get("gpus_per_node", 8)
        rows.append({"sweep": row["sweep"], "source": row["source"], "run": row["run"], "gpus": lay.gpus,
                     "layout": f"tp{lay.tp} pp{lay.pp} dp{lay.dp} mb{lay.micro_batch} {lay.sharding}",
                     "tp_across": lay.tp > per_node,  # the tensor-parallel group leaves the node
                     "same": (cfg.config_id, repr(lay)),  # every field of the model and the layout: a repeat
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


def by_pipeline(table: pd.DataFrame, min_rows: int) -> dict:
    """source -> {"pp=1" / "pp>1": (sweeps, Spearman median, regret median)} over each sweep's layouts without and with a
    pipeline (a sweep scored on a part where the part has ``min_rows`` layouts), and "lean": the median over sweeps of
    (measured / predicted of its pipeline layouts) / (the same of its others), each side a median: how much slower
    the measurements run a pipeline than the model says, against the same sweep's other layouts."""
    pp = table["layout"].str.extract(r"pp(\d+)")[0].astype(int)
    return by_part(table, min_rows, pp > 1, ("pp=1", "pp>1"))


def by_reach(table: pd.DataFrame, min_rows: int) -> dict:
    """The same split, among the layouts without a pipeline (apart from by_pipeline's lean), by tensor parallelism
    within a node or across nodes (the plan's layout search keeps it within a node unless told --tp-across-nodes):
    "lean" is how much slower the measurements run a tensor-parallel group that leaves the node than the model says,
    against the same sweep's in-node layouts."""
    flat = table[table["layout"].str.extract(r"pp(\d+)")[0].astype(int) == 1]
    return by_part(flat, min_rows, flat["tp_across"].astype(bool), ("pp=1, tp in a node", "pp=1, tp across nodes"))


def by_part(table: pd.DataFrame, min_rows: int, mask: pd.Series, labels: tuple) -> dict:
    """source -> {labels[0] / labels[1]: (sweeps, Spearman median, regret median, sweeps at the Spearman goal)} over
    each sweep's layouts outside and inside ``mask``, and "lean" (the inside's measured/predicted over the outside's,
    the median over sweeps that have both)."""
    pp = mask.astype(int)
    out = {}
    for source, part in table.groupby("source"):
        parts = {labels[0]: part[pp[part.index] == 0], labels[1]: part[pp[part.index] > 0]}
        entry = {}
        for label, sub in parts.items():
            sub = sub[sub.groupby("sweep")["run"].transform("count") >= min_rows]
            if sub.empty:
                continue
            scored = per_sweep(sub)
            entry[label] = (len(scored), scored["spearman"].median(), scored["regret_pct"].median(),
                            int((scored["spearman"] >= GOALS["spearman"]).sum()))
        ratio = part["measured_per_seq"] / part["predicted_per_seq"]
        leans = [ratio[g.index][pp[g.index] > 0].median() / ratio[g.index][pp[g.index] == 0].median()
                 for _, g in part.groupby("sweep") if (pp[g.index] > 0).any() and (pp[g.index] == 0).any()]
        entry["lean"] = (float(np.median(leans)), len(leans)) if leans else None
        out[source] = entry
    return out


def noise(table: pd.DataFrame) -> dict:
    """source -> (the median over layouts timed more than once of the standard deviation of their log times, how many
    such layouts, the largest ratio of two timings of one layout); (None, 0, None) where the source repeats none. The
    median, not a pooled figure: one layout timed 4.7x apart (the Playbook's 8.86B at tp8 dp2) would set a pooled one
    alone."""
    out = {}
    for source, part in table.groupby("source"):
        logs = np.log(part["measured_per_seq"])
        groups = [g for _, g in logs.groupby([part["sweep"], part["same"]]) if len(g) > 1]
        if not groups:
            out[source] = (None, 0, None)
            continue
        out[source] = (float(np.median([g.std(ddof=1) for g in groups])), len(groups),
                       float(max(np.exp(g.max() - g.min()) for g in groups)))
    return out


def ceiling(measured: pd.Series, sigma: float | None, draws: int = 400) -> float:
    """The median Spearman of the measured times against noisy copies of themselves (a perfect model's score)."""
    if sigma is None:
        return float("nan")
    rng = np.random.default_rng(0)
    ranks = measured.rank()
    values = [ranks.corr((measured * np.exp(sigma * rng.standard_normal(len(measured)))).rank()) for _ in range(draws)]
    return float(np.median(values))


def limit(rho: float, top: float) -> str:
    if np.isnan(top):
        return "noise unknown (no repeats)"
    if top < GOALS["spearman"]:
        return "noise"
    return "model" if rho < top - 0.1 else "noise"



def readable_table(text: str) -> Path:
    """--csv: an existing file (argparse's one line otherwise, exit 2)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file" if not path.exists() else f"{text}: not a file")
    return path

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=readable_table, default=ROOT / "benchmarks" / "layout_sweeps.csv")
    ap.add_argument("--min-rows", type=int, default=5, help="sweeps of fewer timed layouts are left out")
    ap.add_argument("--rows", action="store_true", help="print every layout")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    refused: list[str] = []
    table = evaluate(args.csv, args.min_rows, refused)
    if table.empty:
        print(f"no sweep of {args.csv} has {args.min_rows} or more layouts the model prices ({len(refused)} refused)"
              + (":" if refused else ""), *refused, sep="\n  ")
        return 1
    result = per_sweep(table)
    sigma = noise(table)
    result["ceiling"] = [ceiling(table.loc[table["sweep"] == r["sweep"], "measured_per_seq"], sigma[r["source"]][0])
                         for _, r in result.iterrows()]
    result["limit"] = [limit(r["spearman"], r["ceiling"]) for _, r in result.iterrows()]
    if args.rows:
        print(table.to_string(index=False))
        print()
    print(f"{'sweep':42} {'n':>4} {'Spearman':>8} {'ceiling':>7} {'limit':>8} {'regret':>7} {'best@':>5}  model's pick / "
          "measured best")
    for _, r in result.iterrows():
        top = "-" if np.isnan(r["ceiling"]) else f"{r['ceiling']:.2f}"
        print(f"{r['sweep'][:42]:42} {r['layouts']:4d} {r['spearman']:8.2f} {top:>7} {r['limit'].split(' ')[0]:>8} "
              f"{r['regret_pct']:6.1f}% {r['rank_of_best']:5d}  {r['pick']} / {r['measured_best']}")
    met_rho = (result["spearman"] >= GOALS["spearman"]).sum()
    met_regret = (result["regret_pct"] <= GOALS["regret"]).sum()
    print(f"\n{len(result)} sweeps, {len(table)} layouts in {time.perf_counter() - start:.1f} s: Spearman median "
          f"{result['spearman'].median():.2f} (min {result['spearman'].min():.2f}), >= {GOALS['spearman']} on "
          f"{met_rho} of {len(result)}; regret median {result['regret_pct'].median():.1f}% (max "
          f"{result['regret_pct'].max():.1f}%), <= {GOALS['regret']:g}% on {met_regret} of {len(result)}")
    for source, part in result.groupby("source"):
        print(f"  {source}: {len(part)} sweeps, Spearman median {part['spearman'].median():.2f}, regret median "
              f"{part['regret_pct'].median():.1f}%, max {part['regret_pct'].max():.1f}%")
    for source, (value, repeats, worst) in sigma.items():
        part = result[result["source"] == source]
        print(f"  {source}: measurement noise " + (f"{100 * value:.1f}% (median sd of log time over {repeats} layouts "
                                                   f"timed more than once; the widest {worst:.2f}x apart); limited by "
                                                   f"the model on {(part['limit'] == 'model').sum()}, by noise on "
                                                   f"{(part['limit'] == 'noise').sum()} of {len(part)} sweeps"
                                                   if value is not None else "unknown: no layout timed twice"))
    for source, entry in by_pipeline(table, args.min_rows).items():
        parts = "; ".join(f"{label}: {value[0]} sweeps, Spearman median {value[1]:.2f} (>= {GOALS['spearman']} on "
                          f"{value[3]}), regret median {value[2]:.1f}%"
                          for label, value in entry.items() if label != "lean")
        lean = entry.get("lean")
        print(f"  {source} by pipeline: {parts}" + (f"; pipeline layouts measured {lean[0]:.2f}x the model's "
                                                    f"ratio on the same sweep's others (median of {lean[1]} sweeps)"
                                                    if lean else ""))
    for source, entry in by_reach(table, args.min_rows).items():
        if len(entry) < 3:  # no sweep of this source puts tensor parallelism across nodes
            continue
        parts = "; ".join(f"{label}: {value[0]} sweeps, Spearman median {value[1]:.2f} (>= {GOALS['spearman']} on "
                          f"{value[3]}), regret median {value[2]:.1f}%"
                          for label, value in entry.items() if label != "lean")
        lean = entry.get("lean")
        print(f"  {source} by tensor parallelism: {parts}" + (
            f"; layouts whose tensor-parallel group leaves the node measured {lean[0]:.2f}x the model's ratio on the "
            f"same sweep's in-node ones (median of {lean[1]} sweeps)" if lean else ""))
    if refused:
        print(f"{len(refused)} layouts refused (not in the figures above):", *refused, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
