"""The cost of reaching a quality: the fit, the frontier, the multiplier, the learning curves, the plan at equal
quality and the scaling study through the workflow (config/scaling.py, findings/scaling.py, measure/curve.py)."""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from trainingcost.analytic import rule_names
from trainingcost.config import ConfigError
from trainingcost.config.scaling import ScalingStudy, eval_steps
from trainingcost.findings.scaling import (
    compute_to_reach,
    fit_power_law,
    frontier,
    frontiers_table,
    multiplier_at,
)

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


# -- the fit ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("a,b,c", [(50.0, 0.15, 1.2), (3e3, 0.35, 2.5), (8.0, 0.05, 0.0), (1e6, 0.6, 3.3)])
def test_the_fit_recovers_known_parameters_from_an_exact_curve(a, b, c):
    C = np.geomspace(1e9, 1e14, 30)
    got = fit_power_law(C, a * C ** -b + c)
    assert got[1] == pytest.approx(b, rel=1e-3) and got[2] == pytest.approx(c, abs=1e-3 * (a * 1e9 ** -b + c))
    assert got[0] == pytest.approx(a, rel=2e-2)


def test_the_fit_recovers_known_parameters_from_noisy_curves_within_their_noise():
    rng = np.random.default_rng(7)
    C = np.geomspace(1e9, 1e13, 40)
    bs, cs = [], []
    for _ in range(20):
        a, b, c, rmse = fit_power_law(C, (40 * C ** -0.2 + 2.0) * np.exp(rng.normal(0, 0.003, len(C))))
        bs.append(b)
        cs.append(c)
        assert 0.001 < rmse < 0.006
    assert np.median(bs) == pytest.approx(0.2, rel=0.1) and np.median(cs) == pytest.approx(2.0, abs=0.1)


def test_the_fit_refuses_curves_that_do_not_fall():
    C = np.geomspace(1e9, 1e12, 10)
    assert all(math.isnan(v) for v in fit_power_law(C, 2 + 0 * C))
    assert all(math.isnan(v) for v in fit_power_law(C[:2], [3.0, 2.0]))


# -- the frontier and the multiplier ------------------------------------------------------------------------
def test_the_frontier_is_the_lowest_loss_reached_by_each_compute_over_the_sizes():
    grid = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    small = (np.array([1.0, 4.0]), np.array([5.0, 3.0]))  # ends at compute 4
    large = (np.array([2.0, 16.0]), np.array([6.0, 1.0]))
    got = frontier([small, large], grid)
    # by hand: at 2 the small curve is at 4 (halfway in log C), the large at 6; at 8 only the large (6 -> 1 over
    # 3 log2-steps: 6 - 5 * 2/3); the running minimum keeps 3 at 8 since 2.667 < 3
    assert got[0] == 5.0 and got[1] == pytest.approx(4.0) and got[2] == pytest.approx(3.0)
    assert got[3] == pytest.approx(6 - 5 * 2 / 3) and got[4] == pytest.approx(1.0)
    assert math.isnan(frontier([large], grid)[0])  # below every curve's first compute: no loss
    assert math.isnan(frontier([small, large], np.array([16.0, 32.0]))[1])  # beyond every curve's last: none either


def test_compute_to_reach_interpolates_in_log_compute_and_says_never():
    grid = np.array([1.0, 4.0, 16.0])
    front = np.array([5.0, 3.0, 2.0])
    assert compute_to_reach(grid, front, 4.0) == pytest.approx(2.0)  # halfway from 5 to 3: halfway in log C
    assert compute_to_reach(grid, front, 5.5) == 1.0
    assert math.isnan(compute_to_reach(grid, front, 1.9))


def _study_rows(shift: dict[str, float], floor: dict[str, float], seeds=(0, 1), noise=0.0):
    """Synthetic learning curves: L(C) = 30 (C / s)^-0.2 + floor per rule, s its compute handicap, at 2 widths."""
    rng = np.random.default_rng(3)
    rows = []
    for rule in shift:
        for width, start in ((32, 1e9), (64, 2e9)):
            for seed in seeds:
                steps = np.array(eval_steps(400, 12))
                flops = steps * start
                loss = 30 * (flops / shift[rule]) ** -0.2 * (1 + 0.1 * (width == 32) * (flops > 1e11)) + floor[rule]
                loss = loss * np.exp(rng.normal(0, noise, len(loss)))
                for s, f, l in zip(steps, flops, loss):
                    rows.append({"config_id": f"w{width}", "rule": rule, "seed": seed, "step": int(s), "flops": int(f),
                                 "val_loss": float(l), "layers": 2, "d_model": width, "status": "ok"})
    return pd.DataFrame(rows)


