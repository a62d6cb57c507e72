"""Training tasks: no downloads, seeded, with train and validation splits.

- ``lm``: byte-level language modelling on a local text (token ids are bytes,
  so the vocabulary must hold at least 256 ids). By default the text is the
  source of the running Python's standard library, read at run time.
  Decoder: next-token prediction. Encoder: masked-token prediction (15 % of
  positions replaced by id 0, at least one per batch, loss on those only). Encoder-decoder: the encoder
  reads a window, the decoder predicts the bytes that follow it.
- ``classify``: a synthetic 3-class task on sequences of filler tokens with two
  marker tokens A and B: class 0 if A occurs more often than B, 1 if less often,
  2 if equally often. The answer depends on every position.
- ``copy`` and ``reverse``: sequence-to-sequence tasks (encoder-decoder): the
  target is the source, or the source reversed (its first ``tgt_len`` tokens).

Batches are drawn with a ``torch.Generator`` seeded from the run's seed; the
validation set is a fixed list of batches drawn from the validation split with
its own generator, so every rule of a sweep sees the same validation data.
"""

from __future__ import annotations

import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config.errors import ConfigError
from ..config.model import ModelConfig
from ..config.training import CLASSIFY_CLASSES, check_corpus, check_task
from .objective import IGNORE, Batch

MASK_ID = 0  # encoder masked-token modelling; corpus NUL bytes are mapped to spaces
BOS_ID = 0  # first decoder input of sequence-to-sequence targets
MARKER_A, MARKER_B = 1, 2  # classify: the two marker tokens; fillers are 3 .. vocab-1
SEQ2SEQ_FIRST = 1  # copy/reverse: source tokens are 1 .. vocab-1
STDLIB_BYTES = 4 * 2**20  # how much of the standard library the default corpus reads
VALIDATION_FRACTION = 0.1
MASK_FRACTION = 0.15
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


