"""Issue 66, the hostile review's third round: each defect's reproduction, as the review ran it, gives a correct
result or one line (exit status 2, no traceback, at most 200 characters) before any work, with nothing written.
(N1 and N2, the warm server, are in tests/test_warm.py; the signal and the input properties in test_hostile.py and
test_input_properties.py.)"""

import json

import numpy as np
import pandas as pd
import pytest

from trainingcost import cli
from test_train import run_here

PLAN = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "h100-sxm", "--rule", "bp"]


def one_line(stderr: str, command: str, field: str) -> str:
    """The one line; at most 200 characters besides the paths the user gave (pytest's folders are long)."""
    import re

    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith(f"trainingcost {command}: error: {field}"), lines[0]
    assert len(re.sub(r"/tmp/pytest-of-[^/]+/pytest-[0-9]+/[^/ ]+", "T", lines[0])) <= 200, lines[0]
    return lines[0]


# -- N3: plan --figure is checked before the search -----------------------------------------------------------
@pytest.mark.parametrize("figure, message", [
    ("plan.txt", "must end in .png, .pdf, .svg"),
    ("DIR.png", "is a directory; give a file name"),
    ("/proc/x.png", "cannot create files in /proc"),
    ("FILE/x.png", "is a file, so"),
])
def test_a_figure_that_cannot_be_written_is_refused_before_the_search(tmp_path, capsys, monkeypatch, figure, message):
    (tmp_path / "DIR.png").mkdir()
    (tmp_path / "FILE").write_text("x")
    from trainingcost import planning

    def never(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr(planning, "search_plan", never)
    figure = figure if figure.startswith("/") else str(tmp_path / figure)
    status, stdout, stderr = run_here(capsys, *PLAN, "--gpus", "64-256x2", "--figure", figure)
    assert status == 2 and message in one_line(stderr, "plan", "--figure")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DIR.png", "FILE"]


def test_a_figure_is_written_in_the_format_its_name_gives(tmp_path, capsys):
    path = tmp_path / "scaling.svg"
    status, stdout, stderr = run_here(capsys, *PLAN, "--gpus", "8,16", "--figure", str(path))
    assert status == 0, stderr
    assert path.read_text().lstrip().startswith("<?xml") and "<svg" in path.read_text()[:2000]


# -- N5: a hostile config.json ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested more than 64 levels deep"),
    ('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}", "the number 99999999999999999999... is beyond 64-bit integers"),
    ('{"model_type": "llama", "note": "' + "[" * 1000 + '"}', "num_attention_heads: missing"),  # brackets in a string
])
def test_a_hostile_config_json_is_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    status, stdout, stderr = run_here(capsys, "estimate", "--hf-config", str(path))
    assert status == 2 and message in one_line(stderr, "estimate", "--hf-config")


def test_a_hostile_device_measurement_or_calibration_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 10_000 + "]" * 10_000)
    status, _, stderr = run_here(capsys, *PLAN, "--calibration", str(path))
    assert status == 2 and "nested more than 64 levels deep" in one_line(stderr, "plan", "--calibration")
    status, _, stderr = run_here(capsys, *PLAN, "--device-model", str(path))
    assert status == 2 and "nested more than 64 levels deep" in one_line(stderr, "plan", "--device-model")


# -- N6, N13, N27: work bounded before it is done -----------------------------------------------------------
def test_the_expert_count_is_bounded_before_any_work(tmp_path, capsys):
    status, _, stderr = run_here(capsys, "estimate", "--preset", "qwen3-30b-a3b", "--experts", "4096")
    assert status == 2 and "4096 is more than 1024" in one_line(stderr, "estimate", "--experts")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128,
                                "vocab_size": 1000, "num_local_experts": 10**9, "num_experts_per_tok": 2,
                                "max_position_embeddings": 128}))
    status, _, stderr = run_here(capsys, "estimate", "--hf-config", str(path))
    assert status == 2 and "1000000000 is more than 1024" in stderr and stderr.count("\n") == 1
    status, _, stderr = run_here(capsys, "estimate", "--preset", "qwen3-30b-a3b", "--experts", "1024")
    assert status == 0, stderr  # the bound itself is priced


