"""The workflow's steps, as functions from a validated config to files.

Snakemake rules call these and nothing else, so every step can be run and
tested without Snakemake. A workflow config is validated once (:func:`load`),
against the schema with the catalogue's rules and cost models, and the
validated config (defaults filled in) flows to every step.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .analytic import layer_rows, layer_table, vocabulary
from .analytic.catalogue import check_architecture
from .analytic.engine import check_overflow
from .analytic.memory import memory_table
from .config.errors import SizeOverflowError
from .config.model import OPTION_FIELDS
from .config import (
    ConfigError,
    ModelConfig,
    check_task,
    entry_config,
    read_config,
    select_sweep,
    sweep_frame,
    validate_config,
)
from .io import read_metadata, write_parquet, write_text

FIGURES = {
    "flops": "1_flops_predicted_vs_measured",
    "breakdown": "2_layer_breakdown",
    "scaling": "3_cost_scaling",
    "ratios": "4_rule_ratio_vs_length",
    "step_time": "5_step_time_predicted_vs_measured",
    "memory": "6_peak_memory",
    "depth": "7_loss_by_depth",
    "energy": "8_energy",
    "memory_scaling": "9_peak_memory_scaling",
}


def load(config: dict) -> dict:
    """Validate a workflow config once, with every check that needs no job: the schema (the catalogue's rules
    and cost models), every configuration, the training jobs and the figures' names. Returns it with defaults."""
    filled = validate_config(config, vocabulary())
    analytic = filled["analytic"]
    frame = sweep_frame(filled)
    try:  # first: the analytic job would die on it, and every other check prices these sizes
        check_overflow(frame, analytic["cost_models"], 1)
    except SizeOverflowError as exc:
        raise ConfigError(f"sweep {exc.config_name!r}: {exc}") from None
    try:  # the sweep alone fits: the mirror steps are what overflow (WM prices each step's mirror steps)
        check_overflow(frame, analytic["cost_models"], analytic["wm_mirror_steps"])
    except SizeOverflowError:
        raise ConfigError(f"analytic.wm_mirror_steps: {analytic['wm_mirror_steps']} mirror steps per step take WM's "
                          "cost beyond exact 64-bit integers; give fewer") from None
    jobs = train_jobs(filled)
    check_train_memory(jobs, filled["train"])
    check_train_time(jobs, filled["train"])
    check_figures(filled)
    check_plan(filled)
    check_strong_scaling(filled)
    check_scaling_runs(scaling_study(filled), filled["train"])
    check_analytic_memory(frame, analytic)
    return filled


# The analytic job's peak memory per row that layer_rows counts (every layer, phase, rule and cost model before the
# out-of-scope ones drop): measured 161-170 bytes (the process's peak resident growth while layer_table built the
# tables of 1,200 and 2,400 configurations of tests/test_workflow.py's big grid, 9.0M and 18.0M counted rows, 1.46 and
# 2.76 GB; 2026-11-27, this project's 2-core machine).
ANALYTIC_ROW_BYTES = 170
ANALYTIC_BUILD_FACTOR = 1


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_analytic_memory(frame, analytic: dict, memory: int | None = None) -> None:
    """Refuse, before any job, a sweep whose analytic table would not fit this machine's memory (issue 40): its
    rows (layers x phases x rules x cost models of every configuration) at ANALYTIC_ROW_BYTES, the measured peak, against
    80% of the machine's memory."""
    memory = machine_memory() if memory is None else memory
    if not memory:
        return
    rows = layer_rows(frame, analytic["rules"], analytic["cost_models"])
    need = rows * ANALYTIC_ROW_BYTES * ANALYTIC_BUILD_FACTOR
    if need > 0.8 * memory:
        raise ConfigError(f"sweep: {len(frame):,} configurations make about {rows:,} per-layer rows, "
                          f"{need / 1e9:.1f} GB, over this machine's {memory / 1e9:.1f} GB; split the sweep or "
                          "name fewer analytic.rules or cost_models")


# What a training process holds beside its model's tensors: the interpreter, torch, pandas and the package (the
# resident set of `trainingcost train` on the tiny default model: 420-480 MB, this project's 2-core machine, 2026-11-27).
TRAIN_PROCESS_BYTES = 500 * 2**20


def tensor_bytes(table: pd.DataFrame) -> pd.Series:
    """A run's tensors at their peak: the executed model's replayed peak, or where the tape does not replay the step
    (over MAX_TAPE_BLOCKS blocks, or a kind it has no tape of: ``peak`` -1) the hand model's sum of the components
    (``total``, its estimate of the same tensors)."""
    return table["peak"].where(table["peak"] >= 0, table["total"])


