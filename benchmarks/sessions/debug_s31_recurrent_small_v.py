"""Session 31: the decode kernel (kernels/recurrent.py) against float64 on the GPU at small V (the chunked forward's
`_wu_kernel` was miscompiled at V <= 16 on 4 warps: calls 7-10). o and the final state, a few (K, V)."""
import sys

import torch

sys.path.insert(0, "tests/kernels")
from kernel_ground_truth import ref_kda  # noqa: E402

from kda_trace.kernels.options import KDAOptions  # noqa: E402
from kda_trace.kernels.recurrent import kda_recurrent  # noqa: E402


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


print("device", torch.cuda.get_device_name())
for K, V, T in ((20, 12, 1), (32, 16, 1), (20, 16, 3), (32, 8, 1), (128, 128, 1), (20, 32, 1)):
    gen = torch.Generator().manual_seed(7)
    r = lambda *s, gen=gen: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    B, H, HV = 8, 2, 4
    q, k = r(B, T, H, K), r(B, T, H, K)
    q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    v = r(B, T, HV, V)
    g = torch.nn.functional.logsigmoid(r(B, T, HV, K))
    beta = torch.rand(B, T, HV, generator=gen, dtype=torch.float64)
    h0 = r(B, HV, K, V) * 0.3
    xs = [t.bfloat16().cuda() for t in (q, k, v)] + [g.float().cuda(), beta.bfloat16().cuda()]
    try:
        o, h = kda_recurrent(*xs, KDAOptions(output_final_state=True), initial_state=h0.float().cuda())
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        print(f"K{K} V{V} T{T}: {type(e).__name__} {str(e)[:80]}", flush=True)
        break
    qd, kd, vd, bd = (t.bfloat16().double() for t in (q, k, v, beta))
    o_ref, h_ref = ref_kda(qd, kd, vd, g.float().double(), bd, K ** -0.5, h0, None, False)
    print(f"K{K} V{V} T{T}: o {rel(o, o_ref):.1e} final {rel(h, h_ref):.1e}", flush=True)
