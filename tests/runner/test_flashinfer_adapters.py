"""The flashinfer adapters' mapping of each family onto `flashinfer.recurrent_kda` and
`flashinfer.fused_kda_decode`, checked on the CPU.

FlashInfer's KDA kernels need a CUDA device, so here `flashinfer` is a STAND-IN module written for this
test: its `recurrent_kda` records every call's arguments, checks them against the contract FlashInfer
0.7.2.post1 documents (bfloat16 q/k/v/g/beta, float32 A_log and flat [HV*K] dt_bias, bfloat16 decode
states [N, HV, V, K], int32 ssm_state_indices, speculative-decode checkpoint slots [N, 1+S], packed
cu_seqlens) and computes that contract with a plain float32 recurrence. What is checked is the adapter
(argument building, layouts, gates, beta logits, pools and indices), against our references and their
tolerances; FlashInfer's own kernels are checked by the gpu-marked tests in tests/references and, for the fused
decode, by `test_fused_decode_on_flashinfer` here (gpu tier: not run where these CPU tests were written).

The stand-in `fused_kda_decode` checks the arguments against what run_fused_kda_decode of flashinfer-python 0.7.4
(flashinfer/kda_kernels/fused_kda_decode.py) accepts (dtypes, shapes, the SD or DS conv-pool strides, compact
state slots, int32 slots, equal slot counts, a negative lower_bound) and computes the op with the definition's own
reference, writing both pools in place as the kernel does; it checks the adapter's glue, not FlashInfer's math.
"""

import types

import pytest
import torch
import torch.nn.functional as F

from kda_trace.compare import compare_output, tolerance_for
from kda_trace.dataset import load_dataset
from kda_trace.inputs import clone_inputs, make_inputs
from kda_trace.reference import compile_reference
from kda_trace.runner import normalize_outputs
from kda_trace.solutions import flashinfer_adapters as fa


