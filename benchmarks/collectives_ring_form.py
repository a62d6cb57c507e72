"""The ring latency in NCCL's own form against the network model's one latency per step.

NCCL's tuning model (src/graph/tuning.cc, a multi-node ring, Simple protocol: (nsteps - nInterSteps)
x max(NVLink ring latency 3.4 us, 3 x net overhead 1.0 us) + nInterSteps x inter step, at NCCL 5067397c) against
analytic/steptime/network.py's (n - 1) x inter step; each form's per-fabric latencies (per collective, per ring step,
per tree level) refitted by grid on the rows of its fabric across nodes (messages >= 1 MiB of
benchmarks/collectives.csv). Prints MAPE overall and per rank count for both (docs/planning.md, "NCCL's own ring
latency, tried and not kept"). About fifteen minutes on one busy core (a review's run: 13 min 52 s):

    python benchmarks/collectives_ring_form.py
"""
import itertools
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'benchmarks'))
sys.path.insert(0, str(ROOT / 'src'))
import bench_collectives as b  # noqa: E402
from dataclasses import replace  # noqa: E402
from trainingcost.analytic.steptime import network as N  # noqa: E402

INTRA = 3.4e-6
FORM = {'mode': 'old'}
orig_ag, orig_ar = N.Network.all_gather, N.Network.all_reduce

def steps_latency(self, n, stride, allreduce):
    local = self._local(n, stride)
    nodes = max(2, math.ceil(n / local))
    nsteps = 2 * (n - 1) if allreduce else n - 1
    if FORM['mode'] == 'old':
        return nsteps * self.inter_step
    inter = 2 * (nodes - 1) if allreduce else nodes - 1
    return (nsteps - inter) * INTRA + inter * self.inter_step

def all_gather(self, nbytes, n, stride=1, rails=True):
    if n <= 1 or nbytes <= 0: return 0.0
    bw, alpha, inter = self._link(n, stride, rails)
    steps = steps_latency(self, n, stride, False) if inter else 0.0
    return alpha + steps + N.bus_factor("all_gather", n) * nbytes / bw

def all_reduce(self, nbytes, n, stride=1):
    if n <= 1 or nbytes <= 0: return 0.0
    factor = N.bus_factor("all_reduce", n)
    if not self.spans_nodes(n, stride):
        return self.intra_alpha + factor * nbytes / self.intra_all_reduce_bw(n)
    local = self._local(n, stride)
    nodes = max(2, math.ceil(n / local))
    node_bw = self.intra_all_reduce_bw(local)
    ring_bw = min(self.node_bw(local), local * self.inter_bw)
    ring = self.inter_alpha + steps_latency(self, n, stride, True) + factor * nbytes / ring_bw
    if self.tree_level is None: return ring
    tree_bw = min(node_bw, 2 * local * self.inter_bw) if nodes == 2 else ring_bw
    tree = self.inter_alpha + 2 * math.ceil(math.log2(nodes)) * self.tree_level + factor * nbytes / tree_bw
    return min(ring, tree)

N.Network.all_gather = all_gather; N.Network.reduce_scatter = all_gather; N.Network.all_reduce = all_reduce
rows_all = list(__import__('csv').DictReader(open(ROOT / 'benchmarks' / 'collectives.csv')))
rows_all = [r for r in rows_all if float(r['message_bytes']) >= 2**20 and r['op'] in b.OPS]

def evaluate(fab_over):
    out = []
    for r in rows_all:
        net = b.network_of(r)
        if int(r['nodes']) > 1 and r.get('fabric') in fab_over:
            a, d, t = fab_over[r['fabric']]
            net = replace(net, inter_alpha=a*1e-6, inter_step=d*1e-6, tree_level=t*1e-6 if net.tree_level else None)
        op = b.OPS[r['op']]
        pred = getattr(net, op)(float(r['message_bytes']), int(r['gpus']), 1)
        meas = b.measured_seconds(r)
        out.append((r, 100*(pred/meas-1)))
    return out

def mape(xs): return sum(abs(e) for _, e in xs)/len(xs) if xs else float('nan')

CUR = {'infiniband': (40, 2, 160), 'efa': (20, 8, 160), 'tcpx': (40, 6, 240)}
def report(tag, fab):
    res = evaluate(fab)
    by = {}
    for r, e in res: by.setdefault(int(r['gpus']), []).append((r, e))
    print(tag, 'overall %.1f' % mape(res), ' '.join('%d:%.1f' % (k, mape(v)) for k, v in sorted(by.items()) if k >= 16))
for mode in ('old', 'nccl'):
    FORM['mode'] = mode
    report(mode + ' current consts', CUR)
    best = dict(CUR)
    for fab in CUR:
        sub = [r for r in rows_all if r.get('fabric') == fab and int(r['nodes']) > 1]
        grid = itertools.product((10, 20, 30, 40, 60), (0, 1, 2, 4, 6, 8, 12, 16, 24, 32), (40, 80, 120, 160, 240, 320))
        def score(c):
            over = {**best, fab: c}
            res = [e for r, e in evaluate(over) if r.get('fabric') == fab and int(r['nodes']) > 1]
            return sum(abs(e) for e in res)/len(res)
        c = min(grid, key=score)
        best[fab] = c
        print(' ', mode, fab, c, '%.1f' % score(c))
    report(mode + ' refit', best)
