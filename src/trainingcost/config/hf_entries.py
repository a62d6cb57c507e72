"""The parts of reading a ``config.json`` that need nothing of its mapping (:mod:`.hf` re-exports them): where the
file is (a path, a folder or a Hub name), what a file that leaves keys out takes from its config class, how
transformers' own model of a file runs attention where that is not the fused kernel priced, and a model entry with a
sweep entry's or the flags' fields in its place."""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ConfigError, regular_file

HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")  # org/name, as the Hub spells repositories
BARE_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,95}")  # a legacy Hub name without its organisation (gpt2, t5-small)


def cached_legacy_config(name: str, where: str) -> Path:
    """The cached config.json of a legacy Hub name without an organisation (``gpt2``, ``bert-base-uncased``), from
    the local Hugging Face cache only (a bare word is more often a mistyped file than a model: no network is tried);
    one line naming both readings otherwise."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ModuleNotFoundError:
        try_to_load_from_cache = None
    found = try_to_load_from_cache(name, "config.json") if try_to_load_from_cache else None
    if isinstance(found, str) and Path(found).is_file():
        return Path(found)
    raise ConfigError(f"{where}: no such file: {name[:60]}, nor a cached Hugging Face model of that name (a Hub name is "
                      "org/name, e.g. openai-community/gpt2, fetched if not cached; a legacy name without its "
                      "organisation is read from the local cache only)")


def config_path(path: str | Path, where: str) -> Path:
    """A config.json: a file, a folder holding one, or a Hugging Face Hub model name (``meta-llama/Llama-3.1-8B``)
    where no such file or folder exists here: its config.json alone is fetched (:func:`hub_config`)."""
    text = str(path)
    path = Path(path)
    if not path.exists() and HUB_NAME.fullmatch(text):
        return hub_config(text, where)
    if not path.exists() and BARE_NAME.fullmatch(text) and not text.lower().endswith(".json"):
        return cached_legacy_config(text, where)
    if path.is_dir():
        path = path / "config.json"
    return regular_file(path, where, "a config.json")


def hub_config(repo_id: str, where: str = "--hf-config") -> Path:
    """The config.json of Hub model ``repo_id``, and nothing else of it (no weights), through huggingface_hub and its
    cache (HF_HUB_CACHE or HF_HOME; HF_HUB_OFFLINE=1 reads the cache only; HF_TOKEN for a gated model)."""
    try:
        from huggingface_hub import hf_hub_download
    except ModuleNotFoundError:  # the light install (src/trainingcost/extras.py)
        raise ConfigError(f"{where}: huggingface_hub is not installed; a Hugging Face Hub name needs the hf extra: pip "
                          "install '.[hf]' in the trainingcost folder") from None

    import logging

    quiet = logging.getLogger("huggingface_hub")  # its retries log a line each: the failure gets one line, below
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return Path(hf_hub_download(repo_id, "config.json"))
    except Exception as exc:  # noqa: BLE001 - offline, not cached, gated, missing: one line whatever the kind
        kind = type(exc).__name__
        why = {"LocalEntryNotFoundError": "not cached; the Hub is out of reach or HF_HUB_OFFLINE is set",
               "RepositoryNotFoundError": "no such model on the Hub (or a private one: set HF_TOKEN)",
               "GatedRepoError": "a gated model: accept its licence on the Hub and set HF_TOKEN",
               "EntryNotFoundError": "the model has no config.json",
               "OfflineModeIsEnabled": "not cached, and HF_HUB_OFFLINE is set"}.get(kind, kind)
        raise ConfigError(f"{where}: {repo_id[:60]}: no such file here, and the Hub did not give its config.json "
                          f"({why})") from None
    finally:
        quiet.setLevel(level)



# Gemma3TextConfig's defaults for the shapes (configuration_gemma3.py: vocab_size 262208, hidden_size 2304,
# intermediate_size 9216, num_hidden_layers 26, num_attention_heads 8, num_key_value_heads 4, head_dim 256,
# max_position_embeddings 131072). transformers writes a composite model's text_config as its difference from these,
# so the text_config of google/gemma-3-4b-it and -12b-it states no heads, head_dim or vocabulary: a file without a key
# takes the class's value, as transformers itself reads it.
GEMMA3_TEXT_SHAPES = dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                          num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072)
# What a file that leaves out num_key_value_heads or head_dim gets, where the family's config class gives a number
# rather than "every head its own" or hidden_size / heads (transformers 5.25's configuration_*.py signatures:
# MistralConfig num_key_value_heads=8, Qwen2Config 32, Qwen3Config 32 and head_dim 128, ...): the same model as the
# file with the key written out. Every released checkpoint's config.json writes both; a hand-written one may not.
CLASS_KV_HEADS = {"mistral": 8, "qwen2": 32, "qwen3": 32, "qwen2_moe": 16, "qwen3_moe": 4, "mixtral": 8, "gemma": 16,
                  "gemma2": 4, "starcoder2": 2, "stablelm": 32, "smollm3": 4, "glm4": 2}
CLASS_HEAD_DIM = {"qwen3": 128, "gemma": 256, "gemma2": 256, "glm4": 128}

# transformers 5.25.0 moved modeling_falcon.py onto its attention interface (SDPA with the key/value heads repeated,
# no mask: the fused kernel); every earlier version hands SDPA one key/value head and a mask (the math path).
FALCON_FUSED_FROM = (5, 25)


def transformers_attention(data: dict, version: tuple[int, int] | None = None) -> str | None:
    """How transformers' own model of this ``config.json`` runs attention, where that is not the fused kernel that
    trainingcost's executed model prices (torch's scaled_dot_product_attention, whose backward recomputes the scores:
    10 M N a FLOPs per layer and batch element); None where it is the same. The two families that differ
    (tests/test_hf_families.py checks every family's FLOPs against transformers' model, these two to the difference
    stated here):

    - Falcon's original decoder with multi_query (falcon-7b): modeling_falcon.py hands SDPA one key/value head beside
      the query heads, with a mask, which the fused kernels do not take: torch runs its math path, whose backward is
      four batched products (8 M N a);
    - Gemma 2 without soft-capping: modeling_gemma2.py has no SDPA path (eager attention only): the written-out
      scores and softmax, four batched products backward (8 M N a). Soft-capped, trainingcost writes it out too.
    """
    model_type = data.get("model_type")
    if model_type == "falcon" and not data.get("new_decoder_architecture", False) and data.get("multi_query", True) \
            and (data.get("num_attention_heads") or 0) > 1:
        if version is not None and version >= FALCON_FUSED_FROM:
            return None
        return ("torch's math path in versions before 5.25 (falcon's multi-query attention hands SDPA one key/value "
                "head and a mask)")
    if model_type == "gemma2" and not data.get("attn_logit_softcapping", 50.0):
        return "its eager attention (transformers' Gemma 2 has no SDPA path)"
    return None


def check_window(entry: dict, where: str) -> dict:
    """The entry of a config.json as a model entry (kept for callers: windows are an option now, ``sliding_window``;
    nothing is refused here)."""
    return dict(entry)


def with_overrides(entry: dict, overrides: dict) -> dict:
    """A config.json's entry with a sweep entry's (or the flags') fields in place of its own."""
    out = dict(entry)
    if any(k in overrides for k in ("layers", "enc_layers", "dec_layers")):
        for key in ("layers", "enc_layers", "dec_layers"):
            out.pop(key, None)
    if "ff_mult" in overrides:
        out.pop("d_ff", None)
    drop_short_table(out, overrides)
    drop_lm_head(out, overrides)
    out.update(overrides)
    return out


def drop_short_table(entry: dict, overrides: dict) -> None:
    """A sequence longer than the entry's learned position table (``max_positions``) gets a table of its own length."""
    seq_len = overrides.get("seq_len")
    if seq_len and entry.get("max_positions", 0) and seq_len > entry["max_positions"] and "max_positions" not in overrides:
        entry.pop("max_positions")


def drop_lm_head(entry: dict, overrides: dict) -> None:
    """A classification head asked for (``classes``) replaces the entry's LM head: the preset's or the file's
    ``tie_embeddings`` (its LM head sharing the embedding's table) no longer applies, unless given as well."""
    if overrides.get("classes") and "tie_embeddings" not in overrides:
        entry.pop("tie_embeddings", None)
