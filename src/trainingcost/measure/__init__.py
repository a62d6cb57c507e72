"""Measurement: one training step observed per (layer, phase): FLOPs, seconds, memory, joules, provenance."""
