"""The framework and cluster catalogues: what a training framework does with a layout, and what network a named
system gives each GPU, each field with its source.

``frameworks.yaml`` (package data): per framework (and version where its behaviour changed) the share of the
data- and tensor-parallel communication it overlaps with compute, what one ZeRO-3 gather moves, its DDP bucket, its
default attention kernel and sharding. ``clusters.yaml``: per named system its GPU, GPUs per node and the NIC
bandwidth per GPU (the node's NICs over its GPUs: NCCL spreads a collective across nodes over every NIC of the node).

Readers: ``trainingcost plan`` (``--framework``, ``--cluster``) and the published runs of
benchmarks/published_runs.csv (their ``framework`` and ``cluster`` columns), through analytic/steptime.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path


from .errors import ConfigError, not_in
from .shipped import load_shipped

WHEN = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")  # FAMILY@WHEN: a year, a month or a day

FRAMEWORKS = Path(__file__).with_name("frameworks.yaml")
CLUSTERS = Path(__file__).with_name("clusters.yaml")

FRAMEWORK_FIELDS = ("dp_overlap", "tp_overlap", "zero3_granularity", "zero3_gather", "attention", "sharding",
                    "dp_rails", "can")
CAN = ("shardings", "tensor", "pipeline", "interleave", "sequence_parallel", "uneven", "replicate")
# Optional fields, with their default where a framework does not state one: how the blocks are split over pipeline
# stages (even: Megatron's, blocks / pp with the head on the last stage; balanced: nanotron's greedy split by compute
# cost, the LM head counted as V d against a block's 4 d^2 + 3 d d_ff; analytic/plan_facts.py, stages)
# tp_backward_overlap: the share of the backward's own tensor-parallel collectives (the column-parallel layers' input
# gradients) hidden behind the weight-gradient products, where a framework overlaps those alone (Megatron-LM's
# asynchronous all-reduce); default the framework's tp_overlap
# gather_prefetch: its ZeRO-3 / FSDP parameter all-gathers are issued ahead of the compute that needs them, so that
# dp_overlap hides them as it hides the gradient reductions (FSDP's prefetch, DeepSpeed's since late 2021); false:
# each gather blocks the compute (DeepSpeed ZeRO-3 of early 2021), only the gradient reductions overlap; default true
# grad_reduce: the dtype its data-parallel gradient reductions run in: compute (the weights' dtype), fp32 (always),
# fp32-if-bf16 (fp32 when the weights are bf16, else theirs); default compute
# zero1_sync: how it syncs ZeRO-1's gradients: overlapped (reduce-scatters bucketed during the backward: FSDP2's,
# Megatron-Core's distributed optimizer) or after_backward (one all-reduce of the gradient buffer after the last
# backward and one all-gather of the updated parameters after the step, neither overlapped: nanotron's with fp32
# gradient accumulation); default overlapped
# fp8_weight_cache: under fp8-mixed, whether it casts the weights to fp8 once per step and keeps them over the
# micro-batches (Megatron-Core's Transformer Engine layers, is_first_microbatch) or in every forward (torchao's
# float8 training); default false
# fp8_params: under fp8-mixed, whether its weights are kept in fp8 (NeMo's fp8_params: the fp8 copy and its transpose
# replace the bf16 working weights, so the cache costs no memory beyond bf16-mixed's); default false
# fp8_gather: under fp8-mixed, whether its ZeRO / FSDP parameter all-gathers carry the blocks' linear weights in fp8
# (torchao's enable_fsdp_float8_all_gather; Megatron-Core's fp8_param_gather, which NeMo's fp8_params implies: the
# weights gathered are the fp8 ones); default false
# fp8_tp_gather: under fp8-mixed, whether its sequence-parallel all-gathers carry fp8 (torchao's float8 tensor
# parallelism: the forward's inputs and the backward's output gradients cast before the gather); default false
# elementwise: how the blocks' norms, rotary embeddings and gated activations run: fused (one kernel each: Megatron's,
# Transformer Engine's, apex's or Triton kernels, or torch.compile's) or eager (the model's own PyTorch code op by op,
# RMSNorm and rotary through fp32 copies: torchtitan's and Hugging Face transformers' models without torch.compile);
# default fused (docs/planning.md, "Eager and fused elementwise kernels")
# shard_copies: whether its ZeRO/FSDP collectives pass through flat buffers copied on the compute stream (FSDP2: each
# all-gather's output copied out into the parameters, each reduce-scatter's input copied in from the gradients, cast
# to the reduce dtype; docs/planning.md, "Copies of FSDP2's collectives"); default false (the collectives read and
# write the parameters' and gradients' own buffers: FSDP1's flat parameters, Megatron's and DeepSpeed's contiguous
# buffers, XLA)
# recompute_tail: what its activation checkpointing's recompute leaves out (docs/planning.md, "What a recompute
# repeats"): repeated (the whole checkpointed forward again: Megatron's and DeepSpeed's CheckpointFunction, torch's
# reentrant checkpoint, torch before 2.1), early-stop (torch's non-reentrant checkpoint, early stop on by default
# since torch 2.1: the recompute halts once the last tensor the backward reads is rebuilt, so a pre-norm dense
# block's last product, whose output only joins the residual, is not repeated; a product run as a custom autograd
# Function, as fp8 linears are, packs its saved tensors after its GEMM and is repeated), traced (torch.compile: the
# backward graph recomputes only what it reads, fp8 products too); default repeated. A framework whose blocks run
# op by op in eager PyTorch (elementwise eager) and is compiled (--compile, a published run's fused) traces where its
# checkpoint is torch's non-reentrant one (compiled_traces: default, recompute_tail early-stop or traced; torchtitan's
# since 2025-08-29 is non-reentrant with early_stop=False, so repeats eagerly and traces compiled); a reentrant
# checkpoint (an autograd.Function) is not traced and repeats the whole block either way.
# split_backward: how its zero-bubble and DualPipe schedules keep a micro-batch between its input gradients (B) and
# its weight gradients (W): freed (what W does not read goes at B: the schedules' papers' counts, Qi et al.'s Megatron
# fork) or retained (torch.distributed.pipelining's stage_backward_input: the whole graph and every weight node's
# output gradient kept until W, analytic/tape/split.py); default freed
# zero_reduce: how its ZeRO-1 and ZeRO-2 reduce the gradients: reduce_scatter (one reduce-scatter per bucket: FSDP2's,
# Megatron-Core's distributed optimizer) or partition_reduce (DeepSpeed's stage 1 and 2, zero_optimization.reduce_scatter
# true by default: deepspeed/runtime/zero/stage_1_and_2.py average_tensor reduces each bucket slice to the rank that
# owns its partition, one NCCL reduce per (bucket, partition), so a step issues about buckets + dp - 1 reduces, each a
# ring over the dp ranks); default reduce_scatter
# selective_dp_overlap: the share of its data-parallel collectives hidden behind the compute under a per-operation
# recompute (a selective or named-tensor checkpoint policy), where that differs from dp_overlap: XLA on GPU before
# 2024-07-29 (jax 0.4.30 and older) moved the asynchronous all-gathers and reduce-scatters of a layer loop onto the
# compute stream under such a policy (openxla/xla#14397, jax-ml/jax#22252; copy insertion's region analysis, off by
# default from jax 0.4.31); default None (dp_overlap under every recompute)
OPTIONAL = {"pipeline_split": "even", "tp_backward_overlap": None, "gather_prefetch": True, "grad_reduce": "compute",
            "zero1_sync": "overlapped", "fp8_weight_cache": False, "fp8_params": False, "elementwise": "fused",
            "shard_copies": False, "fp8_gather": False, "fp8_tp_gather": False,
            "recompute_tail": "repeated", "compiled_traces": None, "split_backward": "freed",
            "selective_dp_overlap": None, "zero_reduce": "reduce_scatter"}
ZERO_REDUCE = ("reduce_scatter", "partition_reduce")
SPLIT_BACKWARDS = ("freed", "retained")
ELEMENTWISE = ("fused", "eager")
ZERO1_SYNC = ("overlapped", "after_backward")
GRAD_REDUCE = ("compute", "fp32", "fp32-if-bf16")
PIPELINE_SPLITS = ("even", "balanced")
RECOMPUTE_TAILS = ("repeated", "early-stop", "traced")
CHOICES = {"zero3_granularity": ("block", "tensor"), "zero3_gather": ("module", "sublayer", "block"),
           "attention": ("flash", "flash3", "cudnn", "unfused"), "sharding": ("none", "zero1", "zero2", "zero3", "fsdp")}
CLUSTER_FIELDS = ("gpu", "gpus_per_node", "nic_gbps", "fabric")
# A cluster's host, where it is not the device's usual system's (analytic/steptime/offload.py reads them): its PCIe
# link per GPU each way, its DRAM per node, its NVMe drives per node (GB/s)
HOST_FIELDS = ("host_link_gbs", "host_memory_gbs", "nvme_read_gbs", "nvme_write_gbs")
FABRIC_FIELDS = ("inter_latency_us", "inter_step_us", "tree_level_us")


@dataclass(frozen=True)
class Framework:
    name: str
    label: str
    dp_overlap: float
    tp_overlap: float
    zero3_granularity: str
    zero3_gather: str
    attention: str
    sharding: str
    dp_rails: bool
    can: dict  # what the layout search may choose: shardings (tuple), tensor, pipeline, interleave, sequence_parallel,
    # uneven, replicate (the shardings it runs in HSDP replica groups, a tuple: the search's --replicate auto)
    sources: dict = field(default_factory=dict)  # field -> its document
    pipeline_split: str = "even"  # how blocks are split over pipeline stages (OPTIONAL)
    tp_backward_overlap: float | None = None  # None: tp_overlap (OPTIONAL)
    gather_prefetch: bool = True  # parameter all-gathers overlap the compute (OPTIONAL)
    grad_reduce: str = "compute"  # the gradients' reduction dtype (OPTIONAL)
    zero1_sync: str = "overlapped"  # ZeRO-1's gradient sync (OPTIONAL)
    fp8_weight_cache: bool = False  # fp8 weights cast once per step, not per micro-batch (OPTIONAL)
    fp8_params: bool = False  # fp8-mixed weights kept in fp8 (OPTIONAL)
    elementwise: str = "fused"  # the blocks' norms, rotary and gated activations: fused or eager (OPTIONAL)
    shard_copies: bool = False  # its sharded collectives copy through flat buffers on the compute stream (OPTIONAL)
    fp8_gather: bool = False  # fp8-mixed: parameter all-gathers carry the linear weights in fp8 (OPTIONAL)
    fp8_tp_gather: bool = False  # fp8-mixed: sequence-parallel all-gathers carry fp8 (OPTIONAL)
    recompute_tail: str = "repeated"  # what its recompute leaves out: RECOMPUTE_TAILS (OPTIONAL)
    compiled_traces: bool = False  # compiled, its checkpointed blocks are traced (OPTIONAL; default: not repeated)
    split_backward: str = "freed"  # what a zero-bubble schedule keeps between B and W: SPLIT_BACKWARDS (OPTIONAL)
    selective_dp_overlap: float | None = None  # dp_overlap under a per-operation recompute; None: dp_overlap (OPTIONAL)
    zero_reduce: str = "reduce_scatter"  # how its ZeRO-1/2 reduce the gradients: ZERO_REDUCE (OPTIONAL)

    def source(self, key: str) -> str:
        return f"{self.name}: {self.sources[key]}"


@dataclass(frozen=True)
class Cluster:
    name: str
    label: str
    gpu: str
    gpus_per_node: int
    nic_gbps: float  # per GPU: the node's NIC bandwidth over its GPUs
    source: str
    fabric: str = "infiniband"
    latencies: dict = field(default_factory=dict)  # the fabric's FABRIC_FIELDS (analytic/steptime/network.py) and
    # the cluster's measured nic_efficiency where its source gives one
    latency_source: str = ""
    aliases: tuple = ()  # the provider's own names for it (AWS's p5.48xlarge, Google's a3-megagpu-8g, Azure's VM sizes)


def _fraction(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{where}: a fraction between 0 and 1 (got {value!r})")
    return float(value)


def _positive(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: a positive number (got {value!r})")
    return float(value)


def parse_framework(name: str, entry, sources: dict, where: str) -> Framework:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a mapping of {', '.join(FRAMEWORK_FIELDS)}")
    unknown = sorted(set(entry) - {"label", "cite", *FRAMEWORK_FIELDS, *OPTIONAL})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: label, cite, "
                          f"{', '.join([*FRAMEWORK_FIELDS, *OPTIONAL])})")
    split = entry.get("pipeline_split", OPTIONAL["pipeline_split"])
    if split not in PIPELINE_SPLITS:
        raise ConfigError(f"{where}.pipeline_split: {split!r} is not allowed (allowed: {', '.join(PIPELINE_SPLITS)})")
    missing = [k for k in FRAMEWORK_FIELDS if k not in entry]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}: missing (every framework states {', '.join(FRAMEWORK_FIELDS)})")
    backward = entry.get("tp_backward_overlap")
    backward = None if backward is None else _fraction(backward, f"{where}.tp_backward_overlap")
    if backward is not None and backward < entry["tp_overlap"]:
        raise ConfigError(f"{where}.tp_backward_overlap: at least tp_overlap ({entry['tp_overlap']!r}; the backward's "
                          f"input-gradient collectives are among those tp_overlap hides), got {backward!r}")
    reduce = entry.get("grad_reduce", OPTIONAL["grad_reduce"])
    if reduce not in GRAD_REDUCE:
        raise ConfigError(f"{where}.grad_reduce: {reduce!r} is not allowed (allowed: {', '.join(GRAD_REDUCE)})")
    zero1_sync = entry.get("zero1_sync", OPTIONAL["zero1_sync"])
    if zero1_sync not in ZERO1_SYNC:
        raise ConfigError(f"{where}.zero1_sync: {zero1_sync!r} is not allowed (allowed: {', '.join(ZERO1_SYNC)})")
    prefetch = entry.get("gather_prefetch", OPTIONAL["gather_prefetch"])
    if not isinstance(prefetch, bool):
        raise ConfigError(f"{where}.gather_prefetch: true or false (got {prefetch!r})")
    cache = entry.get("fp8_weight_cache", OPTIONAL["fp8_weight_cache"])
    if not isinstance(cache, bool):
        raise ConfigError(f"{where}.fp8_weight_cache: true or false (got {cache!r})")
    fp8_params = entry.get("fp8_params", OPTIONAL["fp8_params"])
    if not isinstance(fp8_params, bool):
        raise ConfigError(f"{where}.fp8_params: true or false (got {fp8_params!r})")
    elementwise = entry.get("elementwise", OPTIONAL["elementwise"])
    if elementwise not in ELEMENTWISE:
        raise ConfigError(f"{where}.elementwise: {elementwise!r} is not allowed (allowed: {', '.join(ELEMENTWISE)})")
    copies = entry.get("shard_copies", OPTIONAL["shard_copies"])
    if not isinstance(copies, bool):
        raise ConfigError(f"{where}.shard_copies: true or false (got {copies!r})")
    gathers = {k: entry.get(k, OPTIONAL[k]) for k in ("fp8_gather", "fp8_tp_gather")}
    for k, v in gathers.items():
        if not isinstance(v, bool):
            raise ConfigError(f"{where}.{k}: true or false (got {v!r})")
    tail = entry.get("recompute_tail", OPTIONAL["recompute_tail"])
    if tail not in RECOMPUTE_TAILS:
        raise ConfigError(f"{where}.recompute_tail: {tail!r} is not allowed (allowed: {', '.join(RECOMPUTE_TAILS)})")
    traces = entry.get("compiled_traces", OPTIONAL["compiled_traces"])
    if traces is None:
        traces = tail != "repeated"
    if not isinstance(traces, bool):
        raise ConfigError(f"{where}.compiled_traces: true or false (got {traces!r})")
    split_backward = entry.get("split_backward", OPTIONAL["split_backward"])
    if split_backward not in SPLIT_BACKWARDS:
        raise ConfigError(f"{where}.split_backward: {split_backward!r} is not allowed (allowed: "
                          f"{', '.join(SPLIT_BACKWARDS)})")
    selective = entry.get("selective_dp_overlap", OPTIONAL["selective_dp_overlap"])
    if selective is not None:
        selective = _fraction(selective, f"{where}.selective_dp_overlap")
    zero_reduce = entry.get("zero_reduce", OPTIONAL["zero_reduce"])
    if zero_reduce not in ZERO_REDUCE:
        raise ConfigError(f"{where}.zero_reduce: {zero_reduce!r} is not allowed (allowed: {', '.join(ZERO_REDUCE)})")
    if fp8_params and entry.get("fp8_gather") is False:
        raise ConfigError(f"{where}.fp8_gather: false contradicts fp8_params: true (weights kept in fp8 are gathered "
                          f"in fp8; leave fp8_gather out)")
    for key, allowed in CHOICES.items():
        if entry[key] not in allowed:
            raise ConfigError(f"{where}.{key}: {entry[key]!r} is not allowed (allowed: {', '.join(allowed)})")
    if not isinstance(entry["dp_rails"], bool):
        raise ConfigError(f"{where}.dp_rails: true or false (got {entry['dp_rails']!r})")
    can = entry["can"]
    if not isinstance(can, dict) or set(can) != set(CAN) or \
            any(not isinstance(can[k], list) or any(x not in CHOICES["sharding"] for x in can[k])
                for k in ("shardings", "replicate")) or "none" in can["replicate"] or \
            any(not isinstance(can[k], bool) for k in CAN[1:-1]):
        raise ConfigError(f"{where}.can: shardings (a list of {', '.join(CHOICES['sharding'])}), replicate (the "
                          f"shardings it runs in replica groups, a list without none) and true/false for "
                          f"{', '.join(CAN[1:-1])}")
    cite = entry.get("cite")
    stated = [*FRAMEWORK_FIELDS, *(k for k in OPTIONAL if k in entry), *(["replicate"] if can["replicate"] else [])]
    if not isinstance(cite, dict) or any(cite.get(k) not in sources for k in stated):
        raise ConfigError(f"{where}: every field needs a source (cite: with a known source key)")
    return Framework(name, str(entry.get("label", name)), _fraction(entry["dp_overlap"], f"{where}.dp_overlap"),
                     _fraction(entry["tp_overlap"], f"{where}.tp_overlap"), entry["zero3_granularity"],
                     entry["zero3_gather"], entry["attention"],
                     entry["sharding"], entry["dp_rails"],
                     {**can, "shardings": tuple(can["shardings"]), "replicate": tuple(can["replicate"])},
                     {k: sources[cite[k]] for k in stated}, split, backward, prefetch, reduce, zero1_sync, cache,
                     fp8_params, elementwise, copies, gathers["fp8_gather"] or fp8_params,
                     gathers["fp8_tp_gather"], tail, traces, split_backward, selective, zero_reduce)


def recompute_tail_of(fw: Framework, elementwise: str) -> str:
    """What ``fw``'s recompute leaves out (RECOMPUTE_TAILS) with its blocks' elementwise kernels ``elementwise``: a
    framework that runs its blocks op by op in eager PyTorch, compiled (fused), traces its checkpointed blocks
    where its checkpoint is torch's non-reentrant one (compiled_traces); one
    that compiles them (traced), run eagerly, stops its non-reentrant checkpoint early (OLMo-core's)."""
    if fw.elementwise == "eager" and elementwise == "fused" and fw.compiled_traces:
        return "traced"
    if fw.recompute_tail == "traced" and elementwise != "fused":
        return "early-stop"
    return fw.recompute_tail


def _date(value, where: str) -> datetime.date:
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise ConfigError(f"{where}: a date YYYY-MM-DD (got {value!r})") from None


def parse_families(entries, table: dict, sources: dict) -> dict[str, tuple[str, tuple]]:
    """``families`` of frameworks.yaml: every name a family answers to (itself and its aliases) -> (the family, its
    versions as ((None | date, entry), ...) in time order, the first holding from the beginning)."""
    if not isinstance(entries, dict):
        raise ConfigError("frameworks.families: a mapping of family -> aliases, versions, cite")
    names: dict[str, tuple[str, tuple]] = {}
    for family, entry in entries.items():
        where = f"frameworks.families.{family}"
        if not isinstance(entry, dict) or set(entry) != {"aliases", "versions", "cite"}:
            raise ConfigError(f"{where}: must give aliases, versions and cite")
        if entry["cite"] not in sources:
            raise ConfigError(f"{where}.cite: needs a known source key")
        versions = entry["versions"]
        if not isinstance(versions, list) or not versions or \
                any(not isinstance(v, list) or len(v) != 2 for v in versions):
            raise ConfigError(f"{where}.versions: a list of [entry, since] (the first since null)")
        dated = []
        for i, (name, since) in enumerate(versions):
            if name not in table:
                raise ConfigError(f"{where}.versions: {name!r} is not a catalogued framework")
            if (since is None) != (i == 0):
                raise ConfigError(f"{where}.versions: only the first entry has no date ({name!r})")
            dated.append((None if since is None else _date(since, f"{where}.versions.{name}"), name))
        if any(a[0] is not None and a[0] >= b[0] for a, b in zip(dated[1:], dated[2:])):
            raise ConfigError(f"{where}.versions: dates must rise")
        aliases = entry["aliases"]
        if not isinstance(aliases, list) or any(not isinstance(a, str) for a in aliases):
            raise ConfigError(f"{where}.aliases: a list of names")
        for name in (family, *aliases):
            # a name that is also an entry's must be the newest's: the bare name and the entry then agree
            if "@" in name or name != name.lower() or name in names or (name in table and name != dated[-1][1]):
                raise ConfigError(f"{where}: the name {name!r} is taken (or holds '@' or capitals, or names an "
                                  f"entry other than the family's newest)")
            names[name] = (family, tuple(dated))
    for entry in table:  # an entry named FAMILY@WHEN is what FAMILY@WHEN reads as
        base, _, when = entry.rpartition("@")
        date = _when(when)
        if base in names and date is not None and _pick(names[base][1], date) != entry:
            raise ConfigError(f"frameworks.families.{names[base][0]}: {entry!r} is not the entry its dates give for "
                              f"{date.isoformat()} ({_pick(names[base][1], date)!r})")
    return names


def _when(text: str) -> datetime.date | None:
    """YYYY (read as its 1 July), YYYY-MM (its first day) or YYYY-MM-DD; None for anything else."""
    match = WHEN.fullmatch(text)
    if not match:
        return None
    year, month, day = (int(g) if g else None for g in match.groups())
    try:
        return datetime.date(year, month or 7, day or 1)
    except ValueError:
        return None


def _pick(versions: tuple, date: datetime.date) -> str:
    return [entry for since, entry in versions if since is None or since <= date][-1]


@lru_cache(maxsize=1)
def _frameworks() -> tuple[dict, str, dict]:
    data = load_shipped(FRAMEWORKS.read_text())
    table = {name: parse_framework(name, entry, data["sources"], f"frameworks.{name}")
             for name, entry in data["frameworks"].items()}
    if data.get("default") not in table:
        raise ConfigError(f"frameworks.default: {data.get('default')!r} is not a catalogued framework")
    return table, data["default"], parse_families(data.get("families", {}), table, data["sources"])


def frameworks() -> dict[str, Framework]:
    return dict(_frameworks()[0])


def default_framework() -> str:
    return _frameworks()[1]


def families() -> list[str]:
    """The family names (not their aliases) that ``--framework FAMILY[@WHEN]`` accepts."""
    return list(dict.fromkeys(family for family, _ in _frameworks()[2].values()))


def resolve_framework(name: str | None, flag: str = "--framework") -> tuple[Framework, str]:
    """A framework by name, with how the name was read ('' for a catalogue entry's own name): an entry (None: the
    catalogue's default), a family or alias (its newest entry), or FAMILY@WHEN (the entry current then: a year is
    read as its 1 July, YYYY-MM as that month's first day); letter case aside. One line naming the allowed ones
    otherwise."""
    table, default, named = _frameworks()
    name = default if name is None else name
    if name in table:
        return table[name], ""
    key = _spelled(name, set(table) | set(named))
    if key in table:  # Megatron-Core, FSDP2, "PyTorch FSDP2": the names as people write them
        return table[key], "the entry of that name"
    base, at, when = key.rpartition("@") if "@" in key else (key, "", "")
    if base not in named:
        raise not_in(flag, name, "in the framework catalogue", [*families(), *table], "`trainingcost plan --help`",
                     "; a family alone or @YEAR")
    family, versions = named[base]
    date = _when(when) if at else None
    if at and date is None:  # checked whatever the family holds: a misspelled date is never passed over
        raise ConfigError(f"{flag}: {name!r}: after '@' give a year or a date (YYYY, YYYY-MM or YYYY-MM-DD)")
    if len(versions) == 1:
        return table[versions[0][1]], f"the {family} family's one entry"
    if not at:
        return table[versions[-1][1]], f"the {family} family's newest entry"
    entry = _pick(versions, date)
    if entry == versions[0][1]:  # the first entry holds from the beginning: no claim about how early
        return table[entry], (f"the {family} family's earliest entry, the catalogue's reading until "
                              f"{versions[1][0].isoformat()}")
    return table[entry], f"the {family} family's entry current on {date.isoformat()}"


VENDORS = ("pytorch-", "torch-", "nvidia-", "microsoft-", "huggingface-", "hf-", "google-", "allenai-", "ai2-", "mosaicml-")


def _spelled(name: str, known: set[str]) -> str:
    """A framework's name as the catalogue writes its names: letter case, spaces and underscores aside (``PyTorch
    FSDP2``, ``Megatron_LM``), and a vendor's name before a name the catalogue knows (``NVIDIA NeMo``, ``torch FSDP``)."""
    key = "-".join(part for part in str(name).strip(" ").lower().replace("_", " ").split(" ") if part)
    base, at, when = key.partition("@")
    for vendor in VENDORS:
        if base.startswith(vendor) and base not in known and base[len(vendor):] in known:
            base = base[len(vendor):]
            break
    return base + at + when


def framework(name: str | None, flag: str = "--framework") -> Framework:
    """A framework by name (see resolve_framework; None: the catalogue's default); one line naming the allowed
    ones."""
    return resolve_framework(name, flag)[0]


def parse_fabric(name: str, entry, sources: dict, where: str) -> tuple[dict, str]:
    if not isinstance(entry, dict) or set(entry) != {*FABRIC_FIELDS, "cite"}:
        raise ConfigError(f"{where}: must give {', '.join(FABRIC_FIELDS)} and cite")
    if entry["cite"] not in sources:
        raise ConfigError(f"{where}.cite: needs a known source key")
    return {k: _positive(entry[k], f"{where}.{k}") for k in FABRIC_FIELDS}, sources[entry["cite"]]


def parse_cluster(name: str, entry, sources: dict, where: str, fabrics: dict | None = None) -> Cluster:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a mapping of {', '.join(CLUSTER_FIELDS)}")
    unknown = sorted(set(entry) - {"label", "cite", "nic_efficiency", "aliases", *CLUSTER_FIELDS, *HOST_FIELDS})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: label, cite, nic_efficiency, aliases, "
                          f"{', '.join(CLUSTER_FIELDS + HOST_FIELDS)})")
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise ConfigError(f"{where}.aliases: a list of names")
    missing = [k for k in CLUSTER_FIELDS if k not in entry]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}: missing (every cluster states {', '.join(CLUSTER_FIELDS)})")
    per_node = entry["gpus_per_node"]
    if isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1:
        raise ConfigError(f"{where}.gpus_per_node: a positive integer (got {per_node!r})")
    if entry.get("cite") not in sources:
        raise ConfigError(f"{where}.cite: needs a known source key")
    fabrics = fabrics or {}
    if entry["fabric"] not in fabrics:
        raise ConfigError(f"{where}.fabric: {entry['fabric']!r} is not a catalogued fabric (allowed: {', '.join(fabrics)})")
    latencies, latency_source = fabrics[entry["fabric"]]
    latencies = dict(latencies)
    if "nic_efficiency" in entry:  # the share of the NICs' line rate NCCL reaches there, as the cited source measured it
        value = entry["nic_efficiency"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ConfigError(f"{where}.nic_efficiency: a fraction above 0 and at most 1 (got {value!r})")
        latencies["nic_efficiency"] = float(value)
        latency_source += f"; NIC efficiency {value:g} as measured there ({entry['cite']})"
    for key in HOST_FIELDS:  # the host's rates, where the cluster's source states them (with the fabric's latencies)
        if key in entry:
            latencies[key] = _positive(entry[key], f"{where}.{key}")
            latency_source += f"; {key.replace('_gbs', '').replace('_', ' ')} {entry[key]:g} GB/s ({entry['cite']})"
    return Cluster(name, str(entry.get("label", name)), str(entry["gpu"]), per_node,
                   _positive(entry["nic_gbps"], f"{where}.nic_gbps"), sources[entry["cite"]], entry["fabric"],
                   latencies, latency_source, tuple(aliases))


@lru_cache(maxsize=1)
def _clusters() -> dict:
    from .hardware import devices

    data = load_shipped(CLUSTERS.read_text())
    fabrics = {name: parse_fabric(name, entry, data["sources"], f"fabrics.{name}")
               for name, entry in data["fabrics"].items()}
    table = {name: parse_cluster(name, entry, data["sources"], f"clusters.{name}", fabrics)
             for name, entry in data["clusters"].items()}
    known = devices()
    for c in table.values():
        if c.gpu not in known:
            raise ConfigError(f"clusters.{c.name}.gpu: {c.gpu!r} is not in the hardware catalogue")
    return table


def clusters() -> dict[str, Cluster]:
    return dict(_clusters())


def fabric(name: str) -> dict:
    """A fabric's latencies by name (the collectives benchmark's rows name theirs)."""
    data = load_shipped(CLUSTERS.read_text())
    if name not in data["fabrics"]:
        raise ConfigError(f"fabric: {name!r} is not catalogued (allowed: {', '.join(data['fabrics'])})")
    return parse_fabric(name, data["fabrics"][name], data["sources"], f"fabrics.{name}")[0]


def cluster(name: str, flag: str = "--cluster") -> Cluster:
    """A catalogued cluster by name, in any letter case and with '_' or a space for '-' (``AWS_P5``, ``DGX H100``)."""
    table = _clusters()
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    found = table.get(name) or next((c for n, c in table.items() if n.lower() == key), None)
    if found is None:  # the provider's own name (an entry's aliases: a3-megagpu-8g, Standard_ND96isr_H100_v5)
        found = next((c for c in table.values() if key in (a.lower().replace("_", "-") for a in c.aliases)), None)
    if found is None:  # a cloud's instance type without the cloud's name: p5, p4d.24xlarge, a3-mega, nd-h100-v5
        key = key.split(".")[0]
        clouds = [c for n, c in table.items() if n.split("-", 1)[0] in ("aws", "gcp", "azure") and n.split("-", 1)[1] == key]
        found = clouds[0] if len(clouds) == 1 else None
    if found is None:
        raise not_in(flag, name, "in the cluster catalogue", table, "`trainingcost plan --help`")
    return found
