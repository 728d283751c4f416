"""The fused decode kernel (kda_trace/kernels/fused_decode.py) and its builder against the fused_decode
definitions' own reference (under the Triton interpreter on CPU).

The reference (tools/kda_references/fused_decode.py, proven against float64 in
tests/references/test_ref_fused_decode.py) is each definition's `reference` text, run with its head count and
head dim set small (`small_reference`) or as the definition sets them. `judge` holds the kernel to the
definition's tolerances and to tighter bounds than they give: the convolution pool and untouched slots bit for
bit, a float32 pool to float32 summation-order error, a bf16 pool and o within one bf16 ulp but for rare
elements. `test_each_stage_is_checked` shows that `judge` fails a copy of the reference with one stage changed
(the convolution, SiLU, the bf16 rounding of the convolution's output, the gate, the RMSNorm, the output gate),
so a kernel that skipped one would fail too.
"""

from __future__ import annotations

import math
import uuid as uuidlib
from functools import cache

import pytest
import torch

from kda_trace.platform import default_device, ensure_triton_can_run

DEVICE = default_device()
ensure_triton_can_run(DEVICE)

from kda_trace.compare import compare_output, tolerance_for
from kda_trace.dataset import load_dataset
from kda_trace.inputs import make_inputs
from kda_trace.kernels.fused_decode import fused_decode
from kda_trace.reference import compile_reference
from kda_trace.schema import RandomInput, ScalarInput, Workload
from kda_trace.solutions.base import reference_constant
from kda_trace.solutions.ours_fused_decode import build_fused_decode, supports
from kda_trace.solutions.triton_kda import TritonSolution

from kernel_ground_truth import FakeDefinition

SAFE = "kda_fused_decode_h12_d128_k_last_safe_gate"
SAFE_BF16 = "kda_fused_decode_h12_d128_k_last_safe_gate_bf16_state"
UNBOUNDED = "kda_fused_decode_h32_d128_k_last"
NAMES = [SAFE, SAFE_BF16, UNBOUNDED]
OUTPUTS = ("o", "new_conv_state", "new_state_pool")

# The tight bounds (all tighter than the definitions' tolerances): a float32 pool within float32 summation-order
# error (RMS-relative, and the worst element relative to the largest |reference|); bf16 tensors (o, a bf16 pool)
# within one ulp everywhere but BF16_FAR of the elements, bit-equal but for BF16_OFF of them.
F32_RMS, F32_WORST = 1e-6, 1e-5
BF16_FAR, BF16_OFF = 1e-3, 1e-2
# Differences this small count as equal in the ulp counts: elements near zero, where an ulp is tiny (an o element
# of 1e-5 in a row of O(1) values moves several of its ulps when the recurrent output's rounding flips).
NEAR_ZERO = {"o": 1e-4, "new_state_pool": 1e-6}


@cache
def definitions():
    ds = load_dataset()
    return {n: ds.definitions[n] for n in NAMES}


def small_reference(d, H, D, plant: tuple[str, str] | None = None) -> dict:
    """The definition's reference as a namespace with NUM_HEADS = H and HEAD_DIM = D; `plant` = (old, new): a
    copy with that text replaced (it must occur exactly once)."""
    source = d.reference
    if plant is not None:
        assert source.count(plant[0]) == 1, f"plant {plant[0]!r} not found once in {d.name}'s reference"
        source = source.replace(*plant)
    ns: dict = {}
    exec(compile(source, f"<{d.name} reference>", "exec"), ns)  # noqa: S102 - the dataset's own reference
    ns["NUM_HEADS"], ns["HEAD_DIM"] = H, D
    return ns


