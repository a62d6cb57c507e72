"""The step-time model (analytic/steptime): hand-computed collectives, a ZeRO-3 step's traffic, the interleaved bubble,
a tensor-parallel block; monotonicity properties; every published run loads and plans."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trainingcost.analytic.plan import PRECISIONS, model_facts, model_share
from trainingcost.analytic.steptime import Layout, Network, predict_step, runs
from trainingcost.analytic.steptime.device import DeviceModel
from trainingcost.analytic.steptime.step import check_layout, rule_work
from trainingcost.config import ConfigError
from trainingcost.config.hardware import device
from trainingcost.config.model import canonical_model, preset_entry

ROOT = Path(__file__).resolve().parents[1]
A100 = device("a100-80gb")


@pytest.fixture(scope="module")
def gpt2():
    return canonical_model(preset_entry("gpt2-small"))


@pytest.fixture(scope="module")
def work(gpt2):
    return rule_work(gpt2, ["bp", "dfa", "pepita"])


def net_of(lay: Layout) -> Network:
    return Network.of(DeviceModel.of(A100, "bf16").params, lay.gpus_per_node, lay.nic_gbps)


def test_one_all_reduce_by_hand():
    """Without step latencies, NVLS or a tree (the Network's defaults): one latency per collective and the ring."""
    net = Network(gpus_per_node=8, intra_bw=200e9, intra_alpha=10e-6, inter_bw=25e9, inter_alpha=20e-6)
    # inside a node: one latency + 2 (n-1)/n S / B
    assert net.all_reduce(1e9, 8) == pytest.approx(10e-6 + 2 * 7 / 8 * 1e9 / 200e9)
    # two nodes: one latency per collective (Calculon's form), bandwidth min(NVLink, 8 NICs x 25 GB/s) = 200 GB/s
    assert net.all_reduce(1e9, 16) == pytest.approx(20e-6 + 2 * 15 / 16 * 1e9 / 200e9)
    # reduce-scatter and all-gather: half the all-reduce's bandwidth term
    assert net.all_gather(1e9, 8) == pytest.approx(10e-6 + 7 / 8 * 1e9 / 200e9)
    assert net.all_reduce(1e9, 1) == 0.0


def test_a_mesh_node_gives_a_group_of_k_gpus_k_minus_1_links():
    """A node without a switch (MI300X: a full mesh of links): a group of k of its GPUs reaches k - 1 links, at most
    the whole node's bus bandwidth; a point-to-point send one link; across nodes the ring's intra-node part too."""
    link, node = 47.7e9, 315e9
    mesh = Network(gpus_per_node=8, intra_bw=node, intra_alpha=0.0, inter_bw=50e9, inter_alpha=0.0, intra_link_bw=link)
    switch = Network(gpus_per_node=8, intra_bw=node, intra_alpha=0.0, inter_bw=50e9, inter_alpha=0.0)
    S = 1e9
    assert mesh.all_reduce(S, 2) == pytest.approx(2 * 1 / 2 * S / link)  # 47.7 GB/s measured on 2 MI300X
    assert mesh.all_gather(S, 4) == pytest.approx(3 / 4 * S / (3 * link))
    assert mesh.all_reduce(S, 8) == pytest.approx(2 * 7 / 8 * S / node) == switch.all_reduce(S, 8)  # 7 links > node
    assert mesh.p2p(S, inter=False) == pytest.approx(S / link) and switch.p2p(S, inter=False) == pytest.approx(S / node)
    assert mesh.all_to_all(S, 4) == pytest.approx(3 / 4 * S / (3 * link))
    # two ranks per node over four nodes (stride 4): the ring's node part is one link, below 2 NICs' 100 GB/s
    assert mesh.all_gather(S, 8, stride=4) == pytest.approx(7 / 8 * S / min(link, 2 * 50e9))
    assert switch.all_gather(S, 8, stride=4) == pytest.approx(7 / 8 * S / min(node, 2 * 50e9))
    # one rank per node (stride 8, tp 8): no link inside a node, the NICs alone, as on a switch
    fast = dict(gpus_per_node=8, intra_bw=node, intra_alpha=0.0, inter_bw=100e9, inter_alpha=0.0)
    assert Network(**fast, intra_link_bw=link).all_gather(S, 16, stride=8) == Network(**fast).all_gather(S, 16, stride=8)
    assert Network(**fast, intra_link_bw=link).all_reduce(S, 2, stride=8) == Network(**fast).all_reduce(S, 2, stride=8)
    # the ring across nodes and the all-to-all's part inside a node read the links too (4 local ranks: 3 links)
    four = Network(gpus_per_node=8, intra_bw=node, intra_alpha=0.0, inter_bw=200e9, inter_alpha=0.0,
                   intra_link_bw=link)
    assert four.all_reduce(S, 8, stride=2) == pytest.approx(2 * 7 / 8 * S / min(3 * link, 4 * 200e9))
    assert four.all_to_all(S, 8, stride=2) == pytest.approx(max(S * 4 / 8 / 200e9, S * 3 / 8 / (3 * link)))


def test_a_quad_gh200_node_is_a_mesh_of_nvlink_pairs_and_its_cluster_says_so():
    """The GH200 of JUPITER (JSC's configuration page): 4 GPUs per node, each pair at 150 GB/s per direction, no
    switch, 200 Gb/s NDR200 per GPU. Its network from the catalogue: a pair reaches one link (150 GB/s at the share
    of the link rate 8 H100 reach on NVSwitch, 370 of 450), the 4 GPUs three; between nodes the NICs; the plan on the
    cluster names it, and its GEMMs run at the GH200's own measured ceiling (83.8% of 989 TFLOP/s)."""
    from trainingcost.config.frameworks import cluster

    dev, node = device("gh200"), cluster("jupiter")
    assert node.gpu == "gh200" and node.gpus_per_node == 4 and node.nic_gbps == 200
    assert device("NVIDIA GH200 480GB").name == "gh200" and device("gh200-141gb").name == "gh200-144gb"
    assert (dev.memory_bytes, dev.bandwidth_bytes_per_s, device("gh200-144gb").memory_bytes) == (96e9, 4000e9, 141e9)
    net = Network.of(dev.steptime, node.gpus_per_node, node.nic_gbps)
    link = 150e9 * 370 / 450
    assert net.intra_link_bw == pytest.approx(123e9, rel=1e-3) and link == pytest.approx(123e9, rel=0.003)
    S = 1e9
    alpha = dev.steptime["intra_latency_us"] * 1e-6
    assert net.all_gather(S, 2) == pytest.approx(alpha + 1 / 2 * S / 123e9)
    assert net.all_reduce(S, 4) == pytest.approx(alpha + 2 * 3 / 4 * S / min(370e9, 3 * 123e9))
    assert net.inter_bw == pytest.approx(200 / 8 * 1e9 * 0.9)
    model = DeviceModel.of(dev, "bf16")
    big = 8192
    tiles = (big // 128) * (big // 256)  # the H100's 128 x 256 x 64 tile, 132 SMs: 2048 tiles in 16 waves
    assert model.gemm_efficiency(big, big, big) == pytest.approx(0.838 * tiles / (16 * 132) * big / (big + 64), rel=1e-9)


def test_one_zero3_step_moves_three_times_the_parameters(gpt2, work):
    """Per FSDP unit (the root and each block, analytic/comm.py): gathered in forward and again in backward, its
    gradients reduce-scattered, each a collective of its own with one latency: 3 x (alpha + 15/16 S_u / B) per
    unit, plus one step latency per ring step, 15 each (the network model of benchmarks/collectives.csv). (Before
    the plan read comm.py: one lump of the whole model, 3 latencies, unpadded; comm.py's units pad the vocabulary's
    dim 0 to a multiple of 16, and each of the 13 units pays its own latency.)"""
    from trainingcost.analytic.comm import fsdp_collectives

    lay = Layout(gpus=16, global_batch=16, micro_batch=1, sharding="zero3", dp_overlap=0.0)
    pred = predict_step(gpt2, lay, A100, "bp", work)
    net = net_of(lay)
    units = [c.bytes for c in fsdp_collectives(gpt2, "bp", "zero2", 16, "bf16") if c.op == "all_gather"]
    assert len(units) == gpt2.layers + 1
    facts = model_facts(gpt2, ["bp"], "adam")
    psi = facts.parameters * model_share(facts, 1, 1) * PRECISIONS["bf16-mixed"].weights
    assert psi <= sum(units) < psi + 16 * gpt2.d_model * 2  # the whole model, the vocabulary padded
    bw = min(net.intra_bw, 8 * net.inter_bw)
    by_hand = 3 * sum(net.inter_alpha + 15 * net.inter_step + 15 / 16 * u / bw for u in units)
    assert net.inter_step > 0
    assert pred.parts["comm_dp"] == pytest.approx(by_hand)


@pytest.fixture(scope="module")
def tiny():
    return canonical_model(dict(arch="decoder", layers=2, d_model=8, heads=2, d_ff=16, vocab=250, seq_len=4,
                                batch=1), "")


@pytest.mark.parametrize("rule", ["bp", "kp", "wm", "tp", "lra", "pepita"])
@pytest.mark.parametrize("gpus", [2, 3])
@pytest.mark.parametrize("precision, dtype", [("fp32", "fp32"), ("bf16-mixed", "bf16")])
def test_the_plans_ddp_bytes_are_comm_models(tiny, rule, gpus, precision, dtype):
    """The plan's data-parallel collectives without sharding are comm.py's steady DDP step, byte for byte: the
    buckets (hooks rules, KP's B included, WM's B never sent) or the explicit rules' one flat all-reduce (TP's
    inverses and LRA's error weights included)."""
    from trainingcost.analytic.comm import step_collectives
    from trainingcost.analytic.steptime.step import data_parallel_collectives

    lay = Layout(gpus=gpus, global_batch=gpus, micro_batch=1, sharding="none", precision=precision)
    plan = data_parallel_collectives(tiny, lay, rule).all(lay.accumulation)
    model = step_collectives(tiny, rule, "ddp", gpus, dtype, 3)
    assert [(c.op, c.bytes, c.group, c.dtype) for c in plan] == [(c.op, c.bytes, c.group, c.dtype) for c in model]
    assert sum(c.bytes for c in plan) == sum(c.bytes for c in model) > 0


@pytest.mark.parametrize("rule", ["bp", "kp", "fa"])
@pytest.mark.parametrize("gpus", [2, 3])
@pytest.mark.parametrize("precision, dtype", [("fp32", "fp32"), ("bf16-mixed", "bf16")])
def test_the_plans_fsdp_bytes_are_comm_models(tiny, rule, gpus, precision, dtype):
    """ZeRO-3 / FSDP in the plan: per micro-batch, comm.py's FSDP2 step (every unit's padded gathers and
    reduce-scatters), byte for byte; ZeRO-1/2: comm.py's zero2 collectives, once per step."""
    from trainingcost.analytic.comm import step_collectives
    from trainingcost.analytic.steptime.step import data_parallel_collectives

    for sharding, parallel in (("fsdp", "fsdp"), ("zero3", "fsdp"), ("zero2", "zero2"), ("zero1", "zero2")):
        lay = Layout(gpus=gpus, global_batch=2 * gpus, micro_batch=1, sharding=sharding, precision=precision)
        ops = data_parallel_collectives(tiny, lay, rule)
        model = [(c.op, c.bytes, c.group, c.dtype) for c in step_collectives(tiny, rule, parallel, gpus, dtype, 3)]
        one = [(c.op, c.bytes, c.group, c.dtype) for c in (ops.micro_batch if parallel == "fsdp" else ops.step)]
        assert one == model
        assert sum(c.bytes for c in ops.all(lay.accumulation)) == \
            (lay.accumulation if parallel == "fsdp" else 1) * sum(b for _, b, _, _ in model)


def test_every_ddp_bucket_pays_one_latency(gpt2, work):
    """GPT-2 small in bf16 fills DDP's 1 MiB first bucket and several 25 MiB ones: the plan pays one all-reduce,
    with its latency, per bucket (the single-lump formula paid one)."""
    from trainingcost.analytic.comm import ddp_buckets

    lay = Layout(gpus=16, global_batch=16, micro_batch=1, sharding="none", dp_overlap=0.0)
    pred = predict_step(gpt2, lay, A100, "bp", work)
    net = net_of(lay)
    buckets = ddp_buckets(gpt2, "bp", "bf16")
    assert len(buckets) > 3
    by_hand = sum(net.all_reduce(b, 16) for b in buckets)
    ring = [net.inter_alpha + 2 * 15 * net.inter_step + 2 * 15 / 16 * b / min(net.intra_bw, 8 * net.inter_bw)
            for b in buckets]
    tree = [net.inter_alpha + 2 * net.tree_level + 2 * 15 / 16 * b / min(net.intra_bw, 16 * net.inter_bw)
            for b in buckets]
    assert by_hand == pytest.approx(sum(min(r, t) for r, t in zip(ring, tree)))
    assert pred.parts["comm_dp"] == pytest.approx(by_hand)
    lump = net.all_reduce(sum(buckets), 16)
    assert pred.parts["comm_dp"] > lump + (len(buckets) - 1) * net.inter_alpha


def test_interleaved_bubble(gpt2, work):
    """1F1B over p stages: the fill and drain are the stages other than the critical one, once each (over v with
    interleaving). GPT-2 on 4 stages: the last stage (3 blocks and the head) sets the pace, the other three hold 3
    blocks each and no head, so the bubble is (p - 1) / v of the critical stage's per-micro-batch time less its head's."""
    from trainingcost.analytic.steptime.step import head_times

    compute = ("matmul", "attention", "memory", "launch")
    lay1 = Layout(gpus=4, global_batch=8, micro_batch=1, pp=4)
    ht = head_times(gpt2, lay1, DeviceModel.of(A100, "bf16"), 2)
    head = sum(ht["fwd"][c] + ht["bwd"][c] for c in compute)

    def bubble(v):
        lay = Layout(gpus=4, global_batch=8, micro_batch=1, pp=4, interleave=v)
        pred = predict_step(gpt2, lay, A100, "bp", work)
        per_micro = sum(pred.parts[k] for k in (*compute, "comm_tp")) / lay.accumulation
        return pred.parts["bubble"], per_micro

    b1, m1 = bubble(1)
    b3, m3 = bubble(3)
    assert head > 0.05 * m1  # the head is a real share of the last stage
    assert b1 == pytest.approx((4 - 1) / 1 * (m1 - head))
    assert b3 == pytest.approx((4 - 1) / 3 * (m3 - head))


@pytest.mark.parametrize("slow_tp", [False, True])
def test_the_bubble_of_an_uneven_split_holds_the_head(slow_tp):
    """13 blocks on 4 stages with a small head: a full stage of 4 blocks sets the pace; the others hold 3 + 3 + 3
    blocks and the head, so the bubble is 9 blocks' serialised time per micro-batch and the head's. The critical stage
    holds no head, so one block's serialised time is its per-micro-batch time over 4. Also with tensor parallelism
    over a slow network, full recompute and half the collectives overlapped: the backward's collectives outlast its
    compute, and a block's share of the bubble still equals its share of the critical stage."""
    from trainingcost.analytic.steptime.step import head_times

    cfg = canonical_model({**preset_entry("gpt2-small"), "layers": 13, "vocab": 1000})
    extra = dict(tp=2, recompute="full", tp_overlap=0.5, gpus_per_node=1, nic_gbps=1.0) if slow_tp else {}
    lay = Layout(gpus=4 * (2 if slow_tp else 1), global_batch=8, micro_batch=1, pp=4, **extra)
    dev = DeviceModel.of(A100, "bf16")
    ht = head_times(cfg, lay, dev, 2)
    compute = ("matmul", "attention", "memory", "launch")
    head = sum(ht["fwd"][c] + ht["bwd"][c] for c in compute)  # no tensor-parallel collectives in the head
    pred = predict_step(cfg, lay, A100, "bp")
    assert "uneven" in pred.stage_split and "1 stages of 4 blocks" in pred.stage_split
    per_micro = sum(pred.parts[c] for c in (*compute, "comm_tp")) / lay.accumulation  # 4 blocks, no head
    if slow_tp:
        assert pred.parts["comm_tp"] > 0.5 * per_micro * lay.accumulation  # the collectives dominate
    assert pred.parts["bubble"] == pytest.approx(9 * per_micro / 4 + head, rel=1e-9)


def test_a_shared_memo_keeps_the_framework_fields_apart(gpt2, work):
    """The layout search shares one memo over thousands of layouts: layouts that differ only in ZeRO-1's sync, the
    reduction dtype or the pipeline split price as they do alone."""
    memo = {}
    base = dict(gpus=8, global_batch=64, micro_batch=2, pp=2, sharding="zero1")
    variants = [dict(), dict(zero1_sync="after_backward"), dict(grad_reduce="fp32"),
                dict(grad_reduce="fp32", zero1_sync="after_backward"), dict(pipeline_split="balanced")]
    for extra in variants + variants[::-1]:
        lay = Layout(**base, **extra)
        shared = predict_step(gpt2, lay, A100, "bp", work, memo)
        alone = predict_step(gpt2, lay, A100, "bp", work)
        assert (shared.step_time_s, shared.dp_bytes, shared.dp_collectives) == \
            (alone.step_time_s, alone.dp_bytes, alone.dp_collectives)


def test_one_tensor_parallel_block(gpt2, work):
    lay = Layout(gpus=2, global_batch=4, micro_batch=2, tp=2)
    pred = predict_step(gpt2, lay, A100, "bp", work)
    one = net_of(lay).all_reduce(2 * gpt2.seq_len * gpt2.d_model * 2, 2)  # b s d bf16 over 2 ranks
    blocks = gpt2.layers
    # BP: 2 all-reduces per block forward and 2 backward, per micro-batch
    assert pred.parts["comm_tp"] == pytest.approx(lay.accumulation * blocks * 4 * one)
    # PEPITA has no backward through the blocks but two forward passes: 4 all-reduces forward, none backward
    pep = predict_step(gpt2, lay, A100, "pepita", work)
    assert pep.parts["comm_tp"] == pytest.approx(lay.accumulation * blocks * 4 * one)


def test_dfa_broadcast_keeps_its_backward_out_of_the_bubble(gpt2, work):
    lay = Layout(gpus=4, global_batch=8, micro_batch=1, pp=4)
    bp = predict_step(gpt2, lay, A100, "bp", work)
    dfa = predict_step(gpt2, lay, A100, "dfa", work)
    assert dfa.parts["bubble"] < 0.6 * bp.parts["bubble"]


def test_rules_own_products_are_priced_at_their_own_shapes(gpt2):
    """DFA's extra work over BP is its d x d projections of the error at the head's input onto every block and the
    embedding output, priced by hand as GEMMs of shape (b s, d, d); WM's mirror steps are products with the weights alone, so no attention core; PEPITA's two
    forward passes pay BP's forward attention twice and its weight update none."""
    lay = Layout(gpus=1, global_batch=4, micro_batch=4)
    work = rule_work(gpt2, ["bp", "dfa", "wm", "pepita"])
    bp, dfa, wm, pep = (predict_step(gpt2, lay, A100, r, work) for r in ("bp", "dfa", "wm", "pepita"))
    dev = DeviceModel.of(A100, "bf16")
    b, s, d = lay.micro_batch, gpt2.seq_len, gpt2.d_model
    projection = (gpt2.layers + 1) * 2.0 * s * d * d  # FLOPs per sequence: every block and the embedding output
    assert projection == pytest.approx(sum(v for k, v in work["dfa"]["entries"].items() if k[0] == "error_projection"))
    by_hand = b * projection * dev.gemm(b * s, d, d) / (2.0 * b * s * d * d)
    assert dfa.parts["matmul"] - bp.parts["matmul"] == pytest.approx(by_hand, rel=1e-9)
    assert wm.parts["attention"] == pytest.approx(bp.parts["attention"], rel=1e-12)
    assert wm.parts["matmul"] > bp.parts["matmul"]
    # BP's forward attention alone: the forward classes' attention time per micro-batch
    from trainingcost.analytic.steptime.step import block_times

    fwd_core = gpt2.layers * block_times(gpt2, lay, dev, 2)["classes"][("attention", "fwd")]["attention"]
    assert pep.parts["attention"] == pytest.approx(2 * fwd_core, rel=1e-9)


@pytest.mark.parametrize("change, message", [
    (dict(pp=2, interleave=4), "--interleave: 4 does not divide the 6 blocks per stage"),
    (dict(interleave=2), "--interleave: 2 needs pipeline stages"),
    (dict(sequence_parallel=True), "--sequence-parallel: needs tensor parallelism"),
    (dict(nic_gbps=-1.0), "--nic-gbps: a positive number"),
    (dict(gpus_per_node=0), "--gpus-per-node: a positive integer"),
    # a step is priced on whole accumulations: 8 sequences over 2 replicas in micro-batches of 3 would leave one out
    (dict(micro_batch=3), "micro_batch: 3 does not divide the 4 sequences each data-parallel replica takes per step"),
    (dict(gpus=3, tp=2), "--gpus: 3 GPUs do not split into tensor x pipeline x context groups of 2 x 1 x 1"),
    (dict(gpus=4, cp=3), "--gpus: 4 GPUs do not split into tensor x pipeline x context groups of 1 x 1 x 3"),
    (dict(gpus=2, cp=0), "--cp: a positive integer (got 0)"),
    (dict(gpus=4, cp=2, attention="unfused"), "--cp: context parallelism 2 runs inside a fused attention kernel"),
    (dict(sharding="FULL_SHARD"), "sharding: 'FULL_SHARD' is not allowed (allowed: none, zero1, zero2, zero3, fsdp)"),
    (dict(precision="tf32"), "precision: 'tf32' is not allowed (allowed: fp32, bf16-mixed, fp16-mixed, fp8-mixed)"),
])
def test_impossible_values_are_one_line(gpt2, change, message):
    lay = Layout(**{**dict(gpus=2, global_batch=8, micro_batch=1), **change})
    with pytest.raises(ConfigError) as err:
        check_layout(gpt2, lay)
    assert message in str(err.value) and "\n" not in str(err.value)


def _comm_share(cfg, work, gpus, sharding, tp):
    # Nothing overlapped: with overlap, data-parallel traffic hides behind compute until compute shrinks below it,
    # while a fixed per-GPU cost (the unsharded optimizer) grows as a share, so the exposed share may dip by 0.01%.
    lay = Layout(gpus=gpus, global_batch=256, micro_batch=1, tp=tp, sharding=sharding, dp_overlap=0.0)
    pred = predict_step(cfg, lay, A100, "bp", work)
    return sum(pred.parts[k] for k in ("comm_tp", "comm_dp", "comm_pp")) / pred.step_time_s


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["none", "zero1", "zero3"]), st.sampled_from([1, 2]), st.integers(0, 6), st.integers(1, 3))
def test_more_gpus_at_a_fixed_global_batch_never_lower_the_comm_share(gpt2, work, sharding, tp, k, more):
    small = tp * 2**k
    large = small * 2**more
    assume(large // tp <= 256)  # every data-parallel rank gets at least one of the 256 sequences
    assert _comm_share(gpt2, work, large, sharding, tp) >= _comm_share(gpt2, work, small, sharding, tp) - 1e-12


@settings(max_examples=12, deadline=None)
@given(st.floats(10, 400), st.floats(1.01, 8), st.sampled_from(["none", "zero3"]), st.sampled_from([1, 4]))
def test_a_faster_link_never_slows_a_step(gpt2, work, nic, factor, sharding, pp):
    def step(gbps):
        lay = Layout(gpus=64, global_batch=64, micro_batch=1, pp=pp, sharding=sharding, nic_gbps=gbps)
        return predict_step(gpt2, lay, A100, "bp", work).step_time_s

    assert step(nic * factor) <= step(nic) + 1e-12


def test_every_published_run_loads_and_plans():
    """Issue 37: at least 100 rows, a third FSDP/ZeRO-3 and a third H100 or newer; each row states its framework (a
    catalogue entry) and no overlap or link of its own: the columns that held per-row assumptions are gone."""
    from trainingcost.config.frameworks import clusters, frameworks

    rows = runs.load(ROOT / "benchmarks" / "published_runs.csv")
    assert len(rows) >= 100 and len({r["source"] for r in rows}) >= 7
    assert sum(r["sharding"] in ("fsdp", "zero3") for r in rows) >= len(rows) / 3
    assert sum(r["gpu"] in ("h100-sxm", "h100-pcie", "h200", "b200") for r in rows) >= len(rows) / 3
    assert not {"dp_overlap", "zero3_granularity", "nic_gbps", "gpus_per_node"} & set(rows[0])
    assert all(r["framework"] in frameworks() and (not r["cluster"] or r["cluster"] in clusters()) for r in rows)
    assert all(r["citation"] and r["measured_definition"] for r in rows)
    for row in rows:
        cfg, lay = runs.model_of(row), runs.layout_of(row)
        assert lay.dp * lay.tp * lay.pp * lay.cp == lay.gpus == int(row["gpus"]) and lay.dp == int(row["dp"])
        assert runs.measured_step_time(row) > 0
        pred = predict_step(cfg, lay, device(row["gpu"]))
        assert pred.step_time_s > 0 and 0 < pred.mfu < 1


def test_a_published_rows_stated_parameter_count_is_the_models():
    """Where a source prints its model's parameter count (the ``stated_parameters`` column: llm-foundry's benchmark
    tables' NumParams), the row's architecture columns give exactly that many parameters. The MPT benchmark models are
    the llm-foundry defaults (MPTConfig: learned positions, biases, the head tied to the embedding without a bias),
    which a learned table of seq_len x d makes grow with the sequence: 1b at 512 and 32k tokens differ by
    (32768 - 512) x 2048 parameters."""
    from trainingcost.analytic.memory import memory_table
    from trainingcost.config import configs_frame

    rows = [r for r in runs.load(ROOT / "benchmarks" / "published_runs.csv") if r.get("stated_parameters")]
    assert len(rows) >= 45 and {r["source"] for r in rows} >= {"mosaicml-llm-foundry"}
    for row in rows:
        frame = configs_frame([("", runs.model_of(row))])
        assert int(memory_table(frame, ["bp"]).parameter_count.iloc[0]) == int(row["stated_parameters"]), row["run"]
    by_seq = {int(r["seq_len"]): int(r["stated_parameters"]) for r in rows if r["run"].startswith("mpt-1b_h100")}
    assert by_seq[32768] - by_seq[512] == (32768 - 512) * 2048
    # The Ultra-Scale Playbook's sweeps name their models by parameter count (1.34B ... 80B): nanotron ties the
    # embedding below 10,000 FFN features (scripts/scaling_benchmarks.py), which only the tied 1.34B and 3.57B match
    named = {}
    for row in runs.load(ROOT / "benchmarks" / "layout_sweeps.csv"):
        if row["source"] == "ultrascale-playbook":
            named.setdefault(row["sweep"].split("_")[1], row)
    assert set(named) == {"1.34B", "3.57B", "8.86B", "80B"}
    for size, row in named.items():
        count = int(memory_table(configs_frame([("", runs.model_of(row))]), ["bp"]).parameter_count.iloc[0])
        assert f"{count / 1e9:.{0 if size == '80B' else 2}f}B" == size, (size, count)


def test_fp8_on_a_device_without_fp8_is_one_line(gpt2, work):
    """predict_step itself refuses a precision the device cannot run (the published-runs benchmarks call it without
    the plan's checks): one line naming what the device lacks, not a TypeError on its missing peak."""
    lay = Layout(gpus=2, global_batch=8, micro_batch=1, precision="fp8-mixed")
    with pytest.raises(ConfigError, match=r"^precision: fp8-mixed needs bf16 and fp8 arithmetic, which a100-80gb has "
                                          r"not, no fp8 \(allowed on a100-80gb: fp32, bf16-mixed, fp16-mixed\)$"):
        predict_step(gpt2, lay, A100, "bp", work)


def test_a_published_rows_columns_in_other_spellings_plan_as_ours():
    """How other tables write a run (FSDP's FULL_SHARD, ZeRO-3, BF16, sdpa, RoPE, RMSNorm, nvidia-smi's device name,
    AWS's instance type) reads as this project's names: the same model, layout and step as the row written our way;
    a name that could mean two things (HYBRID_SHARD without its replica groups, a bare A100) is refused in one line."""
    row = next(r for r in runs.load(ROOT / "benchmarks" / "published_runs.csv")
               if r["sharding"] == "fsdp" and r["framework"].startswith("torchtitan") and r["attention"] in ("", "flash"))
    theirs = {**row, "sharding": "FULL_SHARD", "precision": "BF16", "attention": "sdpa", "positions": "RoPE",
              "norm": "RMSNorm", "ffn": "SwiGLU", "arch": "decoder-only", "recompute": row["recompute"].upper()
              if not row["recompute"].startswith("ops:") else row["recompute"],
              "gpu": {"a100-80gb": "NVIDIA A100-SXM4-80GB", "h100-sxm": "NVIDIA H100 80GB HBM3"}.get(row["gpu"], row["gpu"])}
    assert runs.model_of(theirs) == runs.model_of(row)
    assert runs.layout_of(theirs) == runs.layout_of({**row, "attention": "flash"})
    mine = predict_step(runs.model_of(row), runs.layout_of({**row, "attention": "flash"}), device(row["gpu"]))
    assert predict_step(runs.model_of(theirs), runs.layout_of(theirs), device(theirs["gpu"])).step_time_s \
        == mine.step_time_s
    assert runs.spelled({"sharding": "ZeRO-3", "precision": "bfloat16", "recompute": "true", "bias": "False"}) == \
        {"sharding": "zero3", "precision": "bf16-mixed", "recompute": "full", "bias": "none"}
    assert runs.spelled({"sharding": "HYBRID_SHARD", "replicate": "4"})["sharding"] == "fsdp"
    with pytest.raises(ConfigError, match=r"^published run '.*': sharding: 'HYBRID_SHARD' \(HSDP\) needs its replica "
                                          r"groups in the replicate column \(2 or more\), or give fsdp$"):
        runs.layout_of({**row, "sharding": "HYBRID_SHARD"})
    assert runs.spelled({"recompute": "OPS:k+o"})["recompute"] == "ops:k+o"
    assert [runs.spelled({"attention": a})["attention"] for a in ("xformers", "Triton", "cudnn_flash_te", "TE",
                                                                  "dot_product")] == \
        ["flash", "flash", "cudnn", "cudnn", "unfused"]
    # any other declared architecture option as a column of its kind; a bool that is neither is one line
    qwen3 = {**row, "qk_norm": "head", "head_dim": "256", "sliding_window": "1024", "tie_embeddings": "yes"}
    assert runs.model_of(qwen3) == runs.model_of(row).replace(qk_norm="head", head_dim=256, sliding_window=1024,
                                                              tie_embeddings=True)
    with pytest.raises(ConfigError, match=r"^published run '.*': tie_embeddings: true or false \(got 'perhaps'\)$"):
        runs.model_of({**row, "tie_embeddings": "perhaps"})
    # OLMo 2's blocks (pre-norm without the column); a position the option does not know is its one line
    olmo2 = {**row, "norm_position": "output", "qk_norm": "projection"}
    assert runs.model_of(olmo2) == runs.model_of(row).replace(norm_position="output", qk_norm="projection")
    with pytest.raises(ConfigError, match=r"norm_position: 'sandwich' is not allowed"):
        runs.model_of({**row, "norm_position": "sandwich"})
    # a row's attention kernel is the one its GPU runs: sdpa (FlashAttention-2) on a V100 is unfused, fa3 on an A100
    # FlashAttention-2, as the plan's --attention falls back
    assert runs.layout_of({**row, "gpu": "v100", "attention": "sdpa", "precision": "fp16"}).attention == "unfused"
    assert runs.layout_of({**row, "gpu": "a100-80gb", "attention": "fa3"}).attention == "flash"
    with pytest.raises(ConfigError, match=r"^published run '.*': measured_value: a number \(got 'n/a'\)$"):
        runs.measured_step_time({**row, "measured_value": "n/a"})
    blank = runs.layout_of({**row, "sequence_parallel": " ", "cluster": " ", "framework": " torchtitan "})
    assert blank == runs.layout_of({**row, "sequence_parallel": "0", "cluster": "", "framework": "torchtitan"})
    with pytest.raises(ConfigError, match=r"^gpu: 'A100' names more than one catalogue entry \(a100-40gb, a100-80gb\)"):
        device("A100")
    from trainingcost.config.frameworks import cluster

    assert cluster("p5").name == "aws-p5" and cluster("p4d.24xlarge").name == "aws-p4d" \
        and cluster("a3-mega").name == "gcp-a3-mega"
    # the providers' own names for their machines, as each cluster's aliases list them
    assert cluster("a3-megagpu-8g").name == "gcp-a3-mega" and cluster("A3-HIGHGPU-8G").name == "gcp-a3-high"
    assert cluster("Standard_ND96isr_H100_v5").name == "azure-nd-h100-v5"
    assert cluster("p5e.48xlarge").name == "aws-p5e" and cluster("Standard_ND96amsr_A100_v4").name == "azure-ndm-a100-v4"


def test_a_published_row_without_optional_columns_takes_the_plans_defaults():
    """A row from a table with fewer columns: what it leaves out is the plan's default (the framework's sharding and
    attention, tp = pp = 1, no recompute, the device's best mixed precision, a model entry's defaults), the same step
    as the row with those values written; a required column missing is one line naming it."""
    row = next(r for r in runs.load(ROOT / "benchmarks" / "published_runs.csv")
               if r["source"] == "torchtitan" and r["recompute"] == "none" and r["sharding"] == "fsdp")
    optional = ("tp", "pp", "cp", "replicate", "interleave", "sequence_parallel", "sharding", "attention", "precision",
                "cluster", "elementwise")
    short = {k: v for k, v in row.items() if k not in optional}
    assert row["tp"] == row["pp"] == "1" and row["precision"] == "bf16-mixed" and not row["cluster"]
    assert runs.layout_of(short) == runs.layout_of({**row, "attention": "", "elementwise": ""})
    empty = {**row, **{k: "" for k in optional}}
    assert runs.layout_of(empty) == runs.layout_of(short)
    model = {k: v for k, v in row.items() if k not in ("kv_heads", "d_ff", "norm", "ffn", "positions", "bias")}
    assert runs.model_of(model) == runs.model_of({**row, "kv_heads": row["heads"], "d_ff": 4 * int(row["d_model"]),
                                                   "norm": "layernorm", "ffn": "gelu", "positions": "sinusoidal",
                                                   "bias": "all"})
    for key in ("micro_batch", "d_model", "measured_value"):
        with pytest.raises(ConfigError, match=rf"^published run '{row['run']}': {key}: required \(the column is "
                                              r"missing or empty\)$"):
            broken = {k: v for k, v in row.items() if k != key}
            runs.model_of(broken), runs.layout_of(broken), runs.measured_step_time(broken)


@pytest.mark.parametrize("table", ["published_runs_blackwell.csv", "published_runs_moe.csv", "published_runs_amd.csv",
                                   "published_runs_schedules.csv", "published_runs_offload.csv",
                                   "layout_sweeps.csv"])
def test_every_row_of_the_tables_scored_apart_plans(table):
    """The benches leave a refused row out of their figures (and list it): so every row they ship must plan, or a
    figure would silently stand on fewer rows. The ranking's 1,794 layouts are read, the other tables priced."""
    rows = runs.load(ROOT / "benchmarks" / table)
    assert rows
    for row in rows:
        cfg, lay = runs.model_of(row), runs.layout_of(row)
        assert runs.measured_step_time(row) > 0 and lay.dp == int(row["dp"])
        if table != "layout_sweeps.csv":
            assert predict_step(cfg, lay, device(row["gpu"])).step_time_s > 0


def test_the_accuracy_bench_leaves_a_refused_row_out_and_says_so(tmp_path):
    """One row the model cannot take (a GPU outside the catalogue) does not stop the others: the bench scores the
    rest and lists the refused row with its one line."""
    import csv

    rows = runs.load(ROOT / "benchmarks" / "published_runs.csv")
    keep = [r for r in rows if r["source"] == "narayanan2021-table1"]
    bad = {**keep[0], "run": "on a made-up GPU", "gpu": "h900"}
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([*keep, bad])
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_plan_accuracy.py"), "--csv", str(path),
                           "--no-loso"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(keep)} rows from 1 source tables" in done.stdout
    assert "1 rows refused (not in the figures above):\n  narayanan2021-table1 / on a made-up GPU: gpu: 'h900' is " \
           "not in the hardware catalogue" in done.stdout


