"""The GPU evidence in stages, each with its own time budget (benchmarks/gpu/run.sh runs this; PLAN.md).

    python benchmarks/gpu/stages.py                 # the driver: every stage in order, one status line each
    python benchmarks/gpu/stages.py --stage 3 ...   # one stage (the driver starts each so, in a process of its own)

The stages, in the order of their value (issue 41):

1. sweep     does everything run: the smallest configuration of each of config/gpu.yaml's three grids (decoder,
             encoder, encoder-decoder) under every rule, bf16;
2. mfu       BP at the largest configurations: MFU against the catalogue's dense bf16 peak (goal >= 45%), and the
             profiler's top kernels of the largest one (where the time goes);
3. ratios    every rule at the next configurations, largest first: step time / BP beside executed FLOPs / BP
             (the executed cost model and the FLOP meter; goal: within 15%);
4. memory    per run: the executed memory model's step peak, the tensor meter's, torch.cuda.max_memory_allocated;
5. energy    NVML joules per step and per token, per run and rule;
6. device    the device model measured here (GEMM by size, copy bandwidth, fused attention, launch) beside the
             catalogue's cited numbers, and the plan's single-GPU predicted step against the measured one;
7. predictor the trace-driven predictor calibrated on this device: comparison, summary.md (MAPE, steps >= 1 ms),
             figures.

Each stage runs in its own process with its own time limit (a crash, a hung kernel or a time-out ends that stage
only), writes its tables under $GPU_WORK/stageN_name/, and the driver packs that folder into $OUT/stageN_name.tgz
the moment the stage ends and rewrites $OUT/status.tsv: at most 8 files come back from a device call (7 archives
and the status). Training runs live in $GPU_WORK/runs/ (a finished run is not run again: a second call resumes).

Budgets in seconds (H100; the whole <= 480 s) come from BUDGETS, each overridable by GPU_BUDGET_<N>; GPU_TOTAL caps
the whole. A stage whose budget, or the time left of the whole, is below its minimum is skipped.
GPU_DRY_RUN=1: the same stages on the CPU at tiny shapes (benchmarks/gpu/dry_run.yaml, fp32), where only the CUDA
calls themselves (CUDA events, NVML, max_memory_allocated, bf16 kernels, the catalogue comparison) do not run.
Other settings: GPU_CONFIG (the sweep; default config/gpu.yaml), GPU_RULES (a comma list replacing the config's
rules), GPU_MAX_CONFIGS (stage 3's configurations at most). Test hooks: GPU_STAGE_CRASH=N raises in stage N,
GPU_STAGE_HANG=N makes stage N sleep past its budget.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

# number, name, budget (s, H100), minimum (s): below its minimum a stage is skipped rather than started
STAGES = [(1, "sweep", 120, 30), (2, "mfu", 60, 20), (3, "ratios", 120, 30), (4, "memory", 15, 5),
          (5, "energy", 15, 5), (6, "device", 45, 20), (7, "predictor", 105, 30)]
DRY_MINIMUM = 1  # the dry run's stages take seconds
# (steps, warm-up) of the training runs per stage on the GPU: the sweep checks that everything runs; the MFU and
# ratio runs time more steps. The dry run keeps its config's.
STEPS = {1: (12, 3), 2: (20, 5), 3: (20, 5)}
LARGEST = 3  # stage 2's configurations
GOAL_MFU, GOAL_RATIO, GOAL_MAPE = 0.45, 0.15, 0.08
UNION_TABLES = ("measured.parquet", "steps.parquet", "trace.parquet")  # stage 7's inputs: stages 1-3's, once


def dry() -> bool:
    return os.environ.get("GPU_DRY_RUN") == "1"


def one_line(text: str, limit: int = 200) -> str:
    return " ".join(str(text).split())[:limit]


# -- the driver ------------------------------------------------------------------------------------------------
MAX_BUDGET_S = 3600.0  # a device session is minutes; an hour for one stage or the whole is a typo


def budget_seconds(variable: str, default: float) -> float:
    """A budget from the environment: seconds, finite, from 0 (the stage skipped) to MAX_BUDGET_S; else one line and
    exit 2, before any stage runs (issue 66, N21)."""
    value = os.environ.get(variable)
    if value in (None, ""):
        return float(default)
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not 0 <= number <= MAX_BUDGET_S:  # NaN fails too
        print(f"run.sh: {variable}={value[:30]!r}: give seconds, from 0 (skip) to {MAX_BUDGET_S:.0f}")
        raise SystemExit(2)
    return number


def budgets() -> list[tuple[int, str, float, float]]:
    out = []
    for number, name, budget, minimum in STAGES:
        out.append((number, name, budget_seconds(f"GPU_BUDGET_{number}", budget), DRY_MINIMUM if dry() else float(minimum)))
    return out


def pack(folder: Path, out: Path) -> Path:
    """The stage's folder as one archive in $OUT (written beside, then renamed: never half an archive)."""
    target = out / f"{folder.name}.tgz"
    partial = out / f".{folder.name}.tgz.part"
    def keep(info: tarfile.TarInfo):  # no PDFs (each figure comes as PNG too); stage 7's copies of stages 1-3's tables
        name = Path(info.name)
        if name.suffix == ".pdf" or (folder.name.startswith("stage7") and name.parent.name == folder.name
                                     and name.name in UNION_TABLES):
            return None
        return info

    with tarfile.open(partial, "w:gz") as tar:
        tar.add(folder, arcname=folder.name, filter=keep)
    partial.replace(target)
    return target


