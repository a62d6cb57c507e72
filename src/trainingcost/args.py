"""The command line's shared argument helpers: the parser, the number types, the model flags and the model
they describe. ``cli.py`` (every command) and ``plan_command.py`` (``trainingcost plan``) read them; this module
imports no other top-level module, so the top layer's imports run one way (tests/test_catalogue.py).
"""

from __future__ import annotations

import argparse
import math
import os
import re

from .config import PRESETS, ConfigError, canonical_model, preset_entry
from .config.hf import SUPPORTED as HF_MODEL_TYPES
from .config.hf import check_window, drop_lm_head, drop_short_table, hf_entry, read_hf_data, training_length
from .config.choices import spelling
from .config.model import OPTIONS

# Model flags; each flag's dest is its config field (--d-model -> d_model). The architecture options' flags come
# from their declarations (config/model.py's option()).
SIZE_FLAGS = ("arch", "layers", "enc_layers", "dec_layers", "d_model", "heads", "d_ff", "vocab", "seq_len", "tgt_len",
              "batch", "classes")
MODEL_FIELDS = (*SIZE_FLAGS, *OPTIONS)
LAYER_FIELDS = ("layers", "enc_layers", "dec_layers")


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message}\n")


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def count(text: str) -> int:
    """An integer, also written as a whole float (``1e3``), within 64 bits."""
    try:
        value = int(float(text)) if float(text).is_integer() else int(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None
    if abs(value) > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"expected an integer of at most 2^63 - 1, got {text[:40]}")
    return value


def count_or_max(text: str):
    """``max`` (None: the largest that fits), or a count."""
    return None if text.strip().lower() == "max" else count(text)


def count_or_auto(text: str):
    """``auto`` (left to the layout search), or a count."""
    return "auto" if text.strip().lower() == "auto" else count(text)


def count_max_or_auto(text: str):
    """``auto`` (searched), ``max`` (None: the largest that fits), or a count."""
    return "auto" if text.strip().lower() == "auto" else count_or_max(text)


MAX_GPUS = 2**20  # 1,048,576: five times the largest clusters built (about 200,000 GPUs in 2025); more is not a plan
MAX_GPU_COUNTS = 64  # counts in one --gpus: each is a whole layout search


def gpu_counts(text: str) -> list[int]:
    """``N``, ``N,N,...`` or ``LO-HIxF`` (LO, LO*F, ... up to HI): GPU counts, each 1 to MAX_GPUS, at most
    MAX_GPU_COUNTS of them; the work is bounded before any is done (issue 66, N13 and N27)."""
    text = text.strip()
    form = f"expected N, N,N,... or LO-HIxF (e.g. 64-1024x2), got {text[:40]!r}"

    def number(part: str) -> int:
        part = part.strip()
        if not part.isdigit():
            value = count(part)  # 1e3; a negative or a fraction: its own message
        else:
            value = int(part) if len(part) <= 30 else MAX_GPUS + 1
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be a positive integer (got {part[:40]})")
        if value > MAX_GPUS:
            raise argparse.ArgumentTypeError(f"{part[:40]} GPUs is more than {MAX_GPUS:,}, the most this tool plans "
                                             "(the largest clusters built hold about 200,000)")
        return value

    if text.count("-") == 1 and not text.startswith("-"):
        low, rest = text.split("-", 1)
        high, _, factor = rest.partition("x")
        low, high = number(low), number(high)
        try:
            factor = int(factor or 2)
        except ValueError:
            raise argparse.ArgumentTypeError(form) from None
        if high < low or factor < 2:
            raise argparse.ArgumentTypeError(f"{form}: LO at most HI, and F at least 2")
        counts = []
        while low <= high:
            counts.append(low)
            low *= factor
    else:
        parts = text.split(",")
        if len(parts) > MAX_GPU_COUNTS:
            raise argparse.ArgumentTypeError(f"at most {MAX_GPU_COUNTS} GPU counts (got {len(parts)})")
        if len(parts) > 1 and not all(part.strip() for part in parts):  # 64,,128 or 64,: a count left out
            raise argparse.ArgumentTypeError(f"{form}: an empty count between commas")
        counts = [number(part) for part in parts]
    if not counts:
        raise argparse.ArgumentTypeError(form)
    if len(counts) > MAX_GPU_COUNTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_GPU_COUNTS} GPU counts (got {len(counts)} from {text!r})")
    return sorted(set(counts))


def spelled_as(field: str):
    """An argparse ``type`` that reads a value as this project spells it (config/choices.py ``spelling``: letter case
    aside, and other tables' names such as FULL_SHARD, BF16, sdpa or RoPE), before argparse checks its choices."""
    def convert(value: str) -> str:
        return spelling(field, value)

    convert.__name__ = field
    return convert


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", help=f"a named shape: {', '.join(PRESETS)}")
    parser.add_argument("--arch", type=spelled_as("arch"), help="encoder, decoder or encoder-decoder")
    parser.add_argument("--layers", type=integer, help="blocks (encoder-only, decoder-only; both stacks of encoder-decoder)")
    parser.add_argument("--enc-layers", type=integer, help="encoder blocks (encoder-decoder)")
    parser.add_argument("--dec-layers", type=integer, help="decoder blocks (encoder-decoder)")
    parser.add_argument("--d-model", type=integer)
    parser.add_argument("--heads", type=integer)
    parser.add_argument("--d-ff", type=integer)
    parser.add_argument("--vocab", type=integer)
    parser.add_argument("--seq-len", type=integer, help="sequence length (the source length of encoder-decoder)")
    parser.add_argument("--tgt-len", type=integer, help="target length (encoder-decoder only; default --seq-len)")
    parser.add_argument("--batch", type=integer, help="sequences per step")
    parser.add_argument("--classes", type=integer, help="a classification head of C classes instead of the LM head")
    parser.add_argument("--hf-config", metavar="PATH|NAME",
                        help=f"a model's own config.json, a folder holding one, or its Hugging Face Hub name "
                             f"(meta-llama/Llama-3.1-8B: its config.json alone is fetched, through the Hub's cache; "
                             f"the hf extra) ({', '.join(HF_MODEL_TYPES)}); the other flags override its fields")
    arch = parser.add_argument_group("architecture options (defaults: the 2017 transformer)")
    for name, meta in OPTIONS.items():
        flag, text = "--" + name.replace("_", "-"), meta["help"].replace("%", "%%")
        if meta["kind"] == "str":
            arch.add_argument(flag, type=spelled_as(name), choices=meta["choices"], help=text)
        elif meta["kind"] == "bool":
            arch.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            arch.add_argument(flag, type=integer if meta["kind"] == "int" else number, help=text)


