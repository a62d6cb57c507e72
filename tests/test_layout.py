"""The layout search (issue 38): exact against brute force, the space it holds, and the command line."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainingcost.analytic.layout import SEARCH_ALL, divisors, search
from trainingcost.analytic.plan import PREDICTED_SOURCE, Efficiency, PlanSpec, plan_table
from trainingcost.config.hardware import device
from trainingcost.config.model import canonical_model, preset_entry

PREDICTED = Efficiency("predicted", 1.0, PREDICTED_SOURCE)
H100 = device("h100-sxm")


def brute_force(cfg, spec, dev, rule, free):
    """Every layout of the space priced by plan_table itself (no memo, no bound), the best by step time then
    memory, among those that fit."""
    blocks = sum(cfg.depth(s) for s in cfg.stacks)
    G = spec.global_batch
    best = None
    cp = spec.cp  # context parallelism as given (the search does not choose it)
    for t in (divisors(spec.gpus // cp) if "tp" in free else [spec.tp]):
        if cfg.heads % t or cfg.kv_heads % t or cfg.d_ff % t or t > 8:
            continue
        for p in ([q for q in divisors(spec.gpus // (t * cp)) if q <= blocks] if "pp" in free else [spec.pp]):
            dp = spec.gpus // (t * p * cp)
            if G % dp:
                continue
            # HSDP: dp in replica groups of two ranks or more (every such R when searched)
            groups = [r for r in range(1, dp + 1) if dp % r == 0 and (r == 1 or dp // r * cp >= 2)]
            for R in (groups if "replicate" in free else [spec.replicate] if spec.replicate in groups else []):
                hybrid = [s for s in ("none", "zero1", "zero2", "zero3") if R == 1 or not (
                    s == "none" or (s == "zero1" and spec.zero1_sync == "after_backward"))]
                for sh in (hybrid if "sharding" in free else [spec.sharding] if spec.sharding in hybrid else []):
                    for mb in (divisors(G // dp) if "micro_batch" in free else [spec.micro_batch]):
                        vs = divisors(blocks // p) if ("interleave" in free and p > 1 and blocks % p == 0) else [1]
                        for v, ck, sp in itertools.product(
                                vs, ("none", "selective", "full") if "checkpointing" in free else [spec.checkpointing],
                                (False, True) if ("sequence_parallel" in free and t > 1) else [False]):
                            if v > 1 and (G // dp // mb) % p:
                                continue
                            s = dataclasses.replace(spec, tp=t, pp=p, micro_batch=mb, interleave=v, sharding=sh,
                                                    checkpointing=ck, sequence_parallel=sp, replicate=R)
                            row = plan_table(cfg, s, dev, [rule], ["executed"]).iloc[0]
                            if not row["fits"]:
                                continue
                            key = (row["step_time_s"], row["mem_total"])
                            if best is None or key < best[0]:
                                best = (key, (t, p, v, mb, ck, sh, sp, R))
    return best


CASES = st.fixed_dictionaries({
    "layers": st.integers(2, 6), "heads": st.sampled_from([2, 4, 8]), "head_dim": st.sampled_from([16, 32]),
    "seq": st.sampled_from([64, 256]), "gpus": st.sampled_from([2, 4, 8]),
    "batch": st.sampled_from([8, 16]), "rule": st.sampled_from(["bp", "dfa", "pepita", "lra"]),
    "sync": st.sampled_from([{}, {"grad_reduce": "fp32", "zero1_sync": "after_backward"}]),  # nanotron's ZeRO-1
    "cp": st.sampled_from([1, 2]),  # context parallelism, given
    "replicate": st.sampled_from([1, 2, "auto"]),  # HSDP replica groups, given or searched
    "fp8": st.sampled_from([{}, {"precision": "fp8-mixed"}, {"precision": "fp8-mixed", "fp8_weight_cache": True},
                            {"precision": "fp8-mixed", "fp8_gather": True, "fp8_tp_gather": True}]),
})


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASES)
def test_the_search_finds_brute_forces_best_layout(case):
    """Random small models, GPU counts and rules, with ZeRO-1 overlapped or synced after the backward and with or
    without context parallelism: the search (memo and lower bound) returns the layout and step time that pricing
    every layout with plan_table finds, the tie broken the same way (smaller memory)."""
    d = case["heads"] * case["head_dim"]
    cfg = canonical_model(dict(arch="decoder", layers=case["layers"], d_model=d, heads=case["heads"], d_ff=4 * d,
                               vocab=512, seq_len=case["seq"], norm_position="pre"), "")
    small = dataclasses.replace(H100, memory_bytes=int(3e9))  # a small GPU, so that memory rules out layouts
    spec = PlanSpec(tokens=1e9, gpus=case["gpus"], global_batch=case["batch"] * case["gpus"] // 2, efficiency=PREDICTED,
                    sharding="none", cp=case["cp"], replicate=1 if case["replicate"] == "auto" else case["replicate"],
                    **case["sync"], **case["fp8"])
    free = {"tp", "pp", "micro_batch", "sharding", "checkpointing", "sequence_parallel", "interleave",
            *(["replicate"] if case["replicate"] == "auto" else [])}
    found = search(cfg, spec, small, [case["rule"]], free).rules[case["rule"]]
    reference = brute_force(cfg, spec, small, case["rule"], free)
    if reference is None:
        assert found.best is None
        return
    b = found.best
    assert (b.tp, b.pp, b.interleave, b.micro_batch, b.checkpointing, b.sharding, b.sequence_parallel,
            b.replicate) == reference[1]
    assert b.step_s == pytest.approx(reference[0][0], rel=1e-12) and b.memory_bytes == pytest.approx(reference[0][1])


def test_a_memo_shared_by_searches_of_two_precisions_keeps_them_apart():
    """The search's memo (kernel times, priced phases, lower bounds) is keyed by everything they read, the precision
    included: a bf16 search then an fp8 one on the same memo finds what a fresh fp8 search finds."""
    cfg = canonical_model(preset_entry("llama-2-70b"))  # where a bf16 bound once pruned fp8's best (a review's case)
    bf16 = PlanSpec(tokens=1e12, gpus=64, global_batch=128, efficiency=PREDICTED)
    fp8 = dataclasses.replace(bf16, precision="fp8-mixed")
    free = set(SEARCH_ALL)
    fresh = search(cfg, fp8, H100, ["bp"], free).rules["bp"].best
    memo = {}
    search(cfg, bf16, H100, ["bp"], free, memo=memo)
    shared = search(cfg, fp8, H100, ["bp"], free, memo=memo).rules["bp"].best
    assert (shared.compact(), shared.step_s) == (fresh.compact(), fresh.step_s)


def test_the_lower_bound_never_exceeds_a_priced_step_of_its_group():
    """The search's bound for a group (tp, pp, dp, micro-batch, sp, checkpointing) -- M micro-batches on the critical
    stage, the pipeline's sends at one virtual stage and its bubble at the group's most -- is at most the step
    predict_step gives every sharding and interleaving of the group, for rules with a backward, with DFA's broadcast
    and with PEPITA's second forward; and it is no loose constant: at sharding none, dp 1, no pipeline, no
    optimizer state to speak of it is the step's M x micro-batch."""
    from trainingcost.analytic.layout import _lower_bound
    from trainingcost.analytic.plan import step_layout
    from trainingcost.analytic.steptime import predict_step
    from trainingcost.analytic.steptime.step import micro_batch, rule_work

    cfg = canonical_model(preset_entry("llama-2-7b"))
    rules = ["bp", "dfa", "pepita", "lra"]
    work = rule_work(cfg, rules)
    checked = 0
    for t, p, mb, sp, ckpt in itertools.product((1, 2, 8), (1, 4), (1, 2), (False, True), ("none", "full")):
        if sp and t == 1:
            continue
        vs = [1, 2, 4] if p > 1 else [1]
        base = PlanSpec(tokens=1e12, gpus=64, global_batch=128, efficiency=PREDICTED, tp=t, pp=p,
                        checkpointing=ckpt)
        for r in rules:
            memo = {}
            steps = []
            for sh, v in itertools.product(("none", "zero1", "zero3"), vs):
                lay = step_layout(dataclasses.replace(base, sharding=sh), 128, mb, interleave=v, sequence_parallel=sp)
                steps.append(predict_step(cfg, lay, H100, r, work))
            bound = _lower_bound(cfg, lay, H100, r, work, memo, max(vs))
            assert 0 < bound <= min(s.step_time_s for s in steps)
            checked += 1
    assert checked == 4 * 2 * (1 + 2 + 2) * 2 * 2
    one = step_layout(dataclasses.replace(base, tp=1, pp=1, gpus=1, sharding="none"), 4, 2)
    pred = predict_step(cfg, one, H100, "bp", work)
    micro = micro_batch(cfg, one, H100, "bp", work)
    assert _lower_bound(cfg, one, H100, "bp", work, {}, 1) == one.accumulation * micro.seconds
    assert pred.step_time_s - one.accumulation * micro.seconds == pytest.approx(pred.parts["optimizer"])


