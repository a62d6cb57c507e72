"""The device model: seconds of one kernel from its shape (docs/planning.md, "Step time at scale").

- **Matrix products** (m x k) @ (k x n): the tensor-core peak x the measured large-GEMM ceiling (MAMF) x tile
  quantization (m, n rounded up to the threadblock tile) x wave quantization (tiles rounded up to whole waves over
  the SMs) x a k term k / (k + depth) (one k-slab of prologue and epilogue per tile, not hidden by the main loop).
- **Memory-bound kernels**: bytes / (HBM bandwidth x efficiency(bytes)), Calculon's size-dependent efficiency.
- **Fused attention**: FLOPs / (peak x the published FlashAttention forward or backward share), at the sequence
  length where the catalogue gives the share per sequence length (``share_at``).
- **Launch**: no kernel takes less than the launch overhead.
- **Power limit**: a part run below its full power (its ``power_w`` under the catalogue's ``power_curve``, e.g.
  torchtitan's H100s at 500 W, or ``plan --power-limit``) runs its compute-bound kernels (products, fused attention)
  at the curve's share of its full-power speed (:func:`power_speed`); memory-bound kernels and launches keep theirs.
Every number comes from the catalogue (``steptime:`` of a device in config/hardware.yaml) with its source; a device
without them gets the stated generic defaults below, named in ``sources``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

GENERIC = {  # for devices without steptime numbers: an A100-like part (stated in the plan's source column)
    "sms": 108, "tile": [128, 128, 64], "gemm_ceiling": 0.80, "hbm_efficiency": [[1e8, 0.90], [1e7, 0.75], [1e6, 0.60],
                                                                                  [0, 0.30]],
    "flash_forward": 0.50, "flash_backward": 0.40, "launch_us": 3.0, "gpus_per_node": 8, "intra_gbs": 150.0,
    "intra_latency_us": 80.0, "nic_gbps": 200.0, "nic_efficiency": 0.9, "inter_latency_us": 40.0,
    "inter_step_us": 2.0, "tree_level_us": 160.0, "kernel_efficiency": 0.80,
}
KERNEL_EFFICIENCY_SOURCE = ("fitted: the one constant fitted to benchmarks/published_runs.csv (the share of their isolated "
                            "speed that kernels keep inside a training step: sustained clocks under the power limit, "
                            "stalls between kernels); leave-one-source-out error in benchmarks/plan_accuracy.md")
GENERIC_SOURCE = ("generic default (the device has no steptime numbers in the catalogue): an A100-like part, "
                  "see config/hardware.yaml")


SHARE_REFERENCE_TOKENS = 4096  # where a curve is read when no sequence length is given (the middle of 2k-8k)


def share_at(value, tokens: int | None = None) -> float:
    """An attention kernel's share of the peak: a number, or the published curve ``[[tokens, share], ...]`` read at
    ``tokens`` (linear in log2 of the sequence length between its points, its end values beyond them; at
    SHARE_REFERENCE_TOKENS where none is given)."""
    if not isinstance(value, (list, tuple)):
        return float(value)
    x = math.log2(tokens if tokens else SHARE_REFERENCE_TOKENS)
    points = [(math.log2(t), float(v)) for t, v in value]
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def power_speed(curve, watts: float) -> float:
    """The share of its full-power compute speed a part keeps under a power limit of ``watts``: the catalogue's
    ``power_curve`` ``[[watts, share], ...]`` read linearly between its points (1 at and above its last)."""
    points = [(float(w), float(v)) for w, v in curve]
    if watts >= points[-1][0]:
        return 1.0
    if watts <= points[0][0]:
        return points[0][1]
    for (w0, v0), (w1, v1) in zip(points, points[1:]):
        if watts <= w1:
            return v0 + (v1 - v0) * (watts - w0) / (w1 - w0)
    return 1.0


def below_full_power(device) -> float:
    """The share of its full-power compute speed ``device`` keeps at its catalogued (or ``--power-limit``) power:
    1 without a published power curve or at the curve's top."""
    curve = device.steptime.get("power_curve")
    return power_speed(curve, device.power_w) if curve else 1.0


def power_label(device) -> str:
    """How the plan names the device's power: "power limit" below its curve's full power, else "TDP"."""
    return "power limit" if below_full_power(device) < 1 else "TDP"


