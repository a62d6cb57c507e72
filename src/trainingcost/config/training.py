"""What a training run may be asked for, checked without torch: tasks, devices, dtypes, optimizers.

The training code (:mod:`trainingcost.train`) implements these; the command
line and the workflow check a run's settings here, before any job starts or
torch is imported. The allowed names are :mod:`.choices`' (the schema's enums are filled
from them); a test keeps them equal to what the training code implements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .choices import DEVICES, OPTIMIZERS, TASKS, TRAIN_DTYPES  # noqa: F401 - re-exported
from .errors import ConfigError, regular_file
from .model import ModelConfig

CLASSIFY_CLASSES = 3
LM_MIN_VOCAB = 256  # byte-level


def check_task(task: str, cfg: ModelConfig) -> None:
    """One-line errors, naming the field, for a task that cannot run on this model shape."""
    arch, vocab, classes = cfg.arch, cfg.vocab, cfg.classes
    if task not in TASKS:
        raise ConfigError(f"task: unknown task {task!r} (allowed: {', '.join(TASKS)})")
    if task in ("copy", "reverse") and arch != "encoder-decoder":
        raise ConfigError(f"task: {task} is a sequence-to-sequence task and needs arch encoder-decoder (arch is {arch})")
    if task == "classify":
        if arch == "encoder-decoder":
            raise ConfigError("task: classify needs arch encoder or decoder (a classifier head on one stack)")
        if classes != CLASSIFY_CLASSES:
            raise ConfigError(f"classes: task classify has {CLASSIFY_CLASSES} classes (got {classes})")
        if vocab < 4:
            raise ConfigError(f"vocab: task classify needs at least 4 token ids (got {vocab})")
    elif classes:
        raise ConfigError(f"classes: task {task} uses an LM head; classes apply to task classify only")
    if task == "lm" and vocab < LM_MIN_VOCAB:
        raise ConfigError(f"vocab: task lm is byte-level and needs vocab >= {LM_MIN_VOCAB} (got {vocab})")
    if task in ("copy", "reverse") and vocab < 3:
        raise ConfigError(f"vocab: task {task} needs at least 3 token ids (got {vocab})")


def task_defaults(task: str) -> dict:
    """Fields a task fixes or suggests when the user gives none: model sizes, and the optimizer.

    Sequence-to-sequence copy and reverse barely move under SGD at 0.05 (2.86 -> 2.72 in 150 steps); under
    AdamW at 3e-3, BP reaches 0.93 (copy) and 0.97 (reverse) validation accuracy in the default 200 steps
    (tests/test_learning.py).
    """
    return {
        "lm": {"vocab": LM_MIN_VOCAB, "optimizer": "sgd"},
        "classify": {"vocab": 16, "classes": CLASSIFY_CLASSES, "optimizer": "sgd"},
        "copy": {"vocab": 32, "optimizer": "adam"},
        "reverse": {"vocab": 32, "optimizer": "adam"},
    }[task]


# The learning rate when none is given, per optimizer: SGD's 0.05 is far too large for Adam's normalised steps.
DEFAULT_LR = {"sgd": 0.05, "momentum": 0.05, "adam": 3e-3}


@dataclass(frozen=True)
class RuleOptions:
    """A learning rule's hyperparameters; None means the rule's declared default."""

    optimizer: str = "sgd"
    lr: float = 0.05
    weight_decay: float | None = None
    mirror_steps: int = 1  # WM: mirror steps per training step
    mirror_lr: float | None = None  # WM: Hebbian rate
    mirror_decay: float | None = None  # WM: decay of B per mirror step
    mirror_noise: float | None = None  # WM: std of the noise input
    pepita_f_scale: float | None = None  # PEPITA: std(F) = scale * sqrt(2 / d_model)
    target_step: float | None = None  # TP, DTP: the first target's step, t_L = h_L - target_step dL/dh_L
    target_noise: float | None = None  # TP, DTP: std of the noise that trains the inverses
    inverse_lr: float | None = None  # TP, DTP: the inverses' learning rate (default: lr x the rule's inverse_lr_ratio)
    lra_beta: float | None = None  # LRA: the step of each target, t_{l-1} = h_{l-1} - beta e_l E_l
    lra_gamma: float | None = None  # LRA: the scale of the error weights' update

    def check(self) -> None:
        """One line naming the option, for a value no rule can run with."""
        wd = self.weight_decay  # None: the optimizer's own default
        if wd is not None and (isinstance(wd, bool) or not isinstance(wd, (int, float)) or not 0 <= wd <= MAX_LR):
            raise ConfigError(f"weight_decay: must be 0 to {MAX_LR:.3g}, a float32 number (got {wd!r})")
        for name in RULE_OPTION_FLOATS:
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ConfigError(f"{name}: must be a finite number (got {value!r})")
            if value < 0 or (value == 0 and name in ("inverse_lr", "lra_beta", "target_step")):
                allowed = "0 or more" if name in ("target_noise", "lra_gamma") else "a positive number"
                raise ConfigError(f"{name}: must be {allowed} (got {value})")


# The rule hyperparameters a run may set (flags --target-step ...; None: the rule's default), each with what it
# sets, the RuleSpec.defaults key of its default and how that default reads (the command line's help).
RULE_OPTION_HELP = {
    "target_step": ("the first target's step", "target_step", "{:g}"),
    "target_noise": ("std of the inverses' training noise", "target_noise", "{:g}"),
    "inverse_lr": ("the inverses' learning rate", "inverse_lr_ratio", "lr x {:g}"),
    "lra_beta": ("the targets' step beta", "lra_beta", "{:g}"),
    "lra_gamma": ("the error weights' update scale gamma", "lra_gamma", "{:g}"),
}
RULE_OPTION_FLOATS = tuple(RULE_OPTION_HELP)


MAX_SEED = 2**32 - 1  # a seed of 32 bits, as numpy's and most tools' seeds are; torch takes 64, with room for offsets


@dataclass(frozen=True)
class TrainSpec:
    """One training run, as asked for: a model, a task, a rule and how to run it."""

    cfg: ModelConfig
    task: str
    rule: str
    steps: int = 200
    seed: int = 0
    device: str = "auto"
    dtype: str = "fp32"
    corpus: str | None = None
    eval_batches: int = 4
    eval_every: int = 0  # 0: evaluate after the last step only
    eval_at: tuple[int, ...] = ()  # also evaluate after these steps (the scaling study's geometric schedule)
    options: RuleOptions = RuleOptions()
    measure: bool = False
    warmup: int = 2  # steps before the counted step and the timed steps (with measure)

    def check(self) -> None:
        """One-line errors naming the field, before anything runs."""
        check_task(self.task, self.cfg)
        if not 0 <= self.seed <= MAX_SEED:  # the run seeds torch with seed + 7919 (train/data.py): 64 bits in all
            raise ConfigError(f"seed: must be 0 to {MAX_SEED:,} (got {str(self.seed)[:30]})")
        if self.steps <= 0:
            raise ConfigError(f"steps: must be a positive number of steps (got {self.steps})")
        if not 0 < self.eval_batches <= MAX_EVAL_BATCHES:
            raise ConfigError(f"eval_batches: must be 1 to {MAX_EVAL_BATCHES:,} (got {self.eval_batches:,}): the "
                              "validation batches are drawn and held before the first step")
        if self.eval_every < 0:
            raise ConfigError(f"eval_every: must be 0 (end only) or positive (got {self.eval_every})")
        if any(not 1 <= s <= self.steps for s in self.eval_at):
            raise ConfigError(f"eval_at: every step must be in 1..{self.steps} (got {', '.join(map(str, self.eval_at))})")
        if self.dtype not in TRAIN_DTYPES:
            raise ConfigError(f"dtype: {self.dtype!r} is not allowed (allowed: {', '.join(TRAIN_DTYPES)})")
        if self.device not in DEVICES:
            raise ConfigError(f"device: {self.device!r} is not allowed (allowed: {', '.join(DEVICES)})")
        if self.options.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer: {self.options.optimizer!r} is not allowed (allowed: {', '.join(OPTIMIZERS)})")
        if not self.options.lr > 0 or not math.isfinite(self.options.lr):
            raise ConfigError(f"lr: must be a positive number (got {self.options.lr})")
        if self.options.lr > MAX_LR:
            raise ConfigError(f"lr: {self.options.lr:g} is not a float32 number (at most {MAX_LR:.3g}): the optimizer's "
                              "step could not multiply by it (the defaults are 3e-3 for Adam, 0.05 for SGD)")
        self.options.check()
        if self.options.mirror_steps < 0:
            raise ConfigError(f"mirror_steps: must be 0 or more (got {self.options.mirror_steps})")
        if self.warmup < 0:
            raise ConfigError(f"warmup: must be 0 or more (got {self.warmup})")
        if self.measure and self.steps < self.warmup + 2:
            raise ConfigError(
                f"steps: measuring needs at least warmup + 2 = {self.warmup + 2} steps "
                f"(warm-up, one FLOP-counted step, timed steps); got {self.steps}"
            )
        if self.corpus is not None:
            if self.task != "lm":
                raise ConfigError(f"corpus: applies to task lm only (task is {self.task})")
            check_corpus(self.corpus)


MAX_EVAL_BATCHES = 10_000  # validation batches, drawn before the first step and kept: bounded, not a hang
MAX_LR = 3.4028234663852886e38  # float32's largest: torch's optimizers multiply float32 tensors by the rate


MAX_CORPUS_BYTES = 2**30  # 1 GiB: the byte-level task reads it whole (two copies while loading); its runs are small


def check_corpus(path: str) -> None:
    """A corpus must be a readable, non-empty file of at most MAX_CORPUS_BYTES (read whole into memory, twice)."""
    p = regular_file(path, "corpus", "a text file")
    size = p.stat().st_size
    if size > MAX_CORPUS_BYTES:
        raise ConfigError(f"corpus: {path} is {size / 2**30:.3g} GiB, more than the {MAX_CORPUS_BYTES / 2**30:.0f} GiB "
                          "read (the byte-level task holds the whole text in memory); give a part of it")
    try:
        with p.open("rb") as handle:
            empty = not handle.read(1)
    except OSError as exc:
        raise ConfigError(f"corpus: cannot read {path}: {exc.strerror or exc}") from None
    if empty:
        raise ConfigError(f"corpus: {path} is empty; give a text file with at least a few windows of seq_len bytes")
