"""Named model shapes with their published dimensions.

Sequence lengths are the models' maximum context (the Transformer paper fixes
none; we use 512 as for BERT and T5). Batch defaults to 1 sequence. Shapes
only: no weights are ever loaded.
"""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    # Pau & Aymone 2024, section 6: a one-block encoder-only model. The paper gives
    # the structure but no sizes; we fill in the base Transformer's sizes.
    "paper-example": dict(
        arch="encoder", layers=1, d_model=512, heads=8, d_ff=2048, vocab=37000, seq_len=512
    ),
    # Vaswani et al. 2017, base model: 6+6 layers, shared source/target vocabulary of 37000.
    "vaswani-base": dict(
        arch="encoder-decoder",
        enc_layers=6,
        dec_layers=6,
        d_model=512,
        heads=8,
        d_ff=2048,
        vocab=37000,
        seq_len=512,
        tgt_len=512,
    ),
    # Devlin et al. 2019.
    "bert-base": dict(arch="encoder", layers=12, d_model=768, heads=12, d_ff=3072, vocab=30522, seq_len=512),
    # Sanh et al. 2019: BERT-base with half the layers.
    "distilbert": dict(arch="encoder", layers=6, d_model=768, heads=12, d_ff=3072, vocab=30522, seq_len=512),
    # Radford et al. 2019, the shape of the 124M model. That count ties the head to the token embedding
    # and has learned positions; here the head has its own 50257 x 768 weights (+38.6M) and positions are
    # sinusoidal, so trainingcost counts 162.3M parameters until the head can be tied (issue 14).
    "gpt2-small": dict(arch="decoder", layers=12, d_model=768, heads=12, d_ff=3072, vocab=50257, seq_len=1024),
    # Raffel et al. 2020.
    "t5-small": dict(
        arch="encoder-decoder",
        enc_layers=6,
        dec_layers=6,
        d_model=512,
        heads=8,
        d_ff=2048,
        vocab=32128,
        seq_len=512,
        tgt_len=512,
    ),
}
