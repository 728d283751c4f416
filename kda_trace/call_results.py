"""What a call left behind, said the same way by the worker and by a solution's process: outputs by name,
host copies, CUDA faults, short tracebacks and how a process ended."""

from __future__ import annotations

import signal
import traceback
from typing import Any, Dict, Optional, Tuple

from .schema import Definition

HOST_STARTING = "starting the solution's process"
"""The phase name while a solution's process starts (the main process allows it the worker start-up time)."""
WAITING_FOR_GPU = "waiting for the GPU"
"""A worker that shares its GPU, waiting for its turn (gpu_turns.py): no deadline runs meanwhile."""
HIDDEN_WORK_LOG = "timing: CUDA events on the caller's stream measured"
"""How the REWARD_HACK of the host clock's excess over the CUDA events begins (timing.py): the one check that other
processes' GPU work can trip, so on a shared GPU it stands only once confirmed with the GPU alone."""

def to_host(values: Dict[str, Any]) -> Dict[str, Any]:
    """Every tensor moved to host memory (the GPU copies are freed when the caller drops them)."""
    import torch

    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def is_fatal_cuda_error(e: BaseException) -> bool:
    text = f"{type(e).__name__}: {e}"
    return any(s in text for s in ("CUDA error", "illegal memory access", "AcceleratorError",
                                   "device-side assert", "unspecified launch failure"))


OUT_OF_GPU_MEMORY_HINT = ("[out of GPU memory: this machine's GPU is too small for the workload, or for the runner's "
                          "copies of it; --inputs-on-host keeps no input set on the GPU between calls]")


def is_out_of_gpu_memory(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or the CUDA driver's own (a new process's context did not fit: torch raises that
    from torch.cuda.set_device as an AcceleratorError)."""
    import torch

    return isinstance(e, torch.OutOfMemoryError) or "CUDA error: out of memory" in str(e)


def short_traceback(e: BaseException, limit: int = 6) -> str:
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    tail = "".join(lines[-limit:]).strip()
    # said first: the error's own text is long and gets cut in tables
    hint = OUT_OF_GPU_MEMORY_HINT + " " if is_out_of_gpu_memory(e) else ""
    return f"{hint}{type(e).__name__}: {e}\n{tail}"


def normalize_outputs(definition: Definition, result: Any) -> Tuple[Optional[Dict[str, Any]], str]:
    """Outputs by name from a tuple / list (output order), a dict, or one tensor; (None, why) otherwise."""
    names = list(definition.outputs)
    if isinstance(result, dict):
        missing = [n for n in names if n not in result]
        extra = [n for n in result if n not in names]
        if missing or extra:
            return None, f"returned a dict with missing outputs {missing} / unknown keys {extra}"
        return {n: result[n] for n in names}, ""
    if isinstance(result, (tuple, list)):
        if len(result) != len(names):
            return None, f"returned {len(result)} outputs, the definition has {len(names)} ({', '.join(names)})"
        return dict(zip(names, result)), ""
    if len(names) == 1:
        return {names[0]: result}, ""
    return None, f"returned one {type(result).__name__}, the definition has {len(names)} outputs ({', '.join(names)})"


def describe_exit(code: Optional[int]) -> str:
    """'exit code 3' or 'killed by SIGSEGV'."""
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            name = signal.Signals(-code).name
            # the kernel's out-of-memory killer sends SIGKILL; a hang is killed by the runner, which says so
            return f"killed by {name}" + (" (out of host memory?)" if name == "SIGKILL" else "")
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
