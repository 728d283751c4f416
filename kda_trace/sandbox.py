"""The sandbox a solution's process runs in (Linux namespaces), and whether this machine allows one.

Used by solution_host (entering it) and environment (the records' `isolation`)."""

from __future__ import annotations

import errno
import functools
import os
import shutil
import signal
import struct
import sys
import tempfile
from typing import Callable, Optional, Sequence

SANDBOX_ENV = "KDA_TRACE_SANDBOX"
"""'off' in the environment: solution processes run without a sandbox (the environment's isolation says so)."""
SANDBOX_WRITABLE_ENV = "KDA_TRACE_SANDBOX_WRITABLE"
"""More directories a sandboxed solution may write (os.pathsep between them), e.g. a JIT compiler's cache."""
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MOUNT_OPTIONS = {"ro": _MS_RDONLY, "nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC,
                  "noatime": _MS_NOATIME, "nodiratime": _MS_NODIRATIME, "relatime": _MS_RELATIME}
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24


SYSCALLS = {"x86_64": (0xC000003E, 41, 53, 317), "aarch64": (0xC00000B7, 198, 199, 277)}
"""The machines the filter knows: (AUDIT_ARCH_*, the numbers of socket, socketpair and seccomp) of 64-bit processes."""


def socket_filter(machine: str, pointer_size: int = 8) -> Optional[list]:
    """The seccomp-BPF program (sock_filter tuples: code, jt, jf, k) that a sandboxed solution's processes run under,
    for a process of this machine (os.uname().machine) and pointer size, or None where we know no syscall numbers.

    It refuses (EPERM) what the network namespace does not separate, and allows everything else:
    - socket(AF_UNIX): a Unix socket that is a file (/run/..., /tmp/..., docker.sock, /dev/log, a judge's) is reached
      through the file system, which the sandbox sees (read-only does not stop a connect()). Without a new one, none
      can be connected to or sent to; socketpair() keeps working (multiprocessing's and asyncio's pipes), as a
      stream or seqpacket pair only: a datagram socket of a pair can still send to any path (sendto, sendmsg), and
      seccomp cannot read the address a call points to.
    - socket(AF_VSOCK): a virtual machine's sockets to its host, in no network namespace.
    - io_uring_setup, _enter and _register: io_uring's own socket and connect operations are not system calls, so
      they pass no seccomp filter.
    - every system call of another ABI than the process's own: the i386 one (int 0x80 on x86_64, whose socket and
      socketcall have other numbers) and x86_64's x32 one (numbers with bit 30 set: another socket()).
    Little-endian machines only: a system call's int argument is the low half of its seccomp_data.args slot."""
    if machine not in SYSCALLS or pointer_size != 8:
        return None
    arch, socket_nr, socketpair_nr, _ = SYSCALLS[machine]
    ld, jeq, jge, jgt, jset, and_, ret = 0x20, 0x15, 0x35, 0x25, 0x45, 0x54, 0x06  # BPF_LD|BPF_W|BPF_ABS, ...
    refuse, allow = 0x00050000 | errno.EPERM, 0x7FFF0000  # SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ALLOW
    af_unix, af_vsock, sock_stream, sock_seqpacket = 1, 40, 1, 5
    return [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch), (ret, 0, 0, refuse),
        (ld, 0, 0, 0),  # seccomp_data.nr
        (jset, 0, 1, 0x40000000), (ret, 0, 0, refuse),  # x32
        (jge, 0, 2, 425), (jgt, 1, 0, 427), (ret, 0, 0, refuse),  # io_uring_setup, _enter, _register (everywhere)
        (jeq, 0, 5, socket_nr),
        (ld, 0, 0, 16),  # args[0]: the family
        (jeq, 1, 0, af_unix), (jeq, 0, 1, af_vsock), (ret, 0, 0, refuse),
        (ret, 0, 0, allow),
        (jeq, 0, 5, socketpair_nr),
        (ld, 0, 0, 24), (and_, 0, 0, 0xF),  # args[1] & SOCK_TYPE_MASK: the type without its flags
        (jeq, 2, 0, sock_stream), (jeq, 1, 0, sock_seqpacket), (ret, 0, 0, refuse),
        (ret, 0, 0, allow),
    ]


