"""Hybrid sharded data parallelism (--replicate R; PyTorch FSDP's HYBRID_SHARD, FSDP2 on a 2-D mesh, torchtitan's
data_parallel_replicate_degree, MaxText's dcn_data_parallelism): the dp replicas in R groups, ZeRO sharding inside
each group, every gradient reduce-scatter followed by an all-reduce of its output across the groups."""

from __future__ import annotations

import dataclasses
import json

import pytest

from trainingcost import cli
from trainingcost.analytic.layout import SEARCH_ALL, search
from trainingcost.analytic.plan import Efficiency, PlanSpec, check_spec, memory_per_gpu
from trainingcost.analytic.plan_facts import model_facts
from trainingcost.analytic.steptime import Layout, predict_step
from trainingcost.analytic.steptime.network import Network
from trainingcost.analytic.steptime.step import data_parallel_collectives, dp_phase_seconds
from trainingcost.config import ConfigError, canonical_model
from trainingcost.config.frameworks import framework
from trainingcost.config.hardware import device
from trainingcost.config.presets import PRESETS

H100 = device("h100-sxm")


def small():
    return canonical_model(PRESETS["llama-2-7b"]).replace(dec_layers=4, seq_len=1024)


def _spec(**changes):
    return PlanSpec(**{"tokens": 1e9, "gpus": 16, "sharding": "zero3", "efficiency": Efficiency("mfu", 0.4, "given"),
                       **changes})


def test_a_replica_group_holds_what_fsdp_over_the_group_alone_holds():
    """16 GPUs in 2 groups of 8 keep, per GPU, the sharded state of FSDP over 8 GPUs; the activations alike."""
    cfg = small()
    facts = model_facts(cfg, ["bp"], "adam")
    hsdp = memory_per_gpu(facts, _spec(gpus=16, replicate=2), "bp", 1000)
    alone = memory_per_gpu(facts, _spec(gpus=8), "bp", 1000)
    flat = memory_per_gpu(facts, _spec(gpus=16), "bp", 1000)
    assert hsdp == pytest.approx(alone, rel=1e-12)
    # by hand: bf16 weights sharded over 8 ranks, not 16
    assert hsdp["parameters"] == pytest.approx(2 * facts.parameters / 8, rel=1e-12)
    assert flat["parameters"] == pytest.approx(2 * facts.parameters / 16, rel=1e-12)


@pytest.mark.parametrize("sharding", ["zero1", "zero2", "zero3"])
def test_each_reduce_scatter_is_followed_by_an_all_reduce_of_its_shard_across_the_groups(sharding):
    """16 GPUs in 2 groups of 8: the group's collectives as the group alone issues them, then each reduce-scatter's
    output (1/8 of its input) all-reduced over the 2 groups."""
    cfg = small()
    lay = Layout(gpus=16, global_batch=32, micro_batch=1, sharding=sharding, replicate=2)
    group = Layout(gpus=8, global_batch=16, micro_batch=1, sharding=sharding)  # one replica group, alone
    ops, alone = data_parallel_collectives(cfg, lay, "bp"), data_parallel_collectives(cfg, group, "bp")
    for listed, inside in ((ops.micro_batch, alone.micro_batch), (ops.step, alone.step)):
        assert [c for c in listed if c.op != "all_reduce"] == list(inside)  # the group's own collectives, as alone
        scatters = [c for c in listed if c.op == "reduce_scatter"]
        reduces = [c for c in listed if c.op == "all_reduce"]
        assert len(reduces) == len(scatters)
        for rs, ar in zip(scatters, reduces):
            assert rs.group == 8 and ar.group == 2 and ar.bytes * 8 == rs.bytes  # 8 ranks per group, 2 groups
            assert ar.phase == rs.phase and ar.dtype == rs.dtype
    assert any(c.op == "all_reduce" for c in [*ops.micro_batch, *ops.step])


def test_the_optimizer_steps_over_a_groups_shard():
    """The optimizer's pass over this GPU's master weights and state: the group's shard (1/8), as FSDP over the 8
    GPUs of the group alone, not 1/16."""
    cfg = small()
    hsdp = predict_step(cfg, Layout(gpus=16, global_batch=16, micro_batch=1, sharding="zero3", replicate=2), H100, "bp")
    alone = predict_step(cfg, Layout(gpus=8, global_batch=8, micro_batch=1, sharding="zero3"), H100, "bp")
    flat = predict_step(cfg, Layout(gpus=16, global_batch=16, micro_batch=1, sharding="zero3"), H100, "bp")
    assert hsdp.parts["optimizer"] == pytest.approx(alone.parts["optimizer"], rel=1e-12)
    assert hsdp.parts["optimizer"] != pytest.approx(flat.parts["optimizer"], rel=1e-3)


