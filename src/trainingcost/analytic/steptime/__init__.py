"""Step time at scale from first principles (no torch): a device model (:mod:`.device`), a network model
(:mod:`.network`) and the step composed per rule (:mod:`.step`). docs/planning.md gives every formula and source."""

from .device import DeviceModel
from .network import Network
from .step import Layout, StepPrediction, predict_step

__all__ = ["DeviceModel", "Network", "Layout", "StepPrediction", "predict_step"]