def write_status(rows: list[dict], out: Path) -> None:
    columns = ["stage", "name", "status", "seconds", "budget_s", "detail", "archive"]
    lines = ["\t".join(columns)] + ["\t".join(str(r.get(c, "")).replace("\t", " ") for c in columns) for r in rows]
    partial = out / ".status.tsv.part"
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(out / "status.tsv")


def run_stage(number: int, name: str, allowed: float, work: Path) -> tuple[str, str]:
    """(status, detail) of one stage run in its own process, killed (with its process group) at ``allowed`` s."""
    folder = work / f"stage{number}_{name}"
    with open(folder / "stage.log", "w") as log:
        child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--stage", str(number),
                                  "--seconds", f"{allowed:.1f}", "--work", str(work)],
                                 stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            code = child.wait(timeout=allowed)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            return "failed", f"time-out: killed at its budget of {allowed:.0f} s (what it wrote is kept)"
    result = folder / "result.json"
    if code == 0 and result.exists():
        data = json.loads(result.read_text())
        return ("ok (dry run: no CUDA)" if dry() else "ok"), data["detail"]
    text = (folder / "stage.log").read_text(errors="replace").strip().splitlines()
    failed = [line for line in text if line.startswith("stage failed: ")]
    return "failed", (failed[-1][len("stage failed: "):] if failed else
                      f"exit status {code}: {one_line(text[-1]) if text else 'no output'}")