def check_train_memory(jobs: list, train: dict, memory: int | None = None) -> None:
    """Refuse, before any job, a CPU training run whose tensors would not fit this machine's memory (issue 40): each
    run's peak from the executed memory model (analytic/memory.py, which the tensor meter matches byte for byte),
    per rank, plus TRAIN_PROCESS_BYTES, against 80% of the machine's memory. On a GPU the device's own memory holds
    the tensors: a run that does not fit ends with status oom, as on the CPU when other work takes the memory."""
    if not jobs or not (train.get("device") == "cpu" or (train.get("device") == "auto" and not _nvidia_gpu_here())):
        return
    memory = machine_memory() if memory is None else memory
    if not memory:
        return
    from .config import configs_frame as frame_of

    configs = {job.config_id: (job.name, job.cfg) for job in jobs}
    rules = sorted({job.rule for job in jobs})
    table = memory_table(frame_of(list(configs.values())), rules, [train["dtype"]], [train["optimizer"]])
    nproc = train["parallel"]["nproc"]
    need = table.assign(need=tensor_bytes(table) * nproc + TRAIN_PROCESS_BYTES * nproc)
    wanted = {(job.config_id, job.rule) for job in jobs}
    need = need[[(c, r) in wanted for c, r in zip(need["config_id"], need["rule"])]]
    worst = need.loc[need["need"].idxmax()]
    if worst["need"] > 0.8 * memory:
        name = configs[worst["config_id"]][0]
        cfg = configs[worst["config_id"]][1]
        raise ConfigError(f"train.select: {name[:20]!r} under {worst['rule']} needs {worst['need'] / 1e9:.4g} GB (batch "
                          f"{cfg.batch}, seq_len {cfg.seq_len}, layers {cfg.enc_layers + cfg.dec_layers}, d_model "
                          f"{cfg.d_model}, d_ff {cfg.d_ff}, vocab {cfg.vocab}{', ' + str(nproc) + ' ranks' if nproc > 1 else ''}"
                          f"): over 80% of the {memory / 1e9:.3g} GB here")


def check_command_train_memory(cfg, rule: str, dtype: str, optimizer: str, nproc: int, device: str,
                               corpus: str | None = None, memory: int | None = None) -> None:
    """``trainingcost train`` on the command line, checked as the workflow checks its jobs (issue 66, N8): on the CPU,
    the run's tensors (the executed memory model's peak, per rank), the process and the corpus (read whole, twice
    while loading) against 80% of this machine's memory, before torch is imported."""
    if not (device == "cpu" or (device == "auto" and not _nvidia_gpu_here())):
        return
    memory = machine_memory() if memory is None else memory
    if not memory:
        return
    from .config import configs_frame as frame_of

    table = memory_table(frame_of([("", cfg)]), [rule], [dtype], [optimizer])
    text = 2 * Path(corpus).stat().st_size if corpus else 0
    need = (float(tensor_bytes(table).iloc[0]) + TRAIN_PROCESS_BYTES) * nproc + text
    if need > 0.8 * memory:
        raise ConfigError(f"batch, seq_len: this model under {rule} needs {need / 1e9:.4g} GB (batch {cfg.batch}, seq_len "
                          f"{cfg.seq_len}, layers {cfg.enc_layers + cfg.dec_layers}, d_model {cfg.d_model}"
                          f"{', ' + str(nproc) + ' ranks' if nproc > 1 else ''}{', the corpus' if text else ''}): over "
                          f"80% of the {memory / 1e9:.3g} GB here")


# The most FLOP/s one CPU core could do: 5 GHz x 64 fp32 FLOPs a cycle (two AVX-512 FMA units of 16 lanes, 2 FLOPs
# each; Intel 64 and IA-32 Architectures Optimization Reference Manual, "Intel AVX-512"). No CPU core reaches it: a
# run's time at it is a lower bound.
CPU_CORE_CEILING_FLOPS = 5e9 * 64


def check_train_time(jobs: list, train: dict) -> None:
    """Refuse, before any job, a training run that could not finish within its own time limit
    (``train.resources.runtime``, the minutes a cluster grants each job): its executed FLOPs per step (analytic, the
    FlopCounterMode-exact model) times ``train.steps`` at a ceiling no device reaches: on the CPU every core at
    CPU_CORE_CEILING_FLOPS, on a GPU the fastest dense peak of the hardware catalogue for the dtype. A lower bound of
    the run's time, so what it refuses cannot run in time anywhere."""
    if not jobs:
        return
    from .analytic import phase_totals
    from .config import configs_frame as frame_of
    from .config.hardware import devices

    cpu = train.get("device") == "cpu" or (train.get("device") == "auto" and not _nvidia_gpu_here())
    if cpu:
        ceiling, where = (os.cpu_count() or 1) * CPU_CORE_CEILING_FLOPS, f"{os.cpu_count() or 1} CPU cores' ceiling"
    else:
        peaks = {d.label: d.peak(train["dtype"]) or 0 for d in devices().values()}
        label = max(peaks, key=peaks.get)
        ceiling, where = peaks[label], f"{label}'s {train['dtype']} peak"
    ceiling *= train["parallel"]["nproc"]
    configs = {job.config_id: (job.name, job.cfg) for job in jobs}
    ids = list(configs)
    rules = sorted({job.rule for job in jobs})
    totals = phase_totals(frame_of(list(configs.values())), rules, ["executed"], train.get("wm_mirror_steps", 1))
    limit = train["resources"]["runtime"] * 60
    for job in jobs:
        i = ids.index(job.config_id)
        flops = sum(int(value[1][i]) for (model, rule, _), value in totals.items() if rule == job.rule)
        bound = train["steps"] * flops / ceiling
        if bound > limit:
            cfg = job.cfg
            raise ConfigError(f"train.steps: {train['steps']:,} steps of {job.name[:20]!r} under {job.rule} (seq_len "
                              f"{cfg.seq_len}, batch {cfg.batch}, layers {cfg.enc_layers + cfg.dec_layers}, d_model "
                              f"{cfg.d_model}) take {bound / 60:,.0f}+ min at {where}; train.resources.runtime "
                              f"{train['resources']['runtime']} min")


