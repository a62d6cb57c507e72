"""Where and with what a measurement was taken: columns for every measured row."""

from __future__ import annotations

import datetime
import platform
import socket
import subprocess
from functools import lru_cache
from pathlib import Path

import torch

from .. import __version__

PACKAGE_DIR = Path(__file__).resolve().parent.parent


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the source tree the package runs from ('-dirty' if modified), or None outside git."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}-dirty" if dirty else commit or None


@lru_cache(maxsize=1)
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


def snakemake_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("snakemake")
    except PackageNotFoundError:
        return None


def file_metadata(device: torch.device, config_hash: str | None) -> dict:
    """Key-value metadata for a measured parquet file: what produced it and from which workflow config."""
    p = provenance(device)
    keys = ("trainingcost_version", "git_commit", "torch_version", "cuda_version", "device", "device_name", "hostname")
    return {**{k: p[k] for k in keys}, "snakemake_version": snakemake_version(), "config_hash": config_hash}


def provenance(device: torch.device) -> dict:
    return {
        "trainingcost_version": __version__,
        "git_commit": git_commit(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda if device.type == "cuda" else None,
        "device": str(device),
        "device_name": device_name(device),
        "cpu_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