def small_inputs(d, B, H, D, slots, pool_size, seed=0) -> dict:
    """Inputs drawn as the definition's generators draw them, at H heads of dim D."""
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    uniform = lambda lo, hi, *s: torch.rand(*s, generator=gen) * (hi - lo) + lo  # noqa: E731
    pool_dtype = getattr(torch, d.inputs["state_pool"].dtype.value)
    W = d.const_axes["conv_width"]
    return {
        "x": randn(B, 3 * H * D).bfloat16(),
        "conv_weight": uniform(-0.5, 0.5, 3, W, H * D),
        "conv_state": randn(pool_size, 3 * H * D, W - 1).bfloat16(),
        "g_raw": randn(B, H, D).bfloat16(),
        "A_log": uniform(0.0, math.log(16), H),
        "dt_bias": uniform(-5.0, -1.0, H, D),
        "b": randn(B, H).bfloat16(),
        "state_pool": (randn(pool_size, H, D, D) * 0.2).to(pool_dtype),
        "state_indices": torch.tensor(slots, dtype=torch.int32),
        "output_gate": randn(B, H, D).bfloat16(),
        "norm_weight": uniform(0.5, 1.5, D),
        "scale": D ** -0.5,
    }


def copy(x: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in x.items()}


def run_kernel(d, x: dict) -> dict:
    """The builder's run on a copy of `x` (on DEVICE): its outputs on the CPU, checked to be the pools in place."""
    y = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in copy(x).items()}
    out = build_fused_decode(d)(**y)
    assert out[1] is y["conv_state"] and out[2] is y["state_pool"], "the pools are not updated in place"
    return {name: t.cpu() for name, t in zip(OUTPUTS, out)}


def run_small_kernel(d, x: dict) -> dict:
    """The kernel's launcher (any H, D) with the definition's gate and the reference's NORM_EPS."""
    y = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in copy(x).items()}
    scale = y.pop("scale")
    lb = d.tag("lower_bound")
    o = fused_decode(**y, scale=scale, gate=d.tag("gate"), lower_bound=-5.0 if lb is None else float(lb),
                     norm_eps=reference_constant(d, "NORM_EPS", None))
    return {"o": o.cpu(), "new_conv_state": y["conv_state"].cpu(), "new_state_pool": y["state_pool"].cpu()}


def run_reference(ns_or_run, x: dict) -> dict:
    run = ns_or_run["run"] if isinstance(ns_or_run, dict) else ns_or_run
    return dict(zip(OUTPUTS, run(**copy(x))))


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in bf16 ulps between two bf16 tensors (their bit patterns on a monotone line)."""
    ia, ib = a.view(torch.int16).to(torch.int32), b.view(torch.int16).to(torch.int32)
    ia = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ib = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    return (ia - ib).abs()


def judge(d, x: dict, want: dict, got: dict) -> list[str]:
    """Why `got` does not match the reference's `want` (empty: it does), see the module docstring."""
    bad = []
    for name in OUTPUTS:
        m = compare_output(d, name, want[name], got[name], tolerance_for(d, name))
        if not m.passed:
            bad.append(f"{name}: outside the definition's tolerance (RMS-relative {m.rms_rel_error:.2e}, "
                       f"worst {m.max_abs_error:.2e})")
    if not torch.equal(got["new_conv_state"].view(torch.int16), want["new_conv_state"].view(torch.int16)):
        bad.append("new_conv_state: not bit-exact")
    live = x["state_indices"][x["state_indices"] > 0].long()
    untouched = torch.ones(x["state_pool"].shape[0], dtype=torch.bool)
    untouched[live] = False
    for name, orig in (("new_conv_state", "conv_state"), ("new_state_pool", "state_pool")):
        if not torch.equal(got[name][untouched].view(torch.int16), x[orig][untouched].view(torch.int16)):
            bad.append(f"{name}: a slot no live row names changed")
    if not bool((got["o"][x["state_indices"] <= 0] == 0).all()):
        bad.append("o: a padding row is not zero")
    pools = [("new_state_pool", live)] if want["new_state_pool"].dtype == torch.bfloat16 else []
    for name, rows in [("o", (x["state_indices"] > 0).nonzero()[:, 0])] + pools:
        dist = ulps(got[name][rows], want[name][rows])
        dist[(got[name][rows].double() - want[name][rows].double()).abs() <= NEAR_ZERO[name]] = 0
        far, off = (dist > 1).double().mean().item(), (dist > 0).double().mean().item()
        if far > BF16_FAR or off > BF16_OFF:
            bad.append(f"{name}: {far:.1e} of the elements more than one bf16 ulp off, {off:.1e} not bit-equal")
    if want["new_state_pool"].dtype == torch.float32 and len(live):
        w, g = want["new_state_pool"][live].double(), got["new_state_pool"][live].double()
        rms = ((w - g).pow(2).mean().sqrt() / w.pow(2).mean().sqrt()).item()
        worst = ((w - g).abs().max() / w.abs().max()).item()
        if not (rms <= F32_RMS and worst <= F32_WORST):
            bad.append(f"new_state_pool: RMS-relative {rms:.2e}, worst {worst:.2e} (float32 bounds)")
    return bad


