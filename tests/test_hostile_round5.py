"""Issue 65, review leftovers and the hostile reviews of 2026-12-07 (night): each defect as found, now a correct result
or one line naming the field (exit status 2, no traceback) before any work."""

import json

import pytest

from trainingcost import cli


@pytest.mark.parametrize("argv, command, extra", [
    (["plan", "--preset", "gpt2-small", "--bogus", "1"], "plan", "--bogus 1"),
    (["estimate", "--preset", "gpt2-small", "stray"], "estimate", "stray"),
    (["hardware", "--nope"], "hardware", "--nope"),
])
def test_an_unknown_flag_is_named_with_its_subcommand(capsys, argv, command, extra):
    with pytest.raises(SystemExit) as stop:  # argparse's exit, before any work
        cli.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"trainingcost {command}: error: unrecognized arguments: {extra}"]


def test_the_hardware_json_is_plain_json_with_its_slashes_unescaped(capsys):
    assert cli.main(["hardware", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "\\/" not in out and '"bandwidth GB/s"' in out
    rows = json.loads(out)
    h100 = next(r for r in rows if r["device"] == "h100-sxm")
    assert h100["bf16 TFLOP/s"] == pytest.approx(989.5) and h100["bandwidth GB/s"] == pytest.approx(3350)
    assert any(value is None for row in rows for value in row.values())  # a peak a part lacks is null, not NaN


def test_the_top_level_help_names_every_subcommand_in_plain_text(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    head = out.split("positional arguments")[0]
    assert "``" not in head
    for command in ("estimate", "plan", "train", "calibrate", "hardware", "curves", "serve", "configs", "check",
                    "analytic"):
        assert command in head.split("Command line:")[1]


def test_a_framework_date_before_the_familys_first_entry_says_so(capsys):
    assert cli.main(["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb",
                     "--framework", "megatron-lm@1999"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "megatron-lm@2021 for 'megatron-lm@1999'" in out
    assert "the family's earliest entry, read for any date before its successor's" in out


def test_the_multiplier_figure_puts_unreached_targets_in_their_own_strip_not_at_a_multiplier():
    import numpy as np
    import pandas as pd

    from trainingcost.findings.scaling_figures import multiplier_figure

    rows = []
    for rule, values in {"fa": [2.0, 2.5, np.nan], "dfa": [3.0, np.nan, np.nan], "tp": [1.2, 1.3, 1.4]}.items():
        for target, value in zip([4.0, 3.5, 3.0], values):
            rows.append({"kind": "multiplier", "headline": False, "rule": rule, "target_loss": target, "multiplier": value,
                         "multiplier_lo": np.nan, "multiplier_hi": np.nan, "reaches": bool(np.isfinite(value))})
    fig = multiplier_figure(pd.DataFrame(rows))
    strip, main = fig.axes
    assert [t.get_text() for t in strip.get_yticklabels()] == ["FA", "DFA"]  # TP reaches every target: no row
    crosses = np.concatenate([c.get_offsets() for c in strip.collections])
    assert sorted(map(tuple, crosses.tolist())) == [(3.0, 0.0), (3.0, 1.0), (3.5, 1.0)]
    assert not main.collections  # the main axis holds the multipliers only
    assert main.get_ylim()[1] == pytest.approx(3.0 * 1.5)


def test_the_cost_figure_says_when_the_cost_models_agree_on_time():
    import pandas as pd

    import trainingcost
    from trainingcost.findings.plan_figures import plan_cost

    table = trainingcost.plan(preset="gpt2-small", tokens=1e9, gpu="a100-80gb", gpus=8, rule=["bp", "pepita"],
                              cost_model="all").table
    fig = plan_cost(pd.DataFrame(table))
    title = fig._suptitle.get_text()
    assert "dashes on them (time is priced from what runs" in title  # the step-time model: one time per rule
    flat = trainingcost.plan(preset="gpt2-small", tokens=1e9, gpu="a100-80gb", gpus=8, rule=["bp", "pepita"],
                             cost_model="all", mfu=0.4).table  # a flat MFU: each cost model's FLOPs, its own time
    assert "dashes the other cost models" in plan_cost(pd.DataFrame(flat))._suptitle.get_text()