@pytest.mark.parametrize("sharding, parallel", [("none", "ddp"), ("fsdp", "fsdp")])
def test_the_plans_row_carries_comm_models_bytes(tiny, sharding, parallel):
    """`plan` in predicted mode reports the data-parallel bytes and collectives of one step on one GPU: comm.py's
    (DDP: one steady step; FSDP: one step per micro-batch), exactly."""
    from trainingcost.analytic.comm import step_collectives
    from trainingcost.analytic.plan import Efficiency, PlanSpec, plan_table

    spec = PlanSpec(tokens=1e6, gpus=3, sharding=sharding, global_batch=6, micro_batch=1, dp_overlap=0.0,
                    efficiency=Efficiency("predicted", 1.0, "predicted"))
    table = plan_table(tiny, spec, A100, ["bp", "kp"], ["executed"]).set_index("rule")
    for rule in ("bp", "kp"):
        model = step_collectives(tiny, rule, parallel, 3, "bf16", 3)
        times = table.at[rule, "grad_accumulation"] if parallel == "fsdp" else 1
        assert table.at[rule, "step_dp_bytes"] == times * sum(c.bytes for c in model)
        assert table.at[rule, "step_dp_collectives"] == times * len(model)
        assert table.at[rule, "step_comm_dp_s"] > 0


