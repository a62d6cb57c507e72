"""Where work belongs: the analytic layer and phase that the code is running now.

Rules and the model mark their work; a measurement (``trainingcost.measure``)
reads the marks. Without a measurement the marks cost a thread-local push and pop.

- :func:`layer` names the layer of work done outside a module's forward (a
  PEPITA update, a DFA projection, a weight-mirror step);
- :func:`phase` overrides the caller's phase for a piece of work inside
  another phase (the weight gradients that autograd computes during the backward);
- :func:`tag_graph` marks autograd nodes with the layer that created them, so
  that work in the backward pass is attributed to its layer.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

LAYER_KEY = "trainingcost_layer"
_local = threading.local()


def _stack(name: str) -> list:
    stack = getattr(_local, name, None)
    if stack is None:
        stack = []
        setattr(_local, name, stack)
    return stack


@contextmanager
def _pushed(stack_name: str, value: str):
    stack = _stack(stack_name)
    stack.append(value)
    try:
        yield
    finally:
        stack.pop()


def layer(name: str):
    """Attribute the work inside the ``with`` block to analytic layer ``name``."""
    return _pushed("layers", name)


def phase(name: str):
    """Attribute the work inside the ``with`` block to phase ``name``, whatever the caller's phase."""
    return _pushed("phases", name)


def push_layer(name: str) -> None:
    """For hooks that cannot hold a context manager: a forward pre-hook pushes, the post-hook pops."""
    _stack("layers").append(name)


def pop_layer() -> None:
    _stack("layers").pop()


def current_layer() -> str | None:
    stack = _stack("layers")
    return stack[-1] if stack else None


def current_phase_override() -> str | None:
    stack = _stack("phases")
    return stack[-1] if stack else None


def tag_graph(output, name: str) -> None:
    """Mark every untagged autograd node behind ``output`` with layer ``name``.

    Called after a layer's forward, in forward order, so the walk stops at the
    nodes of earlier layers, which are already tagged.
    """
    roots = [t.grad_fn for t in _tensors(output) if getattr(t, "grad_fn", None) is not None]
    seen = set()
    while roots:
        node = roots.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if LAYER_KEY in node.metadata:
            continue
        node.metadata[LAYER_KEY] = name
        roots.extend(next_node for next_node, _ in node.next_functions)


def _tensors(value):
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif value is not None:
        yield value
