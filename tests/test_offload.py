"""Offload (analytic/steptime/offload.py): the GPU's memory against DeepSpeed's own estimators with offload, the host's
memory and the step's PCIe and CPU seconds by hand, and the one-line refusals."""

from __future__ import annotations

import pytest

import trainingcost as tc
from trainingcost import cli
from trainingcost.analytic.plan import (Efficiency, PlanSpec, deepspeed_zero2_offload_gpu_bytes,
                                        deepspeed_zero3_offload_gpu_bytes, host_bytes, memory_per_gpu, model_facts)
from trainingcost.analytic.steptime import offload
from trainingcost.config import canonical_model, preset_entry

MFU = Efficiency("mfu", 0.4, "given")


def _facts(name):
    return model_facts(canonical_model(preset_entry(name, "p"), ""), ["bp"], "adam")


def _states(facts, **kw):
    spec = PlanSpec(**{**dict(tokens=1e9, gpus=8, efficiency=MFU, precision="bf16-mixed"), **kw})
    parts = memory_per_gpu(facts, spec, "bp", 0)
    return sum(v for k, v in parts.items() if k != "activations"), spec


@pytest.mark.parametrize("name", ["gpt2-small", "llama-2-7b"])
def test_the_gpus_memory_equals_deepspeeds_estimators_with_offload(name):
    """DeepSpeed's estimate_zero2/zero3_model_states_mem_needs with cpu_offload (and cpu_offload_params), given the
    model's parameters and its largest module: the same bytes on the GPU as the plan's, to the byte."""
    facts = _facts(name)
    P, L, N = facts.parameters, facts.largest_module, 8
    ours, _ = _states(facts, sharding="zero2", offload="optimizer")
    assert ours == pytest.approx(deepspeed_zero2_offload_gpu_bytes(P), abs=1)
    ours, _ = _states(facts, sharding="zero3", zero3_gather="module", offload="optimizer")
    assert ours == pytest.approx(deepspeed_zero3_offload_gpu_bytes(P, L, N, offload_params=False), abs=1)
    ours, _ = _states(facts, sharding="zero3", zero3_gather="module", offload="parameters")
    assert ours == pytest.approx(deepspeed_zero3_offload_gpu_bytes(P, L, N, offload_params=True), abs=1)


def test_the_hosts_memory_by_hand():
    facts = _facts("llama-2-7b")
    P = facts.parameters
    _, spec = _states(facts, sharding="zero2", offload="optimizer")
    assert host_bytes(facts, spec, "bp", 8) == pytest.approx(8 * P / 8 * (4 + 4 * 2 + 4))  # master, 2 moments, grad
    _, spec = _states(facts, sharding="zero3", offload="parameters")
    assert host_bytes(facts, spec, "bp", 8) == pytest.approx(P * 16 + P * 2)  # and the bit16 shards
    _, spec = _states(facts, sharding="zero3")
    assert host_bytes(facts, spec, "bp", 8) == 0.0


def test_the_steps_offload_seconds_by_hand():
    """llama-2-7b on 8 A100 80GB (PCIe Gen4 32 GB/s each way, a DGX A100's 409.6 GB/s DRAM) under ZeRO-3: the
    optimizer's partition P/8 is copied down in fp32 (hidden behind the backward here), stepped by the node's CPUs at
    30 bytes per parameter of all 8 partitions at DeepSpeed's CPU-Adam share of the DRAM's rate, and copied back in
    bf16."""
    common = dict(preset="llama-2-7b", tokens=1e11, gpu="a100-80gb", gpus=8, rule="bp", sharding="zero3",
                  micro_batch=2)
    none = tc.plan(**common).table.iloc[0]
    opt = tc.plan(**common, offload="optimizer").table.iloc[0]
    P = _facts("llama-2-7b").parameters
    cpu = 8 * (P / 8) * 30 / (409.6e9 * 0.456)
    up = (P / 8) * 2 / 32e9
    assert opt["step_optimizer_s"] == pytest.approx(cpu + up, rel=1e-9)
    assert opt["step_time_s"] - none["step_time_s"] == pytest.approx(cpu + up - none["step_optimizer_s"], rel=1e-9)
    assert opt["mem_master_weights"] == opt["mem_optimizer_state"] == opt["mem_gradients"] == 0
    assert opt["host_memory_per_node"] == pytest.approx(P * 16)
    par = tc.plan(**common, offload="parameters").table.iloc[0]
    assert par["mem_parameters"] == 0 and par["mem_gathered"] > 0 and par["offload"] == "parameters"


