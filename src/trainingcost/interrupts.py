"""Ctrl-C and SIGTERM that cannot be lost.

A signal handler raises in whatever Python code runs at that moment. When that code is a finalizer (the tensor
meter frees storages through ``weakref.finalize``) or a ``__del__``, Python prints "Exception ignored" and goes
on: the interrupt is lost and a long run keeps going. So the handlers also record the signal, and the training
loop calls :func:`raise_pending` before every step.
"""

from __future__ import annotations

import signal


class Terminated(BaseException):
    """SIGTERM, raised where the process is, so that it unwinds like Ctrl-C."""


_pending: list[type[BaseException]] = []


def _handler(exc_type: type[BaseException]):
    def handle(signum, frame):
        _pending.append(exc_type)
        raise exc_type

    return handle


def install() -> dict:
    """Handlers for SIGINT and SIGTERM (main thread only); returns the previous ones for :func:`restore`."""
    _pending.clear()
    return {signal.SIGINT: signal.signal(signal.SIGINT, _handler(KeyboardInterrupt)),
            signal.SIGTERM: signal.signal(signal.SIGTERM, _handler(Terminated))}


def restore(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    _pending.clear()


def raise_pending() -> None:
    """Raise a signal that arrived but whose exception was swallowed."""
    if _pending:
        raise _pending.pop()
