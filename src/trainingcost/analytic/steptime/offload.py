"""Offload: the optimizer (ZeRO-Offload) or the parameters too (ZeRO-3's offload_param, FSDP's CPU offload) kept in the
host's memory, or on the node's NVMe drives (ZeRO-Infinity), and what a step then spends on the PCIe link, the drives
and the CPU (docs/planning.md, "Offload").

What moves, as DeepSpeed runs it (deepspeedai/DeepSpeed edaa722, deepspeed/runtime/zero/stage_1_and_2.py): each GPU's
gradient partition is cast to fp32 on the GPU and copied to the host as the backward produces it (4 bytes per
parameter, async_inplace_copy_grad_to_fp32_buffer_from_gpu), overlapped with the backward (Ren et al. 2021,
ZeRO-Offload, section 4); the CPU runs Adam over the fp32 master weights and moments; the updated bit16 partition is
copied back (2 bytes per parameter in bf16) before the parameters' all-gather. With the parameters offloaded (ZeRO-3,
FSDP) each gather first copies the GPU's bit16 shard from the host, in the forward and again in the backward, per
micro-batch (torch's FSDP2 _fsdp_param.py copies host to device before each all-gather), prefetched beside the
compute. The CPU's Adam is bound by the node's DRAM: per parameter it reads and writes the fp32 master weight and both
moments and reads the fp32 gradient (4 + 4 + 2 x 4 x 2 + 4 bytes) and writes the bit16 copy, 30 bytes in bf16; every
GPU of the node shares the node's DRAM.

On NVMe (ZeRO-Infinity, Rajbhandari et al. 2021; ZeRO-3 only: DeepSpeed's ``offload_optimizer``/``offload_param``
``device: nvme``), as deepspeed/runtime/swap_tensor/ moves them: the fp32 gradients are written to the drives in the
backward (4 bytes per parameter, _swap_out_offload_fp32_gradients); the step reads each sub-group's master weights,
moments and gradients (16 bytes with Adam), steps them on the CPU and writes the weights and moments back (12 bytes),
one sub-group at a time (pipeline_read and pipeline_write off by default); with the parameters there too, each
gather's bit16 shard is read from the drives through a pinned buffer, in the forward and again in the backward, and
the updated shard written once a step. The node's drives are shared by its GPUs; a read or a write pipelined with
the PCIe copy costs the slower of the two.

The link's and the DRAM's rates are the datasheets' theoretical ones (config/hardware.yaml, host_link_gbs and
host_memory_gbs; a DGX A100's where a device has none); the CPU's Adam reaches :data:`CPU_ADAM_DRAM_SHARE` of the
DRAM's, as DeepSpeed's CPU-Adam measured (Ren et al. 2021, Table 4); the drives' rates are DeepSpeed's measured ones
(NVME_DEFAULTS).
"""

from __future__ import annotations

from ...config.errors import ConfigError

OFFLOADS = ("none", "optimizer", "parameters", "optimizer-nvme", "parameters-nvme")
# The host's rates a cluster entry may state in place of the device's (config/clusters.yaml)
HOST_KEYS = ("host_link_gbs", "host_memory_gbs", "nvme_read_gbs", "nvme_write_gbs")
HOST_DEFAULTS = {"host_link_gbs": 32.0, "host_memory_gbs": 409.6}  # a DGX A100's: PCIe Gen4, two EPYC 7742's DRAM
HOST_DEFAULT_SOURCE = ("a DGX A100's PCIe Gen4 link (32 GB/s each way) and DRAM (409.6 GB/s per node): the device has "
                       "no host numbers in config/hardware.yaml")