def test_a_rule_that_needs_k_times_the_compute_has_multiplier_k_at_every_target():
    rows = _study_rows({"bp": 1.0, "kp": 3.0, "pepita": 1.0}, {"bp": 1.0, "kp": 1.0, "pepita": 2.5})
    table = frontiers_table(rows, bootstrap=20)
    mult = table[(table.kind == "multiplier") & (table.rule == "kp") & table.reaches]
    assert len(mult) >= 8
    # the frontier is linear in log C between the grid's points, so the shift is recovered to the grid's spacing
    assert np.allclose(mult.multiplier, 3.0, rtol=0.05)
    bp = table[(table.kind == "multiplier") & (table.rule == "bp")]
    assert np.allclose(bp.multiplier, 1.0)


def test_the_multiplier_says_never_where_a_frontier_stays_above_the_target():
    rows = _study_rows({"bp": 1.0, "pepita": 1.0}, {"bp": 1.0, "pepita": 2.5})
    table = frontiers_table(rows, bootstrap=10)
    pepita = table[(table.kind == "multiplier") & (table.rule == "pepita")]
    low = pepita[pepita.target_loss < pepita_lowest(table)]
    assert len(low) and not low.reaches.any() and low.multiplier.isna().all() and (low.never_share == 1).all()
    assert math.isnan(multiplier_at(table, "pepita", float(low.target_loss.min())))
    with pytest.raises(ValueError, match="below them"):
        multiplier_at(table, "pepita", 0.5)  # below BP's frontier too: out of range, not "never"


def pepita_lowest(table):
    return table[(table.kind == "frontier") & (table.rule == "pepita")].loss.min()


def test_bootstrap_intervals_contain_the_point_estimate_and_widen_with_noise():
    quiet = frontiers_table(_study_rows({"bp": 1.0, "kp": 2.0}, {"bp": 1.0, "kp": 1.0}, noise=0.001), bootstrap=40)
    loud = frontiers_table(_study_rows({"bp": 1.0, "kp": 2.0}, {"bp": 1.0, "kp": 1.0}, noise=0.03), bootstrap=40)

    def width(t):
        m = t[(t.kind == "multiplier") & (t.rule == "kp") & t.reaches]
        assert ((m.multiplier_lo <= m.multiplier * 1.0001) & (m.multiplier * 0.9999 <= m.multiplier_hi)).mean() > 0.8
        return float((m.multiplier_hi / m.multiplier_lo).median())

    assert width(loud) > width(quiet)


# -- the learning curve: measured compute equals the executed model ----------------------------------------
def test_learning_curves_count_the_measured_flops_of_every_rule_equal_to_the_executed_model():
    from trainingcost.config import RuleOptions, TrainSpec
    from trainingcost.measure.curve import learning_curve

    study = ScalingStudy(rules=tuple(rule_names()), widths=(16,), depths=(1,), seq_len=8, batch=2)
    for rule in rule_names():
        spec = TrainSpec(cfg=study.model(16, 1), task="lm", rule=rule, steps=3, eval_at=(1, 2), eval_batches=1,
                         options=RuleOptions(optimizer="adam", lr=1e-3))
        curve = learning_curve(spec)
        assert list(curve.step) == [1, 2, 3] and (curve.status == "ok").all(), rule
        assert (curve.flops_per_step == curve.executed_flops_per_step).all(), rule
        assert list(curve.flops) == [s * int(curve.flops_per_step.iloc[0]) for s in (1, 2, 3)]
        assert list(curve.tokens) == [s * 16 for s in (1, 2, 3)]


def test_eval_steps_are_geometric_from_the_first_to_the_last_step():
    assert eval_steps(600, 16)[0] == 1 and eval_steps(600, 16)[-1] == 600
    ratios = np.diff(np.log(eval_steps(10_000, 20)))[5:]  # the first steps are rounded to whole numbers
    assert ratios.max() / ratios.min() < 1.2
    assert eval_steps(5, 10) == (1, 2, 3, 4, 5)


def test_a_study_refuses_bad_sections_in_one_line():
    base = dict(rules=("bp", "dfa"), widths=(32,), depths=(1,))
    with pytest.raises(ConfigError, match="scaling.rules: unknown rule 'sgd'"):
        ScalingStudy(**{**base, "rules": ("bp", "sgd")}).check(rule_names())
    with pytest.raises(ConfigError, match="scaling_budget: must be a positive number"):
        ScalingStudy(**base, budget=float("inf")).check(rule_names())
    assert ScalingStudy.from_json(ScalingStudy(**base).to_json()) == ScalingStudy(**base)
    assert ScalingStudy(**base, budget=10).run_steps == 6000


