"""The network model: alpha-beta collectives on the link each parallel axis uses (docs/planning.md).

Ring algorithms (Thakur et al. 2005; NCCL's bus-bandwidth factors, nccl-tests doc/PERFORMANCE.md):
all-reduce of S bytes over n ranks 2(n-1)/n S / B, reduce-scatter and all-gather (n-1)/n S / B. Latency: one alpha
per collective, on the link it uses (Calculon's form, t = latency + bytes x factor / (bandwidth x efficiency), Isaev
et al. 2023, whose A100 system gives the catalogue's 10 us inside a node and 20 us between nodes). Thakur's ring
pays alpha per ring step, (n-1) or 2(n-1) of them; with the catalogue's per-collective alphas that prices a 1,024-GPU
all-gather at 20 ms of latency alone, and once data-parallel traffic is priced per bucket and per FSDP unit
(analytic/comm.py) it made ZeRO-3 at scale latency-bound against the published runs (benchmarks/plan_accuracy.md:
9.0% overall against 8.6% per collective).
B is the NCCL bus bandwidth inside a node; a ring that spans nodes runs one channel per NIC (rail-optimised DGX/HGX,
one NIC per GPU), so the data entering a node, (n-1)/n of the buffer, arrives over all its NICs at once: bus bandwidth
min(NVLink bus bandwidth, GPUs per node x NIC x efficiency) (about 180 GB/s measured on DGX A100 pods, nccl-tests).
A point-to-point send (pipeline stages) uses one NIC.
Without a switch inside the node (AMD's MI300X: seven 64 GB/s Infinity Fabric links per GPU, a full mesh), a group of
k GPUs of one node reaches k - 1 peers over k - 1 links: bus bandwidth min(the whole node's, (k - 1) x one link's),
one link's for a point-to-point send (ml-engineering network/README.md: all-reduce 312.9 GB/s on 8 MI300X, 47.7 GB/s
on 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


NVLS_MEASURED_OVER = 8  # the GPUs over which the catalogue's NVLS figures (intra_allreduce_gbs) were measured


def bus_factor(op: str, n: int) -> float:
    """The share of a collective's buffer that each rank sends over the ring (nccl-tests doc/PERFORMANCE.md, "bus
    bandwidth"): all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n of the whole buffer, broadcast 1."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"op: {op!r} has no bus factor")