# A node's NVMe drives, read and write (GB/s): DeepSpeed's ds_io on four PCIe Gen4 NVMe SSDs in RAID 0, an Azure
# NC96ads_A100_v4 ("10GB/sec reads and 5GB/sec writes" between NVMe and CPU memory; deepspeedai/DeepSpeed edaa722,
# blogs/deepnvme/08-2024/README.md); a DGX A100 holds four (15 TB) to eight 3.84 TB U.2 Gen4 drives
NVME_DEFAULTS = {"nvme_read_gbs": 10.0, "nvme_write_gbs": 5.0}
NVME_SOURCE = ("DeepSpeed's ds_io on four PCIe Gen4 NVMe SSDs in RAID 0 (Azure NC96ads_A100_v4): 10 GB/s reads, 5 GB/s "
               "writes (deepspeedai/DeepSpeed, blogs/deepnvme/08-2024/README.md)")
# DeepSpeed's CPU-Adam (AVX-512, every core) on a DGX-2's two Xeon Platinum 8168 (six DDR4-2666 channels each,
# 256 GB/s): 0.22, 0.51, 1.03, 2.41 and 2.57 s a step for 1, 2, 4, 8 and 10B parameters (Ren et al. 2021, ZeRO-Offload,
# USENIX ATC '21, Table 4), i.e. 136, 118, 117, 100 and 117 GB/s of adam_bytes' 30 per parameter: the median, 117 GB/s,
# is 0.456 of the DRAM's rate (tests/test_offload.py recomputes it from the table)
CPU_ADAM_DRAM_SHARE = 0.456
CPU_ADAM_SOURCE = ("DeepSpeed's CPU-Adam at 0.456 of the host DRAM's rate: its measured step on a DGX-2 (Ren et al. "
                   "2021, ZeRO-Offload, Table 4: 2.57 s for 10B parameters on two Xeon Platinum 8168, 256 GB/s)")
GRADIENT_BYTES = 4  # DeepSpeed casts a gradient partition to fp32 on the GPU before the copy to the host
# The host's pinned swap buffers under NVMe offload (deepspeed/runtime/zero/offload_config.py and config.py defaults):
# the optimizer's buffer_count 4 (one per Adam tensor: weight, gradient, two moments) of a sub-group of sub_group_size
# 1e9 elements in fp32; the parameters' buffer_count 5 of buffer_size 1e8 elements in bit16
SUB_GROUP = 1e9
OPTIMIZER_BUFFERS = 4
PARAMETER_BUFFERS, PARAMETER_BUFFER = 5, 1e8


def parameters_off(offload: str) -> bool:
    """Whether the parameters' shards leave the GPU (to the host or the drives)."""
    return offload in ("parameters", "parameters-nvme")


def on_nvme(offload: str) -> bool:
    return offload.endswith("-nvme")


def check_offload(offload: str, sharding: str, flag: str = "--offload") -> None:
    """One line naming the flag and what is allowed, where the sharding cannot offload that."""
    if offload not in OFFLOADS:
        raise ConfigError(f"{flag}: {offload!r} is not allowed (allowed: {', '.join(OFFLOADS)})")
    if on_nvme(offload) and sharding != "zero3":
        allowed = [o for o in OFFLOADS if allows(o, sharding)]
        raise ConfigError(f"{flag}: {offload} is ZeRO-Infinity's NVMe offload, which DeepSpeed runs under ZeRO stage 3 "
                          f"only; it needs --sharding zero3 (allowed with {sharding}: {', '.join(allowed)})")
    if offload == "optimizer" and sharding == "none":
        raise ConfigError(f"{flag}: optimizer offload moves each GPU's ZeRO partition of the optimizer to the host; it "
                          "needs --sharding zero1, zero2, zero3 or fsdp (allowed with none: none)")
    if offload == "parameters" and sharding not in ("zero3", "fsdp"):
        raise ConfigError(f"{flag}: parameter offload keeps the shards ZeRO-3 and FSDP gather on the host; it needs "
                          f"--sharding zero3 or fsdp (allowed with {sharding}: none, optimizer)")


def allows(offload: str, sharding: str) -> bool:
    """Whether ``sharding`` can run ``offload``."""
    if offload == "none":
        return True
    if on_nvme(offload):
        return sharding == "zero3"
    return sharding in ("zero3", "fsdp") if offload == "parameters" else sharding != "none"