def _stand_in_recurrent_kda(calls):
    """FlashInfer's documented recurrent_kda contract in plain PyTorch (float32 math), recording its calls."""

    def recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None,
                      output_final_state=False, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=False,
                      lower_bound=None, cu_seqlens=None, ssm_state_indices=None, num_spec_tokens=None,
                      beta_is_logit=False, backend="auto", **rest):
        calls.append(dict(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, scale=scale,
                          initial_state=initial_state, output_final_state=output_final_state,
                          use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
                          lower_bound=lower_bound, cu_seqlens=cu_seqlens, ssm_state_indices=ssm_state_indices,
                          num_spec_tokens=num_spec_tokens, beta_is_logit=beta_is_logit, backend=backend, rest=rest))
        for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
            assert t.dtype == torch.bfloat16, name
        assert A_log.dtype == torch.float32 and dt_bias.dtype == torch.float32 and dt_bias.ndim == 1
        B, T, H, K = q.shape
        HV, V = v.shape[2], v.shape[3]
        assert dt_bias.numel() == H * K and A_log.shape == (H,)  # per q/k head, as FlashInfer documents them
        group = HV // H
        qf = q.float()
        kf = k.float()
        if use_qk_l2norm_in_kernel:
            qf = qf / torch.sqrt((qf * qf).sum(-1, keepdim=True) + 1e-6)
            kf = kf / torch.sqrt((kf * kf).sum(-1, keepdim=True) + 1e-6)
        qf = qf.repeat_interleave(group, 2) * (scale if scale is not None else K ** -0.5)
        kf = kf.repeat_interleave(group, 2)
        x = g.float() + dt_bias.view(H, K).repeat_interleave(group, 0)  # value head hv uses q/k head hv // group
        a = torch.exp(A_log).repeat_interleave(group, 0)[:, None]
        gate = -a * F.softplus(x) if lower_bound is None else lower_bound * torch.sigmoid(a * x)
        bf = torch.sigmoid(beta.float()) if beta_is_logit else beta.float()
        o = torch.zeros(B, T, HV, V)

        def step(S, b, t):  # one token of row b on state S [HV, V, K]; returns the new state
            S = S * torch.exp(gate[b, t])[:, None, :]
            pred = (S @ kf[b, t][..., None])[..., 0]
            S = S + (bf[b, t][:, None] * (v[b, t].float() - pred))[..., None] * kf[b, t][:, None, :]
            o[b, t] = (S @ qf[b, t][..., None])[..., 0]
            return S

        if num_spec_tokens is not None and cu_seqlens is not None:
            # packed speculative decode (the kernel's own form): row n's tokens cu[n]..cu[n+1], read slot [n, 0]
            # once, the state after its token t written to slot [n, t]; a row whose slot [n, 0] is -1 is skipped
            assert B == 1 and cu_seqlens.dtype == torch.int32
            assert initial_state.dtype == torch.bfloat16 and ssm_state_indices.dtype == torch.int32
            n_rows = cu_seqlens.numel() - 1
            assert ssm_state_indices.shape == (n_rows, 1 + num_spec_tokens)
            for n in range(n_rows):
                if int(ssm_state_indices[n, 0]) < 0:
                    continue
                S = initial_state[ssm_state_indices[n, 0]].float()
                for j, t in enumerate(range(int(cu_seqlens[n]), int(cu_seqlens[n + 1]))):
                    S = step(S, 0, t)
                    if int(ssm_state_indices[n, j]) >= 0:
                        initial_state[ssm_state_indices[n, j]] = S.to(initial_state.dtype)
            return o.to(q.dtype), None
        if num_spec_tokens is not None:  # batched speculative decode: slot [n, t] gets the state after token t
            assert cu_seqlens is None and T == 1 + num_spec_tokens
            assert initial_state.dtype == torch.bfloat16 and ssm_state_indices.dtype == torch.int32
            assert ssm_state_indices.shape == (B, T)
            for b in range(B):
                S = initial_state[ssm_state_indices[b, 0]].float()
                for t in range(T):
                    S = step(S, b, t)
                    initial_state[ssm_state_indices[b, t]] = S.to(initial_state.dtype)
            return o.to(q.dtype), None
        if cu_seqlens is not None and ssm_state_indices is not None:
            # decode with explicit T = 1 metadata: sequence n is token n, its slot updated in place by the kernel;
            # a -1 slot is a padding row (no read, no write, o zero)
            assert B == 1 and T == cu_seqlens.numel() - 1 and cu_seqlens.dtype == torch.int32
            assert initial_state.dtype == torch.bfloat16 and ssm_state_indices.dtype == torch.int32
            assert ssm_state_indices.shape == (T,)
            for n in range(T):
                slot = int(ssm_state_indices[n])
                if slot >= 0:
                    initial_state[slot] = step(initial_state[slot].float(), 0, n).to(initial_state.dtype)
            return o.to(q.dtype), None
        if cu_seqlens is not None:  # packed prefill
            assert B == 1 and cu_seqlens.dtype in (torch.int32, torch.int64)
            n = cu_seqlens.numel() - 1
            state = initial_state if initial_state is not None else torch.zeros(n, HV, V, K)
            finals = []
            for i in range(n):
                S = state[i].float()
                for t in range(int(cu_seqlens[i]), int(cu_seqlens[i + 1])):
                    S = step(S, 0, t)
                state[i] = S.to(state.dtype)
                finals.append(S)
            return o.to(q.dtype), (torch.stack(finals) if output_final_state else None)
        assert T == 1 and initial_state.dtype == torch.bfloat16  # decode: the kernel's states are bfloat16
        for b in range(B):
            slot = int(ssm_state_indices[b]) if ssm_state_indices is not None else b
            if ssm_state_indices is not None:
                assert ssm_state_indices.dtype == torch.int32
            initial_state[slot] = step(initial_state[slot].float(), b, 0).to(initial_state.dtype)
        return o.to(q.dtype), None

    return recurrent_kda


@pytest.fixture
def stand_in():
    calls = []
    return types.SimpleNamespace(recurrent_kda=_stand_in_recurrent_kda(calls)), calls