def test_with_tensor_parallelism_the_groups_are_tp_x_shard_apart():
    """32 GPUs on nodes of 16, tp 2, 2 groups of 8 data-parallel ranks: the gathers and reduce-scatters over 8 ranks
    2 apart (one node, NVLink), the shards' all-reduce over 2 ranks 2 x 8 = 16 GPUs apart (across the nodes; 8 apart
    would have stayed inside one)."""
    cfg = small()
    lay = Layout(gpus=32, global_batch=32, micro_batch=1, tp=2, sharding="zero3", replicate=2, gpus_per_node=16)
    net = Network.of(H100.steptime, gpus_per_node=16)
    ops = data_parallel_collectives(cfg, lay, "bp")
    sums = dp_phase_seconds(ops, net, lay)
    reduce = sum(net.reduce_scatter(c.bytes, 8, 2) if c.op == "reduce_scatter" else net.all_reduce(c.bytes, 2, 16)
                 for c in ops.micro_batch if c.phase == "backward" and c.op != "all_gather")
    assert sums[("micro_batch", "backward", "reduce")] == pytest.approx(reduce, rel=1e-12)
    assert net.spans_nodes(2, 16) and not net.spans_nodes(2, 8) and not net.spans_nodes(8, 2)


def test_one_group_is_plain_sharding_and_hsdp_keeps_fsdp_gathers_off_a_slow_network():
    """On 25 Gb/s per GPU between nodes, groups of one node each gather over NVLink and send only the shards'
    all-reduce over the network: less exposed data-parallel time than FSDP over the 8 nodes."""
    cfg = small()
    flat = Layout(gpus=64, global_batch=64, micro_batch=1, sharding="zero3", nic_gbps=25.0)
    assert predict_step(cfg, dataclasses.replace(flat, replicate=1), H100, "bp").step_time_s == \
        predict_step(cfg, flat, H100, "bp").step_time_s
    hsdp = predict_step(cfg, dataclasses.replace(flat, replicate=8), H100, "bp")  # groups of one node each
    fsdp = predict_step(cfg, flat, H100, "bp")
    assert hsdp.dp_bytes != fsdp.dp_bytes
    assert hsdp.parts["comm_dp"] < fsdp.parts["comm_dp"]


