"""The textbook Deep Learning and Transformers: Theory, Mathematics, and Implementation (2026), section 11.11: the
three worked training estimates as the book computes them, beside the correct computation, each slip named
(docs/planning.md, "Reproductions"; tests/test_plan.py checks the printed numbers).

The book's per-layer forward count is its own eqs. 10.82-10.90, 24 n d^2 + 4 n^2 d for an n-token *sequence*
(trainingcost's ``textbook`` cost model). Its slips:

- **per-sequence as per-step** (BERT-base, eq. 11.69): 290 GFLOPs is one 512-token sequence's training cost; a
  step is a batch of 4,096 sequences.
- **ms written as s** (BERT-base, eq. 11.70): 290e9 / (16 x 125e12 x 0.7) is 2.07e-4 s, 0.21 ms, printed 0.21 s.
- **per-sequence as per-token** (GPT-2 XL eq. 11.73, GPT-3 eq. 11.76): 24 n d^2 + 4 n^2 d with n = 1024 or 2048
  is a whole sequence's forward; multiplied by tokens, the totals are n times too large.
- **arithmetic** (GPT-2 XL, eq. 11.73): the expression evaluates to 3.34e12, printed ~6e12.

The correct column takes the same forward count per sequence (divided by n per token), three forwards per
training step (forward + backward = 3 x forward, the book's own factor 3), and the book's other inputs
(steps, batch, tokens, GPUs, utilisation, price).
"""

from __future__ import annotations

import pandas as pd


def forward_per_sequence(layers: int, n: int, d: int) -> float:
    """The textbook, eqs. 10.82-10.90 (and 11.73, 11.76): 24 n d^2 + 4 n^2 d per layer, d_ff = 4 d."""
    return layers * (24 * n * d**2 + 4 * n**2 * d)


# BERT-base (section 11.11.1): 12 layers, d 768, n 512; 4,096 sequences per step, 10^6 steps, 16 V100 at 125 TFLOP/s
# (fp16 tensor cores) and 70% utilisation, $3.50 per GPU-hour.
BERT = dict(layers=12, n=512, d=768, batch=4096, steps=1_000_000, gpus=16, peak=125e12, utilisation=0.7, price=3.5)
# GPT-2 XL (section 11.11.2): 48 layers, d 1600, n 1024, 10^10 tokens. GPT-3 (11.11.3): 96 layers, d 12288, n 2048,
# 3 x 10^11 tokens; the reported total 3.14e23 (Brown et al. 2020).
GPT2_XL = dict(layers=48, n=1024, d=1600, tokens=1e10)
GPT3 = dict(layers=96, n=2048, d=12288, tokens=3e11, reported=3.14e23)


def seed004_examples() -> pd.DataFrame:
    """One row per quantity: the book's printed value, the book's own expression evaluated, the correct value,
    and the slip that separates them ('' where the book is right)."""
    rows = []

    def row(example, quantity, equation, printed, evaluated, correct, unit, slip):
        rows.append(dict(example=example, quantity=quantity, equation=equation, book_printed=printed,
                         book_evaluated=evaluated, correct=correct, unit=unit, slip=slip))

    b = BERT
    seq_fwd = forward_per_sequence(b["layers"], b["n"], b["d"])
    per_sequence = 3 * seq_fwd
    per_step = per_sequence * b["batch"]
    throughput = b["gpus"] * b["peak"] * b["utilisation"]
    row("BERT-base", "forward FLOPs", "11.69", 96.6e9, seq_fwd, seq_fwd, "FLOPs per sequence", "")
    row("BERT-base", "training FLOPs per step", "11.69", 290e9, per_sequence, per_step, "FLOPs",
        "per-sequence FLOPs taken as per-step (a step is 4,096 sequences)")
    row("BERT-base", "total compute", "11.69", 2.9e17, b["steps"] * 290e9, b["steps"] * per_step, "FLOPs",
        "per-sequence FLOPs taken as per-step")
    row("BERT-base", "time per step", "11.70", 0.21, 290e9 / throughput, per_step / throughput, "s",
        "ms written as s (the quotient is 0.21 ms), on the per-sequence FLOPs")
    row("BERT-base", "training time", "11.71", 210_000, b["steps"] * 0.21, b["steps"] * per_step / throughput, "s",
        "the two slips above, which partly cancel (x 4,096, / 1,000)")
    correct_hours = b["steps"] * per_step / throughput / 3600
    row("BERT-base", "cost", "11.72", 5376, b["gpus"] * 96 * b["price"], b["gpus"] * correct_hours * b["price"], "$",
        "priced at 4 days (96 h), the paper's reported time, not at the computed 58 h; the computed time at the "
        "correct FLOPs is 9.8 days")

    g = GPT2_XL
    fwd = forward_per_sequence(g["layers"], g["n"], g["d"])
    row("GPT-2 XL", "forward FLOPs per token", "11.73", 6e12, fwd, fwd / g["n"], "FLOPs",
        "per-sequence FLOPs taken as per-token (n = 1024), and the expression evaluates to 3.34e12, not 6e12")
    row("GPT-2 XL", "total compute", "11.74", 1.8e23, g["tokens"] * 6e12 * 3, g["tokens"] * 3 * fwd / g["n"], "FLOPs",
        "per-sequence FLOPs taken as per-token (1,024x too large, and 1.8x more from the arithmetic)")

    g = GPT3
    fwd = forward_per_sequence(g["layers"], g["n"], g["d"])
    row("GPT-3", "forward FLOPs per token", "11.76", 7e14, fwd, fwd / g["n"], "FLOPs",
        "per-sequence FLOPs taken as per-token (n = 2048)")
    row("GPT-3", "total compute", "11.77", 6.3e26, g["tokens"] * 7e14 * 3, g["tokens"] * 3 * fwd / g["n"], "FLOPs",
        f"per-sequence FLOPs taken as per-token (2,048x too large); the section itself quotes the reported "
        f"{g['reported']:.3g}")
    return pd.DataFrame(rows)