def model_entry(args: argparse.Namespace, defaults: dict | None = None):
    """The model (a :class:`~trainingcost.config.ModelConfig`) described by --preset or --hf-config and the model
    flags (flags override the preset or the file).

    ``defaults`` fill the fields that neither gives (``train`` has defaults; ``estimate`` has none).
    """
    given = {field: getattr(args, field) for field in MODEL_FIELDS if getattr(args, field) is not None}
    if args.preset and getattr(args, "hf_config", None):
        raise ConfigError("--hf-config: give either --preset or --hf-config, not both")
    hf = getattr(args, "hf_config", None)
    if hf is not None and not isinstance(hf, (str, os.PathLike)):  # the Python API: the config itself
        data = hf.to_dict() if hasattr(hf, "to_dict") else hf  # a transformers PretrainedConfig, or a dict
        if not isinstance(data, dict):
            raise ConfigError(f"hf_config: a path, a dict in the config.json format or a transformers config, not "
                              f"{type(hf).__name__}")
        entry = hf_entry(dict(data), "hf_config")
    elif hf:
        data, file = read_hf_data(hf)
        entry = hf_entry(data, f"--hf-config {file}")
    if hf and "seq_len" not in given:  # the length its training ran, not the context it serves (issue 63)
        length, _ = training_length(data, entry.get("seq_len"), entry.get("positions"), entry)
        if length is not None:
            entry["seq_len"] = length
    if not hf:
        entry = preset_entry(args.preset, "--preset") if args.preset else {}
    drop_short_table(entry, given)
    drop_lm_head(entry, given)
    if any(k in given for k in LAYER_FIELDS):
        for key in LAYER_FIELDS:
            entry.pop(key, None)
    if "seq_len" in given:
        entry.pop("tgt_len", None)
    if "d_ff" in given:
        entry.pop("ff_mult", None)
    if given.get("arch") not in (None, "encoder-decoder"):
        # A preset's encoder-decoder fields do not apply to the arch asked for: keep its depth only.
        entry.pop("tgt_len", None)
        for key in ("enc_layers", "dec_layers"):
            if key in entry:
                entry.setdefault("layers", entry.pop(key))
    entry.update(given)
    for key, value in (defaults or {}).items():
        if key == "layers" and any(k in entry for k in LAYER_FIELDS):
            continue
        if key == "ff_mult" and ("d_ff" in entry or "ff_mult" in entry):
            continue
        entry.setdefault(key, value)
    if not entry:
        raise ConfigError("give --preset NAME or the model flags (--arch, --layers, --d-model, --heads, --d-ff, --vocab, --seq-len)")
    for key in ("arch", "d_model", "heads", "vocab", "seq_len"):
        if key not in entry:
            raise ConfigError(f"--{key.replace('_', '-')}: required without --preset")
    if "d_ff" not in entry and "ff_mult" not in entry:
        raise ConfigError("--d-ff: required without --preset")
    try:
        return canonical_model(check_window(entry, "--hf-config"), "")
    except ConfigError as err:
        fields = re.match(r"([a-z][a-z_]*(?:, [a-z][a-z_]*)*)(?=:)", str(err))
        if hf and fields and not set(fields.group(1).split(", ")) & set(given):  # the file's values, not a flag's
            source = f"--hf-config {file}" if isinstance(hf, (str, os.PathLike)) else "hf_config"
            raise ConfigError(f"{source}: {err} (from the file's keys)") from None
        raise


# Configuration fields the command line names differently.
FLAG_NAMES = {"cost_models": "--cost-model", "rules": "--rule"}


def flag_message(message: str) -> str:
    """A domain error (``heads: 5 does not divide ...``, ``layers, d_model: ...``) in the command line's
    terms (``--heads: ...``, ``--layers, --d-model: ...``)."""
    match = re.match(r"([a-z][a-z_]*(?:, [a-z][a-z_]*)*)(?=:)", message)
    if not match:
        return message
    flags = [FLAG_NAMES.get(field, "--" + field.replace("_", "-")) for field in match.group(1).split(", ")]
    return ", ".join(flags) + message[match.end():]


def rule_list(text: str) -> list[str]:
    """``all``, one rule, or several separated by commas (``bp,dfa,mempepita``), in the catalogue's order."""
    from .analytic import rule_names

    known = list(rule_names())
    if text.strip().lower() == "all":
        return known
    asked = [part.strip().lower() for part in text.split(",")]
    bad = [part for part in asked if part not in known]
    if "all" in asked:
        raise argparse.ArgumentTypeError(f"{text!r}: all stands alone (every rule), not in a list of rules")
    if bad or not asked:
        raise argparse.ArgumentTypeError(f"{bad[0] if bad else text!r} is not a rule (allowed: {', '.join(known)}, all, "
                                         "or several separated by commas)")
    return [rule for rule in known if rule in asked]
