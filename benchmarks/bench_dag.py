"""Benchmark: how long `snakemake -n` takes to plan sweeps of 1,430 and 7,150 training jobs.

Each sweep is one grid whose configurations are all trained under the ten rules. The dry run
validates the config, enumerates the sweep, plans every job and checks the outputs. Prints the median
of --repeats fresh runs per size, their spread and the load, with jobs per second.

    python benchmarks/bench_dag.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainingcost.analytic import rule_names  # noqa: E402
from trainingcost.pipeline import load, train_jobs  # noqa: E402
from trainingcost.measure.provenance import cpu_name  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
# Grids of 143 and 715 configurations, each trained under every rule (10: 1,430 and 7,150 training jobs).
SIZES = {
    143: {"d_model": [32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416], "layers": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]},
    715: {"d_model": [32 * i for i in range(1, 14)], "layers": list(range(1, 12)), "seq_len": [16, 32, 64, 128, 256]},
}


def config_of(axes: dict) -> dict:
    grid = {"name": "scale", "arch": ["decoder"], "heads": [4], "ff_mult": [4], "seq_len": [64], "vocab": [256], "batch": [8], **axes}
    return {"sweep": {"grids": [grid]}, "train": {"select": ["scale"]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {cpu_name()}, Python {platform.python_version()}")
    for configurations, axes in SIZES.items():
        config = config_of(axes)
        jobs = len(train_jobs(load(config)))  # the validated config, defaults filled, as the workflow reads it
        assert jobs == configurations * len(rule_names()), (jobs, configurations)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.yaml"
            path.write_text(yaml.safe_dump(config))
            seconds = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                result = subprocess.run([str(SNAKEMAKE), "-n", "-q", "-s", str(REPO / "Snakefile"), "--directory", tmp,
                                         "--configfile", str(path), "--cores", "2"], capture_output=True, text=True)
                seconds.append(time.perf_counter() - start)
                if result.returncode != 0:
                    print(result.stderr[-2000:])
                    return 1
        median = statistics.median(seconds)
        print(f"snakemake -n, {jobs} training jobs: median {median:.1f} s (spread {min(seconds):.1f}-{max(seconds):.1f}) "
              f"over {args.repeats} fresh runs = {jobs / median:,.0f} training jobs/s; load average "
              f"{os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
