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
"""

from __future__ import annotations

from dataclasses import dataclass


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
    intra_bw: float  # bytes/s, NCCL bus bandwidth inside a node
    intra_alpha: float  # seconds per collective inside a node
    inter_bw: float  # bytes/s per GPU between nodes (NIC x efficiency)
    inter_alpha: float  # seconds per collective between nodes

    @classmethod
    def of(cls, params: dict, gpus_per_node: int | None = None, nic_gbps: float | None = None) -> "Network":
        nic = nic_gbps if nic_gbps is not None else params["nic_gbps"]
        return cls(int(gpus_per_node or params["gpus_per_node"]), params["intra_gbs"] * 1e9,
                   params["intra_latency_us"] * 1e-6, nic / 8 * 1e9 * params["nic_efficiency"],
                   params["inter_latency_us"] * 1e-6)

    def spans_nodes(self, n: int, stride: int) -> bool:
        """A group of n ranks ``stride`` apart (ranks numbered node by node) leaves the node."""
        return n > 1 and n * stride > self.gpus_per_node

    def _link(self, n: int, stride: int, rails: bool = True):
        if not self.spans_nodes(n, stride):
            return self.intra_bw, self.intra_alpha, False
        if not rails:
            return self.inter_bw, self.inter_alpha, True
        local = max(1, min(n, self.gpus_per_node // max(1, stride)))  # ranks of the group inside one node
        return min(self.intra_bw, local * self.inter_bw), self.inter_alpha, True

    def all_reduce(self, nbytes: float, n: int, stride: int = 1) -> float:
        if n <= 1 or nbytes <= 0:
            return 0.0
        bw, alpha, inter = self._link(n, stride)
        return alpha + bus_factor("all_reduce", n) * nbytes / bw

    def all_gather(self, nbytes: float, n: int, stride: int = 1, rails: bool = True) -> float:
        """``nbytes``: the gathered (whole) buffer; reduce-scatter costs the same. ``rails`` False: a collective
        whose traffic is not spread over the node's NICs (one NIC's bandwidth)."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        bw, alpha, inter = self._link(n, stride, rails)
        return alpha + bus_factor("all_gather", n) * nbytes / bw

    reduce_scatter = all_gather

    def all_to_all(self, nbytes: float, n: int, stride: int = 1) -> float:
        """Each of n ranks sends (n - 1) / n of its ``nbytes`` to the others (expert parallelism's dispatch and
        combine): the bus bandwidth factor of nccl-tests' alltoall, (n - 1) / n, as an all-gather's."""
        return self.all_gather(nbytes, n, stride)

    def p2p(self, nbytes: float, inter: bool) -> float:
        if nbytes <= 0:
            return 0.0
        return (self.inter_alpha + nbytes / self.inter_bw) if inter else (self.intra_alpha + nbytes / self.intra_bw)
