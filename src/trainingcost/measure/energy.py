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
