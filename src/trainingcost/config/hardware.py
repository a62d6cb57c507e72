"""The hardware catalogue: named devices with their dense peaks, memory, bandwidth and power, each cited.

``hardware.yaml`` (package data) holds one entry per device. Each has its dense peak throughput per dtype
(fp32, tf32, bf16, fp16, fp8; null where the device has no such mode; never the structured-sparsity figures),
memory capacity, memory bandwidth and power (TDP or maximum board power), and names the vendor document each
quantity comes from. :func:`devices` reads it once; :func:`with_user_devices` adds devices a user declares
(same fields, a ``source`` string instead of ``cite``), each field checked with a one-line error.

Readers: the measured runs' MFU (:mod:`trainingcost.measure.recorder`, matching torch's device name), the
``trainingcost hardware`` command, and the whole-run planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path


from .errors import ConfigError, not_in
from .shipped import load_shipped

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
QUANTITIES = ("peak_tflops", "memory_gb", "bandwidth_gbs", "power_w")
CATALOGUE = Path(__file__).with_name("hardware.yaml")


@dataclass(frozen=True)
class Device:
    name: str
    label: str
    peak_flops: dict  # dtype -> dense peak FLOP/s, or None
    memory_bytes: int
    bandwidth_bytes_per_s: float
    power_w: float
    sources: dict = field(default_factory=dict)  # quantity -> the document it comes from
    match: tuple = ()  # substrings of torch.cuda.get_device_name that name this device
    aliases: tuple = ()  # other names a user or a published table gives it (h100-80gb, a100-sxm4-40gb)
    steptime: dict = field(default_factory=dict)  # the step-time model's numbers (analytic/steptime), each cited
    steptime_sources: dict = field(default_factory=dict)  # steptime key -> its source

    def peak(self, dtype: str) -> float | None:
        return self.peak_flops.get(dtype)

    def attention_kernel(self, wanted: str) -> str:
        """The attention kernel a framework that wants ``wanted`` runs here: FlashAttention and cuDNN's fused attention
        (both Ampere and later) fall back to the unfused kernel on a device they do not support
        (``steptime.flash_attention: false``, e.g. the V100); FlashAttention-3 (``flash3``, Hopper only: the
        flash-attention README) runs FlashAttention-2 on a device without ``steptime.flash3_attention: true``."""
        fused = wanted in ("flash", "flash3", "cudnn")
        if fused and self.steptime.get("flash_attention", True) is False:
            return "unfused"
        if wanted == "flash3" and self.steptime.get("flash3_attention", False) is not True:
            return "flash"
        return wanted


def _number(value, where: str, allow_null: bool = False) -> float | None:
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: {value!r} is not a positive number")
    return float(value)


def parse_device(name: str, entry, sources: dict, where: str) -> Device:
    """One catalogue or user entry; a mistake is a ConfigError naming the field."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a mapping with {', '.join(QUANTITIES)}")
    allowed = {"label", "match", "aliases", "cite", "source", "steptime", *QUANTITIES}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    for key in QUANTITIES:
        if key not in entry:
            raise ConfigError(f"{where}.{key}: missing (every device needs {', '.join(QUANTITIES)})")
    peaks = entry["peak_tflops"]
    if not isinstance(peaks, dict):
        raise ConfigError(f"{where}.peak_tflops: must map dtypes ({', '.join(DTYPES)}) to TFLOP/s")
    bad = sorted(set(peaks) - set(DTYPES))
    if bad:
        raise ConfigError(f"{where}.peak_tflops: {bad[0]!r} is not a dtype (allowed: {', '.join(DTYPES)})")
    flops = {d: (None if (v := _number(peaks.get(d), f"{where}.peak_tflops.{d}", True)) is None else v * 1e12)
             for d in DTYPES}
    if "source" in entry:
        if not isinstance(entry["source"], str) or not entry["source"].strip():
            raise ConfigError(f"{where}.source: must say where the numbers come from")
        cited = dict.fromkeys(QUANTITIES, entry["source"])
    else:
        cite = entry.get("cite")
        if not isinstance(cite, dict) or any(cite.get(q) not in sources for q in QUANTITIES):
            raise ConfigError(f"{where}: every quantity needs a source ({where}.source, or cite: with a known source key)")
        cited = {q: sources[cite[q]] for q in QUANTITIES}
    match = entry.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) and m for m in match):
        raise ConfigError(f"{where}.match: must be a list of device-name substrings")
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise ConfigError(f"{where}.aliases: must be a list of names")
    steptime, steptime_sources = parse_steptime(entry.get("steptime"), sources, entry.get("source"), f"{where}.steptime")
    return Device(name=name, label=str(entry.get("label", name)), peak_flops=flops,
                  steptime=steptime, steptime_sources=steptime_sources,
                  memory_bytes=int(_number(entry["memory_gb"], f"{where}.memory_gb") * 1e9),
                  bandwidth_bytes_per_s=_number(entry["bandwidth_gbs"], f"{where}.bandwidth_gbs") * 1e9,
                  power_w=_number(entry["power_w"], f"{where}.power_w"), sources=cited, match=tuple(match),
                  aliases=tuple(aliases))


