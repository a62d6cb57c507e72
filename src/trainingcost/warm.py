"""Warm training processes for the workflow (issue 39: `make run`'s floor was 80 interpreters each importing torch).

The workflow's train rule runs ``python -m trainingcost.warm train ...`` instead of ``python -m trainingcost train
...``. This client costs an interpreter start and nothing more: it asks a **server** that has already imported
torch and the package to ``fork()`` one child per job, hands that child its standard input, output and error (the
job's log, through SCM_RIGHTS), its working directory, environment and arguments, and waits. The child is a new
process, as fresh as one started from nothing except that its imports are done: no tensor, thread, allocator cache
or random state is shared (the server never runs a torch operation, and refuses to serve if importing started a
Python thread; see :func:`preload`). The child runs the command line's own ``run()``; its
exit status, or the signal it died of, becomes the client's, so the shell's ``|| --record-failure`` fallback and
Snakemake see exactly what a fresh process would give them.

- One server per Snakemake process (``TRAININGCOST_WORKFLOW_PID``, :mod:`.lifeline`), on a Unix socket file named
  after that pid, ``warm-PID.sock``, in a folder only this user can enter (:func:`_directory`): the first job starts
  it; it exits when that Snakemake process is gone, or after IDLE_S seconds without a job. A cluster job's own
  Snakemake gets its own.
- **Trust** (issue 66, N1 and N2; docs/failures.md): only a process of this user may use the server, and a client
  sends nothing to a server of another user. The folder is created mode 0700 and refused unless it is a real folder
  owned by this user that nobody else can enter (a folder another user made first, or a link, makes every job run
  the ordinary way, with one line saying why); the socket itself is mode 0600. Both ends also check the other's
  kernel-given credentials (``SO_PEERCRED``, unix(7)) before reading or sending a byte: a peer of another uid is
  closed unread. A Linux abstract socket, used before, has no permissions at all: any local user could ask the
  server to fork a job as this user, or bind the predictable name first and receive every job's environment.
- Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the client are passed to its child; the client dies with its
  parent (the job's shell) and the child with its client (a watch on the client's pid), so a killed job leaves no
  trainer behind.
- Without Linux, without the workflow's pid, with ``TRAININGCOST_WARM=0``, or when no server answers in time, the
  client becomes the ordinary command (``exec``): the same result, at the old cost.

`benchmarks/bench_workflow.py` measures `make run` with it; docs/measurement.md says what was compared.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from . import lifeline

ENV_OFF = "TRAININGCOST_WARM"  # "0": every job starts its own interpreter
IDLE_S = 120.0  # a server with no job for this long exits
CONNECT_S = 30.0  # how long a client waits for a server it started before running the command itself
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


SUN_PATH_MAX = 107  # unix(7): sun_path holds 108 bytes with its terminating NUL


def _directory() -> str | None:
    """This user's private folder for the servers' sockets (``$TMPDIR/trainingcost-UID``, mode 0700), created if
    missing; None, with the reason on stderr, when the folder there cannot be trusted: not a folder (a link is not
    followed), owned by another user, or open to others. Nothing is then served or connected to."""
    uid = os.getuid()
    path = os.path.join(tempfile.gettempdir(), f"trainingcost-{uid}")
    if len(path) + len("/warm-4294967295.lock") > SUN_PATH_MAX:  # a long $TMPDIR: the socket's name would not fit
        path = f"/tmp/trainingcost-{uid}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        sys.stderr.write(f"trainingcost: cannot create {path} ({exc.strerror}); the job runs without the warm server\n")
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        sys.stderr.write(f"trainingcost: {path} is not a folder only this user (uid {uid}) can enter; "
                         "the job runs without the warm server\n")
        return None
    return path


def _address(workflow_pid: int) -> str | None:
    """The socket of the server for workflow ``workflow_pid``; None when no private folder is at hand."""
    folder = _directory()
    return None if folder is None else os.path.join(folder, f"warm-{workflow_pid}.sock")


def _peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end, as the kernel recorded it at connect() or listen() (unix(7),
    SO_PEERCRED: struct ucred {pid, uid, gid}); the peer cannot forge it."""
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def _send(conn: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = struct.pack("!I", len(data)) + data
    if fds:
        conn.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        conn.sendall(payload)


def _recv(conn: socket.socket, with_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (and up to ``with_fds`` descriptors); None when the other side closed."""
    fds: list[int] = []
    buffer = b""
    while len(buffer) < 4:
        if with_fds and not fds:
            chunk, ancillary, _, _ = conn.recvmsg(4 - len(buffer), socket.CMSG_LEN(with_fds * 4))
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.extend(array.array("i", data[: len(data) - len(data) % 4]))
        else:
            chunk = conn.recv(4 - len(buffer))
        if not chunk:
            return None, fds
        buffer += chunk
    (size,) = struct.unpack("!I", buffer)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


# -- the client -------------------------------------------------------------------------------------------------------

def _connect(address: str) -> socket.socket | None:
    """A connection to a server of this user at ``address``; None when none answers there. A server of another uid
    is left at once, before anything is sent, with one line on stderr."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
    except OSError:
        sock.close()
        return None
    uid = _peer_uid(sock)
    if uid != os.getuid():
        sock.close()
        sys.stderr.write(f"trainingcost: the warm server at {address} runs as uid {uid}, not {os.getuid()}; "
                         "the job runs without it\n")
        return None
    return sock


def _start_server(workflow_pid: int) -> None:
    subprocess.Popen([sys.executable, "-m", "trainingcost.warm", "--serve", str(workflow_pid)],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)


def _exec_plain(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "trainingcost", *argv])


def client(argv: list[str]) -> None:
    """Run ``trainingcost ARGV`` in a child of the warm server, or, failing that, in this process (exec)."""
    for signum in FORWARDED:  # until a child exists to pass them to, a signal ends the client as it would any process
        signal.signal(signum, signal.SIG_DFL)
    value = os.environ.get(lifeline.ENV, "")
    if not sys.platform.startswith("linux") or not value.isdigit() or os.environ.get(ENV_OFF) == "0":
        _exec_plain(argv)
    workflow_pid = int(value)
    address = _address(workflow_pid)
    if address is None:
        _exec_plain(argv)
    sock = _connect(address)
    if sock is None and os.path.exists(address) and not _owned(address):
        _exec_plain(argv)  # a socket this user did not make: never wait on it
    if sock is None:
        _start_server(workflow_pid)
        deadline = time.monotonic() + CONNECT_S
        while sock is None and time.monotonic() < deadline and lifeline._alive(workflow_pid):
            time.sleep(0.05)
            sock = _connect(address)
    if sock is None:
        _exec_plain(argv)
    _relay(sock, argv)


def _owned(path: str) -> bool:
    try:
        return os.lstat(path).st_uid == os.getuid()
    except OSError:
        return True


def _relay(sock: socket.socket, argv: list[str]) -> None:
    child = {"pid": 0}
    pending: list[int] = []

    def forward(signum, frame):
        if child["pid"]:
            try:
                os.kill(child["pid"], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    try:  # the client dies with the job's shell (prctl(2)); its SIGTERM then reaches the child through forward()
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(lifeline.PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    _send(sock, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "client": os.getpid()},
          [sys.stdin.fileno() if sys.stdin else os.open(os.devnull, os.O_RDONLY), 1, 2])
    started, _ = _recv(sock)
    if started is None:
        sys.stderr.write("trainingcost: the warm server closed the connection before starting the job\n")
        os._exit(1)
    child["pid"] = started["pid"]
    for signum in pending:
        os.kill(child["pid"], signum)
    ended, _ = _recv(sock)
    if ended is None:  # the server died: the child, reparented, watches this process and ends when it does
        sys.stderr.write("trainingcost: the warm server ended before the job did\n")
        os._exit(1)
    status = ended["status"]
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(1)  # a blocked or ignored signal: fall through to an exit status as a shell reports it
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status))