def check_scaling_runs(study, train: dict) -> None:
    """The scaling study's largest run (its widest and deepest decoder), under each of its rules, checked as the
    training jobs are (exact 64-bit costs, this machine's memory, ``train.resources.runtime``, which its jobs ask
    for too), before any job: one line naming the study's fields."""
    if study is None:
        return
    from .config import configs_frame as frame_of

    cfg = study.model(max(study.widths), max(study.depths))
    name = f"width {max(study.widths)}, depth {max(study.depths)}"
    runs = {**train, "steps": study.run_steps, "device": study.device, "dtype": study.dtype,
            "optimizer": study.optimizer, "parallel": {**train["parallel"], "nproc": 1}}
    frame = frame_of([(name, cfg)])
    jobs = [TrainJob(frame["config_id"].iloc[0], rule, 0, name, cfg, "lm") for rule in study.rules]
    try:
        check_overflow(frame, ["executed"], 1)
        check_train_memory(jobs, runs)
        check_train_time(jobs, runs)
    except ConfigError as exc:  # the train section's words, shortened: the run is the study's, named once
        text = str(exc)
        need = re.search(r"under (\S+) needs (\S+ GB).*(over 80% of the \S+ GB here)", text)
        time = re.search(r"under (\S+) .*take (\S+ min at [^;]+); (train.resources.runtime \S+ min)", text)
        if need:
            why = f"under {need.group(1)} needs {need.group(2)}, {need.group(3)}"
        elif time:
            why = f"{study.run_steps:,} steps under {time.group(1)} take {time.group(2)}; {time.group(3)}"
        else:
            reach = re.search(r"cost (\S+ FLOPs), beyond exact 64-bit integers", text)
            why = (f"a step costs {reach.group(1)} (seq_len {cfg.seq_len}, batch {cfg.batch}), beyond exact 64-bit "
                   "integers" if reach else text.split(": ", 1)[-1])
        raise ConfigError(f"scaling: its largest run ({name}): {why}") from None


def _nvidia_gpu_here() -> bool:
    """Whether this machine shows an NVIDIA GPU (its driver's proc folder), without importing torch."""
    return Path("/proc/driver/nvidia/gpus").is_dir()


def load_file(path: str | Path) -> dict:
    return load(read_config(path))


def as_check_reads(config: dict, files, overrides: dict | None = None) -> dict:
    """The workflow's config as ``trainingcost check`` reads it: each of Snakemake's config ``files`` read again by
    :func:`read_config` (a key given twice refused, not the last one taken silently; ``1e-3`` a number, as the
    schema wants), merged in order as Snakemake merges them, then the command line's ``--config`` ``overrides``.
    Without files (a config given as a dict), ``config`` itself."""
    if not files:
        return config

    def merge(base: dict, top: dict) -> dict:
        out = dict(base)
        for key, value in top.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    merged: dict = {}
    for path in files:
        merged = merge(merged, read_config(path))
    return merge(merged, overrides or {})


def write_schema(path: str | Path) -> str:
    """The schema with the catalogue's rules and cost models, written out (for snakemake.utils.validate)."""
    import yaml

    from .config.schema import schema

    write_text(yaml.safe_dump(schema(vocabulary()), sort_keys=False), path)
    return str(Path(path).resolve())


