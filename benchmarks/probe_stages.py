"""The chunked backward launch by launch: every tensor argument of every Triton launch, copied after the launch, on
this device against a run saved elsewhere (the interpreter's, on the CPU). The first launch whose outputs differ
names the kernel that goes wrong on the device. Buffers start as NaN on both sides (torch.empty is patched), so a
read of memory nobody wrote shows too.

    TRITON_INTERPRET=1 python benchmarks/probe_stages.py save FILE       # on the CPU
    python benchmarks/probe_stages.py compare FILE                      # on a GPU

PROBE_SHAPE="K,H,HV,T,V" (default 12,1,2,70,10); PROBE_PREC: the product precision of every chunked-mode launch key
(default ieee, so that both sides compute in fp32 and differ only by summation order); extra KEY=VALUE arguments
set kernels/backward.py LAUNCH keys on this side. Also prints each gradient against float64 autograd."""

from __future__ import annotations

import os
import sys

import torch

from kda_trace.kernels import backward, backward_chunked
from kda_trace.kernels.options import KDAOptions

PREC_KEYS = ("chunked_precision", "split_precision", "chunked_pass_precision", "chunked_pass_source_precision",
             "pairs_diag_precision", "sums_diag_precision")
SKIP = ("scratch",)  # per-program scratch: its contents at the end depend on the program count and order


def inputs(K, H, HV, T, V):
    gen = torch.Generator().manual_seed(K + H + T)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q, k = r(1, T, H, K), r(1, T, H, K)
    return dict(q=q / q.norm(dim=-1, keepdim=True), k=k / k.norm(dim=-1, keepdim=True), v=r(1, T, HV, V),
                g=-torch.rand(1, T, HV, K, generator=gen), beta=torch.rand(1, T, HV, generator=gen),
                h0=r(1, HV, K, V) * 0.3, do=r(1, T, HV, V) * 0.1, dht=r(1, HV, K, V) * 0.1)


class Spy:
    """Wraps a JITFunction: each launch appends (kernel, {argument: copy after the launch}) to `log`."""

    def __init__(self, name, fn, log):
        self.name, self.fn, self.log = name, fn, log

    def __getitem__(self, grid):
        launch = self.fn[grid]

        def run(*args, **kwargs):
            out = launch(*args, **kwargs)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            names = self.fn.arg_names
            got = {names[i]: a.detach().cpu().clone() for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
            self.log.append((self.name, got))
            return out

        return run


def nan_empty(real):
    def empty(*shape, dtype=None, device=None, **kw):
        t = real(*shape, dtype=dtype, device=device, **kw)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    return empty


def run(dev, extra):
    K, H, HV, T, V = (int(s) for s in os.environ.get("PROBE_SHAPE", "12,1,2,70,10").split(","))
    x = {n: t.to(dev) for n, t in inputs(K, H, HV, T, V).items()}
    prec = os.environ.get("PROBE_PREC", "ieee")
    log = []
    saved_launch, saved_backward = dict(backward.LAUNCH), backward._backward
    kernels = {n: getattr(backward_chunked, n) for n in dir(backward_chunked) if n.endswith("_kernel")}
    real_empty = torch.empty
    try:
        backward.LAUNCH.update({k: prec for k in PREC_KEYS}, mode="chunked", **extra)
        from kda_trace.platform import triton_interpreted

        interp = triton_interpreted()
        # the chunked mode itself, also where kernels/backward.py's K <= 16 guard would refuse it
        backward._backward = lambda xs, sizes, tables, acc, h0, do, dht, scale, given=None: \
            backward._backward_chunked(xs, sizes, tables, acc, h0, do, dht, scale, interp, given)
        for n, fn in kernels.items():
            setattr(backward_chunked, n, Spy(n, fn, log))
        torch.empty = nan_empty(real_empty)
        gr = backward.kda_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"], KDAOptions(),
                                   initial_state=x["h0"], dht=x["dht"])
    finally:
        torch.empty = real_empty
        for n, fn in kernels.items():
            setattr(backward_chunked, n, fn)
        backward._backward = saved_backward
        backward.LAUNCH.clear()
        backward.LAUNCH.update(saved_launch)
    grads = {"q": gr.dq, "k": gr.dk, "v": gr.dv, "g": gr.dg, "beta": gr.dbeta, "h0": gr.dh0}
    grads = {n: t.detach().cpu() for n, t in grads.items()}
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "kernels"))
    from test_backward import truth

    ref = truth({n: t.cpu() for n, t in x.items()}, K ** -0.5)
    print(f"K={K} H={H} HV={HV} T={T} V={V} prec={prec} {extra} on {dev} vs float64: "
          + " ".join(f"{n} {rel(grads[n], ref[n]):.1e}" for n in grads), flush=True)
    return log, grads


def rel(a, b):
    a, b = a.double(), b.double()
    if a.shape != b.shape:
        return float("inf")
    both_nan = torch.isnan(a) & torch.isnan(b)
    a, b = torch.where(both_nan, 0.0, a), torch.where(both_nan, 0.0, b)
    d = (a - b).norm()
    if torch.isnan(d):
        return float("nan")
    return float(d / b.norm().clamp_min(1e-30))


def main():
    what, path = sys.argv[1], sys.argv[2]
    extra = dict(item.partition("=")[::2] for item in sys.argv[3:])
    extra = {k: int(v) if v.isdigit() else v for k, v in extra.items()}
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    log, grads = run(dev, extra)
    if what == "save":
        torch.save({"log": log, "grads": grads}, path)
        print(f"saved {len(log)} launches to {path}")
        return
    theirs = torch.load(path)
    if [n for n, _ in theirs["log"]] != [n for n, _ in log]:
        print("the launch sequences differ:", [n for n, _ in log], [n for n, _ in theirs["log"]])
    for i, ((name, mine), (_, ref)) in enumerate(zip(log, theirs["log"])):
        errs = {a: rel(mine[a], ref[a]) for a in mine if a in ref and not a.startswith(SKIP)}
        bad = {a: e for a, e in errs.items() if not e <= 1e-4}
        print(f"launch {i} {name}: " + (" ".join(f"{a} {e:.1e}" for a, e in bad.items()) if bad else "same"))
    print("grads vs the saved run: " + " ".join(f"{n} {rel(grads[n], theirs['grads'][n]):.1e}" for n in grads))


if __name__ == "__main__":
    main()