# --------------------------------------------------------------------------------------------- fast tier
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("H,D,slots,pool_size", [
    (2, 32, [3, -1, 1, 0, 5], 7),      # padding rows (-1 and the null slot) between live rows
    (3, 24, [2, 0, 4], 6),             # a head dim that is not a power of two: masked loads
])
def test_matches_reference_small(name, H, D, slots, pool_size):
    """Small heads: o, both pools (in place), padding rows zero, untouched slots bit-identical."""
    d = definitions()[name]
    x = small_inputs(d, len(slots), H, D, slots, pool_size, seed=H * D)
    want = run_reference(small_reference(d, H, D), x)
    bad = judge(d, x, want, run_small_kernel(d, x))
    assert not bad, f"{name} H={H} D={D}: " + "; ".join(bad)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("block_v,D,prefetch,split", [
    (8, 32, 0, 1), (16, 24, 0, 1), (8, 32, 1, 1), (16, 24, 1, 1), (8, 32, 2, 1), (4, 24, 2, 1), (8, 32, 0, 2),
    (4, 32, 1, 4), (4, 32, 2, 2), (8, 24, 0, 4)])
# D = 24: masked rows; (4, 32, 2, 1, 2): two blocks ahead stop at each program's last rows
def test_row_blocks_match_reference_and_the_whole_state(name, block_v, D, prefetch, split, monkeypatch):
    """The kernel stepping the state block_v rows at a time (LAUNCH["block_v"] < D), with and without loading the
    next one or two blocks ahead, in one program per (row, head) or `split` of them (the last to finish normalising the row):
    the same judge as the whole state at once, and both pools bit for bit the same as the whole state gives (each
    row's step is the same); the split's counters are back at 0 after the call."""
    from kda_trace.kernels import fused_decode as module

    d = definitions()[name]
    slots = [3, -1, 1, 0, 5]
    x = small_inputs(d, len(slots), 2, D, slots, 7, seed=D + block_v)
    want = run_reference(small_reference(d, 2, D), x)
    whole = run_small_kernel(d, x)
    monkeypatch.setitem(module.LAUNCH, "block_v", block_v)
    monkeypatch.setitem(module.LAUNCH, "prefetch", prefetch)
    monkeypatch.setitem(module.LAUNCH, "split", split)
    blocks = run_small_kernel(d, x)
    if split > 1:
        assert all(not counters.any() for counters, _ in module._SCRATCH.values())
    bad = judge(d, x, want, blocks)
    assert not bad, f"{name} block_v={block_v} D={D}: " + "; ".join(bad)
    for out in ("new_conv_state", "new_state_pool"):
        assert torch.equal(blocks[out].view(torch.uint8), whole[out].view(torch.uint8)), out


def test_the_unbounded_gate_past_softplus_threshold():
    """dt_bias around 20 puts g_raw + dt_bias on both sides of softplus's threshold of 20 (softplus(x) = x above it,
    as torch computes it), with A = exp(A_log) small enough (A_log -5) that the decay there is not simply 0: a
    kernel that clamps or drops that branch fails here."""
    d = definitions()[UNBOUNDED]
    slots = [2, 1, 3]
    x = small_inputs(d, len(slots), 2, 32, slots, 5, seed=7)
    x["dt_bias"] = 20.0 + (x["dt_bias"] + 3.0) * 2.5  # uniform in [15, 25]
    x["A_log"] = torch.full_like(x["A_log"], -5.0)
    want = run_reference(small_reference(d, 2, 32), x)
    bad = judge(d, x, want, run_small_kernel(d, x))
    assert not bad, "; ".join(bad)


