"""Command line: trainingcost estimate, plan, train, calibrate, hardware, curves, serve, configs, check, analytic.

User mistakes end with one line on stderr and exit status 2, never a traceback.
``estimate``, ``configs``, ``analytic`` and ``--help`` never import torch; only
``train`` and ``calibrate`` do.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from . import __version__
from .analytic import rule_names, rules
from .analytic.catalogue import REFERENCE_RULE
from .analytic.catalogue import rule as catalogue_rule
from .config.errors import read_table
from .config import (
    DEFAULT_LR,
    DEVICES,
    OPTIMIZERS,
    TASKS,
    TRAIN_DTYPES,
    ConfigError,
    RuleOptions,
    TrainSpec,
    task_defaults,
)
from .config.training import RULE_OPTION_FLOATS, RULE_OPTION_HELP
from .io import begin_command, check_output, keep_since, undo_since
from .args import Parser, add_model_flags, flag_message, integer, model_entry, number
from .analytic.comm import BACKENDS, PARALLEL, sharded_rules
from .curves import add_parser as add_curves_parser  # trainingcost curves (curves.py; the scaling study)
from .estimate_text import render_compact, render_costs, render_memory, render_phases, render_summary
from .estimating import estimate_outcome
from .flags import ESTIMATE_HELP, estimate_flags, mirror_steps_help
from .plan_command import add_parser as add_plan_parser  # trainingcost plan (plan_command.py; docs/planning.md)
from .web.command import add_parser as add_serve_parser  # trainingcost serve (web/; docs/page.md)
from .text import describe_config, human, wrapped

def cmd_estimate(args: argparse.Namespace) -> int:
    out = estimate_outcome(args)
    cfg, table, memory, models, notes = out.cfg, out.table, out.memory, out.models, out.notes
    compact = args.cost_model is None and args.format == "table" and not args.per_layer and not args.memory
    if args.format != "table":
        out = memory if args.memory else table
        if args.format == "json":
            print(json.dumps(out.to_dict(orient="records"), indent=1))
        else:
            out.to_csv(sys.stdout, index=False)
        return 0
    print(wrapped(describe_config(cfg)) if compact else describe_config(cfg))
    if cfg.moe:
        refused = [name for name in dict.fromkeys(table["rule"]) if not catalogue_rule(name).trains_experts]
        notes = [*notes, "mixture of experts: FLOPs of the k experts a token uses (token-balanced), parameters of all"
                 + (f"; {', '.join(refused)}: priced, not trained (docs/learning_rules.md)" if refused else "")]
    if cfg.mtp:
        refused = [name for name in dict.fromkeys(table["rule"]) if not catalogue_rule(name).trains_mtp]
        notes = [*notes, f"multi-token prediction: {cfg.mtp_depth} module(s) after the head, each a block, a 2d x d "
                 "projection and the shared head (DeepSeek-V3, section 2.2)"
                 + (f"; {', '.join(refused)}: priced, not trained (docs/learning_rules.md)" if refused else "")]
    for note in notes:
        print(wrapped(note) if compact else note)
    print()
    if compact:
        print(render_compact(table, memory, args.metric, models[0], cfg.moe, cfg.mtp))
        return 0
    if not args.memory:
        print(render_costs(table, args.metric) if args.per_layer else render_phases(table, args.metric))
        print(render_summary(table, args.metric))
    print(render_memory(memory, cfg.moe, cfg.mtp))
    return 0


def parquet_outputs(args: argparse.Namespace, *names: str) -> None:
    """Outputs that are parquet tables end in .parquet (``configs --out x.csv`` wrote parquet into x.csv)."""
    for name in names:
        value = str(getattr(args, name))
        if not value.endswith(".parquet"):
            raise ConfigError(f"--{name.replace('_', '-')}: {value}: {args.command} writes a parquet table; give a "
                              "path ending .parquet")


def cmd_configs(args: argparse.Namespace) -> int:
    from .pipeline import load_file, write_configs

    parquet_outputs(args, "out")
    frame = write_configs(load_file(args.config), args.out)
    print(f"{len(frame)} configuration{'s' * (len(frame) != 1)} -> {args.out}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .config import enumerate_sweep
    from .pipeline import load_file, train_jobs

    filled = load_file(args.config)
    configs, jobs = len(enumerate_sweep(filled["sweep"])), len(train_jobs(filled))
    print(f"{args.config}: valid; {configs} configuration{'s' * (configs != 1)}, {jobs} training job{'s' * (jobs != 1)}")
    return 0


def cmd_analytic(args: argparse.Namespace) -> int:
    from .pipeline import load_file, write_analytic

    parquet_outputs(args, "out", "memory_out")
    write_analytic(load_file(args.config), args.configs, args.out, args.memory_out)
    print(f"analytic costs -> {args.out}; memory -> {args.memory_out}")
    return 0


TRAIN_MODEL_DEFAULTS = dict(arch="decoder", layers=2, d_model=64, heads=4, ff_mult=4, seq_len=64, batch=16)


def cmd_train(args: argparse.Namespace) -> int:
    from .lifeline import hold

    hold()  # under the workflow: die with it, never outlive it (src/trainingcost/lifeline.py)
    defaults = task_defaults(args.task)
    cfg = model_entry(args, {**TRAIN_MODEL_DEFAULTS, "vocab": defaults["vocab"]})
    if args.classes is None and cfg.arch != "encoder-decoder":
        classes = defaults.get("classes", 0)
        if classes and cfg.tie_embeddings:
            if args.tie_embeddings:  # asked for: a tied head the task's classifier cannot have
                raise ConfigError(f"--tie-embeddings: task {args.task} trains a classification head, which has no "
                                  "vocabulary to share; give --no-tie-embeddings or another --task")
            cfg = cfg.replace(tie_embeddings=False)  # the preset's or the file's LM head gives way to the task's
        cfg = cfg.replace(classes=classes)  # the task decides the head
    cores = os.cpu_count() or 1
    if args.threads is not None and not 1 <= args.threads <= cores:
        raise ConfigError(f"threads: must be 1 to this machine's {cores} cores (got {args.threads}); more threads than "
                          "cores only wait for each other")
    optimizer = args.optimizer or defaults["optimizer"]
    options = RuleOptions(
        optimizer=optimizer, lr=DEFAULT_LR[optimizer] if args.lr is None else args.lr,
        weight_decay=args.weight_decay, mirror_steps=args.mirror_steps,
        **{name: getattr(args, name) for name in RULE_OPTION_FLOATS},
    )
    spec = TrainSpec(
        cfg=cfg,
        task=args.task,
        rule=args.rule,
        steps=args.steps,
        seed=args.seed,
        device=args.device,
        dtype=args.dtype,
        corpus=args.corpus,
        eval_batches=args.eval_batches,
        eval_every=args.eval_every,
        options=options,
        measure=bool(args.measure or args.out_dir),
        warmup=args.warmup,
    )
    spec.check()  # every mistake is reported before torch is imported
    from .analytic.engine import check_overflow
    from .config import configs_frame

    # a step whose executed costs leave exact 64-bit integers could not be metered exactly (docs/failures.md)
    check_overflow(configs_frame([("", cfg)]), ["executed"], args.mirror_steps)
    if args.record_failure is None:  # what the run needs, against this machine, before any work (issue 66, N8)
        from .pipeline import check_command_train_memory

        check_command_train_memory(cfg, args.rule, args.dtype, optimizer, args.nproc, args.device, args.corpus)
    from .analytic.catalogue import check_architecture

    check_architecture(args.rule, cfg, "--rule")
    if args.nproc != 1 or args.parallel != "ddp" or args.backend != "auto" or args.replicate != 1:
        from .analytic.comm import check_parallel, check_parallel_model

        check_parallel(args.rule, args.parallel, args.nproc, args.backend, args.replicate)  # before any process starts
        check_parallel_model(cfg, args.parallel, args.nproc)
        if args.nproc == 1 and (args.parallel != "ddp" or args.backend != "auto"):
            flag = "parallel" if args.parallel != "ddp" else "backend"
            raise ConfigError(f"{flag}: --{flag} {getattr(args, flag)} is for a run of several processes; with --nproc 1 "
                              "it would do nothing (give --nproc 2 or more)")
    import torch

    if args.nproc > 1 and args.backend == "nccl" and (args.device == "cpu" or not torch.cuda.is_available()):
        raise ConfigError("backend: nccl needs CUDA GPUs, and this run has none (allowed here: auto, gloo)")

    from .io import write_parquet
    from .measure.run import failed_run, train
    from .measure.trace import TRACE_COLUMNS

    if args.threads is not None:  # 1 to the cores (check_calibrate_flags)
        torch.set_num_threads(args.threads)
    comm = None
    if args.record_failure is not None:
        result = failed_run(spec, args.record_failure)
    elif args.nproc > 1:  # a data-parallel run: measure/distributed.py, docs/distributed.md
        from .measure.distributed import train_distributed

        result, comm, comm_line = train_distributed(spec, args.nproc, args.parallel, args.backend, args.threads or 1,
                                                    args.replicate)
    else:
        result = train(spec)
    written = []
    if args.out_dir:
        from .measure.provenance import file_metadata

        out_dir = Path(args.out_dir)
        metadata = file_metadata(torch.device(result.device), args.config_hash)
        write_parquet(result.measured, out_dir / "measured.parquet", metadata)
        write_parquet(result.steps, out_dir / "steps.parquet", metadata)
        trace = result.trace if result.trace is not None else pd.DataFrame(columns=TRACE_COLUMNS)
        write_parquet(trace, out_dir / "trace.parquet", metadata)
        if comm is not None:
            write_parquet(comm, out_dir / "comm.parquet", metadata)
        written.append(str(out_dir))
    if args.out:
        write_parquet(result.steps, args.out)
        written.append(args.out)
    where = f" -> {', '.join(written)}" if written else ""
    line = (
        f"{args.rule} on {args.task} ({describe_config(cfg)}), {len(result.steps)} step{'s' * (len(result.steps) != 1)} on {result.device}: "
        f"status {result.status}; loss {result.first_loss:.4f} -> {result.final_loss:.4f}; "
        f"validation loss {result.val_loss:.4f}, accuracy {result.val_accuracy:.4f}"
    )
    m = result.summary
    if m.get("timed_steps"):
        line += (
            f"; step {m['step_time_median_s'] * 1e3:.2f} ms (median of {m['timed_steps']}, IQR "
            f"{m['step_time_iqr_s'] * 1e3:.2f} ms), {human(m['tokens_per_s'])} tokens/s, "
            f"{human(m['flops_per_step'], 'FLOPs')} per step"
        )
    if comm is not None:
        from .measure.distributed import comm_line_text

        line += comm_line_text(args.nproc, args.parallel, comm_line, args.replicate)
    print(line + where)
    if result.message:
        sys.stderr.write(f"trainingcost train: run ended with status {result.status}: {result.message}\n")
    return 0


TRACE_NUMBERS = ("count", "flops", "bytes_read", "bytes_written")


def check_trace_values(trace: pd.DataFrame, path) -> None:
    """Every value of a trace as the tracer writes it (measure/trace.py), or one line naming the column: text where
    text goes, finite counts of at least 0, and a run's spec (when present) a JSON object."""
    import json as _json

    from .measure.trace import TRACE_COLUMNS

    for column in [*(c for c in TRACE_COLUMNS if c not in TRACE_NUMBERS), *(["spec"] if "spec" in trace else [])]:
        if not trace[column].map(lambda v: isinstance(v, str)).all():
            raise ConfigError(f"--trace: {path}: column {column} must hold text")
    for column in TRACE_NUMBERS:
        values = trace[column]
        if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values) or \
                not np.isfinite(values.to_numpy(dtype=float)).all() or (values < 0).any():
            raise ConfigError(f"--trace: {path}: column {column} must hold finite numbers of at least 0")
    if "spec" in trace:
        for text in trace["spec"].unique():
            try:
                ok = isinstance(_json.loads(text), dict)
            except ValueError:
                ok = False
            if not ok:
                raise ConfigError(f"--trace: {path}: column spec must hold each run's spec as a JSON object")


