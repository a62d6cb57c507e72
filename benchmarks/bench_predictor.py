"""Benchmark: the trace-driven step-time predictor against measured steps, on CPU.

For a fixed set of configurations (--configs, default 12: the three arches across width, depth and sequence
length) under every rule:

1. traces one step of each run (fake tensors: no arithmetic);
2. calibrates the device on the kernels the traces contain (interleaved rounds until two agree);
3. trains each run for --steps steps, measuring each phase and step (the first --warmup steps untimed),
   interleaving the runs in --rounds rounds so that a slow spell of the machine hits every run alike;
4. predicts each run's step and phase times (by default from the probes: each run's kernel bodies plus its step
   at minimal sizes, measure/probe.py; --no-probe: the traced ops priced with the host terms) and prints MAPE and
   Spearman (all runs, per rule, per phase),
   each rule's step time / BP's, predicted against measured, and which class of work dominates the misses.

Every figure is the median over the rounds of a run's median step time. The machine, its load before and
after, and each run's timing quality (:mod:`trainingcost.measure.load`) are printed; runs flagged noisy or
contended are left out of the scores and counted.

    python benchmarks/bench_predictor.py [--configs 12] [--steps 14] [--rounds 3] [--threads 1] [--no-probe] [--repeats 3]

With ``--repeats N`` (default 3) the whole benchmark runs N times, each in a fresh process (its own trace,
calibration and measurements), one after another; each repeat's report is printed, then the step-time MAPE's median
over the repeats and its range, against the goals (issue 39: median <= 8%, the worst repeat <= 12%). A figure that
holds in one run out of three is not a property of the software.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import torch

from trainingcost.analytic import rule_names
from trainingcost.config import RuleOptions, TrainSpec, canonical_model
from trainingcost.findings.calibration import calibrate
from trainingcost.findings.predictor import PARTS, accuracy, predict_phases
from trainingcost.measure.load import load_average
from trainingcost.measure.provenance import cpu_name
from trainingcost.measure.run import traced, train

CONFIGS = [  # arch, layers, d_model, seq_len, batch
    ("decoder", 2, 64, 32, 8), ("decoder", 2, 64, 128, 8), ("decoder", 2, 64, 256, 8), ("decoder", 1, 128, 64, 8),
    ("decoder", 4, 64, 64, 8), ("decoder", 2, 256, 64, 8), ("encoder", 2, 64, 64, 8), ("encoder", 2, 128, 128, 8),
    ("encoder", 4, 128, 32, 4), ("encoder-decoder", 2, 64, 64, 8), ("encoder-decoder", 1, 128, 32, 8),
    ("decoder", 2, 128, 128, 16), ("encoder", 1, 256, 128, 8), ("encoder-decoder", 2, 128, 128, 4),
]


def model(arch, layers, d_model, seq_len, batch):
    return canonical_model(dict(arch=arch, layers=layers, d_model=d_model, heads=4, d_ff=4 * d_model, seq_len=seq_len,
                                batch=batch, vocab=256), "")


def task(arch: str) -> str:
    return "reverse" if arch == "encoder-decoder" else "lm"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x == x else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=12)
    parser.add_argument("--config-ids", default="",
                        help="comma-separated indices into CONFIGS instead of the first --configs (e.g. 12,13: the "
                             "two configurations the default leaves out, held out)")
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--rules", default=",".join(rule_names()))
    parser.add_argument("--clock", choices=["wall", "thread"], default="wall",
                        help="thread: every perf_counter reading of this process (the runs' timers, the calibration) "
                             "is the thread's CPU time, which leaves out the time other processes hold the core "
                             "(a loaded machine; caches and the memory bus stay shared). Said in the output")
    parser.add_argument("--score-flagged", action="store_true",
                        help="score the runs flagged noisy or contended too (a loaded machine; said in the output)")
    parser.add_argument("--no-probe", action="store_true",
                        help="score the traced ops priced with the host terms (calibrate without --probe) instead of "
                             "the probes (the default since 2026-11-25: closer in three runs on two machines)")
    parser.add_argument("--save", default="", help="a pickle file for the traces, calibration and measurements")
    parser.add_argument("--repeats", type=int, default=3,
                        help="run the whole benchmark this many times, each in a fresh process, and report the median "
                             "MAPE and its range (1: one run, its report alone)")
    args = parser.parse_args()
    if args.repeats > 1:
        repeat(args.repeats)
        return
    if args.clock == "thread":
        time.perf_counter = time.thread_time  # the timers and the calibration read time.perf_counter at each call
    torch.set_num_threads(args.threads)
    rules = args.rules.split(",")
    chosen = [int(i) for i in args.config_ids.split(",")] if args.config_ids else list(range(args.configs))
    runs = [(i, CONFIGS[i], r) for i in chosen for r in rules]
    print(f"machine: {cpu_name()} ({os.cpu_count()} cores, {args.threads} thread(s)), torch {torch.__version__}, "
          f"Python {platform.python_version()}; load average before {load_average():.2f}"
          + ("; clock: the thread's CPU time (--clock thread)" if args.clock == "thread" else ""))
    began = time.perf_counter()
    specs = {(i, r): TrainSpec(cfg=model(*c), task=task(c[0]), rule=r, steps=args.steps, warmup=args.warmup, seed=0,
                               measure=True, options=RuleOptions(optimizer=args.optimizer)) for i, c, r in runs}
    traces = pd.concat([traced(spec, torch.device("cpu")).assign(run=f"{i}:{r}", config=i) for (i, r), spec in specs.items()])
    trace_seconds = time.perf_counter() - began
    cal = calibrate(torch.device("cpu"), "fp32", traces, time_cap_s=120, probe=True)
    # The default (as the workflow's train.calibration.probe): each run predicted as its kernels' bodies plus its
    # probe's time; --no-probe: the traced ops priced with the host terms. The other is printed beside it.
    probed_cal, unprobed_cal = cal, {**cal, "probes": []}
    cal = unprobed_cal if args.no_probe else probed_cal
    print(f"traced {len(runs)} runs in {trace_seconds:.1f} s; calibrated {len(cal['kernels'])} kernels in "
          f"{cal['seconds_spent']:.1f} s ({cal['rounds']} rounds, last two agree within {pct(cal['round_agreement'])}; "
          f"launch {cal['launch_overhead_s'] * 1e6:.2f} us, view {cal['view_overhead_s'] * 1e6:.2f} us)")
    host = cal.get("host", {}).get("coefficients", {})
    if host:  # the host terms (measure/host.py): seconds per op of a context, per call, per tensor, per byte
        print("host terms, us per count (per MB for bytes): " + ", ".join(
            f"{name} {value * (1e12 if 'bytes' in name else 1e6):.2f}" for name, value in sorted(host.items())))
    steps: dict[str, list] = {}
    phases: dict[tuple[str, str], list] = {}
    quality: dict[str, list] = {}
    classes: dict[str, list] = {}
    for _ in range(args.rounds):
        for (i, r), spec in specs.items():
            result = train(spec)
            steps.setdefault(f"{i}:{r}", []).append(result.summary["step_time_median_s"])
            quality.setdefault(f"{i}:{r}", []).append(result.summary["timing_quality"])
            classes.setdefault(f"{i}:{r}", []).append({p: result.summary[f"measured_{p}"] for p in PARTS})
            for phase, t in result.measured.groupby("phase")["phase_time_median_s"].first().items():
                phases.setdefault((f"{i}:{r}", phase), []).append(t)
    if args.save:
        import pickle
        with open(args.save, "wb") as f:
            pickle.dump(dict(traces=traces, cal=probed_cal, steps=steps, phases=phases, quality=quality,
                             classes=classes), f)
    predicted = predict_phases(traces, cal, keys=("run",))
    step_pred = predicted.groupby("run")[["predicted_time_s", *PARTS]].sum()
    frame = step_pred.assign(measured=pd.Series({k: statistics.median(v) for k, v in steps.items()}),
                             quality=pd.Series({k: "ok" if q.count("ok") * 2 > len(q) else
                                                max(set(q), key=q.count) for k, q in quality.items()}))
    frame["rule"] = [k.split(":")[1] for k in frame.index]
    frame["config"] = [int(k.split(":")[0]) for k in frame.index]
    flagged = frame["quality"] != "ok"
    if args.score_flagged:
        print(f"--score-flagged: the {int(flagged.sum())} flagged runs are scored too")
        flagged = flagged & False
    good = frame[~flagged]
    print(f"measured {len(runs)} runs x {args.rounds} rounds of {args.steps} steps in "
          f"{time.perf_counter() - began:.0f} s in all; load average after {load_average():.2f}; "
          f"{int(flagged.sum())} runs flagged noisy or contended, left out")
    score = accuracy(good["predicted_time_s"], good["measured"])
    method = ("the traced ops priced with the host terms (--no-probe)" if args.no_probe else
              "the probes: kernel bodies + the step at minimal sizes (calibrate --probe)")
    print(f"\nstep time, all runs, {method}: MAPE {pct(score['mape'])}, Spearman {score['spearman']:.3f} "
          f"(n={score['n']})")
    print(f"predicted / measured, median {float((good['predicted_time_s'] / good['measured']).median()):.3f}")
    alternatives = [("the ops alone (no host terms, no probes)", {**unprobed_cal, "host": {}})]
    alternatives.insert(0, ("with the probes (calibrate --probe)", probed_cal) if args.no_probe else
                        ("the traced ops with the host terms (--no-probe)", unprobed_cal))
    for name, other in alternatives:
        alt = predict_phases(traces, other, keys=("run",)).groupby("run")["predicted_time_s"].sum()
        s = accuracy(alt.loc[good.index], good["measured"])
        print(f"{name}: MAPE {pct(s['mape'])}, Spearman {s['spearman']:.3f}, predicted / measured "
              f"{float((alt.loc[good.index] / good['measured']).median()):.3f}")
    print("\n| rule | runs | MAPE | Spearman | step time / BP, measured | predicted | difference |")
    print("|---|---|---|---|---|---|---|")
    bp = good[good["rule"] == "bp"].set_index("config")
    for r in rules:
        part = good[good["rule"] == r]
        s = accuracy(part["predicted_time_s"], part["measured"])
        joined = part.merge(bp, left_on="config", right_index=True, suffixes=("", "_bp"))
        measured_ratio = float(np.median(joined["measured"] / joined["measured_bp"])) if len(joined) else np.nan
        predicted_ratio = float(np.median(joined["predicted_time_s"] / joined["predicted_time_s_bp"])) if len(joined) else np.nan
        print(f"| {r} | {s['n']} | {pct(s['mape'])} | {s['spearman']:.3f} | {measured_ratio:.3f} | {predicted_ratio:.3f} | "
              f"{pct(predicted_ratio / measured_ratio - 1)} |")
    print("\n| phase | cells | MAPE | Spearman | predicted / measured, median |")
    print("|---|---|---|---|---|")
    measured_phases = pd.Series({k: statistics.median(v) for k, v in phases.items()}, name="measured")
    measured_phases.index = pd.MultiIndex.from_tuples(measured_phases.index, names=["run", "phase"])
    cells = predicted.set_index(["run", "phase"]).join(measured_phases, how="inner").reset_index()
    cells = cells[~cells["run"].isin(frame.index[flagged])]
    for phase, part in cells.groupby("phase"):
        s = accuracy(part["predicted_time_s"], part["measured"])
        print(f"| {phase} | {s['n']} | {pct(s['mape'])} | {s['spearman']:.3f} | "
              f"{float(np.median(part['predicted_time_s'] / part['measured'])):.3f} |")
    split = pd.DataFrame({k: pd.DataFrame(v).median() for k, v in classes.items()}).T.loc[good.index]
    print("\n| class | predicted, share of the step | measured (profiled), share | predicted − measured, share | "
          "runs it misses most |")
    print("|---|---|---|---|---|")
    # a run whose profiled step was not split into classes (every part NaN) names no class it misses most
    worst = (good[PARTS] - split[PARTS]).abs().dropna(how="all").idxmax(axis=1)
    for p in PARTS:
        print(f"| {p.removesuffix('_s')} | {pct(float((good[p] / good['predicted_time_s']).median()))} | "
              f"{pct(float((split[p] / good['measured']).median()))} | "
              f"{float(((good[p] - split[p]) / good['measured']).median()):+.1%} | {int((worst == p).sum())} |")
    miss = (good["predicted_time_s"] - good["measured"]) / good["measured"]
    print(f"misses: median {pct(float(miss.median()))}, under-predicted runs {int((miss < 0).sum())} of {len(miss)}")


MAPE_LINE = re.compile(r"^step time, all runs, .*: MAPE ([0-9.]+)%, Spearman ([0-9.]+) \(n=([0-9]+)\)$", re.M)
RATIO_LINE = re.compile(r"^predicted / measured, median ([0-9.]+)$", re.M)


def repeat(n: int) -> None:
    """The benchmark ``n`` times, each a fresh process with the same arguments and --repeats 1; then the median and
    range of the step-time MAPE (and of predicted / measured) over the repeats."""
    argv = [a for a in sys.argv[1:]]
    if "--repeats" in argv:
        i = argv.index("--repeats")
        del argv[i:i + 2]
    argv = [a for a in argv if not a.startswith("--repeats=")]
    mapes, ratios, unscored = [], [], 0
    began = time.perf_counter()
    for k in range(1, n + 1):
        print(f"## repeat {k} of {n} (a fresh process)\n", flush=True)
        done = subprocess.run([sys.executable, __file__, *argv, "--repeats", "1"], capture_output=True, text=True)
        print(done.stdout, end="", flush=True)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"bench_predictor: repeat {k} failed (exit status {done.returncode})")
        found, ratio = MAPE_LINE.search(done.stdout), RATIO_LINE.search(done.stdout)
        if found is None or ratio is None:  # every run flagged noisy or contended: this repeat scores nothing
            unscored += 1
            print(f"repeat {k}: no trusted run to score (the machine was busy; see its load above)\n")
            continue
        mapes.append(float(found.group(1)))
        ratios.append(float(ratio.group(1)))
        print()
    print(f"## over {n} repeats ({time.perf_counter() - began:.0f} s, {cpu_name()}, load average now "
          f"{load_average():.2f})\n")
    if unscored:
        print(f"{unscored} of {n} repeats scored no trusted run; the figures below are over the other "
              f"{n - unscored}, and a goal needs 3 scored repeats")
    if not mapes:
        print("step-time MAPE: no repeat scored a trusted run; goals (issue 39): NOT measured")
        return
    median, worst = statistics.median(mapes), max(mapes)
    print(f"step-time MAPE: median {median:.1f}% (range {min(mapes):.1f}-{worst:.1f}%; repeats: "
          f"{', '.join(f'{m:.1f}%' for m in mapes)}); predicted / measured, median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")
    scored = len(mapes) >= 3
    print(f"goals (issue 39): median <= 8%: {'met' if median <= 8 and scored else 'NOT met'}; worst repeat <= 12%: "
          f"{'met' if worst <= 12 and scored else 'NOT met'}" + ("" if scored else " (fewer than 3 scored repeats)"))


if __name__ == "__main__":
    main()