# -- issue 37: uneven pipeline stages, frameworks, clusters, the network of benchmarks/collectives.csv ---------------


def test_the_network_of_the_published_collectives_by_hand():
    """NVLS inside a node where it beats the ring; between nodes the faster of the ring (a latency per ring step) and
    the tree (a latency per level); two nodes' tree at twice the NICs' rate; all-to-all at the GPU's own NICs only."""
    import math

    net = Network(gpus_per_node=8, intra_bw=370e9, intra_alpha=40e-6, inter_bw=45e9, inter_alpha=40e-6,
                  nvls_bw=480e9 * 8 / 14, inter_step=2e-6, tree_level=160e-6)
    S = 2**30
    assert net.all_reduce(S, 8) == pytest.approx(40e-6 + 2 * 7 / 8 * S / 480e9)  # NVLS over the node
    # NVLS sends and receives each rank's buffer once at any group size: 274.3 GB/s of algorithm bandwidth, against
    # the ring's 370 x 4 / 6 = 246.7 on 4 GPUs (NVLS) and 370 x 3 / 4 = 277.5 on 3 (the ring); none on 2 (NCCL)
    assert net.all_reduce(S, 4) == pytest.approx(40e-6 + S / (480e9 * 8 / 14))
    assert net.all_reduce(S, 3) == pytest.approx(40e-6 + 2 * 2 / 3 * S / 370e9)
    assert net.all_reduce(S, 2) == pytest.approx(40e-6 + S / 370e9)
    from trainingcost.analytic.steptime.device import GENERIC
    from trainingcost.config.hardware import device

    h100 = Network.of({**GENERIC, **device("h100-sxm").steptime})  # the catalogue's 480 GB/s bus over 8 GPUs
    assert h100.nvls_bw == pytest.approx(480e9 * 8 / 14)
    assert Network.of({**GENERIC, **device("a100-80gb").steptime}).nvls_bw is None  # no NVLink SHARP on A100
    # two nodes: tree at min(480, 2 x 8 x 45 = 720) GB/s, one level each way, against the ring at min(370, 360)
    tree2 = 40e-6 + 2 * 1 * 160e-6 + 2 * 15 / 16 * S / 480e9
    ring2 = 40e-6 + 2 * 15 * 2e-6 + 2 * 15 / 16 * S / 360e9
    assert net.all_reduce(S, 16) == pytest.approx(min(tree2, ring2)) == pytest.approx(tree2)
    # 32 nodes: the ring pays 2 x 255 step latencies, the tree 2 x 5 levels; both at 360 GB/s
    ring = 40e-6 + 2 * 255 * 2e-6 + 2 * 255 / 256 * S / 360e9
    tree = 40e-6 + 2 * math.ceil(math.log2(32)) * 160e-6 + 2 * 255 / 256 * S / 360e9
    assert net.all_reduce(S, 256) == pytest.approx(min(ring, tree))
    assert net.all_gather(S, 256) == pytest.approx(40e-6 + 255 * 2e-6 + 255 / 256 * S / 360e9)
    # all-to-all over 4 nodes: 24 of 32 shares leave the node over the GPU's own 45 GB/s
    assert net.all_to_all(S, 32) == pytest.approx(40e-6 + 3 * 2e-6 * 8 + S * 24 / 32 / 45e9)


def test_the_collectives_benchmark_scores_the_network_model():
    """benchmarks/bench_collectives.py runs over every cited row and its MAPE on messages of 1 MiB and more stays
    under the issue's 15% (the rows and the fitted latencies are both in the repository: a change to the network
    model that breaks the agreement fails here)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_collectives", ROOT / "benchmarks" / "bench_collectives.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.evaluate(ROOT / "benchmarks" / "collectives.csv", 2**20)
    assert len(rows) >= 300 and len({r["source"] for r in rows}) >= 8
    assert all(r["citation"] for r in rows)
    assert bench.mape(rows) <= 15.0


def test_an_uneven_split_is_paced_by_its_slowest_stage(work):
    """13 blocks on 4 stages: stages of 4, 3, 3 and 3 (the head on one of 3). With a small head (vocabulary 1000) the full
    stage of 4 sets the pace: its compute per micro-batch is 4 blocks' and no head, which a 16-block model split
    evenly over 4 stages (4 blocks and the head on the last) exceeds by the head's time exactly."""
    from trainingcost.analytic.steptime.step import block_times, critical_stage, head_times

    cfg13 = canonical_model({**preset_entry("gpt2-small"), "layers": 13, "vocab": 1000})
    cfg16 = canonical_model({**preset_entry("gpt2-small"), "layers": 16, "vocab": 1000})
    lay = Layout(gpus=4, global_batch=8, micro_batch=1, pp=4)
    dev = DeviceModel.of(A100, "bf16")
    bt, ht = block_times(cfg13, lay, dev, 2), head_times(cfg13, lay, dev, 2)
    blocks, with_head, split = critical_stage(13, 4, bt, ht)
    assert (blocks, with_head) == (4, False) and "uneven: 1 stages of 4 blocks, 3 of 3" in split
    compute = ("matmul", "attention", "memory", "launch")
    p13 = predict_step(cfg13, lay, A100, "bp")
    p16 = predict_step(cfg16, lay, A100, "bp")
    head = lay.accumulation * sum(ht["fwd"][c] + ht["bwd"][c] for c in compute)
    assert sum(p16.parts[c] for c in compute) == pytest.approx(sum(p13.parts[c] for c in compute) + head)
    assert "uneven" in p13.stage_split and p16.stage_split == "4 blocks per stage"


def test_a_heavy_head_moves_the_pace_to_the_last_stage():
    """GPT-2's head (a vocabulary of 50,257 at 1,024 tokens) is heavier than a block: the last stage (the floor of blocks / p plus the
    head) sets the pace."""
    from trainingcost.analytic.steptime.step import block_times, critical_stage, head_times

    cfg = canonical_model({**preset_entry("gpt2-small"), "layers": 13})
    lay = Layout(gpus=4, global_batch=8, micro_batch=1, pp=4)
    dev = DeviceModel.of(A100, "bf16")
    assert critical_stage(13, 4, block_times(cfg, lay, dev, 2), head_times(cfg, lay, dev, 2))[:2] == (3, True)


def test_the_plan_takes_a_pipeline_that_does_not_divide_the_layers_and_says_its_split():
    """Issue 37: `plan` refused any --pp that does not divide the layers; an 80-layer model on 3 stages is planned,
    its memory the fullest stage's (27 blocks), and the split said in one line."""
    from trainingcost.analytic.plan import PREDICTED_SOURCE, Efficiency, PlanSpec, plan_table
    from trainingcost.analytic.plan_facts import fullest_stage

    predicted = Efficiency("predicted", 1.0, PREDICTED_SOURCE)

    cfg = canonical_model(preset_entry("llama-2-70b"))
    h100 = device("h100-sxm")
    spec = PlanSpec(tokens=1e12, gpus=48, tp=8, pp=3, sharding="zero1", global_batch=96, micro_batch=1,
                    efficiency=predicted)
    table = plan_table(cfg, spec, h100, ["bp"], ["executed"])
    assert "uneven: 2 stages of 27 blocks and 1 of 26" in table["pipeline_split"].iloc[0]
    facts = model_facts(cfg, ["bp"], "adam")
    assert fullest_stage(80, 3) == 27
    assert model_share(facts, 8, 3) == pytest.approx(
        (facts.blocks_parameters * 27 / 80 + facts.stage_end_parameters) / (8 * facts.parameters))
    with pytest.raises(ConfigError, match="pp: pipeline-parallel degree 96 exceeds the 80 blocks"):
        plan_table(cfg, PlanSpec(tokens=1e12, gpus=96, tp=1, pp=96, sharding="none", efficiency=predicted), h100, ["bp"], ["executed"])


def test_every_framework_and_cluster_is_cited_and_read_by_the_model(gpt2, work):
    """Each catalogued framework states every field with a source; its overlap reaches the step: a framework that
    overlaps tensor-parallel communication hides it behind the products, one that does not leaves it exposed."""
    from trainingcost.config.frameworks import FRAMEWORK_FIELDS, OPTIONAL, clusters, framework, frameworks, parse_framework

    for fw in frameworks().values():
        assert set(FRAMEWORK_FIELDS) <= set(fw.sources) <= {*FRAMEWORK_FIELDS, *OPTIONAL, "replicate"} and \
            all(fw.sources.values())
        assert bool(fw.can["replicate"]) == ("replicate" in fw.sources)  # hybrid sharding claimed only with a source
        assert fw.pipeline_split == "even" or "pipeline_split" in fw.sources  # a stated split names its source
    assert framework("nanotron").pipeline_split == "balanced" and framework("megatron-core").pipeline_split == "even"
    entry = {k: v for k, v in vars(framework("nanotron")).items() if k in FRAMEWORK_FIELDS}
    entry.update(can={**entry["can"], "shardings": list(entry["can"]["shardings"])}, pipeline_split="greedy",
                 cite={k: "src" for k in (*FRAMEWORK_FIELDS, "pipeline_split")})
    with pytest.raises(ConfigError, match=r"^f\.pipeline_split: 'greedy' is not allowed \(allowed: even, balanced\)$"):
        parse_framework("x", entry, {"src": "a document"}, "f")
    for c in clusters().values():
        assert c.source and c.gpus_per_node >= 1 and c.nic_gbps > 0
    nemo, core = framework("nemo"), framework("megatron-core")
    base = dict(gpus=8, global_batch=8, micro_batch=1, tp=8)
    exposed = predict_step(gpt2, Layout(**base, tp_overlap=core.tp_overlap), A100, "bp", work)
    hidden = predict_step(gpt2, Layout(**base, tp_overlap=nemo.tp_overlap), A100, "bp", work)
    assert 0 <= hidden.parts["comm_tp"] < exposed.parts["comm_tp"]
    assert hidden.step_time_s == pytest.approx(exposed.step_time_s - exposed.parts["comm_tp"] + hidden.parts["comm_tp"])
    big = dict(gpus=8, global_batch=64, micro_batch=64, tp=8)  # compute beside each collective outlasts it
    assert predict_step(gpt2, Layout(**big, tp_overlap=1.0), A100, "bp", work).parts["comm_tp"] == 0.0


@pytest.mark.parametrize("flags, message", [
    (["--framework", "jax"], "--framework: 'jax' is not in the framework catalogue (closest: paxml, maxtext; all "),
    (["--cluster", "my-lab"], "--cluster: 'my-lab' is not in the cluster catalogue (e.g. dgx-a100"),
    ([], "--gpu: required (a device of the hardware catalogue"),
])
def test_a_wrong_framework_or_cluster_is_one_line(flags, message, capsys):
    from trainingcost import cli

    extra = [] if flags and flags[0] == "--framework" else []
    status = cli.main(["plan", "--preset", "gpt2-small", "--tokens", "1e9", *flags,
                       *(["--gpu", "a100-80gb"] if flags and flags[0] == "--framework" else []), *extra])
    err = capsys.readouterr().err
    assert status != 0 and err.count("\n") == 1 and message in err


def test_a_cluster_gives_the_gpu_and_the_network(capsys):
    """--cluster aws-p4d: its A100 40GB, 8 GPUs per node and 400 Gb/s per node (50 per GPU), said in the
    assumptions; a slower network than a DGX's makes a data-parallel step slower."""
    import json

    from trainingcost import cli

    common = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpus", "64", "--sharding", "none", "--rule", "bp",
              "--dp-overlap", "0"]
    assert cli.main([*common, "--cluster", "aws-p4d", "--format", "json"]) == 0
    p4d = json.loads(capsys.readouterr().out)[0]
    assert cli.main([*common, "--cluster", "dgx-a100-40gb", "--format", "json"]) == 0
    dgx = json.loads(capsys.readouterr().out)[0]
    assert p4d["gpu"] == dgx["gpu"] == "a100-40gb" and "aws-p4d" in p4d["source_network"]
    assert p4d["step_comm_dp_s"] > dgx["step_comm_dp_s"] > 0
    assert cli.main([*common, "--cluster", "aws-p4d"]) == 0
    assert "network: cluster aws-p4d" in capsys.readouterr().out


def test_nanotrons_balanced_split_by_hand():
    """nanotron (models/base.py build_model, models/llama.py get_block_compute_costs) assigns its pipeline blocks in
    order, each to the current stage, which ends after the unit whose cumulative cost passes total x (r + 1) / pp;
    a decoder layer costs 4 d^2 + 3 d d_ff, the LM head V d. The Playbook's 1.34B (d 2048, d_ff 8192, V 131072, 16
    layers): a layer 67,108,864, the head 268,435,456 (4 layers' worth), total 20 layers' worth. pp 4: thresholds
    5, 10, 15, 20 layers' worth; stage 1 ends after layer 6 (6 > 5), stage 2 after 11, stage 3 after 16, and the
    head alone on stage 4: 6/5/5/0. pp 8 (thresholds 2.5, 5, ...): 3/3/2/3/2/3, the head on stage 7, stage 8 empty."""
    from trainingcost.analytic.plan_facts import fullest_stage, stage_split, stages

    cfg = canonical_model(dict(arch="decoder", layers=16, d_model=2048, heads=32, d_ff=8192, vocab=131072,
                               seq_len=4096, norm="rmsnorm", ffn="swiglu", positions="rotary", bias="none"), "")
    split = stage_split(cfg, "balanced")
    assert split == ("balanced", 4 * 2048**2 + 3 * 2048 * 8192, 131072 * 2048) == ("balanced", 67108864, 268435456)
    assert stages(16, 4, split) == ((6, False), (5, False), (5, False), (0, True))
    assert stages(16, 8, split) == ((3, False), (3, False), (2, False), (3, False), (2, False), (3, False), (0, True),
                                    (0, False))
    assert stages(16, 4) == ((4, False), (4, False), (4, False), (4, True))  # Megatron's even split
    assert stages(13, 4) == ((4, False), (3, False), (3, False), (3, True))
    assert fullest_stage(16, 4, split) == 6 and fullest_stage(16, 4) == 4
    assert fullest_stage(8, 4, split, of=16) == 3  # half the blocks (e.g. the checkpointed ones): 8 x 6 / 16


def test_the_framework_decides_the_split_in_time_and_memory():
    """The same layout under nanotron (balanced) and under Megatron-Core (even): nanotron's critical stage is the
    first, 6 blocks and no head, where Megatron's last holds 4 blocks and the head (4 blocks' worth): 6 < 8, so
    nanotron's step is shorter; its fullest stage holds 6 blocks, so its parameters per GPU and its activations (1F1B:
    pp micro-batches of the first stage's blocks in flight, 4 x 6 of 16) are larger."""
    from trainingcost.analytic.plan import PREDICTED_SOURCE, Efficiency, PlanSpec, plan_table
    from trainingcost.analytic.steptime.step import block_times, critical_stage, head_times

    cfg = canonical_model(dict(arch="decoder", layers=16, d_model=2048, heads=32, d_ff=8192, vocab=131072,
                               seq_len=4096, norm="rmsnorm", ffn="swiglu", positions="rotary", bias="none"), "")
    h100 = device("h100-sxm")
    lay = Layout(gpus=4, global_batch=8, micro_batch=1, pp=4)
    dev = DeviceModel.of(h100, "bf16")
    bt, ht = block_times(cfg, lay, dev, 2), head_times(cfg, lay, dev, 2)
    from trainingcost.analytic.plan_facts import stage_split

    assert critical_stage(16, 4, bt, ht, stage_split(cfg, "balanced"))[:2] == (6, False)
    assert critical_stage(16, 4, bt, ht)[:2] == (4.0, True)
    even = predict_step(cfg, lay, h100, "bp")
    balanced = predict_step(cfg, dataclasses.replace(lay, pipeline_split="balanced"), h100, "bp")
    assert balanced.step_time_s < even.step_time_s and "6/5/5/0" in balanced.stage_split
    spec = PlanSpec(tokens=1e9, gpus=4, pp=4, sharding="none", global_batch=8, micro_batch=1,
                    efficiency=Efficiency("predicted", 1.0, PREDICTED_SOURCE))
    rows = {name: plan_table(cfg, dataclasses.replace(spec, pipeline_split=name), h100, ["bp"], ["executed"]).iloc[0]
            for name in ("even", "balanced")}
    assert rows["balanced"]["mem_activations"] == pytest.approx(rows["even"]["mem_activations"] * 4 * 6 / 16)
    assert rows["balanced"]["mem_parameters"] > rows["even"]["mem_parameters"]
    assert "6/5/5/0" in rows["balanced"]["pipeline_split"]
    assert rows["balanced"]["step_time_s"] == pytest.approx(balanced.step_time_s)


