"""The workflow's steps as functions from a validated config to files.

Snakemake rules call these and nothing else, so every step can be run and
tested without Snakemake.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .analytic import layer_table
from .analytic.memory import memory_table
from .config import ConfigError, config_id, select_sweep, sweep_frame, validate_config
from .io import write_parquet


def write_configs(config: dict, out: str | Path) -> pd.DataFrame:
    frame = sweep_frame(validate_config(config))
    write_parquet(frame, out)
    return frame


def write_analytic(config: dict, configs_path: str | Path, costs_out: str | Path, memory_out: str | Path) -> None:
    config = validate_config(config)
    configs = pd.read_parquet(configs_path)
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
    cfg: dict
    task: str

    @property
    def run_dir(self) -> str:
        return run_dir(self.config_id, self.rule, self.seed)


def run_dir(config_id: str, rule: str, seed) -> str:
    return f"results/runs/{config_id}/{rule}/seed{seed}"


def job_task(train: dict, cfg: dict) -> str:
    if train["task"] != "auto":
        return train["task"]
    return "classify" if cfg["classes"] else "lm"


def train_jobs(config: dict) -> list[TrainJob]:
    """Every (configuration, rule, seed) of ``train.select``, checked before any job runs."""
    from .data import check_task  # torch is imported only when there are runs to plan

    config = validate_config(config)
    train = config["train"]
    if train["steps"] < train["warmup"] + 2:
        raise ConfigError(
            f"train.steps: measuring needs at least warmup + 2 = {train['warmup'] + 2} steps "
            f"(warm-up, one FLOP-counted step, timed steps); got {train['steps']}"
        )
    jobs = []
    for name, cfg in select_sweep(config["sweep"], train["select"], "train.select"):
        task = job_task(train, cfg)
        try:
            check_task(task, cfg)
        except ConfigError as error:
            raise ConfigError(f"train.task: {task} cannot train sweep entry {name!r} ({config_id(cfg)}): {error}") from None
        for rule in train["rules"]:
            for seed in train["seeds"]:
                jobs.append(TrainJob(config_id(cfg), rule, seed, name, cfg, task))
    return jobs


def train_command(job: TrainJob, config: dict) -> list[str]:
    """The ``trainingcost train`` arguments of one job (model flags, run settings, output directory)."""
    cfg, train = job.cfg, config["train"]
    if cfg["arch"] == "encoder-decoder":
        depth = ["--enc-layers", cfg["enc_layers"], "--dec-layers", cfg["dec_layers"], "--tgt-len", cfg["tgt_len"]]
    else:
        depth = ["--layers", cfg["enc_layers"] or cfg["dec_layers"]]
    args = [
        "train", "--arch", cfg["arch"], *depth, "--d-model", cfg["d_model"], "--heads", cfg["heads"],
        "--d-ff", cfg["d_ff"], "--vocab", cfg["vocab"], "--seq-len", cfg["seq_len"], "--batch", cfg["batch"],
        *(["--classes", cfg["classes"]] if cfg["classes"] else []),
        "--task", job.task, "--rule", job.rule, "--seed", job.seed, "--steps", train["steps"], "--warmup", train["warmup"],
        "--dtype", train["dtype"], "--device", train["device"], "--optimizer", train["optimizer"], "--lr", train["lr"],
        "--mirror-steps", config["analytic"]["wm_mirror_steps"], "--eval-batches", train["eval_batches"],
        "--threads", train["resources"]["threads"], "--out-dir", job.run_dir,
    ]
    return [str(a) for a in args]


def config_hash(config: dict) -> str:
    """A stable hash of the validated workflow config (defaults filled in)."""
    import hashlib
    import json

    text = json.dumps(validate_config(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def gather_runs(measured: list, steps: list, measured_out: str | Path, steps_out: str | Path) -> tuple[int, dict]:
    """Concatenate every run's tables into one each; returns (runs, {status: count})."""
    frames = [pd.read_parquet(p) for p in measured]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    step_frames = [pd.read_parquet(p) for p in steps]
    step_table = pd.concat([f for f in step_frames if len(f)], ignore_index=True) if step_frames else pd.DataFrame()
    metadata = _gathered_metadata(measured)
    write_parquet(table, measured_out, metadata)
    write_parquet(step_table, steps_out, metadata)
    statuses = {}
    for frame in frames:
        status = str(frame["status"].iloc[0])
        statuses[status] = statuses.get(status, 0) + 1
    return len(frames), statuses


def _gathered_metadata(paths: list) -> dict:
    """The runs' metadata: a key shared by every run keeps its value; one that differs lists the values."""
    from .io import read_metadata

    values: dict[str, list] = {}
    for path in paths:
        for key, value in read_metadata(path).items():
            values.setdefault(key, [])
            if value not in values[key]:
                values[key].append(value)
    return {key: found[0] if len(found) == 1 else ";".join(found) for key, found in values.items()}