def driver() -> int:
    out = Path(os.environ.get("OUT") or ROOT / ".gpu-results" / "out").resolve()
    work = Path(os.environ.get("GPU_WORK") or ROOT / ".gpu-results" / "work").resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    plan = budgets()
    total = budget_seconds("GPU_TOTAL", sum(b for _, _, b, _ in plan))
    print(f"GPU evidence{' (DRY RUN on the CPU: tiny shapes, no CUDA)' if dry() else ''}: {len(plan)} stages, "
          f"{total:.0f} s in all; tables under {work}, archives in {out}", flush=True)
    began = time.monotonic()
    rows: list[dict] = []
    for number, name, budget, minimum in plan:
        folder = work / f"stage{number}_{name}"
        left = total - (time.monotonic() - began)
        allowed = min(budget, left)
        row = {"stage": number, "name": name, "budget_s": f"{budget:g}"}
        if allowed < minimum or allowed <= 0:
            why = (f"budget {budget:g} s < {minimum:g} s needed" if budget < minimum else
                   f"{max(left, 0):.0f} s left of the whole < {minimum:g} s needed")
            row.update(status="skipped", seconds=0, detail=f"budget: {why}")
            print(f"stage {number} {name}: skipped ({row['detail']})", flush=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            start = time.monotonic()
            status, detail = run_stage(number, name, allowed, work)
            seconds = time.monotonic() - start
            archive = pack(folder, out)
            row.update(status=status, seconds=f"{seconds:.0f}", detail=detail, archive=archive.name)
            word = status if status != "failed" else f"failed after {seconds:.0f} s: {detail}"
            tail = f" {seconds:.0f} s -> {archive}: {detail}" if status != "failed" else f" -> {archive}"
            print(f"stage {number} {name}: {word}{tail}", flush=True)
        rows.append(row)
        write_status(rows, out)
    bad = [r for r in rows if r["status"] == "failed"]
    print(f"done in {time.monotonic() - began:.0f} s: {sum(r['status'].startswith('ok') for r in rows)} ok, "
          f"{len(bad)} failed, {sum(r['status'] == 'skipped' for r in rows)} skipped -> {out / 'status.tsv'}", flush=True)
    return 0


# -- one stage -------------------------------------------------------------------------------------------------
class Stage:
    """What every stage reads: the sweep config (its rules and steps as this stage runs them), the device, where
    runs and tables go, and the seconds it has."""

    def __init__(self, number: int, seconds: float, work: Path):
        from trainingcost.pipeline import load_file

        self.number, self.seconds, self.work = number, seconds, work
        self.began = time.monotonic()
        self.name = dict((n, name) for n, name, _, _ in STAGES)[number]
        self.dir = work / f"stage{number}_{self.name}"
        self.runs = work / "runs"
        self.runs.mkdir(parents=True, exist_ok=True)
        path = os.environ.get("GPU_CONFIG") or str(HERE / "dry_run.yaml" if dry() else ROOT / "config" / "gpu.yaml")
        self.config = load_file(path)
        train = self.config["train"]
        if os.environ.get("GPU_RULES"):
            train["rules"] = [r.strip() for r in os.environ["GPU_RULES"].split(",") if r.strip()]
        if "bp" in train["rules"]:  # BP first: each configuration's ratios need its BP run
            train["rules"] = ["bp"] + [r for r in train["rules"] if r != "bp"]
        if not dry() and number in STEPS:
            train["steps"], train["warmup"] = STEPS[number]
        if dry() and train["device"] == "cuda":
            raise RuntimeError(f"{path}: device cuda in a dry run (give a CPU config, or leave GPU_CONFIG unset)")

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.began)

    def jobs(self):
        from trainingcost.pipeline import train_jobs

        return train_jobs(self.config)

    def run(self, jobs, budget_s: float):
        """Train ``jobs`` in this process (gpu_sweep.run_jobs), gather them into this stage's folder; the runs."""
        import gpu_sweep
        import pandas as pd

        measured, _ = gpu_sweep.run_jobs(self.config, self.runs, None, 0, same_process=True, budget_s=budget_s,
                                         jobs=jobs, gathered=self.dir)
        return pd.read_parquet(measured)

    def write(self, name: str, frame) -> None:
        frame.to_csv(self.dir / name, index=False)


def sizes(jobs) -> dict:
    """config_id -> (size, grid name, cfg) of the jobs' configurations."""
    import gpu_sweep

    return {j.config_id: (gpu_sweep.size(j), j.name, j.cfg) for j in jobs}


def runs_table(measured):
    """One row per run: its shape, status and run-level measurements."""
    runs = measured.drop_duplicates(["config_id", "rule", "seed"]).copy()
    runs["shape"] = (runs["arch"] + " d" + runs["d_model"].astype(str) + " L"
                     + (runs["enc_layers"] + runs["dec_layers"]).astype(str) + " T" + runs["seq_len"].astype(str)
                     + " b" + runs["batch"].astype(str))
    return runs


def all_runs(stage: Stage, numbers=(1, 2, 3)):
    """Every run the sweep stages gathered so far (each run once)."""
    import pandas as pd

    frames = [pd.read_parquet(p) for n in numbers for p in stage.work.glob(f"stage{n}_*/measured.parquet")]
    frames = [f for f in frames if len(f)]
    if not frames:
        raise RuntimeError("no measured runs: stages 1-3 gathered none (see their status)")
    return runs_table(pd.concat(frames, ignore_index=True))


def stage_sweep(stage: Stage) -> str:
    import platform

    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None}
    (stage.dir / "versions.json").write_text(json.dumps(versions, indent=1))
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30)
        (stage.dir / "nvidia-smi.txt").write_text(smi.stdout + smi.stderr)
    jobs = stage.jobs()
    by_size = sizes(jobs)
    smallest = {}
    for config_id, (size, grid, _) in by_size.items():
        if grid not in smallest or size < by_size[smallest[grid]][0]:
            smallest[grid] = config_id
    chosen = [j for j in jobs if j.config_id in smallest.values()]
    runs = runs_table(stage.run(chosen, stage.left() * 0.8))
    table = runs[["shape", "rule", "status", "message", "step_time_median_s", "flops_per_step", "mfu",
                  "peak_memory_bytes", "tensor_peak_bytes", "energy_per_step_j"]]
    stage.write("runs.csv", table)
    import gpu_sweep

    (stage.dir / "headline.txt").write_text(gpu_sweep.headline(runs) + "\n")
    ok = int((runs["status"] == "ok").sum())
    bad = runs[runs["status"] != "ok"]
    worst = f"; not ok: {', '.join(f'{r.rule} {r.shape} ({r.status})' for r in bad.itertuples())}" if len(bad) else ""
    return (f"{ok}/{len(chosen)} runs ok ({len(smallest)} arches x {len(stage.config['train']['rules'])} rules, "
            f"{stage.config['train']['dtype']}, {versions['device']}){worst[:300]}")


