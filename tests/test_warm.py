"""The workflow's warm training processes (src/trainingcost/warm.py; issue 39's `make run` floor): a job forked from a
warm server gives what a fresh process gives (tables, losses, FLOPs, the tensor meter's peak, exit status and death
by signal), and nothing outlives the workflow or the job."""

import os
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest

from trainingcost.warm import _address

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets and fork: Linux")

TINY = ["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq-len", "16", "--batch", "4",
        "--threads", "1", "--rule", "dfa"]


def client(env, *args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "trainingcost.warm", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def served(workflow_pid: int) -> bool:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(_address(workflow_pid))
        return True
    except OSError:
        return False
    finally:
        sock.close()


@pytest.fixture
def workflow():
    """A stand-in for the Snakemake process whose pid the workflow exports (TRAININGCOST_WORKFLOW_PID)."""
    process = subprocess.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


def test_a_forked_job_gives_what_a_fresh_process_gives(tmp_path, workflow):
    env = {**os.environ, "TRAININGCOST_WORKFLOW_PID": str(workflow.pid), "PYTHONWARNINGS": "ignore"}
    args = [*TINY, "--steps", "6"]
    outputs = {}
    for name, extra in (("fresh", {"TRAININGCOST_WARM": "0"}), ("warm", {}), ("warm again", {})):
        done = client({**env, **extra}, *args, "--out-dir", str(tmp_path / name))
        stdout, stderr = done.communicate(timeout=120)
        assert done.returncode == 0 and "status ok" in stdout, stderr
        outputs[name] = (pd.read_parquet(tmp_path / name / "steps.parquet"),
                         pd.read_parquet(tmp_path / name / "measured.parquet"))
        if name == "fresh":
            assert not served(workflow.pid)  # TRAININGCOST_WARM=0: no server was started
    assert served(workflow.pid)
    fresh_steps, fresh = outputs["fresh"]
    for name in ("warm", "warm again"):
        steps, measured = outputs[name]
        pd.testing.assert_series_equal(steps["loss"], fresh_steps["loss"])
        for column in ("flops", "flops_per_step", "tensor_peak_bytes", "tensor_start_bytes", "tensor_end_bytes", "status"):
            pd.testing.assert_series_equal(measured[column], fresh[column])

    # A mistake: exit status 2 and the command's one line, as from a fresh process.
    mistake = client(env, *TINY, "--steps", "0")
    stdout, stderr = mistake.communicate(timeout=60)
    assert mistake.returncode == 2 and stderr.startswith("trainingcost train: error:") and stderr.count("\n") == 1

    # The server ends with its workflow.
    workflow.kill()
    workflow.wait()
    end = time.monotonic() + 30
    while served(workflow.pid) and time.monotonic() < end:
        time.sleep(0.2)
    assert not served(workflow.pid)


def test_signals_reach_the_forked_job_and_a_killed_client_takes_it_along(tmp_path, workflow):
    env = {**os.environ, "TRAININGCOST_WORKFLOW_PID": str(workflow.pid), "PYTHONWARNINGS": "ignore"}
    long = [*TINY, "--steps", "100000"]
    # SIGTERM to the client (Snakemake cancelling the job): the job cleans up and the client dies of SIGTERM.
    job = client(env, *long, "--out-dir", str(tmp_path / "term"))
    time.sleep(8)  # the server's imports, then into the steps
    job.send_signal(signal.SIGTERM)
    stdout, stderr = job.communicate(timeout=60)
    assert job.returncode == -signal.SIGTERM and "trainingcost train: terminated; nothing written" in stderr, stderr
    assert not (tmp_path / "term").exists()

    # SIGKILL of the client (the job's process killed): its forked trainer (a child of the server) ends too.
    server = int(subprocess.run(["pgrep", "-f", f"trainingcost.warm --serve {workflow.pid}$"], capture_output=True,
                                text=True).stdout.split()[0])

    def children() -> list[str]:
        path = f"/proc/{server}/task/{server}/children"
        return open(path).read().split() if os.path.exists(path) else []

    job = client(env, *long, "--out-dir", str(tmp_path / "kill"))
    end = time.monotonic() + 30
    while not children() and time.monotonic() < end:
        time.sleep(0.1)
    assert children(), "the server forked no job"
    time.sleep(2)
    job.kill()
    job.communicate(timeout=60)
    end = time.monotonic() + 30
    while children() and time.monotonic() < end:
        time.sleep(0.2)
    assert not children(), children()
    assert not (tmp_path / "kill").exists()