_MACHINE, _POINTER_BITS = os.uname().machine if hasattr(os, "uname") else sys.platform, struct.calcsize("P") * 8
SOCKET_FILTER = socket_filter(_MACHINE, _POINTER_BITS // 8)
SANDBOXED = "sandbox: user+pid+mount+net namespaces" + (
    "+seccomp(no unix or vsock sockets, no io_uring)" if SOCKET_FILTER else
    f" (no seccomp filter: no system call numbers for {_MACHINE}, {_POINTER_BITS}-bit)")
"""A solution's sandbox on this machine, as environment.isolation records it."""
NAMESPACES_ONLY = "sandbox: user+pid+mount+net namespaces (no seccomp filter: {why})"
"""The sandbox where the filter is known but cannot be used here (the CUDA driver fails under it)."""


def is_sandboxed(isolation: str) -> bool:
    """Whether solution processes enter a sandbox (enter_sandbox) under this environment.isolation."""
    return isolation.startswith("sandbox:")


def is_sealed(isolation: str) -> bool:
    """Whether they also run under SOCKET_FILTER (seal_sandbox) under this environment.isolation."""
    return isolation == SANDBOXED and SOCKET_FILTER is not None


class SandboxUnavailable(OSError):
    """This machine does not let a process make the namespaces of the sandbox."""


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        err = ctypes.get_errno()
        raise SandboxUnavailable(err, f"{what}: {os.strerror(err)}")


def triton_cache_dir() -> str:
    """Where Triton keeps compiled kernels for this process (TRITON_CACHE_DIR, else ~/.triton/cache)."""
    return os.environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")


def sandbox_writable(workdir: str, own: Sequence[str] = ()) -> list:
    """What a sandboxed solution may write besides a private /dev/shm: its work directory (TMPDIR too) and its other
    directories `own` (its outputs' folder in /dev/shm), Triton's kernel cache (shared by the solutions of a run: each
    process would compile every kernel again otherwise) and the directories in SANDBOX_WRITABLE_ENV."""
    triton = triton_cache_dir()
    extra = [p for p in os.environ.get(SANDBOX_WRITABLE_ENV, "").split(os.pathsep) if p]
    paths = [workdir, *own, triton, *extra]
    try:
        os.makedirs(triton, exist_ok=True)
    except OSError:
        paths.remove(triton)
    return [os.path.realpath(p) for p in paths if os.path.isdir(p)]


def enter_sandbox(workdir: str, own: Sequence[str] = (), seal: bool = True) -> None:
    """Put this process's future in a sandbox of its own (Linux): it forks the first process of new user, PID, mount
    and network namespaces, which forks the solution's process and returns there; the other two wait and end as it
    did. The solution's process then sees only its own namespace's processes, cannot signal, ptrace or read the
    memory of any process outside (the judge, other solutions), has no network (a loopback interface, down), sees /
    read-only but for `sandbox_writable` and a private /dev/shm, cannot take those mounts back (it keeps no
    capability, and no program it starts gets one), and everything it starts dies with it. Where SOCKET_FILTER has
    this machine's system call numbers, every process of the namespace runs under that seccomp filter (no new Unix
    or vsock socket, no io_uring): the namespace's first process installs it as soon as it has forked the solution's
    process, and that process by `seal_sandbox()` once its CUDA context exists and before any solution code runs
    (the CUDA driver does not initialise under it: cudaGetDeviceCount failed on an H200, driver 580); an unfiltered
    process of the same user in the namespace could be ptraced (Yama's ptrace_scope 0) into making the socket. Raises
    SandboxUnavailable (this process unchanged) where the machine allows no namespaces; a failure after that ends
    the process with status 70 and a line on stderr (sandbox_support runs the same steps first, and says why).

    Namespaces for the isolation, and a seccomp filter only for what they leave open: a filter can refuse kill()
    and ptrace(), but not tell the judge's files from the solution's or its processes from others'; and the
    namespaces need no binary (bubblewrap is often absent). Cost: 13-19 ms from the call to the solution's process
    running in the sandbox (H200 machine and a 2-core CPU machine), against seconds for the process to import torch
    and start its CUDA context."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(0, "not Linux")
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET
    _check(libc.unshare(flags | _CLONE_NEWUSER), "unshare(user, pid, mount, net namespaces)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except FileNotFoundError:
            pass
        except OSError as e:  # in namespaces now, but without a user mapping: no way back
            print(f"kda_trace: a solution's sandbox could not be set up: writing /proc/self/{name}: {e.strerror}",
                  file=sys.stderr)
            os._exit(70)
    keep = sandbox_writable(workdir, own)
    status_r, status_w = os.pipe()  # the solution's process's end, as the first process of the namespace saw it
    _fork_and_wait(status_r=status_r)  # this process waits there and ends as the solution's process did
    os.close(status_r)
    try:
        _mounts(libc, keep)
        _drop_capabilities(libc)
    except SandboxUnavailable as e:  # the probe (sandbox_support) made the same calls: not expected
        print(f"kda_trace: a solution's sandbox could not be set up: {e}", file=sys.stderr)
        os._exit(70)
    # the first process of a PID namespace ignores the signals it sends itself (os.kill(os.getpid(), SIGSEGV) would
    # not end it) and adopts the namespace's orphans: the solution runs in a child of it
    _fork_and_wait(status_w=status_w, parent_first=seal_sandbox if seal else None)
    os.close(status_w)
    scratch = os.path.join(workdir, "tmp")
    os.makedirs(scratch, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = scratch


def _fork_and_wait(status_r: Optional[int] = None, status_w: Optional[int] = None,
                   parent_first: Optional[Callable[[], None]] = None) -> bool:
    """Fork. The parent runs `parent_first()`, then waits for the child (reaping any other process that becomes its
    child meanwhile) and ends as the child did (with `status_w`: writes the child's exit code there first; with
    `status_r`: ends with the code read there, when there is one). The child, which dies with its parent, returns
    False."""
    alive_r, alive_w = os.pipe()  # end of file on alive_r: the parent has died
    child = os.fork()
    if child == 0:
        from .reaper import die_with_parent

        os.close(alive_w)
        die_with_parent()
        import select

        if select.select([alive_r], [], [], 0)[0]:  # the parent died before the request above
            os._exit(1)
        os.close(alive_r)
        return False
    os.close(alive_r)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_first is not None:
        parent_first()
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            break
    code = os.waitstatus_to_exitcode(status)
    if status_w is not None:
        os.write(status_w, str(code).encode())
    if status_r is not None:
        os.set_blocking(status_r, False)
        try:
            told = os.read(status_r, 32)
            code = int(told) if told else code
        except (OSError, ValueError):
            pass
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 1)


def _mounts(libc, keep: list) -> None:
    """/ read-only (every mount in it) but `keep`, a private /dev/shm, /proc of the new PID namespace. /tmp stays
    as it is, read-only (a dataset or a solution file may live there): the solution's temporary files go to its
    work directory (TMPDIR). A kept directory under /dev/shm is bound through a descriptor opened before the
    private /dev/shm hides it."""
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "making / private")
    handles = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep}
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:
        point = fields[4].encode().decode("unicode_escape")  # \040 for a space
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        for option in fields[5].split(","):
            flags |= _MOUNT_OPTIONS.get(option, 0)
        if libc.mount(None, point.encode(), None, flags, None) != 0 and "ro" not in fields[5].split(","):
            import ctypes

            err = ctypes.get_errno()
            if err != 2:  # ENOENT: a mount point hidden under a later mount
                raise SandboxUnavailable(err, f"remounting {point} read-only: {os.strerror(err)}")
    if os.path.isdir("/dev/shm"):
        libc.mount(b"none", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=1777")
    for path, fd in handles.items():
        os.makedirs(path, exist_ok=True)  # a mount point in the private /dev/shm
        _check(libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, _MS_BIND | _MS_REC, None),
               f"binding {path}")
        os.close(fd)
        _check(libc.mount(None, path.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV, None),
               f"making {path} writable")
    _check(libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mounting /proc")


def _drop_capabilities(libc) -> None:
    """No capability left, none to gain by running a program: the mounts cannot be undone."""
    import ctypes

    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            _check(-1, f"dropping capability {cap} from the bounding set")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: none, twice (64 bits)
    _check(libc.capset(header, data), "capset")


_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1


def install_filter(libc, program: list) -> None:
    """Run this process, every thread it has (SECCOMP_FILTER_FLAG_TSYNC: the CUDA driver's, started before) and
    every process it starts from now on, under the seccomp-BPF `program` (no way back); then check that each of its
    threads reports the filter. With no_new_privs, which an unprivileged process needs to install one. A thread left
    unfiltered could be made to open the socket: by a child that ptraces it, or through this process's memory."""
    import ctypes

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    code = (SockFilter * len(program))(*program)
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if _MACHINE not in SYSCALLS:
        raise SandboxUnavailable(0, f"installing the seccomp filter: no seccomp() number for {_MACHINE}")
    number = SYSCALLS[_MACHINE][3]  # seccomp(), not prctl(): only it can put the filter on every thread
    fprog = SockFprog(len(program), code)
    got = libc.syscall(ctypes.c_long(number), ctypes.c_ulong(_SECCOMP_SET_MODE_FILTER),
                       ctypes.c_ulong(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if got > 0:
        raise SandboxUnavailable(0, f"installing the seccomp filter: thread {got} could not take it")
    _check(got, "installing the seccomp filter")
    unfiltered = [task for task in os.listdir("/proc/self/task") if not _filtered(task)]
    if unfiltered:
        raise SandboxUnavailable(0, f"installing the seccomp filter: threads {unfiltered} do not report it")


def _filtered(task: str) -> bool:
    """Whether thread `task` of this process runs under a seccomp filter (a thread gone meanwhile counts as one)."""
    try:
        return _filtered_status(f"/proc/self/task/{task}/status")
    except FileNotFoundError:
        return True


def _filtered_status(path: str) -> bool:
    """Whether the /proc status file at `path` says its thread or process runs under a seccomp filter."""
    with open(path) as f:
        return any(line.split() == ["Seccomp:", "2"] for line in f)


def seal_sandbox() -> None:
    """Put this process, a sandbox's (enter_sandbox), under SOCKET_FILTER where the machine has one; nothing
    elsewhere. A failure ends the process with status 70 and a line on stderr: it is in the namespaces already, and
    sandbox_support ran the same steps first."""
    if not SOCKET_FILTER:
        return
    try:
        install_filter(_libc(), SOCKET_FILTER)
        _first_process_sealed()
    except SandboxUnavailable as e:
        print(f"kda_trace: a solution's sandbox could not be set up: {e}", file=sys.stderr)
        os._exit(70)


def _first_process_sealed(wait_s: float = 10.0) -> None:
    """Wait until the namespace's first process (pid 1 in the sandbox's /proc), which seals itself just after forking
    this one, runs under the filter: no process of the sandbox may be without it once solution code runs."""
    import time

    ends = time.monotonic() + wait_s
    while not _filtered_status("/proc/1/status"):
        if time.monotonic() > ends:
            raise SandboxUnavailable(0, "the namespace's first process did not take the seccomp filter")
        time.sleep(0.001)


def unix_socket_made() -> bool:
    """Whether this process can make a Unix socket (refused under SOCKET_FILTER)."""
    import socket

    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
        return True
    except OSError:
        return False


def sandbox_support() -> str:
    """SANDBOXED where solution processes get a sandbox here (enter_sandbox, tried once per process in a throwaway
    process), else 'none: <why>'. Where the sandbox is missing, solutions run as before, and the records say so
    (environment.isolation)."""
    if os.environ.get(SANDBOX_ENV, "").lower() in ("0", "off", "no", "false"):
        return f"none: turned off ({SANDBOX_ENV}={os.environ[SANDBOX_ENV]})"
    return _probe_sandbox()


@functools.lru_cache(maxsize=None)
def _probe_sandbox() -> str:
    if not sys.platform.startswith("linux"):
        return f"none: not Linux ({sys.platform})"
    import subprocess

    workdirs = [tempfile.mkdtemp(prefix="kda_trace_probe_")]
    try:  # a directory under /dev/shm too, as solutions' outputs go there (solution_host.ram_dir)
        workdirs.append(tempfile.mkdtemp(prefix="kda_trace_probe_", dir="/dev/shm"))
    except OSError:
        pass
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE, *workdirs], capture_output=True, text=True, timeout=60)
        written = all(os.path.exists(os.path.join(w, "probe")) for w in workdirs)
    except (OSError, subprocess.SubprocessError) as e:
        return f"none: the probe did not run ({type(e).__name__}: {e})"
    finally:
        for w in workdirs:
            shutil.rmtree(w, ignore_errors=True)
    return isolation_of_probe(probe.returncode, probe.stdout, probe.stderr, written)


def isolation_of_probe(code: int, stdout: str, stderr: str, written: bool) -> str:
    """environment.isolation from the probe's exit code, its output and whether its files reached its directories."""
    said = stdout.strip()
    if code == 0 and (said in ("sandboxed", "sandboxed; cuda ok") or said.startswith("sandboxed; cuda fails: ")):
        if not written:
            return "none: the probe's files did not reach the directories it was given"
        if said.startswith("sandboxed; cuda fails: "):
            return NAMESPACES_ONLY.format(why=f"the CUDA driver fails under it, {said.split(': ', 1)[1]}")[:300]
        return SANDBOXED
    why = (said or stderr.strip().splitlines()[-1:] or [f"exit {code}"])
    return f"none: {why if isinstance(why, str) else why[0]}"[:300]


_PROBE = """
import os, sys
from kda_trace.sandbox import SOCKET_FILTER, SandboxUnavailable, cuda_check, enter_sandbox, seal_sandbox, unix_socket_made
try:
    enter_sandbox(sys.argv[1], sys.argv[2:])
except SandboxUnavailable as e:
    print(e.strerror or e)
    sys.exit(3)
cuda = cuda_check()  # a GPU machine: the driver started before the filter, as a solution's process starts it
seal_sandbox()
cuda_said = cuda() if cuda else ""
for folder in sys.argv[1:]:  # its directories: writable
    open(os.path.join(folder, "probe"), "w").close()
if os.access("/", os.W_OK):
    print("/ is writable in the sandbox")
elif os.getpid() != 2:
    print("not in a PID namespace of its own")
elif SOCKET_FILTER and unix_socket_made():
    print("socket(AF_UNIX) works in the sandbox: its seccomp filter did not take")
elif cuda_said and cuda_said != "ok":
    print("sandboxed; cuda fails: " + cuda_said)
else:
    print("sandboxed; cuda ok" if cuda_said else "sandboxed")
"""


_EMPTY_KERNEL_PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry k()
{
    ret;
}
"""


def cuda_check() -> Optional[Callable[[], str]]:
    """On a machine with an NVIDIA driver: start the CUDA driver in this process now (cuInit, the first device's
    primary context) and return a check to run once the sandbox is sealed ('ok', or the first CUDA call that failed:
    memory allocated and set, a kernel loaded from PTX (the driver compiles it) and launched, from this thread and
    from a new one); None where there is no driver."""
    import ctypes
    import threading

    if not os.path.exists("/dev/nvidiactl"):
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device, context = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 0) or cuda.cuDevicePrimaryCtxRetain(
            ctypes.byref(context), device):
        return None  # no usable GPU here: nothing to check

    def steps() -> str:
        pointer, module, kernel = ctypes.c_uint64(), ctypes.c_void_p(), ctypes.c_void_p()
        one = ctypes.c_uint(1)
        for name, call in (("cuCtxSetCurrent", lambda: cuda.cuCtxSetCurrent(context)),
                           ("cuMemAlloc", lambda: cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(1 << 20))),
                           ("cuMemsetD8", lambda: cuda.cuMemsetD8_v2(pointer, 0, ctypes.c_size_t(1 << 20))),
                           ("cuModuleLoadData", lambda: cuda.cuModuleLoadData(ctypes.byref(module), _EMPTY_KERNEL_PTX)),
                           ("cuModuleGetFunction", lambda: cuda.cuModuleGetFunction(ctypes.byref(kernel), module, b"k")),
                           ("cuLaunchKernel", lambda: cuda.cuLaunchKernel(kernel, one, one, one, one, one, one,
                                                                          ctypes.c_uint(0), None, None, None)),
                           ("cuCtxSynchronize", lambda: cuda.cuCtxSynchronize()),
                           ("cuModuleUnload", lambda: cuda.cuModuleUnload(module)),
                           ("cuMemFree", lambda: cuda.cuMemFree_v2(pointer))):
            code = call()
            if code:
                return f"{name} -> CUDA error {code}"
        return "ok"

    def check() -> str:
        said = [steps()]
        thread = threading.Thread(target=lambda: said.append(steps()))
        thread.start()
        thread.join(60)
        return next((s for s in said[:1] + said[1:2] if s != "ok"), "ok" if len(said) == 2 else "a new thread hung")

    return check


# ============================================================================ the worker's side