def stage_mfu(stage: Stage) -> str:
    import pandas as pd

    jobs = stage.jobs()
    by_size = sizes(jobs)
    largest = sorted(by_size, key=lambda c: -by_size[c][0])[:LARGEST]
    chosen = [j for j in jobs if j.config_id in largest and j.rule == "bp"]
    runs = runs_table(stage.run(chosen, stage.left() * 0.6))
    ok = runs[runs["status"] == "ok"]
    table = runs[["shape", "status", "message", "step_time_median_s", "step_time_iqr_s", "flops_per_step",
                  "achieved_flops_per_s", "peak_flops_per_s", "mfu", "timing_quality"]]
    stage.write("mfu.csv", table)
    if not len(ok):
        raise RuntimeError(f"no BP run ended ok: {'; '.join(runs['status'] + ' ' + runs['message'].fillna(''))[:150]}")
    best = ok.sort_values("flops_per_step").iloc[-1]
    top = profile_top_kernels(stage, best)
    mfu = best["mfu"]
    text = (f"BP {best['shape']}: {best['step_time_median_s'] * 1e3:.1f} ms, "
            f"{best['achieved_flops_per_s'] / 1e12:.1f} TFLOP/s, MFU "
            + (f"{mfu:.1%} (goal >= {GOAL_MFU:.0%}{', met' if mfu >= GOAL_MFU else ', short'})" if pd.notna(mfu)
               else "n/a (no dense bf16 peak for this device and dtype)"))
    return text + f"; top kernel: {top}"


def profile_top_kernels(stage: Stage, run) -> str:
    """A few steps of ``run`` (a row of the runs) under torch.profiler: the kernels (ops on CPU) by self time."""
    import dataclasses

    import torch
    from torch.profiler import ProfilerActivity, profile

    from trainingcost.measure.probe import spec_from_json
    from trainingcost.pipeline import load_file  # noqa: F401 (the package imported before torch work)
    from trainingcost.train.data import make_task
    from trainingcost.train.run import build_model, resolve_device

    trace = __import__("pandas").read_parquet(stage.dir / "trace.parquet")
    mine = trace[(trace["config_id"] == run["config_id"]) & (trace["rule"] == run["rule"])]["spec"].dropna()
    if not len(mine):
        raise RuntimeError(f"no traced spec of BP {run['shape']} to profile")
    spec = dataclasses.replace(spec_from_json(mine.iloc[0]), device=stage.config["train"]["device"])
    device = resolve_device(spec.device)
    model, rule = build_model(spec, device)
    batch = make_task(spec.task, spec.cfg, spec.corpus).batch(torch.Generator().manual_seed(0)).to(device)
    cuda = device.type == "cuda"
    for _ in range(3):
        rule.step(batch)
    if cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(3):
            rule.step(batch)
        if cuda:
            torch.cuda.synchronize()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0]
    events.sort(key=lambda e: -getattr(e, key))
    total = sum(getattr(e, key) for e in events) or 1.0
    rows = [{"name": e.key, "calls": e.count, "self_ms_per_step": getattr(e, key) / 1e3 / 3,
             "share": getattr(e, key) / total} for e in events[:25]]
    frame = __import__("pandas").DataFrame(rows)
    stage.write("top_kernels.csv", frame)
    (stage.dir / "top_kernels.txt").write_text(
        f"{'device' if cuda else 'CPU'} self time per step, BP {run['shape']}, 3 profiled steps\n"
        + frame.to_string(index=False, max_colwidth=90) + "\n")
    return f"{one_line(rows[0]['name'], 60)} {rows[0]['share']:.0%}" if rows else "none recorded"


def executed_flops(stage: Stage, config_ids) -> "object":
    """The executed cost model's FLOPs per step of each (config_id, rule) (analytic layer table)."""
    from trainingcost.analytic import layer_table
    from trainingcost.config import sweep_frame

    configs = sweep_frame(stage.config)
    configs = configs[configs["config_id"].isin(set(config_ids))]
    analytic = stage.config["analytic"]
    table = layer_table(configs, stage.config["train"]["rules"], ["executed"], analytic["wm_mirror_steps"])
    return table.groupby(["config_id", "rule"], as_index=False)["flops"].sum()


