"""Published training runs (benchmarks/published_runs.csv): each row's model, layout and measured step time.

Every measured figure becomes a step time with its source's own definition (``measured_definition``):
- ``tflops_per_gpu`` (Megatron-LM, Narayanan et al. 2021, eq. 3): step = 96 B s l h^2 (1 + s/6h + V/16lh) / (N X);
- ``step_time_s`` (Korthikanti et al. 2022, Table 5): the iteration time itself;
- ``tokens_per_s`` (all GPUs): step = B s / throughput;
- ``tokens_per_s_per_gpu`` (MosaicML llm-foundry's and torchtitan's tables, NeMo's performance summary, TinyLlama's
  README): step = B s / (throughput x GPUs);
- ``samples_per_s_per_gpu`` (Qi et al. 2024, Zero Bubble Pipeline Parallelism, Tables 4 and 6): step = B / (throughput x
  GPUs), B the global batch in sequences;
- ``neox_flops_per_gpu`` (GPT-NeoX's logged "approx flops per GPU", EleutherAI/gpt-neox megatron/logging.py get_flops
  at the 20B release, commit c560814b, 2022): step = B s (6 N + 60 s h l) / (N_gpus X), N the model's parameters.
Rows whose figure is a model TFLOP/s or an MFU of an unstated FLOP count are not converted (they are not in the
table; benchmarks/plan_accuracy.md lists what was left out and why).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from ...config.choices import SPELLINGS, spelling
from ...config.errors import ConfigError

from .step import Layout

FIGURES = ("tflops_per_gpu", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s_per_gpu",
           "neox_flops_per_gpu")


def measured_step_time(row: dict) -> float:
    _required(row, "measured_figure", "measured_value", "global_batch", "seq_len", "gpus")
    figure, value = row["measured_figure"].strip(), _number(row, "measured_value")
    if not value > 0:
        raise ConfigError(f"published run {row.get('run', '?')!r}: measured_value: a positive number (got {value!r})")
    B, s, n = _integer(row, "global_batch"), _integer(row, "seq_len"), _integer(row, "gpus")
    if figure == "tflops_per_gpu":
        l, h, V = int(row["layers"]), int(row["d_model"]), int(row["vocab"])
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        return flops / (n * value * 1e12)
    if figure == "step_time_s":
        return value
    if figure == "tokens_per_s":
        return B * s / value
    if figure == "tokens_per_s_per_gpu":
        return B * s / (value * n)
    if figure == "samples_per_s_per_gpu":
        return B / (value * n)
    if figure == "neox_flops_per_gpu":

        from ..comm import parameter_tensors

        l, h = int(row["layers"]), int(row["d_model"])
        params = sum(math.prod(shape) for _, shape in parameter_tensors(model_of(row), "bp"))
        return B * s * (6 * params + 60 * s * h * l) / (n * value * 1e12)
    raise ConfigError(f"published run {row.get('run', '?')!r}: measured_figure: {figure!r} is not known (allowed: "
                      f"{', '.join(FIGURES)})")


def _given(row: dict, key: str) -> bool:
    return str(row.get(key) if row.get(key) is not None else "").strip() != ""


def _required(row: dict, *keys: str) -> None:
    """One line naming the first column a row must give and does not (absent or empty)."""
    for key in keys:
        if not _given(row, key):
            raise ConfigError(f"published run {row.get('run', '?')!r}: {key}: required (the column is missing or empty)")


def _number(row: dict, key: str) -> float:
    try:
        value = float(str(row[key]).strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError(f"published run {row.get('run', '?')!r}: {key}: a number (got {row[key]!r})")
    return value


def _integer(row: dict, key: str, default: int | None = None) -> int:
    if not _given(row, key) and default is not None:
        return default
    try:
        value = float(str(row[key]).strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value == int(value)):
        raise ConfigError(f"published run {row.get('run', '?')!r}: {key}: an integer (got {row[key]!r})")
    return int(value)


def model_of(row: dict):
    """The row's model. Columns it leaves out or empty take the plan's defaults for a model entry
    (config/model.py: kv_heads = heads, d_ff = 4 d, layernorm, gelu, sinusoidal positions, biases), as a user's
    model entry would; the blocks are pre-norm, as nearly every published run's are, unless a norm_position column
    says otherwise (OLMo 2's output)."""
    from ...config.model import OPTIONS, canonical_model

    row = spelled(row)
    _required(row, "arch", "layers", "d_model", "heads", "vocab", "seq_len")
    entry = dict(arch=row["arch"], layers=_integer(row, "layers"), d_model=_integer(row, "d_model"),
                 heads=_integer(row, "heads"), vocab=_integer(row, "vocab"), seq_len=_integer(row, "seq_len"),
                 norm_position=str(row["norm_position"]).strip() if _given(row, "norm_position") else "pre")
    if _given(row, "d_ff"):
        entry["d_ff"] = _integer(row, "d_ff")
    else:
        entry["ff_mult"] = 4
    for key in ("norm", "ffn", "positions", "bias"):
        if _given(row, key):
            entry[key] = row[key]
    for key in ("kv_heads", "head_dim", "experts", "experts_per_token", "shared_expert_ff"):  # optional columns (a
        if _given(row, key):                                             # mixture of experts, a head wider than d / heads)
            entry[key] = _integer(row, key)
    for key, meta in OPTIONS.items():  # any other architecture option a table gives a column (qk_norm, sliding_window ...)
        if key not in entry and _given(row, key):
            entry[key] = _option_value(row, key, meta["kind"])
    return canonical_model(entry, f"published run {row.get('run', '?')!r}")


TRUE, FALSE = ("true", "yes", "1"), ("false", "no", "0")


def _option_value(row: dict, key: str, kind: str):
    """A declared option's cell as its kind: a bool written true/false, yes/no or 1/0; an integer; a number; a string
    (the option's own check refuses a value it does not allow)."""
    text = str(row[key]).strip()
    if kind == "bool":
        if text.lower() not in TRUE + FALSE:
            raise ConfigError(f"published run {row.get('run', '?')!r}: {key}: true or false (got {row[key]!r})")
        return text.lower() in TRUE
    if kind == "int":
        return _integer(row, key)
    if kind == "float":
        return _number(row, key)
    return text


def spelled(row: dict) -> dict:
    """``row`` with its categorical columns in this project's spelling (config/choices.py :data:`SPELLINGS`, letter
    case aside); what is not known is left for the model's own checks to refuse in one line. HYBRID_SHARD (HSDP) is
    fsdp where the row's ``replicate`` column gives its replica groups, and refused where it does not."""
    out = {key: value.strip() if isinstance(value, str) else value for key, value in row.items()}
    for column in SPELLINGS:
        if out.get(column) is not None:
            out[column] = spelling(column, out[column])
    if out.get("sharding") in ("hybrid_shard", "hsdp", "_hybrid_shard_zero2"):
        if _integer(out, "replicate", 1) < 2:
            raise ConfigError(f"published run {out.get('run', '?')!r}: sharding: {row['sharding']!r} (HSDP) needs its "
                              "replica groups in the replicate column (2 or more), or give fsdp")
        out["sharding"] = "fsdp" if out["sharding"] != "_hybrid_shard_zero2" else "zero2"
    return out


def layout_of(row: dict, framework_name: str | None = None) -> Layout:
    """The row's layout as its source states it; what the framework does with it (overlap, what a ZeRO-3 gather
    moves, its attention kernel where the row names none) from the framework catalogue (the row's ``framework``,
    or ``framework_name``), the network from the cluster catalogue where the row names its cluster (else the
    device's usual system). No per-row overlap or link assumption."""
    from ...config.frameworks import cluster, framework, recompute_tail_of

    from ...config.hardware import device

    row = spelled(row)
    _required(row, "gpu", "gpus", "global_batch", "micro_batch")
    run = row.get("run", "?")
    fw = framework(framework_name or row.get("framework") or None, f"published run {run!r}: framework")
    gpu = device(row["gpu"])
    attention = gpu.attention_kernel(row.get("attention") or fw.attention)  # the kernel the row's GPU can run
    system = cluster(row["cluster"], f"published run {run!r}: cluster") if row.get("cluster") else None
    precision = row["precision"] if _given(row, "precision") else \
        ("bf16-mixed" if gpu.peak("bf16") is not None else "fp16-mixed")  # the plan's default: the best mixed one
    sequence_parallel = str(row.get("sequence_parallel") or "0").lower()
    if sequence_parallel not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ConfigError(f"published run {run!r}: sequence_parallel: 0 or 1 (got {row['sequence_parallel']!r})")
    return Layout(gpus=_integer(row, "gpus"), global_batch=_integer(row, "global_batch"),
                  micro_batch=_integer(row, "micro_batch"), tp=_integer(row, "tp", 1), pp=_integer(row, "pp", 1),
                  cp=_integer(row, "cp", 1), replicate=_integer(row, "replicate", 1),
                  interleave=_integer(row, "interleave", 1), ep=_integer(row, "ep", 1),
                  etp=_integer(row, "etp") if _given(row, "etp") else None,
                  sequence_parallel=sequence_parallel in ("1", "true", "yes", "on"),
                  sharding=row["sharding"] if _given(row, "sharding") else fw.sharding,
                  recompute=row.get("recompute") or "none", attention=attention,
                  precision=precision,
                  dp_overlap=fw.dp_overlap, selective_dp_overlap=fw.selective_dp_overlap, tp_overlap=fw.tp_overlap, tp_backward_overlap=fw.tp_backward_overlap, zero3_granularity=fw.zero3_granularity, dp_rails=fw.dp_rails,
                  gather_prefetch=fw.gather_prefetch, grad_reduce=fw.grad_reduce, zero1_sync=fw.zero1_sync,
                  zero_reduce=fw.zero_reduce,
                  fp8_weight_cache=fw.fp8_weight_cache, elementwise=elementwise_of(row, fw),
                  shard_copies=fw.shard_copies, fp8_gather=fw.fp8_gather, fp8_tp_gather=fw.fp8_tp_gather,
                  pipeline_split=fw.pipeline_split, recompute_tail=recompute_tail_of(fw, elementwise_of(row, fw)),
                  gpus_per_node=system.gpus_per_node if system else None, nic_gbps=system.nic_gbps if system else None,
                  fabric=tuple(sorted(system.latencies.items())) if system else None,
                  schedule=str(row.get("schedule") or "").strip().lower(),  # optional columns: a pipeline schedule
                  offload=str(row.get("offload") or "none").strip().lower())  # and an offload, where a run states one


def elementwise_of(row: dict, fw) -> str:
    """The row's norms, rotary and gated activations as its source states them, in the optional ``elementwise``
    column: fused (fused kernels, or torch.compile), eager (op by op), or the ones that run op by op joined by '+'
    (norm, rotary, gated: e.g. rotary+gated beside a fused RMSNorm); empty or absent: the framework's
    (config/frameworks.yaml)."""
    from ...config.errors import ConfigError
    from .step import EAGER_OPS, eager_ops

    given = str(row.get("elementwise") or "").strip()
    try:
        eager_ops(given or "fused")
    except ValueError:
        raise ConfigError(f"published run {row.get('run', '?')!r}: elementwise: {given!r} is not allowed (allowed: fused, "
                          f"eager, or some of {', '.join(EAGER_OPS)} joined by '+', or empty)") from None
    return given or fw.elementwise


def load(path: str | Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))
