"""The network model on its own: predicted collective times against published nccl-tests measurements.

For every row of benchmarks/collectives.csv (a published nccl-tests run: the system, the collective, the message
size and the measured time or bus bandwidth, each cited), the network model of analytic/steptime/network.py
prices the same collective over the same ranks: the device's catalogue numbers (config/hardware.yaml), the row's
GPUs per node, its NIC bandwidth per GPU where the row states it (else the device's usual system), and the algorithms
its run turned off (the ``nccl_env`` column: NCCL_NVLS_ENABLE=0, NCCL_ALGO=allreduce:ring). The
measured time is nccl-tests' own ``time`` column where the source prints it, else size x bus factor / busbw
(nccl-tests doc/PERFORMANCE.md). Prints the error per row (--rows), per source, inside and across nodes, and the
MAPE for messages of 1 MiB and more (the goal: <= 15%).

    python benchmarks/bench_collectives.py [--csv PATH] [--rows] [--min-bytes N]
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainingcost.analytic.steptime.device import GENERIC  # noqa: E402
from trainingcost.analytic.steptime.network import Network, bus_factor  # noqa: E402
from trainingcost.config.frameworks import fabric  # noqa: E402
from trainingcost.config.hardware import device  # noqa: E402

OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
       "alltoall": "all_to_all", "all_to_all": "all_to_all"}
FACTOR_OP = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
             "all_to_all": "all_gather"}  # nccl-tests' alltoall bus factor is (n-1)/n, as all-gather's


REQUIRED = ("source", "gpu", "nodes", "gpus_per_node", "gpus", "op", "message_bytes")


def measured_seconds(row: dict) -> float:
    """nccl-tests' time column (microseconds) where given, else size x bus factor / busbw."""
    if row.get("time_us"):
        return float(row["time_us"]) * 1e-6
    op, n, size = OPS[row["op"]], int(row["gpus"]), float(row["message_bytes"])
    return size * bus_factor(FACTOR_OP[op], n) / (float(row["busbw_gbs"]) * 1e9)


def network_of(row: dict) -> Network:
    """The row's network; where the row's run set NCCL's environment, what it turned off: NVLS under
    NCCL_NVLS_ENABLE=0, NVLS and the tree under NCCL_ALGO=allreduce:ring (NCCL's docs, environment variables)."""
    dev = device(row["gpu"])
    params = {**GENERIC, **dev.steptime}
    nic = float(row["nic_gbps_per_gpu"]) if row.get("nic_gbps_per_gpu") else None
    net = Network.of(params, int(row["gpus_per_node"]), nic, fabric(row["fabric"]) if row.get("fabric") else None)
    env = row.get("nccl_env") or ""
    if "NCCL_NVLS_ENABLE=0" in env:
        net = replace(net, nvls_bw=None)
    if env.lower().endswith(":ring") or env.lower().endswith("=ring"):
        net = replace(net, nvls_bw=None, tree_level=None)
    return net


def predicted_seconds(row: dict) -> float:
    net = network_of(row)
    op, n, size = OPS[row["op"]], int(row["gpus"]), float(row["message_bytes"])
    return getattr(net, op)(size, n, 1)


def evaluate(path: Path, min_bytes: float) -> list[dict]:
    out = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if not {"time_us", "busbw_gbs"} & set(reader.fieldnames or []):
            missing.append("time_us or busbw_gbs")
        if missing:
            raise ValueError(f"{path}: no column {', '.join(missing)} (a collectives table has {', '.join(REQUIRED)}, "
                             "and time_us or busbw_gbs)")
        for row in reader:
            if float(row["message_bytes"]) < min_bytes or row["op"] not in OPS:
                continue
            measured, predicted = measured_seconds(row), predicted_seconds(row)
            out.append({**row, "measured": measured, "predicted": predicted,
                        "err": 100 * (predicted / measured - 1), "inter": int(row["nodes"]) > 1})
    return out


def mape(rows) -> float:
    return sum(abs(r["err"]) for r in rows) / len(rows) if rows else float("nan")