@pytest.mark.parametrize("changes, message", [
    ({"replicate": 3}, "replicate: 3 replica groups do not divide the 16 data-parallel replicas"),
    ({"replicate": 16}, "replicate: 16 replica groups of the 16 data-parallel replicas leave each group one rank"),
    ({"replicate": 2, "sharding": "none"}, "replicate: 2 replica groups shard nothing under sharding none"),
    ({"replicate": 2, "sharding": "zero1", "zero1_sync": "after_backward"}, "replicate: the framework syncs ZeRO-1"),
    ({"replicate": 0}, "replicate: a positive integer"),
])
def test_impossible_groups_are_refused_in_one_line(changes, message):
    with pytest.raises(ConfigError) as err:
        check_spec(_spec(**changes), small(), H100)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_cli_plans_hsdp_and_refuses_it_in_one_line(capsys):
    argv = ["plan", "--preset", "llama-2-7b", "--gpu", "h100-sxm", "--gpus", "64", "--tokens", "1e9", "--rule", "bp"]
    assert cli.main([*argv, "--sharding", "fsdp", "--replicate", "4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "fsdp inside 4 replica groups of 16 ranks (HSDP" in out
    assert cli.main([*argv, "--sharding", "none", "--replicate", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--replicate: 4 replica groups shard nothing under sharding none" in err[0]


def test_the_search_keeps_the_groups_and_matches_brute_force():
    cfg = small()
    spec = _spec(gpus=32, replicate=2, efficiency=Efficiency("predicted", 1.0, "model"))
    fast = search(cfg, spec, H100, ["bp", "dfa"], SEARCH_ALL)
    brute = search(cfg, spec, H100, ["bp", "dfa"], SEARCH_ALL, prune=False)
    for rule in ("bp", "dfa"):
        assert fast.rules[rule].best == brute.rules[rule].best
        assert all(c.replicate == 2 and c.sharding != "none" and (c.dp // 2) >= 2 for c in fast.rules[rule].top)
        assert fast.rules[rule].best.compact().endswith("r2")
    assert any("--replicate" in line for line in fast.rejected)


def test_a_framework_without_a_splittable_sharding_is_refused_by_the_search(capsys):
    """nanotron runs no sharding or ZeRO-1 synced over every rank: nothing for replica groups to split."""
    argv = ["plan", "--preset", "llama-2-7b", "--gpu", "h100-sxm", "--gpus", "64", "--tokens", "1e9", "--rule", "bp",
            "--framework", "nanotron", "--replicate", "4", "--layout", "search"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "framework nanotron runs no sharding that 4 replica groups can split" in err[0]


def test_experts_stay_inside_a_replica_group():
    """Each replica group holds every expert: ep divides a group's replicas (Mixtral, 64 GPUs, 16 groups of 4)."""
    cfg = canonical_model(PRESETS["mixtral-8x7b"]).replace(seq_len=1024)
    check_spec(_spec(gpus=64, ep=4, replicate=16, sharding="fsdp"), cfg, H100)
    with pytest.raises(ConfigError, match=r"^replicate: expert-parallel 8 does not divide a replica group's 4 "):
        check_spec(_spec(gpus=64, ep=8, replicate=16, sharding="fsdp"), cfg, H100)


def test_replicate_auto_searches_every_group_count_the_sharding_allows():
    """--replicate auto: every R dividing dp that leaves groups of two ranks or more, with a sharding that replica
    groups can split (not none); the best equals brute force over the same space; R = 1 stays in the space; a
    framework whose sources name no hybrid sharding keeps R = 1 and says so."""
    cfg = small()
    spec = _spec(gpus=32, global_batch=128, efficiency=Efficiency("predicted", 1.0, "model"))
    free = {"micro_batch", "sharding", "replicate"}
    fast = search(cfg, spec, H100, ["bp", "mempepita"], free)
    brute = search(cfg, spec, H100, ["bp", "mempepita"], free, prune=False)
    fixed = search(cfg, spec, H100, ["bp"], free - {"replicate"})
    for rule in ("bp", "mempepita"):
        assert fast.rules[rule].best == brute.rules[rule].best
    # by hand: dp 32, R in 1 2 4 8 16 (not 32: groups of one); mb 1..G/dp; shardings: 4 at R 1, 3 (no none) above
    per_replica = spec.global_batch // 32
    mbs = sum(1 for m in range(1, per_replica + 1) if per_replica % m == 0)
    assert fast.rules["bp"].space == mbs * (4 + 3 * 4) and fixed.rules["bp"].space == mbs * 4
    groups = {c.replicate for c in search(cfg, spec, H100, ["bp"], free, top=10_000, prune=False).rules["bp"].top}
    assert groups == {1, 2, 4, 8, 16}
    assert fast.rules["bp"].best.step_s <= fixed.rules["bp"].best.step_s
    def under(name):
        return dataclasses.replace(spec, framework=name, can=tuple(sorted(framework(name).can.items())))

    found = search(cfg, under("nanotron"), H100, ["bp"], free)
    assert found.rules["bp"].best.replicate == 1
    assert "replicate: framework nanotron has no hybrid sharding (replica groups)" in found.rejected
    # a framework runs replica groups only under the shardings its sources name: MiCS is ZeRO-3, Megatron-Core's
    # optimizer instances ZeRO-1
    for name, runs in (("deepspeed", {"zero3"}), ("nemo", {"zero1"}), ("torchtitan", {"zero2", "zero3"})):
        every = search(cfg, under(name), H100, ["bp"], free, top=10_000, prune=False).rules["bp"].top
        assert {c.sharding for c in every if c.replicate > 1} == runs, name


def test_replicate_auto_with_context_parallelism_counts_the_cp_ranks_of_a_group():
    """With cp 2 a group of one replica still shards over its 2 context-parallel ranks: R = dp is in the space."""
    cfg = small()
    spec = _spec(gpus=16, global_batch=32, cp=2, efficiency=Efficiency("predicted", 1.0, "model"))
    free = {"sharding", "replicate"}
    every = search(cfg, spec, H100, ["bp"], free, top=10_000, prune=False).rules["bp"].top
    assert {c.replicate for c in every} == {1, 2, 4, 8}  # dp 8: every divisor, groups of dp / R x cp >= 2 ranks
    assert search(cfg, spec, H100, ["bp"], free).rules["bp"].best == every[0]


def test_replicate_auto_keeps_the_experts_inside_each_group():
    """A mixture of experts with ep and R both searched: every layout's expert-parallel degree divides its group's
    replicas (dp / R), the search equals brute force, and layouts with both groups and experts spread exist."""
    cfg = canonical_model(PRESETS["mixtral-8x7b"]).replace(seq_len=1024, dec_layers=2)
    spec = _spec(gpus=32, global_batch=64, efficiency=Efficiency("predicted", 1.0, "model"))
    free = {"ep", "sharding", "replicate", "micro_batch"}
    every = search(cfg, spec, H100, ["bp"], free, top=10_000, prune=False).rules["bp"]
    assert every.top and all((c.dp // c.replicate) % c.ep == 0 for c in every.top)
    assert any(c.replicate > 1 and c.ep > 1 for c in every.top)
    assert search(cfg, spec, H100, ["bp"], free).rules["bp"].best == every.top[0]


def test_layout_search_alone_keeps_the_groups_given_and_replicate_auto_opts_in(capsys):
    argv = ["plan", "--preset", "llama-2-7b", "--gpu", "h100-sxm", "--gpus", "256", "--tokens", "1e9", "--rule", "bp",
            "--framework", "torchtitan", "--layout", "search", "--format", "json"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)[0]["replicate"] == 1
    assert cli.main([*argv, "--replicate", "auto", "--sharding", "zero3", "--tp", "1", "--pp", "1"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["sharding"] == "zero3" and row["tp"] == 1 and 256 % row["replicate"] == 0
    assert cli.main([*argv[:-2], "--replicate", "auto", "--sharding", "zero3", "--tp", "1", "--pp", "1"]) == 0
    out = capsys.readouterr().out
    assert "searched:" in out and "replicate" in out.split("searched:")[1].split("Each rule")[0]


def test_a_gpu_count_that_cannot_hold_the_groups_is_refused_before_any_search(capsys, monkeypatch):
    """--gpus 64,16,4 --replicate 4: 4 GPUs leave groups of one rank at every layout; refused in one line before the
    search prices 64 or 16 (the search is never called)."""
    from trainingcost.analytic import layout

    called = []
    monkeypatch.setattr(layout, "search", lambda *a, **k: called.append(1))
    argv = ["plan", "--preset", "gpt2-small", "--gpu", "a100-80gb", "--gpus", "64,16,4", "--replicate", "4",
            "--sharding", "zero3", "--layout", "search", "--tokens", "1e9"]
    assert cli.main(argv) == 2 and not called
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("--gpus 4: replicate: 4 replica groups of the 4 data-parallel replicas "
                                             "leave each group one rank to shard over (allowed: --replicate 1, with "
                                             "--sharding none for plain data parallelism)")


@pytest.mark.parametrize("flags, message", [
    (["--nproc", "4", "--replicate", "2"], "--replicate: 2 replica groups shard inside each group: parallel zero2 "
                                           "or fsdp (got ddp)"),
    (["--nproc", "4", "--parallel", "fsdp", "--replicate", "3"], "--replicate: 3 replica groups of the 4 processes "
                                                                 "must each hold two or more"),
    (["--nproc", "4", "--parallel", "fsdp", "--replicate", "4"], "(allowed with nproc 4: 1, 2)"),
    (["--parallel", "fsdp", "--replicate", "2"], "2 replica groups of the 1 processes must each hold two or more "
                                                 "(allowed with nproc 1: 1)"),
])
def test_a_training_run_refuses_groups_it_cannot_form_in_one_line(flags, message, capsys):
    assert cli.main(["train", "--rule", "bp", "--steps", "2", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_training_run_in_replica_groups_meters_what_the_model_lists(capsys):
    """trainingcost train --nproc 4 --parallel zero2 --replicate 2: the summary line's metered bytes equal the
    model's (analytic/comm.py, replica_all_reduces over the group's zero2 listing)."""
    assert cli.main(["train", "--rule", "kp", "--steps", "3", "--nproc", "4", "--parallel", "zero2",
                     "--replicate", "2"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "4 ranks (zero2 in 2 replica groups)" in line and "(the model's: equal)" in line


def test_the_workflow_runs_training_jobs_in_replica_groups_and_refuses_what_cannot_be():
    """train.parallel.replicate: passed to each job's command line; a value the launch cannot form is refused in
    one line naming the field, before any job."""
    from trainingcost.pipeline import load, train_command, train_jobs

    def config(**parallel):
        return {"sweep": {"presets": ["gpt2-small"]},
                "train": {"select": ["gpt2-small"], "rules": ["bp"], "parallel": parallel}}

    filled = load(config(nproc=4, parallel="fsdp", replicate=2))
    argv = train_command(train_jobs(filled)[0], filled)
    assert argv[argv.index("--replicate") + 1] == "2" and argv[argv.index("--nproc") + 1] == "4"
    plain = load(config(nproc=2, parallel="fsdp"))
    assert "--replicate" not in train_command(train_jobs(plain)[0], plain)
    with pytest.raises(ConfigError, match=r"^train\.parallel\.replicate: 3 replica groups of the 4 processes must each "
                                          r"hold two or more \(allowed with nproc 4: 1, 2\)$"):
        load(config(nproc=4, parallel="fsdp", replicate=3))
    with pytest.raises(ConfigError, match=r"^train\.parallel\.replicate: 2 replica groups shard inside each group: "
                                          r"parallel zero2 or fsdp \(got ddp\)$"):
        load(config(nproc=4, replicate=2))
