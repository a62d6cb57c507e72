"""Pipeline schedules (analytic/steptime/schedules.py): the bubbles by hand, against torch.distributed.pipelining's own
schedules run on a timeline, in the step, in the plan's memory, and the one-line refusals."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

import trainingcost as tc
from trainingcost import cli
from trainingcost.analytic.steptime import Layout, predict_step, schedules
from trainingcost.analytic.steptime.step import micro_batch, pipeline_seconds, rule_work
from trainingcost.config import ConfigError, canonical_model, preset_entry
from trainingcost.config.hardware import device


def test_the_bubble_rates_by_hand():
    f, b, w = 1.0, 1.2, 0.8
    assert schedules.rate("1f1b", f, b, w) == pytest.approx(3.0)  # F + B + W
    assert schedules.rate("zb-h1", f, b, w) == pytest.approx(1.4)  # F + B - W
    assert schedules.rate("zb-h1", 1.0, 1.0, 1.5) == pytest.approx(1.0)  # W fills no more than the idle slot
    assert schedules.rate("zb-h2", f, b, w) == pytest.approx(0.6)  # F + B - 2W
    assert schedules.rate("zb-h2", 1.0, 1.0, 1.5) == 0.0
    assert schedules.rate("zb-v", 1.0, 1.0, 1.0) == 0.0  # zero bubble at F = B = W
    assert schedules.rate("dualpipe", f, b, w) == pytest.approx(1.0 + 2.4 - 0.8)  # F&B + B_full - 3W, F&B = F+B+W
    assert schedules.others_scale("dualpipe", 8) == pytest.approx(3 / 7)  # (p/2 - 1) of the p - 1 other stages
    assert schedules.in_flight("zb-h2", 4) == pytest.approx(7 / 4) and schedules.in_flight("dualpipe", 4) == 1.25
    assert schedules.in_flight("zb-v", 4) == 1.0 and schedules.parameter_copies("dualpipe") == 2


# -- torch's own schedules on a timeline ----------------------------------------------------------------------------


def _torch_order(cls, pp: int, per_rank: int, style: str, m: int):
    """torch's action lists for every rank (the schedule builds them from the stages' indices alone)."""
    n = pp * per_rank
    idx = [0, 2 * pp - 1] if style == "v" else [k * pp for k in range(per_rank)]
    stages = [SimpleNamespace(num_stages=n, group_size=pp, group_rank=0, stage_index=i, is_first=i == 0,
                              is_last=i == n - 1, stage_index_to_group_rank=None, submod=None) for i in idx]
    return cls(stages, n_microbatches=m).pipeline_order


def _makespan(order, n_stages: int, f: float, b: float, w: float) -> float:
    """Each rank runs its actions in order, each once its inputs exist: a stage's forward after the previous stage's,
    its input gradient after its forward and the next stage's input gradient, its weight gradient after its input
    gradient; an overlapped pair runs its two actions back to back."""
    from torch.distributed.pipelining import schedules as S

    kinds = {S.F: "F", S.I: "I", S.B: "I", S.W: "W"}
    seconds = {S.F: f, S.I: b, S.W: w, S.B: b + w}
    acts = {r: [a for a in order[r] if a is not None and a.computation_type in (S.F, S.I, S.W, S.B, S.OVERLAP_F_B)]
            for r in order}

    def needs(a):
        s, m, kind = a.stage_index, a.microbatch_index, a.computation_type
        if kind == S.F:
            return [("F", s - 1, m)] if s else []
        if kind in (S.I, S.B):
            return [("F", s, m)] + ([("I", s + 1, m)] if s < n_stages - 1 else [])
        return [("I", s, m)]

    done, pos, clock = {}, dict.fromkeys(order, 0), dict.fromkeys(order, 0.0)
    moved = True
    while moved:
        moved = False
        for r in order:
            while pos[r] < len(acts[r]):
                a = acts[r][pos[r]]
                parts = a.sub_actions if a.computation_type == S.OVERLAP_F_B else (a,)
                ready = [done.get(x) for p in parts for x in needs(p)]
                if None in ready:
                    break
                clock[r] = max([clock[r], *ready]) + sum(seconds[p.computation_type] for p in parts)
                for p in parts:
                    done[(kinds[p.computation_type], p.stage_index, p.microbatch_index)] = clock[r]
                pos[r] += 1
                moved = True
    assert all(pos[r] == len(acts[r]) for r in order)
    return max(clock.values())


TIMES = [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8), (1.0, 1.5, 0.5), (1.0, 1.0, 1.5), (2.0, 1.0, 1.5)]


@pytest.mark.parametrize("f,b,w", TIMES)
@pytest.mark.parametrize("p,m", [(4, 8), (8, 16)])
def test_zb_h1_and_interleaved_are_torchs_own_schedules(p, m, f, b, w):
    """torch 2.13's ScheduleInterleavedZeroBubble with one stage per rank is ZB-H1, and its ScheduleInterleaved1F1B
    with two is interleaved 1F1B: their bubbles on a timeline equal the closed forms, unequal F, B, W included."""
    S = pytest.importorskip("torch.distributed.pipelining.schedules")
    zb = _makespan(_torch_order(S.ScheduleInterleavedZeroBubble, p, 1, "loop", m), p, f, b, w) - m * (f + b + w)
    assert zb == pytest.approx((p - 1) * schedules.rate("zb-h1", f, b, w))
    v = 2  # each stage is half a rank's layers: half its seconds
    inter = _makespan(_torch_order(S.ScheduleInterleaved1F1B, p, v, "loop", m), p * v, f / v, b / v, w / v)
    assert inter - m * (f + b + w) == pytest.approx((p - 1) * schedules.rate("interleaved", f, b, w) / v)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 16)])
def test_dualpipe_at_equal_times_is_torchs_dualpipev(p, m):
    """DeepSeek-V3's bubble (PP/2 - 1)(F&B + B - 3W) over PP stages equals torch's ScheduleDualPipeV on a timeline when
    F = B = W, the report's own comparison (at unequal times torch's order departs from the closed form:
    docs/planning.md, "Pipeline schedules", gives by how much)."""
    S = pytest.importorskip("torch.distributed.pipelining.schedules")
    n, (f, b, w) = 2 * p, (1.0, 1.0, 1.0)  # DualPipeV: p ranks, two stages each, each half a rank's seconds
    got = _makespan(_torch_order(S.ScheduleDualPipeV, p, 2, "v", m), n, f / 2, b / 2, w / 2) - m * (f + b + w)
    assert got == pytest.approx((n - 1) * schedules.others_scale("dualpipe", n) * schedules.rate("dualpipe", f / 2, b / 2,
                                                                                                   w / 2))


# -- in the step and the plan ---------------------------------------------------------------------------------------


def _llama():
    return canonical_model(preset_entry("llama-2-7b", "p"), "")


def test_the_step_prices_each_schedule_from_the_split_backward():
    cfg, dev = _llama(), device("h100-sxm")
    work = rule_work(cfg, ["bp"])
    base = dict(gpus=64, global_batch=256, micro_batch=1, tp=2, pp=4, sharding="zero1")
    one = micro_batch(cfg, Layout(**base), dev, "bp", work)
    (f, wg), (fh, wh) = one.fw_block, one.fw_head
    assert 0 < wg < f < one.per_block and 0 < wh  # W: the weight-gradient products, a share of the block
    others = sum(cfg.depth(s) for s in cfg.stacks) - one.per_stage
    for name in ("zb-h1", "zb-h2", "zb-v", "dualpipe"):
        lay = Layout(**base, schedule=name)
        _, bubble = pipeline_seconds(cfg, lay, micro_batch(cfg, lay, dev, "bp", work), work["bp"])
        by_hand = schedules.others_scale(name, 4) * (
            others * schedules.rate(name, f, one.per_block - f - wg, wg)
            + (1 - one.ends) * schedules.rate(name, fh, one.head_seq - fh - wh, wh))
        assert bubble == pytest.approx(by_hand)
    steps = {name: predict_step(cfg, Layout(**base, schedule=name), dev, "bp", work) for name in ("", "zb-h1", "zb-v")}
    assert steps["zb-h1"].parts["bubble"] < steps[""].parts["bubble"]
    assert steps["zb-v"].parts["comm_pp"] == pytest.approx(2 * steps[""].parts["comm_pp"])  # the V's two crossings


def test_the_plan_keeps_each_schedules_activations_and_parameters():
    common = dict(preset="llama-2-7b", tokens=1e11, gpu="h100-sxm", gpus=64, tp=2, pp=4, rule="bp", micro_batch=1,
                  sharding="zero1")
    t = {s: tc.plan(**common, schedule=s).table.iloc[0] for s in ("1f1b", "zb-h1", "zb-h2", "dualpipe")}
    assert t["zb-h1"]["mem_activations"] == t["1f1b"]["mem_activations"]
    assert t["zb-h2"]["mem_activations"] == pytest.approx(t["1f1b"]["mem_activations"] * 7 / 4)
    assert t["dualpipe"]["mem_activations"] == pytest.approx(t["1f1b"]["mem_activations"] * 5 / 4)
    for part in ("parameters", "gradients", "optimizer_state", "master_weights"):
        assert t["dualpipe"][f"mem_{part}"] == pytest.approx(2 * t["1f1b"][f"mem_{part}"])
    assert [t[s]["schedule"] for s in t] == ["1f1b", "zb-h1", "zb-h2", "dualpipe"]
    assert t["zb-h1"]["step_bubble_s"] < t["1f1b"]["step_bubble_s"]
    assert tc.plan(**{**common, "pp": 1, "tp": 2}).table.iloc[0]["schedule"] == ""


def _peak_in_flight(order) -> int:
    """The most forward chunks any rank holds whose backward has not run yet, in torch's own action order (memory
    depends on the order, not on the times)."""
    from torch.distributed.pipelining import schedules as S

    most = 0
    for actions in order.values():
        held = 0
        for a in actions:
            for part in (a.sub_actions if a is not None and a.computation_type == S.OVERLAP_F_B else (a,)):
                if part is not None:
                    held += {S.F: 1, S.B: -1, S.I: -1}.get(part.computation_type, 0)
                    most = max(most, held)
    return most


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (8, 2, 16), (8, 3, 24), (8, 4, 32), (4, 4, 16), (4, 2, 4), (8, 2, 8)])
def test_interleaved_keeps_what_torchs_interleaved_order_keeps(p, v, m):
    """torch's ScheduleInterleaved1F1B keeps p v + p - 1 chunks of 1/v stage on its first rank: 1 + (p - 1)/(p v) of
    1F1B's p micro-batches (Korthikanti et al. 2022, section 4.2.3), the plan's factor, and no more than the step's m
    micro-batches; 1F1B (one chunk per rank, the zero-bubble order ZB-H1) and ZB-V keep p, or m if fewer."""
    S = pytest.importorskip("torch.distributed.pipelining.schedules")

    def kept(name):
        return p * schedules.in_flight(name, p, v) * schedules.kept_share(name, p, v, m)

    chunks = _peak_in_flight(_torch_order(S.ScheduleInterleaved1F1B, p, v, "loop", m))
    assert chunks / v == pytest.approx(kept("interleaved"))
    for few in (m, 2, 1):  # fewer micro-batches than stages too
        zb = _peak_in_flight(_torch_order(S.ScheduleInterleavedZeroBubble, p, 1, "loop", few))
        assert zb == p * schedules.in_flight("zb-h1", p) * schedules.kept_share("zb-h1", p, 1, few) == min(p, few)
    assert _peak_in_flight(_torch_order(S.ScheduleZBVZeroBubble, p, 2, "v", m)) / 2 == kept("zb-v")


def test_unfused_scores_are_kept_for_every_micro_batch_in_flight():
    """Megatron's unfused attention keeps 5 a s^2 bytes per block and sequence (Korthikanti et al. 2022, eq. 2): on
    1F1B's first stage pp micro-batches of its L/pp blocks, by hand; interleaved keeps 1 + (pp - 1)/(pp v) times as
    many, ZB-H2 (2 pp - 1)/pp."""
    common = dict(arch="decoder", layers=8, d_model=512, heads=8, d_ff=2048, vocab=1000, seq_len=256, tokens=1e8,
                  gpu="a100-80gb", gpus=4, pp=4, rule="bp", micro_batch=2, global_batch=16, sharding="none",
                  precision="bf16-mixed")
    kept = {(att, s, v): tc.plan(**common, attention=att, schedule=s, interleave=v).table.iloc[0]["mem_activations"]
            for att in ("flash", "unfused") for s, v in (("1f1b", 1), ("zb-h2", 1), ("interleaved", 2))}
    blocks, pp, mb = 8, 4, 2
    scores = 5 * 8 * 256 * 256 * (blocks // pp) * pp * mb
    assert kept[("unfused", "1f1b", 1)] - kept[("flash", "1f1b", 1)] == scores
    assert kept[("unfused", "zb-h2", 1)] - kept[("flash", "zb-h2", 1)] == pytest.approx(scores * 7 / 4)
    assert kept[("unfused", "interleaved", 2)] == pytest.approx(kept[("unfused", "1f1b", 1)] * (1 + 3 / 8))


@pytest.mark.parametrize("args,line", [
    (["--pp", "4", "--rule", "dfa", "--schedule", "zb-h1"], "--schedule: zb-h1 splits the backward that a rule sends "
                                                            "back stage by stage (bp, fa, kp, wm); rule dfa sends none"),
    (["--schedule", "zb-v"], "--schedule: zb-v needs pipeline stages (--pp 2 or more, or --pp auto; got --pp 1)"),
    (["--gpus", "48", "--pp", "3", "--schedule", "dualpipe"], "--schedule: dualpipe needs an even number of pipeline "
                                                               "stages"),
    (["--pp", "4", "--interleave", "2", "--schedule", "zb-h1"], "--schedule: zb-h1 sets its own chunks per GPU"),
    (["--pp", "4", "--schedule", "zb-h3"], "argument --schedule: invalid choice: 'zb-h3'"),
])
def test_a_schedule_the_layout_cannot_run_is_one_line(args, line, capsys):
    base = ["plan", "--preset", "llama-2-7b", "--tokens", "1e11", "--gpu", "h100-sxm", "--tp", "2",
            *([] if "--gpus" in args else ["--gpus", "64"])]
    try:
        rc = cli.main([*base, *([] if "--rule" in args else ["--rule", "bp"]), *args])
    except SystemExit as stop:  # argparse's own refusal of a choice
        rc = stop.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and line in err[-1], err  # argparse adds its usage line to a bad choice


def test_dualpipe_needs_twice_the_stages_in_micro_batches():
    with pytest.raises(ConfigError, match=r"dualpipe feeds half the micro-batches from each end: .* at least 2 x --pp = 8"):
        tc.plan(preset="llama-2-7b", tokens=1e11, gpu="h100-sxm", gpus=64, tp=2, pp=4, rule="bp", schedule="dualpipe",
                global_batch=32, micro_batch=1)
    assert math.isfinite(tc.plan(preset="llama-2-7b", tokens=1e11, gpu="h100-sxm", gpus=64, tp=2, pp=4, rule="bp",
                                 schedule="dualpipe", global_batch=64, micro_batch=1).table.iloc[0]["step_time_s"])


def test_schedule_auto_searches_every_schedule_and_keeps_each_rules_own():
    """--schedule auto: each rule's best layout is the best of the searches at each schedule it can run, and a rule
    without a stage-by-stage backward (DFA) keeps 1F1B or interleaved."""
    import dataclasses

    from trainingcost.analytic import layout
    from trainingcost.analytic.plan import PlanSpec, Efficiency

    cfg, dev = _llama(), device("h100-sxm")
    spec = PlanSpec(tokens=1e11, gpus=64, efficiency=Efficiency("predicted", 0.0, ""), global_batch=64, sharding="zero1",
                    pp=4)
    free = {"tp", "interleave", "micro_batch"}
    auto = layout.search(cfg, spec, dev, ["bp", "dfa"], free | {"schedule"})
    each = {s: layout.search(cfg, dataclasses.replace(spec, schedule=s), dev, ["bp"],
                             free if s == "" else free - {"interleave"}) for s in ("", *schedules.SPLIT)}
    best = min(each.values(), key=lambda f: f.rules["bp"].best.step_s)
    assert auto.rules["bp"].best.step_s == pytest.approx(best.rules["bp"].best.step_s)
    assert auto.rules["bp"].best.schedule in schedules.SPLIT  # 4 stages, few micro-batches: a zero-bubble one wins
    assert all(c.schedule == "" for c in auto.rules["dfa"].top)
    assert auto.rules["bp"].best.compact().endswith(auto.rules["bp"].best.schedule)


def test_dualpipe_hides_the_expert_all_to_alls_behind_the_paired_chunk():
    """DeepSeek-V3's report (section 3.2.1): under DualPipe a forward chunk runs beside another micro-batch's backward
    chunk, the all-to-alls of one hidden behind the other's compute. By hand: the exposed seconds are the all-to-alls
    beyond the micro-batch's compute, plus OVERLAP_SLOWDOWN of those hidden; 1F1B exposes them whole."""
    from trainingcost.analytic.steptime.step import OVERLAP_SLOWDOWN

    cfg, dev = canonical_model(preset_entry("mixtral-8x7b", "p"), ""), device("h100-sxm")
    work = rule_work(cfg, ["bp"])
    base = dict(gpus=256, global_batch=256, micro_batch=1, tp=1, pp=4, ep=8, sharding="zero1")
    plain = micro_batch(cfg, Layout(**base), dev, "bp", work)
    dual = micro_batch(cfg, Layout(**base, schedule="dualpipe"), dev, "bp", work)
    comm, compute = plain.ep_fwd + plain.ep_bwd, plain.compute_fwd + plain.compute_bwd
    assert comm > 0 and compute == pytest.approx(dual.compute_fwd + dual.compute_bwd)
    hidden = min(comm, compute)
    assert dual.ep_fwd + dual.ep_bwd == pytest.approx(comm - hidden + OVERLAP_SLOWDOWN * hidden)
    assert dual.seconds < plain.seconds
    dense = canonical_model(preset_entry("llama-2-7b", "p"), "")  # no experts: nothing changes
    d_work = rule_work(dense, ["bp"])
    assert micro_batch(dense, Layout(**base | {"ep": 1}, schedule="dualpipe"), dev, "bp", d_work).seconds == \
        pytest.approx(micro_batch(dense, Layout(**base | {"ep": 1}), dev, "bp", d_work).seconds)


def test_the_plan_keeps_what_the_zero_bubble_runs_measured(capsys):
    """benchmarks/bench_plan_memory.py over Qi et al. 2024's 60 measured peaks (1F1B, ZB-1p, ZB-V on 8-32 A100s, 9 of
    them with fewer micro-batches than stages; benchmarks/published_runs_schedules.csv): each planned through the API
    within 10% (the largest miss, 9.2%, is 14.6B with 4 micro-batches on 16 stages, 19 GiB; the ZB runs hold the weight
    gradients' inputs past B, which the plan does not count: up to 4.8% under), none refused."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("bench_plan_memory", root / "benchmarks" / "bench_plan_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--csv", str(root / "benchmarks" / "published_runs_schedules.csv"), "--rows"]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.startswith("qi2024")]
    rows = [float(cells[-1]) for cells in lines if len(cells) > 6]
    assert len(rows) == 60 and max(map(abs, rows)) < 10.0 and "refused" not in out
