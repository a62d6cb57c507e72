"""Issue 40's properties over every command's inputs (Hypothesis), instead of case by case.

Every file argument (parquet, JSON, YAML, text corpus) is fuzzed: empty, truncated, wrong columns or keys, wrong
value types, another top-level type, binary junk, a directory, a device, a FIFO, a symlink loop. Every number flag
(read from the parser) and every number of a config is fuzzed at 0, -0, negative, NaN, inf, huge, tiny, and as a
YAML-style string. On each example: exit 0 with a complete output holding no NaN or inf, or a non-zero exit with one
stderr line of at most 200 characters, ``trainingcost <command>: error: ...``, naming the input (the flag, the
field or the file). Never a traceback (an exception out of ``main``), a hang past 10 s, a changed input file, or an
output file left behind by a failure. The CI profile keeps this file to about a minute; `make bench` runs a longer
profile (conftest.py).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import re
import signal
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trainingcost.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
N = settings.default.max_examples  # 40 in the ci profile; the others scale with it

# -- running one command ------------------------------------------------------------------------------------


class Hang(BaseException):
    """Raised by SIGALRM: not an Exception, so no handler in main() can swallow it."""


def _alarm(signum, frame):
    raise Hang()


def run_cli(argv: list[str], seconds: int = 10) -> tuple[int, str, str]:
    """main(argv) in process, with a hang past ``seconds`` failing the test; any exception out of main (a
    traceback) fails it too."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exc:  # argparse
                status = exc.code
    except Hang:
        pytest.fail(f"hang past {seconds} s: {argv}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return status, out.getvalue(), err.getvalue()


NOT_A_NUMBER = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.IGNORECASE)


def check_outcome(argv, status, stdout, stderr, names, outputs=()):
    """The property: 0 with output and no NaN/inf printed, or one line naming one of ``names``."""
    command = argv[0]  # "trainingcost curves: error: ..." for `curves search` too
    if status == 0:
        assert stdout.strip(), (argv, "exit 0 and nothing printed")
        # a training run that diverged says so, with its NaN loss: a result, not a number gone wrong
        printed = re.sub(r"status diverged;.*", "", stdout) if argv[0] in ("train", "curves") else stdout
        assert not NOT_A_NUMBER.search(printed), (argv, NOT_A_NUMBER.search(printed).group(0), stdout[-600:])
        for path in outputs:
            assert Path(path).is_file() and Path(path).stat().st_size > 0, (argv, f"{path} not written")
        return
    lines = stderr.splitlines()
    assert status in (1, 2) and len(lines) == 1 and lines[0].strip(), (argv, status, stderr[-2000:])
    line = lines[0]
    assert len(line) <= 200, (argv, len(line), line)
    assert line.startswith(f"trainingcost {command}: error: "), (argv, line)
    assert "Traceback" not in stderr
    assert any(name in line for name in names), (argv, names, line)
    for path in outputs:
        assert not Path(path).exists(), (argv, f"{path} left behind by a failure: {line}")


# -- the valid base files, made with the package ------------------------------------------------------------

TRAIN = ["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq-len", "16", "--batch", "4",
         "--threads", "1", "--rule", "bp"]
TINY_MISTRAL = {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 8192,
                "hidden_act": "silu"}
_SIG = json.dumps([[{"t": [[512, 768], [768, 1], "bfloat16"]}, {"t": [[768, 768], [1, 768], "bfloat16"]}], {"kw": {}}])
CALIBRATION = {"launch_overhead_s": 1e-6, "view_overhead_s": 1e-7, "copy_ladder": [{"bytes": 1, "seconds": 1e-6}],
               "provenance": {"device_name": "NVIDIA A100-SXM4-80GB"},
               "kernels": [{"op": "aten.mm.default", "signature": _SIG, "cls": "matmul", "flops": 2 * 512 * 768 * 768,
                            "bytes_read": 0, "bytes_written": 0, "seconds": 1e-6 + 2 * 512 * 768 * 768 / 1e14}]}
DEVICE_MODEL = {"kind": "device_model", "device_name": "NVIDIA A100-SXM4-80GB", "dtype": "bf16",
                "gemm_flops": 0.5 * 312e12, "bandwidth": [[2 * 10**6, 0.5e12], [2 * 10**9, 1.8e12]],
                "flash_forward_flops": 0.6 * 312e12, "flash_backward_flops": 0.45 * 312e12, "launch_s": 5e-6,
                "trusted": True, "measured_at": "2026-11-25T00:00:00+00:00"}
