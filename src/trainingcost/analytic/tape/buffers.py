"""The tape's storage: buffers with reference counts, and live bytes event by event with each phase's peak."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ..spec import EXECUTION_PHASES

FLOAT32, INT64, BOOL = 4, 8, 1
STEP_PHASES = EXECUTION_PHASES


class Buf:
    """One storage on the tape: its bytes (an array over the group) and how many references hold it."""

    __slots__ = ("nbytes", "refs", "label", "expanded", "strided")

    def __init__(self, nbytes: np.ndarray, label: str):
        self.nbytes, self.refs, self.label = nbytes, 1, label
        # How a linear layer's backward reads this gradient: ``expanded`` (seen through expand(), or the math
        # attention's k gradient, transposed): each of its three products reads a contiguous copy; ``strided`` (the
        # math attention's q and v gradients): one contiguous copy, which replaces it.
        self.expanded = self.strided = False


class Tape:
    """Live bytes of a group of configurations, event by event, with the peak of every phase."""

    def __init__(self, start: np.ndarray):
        self.live = np.asarray(start, dtype=np.int64).copy()
        self.start = self.live.copy()
        self.peak = self.live.copy()
        self.phase = "forward"
        self.phase_peaks: dict[str, np.ndarray] = {}
        self.events: list[tuple[str, np.ndarray, str, str]] | None = None  # (+/-, bytes, label, phase) to debug

    def new(self, nbytes, label: str = "") -> Buf:
        if not (type(nbytes) is np.ndarray and nbytes.dtype == np.int64 and nbytes.shape == self.live.shape):
            nbytes = np.broadcast_to(np.asarray(nbytes, dtype=np.int64), self.live.shape)  # (read-only: never
        buf = Buf(nbytes, label)  # changed in place, so one array may be shared by buffers of one size)
        self.live = self.live + buf.nbytes
        self._mark()
        if self.events is not None:
            self.events.append(("+", buf.nbytes, label, self.phase))
        return buf

    def hold(self, *bufs: Buf | None) -> None:
        for buf in bufs:
            if buf is not None:
                buf.refs += 1

    def drop(self, *bufs: Buf | None) -> None:
        for buf in bufs:
            if buf is None:
                continue
            if buf.refs <= 0:
                raise RuntimeError(f"tape: {buf.label} dropped twice")
            buf.refs -= 1
            if buf.refs == 0:
                self.live = self.live - buf.nbytes
                if self.events is not None:
                    self.events.append(("-", buf.nbytes, buf.label, self.phase))

    def _mark(self) -> None:
        self.peak = np.maximum(self.peak, self.live)
        if self.phase is None:  # outside the rule's phases (as the meter): the step's peak only
            return
        if self.phase in self.phase_peaks:
            self.phase_peaks[self.phase] = np.maximum(self.phase_peaks[self.phase], self.live)
        else:
            self.phase_peaks[self.phase] = self.live.copy()

    @contextmanager
    def in_phase(self, name: str | None):
        previous, self.phase = self.phase, name
        self._mark()  # a phase's peak counts what is alive when it begins
        try:
            yield
        finally:
            self.phase = previous


def bytes_(elements, size: int) -> np.ndarray:
    return np.asarray(elements, dtype=np.int64) * size

