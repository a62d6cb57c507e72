"""Counting the FLOPs a training step runs, per analytic layer and per phase.

:class:`FlopMeter` is a ``TorchDispatchMode`` that counts every aten op with a
formula in ``torch.utils.flop_counter``'s registry — FlopCounterMode's own
formulas and convention: 2 FLOPs per multiply-accumulate, matmuls and fused
attention only, SDPA backward 2.5× its forward, no causal discount — and
attributes it to

- a **layer**: during the backward pass, the layer that created the running
  autograd node (:func:`attribution.tag_graph`); otherwise the innermost layer
  whose forward is running (module hooks), or the layer a rule named for work
  outside any forward (:func:`attribution.layer`);
- a **phase**: the step's current execution phase, unless the code overrides
  it (the weight gradients inside the backward count as ``weight_update``).

Torch 2.13 has no formula for the CPU flash-attention kernels
(pytorch/pytorch#195460), so FlopCounterMode counts SDPA on CPU as 0. We
register the formulas of the other fused kernels for them, so a CPU count
equals a GPU count.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from ..train import attribution

aten = torch.ops.aten
UNATTRIBUTED = "unattributed"

CPU_SDPA_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[aten._scaled_dot_product_flash_attention],
    aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_registry[
        aten._scaled_dot_product_flash_attention_backward
    ],
}
FORMULAS = {**CPU_SDPA_FORMULAS, **flop_registry}

# The analytic phase of each execution phase (train/rule.py): the modulated pass is one of
# PEPITA's forward passes (paper Table 2); the others keep their names.
ANALYTIC_PHASE = {"modulated_pass": "forward"}


def analytic_phase(execution_phase: str) -> str:
    return ANALYTIC_PHASE.get(execution_phase, execution_phase)


def running_layer() -> str:
    """The layer whose work is running: in the backward, the layer that created the running autograd node;
    otherwise the innermost layer whose forward runs, or the one a rule named (:mod:`..train.attribution`)."""
    node = torch._C._current_autograd_node()
    if node is not None:
        return node.metadata.get(attribution.LAYER_KEY, UNATTRIBUTED)
    return attribution.current_layer() or UNATTRIBUTED


class FlopMeter(TorchDispatchMode):
    """Counts FLOPs into ``counts[(layer, phase)]`` while active."""

    def __init__(self):
        super().__init__()
        self.counts: dict[tuple[str, str], int] = defaultdict(int)
        self.phase = "forward"

    @contextmanager
    def in_phase(self, name: str):
        """The phase factory of a metered step: work inside counts under phase ``name``."""
        previous, self.phase = self.phase, name
        try:
            yield
        finally:
            self.phase = previous

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = FORMULAS.get(func._overloadpacket)
        if formula is not None:
            flops = formula(*args, **kwargs, out_val=out)
            phase = attribution.current_phase_override() or self.phase
            self.counts[(self.layer_now(), phase)] += int(flops)
        return out

    @staticmethod
    def layer_now() -> str:
        return running_layer()


class LayerHooks:
    """Forward hooks on a model's analytic layers: they name the running layer and tag its autograd nodes."""

    def __init__(self, model):
        self.handles = []
        for name, module in model.layer_modules().items():
            self.handles.append(module.register_forward_pre_hook(self._enter(name)))
            self.handles.append(module.register_forward_hook(self._leave(name)))

    @staticmethod
    def _enter(name: str):
        def hook(module, args):
            attribution.push_layer(name)

        return hook

    @staticmethod
    def _leave(name: str):
        def hook(module, args, output):
            attribution.pop_layer()
            if torch.is_grad_enabled():
                attribution.tag_graph(output, name)

        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


@contextmanager
def metering(model):
    """Count FLOPs per layer and phase while the block runs; yields the meter.

    Pass ``meter.in_phase`` to a rule's ``step`` as its phase factory.
    """
    meter = FlopMeter()
    hooks = LayerHooks(model)
    try:
        with meter:
            yield meter
    finally:
        hooks.remove()
