"""MoE parallel folding (--etp below tp; Megatron-Core's expert tensor parallelism, Liu et al. 2025, "MoE Parallel
Folding", arXiv 2504.14960): the experts get their own tensor-parallel degree and their expert-parallel groups fold
over the tensor- and data-parallel GPUs of a stage, as NVIDIA's Qwen3 235B recipe on 256 H100s runs (TP 2, EP 32,
expert TP 1: EP larger than the data-parallel degree 16)."""

from __future__ import annotations

import dataclasses

import pytest

from trainingcost import cli
from trainingcost.analytic.plan import Efficiency, PlanSpec, all_to_all_bytes, check_spec, memory_per_gpu
from trainingcost.analytic.plan_facts import model_facts
from trainingcost.analytic.steptime import Layout, predict_step
from trainingcost.analytic.steptime.device import DeviceModel
from trainingcost.analytic.steptime.step import block_times
from trainingcost.config import ConfigError, canonical_model
from trainingcost.config.hardware import device
from trainingcost.config.presets import PRESETS

H100 = device("h100-sxm")


def mixtral():
    return canonical_model(PRESETS["mixtral-8x7b"]).replace(seq_len=2048)


def _spec(**changes):
    return PlanSpec(**{"tokens": 1e9, "gpus": 64, "tp": 2, "efficiency": Efficiency("mfu", 0.4, "given"),
                       "sequence_parallel": True, **changes})


def test_folding_admits_ep_beyond_the_data_parallel_degree_and_refuses_in_one_line():
    cfg = mixtral()
    check_spec(_spec(gpus=8, ep=8, etp=1), cfg, H100)  # tp 2 x dp 4 = 8 GPUs per stage: ep 8 x etp 1 folds over them
    with pytest.raises(ConfigError) as err:
        check_spec(_spec(gpus=8, ep=8), cfg, H100)  # etp = tp: the groups are data-parallel replicas (dp 4)
    assert "does not divide the data-parallel degree 4" in str(err.value) and "--etp" in str(err.value)
    with pytest.raises(ConfigError, match=r"^etp: the experts' tensor-parallel degree 3 does not divide tp 2$"):
        check_spec(_spec(gpus=8, ep=2, etp=3), cfg, H100)
    with pytest.raises(ConfigError, match=r"^ep: ep x etp = 16 does not divide the 8 GPUs of a pipeline stage"):
        check_spec(_spec(gpus=8, tp=4, ep=8, etp=2), cfg, H100)