@contextmanager
def logged(path: str | Path):
    """A workflow step's log: how long it took, and its traceback if it fails.

    It writes to its own file and never redirects sys.stdout: Snakemake runs local `run:` jobs in
    threads, and interleaved redirections restore one another's closed files (the SLURM sweep's
    onsuccess print then failed with "I/O operation on closed file").
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(path, "w") as log:
        try:
            yield log
        except BaseException:
            traceback.print_exc(file=log)
            raise
        print(f"done in {time.perf_counter() - start:.2f} s", file=log)


def write_configs(config: dict, out: str | Path) -> pd.DataFrame:
    frame = sweep_frame(config)
    write_parquet(frame, out)
    return frame


def write_analytic(config: dict, configs_path: str | Path, costs_out: str | Path, memory_out: str | Path) -> None:
    from .config.errors import read_table

    from .config.model import config_from_row
    from .config.sweep import CONFIG_COLUMNS

    what = "the configurations table (trainingcost configs)"
    # the columns of every configuration (a table of older or default-only configurations leaves later options out)
    configs = read_table(configs_path, "--configs", ("config_id", "arch", "d_model", "heads", "d_ff", "enc_layers",
                                                     "dec_layers", "seq_len", "tgt_len", "vocab", "batch"), what)
    for i, row in enumerate(configs[[c for c in CONFIG_COLUMNS if c in configs]].to_dict("records")):
        try:  # every row must be the configuration its config_id names: a changed or wrong-typed value is not
            same = config_from_row(row).config_id == row["config_id"]
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            raise ConfigError(f"--configs: {configs_path}: row {i}: {str(exc)[:80]}; give {what}") from None
        if not same:
            raise ConfigError(f"--configs: {configs_path}: row {i}'s fields do not give its config_id "
                              f"{str(row['config_id'])[:12]!r}; give {what}")
    analytic, memory = config["analytic"], config["memory"]
    costs = layer_table(configs, analytic["rules"], analytic["cost_models"], analytic["wm_mirror_steps"])
    write_parquet(costs, costs_out)
    write_parquet(memory_table(configs, analytic["rules"], memory["dtypes"], memory["optimizers"]), memory_out)


# ---------------------------------------------------------------------------
# Measured training runs


@dataclass(frozen=True)
class TrainJob:
    """One measured run: a configuration under one rule with one seed."""

    config_id: str
    rule: str
    seed: int
    name: str
    cfg: ModelConfig
    task: str

    @property
    def run_dir(self) -> str:
        return run_dir(self.config_id, self.rule, self.seed)


def run_dir(config_id: str, rule: str, seed) -> str:
    return f"results/runs/{config_id}/{rule}/seed{seed}"


RUN_FILES = ("measured.parquet", "steps.parquet", "trace.parquet")
GATHERED = ("results/tables/measured.parquet", "results/tables/steps.parquet", "results/tables/trace.parquet")


def complete_parquet(path: Path) -> bool:
    """Whether ``path`` ends as a parquet file ends (its footer's length, then ``PAR1``, and ``PAR1`` at the start):
    a file cut short by a full disk or a kill, or one that is not parquet at all, does not. Reads 12 bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size < 12 or head != b"PAR1":
                return False
            f.seek(size - 8)
            tail = f.read(8)
    except OSError:
        return False
    footer = int.from_bytes(tail[:4], "little")
    return tail[4:] == b"PAR1" and footer <= size - 12


RETRIES = "results/runs/retries.txt"


def repair_results(jobs: list, remove: bool = True, root: str | Path = ".") -> list[str]:
    """Make a rerun of the workflow redo what is broken or was deleted under ``results/`` (docs/failures.md).

    - A parquet table that is not whole (truncated by a full disk or a kill, or overwritten by something else) is
      removed, so that the rule that writes it runs again instead of its readers failing on it.
    - When a training run's files are missing (its folder deleted to train it again, or removed above) while the
      gathered tables exist, a line is added to ``RETRIES``, an input of the gathering rule: Snakemake then sees the
      gathering out of date, trains the missing run first and gathers again, and remakes what reads the gathered
      tables. Without it, Snakemake keeps them (the runs still present are unchanged, by checksum), and a missing run
      is an intermediate file it has no reason to make: "Nothing to be done". The file is written only when something
      is missing, so a finished sweep stays finished.

    ``remove`` False (a dry run, -n) removes nothing and says what a run would redo. Returns one line per thing found.
    """
    root = Path(root)
    lines = []
    retries = root / RETRIES  # an input of the gathering rule only once it exists (train.smk): a parse creates nothing
    cut = set()
    for path in sorted((root / "results").rglob("*.parquet")):
        if path.is_file() and not complete_parquet(path):
            rel = path.relative_to(root)
            cut.add(rel)
            if remove:
                path.unlink(missing_ok=True)
                lines.append(f"{rel}: not a whole parquet file (cut short?); removed, to be made again")
            else:
                lines.append(f"{rel}: not a whole parquet file (cut short?); a run without -n removes and makes it again")
    missing = [job.run_dir for job in jobs if not all((root / job.run_dir / name).is_file()
                                                      and Path(job.run_dir, name) not in cut for name in RUN_FILES)]
    gathered = [table for table in GATHERED if (root / table).is_file() or Path(table) in cut]
    if gathered and (missing or any(Path(table) in cut for table in gathered)):
        if remove:  # a dry run (-n) writes nothing (issue 66, N4)
            try:
                retries.parent.mkdir(parents=True, exist_ok=True)
                with open(retries, "a") as f:
                    f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} gathered again: {len(missing)} run(s) missing "
                            f"{' '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}\n")
            except OSError as exc:
                lines.append(f"{RETRIES}: cannot be written ({exc.strerror}); the gathered tables are not remade")
        if missing:
            lines.append(f"{len(missing)} training run(s) missing (e.g. {missing[0]}): they are trained"
                         + (" and gathered again" if remove else " and gathered again by a run without -n"))
    return lines


def job_task(train: dict, cfg: ModelConfig) -> str:
    if train["task"] != "auto":
        return train["task"]
    return "classify" if cfg.classes else "lm"


