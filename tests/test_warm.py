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

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_PEERCRED and fork: Linux")

TINY = ["train", "--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq-len", "16", "--batch", "4",
        "--threads", "1", "--rule", "dfa"]


def client(env, *args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "trainingcost.warm", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def served(workflow_pid: int) -> bool:
    address = _address(workflow_pid)
    if address is None:
        return False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
        return True
    except OSError:
        return False
    finally:
        sock.close()


def forked(workflow_pid: int) -> list[int]:
    """The jobs the warm server of ``workflow_pid`` has forked and that still run."""
    found = subprocess.run(["pgrep", "-f", f"trainingcost.warm --serve {workflow_pid}$"], capture_output=True, text=True)
    if not found.stdout.split():
        return []
    server = int(found.stdout.split()[0])
    path = f"/proc/{server}/task/{server}/children"
    try:
        return [int(pid) for pid in open(path).read().split()]
    except OSError:
        return []


def cpu_seconds(pid: int) -> float:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return float("inf")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    end = time.monotonic() + 300
    while not forked(workflow.pid):  # the server's imports, then a forked job
        assert time.monotonic() < end, "the server forked no job"
        time.sleep(0.05)
    trainer = forked(workflow.pid)[0]
    start = cpu_seconds(trainer)
    while cpu_seconds(trainer) - start < 2.0:  # into the steps
        time.sleep(0.1)
    job.send_signal(signal.SIGTERM)
    stdout, stderr = job.communicate(timeout=60)
    assert job.returncode == -signal.SIGTERM and "trainingcost train: terminated; nothing written" in stderr, stderr
    assert not (tmp_path / "term").exists()

    # SIGKILL of the client (the job's process killed): its forked trainer (a child of the server) ends too.
    def children() -> list[int]:
        return forked(workflow.pid)

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


# -- who may use the server (issue 66, N1 and N2; docs/failures.md, "Who may use the warm training server") ----------
# The review's attacks, run as they were: the suite runs as root on CI, and `nobody` is the second local user.

def _other_uid() -> int | None:
    import pwd

    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


OTHER = _other_uid()
two_uids = pytest.mark.skipif(OTHER is None, reason="needs root, to act as a second local user (nobody)")


class Other:
    """A stdlib-only Python ``script`` run by the other user: a forked child of this test that drops to that uid (no
    interpreter of ours need be reachable by that user). ``stdout`` reads what the script prints."""

    def __init__(self, script: str, *args: str):
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            status = 1
            try:
                os.close(read)
                os.dup2(write, 1)
                os.dup2(write, 2)
                sys.stdout = open(1, "w", buffering=1)
                sys.stderr = sys.stdout
                os.setgroups([])
                os.setgid(OTHER)
                os.setuid(OTHER)
                os.chdir("/")
                sys.argv = ["visitor", *args]
                exec(script, {"__name__": "__main__"})
                status = 0
            except SystemExit:
                status = 0
            except BaseException:  # noqa: BLE001 - reported through the pipe
                import traceback

                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                finally:
                    os._exit(status)  # never back into the test: this process is a copy of pytest
        os.close(write)
        self.stdout = os.fdopen(read)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    def wait(self, timeout: float = 120) -> str:
        """Everything the script printed, once it has ended."""
        end = time.monotonic() + timeout
        while os.waitpid(self.pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > end:
                os.kill(self.pid, signal.SIGKILL)
            time.sleep(0.05)
        return self.stdout.read()


def as_other(script: str, *args: str) -> str:
    return Other(script, *args).wait()


@pytest.fixture
def shared_tmp():
    """A temporary folder as /tmp is: every user may create things in it (mode 1777)."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="tc-shared-", dir="/tmp")
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# A visitor that connects to the server and asks for a job as the review did: its own argv, working directory and
# environment, and its own descriptors as the job's standard streams. Prints what happened.
VISIT = r"""
import array, json, os, socket, struct, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    sock.connect(sys.argv[1])
except OSError as exc:
    print("refused", exc.errno); sys.exit()
request = json.dumps({"argv": ["configs", "--out", sys.argv[2]], "cwd": "/", "env": {"PYTHONPATH": "/tmp"},
                      "client": os.getpid()}).encode()
fds = array.array("i", [0, 1, 2])
try:
    sock.sendmsg([struct.pack("!I", len(request)) + request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    sock.settimeout(60)
    reply = sock.recv(4096)
except OSError as exc:
    print("reset", exc.errno); sys.exit()
print("closed" if not reply else "answered")
"""


@two_uids
def test_another_user_can_neither_reach_the_server_nor_have_a_job_run(tmp_path, workflow, shared_tmp):
    env = {**os.environ, "TRAININGCOST_WORKFLOW_PID": str(workflow.pid), "PYTHONWARNINGS": "ignore", "TMPDIR": shared_tmp}
    job = client(env, *TINY, "--steps", "2")
    stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0 and "status ok" in stdout, stderr
    folder = os.path.join(shared_tmp, f"trainingcost-{os.getuid()}")
    address = os.path.join(folder, f"warm-{workflow.pid}.sock")
    assert os.path.exists(address)
    assert stat_mode(folder) == 0o700 and stat_mode(address) & 0o077 == 0
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    target = secret / "configs.parquet"

    # The visitor cannot enter the folder, so cannot connect.
    visit = as_other(VISIT, address, str(target))
    assert visit.split()[:2] == ["refused", "13"], visit  # EACCES

    # Were the folder and socket open to all (a careless umask, a copied tree), the server itself still refuses
    # the visitor: the connection is closed unread, nothing is forked, nothing is written.
    os.chmod(folder, 0o711)
    os.chmod(address, 0o666)
    try:
        visit = as_other(VISIT, address, str(target))
    finally:
        os.chmod(folder, 0o700)
        os.chmod(address, 0o600)
    assert visit.strip() in ("closed", "reset 104", "reset 32"), visit
    assert not forked(workflow.pid) and not target.exists()

    # This user's own jobs still run through it.
    job = client(env, *TINY, "--steps", "2")
    stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0 and "status ok" in stdout and stderr == "", stderr


# A server of another user, waiting where this user's server would be: it records every connection and every byte.
IMPERSONATE = r"""
import os, signal, socket, sys
class Stop(Exception):
    pass
def stop(signum, frame):
    raise Stop
signal.signal(signal.SIGUSR1, stop)
folder, name = sys.argv[1], sys.argv[2]
os.mkdir(folder, 0o777); os.chmod(folder, 0o777)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(os.path.join(folder, name)); os.chmod(os.path.join(folder, name), 0o777)
listener.listen(8); listener.settimeout(float(sys.argv[3]))
print("ready", flush=True)
received = connections = 0
try:
    while True:
        conn, _ = listener.accept(); connections += 1
        conn.settimeout(2)
        try:
            while chunk := conn.recv(65536):
                received += len(chunk)
        except OSError:
            pass
except (OSError, Stop):
    pass
# connections still waiting in the backlog when told to stop (a busy machine may not have scheduled the accept
# yet): counted too, with their bytes, so that the report does not depend on the load
listener.setblocking(False)
while True:
    try:
        conn, _ = listener.accept()
    except OSError:
        break
    connections += 1
    conn.settimeout(2)
    try:
        while chunk := conn.recv(65536):
            received += len(chunk)
    except OSError:
        pass
print("connections", connections, "bytes", received, flush=True)
"""


@two_uids
def test_a_server_of_another_user_receives_nothing(tmp_path, workflow, shared_tmp):
    name = f"warm-{workflow.pid}.sock"
    folder = os.path.join(shared_tmp, f"trainingcost-{os.getuid()}")
    impostor = Other(IMPERSONATE, folder, name, "300")
    try:
        impostor_sees_nothing(impostor, tmp_path, workflow, shared_tmp, folder, name)
    finally:
        impostor.kill()


def impostor_sees_nothing(impostor, tmp_path, workflow, shared_tmp, folder, name):
    assert impostor.stdout.readline().strip() == "ready"

    # The workflow's job: the folder is another user's, so the job runs the ordinary way, with one line saying why.
    env = {**os.environ, "TRAININGCOST_WORKFLOW_PID": str(workflow.pid), "PYTHONWARNINGS": "ignore", "TMPDIR": shared_tmp}
    out = tmp_path / "run"
    job = client({**env, "SECRET": "do-not-leak"}, *TINY, "--steps", "4", "--out-dir", str(out))
    stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0 and "status ok" in stdout and (out / "measured.parquet").exists(), stderr
    assert stderr.count("\n") == 1 and "is not a folder only this user" in stderr, stderr

    # The client's own check, should it ever be handed the impostor's socket: it leaves before sending a byte.
    probe = subprocess.run([sys.executable, "-c", "import sys; from trainingcost.warm import _connect; "
                            "print(_connect(sys.argv[1]))", os.path.join(folder, name)],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "None" and f"runs as uid {OTHER}, not {os.getuid()}" in probe.stderr, probe.stderr
    os.kill(impostor.pid, signal.SIGUSR1)
    report = impostor.wait(timeout=60).split()
    assert report[:2] == ["connections", "1"] and report[3] == "0", report  # the probe's connection, and no byte
    assert not forked(workflow.pid)


def stat_mode(path: str) -> int:
    return os.stat(path).st_mode & 0o777
