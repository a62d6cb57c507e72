"""Step time at scale from first principles (no torch): a device model (:mod:`.device`), a network model
(:mod:`.network`) and the step composed per rule (:mod:`.step`) from BP's kernels per block (:mod:`.kernels`), the
data-parallel communication (:mod:`.data_parallel`), the pipeline's schedules (:mod:`.schedules`) and an offload
(:mod:`.offload`), for a layout :mod:`.layout_checks` accepts. docs/planning.md gives every formula and source."""

from .device import DeviceModel
from .network import Network
from .step import Layout, StepPrediction, predict_step

__all__ = ["DeviceModel", "Network", "Layout", "StepPrediction", "predict_step"]