def test_a_device_without_flashattention_runs_the_frameworks_attention_unfused(capsys):
    """FlashAttention does not run on Volta (config/hardware.yaml, flash_attention: false): a framework that uses it
    elsewhere (FSDP2, torchtitan) prices a V100's attention unfused, with its kept scores in memory; an A100 keeps the
    fused kernel; a published row's own attention column falls back the same way (the kernel its GPU can run), as
    the plan's --attention does."""
    import json

    from trainingcost import cli

    v100 = device("v100")
    assert v100.attention_kernel("flash") == "unfused" and v100.attention_kernel("unfused") == "unfused"
    assert A100.attention_kernel("flash") == "flash"
    common = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpus", "8", "--rule", "bp", "--framework",
              "fsdp2", "--format", "json", "--micro-batch", "8"]
    assert cli.main([*common, "--gpu", "v100"]) == 0
    on_v100 = json.loads(capsys.readouterr().out)[0]
    gpt2 = canonical_model(preset_entry("gpt2-small"))
    work = rule_work(gpt2, ["bp"])
    lay = dict(gpus=8, global_batch=on_v100["global_batch"], micro_batch=8, sharding="fsdp", precision="fp16-mixed",
               shard_copies=True)  # FSDP2 copies through its collectives' buffers
    unfused = predict_step(gpt2, Layout(**lay, attention="unfused"), v100, "bp", work)
    flash = predict_step(gpt2, Layout(**lay, attention="flash"), v100, "bp", work)
    assert on_v100["step_time_s"] == pytest.approx(unfused.step_time_s, rel=1e-9)
    assert unfused.step_time_s != pytest.approx(flash.step_time_s, rel=1e-6)
    row = {k: v for k, v in runs.load(ROOT / "benchmarks" / "published_runs.csv")[0].items()}
    assert runs.layout_of({**row, "gpu": "v100", "attention": ""}).attention == "unfused"
    assert runs.layout_of({**row, "gpu": "a100-80gb", "attention": ""}, "fsdp2").attention == "flash"
    assert runs.layout_of({**row, "gpu": "v100", "attention": "flash"}).attention == "unfused"
    assert runs.layout_of({**row, "gpu": "v100", "attention": "unfused"}).attention == "unfused"
    assert cli.main([*common[:-4], "--micro-batch", "8", "--gpu", "v100"]) == 0
    assert "attention unfused: neither FlashAttention nor cuDNN's fused attention runs on v100" in " ".join(capsys.readouterr().out.split())


def test_a_clusters_measured_nic_efficiency_prices_its_links_by_hand():
    """A cluster whose source measured its collectives below line rate (jean-zay-v100: NCCL all-reduce at 44-57 Gb/s
    of the nodes' 400) carries that share; the network between nodes runs at nic x share / 8 bytes per second per
    GPU, the device's usual 0.9 elsewhere. A share outside (0, 1] is one line naming the field."""
    from trainingcost.config.frameworks import cluster, parse_cluster

    jz = cluster("jean-zay-v100")
    assert jz.gpu == "v100" and jz.gpus_per_node == 4 and jz.latencies["nic_efficiency"] == 0.13
    params = DeviceModel.of(device("v100"), "fp16").params
    net = Network.of(params, jz.gpus_per_node, jz.nic_gbps, jz.latencies)
    assert net.inter_bw == pytest.approx(100 / 8 * 1e9 * 0.13)
    assert Network.of(params, 4, 100).inter_bw == pytest.approx(100 / 8 * 1e9 * 0.9)
    # a 1 GiB all-gather over 8 ranks one per node (stride 4): (n-1)/n of it over one GPU's share, plus the latencies
    nbytes, n = 2 ** 30, 8
    by_hand = 40e-6 + (n - 1) * 2e-6 + (n - 1) / n * nbytes / (100 / 8 * 1e9 * 0.13)
    assert net.all_gather(nbytes, n, 4) == pytest.approx(by_hand)
    fabrics = {"infiniband": ({"inter_latency_us": 40, "inter_step_us": 2, "tree_level_us": 160}, "fit")}
    entry = dict(gpu="v100", gpus_per_node=4, nic_gbps=100, fabric="infiniband", cite="s", nic_efficiency=1.5)
    with pytest.raises(ConfigError, match=r"^c\.nic_efficiency: a fraction above 0 and at most 1 \(got 1\.5\)$"):
        parse_cluster("x", entry, {"s": "a document"}, "c", fabrics)
    with pytest.raises(ConfigError, match=r"^c\.aliases: a list of names$"):
        parse_cluster("x", {**entry, "nic_efficiency": 0.5, "aliases": "p5.48xlarge"}, {"s": "a document"}, "c", fabrics)


@pytest.mark.parametrize("recompute, kept", [("none", 2 / 4), ("full", 4 / 6)])
def test_megatrons_async_backward_all_reduce_hides_the_input_gradients_alone(gpt2, work, recompute, kept):
    """Megatron-LM's asynchronous tensor-parallel all-reduce (default since 2021-09; megatron-lm@2022,
    megatron-core): per block the forward's two all-reduces stay, the backward's two (the column-parallel layers'
    input gradients) hide behind the weight gradients, a recomputed forward's two stay: 2 of 4 kept without
    recompute, 4 of 6 with full recompute."""
    from trainingcost.config.frameworks import framework

    assert framework("megatron-lm@2022").tp_backward_overlap == 1.0 == framework("megatron-core").tp_backward_overlap
    assert framework("megatron-lm@2021").tp_backward_overlap is None
    base = dict(gpus=8, global_batch=64, micro_batch=64, tp=8, recompute=recompute)
    blocking = predict_step(gpt2, Layout(**base), A100, "bp", work)
    asynchronous = predict_step(gpt2, Layout(**base, tp_backward_overlap=1.0), A100, "bp", work)
    assert asynchronous.parts["comm_tp"] == pytest.approx(kept * blocking.parts["comm_tp"], rel=1e-12)
    assert asynchronous.step_time_s == pytest.approx(
        blocking.step_time_s - (1 - kept) * blocking.parts["comm_tp"], rel=1e-12)
    with pytest.raises(ConfigError, match=r"^tp_backward_overlap: a fraction between 0 and 1 \(got 2\)$"):
        predict_step(gpt2, Layout(**base, tp_backward_overlap=2), A100, "bp", work)


def test_hidden_data_parallel_communication_still_slows_the_compute_it_hides_behind(gpt2, work):
    """DDP's bucketed all-reduce overlapped with a backward long enough to hide it: what stays on the critical path is
    the compute's slowdown beside NCCL's kernels, 18.9% of the hidden seconds (Lee et al. 2025, the measured average);
    with no overlap the whole all-reduce; half overlapped, half exposed and half at the slowdown."""
    from trainingcost.analytic.comm import ddp_buckets
    from trainingcost.analytic.steptime.step import OVERLAP_SLOWDOWN

    assert OVERLAP_SLOWDOWN == 0.189
    base = dict(gpus=16, global_batch=16 * 32, micro_batch=32, sharding="none")
    net = net_of(Layout(**base))
    by_hand = sum(net.all_reduce(b, 16) for b in ddp_buckets(gpt2, "bp", "bf16"))
    blocking = predict_step(gpt2, Layout(**base, dp_overlap=0.0), A100, "bp", work)
    hidden = predict_step(gpt2, Layout(**base, dp_overlap=1.0), A100, "bp", work)
    half = predict_step(gpt2, Layout(**base, dp_overlap=0.5), A100, "bp", work)
    compute_bwd = hidden.parts["matmul"] + hidden.parts["attention"] + hidden.parts["memory"] + hidden.parts["launch"]
    assert by_hand < compute_bwd / 2  # the backward alone outlasts the all-reduce
    assert blocking.parts["comm_dp"] == pytest.approx(by_hand)
    assert hidden.parts["comm_dp"] == pytest.approx(0.189 * by_hand)
    assert half.parts["comm_dp"] == pytest.approx(0.5 * by_hand + 0.189 * 0.5 * by_hand)


def test_a_given_nic_speed_drops_the_clusters_measured_efficiency(capsys):
    """--cluster jean-zay-v100 prices its Omni-Path at the measured 0.13 of line rate; with --nic-gbps the NICs are the
    user's, so the usual 0.9 applies and the network source says the measured share was dropped."""
    import json

    from trainingcost import cli

    common = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpus", "64", "--sharding", "none", "--rule", "bp",
              "--dp-overlap", "0", "--cluster", "jean-zay-v100", "--format", "json"]
    assert cli.main(common) == 0
    measured = json.loads(capsys.readouterr().out)[0]
    assert cli.main([*common, "--nic-gbps", "100"]) == 0
    given = json.loads(capsys.readouterr().out)[0]
    assert "measured NIC efficiency dropped" in given["source_network"]
    assert "measured NIC efficiency dropped" not in measured["source_network"]
    assert measured["step_comm_dp_s"] > given["step_comm_dp_s"] > 0


def test_a_backward_overlap_below_the_frameworks_overlap_is_one_line():
    from trainingcost.config.frameworks import FRAMEWORK_FIELDS, framework, parse_framework

    entry = {k: v for k, v in vars(framework("nemo")).items() if k in FRAMEWORK_FIELDS}
    entry.update(can={**entry["can"], "shardings": list(entry["can"]["shardings"])}, tp_backward_overlap=0.5,
                 cite={k: "src" for k in (*FRAMEWORK_FIELDS, "tp_backward_overlap")})
    with pytest.raises(ConfigError, match=r"^f\.tp_backward_overlap: at least tp_overlap \(1\.0; .*got 0\.5$"):
        parse_framework("x", entry, {"src": "a document"}, "f")


def test_a_framework_without_gather_prefetch_pays_its_parameter_gathers_whole(gpt2, work):
    """DeepSpeed's ZeRO-3 of early 2021 (deepspeed@2021): each parameter all-gather blocked the compute (DeepSpeed
    PR #1188), while overlap_comm hid the gradients' reduce-scatter. On a ZeRO-3 step whose compute outlasts its
    communication: with prefetch every collective hides and costs 18.9% of itself; without, the gathers cost
    their whole seconds and the reduce-scatters 18.9%. By hand from FSDP2's unit list, each priced alone."""
    from trainingcost.analytic.comm import fsdp_collectives
    from trainingcost.config.frameworks import FRAMEWORK_FIELDS, framework, parse_framework

    assert framework("deepspeed@2021").gather_prefetch is False
    assert framework("deepspeed@2021").dp_overlap == 1.0
    assert "PR #1188" in framework("deepspeed@2021").sources["gather_prefetch"]
    assert all(framework(n).gather_prefetch for n in ("fsdp1", "fsdp2", "deepspeed", "composer", "torchtitan"))
    base = dict(gpus=8, global_batch=8 * 64, micro_batch=64, sharding="zero3", dp_overlap=1.0)
    net = net_of(Layout(**base))
    ops = fsdp_collectives(gpt2, "bp", "fsdp", 8, "bf16")
    gathers = sum(net.all_gather(c.bytes, 8) for c in ops if c.op == "all_gather")
    reduces = sum(net.all_gather(c.bytes, 8) for c in ops if c.op == "reduce_scatter")
    assert gathers > 0 and reduces > 0
    prefetched = predict_step(gpt2, Layout(**base), A100, "bp", work)
    blocking = predict_step(gpt2, Layout(**base, gather_prefetch=False), A100, "bp", work)
    compute = prefetched.parts["matmul"] + prefetched.parts["attention"] + prefetched.parts["memory"]
    assert gathers + reduces < compute / 3  # the forward and the backward each outlast their collectives
    assert prefetched.parts["comm_dp"] == pytest.approx(0.189 * (gathers + reduces), rel=1e-9)
    assert blocking.parts["comm_dp"] == pytest.approx(gathers + 0.189 * reduces, rel=1e-9)
    assert blocking.step_time_s - prefetched.step_time_s == pytest.approx((1 - 0.189) * gathers, rel=1e-9)
    entry = {k: v for k, v in vars(framework("fsdp2")).items() if k in FRAMEWORK_FIELDS}
    entry.update(can={**entry["can"], "shardings": list(entry["can"]["shardings"])}, gather_prefetch="no",
                 cite={k: "src" for k in (*FRAMEWORK_FIELDS, "gather_prefetch")})
    with pytest.raises(ConfigError, match=r"^f\.gather_prefetch: true or false \(got 'no'\)$"):
        parse_framework("x", entry, {"src": "a document"}, "f")


def test_paxml_hides_no_collective_under_a_per_operation_recompute(gpt2, work):
    """XLA before jax 0.4.31 ran a layer loop's asynchronous all-gathers and reduce-scatters on the compute stream
    under a fine-grained checkpoint policy (openxla/xla#14397): Pax's containers before it (paxml@2024,
    selective_dp_overlap 0) hide none of an FSDP step's collectives under an ops: policy or the attention recompute,
    and all of them (less the contention, 18.9%) without a recompute or under a whole-block one. By hand from FSDP2's
    unit list, each priced alone. The families name the entries by date: paxml and maxtext from 2024-07-29 state no
    such field."""
    from trainingcost.analytic.comm import fsdp_collectives
    from trainingcost.config.frameworks import FRAMEWORK_FIELDS, framework, frameworks, parse_framework

    from trainingcost.config.frameworks import resolve_framework

    pax = framework("paxml@2024")
    assert pax.selective_dp_overlap == 0.0 and pax.dp_overlap == 1.0 and "14397" in pax.sources["selective_dp_overlap"]
    assert sorted(n for n, fw in frameworks().items() if fw.selective_dp_overlap is not None) == ["maxtext@2024",
                                                                                                   "paxml@2024"]
    for family in ("paxml", "maxtext"):
        assert resolve_framework(f"{family}@2024-04")[0].name == f"{family}@2024"
        assert resolve_framework(f"{family}@2024-08")[0].name == family == resolve_framework(family)[0].name
    base = dict(gpus=8, global_batch=8 * 64, micro_batch=64, sharding="zero3", dp_overlap=pax.dp_overlap,
                selective_dp_overlap=pax.selective_dp_overlap)
    net = net_of(Layout(**base))
    comm = sum(net.all_gather(c.bytes, 8) for c in fsdp_collectives(gpt2, "bp", "fsdp", 8, "bf16")
               if c.op in ("all_gather", "reduce_scatter"))
    for recompute, exposed in (("none", 0.189 * comm), ("full", 0.189 * comm), ("ops:core", comm),
                               ("attention", comm), ("ops:", comm)):
        step = predict_step(gpt2, Layout(**base, recompute=recompute), A100, "bp", work)
        assert step.parts["comm_dp"] == pytest.approx(exposed, rel=1e-9), recompute
    entry = {k: v for k, v in vars(framework("fsdp2")).items() if k in FRAMEWORK_FIELDS}
    entry.update(can={**entry["can"], "shardings": list(entry["can"]["shardings"])}, selective_dp_overlap=1.5,
                 cite={k: "src" for k in (*FRAMEWORK_FIELDS, "selective_dp_overlap")})
    with pytest.raises(ConfigError, match=r"^f\.selective_dp_overlap: a fraction between 0 and 1 \(got 1\.5\)$"):
        parse_framework("x", entry, {"src": "a document"}, "f")


