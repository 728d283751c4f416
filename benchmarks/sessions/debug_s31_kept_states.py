"""Session 31: where kept states go wrong on the GPU (call 5: dq 0.83 off float64 at K = 20, V = 12, packed, GVA).
Run from a tree of the kept-states code (tag s31-keep-states): PYTHONPATH=<tree> python3 this. For a few shapes:
the forward's kept states and V_new against the backward's own (its pass run without them), then each gradient of
kept against recomputed (RMS-relative)."""
import sys

import torch

from kda_trace.kernels import backward, backward_chunked
from kda_trace.kernels.autograd import kda_autograd


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def case(name, B, T, H, HV, K, V, cu, l2=True, gate="safe"):
    gen = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    N = B if cu is None else len(cu) - 1
    x = dict(q=r(B, T, H, K).bfloat16(), k=r(B, T, H, K).bfloat16(), v=r(B, T, HV, V).bfloat16(), g=r(B, T, HV, K),
             beta=r(B, T, HV), h0=r(N, HV, K, V) * 0.3, A_log=r(HV) * 0.5, dt_bias=r(HV, K))
    x = {n: t.cuda().requires_grad_() for n, t in x.items()}
    cu_t = None if cu is None else torch.tensor(cu).cuda()
    do = (r(B, T, HV, V) * 0.1).cuda().bfloat16()
    dht = (r(N, HV, K, V) * 0.1).cuda()
    seen = {}
    real = backward_chunked.chunk_states_and_grads

    def spy(*a, **kw):
        out = real(*a, **kw)
        seen.setdefault("runs", []).append((out[0].clone(), out[3]["U"].clone().float()))
        return out

    backward_chunked.chunk_states_and_grads = spy

    def grads(keep):
        backward.LAUNCH["keep_states"] = keep
        for t in x.values():
            t.grad = None
        o, ht = kda_autograd(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"], cu_seqlens=cu_t,
                             use_qk_l2norm=l2, gate=gate, A_log=x["A_log"], dt_bias=x["dt_bias"],
                             lower_bound=-4.0, beta_kind="logits")
        torch.autograd.backward((o, ht), (do, dht))
        return {n: t.grad.clone() for n, t in x.items()}

    base = grads(False)
    kept = grads(True)
    backward_chunked.chunk_states_and_grads = real
    (s_base, vn_base), (s_kept, vn_kept) = seen["runs"][-2:]
    print(f"{name}: states {rel(s_kept, s_base):.2e} Vn {rel(vn_kept, vn_base):.2e} |",
          " ".join(f"{n} {rel(kept[n], base[n]):.1e}" for n in base), flush=True)
    if rel(s_kept, s_base) > 1e-2:  # per chunk and head: where
        d = (s_kept - s_base).flatten(2).norm(dim=-1) / s_base.flatten(2).norm(dim=-1).clamp_min(1e-30)
        print("   states rel per (chunk, head):", d.cpu().numpy().round(3).tolist())
    if rel(vn_kept, vn_base) > 1e-2:
        d = (vn_kept - vn_base).norm(dim=-1) / vn_base.norm(dim=-1).clamp_min(1e-30)
        print("   Vn rel per token (first 70, head 0):", d[:70, 0].cpu().numpy().round(2).tolist())


backward.LAUNCH["mode"] = "chunked"
print("device", torch.cuda.get_device_name())
case("dense 1x192 H2 HV4 K20 V12", 1, 192, 2, 4, 20, 12, None)
case("packed [5,145] H2 HV4 K20 V12", 1, 150, 2, 4, 20, 12, [0, 5, 150])
case("packed [5,145] H4 HV4 K20 V12", 1, 150, 4, 4, 20, 12, [0, 5, 150])
case("packed [5,145] H2 HV4 K32 V32", 1, 150, 2, 4, 32, 32, [0, 5, 150])
case("packed [5,145] H2 HV4 K128 V128", 1, 150, 2, 4, 128, 128, [0, 5, 150])
case("dense 1x192 H2 HV4 K128 V128", 1, 192, 2, 4, 128, 128, None)
case("dense 1x192 H8 HV8 K128 V128", 1, 192, 8, 8, 128, 128, None)
sys.exit(0)