@pytest.fixture(scope="module")
def ds():
    return load_dataset()


def _run_and_compare(ds, name, call, stand_in_module, workload_filter=lambda w: True):
    d = ds.definitions[name]
    w = min((w for w in ds.workloads_of(name) if "smoke" in w.tags and workload_filter(w)),
            key=lambda w: sum(w.axes.values()))
    inputs = make_inputs(d, w, device="cpu")
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
    out, why = normalize_outputs(d, call(stand_in_module, clone_inputs(inputs), fa.options(d), "cute-dsl"))
    assert out is not None, why
    for o in d.outputs:
        m = compare_output(d, o, ref[o], out[o], tolerance_for(d, o), inputs.get("cu_seqlens"))
        assert m.passed, f"{name} {o}: {m.reason}"
    return d, inputs


@pytest.mark.parametrize("name", ["kda_decode_h8_d128_k_last", "kda_decode_h16_d128_k_last_safe_gate"])
def test_decode_float32_pool_gathers_bf16_states(ds, stand_in, name):
    module, calls = stand_in
    d, inputs = _run_and_compare(ds, name, fa.decode, module)
    (c,) = calls
    B = inputs["q"].shape[0]
    assert c["q"].shape == (B, 1, 8 if "h8" in name else 16, 128)
    assert c["initial_state"].shape == (B, *inputs["state_pool"].shape[1:])  # the batch's slots, gathered
    assert c["ssm_state_indices"] is None and c["use_gate_in_kernel"] and c["beta_is_logit"]
    assert c["lower_bound"] == (-5.0 if "safe" in name else None)
    assert c["scale"] == pytest.approx(128 ** -0.5) and c["backend"] == "cute-dsl"


def test_decode_bfloat16_pool_is_passed_with_its_indices(ds, stand_in):
    module, calls = stand_in
    d = ds.definitions["kda_decode_h8_d128_k_last"]
    w = next(w for w in ds.workloads_of(d.name) if "smoke" in w.tags)
    inputs = make_inputs(d, w, device="cpu")
    inputs["state_pool"] = inputs["state_pool"].to(torch.bfloat16)
    untouched = [s for s in range(inputs["state_pool"].shape[0]) if s not in inputs["state_indices"].tolist()]
    before = inputs["state_pool"][untouched].clone()
    ref_o, ref_pool = compile_reference(d.reference, d.name)(**clone_inputs(inputs))
    o, pool = fa.decode(module, inputs, fa.options(d), "cute-dsl")
    (c,) = calls
    assert c["initial_state"] is inputs["state_pool"] and c["ssm_state_indices"].dtype == torch.int32
    assert torch.equal(c["ssm_state_indices"].long(), inputs["state_indices"])
    assert pool is inputs["state_pool"] and torch.equal(pool[untouched], before)
    assert (o.float() - ref_o.float()).abs().max() < 2e-2
    assert (pool.float() - ref_pool.float()).abs().max() < 5e-2


class _NoPoolCopies(torch.overrides.TorchFunctionMode):
    """Fails any torch call of the adapter's on a watched pool other than a view of it (a gather, a cast, a clone,
    a write...); what the stand-in FlashInfer does inside `watch(module)`'s functions is not watched."""

    VIEWS = {"__getitem__", "reshape", "view", "expand", "contiguous", "dim", "size", "stride", "data_ptr",
             "__get__", "shape", "dtype", "device", "is_contiguous", "numel", "element_size"}

    def __init__(self, *pools):
        super().__init__()
        self.pools, self.active = pools, True

    def watch(self, module):
        def unwatched(fn):
            def call(*args, **kwargs):
                self.active = False
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.active = True
            return call
        return types.SimpleNamespace(**{n: unwatched(f) for n, f in vars(module).items() if callable(f)})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        gather = name == "__getitem__" and any(isinstance(a, (torch.Tensor, list)) for a in args[1:])
        watched = any(a is p for a in (*args, *kwargs.values()) for p in self.pools)
        if self.active and watched and (name not in self.VIEWS or gather):
            raise AssertionError(f"the adapter called {name} on the pool")
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", ["kda_decode_h12_d128_k_last_safe_gate_bf16_state",
                                  "kda_mtp_h12_d128_k_last_safe_gate_bf16_state"])