@pytest.mark.parametrize("gpus, message", [
    ("1-1000000000000x2", "1000000000000 GPUs is more than 1,048,576"),
    ("1000000000000", "1000000000000 GPUs is more than 1,048,576"),
    ("99999999999999999999", "99999999999999999999 GPUs is more than 1,048,576"),  # an integer: not "expected N"
    ("0", "must be a positive integer (got 0)"),
    ("1-100000x1", "F at least 2"),
    (",".join(str(n) for n in range(1, 100)), "at most 64 GPU counts"),
    ("64,,128", "an empty count between commas"),  # a count left out is not read as two counts
    ("64,", "an empty count between commas"),
])
def test_gpu_counts_are_bounded_before_any_work(capsys, gpus, message):
    status, _, stderr = run_here(capsys, *PLAN, f"--gpus={gpus}")
    assert status == 2 and message in one_line(stderr, "plan", "argument --gpus")


# -- N11: a calibration no device could have made ------------------------------------------------------------
@pytest.mark.parametrize("seconds, message", [
    (0.0, "is faster than any device"),
    (1e-30, "is faster than any device"),
    (1e300, "is more than 3600 s for one kernel"),
])
def test_a_calibration_with_impossible_kernel_times_is_one_line(tmp_path, capsys, seconds, message):
    sig = json.dumps([[{"t": [[512, 768], [768, 1], "bfloat16"]}, {"t": [[768, 768], [1, 768], "bfloat16"]}], {"kw": {}}])
    calibration = {"launch_overhead_s": 1e-6, "view_overhead_s": 1e-7, "copy_ladder": [{"bytes": 1, "seconds": 1e-6}],
                   "kernels": [{"op": "aten.mm.default", "signature": sig, "cls": "matmul", "flops": 2 * 512 * 768 * 768,
                                "bytes_read": 0, "bytes_written": 0, "seconds": seconds}]}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(calibration))
    status, stdout, stderr = run_here(capsys, *PLAN, "--calibration", str(path))
    assert status == 2 and message in one_line(stderr, "plan", "--calibration") and stdout == ""


# -- N20: a seed out of range --------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", ["99999999999999999999", "-1", "4294967296"])
def test_a_seed_out_of_range_is_refused_before_training(tmp_path, capsys, seed):
    status, _, stderr = run_here(capsys, "train", "--steps", "3", "--seed", seed, "--out-dir", str(tmp_path / "run"))
    assert status == 2 and one_line(stderr, "train", "--seed")
    assert not (tmp_path / "run").exists()


# -- N23: a target loss equal to the frontier's first loss ---------------------------------------------------
def test_a_target_at_the_frontiers_first_loss_is_reached_at_its_first_compute():
    from trainingcost.findings.scaling import multiplier_at

    rows = [{"kind": "frontier", "rule": rule, "compute": c, "loss": l}
            for rule, scale in (("bp", 1.0), ("kp", 2.0)) for c, l in ((1e9 * scale, 3.0), (1e10 * scale, 2.0))]
    frontiers = pd.DataFrame(rows)
    assert multiplier_at(frontiers, "kp", 3.0) == pytest.approx(2.0)  # both reach 3.0 at their first point
    with pytest.raises(ValueError, match="above them"):
        multiplier_at(frontiers, "kp", 3.0 + 1e-9)


# -- N24, N26, D15 -----------------------------------------------------------------------------------------------
def test_a_traced_recompute_without_torch_compile_is_refused(capsys):
    status, _, stderr = run_here(capsys, *PLAN, "--gpus", "8", "--recompute-tail", "traced", "--no-compile")
    assert status == 2 and "--no-compile given" in one_line(stderr, "plan", "--recompute-tail")
    status, _, stderr = run_here(capsys, *PLAN, "--gpus", "8", "--recompute-tail", "traced", "--compile")
    assert status == 0, stderr


def test_the_context_parallel_message_says_what_each_gpu_holds(capsys):
    status, _, stderr = run_here(capsys, "plan", "--preset", "llama-3-8b", "--tokens", "1e9", "--gpu", "h100-sxm",
                                 "--gpus", "8", "--rule", "bp", "--seq-len", "8190", "--cp", "2")
    line = one_line(stderr, "plan", "--cp")
    assert "cut into 4 chunks, two on each of the 2 GPUs" in line and "two of 2" not in line


