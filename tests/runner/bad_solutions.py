"""Solutions of the fixture definitions toy_scan and toy_packed: one good one and one for each way to be wrong.

Used as `--solution tests/runner/bad_solutions.py::NAME`.
"""

import os
import signal
import time

import torch


def _scan(x, state_pool, state_indices, scale):
    h = state_pool[state_indices]
    ys = []
    for t in range(x.shape[1]):
        h = 0.9 * h + scale * x[:, t]
        ys.append(h)
    return torch.stack(ys, 1), h


def good(x, state_pool, state_indices, scale):
    """Correct, and writes the pool in place (allowed: inplace new_state_pool <- state_pool)."""
    y, h = _scan(x, state_pool, state_indices, scale)
    state_pool[state_indices] = h
    return y, state_pool


def raises(**inputs):
    raise ValueError("deliberate failure in the solution")


def segfault(**inputs):
    os.kill(os.getpid(), signal.SIGSEGV)


def exits(**inputs):
    os._exit(7)


def hangs(**inputs):
    time.sleep(3600)


def wrong_shape(**inputs):
    y, pool = good(**inputs)
    return y[:, :-1], pool


def wrong_dtype(**inputs):
    y, pool = good(**inputs)
    return y.double(), pool


def returns_nan(**inputs):
    y, pool = good(**inputs)
    y[0, 0, 0] = float("nan")
    return y, pool


def off_by_1e2(**inputs):
    y, pool = good(**inputs)
    return y + 1e-2, pool


def mutates_input(x, state_pool, state_indices, scale):
    y, pool = good(x, state_pool, state_indices, scale)
    x.mul_(2)  # x is not an in-place input
    return y, pool


def touches_other_slots(x, state_pool, state_indices, scale):
    """Correct outputs for the requested slots, but it also overwrites a slot nobody asked for."""
    y, pool = good(x, state_pool, state_indices, scale)
    untouched = [i for i in range(pool.shape[0]) if i not in set(state_indices.tolist())]
    pool[untouched[0]] += 1.0
    return y, pool


_cache = {}


def caches_first(**inputs):
    """Right the first time, then replays its first result whatever the inputs."""
    if "out" not in _cache:
        y, pool = good(**inputs)
        _cache["out"] = (y.clone(), pool.clone())
    y, pool = _cache["out"]
    return y.clone(), pool.clone()


def packed_good(x, cu_seqlens, scale):
    y = torch.empty_like(x)
    for n in range(cu_seqlens.shape[0] - 1):
        h = torch.zeros_like(x[0])
        for t in range(int(cu_seqlens[n]), int(cu_seqlens[n + 1])):
            h = 0.9 * h + scale * x[t]
            y[t] = h
    return y


def packed_one_bad_token(x, cu_seqlens, scale):
    """Wrong at token 5 of sequence 1, dim 2 only (packed row cu_seqlens[1] + 5)."""
    y = packed_good(x, cu_seqlens, scale)
    y[int(cu_seqlens[1]) + 5, 2] += 10.0
    return y


def slow_good(x, state_pool, state_indices, scale):
    """Correct but slower than the runner's 1 s timing budget."""
    time.sleep(1.1)
    return good(x, state_pool, state_indices, scale)


def caches_like_triton(x, state_pool, state_indices, scale):
    """Correct, and leaves what a Triton solution's first call leaves in the Triton cache: a compiled kernel and an
    autotuning result (one entry per process: the test counts them)."""
    from kda_trace.sandbox import triton_cache_dir

    entry = os.path.join(triton_cache_dir(), f"entry{os.getpid()}")
    os.makedirs(entry, exist_ok=True)
    for name in ("k.cubin", "k.autotune.json"):
        with open(os.path.join(entry, name), "w") as f:
            f.write("compiled")
    return good(x, state_pool, state_indices, scale)