def test_bf16_pool_definitions_call_flashinfer_on_the_pool_itself(ds, stand_in, name):
    """A bf16-state definition: one recurrent_kda call on the pool itself (no gather, no cast, no copy back) with
    the definition's int32 slots (no conversion either), in FlashInfer's in-kernel slot form (cu_seqlens, packed
    tokens); padding rows (-1) reach FlashInfer as -1; outputs within the definition's tolerances."""
    module, calls = stand_in
    d = ds.definitions[name]
    w = next(w for w in ds.workloads_of(name) if "smoke" in w.tags)
    inputs = make_inputs(d, w, device="cpu")
    pool, idx = inputs["state_pool"], inputs["state_indices"]
    assert pool.dtype == torch.bfloat16 and idx.dtype == torch.int32 and int((idx < 0).sum()) == 1
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
    call = fa.mtp if d.tag("stage") == "mtp" else fa.decode
    guard = _NoPoolCopies(pool)
    with guard:
        result = call(guard.watch(module), inputs, fa.options(d), "cute-dsl")
    out, why = normalize_outputs(d, result)
    assert out is not None, why
    for o in d.outputs:
        m = compare_output(d, o, ref[o], out[o], tolerance_for(d, o))
        assert m.passed, f"{name} {o}: {m.reason}"
    assert result[1] is pool
    (c,) = calls
    assert c["initial_state"] is pool and c["cu_seqlens"].dtype == torch.int32
    B = idx.shape[0]
    if d.tag("stage") == "decode":
        assert c["ssm_state_indices"] is idx and c["q"].shape[:2] == (1, B) and c["num_spec_tokens"] is None
        assert c["cu_seqlens"].tolist() == list(range(B + 1))
    else:
        T = inputs["q"].shape[1]
        assert c["num_spec_tokens"] == T - 1 and c["q"].shape[:2] == (1, B * T)
        assert torch.equal(c["ssm_state_indices"], idx[:, None].expand(B, T))
        assert c["cu_seqlens"].tolist() == list(range(0, B * T + 1, T))
    for copy in (lambda: pool[idx.long()], lambda: pool.float(), lambda: pool.clone()):  # the guard sees copies
        with pytest.raises(AssertionError, match="on the pool"), _NoPoolCopies(pool):
            copy()


@pytest.mark.parametrize("name", ["kda_mtp_h8_d128_k_last", "kda_mtp_h16_d128_k_last_safe_gate"])
def test_mtp_is_one_speculative_decode_call(ds, stand_in, name):
    module, calls = stand_in
    d, inputs = _run_and_compare(ds, name, fa.mtp, module, lambda w: w.axes["num_tokens"] > 1)
    (c,) = calls
    B, T = inputs["q"].shape[:2]
    assert c["num_spec_tokens"] == T - 1 and c["ssm_state_indices"].shape == (B, T)
    assert c["initial_state"].shape[0] == B * T and c["initial_state"].dtype == torch.bfloat16


def test_mtp_with_one_token_is_a_decode_call(ds, stand_in):
    module, calls = stand_in
    d = ds.definitions["kda_mtp_h8_d128_k_last"]
    w = next(w for w in ds.workloads_of(d.name) if "smoke" in w.tags)
    inputs = make_inputs(d, w, device="cpu")
    one = {n: (t[:, :1] if n in ("q", "k", "v", "g_raw", "b") else t) for n, t in inputs.items()}
    ref_o, ref_pool = compile_reference(d.reference, d.name)(**clone_inputs(one))
    o, pool = fa.mtp(module, clone_inputs(one), fa.options(d), "cute-dsl")
    assert calls[0]["num_spec_tokens"] is None and calls[0]["q"].shape[1] == 1
    assert o.shape == ref_o.shape and (o.float() - ref_o.float()).abs().max() < 2e-2
    assert (pool - ref_pool).abs().max() < 5e-2