# -- the plan at equal quality ------------------------------------------------------------------------------
def _plan(*extra):
    return subprocess.run([sys.executable, "-m", "trainingcost", "plan", "--preset", "gpt2-small", "--tokens", "1e10",
                           "--gpu", "a100-80gb", "--gpus", "8", "--cost-model", "executed", "--mfu", "0.4",
                           "--format", "csv", *extra], capture_output=True, text=True)


def test_plan_with_a_target_loss_gives_each_rule_its_multiplier_of_bps_compute(tmp_path):
    table = frontiers_table(_study_rows({"bp": 1.0, "kp": 3.0, "pepita": 1.0}, {"bp": 1.0, "kp": 1.0, "pepita": 2.5}),
                            bootstrap=10)
    path = tmp_path / "frontiers.parquet"
    table.to_parquet(path)
    target = 1.3
    plain = _plan()
    equal = _plan("--target-loss", str(target), "--frontiers", str(path))
    assert plain.returncode == 0 and equal.returncode == 0, equal.stderr
    from io import StringIO

    plain, equal = pd.read_csv(StringIO(plain.stdout)).set_index("rule"), pd.read_csv(StringIO(equal.stdout)).set_index("rule")
    assert (plain.source_quality.str.startswith("equal tokens per rule; no learning-quality data")).all()
    assert (plain.tokens == 1e10).all()
    for rule in ("bp", "kp"):
        m = multiplier_at(table, rule, target)
        assert equal.loc[rule, "compute_multiplier"] == pytest.approx(m)
        # the rule's compute is m x BP's: tokens x executed FLOPs per token
        assert equal.loc[rule, "model_flops"] == pytest.approx(m * equal.loc["bp", "model_flops"], rel=1e-9)
        assert equal.loc[rule, "gpu_hours"] == pytest.approx(
            plain.loc[rule, "gpu_hours"] * equal.loc[rule, "tokens"] / 1e10, rel=1e-9)
    assert math.isnan(equal.loc["pepita", "tokens"]) and "never reaches" in equal.loc["pepita", "source_quality"]
    assert math.isnan(equal.loc["dfa", "tokens"])  # not in the study: no quality data, no budget
    assert equal.loc["dfa", "source_quality"].endswith("not in the study, so no budget")


@pytest.mark.parametrize("extra,message", [
    (["--target-loss", "2"], "--frontiers: --target-loss needs it"),
    (["--frontiers", "x.parquet"], "--target-loss: --frontiers needs it"),
    (["--target-loss", "2", "--frontiers", "missing.parquet"], "--frontiers: no such file: missing.parquet"),
    (["--target-loss", "-1", "--frontiers", "x"], "--target-loss: must be a positive validation loss"),
])
def test_plan_at_equal_quality_refuses_mistakes_in_one_line(extra, message):
    result = _plan(*extra)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_plan_refuses_a_target_loss_outside_bps_frontier(tmp_path):
    path = tmp_path / "f.parquet"
    frontiers_table(_study_rows({"bp": 1.0}, {"bp": 1.0}), bootstrap=10).to_parquet(path)
    result = _plan("--target-loss", "0.2", "--frontiers", str(path))
    assert result.returncode == 2 and "--target-loss: BP's frontier reaches losses from" in result.stderr


@pytest.mark.parametrize("rows, message", [
    ([], "holds no frontier rows (kind frontier)"),
    ([("frontier", "bp", 1e15, 2.0), ("frontier", "dfa", float("nan"), 2.1)],
     "rule dfa's frontier has compute nan and loss 2.1; each must be a positive finite number"),
])
def test_an_empty_or_nan_frontiers_table_is_refused(tmp_path, rows, message):
    """Issue 40, defects 2 and 16: a zero-row table planned every rule at 1x BP's compute (exit 0); a NaN compute
    gave a self-contradictory message."""
    import pandas as pd

    path = tmp_path / "f.parquet"
    pd.DataFrame(rows, columns=["kind", "rule", "compute", "loss"]).astype(
        {"kind": str, "rule": str, "compute": float, "loss": float}).to_parquet(path)
    result = _plan("--target-loss", "2.065", "--frontiers", str(path))
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