def power_limited(device, watts, flag: str = "--power-limit"):
    """``device`` (a catalogue Device) run at a power limit of ``watts`` (``plan --power-limit``,
    ``plan.power_limit``): its compute along the catalogue's published ``power_curve`` (:func:`power_speed`), its
    energy at the limit. Refused in one line for a device without a curve, or a limit outside the curve's watts."""
    import dataclasses

    from ...config.errors import ConfigError
    from ...config.hardware import devices

    curve = device.steptime.get("power_curve")
    if curve is None:
        known = [d.name for d in devices().values() if "power_curve" in d.steptime]
        raise ConfigError(f"{flag}: no published power curve for gpu {device.name} (allowed for: {', '.join(known)})")
    low, high = curve[0][0], curve[-1][0]
    if isinstance(watts, bool) or not isinstance(watts, (int, float)) or not low <= watts <= high:
        raise ConfigError(f"{flag}: {watts!r} W is outside {device.name}'s published power curve ({low:g}-{high:g} W)")
    speed = power_speed(curve, watts)
    return dataclasses.replace(device, power_w=float(watts), sources={
        **device.sources, "power_w": f"power limit {watts:g} W ({flag}): compute at {speed:.3g} of full power, "
                                     f"{device.steptime_sources['power_curve']}"})


@dataclass(frozen=True)
class DeviceModel:
    name: str
    peak: float  # dense FLOP/s at the compute dtype
    bandwidth: float  # HBM bytes/s (datasheet)
    params: dict
    sources: dict = field(default_factory=dict)
    # the device model the blocks' linear products run on where their dtype is not the compute dtype's (fp8-mixed:
    # the fp8 peak and fp8 GEMM ceiling); None: this one
    linear: "DeviceModel | None" = None

    @classmethod
    def of(cls, device, dtype: str, linear: str | None = None) -> "DeviceModel":
        params = dict(GENERIC)
        params.update(device.steptime)
        sources = {k: device.steptime_sources.get(k, GENERIC_SOURCE) for k in GENERIC}
        sources.update({k: device.steptime_sources[k] for k in (*CUDNN_KEYS, *FLASH_CAUSAL_KEYS, *FLASH3_KEYS)
                        if k in params})
        if "kernel_efficiency" not in device.steptime:
            sources["kernel_efficiency"] = KERNEL_EFFICIENCY_SOURCE
        if "power_curve" in params and power_speed(params["power_curve"], device.power_w) < 1:
            params["power_limit_speed"] = power_speed(params["power_curve"], device.power_w)
            sources["power_limit_speed"] = (f"{params['power_limit_speed']:.3g} of full power at {device.power_w:g} W: "
                                            f"{device.steptime_sources['power_curve']}")
        lin = None
        if linear is not None and linear != dtype:
            key = f"gemm_ceiling_{linear}"
            lin_params = {**params, "gemm_ceiling": params.get(key, params["gemm_ceiling"])}
            sources[key] = device.steptime_sources.get(key) or (
                f"no published {linear} GEMM ceiling for {device.name}: its {dtype} one "
                f"({sources['gemm_ceiling']})")
            lin = cls(device.name, float(device.peak(linear)), float(device.bandwidth_bytes_per_s), lin_params, sources)
        return cls(device.name, float(device.peak(dtype)), float(device.bandwidth_bytes_per_s), params, sources, lin)

    @property
    def products(self) -> "DeviceModel":
        """The device model of the blocks' linear products (fp8 under fp8-mixed; else this one)."""
        return self.linear or self

    @property
    def compute_speed(self) -> float:
        """The share of its full-TDP speed at which the part runs compute-bound kernels at its power limit (1.0: none
        below its TDP)."""
        return float(self.params.get("power_limit_speed", 1.0))

    @property
    def launch(self) -> float:
        return self.params["launch_us"] * 1e-6

    def gemm_efficiency(self, m: int, n: int, k: int, batch: int = 1) -> float:
        """Achievable share of the peak for a (batched) product (m x k) @ (k x n)."""
        if min(m, n, k, batch) <= 0:
            return 1.0
        tm, tn, tk = self.params["tile"]
        rows, cols = math.ceil(m / tm), math.ceil(n / tn)
        tile_eff = (m * n) / (rows * tm * cols * tn)
        tiles = rows * cols * batch
        sms = self.params["sms"]
        wave_eff = tiles / (math.ceil(tiles / sms) * sms)
        k_eff = k / (k + tk)
        return self.params["gemm_ceiling"] * tile_eff * wave_eff * k_eff

    def gemm(self, m: int, n: int, k: int, batch: int = 1) -> float:
        """Seconds of one (batched) product (the launch floor is applied by the step)."""
        flops = 2.0 * m * n * k * batch
        return flops / (self.peak * self.gemm_efficiency(m, n, k, batch) * self.params["kernel_efficiency"] *
                        self.compute_speed) if flops else 0.0

    def hbm_efficiency(self, nbytes: float) -> float:
        for at_least, eff in sorted(self.params["hbm_efficiency"], key=lambda r: -r[0]):
            if nbytes >= at_least:
                return eff
        return self.params["hbm_efficiency"][-1][1]

    def memory(self, nbytes: float) -> float:
        """Seconds of one memory-bound kernel moving ``nbytes``."""
        if nbytes <= 0:
            return 0.0
        return nbytes / (self.bandwidth * self.hbm_efficiency(nbytes) * self.params["kernel_efficiency"])

    def flash(self, flops: float, backward: bool, kernel: str = "flash", causal: bool = False,
              tokens: int | None = None) -> float:
        """Seconds of a fused attention's ``flops``: FlashAttention's published share of the peak, or cuDNN's fused
        attention's (``kernel`` cudnn) or FlashAttention-3's (``flash3``) where the catalogue has it for the device
        (Hopper), else FlashAttention-2's; with a causal mask (``flops`` the unmasked half), the kernel's causal share
        where the catalogue has one; each read at ``tokens``, the sequence length, where the catalogue gives a curve."""
        key = "backward" if backward else "forward"
        share = None
        if kernel in ("cudnn", "flash3"):
            share = self.params.get(f"{kernel}_causal_{key}") if causal else None
            share = share if share is not None else self.params.get(f"{kernel}_{key}")
        if share is None and causal:
            share = self.params.get(f"flash_causal_{key}")
        share = share_at(share if share is not None else self.params[f"flash_{key}"], tokens)
        return flops / (self.peak * share * self.params["kernel_efficiency"] * self.compute_speed) if flops else 0.0


