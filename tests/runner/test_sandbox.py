"""Solutions that reach outside their process, in the sandbox of kda_trace/sandbox.py, on the
CPU: each attempt of tests/runner/sandbox_attacks.py fails (its record PASSED, as it answers honestly when its
attempt failed), leaves nothing behind, and an honest solution of the same run passes."""

import ctypes
import errno
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from test_cheats import statuses  # records by solution name, from a run's trace files

from kda_trace import sandbox
from kda_trace.cli import main

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
ATTACKS = str(HERE / "sandbox_attacks.py")
NAMES = ("kills_others", "leaves_a_spinning_child", "reads_judge_memory", "writes_outside_scratch", "opens_a_socket",
         "reaches_a_unix_socket")

needs_sandbox = pytest.mark.skipif(sandbox.sandbox_support() != sandbox.SANDBOXED,
                                   reason=f"no sandbox here ({sandbox.sandbox_support()})")


def test_the_isolation_is_recorded():
    from kda_trace import environment

    env = environment.capture("cpu", 0, DS)
    assert env.isolation == sandbox.sandbox_support()
    assert sandbox.is_sandboxed(env.isolation) or env.isolation.startswith("none: ")


def test_a_sandbox_turned_off_says_so(monkeypatch):
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "off")
    assert sandbox.sandbox_support() == f"none: turned off ({sandbox.SANDBOX_ENV}=off)"


def _what_works() -> dict:
    """What this process may do with sockets and io_uring: each call's errno name, or 'ok'."""
    libc = ctypes.CDLL(None, use_errno=True)
    unix, inet, vsock = socket.AF_UNIX, socket.AF_INET, 40
    stream, dgram, seqpacket = socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET
    calls = {
        "socket(AF_UNIX, SOCK_STREAM)": lambda: socket.socket(unix, stream).close(),
        "socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC)": lambda: socket.socket(unix, dgram | socket.SOCK_CLOEXEC).close(),
        "socket(AF_VSOCK)": lambda: socket.socket(vsock, stream).close(),
        "socket(AF_INET)": lambda: socket.socket(inet, stream).close(),
        "socketpair(AF_UNIX, SOCK_STREAM)": lambda: [s.close() for s in socket.socketpair(unix, stream)],
        "socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)":
            lambda: [s.close() for s in socket.socketpair(unix, seqpacket | socket.SOCK_CLOEXEC)],
        "socketpair(AF_UNIX, SOCK_DGRAM)": lambda: [s.close() for s in socket.socketpair(unix, dgram)],
        "io_uring_setup": lambda: _syscall(libc, 425, 8, ctypes.create_string_buffer(120)),
        "socket(AF_UNIX) in a program it starts": lambda: subprocess.run(
            [sys.executable, "-c", "import socket; socket.socket(socket.AF_UNIX)"], check=True, capture_output=True),
    }
    if os.uname().machine == "x86_64":
        calls["socket(AF_UNIX) through the x32 ABI"] = lambda: _syscall(libc, 0x40000000 | 41, unix, stream, 0)
    works = {}
    for name, call in calls.items():
        try:
            call()
            works[name] = "ok"
        except OSError as e:
            works[name] = errno.errorcode.get(e.errno, str(e.errno))
        except subprocess.CalledProcessError as e:
            works[name] = e.stderr.decode().strip().splitlines()[-1]
    return works


def _syscall(libc, *args) -> None:
    fd = libc.syscall(*args)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "")
    os.close(fd)