COLLECTIVES_ONLY = ("nproc", "backend", "after_compute_ms", "max_bytes")  # calibrate's flags for --collectives alone
COLLECTIVES_DEFAULTS = {"nproc": 2, "backend": "auto", "after_compute_ms": 0.0}
MAX_COLLECTIVE_BYTES = 2 ** 34  # 16 GiB: nccl-tests' own sweeps stop there (doc/PERFORMANCE.md examples)


def check_calibrate_flags(args: argparse.Namespace) -> None:
    """calibrate's flags, before any work: counts within this machine, and no flag the chosen mode ignores."""
    cores = os.cpu_count() or 1
    if args.threads is not None and not 1 <= args.threads <= cores:
        raise ConfigError(f"threads: must be 1 to this machine's {cores} cores (got {args.threads}); more threads than "
                          "cores only wait for each other")
    if not 0 <= args.neighbours < cores:
        raise ConfigError(f"neighbours: must be 0 to {cores - 1} (this machine's {cores} cores, one for the "
                          f"calibration; got {args.neighbours})")
    modes = [flag for flag, on in (("--trace", args.trace is not None), ("--collectives", args.collectives),
                                   ("--device-model", args.device_model)) if on]
    if len(modes) > 1:
        raise ConfigError(f"{modes[1]}: give one of --trace, --collectives and --device-model, not {' and '.join(modes)}")
    if not args.collectives:
        given = [name for name in COLLECTIVES_ONLY if getattr(args, name) is not None]
        if given:
            raise ConfigError(f"--{given[0].replace('_', '-')}: for --collectives only (it would be ignored)")
        return
    for name, value in COLLECTIVES_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if not 2 <= args.nproc <= cores:
        raise ConfigError(f"nproc: --collectives needs 2 to this machine's {cores} cores' processes (got {args.nproc})")
    if args.after_compute_ms < 0:
        raise ConfigError(f"after_compute_ms: must be 0 or more milliseconds (got {args.after_compute_ms:g})")
    if args.max_bytes is not None and not 16384 <= args.max_bytes <= MAX_COLLECTIVE_BYTES:
        raise ConfigError(f"max_bytes: must be 16384 (two sizes, 4 and 16 KiB, to fit a latency and a bandwidth) to "
                          f"{MAX_COLLECTIVE_BYTES:,} bytes (got {args.max_bytes:,})")


