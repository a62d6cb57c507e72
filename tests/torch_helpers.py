"""Small models and batches shared by the model and rule tests."""

from __future__ import annotations

import torch

from collections import defaultdict

from trainingcost.config import canonical_model
from trainingcost.measure.flops import analytic_phase, metering
from trainingcost.train.model import Transformer
from trainingcost.train.objective import IGNORE, Batch

ARCH_SHAPES = {
    "encoder": dict(arch="encoder", layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6, batch=3),
    "decoder": dict(arch="decoder", layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6, batch=3),
    "encoder-decoder": dict(
        arch="encoder-decoder", enc_layers=2, dec_layers=2, d_model=16, heads=2, d_ff=24, vocab=11, seq_len=7, tgt_len=5, batch=3
    ),
    "classifier": dict(arch="encoder", layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6, batch=3, classes=3),
}


def cfg_of(name: str, **changes) -> dict:
    return canonical_model({**ARCH_SHAPES[name], **changes}, name)


def model_of(cfg: dict, seed: int = 0, dtype=torch.float64) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(cfg).to(dtype)


def batch_of(cfg: dict, seed: int = 0, ignore_some: bool = True) -> Batch:
    g = torch.Generator().manual_seed(seed)
    b, n, m, v = cfg.batch, cfg.seq_len, cfg.tgt_len, cfg.vocab
    tokens = {}
    if cfg.enc_layers:
        tokens["encoder"] = torch.randint(0, v, (b, n), generator=g)
    if cfg.dec_layers:
        tokens["decoder"] = torch.randint(0, v, (b, m), generator=g)
    if cfg.classes:
        targets = torch.randint(0, cfg.classes, (b,), generator=g)
    else:
        targets = torch.randint(0, v, (b, m), generator=g)
        if ignore_some:
            targets[0, 0] = IGNORE  # a row without a target must carry no loss
    return Batch(tokens, targets)


def grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def count_step(rule, batch) -> dict[tuple[str, str], int]:
    """Run one training step of ``rule`` on ``batch`` and return its FLOPs per (layer, execution phase).

    The step is a real one: the rule updates the model.
    """
    with metering(rule.model) as meter:
        rule.step(batch, meter.in_phase)
    return dict(meter.counts)


def by_analytic_phase(counts: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """Merge execution phases into analytic ones (PEPITA's two forward passes become one cell)."""
    merged: dict[tuple[str, str], int] = defaultdict(int)
    for (layer, phase), flops in counts.items():
        merged[(layer, analytic_phase(phase))] += flops
    return dict(merged)
