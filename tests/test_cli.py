"""The command line, as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).with_name("trainingcost")


def run(*args):
    command = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "trainingcost.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_estimate_paper_example_prints_the_per_layer_table():
    result = run("estimate", "--preset", "paper-example", "--rule", "all", "--per-layer")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "A blank cell" in out and "0: it takes part" in out  # the legend
    for name in ("encoder.embedding", "encoder.0.self_attention", "encoder.0.ffn_norm", "head", "error_projection"):
        assert name in out
    for rule in ("bp", "pepita", "mempepita", "fa", "kp", "wm", "dfa"):
        assert f"rule {rule} | cost model paper" in out
    assert "Total FLOPs per training step" in out and "Tensor memory of one training step, executed model" in out


def test_estimate_json_records():
    result = run("estimate", "--arch", "encoder-decoder", "--enc-layers", "2", "--dec-layers", "1", "--d-model", "32",
                 "--heads", "4", "--d-ff", "64", "--vocab", "20", "--seq-len", "6", "--tgt-len", "4", "--batch", "3",
                 "--rule", "pepita", "--cost-model", "paper", "--format", "json")
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert {"rule", "cost_model", "layer", "layer_kind", "phase", "maccs", "flops"} <= set(records[0])
    ep = [r for r in records if r["layer"] == "error_projection"]
    assert ep[0]["maccs"] == 3 * 2 * 6 * 4 * 20  # batch x eq. 48
    assert any(r["layer"] == "decoder.0.cross_attention" for r in records)


def test_preset_flags_override():
    result = run("estimate", "--preset", "vaswani-base", "--layers", "2", "--seq-len", "64", "--rule", "bp", "--cost-model", "paper", "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert "decoder.1.cross_attention" in result.stdout and "decoder.2." not in result.stdout


BAD = [
    (["--preset", "bert-base", "--heads", "5"], "heads: 5 does not divide d_model 768"),
    (["--preset", "bert-base", "--layers", "0"], "layers: 0 is less than the minimum of 1"),
    (["--preset", "bert-base", "--d-model", "-8"], "--d-model: -8 is less than the minimum of 1"),
    (["--preset", "bert-base", "--rule", "backprop"], "argument --rule: 'backprop' is not a rule (allowed: bp, pepita"),
    (["--preset", "bert-large"], "--preset: 'bert-large' is not a preset (closest: bert-base"),
    (["--preset", "bert-base", "--arch", "rnn"], "arch: 'rnn' is not allowed (allowed: encoder, decoder, encoder-decoder)"),
    (["--preset", "bert-base", "--cost-model", "chinchilla"], "argument --cost-model: invalid choice: 'chinchilla'"),
    (["--arch", "encoder-decoder", "--enc-layers", "2", "--d-model", "64", "--heads", "4", "--d-ff", "64", "--vocab", "9", "--seq-len", "8"],
     "--dec-layers: encoder-decoder needs both stacks"),
    (["--preset", "gpt2-small", "--tgt-len", "8"], "--tgt-len: applies only to arch encoder-decoder"),
    (["--preset", "bert-base", "--batch", "two"], "argument --batch: expected an integer, got 'two'"),
    (["--arch", "encoder", "--layers", "1"], "--d-model: required without --preset"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_flags_give_one_line(args, message):
    result = run("estimate", *args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert message in lines[0]


@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_a_list_of_rules_prints_those_rules_in_the_catalogues_order(command):
    """Issue 39: `plan --rule bp,dfa` was refused; a list works in both commands, in the catalogue's order."""
    extra = ["--tokens", "1e9", "--gpu", "a100-80gb", "--gpus", "8"] if command == "plan" else []
    result = run(command, "--preset", "gpt2-small", "--rule", "dfa,bp", "--format", "json", *extra)
    assert result.returncode == 0, result.stderr
    rules = [r["rule"] for r in json.loads(result.stdout)]
    assert list(dict.fromkeys(rules)) == ["bp", "dfa"]
    bad = run(command, "--preset", "gpt2-small", "--rule", "bp,dfb", *extra)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "'dfb' is not a rule" in bad.stderr


def test_estimate_memory_prints_persistent_bytes_phase_peaks_and_the_step_peak_per_rule(capsys):
    from test_train import run_here

    from trainingcost.analytic.memory import memory_table
    from trainingcost.config import canonical_model, configs_frame
    from trainingcost.config.presets import PRESETS

    status, stdout, stderr = run_here(capsys, "estimate", "--preset", "paper-example", "--memory", "--optimizer", "adam")
    assert status == 0, stderr
    lines = stdout.splitlines()
    header = next(line for line in lines if line.startswith("rule") and "step peak" in line)
    for phase in ("persistent", "forward", "backward", "error_projection", "modulated_pass", "weight_update",
                  "optimizer_step", "mirror"):
        assert phase in header
    table = memory_table(configs_frame([("", canonical_model(PRESETS["paper-example"], ""))]),
                         ["mempepita", "wm"], ["fp32"], ["adam"]).set_index("rule")
    row = next(line for line in lines if line.startswith("mempepita ") and "MiB" in line and "GiB" not in line)
    assert row.split()[-2:] == [f"{table.at['mempepita', 'peak'] / 2**20:.2f}", "MiB"]


def test_the_default_estimate_answers_in_one_screen_for_every_preset(capsys):
    """A newcomer's first command: under the executed model, one row per rule with its ratio to BP and its memory,
    in 100 columns and 40 lines, for every preset (in process: no interpreter start-up per preset)."""
    from trainingcost import cli
    from trainingcost.analytic import rule_names
    from trainingcost.config.presets import PRESETS

    for preset in PRESETS:
        assert cli.main(["estimate", "--preset", preset]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) <= 40 and max(map(len, lines)) <= 100, (preset, len(lines), max(map(len, lines)))
        table = [line.split()[0] for line in lines if line.split() and line.split()[0] in rule_names()]
        assert table == list(rule_names()), preset
    assert cli.main(["estimate", "--preset", "gpt2-small", "--cost-model", "all"]) == 0
    out = capsys.readouterr().out
    assert "FLOPs per training step by phase" in out and "Components summed" in out  # the full view, on asking