def stage_ratios(stage: Stage) -> str:
    jobs = stage.jobs()
    by_size = sizes(jobs)
    done = set()
    for p in stage.work.glob("stage1_*/measured.parquet"):
        done |= set(__import__("pandas").read_parquet(p)["config_id"])
    order = [c for c in sorted(by_size, key=lambda c: -by_size[c][0]) if c not in done]
    limit = os.environ.get("GPU_MAX_CONFIGS")
    order = order[: int(limit)] if limit else order
    rank = {c: i for i, c in enumerate(order)}
    chosen = sorted([j for j in jobs if j.config_id in rank], key=lambda j: rank[j.config_id])  # rules kept in order
    stage.run(chosen, stage.left() * 0.75)
    runs = all_runs(stage, (1, 3))
    ok = runs[runs["status"] == "ok"]
    bp = ok[ok["rule"] == "bp"].set_index("config_id")
    model = executed_flops(stage, ok["config_id"]).set_index(["config_id", "rule"])["flops"]
    rows = []
    for r in ok.itertuples():
        if r.config_id not in bp.index:
            continue
        base = bp.loc[r.config_id]
        time_ratio = r.step_time_median_s / base["step_time_median_s"]
        flops_ratio = r.flops_per_step / base["flops_per_step"]
        executed = model.get((r.config_id, r.rule), math.nan) / model.get((r.config_id, "bp"), math.nan)
        rows.append({"shape": r.shape, "rule": r.rule, "step_ms": r.step_time_median_s * 1e3,
                     "time_over_bp": time_ratio, "executed_flops_over_bp": executed,
                     "meter_flops_over_bp": flops_ratio, "time_over_flops": time_ratio / executed,
                     "timing_quality": r.timing_quality})
    pd = __import__("pandas")
    table = pd.DataFrame(rows, columns=["shape", "rule", "step_ms", "time_over_bp", "executed_flops_over_bp",
                                        "meter_flops_over_bp", "time_over_flops", "timing_quality"])
    stage.write("ratios.csv", table)
    rules = table[table["rule"] != "bp"].groupby("rule", sort=False)[
        ["time_over_bp", "executed_flops_over_bp", "time_over_flops"]].median()
    rules["within_goal"] = (rules["time_over_flops"] - 1).abs() <= GOAL_RATIO
    rules.reset_index().to_csv(stage.dir / "ratios_by_rule.csv", index=False)
    (stage.dir / "ratios.txt").write_text(
        "Per rule, median over configurations: step time / BP, executed FLOPs / BP, and their ratio "
        f"(goal: within {GOAL_RATIO:.0%} of 1)\n" + rules.to_string(float_format=lambda v: f"{v:.3f}") + "\n")
    if not len(rules):
        raise RuntimeError("no configuration has both a BP run and another rule's run ended ok")
    met = int(rules["within_goal"].sum())
    worst = (rules["time_over_flops"] - 1).abs().idxmax()
    return (f"{len(order)} more configurations tried, {ok['config_id'].nunique()} with runs ok; {met}/{len(rules)} "
            f"rules' time/BP within {GOAL_RATIO:.0%} of FLOPs/BP; furthest {worst} "
            f"({rules.loc[worst, 'time_over_flops']:.2f}x)")


def stage_memory(stage: Stage) -> str:
    import pandas as pd

    from trainingcost.analytic.memory import memory_table
    from trainingcost.config import sweep_frame

    runs = all_runs(stage)
    ok = runs[runs["status"] == "ok"]
    configs = sweep_frame(stage.config)
    configs = configs[configs["config_id"].isin(set(ok["config_id"]))]
    train = stage.config["train"]
    model = memory_table(configs, train["rules"], [train["dtype"]], [train["optimizer"]])
    model = model[["config_id", "rule", "peak", "total"]].rename(
        columns={"peak": "model_executed_peak_bytes", "total": "model_paper_total_bytes"})
    table = ok.merge(model, on=["config_id", "rule"], how="left")
    cuda_peak = table["peak_memory_bytes"].where(table["memory_source"] == "cuda_max_memory_allocated")
    table = table.assign(  # on a CPU the run's peak is the process's RSS, no allocator's peak: no ratio
        meter_over_model=table["tensor_peak_bytes"] / table["model_executed_peak_bytes"],
        allocated_over_meter=cuda_peak / table["tensor_peak_bytes"])
    table = table[["shape", "rule", "model_executed_peak_bytes", "tensor_peak_bytes", "peak_memory_bytes",
                   "memory_source", "meter_over_model", "allocated_over_meter", "model_paper_total_bytes"]]
    stage.write("memory.csv", table)
    cuda = bool((table["memory_source"] == "cuda_max_memory_allocated").any())
    by_rule = table.groupby("rule", sort=False)[["meter_over_model", "allocated_over_meter"]].median()
    (stage.dir / "memory.txt").write_text(
        "Per rule, median over runs: tensor meter / executed memory model, and torch.cuda.max_memory_allocated / "
        "tensor meter" + ("" if cuda else " (none here: a CPU's allocator keeps no peak)") + "\n" + by_rule.to_string(float_format=lambda v: f"{v:.3f}") + "\n")
    spread = (table["meter_over_model"] - 1).abs().max()
    return (f"{len(table)} runs; tensor meter vs executed model within {spread:.1%} (worst); "
            + (f"max_memory_allocated / meter median {table['allocated_over_meter'].median():.2f}" if cuda
               else "no max_memory_allocated (CPU)"))