def test_a_token_budget_below_one_step_is_one_step_or_refused(capsys):
    """D15: "0 steps" and a run shorter than its step. A given global batch larger than the run is refused; the
    default one (about 4M tokens) shrinks to the run's sequences, in one step."""
    status, _, stderr = run_here(capsys, *PLAN, "--gpus", "8", "--tokens", "100000", "--global-batch", "512")
    assert status == 2 and "512 makes steps of 5.243e+05 tokens, more than the run's 1e+05" in \
        one_line(stderr, "plan", "--global-batch")
    status, stdout, stderr = run_here(capsys, *PLAN, "--gpus", "8", "--tokens", str(512 * 1024), "--global-batch", "512")
    assert status == 0 and " in 1 step of 512 sequences" in stdout, stdout
    status, _, stderr = run_here(capsys, *PLAN, "--gpus", "8", "--tokens", "100000", "--format", "json")
    row = json.loads(_)[0]
    assert status == 0 and row["global_batch"] == 96 and 1 <= row["optimizer_steps"] < 2
    assert row["wall_clock_s"] >= row["step_time_s"]  # no run shorter than its one step
    status, _, stderr = run_here(capsys, *PLAN, "--gpus", "8", "--tokens", "5000")
    assert status == 2 and "less than one optimizer step of 8 sequences" in one_line(stderr, "plan", "--tokens")


# -- N12: the workflow's plan efficiency checked with the rest of the config ---------------------------------
def test_an_impossible_plan_rate_in_the_workflow_config_is_refused_before_any_job():
    from trainingcost.config import ConfigError
    from trainingcost.pipeline import load

    config = {"sweep": {"presets": ["gpt2-small"]},
              "plan": {"gpu": "h100-sxm", "gpus": 8, "tokens": 1e10, "efficiency": {"tokens_per_s": 1.0e30}}}
    with pytest.raises(ConfigError, match=r"tokens_per_s: 1e\+30 tokens/s per GPU would run bp's work at .* peak"):
        load(config)


# -- N18: a name not in a catalogue is one short line ----------------------------------------------------------
@pytest.mark.parametrize("flag, value, close", [
    ("--gpu", "h900", "h200"), ("--preset", "bert-large", "bert-base"), ("--framework", "jax@2023", "paxml@2024"),
    ("--cluster", "aws-p9", "aws-p5"), ("--framework", "x" * 500, "e.g."),
])
def test_a_name_not_in_a_catalogue_is_one_short_line(capsys, flag, value, close):
    given = dict(zip(PLAN[1::2], PLAN[2::2]))  # PLAN's flags and values
    given[flag] = value
    status, _, stderr = run_here(capsys, "plan", *[w for pair in given.items() for w in pair], "--gpus", "8")
    line = one_line(stderr, "plan", flag)
    assert status == 2 and close in line and "(allowed:" not in line


# -- N7, N8: a training run's memory, checked before any work ---------------------------------------------------
def test_train_on_the_command_line_is_checked_against_this_machines_memory(tmp_path, capsys):
    status, _, stderr = run_here(capsys, "train", "--preset", "llama-2-7b", "--steps", "4", "--device", "cpu",
                                 "--out-dir", str(tmp_path / "run"))
    line = one_line(stderr, "train", "--batch, --seq-len")
    assert status == 2 and "this model under bp needs" in line and "over 80% of the" in line
    assert not (tmp_path / "run").exists()
    from trainingcost.config import ConfigError, canonical_model
    from trainingcost.pipeline import check_command_train_memory

    cfg = canonical_model(dict(arch="decoder", layers=1, d_model=16, heads=2, d_ff=32, vocab=256, seq_len=16, batch=4))
    check_command_train_memory(cfg, "bp", "fp32", "sgd", 1, "cpu", memory=8 * 2**30)  # fits
    with pytest.raises(ConfigError, match="over 80% of the"):
        check_command_train_memory(cfg, "bp", "fp32", "sgd", 1, "cpu", memory=2**20)
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"x" * 4096)
    with pytest.raises(ConfigError, match="the corpus\\): over 80%"):  # the corpus counts (read whole, twice)
        check_command_train_memory(cfg, "bp", "fp32", "sgd", 1, "cpu", str(text), memory=int(625 * 2**20 * 1.0))


