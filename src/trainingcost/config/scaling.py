"""The scaling study: what it trains, checked without torch (docs/learning_rules.md, "Cost to a quality").

A grid of decoder-only models (widths x depths) on the byte-level ``lm`` task, each trained under every
rule for one step budget, with the validation loss logged at geometrically spaced steps. Each rule's
learning rate comes from a small search on one point of the grid (the middle width at the smallest depth,
half the steps, the first seed), so that no rule is compared at BP's learning rate.

The workflow's ``scaling`` section is read here into a :class:`ScalingStudy`; the training command
(``trainingcost curves``) reads the same study back from the JSON the workflow writes, so that both see
one definition. ``scaling_budget`` (a top-level key, so that ``snakemake --config scaling_budget=10`` can
set it) multiplies every run's steps, the search's too.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

from .errors import ConfigError, regular_file
from .model import ModelConfig, canonical_model

ARCH, TASK, VOCAB = "decoder", "lm", 256  # decoders on the byte-level lm task (Filipovich et al. 2022's setting)


def eval_steps(steps: int, evals: int) -> tuple[int, ...]:
    """``evals`` steps spaced geometrically from 1 to ``steps`` (both included), rounded and deduplicated."""
    if steps < 1 or evals < 1:
        raise ValueError(f"eval_steps: steps and evals must be positive (got {steps}, {evals})")
    if evals == 1 or steps == 1:
        return (steps,)
    ratio = steps ** (1 / (evals - 1))
    return tuple(sorted({min(steps, max(1, round(ratio ** i))) for i in range(evals)} | {steps}))


def _check_study_field(name: str, value, kind: str) -> None:
    """One field of a study's JSON against its declared type: counts are integers of at least 1 (a count of 0 would
    divide by zero downstream), rates and fractions finite and positive, names strings, lists non-empty."""
    import math

    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 2**62

    def rate(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0

    ok = {"int": count, "optional int": lambda v: v is None or count(v), "float": rate,
          "str": lambda v: isinstance(v, str) and v != "",
          "ints": lambda v: isinstance(v, list) and v != [] and all(count(x) or (type(x) is int and x == 0) for x in v),
          "counts": lambda v: isinstance(v, list) and v != [] and all(count(x) for x in v),
          "floats": lambda v: isinstance(v, list) and v != [] and all(rate(x) for x in v),
          "strs": lambda v: isinstance(v, list) and v != [] and all(isinstance(x, str) for x in v)}[kind](value)
    if not ok:
        text = repr(value)
        raise ConfigError(f"scaling study: {name}: {text[:40]}{'...' if len(text) > 40 else ''} is not "
                          + {"int": "a count (an integer of at least 1)", "optional int": "null or a count",
                             "float": "a positive finite number", "str": "a name", "ints": "a list of integers", "counts": "a list of counts (integers of at least 1)",
                             "floats": "a list of positive numbers", "strs": "a list of names"}[kind])


@dataclass(frozen=True)
class ScalingStudy:
    """The scaling study's grid, budget and learning-rate search (the workflow's ``scaling`` section)."""

    rules: tuple[str, ...]
    widths: tuple[int, ...]
    depths: tuple[int, ...]
    heads: int = 4
    ff_mult: int = 4
    seq_len: int = 64
    batch: int = 16
    seeds: tuple[int, ...] = (0, 1)
    steps: int = 600
    evals: int = 16
    eval_batches: int = 8
    optimizer: str = "adam"
    lrs: tuple[float, ...] = (3e-4, 1e-3, 3e-3, 1e-2)
    search_steps: int | None = None  # None: half of the (budgeted) steps
    budget: float = 1.0
    target_compute_fraction: float = 0.1
    bootstrap: int = 200
    dtype: str = "fp32"
    device: str = "auto"
    threads: int = 1  # torch threads per job

    # -- the grid ---------------------------------------------------------------------------------------
    def model(self, width: int, depth: int) -> ModelConfig:
        entry = dict(arch=ARCH, d_model=width, heads=self.heads, d_ff=self.ff_mult * width, layers=depth,
                     vocab=VOCAB, seq_len=self.seq_len, batch=self.batch)
        return canonical_model(entry, f"scaling (width {width}, depth {depth})")

    def points(self) -> list[ModelConfig]:
        """Every model of the grid, by depth then width."""
        return [self.model(w, d) for d in self.depths for w in self.widths]

    def search_point(self) -> ModelConfig:
        """Where the learning rates are searched: the middle width (the lower of two) at the smallest depth."""
        widths = sorted(self.widths)
        return self.model(widths[(len(widths) - 1) // 2], min(self.depths))

    @property
    def searched(self) -> bool:
        return len(self.lrs) > 1

    # -- the budget -------------------------------------------------------------------------------------
    @property
    def run_steps(self) -> int:
        return max(2, round(self.steps * self.budget))

    @property
    def run_search_steps(self) -> int:
        base = self.search_steps if self.search_steps is not None else self.steps / 2
        return max(2, round(base * self.budget))

    def run_evals(self, steps: int) -> tuple[int, ...]:
        # a larger budget gets proportionally more evaluation points per decade, capped by the steps
        extra = max(0, round(math.log2(self.budget))) if self.budget > 1 else 0
        return eval_steps(steps, min(steps, self.evals + 2 * extra))

    # -- validation and the JSON the jobs read -----------------------------------------------------------
    def check(self, known_rules) -> None:
        for name in self.rules:
            if name not in known_rules:
                raise ConfigError(f"scaling.rules: unknown rule {name!r} (allowed: {', '.join(known_rules)})")
        if "bp" not in self.rules:
            raise ConfigError("scaling.rules: must include bp (every multiplier is against BP)")
        for name in ("widths", "depths", "seeds", "lrs"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ConfigError(f"scaling.{name}: repeats a value ({', '.join(map(str, values))})")
        for w in self.widths:
            if w % self.heads:
                raise ConfigError(f"scaling.widths: {w} is not a multiple of scaling.heads ({self.heads})")
        if not (0 < self.target_compute_fraction <= 1):
            raise ConfigError(f"scaling.target_compute_fraction: must be in (0, 1] (got {self.target_compute_fraction})")
        if not (self.budget > 0 and math.isfinite(self.budget)):
            raise ConfigError(f"scaling_budget: must be a positive number (got {self.budget})")
        self.points()  # every shape is a valid model (canonical_model raises a one-line ConfigError)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ScalingStudy":
        """A study as the workflow wrote it, each field checked for its type first (one line naming it)."""
        from .errors import parse_json

        raw = parse_json(text, "scaling study")
        if not isinstance(raw, dict):
            raise ConfigError("scaling study: a JSON object of the study's fields (results/scaling/study.json)")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise ConfigError(f"scaling study: unknown fields {', '.join(unknown)}")
        required = sorted(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
        missing = [name for name in required if name not in raw]
        if missing:
            raise ConfigError(f"scaling study: missing fields {', '.join(missing)}")
        for name, value in raw.items():
            _check_study_field(name, value, STUDY_TYPES[name])
        try:
            return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"scaling study: {exc}") from None

    @classmethod
    def read(cls, path: str | Path) -> "ScalingStudy":
        regular_file(path, "--study", "the study's JSON (results/scaling/study.json)")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--study: {path}: not UTF-8 text (byte {exc.start}); give the study's JSON") from None
        except OSError as exc:
            raise ConfigError(f"--study: cannot read {path} ({exc.strerror})") from None
        return cls.from_json(text)


def study_from_config(config: dict) -> ScalingStudy | None:
    """The filled workflow config's study, or None where it has no ``scaling`` section."""
    section = config.get("scaling")
    if section is None:
        return None
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in section.items()}
    return ScalingStudy(**values, budget=float(config.get("scaling_budget", 1.0)))


__all__ = ["ARCH", "TASK", "VOCAB", "ScalingStudy", "eval_steps", "study_from_config"]


# Each field's type in a study's JSON (checked by ScalingStudy.from_json).
STUDY_TYPES = {"rules": "strs", "widths": "counts", "depths": "counts", "heads": "int", "ff_mult": "int", "seq_len": "int",
               "batch": "int", "seeds": "ints", "steps": "int", "evals": "int", "eval_batches": "int", "optimizer": "str",
               "lrs": "floats", "search_steps": "optional int", "budget": "float", "target_compute_fraction": "float",
               "bootstrap": "int", "dtype": "str", "device": "str", "threads": "int"}