@pytest.mark.parametrize("name", ["kda_prefill_h8_d128_k_last", "kda_prefill_h16_d128_k_last_safe_gate"])
def test_prefill_packs_and_clones_the_initial_state(ds, stand_in, name):
    module, calls = stand_in
    d = ds.definitions[name]
    w = min((w for w in ds.workloads_of(name) if "smoke" in w.tags), key=lambda w: -w.axes["num_seqs"])
    inputs = make_inputs(d, w, device="cpu")
    kept = clone_inputs(inputs)
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
    out, why = normalize_outputs(d, fa.prefill(module, inputs, fa.options(d), "auto"))
    assert out is not None, why
    for o in d.outputs:
        m = compare_output(d, o, ref[o], out[o], tolerance_for(d, o), inputs["cu_seqlens"])
        assert m.passed, f"{name} {o}: {m.reason}"
    (c,) = calls
    assert c["q"].shape[0] == 1 and c["cu_seqlens"] is inputs["cu_seqlens"] and c["output_final_state"]
    if inputs["initial_state"] is not None:
        assert c["initial_state"] is not inputs["initial_state"]  # FlashInfer writes it: a clone
        assert torch.equal(inputs["initial_state"], kept["initial_state"])


def test_unsupported_reasons(ds):
    defs = ds.definitions
    assert fa.unsupported_reason(defs["kda_decode_h8_d128_k_last"], None) == "FlashInfer's KDA kernels need a CUDA device"
    assert fa.unsupported_reason(defs["kda_decode_h8_d128_k_last"], (9, 0)) is None
    assert fa.unsupported_reason(defs["kda_mtp_h96_d128_k_last_safe_gate"], (9, 0)) is None
    assert "10.0, 10.3 and 12.0" in fa.unsupported_reason(defs["kda_prefill_h8_d128_k_last"], (9, 0))
    assert fa.unsupported_reason(defs["kda_prefill_h8_d128_k_last"], (10, 0)) is None
    assert "no KDA backward" in fa.unsupported_reason(defs["kda_bwd_h32_d128_v_last"], (10, 0))
    assert "gate" in fa.unsupported_reason(defs["kda_gate_h32_d128"], (10, 0))
    assert "dense" in fa.unsupported_reason(defs["kda_fwd_h32_d128_v_last"], (10, 0))
    from kda_trace.import_flashinfer import family_definition

    gva = type(defs["kda_decode_h8_d128_k_last"]).model_validate(family_definition("decode", 4, 8, 128, None, "test"))
    assert "per q/k head" in fa.unsupported_reason(gva, (9, 0))
    data = defs["kda_decode_h8_d128_k_last"].model_dump(mode="json")
    data["tags"] = [t for t in data["tags"] if not t.startswith("beta:")] + ["beta:prob"]
    odd = type(defs["kda_decode_h8_d128_k_last"]).model_validate(data)
    assert "beta:prob" in fa.unsupported_reason(odd, (9, 0))


def test_solution_is_unsupported_without_cuda_or_package(ds, monkeypatch):
    from kda_trace.solutions.registry import resolve

    sol = resolve("flashinfer", device="cpu")
    d = ds.definitions["kda_decode_h8_d128_k_last"]
    monkeypatch.setattr(fa, "flashinfer_available", lambda: False)
    assert "not installed" in sol.supports(d)
    monkeypatch.setattr(fa, "flashinfer_available", lambda: True)
    assert sol.supports(d) == "FlashInfer's KDA kernels need a CUDA device"


# --------------------------------------------------------------------------- fused decode (fused_kda_decode)
FUSED = ["kda_fused_decode_h12_d128_k_last_safe_gate", "kda_fused_decode_h12_d128_k_last_safe_gate_bf16_state",
         "kda_fused_decode_h32_d128_k_last"]