def test_a_corpus_larger_than_the_task_reads_is_refused_and_kept_as_bytes(tmp_path, capsys):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:  # sparse: no disk used
        f.truncate(2**30 + 1)
    status, _, stderr = run_here(capsys, "train", "--steps", "3", "--corpus", str(big))
    assert status == 2 and "more than the 1 GiB read" in one_line(stderr, "train", "--corpus")
    torch = pytest.importorskip("torch")
    from trainingcost.config import canonical_model
    from trainingcost.train.data import make_task

    text = tmp_path / "small.txt"
    text.write_bytes(bytes(range(1, 256)) * 64)
    cfg = canonical_model(dict(arch="decoder", layers=1, d_model=16, heads=2, d_ff=32, vocab=256, seq_len=16, batch=4))
    task = make_task("lm", cfg, str(text))
    assert task.splits["train"].dtype == torch.uint8  # one byte per byte, not an int64 copy (8 per byte)
    batch = task.batch(torch.Generator().manual_seed(0))
    assert batch.targets.dtype == torch.int64


# -- N19: a stale workflow pid ---------------------------------------------------------------------------------
def test_a_stale_workflow_pid_is_one_clear_line(tmp_path):
    import os
    import subprocess
    import sys

    gone = subprocess.Popen(["true"])
    gone.wait()
    done = subprocess.run([sys.executable, "-m", "trainingcost", "train", "--steps", "4", "--out-dir",
                           str(tmp_path / "run")], capture_output=True, text=True,
                          env={**os.environ, "TRAININGCOST_WORKFLOW_PID": str(gone.pid)})
    line = one_line(done.stderr, "train", "TRAININGCOST_WORKFLOW_PID")
    assert done.returncode == 2 and f"process {gone.pid} is not running" in line and not (tmp_path / "run").exists()


# -- N10: a run table damaged in the middle ---------------------------------------------------------------------
def test_a_run_table_damaged_in_the_middle_is_removed_for_a_retrain(tmp_path):
    pytest.importorskip("pyarrow")
    from trainingcost.config import ConfigError
    from trainingcost.pipeline import RUN_FILES, complete_parquet, gather_runs

    run = tmp_path / "results/runs/abc/bp/seed0"
    run.mkdir(parents=True)
    frame = pd.DataFrame({"status": ["ok"] * 200, "flops": np.arange(200), "layer": ["x"] * 200})
    for name in RUN_FILES:
        frame.to_parquet(run / name)
    data = bytearray((run / "measured.parquet").read_bytes())
    middle = len(data) // 3
    data[middle:middle + 64] = b"\xff" * 64  # the footer (and its magic) intact
    (run / "measured.parquet").write_bytes(bytes(data))
    assert complete_parquet(run / "measured.parquet")  # the cheap check at parse time does not see it
    with pytest.raises(ConfigError, match=r"measured.parquet: not a readable parquet table .*run the workflow again"):
        gather_runs([run / "measured.parquet"], [run / "steps.parquet"], tmp_path / "m.parquet", tmp_path / "s.parquet")
    assert not any((run / name).exists() for name in RUN_FILES)
    assert not (tmp_path / "m.parquet").exists()


# -- N25: the objective's number is on the screen ------------------------------------------------------------------
def test_the_energy_objective_shows_the_energy_it_picks_by(capsys):
    status, stdout, stderr = run_here(capsys, "plan", "--preset", "gpt2-small", "--tokens", "1e10", "--gpu", "a100-80gb",
                                      "--gpus", "8-32x2", "--rule", "bp", "--objective", "energy")
    assert status == 0, stderr
    header = next(line for line in stdout.splitlines() if line.startswith("rule "))
    assert "kWh" in header.split()
    rows = [line.split() for line in stdout.splitlines() if line.startswith("bp ")]
    column = header.split().index("kWh") - len(header.split())  # from the end: the layout holds spaces
    best = next(row for row in rows if row[1].endswith("*"))
    assert float(best[column]) == min(float(row[column]) for row in rows)
