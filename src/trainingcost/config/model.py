"""One model configuration: validated once into a frozen, typed object that everything reads.

:func:`canonical_model` checks a model entry (from a sweep, a preset or the
command line) and returns a :class:`ModelConfig`. Sizes derived from the
configuration (rows per stack, the head's rows and width, the rows of the
cross-attention keys) are its properties, computed here and nowhere else.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace
from functools import cached_property

from .errors import ConfigError
from .presets import PRESETS
from .schema import validate

ARCHES = ("encoder", "decoder", "encoder-decoder")


@dataclass(frozen=True)
class ModelConfig:
    """The canonical parameters of a transformer; the config_id is a hash of exactly these, in this order."""

    arch: str
    d_model: int
    heads: int
    d_ff: int
    enc_layers: int
    dec_layers: int
    seq_len: int  # the source length of an encoder-decoder
    tgt_len: int  # equal to seq_len outside encoder-decoder
    vocab: int
    batch: int
    classes: int  # 0: an LM head over the vocabulary

    # -- derived sizes ------------------------------------------------------------------
    @property
    def encdec(self) -> bool:
        return self.arch == "encoder-decoder"

    @property
    def stacks(self) -> tuple[str, ...]:
        """The stacks, input side first."""
        return {"encoder": ("encoder",), "decoder": ("decoder",), "encoder-decoder": ("encoder", "decoder")}[self.arch]

    def depth(self, stack: str) -> int:
        return self.enc_layers if stack == "encoder" else self.dec_layers

    def rows(self, stack: str) -> int:
        """Token rows per sequence of a stack: the source for the encoder, the target for the decoder."""
        return self.seq_len if stack == "encoder" else self.tgt_len

    @property
    def blocks(self) -> int:
        return self.enc_layers + self.dec_layers

    @property
    def layers(self) -> int:
        """Blocks of the one stack of an encoder-only or decoder-only model."""
        return self.enc_layers or self.dec_layers

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    @property
    def out_width(self) -> int:
        """The head's output width (and the output error's): classes, or the vocabulary."""
        return self.classes or self.vocab

    @property
    def head_rows(self) -> int:
        """Rows per sequence that reach the head: one pooled row for a classifier, every target position otherwise."""
        return 1 if self.classes else self.tgt_len

    @property
    def kv_rows(self) -> int:
        """Key/value rows per sequence of a cross-attention (the encoder output)."""
        return self.seq_len

    def error_aligned(self, stack: str) -> bool:
        """Whether the output error has one row per position of ``stack``: an LM head on the stack that
        produces the output; not a classifier (one pooled row), nor the encoder of an encoder-decoder."""
        return not self.classes and not (self.encdec and stack == "encoder")

    @property
    def tokens_per_step(self) -> int:
        """Input tokens of one batch: both stacks' sequences for an encoder-decoder."""
        return self.batch * (self.seq_len + (self.tgt_len if self.encdec else 0))

    @cached_property
    def config_id(self) -> str:
        """A stable 10-hex-digit id: the hash of the canonical parameters."""
        text = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes) -> "ModelConfig":
        return replace(self, **changes)


CANONICAL_FIELDS = tuple(f.name for f in fields(ModelConfig))


def config_id(cfg: ModelConfig) -> str:
    return cfg.config_id


def _describe(entry: dict) -> str:
    keys = ("arch", "d_model", "heads", "layers", "enc_layers", "dec_layers", "seq_len")
    return ", ".join(f"{k}={entry[k]}" for k in keys if k in entry)


def _field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def canonical_model(entry: dict, where: str = "", *, strict: bool = True) -> ModelConfig:
    """Check one model entry and return its canonical configuration.

    ``strict`` entries (explicit models, command-line flags) reject fields that
    do not apply to their arch; grid combinations drop them instead.
    """
    if strict:  # grid combinations were validated as part of their grid
        validate(entry, where, "#/$defs/model")
    e = dict(entry)
    arch = e["arch"]
    encdec = arch == "encoder-decoder"
    if not encdec:
        for key in ("enc_layers", "dec_layers", "tgt_len"):
            if key in e:
                if strict:
                    raise ConfigError(f"{_field(where, key)}: applies only to arch encoder-decoder (arch is {arch})")
                del e[key]
        if "layers" not in e:
            raise ConfigError(f"{_field(where, 'layers')}: required for arch {arch}")
        enc_layers, dec_layers = (e["layers"], 0) if arch == "encoder" else (0, e["layers"])
    else:
        if strict and "layers" in e and ("enc_layers" in e or "dec_layers" in e):
            raise ConfigError(f"{_field(where, 'layers')}: give either layers or enc_layers and dec_layers, not both")
        enc_layers = e.get("enc_layers", e.get("layers"))
        dec_layers = e.get("dec_layers", e.get("layers"))
        for key, value in (("enc_layers", enc_layers), ("dec_layers", dec_layers)):
            if value is None:
                raise ConfigError(f"{_field(where, key)}: encoder-decoder needs both stacks (give {key} or layers)")
    if ("d_ff" in e) == ("ff_mult" in e):
        raise ConfigError(f"{_field(where, 'd_ff')}: give exactly one of d_ff and ff_mult")
    d_model, heads = int(e["d_model"]), int(e["heads"])
    if d_model % heads:
        raise ConfigError(f"{_field(where, 'heads')}: {heads} does not divide d_model {d_model} ({_describe(e)})")
    d_ff = int(e["d_ff"]) if "d_ff" in e else int(e["ff_mult"]) * d_model
    classes = int(e.get("classes", 0))
    if classes and encdec:
        raise ConfigError(f"{_field(where, 'classes')}: a classification head needs arch encoder or decoder")
    seq_len = int(e["seq_len"])
    return ModelConfig(
        arch=arch,
        d_model=d_model,
        heads=heads,
        d_ff=d_ff,
        enc_layers=int(enc_layers),
        dec_layers=int(dec_layers),
        seq_len=seq_len,
        tgt_len=int(e.get("tgt_len", seq_len)) if encdec else seq_len,
        vocab=int(e["vocab"]),
        batch=int(e.get("batch", 1)),
        classes=classes,
    )


def preset_entry(name: str, where: str = "preset") -> dict:
    if name not in PRESETS:
        raise ConfigError(f"{where}: unknown preset {name!r} (allowed: {', '.join(PRESETS)})")
    return dict(PRESETS[name])


__all__ = ["ARCHES", "CANONICAL_FIELDS", "ModelConfig", "canonical_model", "config_id", "preset_entry"]