def test_deepspeeds_zero1_reduces_each_partition_apart(gpt2, work):
    """DeepSpeed's ZeRO-1 and ZeRO-2 (stage_1_and_2.py average_tensor, reduce_scatter true) send each bucket's slices
    to their partitions' owners with one NCCL reduce per (bucket, partition): a step issues buckets + dp - 1 reduces,
    each a ring of dp ranks, where a reduce-scatter per bucket pays buckets latencies. By hand on 64 A100s (8 nodes):
    the difference is dp - 1 ring latencies and each byte's pass at the ring's whole rate (a reduce's bus bandwidth is
    its algorithm bandwidth, nccl-tests' PERFORMANCE.md) instead of (dp - 1) / dp of it; it grows with dp squared.
    Under ZeRO-2 every micro-batch's gradients are reduced so (partition_gradients), under ZeRO-1 the last's."""
    from trainingcost.analytic.comm import fsdp_collectives
    from trainingcost.config.frameworks import FRAMEWORK_FIELDS, framework, parse_framework

    deepspeeds = ("deepspeed", "deepspeed@2021", "megatron-deepspeed", "gpt-neox@2022")
    assert all(framework(n).zero_reduce == "partition_reduce" for n in deepspeeds)
    assert all(framework(n).zero_reduce == "reduce_scatter" for n in ("megatron-core", "fsdp2", "nanotron", "nemo"))
    assert "average_tensor" in framework("megatron-deepspeed").sources["zero_reduce"]

    def comm(zero_reduce, gpus):
        lay = Layout(gpus=gpus, global_batch=gpus, micro_batch=1, sharding="zero1", dp_overlap=0.0,
                     zero_reduce=zero_reduce)
        return predict_step(gpt2, lay, A100, "bp", work).parts["comm_dp"]

    net = net_of(Layout(gpus=64, global_batch=64, micro_batch=1))
    scattered = sum(c.bytes for c in fsdp_collectives(gpt2, "bp", "zero2", 64, "bf16") if c.op == "reduce_scatter")
    bw = min(net.node_bw(8), 8 * net.inter_bw)
    latency = net.inter_alpha + 63 * net.inter_step
    by_hand = 63 * latency + scattered / bw - scattered * 63 / 64 / bw
    assert comm("partition_reduce", 64) - comm("reduce_scatter", 64) == pytest.approx(by_hand, rel=1e-9)
    extra = {g: comm("partition_reduce", g) - comm("reduce_scatter", g) for g in (64, 256)}
    assert extra[256] > 10 * extra[64]  # (dp - 1) rings of dp - 1 steps each
    # ZeRO-2 partitions the gradients: DeepSpeed reduces every micro-batch's (ZeRO-1 once, at the last backward)
    steps = {(s, m): predict_step(gpt2, Layout(gpus=64, global_batch=64 * m, micro_batch=1, sharding=s,
                                               dp_overlap=0.0, zero_reduce="partition_reduce"), A100, "bp", work)
             for s in ("zero1", "zero2") for m in (1, 4)}
    assert steps[("zero2", 1)].parts["comm_dp"] == pytest.approx(steps[("zero1", 1)].parts["comm_dp"], rel=1e-12)
    reduces = steps[("zero1", 1)].parts["comm_dp"] - sum(
        net.all_gather(c.bytes, 64) for c in fsdp_collectives(gpt2, "bp", "zero2", 64, "bf16") if c.op == "all_gather")
    assert steps[("zero1", 4)].parts["comm_dp"] == pytest.approx(steps[("zero1", 1)].parts["comm_dp"], rel=1e-12)
    assert steps[("zero2", 4)].parts["comm_dp"] == pytest.approx(steps[("zero1", 1)].parts["comm_dp"] + 3 * reduces,
                                                                 rel=1e-9)
    assert steps[("zero2", 4)].dp_bytes == steps[("zero1", 4)].dp_bytes + 3 * scattered
    # an explicit rule (DFA) reduces its flat gradient buffer once, before its optimizer step, whatever the stage
    dfa = {m: predict_step(gpt2, Layout(gpus=64, global_batch=64 * m, micro_batch=1, sharding="zero2",
                                        dp_overlap=0.0, zero_reduce="partition_reduce"), A100, "dfa", work)
           for m in (1, 4)}
    assert dfa[4].parts["comm_dp"] == pytest.approx(dfa[1].parts["comm_dp"], rel=1e-12)
    assert dfa[4].dp_bytes == dfa[1].dp_bytes
    entry = {k: v for k, v in vars(framework("fsdp2")).items() if k in FRAMEWORK_FIELDS}
    entry.update(can={**entry["can"], "shardings": list(entry["can"]["shardings"])}, zero_reduce="allreduce",
                 cite={k: "src" for k in (*FRAMEWORK_FIELDS, "zero_reduce")})
    with pytest.raises(ConfigError, match=r"^f\.zero_reduce: 'allreduce' is not allowed \(allowed: reduce_scatter, "
                                          r"partition_reduce\)$"):
        parse_framework("x", entry, {"src": "a document"}, "f")


def test_a_framework_reducing_gradients_in_fp32_moves_twice_the_bytes_of_bf16(gpt2, work):
    """torchtitan and Composer since v0.16.4 reduce in fp32 (their reduce_dtype), Megatron-LM in fp32 under bf16 only
    (validate_args forces accumulate_allreduce_grads_in_fp32 for bf16): every reduce-scatter carries its elements at
    4 bytes, the all-gathers stay bf16; DDP's buckets are cut from fp32 gradients (4 bytes per parameter in all)."""
    from trainingcost.analytic.comm import fsdp_collectives, numel, parameter_tensors, plan_collectives
    from trainingcost.analytic.steptime.step import reduce_dtype
    from trainingcost.config.frameworks import FRAMEWORK_FIELDS, framework, parse_framework

    assert framework("torchtitan").grad_reduce == "fp32" == framework("olmo-core").grad_reduce
    # plain DDP under autocast: the parameters stay fp32, so the gradients its buckets all-reduce are fp32
    assert framework("ddp").grad_reduce == "fp32" and "autocast" in framework("ddp").sources["grad_reduce"]
    assert framework("ddp").sharding == "none" and framework("ddp").can["shardings"] == ("none",)
    assert all(framework(n).grad_reduce == "fp32-if-bf16" for n in ("megatron-lm@2021", "megatron-lm@2022",
                                                                      "megatron-core"))
    assert framework("fsdp2").grad_reduce == "compute" == framework("composer@2023").grad_reduce
    # Composer's mixed_precision DEFAULT left reduce_dtype None (FSDP1 then reduces in param_dtype) until v0.16.4
    assert framework("composer").grad_reduce == "fp32" and "#2628" in framework("composer").sources["grad_reduce"]
    assert [reduce_dtype(g, d) for g in ("compute", "fp32", "fp32-if-bf16") for d in ("bf16", "fp16")] == \
        ["bf16", "fp16", "fp32", "fp32", "fp32", "fp16"]
    by_hand = fsdp_collectives(gpt2, "bp", "fsdp", 8, "bf16")
    wide = plan_collectives(gpt2, "bp", "fsdp", 8, "bf16", reduce_dtype="fp32").micro_batch
    assert [c.op for c in wide] == [c.op for c in by_hand]
    assert [c.bytes for c in wide] == [c.bytes * (2 if c.op == "reduce_scatter" else 1) for c in by_hand]
    parameters = sum(numel(shape) for _, shape in parameter_tensors(gpt2, "bp"))
    ddp = plan_collectives(gpt2, "bp", "none", 8, "bf16", reduce_dtype="fp32").step
    assert sum(c.bytes for c in ddp) == 4 * parameters and {c.dtype for c in ddp} == {"fp32"}
    base = dict(gpus=8, global_batch=64, micro_batch=2, sharding="fsdp")  # 4 micro-batches per step
    bf16 = predict_step(gpt2, Layout(**base), A100, "bp", work)
    fp32 = predict_step(gpt2, Layout(**base, grad_reduce="fp32"), A100, "bp", work)
    scatters = sum(c.bytes for c in by_hand if c.op == "reduce_scatter")
    assert fp32.dp_bytes - bf16.dp_bytes == 4 * scatters  # each micro-batch's scatters twice as wide
    assert predict_step(gpt2, Layout(**base, grad_reduce="fp32-if-bf16", precision="fp16-mixed"), A100, "bp",
                        work).dp_bytes == predict_step(gpt2, Layout(**base, precision="fp16-mixed"), A100, "bp",
                                                       work).dp_bytes
    with pytest.raises(ConfigError, match=r"^grad_reduce: 'fp8' is not allowed \(allowed: compute, fp32, "
                                          r"fp32-if-bf16\)$"):
        predict_step(gpt2, Layout(**base, grad_reduce="fp8"), A100, "bp", work)
    entry = {k: v for k, v in vars(framework("fsdp2")).items() if k in FRAMEWORK_FIELDS}
    entry.update(can={**entry["can"], "shardings": list(entry["can"]["shardings"])}, grad_reduce="fp64",
                 cite={k: "src" for k in (*FRAMEWORK_FIELDS, "grad_reduce")})
    with pytest.raises(ConfigError, match=r"^f\.grad_reduce: 'fp64' is not allowed \(allowed: compute, fp32, "
                                          r"fp32-if-bf16\)$"):
        parse_framework("x", entry, {"src": "a document"}, "f")


def test_nanotrons_zero1_all_reduces_after_the_backward_and_gathers_after_the_step(gpt2, work):
    """nanotron with fp32 gradient accumulation runs ZeRO-1 without DDP (trainer.py's make_ddp): one all-reduce of the
    whole fp32 gradient buffer after the last backward, then the updated parameters all-gathered; nothing hides
    either. The bytes are FSDP2's ZeRO-1 listing (about 4 per parameter reduced, 2 gathered), as one all-reduce and
    one all-gather each priced alone on the network; the overlapped ZeRO-1 moves the same bytes but reduce-scatters
    the gradients during the backward."""
    from trainingcost.analytic.comm import numel, parameter_tensors, plan_collectives
    from trainingcost.config.frameworks import FRAMEWORK_FIELDS, framework, parse_framework

    nanotron = framework("nanotron")
    assert (nanotron.zero1_sync, nanotron.grad_reduce) == ("after_backward", "fp32")
    assert "make_ddp" in nanotron.sources["zero1_sync"] and "ACCUMULATE_GRAD_IN_FP32" in nanotron.sources["grad_reduce"]
    assert all(framework(n).zero1_sync == "overlapped" for n in ("fsdp2", "megatron-core", "deepspeed", "nemo"))
    parameters = sum(numel(shape) for _, shape in parameter_tensors(gpt2, "bp"))
    base = dict(gpus=8, global_batch=64, micro_batch=8, sharding="zero1", grad_reduce="fp32", dp_overlap=1.0)
    after = predict_step(gpt2, Layout(**base, zero1_sync="after_backward"), A100, "bp", work)
    overlapped = predict_step(gpt2, Layout(**base), A100, "bp", work)
    net = net_of(Layout(**base))
    listed = plan_collectives(gpt2, "bp", "zero1", 8, "bf16", reduce_dtype="fp32")
    reduce = sum(c.bytes for c in listed.step if c.op == "reduce_scatter")  # FSDP2's units, dim 0 padded to 8
    gather = sum(c.bytes for c in listed.step if c.op == "all_gather")
    assert reduce == pytest.approx(4 * parameters, rel=1e-3) and gather == pytest.approx(2 * parameters, rel=1e-3)
    assert after.dp_bytes == reduce + gather == overlapped.dp_bytes and after.dp_collectives == 2
    assert after.parts["comm_dp"] == pytest.approx(net.all_reduce(reduce, 8) + net.all_gather(gather, 8), rel=1e-4)
    assert after.parts["comm_dp"] > overlapped.parts["comm_dp"]
    assert after.step_time_s - overlapped.step_time_s == pytest.approx(
        after.parts["comm_dp"] - overlapped.parts["comm_dp"], rel=1e-9)
    # the framework reaches the plan: nanotron's ZeRO-1 issues its two collectives, FSDP2's one pair per unit
    import trainingcost

    def collectives(fw):
        table = trainingcost.plan(preset="gpt2-small", gpu="a100-80gb", gpus=8, tokens=1e9, rule="bp",
                                  framework=fw, sharding="zero1").table
        return set(table["step_dp_collectives"])
    assert collectives("nanotron") == {2.0} and min(collectives("fsdp2")) > 2
    with pytest.raises(ConfigError, match=r"^zero1_sync: 'later' is not allowed \(allowed: overlapped, "
                                          r"after_backward\)$"):
        predict_step(gpt2, Layout(**base, zero1_sync="later"), A100, "bp", work)
    entry = {k: v for k, v in vars(framework("fsdp2")).items() if k in FRAMEWORK_FIELDS}
    entry.update(can={**entry["can"], "shardings": list(entry["can"]["shardings"])}, zero1_sync="never",
                 cite={k: "src" for k in (*FRAMEWORK_FIELDS, "zero1_sync")})
    with pytest.raises(ConfigError, match=r"^f\.zero1_sync: 'never' is not allowed \(allowed: overlapped, "
                                          r"after_backward\)$"):
        parse_framework("x", entry, {"src": "a document"}, "f")


def test_cudnn_fused_attention_runs_at_its_published_hopper_share_and_as_flash_elsewhere(gpt2, work):
    """TransformerEngine prefers cuDNN's fused attention on Hopper (NeMo's docs); the FlashAttention-3 paper's cuDNN
    bars on an H100 SXM5 (head dim 128, sequence 2k-8k) give 600-617 TFLOP/s forward and 465-518 backward of the 989
    dense peak. Where the catalogue has no cuDNN numbers (A100) the kernel is priced as FlashAttention; on a V100
    neither runs and a framework wanting it gets the unfused kernel."""
    from trainingcost.config.frameworks import framework

    h100, h200, v100 = device("h100-sxm"), device("h200"), device("v100")
    from trainingcost.analytic.steptime.device import share_at

    assert all(600 / 989 - 1e-3 <= share_at(h100.steptime["cudnn_forward"], s) <= 617 / 989 + 1e-3 and
               465 / 989 - 1e-3 <= share_at(h100.steptime["cudnn_backward"], s) <= 518 / 989 + 1e-3
               for s in (2048, 4096, 8192))
    assert h200.steptime["cudnn_forward"] == h100.steptime["cudnn_forward"]
    assert framework("nemo").attention == "cudnn" == framework("megatron-core").attention
    assert "prefers cuDNN on Hopper" in framework("nemo").sources["attention"]
    assert v100.attention_kernel("cudnn") == "unfused" and A100.attention_kernel("cudnn") == "cudnn"
    flops = 1e15
    hopper, ampere = DeviceModel.of(h100, "bf16"), DeviceModel.of(A100, "bf16")
    kappa = hopper.params["kernel_efficiency"]
    assert hopper.flash(flops, False, "cudnn", tokens=2048) == pytest.approx(flops / (hopper.peak * 617 / 989 * kappa),
                                                                            rel=2e-3)
    assert hopper.flash(flops, True, "cudnn", tokens=8192) == pytest.approx(flops / (hopper.peak * 518 / 989 * kappa),
                                                                           rel=2e-3)
    assert hopper.flash(flops, True, "flash", tokens=4096) == pytest.approx(flops / (hopper.peak * 310 / 989 * kappa),
                                                                           rel=3e-3)
    assert ampere.flash(flops, False, "cudnn") == ampere.flash(flops, False, "flash")
    assert "FlashAttention-3" in hopper.sources["cudnn_forward"]
    base = dict(gpus=8, global_batch=64, micro_batch=8)
    fa2 = predict_step(gpt2, Layout(**base), h100, "bp", work)
    cudnn = predict_step(gpt2, Layout(**base, attention="cudnn"), h100, "bp", work)
    assert cudnn.parts["attention"] < fa2.parts["attention"] and cudnn.parts["matmul"] == fa2.parts["matmul"]
    assert predict_step(gpt2, Layout(**base, attention="cudnn"), A100, "bp", work).step_time_s == \
        predict_step(gpt2, Layout(**base), A100, "bp", work).step_time_s
    with pytest.raises(ConfigError, match=r"^attention: 'sdpa' is not allowed \(allowed: flash, flash3, cudnn, unfused\)$"):
        predict_step(gpt2, Layout(**base, attention="sdpa"), h100, "bp", work)


def test_an_uneven_pipeline_runs_interleaved_when_v_splits_a_full_stage(work):
    """The Llama 3 405B run: 126 layers on 16 stages (two of 7, fourteen of 8) under the interleaved schedule. v = 2
    splits a full stage into virtual stages of 4 (the short stages' last of 3) and is planned, its bubble halved
    against v = 1 with everything else alike; v = 3 divides no stage of 8 and v = 8 would
    leave a short stage's last virtual stage empty, each one line; the search offers v = 1, 2 and 4."""
    from trainingcost.analytic.layout import search
    from trainingcost.analytic.plan import PREDICTED_SOURCE, Efficiency, PlanSpec, plan_table
    from trainingcost.analytic.steptime.step import interleave_blocks

    assert interleave_blocks(126, 16) == 8 and interleave_blocks(96, 16) == 6
    cfg = canonical_model({**preset_entry("gpt2-small"), "layers": 126})
    base = dict(gpus=16, global_batch=64, micro_batch=1, pp=16)
    w = rule_work(cfg, ["bp"])
    plain = predict_step(cfg, Layout(**base), A100, "bp", w)
    v2 = predict_step(cfg, Layout(**base, interleave=2), A100, "bp", w)
    assert v2.parts["bubble"] == pytest.approx(plain.parts["bubble"] / 2, rel=1e-9)
    assert v2.parts["matmul"] == plain.parts["matmul"]
    with pytest.raises(ConfigError, match=r"^--interleave: 3 does not divide the 8 blocks of a full stage \(the "
                                          r"others hold one fewer\)$"):
        check_layout(cfg, Layout(**base, interleave=3))
    with pytest.raises(ConfigError, match=r"^--interleave: 2 needs the even pipeline split \(the framework's is "
                                          r"balanced\)$"):
        check_layout(cfg, Layout(**base, interleave=2, pipeline_split="balanced"))
    predicted = Efficiency("predicted", 1.0, PREDICTED_SOURCE)
    spec = PlanSpec(tokens=1e9, gpus=16, tp=1, pp=16, interleave=2, sharding="none", global_batch=64, micro_batch=1,
                    efficiency=predicted, framework="megatron-core")
    row = plan_table(cfg, spec, A100, ["bp"], ["executed"]).iloc[0]
    assert "2 virtual stages of 4 blocks each, the short stages' last one of 3" in row["pipeline_split"]
    with pytest.raises(ConfigError, match=r"^--interleave: 8 leaves a short stage's last virtual stage empty"):
        check_layout(cfg, Layout(**base, interleave=8))
    found = search(cfg, spec, A100, ["bp"], free=frozenset({"interleave"}), top=10, prune=False)
    assert {c.interleave for c in found.rules["bp"].top} == {1, 2, 4}


def test_the_search_splits_unevenly_only_under_a_framework_that_does(work):
    """Megatron-LM of 2021-22 asserts that the pipeline size divides the layers; Megatron-Core splits them unevenly
    (--decoder-first/last-pipeline-num-layers). Searched over pp on 16 GPUs, a 126-block model keeps pp 4, 8 and 16
    under megatron-core and drops them under megatron-lm@2021, saying so in one line."""
    from trainingcost.analytic.layout import search
    from trainingcost.analytic.plan import PREDICTED_SOURCE, Efficiency, PlanSpec
    from trainingcost.config.frameworks import framework

    assert framework("megatron-lm@2021").can["uneven"] is False and framework("megatron-core").can["uneven"] is True
    cfg = canonical_model({**preset_entry("gpt2-small"), "layers": 126})
    predicted = Efficiency("predicted", 1.0, PREDICTED_SOURCE)

    def pps(name):
        spec = PlanSpec(tokens=1e9, gpus=16, tp=1, pp=1, sharding="none", global_batch=64, micro_batch=1,
                        efficiency=predicted, framework=name, can=tuple(sorted(framework(name).can.items())))
        found = search(cfg, spec, A100, ["bp"], free=frozenset({"pp"}), top=10, prune=False)
        return {c.pp for c in found.rules["bp"].top}, found.rejected

    core, _ = pps("megatron-core")
    old, rejected = pps("megatron-lm@2021")
    assert core == {1, 2, 4, 8, 16} and old == {1, 2}
    assert "pp 4, 8, 16: does not divide the 126 blocks, and framework megatron-lm@2021 splits them only evenly" \
        in rejected


