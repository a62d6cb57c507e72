"""The workflow's last steps: comparison tables, the summary and the figures, from the gathered tables.

Snakemake's ``comparison``, ``summary`` and ``figures`` rules call these functions and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .calibration import read_calibration
from .comparison import comparison_table, rule_ratios, runs_of
from .config import ConfigError, config_id, select_sweep, validate_config
from .io import write_parquet, write_text
from .predictor import predict_steps

FIGURES = {
    "flops": "1_flops_predicted_vs_measured",
    "breakdown": "2_layer_breakdown",
    "scaling": "3_cost_scaling",
    "ratios": "4_rule_ratio_vs_length",
    "step_time": "5_step_time_predicted_vs_measured",
    "memory": "6_peak_memory",
    "depth": "7_loss_by_depth",
    "energy": "8_energy",
}


def check_figures(config: dict) -> None:
    """Every name in ``figures`` refers to the sweep (ConfigError naming the field otherwise), before any job runs."""
    config = validate_config(config)
    settings = config["figures"]
    entry_config(config, settings["breakdown"], "figures.breakdown")
    entry_config(config, settings["scaling"]["base"], "figures.scaling.base")
    select_sweep(config["sweep"], settings["depth"], "figures.depth")


def figure_names(config: dict) -> list[str]:
    """The figures this config produces (the energy figure only where runs measure energy)."""
    names = [k for k in FIGURES if k != "energy"]
    if validate_config(config)["figures"]["energy"]:
        names.append("energy")
    return names


def write_comparison(analytic_path, memory_path, measured_path, comparison_out, ratios_out,
                     comparison_csv=None, ratios_csv=None, configs_path=None, calibration_path=None) -> None:
    """The two tables as parquet; optionally, for the report, the per-step comparison and the measured
    configurations' ratios as CSV. With a calibration, step rows get the predicted step time."""
    analytic = pd.read_parquet(analytic_path)
    measured = pd.read_parquet(measured_path)
    memory = pd.read_parquet(memory_path)
    comparison = comparison_table(analytic, measured, memory)
    if calibration_path and configs_path and len(comparison):
        comparison = add_predicted_times(comparison, analytic, pd.read_parquet(configs_path), read_calibration(calibration_path),
                                         measured)
    ratios = rule_ratios(analytic, measured)
    write_parquet(comparison, comparison_out)
    write_parquet(ratios, ratios_out)
    if comparison_csv:
        steps = comparison[comparison["granularity"] == "step"].drop(columns=["granularity", "layer", "phase"])
        write_text(steps.to_csv(index=False, float_format="%.6g"), comparison_csv)
    if ratios_csv:
        measured_ids = set(measured["config_id"])
        write_text(ratios[ratios["config_id"].isin(measured_ids)].to_csv(index=False, float_format="%.6g"), ratios_csv)


def add_predicted_times(comparison: pd.DataFrame, analytic: pd.DataFrame, configs: pd.DataFrame, calibration: dict,
                        measured: pd.DataFrame) -> pd.DataFrame:
    """``predicted_time_s`` on every step row: the roofline predictor over the executed model (any cost model's
    step row gets the same prediction: the predictor prices what runs)."""
    runs = runs_of(measured[measured["status"] == "ok"])
    executed = analytic[(analytic["cost_model"] == "executed") & analytic["config_id"].isin(runs["config_id"])]
    if executed.empty:
        comparison["predicted_time_s"] = float("nan")
        return comparison
    optimizer = str(runs["optimizer"].iloc[0]) if "optimizer" in runs else "sgd"
    steps = predict_steps(executed, configs[configs["config_id"].isin(runs["config_id"])], calibration, optimizer)
    out = comparison.merge(steps.rename(columns={"predicted_time_s": "_predicted"}), on=["config_id", "rule"], how="left")
    out["predicted_time_s"] = out["_predicted"].where(out["granularity"] == "step")
    return out.drop(columns=["_predicted"])


def entry_config(config: dict, name: str, where: str) -> dict:
    """The first configuration of sweep entry ``name`` (or the configuration whose config_id is ``name``)."""
    from .config import enumerate_sweep

    if not name:  # the first trained configuration, else the sweep's first
        chosen = select_sweep(config["sweep"], config["train"]["select"], "train.select") or enumerate_sweep(config["sweep"])
        return chosen[0][1]
    for _, cfg in enumerate_sweep(config["sweep"]):
        if config_id(cfg) == name:
            return cfg
    pairs = select_sweep(config["sweep"], [name], where)
    if not pairs:
        raise ConfigError(f"{where}: sweep entry {name!r} has no configuration")
    return pairs[0][1]


def describe(cfg: dict) -> str:
    depth = cfg["enc_layers"] + cfg["dec_layers"]
    return f"{cfg['arch']}, {depth} block{'s' if depth != 1 else ''}, d_model {cfg['d_model']}, {cfg['seq_len']} tokens, batch {cfg['batch']}"


def write_figures(config: dict, analytic_path, comparison_path, measured_path, out_dir) -> list[Path]:
    """Every figure of :data:`FIGURES` that the config asks for, as PNG and PDF under ``out_dir``."""
    from . import figures as F

    config = validate_config(config)
    settings = config["figures"]
    analytic = pd.read_parquet(analytic_path)
    comparison = pd.read_parquet(comparison_path)
    measured = pd.read_parquet(measured_path)
    runs = runs_of(measured[measured["status"] == "ok"]) if len(measured) else pd.DataFrame()
    if len(runs):
        extra = measured.groupby(["config_id", "rule", "seed"], as_index=False)[
            ["heads", "vocab", "classes", "val_loss", "val_accuracy", "energy_per_step_j", "steps"]].first()
        runs = runs.merge(extra, on=["config_id", "rule", "seed"])
    out_dir = Path(out_dir)
    F.style()
    written: list[Path] = []

    def save(fig, key):
        written.extend(F.save(fig, out_dir / f"{FIGURES[key]}.png"))

    save(F.predicted_vs_measured_flops(comparison), "flops")
    breakdown = entry_config(config, settings["breakdown"], "figures.breakdown")
    breakdown_rows = analytic[analytic["config_id"] == config_id(breakdown)]
    if breakdown_rows.empty:
        from .analytic import layer_table
        from .config import configs_frame

        breakdown_rows = layer_table(configs_frame([("", breakdown)]), cost_models=["paper", "executed"])
    save(F.layer_breakdown(breakdown_rows, config_id(breakdown), describe(breakdown)), "breakdown")
    base = entry_config(config, settings["scaling"]["base"], "figures.scaling.base")
    axes = {"seq_len": settings["scaling"]["seq_len"], "d_model": settings["scaling"]["d_model"]}
    curves = F.scaling_curves(base, axes)
    save(F.scaling(curves, runs, base, describe(base)), "scaling")
    save(F.ratio_to_bp(curves, runs, base, describe(base)), "ratios")
    save(F.step_time(comparison), "step_time")
    save(F.peak_memory(comparison, runs), "memory")
    depth_runs = runs
    if settings["depth"]:
        chosen = {config_id(cfg) for _, cfg in select_sweep(config["sweep"], settings["depth"], "figures.depth")}
        depth_runs = runs[runs["config_id"].isin(chosen)]
        if depth_runs.empty:  # none of those entries was trained (or all failed): show every run instead
            depth_runs = runs
    save(F.loss_by_depth(depth_runs, int(runs["steps"].max()) if len(runs) else 0), "depth")
    if settings["energy"]:
        save(F.energy(runs), "energy")
    return written