def stage_energy(stage: Stage) -> str:
    runs = all_runs(stage)
    ok = runs[runs["status"] == "ok"].copy()
    tokens = ok["tokens_per_s"] * ok["step_time_median_s"]  # the run's tokens per step (both stacks of an enc-dec)
    ok["joules_per_token"] = ok["energy_per_step_j"] / tokens
    ok["watts"] = ok["energy_per_step_j"] / ok["step_time_median_s"]
    ok = ok.merge(energy_readings(stage), on=["config_id", "rule", "seed"], how="left")
    from trainingcost.measure.recorder import ENERGY_ADVANCES

    # a run's per-step energy is trusted where NVML's counter advanced on enough of its steps (measure/recorder.py)
    advances = ok["energy_readings"] - ok["zero_readings"]
    ok["energy_trusted"] = ok["energy_per_step_j"].notna() & (advances >= ENERGY_ADVANCES)
    table = ok[["shape", "rule", "step_time_median_s", "energy_per_step_j", "joules_per_token", "watts",
                "energy_readings", "zero_readings", "energy_trusted", "energy_source"]]
    stage.write("energy.csv", table)
    trusted = table[table["energy_trusted"]]
    by_rule = trusted.groupby("rule", sort=False)[["energy_per_step_j", "joules_per_token", "watts"]].median()
    (stage.dir / "energy.txt").write_text(
        f"Per rule, median over the runs whose NVML counter advanced on >= {ENERGY_ADVANCES} timed steps "
        f"({len(trusted)} of {len(table)}): joules per step and per token, mean watts\n"
        + by_rule.to_string(float_format=lambda v: f"{v:.4g}") + "\n")
    measured = table["energy_per_step_j"].notna().sum()
    if not measured:
        return f"{len(table)} runs, no energy counter ({'dry run: no NVML' if dry() else 'NVML gave none'})"
    bp = by_rule.loc["bp"] if "bp" in by_rule.index else None
    zeros = int(table["zero_readings"].sum())
    return (f"{measured}/{len(table)} runs with NVML energy ({zeros} of {int(table['energy_readings'].sum())} "
            f"step readings 0 J; {len(trusted)} runs trusted)"
            + (f"; BP median {bp['joules_per_token'] * 1e3:.3g} mJ/token at {bp['watts']:.0f} W" if bp is not None else ""))


def energy_readings(stage: Stage):
    """Per run: its timed steps' NVML readings, and how many read 0 J (the counter's update period at work)."""
    import pandas as pd

    frames = [pd.read_parquet(p) for n in (1, 2, 3) for p in stage.work.glob(f"stage{n}_*/steps.parquet")]
    steps = pd.concat([f for f in frames if len(f)], ignore_index=True)
    steps = steps[steps["kind"] == "timed"].drop_duplicates(["config_id", "rule", "seed", "step"])
    energy = steps["energy_j"] if "energy_j" in steps else pd.Series(float("nan"), index=steps.index)
    steps = steps.assign(read=energy.notna(), zero=energy.eq(0))
    return steps.groupby(["config_id", "rule", "seed"], as_index=False).agg(
        energy_readings=("read", "sum"), zero_readings=("zero", "sum"))


