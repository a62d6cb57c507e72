"""Predicted against measured: joins, ratios and rule-to-BP ratios on small synthetic tables with known answers."""

import math

import pandas as pd
import pytest

from trainingcost.findings.comparison import comparison_table, rule_ratios
from trainingcost.findings.summary import model_errors, ratio_table


def analytic_rows():
    rows = []
    # Configuration c1: two layers, per-layer models paper and executed, and one whole-model baseline.
    for rule, scale in (("bp", 1), ("pepita", 2)):
        rows += [
            ("c1", rule, "executed", "l1", "forward", 100 * scale),
            ("c1", rule, "executed", "l2", "forward", 50 * scale),
            ("c1", rule, "executed", "l2", "weight_update", 40),
            ("c1", rule, "paper", "l1", "forward", 150 * scale),
            ("c1", rule, "paper", "l2", "forward", 50 * scale),
            ("c1", rule, "paper", "l3", "forward", 10),  # a layer the measurement never sees
            ("c1", rule, "paper", "l2", "weight_update", 40),
            ("c1", rule, "kaplan", "model", "forward", 120 * scale),
            ("c1", rule, "kaplan", "model", "weight_update", 60),
        ]
    rows += [("c2", "bp", "paper", "l1", "forward", 7), ("c2", "pepita", "paper", "l1", "forward", 14)]  # not measured
    return pd.DataFrame(rows, columns=["config_id", "rule", "cost_model", "layer", "phase", "flops"])


def measured_rows():
    common = dict(seed=0, status="ok", arch="decoder", d_model=8, enc_layers=0, dec_layers=2, seq_len=4, tgt_len=4, batch=1,
                  dtype="fp32", device_name="cpu", optimizer="sgd", memory_source="cpu_process_max_rss")
    rows = []
    for rule, scale, step_time in (("bp", 1, 0.010), ("pepita", 2, 0.015)):
        flops = {("l1", "forward"): 100 * scale, ("l2", "forward"): 50 * scale, ("l2", "weight_update"): 40}
        for (layer, phase), value in flops.items():
            rows.append(dict(common, config_id="c1", rule=rule, layer=layer, phase=phase, flops=value,
                             phase_time_median_s=0.004 if phase == "forward" else math.nan, step_time_median_s=step_time,
                             flops_per_step=sum(flops.values()), peak_memory_bytes=1000.0 * scale))
        rows.append(dict(common, config_id="c1", rule=rule, layer="optimizer", phase="optimizer_step", flops=0,
                         phase_time_median_s=0.001, step_time_median_s=step_time, flops_per_step=sum(flops.values()),
                         peak_memory_bytes=1000.0 * scale))
    rows.append(dict(common, config_id="c1", rule="kp", layer="", phase="", flops=pd.NA, status="oom", phase_time_median_s=math.nan,
                     step_time_median_s=math.nan, flops_per_step=pd.NA, peak_memory_bytes=math.nan))
    return pd.DataFrame(rows)


MEMORY = pd.DataFrame([("c1", "bp", "sgd", "fp32", 500), ("c1", "pepita", "sgd", "fp32", 400), ("c1", "bp", "adam", "fp32", 900)],
                      columns=["config_id", "rule", "optimizer", "dtype", "total"])


@pytest.fixture
def table():
    return comparison_table(analytic_rows(), measured_rows(), MEMORY)


def cell(table, **keys):
    mask = pd.Series(True, index=table.index)
    for key, value in keys.items():
        mask &= table[key] == value
    assert mask.sum() == 1, keys
    return table[mask].iloc[0]


def test_layer_cells_join_and_missing_cells_count_as_zero(table):
    paper_l1 = cell(table, cost_model="paper", granularity="layer", rule="pepita", layer="l1", phase="forward")
    assert (paper_l1.predicted_flops, paper_l1.measured_flops) == (300, 200) and paper_l1.flops_ratio == 1.5
    assert math.isclose(paper_l1.flops_rel_error, 0.5)
    unseen = cell(table, cost_model="paper", granularity="layer", rule="bp", layer="l3", phase="forward")
    assert unseen.measured_flops == 0 and math.isnan(unseen.flops_ratio)
    executed = table[(table.cost_model == "executed") & (table.granularity == "layer")]
    assert (executed.flops_ratio == 1.0).all() and len(executed) == 6
    assert "optimizer" not in set(table.layer)  # no cost model predicts the optimizer step's FLOPs


def test_phase_and_step_totals_with_times_and_memory(table):
    kaplan = cell(table, cost_model="kaplan", granularity="phase", rule="bp", phase="forward")
    assert (kaplan.predicted_flops, kaplan.measured_flops, kaplan.measured_time_s) == (120, 150, 0.004)
    step = cell(table, cost_model="paper", granularity="step", rule="pepita")
    assert (step.predicted_flops, step.measured_flops) == (300 + 100 + 10 + 40, 340)
    assert step.measured_time_s == 0.015 and step.measured_peak_memory_bytes == 2000.0 and step.predicted_memory_bytes == 400
    assert cell(table, cost_model="kaplan", granularity="step", rule="bp").predicted_flops == 180


def test_failed_runs_and_unmeasured_configurations_are_left_out(table):
    assert set(table.rule) == {"bp", "pepita"} and set(table.config_id) == {"c1"}


def test_rule_ratios_by_cost_model_and_measured():
    ratios = rule_ratios(analytic_rows(), measured_rows())
    r = ratios.set_index(["config_id", "rule", "source", "metric"])["ratio_to_bp"]
    assert r["c1", "pepita", "executed", "flops"] == pytest.approx((200 + 100 + 40) / (100 + 50 + 40))
    assert r["c1", "pepita", "kaplan", "flops"] == pytest.approx((240 + 60) / (120 + 60))
    assert r["c2", "pepita", "paper", "flops"] == 2.0
    assert r["c1", "pepita", "measured", "step_time"] == pytest.approx(1.5)
    assert r["c1", "pepita", "measured", "peak_memory"] == 2.0
    assert r["c1", "bp", "measured", "flops"] == 1.0
    assert ("c1", "kp", "measured", "flops") not in r.index  # the oom run has no ratio


def test_summary_tables(table):
    errors = model_errors(table).set_index("cost model")
    assert errors.loc["executed", "median |error|"] == "0.0%" and errors.loc["paper", "runs"] == 2
    ratios = ratio_table(rule_ratios(analytic_rows(), measured_rows()), {"c1"}).set_index("rule")
    assert ratios.loc["pepita", "measured step time"] == pytest.approx(1.5)
    assert list(ratios.index) == ["bp", "pepita"]


def test_the_summary_keeps_its_structure_when_every_run_is_flagged():
    """On a busy machine every run may be flagged: the sections stay, and no accuracy is claimed."""
    from trainingcost.findings.summary import step_time_section

    rows = []
    for rule in ("bp", "dfa"):
        base = dict(config_id="c", rule=rule, cost_model="executed", device_name="cpu", predicted_time_s=1.0,
                    measured_time_s=1.2)
        rows.append({**base, "granularity": "step", "phase": None, "timing_quality": "contended"})
        rows += [{**base, "granularity": "phase", "phase": p, "timing_quality": "contended"}
                 for p in ("forward", "backward")]
    flagged = pd.DataFrame(rows)
    text = "\n".join(step_time_section(flagged))
    assert "Per phase" in text and "No trusted run: the timings of all 2 timed runs were flagged" in text
    trusted = "\n".join(step_time_section(flagged.assign(timing_quality="ok")))
    assert "Per phase" in trusted and "No trusted run" not in trusted and "| forward |" in trusted