def _stand_in_fused_kda_decode(calls, d):
    """fused_kda_decode's 0.7.4 argument contract (module docstring), computed with `d`'s reference in place."""
    ref = compile_reference(d.reference, d.name)

    def fused_kda_decode(x, weight, conv_state, raw_gate, raw_beta, A_log, dt_bias, state_indices, state,
                         output_gate, norm_weight, lower_bound=-5.0, norm_eps=1e-5, output=None, *,
                         backend="cute-dsl", state_indices_mode=None):
        calls.append(dict(x=x, weight=weight, conv_state=conv_state, raw_gate=raw_gate, raw_beta=raw_beta, A_log=A_log,
                          dt_bias=dt_bias, state_indices=state_indices, state=state, output_gate=output_gate,
                          norm_weight=norm_weight, lower_bound=lower_bound, norm_eps=norm_eps, backend=backend,
                          state_dtype=state.dtype, conv_strides=conv_state.stride()))
        B, H, D = x.shape[0], x.shape[1] // 384, 128
        for name, t in (("x", x), ("conv_state", conv_state), ("raw_gate", raw_gate), ("raw_beta", raw_beta),
                        ("output_gate", output_gate)):
            assert t.dtype == torch.bfloat16, name
        for name, t in (("weight", weight), ("A_log", A_log), ("dt_bias", dt_bias), ("norm_weight", norm_weight)):
            assert t.dtype == torch.float32 and t.is_contiguous(), name
        assert state.dtype in (torch.float32, torch.bfloat16) and state_indices.dtype == torch.int32
        assert x.shape[1] == 3 * H * D and x.stride(1) == 1 and weight.shape == (3, 4, H * D)
        assert conv_state.shape[1:] == (3 * H * D, 3) and conv_state.stride()[1:] in ((1, 3 * H * D), (3, 1))
        assert raw_gate.shape == (1, B, H, D) and raw_gate.is_contiguous()
        assert raw_beta.shape == (1, B, H) and raw_beta.stride(2) == 1
        assert A_log.shape == (H,) and dt_bias.shape == (H * D,) and norm_weight.shape == (D,)
        assert state_indices.shape == (B,) and state_indices.is_contiguous()
        assert state.shape[1:] == (H, D, D) and state.stride()[1:] == (D * D, D, 1)
        assert conv_state.shape[0] == state.shape[0] and output_gate.shape[-3:] == (B, H, D)
        assert lower_bound is None or lower_bound < 0
        o, new_conv, new_state = ref(x=x, conv_weight=weight, conv_state=conv_state, g_raw=raw_gate[0],
                                     A_log=A_log, dt_bias=dt_bias.view(H, D), b=raw_beta[0], state_pool=state,
                                     state_indices=state_indices, output_gate=output_gate.reshape(B, H, D),
                                     norm_weight=norm_weight, scale=128 ** -0.5)
        conv_state.copy_(new_conv)  # the kernel writes both pools in place
        state.copy_(new_state)
        return o[None]

    return fused_kda_decode


def _fused_inputs(ds, name, minus_one):
    d = ds.definitions[name]
    w = next(w for w in ds.workloads_of(name) if "smoke" in w.tags)
    inputs = make_inputs(d, w, device="cpu")
    if minus_one:  # vLLM's PAD_SLOT_ID in place of the null slot
        inputs["state_indices"][inputs["state_indices"] == 0] = -1
    return d, inputs


