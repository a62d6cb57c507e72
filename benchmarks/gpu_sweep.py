"""Run a config's measured training jobs without Snakemake, gather them, and print the headline figures.

For a machine without snakemake (the lent GPU image): the same jobs as the
workflow's ``train`` rule (``trainingcost.pipeline.train_jobs``), one after
another on one device, each through ``python -m trainingcost train``; then the
workflow's gathering step. Prints:

- BP's MFU at the largest shapes (bf16 on a known GPU; measured FLOPs per step
  over the median step time, divided by the dense bf16 peak);
- each rule's step time relative to BP beside its executed-FLOP ratio to BP;
- MEMPEPITA's peak memory beside PEPITA's and BP's.

    python benchmarks/gpu_sweep.py --config config/gpu.yaml --out benchmarks/gpu
    python benchmarks/gpu_sweep.py --config config/config.yaml --out /tmp/cpu --limit 14   # CPU check

It then computes, under ``--out``, the analytic tables of the sweep, the device calibration, the comparison,
``summary.md`` and the figures, as the workflow does (``--no-findings`` skips them).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainingcost.pipeline import load_file as load_config  # noqa: E402
from trainingcost.pipeline import gather_runs, train_command, train_jobs  # noqa: E402


def in_process(argv: list[str], cwd: Path, log) -> int:
    """One job through the command line's own entry point in this process (no interpreter start, no second CUDA
    context: on a lent GPU the jobs then cost their steps, not their imports)."""
    import contextlib

    from trainingcost.cli import main as cli_main

    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            return cli_main(argv)
    except Exception as err:  # a crash of one job is recorded, and the sweep goes on
        log.write(f"crashed: {type(err).__name__}: {err}\n")
        return 1
    finally:
        os.chdir(here)


def size(job) -> int:
    """A job's step size, to run the largest configurations first (BP's MFU is read at the largest shapes)."""
    c = job.cfg
    return c.d_model * c.d_model * (c.enc_layers + c.dec_layers) * c.seq_len * c.batch


def run_jobs(config: dict, out: Path, limit: int | None, timeout: int, same_process: bool = False,
             largest_first: bool = False, budget_s: float | None = None, jobs: list | None = None,
             gathered: Path | None = None) -> tuple[Path, Path]:
    """Run ``jobs`` (default: every job of the config) with their run directories under ``out``, and gather their
    tables into ``gathered`` (default ``out``). With ``budget_s``, no job starts that would end after it at the pace
    of the longest job so far."""
    jobs = train_jobs(config) if jobs is None else jobs
    if largest_first:  # stable: each configuration keeps its rules together, in the config's rule order
        jobs = sorted(jobs, key=lambda j: -size(j))
    jobs = jobs[:limit]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    began, longest = time.perf_counter(), 0.0
    for n, job in enumerate(jobs, 1):
        if budget_s is not None and time.perf_counter() - began + longest > budget_s:
            print(f"time budget of {budget_s:g} s spent: {len(jobs) - n + 1} jobs not started", flush=True)
            break
        target = out / job.run_dir
        if (target / "measured.parquet").exists():
            continue  # resume: a finished job is not run again
        target.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with open(target / "train.log", "w") as log:
            if same_process:
                code = in_process(train_command(job, config), out, log)
            else:
                try:
                    code = subprocess.run([sys.executable, "-m", "trainingcost", *train_command(job, config)], cwd=out,
                                          stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
                except subprocess.TimeoutExpired:
                    code = "timeout"
        longest = max(longest, time.perf_counter() - start)
        line = (target / "train.log").read_text().strip().splitlines()
        print(f"[{n}/{len(jobs)}] {job.name} {job.config_id} {job.rule}: exit {code}, {time.perf_counter() - start:.1f} s; "
              f"{line[-1] if line else ''}", flush=True)  # the whole line: a cut one read 0.85 ms for 10.85
    done = [out / j.run_dir for j in jobs if (out / j.run_dir / "measured.parquet").exists()]
    gathered = out if gathered is None else gathered
    measured, steps = gathered / "measured.parquet", gathered / "steps.parquet"
    gather_runs([d / "measured.parquet" for d in done], [d / "steps.parquet" for d in done], measured, steps,
                [d / "trace.parquet" for d in done if (d / "trace.parquet").exists()], gathered / "trace.parquet")
    return measured, steps


def headline(measured: pd.DataFrame) -> str:
    runs = measured.groupby(["config_id", "rule"], sort=False).first().reset_index()
    runs["shape"] = (runs["arch"] + " d" + runs["d_model"].astype(str) + " L" + (runs["enc_layers"] + runs["dec_layers"]).astype(str)
                     + " T" + runs["seq_len"].astype(str))
    lines = [f"device: {runs['device_name'].iloc[0]}; dtype {runs['dtype'].iloc[0]}; torch {runs['torch_version'].iloc[0]}; "
             f"{len(runs)} runs ({', '.join(f'{n} {s}' for s, n in runs['status'].value_counts().items())})", ""]
    ok = runs[runs["status"] == "ok"]
    bp = ok[ok["rule"] == "bp"].set_index("config_id")
    if len(bp):
        largest = bp.sort_values("flops_per_step").tail(3)
        lines.append("BP at the largest shapes: step time (median), achieved FLOP/s, MFU")
        for _, r in largest.iterrows():
            mfu = f"{r['mfu']:.1%}" if pd.notna(r["mfu"]) else "n/a (no known bf16 peak)"
            lines.append(f"  {r['shape']:<32} {r['step_time_median_s'] * 1e3:9.2f} ms  {r['achieved_flops_per_s'] / 1e12:8.1f} TFLOP/s"
                         f"  MFU {mfu}")
        lines.append("")
    rows = []
    for _, r in ok.iterrows():
        if r["config_id"] not in bp.index:
            continue
        base = bp.loc[r["config_id"]]
        rows.append({"shape": r["shape"], "rule": r["rule"],
                     "time/BP": r["step_time_median_s"] / base["step_time_median_s"],
                     "FLOPs/BP": r["flops_per_step"] / base["flops_per_step"],
                     "peak MiB": r["peak_memory_bytes"] / 2**20})
    if rows:
        table = pd.DataFrame(rows)
        table["time/FLOPs"] = table["time/BP"] / table["FLOPs/BP"]
        lines.append("Step time and executed FLOPs relative to BP, per rule (median over configurations), and the ratio of the two")
        summary = table.groupby("rule", sort=False)[["time/BP", "FLOPs/BP", "time/FLOPs"]].median()
        lines.append(summary.to_string(float_format=lambda v: f"{v:.3f}"))
        lines.append("")
        memory = table.pivot_table(index="shape", columns="rule", values="peak MiB", sort=False)
        keep = [c for c in ("bp", "pepita", "mempepita") if c in memory.columns]
        lines.append(f"Peak memory, MiB ({runs['memory_source'].iloc[0]})")
        lines.append(memory[keep].to_string(float_format=lambda v: f"{v:.0f}"))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/gpu.yaml")
    parser.add_argument("--out", default="benchmarks/gpu")
    parser.add_argument("--limit", type=int, help="run the first N jobs only")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per job")
    parser.add_argument("--no-findings", action="store_true", help="gather and print the headline only")
    parser.add_argument("--in-process", action="store_true",
                        help="run every job in this process (no per-job interpreter and CUDA start; --timeout unused; "
                             "on a CPU the process's peak RSS is then the sweep's, not the job's)")
    parser.add_argument("--largest-first", action="store_true", help="run the largest configurations first")
    parser.add_argument("--time-budget", type=float, help="seconds: start no job after this (a device lease's limit)")
    args = parser.parse_args()
    config = load_config(args.config)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    measured, _ = run_jobs(config, out, args.limit, args.timeout, args.in_process, args.largest_first,
                           args.time_budget)
    print()
    print(headline(pd.read_parquet(measured)))
    if not args.no_findings:
        findings(config, out, measured)
    device_numbers(out)
    return 0


def device_numbers(out: Path) -> None:
    """On a GPU of the catalogue: the step-time model's device numbers measured here (calibrate --device-model,
    bf16) beside the catalogue's cited ones, written to device_model.json for `plan --device-model`."""
    import json

    import torch

    from trainingcost.analytic.steptime.device import DeviceModel, with_measurement
    from trainingcost.config.hardware import match_device
    from trainingcost.measure.device_model import measure_device_model

    if not torch.cuda.is_available():
        return
    data = measure_device_model(torch.device("cuda"), "bf16")
    (out / "device_model.json").write_text(json.dumps(data, indent=1))
    known = match_device(data["device_name"])
    if known is None:
        print(f"device model: {data['device_name']} is not in the catalogue; measured numbers in device_model.json")
        return
    cited, measured = DeviceModel.of(known, "bf16").params, with_measurement(known, data, "bf16", "device_model.json").steptime
    print(f"\nDevice model of {known.name}: catalogue (cited) vs measured here (bf16)")
    for key in ("gemm_ceiling", "flash_forward", "flash_backward", "launch_us"):
        print(f"  {key:15s} {cited[key]:8.3g} {measured[key]:8.3g}")
    print(f"  {'hbm_efficiency':15s} {cited['hbm_efficiency']} {measured['hbm_efficiency']}")