def test_the_space_holds_what_a_framework_runs():
    """Llama 2 70B on 64 GPUs: tp divides 64 heads and 8 key/value heads and stays in a node (1-8); pp divides the
    GPUs left; interleaving only with pp > 1; every best layout fits; the memo and the bound change nothing (the
    search without them, brute force, agrees)."""
    cfg = canonical_model(preset_entry("llama-2-70b"))
    spec = PlanSpec(tokens=1e12, gpus=64, global_batch=128, efficiency=PREDICTED)
    fast = search(cfg, spec, H100, ["bp", "dfa"], SEARCH_ALL)
    slow = search(cfg, spec, H100, ["bp", "dfa"], SEARCH_ALL, prune=False)
    for r in ("bp", "dfa"):
        a, b = fast.rules[r], slow.rules[r]
        assert a.best == b.best and [c.compact() for c in a.top] == [c.compact() for c in b.top]
        assert a.space == b.space and a.fitting == b.fitting and b.priced == b.fitting >= a.priced
        assert a.best.tp in (1, 2, 4, 8) and a.best.tp * a.best.pp * a.best.dp == 64
        assert a.best.memory_bytes <= H100.memory_bytes
        assert a.best.interleave == 1 or a.best.pp > 1
    assert any("does not divide" in line or "crosses nodes" in line for line in fast.rejected)


