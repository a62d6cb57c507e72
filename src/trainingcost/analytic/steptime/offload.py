"""Offload: the optimizer (ZeRO-Offload) or the parameters too (ZeRO-3's offload_param, FSDP's CPU offload) kept in the
host's memory, and what a step then spends on the PCIe link and the CPU (docs/planning.md, "Offload").

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

The link's and the DRAM's rates are the datasheets' theoretical ones (config/hardware.yaml, host_link_gbs and
host_memory_gbs; a DGX A100's where a device has none), so the priced offload is a lower bound on its cost.
"""

from __future__ import annotations

from ...config.errors import ConfigError

OFFLOADS = ("none", "optimizer", "parameters")
HOST_DEFAULTS = {"host_link_gbs": 32.0, "host_memory_gbs": 409.6}  # a DGX A100's: PCIe Gen4, two EPYC 7742's DRAM
HOST_DEFAULT_SOURCE = ("a DGX A100's PCIe Gen4 link (32 GB/s each way) and DRAM (409.6 GB/s per node): the device has "
                       "no host numbers in config/hardware.yaml")
GRADIENT_BYTES = 4  # DeepSpeed casts a gradient partition to fp32 on the GPU before the copy to the host


def check_offload(offload: str, sharding: str, flag: str = "--offload") -> None:
    """One line naming the flag and what is allowed, where the sharding cannot offload that."""
    if offload not in OFFLOADS:
        raise ConfigError(f"{flag}: {offload!r} is not allowed (allowed: {', '.join(OFFLOADS)})")
    if offload == "optimizer" and sharding == "none":
        raise ConfigError(f"{flag}: optimizer offload moves each GPU's ZeRO partition of the optimizer to the host; it "
                          "needs --sharding zero1, zero2, zero3 or fsdp (allowed with none: none)")
    if offload == "parameters" and sharding not in ("zero3", "fsdp"):
        raise ConfigError(f"{flag}: parameter offload keeps the shards ZeRO-3 and FSDP gather on the host; it needs "
                          f"--sharding zero3 or fsdp (allowed with {sharding}: none, optimizer)")


def host(params: dict) -> tuple[float, float]:
    """(link bytes/s each way, DRAM bytes/s per node) of a device model's parameters."""
    return (params.get("host_link_gbs", HOST_DEFAULTS["host_link_gbs"]) * 1e9,
            params.get("host_memory_gbs", HOST_DEFAULTS["host_memory_gbs"]) * 1e9)


def adam_bytes(master: int, state: int, slots: int, weights: int) -> int:
    """DRAM bytes the CPU's optimizer moves per parameter: master weight and each moment read and written, the fp32
    gradient read, the bit16 copy written (30 in bf16 with Adam)."""
    return 2 * master + 2 * state * slots + GRADIENT_BYTES + weights


def seconds(offload: str, partition: float, shard: float, per_node: int, prec, slots: int, params: dict, M: int,
            compute_fwd: float, compute_bwd: float) -> dict:
    """The step's seconds of an offload: ``partition`` the trained parameters whose optimizer this GPU owns, ``shard``
    the parameters it holds (ZeRO-3, FSDP), ``per_node`` the GPUs sharing the host, ``M`` micro-batches of
    ``compute_fwd`` and ``compute_bwd`` seconds. Keys: gradients (to the host, exposed beyond the backward), cpu (the
    host's optimizer step), parameters (back to the GPU), gathers (the parameter offload's copies before each
    gather, exposed beyond the compute)."""
    if offload == "none":
        return {"gradients": 0.0, "cpu": 0.0, "parameters": 0.0, "gathers": 0.0}
    link, dram = host(params)
    down = partition * GRADIENT_BYTES / link
    out = {"gradients": max(0.0, down - M * compute_bwd),
           "cpu": per_node * partition * adam_bytes(prec.master, prec.state, slots, prec.weights) / dram,
           "parameters": partition * prec.weights / link, "gathers": 0.0}
    if offload == "parameters":
        out["gathers"] = max(0.0, M * 2 * shard * prec.weights / link - M * (compute_fwd + compute_bwd))
    return out