def stage_device(stage: Stage) -> str:
    import pandas as pd
    import torch

    from trainingcost.analytic.steptime.device import DeviceModel, with_measurement
    from trainingcost.config.hardware import match_device
    from trainingcost.measure.device_model import measure_device_model
    from trainingcost.train.run import resolve_device

    device = resolve_device(stage.config["train"]["device"])
    dtype = stage.config["train"]["dtype"]
    data = measure_device_model(device, dtype)
    path = stage.dir / "device_model.json"
    path.write_text(json.dumps(data, indent=1))
    rows = [{"quantity": f"gemm {n}", "measured": f} for n, f in data["gemm"]]
    rows += [{"quantity": f"copy {int(b)} B", "measured": bw} for b, bw in data["bandwidth"]]
    rows += [{"quantity": "attention forward FLOP/s", "measured": data["flash_forward_flops"]},
             {"quantity": "attention backward FLOP/s", "measured": data["flash_backward_flops"]},
             {"quantity": "launch s", "measured": data["launch_s"]}]
    stage.write("device_measured.csv", pd.DataFrame(rows))
    known = match_device(data["device_name"]) if device.type == "cuda" else None
    text = (f"{data['device_name']} {dtype}: GEMM {data['gemm_flops'] / 1e12:.3g} TFLOP/s, copy "
            f"{max(b for _, b in data['bandwidth']) / 1e9:.3g} GB/s, attention {data['flash_forward_flops'] / 1e12:.3g}"
            f"/{data['flash_backward_flops'] / 1e12:.3g} TFLOP/s, launch {data['launch_s'] * 1e6:.1f} us"
            + ("" if data["trusted"] else f" (untrusted: {data['untrusted']})"))
    if known is not None:
        cited = DeviceModel.of(known, "bf16").params
        measured = with_measurement(known, data, "bf16", str(path)).steptime
        keys = ("gemm_ceiling", "flash_forward", "flash_backward", "launch_us", "hbm_efficiency")
        pd.DataFrame([{"quantity": k, "catalogue_cited": cited[k], "measured_here": measured[k]} for k in keys]).to_csv(
            stage.dir / "device_vs_catalogue.csv", index=False)
        gpu = known.name
    else:  # a CPU (the dry run) or a device outside the catalogue: the plan prices the catalogue's H100
        gpu = "h100-sxm"
    predicted = plan_against_measured(stage, gpu, path if known is not None else None)
    return text + "; " + (predicted if known is not None or dry() else
                          f"{data['device_name']} is not in the catalogue: no cited numbers to compare")


def plan_against_measured(stage: Stage, gpu: str, device_model: Path | None) -> str:
    """``trainingcost plan`` on one GPU for the largest measured BP run's shape (pure bf16 is bf16-mixed's compute;
    SGD as trained), against its measured step; with ``device_model`` the plan uses the numbers measured here."""
    import pandas as pd

    from trainingcost.cli import main as cli_main

    runs = all_runs(stage)
    bp = runs[(runs["status"] == "ok") & (runs["rule"] == "bp")].sort_values("flops_per_step")
    if not len(bp):
        raise RuntimeError("no BP run ended ok: nothing to predict a step of")
    r = bp.iloc[-1]
    depth = (["--enc-layers", r["enc_layers"], "--dec-layers", r["dec_layers"], "--tgt-len", r["tgt_len"]]
             if r["arch"] == "encoder-decoder" else ["--layers", r["enc_layers"] + r["dec_layers"]])
    argv = ["plan", "--gpu", gpu, "--arch", r["arch"], *depth, "--d-model", r["d_model"], "--heads", r["heads"],
            "--d-ff", r["d_ff"], "--vocab", r["vocab"], "--seq-len", r["seq_len"], "--global-batch", r["batch"],
            "--micro-batch", r["batch"], "--tokens", r["batch"] * r["seq_len"], "--rule", "bp",
            "--precision", "bf16-mixed", "--optimizer", stage.config["train"]["optimizer"], "--format", "json",
            *(["--device-model", str(device_model)] if device_model is not None else [])]
    argv = [str(a) for a in argv]
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli_main(argv)
    if code not in (0, 1):
        raise RuntimeError(f"plan exited {code}: {' '.join(argv)}")
    plan = json.loads(buffer.getvalue())[0]
    (stage.dir / "plan_command.txt").write_text("python -m trainingcost " + " ".join(argv) + "\n")
    predicted, measured = plan["step_time_s"], r["step_time_median_s"]
    pd.DataFrame([{"shape": r["shape"], "gpu": gpu, "device_model": str(device_model or "catalogue"),
                   "predicted_step_s": predicted, "measured_step_s": measured,
                   "predicted_over_measured": predicted / measured,
                   **{k: v for k, v in plan.items() if k.startswith("step_") and k.endswith("_s")}}]).to_csv(
        stage.dir / "plan_vs_measured.csv", index=False)
    if device_model is None:
        return (f"plan on {gpu} (catalogue) for BP {r['shape']}: {predicted * 1e3:.3g} ms; measured here "
                f"{measured * 1e3:.3g} ms (dry run: not comparable)")
    return (f"plan with the measured device model, BP {r['shape']}: predicted {predicted * 1e3:.3g} ms vs measured "
            f"{measured * 1e3:.3g} ms ({predicted / measured - 1:+.0%})")