def test_a_given_dp_overlap_holds_for_the_parameter_gathers_too(capsys):
    """deepspeed@2021's gathers block the compute and the plan says so in its framework source; a given --dp-overlap
    is the share of every data-parallel collective, gathers included (as --tp-overlap covers the backward's), so it
    lifts the blocking and the source no longer claims it. A Layout's gather_prefetch must be a bool."""
    import json

    from trainingcost import cli

    common = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpus", "64", "--gpu", "a100-80gb", "--sharding",
              "zero3", "--rule", "bp", "--framework", "deepspeed@2021", "--format", "json"]
    assert cli.main(common) == 0
    blocking = json.loads(capsys.readouterr().out)[0]
    assert cli.main([*common, "--dp-overlap", "1"]) == 0
    given = json.loads(capsys.readouterr().out)[0]
    assert "parameter all-gathers not prefetched" in blocking["source_framework"]
    assert "parameter all-gathers not prefetched" not in given["source_framework"]
    assert given["step_comm_dp_s"] < blocking["step_comm_dp_s"]
    assert cli.main([*common[:-4], "--framework", "torchtitan", "--format", "json"]) == 0
    assert "gradients reduced in fp32" in json.loads(capsys.readouterr().out)[0]["source_framework"]
    cfg = canonical_model(preset_entry("gpt2-small"))
    with pytest.raises(ConfigError, match=r"^gather_prefetch: true or false \(got 'false'\)$"):
        check_layout(cfg, Layout(gpus=2, global_batch=8, micro_batch=1, gather_prefetch="false"))


def test_a_framework_is_named_by_its_family_and_the_time_of_the_run():
    """`--framework megatron@2022` is the Megatron entry whose behaviour was current on 1 July 2022 (the versions'
    dates in frameworks.yaml: sequence parallelism 2022-05-19, the overlapped distributed optimizer 2023-11-17); the
    family alone is its newest entry; letter case does not matter; an entry's own name is itself."""
    from trainingcost.config.frameworks import families, parse_families, resolve_framework

    expected = {"megatron@2021": "megatron-lm@2021", "megatron@2022-05-18": "megatron-lm@2021",
                "megatron@2022-05-19": "megatron-lm@2022", "megatron@2023": "megatron-lm@2022",
                "Megatron-LM@2024": "megatron-core", "megatron": "megatron-core", "fsdp@2023": "fsdp1",
                "fsdp@2024-07": "fsdp1", "fsdp@2024-08": "fsdp2", "FSDP": "fsdp2", "pytorch-fsdp@2022": "fsdp1",
                "deepspeed@2021-06": "deepspeed@2021", "deepspeed@2022": "deepspeed", "composer@2023": "composer@2023",
                "llm-foundry@2023-12": "composer", "nemo@2020": "nemo", "Megatron-Core": "megatron-core",
                "megatron-lm@2021+torch-ddp": "megatron-lm@2021+torch-ddp", "pytorch-ddp": "ddp",
                "torch-ddp@2020": "ddp", "DDP": "ddp", "olmo-core@2024-11": "olmo-core",
                # as tables write them: spaces and underscores, a vendor's name before the framework's
                "PyTorch FSDP2": "fsdp2", "Megatron LM@2021": "megatron-lm@2021", "NVIDIA NeMo": "nemo",
                "megatron_core": "megatron-core", "torch FSDP@2023": "fsdp1", "Microsoft DeepSpeed@2022": "deepspeed",
                "AllenAI OLMo-core": "olmo-core"}
    for name, entry in expected.items():
        assert resolve_framework(name)[0].name == entry, name
    assert resolve_framework("deepspeed@2021") == (resolve_framework("deepspeed@2021-01")[0], "")  # the entry itself
    assert resolve_framework("megatron@2023")[1] == "the megatron family's entry current on 2023-07-01"
    assert resolve_framework("megatron@2019")[1] == \
        "the megatron family's earliest entry, the catalogue's reading until 2022-05-19"
    assert resolve_framework("nemo@2019")[1] == "the nemo family's one entry"
    assert resolve_framework("fsdp")[1] == "the fsdp family's newest entry"
    assert {"megatron", "deepspeed", "fsdp", "composer", "nemo", "torchtitan"} <= set(families())
    for bad, line in (("megatron@21", r"^--framework: 'megatron@21': after '@' give a year or a date \(YYYY, YYYY-MM "
                                      r"or YYYY-MM-DD\)$"),
                      ("fsdp@2024-02-30", r"^--framework: 'fsdp@2024-02-30': after '@' give a year or a date"),
                      ("fsdp@2023\n", r"^--framework: 'fsdp@2023\\n': after '@' give a year or a date"),
                      # a family of one entry checks its date too (it was passed over)
                      ("nemo@20xx", r"^--framework: 'nemo@20xx': after '@' give a year or a date"),
                      ("olmo-core@2026-13", r"^--framework: 'olmo-core@2026-13': after '@' give a year or a date"),
                      ("nemo@", r"^--framework: 'nemo@': after '@' give a year or a date"),
                      ("jax@2023", r"^--framework: 'jax@2023' is not in the framework catalogue \(closest: .*; all "
                                   r"[0-9]+: `trainingcost plan --help`; a family alone or @YEAR\)$")):
        with pytest.raises(ConfigError, match=line):
            resolve_framework(bad)
    table = {"a": object(), "b": object()}
    good = {"x": {"aliases": ["y"], "versions": [["a", None], ["b", "2023-01-01"]], "cite": "s"}}
    assert parse_families(good, table, {"s": "doc"})["y"][1][1][0].isoformat() == "2023-01-01"
    late = {"x": {**good["x"], "versions": [["a", None], ["x@2022", "2022-09-01"], ["b", "2023-01-01"]]}}
    with pytest.raises(ConfigError, match=r"'x@2022' is not the entry its dates give for 2022-07-01 \('a'\)"):
        parse_families(late, {**table, "x@2022": object()}, {"s": "doc"})
    for broken, line in (({"versions": [["a", "2020-01-01"]]}, "only the first entry has no date"),
                         ({"versions": [["a", None], ["c", "2021-01-01"]]}, "'c' is not a catalogued framework"),
                         ({"versions": [["a", None], ["b", "2023-01-01"], ["a", "2022-01-01"]]}, "dates must rise"),
                         ({"versions": [["a", None]], "aliases": ["b"]}, "the name 'b' is taken"),
                         ({"aliases": ["a"]}, "the name 'a' is taken"),  # an older entry's name: not the newest
                         ({"aliases": ["Y"]}, "the name 'Y' is taken"),
                         ({"aliases": ["y@2"]}, "the name 'y@2' is taken"),
                         ({"versions": [["a", None], ["b", "soon"]]}, r"a date YYYY-MM-DD \(got 'soon'\)")):
        with pytest.raises(ConfigError, match=line):
            parse_families({"x": {**good["x"], **broken}}, table, {"s": "doc"})


def test_the_plan_says_which_entry_a_family_name_became(capsys):
    from trainingcost.cli import main

    main(["plan", "--preset", "llama-2-7b", "--gpu", "a100-80gb", "--gpus", "64", "--tokens", "1e9", "--rule", "bp",
          "--framework", "fsdp@2023"])
    out = " ".join(capsys.readouterr().out.split())
    assert "framework: fsdp1 for 'fsdp@2023': PyTorch FSDP1" in out
    from trainingcost.planning import system_fields
    from trainingcost.config.hardware import device

    source = system_fields("fsdp@2023", None, None, None, device("a100-80gb"), {})["framework_source"]
    assert source.startswith("fsdp1 for 'fsdp@2023': PyTorch FSDP1") and \
        "(given; the fsdp family's earliest entry, the catalogue's reading until 2024-07-24; " in source
    assert "(given; the megatron family's entry current on 2023-07-01; " in \
        system_fields("megatron@2023", None, None, None, device("a100-80gb"), {})["framework_source"]


def test_no_block_runs_faster_than_its_host_issues_it():
    """A block whose kernels take less than the host's time to issue them (HOST_BLOCK_S: eager PyTorch's, measured on an
    H200's host) takes the host's time, the difference in ``launch``; a block that keeps the GPU busier is unchanged,
    and ``host_block_s=(0, 0)`` (a framework that captures CUDA graphs) removes the floor."""
    from trainingcost.analytic.steptime.step import HOST_BLOCK_S, block_times

    dev = DeviceModel.of(A100, "bf16")
    small = canonical_model({**preset_entry("gpt2-small"), "seq_len": 128})
    tiny = Layout(gpus=8, global_batch=8, micro_batch=1, tp=8)  # 128 tokens over 8 GPUs: microseconds of kernels
    free = dataclasses.replace(tiny, host_block_s=(0.0, 0.0))
    floored, bare = block_times(small, tiny, dev, 2), block_times(small, free, dev, 2)
    for name, host in (("fwd", HOST_BLOCK_S[0]), ("bwd", HOST_BLOCK_S[1])):
        kernels = sum(bare[name].values())
        assert kernels < host  # by construction: the floor binds
        assert sum(floored[name].values()) == pytest.approx(host, rel=1e-12)
        assert floored[name]["launch"] - bare[name]["launch"] == pytest.approx(host - kernels, rel=1e-12)
        assert all(floored[name][c] == bare[name][c] for c in ("matmul", "attention", "memory"))
    busy = Layout(gpus=1, global_batch=32, micro_batch=32)  # 32 x 1,024 tokens on one GPU: milliseconds of kernels
    wide = canonical_model({**preset_entry("gpt2-small"), "seq_len": 1024})
    loaded = block_times(wide, busy, dev, 2)
    assert sum(loaded["fwd"].values()) > HOST_BLOCK_S[0] and loaded == block_times(
        wide, dataclasses.replace(busy, host_block_s=(0.0, 0.0)), dev, 2)
    step = predict_step(small, tiny, A100, "bp")  # the step pays the floor on every block and micro-batch
    compute = sum(step.parts[c] for c in ("matmul", "attention", "memory", "launch"))
    assert compute >= small.layers * sum(HOST_BLOCK_S) * tiny.accumulation * (1 - 1e-9)
    memo = {}  # the search's memo keys its kernel times by the floor too
    shared = predict_step(small, tiny, A100, "bp", None, memo), predict_step(small, free, A100, "bp", None, memo)
    assert shared[0].step_time_s == step.step_time_s > shared[1].step_time_s
    assert "H200" in step.sources["host_block_s"]


def test_causal_attention_on_cudnn_is_priced_at_its_causal_share():
    """cuDNN's fused attention with a causal mask runs at a smaller share of the peak than without (FlashAttention-3's
    Fig. 5: 484-529 against 600-617 TFLOP/s on an H100): a decoder's attention core on ``cudnn`` is its unmasked half's
    FLOPs at ``cudnn_causal_*``; an encoder's (no mask) stays at ``cudnn_*``; FlashAttention-2's causal shares are
    its own (test_flashattention2_on_hopper_is_priced_per_direction_and_mask_from_the_flashattention3_figures)."""
    from trainingcost.analytic.steptime.step import block_times

    h100 = device("h100-sxm")
    dev = DeviceModel.of(h100, "bf16")
    p = dev.params
    from trainingcost.analytic.steptime.device import share_at

    assert [round(share_at(p["cudnn_causal_forward"], s) * 989) for s in (2048, 4096, 8192)] == [484, 518, 529]
    assert dev.sources["cudnn_causal_forward"].startswith("Shah et al. 2024")
    flops = 1e12
    for backward, key in ((False, "forward"), (True, "backward")):
        causal_share, plain_share = share_at(p[f"cudnn_causal_{key}"]), share_at(p[f"cudnn_{key}"])
        by_hand = flops / (dev.peak * causal_share * p["kernel_efficiency"])
        assert dev.flash(flops, backward, "cudnn", causal=True) == pytest.approx(by_hand, rel=1e-12)
        assert dev.flash(flops, backward, "cudnn") == pytest.approx(by_hand * causal_share / plain_share)
        assert dev.flash(flops, backward, "flash", causal=True) == pytest.approx(
            flops / (dev.peak * share_at(p[f"flash_causal_{key}"]) * p["kernel_efficiency"]), rel=1e-12)
    lay = Layout(gpus=8, global_batch=8, micro_batch=1, tp=8, attention="cudnn", host_block_s=(0.0, 0.0))
    base = {**preset_entry("llama-2-7b"), "seq_len": 4096}
    decoder, encoder = canonical_model(base), canonical_model({**base, "arch": "encoder"})
    d, e = block_times(decoder, lay, dev, 2), block_times(encoder, lay, dev, 2)
    core = 4.0 * 1 * 4096 * 4096 * decoder.attn_width / 8  # the encoder's core; the decoder's is half of it
    assert e["fwd"]["attention"] == pytest.approx(dev.flash(core, False, "cudnn", tokens=4096), rel=1e-12)
    assert d["fwd"]["attention"] == pytest.approx(dev.flash(core / 2, False, "cudnn", True, 4096), rel=1e-12)
    assert d["bwd"]["attention"] == pytest.approx(dev.flash(2.5 * core / 2, True, "cudnn", True, 4096), rel=1e-12)