def cmd_calibrate(args: argparse.Namespace) -> int:
    check_calibrate_flags(args)
    if args.collectives:  # measure/collectives.py, docs/distributed.md
        return calibrate_collectives_command(args)
    if args.device_model:  # measure/device_model.py, docs/planning.md
        return calibrate_device_model_command(args)
    if args.trace is None:
        raise ConfigError("--trace: required (or --collectives)")
    if not 0 < args.tolerance < 1:
        raise ConfigError(f"tolerance: must be between 0 and 1 (got {args.tolerance})")
    if not args.time_cap > 0:
        raise ConfigError(f"time_cap: must be positive seconds (got {args.time_cap})")
    from .measure.trace import TRACE_COLUMNS

    trace = read_table(args.trace, "--trace", TRACE_COLUMNS, "a run's trace.parquet (train --out-dir)")
    if trace.empty and args.keep_untrusted:  # the workflow's sweep of runs that all failed (issue 66, N9)
        from .findings.calibration import untraced_calibration, write_calibration

        write_calibration(untraced_calibration(args.dtype, "no traced operations: every training run failed"), args.out)
        print(f"no traced operations in {args.trace} (every training run failed): a calibration marked untrusted, with "
              f"no kernels -> {args.out}")
        return 0
    if trace.empty:
        raise ConfigError(f"--trace: {args.trace} holds no traced operations (train with --out-dir writes trace.parquet)")
    check_trace_values(trace, args.trace)
    import torch

    from .findings.calibration import CalibrationBusy, calibrate, write_calibration
    from .train.run import resolve_device

    if args.threads is not None:  # 1 to the cores (check_calibrate_flags)
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    try:
        result = calibrate(device, args.dtype, trace, tolerance=args.tolerance, time_cap_s=args.time_cap, probe=args.probe,
                           keep_untrusted=args.keep_untrusted, neighbours=args.neighbours)
    except CalibrationBusy as busy:
        sys.stderr.write(f"trainingcost {busy}\n")
        return 1
    write_calibration(result, args.out)
    if not result["trusted"]:
        print(f"{result['provenance']['device_name']} ({args.dtype}): no trusted calibration: the machine is busy: "
              f"{result['untrusted']}; kept, marked untrusted -> {args.out}")
        return 0
    print(f"{result['provenance']['device_name']} ({args.dtype}): {len(result['kernels'])} kernels timed in "
          f"{result['rounds']} rounds ({result['seconds_spent']:.1f} s; the last two agree within "
          f"{result['round_agreement']:.1%}); launch {result['launch_overhead_s'] * 1e6:.2f} us; timing quality "
          f"{result['load']['timing_quality']} -> {args.out}")
    return 0