TINY_CONFIG = {  # a sweep whose analytic tables take a fraction of a second
    "sweep": {"models": [{"name": "m", "arch": "decoder", "layers": 1, "d_model": 16, "heads": 2, "d_ff": 32,
                          "vocab": 256, "seq_len": 8, "batch": 2}]},
    "analytic": {"rules": ["bp", "fa"], "cost_models": ["paper", "executed"]},
    "train": {"select": ["m"], "steps": 5, "lr": 0.05},
}
PLAN = ["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb", "--rule", "bp", "--format", "csv"]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """One valid file per kind, each written by the package itself or in the exact structure its reader expects."""
    from trainingcost.config.scaling import ScalingStudy

    base = tmp_path_factory.mktemp("bases")
    (base / "config.json").write_text(json.dumps(TINY_MISTRAL))
    (base / "calibration.json").write_text(json.dumps(CALIBRATION))
    (base / "device_model.json").write_text(json.dumps(DEVICE_MODEL))
    (base / "corpus.txt").write_text("A small corpus of plain text, repeated so that batches can be drawn.\n" * 60)
    (base / "tiny.yaml").write_text(yaml.safe_dump(TINY_CONFIG))
    (base / "study.json").write_text(ScalingStudy(rules=("bp",), widths=(16,), depths=(1,), heads=2, ff_mult=2,
                                                  seq_len=8, batch=2, seeds=(0,), steps=4, evals=2, eval_batches=1,
                                                  lrs=(0.002,), search_steps=2, bootstrap=2).to_json())
    pd.DataFrame({"kind": ["frontier"] * 6, "rule": ["bp"] * 3 + ["kp"] * 3,
                  "compute": [1e15, 1e16, 1e17] * 2, "loss": [3.0, 2.5, 2.0, 3.2, 2.8, 2.4]}).to_parquet(
        base / "frontiers.parquet")
    for argv in (["configs", "--config", str(base / "tiny.yaml"), "--out", str(base / "configs.parquet")],
                 [*TRAIN, "--steps", "6", "--out-dir", str(base / "run")]):
        status, _, err = run_cli(argv, seconds=60)
        assert status == 0, err
    return base


# (command line with {path} and {out}, the file's kind, the base file, the outputs asked for, the input's names)
TARGETS = {
    "estimate --hf-config": (["estimate", "--hf-config", "{path}", "--rule", "bp", "--format", "csv"], "json",
                             "config.json", ()),
    "plan --calibration": ([*PLAN, "--cost-model", "executed", "--calibration", "{path}", "--micro-batch", "4",
                            "--global-batch", "8"], "json", "calibration.json", ()),
    "plan --device-model": ([*PLAN, "--device-model", "{path}"], "json", "device_model.json", ()),
    "plan --frontiers": ([*PLAN, "--target-loss", "2.6", "--frontiers", "{path}"], "parquet", "frontiers.parquet", ()),
    "plan --measured-run": ([*PLAN, "--measured-run", "{path}"], "parquet", "run/measured.parquet", ()),
    "train --corpus": ([*TRAIN, "--steps", "2", "--corpus", "{path}"], "text", "corpus.txt", ()),
    "calibrate --trace": (["calibrate", "--trace", "{path}", "--threads", "1", "--time-cap", "4", "--keep-untrusted",
                           "--out", "{out}/cal.json"], "parquet", "run/trace.parquet", ("cal.json",)),
    "configs --config": (["configs", "--config", "{path}", "--out", "{out}/c.parquet"], "yaml", "tiny.yaml",
                         ("c.parquet",)),
    "analytic --config": (["analytic", "--config", "{path}", "--configs", "{base}/configs.parquet", "--out",
                           "{out}/a.parquet", "--memory-out", "{out}/m.parquet"], "yaml", "tiny.yaml",
                          ("a.parquet", "m.parquet")),
    "analytic --configs": (["analytic", "--config", "{base}/tiny.yaml", "--configs", "{path}", "--out", "{out}/a.parquet",
                            "--memory-out", "{out}/m.parquet"], "parquet", "configs.parquet", ("a.parquet", "m.parquet")),
    "check --config": (["check", "--config", "{path}"], "yaml", "tiny.yaml", ()),
    "curves search --study": (["curves", "search", "--study", "{path}", "--rule", "bp", "--out", "{out}/s.parquet"],
                              "json", "study.json", ("s.parquet",)),
}