def train_jobs(config: dict) -> list[TrainJob]:
    """Every (configuration, rule, seed) of ``train.select`` of a validated config, checked before any job runs."""
    train = config["train"]
    if train["steps"] < train["warmup"] + 2:
        raise ConfigError(
            f"train.steps: measuring needs at least warmup + 2 = {train['warmup'] + 2} steps "
            f"(warm-up, one FLOP-counted step, timed steps); got {train['steps']}"
        )
    nproc = train["parallel"]["nproc"]
    cores = os.cpu_count() or 1
    # more ranks than cores on a CPU run (or, device auto, more than any GPU node holds: 8) cannot be one node's job
    if nproc > cores and (train.get("device") == "cpu" or (train.get("device") == "auto" and nproc > GPUS_PER_NODE)):
        raise ConfigError(f"train.parallel.nproc: {nproc} ranks on this machine's {cores} core{'s' if cores > 1 else ''}: "
                          "each rank is a process of its own on one node; give at most "
                          f"{cores} here (or check the config on the node that runs it)")
    jobs = []
    for name, cfg in select_sweep(config["sweep"], train["select"], "train.select"):
        task = job_task(train, cfg)
        try:
            check_task(task, cfg)
        except ConfigError as error:
            raise ConfigError(f"train.task: {task} cannot train sweep entry {name!r} ({cfg.config_id}): {error}") from None
        for rule in train["rules"]:
            check_architecture(rule, cfg, f"train.rules: sweep entry {name!r} ({cfg.config_id})")
            if train["parallel"]["nproc"] > 1 or train["parallel"]["replicate"] > 1:  # refused before any job
                from .analytic.comm import check_parallel, check_parallel_model

                try:
                    check_parallel(rule, train["parallel"]["parallel"], train["parallel"]["nproc"],
                                   train["parallel"]["backend"], train["parallel"]["replicate"])
                    check_parallel_model(cfg, train["parallel"]["parallel"], train["parallel"]["nproc"])
                except ConfigError as error:
                    raise ConfigError(f"train.parallel.{error}") from None
            for seed in train["seeds"]:
                jobs.append(TrainJob(cfg.config_id, rule, seed, name, cfg, task))
    return jobs


GPUS_PER_NODE = 8  # the most GPUs of one node in the hardware catalogue's systems (config/clusters.yaml)


def train_command(job: TrainJob, config: dict) -> list[str]:
    """The ``trainingcost train`` arguments of one job (model flags, run settings, output directory)."""
    cfg, train = job.cfg, config["train"]
    if cfg.arch == "encoder-decoder":
        depth = ["--enc-layers", cfg.enc_layers, "--dec-layers", cfg.dec_layers, "--tgt-len", cfg.tgt_len]
    else:
        depth = ["--layers", cfg.layers]
    args = [
        "train", "--arch", cfg.arch, *depth, "--d-model", cfg.d_model, "--heads", cfg.heads,
        "--d-ff", cfg.d_ff, "--vocab", cfg.vocab, "--seq-len", cfg.seq_len, "--batch", cfg.batch,
        *(["--classes", cfg.classes] if cfg.classes else []),
        "--task", job.task, "--rule", job.rule, "--seed", job.seed, "--steps", train["steps"], "--warmup", train["warmup"],
        "--dtype", train["dtype"], "--device", train["device"], "--optimizer", train["optimizer"], "--lr", train["lr"],
        "--mirror-steps", config["analytic"]["wm_mirror_steps"], "--eval-batches", train["eval_batches"],
        "--threads", train["resources"]["threads"], "--out-dir", job.run_dir,
    ]
    if train["parallel"]["nproc"] > 1:  # one launcher starts the ranks on the job's node (docs/distributed.md)
        args += ["--nproc", train["parallel"]["nproc"], "--parallel", train["parallel"]["parallel"],
                 "--backend", train["parallel"]["backend"]]
        if train["parallel"]["replicate"] > 1:
            args += ["--replicate", train["parallel"]["replicate"]]
    return [str(a) for a in args] + option_flags(cfg)


def option_flags(cfg) -> list[str]:
    """The command-line flags of a configuration's architecture options (those away from their defaults)."""
    flags = []
    for name, value in cfg.options().items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            flags += [flag, str(value)]
    return flags


def config_hash(config: dict) -> str:
    """A stable hash of the validated workflow config (defaults filled in)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def gather_runs(measured: list, steps: list, measured_out: str | Path, steps_out: str | Path,
                traces: list = (), trace_out: str | Path | None = None) -> tuple[int, dict]:
    """Concatenate every run's tables into one each; returns (runs, {status: count})."""
    frames = [read_run_table(p) for p in measured]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    step_frames = [read_run_table(p) for p in steps]
    step_table = pd.concat([f for f in step_frames if len(f)], ignore_index=True) if step_frames else pd.DataFrame()
    metadata = _gathered_metadata(measured)
    write_parquet(table, measured_out, metadata)
    write_parquet(step_table, steps_out, metadata)
    if trace_out is not None:
        every = [read_run_table(p) for p in traces]
        trace_frames = [f for f in every if len(f)]
        # no run traced a step (all failed): an empty table that keeps the columns, which calibrate reads (issue 66, N9)
        empty = every[0].iloc[:0] if every else pd.DataFrame()
        write_parquet(pd.concat(trace_frames, ignore_index=True) if trace_frames else empty, trace_out, metadata)
    statuses = {}
    for frame in frames:
        status = str(frame["status"].iloc[0])
        statuses[status] = statuses.get(status, 0) + 1
    return len(frames), statuses


