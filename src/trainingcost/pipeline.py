"""The workflow's steps as functions from a validated config to files.

Snakemake rules call these and nothing else, so every step can be run and
tested without Snakemake.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .analytic import layer_table
from .analytic.memory import memory_table
from .config import sweep_frame, validate_config
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