def findings(config: dict, out: Path, measured: Path) -> None:
    """The workflow's last steps without Snakemake: analytic tables of the trained configurations, the device
    calibration, the comparison, the summary and the figures, all under ``out``."""
    from trainingcost.analytic import layer_table
    from trainingcost.analytic.memory import memory_table
    from trainingcost.findings.calibration import calibrate, write_calibration
    from trainingcost.config import sweep_frame
    from trainingcost.pipeline import write_comparison, write_figures
    from trainingcost.io import write_parquet
    from trainingcost.findings.summary import write_summary
    from trainingcost.train.run import resolve_device

    runs = pd.read_parquet(measured)
    configs = sweep_frame(config)
    write_parquet(configs, out / "configs.parquet")
    analytic = config["analytic"]
    write_parquet(layer_table(configs, analytic["rules"], analytic["cost_models"], analytic["wm_mirror_steps"]), out / "analytic.parquet")
    write_parquet(memory_table(configs, analytic["rules"], config["memory"]["dtypes"], config["memory"]["optimizers"]),
                  out / "memory.parquet")
    import torch

    train = config["train"]
    device = resolve_device(train["device"])
    torch.set_num_threads(train["resources"]["threads"])  # as the training jobs ran (the workflow's calibrate does too)
    settings = train["calibration"]
    calibration = calibrate(device, train["dtype"], pd.read_parquet(out / "trace.parquet"), tolerance=settings["tolerance"],
                            time_cap_s=settings["time_cap"], probe=settings["probe"],
                            keep_untrusted=True)  # as the workflow's calibrate: kept, flagged untrusted, on a busy host
    write_calibration(calibration, out / "calibration.json")
    write_comparison(out / "analytic.parquet", out / "memory.parquet", measured, out / "comparison.parquet",
                     out / "rule_ratios.parquet", trace_path=out / "trace.parquet", calibration_path=out / "calibration.json")
    text = write_summary(pd.read_parquet(out / "comparison.parquet"), pd.read_parquet(out / "rule_ratios.parquet"), runs,
                         out / "summary.md")
    write_figures(config, out / "analytic.parquet", out / "comparison.parquet", measured, out / "figures")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