# The numbers that set a device's speed in the model: where the catalogue gives none, the plan says so
DEVICE_KEYS = ("sms", "tile", "gemm_ceiling", "hbm_efficiency", "flash_forward", "flash_backward", "gpus_per_node",
               "intra_gbs", "nic_gbps")


def generic_numbers(device) -> list[str]:
    """The speed-setting step-time numbers (DEVICE_KEYS) the catalogue does not give for ``device``: the model takes
    the generic, A100-like defaults (GENERIC) for these."""
    return [k for k in DEVICE_KEYS if k not in device.steptime]


CUDNN_KEYS = ("cudnn_forward", "cudnn_backward", "cudnn_causal_forward", "cudnn_causal_backward")
FLASH_CAUSAL_KEYS = ("flash_causal_forward", "flash_causal_backward")
FLASH3_KEYS = ("flash3_forward", "flash3_backward", "flash3_causal_forward", "flash3_causal_backward")
DEVICE_MODEL_KEYS = ("gemm_flops", "bandwidth", "flash_forward_flops", "flash_backward_flops", "launch_s", "device_name",
                     "dtype")


def with_measurement(device, data: dict, dtype: str, where: str):
    """``device`` (a catalogue Device) with the step-time numbers that ``trainingcost calibrate --device-model``
    measured on it (measure/device_model.py) in place of the catalogue's: the large-GEMM ceiling (best measured
    FLOP/s over the dense peak), the memory efficiency by kernel size (measured copy bandwidth over the datasheet's),
    FlashAttention's forward and backward shares, the launch overhead. The fitted kernel efficiency stays.
    Refused in one line when the file is no device measurement, or was measured on another device or dtype."""
    import dataclasses

    from ...config.errors import ConfigError
    from ...config.hardware import match_device

    if not isinstance(data, dict) or data.get("kind") != "device_model" or any(k not in data for k in DEVICE_MODEL_KEYS):
        raise ConfigError(f"--device-model: {where} is not a device measurement (trainingcost calibrate --device-model)")
    matched = match_device(str(data["device_name"]))
    if matched is None or matched.name != device.name:
        found = f"catalogue device {matched.name}" if matched is not None else "no catalogue device"
        raise ConfigError(f"--device-model: {where} was measured on {data['device_name']!r} ({found}), not on "
                          f"--gpu {device.name}")
    if data["dtype"] != dtype:
        raise ConfigError(f"--device-model: {where} was measured in {data['dtype']}, the plan computes in {dtype} "
                          f"(calibrate --device-model --dtype {dtype})")
    def positive(key, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"--device-model: {where}: {key} must be a positive number (got {value!r})")
        return float(value)

    for key in ("gemm_flops", "flash_forward_flops", "flash_backward_flops", "launch_s"):
        positive(key, data[key])
    if not isinstance(data["bandwidth"], list) or not data["bandwidth"] or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in data["bandwidth"]):
        raise ConfigError(f"--device-model: {where}: bandwidth must be a list of [bytes moved, bytes/s] pairs")
    for b, bw in data["bandwidth"]:
        positive("bandwidth bytes", b)
        positive("bandwidth bytes/s", bw)
    peak = float(device.peak(dtype))
    points = sorted(((int(b), min(1.0, float(bw) / device.bandwidth_bytes_per_s)) for b, bw in data["bandwidth"]),
                    reverse=True)
    hbm = [[b, e] for b, e in points[:-1]] + [[0, points[-1][1]]]
    measured = {"gemm_ceiling": min(1.0, float(data["gemm_flops"]) / peak), "hbm_efficiency": hbm,
                "flash_forward": float(data["flash_forward_flops"]) / peak,
                "flash_backward": float(data["flash_backward_flops"]) / peak,
                "launch_us": float(data["launch_s"]) * 1e6}
    trust = "" if data.get("trusted", False) else f"; untrusted: {data.get('untrusted')}"
    source = (f"measured: trainingcost calibrate --device-model on {data['device_name']} "
              f"({data.get('measured_at', 'undated')}, {where}{trust})")
    # the measured fused attention is the device's own: it prices cuDNN's too (the catalogue's published shares go);
    # the measurement ran under the part's power limit, so the catalogue's slowdown for it goes too
    replaced = (*CUDNN_KEYS, *FLASH_CAUSAL_KEYS, *FLASH3_KEYS, "power_curve")
    kept = {k: v for k, v in device.steptime.items() if k not in replaced}
    kept_sources = {k: v for k, v in device.steptime_sources.items() if k not in replaced}
    sources = {k: source for k in measured}
    # an fp8 ceiling the catalogue publishes moves with the measured bf16 one (their ratio kept: the same device's
    # clocks and power limit bind both); the dtype measured is the compute dtype, never fp8
    if "gemm_ceiling_fp8" in device.steptime:
        bf16 = float(device.steptime.get("gemm_ceiling", GENERIC["gemm_ceiling"]))
        fp8 = float(device.steptime["gemm_ceiling_fp8"])
        measured["gemm_ceiling_fp8"] = min(1.0, fp8 * measured["gemm_ceiling"] / bf16)
        sources["gemm_ceiling_fp8"] = (f"{source}: the measured {dtype} ceiling x the catalogue's fp8 / {dtype} "
                                       f"ceilings ({fp8:.3g} / {bf16:.3g}: "
                                       f"{device.steptime_sources.get('gemm_ceiling_fp8', '')})")
    # the measurement times attention without a mask; a causal one keeps the catalogue's causal / unmasked ratio
    for key in ("forward", "backward"):
        for kernel in ("cudnn", "flash3", "flash"):
            causal, plain = device.steptime.get(f"{kernel}_causal_{key}"), device.steptime.get(f"{kernel}_{key}")
            if causal is not None and plain:
                causal, plain = share_at(causal), share_at(plain)  # a curve read at SHARE_REFERENCE_TOKENS
                measured[f"{kernel}_causal_{key}"] = measured[f"flash_{key}"] * causal / plain
                sources[f"{kernel}_causal_{key}"] = (
                    f"{source}, times the catalogue's causal / unmasked share ({causal:.3g} / {plain:.3g} at "
                    f"{SHARE_REFERENCE_TOKENS} tokens: {device.steptime_sources.get(f'{kernel}_causal_{key}', '')})")
    return dataclasses.replace(device, steptime={**kept, **measured}, steptime_sources={**kept_sources, **sources})
