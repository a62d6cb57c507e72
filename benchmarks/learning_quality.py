"""Learning quality per rule and depth (issue 3): the numbers in docs/learning_rules.md.

Trains every rule at depths 1, 2, 4 and 6 on ``classify`` (encoder) and
``lm`` (decoder, byte-level on the Python standard library) with one step
budget, optimizer and learning rate for all, over several seeds, and prints a
markdown table of the median final training loss (mean of the last 20 steps),
validation loss and validation accuracy. Also writes every run's summary to
``--out`` (parquet).

    python benchmarks/learning_quality.py [--steps 300] [--seeds 2] [--threads 1] [--rules ...] [--out results/learning_quality.parquet]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainingcost.config import canonical_model  # noqa: E402
from trainingcost.io import write_parquet  # noqa: E402
from trainingcost.config import RuleOptions
from trainingcost.analytic import rule_names  # noqa: E402
from trainingcost.config import TrainSpec
from trainingcost.measure.run import train  # noqa: E402

DEPTHS = (1, 2, 4, 6)
TASKS = {
    "classify": dict(arch="encoder", d_model=64, heads=4, d_ff=256, vocab=16, seq_len=32, batch=32, classes=3),
    "lm": dict(arch="decoder", d_model=64, heads=4, d_ff=256, vocab=256, seq_len=64, batch=32),
}


def machine() -> str:
    """The CPU model name where /proc/cpuinfo has one, else the platform's description."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--rules", nargs="+", choices=rule_names(), default=list(rule_names()),
                        help="the rules to train (default: every rule in the catalogue)")
    parser.add_argument("--out", default="results/learning_quality.parquet")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    started = time.perf_counter()
    for task, shape in TASKS.items():
        for depth in DEPTHS:
            cfg = canonical_model({**shape, "layers": depth}, task)
            for rule in args.rules:
                for seed in range(args.seeds):
                    options = RuleOptions(optimizer=args.optimizer, lr=args.lr)
                    result = train(TrainSpec(cfg=cfg, task=task, rule=rule, steps=args.steps, seed=seed, eval_batches=8, options=options))
                    loss = result.steps["loss"]
                    rows.append(
                        dict(task=task, depth=depth, rule=rule, seed=seed, status=result.status,
                             first_loss=float(loss.iloc[:10].mean()), final_loss=float(loss.iloc[-20:].mean()),
                             val_loss=result.val_loss, val_accuracy=result.val_accuracy)
                    )
                print(f"{task} depth {depth} {rule}: done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    frame = pd.DataFrame(rows)
    write_parquet(frame, args.out)
    print(f"# Learning quality: {args.steps} steps, {args.optimizer} lr {args.lr}, median of {args.seeds} seeds")
    print(f"# machine: {machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    summary = frame.groupby(["task", "depth", "rule"], sort=False)[["final_loss", "val_loss", "val_accuracy"]].median()
    for task in TASKS:
        part = summary.loc[task]
        for metric in ("final_loss", "val_accuracy"):
            wide = part[metric].unstack("depth")
            wide = wide.loc[[rule for rule in rule_names() if rule in wide.index]]
            print(f"## {task}: {metric.replace('_', ' ')} (median over seeds), by depth\n")
            print("| rule | " + " | ".join(f"depth {d}" for d in wide.columns) + " |")
            print("|---|" + "---|" * len(wide.columns))
            for rule, values in wide.iterrows():
                print(f"| {rule} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
            print()
    diverged = frame[frame.status != "ok"]
    if len(diverged):
        print("Runs that did not finish: " + ", ".join(f"{r.task}/{r.depth}/{r.rule}/seed {r.seed}: {r.status}" for r in diverged.itertuples()))
    print(f"total time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
