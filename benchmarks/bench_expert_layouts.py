"""The layout search against the layouts experts chose: published runs whose authors tuned their layout.

For the rows of benchmarks/published_runs.csv from sources that tuned their layouts (Megatron-LM's weak-scaling
Table 1, Narayanan et al. 2021; Korthikanti et al. 2022, Table 5; NVIDIA's DGX Cloud benchmarks of NeMo on H100;
BLOOM-176B's production layout), the search runs at the same GPUs, global batch, precision, framework and cluster with
every layout field free, and this prints, per row: the published layout and the model's step for it, the search's
best and its step, and the gap (published / best - 1, both predicted). A gap of 0 means the search finds the experts'
layout or one predicted as fast; a large gap names where model and experts disagree (the weakest term then said in
benchmarks/layout_search.md).

    python benchmarks/bench_expert_layouts.py [--within 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainingcost.analytic.layout import SEARCH_ALL, search  # noqa: E402
from trainingcost.analytic.plan import PREDICTED_SOURCE, Efficiency, PlanSpec, plan_table  # noqa: E402
from trainingcost.analytic.steptime import runs  # noqa: E402
from trainingcost.config.frameworks import cluster, framework  # noqa: E402
from trainingcost.config.hardware import device  # noqa: E402

TUNED = ("narayanan2021-table1", "korthikanti2022-table5", "nvidia-dgxc-benchmarking", "nvidia-dgxc-benchmarking-2025",
         "nvidia-nemo-perf-24.07", "bigscience-bloom")


def spec_of(row: dict) -> PlanSpec:
    lay = runs.layout_of(row)
    fw = framework(row["framework"])
    system = cluster(row["cluster"]) if row.get("cluster") else None
    return PlanSpec(tokens=1e12, gpus=lay.gpus, tp=lay.tp, pp=lay.pp, cp=lay.cp, interleave=lay.interleave,
                    sequence_parallel=lay.sequence_parallel, sharding=lay.sharding, checkpointing=lay.recompute
                    if lay.recompute in ("none", "selective", "full") else "selective", precision=lay.precision,
                    global_batch=lay.global_batch, micro_batch=lay.micro_batch,
                    efficiency=Efficiency("predicted", 1.0, PREDICTED_SOURCE), framework=fw.name,
                    dp_overlap=fw.dp_overlap, tp_overlap=fw.tp_overlap, tp_backward_overlap=lay.tp_backward_overlap,
                    pipeline_split=lay.pipeline_split, zero3_granularity=fw.zero3_granularity,
                    zero3_gather=fw.zero3_gather, dp_rails=fw.dp_rails, attention=lay.attention,
                    gather_prefetch=fw.gather_prefetch, zero1_sync=fw.zero1_sync, grad_reduce=fw.grad_reduce,
                    zero_reduce=fw.zero_reduce, selective_dp_overlap=fw.selective_dp_overlap,
                    fp8_weight_cache=fw.fp8_weight_cache, fp8_params=fw.fp8_params, fp8_gather=fw.fp8_gather,
                    fp8_tp_gather=fw.fp8_tp_gather, shard_copies=fw.shard_copies, elementwise=lay.elementwise,
                    recompute_tail=lay.recompute_tail,
                    can=tuple(sorted(fw.can.items())),
                    gpus_per_node=system.gpus_per_node if system else None, nic_gbps=system.nic_gbps if system else None,
                    fabric=tuple(sorted(system.latencies.items())) if system else None)



def readable_table(text: str) -> Path:
    """--csv: an existing file (argparse's one line otherwise, exit 2)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file" if not path.exists() else f"{text}: not a file")
    return path

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=readable_table, default=ROOT / "benchmarks" / "published_runs.csv")
    ap.add_argument("--within", type=float, default=5.0, help="a published layout within this %% of the best agrees")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    rows = [r for r in runs.load(args.csv) if r.get("source") in TUNED]
    if not rows:
        print(f"no row of {args.csv} is from a source whose layouts were tuned ({', '.join(sorted(TUNED))})")
        return 1
    print(f"{'source':24} {'run':32} {'published':26} {'step':>7} {'fits':>4}  {'search best':28} {'step':>7} {'gap':>6}")
    gaps, fits_count = [], 0
    for row in rows:
        cfg, dev, spec = runs.model_of(row), device(row["gpu"]), spec_of(row)
        given = plan_table(cfg, spec, dev, ["bp"], ["executed"]).iloc[0]
        found = search(cfg, dataclasses.replace(spec, micro_batch=None), dev, ["bp"], SEARCH_ALL).rules["bp"]
        from trainingcost.plan_search import _compact

        if found.best is None:
            print(f"{row['source'][:24]:24} {row['run'][:32]:32} no layout fits by the memory model")
            continue
        gap = 100 * (given["step_time_s"] / found.best.step_s - 1)
        gaps.append(gap)
        fits_count += bool(given["fits"])
        print(f"{row['source'][:24]:24} {row['run'][:32]:32} {_compact(given)[:26]:26} {given['step_time_s']:7.2f} "
              f"{'yes' if given['fits'] else 'NO':>4}  {found.best.compact()[:28]:28} {found.best.step_s:7.2f} "
              f"{gap:+5.1f}%")
    within = sum(g <= args.within for g in gaps)
    print(f"\npublished layout within {args.within:g}% of the search's best (both predicted) on {within} of {len(gaps)} "
          f"rows; median gap {sorted(gaps)[len(gaps) // 2]:.1f}%, max {max(gaps):.1f}%; the published layout fits the "
          f"memory model on {fits_count} of {len(gaps)}; {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