def read_run_table(path) -> pd.DataFrame:
    """One run's table; a table that cannot be read although its footer is whole (corrupted in the middle, issue 66,
    N10: repair_results catches only a cut-short file) takes its run's tables with it, so that the next run of the
    workflow trains it again, and stops the gathering with one line saying so."""
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a damaged file
        folder = Path(path).parent
        for name in RUN_FILES:
            (folder / name).unlink(missing_ok=True)
        raise ConfigError(f"{path}: not a readable parquet table ({type(exc).__name__}); its run's tables are removed: "
                          "run the workflow again to train it") from None


def _gathered_metadata(paths: list) -> dict:
    """The runs' metadata: a key shared by every run keeps its value; one that differs lists the values."""
    values: dict[str, list] = {}
    for path in paths:
        for key, value in read_metadata(path).items():
            values.setdefault(key, [])
            if value not in values[key]:
                values[key].append(value)
    return {key: found[0] if len(found) == 1 else ";".join(found) for key, found in values.items()}


# ---------------------------------------------------------------------------
# Findings: comparison tables, the summary and the figures, from the gathered tables


def check_figures(config: dict) -> None:
    """Every name in ``figures`` refers to the sweep (ConfigError naming the field otherwise), before any job runs."""
    settings = config["figures"]
    entry_config(config, settings["breakdown"], "figures.breakdown")
    entry_config(config, settings["scaling"]["base"], "figures.scaling.base")
    select_sweep(config["sweep"], settings["depth"], "figures.depth")


def figure_names(config: dict) -> list[str]:
    """The figures this config produces (the energy figure only where runs measure energy)."""
    names = [k for k in FIGURES if k != "energy"]
    if config["figures"]["energy"]:
        names.append("energy")
    return names


def write_comparison(analytic_path, memory_path, measured_path, comparison_out, ratios_out,
                     comparison_csv=None, ratios_csv=None, trace_path=None, calibration_path=None) -> None:
    """The two tables as parquet; optionally, for the report, the per-step comparison and the measured
    configurations' ratios as CSV. With the runs' traces and a calibration, step and phase rows get the
    predicted time (findings/predictor.py) and the executed rows the traced bytes and ops."""
    from .findings.calibration import read_calibration
    from .findings.comparison import add_trace_columns, comparison_table, other_device_runs, rule_ratios

    analytic = pd.read_parquet(analytic_path)
    measured = pd.read_parquet(measured_path)
    memory = pd.read_parquet(memory_path)
    comparison = comparison_table(analytic, measured, memory)
    if trace_path and len(comparison):
        trace = pd.read_parquet(trace_path)
        calibration = read_calibration(calibration_path) if calibration_path else None
        other = other_device_runs(measured, calibration)
        if len(other):
            print(f"comparison: {len(other)} run{'s' if len(other) > 1 else ''} on "
                  f"{', '.join(sorted(set(other['device_name'])))}, not the calibrated {calibration['device_name']}: "
                  "no predicted time for them (calibrate on each device, or keep a sweep on one GPU model)", flush=True)
        comparison = add_trace_columns(comparison, trace, calibration, other)
    ratios = rule_ratios(analytic, measured)
    write_parquet(comparison, comparison_out)
    write_parquet(ratios, ratios_out)
    if comparison_csv:
        steps = comparison[comparison["granularity"] == "step"].drop(columns=["granularity", "layer", "phase"])
        write_text(steps.to_csv(index=False, float_format="%.6g"), comparison_csv)
    if ratios_csv:
        measured_ids = set(measured["config_id"])
        write_text(ratios[ratios["config_id"].isin(measured_ids)].to_csv(index=False, float_format="%.6g"), ratios_csv)


def write_summary(comparison_path, ratios_path, measured_path, out, scaling_path=None, calibration_path=None,
                  comm_path=None, timed_at_once=None) -> str:
    """``summary.md`` from the comparison, ratio and measured tables, the scaling study's section if given, and the
    device calibration's trust (one that did not converge on a busy machine is said: "No trusted calibration")."""
    import json

    from .findings.summary import write_summary as summarise

    extra = "\n".join(Path(p).read_text() for p in (scaling_path, comm_path) if p) or None
    calibration = json.loads(Path(calibration_path).read_text()) if calibration_path else None
    return summarise(pd.read_parquet(comparison_path), pd.read_parquet(ratios_path), pd.read_parquet(measured_path), out,
                     extra, calibration, timed_at_once)


def write_comm(configs_path, measured_path, table_out, figure_out, section_out, calibration_path=None) -> str:
    """The data-parallel sweep's communication findings (findings/comm.py): ``comm.parquet``, its figure (PNG and
    PDF) and the summary's section. ``calibration_path``: a ``calibrate --collectives`` JSON, for the predicted
    seconds (absent: those columns stay empty)."""
    from .findings.comm import comm_figure, comm_section, comm_table
    from .findings.figures import save, style

    calibration = json.loads(Path(calibration_path).read_text()) if calibration_path else None
    table = comm_table(pd.read_parquet(measured_path), pd.read_parquet(configs_path), calibration)
    write_parquet(table, table_out)
    style()
    save(comm_figure(table), figure_out)
    section = comm_section(table)
    write_text(section, section_out)
    return section