def stdlib_corpus(limit: int = STDLIB_BYTES) -> bytes:
    """The first ``limit`` bytes of the standard library's ``.py`` files, in sorted path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, size = [], 0
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(".py"):
                data = (Path(directory) / name).read_bytes()
                chunks.append(data)
                size += len(data)
                if size >= limit:
                    return b"".join(chunks)[:limit]
    return b"".join(chunks)


def read_corpus(path: str | None) -> tuple[bytes, str]:
    if path is None:
        return stdlib_corpus(), f"python {sysconfig.get_python_version()} standard library"
    check_corpus(path)
    return Path(path).read_bytes(), str(path)


@dataclass
class Task:
    name: str
    cfg: ModelConfig
    description: str

    def batch(self, generator: torch.Generator, split: str = "train") -> Batch:  # pragma: no cover - abstract
        raise NotImplementedError

    def validation(self, seed: int, batches: int) -> list[Batch]:
        generator = torch.Generator().manual_seed(seed + 7919)
        return [self.batch(generator, "validation") for _ in range(batches)]


class LanguageModelling(Task):
    def __init__(self, cfg: ModelConfig, corpus: bytes, source: str):
        super().__init__("lm", cfg, f"byte-level LM on {source}")
        # bytes kept as bytes: a batch's windows become int64 as they are drawn (an int64 copy of the whole corpus
        # took 8 bytes per byte: 10.8 GB for a 1 GB text, issue 66, N7)
        data = torch.frombuffer(bytearray(corpus), dtype=torch.uint8)
        data[data == MASK_ID] = ord(" ")
        cut = int(len(data) * (1 - VALIDATION_FRACTION))
        self.splits = {"train": data[:cut], "validation": data[cut:]}
        self.window = cfg.seq_len + (cfg.tgt_len if cfg.arch == "encoder-decoder" else 1)
        for split, part in self.splits.items():
            if len(part) <= self.window:
                raise ConfigError(
                    f"corpus: the {split} split has {len(part)} bytes, fewer than one window of {self.window + 1}; "
                    "give a longer text or a shorter seq_len"
                )
        windows = len(self.splits["train"]) - self.window
        if windows < cfg.batch:
            raise ConfigError(
                f"batch: {cfg.batch} sequences per step need {cfg.batch} distinct windows of {self.window + 1} bytes, "
                f"but the corpus's train split has {windows}; give a longer corpus or a smaller batch"
            )

    def batch(self, generator: torch.Generator, split: str = "train") -> Batch:
        data = self.splits[split]
        b, n = self.cfg.batch, self.cfg.seq_len
        starts = torch.randint(0, len(data) - self.window, (b,), generator=generator)
        windows = data[starts[:, None] + torch.arange(self.window)].to(torch.int64)
        arch = self.cfg.arch
        if arch == "decoder":
            return Batch({"decoder": windows[:, :n]}, windows[:, 1 : n + 1])
        if arch == "encoder":
            tokens = windows[:, :n].clone()
            masked = torch.rand(b, n, generator=generator) < MASK_FRACTION
            if not masked.any():
                # A batch with no masked position has no target: its mean loss is 0/0 and every rule's step
                # divides by its terms. At 15 % that is 0.85^(batch x seq_len): about 0.7 for the probe's one
                # sequence of two tokens (measure/probe.py), never in practice beyond a few dozen positions.
                # Mask one position then; other batches draw exactly as before.
                masked.view(-1)[torch.randint(0, b * n, (1,), generator=generator)] = True
            targets = torch.where(masked, tokens, torch.full_like(tokens, IGNORE))
            tokens[masked] = MASK_ID
            return Batch({"encoder": tokens}, targets)
        target = windows[:, n:]
        return Batch({"encoder": windows[:, :n], "decoder": shift_right(target)}, target)


class Classification(Task):
    def __init__(self, cfg: ModelConfig):
        super().__init__("classify", cfg, "3-class marker counting (A more, fewer or as often as B)")

    def batch(self, generator: torch.Generator, split: str = "train") -> Batch:
        b, n, vocab = self.cfg.batch, self.cfg.seq_len, self.cfg.vocab
        tokens = torch.randint(MARKER_B + 1, vocab, (b, n), generator=generator)
        label = torch.randint(0, CLASSIFY_CLASSES, (b,), generator=generator)
        most = max(1, n // 4)
        base = torch.randint(0, most, (b,), generator=generator)  # the smaller count
        extra = torch.randint(1, most + 1, (b,), generator=generator)
        count_a = torch.where(label == 0, base + extra, base)
        count_b = torch.where(label == 1, base + extra, base)
        order = torch.argsort(torch.rand(b, n, generator=generator), dim=1)  # random positions per row
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(n).expand(b, n))
        tokens = torch.where(rank < count_a[:, None], MARKER_A, tokens)
        tokens = torch.where((rank >= count_a[:, None]) & (rank < (count_a + count_b)[:, None]), MARKER_B, tokens)
        return Batch({self.stack: tokens}, label)

    @property
    def stack(self) -> str:
        return "encoder" if self.cfg.arch == "encoder" else "decoder"


class SequenceToSequence(Task):
    def __init__(self, cfg: ModelConfig, reverse: bool):
        name = "reverse" if reverse else "copy"
        super().__init__(name, cfg, f"{name} the source sequence")
        self.reverse = reverse

    def batch(self, generator: torch.Generator, split: str = "train") -> Batch:
        b, n, m, vocab = self.cfg.batch, self.cfg.seq_len, self.cfg.tgt_len, self.cfg.vocab
        source = torch.randint(SEQ2SEQ_FIRST, vocab, (b, n), generator=generator)
        ordered = source.flip(1) if self.reverse else source
        target = ordered.repeat(1, -(-m // n))[:, :m]  # a target longer than the source repeats it
        return Batch({"encoder": source, "decoder": shift_right(target)}, target)


def shift_right(target: torch.Tensor) -> torch.Tensor:
    """Teacher forcing: the decoder reads BOS and the target without its last token."""
    return torch.cat([torch.full_like(target[:, :1], BOS_ID), target[:, :-1]], dim=1)


def make_task(task: str, cfg: ModelConfig, corpus: str | None = None) -> Task:
    check_task(task, cfg)
    if task == "lm":
        text, source = read_corpus(corpus)
        return LanguageModelling(cfg, text, source)
    if task == "classify":
        return Classification(cfg)
    return SequenceToSequence(cfg, reverse=task == "reverse")