def command_line(target: str, path, out: Path, base: Path) -> tuple[list[str], list[Path]]:
    argv, _, _, outputs = TARGETS[target]
    fill = lambda a: a.replace("{path}", str(path)).replace("{out}", str(out)).replace("{base}", str(base))  # noqa: E731
    return [fill(a) for a in argv], [out / name for name in outputs]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_base_file_is_valid(bases, tmp_path, target):
    """The file property is not vacuous: each command succeeds on its uncorrupted file."""
    argv, outputs = command_line(target, bases / TARGETS[target][2], tmp_path, bases)
    status, stdout, stderr = run_cli(argv, seconds=60)
    assert status == 0, (argv, stderr)
    check_outcome(argv, status, stdout, stderr, [], outputs)


# -- the corruptions ----------------------------------------------------------------------------------------

def _paths(data, prefix=()):
    """Every key path into nested dicts and lists."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


def _edit(data, path, action, value):
    data = copy.deepcopy(data)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if action == "delete":
        del parent[key]
    elif action == "rename" and isinstance(parent, dict):
        parent[f"{key}_x"] = parent.pop(key)
    else:
        parent[key] = value
    return data


OTHER_VALUES = st.one_of(st.none(), st.booleans(), st.sampled_from(["x", "", "1e3", [], [1, "a"], {}, {"a": 1}, -1, 0,
                                                                   1.5, 2**70]), st.text(max_size=4))
TOP_LEVEL = st.sampled_from([[], [1, 2], 3, 2.5, "text", None, True])
SPECIAL = ["empty", "directory", "/dev/zero", "/dev/null", "fifo", "symlink loop", "binary"]


# The readers that check every value's type as well as the file's form and keys (every file argument now).
TYPED = {"estimate --hf-config", "plan --device-model", "configs --config", "analytic --config", "check --config",
         "curves search --study", "analytic --configs", "train --corpus", "plan --calibration", "plan --frontiers",
         "plan --measured-run", "calibrate --trace"}


@st.composite
def corruptions(draw, kind: str, valid: bytes, typed: bool = True):
    """(label, bytes) or (label, None) for a special file."""
    choices = [*SPECIAL, "truncated"]
    if kind in ("json", "yaml"):
        choices += ["key", "top level"] + (["type"] if typed else [])
    if kind == "json":
        choices += ["deep", "huge integer"]  # issue 66, N5: a RecursionError and a ValueError traceback
    elif kind == "parquet":
        choices += ["column"] + (["type"] if typed else [])
    how = draw(st.sampled_from(choices))
    if how in ("directory", "/dev/zero", "/dev/null", "fifo", "symlink loop"):
        return how, None  # made by _make
    if how == "empty":
        return how, b""
    if how == "binary":
        return how, draw(st.binary(min_size=1, max_size=64))
    if how == "truncated":
        return how, valid[: int(len(valid) * draw(st.floats(0, 1, exclude_max=True)))]
    if how == "deep":
        depth = draw(st.integers(65, 200_000))
        return f"deep {depth}", ("[" * depth + "]" * depth).encode()
    if how == "huge integer":
        data = json.loads(valid)
        key = draw(st.sampled_from(sorted(data)))
        digits = draw(st.integers(20, 6000))
        return f"huge integer {key} {digits}", json.dumps(data).replace(json.dumps(data[key]), "9" * digits, 1).encode()
    if kind in ("json", "yaml"):
        data = json.loads(valid) if kind == "json" else yaml.safe_load(valid)
        dump = (lambda d: json.dumps(d).encode()) if kind == "json" else (lambda d: yaml.safe_dump(d).encode())
        if how == "top level":
            return how, dump(draw(TOP_LEVEL))
        path = draw(st.sampled_from(sorted(_paths(data), key=str)))
        action = draw(st.sampled_from(["delete", "rename"] + (["set"] if typed else []))) if how == "key" else "set"
        return f"{how} {action} {path}", dump(_edit(data, path, action, draw(OTHER_VALUES)))
    if kind == "parquet":
        table = pd.read_parquet(io.BytesIO(valid))
        column = draw(st.sampled_from(list(table.columns)))
        if how == "column":
            if draw(st.booleans()):
                table = table.drop(columns=[column])
            else:
                table = table.rename(columns={column: column + "_x"})
        else:
            kind_of = draw(st.sampled_from(["str", "nan", "negative", "bool"]))
            if kind_of == "str":
                table[column] = table[column].astype(str) + "x"
            elif kind_of == "nan":
                table[column] = float("nan")
            elif kind_of == "negative":
                table[column] = -1
            else:
                table[column] = True
            how = f"type {kind_of}"
        buffer = io.BytesIO()
        table.to_parquet(buffer)
        return f"{how} {column}", buffer.getvalue()
    return how, None


def _make(how: str, content: bytes | None, folder: Path) -> Path:
    if how == "directory":
        (folder / "dir").mkdir()
        return folder / "dir"
    if how in ("/dev/zero", "/dev/null"):
        return Path(how)
    if how == "fifo":
        os.mkfifo(folder / "fifo")
        return folder / "fifo"
    if how == "symlink loop":
        os.symlink(folder / "loop", folder / "loop")
        return folder / "loop"
    path = folder / "input"
    path.write_bytes(content)
    return path


@st.composite
def file_cases(draw, bases):
    target = draw(st.sampled_from(sorted(TARGETS)))
    _, kind, name, _ = TARGETS[target]
    how, content = draw(corruptions(kind, (bases / name).read_bytes(), target in TYPED))
    return target, how, content


@settings(max_examples=N)
@given(data=st.data())
def test_every_file_argument_fails_in_one_line_or_succeeds(bases, data):
    target, how, content = data.draw(file_cases(bases))
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        path = _make(how, content, folder)
        (folder / "out").mkdir()
        argv, outputs = command_line(target, path, folder / "out", bases)
        before = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        status, stdout, stderr = run_cli(argv)
        flag = target.split()[-1]
        names = [flag, str(path), flag.lstrip("-"), "calibration", "scaling study", "error: scaling."]
        if TARGETS[target][1] == "yaml":  # a config file's mistake is named by its field (docs/failures.md)
            names += [f"error: {section}" for section in ("sweep", "train", "analytic", "memory", "figures", "plan",
                                                          "scaling", "config")]
        check_outcome(argv, status, stdout, stderr, names, outputs)
        if before is not None:
            assert path.read_bytes() == before, (argv, "the input file changed")


# -- the numbers --------------------------------------------------------------------------------------------

NUMBER_TYPES = {"integer", "number", "count", "count_or_auto", "count_max_or_auto", "count_or_max", "gpu_counts"}


def number_flags(command: str) -> list[str]:
    """The subcommand's options that parse a number (a type, no choices), from the parser itself."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return sorted(a.option_strings[-1] for a in sub._actions
                  if a.option_strings and a.type is not None and not a.choices
                  and getattr(a.type, "__name__", "") in NUMBER_TYPES)