def test_cpu_adams_share_of_the_dram_is_deepspeeds_measured_step():
    """Ren et al. 2021 (ZeRO-Offload, Table 4): DeepSpeed's CPU-Adam steps 1, 2, 4, 8 and 10B fp32 parameters in 0.22,
    0.51, 1.03, 2.41 and 2.57 s on a DGX-2's two Xeon Platinum 8168 (2 sockets x 6 DDR4-2666 channels x 8 bytes: 256
    GB/s); at adam_bytes' 30 per parameter, their median rate over the DRAM's is the share the plan prices, and each
    measured step is within 20% of the priced one."""
    dram = 2 * 6 * 2666e6 * 8
    table = {1e9: 0.22, 2e9: 0.51, 4e9: 1.03, 8e9: 2.41, 10e9: 2.57}
    per_param = offload.adam_bytes(4, 4, 2, 2)
    assert per_param == 30
    shares = sorted(n * per_param / t / dram for n, t in table.items())
    assert offload.CPU_ADAM_DRAM_SHARE == pytest.approx(shares[2], abs=5e-4)
    prec = type("P", (), {"master": 4, "state": 4, "weights": 2})()
    for n, measured in table.items():
        priced = offload.seconds("optimizer", partition=n, shard=n, per_node=1, prec=prec, slots=2,
                                 params={"host_link_gbs": 16, "host_memory_gbs": dram / 1e9}, M=1, compute_fwd=1.0,
                                 compute_bwd=1.0)["cpu"]
        assert priced == pytest.approx(measured, rel=0.2), n


def test_a_run_of_fewer_gpus_than_a_node_shares_the_host_among_them_alone():
    """One GPU of a node with the optimizer offloaded: the host's CPUs step that GPU's partition alone (they stepped
    all eight GPUs' worth before, pricing ZeRO-Offload's single-GPU runs 8x too slow on the CPU)."""
    common = dict(preset="llama-2-7b", tokens=1e10, gpu="a100-80gb", rule="bp", sharding="zero2", micro_batch=1,
                  global_batch=8, offload="optimizer", checkpointing="full")
    P = _facts("llama-2-7b").parameters
    one = tc.plan(**common, gpus=1).table.iloc[0]
    cpu = P * 30 / (409.6e9 * offload.CPU_ADAM_DRAM_SHARE)
    assert one["step_optimizer_s"] == pytest.approx(cpu + P * 2 / 32e9, rel=1e-9)
    assert one["host_memory_per_node"] == pytest.approx(P * 16)
    two = tc.plan(**common, gpus=2).table.iloc[0]
    assert two["host_memory_per_node"] == pytest.approx(P * 16)  # two partitions of P/2
    assert two["step_optimizer_s"] == pytest.approx(cpu + P / 2 * 2 / 32e9, rel=1e-9)  # the CPU steps both


def test_a_cluster_states_its_hosts_rates():
    """--cluster dgx-2 (ZeRO-Offload's system, Ren et al. 2021, Table 2): its two Xeon Platinum 8168's 256 GB/s of DRAM
    and 16 GB/s of PCIe replace the V100's usual DGX-1 host (153.6 GB/s) for the CPU's Adam; a bad host rate in a
    cluster entry is one line."""
    from trainingcost.config.errors import ConfigError
    from trainingcost.config.frameworks import parse_cluster

    common = dict(preset="gpt2-xl", tokens=1e9, gpus=1, rule="bp", sharding="zero2", micro_batch=1, global_batch=1,
                  offload="optimizer")
    dgx2 = tc.plan(**common, cluster="dgx-2").table.iloc[0]
    dgx1 = tc.plan(**common, gpu="v100").table.iloc[0]
    P = dgx2["trained_parameters"]
    share = offload.CPU_ADAM_DRAM_SHARE
    # (the same PCIe link: the gradients' copies and the copy back alike; the CPU's Adam at each host's DRAM)
    assert dgx1["step_optimizer_s"] - dgx2["step_optimizer_s"] == pytest.approx(
        P * 30 / share * (1 / 153.6e9 - 1 / 256e9), rel=1e-9)
    assert dgx2["step_optimizer_s"] >= P * 30 / (256e9 * share) + P * 2 / 16e9
    entry = {"gpu": "v100", "gpus_per_node": 16, "nic_gbps": 50, "fabric": "infiniband", "cite": "c",
             "host_memory_gbs": -1}
    with pytest.raises(ConfigError, match=r"^clusters.x.host_memory_gbs: "):
        parse_cluster("x", entry, {"c": "a source"}, "clusters.x", {"infiniband": ({}, "")})


def test_the_copies_before_each_gather_show_where_the_compute_cannot_hide_them():
    f = offload.seconds("parameters", partition=1e9, shard=1e9, per_node=8,
                        prec=type("P", (), {"master": 4, "state": 4, "weights": 2})(), slots=2,
                        params={"host_link_gbs": 10, "host_memory_gbs": 100}, M=4, compute_fwd=0.05, compute_bwd=0.1)
    assert f["gradients"] == pytest.approx(max(0.0, 1e9 * 4 / 10e9 - 4 * 0.1))  # 0.4 s down, 0.4 s of backward
    assert f["cpu"] == pytest.approx(8 * 1e9 * 30 / (100e9 * offload.CPU_ADAM_DRAM_SHARE))
    assert f["parameters"] == pytest.approx(1e9 * 2 / 10e9)
    assert f["gathers"] == pytest.approx(4 * 2 * 1e9 * 2 / 10e9 - 4 * 0.15)  # 1.6 s of copies, 0.6 s of compute


