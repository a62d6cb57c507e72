"""NCCL's low-latency protocols (LL, LL128), tried beside the network model's Simple-protocol estimate.

NCCL picks, per collective and message size, the fastest of its algorithms and protocols by its tuning model
(src/graph/tuning.cc, NVIDIA/nccl at b6475625): latency = base + steps x per-step latency, with LL's base 6.6 us
(ring) and 6.8 us (tree), 0.6 us a step on NVLink, 2.7 us (ring) and 5 us (tree) between nodes, 1 us of network
overhead a step; LL moves a quarter of the Simple protocol's bus bandwidth (a third for an all-gather inside a node),
capped at 87.7 GB/s inside a Hopper or Ampere node and 39.0 / 20.4 GB/s on 2 / more nodes; LL128 92% of it, its
base 14 us, 1.9 us a ring step on NVLink, 4 us between nodes; the tree's algorithm bandwidth half its bus bandwidth.
This script prices every all-reduce, all-gather and reduce-scatter row of benchmarks/collectives.csv at the
fastest of the model's own estimate and these protocols (``--protocols ll`` or ``ll,ll128``), over the model's bus
bandwidths, and prints the table of bench_collectives.py (docs/planning.md, "NCCL's low-latency protocols, tried
and not kept"). A few seconds:

    python benchmarks/collectives_ll_protocol.py [--protocols ll|ll,ll128] [--min-bytes N] [--rows]
"""
import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))
import bench_collectives as b  # noqa: E402

BASE_US = {("ring", "ll"): 6.6, ("ring", "ll128"): 14.0, ("tree", "ll"): 6.8, ("tree", "ll128"): 14.0}
NVLINK_US = {("ring", "ll"): 0.6, ("ring", "ll128"): 1.9, ("tree", "ll"): 0.6, ("tree", "ll128"): 1.25}
NET_US = {("ring", "ll"): 2.7, ("ring", "ll128"): 4.0, ("tree", "ll"): 5.0, ("tree", "ll128"): 8.5}
NET_OVERHEAD_US = 1.0  # a step between nodes, an x86 host (getNetOverhead)


def ll_max_bw(nodes: int) -> float:
    """LL's bus bandwidth cap (llMaxBws): one Hopper or Ampere node 87.7 GB/s; an Intel host's 2 nodes 39.0, more 20.4."""
    return (87.7 if nodes == 1 else 39.0 if nodes == 2 else 20.4) * 1e9


def protocol_seconds(net, op: str, nbytes: float, n: int, protocols) -> float:
    """The fastest of NCCL's ring (and, for an all-reduce, tree) under ``protocols``, on ``net``'s bus bandwidths."""
    local = net._local(n, 1)
    nodes = math.ceil(n / local) if net.spans_nodes(n, 1) else 1
    bus = net.node_bw(n) if nodes == 1 else min(net.node_bw(local), local * net.inter_bw)
    if op == "all_reduce":
        steps, inter = 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    else:
        steps, inter = n - 1, nodes - 1
    best = math.inf
    for p in protocols:
        ring_bus = (min(ll_max_bw(nodes), bus * (0.25 if nodes > 1 or op == "all_reduce" else 1 / 3)) if p == "ll"
                    else bus * 0.92)
        per_step = max(NVLINK_US[("ring", p)], NET_OVERHEAD_US if nodes > 1 else 0.0)
        latency = BASE_US[("ring", p)] + (steps - inter) * per_step + inter * NET_US[("ring", p)]
        best = min(best, latency * 1e-6 + nbytes / (ring_bus * n / steps))
        if op == "all_reduce":
            tree_bus = bus * 0.92
            tree_bus = min(tree_bus / 3.8, ll_max_bw(nodes)) if p == "ll" else tree_bus * (7 / 9 if nodes == 1 else 120 / 128)
            levels = math.log2(nodes) if nodes > 1 else 0.0
            latency = BASE_US[("tree", p)] + 2 * ((local - 1) * NVLINK_US[("tree", p)] + levels * NET_US[("tree", p)])
            best = min(best, latency * 1e-6 + nbytes / (tree_bus * 0.5))
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocols", default="ll", choices=["ll", "ll,ll128"])
    args, rest = ap.parse_known_args(argv)
    protocols = args.protocols.split(",")
    model = b.predicted_seconds

    def with_protocols(row: dict) -> float:
        simple = model(row)
        op = b.OPS[row["op"]]
        if op not in ("all_reduce", "all_gather", "reduce_scatter"):
            return simple
        return min(simple, protocol_seconds(b.network_of(row), op, float(row["message_bytes"]), int(row["gpus"]),
                                            protocols))

    b.predicted_seconds = with_protocols
    print(f"the model's estimate or NCCL's {' and '.join(p.upper() for p in protocols)}, whichever is faster")
    return b.main(rest)


if __name__ == "__main__":
    sys.exit(main())