# Every rate and count of a run that does not set its length (--steps and the model's sizes would only make it long).
TRAIN_SAFE = ["--lr", "--weight-decay", "--eval-batches", "--target-step", "--target-noise", "--inverse-lr", "--lra-beta", "--lra-gamma",
              "--seed", "--warmup", "--eval-every", "--mirror-steps", "--threads"]
ESTIMATE = ["estimate", "--arch", "decoder", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--vocab", "50",
            "--seq-len", "8", "--batch", "1", "--rule", "bp", "--format", "csv"]
BASES = {"estimate": ESTIMATE, "plan": PLAN, "train": [*TRAIN, "--steps", "2"]}
NUMBERS = {"estimate": number_flags("estimate"), "plan": number_flags("plan"),
           "train": [f for f in number_flags("train") if f in TRAIN_SAFE]}
SPECIAL_VALUES = [0, "-0", -1, -3.5, "nan", "inf", "-inf", "1e308", "1e-308", "5e-324", "1e30", 2**63, 10**30, 0.001,
                  "1e-3", "1e10", "1_000", "0.5", 1, 10**9, 10**12, "1e12"]
# every count up to 10^12 (issue 66, N6 and N13: experts and GPU ranges whose work grew with the number)
VALUE_TEXT = st.one_of(st.sampled_from(SPECIAL_VALUES), st.floats(), st.integers(-(2**70), 2**70),
                       st.integers(-3, 100), st.integers(0, 10**12)).map(str)


