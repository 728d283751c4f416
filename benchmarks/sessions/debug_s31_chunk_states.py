"""Session 31: is the forward right on the GPU at K = 20, V = 12 (call 6: the states and V_new that the kept-states
code took from it were wrong from the 17th row on), with and without output_chunk_states (STORE_HS)? o, the
final state and the chunk states against a float64 recurrence, for a few shapes and launch settings."""
import sys

import torch

sys.path.insert(0, "tests/kernels")
from kernel_ground_truth import ref_kda  # noqa: E402

from kda_trace.kernels import chunk  # noqa: E402
from kda_trace.kernels.options import KDAOptions  # noqa: E402


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def ref_states(q, k, v, g, beta, scale, h0, T):
    """float64 chunk-start states of one dense sequence (B = 1), every 64 tokens."""
    out = []
    for c in range(0, T, 64):
        if c == 0:
            out.append(h0[0])
        else:
            _, h = ref_kda(q[:, :c], k[:, :c], v[:, :c], g[:, :c], beta[:, :c], scale, h0, None, False)
            out.append(h[0])
    return torch.stack(out)  # [NT, HV, K, V]


def case(name, H, HV, K, V, T=192, dtype=torch.bfloat16, **launch):
    saved = dict(chunk.LAUNCH)
    chunk.LAUNCH.update(launch)
    gen = torch.Generator().manual_seed(5)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    q, k = r(1, T, H, K), r(1, T, H, K)
    q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    v = r(1, T, HV, V)
    g = torch.nn.functional.logsigmoid(r(1, T, HV, K))
    beta = torch.rand(1, T, HV, generator=gen, dtype=torch.float64)
    h0 = r(1, HV, K, V) * 0.3
    xs = [t.to(dtype).cuda() for t in (q, k, v)] + [g.float().cuda(), beta.to(dtype).cuda()]
    opts = KDAOptions(output_final_state=True)
    o1, h1 = chunk.kda_chunk(*xs, opts, initial_state=h0.float().cuda())
    o2, h2, hs = chunk.kda_chunk(*xs, opts, initial_state=h0.float().cuda(), output_chunk_states=True)
    qd, kd, vd, bd = (t.to(dtype).double() for t in (q, k, v, beta))
    o_ref, h_ref = ref_kda(qd, kd, vd, g.float().double(), bd, K ** -0.5, h0, None, False)
    s_ref = ref_states(qd, kd, vd, g.float().double(), bd, K ** -0.5, h0, T)
    print(f"{name}: o {rel(o1, o_ref):.1e}, with chunk states o {rel(o2, o_ref):.1e} final {rel(h2, h_ref):.1e} "
          f"(without {rel(h1, h_ref):.1e}) states per chunk "
          + " ".join(f"{rel(hs[c], s_ref[c]):.1e}" for c in range(hs.shape[0])), flush=True)
    chunk.LAUNCH.clear()
    chunk.LAUNCH.update(saved)


print("device", torch.cuda.get_device_name())
case("H2 HV4 K20 V12", 2, 4, 20, 12)
case("H2 HV4 K20 V12 state_stages=1", 2, 4, 20, 12, state_stages=1)
case("H2 HV4 K32 V32", 2, 4, 32, 32)
case("H2 HV4 K24 V20", 2, 4, 24, 20)
case("H2 HV4 K20 V32", 2, 4, 20, 32)
case("H2 HV4 K32 V12", 2, 4, 32, 12)
case("H2 HV4 K128 V128", 2, 4, 128, 128)
if len(sys.argv) > 1:  # call 8: more value widths, the padded ones among them
    for K, V in ((32, 8), (32, 15), (32, 16), (32, 17), (64, 24), (16, 16), (16, 12)):
        case(f"H2 HV4 K{K} V{V}", 2, 4, K, V)