def readable_table(text: str) -> Path:
    """--csv: an existing file (argparse's one line otherwise, exit 2)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file" if not path.exists() else f"{text}: not a file")
    return path

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=readable_table, default=ROOT / "benchmarks" / "collectives.csv")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--min-bytes", type=float, default=2**20, help="smallest message scored (default 1 MiB)")
    args = ap.parse_args(argv)
    try:
        rows = evaluate(args.csv, args.min_bytes)
    except ValueError as err:
        ap.error(f"argument --csv: {err}")
    if not rows:
        print(f"no row of {args.csv} has a message of {args.min_bytes / 2**20:g} MiB or more")
        return 1
    if args.rows:
        print(f"{'source':26} {'gpu':9} {'nodes':>5} {'op':14} {'bytes':>12} {'measured us':>12} {'predicted us':>12} "
              f"{'err %':>7}")
        for r in rows:
            print(f"{r['source'][:26]:26} {r['gpu']:9} {r['nodes']:>5} {r['op']:14} {int(float(r['message_bytes'])):12d} "
                  f"{r['measured'] * 1e6:12.1f} {r['predicted'] * 1e6:12.1f} {r['err']:+7.1f}")
        print()
    print(f"messages >= {args.min_bytes / 2**20:g} MiB")
    print(f"{'group':40} {'rows':>4} {'MAPE':>7} {'mean signed':>12} {'max |err|':>10}")
    groups = {}
    for r in rows:
        groups.setdefault(r["source"], []).append(r)
    groups["inside one node"] = [r for r in rows if not r["inter"]]
    groups["across nodes"] = [r for r in rows if r["inter"]]
    for op in sorted({r["op"] for r in rows}):
        groups[f"op {op}"] = [r for r in rows if r["op"] == op]
    for n in sorted({int(r["gpus"]) for r in rows}):
        groups[f"{n} GPUs"] = [r for r in rows if int(r["gpus"]) == n]
    groups["overall"] = rows
    for name, part in groups.items():
        if not part:
            continue
        signed = sum(r["err"] for r in part) / len(part)
        print(f"{name[:40]:40} {len(part):4d} {mape(part):6.1f}% {signed:+11.1f}% {max(abs(r['err']) for r in part):9.1f}%")
    print_repeats(rows)
    return 0


SETUP = ("gpu", "nodes", "gpus_per_node", "fabric", "nic_gbps_per_gpu", "op", "message_bytes", "nccl_env")


def repeats(rows: list[dict]) -> list[dict]:
    """Rows whose setup (SETUP: the GPU, nodes, fabric, NIC, collective, size and NCCL environment) another published
    series measured too, each with ``twin_err``: its time as the mean of the other series' times would predict it."""
    by_setup = {}
    for r in rows:
        by_setup.setdefault(tuple(r.get(k) or "" for k in SETUP), []).append(r)
    out = []
    for group in by_setup.values():
        for i, r in enumerate(group):
            others = [o["measured"] for j, o in enumerate(group) if j != i and o["system"] != r["system"]]
            if others:
                out.append({**r, "twin_err": 100 * (sum(others) / len(others) / r["measured"] - 1)})
    return out


def print_repeats(rows: list[dict]) -> None:
    """The measurements' own spread: where two published series measured one setup, how far each is from the others'
    mean, beside the model's error on the same rows (whether the model or the measurements limit a rank count)."""
    twins = repeats(rows)
    if not twins:
        return
    print()
    print("the same setup measured by another series (its GPU, nodes, fabric, NIC, collective, size, NCCL environment)")
    print(f"{'group':40} {'rows':>4} {'model MAPE':>11} {'other series':>13}")
    parts = {f"{n} GPUs": [r for r in twins if int(r["gpus"]) == n] for n in sorted({int(r["gpus"]) for r in twins})}
    parts["overall"] = twins
    for name, part in parts.items():
        other = sum(abs(r["twin_err"]) for r in part) / len(part)
        print(f"{name:40} {len(part):4d} {mape(part):10.1f}% {other:12.1f}%")


if __name__ == "__main__":
    sys.exit(main())