def workload(d, batch_size, pool_size, pad, pad_value) -> Workload:
    """`pad` padding rows (slot `pad_value`) after live rows drawn from slots 1.. of the pools."""
    gen = {"kind": "slot_indices", "pool_axis": "pool_size", "first_slot": 1, "pad_rows": pad,
           "pad_value": pad_value}
    inputs = {n: (ScalarInput(value=d.const_axes["head_dim_k"] ** -0.5) if spec.shape is None
                  else RandomInput(generator=gen) if n == "state_indices" else RandomInput())
              for n, spec in d.inputs.items()}
    key = f"{d.name}:{batch_size}:{pool_size}:{pad}:{pad_value}"
    return Workload(uuid=str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, key)), axes={"batch_size": batch_size,
                    "pool_size": pool_size}, inputs=inputs, tags=["kernel-test"])


@pytest.mark.parametrize("name,batch_size,pad_value", [(SAFE, 3, -1), (SAFE_BF16, 3, 0), (UNBOUNDED, 2, 0)])
def test_definition_shapes(name, batch_size, pad_value):
    """The definition's own heads and dims through the builder (the runner's path), against its compiled
    reference: live rows and one padding row."""
    d = definitions()[name]
    x = make_inputs(d, workload(d, batch_size, 5, 1, pad_value))
    want = run_reference(compile_reference(d.reference, d.name), x)
    bad = judge(d, x, want, run_kernel(d, x))
    assert not bad, f"{name}: " + "; ".join(bad)


def test_all_padding_rows():
    """A batch of padding rows only: o zero, both pools bit-identical."""
    d = definitions()[SAFE_BF16]
    x = small_inputs(d, 3, 2, 16, [0, -1, 0], 4)
    got = run_small_kernel(d, x)
    assert bool((got["o"] == 0).all())
    assert torch.equal(got["new_conv_state"].view(torch.int16), x["conv_state"].view(torch.int16))
    assert torch.equal(got["new_state_pool"].view(torch.int16), x["state_pool"].view(torch.int16))


# Each a change of one stage in a copy of the reference: the judge must reject its outputs.
PLANTS = {
    "convolution": ("y = y + window[:, :, j].float() * w[:, j]", "y = y"),
    "silu": ("return y * torch.sigmoid(y)", "return y"),
    "conv_bf16_rounding": ("mixed = causal_conv_silu(x[rows], conv_weight, window).to(torch.bfloat16).float()",
                           "mixed = causal_conv_silu(x[rows], conv_weight, window)"),
    "gate": ("decay = torch.exp(kda_gate(g_raw, A_log, dt_bias))", "decay = torch.ones_like(k_t)"),
    "rmsnorm": ("return o * inv_rms * norm_weight.float()", "return o * norm_weight.float()"),
    "output_gate": ("return o * inv_rms * norm_weight.float() * torch.sigmoid(output_gate.float())",
                    "return o * inv_rms * norm_weight.float()"),
}


@pytest.mark.parametrize("name", [SAFE, SAFE_BF16, UNBOUNDED])
def test_each_stage_is_checked(name):
    """The kernel passes `judge`; each planted copy of the reference fails it on the same inputs."""
    d = definitions()[name]
    H, D, slots = 2, 32, [2, -1, 1, 4]
    x = small_inputs(d, len(slots), H, D, slots, 5, seed=11)
    want = run_reference(small_reference(d, H, D), x)
    bad = judge(d, x, want, run_small_kernel(d, x))
    assert not bad, f"{name}: the kernel: " + "; ".join(bad)
    for stage, plant in PLANTS.items():
        planted = run_reference(small_reference(d, H, D, plant), x)
        assert judge(d, x, want, planted), f"{name}: a reference without the {stage} passes the judge"