def test_the_experts_work_per_gpu_is_the_same_folded_or_not_and_their_shapes_follow_etp():
    """Per GPU, token-balanced: etp = tp runs m k rows (all of the tp group's tokens) d_ff / tp wide; etp = 1 runs
    m k / tp rows (its own sequence-parallel tokens' routed copies, gathered from the ep group) d_ff wide: the same
    6 m k d d_ff / tp FLOPs of the three expert products, in other shapes."""
    cfg = mixtral()
    dev = DeviceModel.of(H100, "bf16")
    base = Layout(gpus=8, global_batch=8, micro_batch=1, tp=2, ep=4, sequence_parallel=True, host_block_s=(0.0, 0.0))
    folded = dataclasses.replace(base, ep=8, etp=1)
    m, k, d, ff, E = cfg.seq_len, cfg.experts_per_token, cfg.d_model, cfg.d_ff, cfg.experts
    one, two = block_times(cfg, base, dev, 2), block_times(cfg, folded, dev, 2)
    assert one["linear_flops"]["ffn"] == pytest.approx(two["linear_flops"]["ffn"], rel=1e-12)
    router = 2.0 * m * E * d  # not split over tp
    assert one["linear_flops"]["ffn"] == pytest.approx(router + 6.0 * m * k * d * ff, rel=1e-12)  # x tp GPUs
    # other shapes: folded, each of the E / 8 experts on this GPU runs m k / (2 E / 8) rows d_ff wide; unfolded,
    # each of its E / 4 experts m k / (E / 4) rows d_ff / 2 wide
    gated = 2 * ff
    assert two["fwd"]["matmul"] != one["fwd"]["matmul"]
    rows_folded, rows_plain = m * k // (2 * E), m * k // E
    folded_ffn = (E // 8) * (dev.products.gemm(rows_folded * 8, gated, d) + dev.products.gemm(rows_folded * 8, d, ff))
    plain_ffn = (E // 4) * (dev.products.gemm(rows_plain * 4, gated // 2, d) + dev.products.gemm(rows_plain * 4, d, ff // 2))
    assert two["fwd"]["matmul"] - one["fwd"]["matmul"] == pytest.approx(folded_ffn - plain_ffn, rel=1e-9)


def test_expert_memory_and_all_to_all_bytes_by_hand():
    cfg = mixtral()
    facts = model_facts(cfg, ["bp"], "adam")
    experts, dense = facts.expert_parameters, facts.parameters - facts.expert_parameters
    base, folded = _spec(gpus=8, ep=4, sharding="none"), _spec(gpus=8, ep=8, etp=1, sharding="none")
    a, b = (memory_per_gpu(facts, s, "bp", 0)["parameters"] for s in (base, folded))
    # bf16 weights: the experts / (ep x etp) per GPU, the rest / tp (pp 1): 2 x (E/8 + dense/2) against 2 x (E/8 + ...)
    assert a == pytest.approx(2 * (experts / (4 * 2) + dense / 2), rel=1e-9)
    assert b == pytest.approx(2 * (experts / (8 * 1) + dense / 2), rel=1e-9)
    tokens = 2 * cfg.seq_len  # micro-batch 2
    assert all_to_all_bytes(cfg, base, 2) == pytest.approx(tokens * 2 * cfg.d_model * 2 * 3 / 4)
    assert all_to_all_bytes(cfg, folded, 2) == pytest.approx(tokens / 2 * 2 * cfg.d_model * 2 * 7 / 8)


def test_the_step_prices_the_folded_layout_and_the_cli_says_so(capsys):
    cfg = mixtral()
    lay = Layout(gpus=16, global_batch=32, micro_batch=1, tp=2, ep=16, etp=1, sequence_parallel=True)
    assert predict_step(cfg, lay, H100, "bp").parts["comm_ep"] > 0
    args = ["plan", "--preset", "mixtral-8x7b", "--seq-len", "2048", "--gpu", "h100-sxm", "--gpus", "16", "--tp", "2",
            "--sequence-parallel", "--ep", "8", "--etp", "1", "--global-batch", "32", "--rule", "bp", "--tokens",
            "1e9", "--cost-model", "all"]
    assert cli.main(args) == 0
    assert "folded over tensor x data-parallel, experts' tensor-parallel 1" in capsys.readouterr().out
    assert cli.main([*args[:-2], "--etp", "3"]) == 2
    assert "etp: the experts' tensor-parallel degree 3 does not divide tp 2" in capsys.readouterr().err


def test_the_search_folds_where_etp_is_given():
    """tp 2 on 8 GPUs leaves dp 4: the plain search stops at ep 4, the folded one (--etp 1) reaches all 8 experts."""
    from trainingcost.analytic.layout import _structures

    cfg = mixtral()
    rejected: list = []
    plain = {e for t, p, dp, e, _ in _structures(cfg, _spec(gpus=8), frozenset({"ep"}), 8, False, rejected)}
    folded = {e for t, p, dp, e, _ in _structures(cfg, _spec(gpus=8, etp=1), frozenset({"ep"}), 8, False, rejected)}
    assert plain == {1, 2, 4} and folded == {1, 2, 4, 8}


@pytest.mark.parametrize("name", ["published_runs_moe.csv", "published_runs_blackwell.csv", "published_runs_amd.csv",
                                  "published_runs_schedules.csv", "published_runs_offload.csv"])
def test_the_runs_scored_apart_load_and_plan(name):
    """benchmarks/published_runs_moe.csv (mixtures of experts, one of them folded), the Blackwell and AMD rows: each row
    names a catalogue framework and cluster, and plans with nothing else."""
    from pathlib import Path

    from trainingcost.analytic.steptime import runs
    from trainingcost.config.frameworks import clusters, frameworks

    rows = runs.load(Path(__file__).resolve().parents[1] / "benchmarks" / name)
    assert rows and all(r["framework"] in frameworks() and (not r["cluster"] or r["cluster"] in clusters()) for r in rows)
    for row in rows:
        cfg, lay = runs.model_of(row), runs.layout_of(row)
        step = predict_step(cfg, lay, device(row["gpu"]), "bp").step_time_s
        assert 0.5 < step / runs.measured_step_time(row) < 2.0
    if name == "published_runs_moe.csv":
        folded = [runs.layout_of(r) for r in rows if r["etp"]]
        assert folded and all(lay.ep > lay.dp and lay.expert_tp < lay.tp for lay in folded)


def test_etp_equal_to_tp_is_the_unfolded_plan():
    cfg = mixtral()
    lay = Layout(gpus=16, global_batch=32, micro_batch=1, tp=2, ep=4, sequence_parallel=True)
    a = predict_step(cfg, lay, H100, "bp")
    b = predict_step(cfg, dataclasses.replace(lay, etp=2), H100, "bp")
    assert a.step_time_s == b.step_time_s and a.parts == b.parts


@pytest.mark.parametrize("changes, message", [
    (dict(ep=1, etp=0), "etp: must be a positive integer (got 0)"),
    (dict(ep=1, etp=3), "etp: the experts' tensor-parallel degree 3 does not divide tp 2"),
    (dict(ep=8, etp=1, sequence_parallel=False), "etp: the experts' tensor-parallel degree 1 below tp 2 needs "
                                                 "--sequence-parallel"),
])
def test_etp_is_checked_whatever_ep(changes, message):
    with pytest.raises(ConfigError) as err:
        check_spec(_spec(gpus=8, **changes), mixtral(), H100)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_etp_on_a_dense_model_is_one_line():
    dense = canonical_model(PRESETS["llama-2-7b"])
    with pytest.raises(ConfigError, match=r"^etp: the experts' tensor-parallel degree needs a mixture of experts"):
        check_spec(_spec(gpus=8, etp=1), dense, H100)


def test_the_folded_mixture_runs_no_tensor_parallel_pair_at_etp_1():
    """The attention's all-gather and reduce-scatter stay over tp; the mixture's pair runs over etp GPUs: none at 1."""
    cfg = mixtral()
    base = Layout(gpus=16, global_batch=32, micro_batch=1, tp=2, ep=8, sequence_parallel=True, host_block_s=(0, 0))
    folded = dataclasses.replace(base, etp=1)
    plain = dataclasses.replace(base, ep=4)
    tp_folded = predict_step(cfg, folded, H100, "bp").parts["comm_tp"]
    tp_plain = predict_step(cfg, plain, H100, "bp").parts["comm_tp"]
    assert tp_folded == pytest.approx(tp_plain / 2, rel=1e-9)  # one of the block's two pairs


def test_the_search_keeps_a_given_ep_where_it_folds_and_shows_etp(capsys):
    args = ["plan", "--preset", "mixtral-8x7b", "--layers", "4", "--seq-len", "2048", "--gpu", "h100-sxm", "--gpus",
            "8", "--framework", "megatron", "--layout", "search", "--tp", "2", "--ep", "8", "--etp", "1", "--rule", "bp",
            "--tokens", "1e9"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "tp2 pp1 dp4" in out and "ep8 etp1" in out and " sp " in out  # ep 8 > dp 4: folded, sequence parallel
