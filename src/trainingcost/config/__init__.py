"""Configuration: the schema, presets, one validated model configuration, sweeps and their ids (no torch)."""

from .errors import ConfigError
from .model import ARCHES, CANONICAL_FIELDS, ModelConfig, canonical_model, config_id, preset_entry
from .presets import PRESETS
from .schema import schema, schema_enum
from .training import DEFAULT_LR, DEVICES, OPTIMIZERS, TASKS, TRAIN_DTYPES, RuleOptions, TrainSpec, check_task, task_defaults
from .sweep import (
    configs_frame,
    entry_config,
    entry_names,
    enumerate_sweep,
    frame_configs,
    read_config,
    select_sweep,
    sweep_frame,
    validate_config,
)

__all__ = [
    "ARCHES", "CANONICAL_FIELDS", "PRESETS", "ConfigError", "ModelConfig", "canonical_model", "config_id",
    "configs_frame", "entry_config", "entry_names", "enumerate_sweep", "frame_configs", "preset_entry", "read_config",
    "schema", "schema_enum", "select_sweep", "sweep_frame", "validate_config",
    "DEFAULT_LR", "DEVICES", "OPTIMIZERS", "TASKS", "TRAIN_DTYPES", "RuleOptions", "TrainSpec", "check_task", "task_defaults",
]