def test_a_cluster_is_found_in_any_letter_case_or_separator(capsys):
    """``--cluster AWS_P5`` and ``"DGX H100"`` are the catalogue's aws-p5 and dgx-h100 (as --gpu takes GPU spellings);
    the plan is the same as under the catalogue's own name, and an unknown name is still one line with the list."""
    import json

    from trainingcost import cli
    from trainingcost.config.frameworks import cluster

    assert cluster("AWS_P5") is cluster("aws-p5") and cluster("DGX H100").name == "dgx-h100"
    common = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpus", "64", "--rule", "bp", "--format", "json"]
    assert cli.main([*common, "--cluster", "AWS_P5"]) == 0
    upper = json.loads(capsys.readouterr().out)[0]
    assert cli.main([*common, "--cluster", "aws-p5"]) == 0
    assert upper["step_time_s"] == json.loads(capsys.readouterr().out)[0]["step_time_s"]
    assert cli.main([*common, "--cluster", "aws-p9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cluster: 'aws-p9' is not in the cluster catalogue (closest: " in err[0]


# The FlashAttention-3 paper's Fig. 5-6 (H100 80GB SXM5, BF16, head dim 128), TFLOP/s at 512 to 16k tokens, read here
# by hand: forward without and with the causal mask, backward without it; the causal backward is derived.
FA3_PAPER_BARS = {
    "flash": {"forward": [309, 350, 362, 368, 370, 370], "causal_forward": [191, 260, 298, 319, 333, 335],
              "backward": [214, 260, 291, 310, 318, 322]},
    "flash3": {"forward": [467, 565, 625, 638, 646, 648], "causal_forward": [292, 423, 521, 579, 602, 616],
               "backward": [316, 424, 501, 542, 559, 561]},
    "cudnn": {"forward": [497, 574, 617, 609, 600, 595], "causal_forward": [315, 410, 484, 518, 529, 539],
              "backward": [305, 408, 465, 499, 518, 516]},
}
BAR_TOKENS = [512, 1024, 2048, 4096, 8192, 16384]


def test_fused_attention_on_hopper_follows_the_published_bars_per_sequence_length():
    """Each kernel's share of the 989 dense peak at each sequence length the paper shows, for both directions and
    with and without the causal mask (the causal backward: the backward times the forward's causal / unmasked ratio
    at that length, our assumption, the paper showing none); between two lengths the share runs linearly in log2 of
    the length, beyond the ends it stays at the end values; a decoder's attention takes its own sequence length."""
    from trainingcost.analytic.steptime.device import share_at
    from trainingcost.analytic.steptime.step import block_times

    h100 = DeviceModel.of(device("h100-sxm"), "bf16")
    p = h100.params
    for kernel, bars in FA3_PAPER_BARS.items():
        causal_backward = [b * c / f for b, c, f in zip(bars["backward"], bars["causal_forward"], bars["forward"])]
        for key, values in (*bars.items(), ("causal_backward", causal_backward)):
            for tokens, tflops in zip(BAR_TOKENS, values):
                assert share_at(p[f"{kernel}_{key}"], tokens) == pytest.approx(tflops / 989, abs=6e-4), (kernel, key)
        mid = share_at(p[f"{kernel}_forward"], 2896)  # 2^11.5: halfway between 2k and 4k in log2
        assert mid == pytest.approx((share_at(p[f"{kernel}_forward"], 2048) + share_at(p[f"{kernel}_forward"], 4096)) / 2,
                                    rel=2e-3)
        assert share_at(p[f"{kernel}_forward"], 128) == share_at(p[f"{kernel}_forward"], 512)
        assert share_at(p[f"{kernel}_forward"], 131072) == share_at(p[f"{kernel}_forward"], 16384)
    assert "2407.08608" in h100.sources["flash_causal_backward"]
    assert DeviceModel.of(device("h200"), "bf16").params["flash_causal_backward"] == p["flash_causal_backward"]
    ampere = DeviceModel.of(A100, "bf16")  # one share both ways, with or without the mask
    assert ampere.flash(1e15, True, causal=True, tokens=2048) == ampere.flash(1e15, True, tokens=8192)
    lay = Layout(gpus=8, global_batch=8, micro_batch=1, host_block_s=(0.0, 0.0))
    base = {**preset_entry("llama-2-7b")}
    for tokens in (2048, 8192):
        cfg = canonical_model({**base, "seq_len": tokens})
        core = 4.0 * tokens * tokens * cfg.attn_width / 2  # the causal half
        assert block_times(cfg, lay, h100, 2)["fwd"]["attention"] == pytest.approx(
            core / (h100.peak * FA3_PAPER_BARS["flash"]["causal_forward"][BAR_TOKENS.index(tokens)] / 989
                    * p["kernel_efficiency"]), rel=2e-3)


def test_flashattention3_is_priced_on_hopper_from_its_published_bars_and_runs_flashattention2_elsewhere(capsys):
    """FlashAttention-3's bars in its paper (H100 SXM5, head dim 128, 2k-8k tokens, of the 989 dense peak): forward
    625-646 TFLOP/s without the mask, 521-602 with it, backward 501-559 without it; the causal backward is the backward
    times the forward's causal / unmasked ratio. It runs on Hopper only (the flash-attention README): an A100 runs
    FlashAttention-2 and a V100 the unfused kernels, and the plan says so. A measured device prices it at its own
    measured attention, keeping the causal ratio."""
    from trainingcost import cli
    from trainingcost.analytic.steptime.device import with_measurement

    h100 = DeviceModel.of(device("h100-sxm"), "bf16")
    kappa, peak = h100.params["kernel_efficiency"], h100.peak
    bars = FA3_PAPER_BARS["flash3"]
    at_4k = BAR_TOKENS.index(4096)
    plain = {"forward": bars["forward"][at_4k] / 989, "backward": bars["backward"][at_4k] / 989}
    causal = {"forward": bars["causal_forward"][at_4k] / 989}
    causal["backward"] = plain["backward"] * causal["forward"] / plain["forward"]
    for backward, key in ((False, "forward"), (True, "backward")):
        assert h100.flash(1e15, backward, "flash3", tokens=4096) == pytest.approx(1e15 / (peak * plain[key] * kappa),
                                                                                 rel=2e-3)
        assert h100.flash(1e15, backward, "flash3", True, 4096) == pytest.approx(1e15 / (peak * causal[key] * kappa),
                                                                                rel=2e-3)
        for tokens in BAR_TOKENS:
            assert h100.flash(1e15, backward, "flash3", True, tokens) < h100.flash(1e15, backward, "flash", True, tokens)
    assert [device(g).attention_kernel("flash3") for g in ("h100-sxm", "h200", "a100-80gb", "v100")] == \
        ["flash3", "flash3", "flash", "unfused"]
    assert "Hopper" in device("h100-sxm").steptime_sources["flash3_attention"]
    gpt2 = canonical_model(preset_entry("gpt2-small"))
    base = dict(gpus=8, global_batch=64, micro_batch=8, host_block_s=(0.0, 0.0))
    fa2 = predict_step(gpt2, Layout(**base), device("h100-sxm"), "bp")
    fa3 = predict_step(gpt2, Layout(**base, attention="flash3"), device("h100-sxm"), "bp")
    assert fa3.parts["attention"] < fa2.parts["attention"] and fa3.parts["matmul"] == fa2.parts["matmul"]
    measured = with_measurement(device("h100-sxm"), {
        "kind": "device_model", "gemm_flops": 0.7 * 989e12, "bandwidth": [[2 * 10**6, 1e12], [2 * 10**9, 3e12]],
        "flash_forward_flops": 0.5 * 989e12, "flash_backward_flops": 0.4 * 989e12, "launch_s": 4e-6,
        "device_name": "NVIDIA H100 80GB HBM3", "dtype": "bf16", "trusted": True}, "bf16", "dm.json")
    model = DeviceModel.of(measured, "bf16")
    assert model.flash(1e15, True, "flash3") == model.flash(1e15, True, "flash")
    from trainingcost.analytic.steptime.device import share_at

    ratio = share_at(device("h100-sxm").steptime["flash3_causal_forward"]) / share_at(device("h100-sxm").steptime["flash3_forward"])
    assert model.params["flash3_causal_forward"] == pytest.approx(model.params["flash_forward"] * ratio)
    args = ["plan", "--preset", "llama-2-7b", "--tokens", "1e11", "--gpus", "64", "--sharding", "fsdp", "--rule", "bp"]
    assert cli.main([*args, "--gpu", "a100-80gb", "--attention", "flash3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "attention flash: FlashAttention-3 runs on Hopper only, not on a100-80gb" in out
    assert cli.main([*args, "--gpu", "h100-sxm", "--attention", "flash3", "--format", "json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    row = rows[0] if isinstance(rows, list) else rows
    assert row["attention"] == "flash3" and "attention flash3 (--attention given)" in row["source_framework"]


def test_context_parallelism_splits_each_sequence_and_prices_its_key_value_ring_by_hand():
    """--cp (Megatron-Core's context parallelism): gpus = tp x cp x pp x dp; each GPU's products run on s / cp
    tokens per sequence and its attention on its s / cp queries against all s keys (1 / cp of a causal sequence's
    work, load-balanced chunks), of which the diagonal chunk pairs, 1 / (2 cp), run masked and the rest unmasked, the
    kernel on chunks of s / cp; per block a ring of cp - 1 sends of the GPU's keys and values, twice in the backward,
    exposed where it outlasts the pass's attention; the gradients are reduced over the dp x cp ranks holding the
    same weights (the same bytes as cp x more replicas under DDP)."""
    from trainingcost.analytic.steptime.step import block_times

    cfg = canonical_model({**preset_entry("llama-2-7b"), "seq_len": 8192, "layers": 4})
    h100 = device("h100-sxm")
    dev = DeviceModel.of(h100, "bf16")
    base = dict(global_batch=32, micro_batch=1, host_block_s=(0.0, 0.0), attention="cudnn")
    lay = Layout(gpus=16, cp=2, **base)
    assert lay.dp == 8 and lay.accumulation == 4
    bt = block_times(cfg, lay, dev, 2)
    s, local = 8192, 4096
    core = 4.0 * local * s * cfg.attn_width * 0.5  # the causal half of this GPU's queries against all keys
    by_hand = dev.flash(core / 4, False, "cudnn", True, local) + dev.flash(3 * core / 4, False, "cudnn", False, local)
    assert bt["fwd"]["attention"] == pytest.approx(by_hand, rel=1e-12)
    whole = block_times(cfg, Layout(gpus=8, **base), dev, 2)
    assert bt["fwd"]["matmul"] < whole["fwd"]["matmul"]  # half the rows per product
    # the ring: exposed once the network is slow enough (one 1 Gb/s link between 1-GPU nodes)
    slow = Layout(gpus=16, cp=2, gpus_per_node=1, nic_gbps=1.0, **base)
    pred = predict_step(cfg, slow, h100, "bp")
    net = Network.of(dev.params, 1, 1.0)
    kv = 2 * 1 * local * cfg.kv_width * 2  # keys and values of this GPU's tokens, bf16
    ring = net.p2p(kv, True)
    fwd, bwd = max(0.0, ring - bt["fwd"]["attention"]), max(0.0, 2 * ring - bt["bwd"]["attention"])
    assert fwd > 0 and pred.parts["comm_cp"] == pytest.approx(slow.accumulation * cfg.layers * (fwd + bwd), rel=1e-9)
    assert predict_step(cfg, lay, h100, "bp").parts["comm_cp"] == 0.0  # NVLink: hidden behind the attention
    # the gradients' reduction: dp x cp ranks, the bytes of 16 replicas under DDP
    ddp = dict(sharding="none", gpus_per_node=8)
    assert predict_step(cfg, Layout(gpus=16, cp=2, **base, **ddp), h100, "bp").dp_bytes == \
        predict_step(cfg, Layout(gpus=16, **base, **ddp), h100, "bp").dp_bytes
    assert predict_step(cfg, Layout(gpus=8, **base, **ddp), h100, "bp").step_time_s > 0


def test_the_plan_with_context_parallelism_says_so_and_keeps_one_gpus_share_of_the_activations(capsys):
    """The plan's memory keeps 1 / cp of each sequence's activations per GPU; the summary and the layout name the
    context-parallel degree; a model or kernel it cannot split is one line."""
    from trainingcost import cli
    from trainingcost.analytic.plan import Efficiency, PlanSpec, plan_table

    cfg = canonical_model(preset_entry("llama-2-7b"))
    spec = dict(tokens=1e9, gpus=16, global_batch=64, micro_batch=1, sharding="zero3",
                efficiency=Efficiency("predicted", 1.0, "test"))
    one = plan_table(cfg, PlanSpec(**spec), device("h100-sxm"), ["bp"], ["executed"]).iloc[0]
    two = plan_table(cfg, PlanSpec(**spec, cp=2), device("h100-sxm"), ["bp"], ["executed"]).iloc[0]
    assert two["mem_activations"] == pytest.approx(one["mem_activations"] / 2, rel=1e-9)
    assert (two["cp"], two["dp"], one["dp"]) == (2, 8, 16)
    assert two["mem_optimizer_state"] == pytest.approx(one["mem_optimizer_state"])  # ZeRO over dp x cp alike
    args = ["plan", "--preset", "llama-2-7b", "--tokens", "1e11", "--gpu", "h100-sxm", "--gpus", "64", "--rule", "bp"]
    assert cli.main([*args, "--cp", "4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "data x context x tensor x pipeline = 16 x 4 x 1 x 1 (each sequence split over 4 GPUs)" in out
    assert cli.main([*args, "--cp", "2", "--layout", "search"]) == 0
    assert " cp2 dp" in capsys.readouterr().out
    assert cli.main(["plan", "--preset", "bert-base", "--tokens", "1e9", "--gpu", "h100-sxm", "--gpus", "8",
                     "--cp", "2"]) == 2
    err = capsys.readouterr().err
    assert "--cp: context parallelism 2 splits a decoder's sequences (the model is an encoder)" in err
    assert err.count("\n") == 1


def test_a_mixtures_attention_is_its_dense_twins_and_context_parallelism_reaches_its_expert_groups():
    """A mixture of experts changes the feed-forward products only: its attention (kernel time, FLOPs, sequence
    length of the kernel) is its dense twin's, with or without expert parallelism. Its expert-parallel groups are
    data-parallel replicas, t x cp apart: under context parallelism they leave the node sooner. Korthikanti's
    selective recompute of the attention core repeats the context-parallel ring in the backward."""
    from trainingcost.analytic.steptime.step import block_times

    base = dict(arch="decoder", layers=2, d_model=1024, heads=8, d_ff=2048, vocab=1000, seq_len=4096, norm="rmsnorm",
                norm_position="pre", ffn="swiglu", positions="rotary", bias="none")
    dense, moe = canonical_model(base, ""), canonical_model({**base, "experts": 8, "experts_per_token": 2}, "")
    dev = DeviceModel.of(device("a100-80gb"), "bf16")
    for ep in (1, 8):
        lay = Layout(gpus=8, global_batch=8, micro_batch=1, ep=ep, host_block_s=(0.0, 0.0))
        assert block_times(moe, lay, dev, 2)["fwd"]["attention"] == \
            pytest.approx(block_times(dense, lay, dev, 2)["fwd"]["attention"], rel=1e-12)
    h100 = device("h100-sxm")
    net = Network.of(DeviceModel.of(h100, "bf16").params, 8)
    wide = Layout(gpus=64, global_batch=64, micro_batch=1, cp=8, ep=8, host_block_s=(0.0, 0.0))
    pred = predict_step(moe, wide, h100, "bp")
    ep_bytes = 1 * 4096 // 8 * 2 * 1024 * 2  # this GPU's tokens, k copies, d wide, bf16
    per_micro = pred.parts["comm_ep"] / wide.accumulation
    assert per_micro == pytest.approx(2 * 2 * 2 * net.all_to_all(ep_bytes, 8, 8), rel=1e-9)  # 2 blocks, fwd + bwd
    assert net.all_to_all(ep_bytes, 8, 8) > net.all_to_all(ep_bytes, 8, 1)  # across nodes, not inside one
    slow = dict(gpus=16, cp=2, global_batch=16, micro_batch=1, gpus_per_node=1, nic_gbps=1.0, host_block_s=(0.0, 0.0))
    none = predict_step(dense, Layout(**slow), h100, "bp").parts["comm_cp"]
    core = predict_step(dense, Layout(**slow, recompute="attention"), h100, "bp").parts["comm_cp"]
    full = predict_step(dense, Layout(**slow, recompute="full"), h100, "bp").parts["comm_cp"]
    assert none > 0 and core == pytest.approx(full, rel=1e-9) and core > none


def test_fp8_runs_the_blocks_linear_products_at_the_fp8_peak_and_casts_their_operands_by_hand():
    """fp8-mixed: the blocks' four linear products at the fp8 peak x the fp8 GEMM ceiling (tile, wave and depth
    factors as bf16's), attention and the LM head untouched; each product's input cast in the forward and its output
    gradient in the backward, (2 + 2) bytes per element (read in bf16, the operand and its transpose written in
    fp8); the weights cast, 4 bytes per element, in every micro-batch unless the framework caches them (then once per
    step, with the optimizer)."""
    from trainingcost.analytic.steptime.step import block_times, head_times

    cfg = canonical_model({**preset_entry("gpt2-small"), "layers": 4})  # not gated: four products per block
    h100 = device("h100-sxm")
    bf, f8 = DeviceModel.of(h100, "bf16"), DeviceModel.of(h100, "bf16", "fp8")
    assert f8.products.peak == 1979e12 and f8.products.params["gemm_ceiling"] == 0.709 and f8.peak == 989.5e12
    lay = Layout(gpus=8, global_batch=64, micro_batch=2, host_block_s=(0.0, 0.0))
    one, two = block_times(cfg, lay, bf, 2), block_times(cfg, lay, f8, 2)
    speed = (1979 * 0.709) / (989.5 * 0.801)
    assert two["fwd"]["matmul"] == pytest.approx(one["fwd"]["matmul"] / speed, rel=1e-12)
    assert two["bwd"]["matmul"] == pytest.approx(one["bwd"]["matmul"] / speed, rel=1e-12)
    assert (two["fwd"]["attention"], two["bwd"]["attention"]) == (one["fwd"]["attention"], one["bwd"]["attention"])
    assert head_times(cfg, lay, f8, 2) == head_times(cfg, lay, bf, 2)
    m, d, ff = 2 * cfg.seq_len, cfg.d_model, cfg.d_ff
    inputs = [m * d, m * d, m * d, m * ff]  # the products' inputs: (m x d) thrice, (m x d_ff) into the second FFN
    grads = [m * 3 * d, m * d, m * ff, m * d]  # their outputs' gradients
    assert two["fwd"]["memory"] - one["fwd"]["memory"] == pytest.approx(sum(bf.memory(4 * x) for x in inputs), rel=1e-12)
    assert two["bwd"]["memory"] - one["bwd"]["memory"] == pytest.approx(sum(bf.memory(4 * x) for x in grads), rel=1e-12)
    weights = [3 * d * d, d * d, ff * d, d * ff]
    assert two["weight_cast"] == pytest.approx(sum(bf.memory(4 * w) for w in weights), rel=1e-12)
    assert one["weight_cast"] == 0.0
    # per micro-batch (torchao) or once per step (Megatron-Core's Transformer Engine layers)
    each = Layout(gpus=8, global_batch=64, micro_batch=2, precision="fp8-mixed", host_block_s=(0.0, 0.0))
    cached = dataclasses.replace(each, fp8_weight_cache=True)
    a, b = predict_step(cfg, each, h100, "bp"), predict_step(cfg, cached, h100, "bp")
    M, blocks = each.accumulation, cfg.layers
    assert M == 4
    assert a.parts["memory"] - b.parts["memory"] == pytest.approx(M * blocks * two["weight_cast"], rel=1e-9)
    assert b.parts["optimizer"] - a.parts["optimizer"] == pytest.approx(blocks * two["weight_cast"], rel=1e-9)
    # the MFU is of the fp8 peak (NVIDIA's convention for its FP8 runs)
    assert a.mfu == pytest.approx(a.model_flops / (a.step_time_s * 8 * 1979e12), rel=1e-12)
    # a device without a published fp8 GEMM ceiling keeps its bf16 one, and says so
    l4 = DeviceModel.of(device("l4"), "bf16", "fp8")
    assert l4.products.params["gemm_ceiling"] == l4.params["gemm_ceiling"]
    assert "no published fp8 GEMM ceiling for l4" in l4.sources["gemm_ceiling_fp8"]


def test_fp8_is_refused_where_the_device_has_no_fp8_arithmetic_and_plans_where_it_has(capsys):
    from trainingcost import cli

    args = ["plan", "--preset", "llama-2-7b", "--tokens", "1e11", "--gpus", "8", "--rule", "bp", "--precision",
            "fp8-mixed"]
    assert cli.main([*args, "--gpu", "a100-80gb"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fp8-mixed needs bf16 and fp8 arithmetic, which a100-80gb has not, no fp8 (allowed on " \
        "a100-80gb: fp32, bf16-mixed, fp16-mixed)" in err[0]
    for search in (["--layout", "search"], ["--tp", "auto"]):  # the search refuses it before pricing anything
        assert cli.main([*args, "--gpu", "a100-80gb", *search]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "a100-80gb has not, no fp8" in err[0]
    assert cli.main([*args, "--gpu", "v100"]) == 2
    assert "fp8-mixed needs bf16 and fp8 arithmetic, which v100 has not, no bf16 or fp8" in capsys.readouterr().err
    assert cli.main([*args, "--gpu", "h100-sxm"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "fp8-mixed" in out
    assert cli.main([*args, "--gpu", "h100-sxm", "--mfu", "0.4", "--cost-model", "all"]) == 0  # of the fp8 peak
    out = capsys.readouterr().out
    assert " 0.400 " in out and "given MFU (of the fp8 peak)" in " ".join(out.split())
    assert "fp8 GEMM ceiling: Bekman" in " ".join(out.split())
    # our calibrations and measured runs time bf16 products: refused, one line
    assert cli.main([*args, "--gpu", "h100-sxm", "--calibration", "no-such.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calibration: times the products in bf16; fp8-mixed runs them in fp8" in err[0]


def test_the_framework_says_whether_it_caches_fp8_weights():
    from trainingcost.config.frameworks import framework, parse_framework

    assert framework("nemo").fp8_weight_cache and framework("megatron-core").fp8_weight_cache
    assert not framework("torchtitan").fp8_weight_cache and not framework("olmo-core").fp8_weight_cache
    entry = dict(dp_overlap=1.0, tp_overlap=0.0, zero3_granularity="block", zero3_gather="block", attention="flash",
                 sharding="fsdp", dp_rails=True, fp8_weight_cache="yes",
                 can=dict(shardings=["fsdp"], tensor=False, pipeline=False, interleave=False, sequence_parallel=False,
                          uneven=False))
    with pytest.raises(ConfigError, match=r"^x\.fp8_weight_cache: true or false \(got 'yes'\)$"):
        parse_framework("x", entry, {}, "x")


def test_fp8_gathers_carry_the_blocks_linear_weights_and_the_tensor_parallel_inputs_in_one_byte():
    """torchao's float8 all-gathers, counted by hand: under FSDP each block unit's all-gather carries its linear
    weights at one byte per element and its norms at two, the root (embedding, head, final norm) and every
    reduce-scatter unchanged; under sequence parallelism each all-gather of b s d activations carries one byte per
    element and the reduce-scatters two. bf16-mixed, or no sequence parallelism, changes nothing."""
    from trainingcost.analytic.comm import fsdp_collectives, plan_collectives
    from trainingcost.analytic.steptime.network import Network
    from trainingcost.config.frameworks import framework

    cfg = canonical_model(dict(arch="decoder", layers=2, d_model=64, heads=4, kv_heads=2, d_ff=160, vocab=512,
                               seq_len=128, norm="rmsnorm", ffn="swiglu", bias="none", positions="rotary",
                               norm_position="pre"), "")
    d, kv, ff, world = 64, 32, 160, 4
    linear = d * d + 2 * kv * d + d * d + 3 * ff * d  # q, k, v, o, gate, up, down: dims multiples of 16 and of 4
    norms = 2 * d
    plain = fsdp_collectives(cfg, "bp", "fsdp", world, "bf16")
    fp8 = fsdp_collectives(cfg, "bp", "fsdp", world, "bf16", gather_fp8=True)
    assert [(c.op, c.phase) for c in plain] == [(c.op, c.phase) for c in fp8]
    for a, b in zip(plain, fp8):
        if b.op == "reduce_scatter" or a.bytes != plain[1].bytes:  # the scatters, and the root's gathers
            assert b.bytes == a.bytes and b.dtype == "bf16"
        else:
            assert (a.bytes, b.bytes, b.dtype) == (2 * (linear + norms), linear + 2 * norms, "fp8")
    gathers = [c for c in fp8 if c.op == "all_gather"]
    assert len(gathers) == 6 and sum(c.bytes != plain[0].bytes for c in gathers) == 4  # 2 blocks, forward and backward
    # a pipeline stage (scale, blocks): each unit keeps its own mix, the root's gathers its reduce-scatter's bytes
    staged = fsdp_collectives(cfg, "bp", "fsdp", world, "bf16", 0.6, 1, gather_fp8=True)
    staged_bf16 = fsdp_collectives(cfg, "bp", "fsdp", world, "bf16", 0.6, 1)
    assert staged[0].bytes == staged[-1].bytes == staged_bf16[0].bytes  # the root's gather and reduce-scatter
    assert staged[1].bytes == round(staged_bf16[1].bytes * (linear + 2 * norms) / (2 * (linear + norms)))
    # the plan's listing passes it through, the fp32 reduce-scatters of torchtitan unchanged by it
    ops = plan_collectives(cfg, "bp", "fsdp", world, "bf16", reduce_dtype="fp32", gather_fp8=True)
    assert [c.bytes for c in ops.micro_batch] == [c.bytes * (2 if c.op == "reduce_scatter" else 1) for c in fp8]
    # the framework catalogue: torchtitan gathers tensor-parallel inputs in fp8, FSDP's weights only when asked;
    # NeMo's fp8 parameters are gathered as they are kept
    assert framework("torchtitan").fp8_tp_gather and not framework("torchtitan").fp8_gather
    assert framework("torchtitan+fp8-all-gather").fp8_gather and framework("nemo").fp8_gather
    assert not framework("megatron-core").fp8_gather and not framework("fsdp2").fp8_tp_gather
    from trainingcost.config.frameworks import parse_framework
    entry = dict(dp_overlap=1.0, tp_overlap=0.0, zero3_granularity="block", zero3_gather="block", attention="flash",
                 sharding="fsdp", dp_rails=True, fp8_tp_gather=1,
                 can=dict(shardings=["fsdp"], tensor=False, pipeline=False, interleave=False, sequence_parallel=False,
                          uneven=False))
    with pytest.raises(ConfigError, match=r"^x\.fp8_tp_gather: true or false \(got 1\)$"):
        parse_framework("x", entry, {}, "x")
    with pytest.raises(ConfigError, match=r"^x\.fp8_gather: false contradicts fp8_params: true"):
        parse_framework("x", {**entry, "fp8_tp_gather": False, "fp8_params": True, "fp8_gather": False}, {}, "x")

    # the memory of the unit FSDP holds gathered: a block's weights at one byte and its gradients at two, the root
    # (embeddings, head, final norm) at two and two; the larger of them. Here the root is larger (a 512-token
    # vocabulary, untied): nothing changes; with 32 tokens the block is, and its weights shrink to one byte
    from trainingcost.analytic.plan import Efficiency, PlanSpec, memory_per_gpu
    spec = dict(tokens=1e9, gpus=4, tp=1, pp=1, sharding="fsdp", precision="fp8-mixed", zero3_gather="block",
                efficiency=Efficiency("mfu", 0.4, "given"))
    block = linear + norms
    for vocab, root in ((512, 2 * 512 * d + d), (32, 2 * 32 * d + d)):
        small = canonical_model(dict(arch="decoder", layers=2, d_model=64, heads=4, kv_heads=2, d_ff=160, vocab=vocab,
                                     seq_len=128, norm="rmsnorm", ffn="swiglu", bias="none", positions="rotary",
                                     norm_position="pre", tie_embeddings=False), "")
        facts = model_facts(small, ["bp"], "adam")
        assert (facts.one_block, facts.parameters - facts.blocks_parameters) == (block, root)
        as_bf16 = memory_per_gpu(facts, PlanSpec(**spec), "bp", 0)["gathered"]
        as_fp8 = memory_per_gpu(facts, PlanSpec(**spec, fp8_gather=True), "bp", 0)["gathered"]
        assert as_bf16 == 4 * max(block, root) and as_fp8 == max(3 * block, 4 * root)
        assert memory_per_gpu(facts, PlanSpec(**{**spec, "precision": "bf16-mixed"}, fp8_gather=True), "bp", 0)[
            "gathered"] == as_bf16
    assert as_fp8 == 3 * block < as_bf16  # the 32-token vocabulary's

    # tensor parallelism with sequence parallelism: 2 pairs per block per pass, 2 backward, full recompute 2 more
    big = canonical_model({**preset_entry("llama-2-7b"), "layers": 4})
    h100 = device("h100-sxm")
    base = dict(gpus=8, tp=8, global_batch=8, micro_batch=1, sequence_parallel=True, precision="fp8-mixed",
                recompute="full", host_block_s=(0.0, 0.0))
    off = predict_step(big, Layout(**base), h100, "bp").parts["comm_tp"]
    on = predict_step(big, Layout(**base, fp8_tp_gather=True), h100, "bp").parts["comm_tp"]
    net = Network.of(DeviceModel.of(h100, "bf16", "fp8").params)
    b = 1 * big.seq_len * big.d_model * 2
    pairs = 4 * (2 + 2 + 2) * Layout(**base).accumulation  # blocks x (forward, backward, recomputed) x 8 micro-batches
    assert Layout(**base).accumulation == 8
    assert off - on == pytest.approx(pairs * (net.all_gather(b, 8, 1) - net.all_gather(b // 2, 8, 1)), rel=1e-9)
    # a mixture of experts: its pair gathers bf16 (torchtitan's plain PrepareModuleInputOutput), the attention's fp8
    moe = canonical_model({**preset_entry("mixtral-8x7b"), "layers": 2})
    m_off = predict_step(moe, Layout(**base), h100, "bp").parts["comm_tp"]
    m_on = predict_step(moe, Layout(**base, fp8_tp_gather=True), h100, "bp").parts["comm_tp"]
    bm = 1 * moe.seq_len * moe.d_model * 2
    assert m_off - m_on == pytest.approx(2 * (2 + 2 + 2) * 8 / 2 * (net.all_gather(bm, 8, 1) -
                                                                    net.all_gather(bm // 2, 8, 1)), rel=1e-9)
    for same in (dict(base, precision="bf16-mixed"), dict(base, sequence_parallel=False)):
        assert predict_step(big, Layout(**same, fp8_tp_gather=True), h100, "bp").parts["comm_tp"] == \
            predict_step(big, Layout(**same), h100, "bp").parts["comm_tp"]


def test_the_plan_prices_fp8_parameter_gathers_where_the_framework_gathers_fp8(capsys):
    """From the command line: torchtitan's FSDP with float8 all-gathers moves fewer data-parallel bytes per step than
    torchtitan's default (bf16 gathers), by the blocks' linear weights' second byte on each of their gathers; the
    framework line says which gathers run in fp8; under bf16-mixed the two frameworks price the same step."""
    import csv as csv_module
    import io

    from trainingcost import cli

    def row(framework, precision="fp8-mixed"):
        assert cli.main(["plan", "--preset", "llama-3-8b", "--tokens", "1e11", "--gpu", "h100-sxm", "--gpus", "64",
                         "--rule", "bp", "--precision", precision, "--framework", framework, "--format", "csv"]) == 0
        return next(csv_module.DictReader(io.StringIO(capsys.readouterr().out)))

    plain, fp8 = row("torchtitan"), row("torchtitan+fp8-all-gather")
    cfg = canonical_model(preset_entry("llama-3-8b"))
    d, kv, ff, blocks = cfg.d_model, cfg.kv_width, cfg.d_ff, cfg.layers
    linear = blocks * (2 * d * d + 2 * kv * d + 3 * ff * d)  # q, o; k, v; gate, up, down (all multiples of 64)
    micro_batches = int(plain["grad_accumulation"])
    assert (micro_batches, plain["sharding"]) == (8, "fsdp")  # 512 sequences over 64 ranks, one at a time
    # every block gathered for its forward and again for its backward, its linear weights one byte lighter each
    assert float(plain["step_dp_bytes"]) - float(fp8["step_dp_bytes"]) == micro_batches * 2 * linear
    from trainingcost.planning import system_fields
    said = {name: system_fields(name, None, None, None, device("h100-sxm"), {})["framework_source"]
            for name in ("torchtitan", "torchtitan+fp8-all-gather", "fsdp2")}
    assert said["torchtitan"].endswith("under fp8-mixed it gathers the sequence-parallel activations and gradients "
                                       "in fp8")
    assert "gathers the parameters' linear weights and the sequence-parallel" in said["torchtitan+fp8-all-gather"]
    assert "in fp8" not in said["fsdp2"]
    assert row("torchtitan", "bf16-mixed")["step_time_s"] == row("torchtitan+fp8-all-gather", "bf16-mixed")["step_time_s"]


def test_the_h100_pcie_is_a_hopper_with_its_own_sms_and_the_generic_network_said():
    """The H100 PCIe: 114 SMs (the H100 architecture whitepaper), SM90 tiles, Hopper's fused-attention shares of its
    own peak (an assumption, cited as such), FlashAttention-3 allowed; its network keeps the stated generic defaults."""
    sxm, pcie = DeviceModel.of(device("h100-sxm"), "bf16"), DeviceModel.of(device("h100-pcie"), "bf16")
    assert pcie.params["sms"] == 114 and pcie.params["tile"] == sxm.params["tile"] == [128, 256, 64]
    assert pcie.peak == 756.5e12
    for causal in (False, True):
        for kernel in ("flash", "flash3", "cudnn"):
            assert pcie.flash(1e12, True, kernel, causal, 4096) / sxm.flash(1e12, True, kernel, causal, 4096) == \
                pytest.approx(989.5 / 756.5, rel=1e-12)
    assert "model assumption" in pcie.sources["flash_forward"]
    assert "generic default" in pcie.sources["intra_gbs"]
    assert device("h100-pcie").attention_kernel("flash3") == "flash3"


def test_fp8_follows_a_measured_device_and_keeps_its_weight_caches_in_memory():
    """A --device-model measurement (bf16) moves the catalogue's fp8 ceiling by the same ratio; a framework that caches
    the fp8 weights holds 2 more bytes per block parameter; GB200 is matched before B200 by torch's device name."""
    from trainingcost.analytic.plan import Efficiency, PlanSpec, plan_table
    from trainingcost.analytic.steptime.device import with_measurement
    from trainingcost.config.hardware import match_device

    h100 = device("h100-sxm")
    data = {"kind": "device_model", "gemm_flops": 0.5 * 989.5e12, "bandwidth": [[1e9, 3.0e12]],
            "flash_forward_flops": 3e14, "flash_backward_flops": 2e14, "launch_s": 3e-6,
            "device_name": "NVIDIA H100 80GB HBM3", "dtype": "bf16", "trusted": True}
    measured = with_measurement(h100, data, "bf16", "dm.json")
    f8 = DeviceModel.of(measured, "bf16", "fp8")
    assert f8.products.params["gemm_ceiling"] == pytest.approx(0.709 * 0.5 / 0.801, rel=1e-12)
    assert "the measured bf16 ceiling x the catalogue's fp8 / bf16 ceilings" in f8.sources["gemm_ceiling_fp8"]
    cfg = canonical_model(preset_entry("llama-2-7b"))
    spec = dict(tokens=1e9, gpus=8, global_batch=64, micro_batch=1, sharding="zero1", precision="fp8-mixed",
                efficiency=Efficiency("predicted", 1.0, "test"))
    plain = plan_table(cfg, PlanSpec(**spec), h100, ["bp"], ["executed"]).iloc[0]
    cached = plan_table(cfg, PlanSpec(**spec, fp8_weight_cache=True), h100, ["bp"], ["executed"]).iloc[0]
    facts = model_facts(cfg, ["bp"], "adam")
    assert cached["mem_parameters"] - plain["mem_parameters"] == pytest.approx(2.0 * facts.blocks_parameters, rel=1e-9)
    # weights kept in fp8 (NeMo's fp8_params): the copy and its transpose replace the bf16 working weights
    in_fp8 = plan_table(cfg, PlanSpec(**spec, fp8_weight_cache=True, fp8_params=True), h100, ["bp"], ["executed"]).iloc[0]
    assert in_fp8["mem_parameters"] == plain["mem_parameters"]
    assert match_device("NVIDIA GB200").name == "gb200" and match_device("NVIDIA B200").name == "b200"
    from trainingcost.config.hardware import parse_steptime

    with pytest.raises(ConfigError, match=r"^d\.steptime\.gemm_ceiling_fp8: a share of the peak, in \(0, 1\] \(got 1\.2\)$"):
        parse_steptime({"gemm_ceiling_fp8": 1.2}, {}, "a user device", "d.steptime")


def test_a_published_row_may_name_its_precision_as_its_source_prints_it():
    rows = runs.load(ROOT / "benchmarks" / "published_runs.csv")
    row = next(r for r in rows if r["precision"] == "fp8-mixed")
    for printed in ("FP8", "fp8", "amp_fp8"):
        assert runs.layout_of({**row, "precision": printed}).precision == "fp8-mixed"
    assert runs.layout_of({**row, "precision": "BF16"}).precision == "bf16-mixed"


@pytest.mark.parametrize("sp", [False, True])
def test_a_parallel_block_reduces_its_branches_once_per_forward(sp):
    """GPT-NeoX's gpt_j_residual sums the attention's and the FFN's partial outputs before one all-reduce (a
    reduce-scatter under sequence parallelism) per block forward; each branch's column-parallel input still
    all-reduces its gradient: forward pairs 1 (a sequential block: 2), backward 2. Without overlap the tensor-parallel
    seconds are in the ratio (1 + 2) / (2 + 2)."""
    base = canonical_model({**preset_entry("pythia-1.4b"), "seq_len": 2048})
    assert base.parallel
    sequential = base.replace(parallel_block="none")
    lay = Layout(gpus=8, global_batch=8, micro_batch=1, tp=8, sequence_parallel=sp)
    a100 = device("a100-80gb")
    par, seq = (predict_step(c, lay, a100).parts["comm_tp"] for c in (base, sequential))
    assert par == pytest.approx(seq * 3 / 4, rel=1e-12)
    # recomputed, the forward's pair repeats once more: (1 + 2 + 1) / (2 + 2 + 2)
    full = dataclasses.replace(lay, recompute="full")
    par, seq = (predict_step(c, full, a100).parts["comm_tp"] for c in (base, sequential))
    assert par == pytest.approx(seq * 4 / 6, rel=1e-12)


@pytest.mark.parametrize("script", ["bench_collectives.py", "bench_plan_accuracy.py", "bench_layout_ranking.py",
                                    "bench_expert_layouts.py", "bench_plan_memory.py"])
def test_a_benchmark_given_a_table_that_is_not_there_says_so_in_one_line(script, tmp_path):
    for bad, said in ((tmp_path / "nowhere.csv", "no such file"), (tmp_path, "not a file")):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--csv", str(bad)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines()[-1].endswith(f"argument --csv: {bad}: {said}"), done.stderr


def test_the_collectives_benchmark_names_the_columns_a_table_lacks(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_collectives.py"), "--csv", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no column source, gpu, nodes, gpus_per_node, gpus, op, message_bytes" in done.stderr