def _in_a_child(work) -> str:
    """What `work()` returns (a str), run in a forked child that ends after it, so that a filter it installs stays
    there; '' when the child wrote nothing (it died, or `work` raised)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, work().encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read().decode()
    os.waitpid(pid, 0)
    return got


@pytest.mark.skipif(sandbox.SOCKET_FILTER is None, reason=sandbox.SANDBOXED)
def test_the_filter_refuses_its_calls_and_no_other():
    """In a forked child, which the filter stays with: Unix and vsock sockets, datagram socketpairs, io_uring and
    the x32 ABI refused; stream socketpairs and the network's sockets (the network namespace isolates them) not;
    the same in a program the child starts."""
    def work() -> str:
        sandbox.install_filter(sandbox._libc(), sandbox.SOCKET_FILTER)
        return json.dumps(_what_works())

    got = json.loads(_in_a_child(work) or "{}")
    refused = "PermissionError: [Errno 1] Operation not permitted"
    assert got == {
        "socket(AF_UNIX, SOCK_STREAM)": "EPERM", "socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC)": "EPERM",
        "socket(AF_VSOCK)": "EPERM", "socket(AF_INET)": "ok", "socketpair(AF_UNIX, SOCK_STREAM)": "ok",
        "socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC)": "ok", "socketpair(AF_UNIX, SOCK_DGRAM)": "EPERM",
        "io_uring_setup": "EPERM", "socket(AF_UNIX) in a program it starts": refused,
        **({"socket(AF_UNIX) through the x32 ABI": "EPERM"} if os.uname().machine == "x86_64" else {})}
    assert _what_works()["socket(AF_UNIX, SOCK_STREAM)"] == "ok"  # (this process unfiltered)


@pytest.mark.skipif(sandbox.SOCKET_FILTER is None, reason=sandbox.SANDBOXED)
def test_the_filter_reaches_threads_started_before_it():
    """The solution's process seals its sandbox after the CUDA driver has started threads of its own: those threads
    run under the filter too (an unfiltered one could be ptraced by a child, or driven through the process's memory,
    into making the socket)."""
    def work() -> str:
        sealed, done, said = threading.Event(), threading.Event(), []

        def earlier_thread():
            sealed.wait()
            try:
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
                said.append("ok")
            except OSError as e:
                said.append(errno.errorcode.get(e.errno, str(e.errno)))
            done.set()

        threading.Thread(target=earlier_thread, daemon=True).start()
        sandbox.install_filter(sandbox._libc(), sandbox.SOCKET_FILTER)
        sealed.set()
        done.wait(10)
        return said[0] if said else "no answer"

    assert _in_a_child(work) == "EPERM"


def test_a_cuda_driver_failing_under_the_filter_leaves_the_namespaces():
    """The probe's verdicts: on a GPU machine whose CUDA driver fails under the filter (started before it, as a
    solution's process starts it), the sandbox keeps its namespaces without the filter, and the record says why."""
    assert sandbox.isolation_of_probe(0, "sandboxed\n", "", True) == sandbox.SANDBOXED
    assert sandbox.isolation_of_probe(0, "sandboxed; cuda ok\n", "", True) == sandbox.SANDBOXED
    kept = sandbox.isolation_of_probe(0, "sandboxed; cuda fails: cuMemAlloc -> CUDA error 304\n", "", True)
    assert sandbox.is_sandboxed(kept) and not sandbox.is_sealed(kept) and "cuMemAlloc -> CUDA error 304" in kept
    assert sandbox.is_sealed(sandbox.SANDBOXED) == (sandbox.SOCKET_FILTER is not None)
    assert sandbox.isolation_of_probe(0, "sandboxed\n", "", False).startswith("none: ")
    assert sandbox.isolation_of_probe(3, "unshare: Operation not permitted\n", "", False) == \
        "none: unshare: Operation not permitted"
    assert not sandbox.is_sandboxed("none: turned off (KDA_TRACE_SANDBOX=off)")


class _FakeCuda:
    """libcuda as cuda_check calls it: every call returns 0 (CUDA_SUCCESS) but `failing`, which returns 304."""

    def __init__(self, failing=None):
        self.failing, self.called = failing, []

    def __getattr__(self, name):
        def call(*args):
            self.called.append(name)
            return 304 if name == self.failing else 0
        return call