def test_supports():
    """The triton solution serves the family; layouts and options the kernel lacks are refused with a reason."""
    solution = TritonSolution("cpu")
    for d in definitions().values():
        assert solution.supports(d) is None, d.name
    base = ["stage:fused_decode", "gate:safe"]
    for extra, needs in ((["state_layout:kv"], "state_layout:vk"), (["beta:prob"], "beta:logits"),
                         (["qk_norm:none"], "qk_norm:l2"), (["gate:precomputed"], "gate:")):
        tags = ([t for t in base if not t.startswith("gate:")] if extra[0].startswith("gate:") else base) + extra
        layout = ("head_dim_k", "head_dim_v") if "state_layout:kv" in extra else ("head_dim_v", "head_dim_k")
        fake = FakeDefinition("kda_fused_decode_fake", tags, "state_pool", layout)
        reason = supports(fake)
        assert reason is not None and needs in reason, (extra, reason)
    assert supports(FakeDefinition("kda_decode_fake", ["stage:decode"])) is not None


# --------------------------------------------------------------------------------------------- slow tier
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("H,D,B", [(1, 128, 2), (3, 48, 6), (4, 16, 9), (2, 100, 3)])
def test_sweep_small(name, seed, H, D, B):
    """More heads, dims and batches: every slot but the null one in use, padding rows where the seed puts them."""
    d = definitions()[name]
    gen = torch.Generator().manual_seed(seed)
    pool_size = B + 1
    slots = (torch.randperm(B, generator=gen) + 1).tolist()
    for i in torch.randperm(B, generator=gen)[: seed].tolist():
        slots[i] = -1 if i % 2 else 0
    x = small_inputs(d, B, H, D, slots, pool_size, seed=seed + 100)
    want = run_reference(small_reference(d, H, D), x)
    bad = judge(d, x, want, run_small_kernel(d, x))
    assert not bad, f"{name} H={H} D={D} B={B} seed={seed}: " + "; ".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_definition_shapes_larger_batch(name):
    """The definition's shapes at batch 8 in a pool of 12, two padding rows."""
    d = definitions()[name]
    x = make_inputs(d, workload(d, 8, 12, 2, -1))
    want = run_reference(compile_reference(d.reference, d.name), x)
    bad = judge(d, x, want, run_kernel(d, x))
    assert not bad, f"{name}: " + "; ".join(bad)


def test_launch_chosen_by_the_number_of_programs(monkeypatch):
    """Whole state per program while the programs are few, row blocks from MANY_PROGRAMS on, LAUNCH pinning either;
    and a launch past the threshold (lowered here, so that the interpreter runs few programs) gives the pools bit
    for bit as the whole state does."""
    from kda_trace.kernels import fused_decode as module

    assert module.launch_for(module.MANY_PROGRAMS - 1) == module.FEW_PROGRAMS_LAUNCH
    assert module.launch_for(module.MANY_PROGRAMS) == module.MANY_PROGRAMS_LAUNCH
    monkeypatch.setitem(module.LAUNCH, "block_v", 32)
    assert module.launch_for(1)["block_v"] == 32 and module.launch_for(1 << 20)["block_v"] == 32
    monkeypatch.setitem(module.LAUNCH, "block_v", 0)

    d = definitions()[NAMES[0]]
    slots = [3, -1, 1, 5]
    x = small_inputs(d, len(slots), 2, 32, slots, 7, seed=11)
    whole = run_small_kernel(d, x)
    monkeypatch.setattr(module, "MANY_PROGRAMS", 2)
    monkeypatch.setitem(module.MANY_PROGRAMS_LAUNCH, "block_v", 8)  # below D = 32: row blocks
    blocks = run_small_kernel(d, x)
    for out in OUTPUTS:
        assert torch.equal(blocks[out].view(torch.uint8), whole[out].view(torch.uint8)), out
