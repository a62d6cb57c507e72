"""benchmarks/gpu/run.sh, the GPU evidence script (issue 41), dry-run on the CPU: every stage's code path but the CUDA
calls themselves. Kept cheap (the suite is near its limit): two rules (BP and one to compare with it), one
configuration in stage 3, and the failure run resumes the first run's training runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "run.sh"
STAGES = ["sweep", "mfu", "ratios", "memory", "energy", "device", "predictor"]
# what each stage must have written (beside stage.log and result.json)
FILES = {"sweep": ["runs.csv", "measured.parquet", "trace.parquet", "headline.txt", "versions.json"],
         "mfu": ["mfu.csv", "top_kernels.csv", "top_kernels.txt"],
         "ratios": ["ratios.csv", "ratios_by_rule.csv", "ratios.txt"],
         "memory": ["memory.csv", "memory.txt"],
         "energy": ["energy.csv", "energy.txt"],
         "device": ["device_model.json", "device_measured.csv", "plan_vs_measured.csv"],
         "predictor": ["calibration.json", "comparison.parquet", "summary.md", "predicted_vs_measured.csv"]}


def run(tmp: Path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GPU_")}
    environ.update(PYTHON=sys.executable, OUT=str(tmp / "out"), GPU_WORK=str(tmp / "work"),
                   GPU_RULES="bp,dfa", GPU_MAX_CONFIGS="1", **env)
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=environ, timeout=300)


def status(tmp: Path) -> dict[str, dict]:
    lines = (tmp / "out" / "status.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return {row["name"]: row for row in (dict(zip(header, line.split("\t"))) for line in lines[1:])}


def stage_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("stage ")]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu-dry")
    done = run(tmp, GPU_DRY_RUN="1")
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp, done


def test_dry_run_every_stage_ok(dry_run):
    tmp, done = dry_run
    lines = stage_lines(done.stdout)
    assert len(lines) == len(STAGES), done.stdout  # exactly one status line per stage, in order
    for number, (name, line) in enumerate(zip(STAGES, lines), 1):
        assert line.startswith(f"stage {number} {name}: ok (dry run: no CUDA) "), line
    rows = status(tmp)
    assert list(rows) == STAGES
    out = tmp / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted([f"stage{n}_{s}.tgz" for n, s in enumerate(STAGES, 1)]
                                                           + ["status.tsv"])  # 8 files: what a device call returns
    for number, name in enumerate(STAGES, 1):
        assert rows[name]["status"] == "ok (dry run: no CUDA)", rows[name]
        folder = tmp / "work" / f"stage{number}_{name}"
        for file in FILES[name] + ["stage.log", "result.json"]:
            assert (folder / file).stat().st_size > 0, (name, file)
        with tarfile.open(out / f"stage{number}_{name}.tgz") as tar:
            names = tar.getnames()
        assert f"stage{number}_{name}/{FILES[name][0]}" in names
        assert not any(n.endswith(".pdf") for n in names)
    assert "runs ok (3 arches x 2 rules" in rows["sweep"]["detail"]
    assert "6/6 runs ok" in rows["sweep"]["detail"]
    assert "no energy counter (dry run: no NVML)" in rows["energy"]["detail"]
    assert "(dry run: not comparable)" in rows["device"]["detail"]
    assert "MAPE" in rows["predictor"]["detail"]


def test_a_crash_and_a_time_out_keep_the_earlier_stages(dry_run, tmp_path):
    first, _ = dry_run
    shutil.copytree(first / "work" / "runs", tmp_path / "work" / "runs")  # stage 1 resumes the first run's runs
    done = run(tmp_path, GPU_DRY_RUN="1", GPU_STAGE_CRASH="2", GPU_STAGE_HANG="3", GPU_BUDGET_3="2",
               **{f"GPU_BUDGET_{n}": "0" for n in range(4, 8)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = stage_lines(done.stdout)
    assert len(lines) == len(STAGES), done.stdout
    assert lines[0].startswith("stage 1 sweep: ok")
    assert lines[1].startswith("stage 2 mfu: failed after ") and "RuntimeError: forced crash (GPU_STAGE_CRASH=2)" in lines[1]
    assert lines[2].startswith("stage 3 ratios: failed after ") and "time-out" in lines[2]
    for line in lines[3:]:
        assert "skipped (budget: budget 0 s < 1 s needed)" in line, line
    rows = status(tmp_path)
    assert [rows[s]["status"] for s in STAGES] == ["ok (dry run: no CUDA)", "failed", "failed"] + ["skipped"] * 4
    out = tmp_path / "out"
    assert (out / "stage1_sweep.tgz").exists() and (tmp_path / "work" / "stage1_sweep" / "runs.csv").exists()
    assert (out / "stage2_mfu.tgz").exists() and (out / "stage3_ratios.tgz").exists()  # their logs come back
    assert not (out / "stage4_memory.tgz").exists()


def test_refuses_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():  # on a GPU machine the script runs for real: nothing to refuse
        return
    done = run(tmp_path)
    assert done.returncode != 0
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run.sh: no CUDA device visible to torch here: refusing"), done.stdout
    assert not (tmp_path / "out").exists()


def test_diagnose_dry_run_reads_the_committed_traces(tmp_path):
    """benchmarks/gpu/diagnose.py (the third device call's script) at the probe's sizes on the CPU: every run it
    names is in the committed traces, builds, steps and probes, and the report is written."""
    import json

    environ = {**{k: v for k, v in os.environ.items() if not k.startswith("GPU_")}, "GPU_DRY_RUN": "1",
               "OUT": str(tmp_path)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "diagnose.py")], env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "diagnose.json").read_text())
    assert len(report["runs"]) == 6 and not any("error" in r for r in report["runs"])
    assert all(r["host_issue_s"] > 0 and r["probe_s"] > 0 for r in report["runs"])


def test_repredict_prices_the_committed_calls():
    """benchmarks/gpu/repredict.py re-prices the committed GPU calls on the CPU: one line per call and predictor, and
    today's predictor (host and kernels overlapped on a CUDA calibration) differs from what the call predicted."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "repredict.py")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("2026-11-27-h200-call")]
    assert len(lines) == 4
    then, now = (float(line.split("%")[0].split()[-1]) for line in lines[:2])
    assert then == pytest.approx(17.3, abs=0.05) and now != then


@pytest.mark.parametrize("variable, value", [("GPU_BUDGET_3", "abc"), ("GPU_BUDGET_1", "-5"), ("GPU_TOTAL", "nan"),
                                             ("GPU_BUDGET_2", "inf"), ("GPU_TOTAL", "1e300"), ("GPU_BUDGET_7", "-0.5")])
def test_an_odd_budget_is_one_line_before_any_stage(tmp_path, variable, value):
    """Issue 66, N21: a budget that is not a number of seconds gave a traceback, or ran a stage forever."""
    done = run(tmp_path, GPU_DRY_RUN="1", **{variable: value})
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert done.stdout.strip().splitlines() == [f"run.sh: {variable}={value!r}: give seconds, from 0 (skip) to 3600"], \
        done.stdout
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