@pytest.mark.parametrize("failing, said", [(None, "ok"), ("cuMemAlloc_v2", "cuMemAlloc -> CUDA error 304"),
                                           ("cuLaunchKernel", "cuLaunchKernel -> CUDA error 304")])
def test_the_probes_cuda_check_names_the_first_failing_call(monkeypatch, failing, said):
    fake = _FakeCuda(failing)
    monkeypatch.setattr(sandbox.os.path, "exists", lambda path: path == "/dev/nvidiactl" or os.access(path, os.F_OK))
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *a, **k: fake)
    check = sandbox.cuda_check()
    assert fake.called == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain"]  # before the seal
    assert check() == said
    assert fake.called.count("cuCtxSetCurrent") == 2  # this thread, then a new one


def test_the_probes_cuda_check_is_none_without_a_driver(monkeypatch):
    monkeypatch.setattr(sandbox.os.path, "exists", lambda path: False)
    assert sandbox.cuda_check() is None


def test_the_filter_is_known_for_x86_64_and_aarch64_only():
    assert sandbox.socket_filter("x86_64") and sandbox.socket_filter("aarch64")
    assert sandbox.socket_filter("x86_64", pointer_size=4) is None  # i386 or x32 Python: other numbers
    assert sandbox.socket_filter("riscv64") is None


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    out = tmp_path_factory.mktemp("sandbox")
    target = out / "outside_scratch.txt"
    # the judge's side of each socket: a TCP server, and Unix sockets that are files (a stream server, a datagram one)
    sockets = tempfile.mkdtemp(prefix="kda_trace_sockets_")  # a short path (a Unix socket's is 107 bytes at most)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(os.path.join(sockets, "judge.sock"))
    unix.listen(8)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind(os.path.join(sockets, "judge.dgram"))
    connected = []

    def accept():
        while not stop.is_set():
            for s in select.select([server, unix, dgram], [], [], 0.2)[0]:
                connected.append(s.recv(64) if s is dgram else s.accept())

    stop = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    mp = pytest.MonkeyPatch()
    mp.setenv("SANDBOX_TARGET_FILE", str(target))
    mp.setenv("SANDBOX_TARGET_PORT", str(server.getsockname()[1]))
    mp.setenv("SANDBOX_TARGET_UNIX", unix.getsockname())
    mp.setenv("SANDBOX_TARGET_UNIX_DGRAM", dgram.getsockname())
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--size", "all", "--timeout", "60",
            "--out", str(out / "run"), "--solution", f"{ATTACKS}::kills_others"]
    for name in NAMES[1:]:
        argv += ["--solution", f"{ATTACKS}::{name}"]
    argv += ["--solution", f"{ATTACKS}::kills_others"]  # (a second one: a sibling to kill)
    argv += ["--solution", str(HERE / "bad_solutions.py") + "::good"]
    try:
        code = main(argv)
    finally:
        mp.undo()
        stop.set()
        thread.join()
        for s in (server, unix, dgram):
            s.close()
        shutil.rmtree(sockets, ignore_errors=True)
    spinners = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"sandbox_attacks spinner" in Path(f"/proc/{pid}/cmdline").read_bytes():
                spinners.append(pid)
        except OSError:
            pass
    return {"code": code, "records": statuses(out / "run"), "target": target, "connected": connected,
            "spinners": spinners}


@needs_sandbox
def test_an_honest_solution_beside_the_attempts_passes(attacked):
    assert [ev["status"] for ev in attacked["records"]["good"]] == ["PASSED"] * 3
    assert attacked["code"] == 0


@needs_sandbox
@pytest.mark.parametrize("name", NAMES)
def test_each_attempt_fails_in_the_sandbox(attacked, name):
    if name == "reaches_a_unix_socket" and sandbox.SOCKET_FILTER is None:
        pytest.skip(f"no seccomp filter here ({sandbox.SANDBOXED})")
    got = attacked["records"][name]
    assert got and [ev["status"] for ev in got] == ["PASSED"] * len(got), [ev["log"][:200] for ev in got]
    assert all(ev["environment"]["isolation"] == sandbox.SANDBOXED for ev in got)


