"""NCCL's tree correction factors, tried on the network model's tree all-reduce between nodes.

NCCL's tuning model (src/graph/tuning.cc at 5067397c, ``treeCorrectionFactor``, Simple protocol) scales the tree
all-reduce's bandwidth by a factor per power of two of the message (64 B to 256 MiB: 0.9 down to 0.5 at 128 KiB-1 MiB,
back to 0.9; 1.0 from 512 MiB): "Trees are not perfectly sticking to the model for medium sizes". This script prices
benchmarks/collectives.csv (messages >= 1 MiB) with and without them, each form's per-fabric latencies (per
collective, per ring step, per tree level) refitted by grid on the rows of its fabric across nodes, and prints MAPE
overall and per rank count (docs/planning.md, "NCCL's tree correction, tried and not kept"). About five minutes on 2 cores:

    python benchmarks/collectives_tree_correction.py
"""
import csv
import itertools
import math
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))
import bench_collectives as b  # noqa: E402
from trainingcost.analytic.steptime import network as N  # noqa: E402

SIMPLE = (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9)
FORM = {"corrected": False}


def correction(nbytes: float) -> float:
    index = int(nbytes) >> 6
    index = index.bit_length() - 1 if index > 0 else -1
    return SIMPLE[index] if 0 <= index < len(SIMPLE) else 1.0


def all_reduce(self, nbytes, n, stride=1):
    if n <= 1 or nbytes <= 0:
        return 0.0
    factor = N.bus_factor("all_reduce", n)
    if not self.spans_nodes(n, stride):
        return self.intra_alpha + factor * nbytes / self.intra_all_reduce_bw(n)
    local = self._local(n, stride)
    nodes = max(2, math.ceil(n / local))
    ring_bw = min(self.node_bw(local), local * self.inter_bw)
    ring = self.inter_alpha + 2 * (n - 1) * self.inter_step + factor * nbytes / ring_bw
    if self.tree_level is None:
        return ring
    tree_bw = min(self.intra_all_reduce_bw(local), 2 * local * self.inter_bw) if nodes == 2 else ring_bw
    tree_bw *= correction(nbytes) if FORM["corrected"] else 1.0
    return min(ring, self.inter_alpha + 2 * math.ceil(math.log2(nodes)) * self.tree_level + factor * nbytes / tree_bw)


N.Network.all_reduce = all_reduce
ROWS = [r for r in csv.DictReader(open(ROOT / "benchmarks" / "collectives.csv"))
        if float(r["message_bytes"]) >= 2**20 and r["op"] in b.OPS]
CURRENT = {"infiniband": (40, 2, 160), "efa": (20, 8, 160), "tcpx": (40, 6, 240)}


def errors(fabrics):
    out = []
    for r in ROWS:
        net = b.network_of(r)
        if int(r["nodes"]) > 1 and r.get("fabric") in fabrics:
            a, d, t = fabrics[r["fabric"]]
            net = replace(net, inter_alpha=a * 1e-6, inter_step=d * 1e-6, tree_level=t * 1e-6 if net.tree_level else None)
        predicted = getattr(net, b.OPS[r["op"]])(float(r["message_bytes"]), int(r["gpus"]), 1)
        out.append((r, 100 * (predicted / b.measured_seconds(r) - 1)))
    return out


def mape(xs):
    return sum(abs(e) for _, e in xs) / len(xs) if xs else float("nan")


def report(tag, fabrics):
    res = errors(fabrics)
    by = {}
    for r, e in res:
        by.setdefault(int(r["gpus"]), []).append((r, e))
    signed = sum(e for _, e in res) / len(res)
    print(f"{tag}: overall {mape(res):.1f}% (signed {signed:+.1f}%);",
          " ".join(f"{k}: {mape(v):.1f}" for k, v in sorted(by.items()) if k >= 16), flush=True)


for corrected in (False, True):
    FORM["corrected"] = corrected
    name = "with NCCL's tree correction" if corrected else "without"
    best = dict(CURRENT)
    for fabric in CURRENT:
        grid = itertools.product((10, 20, 30, 40, 60), (0, 1, 2, 4, 6, 8, 12, 16, 24, 32),
                                 (10, 20, 40, 80, 120, 160, 240, 320))

        def score(c):
            res = [e for r, e in errors({**best, fabric: c}) if r.get("fabric") == fabric and int(r["nodes"]) > 1]
            return sum(abs(e) for e in res) / len(res)
        best[fabric] = min(grid, key=score)
        print(f"  {name}: {fabric} alpha, delta, tau (us) = {best[fabric]}", flush=True)
    report(f"{name}, refitted", best)
