"""Step-time accuracy of the plan's predictor against published training runs (benchmarks/published_runs.csv).

For every row: the measured step time (the source's own figure converted with its own definition,
trainingcost.analytic.steptime.runs), the predicted step (trainingcost.analytic.steptime.predict_step, BP, with
the row's framework and cluster from the catalogues and nothing else assumed), and the flat baseline the plan used
before (model FLOPs / (GPUs x peak x 0.40), the executed cost model's BP FLOPs). Prints the absolute percentage
error per row (--rows), and per source: the MAPE, the mean signed error, the leave-one-source-out MAPE (the one
fitted constant, the kernel efficiency, refitted on the other sources; the figure to expect out of sample), and the
regimes the issue sets goals on (FSDP/ZeRO-3 rows, H100-or-newer rows).

    python benchmarks/bench_plan_accuracy.py [--csv PATH] [--rows] [--no-loso] [--regimes]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainingcost.analytic.plan import PRECISIONS  # noqa: E402
from trainingcost.analytic.steptime import predict_step, runs  # noqa: E402
from trainingcost.analytic.steptime.device import GENERIC  # noqa: E402
from trainingcost.analytic.steptime.step import rule_work  # noqa: E402
from trainingcost.config.errors import ConfigError  # noqa: E402
from trainingcost.config.hardware import device  # noqa: E402

FLAT_MFU = 0.40
GRID = tuple(round(0.70 + 0.02 * i, 2) for i in range(13))  # kernel efficiencies tried when refitting (0.70-0.94)
HOPPER = ("h100-sxm", "h100-pcie", "h100-hbm2e", "h200", "h800-sxm")
BLACKWELL = ("b200", "gb200")
GOALS = {"overall": 8.0, "left out": 12.0, "FSDP / ZeRO-3": 10.0, "H100 or newer": 10.0, "bias": 5.0}


def evaluate(path: Path, efficiency: float | None = None, refused: list | None = None) -> list[dict]:
    """One dict per row; ``efficiency``: the kernel efficiency in place of the catalogue's (the refit). A row the
    model refuses (a value it does not know, a layout it cannot run) is left out and its one line appended to
    ``refused``, so that one bad row does not stop the others."""
    out, works = [], {}
    for row in runs.load(path):
        try:
            cfg, lay = runs.model_of(row), runs.layout_of(row)
            dev = device(row["gpu"])
            if efficiency is not None:
                dev = dataclasses.replace(dev, steptime={**dev.steptime, "kernel_efficiency": efficiency})
            work = works.setdefault(cfg.config_id, rule_work(cfg, ["bp"]))
            pred = predict_step(cfg, lay, dev, "bp", work)
            measured = runs.measured_step_time(row)
        except ConfigError as err:
            if refused is not None:
                refused.append(f"{row.get('source', '?')} / {row.get('run', '?')}: {err}")
            continue
        peak = dev.peak(PRECISIONS[lay.precision].peak_dtype)
        flat = lay.global_batch * work["bp"]["total"] / (lay.gpus * peak * FLAT_MFU)
        out.append({"source": row["source"], "run": row["run"], "gpu": dev.name, "sharding": lay.sharding, "lay": lay,
                    "cfg": cfg,
                    "framework": row["framework"], "measured": measured, "predicted": pred.step_time_s,
                    "flat": flat, "err_pred": 100 * (pred.step_time_s / measured - 1),
                    "err_flat": 100 * (flat / measured - 1), "parts": pred.parts})
    return out


def mape(rows, key: str = "err_pred") -> float:
    return sum(abs(r[key]) for r in rows) / len(rows) if rows else float("nan")


def signed(rows, key: str = "err_pred") -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else float("nan")


def leave_one_source_out(path: Path) -> dict:
    """Per source: (the kernel efficiency fitted on the other sources, the left-out source's MAPE under it)."""
    by_k = {k: evaluate(path, k) for k in GRID}
    sources = sorted({r["source"] for r in by_k[GRID[0]]})
    out = {}
    for name in sources:
        best = min(GRID, key=lambda k: mape([r for r in by_k[k] if r["source"] != name]))
        out[name] = (best, mape([r for r in by_k[best] if r["source"] == name]))
    return out


def _parameters(cfg) -> int:
    from trainingcost.analytic.memory import memory_table
    from trainingcost.config import configs_frame

    return int(memory_table(configs_frame([("", cfg)]), ["bp"]).parameter_count.iloc[0])


# The weakest regimes (--regimes): each a predicate on a row's (source, framework, GPU, layout, model); a row may be in
# several. Full recompute is split by what the framework's recompute repeats (config/frameworks.yaml, recompute_tail).
WEAK = {
    "DeepSpeed ZeRO-3 2021 (Narayanan Table 2)": lambda r: r["framework"] == "deepspeed@2021",
    "H100, MosaicML BF16 (FSDP1, Triton FlashAttention)": lambda r: r["source"].startswith("mosaicml") and
    r["gpu"] == "h100-sxm" and r["lay"].precision != "fp8-mixed",
    "H100, MosaicML FP8 (512-32k tokens)": lambda r: r["source"].startswith("mosaicml") and
    r["lay"].precision == "fp8-mixed",
    "H100, MosaicML (BF16 and FP8)": lambda r: r["source"].startswith("mosaicml") and r["gpu"] == "h100-sxm",
    "Korthikanti et al. 2022, full recompute": lambda r: r["source"].startswith("korthikanti") and
    r["lay"].recompute == "full",
    "MaxText 2024 (Llama 2 70B)": lambda r: r["source"] == "nvidia-dgxc-benchmarking-maxtext",
    "MaxText 2025 (Llama 3 70B)": lambda r: r["source"] == "nvidia-dgxc-benchmarking-maxtext-2025",
    "MaxText 2025 FP8": lambda r: r["source"] == "nvidia-dgxc-benchmarking-maxtext-2025" and
    r["lay"].precision == "fp8-mixed",
    "A100, FSDP (MosaicML, torchtitan)": lambda r: r["gpu"].startswith("a100") and r["sharding"] in ("fsdp", "zero3"),
    "H100, NVIDIA dgxc (NeMo)": lambda r: r["source"].startswith("nvidia-dgxc") and r["framework"] == "nemo",
    "Megatron TP + PP (2021-22)": lambda r: r["framework"].startswith("megatron-lm@") and r["lay"].tp > 1 and
    r["lay"].pp > 1,
    "interleaved pipeline": lambda r: r["lay"].interleave > 1,
    "tensor parallel, torchtitan (H100)": lambda r: r["framework"].startswith("torchtitan") and r["lay"].tp > 1,
    "context parallel": lambda r: r["lay"].cp > 1,
    "full recompute, whole block repeated": lambda r: r["lay"].recompute == "full" and
    r["lay"].recompute_tail == "repeated",
    "full recompute, down projection left out": lambda r: r["lay"].recompute == "full" and
    r["lay"].recompute_tail != "repeated",
    "sequence >= 8192": lambda r: r["cfg"].seq_len >= 8192,
    ">= 1024 GPUs": lambda r: r["lay"].gpus >= 1024,
    "models < 1B parameters": lambda r: _parameters(r["cfg"]) < 1e9,
    "V100": lambda r: r["gpu"] == "v100",
}



def readable_table(text: str) -> Path:
    """--csv: an existing file (argparse's one line otherwise, exit 2)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file" if not path.exists() else f"{text}: not a file")
    return path

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=readable_table, default=ROOT / "benchmarks" / "published_runs.csv")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--no-loso", action="store_true", help="skip the leave-one-source-out refits (one more pass per source)")
    ap.add_argument("--regimes", action="store_true", help="print the weakest regimes' table (Markdown)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    refused: list[str] = []
    results = evaluate(args.csv, refused=refused)
    if not results:
        print(f"no row of {args.csv} could be planned ({len(refused)} refused)" + (":" if refused else ""), *refused,
              sep="\n  ")
        return 1
    if args.rows:
        print(f"{'source':24} {'run':40} {'measured s':>10} {'predicted s':>11} {'err %':>7} {'flat s':>9} {'err %':>7}")
        for r in results:
            print(f"{r['source'][:24]:24} {r['run'][:40]:40} {r['measured']:10.3f} {r['predicted']:11.3f} "
                  f"{r['err_pred']:+7.1f} {r['flat']:9.3f} {r['err_flat']:+7.1f}")
        print()
    loso = {} if args.no_loso else leave_one_source_out(args.csv)
    k = GENERIC["kernel_efficiency"]
    print(f"kernel efficiency (the one fitted constant): {k:.2f}")
    print(f"{'source':38} {'rows':>4} {'MAPE':>7} {'signed':>8} {'left out':>9} {'(fit)':>6} {'flat 0.40':>10} {'max|err|':>9}")
    groups = {}
    for r in results:
        groups.setdefault(r["source"], []).append(r)
    regimes = {"FSDP / ZeRO-3": [r for r in results if r["sharding"] in ("fsdp", "zero3")],
               "H100 or newer": [r for r in results if r["gpu"] in HOPPER + BLACKWELL],
               "Blackwell": [r for r in results if r["gpu"] in BLACKWELL],
               "A100": [r for r in results if r["gpu"].startswith("a100")],
               # issue 68: the rows that run a zero-bubble or DualPipe schedule, or offload, reported apart
               "zero-bubble / DualPipe schedules": [r for r in results if r["lay"].schedule not in ("", "1f1b",
                                                                                                  "interleaved")],
               "offload": [r for r in results if r["lay"].offload != "none"],
               "V100": [r for r in results if r["gpu"] == "v100"]}
    absent = [k for k in ("zero-bubble / DualPipe schedules", "offload") if not regimes[k]]
    for name, rows in [*groups.items(), *((k, v) for k, v in regimes.items() if v), ("overall", results)]:
        left = f"{loso[name][1]:8.1f}% {loso[name][0]:6.2f}" if name in loso else f"{'':9} {'':6}"
        print(f"{name[:38]:38} {len(rows):4d} {mape(rows):6.1f}% {signed(rows):+7.1f}% {left} {mape(rows, 'err_flat'):9.1f}% "
              f"{max(abs(r['err_pred']) for r in rows):8.1f}%")
    for name in absent:  # the optional schedule and offload columns of a row (analytic/steptime/runs.py)
        print(f"{name[:38]:38} {0:4d}   (no published row of this table states one)")
    if loso:
        per_source = [mape(rows) for rows in groups.values()]
        print(f"\nmean of per-source MAPEs: {sum(per_source) / len(per_source):.1f}%; of left-out MAPEs: "
              f"{sum(v for _, v in loso.values()) / len(loso):.1f}%")
    sources = len(groups)
    print(f"{len(results)} rows from {sources} source tables in {time.perf_counter() - start:.1f} s "
          f"(goals: overall <= {GOALS['overall']:g}%, every source left out <= {GOALS['left out']:g}%, FSDP/ZeRO-3 "
          f"and H100 <= 10%, mean signed error within +-{GOALS['bias']:g}% per source)")
    if args.regimes:
        print("\n| regime | rows | MAPE | mean signed | flat 0.40 MAPE |\n|---|---|---|---|---|")
        for name, test in WEAK.items():
            rows = [r for r in results if test(r)]
            if rows:
                print(f"| {name} | {len(rows)} | {mape(rows):.1f}% | {signed(rows):+.1f}% | {mape(rows, 'err_flat'):.1f}% |")
    if refused:
        print(f"{len(refused)} rows refused (not in the figures above):", *refused, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
