"""Solutions that reach outside their own process: test fixtures for tests/runner/test_sandbox.py.

Each computes the honest answer (cheats.py's base) and, on every call, tries one thing; it returns zeros when
the attempt worked, so that a PASSED record means the attempt failed. Targets come from the environment
(SANDBOX_TARGET_FILE, SANDBOX_TARGET_PORT, SANDBOX_TARGET_UNIX, SANDBOX_TARGET_UNIX_DGRAM).

| fixture | tries |
|---|---|
| kills_others | SIGKILL to every process it sees that is not its own or its children (the judge, other solutions) |
| leaves_a_spinning_child | starts a child that spins a CPU core (a GPU-loading one would do the same on a GPU); worked if the child was never stopped |
| reads_judge_memory | reads the memory of the processes it sees (/proc/PID/mem at a mapped address) |
| writes_outside_scratch | writes SANDBOX_TARGET_FILE |
| opens_a_socket | connects to 127.0.0.1:SANDBOX_TARGET_PORT (a server of the test's) |
| reaches_a_unix_socket | connects to SANDBOX_TARGET_UNIX and sends to SANDBOX_TARGET_UNIX_DGRAM (Unix sockets of the test's, files on disk), from a new socket and from a socketpair's; sets up an io_uring (which could make and connect sockets itself); raises when an attempt failed for another reason than being refused (a target it could not see would prove nothing), or when socketpair() does not work |
"""

import errno
import os
import signal
import socket
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cheats import _base_outputs, supports  # noqa: E402, F401


def _answer(worked: bool, inputs):
    out = _base_outputs(**inputs)
    return {k: torch.zeros_like(v) for k, v in out.items()} if worked else out


def _others():
    mine = {os.getpid()}
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid in mine:
            mine.add(pid)
    return [p for p in pids if p not in mine and p != 1]


def kills_others(**inputs):
    worked = False
    for pid in _others():
        try:
            os.kill(pid, signal.SIGKILL)
            worked = True
        except OSError:
            pass
    return _answer(worked, inputs)


_children = []
_SPINNER = """
import os, sys, time
last = time.monotonic()
while True:  # sandbox_attacks spinner
    now = time.monotonic()
    if now - last > 0.2:  # it was stopped for a while
        open(sys.argv[1], "w").close()
    last = now
"""


def leaves_a_spinning_child(**inputs):
    """Judged on the calls of a later workload than the first (others were judged in between): the attempt worked
    when the child ran all along, never stopped for a while."""
    import tempfile

    flag = os.path.join(tempfile.gettempdir(), "spinner_was_stopped")
    shapes = tuple(tuple(v.shape) for v in inputs.values() if isinstance(v, torch.Tensor))
    if not _children:
        _children.append((subprocess.Popen([sys.executable, "-c", _SPINNER, flag]), shapes))
    return _answer(shapes != _children[0][1] and not os.path.exists(flag), inputs)


def reads_judge_memory(**inputs):
    worked = False
    for pid in _others():
        try:
            with open(f"/proc/{pid}/maps") as f:
                start = int(f.readline().split("-")[0], 16)
            with open(f"/proc/{pid}/mem", "rb") as f:
                f.seek(start)
                worked = worked or len(f.read(16)) == 16
        except (OSError, ValueError):
            pass
    return _answer(worked, inputs)


def writes_outside_scratch(**inputs):
    try:
        with open(os.environ["SANDBOX_TARGET_FILE"], "w") as f:
            f.write("written by a solution")
        worked = True
    except OSError:
        worked = False
    return _answer(worked, inputs)


def opens_a_socket(**inputs):
    try:
        with socket.create_connection(("127.0.0.1", int(os.environ["SANDBOX_TARGET_PORT"])), timeout=1):
            worked = True
    except OSError:
        worked = False
    return _answer(worked, inputs)


def _attempt(what, attempt, refused=(errno.EPERM, errno.EACCES)):
    """Whether `attempt()` worked; raises when it failed for another reason than one of `refused`."""
    try:
        attempt()
        return True
    except OSError as e:
        if e.errno not in refused:
            raise RuntimeError(f"{what} failed, but not by being refused: {e}") from e
        return False


def _io_uring_setup():
    import ctypes

    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = ctypes.CDLL(None, use_errno=True).syscall(425, 8, params)  # io_uring_setup (the same number everywhere)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    os.close(fd)


def _send_from_socketpair(path):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)  # a datagram socket can send to any address
    with a, b:
        a.sendto(b"from a solution", path)


def _connect_from_socketpair(path):
    a, b = socket.socketpair()
    with a, b:
        b.close()
        a.connect(path)


def reaches_a_unix_socket(**inputs):
    a, b = socket.socketpair()  # what multiprocessing and asyncio use: must keep working
    with a, b:
        a.sendall(b"x")
        assert b.recv(1) == b"x"
    stream, dgram = os.environ["SANDBOX_TARGET_UNIX"], os.environ["SANDBOX_TARGET_UNIX_DGRAM"]

    def connect():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(stream)

    def send():
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(b"from a solution", dgram)

    tries = [_attempt("connect", connect), _attempt("sendto", send),
             _attempt("sendto from a socketpair", lambda: _send_from_socketpair(dgram)),
             _attempt("connect from a socketpair", lambda: _connect_from_socketpair(stream), (errno.EISCONN,)),
             _attempt("io_uring_setup", _io_uring_setup)]
    return _answer(any(tries), inputs)