def calibrate_device_model_command(args: argparse.Namespace) -> int:
    import torch

    from .findings.calibration import write_calibration
    from .measure.device_model import DTYPES, measure_device_model
    from .train.run import resolve_device

    if args.dtype not in DTYPES:
        raise ConfigError(f"dtype: --device-model measures {', '.join(DTYPES)} (got {args.dtype})")
    if args.threads is not None:  # 1 to the cores (check_calibrate_flags)
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    result = measure_device_model(device, args.dtype)
    spread = ", ".join(f"{name} {share:.0%}" for name, share in result["untrusted"].items())
    if not result["trusted"] and not args.keep_untrusted:  # as --time-cap's help says: one line, no file
        sys.stderr.write(f"trainingcost calibrate: the machine is busy: the repeats of {spread} spread by more than "
                         "10% of their medians; nothing written (--keep-untrusted keeps them, marked untrusted)\n")
        return 1
    write_calibration(result, args.out)
    bw = max(b for _, b in result["bandwidth"])
    trust = "" if result["trusted"] else f"; untrusted (the device is busy; interquartile spread {spread})"
    print(f"{result['device_name']} ({args.dtype}): GEMM {result['gemm_flops'] / 1e12:.3g} TFLOP/s, copy "
          f"{bw / 1e9:.3g} GB/s, attention {result['flash_forward_flops'] / 1e12:.3g} / "
          f"{result['flash_backward_flops'] / 1e12:.3g} TFLOP/s forward / backward, launch "
          f"{result['launch_s'] * 1e6:.2f} us{trust} -> {args.out}")
    return 0