@dataclass(frozen=True)
class Network:
    gpus_per_node: int
    intra_bw: float  # bytes/s, NCCL's ring bus bandwidth inside a node
    intra_alpha: float  # seconds per collective inside a node
    inter_bw: float  # bytes/s per GPU between nodes (its share of the node's NICs x efficiency)
    inter_alpha: float  # seconds per collective between nodes
    nvls_bw: float | None = None  # NVLink SHARP (NVLS) all-reduce algorithm bandwidth, the same for any group size
    inter_step: float = 0.0  # seconds per ring step between nodes ((n - 1) steps per all-gather, 2 (n - 1) all-reduce)
    tree_level: float | None = None  # seconds per level of NCCL's tree all-reduce between nodes (None: no tree)
    intra_link_bw: float | None = None  # bytes/s of one GPU-to-GPU link where the node is a mesh (None: a switch)

    @classmethod
    def of(cls, params: dict, gpus_per_node: int | None = None, nic_gbps: float | None = None,
           fabric: dict | None = None) -> "Network":
        """The network of a device's catalogue numbers (``params``), on ``gpus_per_node`` GPUs per node with
        ``nic_gbps`` per GPU, over ``fabric`` (the cluster catalogue's latencies between nodes, and its measured NIC
        efficiency where it has one; default the device's usual system's)."""
        nic = nic_gbps if nic_gbps is not None else params["nic_gbps"]
        fab = {k: params[k] for k in ("inter_latency_us", "inter_step_us", "tree_level_us") if k in params}
        fab.update(fabric or {})
        nvls = params.get("intra_allreduce_gbs")  # NVLS's bus bandwidth over NVLS_MEASURED_OVER GPUs
        tree = fab.get("tree_level_us")
        efficiency = fab.get("nic_efficiency", params["nic_efficiency"])  # a cluster's own measured share, if any
        link = params.get("intra_link_gbs")
        return cls(int(gpus_per_node or params["gpus_per_node"]), params["intra_gbs"] * 1e9,
                   params["intra_latency_us"] * 1e-6, nic / 8 * 1e9 * efficiency,
                   fab["inter_latency_us"] * 1e-6,
                   nvls * 1e9 / bus_factor("all_reduce", NVLS_MEASURED_OVER) if nvls else None,
                   fab.get("inter_step_us", 0.0) * 1e-6, tree * 1e-6 if tree else None, link * 1e9 if link else None)

    def node_bw(self, local: int) -> float:
        """Bus bandwidth of a group of ``local`` GPUs inside one node: the switch's ring bandwidth, or on a mesh
        (``intra_link_bw``) local - 1 links' at most; one GPU of a node uses no link inside it."""
        if self.intra_link_bw is None or local <= 1:
            return self.intra_bw
        return min(self.intra_bw, max(1, local - 1) * self.intra_link_bw)

    def intra_all_reduce_bw(self, local: int) -> float:
        """Bus bandwidth of an all-reduce over ``local`` GPUs of one node: the ring's, or NVLS's where the node has it
        and it is faster. NVLS moves each rank's buffer once to the switch and once back whatever the group's size, so
        its algorithm bandwidth is one figure and its bus bandwidth grows as 2 (n - 1) / n (NCCL's tuning model,
        src/graph/tuning.cc: NVLS's algorithm bandwidth has no rank-count term, the ring's is the bus bandwidth x
        n / (2 (n - 1))); NCCL turns NVLS off on two GPUs or fewer (src/transport/nvls.cc, ncclNvlsInit) and its tuner
        takes the faster of the two (ml-engineering's 8-GPU H200 node, nccl-tests at 8 GiB: NVLS 414, 436, 460,
        477 GB/s on 5 to 8 GPUs, the ring 364-366 on each)."""
        ring = self.node_bw(local)
        if self.nvls_bw is None or local <= 2:
            return ring
        return max(ring, self.nvls_bw * bus_factor("all_reduce", local))

    def spans_nodes(self, n: int, stride: int) -> bool:
        """A group of n ranks ``stride`` apart (ranks numbered node by node) leaves the node."""
        return n > 1 and n * stride > self.gpus_per_node

    def _local(self, n: int, stride: int) -> int:
        """Ranks of the group inside one node."""
        return max(1, min(n, self.gpus_per_node // max(1, stride)))

    def _link(self, n: int, stride: int, rails: bool = True):
        if not self.spans_nodes(n, stride):
            return self.node_bw(n), self.intra_alpha, False
        if not rails:
            return self.inter_bw, self.inter_alpha, True
        local = self._local(n, stride)
        return min(self.node_bw(local), local * self.inter_bw), self.inter_alpha, True

    def all_reduce(self, nbytes: float, n: int, stride: int = 1) -> float:
        """Inside a node: NVLS where the device has it and it is faster (:meth:`intra_all_reduce_bw`; nccl-tests:
        about 480 GB/s bus bandwidth on 8 H100 against the ring's 370), else the ring. Between nodes NCCL picks the faster of the ring (one
        latency per ring step) and the tree (one per level, log2 of the nodes, each way); on two nodes the tree
        carries twice the NICs' rate, bounded by the node's own all-reduce (NCCL maintainers, NVIDIA/nccl#946)."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        factor = bus_factor("all_reduce", n)
        if not self.spans_nodes(n, stride):
            return self.intra_alpha + factor * nbytes / self.intra_all_reduce_bw(n)
        local = self._local(n, stride)
        nodes = max(2, math.ceil(n / local))
        node_bw = self.intra_all_reduce_bw(local)
        ring_bw = min(self.node_bw(local), local * self.inter_bw)
        ring = self.inter_alpha + 2 * (n - 1) * self.inter_step + factor * nbytes / ring_bw
        if self.tree_level is None:
            return ring
        tree_bw = min(node_bw, 2 * local * self.inter_bw) if nodes == 2 else ring_bw
        tree = self.inter_alpha + 2 * math.ceil(math.log2(nodes)) * self.tree_level + factor * nbytes / tree_bw
        return min(ring, tree)

    def all_gather(self, nbytes: float, n: int, stride: int = 1, rails: bool = True) -> float:
        """``nbytes``: the gathered (whole) buffer; reduce-scatter costs the same. Between nodes a ring of n - 1
        steps. ``rails`` False: a collective whose traffic is not spread over the node's NICs (one NIC's share)."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        bw, alpha, inter = self._link(n, stride, rails)
        steps = (n - 1) * self.inter_step if inter else 0.0
        return alpha + steps + bus_factor("all_gather", n) * nbytes / bw

    reduce_scatter = all_gather

    def reduce(self, nbytes: float, n: int, stride: int = 1, rails: bool = True, calls: float = 1.0) -> float:
        """``calls`` NCCL reduces to one root of ``nbytes`` in all over n ranks: each a ring (between nodes n - 1
        steps), one latency per call; the bytes pass each link once (nccl-tests doc/PERFORMANCE.md: reduce's bus
        bandwidth is its algorithm bandwidth)."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        bw, alpha, inter = self._link(n, stride, rails)
        steps = (n - 1) * self.inter_step if inter else 0.0
        return calls * (alpha + steps) + nbytes / bw

    def all_to_all(self, nbytes: float, n: int, stride: int = 1) -> float:
        """Each of n ranks sends (n - 1) / n of its ``nbytes`` to the others (expert parallelism's dispatch and
        combine). Inside a node at the ring's bus bandwidth; between nodes the share bound for other nodes leaves
        over the GPU's own NICs only: all-to-all cannot aggregate a node's NICs (NCCL maintainers,
        NVIDIA/nccl-tests#267), the part inside the node in parallel over NVLink."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        if not self.spans_nodes(n, stride):
            return self.intra_alpha + bus_factor("all_gather", n) * nbytes / self.node_bw(n)
        local = self._local(n, stride)
        nodes = math.ceil(n / local)
        outside = nbytes * (n - local) / n / self.inter_bw
        inside = nbytes * (local - 1) / n / self.node_bw(local)
        return self.inter_alpha + (nodes - 1) * self.inter_step * local + max(outside, inside)

    def limited_all_to_all(self, nbytes: float, n: int, stride: int, copies: int, limit: int, groups: int) -> float:
        """An expert all-to-all under node-limited routing with per-node deduplication (DeepSeek-AI 2024, DeepSeek-V3
        Technical Report, arXiv 2412.19437, section 3.2.2): ``nbytes`` the ``copies`` routed copies of a rank's
        tokens, each token's experts in at most ``limit`` of ``groups`` groups, a group's experts on nodes / groups of
        the group's nodes (or a node holding groups / nodes groups); each token crosses to each other node it reaches
        once (the own node among those reached in proportion), over InfiniBand to the GPU of the same index there,
        which forwards it over NVLink to the experts' GPUs. Within one node: :meth:`all_to_all`."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        if not self.spans_nodes(n, stride):
            return self.all_to_all(nbytes, n, stride)
        local = self._local(n, stride)
        nodes = math.ceil(n / local)
        reached = min(copies, nodes, limit * max(1.0, nodes / groups))
        one = nbytes / copies  # one copy of the rank's tokens
        outside = one * reached * (nodes - 1) / nodes / self.inter_bw  # to the other nodes reached, once each
        inside = nbytes * (local - 1) / local / self.node_bw(local)  # the copies forwarded inside each node
        return self.inter_alpha + (nodes - 1) * self.inter_step * local + max(outside, inside)

    def p2p(self, nbytes: float, inter: bool) -> float:
        if nbytes <= 0:
            return 0.0
        if inter:
            return self.inter_alpha + nbytes / self.inter_bw
        return self.intra_alpha + nbytes / self.node_bw(2)
