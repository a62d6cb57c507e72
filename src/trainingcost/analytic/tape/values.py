"""The tape's forward tensors: a :class:`Value` (a storage, rows x width, tracked or not) and the residual
:class:`Stream` a step carries between stages (analytic/tape/ops.py and its op families read them)."""

from __future__ import annotations

from .buffers import Buf, Tape


class Value:
    """A forward tensor: its storage, rows x width, and whether autograd tracks it."""

    __slots__ = ("buf", "rows", "width", "tracked", "grad")

    def __init__(self, buf: Buf, rows, width, tracked: bool):
        self.buf, self.rows, self.width, self.tracked, self.grad = buf, rows, width, tracked, None


class Stream:
    """The residual stream and the encoder output, as a :class:`train.model.Stream` holds them."""

    def __init__(self):
        self.x: Value | None = None
        self.memory: Value | None = None
        self.bias: Value | None = None  # the running stack's relative position bias
        self.hidden: Value | None = None  # the stream before the final norm (kept for multi-token prediction)

    def close(self, t: Tape) -> None:
        for value in (self.x, self.memory, self.bias, self.hidden):
            if value is not None:
                t.drop(value.buf)
        self.x = self.memory = self.bias = self.hidden = None