def calibrate_collectives_command(args: argparse.Namespace) -> int:
    from .analytic.comm import BACKENDS

    if args.nproc < 2:
        raise ConfigError(f"nproc: --collectives needs at least 2 processes (got {args.nproc})")
    if args.backend not in BACKENDS:
        raise ConfigError(f"backend: {args.backend!r} is not allowed (allowed: {', '.join(BACKENDS)})")
    if not 0 < args.tolerance < 1:
        raise ConfigError(f"tolerance: must be between 0 and 1 (got {args.tolerance})")
    if args.backend == "nccl":
        import torch

        if args.device == "cpu" or not torch.cuda.is_available():
            raise ConfigError("backend: nccl needs CUDA GPUs, and this run has none (allowed here: auto, gloo)")
        if args.nproc > torch.cuda.device_count():
            raise ConfigError(f"nproc: nccl runs one process per GPU; this machine has {torch.cuda.device_count()} "
                              f"(got {args.nproc})")
    from .findings.calibration import write_calibration
    from .measure.collectives import CollectivesBusy, calibrate_collectives

    try:
        result = calibrate_collectives(args.nproc, args.device, args.backend, args.max_bytes, args.tolerance,
                                       args.time_cap, args.after_compute_ms / 1e3)
    except CollectivesBusy as busy:
        sys.stderr.write(f"trainingcost {busy}\n")
        return 1
    write_calibration(result, args.out)
    fits = "; ".join(f"{op} {f['alpha_s'] * 1e6:.0f} us + {1 / f['beta_s_per_byte'] / 1e9:.2f} GB/s"
                     for op, f in result["fit"].items())
    print(f"{result['backend']} on {result['world']} processes: {fits} ({result['rounds']} rounds, "
          f"{result['seconds_spent']:.1f} s) -> {args.out}")
    return 0


def cmd_hardware(args: argparse.Namespace) -> int:
    from .config.hardware import DTYPES, devices

    rows = []
    for d in devices().values():
        row = {"device": d.name, "label": d.label}
        row.update({f"{t} TFLOP/s": (None if d.peak(t) is None else d.peak(t) / 1e12) for t in DTYPES})
        row.update({"memory GB": d.memory_bytes / 1e9, "bandwidth GB/s": d.bandwidth_bytes_per_s / 1e9,
                    "power W": d.power_w})
        if args.sources:
            row.update({f"source of {q}": d.sources[q] for q in d.sources})
        rows.append(row)
    table = pd.DataFrame(rows)
    if args.format == "csv":
        sys.stdout.write(table.to_csv(index=False))
    elif args.format == "json":
        records = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
                   for r in table.to_dict(orient="records")]  # json's own writer: "GB/s", not pandas' "GB\/s"
        sys.stdout.write(json.dumps(records, indent=1) + "\n")
    else:
        print(table.to_string(index=False, na_rep="-"))
        print("Dense peaks (sparsity figures halved, as the datasheets' footnotes say); sources: --sources, or "
              "src/trainingcost/config/hardware.yaml.")
    return 0


# ---------------------------------------------------------------------------
# Help texts from the declarations: which rules take a hyperparameter and their defaults are the rule specs'
# (rules/<name>/__init__.py, RuleSpec.defaults); no rule is named here.

# Hyperparameter -> (what it sets, the RuleSpec.defaults key of its default, how that default reads).
OPTION_HELP = {"weight_decay": ("the optimizer's weight decay", "weight_decay", "{:g}"), **RULE_OPTION_HELP}


def _grouped(values: dict, form: str) -> str:
    """``{name: value}`` in words: the most common value first, then each other with the names that take it
    ("0.05 for sgd and momentum, 0.003 for adam"; "0, or 0.001 for kp" where one value is everyone else's)."""
    by_value: dict = {}
    for name, value in values.items():
        by_value.setdefault(value, []).append(name)
    if len(by_value) == 1:
        return form.format(next(iter(by_value)))
    common = max(by_value, key=lambda v: len(by_value[v]))
    others = [f"{form.format(v)} for {' and '.join(names)}" for v, names in by_value.items() if v != common]
    if len(by_value[common]) > 2:
        return f"{form.format(common)}, or " + ", ".join(others)  # the default, and the exceptions
    return ", ".join(f"{form.format(v)} for {' and '.join(names)}" for v, names in by_value.items())


def rule_default_help(option: str) -> str:
    """``--<option>``'s help: the rules that declare it and their defaults, read from the specs."""
    what, key, form = OPTION_HELP.get(option, (option.replace("_", " "), option, "{:g}"))
    declared = {spec.name: spec.defaults[key] for spec in rules() if key in spec.defaults}
    if not declared:
        return what
    if len(declared) == len(rule_names()):
        return f"{what} (default {_grouped(declared, form)})"
    return f"{', '.join(declared)}: {what} (default {_grouped(declared, form)})"