STEPTIME_KEYS = ("sms", "tile", "gemm_ceiling", "hbm_efficiency", "flash_forward", "flash_backward", "launch_us",
                 "gpus_per_node", "intra_gbs", "intra_latency_us", "nic_gbps", "nic_efficiency", "inter_latency_us", "kernel_efficiency",
                 "intra_allreduce_gbs", "inter_step_us", "tree_level_us", "flash_attention", "cudnn_forward",
                 "cudnn_backward", "cudnn_causal_forward", "cudnn_causal_backward", "flash_causal_forward",
                 "flash_causal_backward", "flash3_forward", "flash3_backward", "flash3_causal_forward",
                 "flash3_causal_backward", "flash3_attention", "gemm_ceiling_fp8", "intra_link_gbs",
                 "power_curve", "host_link_gbs", "host_memory_gbs")


ATTENTION_SHARE_KEYS = ("flash_forward", "flash_backward", "flash_causal_forward", "flash_causal_backward",
                        "flash3_forward", "flash3_backward", "flash3_causal_forward", "flash3_causal_backward",
                        "cudnn_forward", "cudnn_backward", "cudnn_causal_forward", "cudnn_causal_backward")


def parse_steptime(entry, sources: dict, source: str | None, where: str) -> tuple[dict, dict]:
    """A device's step-time numbers (all optional; the model falls back to stated defaults), each with a source:
    ``cite: {key: source key}`` in the catalogue, or the entry's own ``source`` for a user device."""
    if entry is None:
        return {}, {}
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a mapping of {', '.join(STEPTIME_KEYS)}")
    values = {k: v for k, v in entry.items() if k != "cite"}
    bad = sorted(set(values) - set(STEPTIME_KEYS))
    if bad:
        raise ConfigError(f"{where}: unknown key {bad[0]!r} (allowed: {', '.join(STEPTIME_KEYS)})")
    for key, value in values.items():
        if key == "tile":
            if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) and v > 0 for v in value)):
                raise ConfigError(f"{where}.tile: three positive integers [rows, columns, depth] (got {value!r})")
        elif key in ("flash_attention", "flash3_attention"):
            if not isinstance(value, bool):
                kernel = "FlashAttention" if key == "flash_attention" else "FlashAttention-3"
                raise ConfigError(f"{where}.{key}: true or false (whether {kernel} runs on it; got {value!r})")
        elif key in ATTENTION_SHARE_KEYS and isinstance(value, list):
            tokens = [r[0] if isinstance(r, list) and len(r) == 2 else None for r in value]
            if not (value and all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in tokens)
                    and tokens == sorted(set(tokens)) and all(
                        isinstance(r[1], (int, float)) and not isinstance(r[1], bool) and 0 < r[1] <= 1 for r in value)):
                raise ConfigError(f"{where}.{key}: a share of the peak, or a list of [sequence length, share] pairs "
                                  f"with the lengths ascending and each share in (0, 1] (got {value!r})")
        elif key == "power_curve":
            watts = [r[0] if isinstance(r, list) and len(r) == 2 else None for r in value] if isinstance(value, list) else []
            if not (watts and all(isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in watts)
                    and watts == sorted(set(watts)) and all(
                        isinstance(r[1], (int, float)) and not isinstance(r[1], bool) and 0 < r[1] <= 1 for r in value)
                    and value[-1][1] == 1):
                raise ConfigError(f"{where}.power_curve: a list of [power limit in W, share of the full-power compute "
                                  f"speed] pairs, the watts ascending, each share in (0, 1], the last 1 (got {value!r})")
        elif key == "hbm_efficiency":
            if not (isinstance(value, list) and value and all(isinstance(r, list) and len(r) == 2 and all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) for x in r) for r in value)):
                raise ConfigError(f"{where}.hbm_efficiency: a list of [bytes at least, efficiency] pairs (got {value!r})")
        else:
            _number(value, f"{where}.{key}")
            if key in ("gemm_ceiling", "gemm_ceiling_fp8", "nic_efficiency", "kernel_efficiency") and not 0 < value <= 1:
                raise ConfigError(f"{where}.{key}: a share of the peak, in (0, 1] (got {value!r})")

    cite = entry.get("cite", {})
    cited = {}
    for key in values:
        if source is not None:
            cited[key] = source
        elif isinstance(cite, dict) and cite.get(key) in sources:
            cited[key] = sources[cite[key]]
        else:
            raise ConfigError(f"{where}.{key}: needs a source (cite: with a known source key)")
    return values, cited


@lru_cache(maxsize=1)
def _catalogue() -> tuple[Device, ...]:
    data = load_shipped(CATALOGUE.read_text())
    return tuple(parse_device(name, entry, data["sources"], f"hardware.{name}") for name, entry in data["devices"].items())


