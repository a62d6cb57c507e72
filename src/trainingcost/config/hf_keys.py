"""Typed reading of a ``config.json``'s keys and the mapping pieces the families share (config/hf.py's families and
config/hf_recent.py's): a Llama-like decoder's widths, rotary positions on part of a head, sliding windows."""

from __future__ import annotations

from .errors import ConfigError


class _Keys:
    """Typed access to a config.json's keys, each mistake one line naming the key."""

    def __init__(self, data: dict, where: str, model_type: str):
        self.data, self.where, self.model_type = data, where, model_type

    def _fail(self, key: str, what: str):
        raise ConfigError(f"{self.where}: {key}: {what} (model_type {self.model_type})")

    def int(self, key: str, default=None, *, minimum: int = 1):
        value = self.data.get(key, default)
        if value is None:
            if default is None and key not in self.data:
                self._fail(key, "missing")
            if default is None:  # written null where the family has no default for it
                self._fail(key, "null; give an integer")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self._fail(key, f"{value!r} is not an integer")
        if value < minimum:
            self._fail(key, f"{value} is less than {minimum}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self._fail(key, f"{value!r} is not a boolean")
        return value

    def str(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            self._fail(key, f"{value!r} is not a string")
        return value

    def activation(self, key: str, default: str, allowed: dict) -> str:
        value = self.str(key, default)
        if value not in allowed:
            self._fail(key, f"{value!r} is not supported (supported: {', '.join(allowed)})")
        return allowed[value]


def _qwen2_window(entry: dict, k: _Keys) -> None:
    """Qwen2's window (configuration_qwen2.py): with use_sliding_window, on the layers from max_window_layers on, or
    as ``layer_types`` lists them; a window on every layer or on none, not on some."""
    layers = entry["layers"]
    types = k.data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(t in ("full_attention", "sliding_attention") for t in types):
            k._fail("layer_types", f"{types!r} is not a list of full_attention and sliding_attention")
        windowed = types.count("sliding_attention")
        key = "layer_types"
    elif k.bool("use_sliding_window", False):
        windowed = max(0, layers - k.int("max_window_layers", 28, minimum=0))
        key = "max_window_layers"
    else:
        return
    window = k.int("sliding_window", 4096, minimum=0) if k.data.get("use_sliding_window", True) else 0
    if windowed and window:
        if windowed != layers:
            k._fail(key, f"a sliding window on {windowed} of {layers} layers is not supported (supported: on every "
                    "layer or on none)")
        entry["sliding_window"] = window


def _rotary_fraction(k: _Keys, keys: tuple[str, ...], default: float) -> float:
    """The share of a head that rotary positions turn: the first of ``keys`` at the top level (older files) or in
    ``rope_parameters`` / ``rope_scaling`` (transformers 5 writes partial_rotary_factor there)."""
    for container in (k.data, k.data.get("rope_parameters"), k.data.get("rope_scaling")):
        if not isinstance(container, dict):
            continue
        for key in keys:
            if container.get(key) is not None:
                value = container[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                    k._fail(key, f"{value!r} is not a fraction in (0, 1]")
                return float(value)
    return default


def _partial_rotary(entry: dict, k: _Keys, turned: int, key: str) -> dict:
    """``entry`` with rotary_dim where rotary turns ``turned`` features of a head (HF: int(head_dim x fraction))."""
    head_dim = entry.get("head_dim", entry["d_model"] // entry["heads"])
    if turned % 2 or not 0 < turned <= head_dim:
        k._fail(key, f"turns {turned} features of a {head_dim}-wide head (supported: an even number up to the head)")
    if turned < head_dim:
        entry["rotary_dim"] = turned
    return entry


def _decoder(k: _Keys, **options) -> dict:
    """The keys a Llama-like config.json shares: widths, depth, heads (grouped-query), vocabulary, context, head_dim."""
    d, heads = k.int("hidden_size"), k.int("num_attention_heads")
    entry = dict(arch="decoder", layers=k.int("num_hidden_layers"), d_model=d, heads=heads,
                 kv_heads=k.int("num_key_value_heads", heads) or heads, d_ff=k.int("intermediate_size"),
                 vocab=k.int("vocab_size"), seq_len=k.int("max_position_embeddings"), norm_position="pre",
                 positions="rotary", head_bias=False, **options)
    head_dim = k.int("head_dim", 0, minimum=0) or 0
    if head_dim and head_dim * heads != d:
        entry["head_dim"] = head_dim
    return entry


def _silu(k: _Keys) -> str:
    act = k.str("hidden_act", "silu")
    if act != "silu":
        k._fail("hidden_act", f"{act!r} is not supported (supported: silu)")
    return "swiglu"


def _full_rotary(entry: dict, k: _Keys) -> dict:
    fraction = _rotary_fraction(k, ("partial_rotary_factor",), 1.0)
    head_dim = entry.get("head_dim", entry["d_model"] // entry["heads"])
    return _partial_rotary(entry, k, int(head_dim * fraction), "partial_rotary_factor")


def _window(entry: dict, k: _Keys, default: int | None) -> None:
    """A sliding window from the ``sliding_window`` key (``default`` where absent, as transformers loads the file;
    null: none). A window that covers the sequence masks nothing: ``canonical_model`` drops it, once flags or a sweep
    entry have set the length."""
    window = k.int("sliding_window", default or 0, minimum=0) or 0
    if window:
        entry["sliding_window"] = window


def _layer_windows(entry: dict, k: _Keys, window_default: int | None, types: list | None) -> None:
    """A window from ``layer_types`` (``types``: the list the family's config class builds where the file has none):
    on every layer, on none, or on all but every n-th (full_attention on layers n - 1, 2n - 1 ...: window_period n,
    Gemma 2's and 3's pattern); other patterns one line. ``sliding_window`` null or 0: no window."""
    layers = entry["layers"]
    given = k.data.get("layer_types")
    types = given if given is not None else types
    if not isinstance(types, list) or len(types) != layers or not all(
            t in ("full_attention", "sliding_attention") for t in types):  # (a list or dict in it: no hash needed)
        k._fail("layer_types", f"{str(types)[:80]} is not a list of {layers} full_attention and sliding_attention")
    window = k.int("sliding_window", window_default or 0, minimum=0) or 0
    full = [i for i, kind in enumerate(types) if kind == "full_attention"]
    if not window or len(full) == layers:
        return
    entry["sliding_window"] = window
    if full:
        period = full[0] + 1
        if full != [i for i in range(layers) if (i + 1) % period == 0]:
            k._fail("layer_types", "global layers other than every n-th are not supported (supported: full_attention "
                    "on layers n - 1, 2n - 1 ..., sliding_attention elsewhere; or one kind on every layer)")
        entry["window_period"] = period