@pytest.mark.parametrize("args,line", [
    (["--offload", "optimizer", "--sharding", "none"], "--offload: optimizer offload moves each GPU's ZeRO partition"),
    (["--offload", "parameters", "--sharding", "zero2"], "--offload: parameter offload keeps the shards ZeRO-3 and FSDP "
                                                         "gather on the host; it needs --sharding zero3 or fsdp"),
])
def test_an_offload_the_sharding_cannot_run_is_one_line(args, line, capsys):
    assert cli.main(["plan", "--preset", "llama-2-7b", "--tokens", "1e11", "--gpu", "a100-80gb", "--gpus", "8",
                     "--rule", "bp", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0]


def test_a_published_row_may_state_its_schedule_and_offload():
    """benchmarks/bench_plan_accuracy.py reports the rows that state them apart (issue 68); absent, the row runs 1F1B
    without offload, as every published row here does."""
    from pathlib import Path

    from trainingcost.analytic.steptime import runs

    row = dict(runs.load(Path(__file__).resolve().parents[1] / "benchmarks" / "published_runs.csv")[0])
    assert (runs.layout_of(row).schedule, runs.layout_of(row).offload) == ("", "none")
    lay = runs.layout_of({**row, "schedule": "ZB-H1", "offload": "optimizer", "sharding": "zero1"})
    assert (lay.schedule, lay.offload) == ("zb-h1", "optimizer")


def test_the_nvme_forms_by_hand():
    """ZeRO-Infinity's NVMe offload (offload.py): the node's drives at DeepSpeed's measured 10 GB/s read and 5 GB/s
    write (DeepNVMe, four Gen4 SSDs); the fp32 gradients written as the backward makes them, the step reading 16 bytes
    per parameter (master weight, two moments, gradient) and writing 12 back around the CPU's Adam, the updated
    shards written once a step and read again before each gather (the slower of the drives, shared by the node's
    GPUs, and the GPU's PCIe link)."""
    prec = type("P", (), {"master": 4, "state": 4, "weights": 2})()
    kw = dict(partition=1e9, shard=1e9, per_node=8, prec=prec, slots=2, params={"host_link_gbs": 32,
              "host_memory_gbs": 400}, M=4, compute_fwd=0.5, compute_bwd=1.0)
    cpu = offload.seconds("optimizer", **kw)
    f = offload.seconds("optimizer-nvme", **kw)
    assert f["gradients"] == pytest.approx(max(1e9 * 4 / 32e9, 8 * 1e9 * 4 / 5e9) - 4 * 1.0)  # 6.4 s of writes
    assert f["cpu"] - cpu["cpu"] == pytest.approx(8 * 1e9 * (16 / 10e9 + 12 / 5e9))
    assert f["parameters"] == cpu["parameters"] and f["gathers"] == 0
    p = offload.seconds("parameters-nvme", **kw)
    assert p["parameters"] == pytest.approx(1e9 * 2 / 32e9 + 8 * 1e9 * 2 / 5e9)
    assert p["gathers"] == pytest.approx(4 * 2 * 1e9 * 2 * 8 / 10e9 - 4 * 1.5)  # 12.8 s of reads, 6 s of compute


def test_nvme_keeps_only_swap_buffers_in_the_host_and_runs_under_zero3(capsys):
    """DeepSpeed's swap buffers: the optimizer's 4 fp32 tensors of a sub-group (sub_group_size 1e9 elements), the
    parameters' 5 buffers of 1e8 elements in bf16; refused in one line outside ZeRO-3."""
    facts = _facts("llama-2-7b")
    P = facts.parameters
    _, spec = _states(facts, sharding="zero3", offload="optimizer-nvme", gpus=64)
    assert host_bytes(facts, spec, "bp", 8) == pytest.approx(8 * 4 * (P / 64) * 4)  # a partition under 1e9
    _, spec = _states(facts, sharding="zero3", offload="parameters-nvme", gpus=8)
    assert host_bytes(facts, spec, "bp", 8) == pytest.approx(8 * (4 * min(P / 8, 1e9) * 4 + 5 * 1e8 * 2))
    gpu_nvme, _ = _states(facts, sharding="zero3", offload="parameters-nvme")
    gpu_host, _ = _states(facts, sharding="zero3", offload="parameters")
    assert gpu_nvme == gpu_host  # the GPU keeps what it keeps under the host's offload
    assert cli.main(["plan", "--preset", "llama-2-7b", "--tokens", "1e11", "--gpu", "a100-80gb", "--gpus", "8",
                     "--rule", "bp", "--sharding", "fsdp", "--offload", "parameters-nvme"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs --sharding zero3 (allowed with fsdp: none, optimizer, parameters)" in err[0]