def devices() -> dict[str, Device]:
    """The packaged catalogue, by name, in file order."""
    return {d.name: d for d in _catalogue()}


def with_user_devices(entries: dict | None) -> dict[str, Device]:
    """The catalogue plus a config's own devices (``{name: {label?, peak_tflops, memory_gb, bandwidth_gbs,
    power_w, source}}``); a user device may not reuse a catalogue name."""
    table = devices()
    if entries is None:
        return table
    if not isinstance(entries, dict):
        raise ConfigError("hardware: must map device names to their specifications")
    for name, entry in entries.items():
        if name in table:
            raise ConfigError(f"hardware.{name}: already in the catalogue (choose another name)")
        table[name] = parse_device(name, entry, {}, f"hardware.{name}")
    return table


MAX_USER_DEVICES = 1000  # a file of one's own devices holds a few; this bounds the work of checking them


def user_devices(given, where: str = "--hardware") -> dict[str, Device]:
    """The catalogue plus one's own devices (issue 63): ``given`` a YAML or JSON file, or a mapping, of ``{name:
    {label?, peak_tflops: {fp32, tf32, bf16, fp16, fp8}, memory_gb, bandwidth_gbs, power_w, source, steptime?}}``, the
    workflow's ``hardware:`` section; each entry checked as the catalogue's own (one line naming the field)."""
    if isinstance(given, dict):
        entries = given
    else:
        import yaml

        from .errors import MAX_JSON_BYTES, regular_file
        from .sweep import _Loader, check_size

        path = regular_file(given, where, "a YAML or JSON file of devices")
        try:
            if path.stat().st_size > MAX_JSON_BYTES:
                raise ConfigError(f"{where}: {path} is larger than {MAX_JSON_BYTES:,} bytes; not a file of devices")
            entries = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # JSON is YAML too
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{where}: {path}: not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            raise ConfigError(f"{where}: {path}: cannot be read ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise ConfigError(f"{where}: {path}: invalid YAML{f' at line {mark.line + 1}' if mark else ''}") from None
        except ConfigError as exc:  # a key given twice
            text = str(exc)
            raise ConfigError(text if text.startswith(where) else f"{where}: {path}: {text}") from None
        check_size(entries, where)
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{where}: must map device names to their specifications")
    if len(entries) > MAX_USER_DEVICES:
        raise ConfigError(f"{where}: {len(entries)} devices, more than the {MAX_USER_DEVICES} read")
    try:
        return with_user_devices({str(name): entry for name, entry in entries.items()})
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _spelled(name: str) -> str:
    return "-".join(name.lower().replace("_", " ").replace("-", " ").split())


VENDOR_WORDS = ("nvidia", "amd", "instinct", "tesla", "geforce")  # "NVIDIA H100 80GB HBM3", "AMD Instinct MI300X"


def device(name: str, table: dict[str, Device] | None = None) -> Device:
    """A device by its catalogue name or one of its ``aliases``, letter case, spaces and underscores aside
    (A100_80GB, "H100 SXM", h100_80gb, A100-SXM4-40GB), and the vendor's name aside where the name alone finds
    nothing ("NVIDIA H100 80GB HBM3", nvidia-smi's name, an alias of the H100 SXM; "AMD Instinct MI300X"); an
    ambiguous name (H100: SXM or PCIe?) is refused, naming the entries it could be."""
    table = table if table is not None else devices()
    if name in table:
        return table[name]
    words = _spelled(str(name)).split("-")
    tried = ["-".join(words)]
    while len(words) > 1 and words[0] in VENDOR_WORDS:
        words = words[1:]
        tried.append("-".join(words))
    for spelled in tried:
        for d in table.values():
            if spelled in (_spelled(d.name), *map(_spelled, d.aliases)):
                return d
    could = [n for n in table if _spelled(n).startswith(tried[-1] + "-")]
    if len(could) > 1:
        raise ConfigError(f"gpu: {name!r} names more than one catalogue entry ({', '.join(could)}): give one")
    raise not_in("gpu", name, "in the hardware catalogue", table, "`trainingcost hardware`")


def match_device(torch_name: str, multiprocessors: int | None = None) -> Device | None:
    """The catalogue device that torch's device name names, or None: the longest ``match`` string found in the name
    (so "NVIDIA GB200" is the gb200, not the b200 whose "B200" it also holds); ties in file order. Where the name
    fits several devices, ``multiprocessors`` (torch's multi_processor_count) picks the one with that many SMs or
    CUs: ROCm names the MI250X and the MI250 alike ("AMD Instinct MI250X / MI250"), 110 and 104 CUs per GCD."""
    found = [(len(m), -i, d) for i, d in enumerate(_catalogue()) for m in d.match if m in torch_name]
    if multiprocessors is not None:
        counted = [f for f in found if f[2].steptime.get("sms") == multiprocessors]
        found = counted or found
    return max(found, key=lambda x: (x[0], x[1]))[2] if found else None
