"""Issue 18: bad input as a new user gives it. Each case runs the command as a user would and asserts the exit
status, a single line on stderr that names the field, no traceback, and no file left behind."""

import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from test_train import TINY, run_here

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def cli(*args, cwd=None, cpu_limit=None):
    """The command as a user runs it; ``cpu_limit`` bounds its CPU seconds (the work done, whatever the machine's
    load), so a test can say that a refusal came before the work without timing anything."""
    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit))

    return subprocess.run([sys.executable, "-m", "trainingcost", *args], capture_output=True, text=True, env=ENV, cwd=cwd,
                          preexec_fn=limit if cpu_limit else None)


def one_line(stderr: str, command: str, field: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith(f"trainingcost {command}: error: {field}"), lines[0]
    return lines[0]


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


# -- rows 1, 2, 14: the corpus --------------------------------------------------------------------

@pytest.mark.parametrize("make,expect", [
    (lambda d: (d / "empty.txt").write_text("") and None or d / "empty.txt", "is empty"),
    (lambda d: d, "is a directory"),
    (lambda d: d / "missing.txt", "no such file"),
])
def test_a_bad_corpus_is_one_line_before_training(tmp_path, capsys, make, expect):
    corpus = make(tmp_path)
    out = tmp_path / "steps.parquet"
    status, stdout, stderr = run_here(capsys, "train", "--task", "lm", "--corpus", str(corpus), "--steps", "5", "--out", str(out))
    assert status == 2 and expect in one_line(stderr, "train", "--corpus")
    assert not out.exists()


def test_a_batch_larger_than_the_corpus_has_windows_is_named(tmp_path, capsys):
    corpus = tmp_path / "small.txt"
    corpus.write_text("a small corpus of a few hundred bytes. " * 8)
    status, stdout, stderr = run_here(capsys, "train", "--task", "lm", "--corpus", str(corpus), "--batch", "5000", "--steps", "5",
                                      "--seq-len", "16", "--d-model", "16", "--heads", "2", "--layers", "1")
    assert status == 2 and "5000 sequences per step need 5000 distinct windows" in one_line(stderr, "train", "--batch")


# -- row 3: outputs that cannot be written are refused before the run ---------------------------------

@pytest.mark.parametrize("flag,target,expect", [
    ("--out", "/proc/run.parquet", "cannot create files in /proc"),
    ("--out", "DIR", "is a directory; give a file name"),
    ("--out-dir", "FILE", "is a file, not a directory"),
    ("--out", "FILE/steps.parquet", "is a file, so"),
])
def test_an_output_that_cannot_be_written_is_refused_before_training(tmp_path, flag, target, expect):
    (tmp_path / "DIR").mkdir()
    (tmp_path / "FILE").write_text("x")
    target = target if target.startswith("/") else str(tmp_path / target)
    result = cli("train", "--steps", "300", flag, target, cpu_limit=60)  # 300 steps would pass the limit: refused first
    assert result.returncode == 2 and expect in one_line(result.stderr, "train", flag)
    assert files_under(tmp_path) == [tmp_path / "FILE"]


# -- rows 5 and 13: sizes -----------------------------------------------------------------------------

def test_a_huge_model_is_estimated_as_phase_totals_and_its_per_layer_table_is_refused(capsys):
    flags = ["--arch", "decoder", "--layers", "100000", "--d-model", "64", "--heads", "4", "--d-ff", "256", "--vocab", "256",
             "--seq-len", "64", "--rule", "all"]
    status, stdout, stderr = run_here(capsys, "estimate", *flags)
    assert status == 0 and "FLOPs and tensor memory of one training step" in stdout
    assert "not replayed (over 1,024 blocks)" in stdout  # the executed memory model's tape is O(depth)
    status, stdout, stderr = run_here(capsys, "estimate", *flags, "--cost-model", "all")
    assert status == 0 and "FLOPs per training step by phase" in stdout
    assert "not replayed (over 1,024 blocks)" in stdout
    status, stdout, stderr = run_here(capsys, "estimate", *flags, "--per-layer")
    assert status == 2 and "would have 126,001,470 rows, more than 1,000,000" in one_line(stderr, "estimate", "--per-layer")
    status, stdout, stderr = run_here(capsys, "estimate", *flags, "--format", "csv")
    assert status == 2 and stdout == "" and "rows" in one_line(stderr, "estimate", "--format csv")


@pytest.mark.parametrize("flags,fields", [
    (["--d-model", str(10**12)], "--d-model: 1000000000000 makes"),
    (["--batch", str(10**14)], "--batch: 100000000000000 makes"),
    (["--layers", str(10**9), "--d-model", "4096"], "--layers, --d-model: 1000000000 and 4096 make"),
])
def test_an_overflow_names_the_fields_that_cause_it(capsys, flags, fields):
    base = {"--arch": "decoder", "--layers": "2", "--d-model": "64", "--heads": "4", "--d-ff": "256", "--vocab": "256", "--seq-len": "64"}
    base.update(zip(flags[::2], flags[1::2]))
    status, stdout, stderr = run_here(capsys, "estimate", *[x for pair in base.items() for x in pair])
    line = one_line(stderr, "estimate", fields)
    assert status == 2 and "beyond exact 64-bit integers" in line


# -- row 7 on the command line: non-finite numbers ----------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_non_finite_learning_rate_is_refused(capsys, value):
    with pytest.raises(SystemExit) as exit_:
        from trainingcost.cli import main

        main(["train", f"--lr={value}"])
    assert exit_.value.code == 2
    assert f"argument --lr: expected a finite number, got '{value}'" in capsys.readouterr().err


# -- row 8: a config file that is missing, a directory, or not UTF-8 ------------------------------------

def test_check_names_an_unreadable_config_file(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_bytes(b"sweep: {presets: [\xff\xfe]}\n")
    for path, expect in [(tmp_path / "nope.yaml", "no such file"), (tmp_path, "is a directory"),
                         (tmp_path / "bad.yaml", "not UTF-8 text")]:
        status, stdout, stderr = run_here(capsys, "check", "--config", str(path))
        assert status == 2 and expect in one_line(stderr, "check", "config file")


def test_check_accepts_the_default_config(capsys):
    status, stdout, stderr = run_here(capsys, "check", "--config", str(Path(__file__).parents[1] / "config/config.yaml"))
    assert status == 0 and "valid;" in stdout and "configurations" in stdout


# -- row 12: divergence says where --------------------------------------------------------------------

def test_a_diverged_run_says_at_which_step_and_what(tmp_path, capsys):
    out = tmp_path / "steps.parquet"
    status, stdout, stderr = run_here(capsys, "train", *TINY, "--steps", "30", "--lr", "1e9", "--out", str(out))
    assert status == 0 and "status diverged" in stdout
    assert "the training loss is" in stderr and "at step" in stderr and "lr 1000000000.0" in stderr
    steps = pd.read_parquet(out)
    assert set(steps["status"]) == {"diverged"}


# -- row 11: interrupts --------------------------------------------------------------------------------

def default_sigint():
    """In the child: Ctrl-C's default disposition. A suite started in the background (``cmd &``) inherits SIGINT
    ignored, and a program rightly keeps an ignored SIGINT ignored: these tests are about a terminal's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def reached(pid: int, stage: str, timeout: float = 300.0) -> None:
    """Wait, however busy the machine, until process ``pid`` has reached ``stage``: "importing" (numpy's extension is
    loaded: the command line's own imports are under way) or "training" (torch is loaded, and the process has spent
    two more CPU-seconds since, in the steps or just before them). A signal sent at either must give the same one
    line (issue 66: the program handles its signals from its first line)."""
    library = {"importing": "_multiarray_umath", "training": "libtorch_cpu"}[stage]
    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    end = time.monotonic() + timeout
    while library not in open(f"/proc/{pid}/maps").read():
        assert time.monotonic() < end, f"process {pid} never loaded {library}"
        time.sleep(0.02)
    if stage == "training":
        start = cpu()
        while cpu() - start < 2.0:
            assert time.monotonic() < end, f"process {pid} did not run"
            time.sleep(0.1)


def python_child(pid: int, timeout: float = 60.0) -> int:
    import psutil

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = [p.pid for p in psutil.Process(pid).children(recursive=True) if "python" in p.name()]
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError("no python process started")


def test_a_shell_sees_130_and_stops(tmp_path):
    """`trainingcost train ... || fallback`: the fallback must not run after Ctrl-C (the workflow's train rule)."""
    script = (f"{sys.executable} -m trainingcost train --steps 100000 --threads 1 || touch {tmp_path}/fallback; "
              f"echo after > {tmp_path}/after")
    process = subprocess.Popen(["bash", "-c", script], stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True,
                               preexec_fn=default_sigint)
    reached(python_child(process.pid), "training")
    os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
    _, stderr = process.communicate(timeout=60)
    assert stderr == "trainingcost train: interrupted; nothing written\n"
    assert process.returncode in (-signal.SIGINT, 130) and not list(tmp_path.iterdir())


def test_an_interrupted_write_removes_what_the_command_had_written(tmp_path, capsys, monkeypatch):
    """Ctrl-C between measured.parquet and steps.parquet: the first file and the new directory go again."""
    import trainingcost.io as io

    original, calls = io.write_parquet, []

    def write(frame, path, metadata=None):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(frame, path, metadata)

    monkeypatch.setattr(io, "write_parquet", write)
    out = tmp_path / "deep" / "run"
    status, stdout, stderr = run_here(capsys, "train", *TINY, "--steps", "5", "--out-dir", str(out))
    assert status == 130 and stderr == "trainingcost train: interrupted; nothing written\n"
    assert len(calls) == 2 and not (tmp_path / "deep").exists()


def test_an_interrupted_rerun_leaves_the_previous_run_whole(tmp_path, capsys, monkeypatch):
    """A second run into the same folder, interrupted after its first file: the first run's files, byte for byte,
    and nothing else (the rewritten file's old content comes back; no hidden copies stay)."""
    import trainingcost.io as io

    out = tmp_path / "run"
    status, _, _ = run_here(capsys, "train", *TINY, "--steps", "5", "--out-dir", str(out))
    assert status == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    original, calls = io.write_parquet, []

    def write(frame, path, metadata=None):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(frame, path, metadata)

    monkeypatch.setattr(io, "write_parquet", write)
    status, _, stderr = run_here(capsys, "train", *TINY, "--steps", "6", "--out-dir", str(out))
    assert status == 130 and stderr == "trainingcost train: interrupted; nothing written\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # and a rerun that completes replaces them, leaving no copy of the old ones
    monkeypatch.setattr(io, "write_parquet", original)
    assert run_here(capsys, "train", *TINY, "--steps", "6", "--out-dir", str(out))[0] == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(before)


@pytest.mark.parametrize("stage", ["importing", "training"])
@pytest.mark.parametrize("sig,code,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_during_training_exits_with_one_line_and_no_file(tmp_path, sig, code, word, stage):
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "trainingcost", "train", "--steps", "100000", "--out-dir", str(out),
                                "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=default_sigint)
    reached(process.pid, stage)
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=60)
    # After cleaning up it dies of the same signal, as a program must for its shell to stop too: a shell
    # reports 128 + N (130, 143); Popen reports -N.
    assert process.returncode == -sig and 128 + sig == code, stderr
    assert stderr == f"trainingcost train: {word}; nothing written\n"
    assert not out.exists() and not list(tmp_path.iterdir())


def test_a_signal_wrapped_in_another_exception_still_ends_the_run(monkeypatch):
    """A signal that lands while Python runs a class's ``__set_name__`` (torch creating a dataclass lazily, mid-step)
    comes back wrapped, ``RuntimeError: Error calling __set_name__``, its cause the interrupt (Python 3.11). The run's
    handler records ordinary errors as the run's status; it must raise the interrupt instead (CI, 2026-12-07: a
    SIGTERM recorded as "status error" and exit 0)."""
    from trainingcost.config.errors import reraise_interrupt
    from trainingcost.config.model import canonical_model
    from trainingcost.config.training import TrainSpec
    from trainingcost.train import run as train_run

    class Interrupting:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    with pytest.raises(BaseException) as caught:
        type("Lazy", (), {"field": Interrupting()})
    with pytest.raises(KeyboardInterrupt):  # wrapped (3.11) or not (3.12 adds a note instead): raised as itself
        reraise_interrupt(caught.value)
    reraise_interrupt(RuntimeError("an ordinary error"))  # nothing to raise

    def wrapped(spec, device):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from exc

    monkeypatch.setattr(train_run, "build_model", wrapped)
    cfg = canonical_model(dict(arch="decoder", layers=1, d_model=16, heads=2, d_ff=32, seq_len=8, batch=2, vocab=256), "")
    with pytest.raises(KeyboardInterrupt):
        train_run.run_steps(TrainSpec(cfg=cfg, task="lm", rule="bp", steps=1, seed=0))

    def failing(spec, device):
        raise RuntimeError("a real bug")

    monkeypatch.setattr(train_run, "build_model", failing)
    assert train_run.run_steps(TrainSpec(cfg=cfg, task="lm", rule="bp", steps=1, seed=0)).status == "error"


# -- row 4: the CPU running out of memory, for real ----------------------------------------------------

def test_a_model_too_big_for_memory_ends_with_status_oom_and_a_row(tmp_path):
    """d_model 12288 needs about 10 GB, which the machine has (the check before the run passes: 80% of its memory),
    but other work has taken it: an address-space limit of 6 GiB makes the CPU allocator refuse it here (without one,
    Linux may grant it lazily and kill the process later, which the workflow records as `failed`)."""
    import resource

    from trainingcost.pipeline import machine_memory

    if (machine_memory() or 0) * 0.8 < 11e9:
        pytest.skip("a machine with less than 14 GB refuses the run before it starts (tested in test_hostile_round3)")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    out = tmp_path / "steps.parquet"
    result = subprocess.run([sys.executable, "-m", "trainingcost", "train", "--threads", "1", "--d-model", "12288",
                             "--heads", "4", "--d-ff", "256", "--steps", "3", "--out", str(out)],
                            capture_output=True, text=True, env=ENV, preexec_fn=limit)
    assert result.returncode == 0 and "status oom" in result.stdout, result.stderr[-500:]
    assert "DefaultCPUAllocator: can't allocate memory" in result.stderr and "Traceback" not in result.stderr
    steps = pd.read_parquet(out)
    assert list(steps["status"]) == ["oom"] and list(steps["step"]) == [0]


# -- a model's own config.json: the flags and the file agree, and each refusal names the file -------------------

TINY_BERT = {"model_type": "bert", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
             "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 64, "type_vocab_size": 2,
             "hidden_act": "gelu"}
TINY_MISTRAL = {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 8192,
                "hidden_act": "silu"}


def _config_json(tmp_path: Path, data: dict, name: str = "config.json") -> Path:
    import json

    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_classifier_on_a_bert_config_json_needs_no_tie_flag(tmp_path, capsys):
    """BERT's file ties its masked-LM head; --classes replaces that head, so the file's tie gives way. Only a
    --tie-embeddings the user gave is refused, and the error names it."""
    path = _config_json(tmp_path, TINY_BERT)
    status, stdout, stderr = run_here(capsys, "estimate", "--hf-config", str(path), "--classes", "3", "--rule", "bp",
                                      "--cost-model", "executed")
    assert status == 0 and "3 classes" in stdout, stderr
    status, stdout, stderr = run_here(capsys, "estimate", "--preset", "bert-base", "--classes", "3", "--rule", "bp",
                                      "--cost-model", "executed")
    assert status == 0 and "3 classes" in stdout, stderr
    status, stdout, stderr = run_here(capsys, "estimate", "--hf-config", str(path), "--classes", "3", "--tie-embeddings")
    assert status == 2 and "no vocabulary to share" in one_line(stderr, "estimate", "--tie-embeddings")
    from trainingcost.analytic import vocabulary
    from trainingcost.config import sweep_frame, validate_config

    config = validate_config({"sweep": {"models": [{"hf_config": str(path), "classes": 3, "name": "b"}]}}, vocabulary())
    assert sweep_frame(config)["classes"].tolist() == [3]
    # train: the classify task decides the head the same way
    status, stdout, stderr = run_here(capsys, "train", "--hf-config", str(path), "--task", "classify", "--seq-len", "8",
                                      "--batch", "2", "--steps", "1", "--eval-batches", "1", "--threads", "1")
    assert status == 0 and "3 classes" in stdout, stderr
    status, stdout, stderr = run_here(capsys, "train", "--hf-config", str(path), "--task", "classify", "--tie-embeddings")
    assert status == 2 and "task classify trains a classification head" in one_line(stderr, "train", "--tie-embeddings")


def test_mistral_without_a_sliding_window_key_gets_transformers_default(tmp_path, capsys):
    """transformers reads a Mistral config.json without ``sliding_window`` with MistralConfig's 4096: the file with
    the key left out and the file with 4096 written out are the same model, a 4096-token window at 8192 tokens (one
    config_id) and no window at 4096 (the window masks nothing); ``null`` is no window."""
    import transformers

    from trainingcost.config import canonical_model
    from trainingcost.config.hf import read_hf_config

    assert transformers.MistralConfig().sliding_window == 4096
    written = _config_json(tmp_path, {**TINY_MISTRAL, "sliding_window": 4096}, "written.json")
    absent = _config_json(tmp_path, TINY_MISTRAL, "absent.json")
    none = _config_json(tmp_path, {**TINY_MISTRAL, "sliding_window": None}, "none.json")
    for seq_len, windows in ((8192, (4096, 4096, 0)), (4096, (0, 0, 0))):
        cfgs = [canonical_model(dict(read_hf_config(path), seq_len=seq_len)) for path in (written, absent, none)]
        assert tuple(c.sliding_window for c in cfgs) == windows
        assert cfgs[0].config_id == cfgs[1].config_id and (cfgs[1].config_id == cfgs[2].config_id) == (seq_len == 4096)
    for path in (written, absent):
        status, stdout, stderr = run_here(capsys, "estimate", "--hf-config", str(path), "--rule", "bp",
                                          "--cost-model", "executed")
        assert status == 0 and "8192 tokens" in stdout, stderr


def test_a_sweep_entrys_window_error_names_its_file(tmp_path):
    """A window on some layers only (Qwen2's max_window_layers) is refused in one line naming the file."""
    from trainingcost.analytic import vocabulary
    from trainingcost.config import ConfigError, validate_config

    qwen = {**TINY_MISTRAL, "model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 1}
    path = _config_json(tmp_path, qwen)
    with pytest.raises(ConfigError) as err:
        validate_config({"sweep": {"models": [{"hf_config": str(path)}]}}, vocabulary())
    assert str(err.value).startswith(f"sweep.models[0].hf_config {path}") and "\n" not in str(err.value)
    assert "max_window_layers: a sliding window on 1 of 2 layers is not supported" in str(err.value)


def test_the_hf_config_help_lists_every_model_type_read():
    from trainingcost.config.hf import SUPPORTED

    result = cli("estimate", "--help")
    text = " ".join(result.stdout.split())
    assert result.returncode == 0 and f"({', '.join(SUPPORTED)})" in text and "t5" in SUPPORTED


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp, "is a directory"),
    (lambda tmp: Path("/dev/zero"), "/dev/zero is a device"),
    (lambda tmp: (os.mkfifo(tmp / "fifo"), tmp / "fifo")[1], "is a FIFO"),
    (lambda tmp: (os.symlink(tmp / "loop", tmp / "loop"), tmp / "loop")[1], "cannot be opened"),
    (lambda tmp: tmp / "absent.json", "no such file"),
])
@pytest.mark.parametrize("flag", ["--hf-config", "--calibration", "--corpus"])
def test_a_file_argument_that_is_not_a_regular_file_is_named_for_what_it_is(tmp_path, capsys, make, message, flag):
    """Issue 40, defects 4 and 18: /dev/zero as a corpus read until memory ran out, a FIFO hung forever, and a
    directory, device, FIFO or symlink loop was reported as "no such file"."""
    from trainingcost import cli

    path = make(tmp_path)
    base = {"--hf-config": ["estimate", "--hf-config", str(path)],
            "--calibration": ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb",
                              "--calibration", str(path)],
            "--corpus": ["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq-len", "16",
                         "--batch", "4", "--threads", "1", "--rule", "bp", "--steps", "2", "--corpus", str(path)]}[flag]
    if flag == "--hf-config" and message == "is a directory":
        message = "no such file"  # a folder names the config.json inside it
    assert cli.main(base) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and flag in err, err