@st.composite
def number_cases(draw):
    command = draw(st.sampled_from(sorted(BASES)))
    flags = draw(st.lists(st.sampled_from(NUMBERS[command]), min_size=1, max_size=3, unique=True))
    return command, {flag: draw(VALUE_TEXT) for flag in flags}


def test_the_number_flags_are_found():
    assert {"--layers", "--attention-softcap"} <= set(NUMBERS["estimate"])
    assert {"--tokens", "--gpus", "--mfu", "--target-loss", "--micro-batch"} <= set(NUMBERS["plan"])
    assert set(NUMBERS["train"]) == set(TRAIN_SAFE)


@settings(max_examples=N)
@given(number_cases())
@example(("plan", {"--tokens": "1e308"}))
@example(("plan", {"--gpus": "1000000000000"}))  # N13
@example(("estimate", {"--experts": "4096", "--experts-per-token": "2"}))  # N6: bounded before the work
@example(("estimate", {"--attention-softcap": "5e-324"}))
@example(("estimate", {"--mirror-steps": "9223372036854775808"}))
@example(("estimate", {"--kv-heads": "0"}))
@example(("train", {"--eval-batches": "1_000", "--threads": "1_000"}))
@example(("train", {"--lr": "1e30"}))
@example(("train", {"--threads": str(2**63)}))
@example(("train", {"--lr": "6114"}))  # the validation loss NaN: status diverged, not ok
@example(("train", {"--eval-batches": "100000000"}))  # drawn before the first step: bounded
@example(("train", {"--weight-decay": "3.4e38"}))
def test_every_number_flag_fails_in_one_line_or_succeeds(case):
    command, flags = case
    argv = list(BASES[command])
    for flag, value in flags.items():
        argv += [f"{flag}={value}"]  # '=': a value like -1 is not read as a flag
    status, stdout, stderr = run_cli(argv)
    # a relation between flags (heads must divide d_model) names the field as the model writes it: d_model
    # ... or, where a layout relation fails, the value given (--pp 1e10: "pipeline-parallel 10000000000")
    values = [str(int(float(v.replace("_", "")))) for v in flags.values() if _whole(v)]
    check_outcome(argv, status, stdout, stderr, [*flags, *(f.lstrip("-").replace("-", "_") for f in flags), *values])


def _whole(text: str) -> bool:
    try:
        value = float(text.replace("_", ""))
        return math.isfinite(value) and value.is_integer() and abs(value) >= 2
    except ValueError:
        return False


# -- the numbers of a config --------------------------------------------------------------------------------

CHECK_BASE = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
def _get(data, path):
    for key in path:
        data = data[key]
    return data


NUMBER_PATHS = sorted((p for p in _paths(CHECK_BASE) if type(_get(CHECK_BASE, p)) in (int, float)), key=str)
RAW = ["1e-3", "1e10", "1_000", ".nan", ".inf", "-.inf", "1e308", "1e-308", "5e-324", "1e30", "-0", "0x10", "'7'"]
CONFIG_VALUES = st.one_of(st.sampled_from([0, -1, -2.5, float("nan"), float("inf"), -float("inf"), 1e308, 5e-324, 1e30,
                                           2**63, 10**30, 0.001, True, None]),
                          st.sampled_from(RAW).map(lambda raw: ("raw", raw)), st.floats(), st.integers())


def _field(path) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


@settings(max_examples=N)
@given(st.lists(st.tuples(st.sampled_from(NUMBER_PATHS), CONFIG_VALUES), min_size=1, max_size=3,
                unique_by=lambda pair: pair[0]))
