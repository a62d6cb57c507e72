"""``trainingcost curves``: the scaling study's training jobs (config/scaling.py, docs/learning_rules.md).

``curves search`` trains the study's search point under each of its learning rates and marks the one with
the lowest final validation loss (a run that diverges never wins); ``curves run`` trains every point of
the grid at that learning rate for one seed and writes the learning curves (:mod:`.measure.curve`). The
workflow writes the study as JSON (``results/scaling/study.json``) and runs one search per rule and one
run per (rule, seed); both can be run by hand the same way.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from .analytic import rule_names
from .args import integer
from .config import ConfigError, RuleOptions, TrainSpec
from .config.scaling import TASK, ScalingStudy

SEARCH_COLUMNS = ["rule", "lr", "optimizer", "config_id", "d_model", "layers", "seed", "steps", "val_loss",
                  "status", "searched", "chosen"]


def add_parser(sub) -> None:
    p = sub.add_parser("curves", help="the scaling study's runs: each rule's learning-rate search, then its "
                                      "learning curves over the grid (loss against measured FLOPs)")
    kinds = p.add_subparsers(dest="curves_command", metavar="STEP", required=True, parser_class=type(p))
    for name, text in (("search", "train the search point under each learning rate; mark the best"),
                       ("run", "train every point of the grid at the searched learning rate, one seed")):
        k = kinds.add_parser(name, help=text)
        k.add_argument("--study", required=True, help="the study as JSON (the workflow writes results/scaling/study.json)")
        k.add_argument("--rule", required=True, choices=rule_names())
        k.add_argument("--out", required=True, help="parquet file to write")
        if name == "run":
            k.add_argument("--seed", type=integer, required=True)
            k.add_argument("--search", help="the rule's search table (curves search --out); not needed where the "
                                            "study has one learning rate")
        k.set_defaults(func=cmd_curves)


def _spec(study: ScalingStudy, cfg, rule: str, seed: int, lr: float, steps: int) -> TrainSpec:
    spec = TrainSpec(cfg=cfg, task=TASK, rule=rule, steps=steps, seed=seed, device=study.device, dtype=study.dtype,
                     eval_batches=study.eval_batches, eval_at=study.run_evals(steps),
                     options=RuleOptions(optimizer=study.optimizer, lr=lr))
    spec.check()
    return spec


def chosen_lr(search: pd.DataFrame, rule: str, where: str = "--search") -> float | None:
    """The search's learning rate for ``rule``; None where every searched rate diverged."""
    if rule not in set(search["rule"]):
        raise ConfigError(f"{where}: the table searched no learning rate for rule {rule} (rules: "
                          f"{', '.join(sorted(search['rule'].unique()))})")
    rows = search[(search["rule"] == rule) & search["chosen"]]
    return float(rows["lr"].iloc[0]) if len(rows) else None


def search(study: ScalingStudy, rule: str) -> pd.DataFrame:
    """One row per learning rate: the search point's final validation loss; ``chosen`` marks the lowest."""
    from .measure.curve import learning_curve

    cfg, seed, steps = study.search_point(), study.seeds[0], study.run_search_steps
    rows = []
    for lr in study.lrs:
        base = {"rule": rule, "lr": float(lr), "optimizer": study.optimizer, "config_id": cfg.config_id,
                "d_model": cfg.d_model, "layers": cfg.layers, "seed": seed, "steps": steps,
                "searched": study.searched}
        if not study.searched:  # one learning rate: nothing to choose, nothing trained
            rows.append({**base, "val_loss": math.nan, "status": "not searched"})
            continue
        curve = learning_curve(_spec(study, cfg, rule, seed, lr, steps))
        last = curve.iloc[-1]
        rows.append({**base, "val_loss": float(last["val_loss"]), "status": str(last["status"])})
    frame = pd.DataFrame(rows)
    ok = frame["status"].isin(["ok", "not searched"]) & (frame["val_loss"].notna() | ~frame["searched"])
    frame["chosen"] = False
    if ok.any():
        best = frame[ok]["val_loss"].idxmin() if frame["searched"].any() else frame.index[0]
        frame.loc[best, "chosen"] = True
    return frame[SEARCH_COLUMNS]


def run(study: ScalingStudy, rule: str, seed: int, lr: float | None) -> pd.DataFrame:
    """Every point of the grid under ``rule`` at ``lr`` for ``seed``: the learning curves, stacked. Without a
    learning rate (every searched one diverged) nothing trains: one row per point says so."""
    from .measure.curve import CURVE_COLUMNS, learning_curve

    if lr is None:
        rows = [{"config_id": cfg.config_id, "rule": rule, "seed": seed, "lr": math.nan, "optimizer": study.optimizer,
                 "d_model": cfg.d_model, "layers": cfg.layers, "heads": cfg.heads, "seq_len": cfg.seq_len,
                 "batch": cfg.batch, "step": 0, "status": "diverged",
                 "message": "every searched learning rate diverged (curves search)"} for cfg in study.points()]
        return pd.DataFrame(rows).reindex(columns=CURVE_COLUMNS)
    frames = [learning_curve(_spec(study, cfg, rule, seed, lr, study.run_steps)) for cfg in study.points()]
    return pd.concat(frames, ignore_index=True)


def cmd_curves(args: argparse.Namespace) -> int:
    study = ScalingStudy.read(args.study)
    study.check(rule_names())
    if args.rule not in study.rules:
        raise ConfigError(f"--rule: {args.rule} is not in the study's rules ({', '.join(study.rules)})")
    if args.curves_command == "run" and args.seed not in study.seeds:
        raise ConfigError(f"--seed: {args.seed} is not in the study's seeds ({', '.join(map(str, study.seeds))})")
    if args.curves_command == "run":
        if args.search is None:
            if study.searched:
                raise ConfigError(f"--search: the study searches {len(study.lrs)} learning rates; give the rule's "
                                  "search table (curves search --out)")
            lr = float(study.lrs[0])
        else:
            from .config.errors import read_table

            lr = chosen_lr(read_table(args.search, "--search", ("rule",), "the rule's search table (curves search "
                                      "--out)"), args.rule)
    import torch

    from .io import write_parquet

    torch.set_num_threads(study.threads)
    if args.curves_command == "search":
        frame = search(study, args.rule)
    else:
        frame = run(study, args.rule, args.seed, lr)
    write_parquet(frame, args.out)
    print(f"curves {args.curves_command}: {args.rule} -> {args.out} ({len(frame)} rows)")
    return 0