def host(params: dict) -> tuple[float, float]:
    """(link bytes/s each way, DRAM bytes/s per node) of a device model's parameters."""
    return (params.get("host_link_gbs", HOST_DEFAULTS["host_link_gbs"]) * 1e9,
            params.get("host_memory_gbs", HOST_DEFAULTS["host_memory_gbs"]) * 1e9)


def drives(params: dict) -> tuple[float, float]:
    """(read, write) bytes/s of a node's NVMe drives."""
    return (params.get("nvme_read_gbs", NVME_DEFAULTS["nvme_read_gbs"]) * 1e9,
            params.get("nvme_write_gbs", NVME_DEFAULTS["nvme_write_gbs"]) * 1e9)


def adam_bytes(master: int, state: int, slots: int, weights: int) -> int:
    """DRAM bytes the CPU's optimizer moves per parameter: master weight and each moment read and written, the fp32
    gradient read, the bit16 copy written (30 in bf16 with Adam)."""
    return 2 * master + 2 * state * slots + GRADIENT_BYTES + weights


def host_bytes_per_gpu(offload: str, partition: float, shard: float, prec, slots: int) -> float:
    """Host memory one GPU's offload keeps: in the host, its optimizer partition (fp32 master weights, the moments,
    an fp32 gradient buffer: DeepSpeed's 16 bytes per parameter with Adam) and with parameter offload its bit16 shard;
    on NVMe, only the pinned swap buffers (a sub-group's four fp32 tensors; five parameter buffers)."""
    if offload == "none":
        return 0.0
    if on_nvme(offload):
        out = OPTIMIZER_BUFFERS * min(partition, SUB_GROUP) * 4
        return out + (PARAMETER_BUFFERS * min(shard, PARAMETER_BUFFER) * prec.weights if parameters_off(offload) else 0.0)
    out = partition * (max(prec.master, 4) + prec.state * slots + GRADIENT_BYTES)
    return out + (shard * prec.weights if parameters_off(offload) else 0.0)


def seconds(offload: str, partition: float, shard: float, per_node: int, prec, slots: int, params: dict, M: int,
            compute_fwd: float, compute_bwd: float) -> dict:
    """The step's seconds of an offload: ``partition`` the trained parameters whose optimizer this GPU owns, ``shard``
    the parameters it holds (ZeRO-3, FSDP), ``per_node`` the GPUs sharing the host, ``M`` micro-batches of
    ``compute_fwd`` and ``compute_bwd`` seconds. Keys: gradients (to the host, and to the drives, exposed beyond the
    backward), cpu (the host's optimizer step, with the drives' reads and writes around it), parameters (back to the
    GPU; on NVMe, the shards written too), gathers (the parameter offload's copies before each gather, exposed beyond
    the compute)."""
    if offload == "none":
        return {"gradients": 0.0, "cpu": 0.0, "parameters": 0.0, "gathers": 0.0}
    link, dram = host(params)
    read, write = drives(params)
    state = prec.master + prec.state * slots  # the optimizer's bytes per parameter besides its gradient
    down = partition * GRADIENT_BYTES / link
    if on_nvme(offload):  # the node's gradients written to its drives as the backward makes them
        down = max(down, per_node * partition * GRADIENT_BYTES / write)
    cpu = per_node * partition * adam_bytes(prec.master, prec.state, slots, prec.weights) / (dram * CPU_ADAM_DRAM_SHARE)
    if on_nvme(offload):  # each sub-group read (weights, moments, gradient), stepped, written back, in turn
        cpu += per_node * partition * ((state + GRADIENT_BYTES) / read + state / write)
    out = {"gradients": max(0.0, down - M * compute_bwd), "cpu": cpu,
           "parameters": partition * prec.weights / link
           + (per_node * shard * prec.weights / write if offload == "parameters-nvme" else 0.0),
           "gathers": 0.0}
    if parameters_off(offload):
        per_gather = shard * prec.weights * max(1 / link, per_node / read if on_nvme(offload) else 0.0)
        out["gathers"] = max(0.0, M * 2 * per_gather - M * (compute_fwd + compute_bwd))
    return out