@pytest.mark.parametrize("minus_one", [False, True], ids=["null_slot_pad", "minus_one_pad"])
@pytest.mark.parametrize("name", FUSED)
def test_fused_decode_calls_flashinfer_on_the_pools_themselves(ds, name, minus_one):
    """One fused_kda_decode call on the conv pool and the state pool themselves (float32 or bfloat16: no gather, cast
    or copy), the definition's int32 slots (padding rows, 0 or -1, as they are), g_raw / b with FlashInfer's leading
    singleton, dt_bias flat, the definition's gate and norm eps; the outputs the runner reads are FlashInfer's
    output row and the two pools it updated, within the definition's tolerances of the reference."""
    d, inputs = _fused_inputs(ds, name, minus_one)
    pool, conv, idx = inputs["state_pool"], inputs["conv_state"], inputs["state_indices"]
    assert int((idx <= 0).sum()) == 1
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
    calls = []
    module = types.SimpleNamespace(fused_kda_decode=_stand_in_fused_kda_decode(calls, d))
    assert fa.unsupported_reason(d, (9, 0), "0.7.4") is None
    opts = {"lower_bound": fa.options(d)["lower_bound"], "norm_eps": fa.norm_eps(d)}
    guard = _NoPoolCopies(pool, conv)
    with guard:
        result = fa.fused_decode(guard.watch(module), inputs, opts, "cute-dsl")
    (c,) = calls
    assert c["state"] is pool and c["conv_state"] is conv and c["state_indices"] is idx
    assert c["state_dtype"] == (torch.bfloat16 if "bf16_state" in name else torch.float32)
    assert c["conv_strides"][1:] == (3, 1)  # our conv pool is FlashInfer's DS layout
    assert c["raw_gate"].shape[0] == 1 and c["raw_beta"].shape[0] == 1 and c["dt_bias"].ndim == 1
    assert c["lower_bound"] == (-5.0 if "safe_gate" in name else None) and c["norm_eps"] == 1e-5
    assert c["backend"] == "cute-dsl"
    out, why = normalize_outputs(d, result)
    assert out is not None, why
    assert out["new_conv_state"] is conv and out["new_state_pool"] is pool
    for o in d.outputs:
        m = compare_output(d, o, ref[o], out[o], tolerance_for(d, o))
        assert m.passed, f"{name} {o}: {m.reason}"
    with pytest.raises(AssertionError, match="on the pool"), _NoPoolCopies(pool, conv):
        conv.float()


def test_fused_decode_refuses_another_scale(ds):
    """fused_kda_decode's query scale is fixed: a call with another one raises before FlashInfer is called."""
    d, inputs = _fused_inputs(ds, FUSED[0], False)
    calls = []
    module = types.SimpleNamespace(fused_kda_decode=_stand_in_fused_kda_decode(calls, d))
    inputs["scale"] = 0.1
    with pytest.raises(ValueError, match="fixes the query scale"):
        fa.fused_decode(module, inputs, {"lower_bound": -5.0, "norm_eps": 1e-5}, "cute-dsl")
    assert not calls


def _edited(d, tags=None, axes=None, reference=None):
    data = d.model_dump(mode="json")
    if tags:
        data["tags"] = [t for t in data["tags"] if not t.startswith(tuple(k + ":" for k in tags))] + \
            [f"{k}:{v}" for k, v in tags.items()]
    for axis, value in (axes or {}).items():
        data["axes"][axis]["value"] = value
    if reference is not None:
        data["reference"] = reference
    return type(d).model_validate(data)


def test_fused_decode_unsupported_reasons(ds):
    d = ds.definitions[FUSED[0]]
    assert fa.unsupported_reason(d, (9, 0), "0.7.4") is None
    assert fa.unsupported_reason(ds.definitions[FUSED[1]], (10, 0), None) is None
    assert fa.unsupported_reason(d, None, "0.7.4") == "FlashInfer's KDA kernels need a CUDA device"
    assert "SD layout only" in fa.unsupported_reason(d, (9, 0), "0.7.2.post1")
    assert "not 20" in fa.unsupported_reason(_edited(d, axes={"num_heads": 20, "num_v_heads": 20}), (9, 0))
    assert "one head dim, 128" in fa.unsupported_reason(_edited(d, axes={"head_dim_k": 64, "head_dim_v": 64}), (9, 0))
    assert "no GVA" in fa.unsupported_reason(_edited(d, axes={"num_v_heads": 24}), (9, 0))
    assert "negative lower_bound" in fa.unsupported_reason(_edited(d, tags={"lower_bound": "0"}), (9, 0))
    assert "gate:precomputed" in fa.unsupported_reason(_edited(d, tags={"gate": "precomputed"}), (9, 0))
    assert "fused_kda_decode" in fa.unsupported_reason(_edited(d, tags={"gate": "precomputed"}), (9, 0))
    assert "NORM_EPS" in fa.unsupported_reason(_edited(d, reference=d.reference.replace("NORM_EPS = ", "EPS = ")), (9, 0))


