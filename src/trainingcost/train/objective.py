"""The training objective shared by every rule: cross-entropy over the rows that carry a target.

A batch's ``targets`` have the logits' shape without the class axis: one target
per position for an LM head, one per sequence for a classifier. Positions with
target ``IGNORE`` (e.g. unmasked tokens of masked-token modelling) carry no loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100


def _own(ids: torch.Tensor) -> torch.Tensor:
    """``ids``, or a contiguous copy where it is a view into a larger storage."""
    if ids.is_contiguous() and ids.untyped_storage().nbytes() == ids.numel() * ids.element_size():
        return ids
    return ids.clone(memory_format=torch.contiguous_format)


@dataclass
class Batch:
    tokens: dict[str, torch.Tensor]  # per stack: 'encoder' and/or 'decoder', [batch, length] int64
    targets: torch.Tensor  # [batch, length] or [batch], int64, IGNORE where there is no target

    def __post_init__(self):
        # Each tensor contiguous and alone in its storage: the step flattens ids and targets without a copy of its
        # own (the loss, PEPITA's embedding update), and the batch's bytes are those of its tensors, as the
        # executed memory model counts them (analytic/tape), whatever view of a window a task hands over.
        self.tokens = {stack: _own(ids) for stack, ids in self.tokens.items()}
        self.targets = _own(self.targets)

    def to(self, device) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.tokens.items()}, self.targets.to(device))


def _wide(x: torch.Tensor) -> torch.Tensor:
    """At least float32 (bf16 logits are widened; float64 stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the rows with a target (in at least float32)."""
    return F.cross_entropy(_wide(logits).reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)


# Multi-token prediction's weight (DeepSeek-V3 Technical Report, section 4.2: 0.3 for the first 10T tokens, then 0.1)
MTP_WEIGHT = 0.3


def shifted_targets(targets: torch.Tensor, depth: int) -> torch.Tensor:
    """The targets of multi-token prediction module ``depth`` (from 0): position i's is token i + depth + 2, the
    next-token target of position i + depth + 1; the last depth + 1 positions have none (IGNORE)."""
    shifted = torch.roll(targets, -(depth + 1), dims=1)
    shifted[:, targets.shape[1] - depth - 1:] = IGNORE
    return shifted


def mtp_loss(logits: torch.Tensor, extra: list[torch.Tensor], targets: torch.Tensor,
             weight: float = MTP_WEIGHT) -> torch.Tensor:
    """The main loss plus multi-token prediction's, weight / D times the sum of its D modules' (DeepSeek-V3, eq. 25)."""
    total = loss(logits, targets)
    if extra:
        total = total + weight / len(extra) * sum(loss(x, shifted_targets(targets, k)) for k, x in enumerate(extra))
    return total


def output_error(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
    """e = softmax(logits) - onehot(target) on rows with a target, 0 elsewhere; and the number of such rows.

    e / rows is the gradient of :func:`loss` with respect to the logits. Built in place on the softmax:
    one logits-sized tensor, where a one-hot (int64, then cast) held five at once.
    """
    valid = targets != IGNORE
    with torch.no_grad():
        error = torch.softmax(_wide(logits), dim=-1)
        error.scatter_add_(-1, targets.clamp(min=0).unsqueeze(-1), -valid.unsqueeze(-1).to(error.dtype))
        error.mul_(valid.unsqueeze(-1))
    return error.to(logits.dtype), int(valid.sum())


def correct(logits: torch.Tensor, targets: torch.Tensor) -> tuple[int, int]:
    """(correct predictions, rows with a target)."""
    valid = targets != IGNORE
    hits = (logits.argmax(dim=-1) == targets) & valid
    return int(hits.sum()), int(valid.sum())
