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

from ..config.errors import ConfigError
from .catalogue import rule, rule_names

PARALLEL = ("ddp", "zero2", "fsdp")
BACKENDS = ("auto", "gloo", "nccl")
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
