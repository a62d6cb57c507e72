"""FSDP2's copies through its collectives' flat buffers, priced on the compute stream (framework field
``shard_copies``; docs/planning.md, "Copies of FSDP2's collectives"). The bytes are checked against FSDP2 itself in
tests/test_comm_model.py (test_fsdp2_copies_equal_the_models); here, what the step-time model makes of them."""

from __future__ import annotations

import dataclasses

import pytest

from trainingcost.analytic.steptime import Layout, predict_step
from trainingcost.analytic.steptime.device import DeviceModel
from trainingcost.analytic.steptime.step import data_parallel_collectives
from trainingcost.config import canonical_model
from trainingcost.config.frameworks import framework
from trainingcost.config.hardware import device
from trainingcost.config.presets import PRESETS

H100 = device("h100-sxm")


def small():
    return canonical_model(PRESETS["llama-2-7b"]).replace(dec_layers=4, seq_len=1024)


@pytest.mark.parametrize("sharding, grad_reduce", [("zero3", "fp32"), ("zero3", "compute"), ("zero2", "fp32")])
def test_the_copies_add_one_memory_pass_per_byte_they_move(sharding, grad_reduce):
    """By hand: each all-gather's output read and written (2 x its bf16 bytes), each reduce-scatter's input written
    in its dtype and the bf16 gradients read (fp32: 4 + 2 bytes per element of the 4-byte input), each its own
    memory-bound kernel; per micro-batch for FSDP's, once per step for ZeRO-2's; on the step and in its memory
    part."""
    cfg = small()
    lay = Layout(gpus=16, global_batch=64, micro_batch=1, sharding=sharding, grad_reduce=grad_reduce)
    copied = dataclasses.replace(lay, shard_copies=True)
    dev = DeviceModel.of(H100, "bf16")
    ops = data_parallel_collectives(cfg, lay, "bp")

    def by_hand(listed):
        total = 0.0
        for c in listed:
            if c.op == "all_gather":
                total += dev.memory(2 * c.bytes)
            elif c.op == "reduce_scatter":
                total += dev.memory(c.bytes + c.bytes * 2 // (4 if grad_reduce == "fp32" else 2))
        return total

    M = lay.accumulation
    expected = M * by_hand(ops.micro_batch) + by_hand(ops.step)
    plain, with_copies = predict_step(cfg, lay, H100, "bp"), predict_step(cfg, copied, H100, "bp")
    assert expected > 0
    assert with_copies.step_time_s - plain.step_time_s == pytest.approx(expected, rel=1e-9)
    assert with_copies.parts["memory"] - plain.parts["memory"] == pytest.approx(expected, rel=1e-9)
    assert with_copies.dp_bytes == plain.dp_bytes  # the network's bytes are the collectives', unchanged


def test_without_sharding_nothing_is_copied():
    lay = Layout(gpus=16, global_batch=64, micro_batch=1, sharding="none", shard_copies=True)
    assert predict_step(small(), lay, H100, "bp").step_time_s == \
        predict_step(small(), dataclasses.replace(lay, shard_copies=False), H100, "bp").step_time_s


def test_the_fsdp2_frameworks_copy_and_the_others_do_not():
    """FSDP2's entries (fsdp2, torchtitan, olmo-core) copy; FSDP1's flat parameters, Megatron's and DeepSpeed's
    contiguous buffers and XLA do not; each entry's source says which."""
    for name in ("fsdp2", "torchtitan", "olmo-core"):
        assert framework(name).shard_copies and "split_with_sizes_copy" in framework(name).source("shard_copies")
    for name in ("fsdp1", "composer", "megatron-core", "nemo", "deepspeed", "maxtext"):
        assert not framework(name).shard_copies
