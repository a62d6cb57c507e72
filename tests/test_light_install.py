"""Issue 63: the light install (``pip install .``, no extras) estimates, plans, lists the hardware and checks a
config without torch, Snakemake, pyarrow, matplotlib or transformers; a command that needs an extra says which, in
one line, before any work. Each case runs in a fresh interpreter in which importing those libraries fails, as it
does where they are not installed (benchmarks/bench_install.py installs it for real)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "snakemake", "pyarrow", "matplotlib", "seaborn", "transformers", "pynvml", "fastapi", "uvicorn")

LIGHT = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Absent())
"""


def light(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    script = LIGHT + "sys.argv = ['trainingcost', *sys.argv[1:]]\nfrom trainingcost.entry import run\nrun()\n"
    return subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("argv", [
    ["estimate", "--preset", "gpt2-small"],
    ["plan", "--preset", "llama-3-8b", "--tokens", "1e12", "--gpu", "h100-sxm", "--gpus", "64"],
    ["plan", "--preset", "gpt2-small", "--tokens", "1e10", "--gpu", "a100-80gb", "--gpus", "8-32x2", "--rule", "bp,dfa"],
    ["hardware"],
    ["check", "--config", str(ROOT / "config" / "config.yaml")],
])
def test_the_light_install_answers(argv):
    done = light(*argv)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert done.stdout


def test_the_python_api_needs_no_extra():
    script = LIGHT + ("import trainingcost\nr = trainingcost.plan(preset='gpt2-small', tokens=1e10, gpu='a100-80gb', "
                      "gpus=8, rule=['bp'])\nprint(len(r.table))\n"
                      "print(sorted(m for m in sys.modules if m.split('.')[0] in %r))\n" % (HEAVY,))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["1", "[]"]


@pytest.mark.parametrize("argv, line", [
    (["train", "--steps", "3"], "trainingcost train: error: torch is not installed; training needs the train extra: "
                                "pip install '.[train]' in the trainingcost folder"),
    (["calibrate", "--out", "OUT/cal.json"], "trainingcost calibrate: error: torch is not installed; training needs"),
    (["configs", "--config", str(ROOT / "config" / "config.yaml"), "--out", "OUT/configs.parquet"],
     "trainingcost configs: error: pyarrow is not installed; a parquet table needs the tables extra: "
     "pip install '.[tables]'"),
    (["plan", "--preset", "gpt2-small", "--tokens", "1e10", "--gpu", "a100-80gb", "--gpus", "8,16", "--figure",
      "OUT/s.png"], "trainingcost plan: error: --figure: matplotlib is not installed; a figure needs the figures extra"),
    (["plan", "--preset", "gpt2-small", "--tokens", "1e10", "--gpu", "a100-80gb", "--target-loss", "3",
      "--frontiers", "OUT/f.parquet"], "trainingcost plan: error: --frontiers: pyarrow is not installed"),
    (["serve", "--port", "0"], "trainingcost serve: error: fastapi is not installed; the planner page needs the web "
                               "extra: pip install '.[web]'"),
])
def test_a_command_that_needs_an_extra_names_it_in_one_line(tmp_path, argv, line):
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    done = light(*argv)
    assert done.returncode == 2 and done.stderr.startswith(line) and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert not list(tmp_path.iterdir())
