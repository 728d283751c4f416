"""prefill_chunk_states family (the prefill family plus the state before every 64-token chunk of every
sequence, K-last float32): every definition's reference against ground truth.

Ground truth of chunk c of sequence n: the sequence's initial state (or zeros) for c = 0, else the final
state of the same sequence cut after its first 64 * c tokens, run separately through our chunked float64
form and fla's naive recurrence in float64. o and final_state as the prefill family's truth.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import (
    DEVICE,
    assert_bits_equal,
    assert_close,
    custom_workload,
    dataset,
    family_params,
    from_truth,
    inputs_of,
    reference_runs,
    run_reference,
    to_problem,
    upcast,
    workload_params,
)
from coverage_cells import covers

import ground_truth as gt
from kda_trace.reference import compile_reference

FAMILY = "prefill_chunk_states"
CHUNK = 64


def packed(d, lens, absent=()):
    axes = {"total_seq_len": sum(lens), "num_seqs": len(lens), "len_cu_seqlens": len(lens) + 1,
            "num_chunks": sum(-(-n // CHUNK) for n in lens)}
    return custom_workload(d, axes, seq_lens=lens, absent=absent)


def truth(d, x, kind: str) -> dict[str, torch.Tensor]:
    """Float64 ground truth of the three outputs (kind: 'chunked' or 'fla'). The boundary states are carried
    chunk by chunk: each 64-token piece of a sequence runs separately from the state the previous piece
    ended with (linear in the length), and the last piece must end at the whole-sequence run's final state."""
    p = to_problem(d, x, fla_ops=kind == "fla")
    run = (lambda prob: gt.chunked(prob, chunk=16)) if kind == "chunked" else gt.fla_recurrent
    out = from_truth(d, x, *run(p))
    HV, K, V = p.v.shape[2], p.q.shape[3], p.v.shape[3]
    layout = d.tag("state_layout")
    states = []
    for n, (_, s, e) in enumerate(p.sequences()):
        S = p.h0[n] if p.h0 is not None else torch.zeros(HV, K, V, dtype=torch.float64, device=p.q.device)
        for c0 in range(s, e, CHUNK):
            states.append(gt.state_from_kv(S, layout))
            cut = slice(c0, min(c0 + CHUNK, e))
            piece = replace(p, q=p.q[:, cut], k=p.k[:, cut], v=p.v[:, cut], g=p.g[:, cut], beta=p.beta[:, cut],
                            h0=S[None], cu_seqlens=None)
            S = run(piece)[1][0]
        whole = gt.state_to_kv(out["final_state"][n], layout)
        assert (S - whole).abs().max() <= 1e-10 * whole.abs().max(), "piecewise truth disagrees with the whole run"
    out["chunk_states"] = torch.stack(states)
    return out


def check_against_truth(d, w, device="cpu", with_fla_naive=True):
    x, out, x32, out32 = reference_runs(d, w, device)
    cu = x["cu_seqlens"]
    for kind in ["chunked"] + (["fla"] if with_fla_naive else []):
        want = truth(d, x32, kind)
        for name in d.outputs:
            assert_close(d, name, want[name], out32[name], "fp32", f"float32 reference vs {kind} float64",
                         cu if name == "o" else None)
    return x, out


@covers("prefill_chunk_states", batch=("varlen",), direction=("forward",), gate=("safe", "unbounded"),
        beta=("logits",), qk_norm=("l2",), initial_state=("given", "absent"), final_state=("returned",),
        gva=("off",), kv_dims=("equal",), state_layout=("vk",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_matches_ground_truth(d):
    """Sequences of 70, 3 and 129 tokens (2 + 1 + 3 chunk entries) with initial states, then from zeros."""
    check_against_truth(d, packed(d, [70, 3, 129]))
    x, out = check_against_truth(d, packed(d, [64, 5], absent=("initial_state",)))
    assert bool((out["chunk_states"][[0, 1]] == 0).all()), "chunk 0 of a sequence from zeros is not zeros"


@covers("prefill_chunk_states", batch=("varlen",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_o_and_final_state_are_the_prefill_family(d):
    """o and final_state are bit-identical to the plain prefill definition's reference on the same inputs;
    chunk 0 of every sequence is its initial state, bit for bit."""
    plain = dataset().definitions[d.name.removesuffix("_chunk_states")]
    x = inputs_of(d, packed(d, [130, 1, 64]))
    to_problem(d, upcast(x))
    out = run_reference(d, x)
    ref = compile_reference(plain.reference, plain.name)(**{k: v for k, v in x.items()})
    assert_bits_equal(out["o"], ref[0], f"{d.name} o vs {plain.name}")
    assert_bits_equal(out["final_state"], ref[1], f"{d.name} final_state vs {plain.name}")
    assert_bits_equal(out["chunk_states"][[0, 3, 4]], x["initial_state"], f"{d.name}: chunk 0 entries")


@covers("prefill_chunk_states", batch=("varlen",), gate=("safe", "unbounded"))
@pytest.mark.parametrize("d,w", workload_params(FAMILY))
def test_dataset_workloads(d, w):
    """Every (non-stress) dataset workload against the chunked truth."""
    check_against_truth(d, w, device=DEVICE, with_fla_naive=False)


@pytest.mark.gpu
@covers("prefill_chunk_states", batch=("varlen",), gate=("safe", "unbounded"), state_layout=("vk",))
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_fla_chunk_kda_intermediate_states(d):
    """fla's chunk_kda(return_intermediate_states=True) through the runner's fla adapter (bf16 inputs, its
    bf16 chunk states converted to float32) against the reference, judged with the definition's tolerances."""
    from conftest import require_cuda

    from kda_trace.solutions.fla_adapters import FlaSolution

    require_cuda()
    x = inputs_of(d, packed(d, [700, 1, 64, 129, 300]), "cuda")
    to_problem(d, upcast(x))
    ref = run_reference(d, x)
    got = FlaSolution("cuda").build(d, "cuda")(**{k: (v.clone() if torch.is_tensor(v) else v) for k, v in x.items()})
    for name, t in zip(d.outputs, got):
        assert_close(d, name, ref[name].float(), t.float(), "definition", "fla chunk_kda vs reference",
                     x["cu_seqlens"] if name == "o" else None)
