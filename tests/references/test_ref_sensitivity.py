"""The checks can fail: small, plausible bugs planted in a copy of a reference are caught, each by the
check meant for it (a test that cannot fail proves nothing)."""

from __future__ import annotations

import pytest
from conftest import check_against_truth, custom_workload, definitions

MUTANTS = {
    # the state rounded to bf16 after every chunk: o moves by ~1e-3 relative, within a bf16 bound,
    # so only the float32 run judged at RMS-relative 1e-5 catches it
    "bf16 state": ("prefill", "        S = decay_last[a:b, :, :, None] * S + k_exp[a:b].transpose(-1, -2) @ X",
                   "        S = (decay_last[a:b, :, :, None] * S + k_exp[a:b].transpose(-1, -2) @ X)"
                   ".to(torch.bfloat16).double()",
                   "float32 reference vs"),
    # a wrong decay (half the log decay of the chunk's last token)
    "half decay": ("prefill", "k * later.exp(), G[..., -1, :].exp()", "k * later.exp(), (0.5 * G[..., -1, :]).exp()",
                   "float32 reference vs"),
    # a sequence's padding positions (past its end, up to the chunk's) keep writing its state: its final state
    # drifts
    "ended sequences keep writing": ("prefill",
                                     "return torch.where(valid.view(valid.shape + (1,) * (x.dim() - 2)), x, 0)"
                                     ".transpose(1, 2)",
                                     "return x.transpose(1, 2)", "float32 reference vs"),
    # every pool slot rescaled by one float32 ulp: invisible to any tolerance, caught by the bit check
    "untouched slots change": ("decode", "new_state_pool = state_pool.clone()",
                               "new_state_pool = state_pool.clone() * (1 + 2 ** -23)", "untouched pool slots"),
}


def mutant(family: str, old: str, new: str):
    d = min(definitions(family), key=lambda d: d.const_axes["num_v_heads"])
    assert d.reference.count(old) == 1, f"{d.name}: the text to mutate is no longer in the reference: {old!r}"
    return d.model_copy(update={"reference": d.reference.replace(old, new)})


def small_workload(d):
    if "cu_seqlens" in d.inputs:
        return custom_workload(d, {"total_seq_len": 6, "num_seqs": 3, "len_cu_seqlens": 4}, seq_lens=[2, 1, 3])
    return custom_workload(d, {"batch_size": 2, "pool_size": 5})


@pytest.mark.parametrize("bug", list(MUTANTS))
def test_planted_bug_is_caught(bug):
    family, old, new, caught_by = MUTANTS[bug]
    d = mutant(family, old, new)
    with pytest.raises(pytest.fail.Exception) as failure:
        check_against_truth(d, small_workload(d), chunk=2, with_fla_naive=False)
    message = str(failure.value)
    intended = caught_by if isinstance(caught_by, tuple) else (caught_by,)
    assert any(c in message for c in intended), f"{bug}: caught, but not by the intended check:\n{message}"
    if "float32 reference vs" in message:  # the metrics report is printed in full
        for word in ("RMS-relative", "cosine", "MSE", "max abs", "mean rel", "worst elements"):
            assert word in message, f"{bug}: report lacks {word!r}:\n{message}"
        # the worst elements are located: a token of o, or a sequence of the final state
        assert "token" in message or "sequence" in message, f"{bug}: report does not locate the error:\n{message}"
