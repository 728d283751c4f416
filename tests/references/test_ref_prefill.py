"""prefill family (packed varlen, in-op gate, beta logits, in-op L2 norm, K-last state): every
definition's reference against ground truth, and the structure of a packed batch."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    DEVICE,
    assert_close,
    check_against_fla,
    check_against_truth,
    custom_workload,
    family_params,
    inputs_of,
    require_cuda,
    run_reference,
    to_problem,
    upcast,
    workload_params,
)
from coverage_cells import covers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FAMILY = "prefill"


def packed(d, seq_lens, absent=()):
    n = len(seq_lens)
    return custom_workload(d, {"total_seq_len": sum(seq_lens), "num_seqs": n, "len_cu_seqlens": n + 1},
                           seq_lens=seq_lens, absent=absent)


@covers("prefill", batch=("varlen",), direction=("forward",), gate=("safe", "unbounded"), beta=("logits",),
        qk_norm=("l2",), initial_state=("given", "absent"), final_state=("returned",), gva=("on", "off"),
        kv_dims=("equal", "differ"), state_layout=("kv", "vk"))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="cells"))
def test_matches_ground_truth(d):
    """Three sequences (one of a single token) from given initial states, then one from zeros (few
    tokens: the heads are the definition's). The chunked truth uses 2-token chunks so that the state
    passes between chunks; fla's naive recurrence is compared on the first case."""
    check_against_truth(d, packed(d, [2, 1, 3]), chunk=2)
    check_against_truth(d, packed(d, [3], absent=("initial_state",)), chunk=2, with_fla_naive=False)


def _split(x, seq_lens, name):
    return list(torch.split(x[name], seq_lens))


def _repack(x, seq_lens, order):
    """The inputs of a packed batch with its sequences in a new order."""
    y = dict(x)
    for name in ("q", "k", "v", "g_raw", "b"):
        y[name] = torch.cat([_split(x, seq_lens, name)[i] for i in order])
    if x["initial_state"] is not None:
        y["initial_state"] = x["initial_state"][list(order)]
    lens = [seq_lens[i] for i in order]
    y["cu_seqlens"] = torch.tensor([0] + lens, dtype=x["cu_seqlens"].dtype).cumsum(0)
    return y


@covers("prefill", batch=("varlen",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_sequences_are_independent(d):
    """Permuting the sequences of a packed batch permutes the outputs and final states; changing one
    sequence's tokens changes no other sequence's results."""
    seq_lens = [3, 1, 5]
    x = upcast(inputs_of(d, packed(d, seq_lens)))
    to_problem(d, x)  # records the cells this test exercises
    ref = run_reference(d, x)
    order = [2, 0, 1]
    got = run_reference(d, _repack(x, seq_lens, order))
    o_parts = torch.split(ref["o"], seq_lens)
    want_o = torch.cat([o_parts[i] for i in order])
    cu = torch.tensor([0] + [seq_lens[i] for i in order]).cumsum(0)
    assert_close(d, "o", want_o, got["o"], "fp32", "permuted sequences vs the original run", cu)
    assert_close(d, "final_state", ref["final_state"][order], got["final_state"], "fp32", "permuted sequences")

    y = dict(x)
    y["v"] = x["v"].clone()
    y["v"][:seq_lens[0]] = torch.randn_like(y["v"][:seq_lens[0]])  # new values for sequence 0 only
    changed = run_reference(d, y)
    assert not torch.equal(changed["o"][:seq_lens[0]], ref["o"][:seq_lens[0]]), "sequence 0 must change"
    rest = slice(seq_lens[0], None)
    torch.testing.assert_close(changed["o"][rest], ref["o"][rest], rtol=0, atol=0)
    torch.testing.assert_close(changed["final_state"][1:], ref["final_state"][1:], rtol=0, atol=0)


@covers("prefill", batch=("varlen",), initial_state=("given",), final_state=("returned",))
@pytest.mark.parametrize("d", family_params(FAMILY, fast="one"))
def test_prefix_and_continuation(d):
    """A prefix of every sequence gives the prefix of the outputs; continuing from the prefix's final
    states with the remaining tokens gives the rest of the outputs and the same final states."""
    seq_lens, cut = [5, 3, 6], [2, 1, 4]
    heads, tails = [(0, c) for c in cut], [(c, n) for c, n in zip(cut, seq_lens)]
    x = upcast(inputs_of(d, packed(d, seq_lens)))
    to_problem(d, x)
    full = run_reference(d, x)

    def select(t, spans):
        """Rows [a, b) of every sequence of a packed tensor."""
        return torch.cat([p[a:b] for p, (a, b) in zip(torch.split(t, seq_lens), spans)])

    def part(spans, h0):
        y = dict(x)
        for name in ("q", "k", "v", "g_raw", "b"):
            y[name] = select(x[name], spans)
        y["initial_state"] = h0
        y["cu_seqlens"] = torch.tensor([0] + [b - a for a, b in spans]).cumsum(0)
        return y

    head_x = part(heads, x["initial_state"])
    head = run_reference(d, head_x)
    assert_close(d, "o", select(full["o"], heads), head["o"], "fp32", "prefix vs full run", head_x["cu_seqlens"])
    tail_x = part(tails, head["final_state"])
    tail = run_reference(d, tail_x)
    assert_close(d, "o", select(full["o"], tails), tail["o"], "fp32",
                 "continuation from the prefix's final states vs full run", tail_x["cu_seqlens"])
    assert_close(d, "final_state", full["final_state"], tail["final_state"], "fp32", "continuation vs full run")


@covers("prefill", batch=("varlen",), gate=("safe", "unbounded"))
@pytest.mark.parametrize("d,w", workload_params(FAMILY))
def test_dataset_workloads(d, w):
    """Every (non-stress) dataset workload, large packed traces included, against the chunked truth."""
    check_against_truth(d, w, device=DEVICE, with_fla_naive=False)


@pytest.mark.gpu
@covers("prefill", batch=("varlen",), gate=("safe", "unbounded"), beta=("logits",), qk_norm=("l2",),
        state_layout=("vk",), initial_state=("given",))
@pytest.mark.parametrize("kernel", ["chunk", "recurrent"])
@pytest.mark.parametrize("d", family_params(FAMILY))
def test_fla_triton(d, kernel):
    """fla's Triton kernels, with the gate, beta sigmoid, L2 norm and V-first state done inside them,
    against the reference, both on bf16 inputs on the GPU."""
    require_cuda()
    check_against_fla(d, packed(d, [300, 1, 700, 23]), kernel, "cuda")


@pytest.mark.slow
@covers("prefill", batch=("varlen",))
@pytest.mark.parametrize("d", family_params(FAMILY))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq_lens=st.lists(st.integers(1, 40), min_size=1, max_size=6), with_state=st.booleans())
def test_random_packings(d, seq_lens, with_state):
    """Hypothesis: random packings (lengths 1..40, 1..6 sequences), with or without initial states."""
    w = packed(d, seq_lens, absent=() if with_state else ("initial_state",))
    check_against_truth(d, w, device=DEVICE, with_fla_naive=False)