def logs_its_calls(x, state_pool, state_indices, scale):
    """Correct, and appends a line per call to a file in $CALL_LOG_DIR: its process, whether a timing loop called
    it (read from the stack, as any solution can), and when the call began and ended. A process is named by a token
    of its own: in a sandbox every solution's process has the same PID."""
    import sys
    import uuid

    global _PROCESS_TOKEN
    _PROCESS_TOKEN = globals().get("_PROCESS_TOKEN") or uuid.uuid4().hex

    timed, frame = False, sys._getframe(1)
    while frame is not None:
        timed = timed or frame.f_code.co_name in ("_time_cpu", "_time_gpu")
        frame = frame.f_back
    began = time.time()
    time.sleep(0.02)
    out = good(x, state_pool, state_indices, scale)
    with open(os.path.join(os.environ["CALL_LOG_DIR"], f"calls-{_PROCESS_TOKEN}.txt"), "a") as f:
        f.write(f"{_PROCESS_TOKEN} {int(timed)} {began:.6f} {time.time():.6f}\n")
    return out


def out_of_memory_while_shared(x, state_pool, state_indices, scale):
    """Its first $OOM_FIRST_CALLS calls in the run (counted in a file in $CALL_LOG_DIR) run out of GPU memory, as
    torch reports it; correct after that."""
    import torch

    if os.environ.get("OOM_FIRST_CALLS") and _calls_so_far() < int(os.environ["OOM_FIRST_CALLS"]):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (a test's stand-in)")
    return good(x, state_pool, state_indices, scale)


def out_of_memory_when_timed(x, state_pool, state_indices, scale):
    """Correct on its first call in the run; its second (the timing loop's first) reports running out of GPU memory,
    as a solution that did not like its times could (counted in $CALL_LOG_DIR)."""
    import torch

    if _calls_so_far("oom-timed-calls") == 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (a test's stand-in)")
    return good(x, state_pool, state_indices, scale)


def _calls_so_far(counter: str = "oom-calls") -> int:
    """Calls of this function with `counter` across the run's processes, counted in a file in $CALL_LOG_DIR."""
    path = os.path.join(os.environ["CALL_LOG_DIR"], counter)
    with open(path, "a") as f:
        f.write("x")
    with open(path) as f:
        return len(f.read()) - 1


def patches_timer(x, state_pool, state_indices, scale):
    """Correct, and makes the wall clock run 100x slower for whoever reads it after (REWARD_HACK)."""
    real = time.perf_counter
    time.perf_counter = lambda: real() / 100
    return good(x, state_pool, state_indices, scale)


def patches_timer_once(x, state_pool, state_indices, scale):
    """Makes the wall clock run 100x slower on its first call in the run (counted in $CALL_LOG_DIR), honest after:
    caught on a shared GPU, it must not get a second, honest evaluation instead."""
    if _calls_so_far("patch-calls") == 0:
        return patches_timer(x, state_pool, state_indices, scale)
    return good(x, state_pool, state_indices, scale)


def autotunes(x, state_pool, state_indices, scale):
    """Correct, and calls a Triton kernel with two autotuning configs first (as fla's solution does); with
    $CALL_LOG_DIR set, appends "seq_len began ended" per call to a file there."""
    import triton
    import triton.language as tl

    global _tuned_copy
    if "_tuned_copy" not in globals():
        @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
        @triton.jit
        def _tuned_copy(src, dst, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    began = time.time()
    flat = x.reshape(-1).float().contiguous()
    copy = torch.empty_like(flat)
    _tuned_copy[lambda meta: (triton.cdiv(flat.numel(), meta["BLOCK"]),)](flat, copy, flat.numel())
    assert torch.equal(copy, flat)
    out = good(x, state_pool, state_indices, scale)
    if os.environ.get("CALL_LOG_DIR"):
        time.sleep(0.2)  # long enough for two overlapping calls to be seen
        with open(os.path.join(os.environ["CALL_LOG_DIR"], f"calls-{os.getpid()}-{began}.txt"), "w") as f:
            f.write(f"{x.shape[1]} {began:.6f} {time.time():.6f}\n")
    return out