@example([(("train", "lr"), ("raw", "1e-3"))])
@example([(("sweep", "grids", 0, "batch", 0), 1e308)])
@example([(("analytic", "wm_mirror_steps"), 2**62)])
@example([(("sweep", "grids", 0, "heads", 0), 1000.0)])
@example([(("sweep", "grids", 0, "layers", 0), 8156.0)])
@example([(("sweep", "grids", 1, "vocab", 0), 1147571)])  # the run's memory, named by its sizes
@example([(("sweep", "grids", 1, "batch", 0), 12190)])
@example([(("sweep", "grids", 3, "ff_mult", 0), 13344.0)])
@example([(("sweep", "grids", 1, "ff_mult", 0), 1.014188544848091e+16)])
def test_every_number_of_a_config_fails_in_one_line_or_passes_the_check(edits):
    config, raws = copy.deepcopy(CHECK_BASE), {}
    for i, (path, value) in enumerate(edits):
        if isinstance(value, tuple):
            raws[f"RAW{i}PLACE"], value = value[1], f"RAW{i}PLACE"
        config = _edit(config, path, "set", value)
    text = yaml.safe_dump(config)
    for marker, raw in raws.items():
        text = text.replace(marker, raw)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(text)
        argv = ["check", "--config", str(path)]
        status, stdout, stderr = run_cli(argv)
        names = [_field(p) for p, _ in edits] + [[k for k in p if isinstance(k, str)][-1] for p, _ in edits] + [p[0] for p, _ in edits] + [str(path)]
        names += ["d_ff" for p, _ in edits if "ff_mult" in p]  # a grid's ff_mult makes each model's d_ff
        check_outcome(argv, status, stdout, stderr, names)
        assert path.read_text() == text


# -- the outputs (issue 66, N3: plan --figure was checked only after the whole search) ---------------------------

OUTPUTS = {  # (command line with {target}, the flag, whether it names a folder, the file's suffix)
    "configs --out": (["configs", "--config", "{base}/tiny.yaml", "--out", "{target}"], "--out", False, ".parquet"),
    "analytic --out": (["analytic", "--config", "{base}/tiny.yaml", "--configs", "{base}/configs.parquet", "--out",
                        "{target}", "--memory-out", "{ok}/m.parquet"], "--out", False, ".parquet"),
    "analytic --memory-out": (["analytic", "--config", "{base}/tiny.yaml", "--configs", "{base}/configs.parquet",
                               "--out", "{ok}/a.parquet", "--memory-out", "{target}"], "--memory-out", False, ".parquet"),
    "train --out": ([*TRAIN, "--steps", "300", "--out", "{target}"], "--out", False, ".parquet"),
    "train --out-dir": ([*TRAIN, "--steps", "300", "--out-dir", "{target}"], "--out-dir", True, ""),
    "calibrate --out": (["calibrate", "--trace", "{base}/run/trace.parquet", "--threads", "1", "--out", "{target}"],
                        "--out", False, ".json"),
    "plan --figure": ([*PLAN, "--gpus", "64-1024x2", "--layout", "search", "--figure", "{target}"], "--figure", False,
                      ".png"),
}
PLACES = ["a directory", "a file in the way", "/proc", "under a file", "a wrong suffix"]


@settings(max_examples=N)
@given(st.sampled_from(sorted(OUTPUTS)), st.sampled_from(PLACES))
@example("plan --figure", "a wrong suffix")
@example("plan --figure", "/proc")
@example("plan --figure", "a directory")
def test_every_output_that_cannot_be_written_is_one_line_before_any_work(bases, target, place):
    argv, flag, folder, suffix = OUTPUTS[target]
    if place == "a wrong suffix" and target != "plan --figure":
        place = "a directory"  # only a figure's format is read from its name
    if place == "a file in the way" and not folder:
        place = "under a file"
    if place == "a directory" and folder:  # a folder's output may well exist
        place = "a file in the way"
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        (scratch / "ok").mkdir()
        (scratch / "FILE").write_text("x")
        (scratch / f"DIR{suffix}").mkdir()
        target_path = {"a directory": scratch / f"DIR{suffix}", "a file in the way": scratch / "FILE",
                       "/proc": Path(f"/proc/trainingcost-test/out{suffix}"), "under a file": scratch / f"FILE/out{suffix}",
                       "a wrong suffix": scratch / "out.txt"}[place]
        line = [a.replace("{target}", str(target_path)).replace("{base}", str(bases)).replace("{ok}", str(scratch / "ok"))
                for a in argv]
        before = sorted(p.name for p in scratch.rglob("*"))
        status, stdout, stderr = run_cli(line, seconds=10)  # refused before the work: seconds, not the 300 steps
        assert status == 2, (line, stdout[-300:], stderr)
        check_outcome(line, status, stdout, stderr, [flag])
        assert sorted(p.name for p in scratch.rglob("*")) == before, line
