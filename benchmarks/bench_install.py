"""Benchmark: the light install (issue 63): ``pip install .`` without extras, into a fresh virtual environment,
from pip's cache (no download; the first run fills it). Prints each run's time and size on disk, then the median and
the spread of 3 fresh runs, against the goals (at most 250 MB and 30 s), and checks that the light install plans
without torch, Snakemake, pyarrow or matplotlib.

    python benchmarks/bench_install.py [--repeats 3] [--extras EXTRAS]

``--extras train`` (say) measures ``pip install '.[train]'`` instead.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "snakemake", "pyarrow", "matplotlib", "seaborn", "transformers")


def size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            file = os.path.join(folder, name)
            if not os.path.islink(file):
                total += os.lstat(file).st_size
    return total


def once(extras: str) -> tuple[float, int, list[str]]:
    work = Path(tempfile.mkdtemp(prefix="tc-install-"))
    try:
        source = work / "src"  # a copy of the tree, so that no build folder lands in the repository
        shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "results", ".snakemake", "*.egg-info",
                                                                    "build", "__pycache__"))
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        target = f"{source}[{extras}]" if extras else str(source)
        began = time.perf_counter()
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", target],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - began
        found = subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import importlib.util as u; print(' '.join(m for m in %r if u.find_spec(m)))" % (HEAVY,)],
                               capture_output=True, text=True, check=True).stdout.split()
        if not extras:  # the light install answers the README's first command
            subprocess.run([str(venv / "bin" / "trainingcost"), "plan", "--preset", "llama-3-8b", "--tokens", "1e12",
                            "--gpu", "h100-sxm", "--gpus", "64"], check=True, stdout=subprocess.DEVNULL)
        return seconds, size(venv), found
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--extras", default="")
    args = parser.parse_args()
    what = f"pip install '.[{args.extras}]'" if args.extras else "pip install . (the light install)"
    print(f"# {what}: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}")
    once(args.extras)  # fills pip's cache: not counted
    runs = []
    for k in range(args.repeats):
        seconds, bytes_, heavy = once(args.extras)
        runs.append((seconds, bytes_))
        print(f"run {k + 1}: {seconds:.1f} s, {bytes_ / 1e6:.0f} MB on disk; heavy libraries present: "
              f"{', '.join(heavy) or 'none'}")
    seconds = [r[0] for r in runs]
    sizes = [r[1] / 1e6 for r in runs]
    print(f"median {statistics.median(seconds):.1f} s (range {min(seconds):.1f} to {max(seconds):.1f}), "
          f"{statistics.median(sizes):.0f} MB (range {min(sizes):.0f} to {max(sizes):.0f})"
          + ("; goals: at most 30 s and 250 MB" if not args.extras else "")
          + f"; load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