@needs_sandbox
def test_nothing_outside_the_sandbox_was_reached(attacked):
    assert not attacked["target"].exists()
    assert not attacked["connected"]
    assert not attacked["spinners"]  # the spinning child died with its solution's process


def _cuda_initialised_under(program) -> str:
    """cuInit in a forked child already under `program` (a seccomp-BPF program): 'ok' or the CUDA error."""
    def work() -> str:
        cuda = ctypes.CDLL("libcuda.so.1")
        sandbox.install_filter(sandbox._libc(), program)
        code = cuda.cuInit(0)
        return "ok" if code == 0 else f"cuInit -> CUDA error {code}"
    return _in_a_child(work) or "the child died"


def _driver_under_the_filter() -> str:
    """'ok' when the CUDA driver, started before the filter, works under it (as the sandbox probe checks it: work from
    two threads); then a line per rule of the filter: what cuInit says when it starts under that rule alone."""
    def sealed_late() -> str:
        check = sandbox.cuda_check()
        sandbox.install_filter(sandbox._libc(), sandbox.SOCKET_FILTER)
        return check() if check else "no CUDA driver here"

    lines = [_in_a_child(sealed_late)]
    refuse = 0x00050000 | errno.EPERM
    arch = sandbox.SOCKET_FILTER[1][3]
    ld, jeq, jset, jge, jgt, ret, allow = 0x20, 0x15, 0x45, 0x35, 0x25, 0x06, 0x7FFF0000
    known = sandbox.SYSCALLS[os.uname().machine][1:3]  # socket, socketpair
    rules = {  # each rule of socket_filter alone, everything else allowed
        "other ABIs": [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, refuse), (ld, 0, 0, 0),
                       (jset, 0, 1, 0x40000000), (ret, 0, 0, refuse), (ret, 0, 0, allow)],
        "io_uring": [(ld, 0, 0, 0), (jge, 0, 2, 425), (jgt, 1, 0, 427), (ret, 0, 0, refuse), (ret, 0, 0, allow)],
        "socket(AF_UNIX or AF_VSOCK)": [(ld, 0, 0, 0), (jeq, 0, 4, known[0]), (ld, 0, 0, 16), (jeq, 1, 0, 1),
                                        (jeq, 0, 1, 40), (ret, 0, 0, refuse), (ret, 0, 0, allow)],
        "socketpair but stream or seqpacket": [(ld, 0, 0, 0), (jeq, 0, 5, known[1]), (ld, 0, 0, 24), (0x54, 0, 0, 0xF),
                                               (jeq, 2, 0, 1), (jeq, 1, 0, 5), (ret, 0, 0, refuse), (ret, 0, 0, allow)],
    }
    lines.append(f"the CUDA driver initialising under the whole filter: {_cuda_initialised_under(sandbox.SOCKET_FILTER)}")
    lines += [f"  under the rule {name!r} alone: {_cuda_initialised_under(program)}" for name, program in rules.items()]
    return "\n".join(lines)


@pytest.mark.gpu
@pytest.mark.skipif(sandbox.SOCKET_FILTER is None, reason=sandbox.SANDBOXED)
def test_the_cuda_driver_works_under_the_filter_once_initialised(capsys):
    """The solution's process seals its sandbox after its CUDA context exists (solution_host.host_main): the driver
    then works under the filter. Printed: which single rule of the filter stops a driver that initialises under it
    (the reason for sealing late). In a new interpreter: a child forked from this one after an earlier test started
    CUDA here (a run's sandbox probe) could not start the driver."""
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_sandbox; print(test_sandbox._driver_under_the_filter())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    first, *rules = done.stdout.strip().splitlines()
    assert first == "ok", done.stdout
    with capsys.disabled():
        print("\n" + "\n".join(rules))
