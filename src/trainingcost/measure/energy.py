"""GPU energy from NVML's total-energy counter (millijoules since the driver loaded).

:class:`EnergyCounter` reads ``nvmlDeviceGetTotalEnergyConsumption`` for the
CUDA device a run uses (Volta and newer). Elsewhere (CPU runs, no NVML
library, an older GPU) :meth:`EnergyCounter.read` returns None and energy
columns are null: we do not estimate energy from power limits or TDP.
"""

from __future__ import annotations

import torch


class EnergyCounter:
    def __init__(self, device: torch.device):
        self.handle = None
        self.reason = "not a CUDA device"
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            index = device.index if device.index is not None else torch.cuda.current_device()
            try:  # the NVML index of a CUDA index, honouring CUDA_VISIBLE_DEVICES
                index = torch.cuda._get_nvml_device_index(index)
            except Exception:  # noqa: BLE001 - private helper; the plain index is right without remapping
                pass
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # raises where unsupported
            self.pynvml, self.handle, self.reason = pynvml, handle, ""
        except Exception as exc:  # noqa: BLE001 - any NVML failure means: no energy counter
            self.reason = f"NVML energy counter unavailable: {exc}"

    @property
    def available(self) -> bool:
        return self.handle is not None

    def read(self) -> float | None:
        """Joules since the driver loaded, or None."""
        if self.handle is None:
            return None
        return self.pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0


# NVML's clock event ("throttle") reasons (nvml.h, nvmlClocksEventReason*): bit -> name.
CLOCK_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
# The reasons that mean the GPU ran slower than it can for a cause outside the run: its timings are contended.
SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def clock_reasons(counter: EnergyCounter) -> int | None:
    """The bitmask of why the GPU's clocks are below their maximum now (NVML), or None without NVML."""
    if counter.handle is None:
        return None
    nvml = counter.pynvml
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    try:
        return int(read(counter.handle)) if read else None
    except Exception:  # noqa: BLE001 - not supported on this GPU or driver
        return None


def reason_names(mask: int | None) -> str | None:
    return None if mask is None else ",".join(name for bit, name in CLOCK_REASONS.items() if mask & bit)