def test_messages_name_the_flag_given(capsys):
    """Issue 40, defect 18: --global-batch-tokens was reported as --global-batch; --mirror-steps -1 had no command."""
    from trainingcost import cli

    base = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb"]
    assert cli.main([*base, "--global-batch-tokens", "1", "--gpus", "8"]) == 2
    assert "--global-batch-tokens: 1 tokens are less than one sequence" in capsys.readouterr().err
    assert cli.main([*base, "--mirror-steps", "-1"]) == 2
    assert capsys.readouterr().err.startswith("trainingcost plan: error: argument --mirror-steps")


def test_a_learning_rate_that_overflows_is_refused_before_the_run(capsys):
    """Issue 40, defect 21: --lr 1e300 started a run that ended in error with exit 0."""
    from trainingcost import cli

    assert cli.main(["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq-len", "16",
                     "--batch", "4", "--threads", "1", "--rule", "bp", "--steps", "2", "--lr", "1e300"]) == 2
    assert "--lr: 1e+300 is not a float32 number" in capsys.readouterr().err


def test_a_closed_standard_output_is_an_error_not_silence():
    """Issue 40, defect 23: with stdout closed (>&-) every command exited 0 and printed nothing."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "trainingcost", "hardware"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, close_fds=True,
                          preexec_fn=lambda: os.close(1))
    assert done.returncode == 2 and "standard output is closed" in done.stderr


@pytest.mark.parametrize("inside", ["measured.parquet", ""])
def test_train_out_inside_its_out_dir_is_refused(tmp_path, capsys, inside):
    """Issue 40, defect 1: --out inside --out-dir silently replaced the run's measured.parquet; equal to it, the run
    trained and then died with IsADirectoryError."""
    from trainingcost import cli

    out_dir = tmp_path / "od"
    out = out_dir / inside if inside else out_dir
    status = cli.main(["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq-len", "16",
                       "--batch", "4", "--threads", "1", "--rule", "bp", "--steps", "6", "--out-dir", str(out_dir),
                       "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and "or inside it" in err and err.count("\n") == 1
    assert not (out_dir / "measured.parquet").exists()


@pytest.mark.parametrize("argv, content, message", [
    (["calibrate", "--trace", "{path}", "--out", "{tmp}/cal.json"], b"x", "--trace: {path} is not a readable parquet"),
    (["calibrate", "--trace", "{path}", "--out", "{tmp}/cal.json"], "wrong columns", "lacks the columns layer, phase, timed_phase and 8 more"),
    (["analytic", "--config", "config/config.yaml", "--configs", "{path}", "--out", "{tmp}/a.parquet", "--memory-out",
      "{tmp}/m.parquet"], b"PAR1 truncated", "--configs: {path} is not a readable parquet table"),
    (["curves", "search", "--study", "{path}", "--rule", "bp", "--out", "{tmp}/s.parquet"], b'{"rules": [',
     "scaling study: invalid JSON at line 1"),
    (["curves", "search", "--study", "{path}", "--rule", "bp", "--out", "{tmp}/s.parquet"], b'{"rules": ["bp"]}',
     "scaling study: missing fields"),
])
def test_a_truncated_or_foreign_input_table_is_one_line(tmp_path, capsys, monkeypatch, argv, content, message):
    """Issue 40, defect 11: tracebacks from calibrate --trace (truncated, wrong columns), analytic --configs (not a
    parquet) and curves --study (partial or malformed JSON)."""
    import pandas as pd

    from trainingcost import cli

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    path = tmp_path / "input"
    if content == "wrong columns":
        pd.DataFrame({"a": [1]}).to_parquet(path)
    else:
        path.write_bytes(content)
    fill = lambda text: text.replace("{path}", str(path)).replace("{tmp}", str(tmp_path))  # noqa: E731
    assert cli.main([fill(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fill(message) in err and "Traceback" not in err


def test_more_ranks_than_the_node_can_hold_fail_the_check(tmp_path, capsys):
    """Issue 40, defect 24: train.parallel.nproc: 500 passed `check` on a 2-core machine."""
    import yaml

    from trainingcost import cli

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    config["train"].setdefault("parallel", {})["nproc"] = 500
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli.main(["check", "--config", str(path)]) == 2
    assert "train.parallel.nproc: 500 ranks on this machine's" in capsys.readouterr().err


def test_a_sweep_whose_analytic_table_would_not_fit_memory_is_refused(tmp_path, capsys):
    """Issue 40, defect 9: a 50,000-configuration sweep passed `check`; its analytic job needed about 150 GB. The
    rows are counted before any job and priced per row; here against a machine of 1 GB (the check's own argument)."""
    from trainingcost.config import ConfigError
    from trainingcost.pipeline import check_analytic_memory, load_file, sweep_frame

    config = load_file(Path(__file__).resolve().parents[1] / "config" / "config.yaml")
    frame = sweep_frame(config)
    check_analytic_memory(frame, config["analytic"], memory=64 * 10**9)  # fits a laptop
    with pytest.raises(ConfigError, match=r"^sweep: 48 configurations make about [\d,]+ per-layer rows"):
        check_analytic_memory(frame, config["analytic"], memory=10**7)


def test_a_full_disk_leaves_the_run_folder_whole_or_absent_and_one_line(tmp_path):
    """Issue 40, defect 3: a full disk (/dev/full here, and a run folder whose files fail to write) gave an OSError
    traceback and left a run folder with two of its three tables. Now one line, and what this command wrote is
    removed."""
    import subprocess
    import sys

    done = subprocess.run(f"{sys.executable} -m trainingcost hardware > /dev/full", shell=True, capture_output=True,
                          text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("No space left on device writing its output; nothing written")


def test_a_run_folder_is_removed_when_a_write_fails(tmp_path, monkeypatch, capsys):
    """The same fault inside a run: the third table's write fails (ENOSPC); the first two are removed too."""
    import errno

    from trainingcost import cli, io

    real = io.atomic_write
    calls = []

    def failing(path, write):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, write)

    monkeypatch.setattr(io, "atomic_write", failing)
    out_dir = tmp_path / "run"
    status = cli.main(["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq-len", "16",
                       "--batch", "4", "--threads", "1", "--rule", "bp", "--steps", "6", "--out-dir", str(out_dir)])
    err = capsys.readouterr().err
    assert status == 1 and "No space left on device" in err and len(calls) == 3
    assert not out_dir.exists()


def test_a_measured_run_prints_no_profiler_debug_lines(tmp_path):
    """Issue 40, defect 22: every measured run printed kineto's "USDT: ... profiler_start/stop" lines."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "trainingcost", "train", "--layers", "1", "--d-model", "16", "--heads",
                           "2", "--d-ff", "32", "--seq-len", "16", "--batch", "4", "--threads", "1", "--rule", "bp",
                           "--steps", "6", "--out-dir", str(tmp_path / "run")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "USDT" not in done.stderr and "profiler_start" not in done.stderr + done.stdout


# -- issue 40, defect 10: a YAML alias bomb is refused at once, in one short line -------------------------

def _alias_bomb(levels: int, under: str) -> str:
    """``levels`` levels of ten aliases each (10^levels values), the last alias placed under ``under``."""
    lines = ["sweep:", "  presets: [gpt2-small]", "b0: &b0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{under}: *b{levels - 1}\n"


@pytest.mark.parametrize("levels, under", [(9, "extra"), (6, "train:\n  rules"), (4, "train:\n  rules")])
def test_a_yaml_alias_bomb_is_one_short_line_at_once(tmp_path, capsys, levels, under):
    (tmp_path / "bomb.yaml").write_text(_alias_bomb(levels, under))
    start = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    status, stdout, stderr = run_here(capsys, "check", "--config", str(tmp_path / "bomb.yaml"))
    # CPU seconds, not wall time: expanding the bomb took minutes of CPU before
    assert status == 2 and resource.getrusage(resource.RUSAGE_SELF).ru_utime - start < 30
    line = one_line(stderr, "check", "config file" if levels > 5 else "train.rules")
    assert len(line) <= 250, line


def test_the_workflow_refuses_an_alias_bomb_before_walking_it():
    from trainingcost.config import ConfigError
    from trainingcost.pipeline import load

    shared = list(range(10))
    for _ in range(8):  # what Snakemake's own YAML loader builds from a bomb: one list, aliased 10^8 times
        shared = [shared] * 10
    with pytest.raises(ConfigError, match="more than 1,000,000 values"):
        load({"sweep": {"presets": ["gpt2-small"]}, "extra": shared})


# -- issue 40: a trainer never outlives its workflow (orphans after a SIGKILL of Snakemake; defect 13) ---

def _wait_gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child: reap it
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.2)
    return False


def _trainer_of(shell_pid: int, seconds: float = 30) -> int:
    """The `trainingcost train` process that the shell ``shell_pid`` started."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        children = Path(f"/proc/{shell_pid}/task/{shell_pid}/children")
        pids = children.read_text().split() if children.exists() else []
        if pids:
            return int(pids[0])
        time.sleep(0.1)
    raise AssertionError("the shell started no trainer")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's prctl")
def test_a_trainer_dies_with_its_workflow_and_with_its_job_shell(tmp_path):
    """The workflow's train rule: `bash -c "trainingcost train ... || ... --record-failure $?"` under Snakemake.
    A stand-in process plays Snakemake (TRAININGCOST_WORKFLOW_PID). Killed with SIGKILL, the trainer ends within
    seconds, writes nothing, and the fallback writes no `failed` row either; with the job's shell killed instead,
    the trainer dies with it (src/trainingcost/lifeline.py)."""
    train = [sys.executable, "-m", "trainingcost", "train", "--steps", "100000", "--threads", "1"]
    for victim in ("workflow", "shell"):
        out = tmp_path / victim / "run"
        workflow = subprocess.Popen(["sleep", "600"])
        command = f"{shlex.join(train + ['--out-dir', str(out)])} || {shlex.join(train + ['--out-dir', str(out)])} --record-failure $?"
        shell = subprocess.Popen(["bash", "-c", command], env={**ENV, "TRAININGCOST_WORKFLOW_PID": str(workflow.pid)},
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        trainer = _trainer_of(shell.pid)
        reached(trainer, "training")  # past its tie to the workflow (lifeline.hold), into the steps, however busy
        (workflow if victim == "workflow" else shell).kill()
        if victim == "workflow":
            workflow.wait()  # reaped, as Snakemake's own parent (a shell) reaps it; a zombie still answers kill(pid, 0)
        assert _wait_gone(trainer, 30), f"the trainer outlived the killed {victim}"
        if victim == "workflow":
            stderr = shell.communicate(timeout=60)[1]
            assert "trainingcost train: terminated; nothing written" in stderr, stderr
            # the fallback meets the dead workflow: one line, no traceback in the run's log (issue 66, N22)
            assert "Traceback" not in stderr and "TRAININGCOST_WORKFLOW_PID: process" in stderr, stderr
        workflow.kill()
        workflow.wait()
        shell.wait(timeout=60)
        assert not out.exists(), f"killed {victim}: {list(out.rglob('*'))}"


def test_a_training_run_that_would_not_fit_this_machine_is_refused_before_any_job(tmp_path, capsys):
    """Issue 40, resource limits up front: a CPU run's memory (the executed memory model's peak, per rank, plus the
    process) is checked against the machine before launch, in one line naming the entry and the rule."""
    import yaml

    from trainingcost.config import ConfigError
    from trainingcost.pipeline import TRAIN_PROCESS_BYTES, check_train_memory, load_file, train_jobs

    config = load_file(Path(__file__).resolve().parents[1] / "config" / "config.yaml")
    jobs = train_jobs(config)
    check_train_memory(jobs, {**config["train"], "device": "cpu"}, memory=64 * 10**9)  # the default sweep fits
    with pytest.raises(ConfigError, match=r"^train\.select: '[^']+' under \w+ needs [\d.]+ GB \(batch \d+, seq_len \d+, layers \d+, d_model \d+"):
        check_train_memory(jobs, {**config["train"], "device": "cpu"}, memory=TRAIN_PROCESS_BYTES)
    # a model whose activations alone need terabytes, selected for training: `check` refuses it in one line
    big = {"sweep": {"models": [{"name": "big", "arch": "decoder", "layers": 4, "d_model": 4096, "heads": 32,
                                 "d_ff": 16384, "vocab": 256, "seq_len": 4096, "batch": 512}]},
           "train": {"select": ["big"], "rules": ["bp"], "device": "cpu"}}
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(big))
    status, stdout, stderr = run_here(capsys, "check", "--config", str(tmp_path / "big.yaml"))
    line = one_line(stderr, "check", "train.select: 'big' under bp needs 2342 GB (batch 512, seq_len 4096, layers 4")
    assert status == 2 and "over 80% of the" in line and len(line) <= 200, line


def test_a_training_run_that_cannot_finish_in_its_runtime_is_refused(tmp_path, capsys):
    """Issue 40, resource limits up front: a run's time has a lower bound (its executed FLOPs per step x steps at a
    ceiling no device reaches); beyond train.resources.runtime the run cannot finish anywhere: one line."""
    import yaml

    from trainingcost.pipeline import CPU_CORE_CEILING_FLOPS

    entry = {"name": "mid", "arch": "decoder", "layers": 2, "d_model": 256, "heads": 4, "d_ff": 1024, "vocab": 256,
             "seq_len": 256, "batch": 8}
    for steps, refused in ((10**8, True), (10**4, False)):
        config = {"sweep": {"models": [entry]}, "train": {"select": ["mid"], "rules": ["bp"], "device": "cpu",
                                                         "steps": steps}}
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
        status, stdout, stderr = run_here(capsys, "check", "--config", str(tmp_path / "c.yaml"))
        if not refused:
            assert status == 0, stderr
            continue
        line = one_line(stderr, "check", "train.steps: 100,000,000 steps of 'mid' under bp (seq_len 256, batch 8, layers "
                                         "2, d_model 256) take ")
        # executed BP FLOPs of one step, by hand: 2 layers x (attention 4 d^2 + ffn 2 d d_ff) x 3 (forward + backward)
        # x 2 FLOPs x tokens, plus attention scores and the head; the bound is at least the dense part's
        dense = 3 * 2 * 8 * 256 * 2 * (4 * 256 * 256 + 2 * 256 * 1024)
        minutes = int(line.split(") take ")[1].split("+ min")[0].replace(",", ""))
        assert minutes >= 10**8 * dense / ((os.cpu_count() or 1) * CPU_CORE_CEILING_FLOPS) / 60 - 1
        assert len(line) <= 200 and status == 2, line
