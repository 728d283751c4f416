"""Several workers on one GPU: untimed work side by side, timing alone.

Most of an evaluation is not timed: making input sets, the reference, the solution's first call, moving outputs
between processes, comparing them. On one GPU those steps of several workers can run at once; a timing loop cannot
share the GPU with anything. A worker on a shared GPU therefore holds its turn in one of two ways: `share()` for
untimed work (any number of workers at once) and `alone()` for a timing loop, the reference's timing, the copy
bandwidth measurement and a solution process's first call on a definition (compilation and autotuning): no other
worker holds a turn of either kind, and the other workers' solution processes are stopped between their requests
(solution_host.SolutionHost.request). A worker asking to be alone is let in as soon
as the workers sharing reach their next step (`let_others_time`), and no new sharer gets in before it: timing never
waits for more than one step of another worker.

A workload too large to share the GPU's memory is evaluated with the whole task alone: it begins once the other
workers' tasks have ended (a worker waiting for its turn still holds its task's input sets and references) and no
other task begins before it ends.

Each turn is two `flock` files, a gate and a turn: a sharer passes the gate and takes the turn shared, a worker alone
holds the gate and takes the turn exclusively. The kernel drops a dead process's locks, so a worker killed by its
timeout blocks nobody (the runner kills its solutions' processes first: runner.Runner._stop). The files live in the runner's own folder under /dev/shm, which no sandboxed solution
process sees (its /dev/shm is private): a solution cannot take the lock and stall the other workers.
"""

from __future__ import annotations

import fcntl
import os
from typing import Optional


class _Turn:
    """A readers-writer lock with writer preference, from two flock files: a gate and a turn."""

    def __init__(self, base: str):
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        self._gate = os.open(base + ".gate", flags, 0o600)
        self._turn = os.open(base + ".turn", flags, 0o600)
        self.held: Optional[str] = None

    def take(self, alone: bool) -> None:
        want = "alone" if alone else "shared"
        if self.held == want:
            return
        self.release()
        fcntl.flock(self._gate, fcntl.LOCK_EX)  # a sharer: behind any worker waiting to be alone
        if alone:
            fcntl.flock(self._turn, fcntl.LOCK_EX)
        else:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
            fcntl.flock(self._turn, fcntl.LOCK_SH)
        self.held = want

    def release(self) -> None:
        if self.held is not None:
            fcntl.flock(self._turn, fcntl.LOCK_UN)
        if self.held == "alone":
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.held = None

    def close(self) -> None:
        self.release()
        os.close(self._gate)
        os.close(self._turn)


class GpuTurns:
    """One worker's hold on a GPU shared with other workers (see the module docstring): a turn per task, and one per
    step of the task."""

    def __init__(self, folder: str, device: str):
        base = os.path.join(folder, "gpu-" + device.replace(":", "-"))
        self._task, self._step = _Turn(base + ".task"), _Turn(base + ".step")

    @property
    def held(self) -> Optional[str]:
        """The step's turn: None, "shared" or "alone"."""
        return self._step.held

    @property
    def task_held(self) -> Optional[str]:
        """The task's turn: None, "shared" or "alone"."""
        return self._task.held

    def begin_task(self, alone: bool) -> None:
        """A task begins: shared with the other workers' tasks, or alone (when no other worker is in a task: their
        memory is given back between tasks)."""
        self._task.take(alone)
        self._step.take(alone)

    def end_task(self) -> None:
        self._step.release()
        self._task.release()

    def share(self) -> None:
        """Hold a shared turn for a step (waits while another worker is, or waits to be, alone)."""
        self._step.take(False)

    def alone(self) -> None:
        """Hold the GPU alone for a step (waits for the sharers' current steps to end; keeps new ones out meanwhile)."""
        self._step.take(True)

    def let_others_time(self) -> None:
        """Between two steps of shared work: a worker waiting to be alone goes first."""
        if self._step.held == "shared":
            self._step.release()
            self._step.take(False)

    def close(self) -> None:
        self._step.close()
        self._task.close()


def turns_folder() -> str:
    """A new folder for a run's turn files: under /dev/shm where there is one (out of the sandboxes' sight)."""
    import tempfile

    return tempfile.mkdtemp(prefix="kda_trace_gpu_turns_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