# -- the server -------------------------------------------------------------------------------------------------------

def preload() -> bool:
    """Import everything `trainingcost train` imports before its first step (what each job's interpreter paid for).
    Returns whether the process can still fork cleanly: no Python thread may run beside the main one. The native
    threads the libraries start at import (OpenBLAS's pool under numpy; jemalloc's background thread and a pool under
    pyarrow) are stopped and re-created around a fork by the libraries' own pthread_atfork handlers, as for any
    multiprocessing fork of a numpy or pandas program."""
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import torch
    import torch.optim  # noqa: F401  (imports torch._dynamo)

    from . import cli  # noqa: F401
    from .analytic import catalogue  # noqa: F401
    from .io import write_parquet  # noqa: F401
    from .measure import provenance, run, trace  # noqa: F401

    del torch
    return threading.active_count() == 1


def serve(workflow_pid: int) -> None:
    address = _address(workflow_pid)
    if address is None:
        return
    lock = os.open(address[: -len(".sock")] + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # one server per workflow; released when this one ends
    except OSError:  # another server of this workflow is up
        os.close(lock)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)  # the socket is created mode 0600, never briefly open to others
    try:
        try:
            os.unlink(address)  # a socket left by a server that was killed
        except FileNotFoundError:
            pass
        listener.bind(address)
    finally:
        os.umask(old_mask)
    inode = os.stat(address).st_ino
    try:
        if preload():  # a fork copies one thread of many: refuse, and let the clients run the command themselves
            _serve(workflow_pid, listener, lock)
    finally:
        listener.close()
        try:
            if os.stat(address).st_ino == inode:
                os.unlink(address)
                os.unlink(address[: -len(".sock")] + ".lock")
        except OSError:
            pass
        os.close(lock)


def _serve(workflow_pid: int, listener: socket.socket, lock: int) -> None:
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    jobs: dict[int, socket.socket] = {}
    last = time.monotonic()
    while lifeline._alive(workflow_pid) and (jobs or time.monotonic() - last < IDLE_S):
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                if _peer_uid(conn) != os.getuid():  # another user: not a byte read, nothing forked
                    conn.close()
                    continue
                pid = _fork_job(conn, listener, selector, wake_read, wake_write, lock)
                if pid:
                    jobs[pid] = conn
                last = time.monotonic()
            else:
                try:
                    os.read(wake_read, 4096)
                except BlockingIOError:
                    pass
        for pid in list(jobs):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 1 << 8
            if done:
                conn = jobs.pop(pid)
                try:
                    _send(conn, {"status": status})
                except OSError:
                    pass
                conn.close()
                last = time.monotonic()


def _fork_job(conn, listener, selector, wake_read, wake_write, lock) -> int:
    request, fds = _recv(conn, with_fds=3)
    if request is None or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.close()
        return 0
    pid = os.fork()
    if pid == 0:
        try:
            selector.close()
            listener.close()
            conn.close()
            signal.set_wakeup_fd(-1)
            os.close(wake_read)
            os.close(wake_write)
            os.close(lock)
            _child(request, fds)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    return pid


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the job's process and run its command; never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["trainingcost", *request["argv"]]
    threading.Thread(target=lifeline._watch, args=(request["client"], 1.0), daemon=True).start()
    status = 1
    try:
        from .cli import run

        run()  # exits, or dies of the signal that interrupted it
    except KeyboardInterrupt:  # SIGINT before the command took it over: die of it, as a fresh process would
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a crash of the job: its traceback in its log, a failed exit
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]))
    else:
        client(sys.argv[1:])