def test_fused_decode_solution_builds_the_fused_call(ds, monkeypatch):
    """build() on a fused_decode definition calls flashinfer.fused_kda_decode (a stand-in module here)."""
    import sys

    d, inputs = _fused_inputs(ds, FUSED[2], False)
    calls = []
    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(fused_kda_decode=_stand_in_fused_kda_decode(calls, d)))
    o, conv, pool = fa.FlashInferSolution("cpu").build(d, "cpu")(**inputs)
    (c,) = calls
    assert c["lower_bound"] is None and conv is inputs["conv_state"] and pool is inputs["state_pool"]
    assert o.shape == inputs["output_gate"].shape


@pytest.mark.gpu
@pytest.mark.parametrize("name", FUSED)
def test_fused_decode_on_flashinfer(ds, name):
    """FlashInfer's own fused_kda_decode (CUDA, flashinfer-python >= 0.7.4) against the reference, with the
    definition's tolerances, on the definition's smoke workloads and a padded batch of 16."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: FlashInfer's fused_kda_decode")
    d = ds.definitions[name]
    sol = fa.FlashInferSolution("cuda")
    reason = sol.supports(d)
    if reason is not None:
        pytest.skip(f"flashinfer: {reason}")
    run = sol.build(d, "cuda")
    for w in [w for w in ds.workloads_of(name) if "smoke" in w.tags or w.axes["batch_size"] == 16]:
        inputs = make_inputs(d, w, device="cuda")
        ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name)(**clone_inputs(inputs)))
        out, why = normalize_outputs(d, run(**clone_inputs(inputs)))
        assert out is not None, why
        for o in d.outputs:
            m = compare_output(d, o, ref[o].cpu(), out[o].cpu(), tolerance_for(d, o))
            assert m.passed, f"{name} {o} ({w.axes}): {m.reason}"



def test_flashinfer_workspace_moves_to_tmpdir_only_when_home_is_read_only(tmp_path, monkeypatch):
    """In the runner's sandbox the home directory is read-only and `import flashinfer` failed opening its JIT log
    there (every flashinfer record a COMPILE_ERROR on an H200): the workspace then goes to TMPDIR."""
    import os

    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    monkeypatch.delenv(fa.WORKSPACE_ENV, raising=False)
    fa.use_writable_workspace()
    assert fa.WORKSPACE_ENV not in os.environ  # a writable home keeps FlashInfer's default
    writable = os.access
    monkeypatch.setattr(fa.os, "access", lambda path, mode: False if str(path).startswith(str(home))
                        else writable(path, mode))  # as the sandbox's read-only mount answers (root included)
    fa.use_writable_workspace()
    assert os.environ[fa.WORKSPACE_ENV] == str(tmp)
    monkeypatch.setenv(fa.WORKSPACE_ENV, "/chosen")
    fa.use_writable_workspace()
    assert os.environ[fa.WORKSPACE_ENV] == "/chosen"  # a value already set is kept


def test_slots_passed_int32_and_aligned():
    """FlashInfer's CuTe DSL kernels take 16-byte aligned slot tensors: a misaligned int32 view is copied, an aligned
    int32 tensor passed as it is, int64 converted."""
    slots = torch.arange(8, dtype=torch.int32)
    assert fa._int32(slots) is slots
    view = slots[1:2]
    assert view.data_ptr() % 16 != 0
    fixed = fa._int32(view)
    assert fixed.data_ptr() % 16 == 0 and fixed.dtype == torch.int32 and torch.equal(fixed, view)
    wide = fa._int32(slots.long())
    assert wide.dtype == torch.int32 and torch.equal(wide, slots)
