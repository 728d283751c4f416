"""Processes that solutions leave behind.

A solution's process can start a process of its own that outlives it (a detached daemon: a double fork, a new
session) and rewrites the run's records after the runner is done with them, or keeps the GPU busy while other
solutions are timed. On Linux the runner makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER): every
orphan among its descendants, double-forked and setsid'd ones included, becomes its child instead of init's.
`Runner.run` kills such strays while the run goes on and every process it did not have before the run at its
end, before the trace files are written for the last time. Processes handed to another service (cron,
systemd-run, at) are out of its reach. Elsewhere than Linux nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Dict, Iterable, List, Optional, Set

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
SOLUTION_ENV = "KDA_TRACE_SOLUTION"  # the solution spec, set in its process's environment (solution_host.host_main)


def die_with_parent() -> None:
    """Ask Linux to kill this process (SIGKILL) when the thread that started it ends: a runner killed outright
    (`timeout -k`, the OOM killer) must not leave its workers, and a worker killed for a timeout must not leave
    its solution's process, running on the GPU. Nothing elsewhere than Linux."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> Dict[int, List[int]]:
    """{parent pid: [child pids]} of every live process in /proc (empty without /proc); zombies (exited, not yet
    reaped) are left out."""
    kids: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return kids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses
        if len(fields) > 1 and fields[0] != b"Z":
            kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def descendants(pid: Optional[int] = None, roots: Optional[Iterable[int]] = None) -> List[int]:
    """Every descendant of pid (default: this process), or of the given roots and the roots themselves."""
    kids = _children()
    todo = list(roots) if roots is not None else list(kids.get(pid or os.getpid(), []))
    seen: List[int] = []
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(kids.get(p, []))
    return seen


def describe(pid: int) -> str:
    """'pid N: command line' (as much as /proc shows), and the solution whose process it descends from when its
    environment still says so (SOLUTION_ENV; a process can clear its environment)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = " ".join(f.read().replace(b"\0", b" ").decode("utf-8", "replace").split())
    except OSError:
        cmd = ""
    owner = ""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(SOLUTION_ENV.encode() + b"="):
                    owner = f", started under solution {item.split(b'=', 1)[1].decode('utf-8', 'replace')[:200]}"
    except OSError:
        pass
    return f"pid {pid}: {cmd[:160] or '?'}{owner}"


def _tracker_pid() -> Optional[int]:
    """multiprocessing's resource tracker of this process (ours, started by the spawn context), if running."""
    try:
        from multiprocessing import resource_tracker

        return getattr(resource_tracker._resource_tracker, "_pid", None)
    except Exception:  # noqa: BLE001 - a private attribute: absent in some Python versions
        return None


_killed: Set[int] = set()  # pids this process killed: not described again while they wait to be reaped


def kill_strays(keep: Set[int], direct_only: bool) -> List[str]:
    """SIGKILL the processes under this one that are not in keep (nor multiprocessing's resource tracker) with
    everything under them, reap them, and describe them. direct_only: only this process's own children are
    judged (their descendants go with them): the orphans that came to this subreaper, not the worker processes'
    children, which are live solutions."""
    _reap()
    keep = set(keep) | _killed | {p for p in [_tracker_pid()] if p}
    me = os.getpid()
    judged = _children().get(me, []) if direct_only else descendants(me)
    strays = [p for p in judged if p not in keep]
    if not strays:
        return []
    return kill_trees(strays)


def kill_trees(roots: Iterable[int]) -> List[str]:
    """SIGKILL the roots and everything under them, reap what became our children; each one described."""
    doomed = descendants(roots=roots)
    found = [describe(p) for p in doomed]
    for _ in range(10):  # a process may fork while it is being killed: kill until nothing new appears
        for p in doomed:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        more = [p for p in descendants(roots=doomed) if p not in doomed]
        if not more:
            break
        doomed += more
        found += [describe(p) for p in more]
    _killed.update(doomed)
    _reap()
    return found


def wait_exited(pids: Iterable[int], timeout_s: float = 10.0) -> None:
    """Wait (up to `timeout_s`) until each process has exited: gone, or a zombie (its memory and devices released)."""
    import time

    deadline = time.monotonic() + timeout_s
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if process_state(p) not in (None, "Z", "X")]
        if left:
            time.sleep(0.01)


def process_state(pid: int) -> Optional[str]:
    """The state letter of a process in /proc (R, S, T, Z, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _reap() -> None:
    """waitpid the killed processes that became our children (never multiprocessing's own children)."""
    for p in list(_killed):
        try:
            done, _ = os.waitpid(p, os.WNOHANG)
        except ChildProcessError:  # not (or no longer) our child: gone, or reaped by another parent
            if not os.path.exists(f"/proc/{p}"):
                _killed.discard(p)
            continue
        if done:
            _killed.discard(p)
