"""Data-parallel communication of one training step, from shapes alone (no torch): which mechanism each rule
uses, which shardings admit it, and the collectives of one step with their bytes (docs/distributed.md).

Mechanisms, derived from each rule's declared phases (``RuleSpec.phases``):

- ``hooks``: the rule's step is one forward through the model, one autograd backward and the optimizer (BP, FA,
  KP; WM adds its mirror steps, which every rank repeats identically and communicate nothing). torch's own
  machinery reduces the gradients: DistributedDataParallel's bucketed all-reduce under ``ddp``, FSDP2's
  (``fully_shard``) all-gathers and reduce-scatters under ``zero2`` and ``fsdp``.
- ``explicit``: the step builds its updates outside one model forward and backward (PEPITA and MEMPEPITA write
  ``.grad`` by hand; DFA, TP, DTP and LRA run the model stage by stage with several backward calls), so no
  framework hook sees it; before the optimizer step every gradient the optimizer holds (trained feedback
  included: TP's and DTP's inverses, LRA's error weights) is averaged by one all-reduce of one flat buffer.
  DFA's fixed projections and PEPITA's fixed F are no parameters of the optimizer, so they are never sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.choices import BACKENDS, PARALLEL
from ..config.errors import ConfigError
from .catalogue import rule, rule_names

HOOK_PHASES = frozenset({"forward", "backward", "optimizer_step", "mirror"})
SHARDED_PHASES = frozenset({"forward", "backward", "optimizer_step"})  # a mirror step reads whole weights


def mechanism(name: str) -> str:
    """``hooks`` (torch's DDP / FSDP2 reduce the gradients) or ``explicit`` (one all-reduce before the step)."""
    return "hooks" if set(rule(name).phases) <= HOOK_PHASES else "explicit"


def admitted(name: str, parallel: str) -> bool:
    """Whether ``parallel`` can run rule ``name``: ddp runs every rule; the shardings need a rule whose
    parameters are only read inside one forward and backward through the model (FSDP2 gathers them there)."""
    if parallel == "ddp":
        return True
    return set(rule(name).phases) <= SHARDED_PHASES


def sharded_rules() -> tuple[str, ...]:
    return tuple(n for n in rule_names() if admitted(n, "zero2"))


def check_parallel(name: str, parallel: str, nproc: int, backend: str = "auto") -> None:
    """One-line errors naming the field, before any process starts."""

    if nproc < 1:
        raise ConfigError(f"nproc: must be at least 1 (got {nproc})")
    if parallel not in PARALLEL:
        raise ConfigError(f"parallel: {parallel!r} is not allowed (allowed: {', '.join(PARALLEL)})")
    if backend not in BACKENDS:
        raise ConfigError(f"backend: {backend!r} is not allowed (allowed: {', '.join(BACKENDS)})")
    if not admitted(name, parallel):
        raise ConfigError(
            f"parallel: {parallel} shards parameters through FSDP2's forward and backward hooks, which rule {name}'s "
            f"step bypasses (phases {', '.join(rule(name).phases)}); allowed with {parallel}: "
            f"{', '.join(sharded_rules())}; every rule runs under ddp")


@dataclass(frozen=True)
class Collective:
    """One collective of a step: its op, the bytes of the buffer each rank passes (all-reduce and broadcast: the
    tensor; all-gather: the gathered output; reduce-scatter: the unscattered input), the group size and dtype."""

    op: str
    bytes: int
    group: int
    dtype: str
    phase: str


# DistributedDataParallel's defaults (torch/nn/parallel/distributed.py): 25 MiB buckets, a first bucket of 1 MiB
# (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES) when the buckets are rebuilt after the first iteration.
BUCKET_CAP_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 2**20
INDEX_BYTES = 4  # the rebuilt bucket indices are broadcast as int32


def gradient_bytes(cfg, name: str, dtype: str) -> tuple[int, int]:
    """(bytes, tensors) of the gradients rule ``name`` produces in one step: the memory model's ``gradients``
    (every trained parameter, trained feedback included; PEPITA's frozen relative tables excluded) and the number
    of trained tensors (from Adam's per-tensor step scalars in the same model)."""
    from ..config.sweep import configs_frame
    from .memory import STEP_SCALAR_BYTES, memory_table

    row = memory_table(configs_frame([("comm", cfg)]), [name], dtypes=(dtype,), optimizers=("adam",),
                       executed=False).iloc[0]
    grads = int(row["gradients"])
    tensors = (int(row["optimizer_state"]) - 2 * grads) // STEP_SCALAR_BYTES["adam"]
    return grads, tensors


def step_collectives(cfg, name: str, parallel: str, world: int, dtype: str, step: int) -> list[Collective]:
    """The collectives one rank issues in training step ``step`` (1-based) of rule ``name`` under ``parallel``
    on ``world`` ranks, in order, with their bytes (equal to the meter: tests/test_distributed.py).

    - explicit rules: one all-reduce of every gradient, flat, before the optimizer step;
    - DDP: step 1 reduces every gradient in one bucket (DDP disables bucketing until it has seen the backward's
      order, ``find_unused_parameters=False``); at the start of step 2 it broadcasts the rebuilt buckets (the
      parameter indices and one more int32, then one int32 per bucket), and from then on reduces one bucket
      per all-reduce: a first of 1 MiB, then 25 MiB each, in the order gradients become ready.
    """
    check_parallel(name, parallel, world)
    if world == 1:
        return []
    grads, tensors = gradient_bytes(cfg, name, dtype)
    if mechanism(name) == "explicit":
        return [Collective("all_reduce", grads, world, dtype, "optimizer_step")]
    if parallel != "ddp":
        raise ConfigError(f"parallel: {parallel}: the communication model covers ddp only so far (allowed: ddp)")
    if step == 1 or grads <= FIRST_BUCKET_BYTES:
        buckets = [grads]
    else:
        raise ConfigError(
            f"model: {grads} bytes of gradients exceed DDP's first bucket ({FIRST_BUCKET_BYTES} bytes): its rebuilt "
            "buckets follow the backward's gradient-ready order, which this model does not know yet")
    out = []
    if step == 2:
        out += [Collective("broadcast", (tensors + 1) * INDEX_BYTES, world, "int32", "forward"),
                Collective("broadcast", len(buckets) * INDEX_BYTES, world, "int32", "forward")]
    out += [Collective("all_reduce", size, world, dtype, "backward") for size in buckets]
    return out


def comm_seconds(collectives: list[Collective], fit: dict) -> float:
    """The time of these collectives, one after another, under a calibration's ``alpha + beta * bytes`` per op
    (``trainingcost calibrate --collectives``'s ``fit``)."""
    return sum(fit[c.op]["alpha_s"] + fit[c.op]["beta_s_per_byte"] * c.bytes for c in collectives)