def test_the_search_answers_in_one_screen_and_beats_the_given_layout(capsys):
    """The issue's done-when: llama-2-70b on 512 H100s, every rule at its best layout that fits, in 100 columns;
    each rule's best is no slower than the default layout, where that one fits at all."""
    from trainingcost import cli

    argv = ["plan", "--preset", "llama-2-70b", "--tokens", "2e12", "--gpu", "h100-sxm", "--gpus", "512", "--rule",
            "all"]
    assert cli.main([*argv, "--layout", "search"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100 and len(lines) <= 40
    rows = [line.split() for line in lines if line.split()[:1] and line.split()[0] in
            ("bp", "pepita", "mempepita", "fa", "kp", "wm", "dfa", "tp", "dtp", "lra")]
    assert len(rows) == 10 and all(r[-1] == "yes" for r in rows)
    assert cli.main([*argv, "--layout", "search", "--format", "json"]) == 0
    searched = {r["rule"]: r for r in json.loads(capsys.readouterr().out)}
    assert cli.main([*argv, "--format", "json"]) == 0
    given_rows = {r["rule"]: r for r in json.loads(capsys.readouterr().out)}
    for rule, row in searched.items():
        if given_rows[rule]["fits"]:
            assert row["step_time_s"] <= given_rows[rule]["step_time_s"] * (1 + 1e-12)


def test_fields_given_stay_fixed_and_auto_searches_one(capsys):
    from trainingcost import cli

    base = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb", "--gpus", "16", "--rule", "bp",
            "--format", "json"]
    assert cli.main([*base, "--layout", "search", "--tp", "2", "--sharding", "zero1"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["tp"] == 2 and row["sharding"] == "zero1"
    assert cli.main([*base, "--pp", "auto", "--tp", "2"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["tp"] == 2 and row["checkpointing"] == "none" and row["pp"] in (1, 2, 4, 8)


def test_several_gpu_counts_give_a_strong_scaling_table_and_figure(tmp_path, capsys):
    from trainingcost import cli

    figure = tmp_path / "scaling.png"
    argv = ["plan", "--preset", "gpt2-small", "--tokens", "1e10", "--gpu", "a100-80gb", "--gpus", "8-64x2", "--rule",
            "bp,dfa", "--layout", "search", "--objective", "gpu-hours", "--figure", str(figure)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "Strong scaling" in out and figure.stat().st_size > 10_000
    for n in ("8", "16", "32", "64"):
        assert any(line.split()[1].rstrip("*") == n for line in out.splitlines() if line.startswith(("bp ", "dfa ")))
    assert sum(line.split()[1].endswith("*") for line in out.splitlines() if line.startswith("bp ")) == 1
    assert cli.main([*argv[:-2], "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["gpus"] for r in rows} == {8, 16, 32, 64} and len({r["global_batch"] for r in rows}) == 1


@pytest.mark.parametrize("flags, message", [
    (["--gpus", "64-8x2"], "argument --gpus: expected N, N,N,... or LO-HIxF"),
    (["--gpus", "8,16", "--objective", "cost", "--layout", "search"], "--objective: cost needs --price"),
    (["--layout", "search", "--mfu", "0.4"], "--layout: the search ranks layouts by the predicted step time"),
    (["--tp", "three"], "argument --tp: expected an integer, got 'three'"),
])
def test_bad_search_input_is_one_line(flags, message, capsys):
    from trainingcost import cli

    try:
        status = cli.main(["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb", *flags])
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    err = capsys.readouterr().err
    assert status != 0 and err.count("\n") == 1 and message in err


def test_the_python_api_returns_what_the_command_prints(capsys):
    """trainingcost.plan() and estimate() take the flags as keywords and return DataFrames, the same numbers as the
    command line's JSON; a mistake raises trainingcost.Error with the command line's one line."""
    import trainingcost
    from trainingcost import cli

    result = trainingcost.plan(preset="gpt2-small", tokens=1e9, gpu="a100-80gb", gpus=16, layout="search",
                               rule=["bp", "dfa"])
    assert cli.main(["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb", "--gpus", "16",
                     "--layout", "search", "--rule", "bp,dfa", "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(result.table["rule"]) == [r["rule"] for r in printed] == ["bp", "dfa"]
    assert list(result.table["step_time_s"]) == pytest.approx([r["step_time_s"] for r in printed], rel=1e-12)
    assert set(result.layouts["rank"]) >= {1} and {"layout", "step_time_s"} <= set(result.layouts.columns)
    assert "mem_total" in result.memory.columns
    estimated = trainingcost.estimate(preset="gpt2-small", rule="bp,pepita")
    assert set(estimated.table["rule"]) == {"bp", "pepita"} and len(estimated.memory) == 2
    with pytest.raises(trainingcost.Error, match="^trainingcost plan: error: --gpu: 'h900' is not in the hardware"):
        trainingcost.plan(preset="gpt2-small", tokens=1e9, gpu="h900")
    with pytest.raises(trainingcost.Error, match="^trainingcost plan: error: argument --tp: expected an integer"):
        trainingcost.plan(preset="gpt2-small", tokens=1e9, gpu="a100-80gb", tp="three")