def build_parser(parser_class=Parser) -> Parser:
    """The command line's parser; ``parser_class`` (the Python API's) may raise instead of exiting on an error."""
    parser = parser_class(prog="trainingcost", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"trainingcost {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=parser_class)

    est = sub.add_parser("estimate", help=ESTIMATE_HELP)
    estimate_flags(est)
    est.set_defaults(func=cmd_estimate)

    trn = sub.add_parser("train", help="train one model under one learning rule on a built-in task")
    add_model_flags(trn)
    trn.add_argument("--task", default="lm", choices=TASKS, help="lm (byte-level text), classify, copy, reverse")
    trn.add_argument("--rule", default=REFERENCE_RULE, choices=rule_names())
    trn.add_argument("--steps", type=integer, default=200)
    trn.add_argument("--seed", type=integer, default=0)
    trn.add_argument("--lr", type=number, help="default: " + _grouped(DEFAULT_LR, "{:g}"))
    trn.add_argument("--optimizer", choices=OPTIMIZERS,
                     help="sgd, momentum (SGD, 0.9) or adam (AdamW); default: "
                          + _grouped({task: task_defaults(task)["optimizer"] for task in TASKS}, "{}"))
    trn.add_argument("--weight-decay", type=number, help=rule_default_help("weight_decay"))
    trn.add_argument("--mirror-steps", type=integer, default=1, help=mirror_steps_help())
    for name in RULE_OPTION_FLOATS:
        trn.add_argument("--" + name.replace("_", "-"), type=number, help=rule_default_help(name))
    trn.add_argument("--device", default="auto", choices=DEVICES)
    trn.add_argument("--dtype", default="fp32", choices=list(TRAIN_DTYPES))
    trn.add_argument("--corpus", help="a text file for task lm (default: the Python standard library's source)")
    trn.add_argument("--eval-batches", type=integer, default=4, help="validation batches")
    trn.add_argument("--eval-every", type=integer, default=0, help="evaluate every N steps (default: after the last)")
    trn.add_argument("--out", help="write one row per step to this parquet file")
    trn.add_argument("--measure", action="store_true", help="measure time, memory, energy and FLOPs (implied by --out-dir)")
    trn.add_argument("--warmup", type=integer, default=2, help="steps before the FLOP-counted step and the timed steps")
    trn.add_argument("--out-dir", help="measure, and write steps.parquet and measured.parquet here")
    trn.add_argument("--threads", type=integer, help="CPU threads for torch (default: torch's choice; 1 per rank "
                                                     "with --nproc)")
    trn.add_argument("--nproc", type=integer, default=1,
                     help="data-parallel processes on this machine (torch.distributed's launcher; the global batch is "
                          "nproc x --batch; docs/distributed.md)")
    trn.add_argument("--parallel", default="ddp", choices=PARALLEL,
                     help="ddp (DistributedDataParallel, or one explicit all-reduce for rules that bypass it), "
                          "zero2 or fsdp (FSDP2 fully_shard; " + ", ".join(sharded_rules()) + ")")
    trn.add_argument("--replicate", type=integer, default=1, metavar="R",
                     help="with --parallel zero2 or fsdp: HSDP, the processes in R replica groups, FSDP2 sharding "
                          "inside each (a 2-D device mesh), the gradient shards all-reduced across them; R divides "
                          "--nproc, groups of two or more (docs/distributed.md)")
    trn.add_argument("--backend", default="auto", choices=BACKENDS, help="auto: nccl on CUDA, gloo on CPU")
    trn.add_argument("--config-hash", default=os.environ.get("TRAININGCOST_CONFIG_HASH"),
                     help="the workflow config's hash, kept in the tables' metadata (default: $TRAININGCOST_CONFIG_HASH, "
                          "which the workflow sets without making it a job parameter)")
    trn.add_argument("--record-failure", type=integer, metavar="EXIT_CODE",
                     help="do not train: write the tables of this run as failed with EXIT_CODE (the workflow's fallback "
                          "when a training process dies)")
    trn.set_defaults(func=cmd_train)

    cal = sub.add_parser("calibrate", help="time every kernel of traced steps on a device, until two rounds agree")
    cal.add_argument("--trace", help="a trace parquet (the trace.parquet of `train --out-dir`, or "
                                      "the workflow's results/tables/trace.parquet)")
    cal.add_argument("--collectives", action="store_true",
                     help="time all-reduce, reduce-scatter, all-gather and broadcast over 4 KiB .. --max-bytes on "
                          "--nproc processes and fit alpha + beta * bytes per op (docs/distributed.md)")
    cal.add_argument("--device-model", action="store_true",
                     help="measure the step-time model's device numbers (large-GEMM ceiling, copy bandwidth by size, "
                          "fused attention, launch) for `plan --device-model` (docs/planning.md)")
    cal.add_argument("--nproc", type=integer, help="processes for --collectives (default 2)")
    cal.add_argument("--backend", help="for --collectives: auto (nccl on CUDA, gloo on CPU; the default), gloo, nccl")
    cal.add_argument("--after-compute-ms", type=number,
                     help="for --collectives: compute this long on every rank before each timed collective, as a "
                          "training step does (default 0: back to back)")
    cal.add_argument("--max-bytes", type=integer,
                     help="for --collectives: the largest buffer (default 256 MiB on CUDA, 16 MiB on CPU)")
    cal.add_argument("--device", default="auto", choices=DEVICES)
    cal.add_argument("--dtype", default="fp32", choices=list(TRAIN_DTYPES))
    cal.add_argument("--tolerance", type=number, default=0.05,
                     help="two rounds agree when their medians differ by at most this share of the time (default 0.05)")
    cal.add_argument("--probe", action="store_true",
                     help="also time each run's step at minimal sizes (the host's overhead; measure/probe.py)")
    cal.add_argument("--time-cap", type=number, default=60.0,
                     help="seconds; without convergence by then: a one-line 'machine is busy' error, no file")
    cal.add_argument("--keep-untrusted", action="store_true",
                     help="without convergence by --time-cap, write the rounds so far marked untrusted and exit 0 (the "
                          "workflow: its findings come out on a busy machine, marked 'no trusted calibration')")
    cal.add_argument("--threads", type=integer)
    cal.add_argument("--neighbours", type=integer, default=0,
                     help="processes that train the traced runs' steps beside the rounds: the concurrency the timed "
                          "jobs had, less one (default 0: the calibration alone)")
    cal.add_argument("--out", required=True, help="the calibration JSON")
    cal.set_defaults(func=cmd_calibrate)

    hw = sub.add_parser("hardware", help="the hardware catalogue: dense peaks, memory, bandwidth, power, cited")
    hw.add_argument("--format", default="table", choices=["table", "csv", "json"])
    hw.add_argument("--sources", action="store_true", help="add the source of every quantity")
    hw.set_defaults(func=cmd_hardware)

    add_plan_parser(sub)
    add_curves_parser(sub)
    add_serve_parser(sub)

    cfg = sub.add_parser("configs", help="enumerate a sweep into a parquet table")
    cfg.add_argument("--config", required=True, help="a config YAML file")
    cfg.add_argument("--out", required=True)
    cfg.set_defaults(func=cmd_configs)

    chk = sub.add_parser("check", help="validate a workflow config file as the workflow does, and run nothing")
    chk.add_argument("--config", required=True, help="a config YAML file")
    chk.set_defaults(func=cmd_check)

    ana = sub.add_parser("analytic", help="analytic cost and memory tables of a sweep")
    ana.add_argument("--config", required=True)
    ana.add_argument("--configs", required=True, help="the configs parquet")
    ana.add_argument("--out", required=True)
    ana.add_argument("--memory-out", required=True)
    ana.set_defaults(func=cmd_analytic)
    return parser


from .config.errors import Terminated  # noqa: E402 - SIGTERM, raised where the process is (measure/distributed.py too)


def _terminate(signum, frame):
    raise Terminated


# Outputs each command writes: (argument, whether it names a directory).
OUTPUTS = (("out", False), ("out_dir", True), ("memory_out", False), ("figure", False))
INPUTS = ("config", "configs", "trace", "calibration", "hf_config", "study", "hardware", "frontiers", "measured_run",
          "corpus")  # the flags that name a file (or folder) a command reads


def check_outputs_apart(args: argparse.Namespace) -> None:
    """No output is one of the command's inputs (``configs --out x.yaml --config x.yaml``) or another output
    (``analytic --out a.parquet --memory-out a.parquet``): one line naming both flags, before any work."""
    def resolved(value):
        if not isinstance(value, (str, os.PathLike)) or not str(value):
            return None
        try:  # a symbolic-link loop or an unreadable folder: the flag's own check names it, later
            return Path(os.path.realpath(Path(value).expanduser()))
        except (OSError, RuntimeError, ValueError):
            return None

    outs = [(name, resolved(getattr(args, name, None))) for name, _ in OUTPUTS if name != "out_dir"]
    outs = [(name, path) for name, path in outs if path is not None]
    ins = []
    for name in INPUTS:
        path = resolved(getattr(args, name, None))
        if path is not None:
            folder = name in ("hf_config", "measured_run") and os.path.isdir(path)
            ins += [(name, path)] + ([(name, path / "config.json")] if folder and name == "hf_config" else [])
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    for i, (name, path) in enumerate(outs):
        for other, there in outs[:i] + ins:
            if path == there:
                what = "an input" if (other, there) in ins else "another output"
                raise ConfigError(f"{flag(name)}: {getattr(args, name)} is also {flag(other)}, {what} of this command; give "
                                  "each output a file of its own")
COMMAND_NEEDS = {"train": ("torch", "pyarrow"), "calibrate": ("torch", "pyarrow"), "curves": ("torch", "pyarrow"),
                 "configs": ("pyarrow",), "analytic": ("pyarrow",), "serve": ("fastapi", "uvicorn")}  # src/trainingcost/extras.py: the install's layers
FLAG_NEEDS = {"figure": ("matplotlib", "seaborn"), "frontiers": ("pyarrow",), "measured_run": ("pyarrow",)}


def require_extras(args: argparse.Namespace) -> None:
    """What this command and its flags import beyond the light install, checked before any work (extras.py)."""
    from .extras import require

    for module in COMMAND_NEEDS.get(args.command, ()):
        require(module)
    for name, modules in FLAG_NEEDS.items():
        if getattr(args, name, None):
            for module in modules:
                require(module, name)
    for name in ("out", "memory_out"):
        if str(getattr(args, name, None) or "").endswith(".parquet"):
            require("pyarrow", name)


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit status: 0 done, 2 a user mistake (one line), 130 interrupted (Ctrl-C),
    143 terminated (SIGTERM); an interrupted command removes the files it had written."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse names only "trainingcost"; the subcommand's own parser names itself
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    if sys.stdout is None:  # started with standard output closed (>&-): whatever it prints would vanish
        if sys.stderr is not None:
            sys.stderr.write(f"trainingcost {args.command}: error: standard output is closed; nothing can be printed "
                             "(redirect it to a file or /dev/null)\n")
        return 2
    if not 0 <= (getattr(args, "mirror_steps", 1) or 0) <= 1000:  # analytic/plan.py's MAX_MIRROR_STEPS, every command
        sys.stderr.write(f"trainingcost {args.command}: error: argument --mirror-steps: must be 0 to 1000 weight-mirror "
                         "steps per training step\n")
        return 2
    mark = begin_command()
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if on_main else None
    # Ctrl-C raises KeyboardInterrupt from here on, so that what the command writes is undone (entry.py's handler,
    # which only says so and dies, covers the imports before); an ignored SIGINT stays ignored.
    previous_int = signal.getsignal(signal.SIGINT) if on_main else None
    if previous_int not in (None, signal.SIG_IGN):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        require_extras(args)  # the light install: one line naming the extra, before any work
        for name, directory in OUTPUTS:
            if getattr(args, name, None):
                check_output(getattr(args, name), "--" + name.replace("_", "-"), directory)  # the flag, whatever the command
        check_outputs_apart(args)
        if getattr(args, "out", None) and getattr(args, "out_dir", None):
            out, folder = Path(args.out).resolve(), Path(args.out_dir).resolve()
            if out == folder or folder in out.parents:
                raise ConfigError(f"out: {args.out} is --out-dir {args.out_dir} or inside it, where the run writes its own "
                                  "tables (measured.parquet, steps.parquet, trace.parquet); give a path outside it")
        status = args.func(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # a full or closed stdout fails here, inside the handlers below, not at exit
        return status
    except (ConfigError, ModuleNotFoundError) as exc:  # (a SizeOverflowError too)
        from .extras import MissingExtra, is_missing_extra, message

        if isinstance(exc, ModuleNotFoundError):
            if not is_missing_extra(exc):
                raise  # a bug, not a missing extra
            exc = MissingExtra(message(exc.name))
        # Commands that read a config file name its fields; the others name their flags.
        text = str(exc) if args.command in ("configs", "analytic", "check") else flag_message(str(exc))
        sys.stderr.write(f"trainingcost {args.command}: error: {text}\n")
        return 2
    except (KeyboardInterrupt, Terminated) as exc:
        undo_since(mark)
        how = "interrupted" if isinstance(exc, KeyboardInterrupt) else "terminated"
        sys.stderr.write(f"trainingcost {args.command}: {how}; nothing written\n")
        return 130 if isinstance(exc, KeyboardInterrupt) else 143
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except OSError as exc:
        if exc.errno not in FULL_OR_READ_ONLY:
            raise
        # A full disk or quota (or a read-only file system) while writing: what this command wrote is removed, so a
        # run folder is whole or absent, never half (issue 40); one line names the file.
        undo_since(mark)
        where = f" writing {exc.filename}" if exc.filename else " writing its output"
        _stderr_line(f"trainingcost {args.command}: error: {os.strerror(exc.errno)}{where}; nothing written\n")
        return 1
    finally:
        keep_since(mark)  # (after an undo, nothing is left to keep)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if previous_int not in (None, signal.SIG_IGN):
            signal.signal(signal.SIGINT, previous_int)


FULL_OR_READ_ONLY = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _stderr_line(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError:
        pass


INTERRUPT_STATUS = {130: signal.SIGINT, 143: signal.SIGTERM}  # what main() returns after each signal


def run() -> None:
    """The console entry point: :func:`main`, and after an interrupt, death by the same signal.

    A process that catches SIGINT to clean up must then die of it, not exit 130, so that a calling shell
    stops too (bash's "wait and cooperative exit"): otherwise the workflow's `|| --record-failure` fallback
    would record an interrupted run as a failed one. Shells report the status as 130 (SIGINT) or 143 (SIGTERM).
    """
    status = main()
    for signum in INTERRUPT_STATUS.values():  # the command is over: a late signal ends the process, says nothing
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
    if status in INTERRUPT_STATUS:
        sys.stderr.flush()
        signal.signal(INTERRUPT_STATUS[status], signal.SIG_DFL)
        os.kill(os.getpid(), INTERRUPT_STATUS[status])
    sys.exit(status)


if __name__ == "__main__":
    run()
