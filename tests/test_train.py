"""`trainingcost train`: every rule on every arch from the command line, determinism, bad flags."""

import math

import pandas as pd
import pytest

from trainingcost.cli import main
from trainingcost.config import canonical_model, config_id
from trainingcost.config import RuleOptions
from trainingcost.analytic import rule_names
from trainingcost.config import TrainSpec
from trainingcost.measure.run import train

from test_cli import run

def run_here(capsys, *args):
    """The command line in this process (fast); returns (exit status, stdout, stderr)."""
    try:
        status = main(list(args))
    except SystemExit as exc:  # argparse errors
        status = exc.code
    out = capsys.readouterr()
    return status, out.out, out.err


TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--batch", "4", "--steps", "3", "--eval-batches", "1"]
ARCH_TASKS = [("encoder", "lm", "8"), ("decoder", "classify", "8"), ("encoder-decoder", "reverse", "6")]


@pytest.mark.parametrize("arch,task,seq", ARCH_TASKS)
def test_every_rule_trains_every_arch_from_the_command_line(tmp_path, capsys, arch, task, seq):
    for rule in rule_names():
        out = tmp_path / f"{rule}.parquet"
        status, stdout, stderr = run_here(capsys, "train", "--arch", arch, "--task", task, "--seq-len", seq, "--rule", rule, *TINY, "--out", str(out))
        assert status == 0, (rule, stderr)
        assert stdout.count("\n") == 1 and "status ok" in stdout and "validation" in stdout
        frame = pd.read_parquet(out)
        assert list(frame["step"]) == [1, 2, 3]
        assert {"step", "loss", "rule", "config_id", "task", "seed", "status"} <= set(frame.columns)
        assert set(frame["rule"]) == {rule} and set(frame["status"]) == {"ok"} and set(frame["task"]) == {task}
        assert frame["loss"].notna().all() and not math.isnan(frame["val_accuracy"].iloc[-1])
        assert not list(tmp_path.glob(".*.tmp"))


def test_config_id_is_the_analytic_one():
    result = run("train", "--preset", "paper-example", "--vocab", "300", "--seq-len", "8", "--layers", "1",
                 "--d-model", "16", "--heads", "2", "--d-ff", "32", "--batch", "2", "--steps", "1", "--eval-batches", "1")
    assert result.returncode == 0, result.stderr
    cfg = canonical_model(dict(arch="encoder", layers=1, d_model=16, heads=2, d_ff=32, vocab=300, seq_len=8, batch=2), "")
    assert f"config_id {config_id(cfg)}" in result.stdout


@pytest.mark.parametrize("rule", ["bp", "pepita", "wm", "dfa"])
def test_same_seed_same_losses(rule):
    cfg = canonical_model(dict(arch="decoder", layers=2, d_model=16, heads=2, d_ff=32, vocab=256, seq_len=12, batch=4), "")
    spec = TrainSpec(cfg=cfg, task="lm", rule=rule, steps=8, seed=11, eval_batches=1, options=RuleOptions(lr=0.1))
    first, second = train(spec), train(spec)
    assert list(first.steps["loss"]) == list(second.steps["loss"])
    assert first.val_loss == second.val_loss
    other = train(TrainSpec(**{**spec.__dict__, "seed": 12}))
    assert list(other.steps["loss"]) != list(first.steps["loss"])


def test_divergence_stops_the_run_with_status_diverged():
    cfg = canonical_model(dict(arch="encoder", layers=1, d_model=16, heads=2, d_ff=32, vocab=16, seq_len=8, batch=4, classes=3), "")
    result = train(TrainSpec(cfg=cfg, task="classify", rule="bp", steps=50, options=RuleOptions(lr=1e30)))
    assert result.status == "diverged"
    assert len(result.steps) < 50 and not math.isfinite(result.steps["loss"].iloc[-1])
    assert set(result.steps["status"]) == {"diverged"}


@pytest.mark.parametrize(
    "args,message",
    [
        (["--rule", "sgdx"], "argument --rule: invalid choice: 'sgdx'"),
        (["--task", "translate"], "argument --task: invalid choice: 'translate'"),
        (["--steps", "0"], "--steps: must be a positive number of steps (got 0)"),
        (["--steps", "-3"], "--steps: must be a positive number"),
        (["--corpus", "/no/such/file.txt"], "--corpus: no such file: /no/such/file.txt"),
        (["--task", "copy"], "--task: copy is a sequence-to-sequence task and needs arch encoder-decoder (arch is decoder)"),
        (["--task", "reverse", "--arch", "encoder"], "needs arch encoder-decoder (arch is encoder)"),
        (["--task", "classify", "--arch", "encoder-decoder"], "--task: classify needs arch encoder or decoder"),
        (["--task", "classify", "--classes", "4"], "--classes: task classify has 3 classes (got 4)"),
        (["--task", "lm", "--vocab", "100"], "--vocab: task lm is byte-level and needs vocab >= 256 (got 100)"),
        (["--task", "copy", "--arch", "encoder-decoder", "--corpus", "README.md"], "--corpus: applies to task lm only"),
        (["--lr", "0"], "--lr: must be a positive number"),
        (["--optimizer", "lbfgs"], "argument --optimizer: invalid choice"),
        (["--heads", "5"], "heads: 5 does not divide d_model 64"),
        (["--dtype", "fp8"], "argument --dtype: invalid choice"),
    ],
)
def test_bad_flags_give_one_line(capsys, args, message):
    status, stdout, stderr = run_here(capsys, "train", *args)
    assert status == 2
    assert stdout == ""
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    assert message in stderr, stderr


def test_the_installed_command_trains_and_refuses_bad_input(tmp_path):
    out = tmp_path / "run.parquet"
    good = run("train", "--rule", "mempepita", "--arch", "encoder-decoder", "--task", "copy", "--seq-len", "6", *TINY, "--out", str(out))
    assert good.returncode == 0, good.stderr
    assert len(pd.read_parquet(out)) == 3
    bad = run("train", "--task", "copy")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


@pytest.mark.parametrize("rule", ["pepita", "kp", "dfa"])
def test_bf16_runs_keep_parameters_in_bf16(rule):
    cfg = canonical_model(dict(arch="decoder", layers=1, d_model=16, heads=2, d_ff=32, vocab=256, seq_len=12, batch=8), "")
    result = train(TrainSpec(cfg=cfg, task="lm", rule=rule, steps=30, dtype="bf16", eval_batches=1, options=RuleOptions(lr=0.1)))
    assert result.status == "ok" and set(result.steps["dtype"]) == {"bf16"}
    loss = result.steps["loss"]
    assert loss.iloc[-5:].mean() < loss.iloc[:5].mean() - 0.3
