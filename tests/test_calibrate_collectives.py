"""`trainingcost calibrate --collectives --after-compute-ms`, as a user runs it: the structure of what it writes and
prints (two processes on gloo, two small sizes; no assertion on the seconds, which the machine's load decides)."""

import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).with_name("trainingcost")
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def run(*args):
    command = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "trainingcost.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})


def test_calibrate_collectives_after_compute_writes_points_and_fits(tmp_path):
    out = tmp_path / "collectives.json"
    result = run("calibrate", "--collectives", "--nproc", "2", "--device", "cpu", "--backend", "gloo",
                 "--max-bytes", str(16 * 2**10), "--after-compute-ms", "2", "--tolerance", "0.99",
                 "--time-cap", "120", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "gloo on 2 processes" in result.stdout and str(out) in result.stdout
    cal = json.loads(out.read_text())
    assert cal["world"] == 2 and cal["backend"] == "gloo" and cal["converged"] is True
    assert cal["after_compute_s"] == 0.002 and cal["max_bytes"] == 16 * 2**10 and cal["rounds"] >= 2
    assert sorted((p["op"], p["bytes"]) for p in cal["points"]) == sorted(
        (op, size) for op in OPS for size in (4 * 2**10, 16 * 2**10))
    assert all(p["seconds"] > 0 for p in cal["points"])
    assert set(cal["fit"]) == set(OPS)
    assert all(f["alpha_s"] >= 0 and set(f) == {"alpha_s", "beta_s_per_byte"} for f in cal["fit"].values())
    # the pricing reads it (analytic/comm.py)
    from trainingcost.analytic.comm import Collective, comm_seconds

    assert comm_seconds([Collective("all_reduce", 8 * 2**10, 2, "fp32", "backward")], cal) > 0


def test_calibrate_collectives_refuses_one_process(tmp_path):
    result = run("calibrate", "--collectives", "--nproc", "1", "--after-compute-ms", "2",
                 "--out", str(tmp_path / "c.json"))
    assert result.returncode != 0 and "nproc" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c.json").exists()
