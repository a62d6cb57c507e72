"""The plan's error bar (analytic/steptime/intervals.py): the stored misses are the model's own, the quantiles and the
choice of alike rows by hand, the coverage the intervals claim, and the bounds in the plan, the API and the table."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

import trainingcost as tc
from trainingcost import cli
from trainingcost.analytic.steptime import intervals as I
from trainingcost.analytic.steptime import predict_step, runs
from trainingcost.analytic.steptime.step import rule_work
from trainingcost.config.hardware import device

ROOT = Path(__file__).resolve().parents[1]
TABLES = [ROOT / "benchmarks" / name for name in ("published_runs.csv", "published_runs_blackwell.csv",
                                                  "published_runs_moe.csv", "published_runs_amd.csv",
                                                  "published_runs_schedules.csv", "published_runs_offload.csv")]


def test_the_stored_misses_are_what_the_model_predicts_now():
    """Every 10th stored row, predicted again at its stored kernel efficiency, gives the stored step to 1e-9: a change
    to the model that moves a prediction fails here until ``python benchmarks/bench_plan_intervals.py --write``."""
    published = {(row["source"], row["run"]): row for path in TABLES for row in runs.load(path)}
    stored = I.residuals()
    assert len(stored) == len(published)  # every published row, none twice
    for kept in stored[::10]:
        row = published[(kept["source"], kept["run"])]
        cfg, lay, dev = runs.model_of(row), runs.layout_of(row), device(row["gpu"])
        dev = dataclasses.replace(dev, steptime={**dev.steptime, "kernel_efficiency": float(kept["efficiency"])})
        step = predict_step(cfg, lay, dev, "bp", rule_work(cfg, ["bp"])).step_time_s
        assert step == pytest.approx(float(kept["predicted_s"]), rel=1e-9), kept["run"]
        assert kept["ratio"] == pytest.approx(runs.measured_step_time(row) / step, rel=1e-9)


def test_source_weighted_quantiles_by_hand():
    # values 1, 2, 3, 4 from sources a, a, b, c weigh 1/2, 1/2, 1, 1: midpoints 0.25/3, 0.75/3, 1.5/3, 2.5/3
    q = I.weighted_quantiles([4, 1, 3, 2], ["c", "a", "b", "a"], (0.1, 0.25, 0.5, 0.9))
    assert q == pytest.approx((1 + (0.1 - 1 / 12) / (1 / 6), 2.0, 3.0, 4.0))
    # one row per source: the Hazen rule, as numpy's own
    values = np.random.default_rng(0).lognormal(0, 0.1, 37)
    got = I.weighted_quantiles(list(values), [str(i) for i in range(37)], (0.05, 0.95))
    assert got == pytest.approx(tuple(np.percentile(values, [5, 95], method="hazen")))


def _row(source, ratio, **regime):
    base = {"sharding": "zero3/fsdp", "generation": "hopper", "scale": "64-511 GPUs", "size": "1-20B"}
    return {"source": source, "run": f"{source}-{ratio}", "ratio": ratio, "regime": {**base, **regime}}


def test_the_most_alike_rows_are_taken_a_whole_tier_at_a_time(monkeypatch):
    monkeypatch.setattr(I, "MIN_ROWS", 4)
    monkeypatch.setattr(I, "MIN_SOURCES", 2)
    rows = ([_row("a", 1.0), _row("a", 1.1), _row("b", 1.2)] +  # all four fields
            [_row("c", 2.0, scale=">= 512 GPUs"), _row("d", 3.0, scale=">= 512 GPUs")] +  # three
            [_row("e", 9.0, scale=">= 512 GPUs", generation="ampere")])  # two
    reg = {"sharding": "zero3/fsdp", "generation": "hopper", "scale": "64-511 GPUs", "size": "1-20B"}
    iv = I.interval(reg, rows=rows)
    assert iv.shared == 3 and len(iv.rows) == 5 and "e / e-9.0" not in iv.rows  # the tier of three whole, no more
    low, high = I.weighted_quantiles([1.0, 1.1, 1.2, 2.0, 3.0], ["a", "a", "b", "c", "d"], (I.TAIL, 1 - I.TAIL))
    assert (iv.low, iv.high) == pytest.approx((low, high))
    left = I.interval(reg, exclude_source="a", rows=rows)  # the coverage check's: a source never reads its own rows
    assert not any(name.startswith("a / ") for name in left.rows)
    assert left.shared == 2 and len(left.rows) == 4  # three rows alike in three fields are too few: the next tier
    # a regime no row shares takes every row
    assert len(I.interval({f: "?" for f in I.FIELDS}, rows=rows).rows) == 6


def test_the_intervals_cover_80_percent_of_the_published_rows_left_out_by_source():
    """Each row against the interval read from the other sources' rows: 75-85% inside (issue 65's goal), and misses
    on both sides."""
    rows = I.residuals()
    inside = [I.covers(I.interval(r["regime"], exclude_source=r["source"]), r["ratio"]) for r in rows]
    assert 0.75 <= sum(inside) / len(inside) <= 0.85, sum(inside) / len(inside)
    assert 0 < sum(not c for c in inside)


def test_regimes():
    assert [I.generation(g) for g in ("h100-sxm", "gh200-144gb", "a100-40gb", "v100", "gb200", "mi300x", "xyz")] == \
        ["hopper", "hopper", "ampere", "volta", "blackwell", "cdna3", "other"]
    assert I.regime("b200", "zero1", 512, 7e8) == {"sharding": "zero1/2", "generation": "blackwell",
                                                   "scale": ">= 512 GPUs", "size": "< 1B", "gpus": 512,
                                                   "seq_len": 0}
    assert I.regime("h100-sxm", "fsdp", 64, 8e9, 32768)["seq_len"] == 32768


def _gpus(row, gpus):
    return {**row, "gpus": gpus}


def test_the_interval_reaches_its_generations_own_misses(monkeypatch):
    """The alike tier's spread, widened to the same quantiles of the plan's generation's rows wherever they lie (the
    GB200 rows miss by 20% where the alike rows of other generations miss by a few percent)."""
    monkeypatch.setattr(I, "MIN_ROWS", 4)
    monkeypatch.setattr(I, "MIN_SOURCES", 2)
    hopper = [_row("a", 1.0), _row("b", 1.05), _row("c", 1.1), _row("d", 0.95)]  # the plan's four fields
    # the Blackwell rows share two fields with the plan (generation and size), the Hopper rows three: the tier of
    # three is enough, and the Blackwell rows' misses reach past it
    blackwell = [_row("e", 1.3, generation="blackwell", sharding="zero1/2", scale=">= 512 GPUs"),
                 _row("f", 1.4, generation="blackwell", sharding="zero1/2", scale=">= 512 GPUs")]
    rows = [_gpus(r, 128) for r in hopper + blackwell]
    reg = {"sharding": "zero3/fsdp", "generation": "blackwell", "scale": "64-511 GPUs", "size": "1-20B", "gpus": 128}
    iv = I.interval(reg, rows=rows)
    assert iv.shared == 3 and len(iv.rows) == 4  # the tier: the Hopper rows alone
    tier = I.weighted_quantiles([1.0, 1.05, 1.1, 0.95], list("abcd"), (I.TAIL, 1 - I.TAIL))
    own = I.weighted_quantiles([1.3, 1.4], ["e", "f"], (I.TAIL, 1 - I.TAIL))
    assert iv.high == pytest.approx(own[1]) and iv.low == pytest.approx(tier[0])
    assert "widened to the 2 runs on blackwell GPUs" in iv.describe()
    # a generation no row measured: as wide as the widest generation of three sources or more (the two Blackwell
    # sources are too few to set it; with a third they do)
    reg_new = {**reg, "generation": "cdna3"}
    iv = I.interval(reg_new, rows=rows)
    hop = I.weighted_quantiles([r["ratio"] for r in hopper], [r["source"] for r in hopper], (I.TAIL, 1 - I.TAIL))
    assert (iv.low, iv.high) == pytest.approx(hop) and iv.high < 1.2
    third = _gpus(_row("g", 1.35, generation="blackwell", sharding="zero1/2", scale=">= 512 GPUs"), 128)
    iv = I.interval(reg_new, rows=rows + [third])
    black = I.weighted_quantiles([1.3, 1.4, 1.35], ["e", "f", "g"], (I.TAIL, 1 - I.TAIL))
    assert iv.high == pytest.approx(black[1]) and iv.low == pytest.approx(hop[0])
    assert "no published run on cdna3 GPUs" in iv.describe()
    assert set(iv.widened["generation"]) >= {"e / e-1.3", "g / g-1.35", "a / a-1.0"}
    # the plan's own generation, every row alike: nothing widened, nothing said
    iv = I.interval({**reg, "generation": "hopper"}, rows=rows)
    assert "widened" not in iv.describe()


def test_a_plan_beyond_the_largest_published_run_is_widened(monkeypatch):
    monkeypatch.setattr(I, "MIN_ROWS", 4)
    monkeypatch.setattr(I, "MIN_SOURCES", 2)
    rows = ([_gpus(_row(s, x), 64) for s, x in (("a", 1.0), ("b", 1.02), ("c", 1.01), ("d", 0.99))] +
            [_gpus(_row(s, x, scale=">= 512 GPUs"), 1024) for s, x in (("e", 1.5), ("f", 0.7), ("g", 1.1))])
    reg = {"sharding": "zero3/fsdp", "generation": "hopper", "scale": "64-511 GPUs", "size": "1-20B"}
    inside = I.interval({**reg, "gpus": 256}, rows=rows)
    beyond = I.interval({**reg, "scale": ">= 512 GPUs", "gpus": 65536}, rows=rows)
    assert "beyond the largest published run (1024 GPUs)" in beyond.describe()
    assert "beyond" not in inside.describe()
    big = I.weighted_quantiles([1.5, 0.7, 1.1], ["e", "f", "g"], (I.TAIL, 1 - I.TAIL))
    assert beyond.low <= big[0] + 1e-12 and beyond.high >= big[1] - 1e-12


def test_the_plan_says_when_its_error_bar_is_widened_for_what_no_run_measured(capsys):
    assert cli.main(["plan", "--preset", "llama-3-8b", "--tokens", "1e12", "--rule", "bp", "--gpu", "mi300x",
                     "--gpus", "64"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "like this one; no published run on cdna3 GPUs (--explain names them)" in out
    assert cli.main(["plan", "--preset", "llama-3-8b", "--tokens", "1e13", "--rule", "bp", "--gpu", "h100-sxm",
                     "--gpus", "65536", "--explain"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "beyond the largest published run" in out and "65536 GPUs" in out


def test_the_plan_carries_the_bounds_and_the_table_shows_them(capsys):
    result = tc.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp,dfa")
    t = result.table
    params = tc.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp").table
    bar = I.interval(I.regime("h100-sxm", "fsdp", 64, 8_030_261_248, 8192))
    assert t["step_time_low_s"].tolist() == pytest.approx((t["step_time_s"] * bar.low).tolist())
    assert t["wall_clock_days_high"].tolist() == pytest.approx((t["wall_clock_days"] * bar.high).tolist())
    assert t["gpu_hours_low"].tolist() == pytest.approx((t["gpu_hours"] * bar.low).tolist())
    assert bar.low < 1 < bar.high and params["source_interval"].iloc[0] == bar.describe()
    cells = result.cells.set_index("rule")
    days = t.set_index("rule").loc["bp"]
    assert cells.loc["bp", "time"] == (f"{days['wall_clock_days']:.1f} d ({days['wall_clock_days_low']:.0f}-"
                                       f"{days['wall_clock_days_high']:.0f})")
    # a step given, not predicted: no interval
    given = tc.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp", mfu=0.4).table
    assert math.isnan(given["step_time_low_s"].iloc[0]) and given["source_interval"].iloc[0] == ""
    assert cli.main(["plan", "--preset", "llama-3-8b", "--tokens", "1e12", "--gpu", "h100-sxm", "--gpus", "64",
                     "--rule", "bp", "--explain"]) == 0
    out = capsys.readouterr().out
    assert f"The error bar's {len(bar.rows)} published runs" in out
    assert all(name.split(" / ")[0] in out for name in bar.rows)


def test_a_table_whose_rows_have_different_error_bars_names_each():
    """A search's rules at their own layouts, or a strong-scaling table's GPU counts, may sit in different regimes:
    one line per interval, naming the rules or counts it applies to (not the last row's for all)."""
    import pandas as pd

    from trainingcost.plan_search import interval_lines

    def described(sharding, gpus):
        reg = I.regime("h100-sxm", sharding, gpus, 8e9, 8192)  # as the plan's: the tokens per sequence last
        return I.interval(reg).describe()

    t = pd.DataFrame([{"rule": "bp", "gpus": 1024, "source_interval": described("zero3", 1024)},
                      {"rule": "dfa", "gpus": 1024, "source_interval": described("zero2", 1024)}])
    lines = " ".join(" ".join(interval_lines(t, 200, False)).split())
    assert "time (low-high) (bp): " in lines and "time (low-high) (dfa): " in lines
    same = pd.DataFrame([{"rule": r, "gpus": g, "source_interval": described("zero3", g)}
                         for r in ("bp", "dfa") for g in (512, 1024, 2048)])
    lines = interval_lines(same, 200, False)  # alike but for the count: one line, no label
    assert len(lines) == 1 and lines[0].startswith("time (low-high): ")
    scaling = pd.DataFrame([{"rule": "bp", "gpus": g, "source_interval": described("zero3", g)} for g in (256, 4096)])
    lines = " ".join(" ".join(interval_lines(scaling, 200, False)).split())
    assert "(at 256 GPUs)" in lines and "(at 4096 GPUs)" in lines and "beyond the largest published run" in lines


def test_the_runs_behind_the_error_bar_reach_python_and_machine_readable_output(capsys):
    result = tc.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp")
    runs_ = result.error_bar_runs
    bar = I.interval(I.regime("h100-sxm", "fsdp", 64, 8_030_261_248, 8192))
    alike = runs_[runs_["role"] == "alike"]
    assert [f"{s} / {r}" for s, r in zip(alike["source"], alike["run"])] == list(bar.rows)
    # the widening's runs too (the Hopper runs that reach past the alike ones), each listed once
    assert set(runs_["role"]) == {"alike", *bar.widened}
    names = [f"{s} / {r}" for s, r in zip(runs_["source"], runs_["run"])]
    assert len(names) == len(set(names)) and set(names) == set(bar.rows) | {n for v in bar.widened.values() for n in v}
    stored = {(r["source"], r["run"]): r["ratio"] for r in I.residuals()}
    assert runs_["ratio"].tolist() == [stored[(s, r)] for s, r in zip(runs_["source"], runs_["run"])]
    assert set(runs_["source_interval"]) == set(result.table["source_interval"])
    # --explain beside CSV: the table on stdout as before, the runs on stderr
    assert cli.main(["plan", "--preset", "llama-3-8b", "--tokens", "1e12", "--gpu", "h100-sxm", "--gpus", "64",
                     "--rule", "bp", "--format", "csv", "--explain"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("config_id,") and "error bar's 100 published runs" not in captured.out
    assert f"The error bar's {len(bar.rows)} published runs" in " ".join(captured.err.split())


def test_energy_and_co2e_take_the_steps_interval_where_they_follow_the_wall_clock():
    row = tc.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp").table.iloc[0]
    low, high = row["step_time_low_s"] / row["step_time_s"], row["step_time_high_s"] / row["step_time_s"]
    assert row["energy_kwh_low"] == pytest.approx(row["energy_kwh"] * low)
    assert row["energy_kwh_high"] == pytest.approx(row["energy_kwh"] * high)
    assert row["co2e_t_low"] == pytest.approx(row["co2e_t"] * low) and row["co2e_t_high"] == pytest.approx(row["co2e_t"] * high)
    # a measured energy per token does not follow the step's time: no interval claimed
    given = tc.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp", joules_per_token=500,
                    measured_rule="bp").table.iloc[0]
    assert math.isnan(given["energy_kwh_low"]) and math.isnan(given["co2e_t_high"])


def test_a_long_sequence_plan_reaches_the_long_published_runs_misses(monkeypatch):
    monkeypatch.setattr(I, "MIN_ROWS", 4)
    monkeypatch.setattr(I, "MIN_SOURCES", 2)
    short = [{**_gpus(_row(s, x), 64), "regime": {**_row(s, x)["regime"], "seq_len": 4096}}
             for s, x in (("a", 1.0), ("b", 1.02), ("c", 0.98), ("d", 1.01))]
    # the long runs on another generation and sharding: only their length relates them to the plan
    long = [{**_gpus(_row(s, x, sharding="zero1/2", generation="ampere"), 64),
             "regime": {**_row(s, x, sharding="zero1/2", generation="ampere")["regime"], "seq_len": 131072}}
            for s, x in (("e", 1.3), ("f", 1.4))]
    reg = {"sharding": "zero3/fsdp", "generation": "hopper", "scale": "64-511 GPUs", "size": "1-20B", "gpus": 64}
    plain = I.interval({**reg, "seq_len": 8192}, rows=short + long)
    longer = I.interval({**reg, "seq_len": 32768}, rows=short + long)
    top = I.weighted_quantiles([1.3, 1.4], ["e", "f"], (I.TAIL, 1 - I.TAIL))[1]
    assert plain.high < 1.1 and longer.high == pytest.approx(top)
    assert "widened to the 2 runs of 16k tokens or more per sequence" in longer.describe()
    assert longer.describe().endswith("(zero3/fsdp, hopper, 64-511 GPUs, 1-20B, 64 GPUs, 32768 tokens)")