def stage_predictor(stage: Stage) -> str:
    import gpu_sweep
    import pandas as pd

    from trainingcost.findings.predictor import accuracy
    from trainingcost.io import write_parquet

    for name in ("measured", "steps", "trace"):  # stages 1-3's tables, each run once (stage 3 reuses stage 2's)
        seen, frames = set(), []
        for path in sorted(p for n in (1, 2, 3) for p in stage.work.glob(f"stage{n}_*/{name}.parquet")):
            frame = pd.read_parquet(path)
            if not len(frame):
                continue
            key = pd.Series(list(zip(frame["config_id"], frame["rule"], frame["seed"])), index=frame.index)
            frames.append(frame[~key.isin(seen)])
            seen |= set(key)
        if not frames:
            raise RuntimeError(f"no {name} tables from stages 1-3 (see their status)")
        write_parquet(pd.concat(frames, ignore_index=True), stage.dir / f"{name}.parquet")
    settings = stage.config["train"]["calibration"]
    settings["time_cap"] = max(5.0, min(float(settings["time_cap"]), stage.left() * 0.4))
    gpu_sweep.findings(stage.config, stage.dir, stage.dir / "measured.parquet")
    comparison = pd.read_parquet(stage.dir / "comparison.parquet")
    steps = comparison[(comparison["cost_model"] == "executed") & (comparison["granularity"] == "step")]
    steps = steps[steps["predicted_time_s"].notna() & (steps["measured_time_s"] > 0)]
    steps[["config_id", "rule", "predicted_time_s", "measured_time_s", "timing_quality"]].to_csv(
        stage.dir / "predicted_vs_measured.csv", index=False)
    trusted = steps[~steps["timing_quality"].fillna("unknown").isin(("noisy", "contended"))]
    long = trusted[trusted["measured_time_s"] >= 1e-3]
    score, score_long = accuracy(trusted["predicted_time_s"], trusted["measured_time_s"]), \
        accuracy(long["predicted_time_s"], long["measured_time_s"])
    calibration = json.loads((stage.dir / "calibration.json").read_text())
    mape = (f"MAPE {score_long['mape']:.1%} over {score_long['n']} steps >= 1 ms (goal <= {GOAL_MAPE:.0%})"
            if score_long["n"] else "no step >= 1 ms")
    return (f"{mape}; all {score['n']} trusted steps: MAPE {score['mape']:.1%}, Spearman {score['spearman']:.2f}; "
            f"calibration {'trusted' if calibration.get('trusted', True) else 'UNTRUSTED'}")


STAGE_FUNCTIONS = {1: stage_sweep, 2: stage_mfu, 3: stage_ratios, 4: stage_memory, 5: stage_energy, 6: stage_device,
                   7: stage_predictor}


def one_stage(number: int, seconds: float, work: Path) -> int:
    try:
        if os.environ.get("GPU_STAGE_HANG") == str(number):
            time.sleep(seconds + 60)  # a test's hung stage: the driver kills it at its budget
        if os.environ.get("GPU_STAGE_CRASH") == str(number):
            raise RuntimeError(f"forced crash (GPU_STAGE_CRASH={number})")
        stage = Stage(number, seconds, work)
        detail = STAGE_FUNCTIONS[number](stage)
    except Exception as err:  # noqa: BLE001 - the driver reports it in one line and goes on to the next stage
        traceback.print_exc()
        print(f"stage failed: {type(err).__name__}: {one_line(err)}", flush=True)
        return 1
    (stage.dir / "result.json").write_text(json.dumps({"detail": one_line(detail, 1000), "dry_run": dry(),
                                                      "seconds": round(time.monotonic() - stage.began, 1)}))
    print(f"stage done: {detail}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", type=int, choices=sorted(STAGE_FUNCTIONS), help="run this one stage")
    parser.add_argument("--seconds", type=float, default=60.0, help="the stage's budget")
    parser.add_argument("--work", type=Path, help="the work folder (the driver's $GPU_WORK)")
    args = parser.parse_args()
    if args.stage is None:
        return driver()
    return one_stage(args.stage, args.seconds, args.work.resolve())


if __name__ == "__main__":
    sys.exit(main())