# -- the tiny study through the workflow --------------------------------------------------------------------
TINY_STUDY = {
    "sweep": {"models": [{"name": "m", "arch": "decoder", "layers": 1, "d_model": 16, "heads": 4, "d_ff": 32,
                          "vocab": 256, "seq_len": 8, "batch": 2}]},
    "memory": {"dtypes": ["fp32"], "optimizers": ["adam"]},
    "plan": {"select": ["m"], "gpu": "a100-80gb", "gpus": 1, "tokens": 1e9},
    "scaling": {"rules": ["bp", "kp"], "widths": [16, 32], "depths": [1, 2], "heads": 4, "seq_len": 16,
                "batch": 4, "seeds": [0, 1], "steps": 12, "evals": 5, "eval_batches": 1, "lrs": [0.001, 0.01],
                "search_steps": 4, "bootstrap": 10},
}


def test_the_tiny_scaling_study_runs_through_the_workflow(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY_STUDY))
    result = subprocess.run([str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile",
                             str(tmp_path / "config.yaml"), "--cores", "2", "-q"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr[-3000:]
    scaling = pd.read_parquet(tmp_path / "results/tables/scaling.parquet")
    assert set(scaling.rule) == {"bp", "kp"} and set(scaling.seed) == {0, 1} and scaling.config_id.nunique() == 4
    assert (scaling.flops == scaling.step * scaling.flops_per_step).all()
    assert (scaling.flops_per_step == scaling.executed_flops_per_step).all()
    assert set(scaling.step) == set(eval_steps(12, 5))
    lr = pd.read_parquet(tmp_path / "results/tables/scaling_lr.parquet")
    assert len(lr) == 2 * 2 and lr.groupby("rule").chosen.sum().eq(1).all()
    from test_workflow import undocumented

    assert undocumented(tmp_path / "results") == []  # every column of the study's tables: docs/columns.md
    chosen = lr[lr.chosen].set_index("rule").lr.sort_index()
    assert (scaling.groupby("rule").lr.first().sort_index() == chosen).all()  # runs use the searched lr
    frontiers = pd.read_parquet(tmp_path / "results/tables/frontiers.parquet")
    assert set(frontiers.kind) == {"frontier", "fit", "multiplier", "depth"}
    assert frontiers[frontiers.kind == "depth"].layers.dropna().nunique() == 2
    text = (tmp_path / "results/scaling.md").read_text()
    assert text.startswith("## Cost to a quality") and "| KP |" in text and "Loss gap to BP at equal compute" in text
    assert text.splitlines()[0] in result.stdout  # printed at the end, where no measured sweep runs
    for name in ("12_loss_vs_compute", "13_frontiers", "14_compute_multiplier", "15_loss_by_depth_equal_compute"):
        assert (tmp_path / f"results/figures/{name}.png").stat().st_size > 10_000
        assert (tmp_path / f"results/figures/{name}.pdf").exists()


def test_one_learning_rate_searches_nothing_and_a_rule_with_none_trains_nothing():
    from trainingcost.curves import chosen_lr, run, search

    study = ScalingStudy(rules=("bp",), widths=(16,), depths=(1,), lrs=(0.002,), seeds=(0,))
    table = search(study, "bp")
    assert list(table.status) == ["not searched"] and table.chosen.all() and chosen_lr(table, "bp") == 0.002
    diverged = table.assign(chosen=False)
    assert chosen_lr(diverged, "bp") is None
    rows = run(study, "bp", 0, None)  # every searched rate diverged: one row per point says so, nothing trains
    assert list(rows.status) == ["diverged"] and list(rows.step) == [0]
    with pytest.raises(ConfigError, match="--search: the table searched no learning rate for rule dfa"):
        chosen_lr(table, "dfa")


def test_the_default_plan_says_its_tokens_are_equal_per_rule_and_the_equal_quality_plan_gives_each_rules(capsys, tmp_path):
    from trainingcost import cli

    base = ["plan", "--preset", "gpt2-small", "--tokens", "1e10", "--gpu", "a100-80gb", "--gpus", "8", "--mfu", "0.4"]
    assert cli.main(base) == 0
    assert "Tokens: equal for every rule; no learning-quality data" in capsys.readouterr().out
    path = tmp_path / "f.parquet"
    frontiers_table(_study_rows({"bp": 1.0, "kp": 3.0}, {"bp": 1.0, "kp": 1.0}), bootstrap=10).to_parquet(path)
    assert cli.main([*base, "--target-loss", "1.3", "--frontiers", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Tokens per rule: to reach validation loss 1.3" in out and "DFA not in the study" in out