def describe(cfg: ModelConfig) -> str:
    depth = cfg.blocks
    options = ", ".join(f"{k} {v}" for k, v in cfg.options().items())  # on a line of their own
    return (f"{cfg.arch}, {depth} block{'s' if depth != 1 else ''}, d_model {cfg.d_model}, {cfg.seq_len} tokens, "
            f"batch {cfg.batch}" + (f";\n{options}" if options else ""))


def write_figures(config: dict, analytic_path, comparison_path, measured_path, out_dir,
                  calibration_path=None) -> list[Path]:
    """Every figure of :data:`FIGURES` that a validated config asks for, as PNG and PDF under ``out_dir``; with the
    device calibration, figure 5 claims no accuracy where the summary claims none (a calibration not trusted)."""
    from .config import configs_frame
    from .findings import figures as F
    from .findings.comparison import runs_of

    settings = config["figures"]
    analytic = pd.read_parquet(analytic_path)
    comparison = pd.read_parquet(comparison_path)
    measured = pd.read_parquet(measured_path)
    runs = runs_of(measured[measured["status"] == "ok"]) if len(measured) else pd.DataFrame()
    if len(runs):
        options = [c for c in OPTION_FIELDS if c in measured]  # the figures' labels name them
        extra = measured.groupby(["config_id", "rule", "seed"], as_index=False)[
            ["heads", "vocab", "classes", "val_loss", "val_accuracy", "energy_per_step_j", "steps", *options]].first()
        runs = runs.merge(extra, on=["config_id", "rule", "seed"])
    out_dir = Path(out_dir)
    F.style()
    written: list[Path] = []

    def save(fig, key):
        written.extend(F.save(fig, out_dir / f"{FIGURES[key]}.png"))

    save(F.predicted_vs_measured_flops(comparison) if len(runs) else
         F.nothing_measured("FLOPs, every cost model against the measurement"), "flops")
    breakdown = entry_config(config, settings["breakdown"], "figures.breakdown")
    breakdown_rows = analytic[analytic["config_id"] == breakdown.config_id]
    if breakdown_rows.empty:
        breakdown_rows = layer_table(configs_frame([("", breakdown)]), cost_models=["paper", "executed"])
    save(F.layer_breakdown(breakdown_rows, breakdown.config_id, describe(breakdown)), "breakdown")
    base = entry_config(config, settings["scaling"]["base"], "figures.scaling.base")
    axes = {"seq_len": settings["scaling"]["seq_len"], "d_model": settings["scaling"]["d_model"]}
    curves = F.scaling_curves(base, axes)
    save(F.scaling(curves, runs, base, describe(base)), "scaling")
    save(F.ratio_to_bp(curves, runs, base, describe(base)), "ratios")
    if len(runs):
        calibration = json.loads(Path(calibration_path).read_text()) if calibration_path else {}
        save(F.step_time(comparison, calibration.get("trusted", True) is not False), "step_time")
        save(F.peak_memory(comparison, runs), "memory")
    else:  # every run failed: the figures say so, and the report still has them (issue 66, N9)
        save(F.nothing_measured("step time, predicted against measured"), "step_time")
        save(F.nothing_measured("peak memory, the executed model against the meter"), "memory")
    trained = runs if len(runs) else pd.DataFrame({"dtype": ["fp32"], "optimizer": ["sgd"]})
    depth_base = entry_config(config, settings["depth"][0], "figures.depth") if settings["depth"] else base
    depths = sorted({*range(1, 9), int(depth_base.enc_layers or depth_base.dec_layers)})
    memory_curves = F.memory_curves(base, axes["seq_len"], depth_base, depths, str(trained["dtype"].mode()[0]),
                                    str(trained["optimizer"].mode()[0]))
    save(F.memory_scaling(memory_curves, runs, describe(base)), "memory_scaling")
    depth_runs = runs
    if settings["depth"]:
        chosen = {cfg.config_id for _, cfg in select_sweep(config["sweep"], settings["depth"], "figures.depth")}
        depth_runs = runs[runs["config_id"].isin(chosen)]
        if depth_runs.empty:  # none of those entries was trained (or all failed): show every run instead
            depth_runs = runs
    unfinished = measured.loc[measured["status"] != "ok", ["rule", "status"]].drop_duplicates() if len(measured) else None
    unfinished = {} if unfinished is None else unfinished.groupby("rule")["status"].agg(lambda s: "/".join(sorted(set(s))))
    unfinished = {rule: status for rule, status in dict(unfinished).items() if rule not in set(depth_runs["rule"])}
    if len(runs):
        save(F.loss_by_depth(depth_runs, int(runs["steps"].max()), unfinished), "depth")
    else:
        save(F.nothing_measured("validation loss by depth"), "depth")
    if settings["energy"]:
        save(F.energy(runs) if len(runs) else F.nothing_measured("energy per step"), "energy")
    return written


