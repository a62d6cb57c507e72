"""The ``causal`` convention: the executed model, with causal attention's masked half not run.

torch's FLOP formulas, and so ``executed`` and the meter, count a causal
attention in full, 4 M N d forward and 10 M N d backward, as if no score were
masked. Kernels that skip the masked blocks (FlashAttention's causal path) run
about half of the score and value products. This cost model is ``executed``
with those products, and the softmax work on the scores, halved for masked
self-attention (and latent attention): a convention beside ``executed``, never a change to it (the
measurement checks ``executed``). Half is the limit for long sequences; the
diagonal blocks a tiled kernel still runs add about one block per row of blocks.
"""

from __future__ import annotations

from ..registry import REGISTRY, declare, register
from ..templates import Shapes
from . import executed as E

declare("causal", order=25, recipes="executed",
        description="executed, with the masked half of causal attention skipped (half the score and value products)")


@register("causal", "masked_self_attention")
def masked_self_attention(s: Shapes):
    return E._attention(s, turned=1, causal_half=True)


@register("causal", "latent_attention")
def latent_attention(s: Shapes):
    return E._latent_attention(s, causal_half=True)


for _kind, _formula in dict(REGISTRY["executed"].formulas).items():
    if _kind not in ("masked_self_attention", "latent_attention"):
        register("causal", _kind)(_formula)