# ---------------------------------------------------------------------------
# The workflow's plan step


from .pipeline_plan import (  # noqa: F401  (the plan's steps, re-exported for the Snakefile and callers)
    build_plan, build_strong_scaling, check_plan, check_strong_scaling, figure_config, plan_configs, plan_gpu,
    section_spec, write_plan, write_strong_scaling,
)


def step_strong_scaling(filled: dict, output, log) -> None:
    with logged(log[0]):
        write_strong_scaling(filled, output.table, output.layouts, output.figure)



# ---------------------------------------------------------------------------
# The scaling study (config/scaling.py; docs/learning_rules.md, "Cost to a quality")


def scaling_study(config: dict):
    """The validated config's scaling study (checked against the catalogue), or None without one."""
    from .analytic import rule_names
    from .config.scaling import study_from_config

    study = study_from_config(config)
    if study is not None:
        study.check(rule_names())
    return study


def write_study(config: dict, out) -> None:
    write_text(scaling_study(config).to_json() + "\n", out)


def gather_scaling(run_paths, search_paths, scaling_out, lr_out, study_path) -> tuple[int, int]:
    """Stack every (rule, seed) run's curves and every rule's search (a study with one learning rate searched
    nothing: one row per rule says so); (rows, runs not ok)."""
    from .config.scaling import ScalingStudy
    from .curves import search as search_table

    scaling = pd.concat([pd.read_parquet(p) for p in run_paths], ignore_index=True)
    if search_paths:
        search = pd.concat([pd.read_parquet(p) for p in search_paths], ignore_index=True)
    else:
        study = ScalingStudy.read(study_path)
        search = pd.concat([search_table(study, rule) for rule in study.rules], ignore_index=True)
    for column in ("flops", "flops_per_step"):
        scaling[column] = scaling[column].astype("Int64")
    write_parquet(scaling, scaling_out)
    write_parquet(search, lr_out)
    runs = scaling.drop_duplicates(["config_id", "rule", "seed"])
    return len(scaling), int((runs["status"] != "ok").sum())


def write_frontiers(scaling_path, study_path, out) -> pd.DataFrame:
    from .config.scaling import ScalingStudy
    from .findings.scaling import frontiers_table

    study = ScalingStudy.read(study_path)
    table = frontiers_table(pd.read_parquet(scaling_path), study.bootstrap, study.target_compute_fraction)
    write_parquet(table, out, {"headline_compute": str(table.attrs["headline_compute"])})
    return table


def read_frontiers(path) -> pd.DataFrame:
    table = pd.read_parquet(path)
    table.attrs["headline_compute"] = float(read_metadata(path).get("headline_compute", "nan"))
    return table


def write_scaling_findings(scaling_path, frontiers_path, lr_path, summary_out, figure_dir) -> list[Path]:
    """The study's section of the summary (``summary_out``, markdown) and its figures (PNG and PDF)."""
    from .findings.figures import RULE_LABELS, save
    from .findings.scaling import summary_section
    from .findings.scaling_figures import SCALING_FIGURES, scaling_figures

    scaling, frontiers, lr = pd.read_parquet(scaling_path), read_frontiers(frontiers_path), pd.read_parquet(lr_path)
    write_text(summary_section(frontiers, scaling, lr, RULE_LABELS), summary_out)
    written = []
    for name, fig in scaling_figures(scaling, frontiers).items():
        written += save(fig, Path(figure_dir) / f"{SCALING_FIGURES[name]}.png")
    return written


# ---------------------------------------------------------------------------
# The workflow's rules call these: each rule's `run:` is one line (snakemake --lint; workflow/rules/*.smk)


def step_comparison(input, output, log) -> None:
    with logged(log[0]):
        write_comparison(input.analytic, input.memory, input.measured, output.comparison, output.ratios,
                         output.comparison_csv, output.ratios_csv, input.trace, input.calibration)


def step_summary(input, output, log, timed_at_once: int) -> None:
    with logged(log[0]):
        write_summary(input.comparison, input.ratios, input.measured, output[0], input.scaling or None,
                      input.calibration, input.comm or None, timed_at_once)


def step_comm(input, output, log) -> None:
    with logged(log[0]):
        write_comm(input.configs[0], input.measured, output.table, output.figure, output.section,
                   input.calibration[0] if input.calibration else None)


def step_plan(filled: dict, output, log, names) -> None:
    with logged(log[0]):
        write_plan(filled, output.table, output.curves, dict(zip(names, output.figures)))


def step_measured(input, output, log) -> None:
    with logged(log[0]):
        runs, statuses = gather_runs(input.measured, input.steps, output.measured, output.steps, input.traces,
                                     output.trace)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    print(f"measured: {runs} runs ({counts}) -> {output.measured}")


def step_scaling_table(input, output, log) -> None:
    with logged(log[0]):
        rows, bad = gather_scaling(input.runs, input.searches, output.scaling, output.lr, input.study[0])
    print(f"scaling: {rows} evaluations, {bad} runs not ok -> {output.scaling}")
